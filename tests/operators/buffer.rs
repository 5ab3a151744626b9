//! `buffer` (mirrors `operators/buffer.rs`): Full, scaled. A request for `k` batches
//! asks upstream for `k × size` items; completion flushes the partial batch.

use proptest::prelude::*;
use weir::demand::UNBOUNDED;
use weir::prelude::*;
use weir::tck::proptest::{check_publisher, demand_schedule};

use crate::baseline::{self, request};
use crate::support::model::{check_model, schedule, Completion};

#[test]
fn smoke() {
    baseline::smoke(
        weir::range(0u32..7).buffer(3),
        &[vec![0, 1, 2], vec![3, 4, 5], vec![6]],
    );
    // No empty batch at the end.
    baseline::smoke(
        weir::range(0u32..6).buffer(3),
        &[vec![0, 1, 2], vec![3, 4, 5]],
    );
    baseline::smoke(weir::empty::<u32>().buffer(3), &[] as &[Vec<u32>]);
}

#[test]
fn respects_demand() {
    let all: Vec<u64> = (0..1_000).collect();
    let batches: Vec<Vec<u64>> = all.chunks(4).map(<[u64]>::to_vec).collect();
    baseline::respects_demand(
        weir::range(0u64..1_000),
        |source| source.buffer(4),
        &[
            request(1, &batches[..1], (4, 4)).log(&[4]),
            request(2, &batches[..3], (12, 12)).log(&[4, 8]),
            // Saturation: unbounded batches ask for unbounded items.
            request(u64::MAX / 2, &batches, (UNBOUNDED, 1_000))
                .log(&[4, 8, UNBOUNDED])
                .completes(),
        ],
    );
}

#[test]
fn cancel_stops_upstream() {
    baseline::cancel_stops_upstream(|source| source.buffer(2), &[vec![0, 1], vec![2, 3]], 4);
}

#[test]
fn error_propagates_once_and_discards_the_partial_batch() {
    // [3] is discarded.
    baseline::error_propagates_once(|source, _| source.buffer(2), 3, &[vec![1, 2]], 0);
}

#[test]
fn completes_with_the_partial_batch() {
    baseline::completes(
        weir::range(0u64..5),
        |source| source.buffer(2),
        3,
        &[vec![0, 1], vec![2, 3], vec![4]],
    );
}

#[test]
fn in_flight_bound_is_the_batch_size() {
    assert_eq!(weir::range(0u64..3).buffer(16).in_flight_bound(), 16);
    assert_eq!(
        weir::range(0u64..3).buffer(16).buffer(2).in_flight_bound(),
        18
    );
}

#[test]
#[should_panic(expected = "buffer size must be in 1..=2^30 (got 0)")]
fn size_zero_is_rejected() {
    let _ = weir::range(0u64..3).buffer(0);
}

#[test]
#[should_panic(expected = "buffer size must be in 1..=2^30 (got 1073741825)")]
fn huge_size_is_rejected() {
    let _ = weir::range(0u64..3).buffer((1 << 30) + 1);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Output equals `input.chunks(size)`, in order, within demand, under any schedule;
    /// upstream is asked for exactly `size ×` what downstream asked for.
    #[test]
    fn matches_the_chunks_model(
        input in prop::collection::vec(any::<u16>(), 0..48),
        size in 1usize..6,
        schedule in schedule(),
    ) {
        let model: Vec<Vec<u16>> = input.chunks(size).map(<[u16]>::to_vec).collect();
        let run = check_model(input, |_| model, |s| s.buffer(size as u64), &schedule, Completion::AtLength)?;
        prop_assert!(!run.stats.over_delivered());
        prop_assert_eq!(
            run.stats.requested(),
            run.probe.requested().saturating_mul(size as u64)
        );
    }

    /// The kit's random schedules (threads, huge requests, `request(0)`, cancels).
    #[test]
    fn obeys_any_demand_schedule(n in 0u64..30, schedule in demand_schedule()) {
        check_publisher(|n| weir::range(0..n * 3).buffer(3), n, &schedule)?;
    }
}

/// The sharp edge: counts are `u64` across the operator API, so one count feeds them
/// all (`buffer(usize)` and `take(u64)` did not compose, E0308).
#[test]
fn one_count_feeds_every_operator() {
    let batch: u64 = 4;
    let (tx, rx) = weir::channel::<u64>(batch, weir::source::channel::ChannelPolicy::Backpressure);
    for i in 0..20 {
        if tx.try_send(i).is_err() {
            break;
        }
    }
    drop(tx);
    let batches = rx
        .on_backpressure_buffer(batch, weir::Overflow::Error)
        .buffer(batch)
        .take(batch)
        .limit_rate(batch, batch / 2)
        .collect_with(batch)
        .wait()
        .unwrap();
    assert_eq!(batches, [vec![0, 1, 2, 3]]);
}

#[test]
#[should_panic(expected = "channel capacity must be in 1..=2^30 (got -1)")]
fn a_negative_channel_capacity_is_refused_with_its_value() {
    let _ = weir::channel::<u8>(-1, weir::source::channel::ChannelPolicy::Reject);
}
