//! `merge`: the items of several publishers of one item type, interleaved as they
//! arrive; also the drain that `flat_map` and `concat_map` run on ([`MergeDrain`]).
//!
//! Demand contract: Prefetching, per source. Each source gets a bounded lane of
//! `prefetch` items (see [`super::inner`]): `prefetch` requested up front, replenished
//! by the 75% rule as downstream takes items. Downstream demand is an `AtomicDemand`
//! settled once per batch. In-flight bound: the sources' bounds plus one `prefetch`
//! per source.
//!
//! States: `Hub` holds `Some(MergeDrain)` while running and `None` after the terminal
//! signal. Each lane: `Empty` → `Items` ⇄ `Empty` → `Finished` (retired) or `Failed`
//! (the first failure cancels every other source and is signalled at once).
//!
//! Races: sources deliver on any thread into their own lane and only wake the drain;
//! every downstream signal comes from the `Wip` owner. A downstream `request` or
//! `cancel` from any thread only sets demand or a flag and wakes the drain.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use super::inner::{Ctx, Drain, Hub, Lane, LaneStatus, LaneSubscriber, Notify, Progress};
use crate::drain::SubscriptionSlot;
use crate::metrics::DropHook;
use crate::{Error, Publisher, Subscriber, Subscription};

/// Per-source prefetch of [`merge`](crate::PublisherExt::merge) and [`merge`](crate::merge).
pub const MERGE_PREFETCH: u64 = crate::sink::DEFAULT_PREFETCH;

/// Publisher for the [`merge`](crate::PublisherExt::merge) method.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct Merge<P, Q> {
    first: P,
    second: Q,
}

impl<P, Q> Merge<P, Q> {
    pub(crate) fn new(first: P, second: Q) -> Self {
        Merge { first, second }
    }
}

impl<P, Q> Publisher for Merge<P, Q>
where
    P: Publisher,
    Q: Publisher<Item = P::Item>,
{
    type Item = P::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<P::Item> + Send + 'static,
    {
        let (first, second) = (self.first, self.second);
        let drain = MergeDrain::new(subscriber, 2, MERGE_PREFETCH, false);
        let set = drain.set.clone();
        Hub::start(drain, move |hub| {
            connect(&set, first, hub);
            connect(&set, second, hub);
        });
    }

    fn in_flight_bound(&self) -> u64 {
        self.first
            .in_flight_bound()
            .saturating_add(self.second.in_flight_bound())
            .saturating_add(2 * MERGE_PREFETCH)
    }
}

/// The lanes of a merge, shared by the drain and (for `flat_map`) the outer
/// subscriber that adds lanes.
pub(crate) struct LaneSet<T> {
    /// Slots and the outer end; never locked while calling out.
    slots: Mutex<Slots<T>>,
    /// The outer source's subscription (`flat_map`); empty for a plain merge.
    pub(crate) outer: SubscriptionSlot,
    /// Window of every lane.
    prefetch: u64,
    /// Downstream's drop hook, forwarded to every source.
    pub(crate) hook: Option<DropHook>,
}

struct Slots<T> {
    /// Live lanes; fixed length (the concurrency), allocated once.
    lanes: Vec<Option<Arc<Lane<T>>>>,
    /// The outer source's end; `Some(Ok)` from the start for a plain merge.
    outer_end: Option<Result<(), Error>>,
    /// Set when the merge terminated: no lane may be added any more.
    closed: bool,
}

impl<T> LaneSet<T> {
    fn lock(&self) -> MutexGuard<'_, Slots<T>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new lane in a free slot; `None` when all `concurrency` slots are live or the
    /// merge has terminated.
    pub(crate) fn add(&self) -> Option<Arc<Lane<T>>> {
        let mut slots = self.lock();
        if slots.closed {
            return None;
        }
        let free = slots.lanes.iter_mut().find(|slot| slot.is_none())?;
        let lane = Lane::new(self.prefetch, self.hook.clone());
        *free = Some(lane.clone());
        Some(lane)
    }

    /// Record the outer source's end (the first one wins).
    pub(crate) fn end_outer(&self, end: Result<(), Error>) {
        let mut slots = self.lock();
        if slots.outer_end.is_none() {
            slots.outer_end = Some(end);
        }
    }

    /// True once the merge terminated.
    pub(crate) fn is_closed(&self) -> bool {
        self.lock().closed
    }

    fn get(&self, i: usize) -> Option<Arc<Lane<T>>> {
        self.lock().lanes[i].clone()
    }

    fn retire(&self, i: usize) {
        self.lock().lanes[i] = None;
    }
}

/// The merge drain: round-robin over live lanes, as much as downstream asked for.
pub(crate) struct MergeDrain<S, T> {
    /// The next stage.
    downstream: S,
    /// The lanes (shared with `flat_map`'s outer subscriber).
    pub(crate) set: Arc<LaneSet<T>>,
    /// The lane the next pass starts at (fairness).
    cursor: usize,
    /// Items taken out of a lane under one lock, on their way downstream as one batch.
    /// Capacity `prefetch`, allocated once; it holds items a lane already counted in
    /// its window (moved, not added), and is empty between deliveries.
    scratch: VecDeque<T>,
}

impl<S: Subscriber<T>, T> MergeDrain<S, T> {
    /// A drain over up to `concurrency` lanes of `prefetch`. With `outer`, an outer
    /// source adds lanes (`flat_map`) and the merge completes once it has completed
    /// too; without, the lanes are connected at subscribe time.
    pub(crate) fn new(downstream: S, concurrency: usize, prefetch: u64, outer: bool) -> Self {
        let outer_end = if outer { None } else { Some(Ok(())) };
        Self::build(downstream, concurrency, prefetch, outer_end)
    }

    fn build(
        downstream: S,
        concurrency: usize,
        prefetch: u64,
        outer_end: Option<Result<(), Error>>,
    ) -> Self {
        let hook = downstream.drop_hook();
        let set = Arc::new(LaneSet {
            slots: Mutex::new(Slots {
                lanes: (0..concurrency).map(|_| None).collect(),
                outer_end,
                closed: false,
            }),
            outer: SubscriptionSlot::new(),
            prefetch,
            hook,
        });
        MergeDrain {
            downstream,
            set,
            cursor: 0,
            scratch: VecDeque::with_capacity(
                usize::try_from(prefetch).expect("validated prefetch"),
            ),
        }
    }

    /// Deliver what `lane` holds, up to the demand; returns the number delivered.
    fn deliver(&mut self, lane: &Lane<T>, ctx: &Ctx<'_>) -> u64 {
        let wanted = ctx.demand.get();
        let budget = usize::try_from(wanted).unwrap_or(usize::MAX);
        // One lock for the whole batch; the scratch never grows past its capacity.
        let room = self.scratch.capacity() - self.scratch.len();
        let count = lane.pop_into(&mut self.scratch, budget.min(room)) as u64;
        if count == 0 {
            return 0;
        }
        // Items a cancelling downstream leaves in the drain are dropped with it.
        let credit = self.downstream.on_next_batch(self.scratch.drain(..));
        ctx.demand.produced(count);
        if credit > 0 {
            ctx.demand.add(credit);
        }
        lane.consumed(count);
        count
    }
}

impl<S, T> Drain for MergeDrain<S, T>
where
    S: Subscriber<T> + Send + 'static,
    T: Send + 'static,
{
    fn on_subscribe(&mut self, subscription: Subscription) {
        self.downstream.on_subscribe(subscription);
    }

    fn pass(&mut self, ctx: &Ctx<'_>) -> Progress {
        let n = self.set.lock().lanes.len();
        loop {
            let outer_end = self.set.lock().outer_end.clone();
            if let Some(Err(e)) = outer_end {
                self.terminate(Some(e));
                return Progress::Over;
            }
            let mut delivered = 0u64;
            for k in 0..n {
                let i = (self.cursor + k) % n;
                let Some(lane) = self.set.get(i) else {
                    continue;
                };
                let mut status = lane.status();
                if matches!(status, LaneStatus::Items) && ctx.demand.get() > 0 {
                    delivered += self.deliver(&lane, ctx);
                    if ctx.stopped() {
                        return Progress::Idle;
                    }
                    status = lane.status();
                }
                match status {
                    LaneStatus::Failed(e) => {
                        self.terminate(Some(e));
                        return Progress::Over;
                    }
                    LaneStatus::Finished => {
                        self.set.retire(i);
                        // One more inner may start (flat_map); a no-op for merge.
                        self.set.outer.request(1);
                    }
                    _ => {}
                }
            }
            if n > 0 {
                self.cursor = (self.cursor + 1) % n;
            }
            let done = {
                let slots = self.set.lock();
                matches!(slots.outer_end, Some(Ok(()))) && slots.lanes.iter().all(Option::is_none)
            };
            if done {
                self.downstream.on_complete();
                return Progress::Over;
            }
            if delivered == 0 || ctx.demand.get() == 0 {
                return Progress::Idle;
            }
        }
    }

    fn terminate(&mut self, error: Option<Error>) {
        // Closed first: a lane added after this point is refused, one added before is
        // cancelled below.
        let n = {
            let mut slots = self.set.lock();
            slots.closed = true;
            slots.lanes.len()
        };
        self.set.outer.cancel();
        for i in 0..n {
            if let Some(lane) = self.set.get(i) {
                lane.cancel();
                self.set.retire(i);
            }
        }
        if let Some(error) = error {
            self.downstream.on_error(error);
        }
    }
}

/// Subscribe `source` into a new lane of `set`, if a slot is free; returns false
/// when none is (the outer source over-delivered, or the merge has terminated:
/// then `source` is dropped unsubscribed).
pub(crate) fn connect<P, N>(set: &LaneSet<P::Item>, source: P, hub: &Arc<N>) -> bool
where
    P: Publisher,
    N: Notify,
{
    match set.add() {
        Some(lane) => {
            source.subscribe(LaneSubscriber::new(lane, hub.clone()));
            true
        }
        None => false,
    }
}
