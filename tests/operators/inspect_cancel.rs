//! `inspect_cancel` (mirrors `operators/inspect_cancel.rs`): the tap runs once, at
//! the first cancel, before upstream is cancelled; never on termination; a panic in
//! it is logged and upstream is cancelled anyway.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use proptest::prelude::*;
use weir::prelude::*;
use weir::tck::proptest::{check_publisher, demand_schedule};
use weir::tck::TestSubscriber;

use crate::baseline::{self, request};
use crate::support::counting::{counted, counting_generator};
use crate::support::model::{check_model, schedule, Completion};
use crate::support::shape;

/// A cancel tap that counts its runs, and the count.
fn counter() -> (impl FnOnce() + Send + 'static, Arc<AtomicU64>) {
    let runs = Arc::new(AtomicU64::new(0));
    let count = runs.clone();
    (
        move || {
            count.fetch_add(1, Ordering::SeqCst);
        },
        runs,
    )
}

#[test]
fn smoke() {
    let (tap, runs) = counter();
    baseline::smoke(weir::range(0u32..3).inspect_cancel(tap), &[0, 1, 2]);
    assert_eq!(runs.load(Ordering::SeqCst), 0, "no cancel, no tap");
}

#[test]
fn respects_demand() {
    baseline::respects_demand(
        weir::range(0u64..10),
        |source| source.inspect_cancel(|| {}),
        &[
            request(1, &[0], (1, 1)).log(&[1]),
            request(2, &[0, 1, 2], (3, 3)).log(&[1, 2]),
        ],
    );
}

#[test]
fn cancel_stops_upstream() {
    let (generator, calls) = counting_generator(u64::MAX);
    let (source, stats) = counted(generator);
    let (tap, runs) = counter();
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source.inspect_cancel(tap).subscribe(subscriber);
    probe.request(2);
    probe.cancel();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(stats.cancels(), 1);
    probe.cancel();
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the tap runs once");
    probe.request(5);
    probe.assert_items(&[0, 1]);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[test]
fn panic_in_the_tap_still_cancels_upstream() {
    let (source, stats) = counted(weir::range(0u64..10));
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source
        .inspect_cancel(|| panic!("cancel tap boom"))
        .subscribe(subscriber);
    probe.request(1);
    probe.cancel();
    assert_eq!(stats.cancels(), 1);
    assert_eq!(shape(&probe), "SN", "nothing is signalled after cancel");
}

#[test]
fn error_propagates_once() {
    // An error is not a cancel: the tap never runs.
    let runs = Arc::new(AtomicU64::new(0));
    baseline::error_propagates_once(
        |source, _| {
            let runs = runs.clone();
            source.inspect_cancel(move || {
                runs.fetch_add(1, Ordering::SeqCst);
            })
        },
        2,
        &[1, 2],
        0,
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[test]
fn completes() {
    let (tap, runs) = counter();
    baseline::completes(
        weir::range(0u64..2),
        |source| source.inspect_cancel(tap),
        2,
        &[0, 1],
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    // A stage below that cancels on its own (take) is a downstream cancel here.
    let (tap, runs) = counter();
    let out = weir::range(0u64..100)
        .inspect_cancel(tap)
        .take(2)
        .collect()
        .wait();
    assert_eq!(out.unwrap(), vec![0, 1]);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Output equals the input under any schedule; the tap ran once iff the schedule
    /// cancelled.
    #[test]
    fn matches_the_iterator_model(
        input in prop::collection::vec(any::<u16>(), 0..48),
        schedule in schedule(),
    ) {
        let model = input.clone();
        let (tap, runs) = counter();
        let run = check_model(input, |_| model, |s| s.inspect_cancel(tap), &schedule, Completion::AtLength)?;
        prop_assert_eq!(runs.load(Ordering::SeqCst), u64::from(run.cancelled));
        prop_assert_eq!(run.stats.requested(), run.probe.requested());
        prop_assert_eq!(run.stats.cancels(), schedule.cancels());
    }

    /// The kit's random schedules (1-3 threads, huge requests, `request(0)`, cancels).
    #[test]
    fn obeys_any_demand_schedule(n in 0u64..40, schedule in demand_schedule()) {
        check_publisher(|n| weir::range(0..n).inspect_cancel(|| {}), n, &schedule)?;
    }
}
