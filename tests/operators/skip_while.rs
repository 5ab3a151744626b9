//! `skip_while` (mirrors `operators/skip_while.rs`): PassThrough with replenishment
//! while skipping (like `filter`), plain PassThrough afterwards; the predicate is not
//! called after the first item it rejects.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use proptest::prelude::*;
use weir::prelude::*;
use weir::source::Step;
use weir::tck::proptest::{check_publisher, demand_schedule};
use weir::tck::TestSubscriber;
use weir::{Error, ErrorKind};

use crate::support::counting::{counted, counted_with, counting_generator, Delivery};
use crate::support::model::{check_model, schedule, Completion};
use crate::support::shape;
use crate::support::unruly::Unruly;

#[test]
fn smoke() {
    let out = weir::from_iter(vec![1u8, 2, 9, 1, 2])
        .skip_while(|x| *x < 5)
        .collect()
        .wait()
        .unwrap();
    assert_eq!(out, vec![9, 1, 2]);
    let none = weir::range(0u32..100).skip_while(|_| true).collect().wait();
    assert!(none.unwrap().is_empty());
}

#[test]
fn respects_demand() {
    let (source, stats) = counted(weir::range(0u64..100));
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source.skip_while(|x| *x < 10).subscribe(subscriber);
    probe.assert_items(&[]);
    probe.request(1);
    probe.assert_items(&[10]);
    // Pulled exactly up to the first passed item; the ten skipped were re-requested.
    assert_eq!((stats.requested(), stats.delivered()), (11, 11));
    probe.request(2);
    probe.assert_items(&[10, 11, 12]);
    assert_eq!((stats.requested(), stats.delivered()), (13, 13));
    probe.assert_no_terminal();
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
    const ITEMS: u64 = 1_000_000;
    let (source, stats) = counted(weir::range(0..ITEMS));
    let count = source
        .skip_while(|x| *x < 900_000)
        .fold_with(64, 0u64, |n, _| n + 1)
        .wait()
        .unwrap();
    assert_eq!(count, 100_000);
    assert!(stats.max_outstanding() <= 64);
    assert!(stats.request_calls() <= 1 + stats.deliveries() + 100_000 / 48);
    assert!(stats.request_calls() <= ITEMS / 10);
}

#[test]
fn cancel_stops_upstream() {
    let (generator, calls) = counting_generator(u64::MAX);
    let (source, stats) = counted(generator);
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source.skip_while(|x| *x < 2).subscribe(subscriber);
    probe.request(2);
    probe.assert_items(&[2, 3]);
    probe.cancel();
    assert_eq!(stats.cancels(), 1);
    probe.request(10);
    probe.assert_items(&[2, 3]);
    assert_eq!(calls.load(Ordering::SeqCst), 4);
}

#[test]
fn error_propagates_once() {
    let boom = Error::msg("source failed");
    let failure = boom.clone();
    let mut sent = 0u64;
    let source = weir::generate((), move |_| {
        sent += 1;
        if sent > 3 {
            Step::Error(failure.clone())
        } else {
            Step::Next(sent)
        }
    });
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source.skip_while(|x| *x < 3).subscribe(subscriber);
    probe.request(10);
    probe.assert_items(&[3]);
    assert!(Error::ptr_eq(&probe.assert_error(), &boom));
    assert_eq!(shape(&probe), "SNE");

    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    Unruly::new(boom.clone())
        .skip_while(|_| true)
        .subscribe(subscriber);
    assert_eq!(shape(&probe), "SE");
    assert!(Error::ptr_eq(&probe.assert_error(), &boom));
    probe.assert_no_violations();
}

#[test]
fn completes() {
    let subscriber = TestSubscriber::<u64>::new();
    let probe = subscriber.probe();
    weir::range(0u64..50)
        .skip_while(|_| true)
        .subscribe(subscriber);
    probe.request(1);
    assert_eq!(shape(&probe), "SC");
}

#[test]
fn panic_becomes_panicked_error_and_cancels_upstream() {
    for delivery in [Delivery::Batches, Delivery::OneByOne] {
        let (generator, _) = counting_generator(u64::MAX);
        let (source, stats) = counted_with(generator, delivery);
        let subscriber = TestSubscriber::<u64>::new();
        let probe = subscriber.probe();
        source
            .skip_while(|x| {
                assert!(*x != 4, "skip_while boom at {x}");
                true
            })
            .subscribe(subscriber);
        probe.request(10);
        let error = probe.assert_error();
        assert_eq!(error.kind(), ErrorKind::Panicked, "{delivery:?}");
        assert_eq!(error.message(), "skip_while boom at 4", "{delivery:?}");
        assert_eq!(shape(&probe), "SE", "{delivery:?}");
        assert_eq!(stats.cancels(), 1, "{delivery:?}");
    }
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
        let (stats, probe) = (&run.stats, &run.probe);
        prop_assert!(!stats.over_delivered());
        prop_assert_eq!(stats.cancels(), schedule.cancels());
        if probe.requested() < u64::MAX / 4 {
            prop_assert_eq!(
                stats.requested(),
                probe.requested() + (stats.delivered() - probe.received_count())
            );
        }
    }

    /// The kit's random schedules (1-3 threads, huge requests, `request(0)`, cancels).
    #[test]
    fn obeys_any_demand_schedule(n in 0u64..40, k in 0u64..5, schedule in demand_schedule()) {
        check_publisher(|n| weir::range(0..n + k).skip_while(move |x| *x < k), n, &schedule)?;
    }
}
