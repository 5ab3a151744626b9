//! `map_async`, `map_async_unordered`, `map_async_on` (mirrors `operators/map_async.rs`):
//! each item through a future, at most `concurrency` at a time. Calls here are gated
//! by the test (each waits for a oneshot the test fires), so the orders and counts
//! asserted do not depend on timing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::channel::oneshot;
use proptest::prelude::*;
use weir::prelude::*;
use weir::runtime::ThreadPool;
use weir::tck::proptest::{check_publisher_with, demand_schedule, PublisherCheck};
use weir::tck::{TestProbe, TestSubscriber};
use weir::ErrorKind;

use crate::support::counting::counted;
use crate::support::PATIENCE;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Calls the test releases one by one: `call(x)` waits until `release(x)`.
#[derive(Clone, Default)]
struct Gates {
    waiting: Arc<Mutex<HashMap<u64, oneshot::Sender<()>>>>,
    started: Arc<AtomicU64>,
    dropped: Arc<AtomicU64>,
}

/// Counts a call dropped before it finished.
struct Unfinished(Arc<AtomicU64>, bool);

impl Drop for Unfinished {
    fn drop(&mut self) {
        if !self.1 {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Gates {
    fn call(&self, x: u64) -> impl std::future::Future<Output = u64> + Send + 'static {
        let (tx, rx) = oneshot::channel();
        self.waiting.lock().unwrap().insert(x, tx);
        self.started.fetch_add(1, Ordering::SeqCst);
        let guard = Unfinished(self.dropped.clone(), false);
        async move {
            // The whole guard moves in (not only the field written below).
            let mut guard = guard;
            let _ = rx.await;
            guard.1 = true;
            x
        }
    }

    fn release(&self, x: u64) {
        let tx = self
            .waiting
            .lock()
            .unwrap()
            .remove(&x)
            .expect("a call waits");
        tx.send(()).unwrap();
    }

    fn started(&self) -> u64 {
        self.started.load(Ordering::SeqCst)
    }

    /// Wait (bounded) until `n` calls started.
    fn await_started(&self, n: u64) {
        let start = std::time::Instant::now();
        while self.started() < n {
            assert!(
                start.elapsed() < PATIENCE,
                "{} of {n} calls started",
                self.started()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

fn subscribed<P: Publisher>(publisher: P, initial: u64) -> TestProbe<P::Item> {
    let subscriber = TestSubscriber::new().request_on_subscribe(initial);
    let probe = subscriber.probe();
    publisher.subscribe(subscriber);
    probe
}

#[test]
fn smoke() {
    let rt = runtime();
    let _inside = rt.enter();
    let results = weir::range(0u64..10_000)
        .map_async(16, |x| async move { x * 2 })
        .collect()
        .wait()
        .unwrap();
    assert_eq!(results, (0..10_000).map(|x| x * 2).collect::<Vec<_>>());
    let mut results = weir::range(0u64..10_000)
        .map_async_unordered(16, |x| async move { x * 2 })
        .collect()
        .wait()
        .unwrap();
    results.sort_unstable();
    assert_eq!(results, (0..10_000).map(|x| x * 2).collect::<Vec<_>>());
}

/// Results go out in input order whatever order the calls finish in: 3, 2, 1
/// finish first and wait for 0.
#[test]
fn ordered_results_keep_input_order() {
    let rt = runtime();
    let _inside = rt.enter();
    let gates = Gates::default();
    let calls = gates.clone();
    let probe = subscribed(
        weir::range(0u64..4).map_async(4, move |x| calls.call(x)),
        u64::MAX,
    );
    gates.await_started(4);
    for x in [3, 2, 1] {
        gates.release(x);
    }
    probe
        .expect_no_signals(Duration::from_millis(50))
        .expect("nothing before 0 finished");
    gates.release(0);
    probe.await_completion(PATIENCE).unwrap();
    probe.assert_items(&[0, 1, 2, 3]);
    probe.assert_no_violations();
}

/// Unordered results go out as their calls finish.
#[test]
fn unordered_results_go_out_as_calls_finish() {
    let rt = runtime();
    let _inside = rt.enter();
    let gates = Gates::default();
    let calls = gates.clone();
    let probe = subscribed(
        weir::range(0u64..4).map_async_unordered(4, move |x| calls.call(x)),
        u64::MAX,
    );
    gates.await_started(4);
    let mut expected = Vec::new();
    for x in [2, 0, 3, 1] {
        gates.release(x);
        expected.push(x);
        probe.await_items(expected.len() as u64, PATIENCE).unwrap();
        probe.assert_items(&expected);
    }
    probe.await_completion(PATIENCE).unwrap();
    probe.assert_no_violations();
}

/// Upstream demand is the free slots: 4 up front, none while results wait for
/// downstream demand, and the freed slots again once 3 of 4 were delivered (the 75%
/// rule). Calls never run ahead of demand by more than the concurrency.
#[test]
fn upstream_demand_is_the_free_slots() {
    let rt = runtime();
    let _inside = rt.enter();
    let gates = Gates::default();
    let calls = gates.clone();
    let (source, stats) = counted(weir::range(0u64..100));
    let probe = subscribed(source.map_async(4, move |x| calls.call(x)), 0);
    gates.await_started(4);
    for x in 0..4 {
        gates.release(x);
    }
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        stats.requested(),
        4,
        "no slot is free: results wait for demand"
    );
    assert_eq!(gates.started(), 4);
    probe.request(2);
    probe.await_items(2, PATIENCE).unwrap();
    assert_eq!(stats.requested(), 4, "2 freed, below the 75% mark");
    probe.request(1);
    probe.await_items(3, PATIENCE).unwrap();
    gates.await_started(7);
    assert_eq!(stats.requested(), 7, "3 freed: requested in one go");
    assert_eq!(gates.started(), 7);
    probe.cancel();
}

/// Many calls with real sleeps: never more than `concurrency` at once, and the
/// concurrency is used.
#[test]
fn concurrency_is_never_exceeded() {
    let rt = runtime();
    let _inside = rt.enter();
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let (r, m) = (running.clone(), most.clone());
    let results = weir::range(0u64..400)
        .map_async_unordered(8, move |x| {
            let (running, most) = (r.clone(), m.clone());
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_micros(100 * (x % 7))).await;
                running.fetch_sub(1, Ordering::SeqCst);
                x
            }
        })
        .collect()
        .wait()
        .unwrap();
    assert_eq!(results.len(), 400);
    assert_eq!(most.load(Ordering::SeqCst), 8);
}

/// Upstream's error goes out at once; the running calls are dropped.
#[test]
fn upstream_error_goes_out_at_once_and_drops_the_calls() {
    let rt = runtime();
    let _inside = rt.enter();
    let gates = Gates::default();
    let calls = gates.clone();
    let source = weir::range(0u64..3).concat(weir::error(weir::Error::msg("source broke")));
    let probe = subscribed(source.map_async(4, move |x| calls.call(x)), u64::MAX);
    let error = probe.await_error(PATIENCE).unwrap();
    assert_eq!(error.message(), "source broke");
    assert_eq!(probe.received_count(), 0);
    // Items that arrive with the error need not start; every call that started was
    // dropped unfinished.
    assert!(gates.started() <= 3);
    assert_eq!(gates.dropped.load(Ordering::SeqCst), gates.started());
}

/// A cancel drops the running calls and cancels upstream.
#[test]
fn cancel_drops_the_calls_and_cancels_upstream() {
    let rt = runtime();
    let _inside = rt.enter();
    let gates = Gates::default();
    let calls = gates.clone();
    let (source, stats) = counted(weir::range(0u64..100));
    let probe = subscribed(source.map_async_unordered(5, move |x| calls.call(x)), 10);
    gates.await_started(5);
    gates.release(4);
    probe.await_items(1, PATIENCE).unwrap();
    probe.cancel();
    let start = std::time::Instant::now();
    while gates.dropped.load(Ordering::SeqCst) < 4 {
        assert!(
            start.elapsed() < PATIENCE,
            "the running calls were not dropped"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(stats.cancels(), 1);
    assert_eq!(gates.dropped.load(Ordering::SeqCst), 4);
}

/// A panic in `f`, or in a future's `poll`, fails the stage with `Panicked` and
/// cancels upstream.
#[test]
fn panics_in_f_and_in_poll_become_panicked_errors() {
    let rt = runtime();
    let _inside = rt.enter();
    let (source, stats) = counted(weir::range(0u64..100));
    let probe = subscribed(
        source.map_async(4, |x| {
            assert!(x != 2, "f refuses 2");
            async move { x }
        }),
        u64::MAX,
    );
    let error = probe.await_error(PATIENCE).unwrap();
    assert_eq!(error.kind(), ErrorKind::Panicked, "{error}");
    assert_eq!(stats.cancels(), 1);

    let (source, stats) = counted(weir::range(0u64..100));
    let probe = subscribed(
        source.map_async_unordered(4, |x| async move {
            assert!(x != 5, "the call for 5 fails");
            x
        }),
        u64::MAX,
    );
    let error = probe.await_error(PATIENCE).unwrap();
    assert_eq!(error.kind(), ErrorKind::Panicked, "{error}");
    assert_eq!(stats.cancels(), 1);
}

/// A future that is ready at once and panics when dropped for `x == 3`: user code
/// that runs after the poll, when the finished call is let go.
struct PanicsOnDrop(u64);

impl std::future::Future for PanicsOnDrop {
    type Output = u64;
    fn poll(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<u64> {
        std::task::Poll::Ready(self.0)
    }
}

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        if self.0 == 3 && !std::thread::panicking() {
            panic!("the finished call for 3 panics when dropped");
        }
    }
}

/// A finished future whose `Drop` panics fails the stage with `Panicked`, like a
/// panic in `poll` (it used to unwind out of the pass: no terminal signal at all),
/// ordered and unordered, on tokio and on a pool.
#[test]
fn a_finished_future_that_panics_when_dropped_fails_the_stage() {
    let rt = runtime();
    let _inside = rt.enter();
    let pool = ThreadPool::builder().name("ma-drop").threads(1).build();
    for ordered in [true, false] {
        let (source, stats) = counted(weir::range(0u64..100));
        let probe = if ordered {
            subscribed(source.map_async(4, PanicsOnDrop), u64::MAX)
        } else {
            subscribed(
                source.map_async_on(pool.clone(), 4, false, PanicsOnDrop),
                u64::MAX,
            )
        };
        let error = probe.await_error(PATIENCE).unwrap();
        assert_eq!(
            error.kind(),
            ErrorKind::Panicked,
            "ordered {ordered}: {error}"
        );
        assert!(error.to_string().contains("dropped"), "{error}");
        assert_eq!(stats.cancels(), 1, "ordered {ordered}");
    }
}

/// `map_async_on` polls on any scheduler: futures that need no runtime.
#[test]
fn map_async_on_polls_on_the_given_scheduler() {
    let pool = ThreadPool::builder().name("ma").threads(2).build();
    let results = weir::range(0u64..200)
        .map_async_on(pool.clone(), 8, true, |x| async move {
            let (tx, rx) = oneshot::channel();
            std::thread::spawn(move || tx.send(x + 1));
            rx.await.unwrap()
        })
        .collect()
        .wait()
        .unwrap();
    assert_eq!(results, (1..=200).collect::<Vec<_>>());
}

#[test]
#[should_panic(expected = "map_async concurrency must be in 1..=2^16 (got 0)")]
fn zero_concurrency_is_refused() {
    let rt = runtime();
    let _inside = rt.enter();
    let _ = weir::range(0u64..1).map_async(0, |x| async move { x });
}

#[test]
#[should_panic(expected = "map_async_unordered must be called inside a tokio runtime")]
fn outside_a_runtime_is_refused() {
    let _ = weir::range(0u64..1).map_async_unordered(1, |x| async move { x });
}

#[test]
fn in_flight_bound_adds_the_concurrency() {
    let rt = runtime();
    let _inside = rt.enter();
    let stage = weir::range(0u64..10)
        .publish_on(weir::runtime::Immediate, 8)
        .map_async(5, |x| async move { x });
    assert_eq!(stage.in_flight_bound(), 13);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// The conformance kit's demand schedules, ordered and unordered, at concurrency 1
    /// (capacity 1 everywhere) and 3.
    #[test]
    fn obeys_any_demand_schedule(schedule in demand_schedule(), concurrency in prop_oneof![Just(1u64), Just(3)]) {
        let pool = ThreadPool::builder().name("mac").threads(1).build();
        let check = PublisherCheck::asynchronous(PATIENCE, Duration::from_millis(10));
        check_publisher_with(
            |n| weir::range(0..n).map_async_on(pool.clone(), concurrency, true, |x| async move { x }),
            20,
            &schedule,
            check,
        )?;
        check_publisher_with(
            |n| weir::range(0..n).map_async_on(pool.clone(), concurrency, false, |x| async move { x }),
            20,
            &schedule,
            check,
        )?;
    }
}

mod limit {
    //! `MapAsync::limit`: a limiter bounds the running calls and upstream demand; the
    //! adaptive-limit story runs under `VirtualTime` against a simulated dependency.

    use std::sync::Arc;
    use std::time::Duration;

    use weir::limit::{Fixed, Gradient, Limiter};
    use weir::prelude::*;

    use super::{runtime, subscribed, Gates};
    use crate::support::counting::counted;
    use crate::support::PATIENCE;

    /// A fixed limit of 2 in a stage of 8 slots: 2 calls run and upstream was asked
    /// for 2; each call that finishes lets one more start.
    #[test]
    fn a_limiter_bounds_the_running_calls_and_upstream_demand() {
        let rt = runtime();
        let _inside = rt.enter();
        let gates = Gates::default();
        let calls = gates.clone();
        let (source, stats) = counted(weir::range(0u64..100));
        let stage = source
            .map_async(8, move |x| calls.call(x))
            .limit(Fixed::new(2));
        let monitor = stage.limit_monitor();
        let probe = subscribed(stage, u64::MAX);
        gates.await_started(2);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!((gates.started(), stats.requested()), (2, 2));
        gates.release(0);
        probe.await_items(1, PATIENCE).unwrap();
        gates.await_started(3);
        assert_eq!(stats.requested(), 3);
        let figures = monitor.snapshot();
        assert_eq!((figures.limit, figures.samples), (2, 1));
        probe.cancel();
    }

    /// A limiter whose limit the test sets.
    #[derive(Clone)]
    struct Dial(Arc<std::sync::atomic::AtomicUsize>);

    impl Limiter for Dial {
        fn limit(&self) -> usize {
            self.0.load(std::sync::atomic::Ordering::SeqCst)
        }
        fn on_sample(&mut self, _rtt: Duration, _in_flight: usize) {}
    }

    /// Items asked for under a higher limit wait for a lower one: 8 asked at limit 8,
    /// the limit falls to 2 before they arrive, and only 2 calls start; each call
    /// that finishes lets one more start.
    #[test]
    fn items_asked_under_a_higher_limit_wait_for_a_lower_one() {
        let rt = runtime();
        let _inside = rt.enter();
        let gates = Gates::default();
        let calls = gates.clone();
        let dial = Dial(Arc::new(std::sync::atomic::AtomicUsize::new(8)));
        let (source, handle) = crate::support::valve::valve(100);
        let (source, stats) = counted(source);
        let stage = source
            .map_async(8, move |x| calls.call(x))
            .limit(dial.clone());
        let probe = subscribed(stage, u64::MAX);
        assert_eq!(stats.requested(), 8);
        dial.0.store(2, std::sync::atomic::Ordering::SeqCst);
        handle.release(8);
        gates.await_started(2);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(gates.started(), 2, "the lower limit holds");
        gates.release(0);
        gates.await_started(3);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(gates.started(), 3);
        assert_eq!(stats.requested(), 8, "nothing more asked while items wait");
        probe.cancel();
    }

    use crate::adaptive_limit::{story, Second};

    /// The adaptive-limit story (deterministic: virtual time, a simulated
    /// dependency of 10 workers). With a fixed limit of 100 the dependency's queue
    /// holds 90 calls, so each waits about 8 service times (320 ms, then up to 8 s).
    /// The gradient limiter keeps about 20 calls in flight, so the queueing delay
    /// stays under one service time at the same throughput; when the service time
    /// rises to 900 ms it shrinks concurrency within seconds (to 4: nothing queues),
    /// and when it falls back it recovers the full throughput within 2 s.
    #[test]
    fn the_gradient_limiter_shrinks_when_latency_rises_and_recovers() {
        let fixed = story(Fixed::new(100));
        let gradient = story(Gradient::new(20, 1, 100));
        let at = |seconds: &[Second], s: usize| seconds[s - 1];
        let mean_delay = |seconds: &[Second], from: usize, to: usize| {
            seconds[from - 1..to]
                .iter()
                .map(|s| s.delay)
                .sum::<Duration>()
                / (to + 1 - from) as u32
        };
        let served = |seconds: &[Second], from: usize, to: usize| {
            seconds[from - 1..to].iter().map(|s| s.served).sum::<u64>()
        };
        let report = format!("fixed {fixed:?}\ngradient {gradient:?}");
        // 40 ms: the same throughput, a tenth of the queueing.
        assert!(
            mean_delay(&fixed, 5, 20) > Duration::from_millis(300),
            "{report}"
        );
        assert!(
            mean_delay(&gradient, 5, 20) < Duration::from_millis(50),
            "{report}"
        );
        assert!(
            served(&gradient, 5, 20) * 100 >= served(&fixed, 5, 20) * 95,
            "{report}"
        );
        assert!(
            (5..=20).all(|s| (10..=30).contains(&at(&gradient, s).limit)),
            "{report}"
        );
        // 900 ms from 20 s: shrunk within 5 s, nothing queued, where the fixed limit
        // queues seconds.
        assert!(at(&gradient, 25).limit <= 5, "{report}");
        assert!(
            mean_delay(&gradient, 23, 50) < Duration::from_millis(100),
            "{report}"
        );
        assert!(
            mean_delay(&fixed, 23, 50) > Duration::from_secs(2),
            "{report}"
        );
        // 40 ms again from 50 s: the full throughput within 2 s.
        assert!(
            served(&gradient, 53, 90) * 100 >= served(&fixed, 53, 90) * 95,
            "{report}"
        );
        assert!(
            mean_delay(&gradient, 53, 90) < Duration::from_millis(50),
            "{report}"
        );
        assert!((53..=90).all(|s| at(&gradient, s).limit >= 10), "{report}");
    }
}

#[test]
fn an_item_delivered_after_the_cancel_is_released() {
    let pool = ThreadPool::builder().name("ma-late").threads(1).build();
    crate::baseline::late_item_after_cancel_is_released(|late| {
        late.map_async_on(pool, 2, true, |_live| async move {})
    });
}
