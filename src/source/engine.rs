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
//! 5. A `request` made on the thread that is running this engine's pass (the
//!    re-entrant request from inside `on_next`, which is how every batching
//!    subscriber replenishes) takes a fast path: the pass owner is the only writer of
//!    `local`, so it adds there with a plain load and store instead of a
//!    read-modify-write on the shared counter and the `Wip`. A thread-local holds the
//!    address of the engine whose pass is running on this thread. A synchronous
//!    pipeline that requests in batches of 64 therefore touches no contended atomic
//!    at all; requests from other threads take the shared path.
//!
//! State (the source and the subscriber) lives in a `Mutex` that only the `Wip` owner
//! locks, so it is never contended; it exists to make the hand-over between owners on
//! different threads safe without `unsafe`. A panic from the subscriber is caught
//! while the lock is held, so the lock is never poisoned: the subscriber broke rule
//! 2.13 and the engine treats the subscription as cancelled. Panics in the source's
//! own user code (an iterator, a generator closure) are caught by the source and
//! reported as `on_error`.

use std::cell::Cell;
use std::sync::{Arc, Mutex};

use crate::demand::{self, AtomicDemand, UNBOUNDED};
use crate::drain::Wip;
use crate::guard::catch;
use crate::loom::{AtomicU64, AtomicU8, Ordering};
use crate::{Error, RawSubscription, Subscriber, Subscription};

/// Largest batch handed to the subscriber in one `emit` call; cancellation is
/// observed between batches.
pub(crate) const CHUNK: u64 = 1024;

/// Flag: the subscriber cancelled.
const CANCELLED: u8 = 1;
/// Flag: the subscriber called `request(0)` (rule 3.9).
const BAD_REQUEST: u8 = 2;

thread_local! {
    /// Address of the engine whose pass runs on this thread (0: none).
    static DRAINING: Cell<usize> = const { Cell::new(0) };
}

/// Marks this thread as running `engine`'s pass; restores the previous mark on drop,
/// so nested engines (a source subscribed from inside another's `on_next`) stack.
struct DrainMark {
    previous: usize,
}

impl DrainMark {
    fn set(address: usize) -> Self {
        DrainMark { previous: DRAINING.with(|d| d.replace(address)) }
    }
}

impl Drop for DrainMark {
    fn drop(&mut self) {
        DRAINING.with(|d| d.set(self.previous));
    }
}

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
        local: AtomicU64::new(0),
        wip: Wip::new(),
        flags: AtomicU8::new(0),
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
            engine.flags.fetch_or(CANCELLED, Ordering::Relaxed);
        }
    }
    engine.wip.run(|| engine.pass());
}

struct Engine<E, S> {
    /// Demand requested from other threads (or from outside a pass).
    demand: AtomicDemand,
    /// Demand requested re-entrantly from inside a pass; written only by the pass
    /// owner, so plain `Relaxed` loads and stores suffice.
    local: AtomicU64,
    /// The drain loop's work-in-progress counter.
    wip: Wip,
    /// `CANCELLED | BAD_REQUEST`.
    flags: AtomicU8,
    /// The source and the subscriber; `None` once terminated or cancelled.
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

    fn address(&self) -> usize {
        self as *const Self as *const () as usize
    }

    /// One drain pass; runs only on the `Wip` owner.
    fn pass(&self) {
        let mut state = self.lock();
        let Some((source, subscriber)) = state.as_mut() else {
            return;
        };
        let _mark = DrainMark::set(self.address());
        loop {
            // Relaxed: the flags were set before the setter's `Wip::enter` (Release),
            // which this owner Acquired in `leave`/`enter` before the pass; within a
            // pass a flag set re-entrantly is our own write.
            let flags = self.flags.load(Ordering::Relaxed);
            if flags & CANCELLED != 0 {
                *state = None;
                return;
            }
            if flags & BAD_REQUEST != 0 {
                let error = demand::validate(0).unwrap_err();
                let _ = catch(|| subscriber.on_error(error));
                *state = None;
                return;
            }
            let local = self.local.load(Ordering::Relaxed);
            let available = if local == UNBOUNDED { UNBOUNDED } else { local.saturating_add(self.demand.get()) };
            let budget = available.min(CHUNK);
            let emitted = match catch(|| source.emit(subscriber, budget)) {
                Ok(emitted) => emitted,
                Err(_) => {
                    tracing::error!("subscriber panicked in on_next (rule 2.13); treated as cancelled");
                    *state = None;
                    return;
                }
            };
            debug_assert!(emitted.count <= budget, "source emitted beyond its budget");
            let left = self.settle(emitted.count);
            if let Some(end) = emitted.end {
                let _ = catch(|| match end {
                    Ok(()) => subscriber.on_complete(),
                    Err(error) => subscriber.on_error(error),
                });
                *state = None;
                return;
            }
            if left == 0 || emitted.count < budget || budget == 0 {
                return;
            }
        }
    }

    /// Subtract `count` delivered items, from the local demand first; returns what is
    /// left in total.
    #[inline]
    fn settle(&self, count: u64) -> u64 {
        let local = self.local.load(Ordering::Relaxed);
        if local == UNBOUNDED {
            return UNBOUNDED;
        }
        if local >= count {
            self.local.store(local - count, Ordering::Relaxed);
            (local - count).saturating_add(self.demand.get())
        } else {
            self.local.store(0, Ordering::Relaxed);
            self.demand.produced(count - local)
        }
    }
}

impl<E, S> RawSubscription for Engine<E, S>
where
    E: Emit,
    S: Subscriber<E::Item> + Send,
{
    fn request(&self, n: u64) {
        if n != 0 && DRAINING.with(Cell::get) == self.address() {
            // Re-entrant request from inside our own pass on this thread: we are the
            // `Wip` owner and the only writer of `local`, and the pass loop re-reads
            // it after the current batch.
            let local = self.local.load(Ordering::Relaxed);
            self.local.store(local.saturating_add(n), Ordering::Relaxed);
            return;
        }
        if self.flags.load(Ordering::Relaxed) & CANCELLED != 0 {
            return;
        }
        match demand::validate(n) {
            Ok(n) => {
                self.demand.add(n);
            }
            Err(_) => {
                self.flags.fetch_or(BAD_REQUEST, Ordering::Relaxed);
            }
        }
        self.wip.drain(|| self.pass());
    }

    fn cancel(&self) {
        self.flags.fetch_or(CANCELLED, Ordering::Relaxed);
        self.wip.drain(|| self.pass());
    }
}
