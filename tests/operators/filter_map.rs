//! `filter_map` (mirrors `operators/filter_map.rs`): PassThrough with replenishment.
//! Swallowed items (`None`) are re-requested once per batch, so upstream's outstanding
//! demand always equals downstream's; a panic in the closure becomes
//! `on_error(Panicked)` and cancels upstream.

use proptest::prelude::*;
use weir::prelude::*;
use weir::tck::proptest::{check_publisher, demand_schedule};

use crate::baseline::{self, request, Spy};
use crate::support::model::{check_model, schedule, Completion};

/// Even numbers, halved and shown; odd ones swallowed.
fn halve_evens(x: u64) -> Option<String> {
    (x % 2 == 0).then(|| format!("{}", x / 2))
}

/// `filter_map` whose closure (keeps the even items) reports each call to `spy`, for
/// the baseline check that makes it panic.
fn spied<P: Publisher<Item = u64>>(source: P, spy: Spy) -> impl Publisher<Item = u64> {
    source.filter_map(move |x| {
        spy.call(x);
        (x % 2 == 0).then_some(x)
    })
}

#[test]
fn smoke() {
    baseline::smoke(
        weir::range(0u64..7).filter_map(halve_evens),
        &["0", "1", "2", "3"],
    );
    baseline::smoke(
        weir::range(0u32..1_000).filter_map(|_| None::<u8>),
        &[] as &[u8],
    );
}

#[test]
fn respects_demand() {
    baseline::respects_demand(
        weir::range(1u64..100),
        |source| source.filter_map(|x| (x % 3 == 0).then_some(x * 10)),
        &[
            // Pulled exactly up to the first kept item; 1 and 2 were re-requested.
            request(1, &[30], (3, 3)),
            request(2, &[30, 60, 90], (9, 9)),
        ],
    );
}

#[test]
fn cancel_stops_upstream() {
    // Pulled 0..=2 and no further.
    baseline::cancel_stops_upstream(
        |source| source.filter_map(halve_evens),
        &["0".to_string(), "1".to_string()],
        3,
    );
}

#[test]
fn error_propagates_once() {
    // The closure runs on each of the four items before the error.
    baseline::error_propagates_once(
        |source, spy| {
            source.filter_map(move |x| {
                spy.call(x);
                halve_evens(x)
            })
        },
        4,
        &["1".to_string(), "2".to_string()],
        4,
    );
}

#[test]
fn completes() {
    baseline::completes(
        weir::range(0u64..10),
        |source| source.filter_map(|x| (x < 2).then_some(x)),
        3,
        &[0, 1],
    );
}

/// 1,000,000 items, 90% swallowed, into a sink that requests 64 at a time: the
/// swallowed items are re-requested once per batch, never one request per item.
#[test]
fn swallowed_items_are_re_requested_in_batches() {
    const ITEMS: u64 = 1_000_000;
    baseline::re_requested_in_batches(
        |source| source.filter_map(|x| (x % 10 == 0).then_some(x)),
        ITEMS,
        ITEMS / 10,
    );
}

#[test]
fn panic_becomes_panicked_error_and_cancels_upstream() {
    baseline::panic_becomes_panicked_error_and_cancels_upstream(spied, 5, &[0, 2, 4], 100);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Output equals `input.iter().filter_map(f)` under any schedule, and upstream's
    /// outstanding demand equals downstream's (every swallowed item re-requested once).
    #[test]
    fn matches_the_iterator_model(
        input in prop::collection::vec(0u8..=255, 0..64),
        schedule in schedule(),
        modulus in 1u8..=4,
    ) {
        let f = move |x: u8| (x % modulus == 0).then(|| u32::from(x) * 7);
        let model: Vec<u32> = input.iter().copied().filter_map(f).collect();
        let run = check_model(input, |_| model, |s| s.filter_map(f), &schedule, Completion::BeyondLength)?;
        baseline::check_replenished(&run, &schedule)?;
    }

    /// The kit's random schedules (1-3 threads, huge requests, `request(0)`, cancels).
    #[test]
    fn obeys_any_demand_schedule(n in 0u64..40, schedule in demand_schedule()) {
        check_publisher(
            |n| weir::range(0..3 * n).filter_map(|x| (x % 3 == 2).then_some(x / 3)),
            n,
            &schedule,
        )?;
    }
}
