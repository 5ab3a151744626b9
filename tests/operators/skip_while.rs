//! `skip_while` (mirrors `operators/skip_while.rs`): PassThrough with replenishment
//! while skipping (like `filter`), plain PassThrough afterwards; the predicate is not
//! called after the first item it rejects.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use proptest::prelude::*;
use weir::prelude::*;
use weir::tck::proptest::{check_publisher, demand_schedule};

use crate::baseline::{self, request, Spy};
use crate::support::model::{check_model, schedule, Completion};

/// `skip_while` whose predicate (skips every item) reports each call to `spy`, for the
/// baseline check that makes it panic.
fn spied<P: Publisher<Item = u64>>(source: P, spy: Spy) -> impl Publisher<Item = u64> {
    source.skip_while(move |x| {
        spy.call(*x);
        true
    })
}

#[test]
fn smoke() {
    baseline::smoke(
        weir::from_iter(vec![1u8, 2, 9, 1, 2]).skip_while(|x| *x < 5),
        &[9, 1, 2],
    );
    baseline::smoke(weir::range(0u32..100).skip_while(|_| true), &[] as &[u32]);
}

#[test]
fn respects_demand() {
    baseline::respects_demand(
        weir::range(0u64..100),
        |source| source.skip_while(|x| *x < 10),
        &[
            // Pulled exactly up to the first passed item; the ten skipped were
            // re-requested.
            request(1, &[10], (11, 11)),
            request(2, &[10, 11, 12], (13, 13)),
        ],
    );
}

#[test]
fn predicate_stops_at_the_first_rejected_item() {
    let tested = Arc::new(AtomicU64::new(0));
    let counter = tested.clone();
    let out = weir::range(0u64..1_000)
        .skip_while(move |x| {
            counter.fetch_add(1, Ordering::SeqCst);
            *x < 3
        })
        .collect_with(16)
        .wait()
        .unwrap();
    assert_eq!(out, (3..1_000).collect::<Vec<_>>());
    assert_eq!(tested.load(Ordering::SeqCst), 4);
}

/// 1,000,000 items, the first 900,000 skipped, into a sink that requests 64 at a
/// time: the skipped items are re-requested once per batch, not once per item.
#[test]
fn skipped_items_are_re_requested_in_batches() {
    baseline::re_requested_in_batches(
        |source| source.skip_while(|x| *x < 900_000),
        1_000_000,
        100_000,
    );
}

#[test]
fn cancel_stops_upstream() {
    // 0 and 1 are skipped: 0..=3 pulled for two items.
    baseline::cancel_stops_upstream(|source| source.skip_while(|x| *x < 2), &[2, 3], 4);
}

#[test]
fn error_propagates_once() {
    // The predicate runs on 1, 2 and 3 (the first it rejects), then never again.
    baseline::error_propagates_once(
        |source, spy| {
            source.skip_while(move |x| {
                spy.call(*x);
                *x < 3
            })
        },
        3,
        &[3],
        3,
    );
}

#[test]
fn completes() {
    baseline::completes(
        weir::range(0u64..50),
        |source| source.skip_while(|_| true),
        1,
        &[],
    );
}

#[test]
fn panic_becomes_panicked_error_and_cancels_upstream() {
    baseline::panic_becomes_panicked_error_and_cancels_upstream(spied, 4, &[], 100);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Output equals `input.iter().skip_while(p)` under any schedule; upstream's
    /// outstanding demand equals downstream's (each skipped item re-requested once).
    #[test]
    fn matches_the_iterator_model(
        input in prop::collection::vec(0u8..=255, 0..64),
        bound in any::<u8>(),
        schedule in schedule(),
    ) {
        let skip = move |x: &u8| *x <= bound;
        let model: Vec<u8> = input.iter().copied().skip_while(skip).collect();
        let completion = if model.is_empty() { Completion::BeyondLength } else { Completion::AtLength };
        let run = check_model(input, |_| model, |s| s.skip_while(skip), &schedule, completion)?;
        baseline::check_replenished(&run, &schedule)?;
    }

    /// The kit's random schedules (1-3 threads, huge requests, `request(0)`, cancels).
    #[test]
    fn obeys_any_demand_schedule(n in 0u64..40, k in 0u64..5, schedule in demand_schedule()) {
        check_publisher(|n| weir::range(0..n + k).skip_while(move |x| *x < k), n, &schedule)?;
    }
}
