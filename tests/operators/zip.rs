//! `zip` (mirrors `operators/zip.rs`): pairs in order; a bounded lane per side;
//! complete once one side has completed and its lane is empty, cancelling the other.

use std::time::Duration;

use proptest::prelude::*;
use weir::operators::ZIP_PREFETCH;
use weir::prelude::*;
use weir::tck::proptest::{check_publisher, check_publisher_with, demand_schedule, PublisherCheck};
use weir::tck::TestSubscriber;
use weir::{Error, ErrorKind};

use crate::baseline;
use crate::support::counting::counted;
use crate::support::model::{check_model, schedule, Completion};
use crate::support::threaded::ThreadedRange;
use crate::support::{shape, PATIENCE};

#[test]
fn smoke() {
    baseline::smoke(
        weir::range(0u32..5).zip(weir::range(10u32..13), |a, b| a + b),
        &[10, 12, 14],
    );
}

#[test]
fn respects_demand() {
    let (a, a_stats) = counted(weir::range(0u64..1_000));
    let (b, b_stats) = counted(weir::range(0u64..1_000));
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    a.zip(b, |x, y| x * 1_000 + y).subscribe(subscriber);
    assert_eq!(a_stats.request_log(), vec![ZIP_PREFETCH]);
    assert_eq!(b_stats.request_log(), vec![ZIP_PREFETCH]);
    probe.request(2);
    probe.assert_items(&[0, 1_001]);
    probe.request(500);
    assert_eq!(probe.received_count(), 502);
    for stats in [&a_stats, &b_stats] {
        assert!(stats.max_outstanding() <= ZIP_PREFETCH);
        assert!(stats.request_log().iter().skip(1).all(|&n| n >= 192));
    }
    probe.assert_no_violations();
    assert_eq!(
        weir::range(0u8..1)
            .zip(weir::range(0u8..1), |a, _| a)
            .in_flight_bound(),
        2 * ZIP_PREFETCH
    );
}

#[test]
fn completes_with_the_shorter_side_and_cancels_the_other() {
    let (b, b_stats) = counted(weir::range(0u64..u64::MAX));
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::range(0u64..2).zip(b, |x, _| x).subscribe(subscriber);
    probe.request(1);
    probe.assert_no_terminal();
    probe.request(1);
    assert_eq!(
        shape(&probe),
        "SNNC",
        "complete at length, no extra request needed"
    );
    assert_eq!(b_stats.cancels(), 1);

    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::empty::<u8>()
        .zip(weir::never::<u8>(), |a, _| a)
        .subscribe(subscriber);
    assert_eq!(shape(&probe), "SC", "no demand needed");
}

#[test]
fn cancel_stops_upstream() {
    let (a, a_stats) = counted(weir::range(0u64..u64::MAX));
    let (b, b_stats) = counted(weir::never::<u64>());
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    a.zip(b, |x, y| x + y).subscribe(subscriber);
    probe.request(5);
    probe.cancel();
    assert_eq!((a_stats.cancels(), b_stats.cancels()), (1, 1));
    probe.assert_no_terminal();
}

#[test]
fn error_propagates_once() {
    let boom = Error::msg("side failed");
    let (a, a_stats) = counted(weir::range(0u64..u64::MAX));
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    a.zip(weir::error::<u64>(boom.clone()), |x, y| x + y)
        .subscribe(subscriber);
    assert_eq!(shape(&probe), "SE");
    assert!(Error::ptr_eq(&probe.assert_error(), &boom));
    assert_eq!(a_stats.cancels(), 1);

    // A panic in the closure.
    let (a, a_stats) = counted(weir::range(0u64..10));
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    a.zip(weir::range(0u64..10), |x, y| {
        assert!(x < 2, "bad pair");
        x + y
    })
    .subscribe(subscriber);
    probe.request(5);
    assert_eq!(shape(&probe), "SNNE");
    assert_eq!(probe.assert_error().kind(), ErrorKind::Panicked);
    assert_eq!(a_stats.cancels(), 1);
}

#[test]
fn threaded_sides_pair_in_order() {
    for _ in 0..20 {
        let out = ThreadedRange::new(1_000)
            .zip(ThreadedRange::new(800), |a, b| (a, b))
            .collect_with(7)
            .wait()
            .unwrap();
        assert_eq!(out, (0..800).map(|x| (x, x)).collect::<Vec<_>>());
    }
}

#[test]
fn forwards_the_drop_hook_to_both_sides() {
    baseline::drop_hook_reaches_every_source(
        weir::range(0u64..1_000)
            .on_backpressure_drop()
            .zip(weir::range(0u64..1_000), |a, _| a),
        1_000,
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Output equals `Iterator::zip`, in order, within demand, under any schedule.
    #[test]
    fn matches_the_iterator_model(
        a in prop::collection::vec(any::<u16>(), 0..40),
        b in prop::collection::vec(any::<u16>(), 0..40),
        schedule in schedule(),
    ) {
        let model: Vec<(u16, u16)> = a.iter().copied().zip(b.iter().copied()).collect();
        let run = check_model(
            a,
            |_| model,
            |s| s.zip(weir::from_iter(b), |x, y| (x, y)),
            &schedule,
            Completion::AtLength,
        )?;
        prop_assert!(!run.stats.over_delivered());
    }

    /// The kit's random schedules (1-3 threads, huge requests, `request(0)`, cancels).
    #[test]
    fn obeys_any_demand_schedule(n in 0u64..40, schedule in demand_schedule()) {
        check_publisher(|n| weir::range(0..n).zip(weir::range(0..u64::MAX), |a, _| a), n, &schedule)?;
        check_publisher(|n| weir::range(0..u64::MAX).zip(weir::range(0..n), |_, b| b), n, &schedule)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// The kit's random schedules over sources that emit from threads of their own.
    #[test]
    fn obeys_any_demand_schedule_with_threaded_sources(n in 0u64..24, schedule in demand_schedule()) {
        let check = PublisherCheck::asynchronous(PATIENCE, Duration::from_millis(10));
        check_publisher_with(|n| ThreadedRange::new(n).zip(ThreadedRange::new(n + 5), |a, _| a), n, &schedule, check)?;
    }
}

#[test]
fn an_item_delivered_after_the_cancel_is_released() {
    baseline::late_item_after_cancel_is_released(|late| {
        late.zip(weir::range(0u64..10), |_live, b| b)
    });
}
