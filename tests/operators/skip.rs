//! `skip` (mirrors `operators/skip.rs`): the skipped items are requested once, on
//! top of downstream's first request (`m + n`, as in Reactor); everything else passes
//! through unchanged.

use proptest::prelude::*;
use weir::demand::UNBOUNDED;
use weir::prelude::*;
use weir::tck::proptest::{check_publisher, demand_schedule};
use weir::tck::TestSubscriber;

use crate::baseline::{self, request};
use crate::support::counting::{counted, counted_with, Delivery};
use crate::support::model::{check_model, schedule, Completion};

#[test]
fn smoke() {
    baseline::smoke(weir::range(0u32..10).skip(7), &[7, 8, 9]);
    baseline::smoke(weir::range(0u32..3).skip(0), &[0, 1, 2]);
    baseline::smoke(weir::range(0u32..3).skip(5), &[] as &[u32]);
}

#[test]
fn respects_demand() {
    // Nothing requested before downstream asks; the first request carries the 5
    // skipped, later requests pass unchanged.
    baseline::respects_demand(
        weir::range(0u64..100),
        |source| source.skip(5),
        &[
            request(1, &[5], (6, 6)).log(&[6]),
            request(3, &[5, 6, 7, 8], (9, 9)).log(&[6, 3]),
        ],
    );
}

#[test]
fn skipped_items_are_requested_once_not_one_at_a_time() {
    for delivery in [Delivery::Batches, Delivery::OneByOne] {
        let (source, stats) = counted_with(weir::range(0u64..10_000), delivery);
        let subscriber = TestSubscriber::new();
        let probe = subscriber.probe();
        source.skip(5_000).subscribe(subscriber);
        probe.request(2);
        probe.assert_items(&[5_000, 5_001]);
        assert_eq!(stats.request_log(), vec![5_002], "{delivery:?}");
        assert_eq!(stats.delivered(), 5_002, "{delivery:?}");
    }

    // Through a batching sink: upstream sees the sink's requests, the first one
    // raised by n, and never more outstanding than the window plus n.
    let (source, stats) = counted(weir::range(0u64..100_000));
    let sum = source.skip(1_000).fold_with(64, 0u64, |a, x| a + x).wait();
    assert_eq!(sum.unwrap(), (1_000..100_000u64).sum::<u64>());
    assert_eq!(stats.request_log()[0], 64 + 1_000);
    assert!(stats.max_outstanding() <= 64 + 1_000);
    assert!(stats.request_calls() <= 1 + 100_000 / 48);

    // Unbounded stays unbounded.
    let (source, stats) = counted(weir::range(0u64..10));
    let out = source.skip(3).collect_with(UNBOUNDED).wait().unwrap();
    assert_eq!(out, (3..10).collect::<Vec<_>>());
    assert_eq!(stats.request_log(), vec![UNBOUNDED]);
}

#[test]
fn concurrent_first_requests_add_n_exactly_once() {
    for _ in 0..20 {
        let (source, stats) = counted(weir::range(0u64..1_000_000));
        let subscriber = TestSubscriber::new();
        let probe = subscriber.probe();
        source.skip(10).subscribe(subscriber);
        std::thread::scope(|scope| {
            for _ in 0..3 {
                let probe = probe.clone();
                scope.spawn(move || (0..50).for_each(|_| probe.request(1)));
            }
        });
        assert_eq!(stats.requested(), 150 + 10);
        assert_eq!(probe.received_count(), 150);
        assert_eq!(probe.items(), (10..160).collect::<Vec<_>>());
        probe.assert_no_violations();
    }
}

#[test]
fn cancel_stops_upstream() {
    // 0 and 1 are skipped: 0..=3 pulled for two items.
    baseline::cancel_stops_upstream(|source| source.skip(2), &[2, 3], 4);
}

#[test]
fn error_propagates_once() {
    // After the skipped items; while still skipping (`weir::error`), without demand.
    baseline::error_propagates_once(|source, _| source.skip(2), 3, &[3], 0);
}

#[test]
fn completes() {
    baseline::completes(weir::range(0u64..5), |source| source.skip(3), 2, &[3, 4]);

    // Everything skipped: completion after the first request.
    baseline::completes(weir::range(0u64..5), |source| source.skip(10), 1, &[]);
}

#[test]
fn request_zero_is_reported() {
    let subscriber = TestSubscriber::<u64>::new();
    let probe = subscriber.probe();
    weir::range(0u64..5).skip(2).subscribe(subscriber);
    probe.request(0);
    probe.assert_error_rule("3.9");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Output equals `input.iter().skip(n)` under any schedule; upstream is asked for
    /// exactly downstream's demand plus `n`, and only once downstream asked.
    #[test]
    fn matches_the_iterator_model(
        input in prop::collection::vec(any::<u16>(), 0..48),
        n in prop_oneof![4 => 0u64..56, 1 => Just(u64::MAX)],
        schedule in schedule(),
    ) {
        let model: Vec<u16> = input.iter().copied().skip(n as usize).collect();
        let completion = if model.is_empty() { Completion::BeyondLength } else { Completion::AtLength };
        let run = check_model(input, |_| model, |s| s.skip(n), &schedule, completion)?;
        let (stats, probe) = (&run.stats, &run.probe);
        prop_assert!(!stats.over_delivered());
        prop_assert_eq!(stats.cancels(), schedule.cancels());
        let expected = if probe.requested() == 0 { 0 } else { probe.requested().saturating_add(n) };
        if !run.cancelled {
            prop_assert_eq!(stats.requested(), expected);
        }
    }

    /// The kit's random schedules (1-3 threads, huge requests, `request(0)`, cancels).
    #[test]
    fn obeys_any_demand_schedule(n in 0u64..40, k in 0u64..5, schedule in demand_schedule()) {
        check_publisher(|n| weir::range(0..n + k).skip(k), n, &schedule)?;
    }
}
