//! `inspect` (mirrors `operators/inspect.rs`): PassThrough; the tap sees exactly the
//! items that pass, in order, just before downstream; a panic in the tap becomes
//! `on_error(Panicked)` and cancels upstream.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

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

/// A tap that records what it sees, and the record.
fn recorder<T: Clone + Send + 'static>() -> (impl FnMut(&T) + Send + 'static, Arc<Mutex<Vec<T>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    (move |x: &T| log.lock().unwrap().push(x.clone()), seen)
}

#[test]
fn smoke() {
    let (tap, seen) = recorder();
    let out = weir::range(0u32..5).inspect(tap).collect().wait().unwrap();
    assert_eq!(out, vec![0, 1, 2, 3, 4]);
    assert_eq!(*seen.lock().unwrap(), out);
}

#[test]
fn respects_demand() {
    let (source, stats) = counted(weir::range(0u64..10));
    let (tap, seen) = recorder();
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source.inspect(tap).subscribe(subscriber);
    probe.request(1);
    probe.assert_items(&[0]);
    probe.request(2);
    probe.assert_items(&[0, 1, 2]);
    assert_eq!(*seen.lock().unwrap(), vec![0, 1, 2]);
    assert_eq!(
        stats.request_log(),
        vec![1, 2],
        "requests pass through unchanged"
    );
    probe.assert_no_terminal();
}

#[test]
fn cancel_stops_upstream() {
    let (generator, calls) = counting_generator(u64::MAX);
    let (source, stats) = counted(generator);
    let (tap, seen) = recorder();
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source.inspect(tap).subscribe(subscriber);
    probe.request(3);
    probe.cancel();
    assert_eq!(stats.cancels(), 1);
    probe.request(10);
    probe.assert_items(&[0, 1, 2]);
    assert_eq!(seen.lock().unwrap().len(), 3);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[test]
fn error_propagates_once() {
    let boom = Error::msg("source failed");
    let failure = boom.clone();
    let mut sent = 0u64;
    let source = weir::generate((), move |_| {
        sent += 1;
        if sent > 2 {
            Step::Error(failure.clone())
        } else {
            Step::Next(sent)
        }
    });
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source.inspect(|_| {}).subscribe(subscriber);
    probe.request(10);
    probe.assert_items(&[1, 2]);
    assert!(Error::ptr_eq(&probe.assert_error(), &boom));
    assert_eq!(shape(&probe), "SNNE");

    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    Unruly::new(boom.clone())
        .inspect(|_| {})
        .subscribe(subscriber);
    assert_eq!(shape(&probe), "SE");
    assert!(Error::ptr_eq(&probe.assert_error(), &boom));
    probe.assert_no_violations();
}

#[test]
fn completes() {
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::range(0u64..2).inspect(|_| {}).subscribe(subscriber);
    probe.request(2);
    probe.assert_items(&[0, 1]);
    probe.assert_completed();
}

#[test]
fn panic_becomes_panicked_error_and_cancels_upstream() {
    for delivery in [Delivery::Batches, Delivery::OneByOne] {
        let (generator, _) = counting_generator(u64::MAX);
        let (source, stats) = counted_with(generator, delivery);
        let subscriber = TestSubscriber::new();
        let probe = subscriber.probe();
        source
            .inspect(|x| assert!(*x != 2, "inspect boom at {x}"))
            .subscribe(subscriber);
        probe.request(10);
        probe.assert_items(&[0, 1]);
        let error = probe.assert_error();
        assert_eq!(error.kind(), ErrorKind::Panicked, "{delivery:?}");
        assert_eq!(error.message(), "inspect boom at 2", "{delivery:?}");
        assert_eq!(stats.cancels(), 1, "{delivery:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Output equals the input under any schedule, and the tap saw exactly the
    /// items that went out.
    #[test]
    fn matches_the_iterator_model(
        input in prop::collection::vec(any::<u16>(), 0..48),
        schedule in schedule(),
    ) {
        let model = input.clone();
        let (tap, seen) = recorder();
        let run = check_model(input, |_| model, |s| s.inspect(tap), &schedule, Completion::AtLength)?;
        prop_assert_eq!(&*seen.lock().unwrap(), &run.probe.items());
        prop_assert_eq!(run.stats.requested(), run.probe.requested());
    }

    /// The kit's random schedules (1-3 threads, huge requests, `request(0)`, cancels).
    #[test]
    fn obeys_any_demand_schedule(n in 0u64..40, schedule in demand_schedule()) {
        check_publisher(|n| weir::range(0..n).inspect(|_| {}), n, &schedule)?;
    }
}
