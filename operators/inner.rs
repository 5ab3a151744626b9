//! Shared machinery of the multi-source operators (`merge`, `flat_map`, `concat_map`,
//! `zip`): a bounded per-source queue ([`Lane`]), the subscriber that fills it
//! ([`LaneSubscriber`]), and the coordinator ([`Hub`]) that owns the one drain loop.
//!
//! Not an operator itself (`concat` needs none of it: it holds nothing).
//!
//! * A [`Lane`] is a `Mutex`-guarded `VecDeque` allocated once with capacity
//!   `prefetch` and never grown. Its source is asked for `prefetch` items up front and
//!   then replenished with [`Replenish`] (the 75% rule) as the drain consumes items, so
//!   outstanding demand plus queued items never exceed `prefetch`. A source that
//!   delivers more than that breaks rule 1.1: the lane cancels it and fails with a
//!   spec-violation error instead of growing.
//! * A [`LaneSubscriber`] runs on whatever thread its source emits on. It only pushes
//!   into its lane and calls [`Notify::notify`]; it never signals downstream.
//! * A [`Hub`] is downstream's subscription and the home of the drain state (a
//!   [`Drain`]): every downstream signal is made inside [`Wip::drain`], so signals are
//!   serial (rule 1.3) whichever thread a source or a `request` arrives on, and a
//!   re-entrant `request` returns at once (rule 3.3). The state mutex is only locked by
//!   the `Wip` owner, so it is never contended; no lock is held while calling out of a
//!   lane or the lane set.
//!
//! Orderings: lane contents are published by their `Mutex`; wake-ups go through
//! `Wip` (AcqRel, see [`crate::drain`]). The hub's flags are `Relaxed`: they are set
//! before the setter's `Wip::enter` (Release) and read by the owner after its
//! `enter`/`leave` (Acquire), exactly as in the source engine.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::demand::{self, AtomicDemand, Replenish};
use crate::drain::{SubscriptionSlot, Upstream, Wip};
use crate::guard::catch;
use crate::loom::{AtomicU8, Ordering};
use crate::metrics::DropHook;
use crate::{Error, RawSubscription, Subscriber, Subscription};

/// Largest prefetch (per source) a multi-source operator accepts: its queue is
/// allocated up front.
pub(crate) const MAX_PREFETCH: u64 = 1 << 20;

/// Panic unless `value` is in `1..=MAX_PREFETCH`; `what` names the parameter.
pub(crate) fn validate_prefetch(op: &str, what: &str, value: u64) {
    assert!(
        (1..=MAX_PREFETCH).contains(&value),
        "{op} {what} must be in 1..=2^20 (got {value})"
    );
}

/// Something a lane wakes when it has news (an item, a terminal signal).
pub(crate) trait Notify: Send + Sync + 'static {
    /// Enter (or re-arm) the drain loop.
    fn notify(&self);
}

/// One source's bounded queue, shared by its [`LaneSubscriber`] and the drain.
pub(crate) struct Lane<T> {
    /// Queue, end and credit; never locked while calling out.
    state: Mutex<LaneState<T>>,
    /// The source's subscription: replenished and cancelled by the drain.
    subscription: SubscriptionSlot,
    /// Downstream's drop hook, forwarded to the source.
    hook: Option<DropHook>,
}

struct LaneState<T> {
    /// Queued items; capacity `prefetch`, allocated once.
    items: VecDeque<T>,
    /// The 75% rule over this lane's window.
    credit: Replenish,
    /// The source's terminal signal, once it arrived.
    end: Option<Result<(), Error>>,
}

/// What the drain sees when it looks at a lane.
pub(crate) enum LaneStatus {
    /// Items are queued (the source may or may not have completed).
    Items,
    /// Nothing queued, the source still running.
    Empty,
    /// Completed and drained: the lane can be retired.
    Finished,
    /// The source failed (queued items are discarded).
    Failed(Error),
}

impl<T> Lane<T> {
    /// A lane with a window of `prefetch` items (validated by the operator).
    pub(crate) fn new(prefetch: u64, hook: Option<DropHook>) -> Arc<Self> {
        let capacity = usize::try_from(prefetch).expect("prefetch is validated to 2^20");
        Arc::new(Lane {
            state: Mutex::new(LaneState {
                items: VecDeque::with_capacity(capacity),
                credit: Replenish::new(prefetch),
                end: None,
            }),
            subscription: SubscriptionSlot::new(),
            hook,
        })
    }

    fn lock(&self) -> MutexGuard<'_, LaneState<T>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queue `item`; gives it back when the window is full (the source broke 1.1).
    fn push(&self, item: T) -> Result<(), T> {
        let mut state = self.lock();
        if state.items.len() == state.items.capacity() {
            return Err(item);
        }
        state.items.push_back(item);
        Ok(())
    }

    /// Record the source's terminal signal (the first one wins).
    fn end(&self, end: Result<(), Error>) {
        let mut state = self.lock();
        if state.end.is_none() {
            state.end = Some(end);
        }
    }

    /// Move up to `max` of the oldest queued items to `out`, under one lock (drain
    /// owner only); returns how many moved.
    pub(crate) fn pop_into(&self, out: &mut VecDeque<T>, max: usize) -> usize {
        let mut state = self.lock();
        let n = max.min(state.items.len());
        out.extend(state.items.drain(..n));
        n
    }

    /// Queue a whole batch under one lock; on overflow gives back the item that did
    /// not fit (the rest of the batch is dropped with the failing lane).
    fn push_all<I: Iterator<Item = T>>(&self, items: I) -> Result<(), T> {
        let mut state = self.lock();
        for item in items {
            if state.items.len() == state.items.capacity() {
                return Err(item);
            }
            state.items.push_back(item);
        }
        Ok(())
    }

    /// How many items are queued.
    pub(crate) fn len(&self) -> usize {
        self.lock().items.len()
    }

    /// Where this lane stands. An error wins over queued items.
    pub(crate) fn status(&self) -> LaneStatus {
        let state = self.lock();
        match (&state.end, state.items.is_empty()) {
            (Some(Err(e)), _) => LaneStatus::Failed(e.clone()),
            (_, false) => LaneStatus::Items,
            (Some(Ok(())), true) => LaneStatus::Finished,
            (None, true) => LaneStatus::Empty,
        }
    }

    /// The drain consumed `n` items: replenish the source by the 75% rule.
    pub(crate) fn consumed(&self, n: u64) {
        let more = {
            let mut state = self.lock();
            if state.end.is_some() {
                None
            } else {
                state.credit.on_consumed(n)
            }
        };
        if let Some(more) = more {
            self.subscription.request(more);
        }
    }

    /// Cancel the source and release what is queued.
    pub(crate) fn cancel(&self) {
        self.subscription.cancel();
        let released = std::mem::take(&mut self.lock().items);
        drop(released);
    }
}

/// The subscriber a lane's source delivers to. It runs on the source's thread.
pub(crate) struct LaneSubscriber<T, N> {
    /// Where items go.
    lane: Arc<Lane<T>>,
    /// Woken after every delivery.
    hub: Arc<N>,
    /// Life cycle (rules 2.5, 1.7).
    upstream: Upstream,
}

impl<T, N: Notify> LaneSubscriber<T, N> {
    /// Deliver the source's signals into `lane`, waking `hub`.
    pub(crate) fn new(lane: Arc<Lane<T>>, hub: Arc<N>) -> Self {
        LaneSubscriber {
            lane,
            hub,
            upstream: Upstream::Idle,
        }
    }

    /// Queue one item; on overflow cancel the source and fail the lane.
    fn accept(&mut self, item: T) {
        if self.upstream.is_active() && self.lane.push(item).is_err() {
            self.overflowed();
        }
    }

    /// The source delivered beyond its window (rule 1.1): cancel it, fail the lane.
    fn overflowed(&mut self) {
        // Through the lane's slot, so the drain's own cancel is not a second call.
        self.upstream.finish();
        self.lane.subscription.cancel();
        self.lane.end(Err(Error::spec_violation(
            "1.1",
            "an inner source delivered more items than requested (rule 1.1)",
        )));
    }
}

impl<T, N: Notify> Subscriber<T> for LaneSubscriber<T, N> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        if self.upstream.accept(&subscription) && self.lane.subscription.set(subscription.clone()) {
            let window = self.lane.lock().credit.initial();
            subscription.request(window);
        }
    }

    fn on_next(&mut self, item: T) {
        self.accept(item);
        self.hub.notify();
    }

    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        if self.upstream.is_active() && self.lane.push_all(items).is_err() {
            self.overflowed();
        }
        self.hub.notify();
        // Credit is returned by the drain, as it consumes (Replenish).
        0
    }

    fn on_error(&mut self, error: Error) {
        if self.upstream.finish() {
            self.lane.end(Err(error));
            self.hub.notify();
        }
    }

    fn on_complete(&mut self) {
        if self.upstream.finish() {
            self.lane.end(Ok(()));
            self.hub.notify();
        }
    }

    fn drop_hook(&self) -> Option<DropHook> {
        self.lane.hook.clone()
    }
}

/// How a drain pass ended.
pub(crate) enum Progress {
    /// Waiting for demand or items; the state stays.
    Idle,
    /// A terminal signal went downstream: drop the state.
    Over,
}

/// What the hub gives a pass: downstream's demand and whether to stop.
pub(crate) struct Ctx<'a> {
    /// Downstream's outstanding demand.
    pub(crate) demand: &'a AtomicDemand,
    flags: &'a AtomicU8,
}

impl Ctx<'_> {
    /// True once downstream cancelled or sent `request(0)`: end the pass at once.
    pub(crate) fn stopped(&self) -> bool {
        // Relaxed: see the module docs (published through `Wip`).
        self.flags.load(Ordering::Relaxed) != 0
    }
}

/// The state a [`Hub`] drains: downstream plus the operator's lanes.
pub(crate) trait Drain: Send + 'static {
    /// Hand downstream its subscription (the first signal, rule 1.9).
    fn on_subscribe(&mut self, subscription: Subscription);
    /// Emit what demand and the lanes allow; complete or fail when due.
    fn pass(&mut self, ctx: &Ctx<'_>) -> Progress;
    /// Cancel every source and release what is queued; then, if `error` is `Some`,
    /// signal it downstream.
    fn terminate(&mut self, error: Option<Error>);
}

/// Flag: downstream cancelled.
const CANCELLED: u8 = 1;
/// Flag: downstream called `request(0)` (rule 3.9).
const BAD_REQUEST: u8 = 2;

/// Downstream's subscription and the owner of the one drain loop.
pub(crate) struct Hub<D> {
    /// Downstream's outstanding demand.
    demand: AtomicDemand,
    /// The drain loop's work-in-progress counter.
    wip: Wip,
    /// `CANCELLED | BAD_REQUEST`.
    flags: AtomicU8,
    /// The drain state; `None` once terminated. Locked only by the `Wip` owner.
    state: Mutex<Option<D>>,
}

impl<D: Drain> Hub<D> {
    /// Start: call downstream's `on_subscribe`, then `connect` the sources (their
    /// synchronous deliveries only queue, as this call owns the loop), then drain.
    pub(crate) fn start(drain: D, connect: impl FnOnce(&Arc<Self>)) {
        let hub = Arc::new(Hub {
            demand: AtomicDemand::new(),
            wip: Wip::new(),
            flags: AtomicU8::new(0),
            state: Mutex::new(Some(drain)),
        });
        let entered = hub.wip.enter();
        debug_assert!(entered, "a new hub has no other owner");
        {
            let mut state = hub.lock();
            let subscription = Subscription::new(hub.clone());
            let drain = state.as_mut().expect("set above");
            if catch(|| drain.on_subscribe(subscription)).is_err() {
                tracing::error!("subscriber panicked in on_subscribe (rule 2.13)");
                hub.flags.fetch_or(CANCELLED, Ordering::Relaxed);
            }
        }
        connect(&hub);
        hub.wip.run(|| hub.pass());
    }

    fn lock(&self) -> MutexGuard<'_, Option<D>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One pass; runs only on the `Wip` owner.
    fn pass(&self) {
        let mut state = self.lock();
        let Some(drain) = state.as_mut() else {
            return;
        };
        // Relaxed: see the module docs.
        let flags = self.flags.load(Ordering::Relaxed);
        let over = if flags & CANCELLED != 0 {
            drain.terminate(None);
            true
        } else if flags & BAD_REQUEST != 0 {
            drain.terminate(demand::validate(0).err());
            true
        } else {
            let ctx = Ctx {
                demand: &self.demand,
                flags: &self.flags,
            };
            match catch(|| drain.pass(&ctx)) {
                Ok(Progress::Idle) => false,
                Ok(Progress::Over) => true,
                Err(_) => {
                    tracing::error!("subscriber panicked (rule 2.13); treated as cancelled");
                    let _ = catch(|| drain.terminate(None));
                    true
                }
            }
        };
        if over {
            *state = None;
        }
    }
}

impl<D: Drain> Notify for Hub<D> {
    fn notify(&self) {
        self.wip.drain(|| self.pass());
    }
}

impl<D: Drain> RawSubscription for Hub<D> {
    fn request(&self, n: u64) {
        match demand::validate(n) {
            Ok(n) => {
                self.demand.add(n);
            }
            Err(_) => {
                self.flags.fetch_or(BAD_REQUEST, Ordering::Relaxed);
            }
        }
        self.notify();
    }

    fn cancel(&self) {
        self.flags.fetch_or(CANCELLED, Ordering::Relaxed);
        self.notify();
    }
}
