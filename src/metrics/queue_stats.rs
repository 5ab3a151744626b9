//! Queue statistics: what a bounded queue holds, how old its oldest item is, how fast
//! it drains, and therefore how far behind its consumer is, in seconds.
//!
//! Every bounded queue weir builds for you (an async boundary's hand-off, a push
//! source, `on_backpressure_buffer`) owns a [`QueueGauge`]: a handful of atomics the
//! queue updates once per batch (never per item), plus two small rate estimators. A
//! [`QueueMonitor`] is the user's read-only handle; [`QueueMonitor::snapshot`] turns the
//! gauge into a plain [`QueueStats`] value.
//!
//! # Rates and lag
//!
//! Arrival and drain rates are measured over a window of recent time, [`RATE_WINDOW`]
//! (10 s) unless [`QueueMonitor::snapshot_over`] asks for another (up to
//! [`MAX_RATE_WINDOW`], a minute). The rate is time-weighted: the items recorded
//! over the window divided by the time they took, from the first event in the window
//! to the last one, or to now once the next one is overdue (see `rate.rs`). So a
//! consumer that polls in batches (500 every 250 ms) reads its true rate at every
//! instant, between its polls as well as at them, and a queue that stopped draining
//! shows its drain rate falling, to zero after a whole window without a dequeue.
//!
//! From them (the sizing rules, `docs/design.md` §10): lag = depth / drain rate (how
//! long the newest item will wait); time to drain = depth / (drain rate − arrival
//! rate), defined only while the queue is shrinking.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

#[cfg(doc)]
use super::rate::MAX_RATE_WINDOW;
use super::rate::{WindowedRate, RATE_WINDOW};
use crate::metrics::Drops;
use crate::runtime::Scheduler;
use crate::DropReason;

/// A point-in-time view of one bounded queue, from [`QueueMonitor::snapshot`].
///
/// Rates are time-weighted over the snapshot's window ([`RATE_WINDOW`], 10 s, for
/// [`QueueMonitor::snapshot`]): right for consumers that poll in batches, falling
/// (to zero after a whole window) for a queue that stopped. From them (see the sizing
/// rules, `docs/design.md` §10):
/// [`lag`](Self::lag) = depth / drain rate, [`time_to_drain`](Self::time_to_drain) =
/// depth / (drain rate − arrival rate).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct QueueStats {
    /// Items in the queue now.
    pub depth: usize,
    /// The most items the queue may hold.
    pub capacity: usize,
    /// How long the oldest queued item has waited (`None` when empty).
    pub oldest_age: Option<Duration>,
    /// Items accepted into the queue so far.
    pub enqueued: u64,
    /// Items taken out of the queue for delivery so far.
    pub dequeued: u64,
    /// Items dropped by the queue's policy, by [`DropReason`] (index: position in
    /// [`DropReason::ALL`]). See [`dropped`](Self::dropped).
    pub dropped_by_reason: [u64; DropReason::COUNT],
    /// Items refused and handed back to their producer (`try_send` on a full queue,
    /// the `Reject` policy). Not drops: the producer still owns them.
    pub rejected: u64,
    /// Total time producers spent waiting for room.
    pub blocked: Duration,
    /// How many times the queue's high water mark paused its producers (push sources
    /// with water marks; 0 elsewhere).
    pub pauses: u64,
    /// Of the `rejected` items, those a shedding rung of the channel's admission
    /// ladder refused for their class ([`Admission::shed_below`](crate::source::channel::Admission::shed_below)).
    pub shed: u64,
    /// Of the `rejected` items, those refused for too little time left before their
    /// deadline ([`Admission::deadlines`](crate::source::channel::Admission::deadlines)).
    pub late: u64,
    /// Estimated items per second offered to the queue.
    pub arrival_rate: f64,
    /// Estimated items per second taken out of the queue.
    pub drain_rate: f64,
    /// The flow state a push source's senders read now (`Flowing`, `Paused` by its
    /// water marks, a rung of its admission ladder); `None` for queues that have
    /// none (boundaries, `on_backpressure_buffer`).
    pub flow: Option<crate::source::channel::FlowState>,
}

impl QueueStats {
    /// Items dropped for `reason`.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.dropped_by_reason[reason_index(reason)]
    }

    /// Items dropped for any reason.
    pub fn dropped_total(&self) -> u64 {
        self.dropped_by_reason
            .iter()
            .fold(0, |total, &n| total.saturating_add(n))
    }

    /// How long an item arriving now would wait: `depth / drain_rate`.
    /// `Some(ZERO)` when empty; `None` when items wait and nothing drains.
    pub fn lag(&self) -> Option<Duration> {
        if self.depth == 0 {
            return Some(Duration::ZERO);
        }
        seconds(self.depth as f64 / self.drain_rate)
    }

    /// How long until the queue is empty at the current rates:
    /// `depth / (drain_rate − arrival_rate)`. `Some(ZERO)` when empty; `None` while the
    /// queue is not shrinking (rates equal to within a billionth count as equal).
    pub fn time_to_drain(&self) -> Option<Duration> {
        if self.depth == 0 {
            return Some(Duration::ZERO);
        }
        let net = self.drain_rate - self.arrival_rate;
        // Equal rates measured as a hair apart (floating-point rounding) are equal:
        // the queue is not shrinking.
        if net <= self.drain_rate * 1e-9 {
            return None;
        }
        seconds(self.depth as f64 / net)
    }
}

fn seconds(s: f64) -> Option<Duration> {
    (s.is_finite() && s >= 0.0).then(|| Duration::from_secs_f64(s.min(1e9)))
}

fn reason_index(reason: DropReason) -> usize {
    DropReason::ALL
        .iter()
        .position(|r| *r == reason)
        .expect("every reason is in DropReason::ALL")
}

impl fmt::Display for QueueStats {
    /// One line: depth/capacity, oldest age, lag, rates and counters.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = |d: Option<Duration>| match d {
            Some(d) => format!("{:.3}s", d.as_secs_f64()),
            None => "∞".to_owned(),
        };
        write!(
            f,
            "depth {}/{} oldest {} lag {} drain {:.0}/s arrive {:.0}/s enq {} deq {} dropped {} rejected {} blocked {:.3}s pauses {}",
            self.depth,
            self.capacity,
            self.oldest_age
                .map_or_else(|| "-".to_owned(), |a| format!("{:.3}s", a.as_secs_f64())),
            secs(self.lag()),
            self.drain_rate,
            self.arrival_rate,
            self.enqueued,
            self.dequeued,
            self.dropped_total(),
            self.rejected,
            self.blocked.as_secs_f64(),
            self.pauses,
        )
    }
}

/// A read-only handle on one queue's statistics. Cheap to clone; may be read from any
/// thread while the pipeline runs.
#[derive(Clone)]
pub struct QueueMonitor {
    gauge: Arc<QueueGauge>,
}

impl fmt::Debug for QueueMonitor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("QueueMonitor")
            .field(&self.snapshot())
            .finish()
    }
}

impl QueueMonitor {
    pub(crate) fn new(gauge: Arc<QueueGauge>) -> Self {
        QueueMonitor { gauge }
    }

    /// The queue's statistics now, with rates over the last [`RATE_WINDOW`] (10 s).
    pub fn snapshot(&self) -> QueueStats {
        self.gauge.snapshot(RATE_WINDOW)
    }

    /// The queue's statistics now, with rates over the last `window` (a minute, say,
    /// as dashboards show). Windows are taken at whole buckets of 2 s, and clamped to
    /// 2 s..=[`MAX_RATE_WINDOW`] (60 s): `Duration::ZERO` reads over 2 s,
    /// `Duration::MAX` over a minute.
    pub fn snapshot_over(&self, window: Duration) -> QueueStats {
        self.gauge.snapshot(window)
    }
}

/// The live counters behind a [`QueueMonitor`]. Written by the queue's owner once per
/// batch; read by snapshots. All counters are statistics: `Relaxed` throughout, since
/// no other memory is published through them.
pub(crate) struct QueueGauge {
    capacity: usize,
    clock: Arc<dyn Scheduler>,
    origin: Instant,
    depth: AtomicUsize,
    /// Enqueue instant of the oldest item, as nanoseconds since `origin` plus one;
    /// 0 = empty.
    oldest: AtomicU64,
    rejected: AtomicU64,
    blocked_nanos: AtomicU64,
    pauses: AtomicU64,
    shed: AtomicU64,
    late: AtomicU64,
    drops: Drops,
    /// Items in and out and the arrival and drain rates, under one lock: a queue
    /// that offers and takes items out in one step (a sender that delivers its own
    /// item) records all of them at once.
    rates: Mutex<Rates>,
    /// The queue's owner (the latest subscription's), asked to take its dead items
    /// out before a snapshot.
    sweeper: Mutex<Option<Weak<dyn Sweep>>>,
    /// Reads the flow state, for a queue that has one (a push source).
    flow: OnceLock<FlowReader>,
}

/// Reads a push source's flow state for a snapshot.
type FlowReader = Box<dyn Fn() -> crate::source::channel::FlowState + Send + Sync>;

/// A queue that can publish the counts it holds back and take out the items that
/// died in it (past their maximum age) without a reader, so that its statistics
/// describe live work.
pub(crate) trait Sweep: Send + Sync {
    /// Publish the counts the queue holds back (they reach the gauge at most once a
    /// millisecond otherwise) and take the dead items out now (reporting them as
    /// dropped), unless the queue's lock is taken (then the snapshot reads the
    /// figures as they are).
    fn sweep(&self);
}

impl fmt::Debug for QueueGauge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueGauge")
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

impl QueueGauge {
    /// A gauge for a queue of `capacity` items, reading time from `clock`.
    pub(crate) fn new(capacity: usize, clock: Arc<dyn Scheduler>) -> Arc<Self> {
        let origin = clock.now();
        Arc::new(QueueGauge {
            capacity,
            origin,
            depth: AtomicUsize::new(0),
            oldest: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            blocked_nanos: AtomicU64::new(0),
            pauses: AtomicU64::new(0),
            shed: AtomicU64::new(0),
            late: AtomicU64::new(0),
            drops: Drops::new(),
            rates: Mutex::new(Rates {
                enqueued: 0,
                dequeued: 0,
                arrival: WindowedRate::new(origin),
                drain: WindowedRate::new(origin),
            }),
            sweeper: Mutex::new(None),
            flow: OnceLock::new(),
            clock,
        })
    }

    /// Give the gauge its queue's flow state (a push source, once, at construction).
    pub(crate) fn set_flow(
        &self,
        read: impl Fn() -> crate::source::channel::FlowState + Send + Sync + 'static,
    ) {
        // Set once: a second call would be a bug of the caller, and is ignored.
        let _ = self.flow.set(Box::new(read));
    }

    /// Ask `sweeper` to take its dead items out before each snapshot (the latest
    /// call wins: a publisher subscribed again sweeps its live queue; held weakly, so
    /// the gauge does not keep the queue alive).
    pub(crate) fn set_sweeper(&self, sweeper: Weak<dyn Sweep>) {
        *lock(&self.sweeper) = Some(sweeper);
    }

    /// The clock this gauge (and its queue's stamps) reads.
    pub(crate) fn now(&self) -> Instant {
        self.clock.now()
    }

    /// Since the last call, `offered` items were offered to the queue (accepted,
    /// dropped or refused; feeds the arrival rate), `enqueued` accepted, and
    /// `dequeued` taken out for delivery (feeds the drain rate), all at `now`. One
    /// lock, none when nothing moved.
    pub(crate) fn moved(&self, offered: u64, enqueued: u64, dequeued: u64, now: Instant) {
        if offered > 0 || dequeued > 0 {
            let mut rates = lock(&self.rates);
            rates.enqueued += enqueued;
            rates.dequeued += dequeued;
            rates.arrival.record(offered, now);
            rates.drain.record(dequeued, now);
        }
    }

    /// `n` items were dropped for `reason`.
    pub(crate) fn dropped(&self, reason: DropReason, n: u64) {
        self.drops.add(reason, n);
    }

    /// `n` items were refused and handed back to their producer.
    pub(crate) fn rejected(&self, n: u64) {
        self.rejected.fetch_add(n, Ordering::Relaxed);
    }

    /// A producer waited `waited` for room.
    pub(crate) fn blocked(&self, waited: Duration) {
        let nanos = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        super::add_saturating(&self.blocked_nanos, nanos);
    }

    /// `n` items were refused by a shedding rung of an admission ladder.
    pub(crate) fn shed(&self, n: u64) {
        self.shed.fetch_add(n, Ordering::Relaxed);
    }

    /// `n` items were refused for too little time left before their deadline.
    pub(crate) fn late(&self, n: u64) {
        self.late.fetch_add(n, Ordering::Relaxed);
    }

    /// The high water mark paused the producers once more.
    pub(crate) fn paused(&self) {
        self.pauses.fetch_add(1, Ordering::Relaxed);
    }

    /// The queue now holds `depth` items, the oldest enqueued at `oldest`.
    pub(crate) fn level(&self, depth: usize, oldest: Option<Instant>) {
        self.depth.store(depth, Ordering::Relaxed);
        let stamp = oldest.map_or(0, |t| {
            let since = t.saturating_duration_since(self.origin).as_nanos();
            u64::try_from(since).unwrap_or(u64::MAX - 1) + 1
        });
        self.oldest.store(stamp, Ordering::Relaxed);
    }

    /// The queue's depth read by someone other than its owner (a snapshot's sweep):
    /// the oldest item's age stays as its owner last set it, or goes once empty.
    pub(crate) fn depth(&self, depth: usize) {
        self.depth.store(depth, Ordering::Relaxed);
        if depth == 0 {
            self.oldest.store(0, Ordering::Relaxed);
        }
    }

    pub(crate) fn snapshot(&self, window: Duration) -> QueueStats {
        let sweeper = lock(&self.sweeper).as_ref().and_then(Weak::upgrade);
        if let Some(sweeper) = sweeper {
            sweeper.sweep();
        }
        let now = self.clock.now();
        let rates = lock(&self.rates);
        let oldest = self.oldest.load(Ordering::Relaxed);
        let oldest_age = (oldest != 0).then(|| {
            let enqueued_at = self.origin + Duration::from_nanos(oldest - 1);
            now.saturating_duration_since(enqueued_at)
        });
        QueueStats {
            depth: self.depth.load(Ordering::Relaxed),
            capacity: self.capacity,
            oldest_age,
            enqueued: rates.enqueued,
            dequeued: rates.dequeued,
            dropped_by_reason: DropReason::ALL.map(|r| self.drops.count(r)),
            rejected: self.rejected.load(Ordering::Relaxed),
            blocked: Duration::from_nanos(self.blocked_nanos.load(Ordering::Relaxed)),
            pauses: self.pauses.load(Ordering::Relaxed),
            shed: self.shed.load(Ordering::Relaxed),
            late: self.late.load(Ordering::Relaxed),
            arrival_rate: rates.arrival.rate(now, window),
            drain_rate: rates.drain.rate(now, window),
            flow: self.flow.get().map(|read| read()),
        }
    }
}

/// A queue's counts of items in and out, and its arrival and drain rates: what
/// every offer and every take updates, under one lock.
struct Rates {
    enqueued: u64,
    dequeued: u64,
    arrival: WindowedRate,
    drain: WindowedRate,
}

fn lock<X>(mutex: &Mutex<X>) -> std::sync::MutexGuard<'_, X> {
    // Only this module's arithmetic runs under the lock; recover from poisoning anyway.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(all(test, not(weir_loom)))]
mod tests {
    use super::*;
    use crate::runtime::VirtualTime;

    #[test]
    fn rates_lag_and_time_to_drain_follow_the_sizing_rules() {
        let vt = VirtualTime::new();
        let gauge = QueueGauge::new(10_000, Arc::new(vt.clone()));
        let monitor = QueueMonitor::new(gauge.clone());
        // 1,200/s arriving, 1,000/s draining, for one second in 10 ms batches.
        for _ in 0..100 {
            vt.advance(Duration::from_millis(10));
            let now = vt.now();
            gauge.moved(12, 12, 10, now);
        }
        let start = vt.now() - Duration::from_secs(1);
        gauge.level(200, Some(start));
        let stats = monitor.snapshot();
        assert!((stats.arrival_rate - 1_200.0).abs() < 1.0, "{stats:?}");
        assert!((stats.drain_rate - 1_000.0).abs() < 1.0, "{stats:?}");
        assert_eq!(stats.oldest_age, Some(Duration::from_secs(1)));
        // lag = 200 / 1,000/s = 0.2 s; the queue grows, so no time to drain.
        let lag = stats.lag().unwrap().as_secs_f64();
        assert!((lag - 0.2).abs() < 1e-3, "{lag}");
        assert_eq!(stats.time_to_drain(), None);
        assert_eq!((stats.enqueued, stats.dequeued), (1_200, 1_000));
    }

    #[test]
    fn a_stalled_queue_shows_its_drain_rate_falling_and_no_lag_bound() {
        let vt = VirtualTime::new();
        let gauge = QueueGauge::new(100, Arc::new(vt.clone()));
        vt.advance(Duration::from_millis(100));
        gauge.moved(0, 0, 100, vt.now());
        assert_eq!(gauge.snapshot(RATE_WINDOW).drain_rate, 1_000.0);
        vt.advance(Duration::from_secs(10));
        gauge.level(5, Some(vt.now()));
        // A minute's window still holds the one dequeue, spread over the 10 s since.
        let minute = gauge.snapshot(Duration::from_secs(60));
        assert!((minute.drain_rate - 10.0).abs() < 1e-9, "{minute:?}");
        // The default window passed without a dequeue: nothing drains, no lag bound.
        let stats = gauge.snapshot(RATE_WINDOW);
        assert_eq!(stats.drain_rate, 0.0);
        assert_eq!(stats.lag(), None);
        assert_eq!(stats.oldest_age, Some(Duration::ZERO));
        gauge.dropped(DropReason::Expired, 3);
        gauge.rejected(2);
        let stats = gauge.snapshot(RATE_WINDOW);
        assert_eq!(stats.dropped(DropReason::Expired), 3);
        assert_eq!((stats.dropped_total(), stats.rejected), (3, 2));
        assert!(stats.to_string().contains("depth 5/100"), "{stats}");
    }
}
