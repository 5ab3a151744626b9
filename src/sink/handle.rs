//! `SinkHandle`: how the caller of a sink cancels it and learns how it ended.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::drain::SubscriptionSlot;
use crate::Error;

/// State shared by a sink subscriber and its handle.
pub(crate) struct SinkState<R> {
    /// The upstream subscription, for `cancel` from the handle.
    pub(crate) slot: SubscriptionSlot,
    /// The terminal result, once there is one.
    result: Mutex<Completion<R>>,
    /// Signalled when `result` is set.
    ready: Condvar,
}

enum Completion<R> {
    Running,
    Ended(Result<R, Error>),
    Taken,
}

impl<R> SinkState<R> {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(SinkState {
            slot: SubscriptionSlot::new(),
            result: Mutex::new(Completion::Running),
            ready: Condvar::new(),
        })
    }

    /// Record the terminal result; the first one wins. Returns false if one was set.
    pub(crate) fn finish(&self, result: Result<R, Error>) -> bool {
        let mut slot = self.result.lock().unwrap_or_else(|p| p.into_inner());
        if !matches!(*slot, Completion::Running) {
            return false;
        }
        *slot = Completion::Ended(result);
        drop(slot);
        self.ready.notify_all();
        true
    }
}

/// The caller's side of a sink: cancel it, or wait for its terminal result.
///
/// The sink has already subscribed when you get the handle; for a synchronous source
/// the stream may already be over.
#[must_use = "the handle reports errors; dropping it ignores them (the sink keeps running)"]
pub struct SinkHandle<R> {
    shared: Arc<SinkState<R>>,
}

impl<R> std::fmt::Debug for SinkHandle<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SinkHandle")
            .field("terminated", &self.is_terminated())
            .finish()
    }
}

impl<R> SinkHandle<R> {
    pub(crate) fn new(shared: Arc<SinkState<R>>) -> Self {
        SinkHandle { shared }
    }

    /// Cancel the subscription. If the stream had not terminated yet, the result
    /// becomes an error of kind [`Cancelled`](crate::ErrorKind::Cancelled).
    /// Idempotent.
    pub fn cancel(&self) {
        self.shared.slot.cancel();
        self.shared.finish(Err(Error::cancelled()));
    }

    /// True once the stream completed, failed or was cancelled.
    pub fn is_terminated(&self) -> bool {
        !matches!(
            *self.shared.result.lock().unwrap_or_else(|p| p.into_inner()),
            Completion::Running
        )
    }

    /// Block until the stream terminates and return its result.
    ///
    /// # Panics
    ///
    /// If the result was already taken by [`wait_timeout`](Self::wait_timeout).
    pub fn wait(self) -> Result<R, Error> {
        self.wait_until(None)
            .expect("waiting without a deadline ends with a result")
    }

    /// Wait at most `timeout`; `None` if the stream is still running. A returned
    /// result is taken: a second call panics. A timeout that does not fit the clock
    /// (`Duration::MAX`) waits as long as [`wait`](Self::wait).
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<Result<R, Error>> {
        self.wait_until(crate::runtime::deadline(Instant::now(), timeout))
    }

    /// Wait until the stream terminates or `deadline` (`None`: no deadline) passes.
    fn wait_until(&self, deadline: Option<Instant>) -> Option<Result<R, Error>> {
        let mut slot = self.shared.result.lock().unwrap_or_else(|p| p.into_inner());
        while matches!(*slot, Completion::Running) {
            slot = match deadline {
                None => self
                    .shared
                    .ready
                    .wait(slot)
                    .unwrap_or_else(|p| p.into_inner()),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return None;
                    }
                    self.shared
                        .ready
                        .wait_timeout(slot, deadline - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
            };
        }
        Some(take(&mut slot))
    }
}

fn take<R>(slot: &mut Completion<R>) -> Result<R, Error> {
    match std::mem::replace(slot, Completion::Taken) {
        Completion::Ended(result) => result,
        Completion::Taken => panic!("the sink's result was already taken"),
        Completion::Running => unreachable!("take is only called after termination"),
    }
}
