//! `take_while` (mirrors `operators/take_while.rs`): PassThrough until the first
//! rejected item, which completes downstream and cancels upstream; upstream is never
//! pulled past that item.

use std::sync::atomic::Ordering;

use proptest::prelude::*;
use weir::prelude::*;
use weir::tck::proptest::{check_publisher, demand_schedule};
use weir::tck::TestSubscriber;

use crate::baseline::{self, request, Spy};
use crate::support::counting::{counted_with, counting_generator, Delivery};
use crate::support::model::{check_model, schedule, Completion};
use crate::support::shape;

/// `take_while` whose predicate (keeps every item) reports each call to `spy`, for the
/// baseline checks that count its calls or make it panic.
fn spied<P: Publisher<Item = u64>>(source: P, spy: Spy) -> impl Publisher<Item = u64> {
    source.take_while(move |x| {
        spy.call(*x);
        true
    })
}

#[test]
fn smoke() {
    baseline::smoke(weir::range(0u32..100).take_while(|x| *x < 4), &[0, 1, 2, 3]);
    baseline::smoke(weir::range(0u32..3).take_while(|_| true), &[0, 1, 2]);
    baseline::smoke(weir::range(0u32..3).take_while(|_| false), &[] as &[u32]);
}

#[test]
fn respects_demand() {
    // Requests pass through unchanged.
    baseline::respects_demand(
        weir::range(0u64..100),
        |source| source.take_while(|x| *x < 50),
        &[
            request(1, &[0], (1, 1)).log(&[1]),
            request(2, &[0, 1, 2], (3, 3)).log(&[1, 2]),
        ],
    );
}

#[test]
fn rejected_item_completes_and_cancels_without_pulling_further() {
    for delivery in [Delivery::Batches, Delivery::OneByOne] {
        let (generator, calls) = counting_generator(u64::MAX);
        let (source, stats) = counted_with(generator, delivery);
        let subscriber = TestSubscriber::new();
        let probe = subscriber.probe();
        source.take_while(|x| *x < 3).subscribe(subscriber);
        probe.request(100);
        assert_eq!(shape(&probe), "SNNNC", "{delivery:?}");
        probe.assert_items(&[0, 1, 2]);
        assert_eq!(stats.cancels(), 1, "{delivery:?}: upstream cancelled");
        // (Item by item, the counting adaptor itself drains the source's batch.)
        if delivery == Delivery::Batches {
            assert_eq!(
                calls.load(Ordering::SeqCst),
                4,
                "the generator ran for 0..=3 and not past the rejected item"
            );
        }
        probe.request(5);
        assert_eq!(shape(&probe), "SNNNC", "{delivery:?}");
    }

    // Through a fused batching sink.
    let (generator, calls) = counting_generator(u64::MAX);
    let sum = generator
        .take_while(|x| *x < 1_000)
        .fold_with(64, 0u64, |a, x| a + x)
        .wait();
    assert_eq!(sum.unwrap(), (0..1_000u64).sum::<u64>());
    assert_eq!(calls.load(Ordering::SeqCst), 1_001);
}

#[test]
fn cancel_stops_upstream() {
    baseline::cancel_stops_upstream(|source| source.take_while(|_| true), &[0, 1, 2], 3);
}

#[test]
fn error_propagates_once() {
    // A well-behaved source that fails after two items; the predicate ran on each.
    baseline::error_propagates_once(spied, 2, &[1, 2], 2);
}

#[test]
fn completes() {
    baseline::completes(
        weir::range(0u64..3),
        |source| source.take_while(|_| true),
        3,
        &[0, 1, 2],
    );
}

#[test]
fn panic_becomes_panicked_error_and_cancels_upstream() {
    let pulled =
        baseline::panic_becomes_panicked_error_and_cancels_upstream(spied, 2, &[0, 1], 100);
    assert_eq!(pulled, 3, "not pulled past the panic");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Output equals `input.iter().take_while(p)` under any schedule; requests pass
    /// unchanged; upstream is cancelled exactly when the rejected item arrived.
    #[test]
    fn matches_the_iterator_model(
        input in prop::collection::vec(0u8..=255, 0..64),
        bound in any::<u8>(),
        schedule in schedule(),
    ) {
        let keep = move |x: &u8| *x <= bound;
        let model: Vec<u8> = input.iter().copied().take_while(keep).collect();
        let rejected_at = model.len() as u64;
        let has_rejected = model.len() < input.len();
        let run = check_model(input, |_| model, |s| s.take_while(keep), &schedule, Completion::BeyondLength)?;
        let (stats, probe) = (&run.stats, &run.probe);
        prop_assert!(!stats.over_delivered());
        if schedule.delivery == Delivery::Batches {
            // (Item by item, the counting adaptor itself drains the source's batch.)
            prop_assert!(stats.delivered() <= rejected_at + 1, "pulled past the rejected item");
        }
        let saw_rejected = has_rejected && stats.delivered() > rejected_at;
        prop_assert_eq!(stats.cancels(), schedule.cancels() + u64::from(saw_rejected));
        if saw_rejected && !run.cancelled {
            prop_assert!(probe.is_terminated());
        }
    }

    /// The kit's random schedules (1-3 threads, huge requests, `request(0)`, cancels).
    #[test]
    fn obeys_any_demand_schedule(n in 0u64..40, schedule in demand_schedule()) {
        check_publisher(|n| weir::range(0..u64::MAX).take_while(move |x| *x < n), n, &schedule)?;
    }
}
