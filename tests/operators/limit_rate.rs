//! `limit_rate` (mirrors `operators/limit_rate.rs`): items pass unchanged; requests go
//! upstream in batches (`high` first, then `low` per `low` delivered), never more than
//! `high` outstanding and never more than downstream asked for.

use proptest::prelude::*;
use weir::demand::UNBOUNDED;
use weir::prelude::*;
use weir::tck::proptest::{check_publisher, demand_schedule};
use weir::tck::TestSubscriber;

use crate::baseline;
use crate::support::counting::{counted_with, Delivery};
use crate::support::model::{check_model, schedule, Completion};

#[test]
fn smoke() {
    baseline::smoke(
        weir::range(0u64..1_000).limit_rate(16, 12),
        &(0..1_000).collect::<Vec<_>>(),
    );
}

#[test]
fn respects_demand() {
    let (source, stats) = counted_with(weir::range(0u64..100), Delivery::OneByOne);
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source.limit_rate(4, 2).subscribe(subscriber);
    assert_eq!(stats.request_calls(), 0);

    probe.request(1);
    probe.assert_items(&[0]);
    assert_eq!(
        stats.request_log(),
        vec![1],
        "never more than downstream asked"
    );

    probe.request(UNBOUNDED);
    assert_eq!(probe.received_count(), 100);
    probe.assert_completed();
    let log = stats.request_log();
    assert_eq!(
        &log[..3],
        &[1, 4, 2],
        "high first, then low per low delivered"
    );
    assert!(log[1..].iter().all(|&n| n <= 4));
    assert!(stats.max_outstanding() <= 4);
    assert!(!stats.over_delivered());
}

#[test]
fn cancel_stops_upstream() {
    baseline::cancel_stops_upstream(|source| source.limit_rate(8, 6), &[0, 1, 2], 3);
}

#[test]
fn error_propagates_once() {
    baseline::error_propagates_once(|source, _| source.limit_rate(4, 3), 2, &[1, 2], 0);
}

#[test]
fn completes() {
    baseline::completes(
        weir::range(0u64..3),
        |source| source.limit_rate(2, 1),
        5,
        &[0, 1, 2],
    );
    assert_eq!(weir::range(0u64..3).limit_rate(2, 1).in_flight_bound(), 0);
}

/// The batching bound at scale: `limit_rate(256, 192)` over 1,000,000 items issues at
/// most ⌈1,000,000 / 192⌉ + 1 upstream requests and never has more than 256
/// outstanding, whatever the sink's own demand pattern and however upstream delivers.
#[test]
fn limit_rate_256_192_over_a_million_items() {
    const N: u64 = 1_000_000;
    let most = N.div_ceil(192) + 1;
    for delivery in [Delivery::Batches, Delivery::OneByOne] {
        for prefetch in [UNBOUNDED, 256, 1_000, 7] {
            let (source, stats) = counted_with(weir::range(0..N), delivery);
            let sum = source
                .limit_rate(256, 192)
                .fold_with(prefetch, 0u64, |acc, x| acc + x)
                .wait()
                .unwrap();
            assert_eq!(sum, N * (N - 1) / 2);
            let case = format!("{delivery:?}, sink prefetch {prefetch}");
            println!(
                "{case}: {} upstream requests, max outstanding {}",
                stats.request_calls(),
                stats.max_outstanding()
            );
            if prefetch >= 256 {
                assert!(
                    stats.request_calls() <= most,
                    "{case}: {} upstream requests, at most {most} allowed",
                    stats.request_calls()
                );
            }
            assert!(
                stats.max_outstanding() <= 256,
                "{case}: {} outstanding",
                stats.max_outstanding()
            );
            assert!(!stats.over_delivered(), "{case}");
        }
    }
}

#[test]
fn low_rules() {
    // low == high: the 75% rule; low == 0: always high.
    for (low, batch) in [(4, 3), (0, 4)] {
        let (source, stats) = counted_with(weir::range(0u64..40), Delivery::OneByOne);
        let out = source
            .limit_rate(4, low)
            .collect_with(UNBOUNDED)
            .wait()
            .unwrap();
        assert_eq!(out.len(), 40);
        let log = stats.request_log();
        assert_eq!(log[0], 4);
        assert!(
            log[1..].iter().all(|&n| n == batch),
            "limit_rate(4, {low}): {log:?}"
        );
    }
}

#[test]
#[should_panic(expected = "limit_rate high must be at least 1 (got 0)")]
fn high_zero_is_rejected() {
    let _ = weir::range(0u64..3).limit_rate(0, 0);
}

#[test]
#[should_panic(expected = "limit_rate low must be in 0..=high (got low 9, high 4)")]
fn low_above_high_is_rejected() {
    let _ = weir::range(0u64..3).limit_rate(4, 9);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Output equals the input, in order, within demand, under any schedule; upstream
    /// never has more than `high` outstanding nor more than downstream asked for.
    #[test]
    fn matches_the_identity_model(
        input in prop::collection::vec(any::<u16>(), 0..48),
        high in 1u64..10,
        low_fraction in 0u64..=100,
        schedule in schedule(),
    ) {
        let low = high * low_fraction / 100;
        let model = input.clone();
        let run = check_model(
            input,
            |_| model,
            |s| s.limit_rate(high, low),
            &schedule,
            Completion::AtLength,
        )?;
        prop_assert!(!run.stats.over_delivered());
        prop_assert!(run.stats.max_outstanding() <= high);
        prop_assert!(run.stats.requested() <= run.probe.requested());
    }

    /// The kit's random schedules (threads, huge requests, `request(0)`, cancels).
    #[test]
    fn obeys_any_demand_schedule(n in 0u64..40, schedule in demand_schedule()) {
        check_publisher(|n| weir::range(0..n).limit_rate(5, 3), n, &schedule)?;
    }
}
