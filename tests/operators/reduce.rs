//! `reduce` (mirrors `operators/reduce.rs`): upstream is consumed in batches like a
//! sink (the 75% rule over `DEFAULT_PREFETCH`), the result is emitted once upstream
//! completed and downstream asked for it; an empty upstream completes without an item.

use std::sync::atomic::Ordering;
use std::time::Duration;

use proptest::prelude::*;
use weir::demand::UNBOUNDED;
use weir::prelude::*;
use weir::sink::DEFAULT_PREFETCH;
use weir::source::Step;
use weir::tck::proptest::{check_publisher, demand_schedule};
use weir::tck::TestSubscriber;
use weir::{Error, ErrorKind};

use crate::baseline;
use crate::support::counting::{counted, counted_with, counting_generator, Delivery};
use crate::support::model::{check_model, schedule, Completion};
use crate::support::threaded::{Gate, ThreadedRange};
use crate::support::unruly::Unruly;
use crate::support::{shape, PATIENCE};

#[test]
fn smoke() {
    baseline::smoke(weir::range(1u64..101).reduce(|a, b| a + b), &[5050]);
    baseline::smoke(weir::just(7u8).reduce(|_, _| unreachable!()), &[7]);
    baseline::smoke(weir::empty::<u8>().reduce(|a, b| a + b), &[] as &[u8]);
}

#[test]
fn in_flight_bounds() {
    // `reduce` holds its result until downstream asks; the other transformation
    // operators hold nothing.
    let chain = weir::range(0u64..10)
        .filter_map(Some)
        .skip(1)
        .take_while(|_| true)
        .skip_while(|_| false)
        .scan(0, |a, x| a + x)
        .inspect(|_| {})
        .inspect_request(|_| {})
        .inspect_cancel(|| {});
    assert_eq!(chain.in_flight_bound(), 0);
    assert_eq!(chain.reduce(|a, b| a + b).in_flight_bound(), 1);
}

#[test]
fn respects_demand() {
    // Upstream completes at once; the result waits for downstream's request.
    let (source, stats) = counted(weir::range(0u64..10));
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source.reduce(|a, b| a + b).subscribe(subscriber);
    assert_eq!(
        stats.request_log(),
        vec![DEFAULT_PREFETCH],
        "a sink's first request"
    );
    assert_eq!(stats.completes(), 1);
    assert_eq!(shape(&probe), "S", "no item without demand");
    probe.request(1);
    probe.assert_items(&[45]);
    probe.assert_completed();
    probe.request(1);
    assert_eq!(shape(&probe), "SNC");

    // Downstream asks first: the result goes out at completion.
    let subscriber = TestSubscriber::new().request_on_subscribe(1);
    let probe = subscriber.probe();
    weir::range(0u64..10)
        .reduce(|a, b| a + b)
        .subscribe(subscriber);
    assert_eq!(shape(&probe), "SNC");
}

#[test]
fn upstream_is_consumed_in_batches() {
    for delivery in [Delivery::Batches, Delivery::OneByOne] {
        let (source, stats) = counted_with(weir::range(0u64..1_000_000), delivery);
        let out = source.reduce(|a, b| a + b).collect().wait().unwrap();
        assert_eq!(out, vec![(0..1_000_000u64).sum::<u64>()], "{delivery:?}");
        let log = stats.request_log();
        assert!(!log.contains(&UNBOUNDED), "{delivery:?}");
        assert_eq!(log[0], DEFAULT_PREFETCH, "{delivery:?}");
        assert!(stats.max_outstanding() <= DEFAULT_PREFETCH, "{delivery:?}");
        let limit = DEFAULT_PREFETCH - DEFAULT_PREFETCH / 4;
        assert!(
            stats.request_calls() <= 1 + 1_000_000_u64.div_ceil(limit),
            "{delivery:?}: {} requests",
            stats.request_calls()
        );
    }
}

#[test]
fn result_waits_for_demand_from_another_thread() {
    let source = ThreadedRange::new(1_000);
    let exited = source.exited();
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source.reduce(|a, b| a + b).subscribe(subscriber);
    assert!(exited.wait_timeout(PATIENCE), "upstream ran to completion");
    assert_eq!(shape(&probe), "S");
    probe.request(3);
    probe.assert_items(&[499_500]);
    probe.assert_completed();

    // Requested while upstream still runs.
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    ThreadedRange::new(1_000)
        .reduce(|a, b| a + b)
        .subscribe(subscriber);
    probe.request(1);
    probe.await_terminal(PATIENCE).unwrap();
    assert_eq!(shape(&probe), "SNC");
    probe.assert_items(&[499_500]);
}

#[test]
fn cancel_stops_upstream() {
    // Cancelled while upstream runs.
    let gate = Gate::new();
    let source = ThreadedRange::new(1_000).paused_at(500, gate.clone());
    let exited = source.exited();
    let (source, stats) = counted(source);
    let subscriber = TestSubscriber::<u64>::new();
    let probe = subscriber.probe();
    source.reduce(|a, b| a + b).subscribe(subscriber);
    probe.await_subscribed(PATIENCE).unwrap();
    probe.cancel();
    gate.open();
    assert!(exited.wait_timeout(PATIENCE));
    assert_eq!(stats.cancels(), 1);
    assert!(
        stats.delivered() <= 500 + 64,
        "{} pulled",
        stats.delivered()
    );
    probe.request(1);
    assert!(probe.expect_no_signals(Duration::from_millis(20)).is_ok());
    assert_eq!(shape(&probe), "S");

    // Cancelled in on_subscribe: upstream is never asked for anything.
    let (generator, calls) = counting_generator(u64::MAX);
    let (source, stats) = counted(generator);
    let subscriber = TestSubscriber::<u64>::new();
    let probe = subscriber.probe();
    probe.cancel();
    source.reduce(|a, b| a + b).subscribe(subscriber);
    assert_eq!((stats.cancels(), stats.request_calls()), (1, 0));
    assert_eq!(calls.load(Ordering::SeqCst), 0);

    // Cancelled while the result waits: it is dropped.
    let subscriber = TestSubscriber::<u64>::new();
    let probe = subscriber.probe();
    weir::range(0u64..10)
        .reduce(|a, b| a + b)
        .subscribe(subscriber);
    probe.cancel();
    probe.request(1);
    assert_eq!(shape(&probe), "S");
}

#[test]
fn error_propagates_once() {
    let boom = Error::msg("source failed");
    let failure = boom.clone();
    let mut sent = 0u64;
    let source = weir::generate((), move |_| {
        sent += 1;
        if sent > 3 {
            Step::Error(failure.clone())
        } else {
            Step::Next(sent)
        }
    });
    // No demand needed for the error.
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source.reduce(|a, b| a + b).subscribe(subscriber);
    assert!(Error::ptr_eq(&probe.assert_error(), &boom));
    assert_eq!(shape(&probe), "SE");
    probe.request(1);
    assert_eq!(shape(&probe), "SE");

    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    Unruly::new(boom.clone())
        .reduce(|a, b| a + b)
        .subscribe(subscriber);
    assert_eq!(shape(&probe), "SE");
    assert!(Error::ptr_eq(&probe.assert_error(), &boom));
    probe.assert_no_violations();
}

#[test]
fn completes() {
    // An empty upstream completes without demand and without an item.
    let subscriber = TestSubscriber::<u64>::new();
    let probe = subscriber.probe();
    weir::empty().reduce(|a, b| a + b).subscribe(subscriber);
    assert_eq!(shape(&probe), "SC");
}

#[test]
fn request_zero_is_reported_before_and_after_upstream_ends() {
    let subscriber = TestSubscriber::<u64>::new();
    let probe = subscriber.probe();
    weir::range(0u64..10)
        .reduce(|a, b| a + b)
        .subscribe(subscriber);
    probe.request(0);
    probe.assert_error_rule("3.9");
    assert_eq!(shape(&probe), "SE");

    let gate = Gate::new();
    let subscriber = TestSubscriber::<u64>::new();
    let probe = subscriber.probe();
    ThreadedRange::new(1_000)
        .paused_at(10, gate.clone())
        .reduce(|a, b| a + b)
        .subscribe(subscriber);
    probe.await_subscribed(PATIENCE).unwrap();
    probe.request(0);
    gate.open();
    probe.await_terminal(PATIENCE).unwrap();
    probe.assert_error_rule("3.9");
}

#[test]
fn panic_becomes_panicked_error_and_cancels_upstream() {
    for delivery in [Delivery::Batches, Delivery::OneByOne] {
        let (generator, _) = counting_generator(u64::MAX);
        let (source, stats) = counted_with(generator, delivery);
        let subscriber = TestSubscriber::<u64>::new();
        let probe = subscriber.probe();
        source
            .reduce(|a, b| {
                assert!(b != 300, "reduce boom at {b}");
                a + b
            })
            .subscribe(subscriber);
        let error = probe.assert_error();
        assert_eq!(error.kind(), ErrorKind::Panicked, "{delivery:?}");
        assert_eq!(error.message(), "reduce boom at 300", "{delivery:?}");
        assert_eq!(shape(&probe), "SE", "{delivery:?}");
        assert_eq!(stats.cancels(), 1, "{delivery:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Output equals `Iterator::reduce` (zero or one item) under any schedule; the
    /// result never goes out without demand; upstream is asked in sink-sized batches.
    #[test]
    fn matches_the_iterator_model(
        input in prop::collection::vec(any::<u32>(), 0..600),
        schedule in schedule(),
    ) {
        let f = |a: u32, b: u32| a.wrapping_mul(31) ^ b;
        let model: Vec<u32> = input.iter().copied().reduce(f).into_iter().collect();
        let run = check_model(input, |_| model, |s| s.reduce(f), &schedule, Completion::AtLength)?;
        let stats = &run.stats;
        prop_assert!(!stats.over_delivered());
        prop_assert!(stats.max_outstanding() <= DEFAULT_PREFETCH);
        prop_assert_eq!(stats.completes(), 1, "upstream ran to completion at subscription");
    }

    /// The kit's random schedules (1-3 threads, huge requests, `request(0)`, cancels).
    #[test]
    fn obeys_any_demand_schedule(n in 0u64..=1, schedule in demand_schedule()) {
        check_publisher(|n| weir::range(0..5 * n).reduce(|a, b| a + b), n, &schedule)?;
    }
}
