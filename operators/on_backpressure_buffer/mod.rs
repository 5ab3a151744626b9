//! `on_backpressure_buffer`: request everything upstream, hold up to `capacity` items
//! that downstream has no demand for yet, and apply a policy when full. The same stage
//! runs `on_backpressure_latest`, `conflate` and `conflate_latest` (capacity 1, with
//! the policies [`KeepLatest`](super::KeepLatest) and [`MergeInto`](super::MergeInto)).
//!
//! # Algorithm
//!
//! Upstream is asked for `UNBOUNDED` once. The held items are a `TimedQueue`
//! allocated once with `capacity` slots, behind a short lock shared by the producer
//! (upstream's `on_next`, serial by rule 1.3) and the drain owner; nobody calls
//! another stage while holding it. Delivery runs in the stage's pass on the engine
//! room's signal core (`hold.rs`), so downstream's demand may arrive on any thread.
//!
//! * **Upstream delivers a batch.** The producer tries to own the drain loop
//!   ([`Core::try_pass`]). As owner it delivers the held items first (in queue order),
//!   then passes the arriving items straight through while downstream has demand and
//!   nothing is held (no queue traffic on that path, demand settled once per run),
//!   then holds the rest, applying the policy when the queue is full.
//! * **Another thread owns the loop** (downstream requesting from its own thread, the
//!   usual case in front of `publish_on`). The producer's attempt has registered a
//!   reason to run, so the owner makes another pass. The producer queues each item
//!   behind the held ones. When the queue is full and downstream still has demand
//!   outstanding, the owner is delivering: the producer waits for room (the owner
//!   signals a condition variable when items leave the queue or the demand runs out)
//!   instead of dropping, merging or refusing an item that downstream asked for. Only
//!   a full queue with no demand outstanding applies the policy, exactly as in a
//!   synchronous pipeline. This wait is what a synchronous `on_next` would cost the
//!   producer anyway: the items it waits for are being delivered. (A producer called
//!   from inside the owner's own pass, on the same thread, never waits: it applies
//!   the policy.)
//! * **Downstream requests or cancels**: the core records it and runs a pass.
//! * **Upstream terminates**: the end is parked next to the queue and delivered once
//!   the queue is empty ("completion waits for the held items").
//! * **The stage ends** (cancel, `request(0)`, a panicking subscriber, the end
//!   delivered): the queue is closed and emptied under its lock, so an item that the
//!   producer brings during or after the cancel pass is dropped on arrival, never
//!   kept; upstream is cancelled.
//!
//! With [`deadlines`](OnBackpressureBuffer::deadlines), each held item's own deadline
//! is read as it is queued and kept beside its stamp; an item whose deadline has passed
//! when it is taken out is dropped (`DeadlineExceeded`). Items that pass straight
//! through never waited here and are not checked.
//!
//! Drops happen only on the producer's path and go through its [`DropReporter`],
//! counted once per batch; expired items are reported by the drain. On cancel the held
//! items are released without a report (nothing was dropped for lack of room). A
//! refused item (`Overflow::Error`) or a panicking merge cancels upstream and parks
//! the error behind the held items.

use std::any::Any;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use crate::deadline::Deadline;
use crate::demand::UNBOUNDED;
use crate::drain::Upstream;
use crate::guard::catch_in;
use crate::metrics::{DropHook, DropReporter, QueueGauge, QueueMonitor, Sweep};
use crate::queue::timed::TimedQueue;
use crate::queue::{Capacity, TimeBounds};
use crate::runtime::{Immediate, Scheduler};
use crate::stage::core::SharedUpstream;
use crate::stage::{window, Core, Pass};
use crate::{DropReason, Error, Overflow, Publisher, Subscriber, Subscription};

use hold::{lock, Delivery, Held, Hold};

mod hold;
#[cfg(all(test, weir_loom))]
mod loom_tests;

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
/// maximum age (expired items are dropped at dequeue, and while nobody reads when an
/// item arrives or the monitor is read, reported as [`DropReason::Expired`]), CoDel (reported as [`DropReason::CoDel`]) and adaptive
/// LIFO; [`monitor`](Self::monitor) reads its
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
    /// Reads an item's deadline ([`deadlines`](Self::deadlines)): a
    /// `fn(&P::Item) -> Option<Instant>`, typed again at subscribe time.
    deadline_of: Option<Arc<dyn Any + Send + Sync>>,
    /// [`errors_first`](Self::errors_first).
    errors_first: bool,
}

/// How a holding stage reads a held item's deadline.
type DeadlineOf<T> = fn(&T) -> Option<Instant>;

impl<P, O> OnBackpressureBuffer<P, O>
where
    P: Publisher,
    P::Item: Deadline,
{
    /// Honour the held items' deadlines ([`Deadline`]): an item whose deadline has
    /// passed when it is taken out of the buffer is dropped, reason
    /// [`DropReason::DeadlineExceeded`], counted and handed to the drop hook. Read on
    /// the stage's [`clock`](Self::clock). Items that pass straight through (nothing
    /// held, demand waiting) are not checked: they never waited here.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir::deadline::WithDeadline;
    /// use weir::prelude::*;
    /// use weir::runtime::VirtualTime;
    /// use weir::{DropReason, Overflow};
    ///
    /// let clock = VirtualTime::new();
    /// let ms = Duration::from_millis;
    /// let jobs = vec![
    ///     WithDeadline::within(1, ms(100), &clock),
    ///     WithDeadline::within(2, ms(900), &clock),
    /// ];
    /// let buffered = weir::from_iter(jobs)
    ///     .on_backpressure_buffer(8, Overflow::DropOldest)
    ///     .deadlines()
    ///     .clock(clock.clone());
    /// let monitor = buffered.monitor();
    /// # #[cfg(feature = "tck")] {
    /// let probe = weir::tck::TestSubscriber::new();
    /// let consumer = probe.probe();
    /// buffered.subscribe(probe);
    /// clock.advance(ms(500)); // job 1's caller has given up
    /// consumer.request(2);
    /// let served: Vec<u32> = consumer.items().into_iter().map(|j| j.into_inner()).collect();
    /// assert_eq!(served, [2]);
    /// assert_eq!(monitor.snapshot().dropped(DropReason::DeadlineExceeded), 1);
    /// # }
    /// ```
    pub fn deadlines(mut self) -> Self {
        let read: DeadlineOf<P::Item> = <P::Item as Deadline>::deadline;
        self.deadline_of = Some(Arc::new(read));
        self
    }
}

impl<P, O> OnBackpressureBuffer<P, O> {
    pub(crate) fn new(source: P, capacity: u64, policy: O, stage: &'static str) -> Self {
        let capacity = window::validate(format_args!("{stage} capacity"), capacity);
        OnBackpressureBuffer {
            source,
            capacity,
            policy,
            stage,
            bounds: TimeBounds::none(),
            gauge: QueueGauge::new(capacity, Arc::new(Immediate)),
            deadline_of: None,
            errors_first: false,
        }
    }

    /// Deliver an upstream error (or the stage's own, such as `Overflow::Error`'s) at
    /// once, without demand, releasing the held items, instead of after them. The
    /// released items are not reported as drops: as on cancel, the stream ended;
    /// nothing was lost for lack of room. Reactor's `onBackpressure*` operators
    /// behave this way.
    ///
    /// By default the error waits behind the held items, as completion does, so a
    /// subscriber that requests gets every item upstream produced before it failed;
    /// one that never requests again never hears of the failure. Choose this when
    /// an error must reach the subscriber at once (a health check, a supervisor
    /// that restarts the pipeline).
    ///
    /// ```
    /// # #[cfg(feature = "tck")] {
    /// use weir::prelude::*;
    /// use weir::tck::TestSubscriber;
    ///
    /// let failing = weir::range(0u32..5).concat(weir::error(weir::Error::msg("sensor lost")));
    /// let subscriber = TestSubscriber::new().request_on_subscribe(1);
    /// let probe = subscriber.probe();
    /// failing.on_backpressure_latest().errors_first().subscribe(subscriber);
    /// // Item 0 was delivered; 4 was held when the error came, and is released.
    /// probe.assert_items(&[0]);
    /// assert_eq!(probe.assert_error().message(), "sensor lost");
    /// # }
    /// ```
    pub fn errors_first(mut self) -> Self {
        self.errors_first = true;
        self
    }

    /// Bound the held items in time: maximum age, CoDel and adaptive LIFO
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
            core: None,
            hook: None,
            policy: self.policy,
            drops: DropReporter::new(self.stage, None),
            stale: Vec::new(),
            stage: self.stage,
            capacity: self.capacity,
            bounds: self.bounds,
            gauge: self.gauge,
            deadline_of: self
                .deadline_of
                .and_then(|read| read.downcast_ref::<DeadlineOf<P::Item>>().copied()),
            errors_first: self.errors_first,
            upstream: Upstream::Idle,
        })
    }

    fn in_flight_bound(&self) -> u64 {
        self.source
            .in_flight_bound()
            .saturating_add(self.capacity as u64)
    }

    fn queue_monitor(&self) -> Option<QueueMonitor> {
        Some(self.monitor())
    }
}

/// The holding stage's core.
type HoldCore<T, S> = Core<Hold<T>, S>;

struct HoldSubscriber<T, S, O>
where
    T: Send + 'static,
    S: Subscriber<T> + Send + 'static,
    O: OnFull<T>,
{
    /// Downstream until `on_subscribe` attaches it to the core.
    pending: Option<S>,
    /// The stage, once subscribed.
    core: Option<Arc<HoldCore<T, S>>>,
    /// Downstream's drop hook, asked for once at subscribe time.
    hook: Option<DropHook>,
    /// What to do when full.
    policy: O,
    /// Reports what is dropped (producer side only).
    drops: DropReporter,
    /// Held items past the maximum age, taken out when items arrive (the queue may
    /// be unread), and items the policy lost to a full queue, on their way to the
    /// drop hook once the lock is let go.
    stale: Vec<(DropReason, T)>,
    /// The stage's name in drop reports.
    stage: &'static str,
    /// The most items held.
    capacity: usize,
    /// Time limits on the held items.
    bounds: TimeBounds,
    /// The held-items queue's statistics.
    gauge: Arc<QueueGauge>,
    /// Reads a held item's deadline, when the stage honours them.
    deadline_of: Option<DeadlineOf<T>>,
    /// An error overtakes the held items.
    errors_first: bool,
    /// Life-cycle state.
    upstream: Upstream,
}

/// What happened to an item the producer could not pass straight through.
enum Kept<T> {
    /// Held, or merged, or dropped by the policy (reported): go on.
    Done,
    /// Refused (`Overflow::Error`) or the merge failed: the stage fails.
    Failed(Error),
    /// The stage is over: the item comes back to be dropped.
    Closed(T),
}

impl<T, S, O> HoldSubscriber<T, S, O>
where
    T: Send + 'static,
    S: Subscriber<T> + Send + 'static,
    O: OnFull<T>,
{
    /// `item`'s deadline, if the stage honours them.
    /// `item`'s deadline, if the stage honours them; a panic of the reader (user
    /// code) is caught and fails the stage like a panicking merge.
    fn deadline(&self, item: &T) -> Result<Option<Instant>, Error> {
        match self.deadline_of {
            Some(read) => catch_in(self.stage, || read(item)),
            None => Ok(None),
        }
    }

    /// Apply the policy to `item`, the queue being full. What is lost goes with the
    /// swept items, to the drop hook once the caller let the lock go (the hook is
    /// user code: it may call this stage, whose pass takes the lock).
    fn overflow(
        &mut self,
        held: &mut Held<T>,
        (item, deadline): (T, Option<Instant>),
        now: Instant,
    ) -> Kept<T> {
        match self.policy.on_full(held.queue.items_mut(), item) {
            Lost::Item(reason, lost) => {
                match reason {
                    DropReason::OverflowOldest => held.queue.evicted_oldest(now, deadline),
                    DropReason::ReplacedByLatest => held.queue.refreshed_newest(now, deadline),
                    _ => {}
                }
                self.gauge.dropped(reason, 1);
                self.stale.push((reason, lost));
                Kept::Done
            }
            Lost::Merged => {
                self.gauge.dropped(DropReason::Merged, 1);
                self.drops.count(DropReason::Merged, 1);
                // The merged value keeps its stamp (it holds data that old) but is
                // worth what its own deadline says.
                let merged = match (self.deadline_of, held.queue.items_mut().back()) {
                    (Some(read), Some(newest)) => catch_in(self.stage, || read(newest)),
                    _ => Ok(None),
                };
                match merged {
                    Ok(merged) => {
                        held.queue.set_newest_deadline(merged);
                        Kept::Done
                    }
                    Err(error) => Kept::Failed(error),
                }
            }
            Lost::Refused(refused) => {
                self.gauge.dropped(DropReason::OverflowNewest, 1);
                self.stale.push((DropReason::OverflowNewest, refused));
                Kept::Failed(Error::overflow(format!(
                    "buffer of {} items full and its policy is Overflow::Error",
                    self.capacity
                )))
            }
            Lost::Failed(error) => {
                // A policy that failed may have taken the newest item out (a merge
                // that panicked consumed it): its stamp goes with it.
                held.queue.resync_tail();
                Kept::Failed(error)
            }
        }
    }

    /// Hold `item` as the loop's owner (nobody delivers meanwhile): queue it, or apply
    /// the policy when full.
    fn hold_owned(&mut self, held: &mut Held<T>, item: T, now: Instant) -> Kept<T> {
        if held.closed {
            return Kept::Closed(item);
        }
        let deadline = match self.deadline(&item) {
            Ok(deadline) => deadline,
            Err(error) => return Kept::Failed(error),
        };
        match held.queue.push(item, now, deadline) {
            Ok(()) => Kept::Done,
            Err(item) => self.overflow(held, (item, deadline), now),
        }
    }

    /// Hand `item` to the owner on another thread: wait for room while downstream
    /// has demand for it (see the module docs), then queue it, or apply the policy
    /// to a full queue without demand.
    fn hand_over(&mut self, hold: &Hold<T>, core: &HoldCore<T, S>, item: T) -> Kept<T> {
        let now = self.gauge.now();
        // Read before the lock is taken (user code).
        let deadline = match self.deadline(&item) {
            Ok(deadline) => deadline,
            Err(error) => return Kept::Failed(error),
        };
        let kept = match hold.room_for(core.demand()) {
            Ok(Some(mut held)) => {
                held.queue.expire_stale(now, &mut self.stale);
                let pushed = held.queue.push(item, now, deadline);
                held.queue.flush(now);
                debug_assert!(pushed.is_ok(), "room_for found room");
                Kept::Done
            }
            Ok(None) => Kept::Closed(item),
            Err(mut held) => {
                // Dead items make room before the policy is asked.
                let kept = if held.queue.expire_stale(now, &mut self.stale) > 0 {
                    let pushed = held.queue.push(item, now, deadline);
                    debug_assert!(pushed.is_ok(), "the sweep made room");
                    Kept::Done
                } else {
                    self.overflow(&mut held, (item, deadline), now)
                };
                held.queue.flush(now);
                kept
            }
        };
        self.report_stale();
        match self.drops.failure() {
            // A drop hook that panicked fails the stage as a panicking merge does.
            Some(error) if !matches!(kept, Kept::Failed(_)) => Kept::Failed(error),
            _ => kept,
        }
    }

    /// Hand the swept and lost items to the drop hook (no lock held).
    fn report_stale(&mut self) {
        for (reason, item) in self.stale.drain(..) {
            self.drops.drop_item(reason, item);
        }
    }

    /// The stage failed on its own: cancel upstream and park the error behind the
    /// held items.
    fn fail(&mut self, hold: &Hold<T>, error: Error) {
        lock(&hold.held).end.get_or_insert(Err(error));
        // Our life cycle ends here; the stage's shared handle makes the one cancel.
        self.upstream.finish();
        hold.upstream.cancel();
    }

    fn terminate(&mut self, end: Result<(), Error>) {
        if let (true, Some(core)) = (self.upstream.finish(), &self.core) {
            core.stage().upstream.finished();
            lock(&core.stage().held).end.get_or_insert(end);
            core.signal();
        }
    }
}

impl<T, S, O> Drop for HoldSubscriber<T, S, O>
where
    T: Send + 'static,
    S: Subscriber<T> + Send + 'static,
    O: OnFull<T>,
{
    /// Released by upstream without a terminal signal (a publisher that ended
    /// without telling, or whose thread panicked holding it): downstream gets the
    /// held items and then an error of kind [`Cancelled`](crate::ErrorKind::Cancelled)
    /// instead of waiting for ever. A no-op after the end; before `on_subscribe`,
    /// downstream is dropped with it.
    fn drop(&mut self) {
        // After the stage's own cancel, upstream let go as asked.
        if self
            .core
            .as_ref()
            .is_some_and(|core| core.stage().upstream.is_done())
        {
            return;
        }
        self.terminate(Err(crate::guard::abandoned(self.stage)));
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
        let Some(downstream) = self.pending.take() else {
            return;
        };
        self.hook = downstream.drop_hook();
        self.drops = DropReporter::new(self.stage, self.hook.clone());
        let queue = TimedQueue::new(
            Capacity::items(self.capacity),
            self.bounds,
            self.gauge.clone(),
        )
        .with_deadlines(self.deadline_of.is_some());
        let core = Core::new(Hold::new(
            queue,
            SharedUpstream::new(subscription.clone()),
            self.stage,
            self.hook.clone(),
            self.errors_first,
        ));
        // Before the stats are read: the counts the queue holds back are published,
        // and items that died while nobody reads leave.
        let sweeper: Arc<dyn Sweep> = core.clone();
        self.gauge.set_sweeper(Arc::downgrade(&sweeper));
        self.core = Some(core.clone());
        let drain = Delivery::new(
            self.capacity,
            DropReporter::new(self.stage, self.hook.clone()),
        );
        core.attach(drain, downstream);
        // After the attach, outside the loop: a synchronous upstream delivers into
        // `on_next_batch` from inside this request.
        if !core.is_stopping() {
            subscription.request(UNBOUNDED);
        }
    }

    fn on_next(&mut self, item: T) {
        let _credit_is_ours = self.on_next_batch(std::iter::once(item));
    }

    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        let (Some(core), true) = (self.core.clone(), self.upstream.is_active()) else {
            return 0;
        };
        let hold = core.stage();
        let mut items = Some(items);
        let mut failure = None;
        let owned = core.try_pass(|cx, drain, downstream| {
            hold.owning(|| {
                hold.deliver_held(cx, drain, downstream);
                let Some(items) = items.take() else {
                    return Pass::Idle;
                };
                let rest = if lock(&hold.held).queue.is_empty() {
                    cx.deliver(downstream, items).1
                } else {
                    Some(items)
                };
                let Some(rest) = rest else {
                    return Pass::Idle;
                };
                if cx.stopped() {
                    // Downstream cancelled inside the batch: the rest is released
                    // unread (not held, not reported; rule 3.6's items in flight).
                    return Pass::Idle;
                }
                let mut rest = rest.peekable();
                if rest.peek().is_some() {
                    let now = self.gauge.now();
                    let mut held = lock(&hold.held);
                    // Dead items make room first (nobody may be reading).
                    held.queue.expire_stale(now, &mut self.stale);
                    // Items refused by a closed queue: dropped after the lock.
                    let mut closed = Vec::new();
                    for item in rest.by_ref() {
                        if held.queue.is_full() && !held.closed && cx.demand().get() > 0 {
                            // Downstream asked for more meanwhile (from another
                            // thread: this one owns the loop, so the request only
                            // left a reason to run): what is held goes out first,
                            // and the policy applies only to a full queue without
                            // demand.
                            drop(held);
                            hold.deliver_held(cx, drain, downstream);
                            held = lock(&hold.held);
                            if cx.stopped() {
                                // Cancelled inside that delivery: the rest is
                                // released unread, as above.
                                closed.push(item);
                                break;
                            }
                        }
                        match self.hold_owned(&mut held, item, now) {
                            Kept::Done => {}
                            Kept::Closed(item) => closed.push(item),
                            Kept::Failed(error) => {
                                failure = Some(error);
                                break;
                            }
                        }
                    }
                    held.queue.flush(now);
                    drop(held);
                    // Items refused, and the rest of a batch a failure cut short
                    // (unread): their `Drop` is user code, contained, so that the
                    // failure still reaches downstream.
                    let unread = crate::guard::catch(move || drop(rest)).is_err();
                    if unread || crate::guard::drop_each(closed) > 0 {
                        tracing::error!(stage = self.stage, "an item panicked in Drop; contained");
                    }
                    self.report_stale();
                }
                Pass::Idle
            })
        });
        if !owned {
            // Another thread owns the loop (and will run another pass for us).
            if let Some(items) = items.take() {
                for item in items {
                    match self.hand_over(hold, &core, item) {
                        Kept::Done => core.signal(),
                        Kept::Closed(item) => drop(item),
                        Kept::Failed(error) => {
                            failure = Some(error);
                            break;
                        }
                    }
                }
            }
        }
        // The rest of a batch a failure cut short, unread: contained as above.
        if crate::guard::catch(move || drop(items)).is_err() {
            tracing::error!(stage = self.stage, "an item panicked in Drop; contained");
        }
        // Also a drop hook that panicked on a swept item.
        if let Some(error) = failure.or_else(|| self.drops.failure()) {
            self.fail(hold, error);
            core.signal();
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

    /// Consumes every batch it is handed (it never cancels from inside one).
    fn stops_batches_itself(&self) -> bool {
        true
    }

    fn on_error(&mut self, error: Error) {
        self.terminate(Err(error));
    }

    fn on_complete(&mut self) {
        self.terminate(Ok(()));
    }
}
