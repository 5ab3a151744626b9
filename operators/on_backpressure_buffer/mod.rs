//! `on_backpressure_buffer`: request everything upstream, hold up to `capacity` items
//! that downstream has no demand for yet, and apply a policy when full. The same core
//! runs `on_backpressure_latest`, `conflate` and `conflate_latest` (capacity 1, with
//! the policies [`KeepLatest`](super::KeepLatest) and [`MergeInto`](super::MergeInto)).
//!
//! Demand contract: UnboundedIn. Upstream is asked for `UNBOUNDED` once; downstream's
//! demand is an [`AtomicDemand`]. In-flight bound: `capacity`, in a ring allocated
//! once at subscribe time (`VecDeque::with_capacity`) and never grown.
//!
//! # Who runs what
//!
//! Downstream demand arrives on any thread, so delivery runs in the one drain loop,
//! [`Wip`]. The downstream subscriber lives in a mutex only the `Wip` owner locks
//! (the engine's pattern, `source/engine.rs`). The ring has its own mutex, shared by
//! the producer (upstream's `on_next`, serial by rule 1.3) and the owner; nobody calls
//! another stage while holding it, so a slow consumer never blocks the producer. The
//! price: a held item leaves the ring under one short lock of its own (an uncontended
//! lock when producer and consumer share a thread). Items that pass straight through
//! touch neither the ring nor its lock, and demand is settled once per run of items.
//!
//! * Upstream delivers a batch: the producer enters the `Wip`. As owner it first
//!   delivers held items (oldest first), then passes arriving items straight through
//!   while downstream has demand and nothing is held (no ring traffic on that path),
//!   then holds the rest, applying the policy when full. If another thread owns the
//!   loop, the producer holds the whole batch and enters again, so the owner's next
//!   pass sees it (the first increment may already have been consumed).
//! * Downstream requests or cancels: it updates the demand or the flags and enters.
//! * Upstream terminates: the end is parked next to the ring and delivered once the
//!   ring is empty ("completion waits for the held items").
//!
//! Drops happen only on the producer's path and go through its [`DropReporter`],
//! counted once per batch. On cancel the held items are released without a report
//! (nothing was dropped for lack of room). States ([`Upstream`]): `Idle` → `Active`
//! → `Done`; a refused item (`Overflow::Error`) or a panicking merge cancels upstream.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::demand::{AtomicDemand, UNBOUNDED};
use crate::drain::{Upstream, Wip};
use crate::loom::{AtomicU8, Mutex};
use crate::metrics::{DropHook, DropReporter, QueueGauge, QueueMonitor};
use crate::queue::timed::TimedQueue;
use crate::queue::{Capacity, TimeBounds};
use crate::runtime::{Immediate, Scheduler};
use crate::{DropReason, Error, Overflow, Publisher, Subscriber, Subscription};

use shared::{lock, Held, Shared};

#[cfg(all(test, weir_loom))]
mod loom_tests;
mod shared;

/// The largest capacity.
const MAX_CAPACITY: usize = crate::queue::MAX_CAPACITY;

/// What a holding stage does with an item that arrives while it is full. Implemented
/// by [`Overflow`], [`KeepLatest`](super::KeepLatest) and [`MergeInto`](super::MergeInto); the
/// stage reports what is lost.
pub trait OnFull<T>: Send + 'static {
    /// `held` holds `capacity` items (oldest first) and `item` arrived.
    ///
    /// Contract (the stage keeps enqueue stamps beside the items): return
    /// `Lost::Item(OverflowOldest, _)` only after taking the oldest out and appending
    /// `item`; `Lost::Item(ReplacedByLatest, _)` only after replacing the newest with
    /// `item`; `Lost::Merged` after merging `item` into the newest (which keeps its
    /// stamp); anything else only when `held` is unchanged.
    fn on_full(&mut self, held: &mut VecDeque<T>, item: T) -> Lost<T>;
}

/// What making room cost; returned by [`OnFull::on_full`].
#[derive(Debug)]
#[non_exhaustive]
pub enum Lost<T> {
    /// This item was dropped, for this reason (handed to the drop hook).
    Item(DropReason, T),
    /// Two items became one inside a user function (counted as `Merged`).
    Merged,
    /// The item was refused: the stage fails with an overflow error.
    Refused(T),
    /// A user function panicked: the stage fails with this error.
    Failed(Error),
}

impl<T: Send + 'static> OnFull<T> for Overflow {
    fn on_full(&mut self, held: &mut VecDeque<T>, item: T) -> Lost<T> {
        match self {
            Overflow::Error => Lost::Refused(item),
            Overflow::DropNewest => Lost::Item(DropReason::OverflowNewest, item),
            Overflow::DropOldest => {
                let oldest = held.pop_front().expect("a full ring has an oldest item");
                held.push_back(item);
                Lost::Item(DropReason::OverflowOldest, oldest)
            }
        }
    }
}

/// Publisher for the [`on_backpressure_buffer`](crate::PublisherExt::on_backpressure_buffer)
/// method (and, with other policies, `on_backpressure_latest`, `conflate` and
/// `conflate_latest`).
///
/// The held items form a time-stamped queue: [`time_bounds`](Self::time_bounds) adds a
/// maximum age (expired items are dropped at dequeue, reported as
/// [`DropReason::Expired`]) and adaptive LIFO; [`monitor`](Self::monitor) reads its
/// [`QueueStats`](crate::metrics::QueueStats); [`clock`](Self::clock) sets the clock
/// the stamps come from (the wall clock by default).
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct OnBackpressureBuffer<P, O = Overflow> {
    source: P,
    capacity: usize,
    policy: O,
    stage: &'static str,
    bounds: TimeBounds,
    gauge: Arc<QueueGauge>,
}

impl<P, O> OnBackpressureBuffer<P, O> {
    pub(crate) fn new(source: P, capacity: usize, policy: O, stage: &'static str) -> Self {
        assert!(
            (1..=MAX_CAPACITY).contains(&capacity),
            "{stage} capacity must be in 1..=1073741824 (got {capacity})"
        );
        OnBackpressureBuffer {
            source,
            capacity,
            policy,
            stage,
            bounds: TimeBounds::none(),
            gauge: QueueGauge::new(capacity, Arc::new(Immediate)),
        }
    }

    /// Bound the held items in time: maximum age at dequeue and adaptive LIFO
    /// (see [`TimeBounds`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir::prelude::*;
    /// use weir::queue::TimeBounds;
    /// use weir::Overflow;
    ///
    /// let buffered = weir::range(0u32..10)
    ///     .on_backpressure_buffer(100, Overflow::DropOldest)
    ///     .time_bounds(TimeBounds::none().max_age(Duration::from_secs(5)));
    /// assert_eq!(buffered.collect().wait().unwrap().len(), 10);
    /// ```
    pub fn time_bounds(mut self, bounds: TimeBounds) -> Self {
        self.bounds = bounds;
        self
    }

    /// Read time (enqueue stamps, ages, rates) from `clock` instead of the wall clock,
    /// e.g. a [`VirtualTime`](crate::runtime::VirtualTime) in tests. Resets the
    /// monitor: call it before [`monitor`](Self::monitor).
    pub fn clock(mut self, clock: impl Scheduler) -> Self {
        self.gauge = QueueGauge::new(self.capacity, Arc::new(clock));
        self
    }

    /// A handle on the held-items queue's statistics (shared by every subscription of
    /// this publisher and its clones).
    pub fn monitor(&self) -> QueueMonitor {
        QueueMonitor::new(self.gauge.clone())
    }
}

impl<P: Publisher, O: OnFull<P::Item>> Publisher for OnBackpressureBuffer<P, O> {
    type Item = P::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<P::Item> + Send + 'static,
    {
        self.source.subscribe(HoldSubscriber {
            pending: Some(subscriber),
            shared: None,
            hook: None,
            policy: self.policy,
            drops: DropReporter::new(self.stage, None),
            stage: self.stage,
            capacity: self.capacity,
            bounds: self.bounds,
            gauge: self.gauge,
            upstream: Upstream::Idle,
        })
    }

    fn in_flight_bound(&self) -> u64 {
        self.source
            .in_flight_bound()
            .saturating_add(self.capacity as u64)
    }
}

struct HoldSubscriber<T, S, O> {
    /// Downstream until `on_subscribe` moves it into `shared`.
    pending: Option<S>,
    /// Shared with downstream's subscription, once subscribed.
    shared: Option<Arc<Shared<T, S>>>,
    /// Downstream's drop hook, asked for once at subscribe time.
    hook: Option<DropHook>,
    /// What to do when full.
    policy: O,
    /// Reports what is dropped (producer side only).
    drops: DropReporter,
    /// The stage's name in drop reports.
    stage: &'static str,
    /// The most items held.
    capacity: usize,
    /// Time limits on the held items.
    bounds: TimeBounds,
    /// The held-items queue's statistics.
    gauge: Arc<QueueGauge>,
    /// Life-cycle state.
    upstream: Upstream,
}

impl<T: Send + 'static, S: Subscriber<T>, O: OnFull<T>> HoldSubscriber<T, S, O> {
    /// Hold `items`, applying the policy when full. A refusal or a failed merge
    /// cancels upstream and parks the error behind the held items.
    fn hold(&mut self, shared: &Shared<T, S>, items: impl Iterator<Item = T>) {
        let mut items = items.peekable();
        if items.peek().is_none() {
            return;
        }
        // One clock read and one statistics flush per batch.
        let now = self.gauge.now();
        let mut held = lock(&shared.held);
        let mut failure = None;
        for item in items {
            let Err(item) = held.queue.push(item, now) else {
                continue;
            };
            let lost = self.policy.on_full(held.queue.items_mut(), item);
            match lost {
                Lost::Item(reason, lost) => {
                    match reason {
                        DropReason::OverflowOldest => held.queue.evicted_oldest(now),
                        DropReason::ReplacedByLatest => held.queue.refreshed_newest(now),
                        _ => {}
                    }
                    self.gauge.dropped(reason, 1);
                    self.drops.drop_item(reason, lost);
                }
                Lost::Merged => {
                    self.gauge.dropped(DropReason::Merged, 1);
                    self.drops.count(DropReason::Merged, 1);
                }
                Lost::Refused(refused) => {
                    self.gauge.dropped(DropReason::OverflowNewest, 1);
                    self.drops.drop_item(DropReason::OverflowNewest, refused);
                    failure = Some(Error::overflow(format!(
                        "buffer of {} items full and its policy is Overflow::Error",
                        self.capacity
                    )));
                    break;
                }
                Lost::Failed(error) => {
                    failure = Some(error);
                    break;
                }
            }
        }
        held.queue.flush(now);
        if let Some(error) = failure {
            held.end = Some(Err(error));
            drop(held);
            self.upstream.cancel();
        }
    }

    fn terminate(&mut self, end: Result<(), Error>) {
        if let (true, Some(shared)) = (self.upstream.finish(), &self.shared) {
            lock(&shared.held).end = Some(end);
            shared.wip.drain(|| shared.pass());
        }
    }
}

impl<T, S, O> Subscriber<T> for HoldSubscriber<T, S, O>
where
    T: Send + 'static,
    S: Subscriber<T> + Send + 'static,
    O: OnFull<T>,
{
    fn on_subscribe(&mut self, subscription: Subscription) {
        if !self.upstream.accept(&subscription) {
            return;
        }
        let Some(mut downstream) = self.pending.take() else {
            return;
        };
        self.hook = downstream.drop_hook();
        self.drops = DropReporter::new(self.stage, self.hook.clone());
        let shared = Arc::new(Shared {
            demand: AtomicDemand::new(),
            wip: Wip::new(),
            flags: AtomicU8::new(0),
            held: Mutex::new(Held {
                queue: TimedQueue::new(
                    Capacity::items(self.capacity),
                    self.bounds,
                    self.gauge.clone(),
                ),
                end: None,
            }),
            downstream: Mutex::new(None),
            upstream: subscription.clone(),
            expired: Mutex::new(DropReporter::new(self.stage, self.hook.clone())),
        });
        self.shared = Some(shared.clone());
        // Own the loop while downstream's on_subscribe runs: its requests only count.
        let entered = shared.wip.enter();
        debug_assert!(entered, "a new loop has no other owner");
        downstream.on_subscribe(Subscription::new(shared.clone()));
        *lock(&shared.downstream) = Some(downstream);
        shared.wip.run(|| shared.pass());
        subscription.request(UNBOUNDED);
    }

    fn on_next(&mut self, item: T) {
        let _credit_is_ours = self.on_next_batch(std::iter::once(item));
    }

    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        let (Some(shared), true) = (self.shared.clone(), self.upstream.is_active()) else {
            return 0;
        };
        if shared.wip.enter() {
            let mut incoming = Some(items);
            shared.wip.run(|| {
                shared.pass_with(|downstream| {
                    if let Some(mut items) = incoming.take() {
                        shared.pass_through(downstream, &mut items);
                        self.hold(&shared, items);
                    }
                })
            });
        } else {
            self.hold(&shared, items);
            shared.wip.drain(|| shared.pass());
        }
        self.drops.flush();
        // Upstream was asked for everything: no credit goes up.
        0
    }

    fn drop_hook(&self) -> Option<DropHook> {
        match &self.pending {
            Some(downstream) => downstream.drop_hook(),
            None => self.hook.clone(),
        }
    }

    fn on_error(&mut self, error: Error) {
        self.terminate(Err(error));
    }

    fn on_complete(&mut self) {
        self.terminate(Ok(()));
    }
}
