//! `flat_map` (mirrors `operators/flat_map.rs`): at most `concurrency` inner
//! subscriptions and `concurrency × prefetch` buffered items; the outer source is
//! asked for `concurrency` items, then 1 per completed inner; the first error (or a
//! panic of the closure) wins and cancels everything.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use weir::prelude::*;
use weir::tck::proptest::{check_publisher, check_publisher_with, demand_schedule, PublisherCheck};
use weir::tck::TestSubscriber;
use weir::{Error, ErrorKind};

use crate::baseline;
use crate::support::counting::counted;
use crate::support::model::schedule;
use crate::support::threaded::ThreadedRange;
use crate::support::{shape, PATIENCE};

/// Counters shared by every inner source of one test.
#[derive(Default)]
struct Tracker {
    /// Inner subscriptions neither terminated nor cancelled.
    live: AtomicU64,
    max_live: AtomicU64,
    /// Items the inner sources emitted.
    emitted: AtomicU64,
    /// Items that reached downstream (counted by a `map` after `flat_map`).
    received: AtomicU64,
    /// Largest `emitted - received` seen at any emission.
    max_buffered: AtomicU64,
}

/// An inner publisher that reports to a [`Tracker`].
struct Tracked<P> {
    source: P,
    tracker: Arc<Tracker>,
}

impl<P: Publisher> Publisher for Tracked<P> {
    type Item = P::Item;
    fn subscribe<S: Subscriber<P::Item> + Send + 'static>(self, subscriber: S) {
        let live = self.tracker.live.fetch_add(1, Ordering::SeqCst) + 1;
        self.tracker.max_live.fetch_max(live, Ordering::SeqCst);
        self.source.subscribe(TrackedSubscriber {
            downstream: subscriber,
            tracker: self.tracker,
            ended: Arc::new(AtomicBool::new(false)),
        });
    }
}

struct TrackedSubscriber<S> {
    downstream: S,
    tracker: Arc<Tracker>,
    ended: Arc<AtomicBool>,
}

struct TrackedSubscription {
    upstream: Subscription,
    tracker: Arc<Tracker>,
    ended: Arc<AtomicBool>,
}

impl weir::RawSubscription for TrackedSubscription {
    fn request(&self, n: u64) {
        self.upstream.request(n);
    }
    fn cancel(&self) {
        if !self.ended.swap(true, Ordering::SeqCst) {
            self.tracker.live.fetch_sub(1, Ordering::SeqCst);
        }
        self.upstream.cancel();
    }
}

impl<S> TrackedSubscriber<S> {
    /// The subscription ended (terminal signal or cancel): counted once.
    fn end(&self) {
        if !self.ended.swap(true, Ordering::SeqCst) {
            self.tracker.live.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl<T, S: Subscriber<T>> Subscriber<T> for TrackedSubscriber<S> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        self.downstream
            .on_subscribe(Subscription::new(Arc::new(TrackedSubscription {
                upstream: subscription,
                tracker: self.tracker.clone(),
                ended: self.ended.clone(),
            })));
    }
    fn on_next(&mut self, item: T) {
        let emitted = self.tracker.emitted.fetch_add(1, Ordering::SeqCst) + 1;
        let buffered = emitted - self.tracker.received.load(Ordering::SeqCst);
        self.tracker
            .max_buffered
            .fetch_max(buffered, Ordering::SeqCst);
        self.downstream.on_next(item);
    }
    fn on_error(&mut self, error: Error) {
        self.end();
        self.downstream.on_error(error);
    }
    fn on_complete(&mut self) {
        self.end();
        self.downstream.on_complete();
    }
}

#[test]
fn smoke() {
    let mut out = weir::range(0u32..4)
        .flat_map(|n| weir::range(0..n).map(move |x| (n, x)), 2, 4)
        .collect()
        .wait()
        .unwrap();
    out.sort();
    assert_eq!(out, vec![(1, 0), (2, 0), (2, 1), (3, 0), (3, 1), (3, 2)]);
}

/// The bounds under pressure: a slow downstream (1 item per request) over inner
/// sources that emit everything they are asked for at once. The counters prove that
/// live inner subscriptions never exceed `c` and buffered items never exceed `c × p`,
/// and that both bounds are reached (so the test would see an excess).
#[test]
fn never_more_than_c_inners_nor_c_times_p_buffered_under_a_slow_downstream() {
    let (c, p, inners, len) = (3u64, 4u64, 40u64, 10u64);
    let tracker = Arc::new(Tracker::default());
    let (outer, outer_stats) = counted(weir::range(0..inners));
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    let (t, r) = (tracker.clone(), tracker.clone());
    outer
        .flat_map(
            move |i| Tracked {
                source: weir::range(i * 100..i * 100 + len),
                tracker: t.clone(),
            },
            c,
            p,
        )
        .map(move |x| {
            r.received.fetch_add(1, Ordering::SeqCst);
            x
        })
        .subscribe(subscriber);

    let live = || tracker.live.load(Ordering::SeqCst);
    let buffered =
        || tracker.emitted.load(Ordering::SeqCst) - tracker.received.load(Ordering::SeqCst);
    // Up front: c outer items, c inners, each window filled eagerly.
    assert_eq!(outer_stats.request_log(), vec![c]);
    assert_eq!((live(), buffered()), (c, c * p));

    let mut requests = 0;
    while !probe.is_terminated() {
        probe.request(1);
        requests += 1;
        assert!(live() <= c, "{} live inner subscriptions", live());
        assert!(buffered() <= c * p, "{} items buffered", buffered());
        assert!(requests <= inners * len, "no completion after every item");
    }
    probe.assert_completed();
    probe.assert_no_violations();
    assert_eq!(probe.received_count(), inners * len);
    assert_eq!(tracker.max_live.load(Ordering::SeqCst), c);
    assert_eq!(tracker.max_buffered.load(Ordering::SeqCst), c * p);
    assert_eq!(live(), 0);
    // The outer source: c up front, then exactly 1 per completed inner.
    let log = outer_stats.request_log();
    assert!(log[1..].iter().all(|&n| n == 1), "{log:?}");
    assert_eq!(outer_stats.delivered(), inners);
    // Each inner's items in order.
    let items = probe.items();
    for i in 0..inners {
        let inner: Vec<u64> = items.iter().copied().filter(|x| x / 100 == i).collect();
        assert_eq!(inner, (i * 100..i * 100 + len).collect::<Vec<_>>());
    }
}

#[test]
#[should_panic(expected = "flat_map concurrency must be in 1..=2^16 (got 0)")]
fn zero_concurrency_panics_at_construction() {
    let _ = weir::range(0u8..1).flat_map(weir::just, 0, 4);
}

#[test]
#[should_panic(expected = "flat_map prefetch must be in 1..=2^30 (got 0)")]
fn zero_prefetch_panics_at_construction() {
    let _ = weir::range(0u8..1).flat_map(weir::just, 4, 0);
}

#[test]
#[should_panic(expected = "flat_map concurrency must be in 1..=2^16 (got 65537)")]
fn huge_concurrency_panics_at_construction() {
    let _ = weir::range(0u8..1).flat_map(weir::just, 65_537, 4);
}

#[test]
fn respects_demand() {
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::range(0u64..5)
        .flat_map(|i| weir::range(i * 10..i * 10 + 3), 2, 2)
        .subscribe(subscriber);
    probe.assert_items(&[]);
    probe.request(2);
    assert_eq!(probe.received_count(), 2);
    probe.request(5);
    assert_eq!(probe.received_count(), 7);
    probe.assert_no_terminal();
    probe.request(100);
    assert_eq!(probe.received_count(), 15);
    probe.assert_completed();
    probe.assert_no_violations();
}

#[test]
fn cancel_stops_upstream() {
    let tracker = Arc::new(Tracker::default());
    let t = tracker.clone();
    let (outer, outer_stats) = counted(weir::range(0u64..u64::MAX));
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    outer
        .flat_map(
            move |_| Tracked {
                source: weir::range(0u64..u64::MAX),
                tracker: t.clone(),
            },
            4,
            8,
        )
        .subscribe(subscriber);
    probe.request(10);
    assert_eq!(tracker.live.load(Ordering::SeqCst), 4);
    probe.cancel();
    assert_eq!(outer_stats.cancels(), 1);
    assert_eq!(
        tracker.live.load(Ordering::SeqCst),
        0,
        "every inner cancelled"
    );
    let emitted = tracker.emitted.load(Ordering::SeqCst);
    probe.request(10);
    assert_eq!(probe.received_count(), 10);
    assert_eq!(tracker.emitted.load(Ordering::SeqCst), emitted);
    probe.assert_no_terminal();
}

#[test]
fn error_propagates_once() {
    // An inner error: everything else is cancelled; it needs no demand.
    let boom = Error::msg("inner failed");
    let failure = boom.clone();
    let (outer, outer_stats) = counted(weir::range(0u64..10));
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    outer
        .flat_map(
            move |i| {
                if i == 2 {
                    weir::error::<u64>(failure.clone()).boxed()
                } else {
                    weir::never().boxed()
                }
            },
            4,
            2,
        )
        .subscribe(subscriber);
    assert_eq!(shape(&probe), "SE");
    assert!(Error::ptr_eq(&probe.assert_error(), &boom));
    assert_eq!(outer_stats.cancels(), 1);
    probe.request(3);
    assert_eq!(shape(&probe), "SE");

    // An outer error.
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::error::<u64>(boom.clone())
        .flat_map(weir::just, 2, 2)
        .subscribe(subscriber);
    assert_eq!(shape(&probe), "SE");

    // A panic in the closure.
    let (outer, outer_stats) = counted(weir::range(0u64..10));
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    outer
        .flat_map(
            |i| {
                assert!(i < 3, "bad item {i}");
                weir::just(i)
            },
            2,
            2,
        )
        .subscribe(subscriber);
    probe.request(10);
    let error = probe.assert_error();
    assert_eq!(error.kind(), ErrorKind::Panicked);
    assert!(error.message().contains("bad item 3"));
    assert_eq!(outer_stats.cancels(), 1);
    // The error goes out at once: queued items of earlier inners may be released.
    assert!(probe.received_count() <= 3);
}

#[test]
fn completes() {
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::range(0u8..5)
        .flat_map(|_| weir::empty::<u8>(), 2, 2)
        .subscribe(subscriber);
    assert_eq!(shape(&probe), "SC", "empty inners complete without demand");

    let out = weir::empty::<u8>()
        .flat_map(weir::just, 2, 2)
        .collect()
        .wait()
        .unwrap();
    assert!(out.is_empty());
}

#[test]
fn in_flight_bound_adds_c_times_p() {
    assert_eq!(
        weir::range(0u8..1)
            .flat_map(weir::just, 3, 5)
            .in_flight_bound(),
        15
    );
}

#[test]
fn threaded_inners_lose_and_duplicate_nothing() {
    for _ in 0..10 {
        let out = weir::range(0u64..8)
            .flat_map(|i| ThreadedRange::new(500).map(move |x| (i, x)), 3, 16)
            .collect_with(5)
            .wait()
            .unwrap();
        assert_eq!(out.len(), 8 * 500);
        for i in 0..8 {
            let inner: Vec<u64> = out.iter().filter(|p| p.0 == i).map(|p| p.1).collect();
            assert_eq!(inner, (0..500).collect::<Vec<_>>());
        }
    }
}

#[test]
fn forwards_the_drop_hook_to_every_inner() {
    baseline::drop_hook_reaches_every_source(
        weir::range(0u64..3).flat_map(|_| weir::range(0u64..1_000).on_backpressure_drop(), 2, 16),
        3_000,
    );
}

/// A publisher that ignores demand (breaks rule 1.1): `n` items at once.
#[derive(Clone, Copy)]
struct Greedy(u64);

impl Publisher for Greedy {
    type Item = u64;
    fn subscribe<S: Subscriber<u64> + Send + 'static>(self, mut subscriber: S) {
        subscriber.on_subscribe(Subscription::noop());
        for i in 0..self.0 {
            subscriber.on_next(i);
        }
        subscriber.on_complete();
    }
}

#[test]
fn sources_that_over_deliver_fail_instead_of_growing_a_buffer() {
    // An inner pushes 5 items into a window of 2.
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::range(0u64..3)
        .flat_map(|_| Greedy(5), 1, 2)
        .subscribe(subscriber);
    assert_eq!(shape(&probe), "SE");
    assert_eq!(probe.assert_error().rule(), Some("1.1"));

    // The outer source pushes a second item while the only inner is live.
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    Greedy(3)
        .flat_map(|_| weir::never::<u64>(), 1, 2)
        .subscribe(subscriber);
    assert_eq!(shape(&probe), "SE");
    assert_eq!(probe.assert_error().rule(), Some("1.1"));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Output: every inner's items in order (so the multiset of the model
    /// `flat_map`), exactly `min(requested, total)` items, complete once all went
    /// out, nothing after a cancel.
    #[test]
    fn matches_the_multiset_model(
        lens in prop::collection::vec(0u64..6, 0..12),
        c in 1u64..4,
        p in 1u64..5,
        schedule in schedule(),
    ) {
        let flattened = weir::from_iter(lens.clone().into_iter().enumerate())
            .flat_map(|(i, len)| weir::range(0..len).map(move |x| (i, x)), c, p);
        let sides: Vec<(usize, Vec<u64>)> =
            lens.iter().enumerate().map(|(i, &len)| (i, (0..len).collect())).collect();
        baseline::check_interleaved(flattened, &sides, &schedule)?;
    }

    /// The kit's random schedules (1-3 threads, huge requests, `request(0)`, cancels).
    #[test]
    fn obeys_any_demand_schedule(n in 0u64..40, schedule in demand_schedule()) {
        check_publisher(|n| weir::range(0..n).flat_map(weir::just, 3, 2), n, &schedule)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// The kit's random schedules over sources that emit from threads of their own.
    #[test]
    fn obeys_any_demand_schedule_with_threaded_sources(n in 0u64..24, schedule in demand_schedule()) {
        let check = PublisherCheck::asynchronous(PATIENCE, Duration::from_millis(10));
        check_publisher_with(|n| weir::range(0..n).flat_map(|_| ThreadedRange::new(1), 3, 2), n, &schedule, check)?;
    }
}
