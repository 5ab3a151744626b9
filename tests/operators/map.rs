//! `map` (mirrors `operators/map.rs`): PassThrough, one item out per item in; a panic
//! in the closure becomes `on_error(Panicked)` and cancels upstream.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use proptest::prelude::*;
use weir::prelude::*;
use weir::source::Step;
use weir::tck::proptest::{check_publisher, demand_schedule};
use weir::tck::TestSubscriber;
use weir::{Error, ErrorKind};

use crate::support::counting::{counted, counted_with, counting_generator, Delivery};
use crate::support::model::{check_model, schedule, Completion};
use crate::support::shape;
use crate::support::unruly::Unruly;

#[test]
fn smoke() {
    let out = weir::range(0u32..5)
        .map(|x| x * 2)
        .collect()
        .wait()
        .unwrap();
    assert_eq!(out, vec![0, 2, 4, 6, 8]);

    // The item type may change.
    let out = weir::from_iter(vec![1u8, 22, 3])
        .map(|x| format!("<{x}>"))
        .collect()
        .wait()
        .unwrap();
    assert_eq!(out, vec!["<1>", "<22>", "<3>"]);
}

#[test]
fn respects_demand() {
    let (source, stats) = counted(weir::range(0u64..10));
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source.map(|x| x + 100).subscribe(subscriber);

    probe.assert_items(&[]);
    assert_eq!((stats.requested(), stats.delivered()), (0, 0));

    probe.request(1);
    probe.assert_items(&[100]);
    assert_eq!(
        stats.request_log(),
        vec![1],
        "requests pass through unchanged"
    );
    assert_eq!(stats.delivered(), 1);

    probe.request(3);
    probe.assert_items(&[100, 101, 102, 103]);
    assert_eq!(stats.request_log(), vec![1, 3]);
    probe.assert_no_terminal();

    probe.request(6);
    probe.assert_items(&(100..110).collect::<Vec<_>>());
    probe.assert_completed();
    assert_eq!(stats.delivered(), 10);
}

#[test]
fn cancel_stops_upstream() {
    let (generator, calls) = counting_generator(u64::MAX);
    let (source, stats) = counted(generator);
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source.map(|x| x * 10).subscribe(subscriber);

    probe.request(3);
    probe.assert_items(&[0, 10, 20]);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3,
        "pulled only what was requested"
    );

    probe.cancel();
    assert_eq!(stats.cancels(), 1, "cancel reaches upstream");
    probe.request(10);
    probe.assert_items(&[0, 10, 20]);
    probe.assert_no_terminal();
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3,
        "upstream not pulled after cancel"
    );
    assert_eq!(stats.delivered(), 3);
}

#[test]
fn error_propagates_once() {
    // A well-behaved source that fails after three items.
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
    let applied = Arc::new(AtomicU64::new(0));
    let counter = applied.clone();
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source
        .map(move |x| {
            counter.fetch_add(1, Ordering::SeqCst);
            x * 2
        })
        .subscribe(subscriber);
    probe.request(10);
    probe.assert_items(&[2, 4, 6]);
    assert!(
        Error::ptr_eq(&probe.assert_error(), &boom),
        "the same error"
    );
    assert_eq!(shape(&probe), "SNNNE");
    assert_eq!(applied.load(Ordering::SeqCst), 3);
    probe.request(5);
    assert_eq!(shape(&probe), "SNNNE", "nothing after the error");

    // An error needs no demand, and the closure never runs.
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::error::<u64>(boom.clone())
        .map(|_: u64| -> u64 { unreachable!("no items") })
        .subscribe(subscriber);
    assert_eq!(shape(&probe), "SE");
    assert!(Error::ptr_eq(&probe.assert_error(), &boom));

    // An upstream that keeps signalling after its error: only the first error passes.
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    Unruly::new(boom.clone())
        .map(|x| x + 1)
        .subscribe(subscriber);
    assert_eq!(shape(&probe), "SE");
    assert!(Error::ptr_eq(&probe.assert_error(), &boom));
    probe.assert_no_violations();
}

#[test]
fn completes() {
    // Completion follows the last item without a further request.
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::range(0u8..3).map(u32::from).subscribe(subscriber);
    probe.request(3);
    probe.assert_items(&[0, 1, 2]);
    probe.assert_completed();
    assert_eq!(shape(&probe), "SNNNC");

    // An empty source completes with no demand at all.
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::empty::<u8>().map(u32::from).subscribe(subscriber);
    assert_eq!(shape(&probe), "SC");
}

#[test]
fn panic_becomes_panicked_error_and_cancels_upstream() {
    for delivery in [Delivery::Batches, Delivery::OneByOne] {
        let (generator, calls) = counting_generator(u64::MAX);
        let (source, stats) = counted_with(generator, delivery);
        let applied = Arc::new(AtomicU64::new(0));
        let counter = applied.clone();
        let subscriber = TestSubscriber::new();
        let probe = subscriber.probe();
        source
            .map(move |x| {
                counter.fetch_add(1, Ordering::SeqCst);
                if x == 3 {
                    panic!("map boom at {x}");
                }
                x
            })
            .subscribe(subscriber);
        probe.request(10);

        probe.assert_items(&[0, 1, 2]);
        let error = probe.assert_error();
        assert_eq!(error.kind(), ErrorKind::Panicked, "{delivery:?}");
        assert_eq!(error.message(), "map boom at 3", "{delivery:?}");
        assert_eq!(shape(&probe), "SNNNE", "{delivery:?}");
        assert_eq!(stats.cancels(), 1, "{delivery:?}: upstream cancelled");
        assert_eq!(applied.load(Ordering::SeqCst), 4, "{delivery:?}");

        // Nothing follows: more demand pulls nothing and signals nothing.
        let pulled = calls.load(Ordering::SeqCst);
        assert!(
            pulled <= 10,
            "{delivery:?}: pulled {pulled} against a demand of 10"
        );
        probe.request(100);
        assert_eq!(shape(&probe), "SNNNE", "{delivery:?}");
        assert_eq!(calls.load(Ordering::SeqCst), pulled, "{delivery:?}");
        assert_eq!(applied.load(Ordering::SeqCst), 4, "{delivery:?}");
    }

    // Through a batching sink (the fused fold path).
    let (generator, calls) = counting_generator(u64::MAX);
    let (source, stats) = counted(generator);
    let applied = Arc::new(AtomicU64::new(0));
    let counter = applied.clone();
    let result = source
        .map(move |x| {
            counter.fetch_add(1, Ordering::SeqCst);
            if x == 100 {
                panic!("map boom in a batch");
            }
            x
        })
        .fold_with(64, 0u64, |acc, x| acc + x)
        .wait();
    let error = result.unwrap_err();
    assert_eq!(
        (error.kind(), error.message()),
        (ErrorKind::Panicked, "map boom in a batch")
    );
    assert_eq!(stats.cancels(), 1);
    assert_eq!(
        applied.load(Ordering::SeqCst),
        101,
        "the closure stops at the panic"
    );
    // At most the batch in flight is pulled: never beyond what was requested.
    assert!(calls.load(Ordering::SeqCst) <= stats.requested());
    assert!(!stats.over_delivered());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Output equals `input.iter().map(f)`, in order, within demand, under any
    /// schedule; requests and items pass through one to one.
    #[test]
    fn matches_the_iterator_model(
        input in prop::collection::vec(any::<i32>(), 0..48),
        schedule in schedule(),
    ) {
        let f = |x: i32| i64::from(x) * 3 - 1;
        let model: Vec<i64> = input.iter().map(|&x| f(x)).collect();
        let run = check_model(input, &model, |s| s.map(f), &schedule, Completion::AtLength)?;
        prop_assert_eq!(run.stats.requested(), run.probe.requested());
        prop_assert_eq!(run.stats.delivered(), run.probe.received_count());
        prop_assert!(!run.stats.over_delivered());
        prop_assert_eq!(run.stats.cancels(), schedule.cancels(), "cancel passes straight through");
    }

    /// The kit's random schedules (1-3 threads, huge requests, `request(0)`,
    /// cancels) through `map`.
    #[test]
    fn obeys_any_demand_schedule(n in 0u64..40, schedule in demand_schedule()) {
        check_publisher(|n| weir::range(0..n).map(|x| x ^ 0xff), n, &schedule)?;
    }
}
