//! The consumer side of the boundary: the stage on the signal core that drains the
//! ring on the scheduler (see the parent module for the algorithm).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::demand::{AtomicDemand, Replenish};
use crate::loom::{AtomicBool, Mutex, Ordering, Padded};
use crate::metrics::{DropReporter, QueueGauge, Sweep};
use crate::queue::spsc::{Consumer, Watch};
use crate::runtime::Scheduler;
use crate::spec::PullMark;
use crate::stage::core::Drive;
use crate::stage::core::SharedUpstream;
use crate::stage::Core;
use crate::stage::{Cx, Pass, Stage};
use crate::{DropReason, Error, Subscriber};

/// Items one pass delivers before it yields its task (fairness to the scheduler's
/// other tasks; and a synchronous upstream that refills the ring from inside the
/// pass's own replenish would otherwise keep one task running for ever, deaf to a
/// scheduler shutting down).
const PASS_BUDGET: u64 = 16 * 1024;

/// Items in and out a drain of an unstamped ring holds back before it reads the clock
/// and publishes them to the gauge's rates (see [`Boundary::record`]).
const HOLD: u64 = 64;

/// Items a pass delivers between two publications of its counts (besides the one at
/// its end).
const RECORD_EVERY: u64 = 256;

/// A pass that finds fewer items than this arrived since the last makes the drain's
/// next task watch the ring (see the parent module).
const TRICKLE: u64 = 4;

/// A batch stamp: the position one past the batch's last item, and when it arrived.
pub(super) type Stamp = (usize, Instant);

/// What the producer and the drain share.
pub(super) struct Boundary<T, C> {
    /// How the stream ended; delivered after the last queued item. First end wins.
    end: Mutex<Option<Result<(), Error>>>,
    /// Set (Release) after `end` is stored: the items published before it are
    /// visible to whoever sees it (Acquire).
    ended: AtomicBool,
    /// Upstream's subscription: replenished by the drain, cancelled on cancel.
    pub(super) upstream: SharedUpstream,
    scheduler: C,
    pub(super) gauge: Arc<QueueGauge>,
    max_age: Option<Duration>,
    /// The ring's fill, for a lingering drain that watches (see the parent module).
    watch: Watch<T>,
    /// The drain watches always: a batch may span several published runs.
    always_watch: bool,
    /// The drain's last passes found items arriving a few at a time (fewer than
    /// [`TRICKLE`]): its next task watches (see the parent module). Written by the
    /// drain when it changes, read by the drain's next task. A hint that orders
    /// nothing (either answer is safe), so std's atomic even in loom builds.
    trickle: std::sync::atomic::AtomicBool,
    /// An upstream error overtakes the queued items instead of waiting behind them.
    errors_first: bool,
    /// Items arrived and delivered that the drain has not yet published to the
    /// gauge's rates ([`record`](Self::record)); taken by whoever publishes them: the
    /// drain, or a snapshot's sweep.
    /// On a block of its own: the drain writes it at every pass, and the producer
    /// reads the fields around it at every batch.
    held: Padded<Held>,
    /// This drain's mark on upstream's [`Pull`](crate::spec::Pull), if it has one.
    pull_mark: PullMark,
    /// The first panic of the gauge's clock (a user scheduler's `now`): the drain's
    /// next pass ends the stream with it ([`now`](Self::now)).
    clock_failure: std::sync::OnceLock<Error>,
}

/// Items arrived and delivered held back by the drain. Statistics that order nothing,
/// so std's atomics even in loom builds (loom's would only multiply the models'
/// branches).
struct Held {
    arrived: std::sync::atomic::AtomicU64,
    delivered: std::sync::atomic::AtomicU64,
}

/// The consumer's side of the ring: what only the drain owner touches.
pub(super) struct Queue<T> {
    /// The ring's reading end.
    items: Consumer<T>,
    /// The stamp ring's reading end (`publish_on_with` only).
    stamps: Option<Consumer<Stamp>>,
    /// Upstream credit: the 75% rule.
    replenish: Replenish,
    /// Reports expired items.
    drops: DropReporter,
    /// The tail counted into the gauge so far.
    counted_tail: usize,
    /// Items delivered in this pass.
    delivered: u64,
    /// Items expired in this pass.
    expired: u64,
    /// Items in and out held back since the drain last published (see
    /// [`Boundary::record`]).
    held: u64,
}

impl<T> Queue<T> {
    pub(super) fn new(
        items: Consumer<T>,
        stamps: Option<Consumer<Stamp>>,
        prefetch: u64,
        drops: DropReporter,
    ) -> Self {
        Queue {
            items,
            stamps,
            replenish: Replenish::new(prefetch),
            drops,
            counted_tail: 0,
            delivered: 0,
            expired: 0,
            held: 0,
        }
    }
}

impl<T, C> Boundary<T, C> {
    pub(super) fn new(
        upstream: SharedUpstream,
        scheduler: C,
        gauge: Arc<QueueGauge>,
        max_age: Option<Duration>,
        watch: Watch<T>,
        always_watch: bool,
        errors_first: bool,
    ) -> Self {
        Boundary {
            end: Mutex::new(None),
            ended: AtomicBool::new(false),
            upstream,
            scheduler,
            gauge,
            max_age,
            watch,
            always_watch,
            trickle: std::sync::atomic::AtomicBool::new(false),
            errors_first,
            held: Padded::new(Held {
                arrived: std::sync::atomic::AtomicU64::new(0),
                delivered: std::sync::atomic::AtomicU64::new(0),
            }),
            pull_mark: PullMark::default(),
            clock_failure: std::sync::OnceLock::new(),
        }
    }

    /// The gauge's clock now. A panic of it (user code: a scheduler's `now`) is
    /// kept for the drain's pass to end the stream with, and the reading falls back
    /// to `Instant::now()`, so that the stamp or rate it is taken for stays whole.
    pub(super) fn now(&self) -> Instant {
        crate::guard::catch(|| self.gauge.now()).unwrap_or_else(|error| {
            let _first_kept = self.clock_failure.set(error.in_stage("publish_on"));
            Instant::now()
        })
    }

    /// Upstream ended (or broke rule 1.1): park the end behind the queued items. The
    /// caller then signals the core.
    pub(super) fn finish(&self, end: Result<(), Error>) {
        {
            let mut slot = self.end.lock().unwrap_or_else(|p| p.into_inner());
            if slot.is_none() {
                *slot = Some(end);
            }
        }
        // Release: pairs with the drain's Acquire load; the items published before
        // (and the end just stored) are visible once it is seen.
        self.ended.store(true, Ordering::Release);
    }

    /// With `errors_first`, a parked error, taken: it is delivered before the queued
    /// items (the stop that follows drops them). `None` otherwise.
    fn overtaking_error(&self) -> Option<Error> {
        if !self.errors_first {
            return None;
        }
        let mut slot = self.end.lock().unwrap_or_else(|p| p.into_inner());
        match slot.take() {
            Some(Err(error)) => Some(error),
            other => {
                *slot = other;
                None
            }
        }
    }

    fn take_end(&self) -> Result<(), Error> {
        self.end
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .unwrap_or(Ok(()))
    }

    /// Take the counts the drain held back.
    fn take_held(&self) -> (u64, u64) {
        // Relaxed: statistics (see `record`).
        (
            self.held.arrived.swap(0, Ordering::Relaxed),
            self.held.delivered.swap(0, Ordering::Relaxed),
        )
    }

    /// Publish the counts the drain held back, at the gauge's clock now.
    pub(super) fn publish_held(&self) {
        // The depth from the ring's own positions: a drain that delivers to a slow
        // subscriber records at its batches, and the ring refills meanwhile.
        self.gauge.depth(self.watch.len());
        let (arrived, delivered) = self.take_held();
        if arrived > 0 || delivered > 0 {
            self.gauge.moved(arrived, arrived, delivered, self.now());
        }
    }
}

/// A snapshot of the boundary's queue first publishes the counts its drain holds
/// back (see [`Boundary::record`]).
impl<T, C, D> Sweep for Core<Boundary<T, C>, D>
where
    T: Send + 'static,
    C: Scheduler,
    D: Subscriber<T> + Send + 'static,
{
    fn sweep(&self) {
        self.stage().publish_held();
    }
}

impl<T: Send + 'static, C: Scheduler> Boundary<T, C> {
    /// Publish the pass's statistics to the gauge, from the ring's own positions. The
    /// depth goes out at every pass (two stores). The counts in and out, which feed
    /// the rates under the gauge's lock at a clock reading, go out with them when the
    /// pass read the clock anyway (a stamped ring) or expired items; otherwise they
    /// are held back in two atomics until [`HOLD`] items moved, so a drain that
    /// delivers an item or two per pass (a producer sending one item at a time) does
    /// not read the clock and take the lock per item. A snapshot's sweep publishes
    /// what is held first ([`publish_held`](Self::publish_held)), so snapshots stay
    /// exact; the held counts take the instant of whoever publishes them.
    fn record(&self, queue: &mut Queue<T>, now: Option<Instant>) {
        let tail = queue.items.seen_tail();
        let arrived = tail.wrapping_sub(queue.counted_tail) as u64;
        let delivered = std::mem::take(&mut queue.delivered);
        let expired = std::mem::take(&mut queue.expired);
        if arrived == 0 && delivered == 0 && expired == 0 {
            return;
        }
        queue.counted_tail = tail;
        if arrived > 0 {
            let trickle = arrived < TRICKLE;
            // Relaxed: a hint for the drain's own next task.
            if self.trickle.load(Ordering::Relaxed) != trickle {
                self.trickle.store(trickle, Ordering::Relaxed);
            }
        }
        let depth = queue.items.cached();
        if now.is_none() && expired == 0 && queue.held + arrived + delivered < HOLD {
            // Relaxed: statistics; the sweep takes them with `swap`.
            self.held.arrived.fetch_add(arrived, Ordering::Relaxed);
            self.held.delivered.fetch_add(delivered, Ordering::Relaxed);
            queue.held += arrived + delivered;
            self.gauge.level(depth, None);
            return;
        }
        queue.held = 0;
        let (held_in, held_out) = self.take_held();
        let (arrived, delivered) = (arrived + held_in, delivered + held_out);
        let now = now.unwrap_or_else(|| self.now());
        self.gauge.moved(arrived, arrived, delivered, now);
        if expired > 0 {
            self.gauge.dropped(DropReason::Expired, expired);
        }
        let oldest = match (depth, queue.stamps.as_mut()) {
            (0, _) | (_, None) => None,
            (_, Some(stamps)) => stamps.peek().map(|(_, at)| at),
        };
        self.gauge.level(depth, oldest);
    }

    /// Deliver while there are items and demand; the end once the ring is empty (an
    /// error at once, with `errors_first`).
    fn deliver<D: Subscriber<T>>(
        &self,
        cx: &Cx<'_>,
        subscriber: &mut D,
        queue: &mut Queue<T>,
        now: Option<Instant>,
    ) -> Pass {
        let mut delivered = 0u64;
        loop {
            if cx.stopped() {
                return Pass::Idle;
            }
            if delivered >= PASS_BUDGET {
                return Pass::Yield;
            }
            // Acquire: pairs with the Release in `finish`.
            let ended = self.ended.load(Ordering::Acquire);
            if ended {
                if let Some(error) = self.overtaking_error() {
                    return cx.terminate(subscriber, Err(error));
                }
            }
            let mut available = queue.items.available();
            if let (Some(max_age), Some(now), Some(stamps)) =
                (self.max_age, now, queue.stamps.as_mut())
            {
                let gone = expire(&mut queue.items, stamps, &mut queue.drops, now, max_age);
                if let Some(error) = queue.drops.failure() {
                    // The drop hook (or an expired item's `Drop`) panicked: the stage
                    // fails as if its own code had; ending cancels upstream and drops
                    // what the ring holds before the error goes out.
                    queue.expired += gone;
                    return cx.terminate(subscriber, Err(error));
                }
                if gone > 0 {
                    queue.expired += gone;
                    available = queue.items.cached();
                    if let Some(n) = queue.replenish.on_consumed(gone) {
                        self.upstream.request(n);
                    }
                }
            }
            if available == 0 {
                if !ended {
                    return Pass::Idle;
                }
                // Everything published before the end is visible now: if the ring is
                // still empty, it is empty for good.
                if queue.items.available() == 0 {
                    return cx.terminate(subscriber, self.take_end());
                }
                continue;
            }
            let wanted = cx.demand().get();
            if wanted == 0 {
                return Pass::Idle;
            }
            let n = usize::try_from(wanted).unwrap_or(usize::MAX).min(available);
            if let Some(stamps) = queue.stamps.as_mut() {
                retire(stamps, queue.items.position().wrapping_add(n));
            }
            // Items a cancelling subscriber leaves in the batch are dropped with it.
            cx.deliver(subscriber, queue.items.pop_batch(n));
            queue.delivered += n as u64;
            delivered += n as u64;
            if delivered % RECORD_EVERY < n as u64 {
                // A long pass (a slow subscriber, a ring that keeps refilling)
                // publishes its counts on the way, so rates and lag stay current.
                self.record(queue, None);
            }
            if let Some(more) = queue.replenish.on_consumed(n as u64) {
                self.upstream.request(more);
            }
        }
    }
}

/// A drain whose last task left its mark on upstream's ring (a task the scheduler
/// dropped unrun, after one that handed the loop on while watching) takes it back:
/// upstream's senders would otherwise skip their signal for a watcher that is gone.
impl<T, C> Drop for Boundary<T, C> {
    fn drop(&mut self) {
        if let Some(pull) = self.upstream.pull() {
            self.pull_mark.release(&**pull);
        }
    }
}

impl<T: Send + 'static, C: Scheduler> Stage for Boundary<T, C> {
    const NAME: &'static str = "publish_on";
    type Item = T;
    type Owned = Queue<T>;
    type Padding = crate::loom::Block;

    fn drive(&self) -> Drive<'_> {
        Drive::Scheduled {
            on: &self.scheduler,
            linger: true,
        }
    }

    fn pass<D: Subscriber<T>>(
        &self,
        cx: &Cx<'_>,
        queue: &mut Queue<T>,
        subscriber: &mut D,
    ) -> Pass {
        if let Some(pull) = self.upstream.pull() {
            if pull.ready() {
                // Upstream's drain loop, here: its batch lands in our ring before
                // we deliver from it.
                pull.pull();
            }
        }
        let now = queue.stamps.is_some().then(|| self.now());
        let pass = self.deliver(cx, subscriber, queue, now);
        queue.drops.flush();
        self.record(queue, now);
        match self.clock_failure.get() {
            // The clock panicked (here, or on the producer's side): not the
            // subscriber's panic, so the subscriber gets it.
            Some(error) if pass != Pass::Over => cx.terminate(subscriber, Err(error.clone())),
            _ => pass,
        }
    }

    /// Cancel upstream and drop what the ring holds (each item's `Drop` contained).
    fn stop(&self, queue: &mut Queue<T>) {
        self.upstream.cancel();
        clear(&mut queue.items, &mut queue.stamps);
        self.record(queue, None);
        self.publish_held();
    }

    fn on_cancel(&self) {
        // Stop the producer at once, not at the drain's next turn.
        self.upstream.cancel();
    }

    /// Items published since the last signal, and demand for them. Without it a
    /// drain that caught up with a batch being written would wait for the batch's
    /// end signal while the producer runs on, and the two sides take turns instead
    /// of overlapping.
    ///
    /// Also items upstream's senders left in its ring for us to pull (a channel:
    /// see [`Pull`](crate::spec::Pull)), read from the ring's next slot.
    fn has_work(&self, demand: &AtomicDemand) -> bool {
        (self.watch.has_items() && demand.get() > 0)
            || self.upstream.pull().is_some_and(|pull| pull.ready())
    }

    /// As `has_work`, but of upstream's ring only a run of written items counts
    /// ([`Pull::ready_run`](crate::spec::Pull::ready_run), read at the run's last
    /// slot): a drain that pulled each item as soon as it was written took the
    /// line a sender was still filling, item after item (a `try_send` per item
    /// behind `publish_on(pool, 256)`: 30.0–40.1 ms per 1M items polling the next
    /// slot, 17.8–19.4 polling for a run, builds alternated). Fewer items are taken
    /// when the polls end (the core then asks `has_work`).
    fn has_work_run(&self, demand: &AtomicDemand) -> bool {
        (self.watch.has_items() && demand.get() > 0)
            || self.upstream.pull().is_some_and(|pull| pull.ready_run())
    }

    /// As `has_work`, but upstream's ring is read at its claims: after the fence
    /// that ends our watching, a claim is either seen here or its sender saw the mark
    /// cleared and signals.
    fn has_work_after_fence(&self, demand: &AtomicDemand) -> bool {
        (self.watch.has_items() && demand.get() > 0)
            || self.upstream.pull().is_some_and(|pull| pull.claimed())
    }

    /// Upstream's senders skip their signal while we watch its ring too.
    fn watched(&self, on: bool) {
        if let Some(pull) = self.upstream.pull() {
            self.pull_mark.set(&**pull, on);
        }
    }

    const WATCHED: bool = true;

    fn watches(&self) -> bool {
        // Relaxed: a hint written by the drain itself.
        self.always_watch || self.trickle.load(Ordering::Relaxed)
    }
}

/// `a <= b` for wrapping ring positions less than half the range apart.
#[inline]
fn at_or_before(a: usize, b: usize) -> bool {
    b.wrapping_sub(a) <= usize::MAX / 2
}

/// Drop the items at the head that waited longer than `max_age` (a prefix: stamps
/// only grow). Returns how many.
fn expire<T: 'static>(
    items: &mut Consumer<T>,
    stamps: &mut Consumer<Stamp>,
    drops: &mut DropReporter,
    now: Instant,
    max_age: Duration,
) -> u64 {
    let mut gone = 0u64;
    loop {
        let available = items.cached();
        if available == 0 {
            return gone;
        }
        let head = items.position();
        retire(stamps, head);
        let Some((end, at)) = stamps.peek() else {
            return gone;
        };
        if now.saturating_duration_since(at) <= max_age {
            return gone;
        }
        let n = end.wrapping_sub(head).min(available);
        retire(stamps, head.wrapping_add(n));
        for item in items.pop_batch(n) {
            drops.drop_item(DropReason::Expired, item);
        }
        gone += n as u64;
    }
}

/// Pop the stamps of batches that end at or before `position`. Called before the
/// head moves to `position`, so the producer never finds the stamp ring full (it has
/// as many slots as the item ring, and every stamp left describes a queued item).
fn retire(stamps: &mut Consumer<Stamp>, position: usize) {
    while let Some((end, _)) = stamps.peek() {
        if !at_or_before(end, position) {
            return;
        }
        let _ = stamps.pop();
    }
}

/// Drop every readable item (cancellation, termination).
fn clear<T>(items: &mut Consumer<T>, stamps: &mut Option<Consumer<Stamp>>) {
    match stamps.as_mut() {
        Some(stamps) => {
            let n = items.available();
            retire(stamps, items.position().wrapping_add(n));
            drop(items.pop_batch(n));
        }
        None => {
            items.clear();
        }
    }
}
