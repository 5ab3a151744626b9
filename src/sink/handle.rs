//! `SinkHandle`: how the caller of a sink cancels it and learns how it ended, by
//! blocking ([`SinkHandle::wait`]) or awaiting (`.await`, through [`IntoFuture`]).
//!
//! The result sits behind one mutex with the waker of the future awaiting it, if
//! any: the sink records its result and takes the waker under that lock, and the
//! future checks for a result and leaves its waker under it, so no wake-up is lost.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use smallvec::SmallVec;

use crate::drain::SubscriptionSlot;
use crate::Error;

/// State shared by a sink subscriber and its handle: the upstream subscription and
/// the terminal result (`Result<R, E>`, first one wins, taken once).
pub(crate) struct SinkState<R, E = Error> {
    /// The upstream subscription, for `cancel` from the handle.
    pub(crate) slot: SubscriptionSlot,
    /// The terminal result, once there is one, and the waker of a future awaiting it.
    result: Mutex<Slot<R, E>>,
    /// Signalled when `result` is set.
    ready: Condvar,
}

struct Slot<R, E> {
    completion: Completion<R, E>,
    /// The tasks awaiting the result (one, for a [`SinkFuture`]; a shared state read
    /// by reference may have several).
    wakers: SmallVec<[Waker; 1]>,
}

enum Completion<R, E> {
    Running,
    Ended(Result<R, E>),
    Taken,
}

impl<R, E> SinkState<R, E> {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(SinkState {
            slot: SubscriptionSlot::new(),
            result: Mutex::new(Slot {
                completion: Completion::Running,
                wakers: SmallVec::new(),
            }),
            ready: Condvar::new(),
        })
    }

    /// Record the terminal result; the first one wins. Returns false if one was set.
    pub(crate) fn finish(&self, result: Result<R, E>) -> bool {
        let mut slot = self.lock();
        if !matches!(slot.completion, Completion::Running) {
            return false;
        }
        slot.completion = Completion::Ended(result);
        let wakers = std::mem::take(&mut slot.wakers);
        drop(slot);
        self.ready.notify_all();
        for waker in wakers {
            waker.wake();
        }
        true
    }

    fn lock(&self) -> MutexGuard<'_, Slot<R, E>> {
        // Little user code under this lock: a waker may be cloned under it, and is
        // woken after it.
        self.result.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// True once a result was recorded (taken or not).
    pub(crate) fn is_terminated(&self) -> bool {
        !matches!(self.lock().completion, Completion::Running)
    }

    /// Block until there is a result or `deadline` (`None`: no deadline) passes;
    /// the slot, locked, once it holds the result.
    fn wait_for(&self, deadline: Option<Instant>) -> Option<MutexGuard<'_, Slot<R, E>>> {
        let mut slot = self.lock();
        while matches!(slot.completion, Completion::Running) {
            slot = match deadline {
                None => self.ready.wait(slot).unwrap_or_else(|p| p.into_inner()),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return None;
                    }
                    self.ready
                        .wait_timeout(slot, deadline - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
            };
        }
        Some(slot)
    }

    /// The slot, locked, once it holds the result; otherwise `cx`'s waker is left to
    /// be woken by [`finish`](Self::finish) (checked and left under one lock: no lost
    /// wake-up).
    fn poll_ended(&self, cx: &mut Context<'_>) -> Poll<MutexGuard<'_, Slot<R, E>>> {
        let mut slot = self.lock();
        if matches!(slot.completion, Completion::Running) {
            if !slot.wakers.iter().any(|w| w.will_wake(cx.waker())) {
                slot.wakers.push(cx.waker().clone());
            }
            return Poll::Pending;
        }
        Poll::Ready(slot)
    }

    /// Block until there is a result or `deadline` passes, and take it.
    ///
    /// # Panics
    ///
    /// If the result was already taken.
    pub(crate) fn wait_until(&self, deadline: Option<Instant>) -> Option<Result<R, E>> {
        self.wait_for(deadline)
            .map(|mut slot| take(&mut slot.completion))
    }

    /// Take the result if there is one (else wake `cx` when there is).
    ///
    /// # Panics
    ///
    /// If the result was already taken.
    pub(crate) fn poll_take(&self, cx: &mut Context<'_>) -> Poll<Result<R, E>> {
        self.poll_ended(cx)
            .map(|mut slot| take(&mut slot.completion))
    }
}

// Read by copy only by `nats::SinkDone` so far.
#[cfg(feature = "nats")]
impl<R: Clone, E: Clone> SinkState<R, E> {
    /// Block until there is a result or `deadline` passes; a copy of it (never
    /// taken: any number of readers).
    pub(crate) fn wait_cloned(&self, deadline: Option<Instant>) -> Option<Result<R, E>> {
        self.wait_for(deadline).map(|slot| cloned(&slot.completion))
    }

    /// A copy of the result if there is one (else wake `cx` when there is).
    pub(crate) fn poll_cloned(&self, cx: &mut Context<'_>) -> Poll<Result<R, E>> {
        self.poll_ended(cx).map(|slot| cloned(&slot.completion))
    }
}

/// The caller's side of a sink: cancel it, or wait for its terminal result, blocking
/// ([`wait`](Self::wait)) or in async code (`.await`: the handle is
/// [`IntoFuture`], and the future blocks no thread).
///
/// The sink has already subscribed when you get the handle; for a synchronous source
/// the stream may already be over.
///
/// ```
/// use weir::prelude::*;
///
/// let sum = futures::executor::block_on(async {
///     weir::range(0u64..100).fold(0, |sum, x| sum + x).await
/// });
/// assert_eq!(sum.unwrap(), 4_950);
/// ```
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
    /// A handle whose sink has already ended with `result` (a fused fold).
    pub(crate) fn ended(result: Result<R, Error>) -> Self {
        let shared = SinkState::new();
        shared.finish(result);
        SinkHandle::new(shared)
    }

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
        self.shared.is_terminated()
    }

    /// Block until the stream terminates and return its result. In async code,
    /// `.await` the handle instead: it blocks no thread.
    ///
    /// # Panics
    ///
    /// If the result was already taken by [`wait_timeout`](Self::wait_timeout). With
    /// the `tokio` feature, if it would have to wait on a thread that drives a tokio
    /// runtime's async code (inside `block_on` or a task), as tokio's own `block_on`
    /// does: the message says to `.await` instead. On a current-thread runtime that
    /// wait would hang for good. `spawn_blocking` threads may wait.
    ///
    /// ```should_panic
    /// # #[cfg(not(feature = "tokio"))] panic!("`.await` instead");
    /// # #[cfg(feature = "tokio")] {
    /// use weir::prelude::*;
    ///
    /// let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    /// runtime.block_on(async {
    ///     let (tx, rx) = tokio::sync::mpsc::channel::<u32>(8);
    ///     let all = weir::from_receiver(rx).collect();
    ///     drop(tx);
    ///     // panics: "… `.await` instead …" (the receiver's task cannot run meanwhile)
    ///     let _ = all.wait();
    /// });
    /// # }
    /// ```
    #[track_caller]
    pub fn wait(self) -> Result<R, Error> {
        self.wait_until(None)
            .expect("waiting without a deadline ends with a result")
    }

    /// Wait at most `timeout`; `None` if the stream is still running. A returned
    /// result is taken: a second call panics. A timeout that does not fit the clock
    /// (`Duration::MAX`) waits as long as [`wait`](Self::wait).
    ///
    /// # Panics
    ///
    /// As [`wait`](Self::wait), on a thread that drives a tokio runtime.
    #[track_caller]
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<Result<R, Error>> {
        self.wait_until(crate::runtime::deadline(Instant::now(), timeout))
    }

    /// Wait until the stream terminates or `deadline` (`None`: no deadline) passes.
    #[track_caller]
    fn wait_until(&self, deadline: Option<Instant>) -> Option<Result<R, Error>> {
        if !self.shared.is_terminated() {
            crate::runtime::forbid_blocking_in_async("SinkHandle::wait");
        }
        self.shared.wait_until(deadline)
    }
}

impl<R> IntoFuture for SinkHandle<R> {
    type Output = Result<R, Error>;
    type IntoFuture = SinkFuture<R>;

    /// Await the stream's terminal result without blocking a thread.
    fn into_future(self) -> SinkFuture<R> {
        SinkFuture { handle: Some(self) }
    }
}

/// The future of a [`SinkHandle`] (`handle.await`): resolves to the stream's terminal
/// result. Dropping it before the stream ended cancels the sink (nobody can read its
/// result any more); to let a sink run unobserved, drop the handle instead.
#[must_use = "futures do nothing unless awaited; dropping this one cancels the sink"]
pub struct SinkFuture<R> {
    /// `None` once the result was returned.
    handle: Option<SinkHandle<R>>,
}

impl<R> std::fmt::Debug for SinkFuture<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SinkFuture")
            .field("done", &self.handle.is_none())
            .finish()
    }
}

impl<R> Unpin for SinkFuture<R> {}

impl<R> Future for SinkFuture<R> {
    type Output = Result<R, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let handle = this
            .handle
            .as_ref()
            .expect("SinkFuture polled after it returned its result");
        let result = std::task::ready!(handle.shared.poll_take(cx));
        this.handle = None;
        Poll::Ready(result)
    }
}

impl<R> Drop for SinkFuture<R> {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            if !handle.is_terminated() {
                handle.cancel();
            }
        }
    }
}

#[cfg(feature = "nats")]
fn cloned<R: Clone, E: Clone>(slot: &Completion<R, E>) -> Result<R, E> {
    match slot {
        Completion::Ended(result) => result.clone(),
        Completion::Taken | Completion::Running => {
            unreachable!("a result that is read by copy is never taken")
        }
    }
}

fn take<R, E>(slot: &mut Completion<R, E>) -> Result<R, E> {
    match std::mem::replace(slot, Completion::Taken) {
        Completion::Ended(result) => result,
        Completion::Taken => panic!("the sink's result was already taken"),
        Completion::Running => unreachable!("take is only called after termination"),
    }
}
