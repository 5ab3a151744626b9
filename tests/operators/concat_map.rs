//! `concat_map` (mirrors `operators/concat_map.rs`): `flat_map` with a concurrency of
//! 1: one inner at a time, in the order of the outer items.

use proptest::prelude::*;
use weir::prelude::*;
use weir::tck::proptest::{check_publisher, demand_schedule};
use weir::tck::TestSubscriber;
use weir::Error;

use crate::baseline;
use crate::support::counting::counted;
use crate::support::model::{check_model, schedule, Completion};
use crate::support::shape;

#[test]
fn smoke() {
    baseline::smoke(
        weir::range(0u32..4).concat_map(|n| weir::range(0..n), 2),
        &[0, 0, 1, 0, 1, 2],
    );
}

#[test]
fn respects_demand_one_inner_at_a_time() {
    let (outer, outer_stats) = counted(weir::range(0u64..3));
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    outer
        .concat_map(|i| weir::range(i * 10..i * 10 + 4), 2)
        .subscribe(subscriber);
    assert_eq!(outer_stats.request_log(), vec![1]);
    probe.request(3);
    probe.assert_items(&[0, 1, 2]);
    assert_eq!(outer_stats.request_log(), vec![1], "first inner still live");
    probe.request(2);
    probe.assert_items(&[0, 1, 2, 3, 10]);
    assert_eq!(outer_stats.request_log(), vec![1, 1]);
    probe.request(100);
    assert_eq!(probe.received_count(), 12);
    probe.assert_completed();
    probe.assert_no_violations();
    assert_eq!(
        weir::range(0u8..1)
            .concat_map(weir::just, 7)
            .in_flight_bound(),
        7
    );
}

#[test]
#[should_panic(expected = "concat_map prefetch must be in 1..=2^30 (got 0)")]
fn zero_prefetch_panics_at_construction() {
    let _ = weir::range(0u8..1).concat_map(weir::just, 0);
}

#[test]
fn cancel_stops_upstream() {
    let (outer, outer_stats) = counted(weir::range(0u64..u64::MAX));
    let (inner, inner_stats) = counted(weir::range(0u64..u64::MAX));
    let mut inner = Some(inner);
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    outer
        .concat_map(move |_| inner.take().expect("one inner only"), 4)
        .subscribe(subscriber);
    probe.request(3);
    probe.cancel();
    assert_eq!((outer_stats.cancels(), inner_stats.cancels()), (1, 1));
    probe.request(3);
    assert_eq!(probe.received_count(), 3);
    probe.assert_no_terminal();
}

#[test]
fn error_propagates_once() {
    let boom = Error::msg("inner failed");
    let failure = boom.clone();
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::range(0u64..5)
        .concat_map(
            move |i| {
                if i == 1 {
                    weir::error::<u64>(failure.clone()).boxed()
                } else {
                    weir::just(i).boxed()
                }
            },
            2,
        )
        .subscribe(subscriber);
    probe.request(10);
    assert_eq!(shape(&probe), "SNE");
    assert!(Error::ptr_eq(&probe.assert_error(), &boom));
}

#[test]
fn completes() {
    // Empty inners only: completion with no demand at all.
    baseline::completes(
        weir::range(0u8..3),
        |source| source.concat_map(|_| weir::empty::<u8>(), 1),
        0,
        &[],
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Output equals `Iterator::flat_map`, in order, within demand, under any schedule.
    #[test]
    fn matches_the_iterator_model(
        input in prop::collection::vec(0u8..6, 0..16),
        prefetch in 1u64..5,
        schedule in schedule(),
    ) {
        let model: Vec<u8> = input.iter().flat_map(|&n| 0..n).collect();
        let run = check_model(
            input,
            |_| model,
            |s| s.concat_map(|n| weir::range(0..n), prefetch),
            &schedule,
            Completion::AtLength,
        )?;
        prop_assert!(!run.stats.over_delivered());
        prop_assert!(run.stats.max_outstanding() <= 1, "one outer item at a time");
    }

    /// The kit's random schedules (1-3 threads, huge requests, `request(0)`, cancels).
    #[test]
    fn obeys_any_demand_schedule(n in 0u64..40, schedule in demand_schedule()) {
        check_publisher(|n| weir::range(0..n).concat_map(weir::just, 2), n, &schedule)?;
    }
}

#[test]
fn an_item_delivered_after_the_cancel_is_released() {
    baseline::late_item_after_cancel_is_released(|late| {
        let mut inner = Some(late);
        weir::just(())
            .concat_map(move |()| inner.take().expect("one inner"), 4)
            .map(|_| ())
    });
}
