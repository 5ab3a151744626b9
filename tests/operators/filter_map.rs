//! `filter_map` (mirrors `operators/filter_map.rs`): PassThrough with replenishment.
//! Swallowed items (`None`) are re-requested once per batch, so upstream's outstanding
//! demand always equals downstream's; a panic in the closure becomes
//! `on_error(Panicked)` and cancels upstream.

use std::sync::atomic::Ordering;

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

/// Even numbers, halved and shown; odd ones swallowed.
fn halve_evens(x: u64) -> Option<String> {
    (x % 2 == 0).then(|| format!("{}", x / 2))
}

#[test]
fn smoke() {
    let out = weir::range(0u64..7)
        .filter_map(halve_evens)
        .collect()
        .wait()
        .unwrap();
    assert_eq!(out, vec!["0", "1", "2", "3"]);

    let none = weir::range(0u32..1_000)
        .filter_map(|_| None::<u8>)
        .collect()
        .wait()
        .unwrap();
    assert!(none.is_empty());
}

#[test]
fn respects_demand() {
    let (source, stats) = counted(weir::range(1u64..100));
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source
        .filter_map(|x| (x % 3 == 0).then_some(x * 10))
        .subscribe(subscriber);

    probe.assert_items(&[]);
    assert_eq!(stats.delivered(), 0);

    probe.request(1);
    probe.assert_items(&[30]);
    // Pulled exactly up to the first kept item; 1 and 2 were re-requested.
    assert_eq!((stats.requested(), stats.delivered()), (3, 3));

    probe.request(2);
    probe.assert_items(&[30, 60, 90]);
    assert_eq!((stats.requested(), stats.delivered()), (9, 9));
    probe.assert_no_terminal();
    assert!(!stats.over_delivered());
}

#[test]
fn cancel_stops_upstream() {
    let (generator, calls) = counting_generator(u64::MAX);
    let (source, stats) = counted(generator);
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source.filter_map(halve_evens).subscribe(subscriber);

    probe.request(2);
    probe.assert_items(&["0".to_string(), "1".to_string()]);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3,
        "pulled 0..=2 and no further"
    );
    probe.cancel();
    assert_eq!(stats.cancels(), 1, "cancel reaches upstream");
    probe.request(10);
    assert_eq!(probe.received_count(), 2);
    probe.assert_no_terminal();
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[test]
fn error_propagates_once() {
    let boom = Error::msg("source failed");
    let failure = boom.clone();
    let mut sent = 0u64;
    let source = weir::generate((), move |_| {
        sent += 1;
        if sent > 4 {
            Step::Error(failure.clone())
        } else {
            Step::Next(sent)
        }
    });
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source.filter_map(halve_evens).subscribe(subscriber);
    probe.request(10);
    probe.assert_items(&["1".to_string(), "2".to_string()]);
    assert!(Error::ptr_eq(&probe.assert_error(), &boom));
    assert_eq!(shape(&probe), "SNNE");

    let subscriber = TestSubscriber::<u8>::new();
    let probe = subscriber.probe();
    Unruly::new(boom.clone())
        .filter_map(|_| unreachable!("no items reach the closure"))
        .subscribe(subscriber);
    assert_eq!(shape(&probe), "SE");
    assert!(Error::ptr_eq(&probe.assert_error(), &boom));
    probe.assert_no_violations();
}

#[test]
fn completes() {
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::range(0u64..10)
        .filter_map(|x| (x < 2).then_some(x))
        .subscribe(subscriber);
    probe.request(3);
    probe.assert_items(&[0, 1]);
    probe.assert_completed();
    assert_eq!(shape(&probe), "SNNC");
}

/// 1,000,000 items, 90% swallowed, into a sink that requests 64 at a time: the
/// swallowed items are re-requested once per batch, never one request per item.
#[test]
fn swallowed_items_are_re_requested_in_batches() {
    const ITEMS: u64 = 1_000_000;
    let (source, stats) = counted(weir::range(0..ITEMS));
    let count = source
        .filter_map(|x| (x % 10 == 0).then_some(x))
        .fold_with(64, 0u64, |n, _| n + 1)
        .wait()
        .unwrap();
    assert_eq!(count, ITEMS / 10);
    assert_eq!(stats.delivered(), ITEMS);
    assert!(stats.max_outstanding() <= 64);
    // At most one re-request per batch plus the sink's own replenishes.
    assert!(stats.request_calls() <= 1 + stats.deliveries() + ITEMS / 10 / 48);
    assert!(stats.request_calls() <= ITEMS / 10);
}

#[test]
fn panic_becomes_panicked_error_and_cancels_upstream() {
    for delivery in [Delivery::Batches, Delivery::OneByOne] {
        let (generator, calls) = counting_generator(u64::MAX);
        let (source, stats) = counted_with(generator, delivery);
        let subscriber = TestSubscriber::new();
        let probe = subscriber.probe();
        source
            .filter_map(|x| {
                assert!(x != 5, "filter_map boom at {x}");
                (x % 2 == 0).then_some(x)
            })
            .subscribe(subscriber);
        probe.request(10);
        probe.assert_items(&[0, 2, 4]);
        let error = probe.assert_error();
        assert_eq!(error.kind(), ErrorKind::Panicked, "{delivery:?}");
        assert_eq!(error.message(), "filter_map boom at 5", "{delivery:?}");
        assert_eq!(stats.cancels(), 1, "{delivery:?}");
        let pulled = calls.load(Ordering::SeqCst);
        probe.request(100);
        assert_eq!(shape(&probe), "SNNNE", "{delivery:?}");
        assert_eq!(calls.load(Ordering::SeqCst), pulled, "{delivery:?}");
    }
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
    fn obeys_any_demand_schedule(n in 0u64..40, schedule in demand_schedule()) {
        check_publisher(
            |n| weir::range(0..3 * n).filter_map(|x| (x % 3 == 2).then_some(x / 3)),
            n,
            &schedule,
        )?;
    }
}
