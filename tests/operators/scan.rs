//! `scan` (mirrors `operators/scan.rs`): PassThrough, one accumulated state out per
//! item in (the initial state is not emitted); a panic in the closure becomes
//! `on_error(Panicked)` and cancels upstream.

use proptest::prelude::*;
use weir::prelude::*;
use weir::tck::proptest::{check_publisher, demand_schedule};

use crate::baseline::{self, request, Spy};
use crate::support::model::{check_model, schedule, Completion};

/// `scan` from 0 whose closure (sums the items) reports each call to `spy`, for the
/// baseline check that makes it panic.
fn spied<P: Publisher<Item = u64>>(source: P, spy: Spy) -> impl Publisher<Item = u64> {
    source.scan(0u64, move |a, x| {
        spy.call(x);
        a + x
    })
}

#[test]
fn smoke() {
    baseline::smoke(
        weir::range(1u64..6).scan(0, |acc, x| acc + x),
        &[1, 3, 6, 10, 15],
    );

    // A non-`Copy` state: each emitted state is a snapshot.
    baseline::smoke(
        weir::from_iter(vec!['a', 'b', 'c']).scan(String::new(), |mut s, c| {
            s.push(c);
            s
        }),
        &["a", "ab", "abc"],
    );

    // The initial state is not emitted.
    baseline::smoke(weir::empty::<u8>().scan(7u8, |a, _| a), &[] as &[u8]);
}

#[test]
fn respects_demand() {
    // Requests pass through unchanged.
    baseline::respects_demand(
        weir::range(1u64..100),
        |source| source.scan(0, |a, x| a + x),
        &[
            request(1, &[1], (1, 1)).log(&[1]),
            request(2, &[1, 3, 6], (3, 3)).log(&[1, 2]),
        ],
    );
}

#[test]
fn cancel_stops_upstream() {
    baseline::cancel_stops_upstream(|source| source.scan(0, |a, x| a + x), &[0, 1, 3], 3);
}

#[test]
fn error_propagates_once() {
    // From 10, over a well-behaved source that fails after two items.
    baseline::error_propagates_once(
        |source, spy| {
            source.scan(10, move |a, x| {
                spy.call(x);
                a + x
            })
        },
        2,
        &[11, 13],
        2,
    );
}

#[test]
fn completes() {
    baseline::completes(
        weir::range(0u64..3),
        |source| source.scan(0, |a, x| a + x),
        3,
        &[0, 1, 3],
    );
}

#[test]
fn panic_becomes_panicked_error_and_cancels_upstream() {
    baseline::panic_becomes_panicked_error_and_cancels_upstream(spied, 3, &[0, 1, 3], 100);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Output equals `Iterator::scan` emitting every state, under any schedule;
    /// requests pass through unchanged.
    #[test]
    fn matches_the_iterator_model(
        input in prop::collection::vec(any::<u16>(), 0..48),
        init in any::<u32>(),
        schedule in schedule(),
    ) {
        let f = |acc: u32, x: u16| acc.wrapping_mul(31).wrapping_add(u32::from(x));
        let model: Vec<u32> = input
            .iter()
            .scan(init, |state, x| {
                *state = f(*state, *x);
                Some(*state)
            })
            .collect();
        let run = check_model(input, |_| model, |s| s.scan(init, f), &schedule, Completion::AtLength)?;
        let (stats, probe) = (&run.stats, &run.probe);
        prop_assert!(!stats.over_delivered());
        prop_assert_eq!(stats.requested(), probe.requested());
        prop_assert_eq!(stats.cancels(), schedule.cancels());
    }

    /// The kit's random schedules (1-3 threads, huge requests, `request(0)`, cancels).
    #[test]
    fn obeys_any_demand_schedule(n in 0u64..40, schedule in demand_schedule()) {
        check_publisher(|n| weir::range(0..n).scan(0u64, |a, x| a + x), n, &schedule)?;
    }
}
