//! The engine under every synchronous source: demand, cancellation and the drain loop
//! written once.
//!
//! A source implements [`Emit`]: "deliver at most `budget` items to this subscriber".
//! The engine owns the rest:
//!
//! 1. `subscribe` builds one `Engine` (the subscription), enters its [`Wip`], calls
//!    `on_subscribe` (so it is always the first signal, rule 1.9), then runs passes
//!    until no request is left unaccounted for.
//! 2. A pass reads the demand once, asks the source for up to `min(demand, CHUNK)`
//!    items in one `emit` call (a whole batch through `on_next_batch`), and settles
//!    the demand once with `produced`. It repeats while demand is left and the source
//!    had items. The cancelled flag is read between chunks, never per item.
//! 3. `request(n)` adds demand and enters the `Wip`; from inside `on_next` it finds
//!    the loop owned and returns at once (rule 3.3). `request(0)` parks a 3.9 error
//!    that the next pass delivers. `cancel` sets a flag; the next pass drops the
//!    source and the subscriber (rules 3.12, 3.13).
//! 4. A terminal signal drops both too, so nothing follows it (1.7) and the
//!    subscription counts as cancelled (1.6).
//!
//! State (the source and the subscriber) lives in a `Mutex` that only the `Wip` owner
//! locks, so it is never contended; it exists to make the hand-over between owners on
//! different threads safe without `unsafe`. A panic from the subscriber is caught
//! while the lock is held, so the lock is never poisoned: the subscriber broke rule
//! 2.13 and the engine treats the subscription as cancelled. Panics in the source's
//! own user code (an iterator, a generator closure) are caught by the source and
//! reported as `on_error`.

use std::sync::{Arc, Mutex};

use crate::demand::{self, AtomicDemand};
use crate::drain::Wip;
use crate::guard::catch;
use crate::loom::{AtomicBool, Ordering};
use crate::{Error, RawSubscription, Subscriber, Subscription};

/// Largest batch handed to the subscriber in one `emit` call; cancellation is
/// observed between batches.
pub(crate) const CHUNK: u64 = 1024;

/// What one `emit` call did.
pub(crate) struct Emitted {
    /// Items delivered (never more than the budget).
    pub(crate) count: u64,
    /// `Some` when the source has ended: `Ok` to complete, `Err` to fail.
    pub(crate) end: Option<Result<(), Error>>,
}

impl Emitted {
    pub(crate) fn more(count: u64) -> Self {
        Emitted { count, end: None }
    }
    pub(crate) fn complete(count: u64) -> Self {
        Emitted { count, end: Some(Ok(())) }
    }
    pub(crate) fn fail(count: u64, error: Error) -> Self {
        Emitted { count, end: Some(Err(error)) }
    }
}

/// A synchronous source of items, driven by the engine.
pub(crate) trait Emit: Send + 'static {
    type Item: Send + 'static;

    /// Deliver at most `budget` items to `subscriber` (usually one `on_next_batch`).
    /// With `budget == 0`, only report whether the source has already ended.
    /// Return fewer than `budget` items without an end only when the source has
    /// nothing to give now (then the engine waits for the next request).
    fn emit<S: Subscriber<Self::Item>>(&mut self, subscriber: &mut S, budget: u64) -> Emitted;
}

/// Subscribe `subscriber` to the source `source`.
pub(crate) fn subscribe<E, S>(source: E, subscriber: S)
where
    E: Emit,
    S: Subscriber<E::Item> + Send + 'static,
{
    let engine = Arc::new(Engine {
        demand: AtomicDemand::new(),
        wip: Wip::new(),
        cancelled: AtomicBool::new(false),
        bad_request: AtomicBool::new(false),
        state: Mutex::new(None),
    });
    let entered = engine.wip.enter();
    debug_assert!(entered, "a new engine has no other owner");
    {
        let mut state = engine.lock();
        let mut subscriber = subscriber;
        let subscription = Subscription::new(engine.clone());
        if catch(|| subscriber.on_subscribe(subscription)).is_ok() {
            *state = Some((source, subscriber));
        } else {
            tracing::error!("subscriber panicked in on_subscribe (rule 2.13); treated as cancelled");
            engine.cancelled.store(true, Ordering::Relaxed);
        }
    }
    engine.wip.run(|| engine.pass());
}

struct Engine<E, S> {
    demand: AtomicDemand,
    wip: Wip,
    cancelled: AtomicBool,
    bad_request: AtomicBool,
    state: Mutex<Option<(E, S)>>,
}

impl<E, S> Engine<E, S>
where
    E: Emit,
    S: Subscriber<E::Item>,
{
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(E, S)>> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// One drain pass; runs only on the `Wip` owner.
    fn pass(&self) {
        let mut state = self.lock();
        let Some((source, subscriber)) = state.as_mut() else {
            return;
        };
        // Relaxed: the flags were written before the writer's `Wip::enter` (Release),
        // which our `leave`/`enter` Acquired before this pass.
        if self.cancelled.load(Ordering::Relaxed) {
            *state = None;
            return;
        }
        if self.bad_request.load(Ordering::Relaxed) {
            let error = demand::validate(0).unwrap_err();
            let _ = catch(|| subscriber.on_error(error));
            *state = None;
            return;
        }
        loop {
            let budget = self.demand.get().min(CHUNK);
            let emitted = match catch(|| source.emit(subscriber, budget)) {
                Ok(emitted) => emitted,
                Err(_) => {
                    tracing::error!("subscriber panicked in on_next (rule 2.13); treated as cancelled");
                    *state = None;
                    return;
                }
            };
            debug_assert!(emitted.count <= budget, "source emitted beyond its budget");
            let left = self.demand.produced(emitted.count);
            if let Some(end) = emitted.end {
                let _ = catch(|| match end {
                    Ok(()) => subscriber.on_complete(),
                    Err(error) => subscriber.on_error(error),
                });
                *state = None;
                return;
            }
            if self.cancelled.load(Ordering::Relaxed) {
                *state = None;
                return;
            }
            if left == 0 || emitted.count < budget || budget == 0 {
                return;
            }
        }
    }
}

impl<E, S> RawSubscription for Engine<E, S>
where
    E: Emit,
    S: Subscriber<E::Item> + Send,
{
    fn request(&self, n: u64) {
        if self.cancelled.load(Ordering::Relaxed) {
            return;
        }
        match demand::validate(n) {
            Ok(n) => {
                self.demand.add(n);
            }
            Err(_) => self.bad_request.store(true, Ordering::Relaxed),
        }
        self.wip.drain(|| self.pass());
    }

    fn cancel(&self) {
        self.cancelled.store(true, Ordering::Relaxed);
        self.wip.drain(|| self.pass());
    }
}
