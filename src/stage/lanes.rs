//! Lanes: the building block of every stage that drains several sources (`merge`,
//! `zip`, `flat_map`, `concat_map`), and of the credit multiplexer to come.
//!
//! * A [`Lane`] is one source's bounded [`Window`] behind a short lock. Its source is
//!   asked for `prefetch` items up front and then replenished with
//!   [`Replenish`] (the 75% rule) as the drain consumes items, so outstanding demand
//!   plus queued items never exceed `prefetch`. A source that delivers more than that
//!   breaks rule 1.1: the lane cancels it and fails with a spec-violation error
//!   instead of growing.
//! * A [`LaneSubscriber`] runs on whatever thread its source emits on. It only pushes
//!   into its lane and asks the stage's core for a pass; it never signals downstream.
//! * A [`LaneSet`] is a fixed number of lane slots (the concurrency), plus the end of
//!   the outer source that adds lanes (`flat_map`) and a closed flag set when the
//!   stage ends, so that a lane added afterwards is refused.
//! * A [`LaneView`] is the drain's own copy of the set: the live lanes (with their
//!   sources' subscriptions, once known) and the outer end, taken under the set's
//!   lock only when the set's version moved. A pass visits lanes through it, so a
//!   visit costs no lock on the set, no reference count and no lock on a
//!   subscription slot; only the lane's own lock.
//! * [`connect`] subscribes a source into a new lane. A source whose `subscribe`
//!   panics fails its lane with a `Panicked` error (the drain then fails the stage)
//!   instead of unwinding into whoever connected it.
//!
//! Every downstream signal comes from the core's pass; no lock here is held while
//! calling out of a lane or the lane set. Lane contents are published by the lane's
//! mutex; wake-ups go through the core's `Wip`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::core::CoreHandle;
use super::window::{gather, over_delivered, Window};
use crate::demand::Replenish;
use crate::drain::{SubscriptionSlot, Upstream};
use crate::guard::{catch, catch_in, subscribe_guarded};
use crate::metrics::DropHook;
use crate::{Error, Publisher, Subscriber, Subscription};

fn lock<X>(mutex: &Mutex<X>) -> MutexGuard<'_, X> {
    // No user code runs under these locks; recover from poisoning anyway.
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// One source's bounded queue, shared by its [`LaneSubscriber`] and the drain.
pub(crate) struct Lane<T> {
    /// Queue, credit and end; never locked while calling out.
    state: Mutex<LaneState<T>>,
    /// The source's subscription: replenished and cancelled by the drain.
    subscription: SubscriptionSlot,
    /// Downstream's drop hook, forwarded to the source.
    hook: Option<DropHook>,
    /// The stage's name, for the rule 1.1 error.
    stage: &'static str,
    /// Set by [`cancel`](Self::cancel): a hint for the subscriber, which then drops a
    /// batch unread (the state's own flag, under the lock, decides).
    cancelled: AtomicBool,
}

struct LaneState<T> {
    /// Queued items: at most `prefetch`.
    window: Window<T>,
    /// The 75% rule over this lane's window.
    credit: Replenish,
    /// The source's terminal signal, once it arrived.
    end: Option<Result<(), Error>>,
    /// Set by [`Lane::cancel`]: items that still arrive (the source read its demand
    /// before the cancel, rule 2.8) are released at once instead of queued where no
    /// drain will take them.
    cancelled: bool,
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

/// What [`Lane::take`] did.
pub(crate) struct Taken {
    /// Items moved out.
    pub(crate) count: usize,
    /// What to request from the source once they are delivered (the 75% rule).
    pub(crate) refill: Option<u64>,
    /// Where the lane stands after the take.
    pub(crate) status: LaneStatus,
}

impl<T> LaneState<T> {
    /// Where the lane stands. An error wins over queued items.
    fn status(&self) -> LaneStatus {
        match (&self.end, self.window.is_empty()) {
            (Some(Err(e)), _) => LaneStatus::Failed(e.clone()),
            (_, false) => LaneStatus::Items,
            (Some(Ok(())), true) => LaneStatus::Finished,
            (None, true) => LaneStatus::Empty,
        }
    }
}

impl<T> Lane<T> {
    /// A lane with a window of `prefetch` items (validated by the stage).
    pub(crate) fn new(stage: &'static str, prefetch: usize, hook: Option<DropHook>) -> Arc<Self> {
        Arc::new(Lane {
            state: Mutex::new(LaneState {
                window: Window::new(prefetch),
                credit: Replenish::new(prefetch as u64),
                end: None,
                cancelled: false,
            }),
            subscription: SubscriptionSlot::new(),
            hook,
            stage,
            cancelled: AtomicBool::new(false),
        })
    }

    /// Queue a whole batch, [`gather`]ed before (see there: no user code runs under
    /// the lane's lock), under one lock. `Err` when the window overflows (the source
    /// broke rule 1.1). A batch that arrives after [`cancel`](Self::cancel) is no
    /// overflow. Whatever is not queued is dropped after the lock is released.
    fn push_all(&self, batch: &mut VecDeque<T>) -> Result<(), ()> {
        let result = {
            let mut state = lock(&self.state);
            if state.cancelled {
                Ok(0)
            } else {
                state.window.push_gathered(batch)
            }
        };
        batch.clear();
        result.map(drop)
    }

    /// A buffer to [`gather`] this lane's deliveries into, and the most one delivery
    /// may hold (one more than the window: enough to see an overflow).
    fn spare(&self) -> (VecDeque<T>, usize) {
        let state = lock(&self.state);
        (state.window.spare(), state.window.size().saturating_add(1))
    }

    /// Record the source's terminal signal (the first one wins).
    fn end(&self, end: Result<(), Error>) {
        lock(&self.state).end.get_or_insert(end);
    }

    /// Under one lock (drain owner only): move up to `max` of the oldest queued items
    /// to the empty `out` (see [`Window::pop_into`]: `out` has room for a whole
    /// window, so taking everything trades buffers instead of copying), count what
    /// the 75% rule requests for them, and say where the lane stands afterwards. A
    /// failed lane gives nothing. Hand `refill` to [`replenish`](Self::replenish)
    /// once the items are delivered.
    pub(crate) fn take(&self, out: &mut Vec<T>, max: usize) -> Taken {
        let mut state = lock(&self.state);
        if let Some(Err(e)) = &state.end {
            return Taken {
                count: 0,
                refill: None,
                status: LaneStatus::Failed(e.clone()),
            };
        }
        let count = state.window.pop_into(out, max);
        let refill = match state.end {
            Some(_) => None,
            None if count > 0 => state.credit.on_consumed(count as u64),
            None => None,
        };
        // Room for exactly what is requested again: items taken but not yet asked
        // for again stay held, so a source that delivers them unasked (rule 1.1)
        // overflows the window instead of filling that room.
        if let Some(more) = refill {
            state.window.release(more as usize);
        }
        Taken {
            count,
            refill,
            status: state.status(),
        }
    }

    /// Request what [`take`](Self::take) said to, if anything. A source whose
    /// `request` panics (rule 3.16 broken) gives the stage's `Panicked` error, for
    /// the drain to fail with (its end cancels the source).
    pub(crate) fn replenish(&self, refill: Option<u64>) -> Result<(), Error> {
        match refill {
            Some(more) => catch_in(self.stage, || self.subscription.request(more)),
            None => Ok(()),
        }
    }

    /// Where this lane stands. An error wins over queued items.
    pub(crate) fn status(&self) -> LaneStatus {
        lock(&self.state).status()
    }

    /// How many items are queued and where the lane stands, under one lock.
    pub(crate) fn peek(&self) -> (usize, LaneStatus) {
        let state = lock(&self.state);
        (state.window.len(), state.status())
    }

    /// Cancel the source and release what is queued, and what arrives from now on.
    pub(crate) fn cancel(&self) {
        // Relaxed: a hint (see the field); the lock orders what matters.
        self.cancelled.store(true, Ordering::Relaxed);
        // A source whose `cancel` panics (rule 3.15 broken) must not keep this lane's
        // items, nor the other lanes' sources the caller cancels next: contained.
        if catch(|| self.subscription.cancel()).is_err() {
            tracing::error!(stage = self.stage, "a source panicked in cancel; contained");
        }
        let released = {
            let mut state = lock(&self.state);
            state.cancelled = true;
            state.window.take_all()
        };
        // An item whose `Drop` panics must not stop the caller from cancelling the
        // other lanes (every item is dropped all the same).
        if crate::guard::drop_each(released) > 0 {
            tracing::error!(
                stage = self.stage,
                "a queued item panicked in Drop; contained"
            );
        }
    }
}

/// The subscriber a lane's source delivers to. It runs on the source's thread.
pub(crate) struct LaneSubscriber<T, N: CoreHandle + ?Sized> {
    /// Where items go.
    lane: Arc<Lane<T>>,
    /// Asked for a pass after every delivery.
    core: Arc<N>,
    /// Life cycle (rules 2.5, 1.7).
    upstream: Upstream,
    /// Where a delivery is gathered before it is queued, and the most one may hold.
    gathered: VecDeque<T>,
    bound: usize,
}

impl<T, N: CoreHandle + ?Sized> LaneSubscriber<T, N> {
    /// Deliver the source's signals into `lane`, asking `core` for passes.
    pub(crate) fn new(lane: Arc<Lane<T>>, core: Arc<N>) -> Self {
        let (gathered, bound) = lane.spare();
        LaneSubscriber {
            lane,
            core,
            upstream: Upstream::Idle,
            gathered,
            bound,
        }
    }

    /// The source delivered beyond its window (rule 1.1): cancel it, fail the lane.
    fn overflowed(&mut self) {
        // Through the lane's slot, so the drain's own cancel is not a second call.
        self.upstream.finish();
        self.lane.subscription.cancel();
        self.lane.end(Err(over_delivered(self.lane.stage)));
    }
}

impl<T, N: CoreHandle + ?Sized> Drop for LaneSubscriber<T, N> {
    /// Released by its source without a terminal signal (one that ended without
    /// telling, or whose thread panicked holding it): the lane fails, so the stage
    /// does not wait for it for ever. A no-op after the lane's end, and during a
    /// panic out of [`subscribe_into`]'s guarded `subscribe` (which fails the lane
    /// with the panic).
    fn drop(&mut self) {
        // After the stage's own cancel of this source, it let go as asked.
        if !matches!(self.upstream, crate::drain::Upstream::Done)
            && !self.lane.subscription.is_cancelled()
            && crate::guard::dropped_unterminated()
        {
            self.on_error(crate::guard::abandoned(self.lane.stage));
        }
    }
}

impl<T, N: CoreHandle + ?Sized> Subscriber<T> for LaneSubscriber<T, N> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        if self.upstream.accept(&subscription) && self.lane.subscription.set(subscription.clone()) {
            let window = lock(&self.lane.state).credit.initial();
            subscription.request(window);
        }
    }

    fn on_next(&mut self, item: T) {
        let _credit = self.on_next_batch(std::iter::once(item));
    }

    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        // Once the lane is cancelled a batch is dropped whole, unread.
        // Relaxed: a hint; `push_all` checks under the lane's lock.
        if self.upstream.is_active() && !self.lane.cancelled.load(Ordering::Relaxed) {
            gather(&mut self.gathered, items, self.bound);
            if self.lane.push_all(&mut self.gathered).is_err() {
                self.overflowed();
            }
        }
        self.core.signal();
        // Credit is returned by the drain, as it consumes (Replenish).
        0
    }

    /// It never cancels from inside a batch: it consumes every batch it is handed,
    /// or, once its lane is cancelled, drops it whole without looking at it.
    fn stops_batches_itself(&self) -> bool {
        true
    }

    fn on_error(&mut self, error: Error) {
        if self.upstream.finish() {
            self.lane.end(Err(error));
            self.core.signal();
        }
    }

    fn on_complete(&mut self) {
        if self.upstream.finish() {
            self.lane.end(Ok(()));
            self.core.signal();
        }
    }

    fn drop_hook(&self) -> Option<DropHook> {
        self.lane.hook.clone()
    }
}

/// The lanes of a merge, shared by the drain and (for `flat_map`) the outer
/// subscriber that adds lanes.
pub(crate) struct LaneSet<T> {
    /// Slots and the outer end; never locked while calling out.
    slots: Mutex<Slots<T>>,
    /// Bumped, under the `slots` lock, by every change of the slots or the outer end:
    /// a [`LaneView`] copies the set again only when it moved.
    version: AtomicU64,
    /// The outer source's subscription (`flat_map`); empty for a plain merge.
    pub(crate) outer: SubscriptionSlot,
    /// Window of every lane.
    prefetch: usize,
    /// Downstream's drop hook, forwarded to every source.
    pub(crate) hook: Option<DropHook>,
    /// The stage's name, for errors.
    stage: &'static str,
}

struct Slots<T> {
    /// Live lanes; fixed length (the concurrency), allocated once.
    lanes: Vec<Option<Arc<Lane<T>>>>,
    /// The outer source's end; `Some(Ok)` from the start for a plain merge.
    outer_end: Option<Result<(), Error>>,
    /// Set when the stage ended: no lane may be added any more.
    closed: bool,
}

impl<T> LaneSet<T> {
    /// The stage's name, for errors.
    pub(crate) fn stage(&self) -> &'static str {
        self.stage
    }

    /// `concurrency` empty slots of `prefetch` each. With `outer`, an outer source
    /// adds lanes and the set is finished only once it has ended too.
    pub(crate) fn new(
        stage: &'static str,
        concurrency: usize,
        prefetch: usize,
        outer: bool,
        hook: Option<DropHook>,
    ) -> Arc<Self> {
        Arc::new(LaneSet {
            slots: Mutex::new(Slots {
                lanes: (0..concurrency).map(|_| None).collect(),
                outer_end: if outer { None } else { Some(Ok(())) },
                closed: false,
            }),
            version: AtomicU64::new(0),
            outer: SubscriptionSlot::new(),
            prefetch,
            hook,
            stage,
        })
    }

    /// Lock the slots to change them; the version moves when the guard is dropped.
    fn change(&self) -> Change<'_, T> {
        Change {
            slots: lock(&self.slots),
            version: &self.version,
        }
    }

    /// A new lane in a free slot; `None` when all slots are live or the stage ended.
    fn add(&self) -> Option<Arc<Lane<T>>> {
        let mut slots = self.change();
        if slots.closed {
            return None;
        }
        let free = slots.lanes.iter_mut().find(|slot| slot.is_none())?;
        let lane = Lane::new(self.stage, self.prefetch, self.hook.clone());
        *free = Some(lane.clone());
        Some(lane)
    }

    /// Record the outer source's end (the first one wins).
    pub(crate) fn end_outer(&self, end: Result<(), Error>) {
        self.change().outer_end.get_or_insert(end);
    }

    /// True once the stage ended.
    pub(crate) fn is_closed(&self) -> bool {
        lock(&self.slots).closed
    }

    /// Bring `view` up to date with the set, if the set changed since it was copied.
    pub(crate) fn refresh(&self, view: &mut LaneView<T>) {
        // Acquire pairs with the Release bump in `Change::drop`: a view that sees the
        // new version copies under the lock anyway; one that sees an older version is
        // behind only changes whose makers signal the core afterwards (a new lane's
        // source delivers or ends, an outer end signals), so a later pass sees them.
        if self.version.load(Ordering::Acquire) == view.version {
            return;
        }
        let slots = lock(&self.slots);
        // Read under the lock: every bump happens under it, so this is the version of
        // exactly what is copied.
        view.version = self.version.load(Ordering::Relaxed);
        view.lanes.resize_with(slots.lanes.len(), || None);
        for (seen, live) in view.lanes.iter_mut().zip(&slots.lanes) {
            let same = match (&*seen, live) {
                (Some(visit), Some(lane)) => Arc::ptr_eq(&visit.lane, lane),
                (None, None) => true,
                _ => false,
            };
            if !same {
                *seen = live.clone().map(|lane| Visit {
                    lane,
                    subscription: None,
                });
            }
        }
        view.outer = match &slots.outer_end {
            None => OuterEnd::Running,
            Some(Ok(())) => OuterEnd::Completed,
            Some(Err(error)) => OuterEnd::Failed(error.clone()),
        };
    }

    /// Free slot `i` of the set and of `view` (its lane finished).
    pub(crate) fn retire(&self, view: &mut LaneView<T>, i: usize) {
        self.change().lanes[i] = None;
        view.lanes[i] = None;
    }

    /// The stage ended: refuse new lanes, cancel the outer source and every lane, and
    /// release what they queue.
    pub(crate) fn close(&self) {
        // Closed first: a lane added after this point is refused, one added before is
        // cancelled below.
        let lanes: Vec<Arc<Lane<T>>> = {
            let mut slots = self.change();
            slots.closed = true;
            slots.lanes.iter_mut().filter_map(Option::take).collect()
        };
        if catch(|| self.outer.cancel()).is_err() {
            tracing::error!("an outer source panicked in cancel; contained");
        }
        for lane in lanes {
            lane.cancel();
        }
    }
}

/// The slots, locked for a change; dropping it moves the set's version.
struct Change<'a, T> {
    slots: MutexGuard<'a, Slots<T>>,
    version: &'a AtomicU64,
}

impl<T> std::ops::Deref for Change<'_, T> {
    type Target = Slots<T>;
    fn deref(&self) -> &Slots<T> {
        &self.slots
    }
}

impl<T> std::ops::DerefMut for Change<'_, T> {
    fn deref_mut(&mut self) -> &mut Slots<T> {
        &mut self.slots
    }
}

impl<T> Drop for Change<'_, T> {
    fn drop(&mut self) {
        // Still under the lock (the guard field drops after this body). Release pairs
        // with the Acquire load in `LaneSet::refresh`.
        self.version.fetch_add(1, Ordering::Release);
    }
}

/// How the outer source stands, as a [`LaneView`] last saw it.
pub(crate) enum OuterEnd {
    /// Still adding lanes (`flat_map`).
    Running,
    /// Completed (from the start for a plain merge).
    Completed,
    /// Failed.
    Failed(Error),
}

/// One live lane as the drain sees it.
pub(crate) struct Visit<T> {
    /// The lane.
    pub(crate) lane: Arc<Lane<T>>,
    /// Its source's subscription, once the source subscribed (kept so a replenish
    /// locks nothing; a request on it after a cancel is a no-op, rule 3.6).
    subscription: Option<Subscription>,
}

impl<T> Visit<T> {
    /// [`Lane::replenish`] through the kept subscription (a `request` that panics:
    /// the same error).
    pub(crate) fn replenish(&mut self, refill: Option<u64>) -> Result<(), Error> {
        let Some(more) = refill else {
            return Ok(());
        };
        if self.subscription.is_none() {
            self.subscription = self.lane.subscription.get();
        }
        match &self.subscription {
            Some(subscription) => catch_in(self.lane.stage, || subscription.request(more)),
            None => Ok(()),
        }
    }
}

/// The drain's copy of a [`LaneSet`] (see the module docs); only the pass owns it.
pub(crate) struct LaneView<T> {
    /// The set's version this copy was taken at (`u64::MAX`: never).
    version: u64,
    /// Slot by slot, the live lanes.
    pub(crate) lanes: Vec<Option<Visit<T>>>,
    /// The outer source's end.
    pub(crate) outer: OuterEnd,
}

impl<T> LaneView<T> {
    /// A view that copies the set on its first refresh.
    pub(crate) fn new() -> Self {
        LaneView {
            version: u64::MAX,
            lanes: Vec::new(),
            outer: OuterEnd::Running,
        }
    }

    /// True when the outer source completed and every lane finished.
    pub(crate) fn is_finished(&self) -> bool {
        matches!(self.outer, OuterEnd::Completed) && self.lanes.iter().all(Option::is_none)
    }

    /// Let go of every lane (the stage ended).
    pub(crate) fn clear(&mut self) {
        self.lanes.clear();
    }
}

/// Subscribe `source` into a new lane of `set`, if a slot is free; returns false
/// when none is (the outer source over-delivered, or the stage ended: then `source`
/// is dropped unsubscribed). A `subscribe` that panics fails the new lane.
pub(crate) fn connect<P, N>(set: &LaneSet<P::Item>, source: P, core: &Arc<N>) -> bool
where
    P: Publisher,
    N: CoreHandle + ?Sized,
{
    let Some(lane) = set.add() else {
        return false;
    };
    subscribe_into(&lane, source, core);
    true
}

/// Subscribe `source` into `lane`. A `subscribe` that panics fails the lane (the drain
/// then fails the stage) instead of unwinding into the caller.
pub(crate) fn subscribe_into<P, N>(lane: &Arc<Lane<P::Item>>, source: P, core: &Arc<N>)
where
    P: Publisher,
    N: CoreHandle + ?Sized,
{
    let subscriber = LaneSubscriber::new(lane.clone(), core.clone());
    if let Err(error) = catch(move || subscribe_guarded(|| source.subscribe(subscriber))) {
        lane.subscription.cancel();
        lane.end(Err(error));
        core.signal();
    }
}
