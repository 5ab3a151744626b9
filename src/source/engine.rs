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
//! 5. The subscriber replenishes by returning **batch credit** from
//!    `on_next_batch` (see [`Subscriber::on_next_batch`]). The pass adds it to its
//!    local demand with plain arithmetic: a synchronous pipeline that requests in
//!    batches of 64 makes no call back into the engine and touches no atomic to
//!    replenish. A `request` from inside `on_next` (the per-item path) takes the
//!    shared path of step 3 and is just as correct.
//!
//! State (the source and the subscriber) lives in a `Mutex` that only the `Wip` owner
//! locks, so it is never contended; it exists to make the hand-over between owners on
//! different threads safe without `unsafe`. A panic from the subscriber is caught
//! while the lock is held, so the lock is never poisoned: the subscriber broke rule
//! 2.13 and the engine treats the subscription as cancelled. Panics in the source's
//! own user code (an iterator, a generator closure) are caught by the source and
//! reported as `on_error`.

use std::sync::{Arc, Mutex};

use crate::demand::{self, AtomicDemand, UNBOUNDED};
use crate::drain::Wip;
use crate::guard::catch;
use crate::loom::{AtomicU8, Ordering};
use crate::{Error, RawSubscription, Subscriber, Subscription};

/// Largest batch handed to the subscriber in one `emit` call; cancellation is
/// observed between batches.
pub(crate) const CHUNK: u64 = 1024;

/// Flag: the subscriber cancelled.
const CANCELLED: u8 = 1;
/// Flag: the subscriber called `request(0)` (rule 3.9).
const BAD_REQUEST: u8 = 2;

/// What one `emit` call did.
pub(crate) struct Emitted {
    /// Items delivered (never more than the budget).
    pub(crate) count: u64,
    /// Batch credit the subscriber returned: demand added at the end of the batch.
    pub(crate) credit: u64,
    /// `Some` when the source has ended: `Ok` to complete, `Err` to fail.
    pub(crate) end: Option<Result<(), Error>>,
}

impl Emitted {
    pub(crate) fn more(count: u64) -> Self {
        Emitted {
            count,
            credit: 0,
            end: None,
        }
    }
    pub(crate) fn complete(count: u64) -> Self {
        Emitted {
            count,
            credit: 0,
            end: Some(Ok(())),
        }
    }
    pub(crate) fn fail(count: u64, error: Error) -> Self {
        Emitted {
            count,
            credit: 0,
            end: Some(Err(error)),
        }
    }
    /// Record the batch credit the subscriber returned.
    pub(crate) fn with_credit(mut self, credit: u64) -> Self {
        self.credit = credit;
        self
    }
}

/// How a pass ended.
enum Pass {
    /// Out of demand or items for now; the source and subscriber stay.
    Idle,
    /// Terminated or cancelled: drop the source and the subscriber.
    Over,
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
        flags: AtomicU8::new(0),
        state: Mutex::new(None),
    });
    let entered = engine.wip.enter();
    debug_assert!(entered, "a new engine has no other owner");
    {
        let mut state = engine.lock();
        let mut subscriber = subscriber;
        let subscription = Subscription::new(engine.clone());
        if crate::guard::on_subscribe(&mut subscriber, subscription) {
            *state = Some((source, subscriber));
        } else {
            engine.flags.fetch_or(CANCELLED, Ordering::Relaxed);
        }
    }
    engine.wip.run(|| engine.pass());
}

struct Engine<E, S> {
    /// Demand requested from other threads, or from outside a pass.
    demand: AtomicDemand,
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
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// One drain pass; runs only on the `Wip` owner.
    fn pass(&self) {
        let mut state = self.lock();
        let Some((source, subscriber)) = state.as_mut() else {
            return;
        };
        // One panic guard around the whole emission loop (not one per batch), so the
        // loop's state stays in registers.
        match catch(|| self.emit_loop(source, subscriber)) {
            Ok(Pass::Idle) => {}
            Ok(Pass::Over) => *state = None,
            Err(_) => {
                tracing::error!("subscriber panicked (rule 2.13); treated as cancelled");
                *state = None;
            }
        }
    }

    /// Emit batches while there is demand; see the module docs.
    #[inline]
    fn emit_loop(&self, source: &mut E, subscriber: &mut S) -> Pass {
        // Demand taken from `self.demand` and from batch credit, not yet used.
        let mut local = 0u64;
        loop {
            // Relaxed: the flags were set before the setter's `Wip::enter` (Release),
            // which this owner Acquired in `leave`/`enter` before the pass; within a
            // pass a flag set re-entrantly is our own write.
            let flags = self.flags.load(Ordering::Relaxed);
            if flags & CANCELLED != 0 {
                return Pass::Over;
            }
            if flags & BAD_REQUEST != 0 {
                subscriber.on_error(demand::validate(0).unwrap_err());
                return Pass::Over;
            }
            if local != UNBOUNDED {
                local = local.saturating_add(self.demand.take());
            }
            let budget = local.min(CHUNK);
            let emitted = source.emit(subscriber, budget);
            debug_assert!(emitted.count <= budget, "source emitted beyond its budget");
            if local != UNBOUNDED {
                local = (local - emitted.count).saturating_add(emitted.credit);
            }
            if let Some(end) = emitted.end {
                match end {
                    Ok(()) => subscriber.on_complete(),
                    Err(error) => subscriber.on_error(error),
                }
                return Pass::Over;
            }
            if emitted.count < budget || budget == 0 {
                // The source has nothing now: hand unused demand back for the next pass.
                if local > 0 {
                    self.demand.add(local);
                }
                return Pass::Idle;
            }
            if local == 0 && self.demand.get() == 0 {
                return Pass::Idle;
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
