//! `inspect_request` (mirrors `operators/inspect_request.rs`): the tap sees every
//! request and every batch credit, exactly what upstream is asked for; a panic in the
//! tap becomes `on_error(Panicked)` downstream.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use weir::prelude::*;
use weir::tck::proptest::{check_publisher, demand_schedule};
use weir::tck::TestSubscriber;
use weir::ErrorKind;

use crate::baseline::{self, request};
use crate::support::counting::{counted, counted_with, counting_generator, Delivery};
use crate::support::model::{check_model, schedule, Completion};
use crate::support::shape;

/// A request tap that records what it sees, and the record.
fn recorder() -> (impl Fn(u64) + Send + Sync + 'static, Arc<Mutex<Vec<u64>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    (move |n| log.lock().unwrap().push(n), seen)
}

#[test]
fn smoke() {
    let (tap, seen) = recorder();
    let out = weir::range(0u32..3)
        .inspect_request(tap)
        .collect_with(2)
        .wait()
        .unwrap();
    assert_eq!(out, vec![0, 1, 2]);
    assert_eq!(*seen.lock().unwrap(), vec![2, 2]);
}

#[test]
fn respects_demand() {
    let (tap, seen) = recorder();
    let probe = baseline::respects_demand(
        weir::range(0u64..10),
        |source| source.inspect_request(tap),
        &[
            request(1, &[0], (1, 1)).log(&[1]),
            request(2, &[0, 1, 2], (3, 3)).log(&[1, 2]),
        ],
    );
    assert_eq!(*seen.lock().unwrap(), vec![1, 2]);
    probe.request(0);
    probe.assert_error_rule("3.9");
    assert_eq!(
        *seen.lock().unwrap(),
        vec![1, 2, 0],
        "request(0) is tapped too"
    );
}

#[test]
fn batch_credit_is_tapped_as_demand() {
    let (source, stats) = counted(weir::range(0u64..100_000));
    let (tap, seen) = recorder();
    let sum = source
        .inspect_request(tap)
        .fold_with(64, 0u64, |a, x| a + x)
        .wait();
    assert_eq!(sum.unwrap(), (0..100_000u64).sum::<u64>());
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        stats.request_log(),
        "the tap saw what upstream was asked for"
    );
    assert_eq!(seen[0], 64);
    assert!(seen.len() > 1_000, "the sink's credit went through the tap");
}

#[test]
fn cancel_stops_upstream() {
    let (generator, calls) = counting_generator(u64::MAX);
    let (source, stats) = counted(generator);
    let (tap, seen) = recorder();
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source.inspect_request(tap).subscribe(subscriber);
    probe.request(2);
    probe.cancel();
    assert_eq!(stats.cancels(), 1);
    probe.assert_items(&[0, 1]);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(*seen.lock().unwrap(), vec![2]);
}

#[test]
fn error_propagates_once() {
    baseline::error_propagates_once(|source, _| source.inspect_request(|_| {}), 2, &[1, 2], 0);
}

#[test]
fn completes() {
    baseline::completes(
        weir::range(0u64..2),
        |source| source.inspect_request(|_| {}),
        3,
        &[0, 1],
    );
}

#[test]
fn panic_on_request_becomes_panicked_error() {
    let (source, stats) = counted(weir::range(0u64..100));
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source
        .inspect_request(|n| assert!(n != 3, "request tap boom at {n}"))
        .subscribe(subscriber);
    probe.request(2);
    probe.request(3);
    probe.assert_items(&[0, 1]);
    let error = probe.assert_error();
    assert_eq!(
        (error.kind(), error.message()),
        (ErrorKind::Panicked, "request tap boom at 3")
    );
    assert_eq!(
        stats.request_log(),
        vec![2, 0],
        "the panicking request is not forwarded"
    );
    probe.request(5);
    assert_eq!(shape(&probe), "SNNE");
    assert_eq!(
        stats.request_log(),
        vec![2, 0],
        "later requests are ignored"
    );

    // Re-entrant: the tap panics inside a request made from on_next (item by item,
    // so the test subscriber requests instead of returning batch credit).
    let calls = AtomicU64::new(0);
    let subscriber = TestSubscriber::new().request_on_next(1);
    let probe = subscriber.probe();
    let (source, _) = counted_with(weir::range(0u64..100), Delivery::OneByOne);
    source
        .inspect_request(move |_| {
            assert!(calls.fetch_add(1, Ordering::SeqCst) != 3, "re-entrant boom");
        })
        .subscribe(subscriber);
    probe.request(1);
    assert_eq!(probe.assert_error().message(), "re-entrant boom");
    probe.assert_no_violations();
}

#[test]
fn panic_is_reported_even_when_upstream_completes_first() {
    // The tap panics in the request made from inside the last item's on_next; the
    // source ends in the same pass, before it sees the `request(0)`.
    let calls = AtomicU64::new(0);
    let subscriber = TestSubscriber::new().request_on_next(1);
    let probe = subscriber.probe();
    let (source, _) = counted_with(weir::from_iter(vec![1u8, 2, 3]), Delivery::OneByOne);
    source
        .inspect_request(move |_| {
            assert!(calls.fetch_add(1, Ordering::SeqCst) != 3, "late boom");
        })
        .subscribe(subscriber);
    probe.request(3);
    probe.assert_items(&[1, 2, 3]);
    assert_eq!(probe.assert_error().message(), "late boom");
    assert_eq!(shape(&probe), "SNNNE");
}

#[test]
fn panic_on_batch_credit_cancels_upstream() {
    let (source, stats) = counted(weir::range(0u64..1_000));
    let calls = AtomicU64::new(0);
    let result = source
        .inspect_request(move |_| {
            assert!(calls.fetch_add(1, Ordering::SeqCst) != 2, "credit boom");
        })
        .collect_with(8)
        .wait();
    let error = result.unwrap_err();
    assert_eq!(
        (error.kind(), error.message()),
        (ErrorKind::Panicked, "credit boom")
    );
    assert_eq!(stats.cancels(), 1);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Output equals the input under any schedule, and the tap saw exactly the
    /// requests (and credit) upstream received.
    #[test]
    fn matches_the_iterator_model(
        input in prop::collection::vec(any::<u16>(), 0..48),
        schedule in schedule(),
    ) {
        let model = input.clone();
        let (tap, seen) = recorder();
        let run = check_model(input, |_| model, |s| s.inspect_request(tap), &schedule, Completion::AtLength)?;
        prop_assert_eq!(seen.lock().unwrap().clone(), run.stats.request_log());
    }

    /// The kit's random schedules (1-3 threads, huge requests, `request(0)`, cancels).
    #[test]
    fn obeys_any_demand_schedule(n in 0u64..40, schedule in demand_schedule()) {
        check_publisher(|n| weir::range(0..n).inspect_request(|_| {}), n, &schedule)?;
    }
}
