//! `publish_on`: an async boundary. Upstream's items go into a bounded lock-free ring;
//! the stage's drain, run as tasks on a [`Scheduler`], delivers them downstream.
//!
//! # Algorithm
//!
//! Upstream is asked for `prefetch` items at subscribe time and then, through
//! [`Replenish`](crate::demand::Replenish) (the 75% rule), for what was consumed each
//! time `prefetch - prefetch / 4` items left the ring. Outstanding upstream demand
//! therefore never exceeds `prefetch`, and the ring has exactly `prefetch` slots: a
//! full ring means upstream broke rule 1.1, which fails the stream with an error
//! naming the rule.
//!
//! * **The producer** (upstream's thread, this file's [`Producing`]) writes each batch
//!   into the ring ([`spsc`]), publishing every `PUBLISH_RUN` items so the consumer
//!   can start on a long batch while the rest is written (the whole batch at once
//!   with `publish_on_with`, whose batch stamp must be recorded first), and tells
//!   the signal core after the first run and at the end of the batch
//!   ([`Core::notify`](crate::stage::Core::notify)): a pass is signalled only when no
//!   drain task watches the ring (below). The first `on_subscribe` calls
//!   downstream's `on_subscribe` on upstream's thread (as Reactor does), then
//!   requests `prefetch`.
//! * **The drain** (`boundary.rs`, the stage on the engine room's signal core, driven
//!   on the scheduler) owns the ring's reading end and the subscriber. A pass drops
//!   expired items (with `max_age`), delivers `min(demand, readable)` items in one
//!   `on_next_batch` with demand settled once and the batch credit added, replenishes
//!   upstream, repeats while items and demand remain, and delivers the terminal
//!   signal once the ring is empty; it updates the queue gauge once. Before leaving
//!   its task the drain lingers a few microseconds for the next reason to run (the
//!   crate's one backoff: a bounded spin, no yielding), which saves a task hand-off
//!   per batch on a busy boundary without stealing the CPU from a producer that is
//!   not running.
//! * **Watching.** A drain task may also *watch* the ring: it marks itself, and
//!   while it lingers it looks at the ring's fill (`has_work`) besides the signals.
//!   The producer then skips its signal (a locked increment on a line the drain
//!   writes every pass: with items sent one at a time, most of the producer's time),
//!   and the task, when it leaves, looks once more (the engine room's *watched
//!   stages*: a fence on each side closes the race). With a window above
//!   `PUBLISH_RUN` the drain always watches: a drain that caught up in the middle of
//!   a large batch also starts on the next run as soon as it is published instead of
//!   at the batch's end. A smaller window's batches are published in one run, and
//!   looking costs a drain fed by a batching producer (it reads the lines the
//!   producer is writing: 0.82–0.86 × the throughput without at prefetch 16 and 64),
//!   so such a drain watches only while items arrive a few at a time (its last pass
//!   found fewer than 4 new ones).
//! * **Pulling a channel.** When upstream is a [`channel`](fn@crate::channel), or a
//!   subscriber of a hub over one (its subscription carries a crate-internal pull
//!   handle, which the hub hands on to each subscriber), a watching drain also
//!   watches the channel's *lane*, a lock-free ring its senders fill one item at a
//!   time while the mark is set (see the channel's module docs), and when it finds
//!   items there it runs the channel's drain loop on its own thread: the items reach
//!   this ring and then downstream without the producer's thread doing more than
//!   one compare-and-swap per item. The mark and the look after it are the ones
//!   above: the drain clears both marks before its fence, and a sender reads the
//!   channel's after its claim. The channel counts its watchers (several
//!   subscribers' drains behind a hub): each drain passes on only the changes of
//!   its mark, and a drain dropped with its mark set takes it back.
//! * **Pulling a hub's subscriber.** Right behind a [`share`](crate::PublisherExt::share)
//!   hub's subscriber, the drain also *adopts* it when it subscribes: the hub then
//!   wakes the drain instead of running the subscriber's pass on the thread that
//!   fed it, and the drain's pass, finding the subscriber marked woken, runs that
//!   pass first, on the drain's thread, so the items land in this ring from there
//!   (see [`hub`](crate::hub)). The mark is set before the signal, which orders it
//!   before the pass the signal asks for.
//! * **Downstream** `request` adds demand and asks for a pass; `cancel` cancels
//!   upstream at once and the next pass drops the queued items and the subscriber.
//!   A subscriber that panics is treated the same way (rule 2.13), and so is a
//!   scheduler that drops the drain's task (shut down), except that downstream then
//!   receives an error of kind [`SchedulerShutdown`](crate::ErrorKind::SchedulerShutdown).
//!
//! # Time bounds and statistics
//!
//! With [`publish_on_with`](crate::PublisherExt::publish_on_with) the producer reads
//! the scheduler's clock once per pushed batch and records `(end position, instant)`
//! in a side ring (capacity `prefetch`: every recorded batch holds at least one queued
//! item). The drain drops items older than `max_age` at dequeue (reason `Expired`,
//! handed to downstream's drop hook, counted); stamps only grow, so the expired items
//! are always a prefix of the ring and a pass checks one stamp per batch, not per
//! item. Adaptive LIFO and CoDel do not apply here: the ring is credit-bounded (it
//! never holds more than upstream was asked for, so no standing queue forms that newer
//! items could overtake or that CoDel would cut) and single-consumer FIFO by
//! construction; asking for either panics.
//!
//! The drain derives the queue statistics from the ring's own positions (no extra
//! shared counter): enqueued = published tail, dequeued = head, depth = their
//! difference. The depth goes out once per pass; the counts in and out (which feed
//! the rates under the gauge's lock, at a clock reading) go out with it when the
//! pass read the clock anyway, and otherwise once 64 items moved: a drain that
//! delivers one item per pass (a producer sending one at a time) would pay a clock
//! reading and a lock per item. A snapshot publishes what the drain holds back first
//! (the core is the gauge's sweeper), so it stays exact.

use std::sync::Arc;

use crate::drain::Upstream;
use crate::metrics::{DropHook, DropReporter, QueueGauge, QueueMonitor};
use crate::queue::spsc::{self, Producer};
use crate::queue::TimeBounds;
use crate::runtime::Scheduler;
use crate::stage::core::SharedUpstream;
use crate::stage::{window, Core};
use crate::{DropReason, Error, Publisher, Subscriber, Subscription};

use boundary::{Boundary, Queue, Stamp};

mod boundary;
#[cfg(all(test, weir_loom))]
mod loom_tests;

/// The stage's name in drop reports.
const STAGE: &str = "publish_on";

/// The producer publishes a large batch in runs of this many items.
const PUBLISH_RUN: usize = 64;

/// Publisher for the [`publish_on`](crate::PublisherExt::publish_on) and
/// [`publish_on_with`](crate::PublisherExt::publish_on_with) methods.
///
/// Clones share the [`monitor`](Self::monitor).
#[derive(Clone)]
#[must_use = "publishers do nothing until subscribed"]
pub struct PublishOn<P, S> {
    source: P,
    scheduler: S,
    prefetch: usize,
    /// `Some` for `publish_on_with`: stamp batches, apply the bounds.
    bounds: Option<TimeBounds>,
    gauge: Arc<QueueGauge>,
    /// An upstream error overtakes the queued items ([`errors_first`](Self::errors_first)).
    errors_first: bool,
}

impl<P, S> std::fmt::Debug for PublishOn<P, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublishOn")
            .field("prefetch", &self.prefetch)
            .field("bounds", &self.bounds)
            .field("errors_first", &self.errors_first)
            .finish_non_exhaustive()
    }
}

impl<P, S: Scheduler + Clone> PublishOn<P, S> {
    #[track_caller]
    pub(crate) fn new(source: P, scheduler: S, prefetch: u64, bounds: Option<TimeBounds>) -> Self
    where
        P: Publisher,
    {
        // The ring (and the stamps' beside it) is allocated whole when upstream
        // subscribes: its size in bytes is checked here, where the item type is known.
        let slot_bytes =
            std::mem::size_of::<P::Item>() + bounds.map_or(0, |_| std::mem::size_of::<Stamp>());
        let prefetch = window::validate_ring("publish_on prefetch", prefetch, slot_bytes);
        if let Some(bounds) = bounds {
            assert!(
                bounds.get_adaptive_lifo().is_none() && bounds.get_codel().is_none(),
                "publish_on_with: adaptive LIFO and CoDel do not apply to an async boundary \
                 (its ring is credit-bounded FIFO: no standing queue forms); use \
                 TimeBounds::none().max_age(..) only"
            );
        }
        let gauge = QueueGauge::new(prefetch, Arc::new(scheduler.clone()));
        PublishOn {
            source,
            scheduler,
            prefetch,
            bounds,
            gauge,
            errors_first: false,
        }
    }

    /// Deliver an upstream error (or the rule 1.1 error of an upstream that overfills
    /// the ring) at once, without demand, dropping the queued items, instead of after
    /// them. The dropped items are not reported as drops: as on cancel, the stream
    /// ended; nothing was lost for lack of room.
    ///
    /// By default the error waits behind the queued items, as completion does, so a
    /// subscriber that requests gets every item upstream produced before it failed;
    /// one that never requests again never hears of the failure. Choose this when an
    /// error must reach the subscriber at once. This is the same choice, with the same
    /// default, as every other stage that holds items
    /// ([`OnBackpressureBuffer::errors_first`](crate::operators::OnBackpressureBuffer::errors_first)).
    ///
    /// ```
    /// # #[cfg(feature = "tck")] {
    /// use weir::prelude::*;
    /// use weir::runtime::Immediate;
    /// use weir::tck::TestSubscriber;
    ///
    /// let failing = weir::range(0u32..5).concat(weir::error(weir::Error::msg("link down")));
    /// let subscriber = TestSubscriber::new().request_on_subscribe(1);
    /// let probe = subscriber.probe();
    /// failing.publish_on(Immediate, 8).errors_first().subscribe(subscriber);
    /// // Item 0 was delivered; 1..5 were queued when the error came, and are dropped.
    /// probe.assert_items(&[0]);
    /// assert_eq!(probe.assert_error().message(), "link down");
    /// # }
    /// ```
    pub fn errors_first(mut self) -> Self {
        self.errors_first = true;
        self
    }

    /// Statistics of the boundary's queue (depth, enqueued, dequeued, expired drops,
    /// rates, lag; the oldest item's age only with
    /// [`publish_on_with`](crate::PublisherExt::publish_on_with), which stamps batches).
    /// Updated once per drain pass. The handle may be read from any thread.
    pub fn monitor(&self) -> QueueMonitor {
        QueueMonitor::new(self.gauge.clone())
    }
}

impl<P, S> Publisher for PublishOn<P, S>
where
    P: Publisher,
    S: Scheduler + Clone,
{
    type Item = P::Item;

    fn subscribe<D>(self, subscriber: D)
    where
        D: Subscriber<P::Item> + Send + 'static,
    {
        self.source.subscribe(Producing {
            phase: Phase::Waiting {
                downstream: subscriber,
                scheduler: self.scheduler,
            },
            prefetch: self.prefetch,
            bounds: self.bounds,
            gauge: self.gauge,
            errors_first: self.errors_first,
            hook: None,
            drops: DropReporter::new(STAGE, None),
            upstream: Upstream::Idle,
        })
    }

    fn in_flight_bound(&self) -> u64 {
        self.source
            .in_flight_bound()
            .saturating_add(self.prefetch as u64)
    }

    fn queue_monitor(&self) -> Option<QueueMonitor> {
        Some(self.monitor())
    }
}

/// The boundary's core.
type BoundaryCore<T, C, D> = Core<Boundary<T, C>, D>;

/// The upstream-facing subscriber: the ring's writing end.
struct Producing<T, D, C>
where
    T: Send + 'static,
    D: Subscriber<T> + Send + 'static,
    C: Scheduler + Clone,
{
    /// Where the subscription stands.
    phase: Phase<T, D, C>,
    prefetch: usize,
    bounds: Option<TimeBounds>,
    gauge: Arc<QueueGauge>,
    errors_first: bool,
    /// Downstream's drop hook, asked for once at subscribe time.
    hook: Option<DropHook>,
    /// Reports items refused by a full ring (upstream broke rule 1.1).
    drops: DropReporter,
    /// Life-cycle state (rules 2.5, 1.7).
    upstream: Upstream,
}

/// The producer's phases.
enum Phase<T: Send + 'static, D, C: Scheduler> {
    /// Before `on_subscribe`: downstream and the scheduler, to attach.
    Waiting { downstream: D, scheduler: C },
    /// Subscribed: the rings' writing ends and the core.
    Running {
        /// The item ring's writing end.
        producer: Producer<T>,
        /// The stamp ring's writing end (`publish_on_with` only).
        stamps: Option<Producer<Stamp>>,
        /// The boundary.
        core: Arc<BoundaryCore<T, C, D>>,
    },
    /// Attached and over, or refused (a second subscription).
    Gone,
}

impl<T, D, C> Producing<T, D, C>
where
    T: Send + 'static,
    D: Subscriber<T> + Send + 'static,
    C: Scheduler + Clone,
{
    /// Upstream delivered more than it was asked for: drop the rest, cancel upstream,
    /// and fail after the queued items.
    #[cold]
    fn overflow(&mut self, core: &BoundaryCore<T, C, D>, rest: impl Iterator<Item = T>) {
        let mut refused = 0u64;
        for item in rest {
            refused += 1;
            self.drops.drop_item(DropReason::OverflowNewest, item);
        }
        self.drops.flush();
        let boundary = core.stage();
        boundary.gauge.dropped(DropReason::OverflowNewest, refused);
        self.upstream.finish();
        boundary.upstream.cancel();
        boundary.finish(Err(Error::spec_violation(
            "1.1",
            format!(
                "publish_on: upstream delivered more items than requested (ring of {} full, \
                 {refused} more refused); rule 1.1",
                self.prefetch
            ),
        )));
        core.signal();
    }

    fn terminate(&mut self, end: Result<(), Error>) {
        if let (true, Phase::Running { core, .. }) = (self.upstream.finish(), &self.phase) {
            core.stage().upstream.finished();
            core.stage().finish(end);
            core.signal();
        }
    }
}

impl<T, D, C> Drop for Producing<T, D, C>
where
    T: Send + 'static,
    D: Subscriber<T> + Send + 'static,
    C: Scheduler + Clone,
{
    /// Released by upstream without a terminal signal (a publisher that ended
    /// without telling, or whose thread panicked holding it): downstream gets the
    /// queued items and then an error of kind
    /// [`Cancelled`](crate::ErrorKind::Cancelled) instead of waiting for ever. A
    /// no-op after the end or the stage's cancel; before `on_subscribe`, downstream
    /// is dropped with it.
    fn drop(&mut self) {
        if let Phase::Running { core, .. } = &self.phase {
            // After the stage's own cancel, upstream let go as asked.
            if core.stage().upstream.is_done() {
                return;
            }
        }
        self.terminate(Err(crate::guard::abandoned(STAGE)));
    }
}

impl<T, D, C> Subscriber<T> for Producing<T, D, C>
where
    T: Send + 'static,
    D: Subscriber<T> + Send + 'static,
    C: Scheduler + Clone,
{
    fn on_subscribe(&mut self, subscription: Subscription) {
        if !self.upstream.accept(&subscription) {
            return;
        }
        let Phase::Waiting {
            downstream,
            scheduler,
        } = std::mem::replace(&mut self.phase, Phase::Gone)
        else {
            return;
        };
        self.hook = downstream.drop_hook();
        self.drops = DropReporter::new(STAGE, self.hook.clone());
        let (producer, items) = spsc::ring(self.prefetch);
        let (stamps, stamp_reader) = match self.bounds {
            Some(_) => {
                let (p, c) = spsc::ring(self.prefetch);
                (Some(p), Some(c))
            }
            None => (None, None),
        };
        let core = Core::new(Boundary::new(
            SharedUpstream::new(subscription.clone()),
            scheduler,
            self.gauge.clone(),
            self.bounds.and_then(|b| b.get_max_age()),
            items.watch(),
            self.prefetch > PUBLISH_RUN,
            self.errors_first,
        ));
        // A snapshot publishes the counts the drain holds back first.
        let sweeper = Arc::downgrade(&core);
        self.gauge.set_sweeper(sweeper);
        let queue = Queue::new(
            items,
            stamp_reader,
            self.prefetch as u64,
            DropReporter::new(STAGE, self.hook.clone()),
        );
        // Downstream's on_subscribe runs here, on upstream's thread; what it requests
        // is served by a task on the scheduler.
        core.attach(queue, downstream);
        if let Some(pull) = subscription.pull() {
            // Upstream may then hand its deliveries to the drain's thread (a hub's
            // subscriber: see the hub's module docs).
            let drain = Arc::downgrade(&core);
            pull.adopt(drain);
        }
        let cancelled = core.is_stopping();
        self.phase = Phase::Running {
            producer,
            stamps,
            core,
        };
        if !cancelled {
            subscription.request(self.prefetch as u64);
        }
    }

    fn on_next(&mut self, item: T) {
        let _no_credit = self.on_next_batch(std::iter::once(item));
    }

    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        if !self.upstream.is_active() {
            return 0;
        }
        let Phase::Running {
            producer,
            stamps,
            core,
        } = &mut self.phase
        else {
            return 0;
        };
        if core.is_over() {
            // The drain is gone: nothing would ever read these.
            return 0;
        }
        let mut items = items;
        let written = match stamps.as_mut() {
            // Stamped: the batch's stamp must be recorded before any of its items is
            // visible, so the whole batch is published at once.
            Some(stamps) => {
                let written = producer.write(&mut items);
                if written > 0 {
                    // A panic of the clock is kept for the drain (see `Boundary::now`).
                    let stamp = (producer.position(), core.stage().now());
                    let recorded = stamps.push(stamp).is_ok();
                    debug_assert!(recorded, "the stamp ring has a slot per queued item");
                    producer.publish();
                }
                written
            }
            // Unstamped: publish every `PUBLISH_RUN` items, so the consumer starts on
            // a large batch while the rest is still being written; wake an idle drain
            // after the first run (and, as always, once at the end).
            None => {
                let mut written = 0;
                loop {
                    let run = producer.write(&mut items.by_ref().take(PUBLISH_RUN));
                    producer.publish();
                    if written == 0 && run == PUBLISH_RUN {
                        core.notify();
                    }
                    written += run;
                    if run < PUBLISH_RUN {
                        break;
                    }
                }
                written
            }
        };
        if let Some(first) = items.next() {
            // Cold: a clone, so the ring's ends and `self` can be borrowed again.
            let core = core.clone();
            self.overflow(&core, std::iter::once(first).chain(items));
        } else if written > 0 {
            core.notify();
        }
        // Credit goes upstream from the drain, through `Replenish`.
        0
    }

    fn drop_hook(&self) -> Option<DropHook> {
        match &self.phase {
            Phase::Waiting { downstream, .. } => downstream.drop_hook(),
            _ => self.hook.clone(),
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
