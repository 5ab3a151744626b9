//! `publish_on`: an async boundary. Upstream's items go into a bounded lock-free ring;
//! one drain loop, run as a task on a [`Scheduler`], delivers them downstream.
//!
//! Demand contract: Prefetch. Upstream is asked for `prefetch` items at subscribe
//! time and then, through [`Replenish`] (the 75% rule), for what was consumed each
//! time `prefetch - prefetch / 4` items left the ring. Outstanding upstream demand
//! therefore never exceeds `prefetch`, and the ring has exactly `prefetch` slots: a
//! full ring means upstream broke rule 1.1, which fails the stream with an error
//! naming the rule. Downstream's demand is an [`AtomicDemand`]; the drain delivers
//! up to it, one `on_next_batch` per run of items, and adds the batch credit the
//! batch returns. In-flight bound: upstream's plus `prefetch`.
//!
//! # Who runs what
//!
//! * Upstream's thread (the producer) runs `on_next` / `on_next_batch`: it writes the
//!   items into the ring ([`spsc`]) and publishes them with one index store per
//!   batch, then signals the drain: one [`Wip::enter`] per batch. If the loop was idle
//!   that schedules one drain task; if it is running the increment makes it go round
//!   again. `on_subscribe` calls downstream's `on_subscribe` on upstream's thread
//!   (as Reactor does), then requests `prefetch`.
//! * The drain task (the consumer, on the scheduler) owns the ring's reading end and
//!   the downstream subscriber, both in a mutex only the `Wip` owner locks. A pass:
//!   handle cancel / `request(0)`; drop expired items (with `max_age`); deliver
//!   `min(demand, readable)` items in one `on_next_batch`; settle demand and credit
//!   once; replenish upstream; repeat while items and demand remain; deliver the
//!   terminal signal once the ring is empty; update the queue gauge once.
//! * Downstream's `request` adds demand and signals; `cancel` sets a flag, cancels
//!   upstream at once, and signals so the drain drops the queued items and the
//!   subscriber.
//!
//! Before leaving the loop the drain waits up to 50 µs for more work (new items with
//! demand, or a flag): half a microsecond of pure spinning, then polling with
//! `yield_now` in between, so that when threads outnumber cores the other side of the
//! boundary gets the CPU it needs. On a busy boundary the next batch arrives within
//! that window, and keeping the loop saves a task hand-off and a wake-up per batch;
//! after it the loop is released and the pool parks its worker, so an idle boundary
//! burns no CPU.
//!
//! # Time bounds and statistics
//!
//! With [`publish_on_with`](crate::PublisherExt::publish_on_with) the producer reads
//! the scheduler's clock once per pushed batch and records `(end position, instant)`
//! in a side ring (capacity `prefetch`: every recorded batch holds at least one queued
//! item). The drain drops items older than `max_age` at dequeue (reason `Expired`,
//! handed to downstream's drop hook, counted); stamps only grow, so the expired items
//! are always a prefix of the ring and a pass checks one stamp per batch, not per
//! item. Adaptive LIFO does not apply here: the ring is credit-bounded (it never holds
//! more than upstream was asked for, so no standing queue forms that newer items could
//! overtake) and single-consumer FIFO by construction; asking for it panics.
//!
//! The drain derives the queue statistics from the ring's own positions (no extra
//! shared counter): enqueued = published tail, dequeued = head, depth = their
//! difference, updated once per pass.
//!
//! Panics in downstream (rule 2.13) are caught: the boundary cancels upstream, drops
//! the queued items and the subscriber, and logs. States ([`Upstream`]): `Idle` →
//! `Active` → `Done`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::demand::{self, AtomicDemand, Replenish};
use crate::drain::{Upstream, Wip};
use crate::guard::catch;
use crate::loom::{AtomicU8, Mutex, MutexGuardOf, Ordering};
use crate::metrics::{DropHook, DropReporter, QueueGauge, QueueMonitor};
use crate::queue::spsc::{self, Consumer, Producer};
use crate::queue::{TimeBounds, MAX_CAPACITY};
use crate::runtime::Scheduler;
use crate::{DropReason, Error, Publisher, RawSubscription, Subscriber, Subscription};

/// The stage's name in drop reports.
const STAGE: &str = "publish_on";

/// Flag: downstream cancelled.
const CANCELLED: u8 = 1;
/// Flag: downstream called `request(0)` (rule 3.9).
const BAD_REQUEST: u8 = 2;
/// Flag: the end (`Shared::end`) is set; it follows the last item in the ring.
const DONE: u8 = 4;

/// How long the drain (and `subscribe_on`'s forwarder) waits for more work before it
/// leaves the loop: spinning for the first [`SPIN`], then yielding the CPU between
/// checks (on a machine with more runnable threads than cores, a pure spin would keep
/// the other side of the boundary off the CPU it needs to make progress).
#[cfg(not(weir_loom))]
const WAIT: Duration = Duration::from_micros(50);
/// The pure-spin part of [`WAIT`].
#[cfg(not(weir_loom))]
const SPIN: Duration = Duration::from_nanos(500);

/// Poll `ready` for up to [`WAIT`] (spin, then yield); true as soon as it holds.
#[cfg(not(weir_loom))]
#[inline]
pub(super) fn wait_briefly(mut ready: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    let mut polls = 0u32;
    loop {
        if ready() {
            return true;
        }
        polls += 1;
        if polls % 16 == 0 {
            let waited = start.elapsed();
            if waited >= WAIT {
                return false;
            }
            if waited >= SPIN {
                std::thread::yield_now();
                continue;
            }
        }
        std::hint::spin_loop();
    }
}

/// The producer publishes a large batch in runs of this many items.
const PUBLISH_RUN: usize = 64;

/// A batch stamp: the position one past the batch's last item, and when it arrived.
type Stamp = (usize, Instant);

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
}

impl<P, S> std::fmt::Debug for PublishOn<P, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublishOn")
            .field("prefetch", &self.prefetch)
            .field("bounds", &self.bounds)
            .finish_non_exhaustive()
    }
}

impl<P, S: Scheduler + Clone> PublishOn<P, S> {
    pub(crate) fn new(source: P, scheduler: S, prefetch: u64, bounds: Option<TimeBounds>) -> Self {
        assert!(
            (1..=MAX_CAPACITY as u64).contains(&prefetch),
            "publish_on prefetch must be in 1..=1073741824 (got {prefetch})"
        );
        if let Some(bounds) = bounds {
            assert!(
                bounds.get_adaptive_lifo().is_none(),
                "publish_on_with: adaptive LIFO does not apply to an async boundary (its ring \
                 is credit-bounded FIFO); use TimeBounds::none().max_age(..) only"
            );
        }
        let prefetch = prefetch as usize;
        let gauge = QueueGauge::new(prefetch, Arc::new(scheduler.clone()));
        PublishOn {
            source,
            scheduler,
            prefetch,
            bounds,
            gauge,
        }
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
        let prefetch = self.prefetch;
        self.source.subscribe(Producing {
            pending: Some(subscriber),
            scheduler: Some(self.scheduler),
            prefetch,
            bounds: self.bounds,
            gauge: self.gauge,
            producer: None,
            stamps: None,
            shared: None,
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
}

/// The upstream-facing subscriber: the ring's writing end.
struct Producing<T, D, S> {
    /// Downstream until `on_subscribe` moves it into the drain state.
    pending: Option<D>,
    /// The scheduler until `on_subscribe` moves it into `Shared`.
    scheduler: Option<S>,
    prefetch: usize,
    bounds: Option<TimeBounds>,
    gauge: Arc<QueueGauge>,
    /// The ring's writing end, once subscribed.
    producer: Option<Producer<T>>,
    /// The stamp ring's writing end (`publish_on_with` only).
    stamps: Option<Producer<Stamp>>,
    /// Shared with the drain and downstream's subscription.
    shared: Option<Arc<Shared<T, D, S>>>,
    /// Downstream's drop hook, asked for once at subscribe time.
    hook: Option<DropHook>,
    /// Reports items refused by a full ring (upstream broke rule 1.1).
    drops: DropReporter,
    /// Life-cycle state.
    upstream: Upstream,
}

/// What the producer, the drain and downstream's subscription share.
struct Shared<T, D, S> {
    wip: Wip,
    /// Downstream's outstanding demand.
    demand: AtomicDemand,
    /// `CANCELLED | BAD_REQUEST | DONE`.
    flags: AtomicU8,
    /// How the stream ended; delivered after the last queued item. First end wins.
    end: Mutex<Option<Result<(), Error>>>,
    /// The consumer's state; locked only by the `Wip` owner.
    state: Mutex<Drain<T, D>>,
    /// Upstream's subscription: replenished by the drain, cancelled by downstream.
    upstream: Subscription,
    scheduler: S,
    gauge: Arc<QueueGauge>,
    max_age: Option<Duration>,
}

/// The drain's state.
struct Drain<T, D> {
    /// `None` once terminated or cancelled.
    downstream: Option<D>,
    /// Everything else the drain owns.
    queue: Queue<T>,
}

/// The consumer's side of the boundary.
struct Queue<T> {
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
}

/// Downstream's subscription.
struct Handle<T, D, S>(Arc<Shared<T, D, S>>);

impl<T, D, S> RawSubscription for Handle<T, D, S>
where
    T: Send + 'static,
    D: Subscriber<T> + Send + 'static,
    S: Scheduler + Clone,
{
    fn request(&self, n: u64) {
        if n == 0 {
            // Release: pairs with the drain's Acquire load of the flags.
            self.0.flags.fetch_or(BAD_REQUEST, Ordering::Release);
        } else {
            self.0.demand.add(n);
        }
        self.0.signal();
    }

    fn cancel(&self) {
        // Release: pairs with the drain's Acquire load of the flags.
        let before = self.0.flags.fetch_or(CANCELLED, Ordering::Release);
        if before & CANCELLED == 0 {
            self.0.upstream.cancel();
            self.0.signal();
        }
    }
}

fn lock<X>(mutex: &Mutex<X>) -> MutexGuardOf<'_, X> {
    // Downstream's panics are caught inside the lock, so it is never poisoned; recover
    // the state anyway rather than propagate a panic.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `a <= b` for wrapping ring positions less than half the range apart.
#[inline]
fn at_or_before(a: usize, b: usize) -> bool {
    b.wrapping_sub(a) <= usize::MAX / 2
}

impl<T, D, S> Shared<T, D, S>
where
    T: Send + 'static,
    D: Subscriber<T> + Send + 'static,
    S: Scheduler + Clone,
{
    /// A reason to run: enter the loop, and if it was idle, run it on the scheduler.
    #[inline]
    fn signal(self: &Arc<Self>) {
        if self.wip.enter() {
            self.schedule_drain();
        }
    }

    /// Hand the loop (already entered) to a scheduler task.
    fn schedule_drain(self: &Arc<Self>) {
        let me = self.clone();
        self.scheduler.schedule(Box::new(move || me.drain()));
    }

    /// Upstream ended (or broke rule 1.1): park the end behind the queued items.
    fn finish(self: &Arc<Self>, end: Result<(), Error>) {
        {
            let mut slot = lock(&self.end);
            if slot.is_none() {
                *slot = Some(end);
            }
        }
        // Release: pairs with the drain's Acquire load; the items published before
        // (and the end just stored) are visible once DONE is seen.
        self.flags.fetch_or(DONE, Ordering::Release);
        self.signal();
    }

    /// The drain task: passes until no reason to run is left.
    fn drain(self: &Arc<Self>) {
        let mut missed = 1;
        loop {
            {
                let mut state = lock(&self.state);
                loop {
                    self.pass(&mut state);
                    if !self.spin(&mut state) {
                        break;
                    }
                }
            }
            missed = self.wip.leave(missed);
            if missed == 0 {
                return;
            }
        }
    }

    /// Wait briefly for more work while downstream has demand or items are queued;
    /// true when some arrived (run another pass without leaving the loop).
    #[cfg(not(weir_loom))]
    fn spin(&self, state: &mut Drain<T, D>) -> bool {
        if state.downstream.is_none() {
            return false;
        }
        // Acquire: pairs with the Release of `Handle::request/cancel` and `finish`.
        let flags = self.flags.load(Ordering::Acquire);
        let items = &mut state.queue.items;
        wait_briefly(|| {
            self.flags.load(Ordering::Acquire) != flags
                || (self.demand.get() > 0 && items.available() > 0)
        })
    }

    /// Loom models do not spin (a spin loop is an unbounded schedule for loom).
    #[cfg(weir_loom)]
    fn spin(&self, _state: &mut Drain<T, D>) -> bool {
        false
    }

    /// One drain pass; runs only on the `Wip` owner.
    fn pass(&self, state: &mut Drain<T, D>) {
        let Drain { downstream, queue } = state;
        let Some(subscriber) = downstream.as_mut() else {
            // Terminated or cancelled: release whatever upstream still delivered.
            clear(&mut queue.items, &mut queue.stamps);
            return;
        };
        let now = queue.stamps.is_some().then(|| self.gauge.now());
        // One panic guard around the whole delivery loop, not one per batch.
        let over = match catch(|| self.deliver(subscriber, queue, now)) {
            Ok(over) => over,
            Err(_) => {
                tracing::error!(
                    "subscriber panicked (rule 2.13); publish_on treats it as cancelled"
                );
                self.upstream.cancel();
                true
            }
        };
        if over {
            *downstream = None;
            clear(&mut queue.items, &mut queue.stamps);
        }
        queue.drops.flush();
        self.record(queue, now);
    }

    /// Publish the pass's statistics to the gauge, from the ring's own positions.
    fn record(&self, queue: &mut Queue<T>, now: Option<Instant>) {
        let tail = queue.items.seen_tail();
        let arrived = tail.wrapping_sub(queue.counted_tail) as u64;
        let delivered = std::mem::take(&mut queue.delivered);
        let expired = std::mem::take(&mut queue.expired);
        if arrived == 0 && delivered == 0 && expired == 0 {
            return;
        }
        queue.counted_tail = tail;
        let now = now.unwrap_or_else(|| self.gauge.now());
        if arrived > 0 {
            self.gauge.offered(arrived, now);
            self.gauge.enqueued(arrived);
        }
        if delivered > 0 {
            self.gauge.dequeued(delivered, now);
        }
        if expired > 0 {
            self.gauge.dropped(DropReason::Expired, expired);
        }
        let depth = queue.items.cached();
        let oldest = match (depth, queue.stamps.as_mut()) {
            (0, _) | (_, None) => None,
            (_, Some(stamps)) => stamps.peek().map(|(_, at)| at),
        };
        self.gauge.level(depth, oldest);
    }

    /// Deliver while there are items and demand. Returns true when the stream is over
    /// for downstream (its end was signalled, or it cancelled).
    #[inline]
    fn deliver(&self, subscriber: &mut D, queue: &mut Queue<T>, now: Option<Instant>) -> bool {
        loop {
            // Acquire: pairs with the Release of `Handle::request/cancel` and `finish`.
            let flags = self.flags.load(Ordering::Acquire);
            if flags & CANCELLED != 0 {
                return true;
            }
            if flags & BAD_REQUEST != 0 {
                self.upstream.cancel();
                subscriber.on_error(demand::validate(0).unwrap_err());
                return true;
            }
            let mut available = queue.items.available();
            if let (Some(max_age), Some(now), Some(stamps)) =
                (self.max_age, now, queue.stamps.as_mut())
            {
                let gone = expire(&mut queue.items, stamps, &mut queue.drops, now, max_age);
                if gone > 0 {
                    queue.expired += gone;
                    available = queue.items.cached();
                    if let Some(n) = queue.replenish.on_consumed(gone) {
                        self.upstream.request(n);
                    }
                }
            }
            if available == 0 {
                if flags & DONE == 0 {
                    return false;
                }
                // Everything published before DONE is visible now: if the ring is
                // still empty, it is empty for good.
                if queue.items.available() == 0 {
                    match lock(&self.end).take().unwrap_or(Ok(())) {
                        Ok(()) => subscriber.on_complete(),
                        Err(error) => subscriber.on_error(error),
                    }
                    return true;
                }
                continue;
            }
            let wanted = self.demand.get();
            if wanted == 0 {
                return false;
            }
            let n = usize::try_from(wanted).unwrap_or(usize::MAX).min(available);
            if let Some(stamps) = queue.stamps.as_mut() {
                retire(stamps, queue.items.position().wrapping_add(n));
            }
            let mut passed = 0u64;
            let batch = queue.items.pop_batch(n).inspect(|_| passed += 1);
            let credit = subscriber.on_next_batch(batch);
            // Settle demand once: the batch used `passed` (the subscriber should take
            // all `n`; what it leaves is dropped with the batch), its credit adds back.
            if credit > passed {
                self.demand.add(credit - passed);
            } else if passed > credit {
                self.demand.produced(passed - credit);
            }
            queue.delivered += n as u64;
            if let Some(more) = queue.replenish.on_consumed(n as u64) {
                self.upstream.request(more);
            }
        }
    }
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

impl<T, D, S> Producing<T, D, S>
where
    T: Send + 'static,
    D: Subscriber<T> + Send + 'static,
    S: Scheduler + Clone,
{
    /// Upstream delivered more than it was asked for: drop the rest, cancel upstream,
    /// and fail after the queued items.
    #[cold]
    fn overflow(&mut self, shared: &Arc<Shared<T, D, S>>, rest: impl Iterator<Item = T>) {
        let mut refused = 0u64;
        for item in rest {
            refused += 1;
            self.drops.drop_item(DropReason::OverflowNewest, item);
        }
        self.drops.flush();
        shared.gauge.dropped(DropReason::OverflowNewest, refused);
        self.upstream.cancel();
        shared.finish(Err(Error::spec_violation(
            "1.1",
            format!(
                "publish_on: upstream delivered more items than requested (ring of {} full, \
                 {refused} more refused); rule 1.1",
                self.prefetch
            ),
        )));
    }
}

impl<T, D, S> Subscriber<T> for Producing<T, D, S>
where
    T: Send + 'static,
    D: Subscriber<T> + Send + 'static,
    S: Scheduler + Clone,
{
    fn on_subscribe(&mut self, subscription: Subscription) {
        if !self.upstream.accept(&subscription) {
            return;
        }
        let (Some(mut downstream), Some(scheduler)) = (self.pending.take(), self.scheduler.take())
        else {
            return;
        };
        self.hook = downstream.drop_hook();
        self.drops = DropReporter::new(STAGE, self.hook.clone());
        let (producer, items) = spsc::ring(self.prefetch);
        let (stamp_producer, stamps) = match self.bounds {
            Some(_) => {
                let (p, c) = spsc::ring(self.prefetch);
                (Some(p), Some(c))
            }
            None => (None, None),
        };
        self.producer = Some(producer);
        self.stamps = stamp_producer;
        let shared = Arc::new(Shared {
            wip: Wip::new(),
            demand: AtomicDemand::new(),
            flags: AtomicU8::new(0),
            end: Mutex::new(None),
            state: Mutex::new(Drain {
                downstream: None,
                queue: Queue {
                    items,
                    stamps,
                    replenish: Replenish::new(self.prefetch as u64),
                    drops: DropReporter::new(STAGE, self.hook.clone()),
                    counted_tail: 0,
                    delivered: 0,
                    expired: 0,
                },
            }),
            upstream: subscription.clone(),
            scheduler,
            gauge: self.gauge.clone(),
            max_age: self.bounds.and_then(|b| b.get_max_age()),
        });
        self.shared = Some(shared.clone());
        // Own the loop while downstream's on_subscribe runs: its requests only count.
        let entered = shared.wip.enter();
        debug_assert!(entered, "a new loop has no other owner");
        let handle = Subscription::new(Arc::new(Handle(shared.clone())));
        if crate::guard::on_subscribe(&mut downstream, handle) {
            lock(&shared.state).downstream = Some(downstream);
        } else {
            // Release: pairs with the drain's Acquire load of the flags.
            shared.flags.fetch_or(CANCELLED, Ordering::Release);
            self.upstream.cancel();
        }
        // Anything downstream did meanwhile (a request, a cancel) runs on the scheduler.
        if shared.wip.leave(1) != 0 {
            shared.schedule_drain();
        }
        subscription.request(self.prefetch as u64);
    }

    fn on_next(&mut self, item: T) {
        let _no_credit = self.on_next_batch(std::iter::once(item));
    }

    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        if !self.upstream.is_active() {
            return 0;
        }
        let (Some(producer), Some(shared)) = (self.producer.as_mut(), self.shared.clone()) else {
            return 0;
        };
        let mut items = items;
        let written = match self.stamps.as_mut() {
            // Stamped: the batch's stamp must be recorded before any of its items is
            // visible, so the whole batch is published at once.
            Some(stamps) => {
                let written = producer.write(&mut items);
                if written > 0 {
                    let stamp = (producer.position(), shared.gauge.now());
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
                        shared.signal();
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
            self.overflow(&shared, std::iter::once(first).chain(items));
        } else if written > 0 {
            shared.signal();
        }
        // Credit goes upstream from the drain, through `Replenish`.
        0
    }

    fn drop_hook(&self) -> Option<DropHook> {
        match &self.pending {
            Some(downstream) => downstream.drop_hook(),
            None => self.hook.clone(),
        }
    }

    fn on_error(&mut self, error: Error) {
        if let (true, Some(shared)) = (self.upstream.finish(), &self.shared) {
            shared.finish(Err(error));
        }
    }

    fn on_complete(&mut self) {
        if let (true, Some(shared)) = (self.upstream.finish(), &self.shared) {
            shared.finish(Ok(()));
        }
    }
}

/// Loom models: `RUSTFLAGS="--cfg weir_loom" cargo test --release --lib loom`.
#[cfg(all(test, weir_loom))]
mod loom_tests {
    use std::sync::{Arc, Mutex};

    use loom::thread;

    use crate::loom::{AtomicU64, Ordering};
    use crate::runtime::Immediate;
    use crate::{Error, Publisher, PublisherExt, RawSubscription, Subscriber, Subscription};

    /// Upstream's side of the model: what was requested, and whether it was cancelled.
    #[derive(Default)]
    struct Credit {
        requested: AtomicU64,
    }

    impl RawSubscription for Credit {
        fn request(&self, n: u64) {
            // Release: pairs with the producer's Acquire load.
            self.requested.fetch_add(n, Ordering::Release);
        }
        fn cancel(&self) {}
    }

    type Boxed = Box<dyn Subscriber<u32> + Send>;

    /// A publisher that only subscribes; the model's producer thread then drives the
    /// subscriber it stashed.
    struct Stash(Arc<Mutex<Option<Boxed>>>, Arc<Credit>);

    impl Publisher for Stash {
        type Item = u32;
        fn subscribe<S: Subscriber<u32> + Send + 'static>(self, subscriber: S) {
            let mut subscriber: Boxed = Box::new(subscriber);
            subscriber.on_subscribe(Subscription::new(self.1.clone()));
            *self.0.lock().unwrap() = Some(subscriber);
        }
    }

    /// Downstream: records items and the end; requests only when the model says.
    #[derive(Clone, Default)]
    struct Recorder(Arc<Mutex<(Option<Subscription>, Vec<u32>, bool)>>);

    impl Subscriber<u32> for Recorder {
        fn on_subscribe(&mut self, subscription: Subscription) {
            self.0.lock().unwrap().0 = Some(subscription);
        }
        fn on_next(&mut self, item: u32) {
            self.0.lock().unwrap().1.push(item);
        }
        fn on_error(&mut self, error: Error) {
            panic!("unexpected error {error}");
        }
        fn on_complete(&mut self) {
            self.0.lock().unwrap().2 = true;
        }
    }

    /// The boundary's drain/credit protocol: a producer thread pushes three items
    /// (only against credit) and completes, while downstream requests from another
    /// thread; the drain runs on whichever thread signals it (`Immediate`). Every
    /// item arrives once, in order, followed by completion, without any signal after
    /// the threads finished (no lost wake-up), and upstream credit is conserved: it is
    /// never more than the prefetch of 2 ahead of the items produced, and the replenish
    /// after two consumed items is exactly 2.
    #[test]
    fn loom_publish_on_drain_and_credit() {
        loom::model(|| {
            let credit = Arc::new(Credit::default());
            let stash = Arc::new(Mutex::new(None));
            let recorder = Recorder::default();
            Stash(stash.clone(), credit.clone())
                .publish_on(Immediate, 2)
                .subscribe(recorder.clone());
            let mut upstream = stash.lock().unwrap().take().expect("subscribed");
            let producer = {
                let credit = credit.clone();
                thread::spawn(move || {
                    let mut sent = 0u32;
                    while sent < 3 {
                        // Acquire: pairs with the Release in `Credit::request`.
                        let requested = credit.requested.load(Ordering::Acquire);
                        assert!(
                            requested - u64::from(sent) <= 2,
                            "more than prefetch outstanding"
                        );
                        if requested > u64::from(sent) {
                            upstream.on_next(sent);
                            sent += 1;
                        } else {
                            thread::yield_now();
                        }
                    }
                    upstream.on_complete();
                })
            };
            let subscription = recorder.0.lock().unwrap().0.clone().expect("subscribed");
            subscription.request(3);
            producer.join().unwrap();
            let state = recorder.0.lock().unwrap();
            assert_eq!(state.1, vec![0, 1, 2], "every item once, in order");
            assert!(state.2, "completion after the items");
            assert_eq!(
                credit.requested.load(Ordering::Acquire),
                4,
                "prefetch 2, then 2 replenished after 2 consumed"
            );
        });
    }
}
