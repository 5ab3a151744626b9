//! `flat_map` (mirrors `operators/flat_map.rs`): at most `concurrency` inner
//! subscriptions and `concurrency × prefetch` buffered items; the outer source is
//! asked for `concurrency` items, then 1 per completed inner; the first error (or a
//! panic of the closure) wins and cancels everything. Under a limiter (`mod limit`):
//! at most `min(concurrency, limit)` inners, and the outer source asked only for that.

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
use crate::support::unruly::Greedy;
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

mod limit {
    //! `FlatMap::limit`: a limiter bounds the inners that hold a place and the outer
    //! demand. The inners here complete when the test releases them, so the counts
    //! asserted do not depend on timing.

    use std::collections::HashMap;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use proptest::prelude::*;
    use weir::limit::{Aimd, Fixed, Gradient, Limiter};
    use weir::prelude::*;
    use weir::tck::proptest::{check_publisher, demand_schedule};
    use weir::ErrorKind;

    use super::{Tracked, Tracker};
    use crate::baseline;
    use crate::support::counting::counted;
    use crate::support::model::schedule;
    use crate::support::threaded::ThreadedRange;
    use crate::support::valve::{valve, ValveHandle};
    use crate::support::{probe_of, shape};

    /// Inners the test completes: inner `i` emits `i` and completes when the test
    /// releases it (a valve of one item).
    #[derive(Clone, Default)]
    struct Held {
        handles: Arc<Mutex<HashMap<u64, ValveHandle>>>,
        tracker: Arc<Tracker>,
    }

    impl Held {
        /// Inner `i` (the closure of `flat_map`).
        fn inner(&self, i: u64) -> impl Publisher<Item = u64> {
            let (source, handle) = valve(1);
            self.handles.lock().unwrap().insert(i, handle);
            Tracked {
                source: source.map(move |_| i),
                tracker: self.tracker.clone(),
            }
        }

        /// Let inner `i` emit and complete (the lock is let go first: a completion
        /// may start the next inner on this thread).
        fn release(&self, i: u64) {
            let handle = self.handles.lock().unwrap()[&i].clone();
            handle.release(1);
        }

        /// Inners started (`f` called).
        fn started(&self) -> u64 {
            self.handles.lock().unwrap().len() as u64
        }

        /// Inner subscriptions neither terminated nor cancelled.
        fn live(&self) -> u64 {
            self.tracker.live.load(Ordering::SeqCst)
        }

        fn max_live(&self) -> u64 {
            self.tracker.max_live.load(Ordering::SeqCst)
        }
    }

    /// A limiter whose limit the test sets, and which panics in `limit` or
    /// `on_sample` once the test arms it.
    #[derive(Clone)]
    struct Dial {
        limit: Arc<AtomicUsize>,
        panic_in_limit: Arc<AtomicBool>,
        panic_in_sample: Arc<AtomicBool>,
    }

    impl Dial {
        fn new(limit: usize) -> Self {
            Dial {
                limit: Arc::new(AtomicUsize::new(limit)),
                panic_in_limit: Arc::new(AtomicBool::new(false)),
                panic_in_sample: Arc::new(AtomicBool::new(false)),
            }
        }

        fn set(&self, limit: usize) {
            self.limit.store(limit, Ordering::SeqCst);
        }
    }

    impl Limiter for Dial {
        fn limit(&self) -> usize {
            assert!(
                !self.panic_in_limit.load(Ordering::SeqCst),
                "limit exploded"
            );
            self.limit.load(Ordering::SeqCst)
        }
        fn on_sample(&mut self, _rtt: Duration, _in_flight: usize) {
            assert!(
                !self.panic_in_sample.load(Ordering::SeqCst),
                "sample exploded"
            );
        }
    }

    /// A limiter that moves between 1, 2 and 3 with every sample (it shrinks while
    /// items it asked for under a higher limit are on their way).
    #[derive(Clone, Default)]
    struct Wobble(usize);

    impl Limiter for Wobble {
        fn limit(&self) -> usize {
            [3, 1, 2][self.0 % 3]
        }
        fn on_sample(&mut self, _rtt: Duration, _in_flight: usize) {
            self.0 += 1;
        }
    }

    /// A fixed limit of 2 in a `flat_map` of 8: 2 inners start and the outer source
    /// is asked for 2; each inner that completes (and is drained) lets exactly one
    /// more start, asked for then.
    #[test]
    fn a_fixed_limit_bounds_the_inners_and_the_outer_demand() {
        let held = Held::default();
        let h = held.clone();
        let (outer, stats) = counted(weir::range(0u64..100));
        let stage = outer
            .flat_map(move |i| h.inner(i), 8, 4)
            .limit(Fixed::new(2));
        let monitor = stage.limit_monitor();
        let probe = probe_of(stage);
        probe.request(1_000);
        assert_eq!((held.started(), held.live()), (2, 2));
        assert_eq!(stats.request_log(), vec![2]);
        let figures = monitor.snapshot();
        assert_eq!(
            (figures.limit, figures.in_flight, figures.samples),
            (2, 2, 0)
        );
        assert_eq!(figures.rtt_last, None);
        for i in 0..10 {
            held.release(i);
            assert_eq!(probe.items(), (0..=i).collect::<Vec<_>>());
            assert_eq!((held.started(), held.live()), (i + 3, 2));
            let log = stats.request_log();
            assert_eq!(log.len() as u64, i + 2, "{log:?}");
            assert!(log[1..].iter().all(|&n| n == 1), "{log:?}");
            let figures = monitor.snapshot();
            assert_eq!(
                (figures.limit, figures.in_flight, figures.samples),
                (2, 2, i + 1)
            );
        }
        assert_eq!(held.max_live(), 2);
        assert!(!stats.over_delivered());
        probe.cancel();
        assert_eq!(stats.cancels(), 1);
        assert_eq!(held.live(), 0, "every inner cancelled");
        probe.assert_no_violations();
    }

    /// Items asked for under a higher limit wait for a lower one: 8 asked at limit 8,
    /// the limit falls to 2 before they arrive, and only 2 inners start; each inner
    /// that completes lets one waiting item start, and nothing more is asked while
    /// items wait. When the limit rises again, the waiting items start and the
    /// outer source is asked for the rest.
    #[test]
    fn items_asked_under_a_higher_limit_wait_for_a_lower_one() {
        let held = Held::default();
        let h = held.clone();
        let dial = Dial::new(8);
        let (source, outer) = valve(100);
        let (source, stats) = counted(source);
        let stage = source
            .flat_map(move |i| h.inner(i), 8, 4)
            .limit(dial.clone());
        let probe = probe_of(stage);
        probe.request(1_000);
        assert_eq!((stats.requested(), held.started()), (8, 0));
        dial.set(2);
        outer.release(8);
        assert_eq!(
            (held.started(), held.live()),
            (2, 2),
            "the lower limit holds"
        );
        held.release(0);
        assert_eq!((held.started(), held.live()), (3, 2));
        held.release(1);
        assert_eq!((held.started(), held.live()), (4, 2));
        assert_eq!(stats.requested(), 8, "nothing more asked while items wait");
        dial.set(8);
        held.release(2);
        // Places: 3 live before, 1 retired, the 4 waiting started; 8 - 5 asked.
        assert_eq!((held.started(), held.live()), (8, 5));
        assert_eq!(stats.requested(), 11);
        assert_eq!(held.max_live(), 5);
        probe.assert_items(&[0, 1, 2]);
        probe.cancel();
        assert_eq!(held.live(), 0);
    }

    /// An AIMD limit that halves with every round trip (all are slower than 1 ns):
    /// 4 inners start; as they complete, none replaces them until fewer than the new
    /// limit hold a place, and from then on exactly 1 runs at a time.
    #[test]
    fn a_shrinking_limit_holds_the_inners_at_the_new_limit() {
        let held = Held::default();
        let h = held.clone();
        let (outer, stats) = counted(weir::range(0u64..100));
        let stage = outer.flat_map(move |i| h.inner(i), 8, 4).limit(Aimd::new(
            4,
            1,
            8,
            Duration::from_nanos(1),
            0.5,
        ));
        let monitor = stage.limit_monitor();
        let probe = probe_of(stage);
        probe.request(1_000);
        assert_eq!((held.started(), held.live()), (4, 4));
        held.release(0); // limit 2
        assert_eq!((held.started(), held.live()), (4, 3));
        held.release(1); // limit 1
        assert_eq!((held.started(), held.live()), (4, 2));
        held.release(2);
        assert_eq!((held.started(), held.live()), (4, 1));
        assert_eq!(
            stats.request_log(),
            vec![4],
            "nothing asked above the limit"
        );
        for i in 3..12 {
            held.release(i);
            assert_eq!((held.started(), held.live()), (i + 2, 1));
        }
        assert_eq!(
            stats.request_log(),
            [4].into_iter().chain([1; 9]).collect::<Vec<_>>()
        );
        let figures = monitor.snapshot();
        assert_eq!(
            (figures.limit, figures.in_flight, figures.samples),
            (1, 1, 12)
        );
        assert!(figures.rtt_min.is_some() && figures.rtt_min <= figures.rtt_last);
        probe.assert_items(&(0..12).collect::<Vec<_>>());
        probe.cancel();
    }

    /// One round trip per completed inner; an inner that fails gives none.
    #[test]
    fn the_monitor_counts_one_sample_per_completed_inner() {
        let stage = weir::range(0u64..50)
            .flat_map(|i| weir::range(0..i % 3), 4, 2)
            .limit(Gradient::new(4, 1, 8));
        let monitor = stage.limit_monitor();
        assert_eq!(stage.collect().wait().unwrap().len(), 49);
        let figures = monitor.snapshot();
        assert_eq!((figures.samples, figures.in_flight), (50, 0));
        assert!((1..=4).contains(&figures.limit), "{figures:?}");
        assert!(figures.rtt_min.is_some() && figures.rtt_min <= figures.rtt_last);

        // One at a time: 0..5 complete, 5 fails.
        let stage = weir::range(0u64..10)
            .flat_map(
                |i| {
                    if i == 5 {
                        weir::error::<u64>(weir::Error::msg("inner failed")).boxed()
                    } else {
                        weir::just(i).boxed()
                    }
                },
                4,
                2,
            )
            .limit(Fixed::new(1));
        let monitor = stage.limit_monitor();
        let probe = probe_of(stage);
        probe.request(100);
        probe.assert_items(&[0, 1, 2, 3, 4]);
        assert_eq!(probe.assert_error().message(), "inner failed");
        assert_eq!(monitor.snapshot().samples, 5);
    }

    /// A limiter that panics (in `limit` at subscribe, in `limit` after a
    /// retirement, in `on_sample`) fails the stage with `Panicked`, cancels the
    /// outer source and every inner, and is not called again.
    #[test]
    fn a_panicking_limiter_fails_the_stage_and_cancels_everything() {
        // At subscribe: nothing starts.
        let dial = Dial::new(3);
        dial.panic_in_limit.store(true, Ordering::SeqCst);
        let held = Held::default();
        let h = held.clone();
        let (outer, stats) = counted(weir::range(0u64..100));
        let probe = probe_of(outer.flat_map(move |i| h.inner(i), 8, 4).limit(dial));
        assert_eq!(shape(&probe), "SE");
        let error = probe.assert_error();
        assert_eq!(error.kind(), ErrorKind::Panicked, "{error}");
        assert!(error.message().contains("limit exploded"), "{error}");
        assert_eq!(
            (stats.cancels(), stats.requested(), held.started()),
            (1, 0, 0)
        );

        // In `limit`, in the pass that retires a completed inner; and in `on_sample`.
        for in_sample in [false, true] {
            let dial = Dial::new(3);
            let held = Held::default();
            let h = held.clone();
            let (outer, stats) = counted(weir::range(0u64..100));
            let probe = probe_of(
                outer
                    .flat_map(move |i| h.inner(i), 8, 4)
                    .limit(dial.clone()),
            );
            probe.request(100);
            assert_eq!((held.started(), held.live()), (3, 3));
            let armed = if in_sample {
                &dial.panic_in_sample
            } else {
                &dial.panic_in_limit
            };
            armed.store(true, Ordering::SeqCst);
            held.release(0);
            let error = probe.assert_error();
            assert_eq!(error.kind(), ErrorKind::Panicked, "{error}");
            let expected = if in_sample {
                "sample exploded"
            } else {
                "limit exploded"
            };
            assert!(error.message().contains(expected), "{error}");
            assert_eq!(stats.cancels(), 1, "the outer source cancelled");
            assert_eq!(held.live(), 0, "every inner cancelled");
            assert_eq!(held.started(), 3, "nothing started after the panic");
            assert_eq!(stats.request_log(), vec![3]);
            assert!(probe.received_count() <= 1);
            probe.assert_no_violations();
        }
    }

    /// Inners on threads of their own under a fixed limit: nothing lost or
    /// duplicated, each inner's items in order, never more than 2 live at once.
    #[test]
    fn threaded_inners_under_a_limit_lose_nothing_and_stay_within_it() {
        for _ in 0..5 {
            let tracker = Arc::new(Tracker::default());
            let t = tracker.clone();
            let out = weir::range(0u64..8)
                .flat_map(
                    move |i| Tracked {
                        source: ThreadedRange::new(300).map(move |x| (i, x)),
                        tracker: t.clone(),
                    },
                    4,
                    16,
                )
                .limit(Fixed::new(2))
                .collect_with(5)
                .wait()
                .unwrap();
            assert_eq!(out.len(), 8 * 300);
            for i in 0..8 {
                let inner: Vec<u64> = out.iter().filter(|p| p.0 == i).map(|p| p.1).collect();
                assert_eq!(inner, (0..300).collect::<Vec<_>>());
            }
            assert!(tracker.max_live.load(Ordering::SeqCst) <= 2);
            assert_eq!(tracker.live.load(Ordering::SeqCst), 0);
        }
    }

    /// A panic of `f` for an item that waited (started in the pass that retired a
    /// place) fails the stage with `Panicked`, cancels the outer source and every
    /// inner, and drops the items still waiting.
    #[test]
    fn a_panic_of_f_for_a_waiting_item_fails_the_stage() {
        let held = Held::default();
        let h = held.clone();
        let dial = Dial::new(8);
        let (source, outer) = valve(100);
        let (source, stats) = counted(source);
        let stage = source
            .flat_map(
                move |i| {
                    assert!(i != 2, "bad item {i}");
                    h.inner(i)
                },
                8,
                4,
            )
            .limit(dial.clone());
        let probe = probe_of(stage);
        probe.request(100);
        dial.set(2);
        outer.release(4);
        assert_eq!((held.started(), held.live()), (2, 2));
        held.release(0);
        let error = probe.assert_error();
        assert_eq!(error.kind(), ErrorKind::Panicked, "{error}");
        assert!(error.message().contains("bad item 2"), "{error}");
        assert_eq!(stats.cancels(), 1);
        assert_eq!((held.started(), held.live()), (2, 0));
        probe.assert_no_violations();
    }

    /// An outer source that delivers more than the limit asked for fails the stage
    /// (rule 1.1) instead of queueing the excess.
    #[test]
    fn an_outer_source_that_over_delivers_fails_with_rule_1_1() {
        let probe = probe_of(
            super::Greedy(3)
                .flat_map(|_| weir::never::<u64>(), 4, 2)
                .limit(Fixed::new(1)),
        );
        assert_eq!(shape(&probe), "SE");
        assert_eq!(probe.assert_error().rule(), Some("1.1"));
    }

    #[test]
    fn forwards_the_drop_hook_to_every_inner() {
        baseline::drop_hook_reaches_every_source(
            weir::range(0u64..3)
                .flat_map(|_| weir::range(0u64..1_000).on_backpressure_drop(), 2, 16)
                .limit(Fixed::new(1)),
            3_000,
        );
    }

    #[test]
    fn debug_says_limited_and_the_bound_is_unchanged() {
        let stage = weir::range(0u8..1).flat_map(weir::just, 3, 5);
        assert!(format!("{stage:?}").contains("limited: false"));
        let stage = stage.limit(Fixed::new(2));
        assert!(format!("{stage:?}").contains("limited: true"));
        assert_eq!(stage.in_flight_bound(), 15);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// The multiset model under a limit that rises and falls with every inner.
        #[test]
        fn matches_the_multiset_model_under_a_moving_limit(
            lens in prop::collection::vec(0u64..6, 0..12),
            c in 1u64..5,
            p in 1u64..5,
            schedule in schedule(),
        ) {
            let flattened = weir::from_iter(lens.clone().into_iter().enumerate())
                .flat_map(|(i, len)| weir::range(0..len).map(move |x| (i, x)), c, p)
                .limit(Wobble::default());
            let sides: Vec<(usize, Vec<u64>)> =
                lens.iter().enumerate().map(|(i, &len)| (i, (0..len).collect())).collect();
            baseline::check_interleaved(flattened, &sides, &schedule)?;
        }

        /// The kit's random schedules (1-3 threads, huge requests, `request(0)`, cancels).
        #[test]
        fn obeys_any_demand_schedule_under_a_limit(n in 0u64..40, schedule in demand_schedule()) {
            check_publisher(
                |n| weir::range(0..n).flat_map(weir::just, 3, 2).limit(Wobble::default()),
                n,
                &schedule,
            )?;
        }
    }
}

#[test]
fn an_item_delivered_after_the_cancel_is_released() {
    baseline::late_item_after_cancel_is_released(|late| {
        let mut inner = Some(late);
        weir::just(())
            .flat_map(move |()| inner.take().expect("one inner"), 2, 4)
            .map(|_| ())
    });
}

/// Inner publishers that panic in `subscribe`, before or after their `on_subscribe`:
/// `flat_map` and `concat_map` end with an error of kind `Panicked` carrying the
/// panic's message, never waiting on the panicked inner.
#[test]
fn an_inner_that_panics_in_subscribe_fails_the_stage_with_its_message() {
    use crate::support::failing::{PanicsAfterOnSubscribe, PanicsOnSubscribe};
    type Run = fn() -> weir::sink::SinkHandle<Vec<u32>>;
    let cases: [(&str, Run, &str); 4] = [
        (
            "flat_map, before on_subscribe",
            || {
                weir::range(0u32..3)
                    .flat_map(|_| PanicsOnSubscribe, 2, 4)
                    .collect()
            },
            "boom in subscribe",
        ),
        (
            "flat_map, after on_subscribe",
            || {
                weir::range(0u32..3)
                    .flat_map(|_| PanicsAfterOnSubscribe("flat_map"), 2, 4)
                    .collect()
            },
            "boom after on_subscribe in flat_map",
        ),
        (
            "concat_map, before on_subscribe",
            || {
                weir::range(0u32..3)
                    .concat_map(|_| PanicsOnSubscribe, 4)
                    .collect()
            },
            "boom in subscribe",
        ),
        (
            "concat_map, after on_subscribe",
            || {
                weir::range(0u32..3)
                    .concat_map(|_| PanicsAfterOnSubscribe("concat_map"), 4)
                    .collect()
            },
            "boom after on_subscribe in concat_map",
        ),
    ];
    for (name, run, message) in cases {
        match run().wait_timeout(PATIENCE) {
            Some(Err(error)) => {
                assert_eq!(error.kind(), weir::ErrorKind::Panicked, "{name}");
                assert!(error.message().contains(message), "{name}: {error}");
            }
            other => panic!("{name}: ended with {other:?}, expected the panic"),
        }
    }
}
