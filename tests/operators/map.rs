//! `map` (mirrors `operators/map.rs`): PassThrough, one item out per item in; a panic
//! in the closure becomes `on_error(Panicked)` and cancels upstream.

use proptest::prelude::*;
use weir::prelude::*;
use weir::tck::proptest::{check_publisher, demand_schedule};

use crate::baseline::{self, request, Spy};
use crate::support::model::{check_model, schedule, Completion};

/// `map` whose closure (doubles each item) reports each call to `spy`, for the baseline
/// checks that count its calls or make it panic.
fn spied<P: Publisher<Item = u64>>(source: P, spy: Spy) -> impl Publisher<Item = u64> {
    source.map(move |x| {
        spy.call(x);
        x * 2
    })
}

#[test]
fn smoke() {
    baseline::smoke(weir::range(0u32..5).map(|x| x * 2), &[0, 2, 4, 6, 8]);

    // The item type may change.
    baseline::smoke(
        weir::from_iter(vec![1u8, 22, 3]).map(|x| format!("<{x}>")),
        &["<1>", "<22>", "<3>"],
    );
}

#[test]
fn respects_demand() {
    // Requests pass through unchanged, and one item comes out per item in.
    baseline::respects_demand(
        weir::range(0u64..10),
        |source| source.map(|x| x + 100),
        &[
            request(1, &[100], (1, 1)).log(&[1]),
            request(3, &[100, 101, 102, 103], (4, 4)).log(&[1, 3]),
            request(6, &(100..110).collect::<Vec<_>>(), (10, 10))
                .log(&[1, 3, 6])
                .completes(),
        ],
    );
}

#[test]
fn cancel_stops_upstream() {
    // Pulled only what was requested.
    baseline::cancel_stops_upstream(|source| source.map(|x| x * 10), &[0, 10, 20], 3);
}

#[test]
fn error_propagates_once() {
    // A well-behaved source that fails after three items; the closure ran on each.
    baseline::error_propagates_once(spied, 3, &[2, 4, 6], 3);
}

#[test]
fn completes() {
    // Completion follows the last item without a further request.
    baseline::completes(
        weir::range(0u8..3),
        |source| source.map(u32::from),
        3,
        &[0, 1, 2],
    );

    // An empty source completes with no demand at all.
    baseline::completes(weir::empty::<u8>(), |source| source.map(u32::from), 0, &[]);
}

#[test]
fn panic_becomes_panicked_error_and_cancels_upstream() {
    baseline::panic_becomes_panicked_error_and_cancels_upstream(spied, 3, &[0, 2, 4], 100);
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
        let model = |input: &[i32]| input.iter().map(|&x| f(x)).collect();
        let run = check_model(input, model, |s| s.map(f), &schedule, Completion::AtLength)?;
        prop_assert_eq!(run.stats.requested(), run.probe.requested());
        prop_assert_eq!(run.stats.delivered(), run.probe.received_count());
        prop_assert_eq!(run.stats.cancels(), schedule.cancels(), "cancel passes straight through");
    }

    /// The kit's random schedules (1-3 threads, huge requests, `request(0)`,
    /// cancels) through `map`.
    #[test]
    fn obeys_any_demand_schedule(n in 0u64..40, schedule in demand_schedule()) {
        check_publisher(|n| weir::range(0..n).map(|x| x ^ 0xff), n, &schedule)?;
    }
}
