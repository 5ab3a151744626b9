//! `merge`: the items of several publishers of one item type, interleaved as they
//! arrive; also the merging stage that `weir::merge`, `flat_map` and `concat_map` run
//! on ([`Merging`]).
//!
//! # Algorithm
//!
//! Each source delivers into its own lane (the engine room's `stage::lanes`: a
//! bounded window of `prefetch` items, requested up front and replenished by the 75%
//! rule as downstream takes items). The stage, on the signal core, drains the lanes
//! round-robin (fairness): each pass starts at the lane after the last one it served,
//! and a pass that served nothing leaves that place unchanged, so items queued in
//! every source before any demand come out from the first source first, and demand of
//! one at a time takes one item from each source in turn. From each lane with items
//! a pass takes up to the outstanding demand under one lock and delivers them in one
//! `on_next_batch`, demand settled once. A finished lane is retired (and, for
//! `flat_map`, the outer source asked for one more inner); the stage completes once
//! every lane finished and the outer source (if any) completed. The first failure of
//! any source, or of the outer source, is signalled at once; when the stage ends for
//! any reason the lane set is closed: every source and the outer source are
//! cancelled and what the lanes hold is released.
//!
//! Sources deliver on any thread into their own lane and only ask the core for a
//! pass; every downstream signal comes from the pass.
//!
//! # Fusion
//!
//! When every source fuses (a synchronous source with only closure stages after it:
//! see `Publisher::fuses`) and a fold ends the chain, no lane is needed: every
//! source's items are ready at once and the fold takes them all, so the sources are
//! folded one after another in the caller's loop ([`fold_in_turn`]), the way an
//! `Iterator` chain runs. Each source's own order is kept; items of different
//! sources, which a merge never orders, come source by source instead of in windows
//! of `MERGE_PREFETCH`.

use std::sync::Arc;

use crate::guard::catch_in;
use crate::spec::Sealed;
use crate::stage::lanes::{LaneSet, LaneStatus, LaneView, OuterEnd, Visit};
use crate::stage::window::PREALLOCATED;
use crate::stage::{Core, Cx, Pass, Stage};
use crate::{Error, Publisher, Subscriber};

pub(crate) use crate::stage::lanes::connect;

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
        start(
            "merge",
            subscriber,
            2,
            MERGE_PREFETCH as usize,
            false,
            move |set, core| {
                connect(set, first, core);
                connect(set, second, core);
            },
        );
    }

    fn in_flight_bound(&self) -> u64 {
        self.first
            .in_flight_bound()
            .saturating_add(self.second.in_flight_bound())
            .saturating_add(2 * MERGE_PREFETCH)
    }

    fn fuses(&self, sealed: Sealed) -> bool {
        self.first.fuses(sealed) && self.second.fuses(sealed)
    }

    #[inline]
    fn fold_fused<A, F>(self, init: A, f: F, sealed: Sealed) -> Result<A, Error>
    where
        A: Send + 'static,
        F: FnMut(A, P::Item) -> A + Send + 'static,
    {
        let state = fold_in_turn(self.first, (init, f), sealed)?;
        let (acc, _) = fold_in_turn(self.second, state, sealed)?;
        Ok(acc)
    }
}

/// One source's part of a fused merge: fold `source` into the accumulator of `state`
/// with its closure, and hand both back for the next source. The closure travels in
/// the accumulator because `fold_fused` takes it by value (and `'static`, for the
/// subscribed default); the compiler keeps the pair in registers.
#[inline]
pub(crate) fn fold_in_turn<P, A, F>(
    source: P,
    state: (A, F),
    sealed: Sealed,
) -> Result<(A, F), Error>
where
    P: Publisher,
    A: Send + 'static,
    F: FnMut(A, P::Item) -> A + Send + 'static,
{
    source.fold_fused(
        state,
        |(acc, mut f), item| {
            let acc = f(acc, item);
            (acc, f)
        },
        sealed,
    )
}

/// The merging stage: its lanes.
pub(crate) struct Merging<T> {
    /// The lanes (shared with `flat_map`'s outer subscriber).
    pub(crate) set: Arc<LaneSet<T>>,
}

/// What only the pass touches: where the next pass starts, and the run of items on
/// its way downstream.
pub(crate) struct Cursor<T> {
    /// The pass's copy of the lane set, refreshed when the set changed.
    view: LaneView<T>,
    /// The lane the next pass starts at.
    next: usize,
    /// Items taken out of a lane under one lock, on their way downstream as one batch.
    /// Room for a lane's window (`prefetch`, up to `PREALLOCATED` items), allocated
    /// once; it trades buffers with the lanes it empties (see `Lane::pop_into`), so
    /// no buffer is ever copied or grown (a larger window's items are moved, at most
    /// the scratch's room at a time). Empty between deliveries.
    scratch: Vec<T>,
}

/// The merging stage's core, serving `S`.
pub(crate) type MergeCore<T, S> = Core<Merging<T>, S>;

/// Subscribe `subscriber` to a merge of up to `concurrency` lanes of `prefetch`
/// (`outer`: an outer source adds them, `flat_map`); `connect` runs while the core owns
/// its loop (so synchronous sources only fill their lanes) and connects the sources.
pub(crate) fn start<T, S>(
    stage: &'static str,
    subscriber: S,
    concurrency: usize,
    prefetch: usize,
    outer: bool,
    connect: impl FnOnce(&Arc<LaneSet<T>>, &Arc<MergeCore<T, S>>),
) where
    T: Send + 'static,
    S: Subscriber<T> + Send + 'static,
{
    let set = LaneSet::new(stage, concurrency, prefetch, outer, subscriber.drop_hook());
    let core = Core::new(Merging { set: set.clone() });
    let cursor = Cursor {
        view: LaneView::new(),
        next: 0,
        scratch: Vec::with_capacity(prefetch.min(PREALLOCATED)),
    };
    core.attach_then(cursor, subscriber, |core| {
        // A subscriber that cancelled in `on_subscribe` (or panicked there, rule
        // 2.13) gets no source subscribed: nothing is pulled for it.
        if !core.is_stopping() {
            connect(&set, core);
        }
    });
}

/// Deliver what `visit`'s lane holds, up to the demand, through `scratch`; returns
/// how many, and where the lane stood after the items were taken out (one lock for
/// both); `Err` when the source's `request` for more panicked.
fn deliver<T, S: Subscriber<T>>(
    cx: &Cx<'_>,
    visit: &mut Visit<T>,
    scratch: &mut Vec<T>,
    downstream: &mut S,
) -> Result<(u64, LaneStatus), Error> {
    let budget = usize::try_from(cx.demand().get()).unwrap_or(usize::MAX);
    // The scratch never grows past its capacity.
    let room = scratch.capacity() - scratch.len();
    let taken = visit.lane.take(scratch, budget.min(room));
    if taken.count > 0 {
        // Items a cancelling downstream leaves in the scratch are dropped with it.
        cx.deliver(downstream, scratch.drain(..));
        visit.replenish(taken.refill)?;
    }
    Ok((taken.count as u64, taken.status))
}

impl<T: Send + 'static> Stage for Merging<T> {
    const NAME: &'static str = "merge";
    type Item = T;
    type Owned = Cursor<T>;
    type Padding = ();

    fn pass<S: Subscriber<T>>(
        &self,
        cx: &Cx<'_>,
        cursor: &mut Cursor<T>,
        downstream: &mut S,
    ) -> Pass {
        loop {
            self.set.refresh(&mut cursor.view);
            if let OuterEnd::Failed(error) = &cursor.view.outer {
                return cx.terminate(downstream, Err(error.clone()));
            }
            let n = cursor.view.lanes.len();
            let mut delivered = 0u64;
            let mut last_served = None;
            for k in 0..n {
                let i = (cursor.next + k) % n;
                let Some(visit) = &mut cursor.view.lanes[i] else {
                    continue;
                };
                let status = if cx.demand().get() > 0 {
                    let delivered_now = deliver(cx, visit, &mut cursor.scratch, downstream);
                    let (served, status) = match delivered_now {
                        Ok(done) => done,
                        Err(error) => return cx.terminate(downstream, Err(error)),
                    };
                    if served > 0 {
                        delivered += served;
                        last_served = Some(i);
                    }
                    if cx.stopped() {
                        return Pass::Idle;
                    }
                    status
                } else {
                    visit.lane.status()
                };
                match status {
                    LaneStatus::Failed(error) => return cx.terminate(downstream, Err(error)),
                    LaneStatus::Finished => {
                        self.set.retire(&mut cursor.view, i);
                        // One more inner may start (flat_map); a no-op for merge. An
                        // outer source whose `request` panics fails the stage.
                        let stage = self.set.stage();
                        if let Err(error) = catch_in(stage, || self.set.outer.request(1)) {
                            return cx.terminate(downstream, Err(error));
                        }
                    }
                    LaneStatus::Items | LaneStatus::Empty => {}
                }
            }
            // The next pass starts after the last lane served; a pass that served
            // nothing leaves the cursor where it is.
            if let Some(i) = last_served {
                cursor.next = (i + 1) % n;
            }
            // Fresh: retiring a lane may have started another inner (flat_map).
            self.set.refresh(&mut cursor.view);
            if cursor.view.is_finished() {
                return cx.terminate(downstream, Ok(()));
            }
            if delivered == 0 || cx.demand().get() == 0 {
                return Pass::Idle;
            }
        }
    }

    /// Close the lane set: cancel every source and the outer one, release the lanes.
    fn stop(&self, cursor: &mut Cursor<T>) {
        self.set.close();
        cursor.view.clear();
        cursor.scratch.clear();
    }
}
