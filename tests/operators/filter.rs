//! `filter` (mirrors `operators/filter.rs`): PassThrough with replenishment. The
//! items the predicate swallows are re-requested once per batch, so upstream's
//! outstanding demand always equals downstream's; a panic in the predicate becomes
//! `on_error(Panicked)` and cancels upstream.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use proptest::prelude::*;
use weir::demand::UNBOUNDED;
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
    let out = weir::range(0u32..10)
        .filter(|x| x % 3 == 0)
        .collect()
        .wait()
        .unwrap();
    assert_eq!(out, vec![0, 3, 6, 9]);

    let none = weir::range(0u32..1_000)
        .filter(|_| false)
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
    source.filter(|x| x % 3 == 0).subscribe(subscriber);

    probe.assert_items(&[]);
    assert_eq!(stats.delivered(), 0);

    probe.request(1);
    probe.assert_items(&[3]);
    // Upstream was pulled exactly up to the first accepted item (1 and 2 were
    // swallowed and re-requested), and no demand is left over upstream.
    assert_eq!(stats.delivered(), 3);
    assert_eq!(stats.requested(), 3);

    probe.request(2);
    probe.assert_items(&[3, 6, 9]);
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
    source.filter(|x| x % 2 == 0).subscribe(subscriber);

    probe.request(3);
    probe.assert_items(&[0, 2, 4]);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        5,
        "pulled 0..=4 and no further"
    );

    probe.cancel();
    assert_eq!(stats.cancels(), 1, "cancel reaches upstream");
    probe.request(10);
    probe.assert_items(&[0, 2, 4]);
    probe.assert_no_terminal();
    assert_eq!(
        calls.load(Ordering::SeqCst),
        5,
        "upstream not pulled after cancel"
    );
}

#[test]
fn error_propagates_once() {
    let boom = Error::msg("source failed");
    let failure = boom.clone();
    let mut sent = 0u64;
    let source = weir::generate((), move |_| {
        sent += 1;
        if sent > 6 {
            Step::Error(failure.clone())
        } else {
            Step::Next(sent)
        }
    });
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source.filter(|x| x % 2 == 0).subscribe(subscriber);
    probe.request(10);
    probe.assert_items(&[2, 4, 6]);
    assert!(
        Error::ptr_eq(&probe.assert_error(), &boom),
        "the same error"
    );
    assert_eq!(shape(&probe), "SNNNE");
    probe.request(5);
    assert_eq!(shape(&probe), "SNNNE", "nothing after the error");

    // An error needs no demand, and the predicate never runs.
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::error::<u64>(boom.clone())
        .filter(|_| unreachable!("no items"))
        .subscribe(subscriber);
    assert_eq!(shape(&probe), "SE");

    // An upstream that keeps signalling after its error: only the first error passes.
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    Unruly::new(boom.clone())
        .filter(|_| true)
        .subscribe(subscriber);
    assert_eq!(shape(&probe), "SE");
    assert!(Error::ptr_eq(&probe.assert_error(), &boom));
    probe.assert_no_violations();
}

#[test]
fn completes() {
    // Demand beyond what passes: the rest of the source is pulled, then completion.
    let (source, stats) = counted(weir::range(0u32..20));
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source.filter(|x| *x < 3).subscribe(subscriber);
    probe.request(4);
    probe.assert_items(&[0, 1, 2]);
    probe.assert_completed();
    assert_eq!(shape(&probe), "SNNNC");
    assert_eq!(stats.delivered(), 20);

    // A source that ends right after the last accepted item completes with it.
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::range(0u32..10)
        .filter(|x| x % 3 == 0)
        .subscribe(subscriber);
    probe.request(4);
    probe.assert_items(&[0, 3, 6, 9]);
    probe.assert_completed();

    // Nothing passes and the source ends: completion with no items.
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::range(0u32..1_000)
        .filter(|_| false)
        .subscribe(subscriber);
    probe.request(1);
    assert_eq!(shape(&probe), "SC");
}

/// Credit batching under a batch-requesting sink.
///
/// 1,000,000 items, 10% kept (`x % 10 == 0`: 100,000), into `fold_with(64, ..)`.
///
/// * The sink requests 64 up front, then, after a batch that brings its un-replenished
///   count to at least 48, requests that count. So at the start of any upstream batch
///   its outstanding demand is `64 - c` with `c <= 47`: at least 17, at most 64.
/// * `filter` re-requests what it swallowed once per batch, so upstream's outstanding
///   demand equals the sink's; the synchronous source emits its whole outstanding
///   demand as one batch. Every batch but the last therefore has at least 17 items:
///   at most `ceil(1,000,000 / 17) = 58,824` batches.
/// * Requests: 1 initial, at most one re-request by `filter` per batch, and at most
///   `100,000 / 48 = 2,083` replenishes by the sink (each needs 48 new kept items):
///   at most `1 + 58,824 + 2,083 = 60,908`, below `items / 10 = 100,000`, against
///   the 900,000 a `request(1)` per swallowed item would cost.
#[test]
fn swallowed_items_are_re_requested_in_batches() {
    const ITEMS: u64 = 1_000_000;
    const KEPT: u64 = ITEMS / 10;
    const MIN_BATCH: u64 = 64 - 47;
    const MAX_BATCHES: u64 = ITEMS.div_ceil(MIN_BATCH);
    const MAX_REQUESTS: u64 = 1 + MAX_BATCHES + KEPT / 48;
    // The derived bound is itself far below one request per item.
    const _: () = assert!(MAX_REQUESTS <= ITEMS / 10);

    let (source, stats) = counted(weir::range(0..ITEMS));
    let sum = source
        .filter(|x| x % 10 == 0)
        .fold_with(64, 0u64, |acc, x| acc + x)
        .wait()
        .unwrap();
    assert_eq!(sum, (0..ITEMS).filter(|x| x % 10 == 0).sum::<u64>());
    assert_eq!(stats.delivered(), ITEMS);
    assert!(!stats.over_delivered());
    assert!(
        stats.max_outstanding() <= 64,
        "outstanding upstream demand {} exceeds the sink's window",
        stats.max_outstanding()
    );
    assert!(
        stats.deliveries() <= MAX_BATCHES,
        "{} batches: some batch was smaller than the sink's minimum window",
        stats.deliveries()
    );
    let requests = stats.request_calls();
    assert!(
        requests <= MAX_REQUESTS,
        "{requests} upstream requests for {ITEMS} items (bound {MAX_REQUESTS})"
    );
    assert!(
        requests <= 1 + stats.deliveries() + KEPT / 48,
        "more than one filter re-request per batch: {requests} requests, {} batches",
        stats.deliveries()
    );
}

/// Under unbounded demand the only requests after the first are `filter`'s
/// re-requests, at most one per batch upstream emitted.
#[test]
fn unbounded_demand_re_requests_at_most_once_per_batch() {
    const ITEMS: u64 = 1_000_000;
    let (source, stats) = counted(weir::range(0..ITEMS));
    let count = source
        .filter(|x| x % 10 == 0)
        .fold_with(UNBOUNDED, 0u64, |n, _| n + 1)
        .wait()
        .unwrap();
    assert_eq!(count, ITEMS / 10);
    assert_eq!(stats.request_log()[0], UNBOUNDED);
    assert!(stats.deliveries() >= 1);
    assert!(
        stats.request_calls() - 1 <= stats.deliveries(),
        "{} re-requests for {} batches",
        stats.request_calls() - 1,
        stats.deliveries()
    );
}

#[test]
fn item_by_item_upstream_never_stalls() {
    // Without batches (upstream calls on_next), every swallowed item is still owed
    // again, at most one request per swallowed item, so the stream cannot stall with
    // demand outstanding.
    let (source, stats) = counted_with(weir::range(0u32..10), Delivery::OneByOne);
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source.filter(|x| x % 5 == 4).subscribe(subscriber);
    probe.request(2);
    probe.assert_items(&[4, 9]);
    probe.assert_completed();
    let swallowed = 8;
    assert_eq!(
        stats.requested(),
        2 + swallowed,
        "each swallowed item owed once"
    );
    assert!(stats.request_calls() <= 1 + swallowed);
}

#[test]
fn panic_becomes_panicked_error_and_cancels_upstream() {
    for delivery in [Delivery::Batches, Delivery::OneByOne] {
        let (generator, calls) = counting_generator(u64::MAX);
        let (source, stats) = counted_with(generator, delivery);
        let tested = Arc::new(AtomicU64::new(0));
        let counter = tested.clone();
        let subscriber = TestSubscriber::new();
        let probe = subscriber.probe();
        source
            .filter(move |x| {
                counter.fetch_add(1, Ordering::SeqCst);
                if *x == 5 {
                    panic!("filter boom at {x}");
                }
                x % 2 == 0
            })
            .subscribe(subscriber);
        probe.request(10);

        probe.assert_items(&[0, 2, 4]);
        let error = probe.assert_error();
        assert_eq!(error.kind(), ErrorKind::Panicked, "{delivery:?}");
        assert_eq!(error.message(), "filter boom at 5", "{delivery:?}");
        assert_eq!(shape(&probe), "SNNNE", "{delivery:?}");
        assert_eq!(stats.cancels(), 1, "{delivery:?}: upstream cancelled");
        assert_eq!(tested.load(Ordering::SeqCst), 6, "{delivery:?}");

        let pulled = calls.load(Ordering::SeqCst);
        probe.request(100);
        assert_eq!(shape(&probe), "SNNNE", "{delivery:?}: nothing follows");
        assert_eq!(calls.load(Ordering::SeqCst), pulled, "{delivery:?}");
        assert_eq!(tested.load(Ordering::SeqCst), 6, "{delivery:?}");
        assert!(!stats.over_delivered());
    }

    // Through a batching sink (the fused fold path).
    let (source, stats) = counted(weir::range(0u64..1_000_000));
    let result = source
        .filter(|x| {
            if *x == 500 {
                panic!("filter boom in a batch");
            }
            true
        })
        .collect_with(64)
        .wait();
    let error = result.unwrap_err();
    assert_eq!(
        (error.kind(), error.message()),
        (ErrorKind::Panicked, "filter boom in a batch")
    );
    assert_eq!(stats.cancels(), 1);
    assert!(
        stats.delivered() <= 500 + 64,
        "{} pulled",
        stats.delivered()
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Output equals `input.iter().filter(p)`, in order, within demand, under any
    /// schedule. Upstream's outstanding demand equals downstream's, and when
    /// downstream's demand is used up upstream was pulled exactly up to the last
    /// accepted item.
    #[test]
    fn matches_the_iterator_model(
        input in prop::collection::vec(0u8..=255, 0..64),
        schedule in schedule(),
        modulus in 1u8..=4,
    ) {
        let keep = move |x: &u8| x % modulus == 0;
        let model: Vec<u8> = input.iter().copied().filter(keep).collect();
        let positions: Vec<u64> = input
            .iter()
            .enumerate()
            .filter(|(_, x)| keep(x))
            .map(|(i, _)| i as u64)
            .collect();
        let run = check_model(
            input,
            &model,
            |s| s.filter(keep),
            &schedule,
            Completion::BeyondLength,
        )?;
        let (stats, probe) = (&run.stats, &run.probe);
        let received = probe.received_count();
        prop_assert!(!stats.over_delivered());
        prop_assert_eq!(stats.cancels(), schedule.cancels());
        if probe.requested() < u64::MAX / 4 {
            // Every swallowed item was requested again, once.
            prop_assert_eq!(
                stats.requested(),
                probe.requested() + (stats.delivered() - received),
                "upstream outstanding differs from downstream outstanding"
            );
        }
        if !run.cancelled && !probe.is_terminated() && received == probe.requested() {
            let expected = if received == 0 { 0 } else { positions[received as usize - 1] + 1 };
            prop_assert_eq!(stats.delivered(), expected, "pulled beyond the last accepted item");
        }
    }

    /// The kit's random schedules (1-3 threads, huge requests, `request(0)`,
    /// cancels) through `filter`, which must pull 3 items per item it passes. The
    /// last item passes, so demand `n` is enough to complete (the kit requires it).
    #[test]
    fn obeys_any_demand_schedule(n in 0u64..40, schedule in demand_schedule()) {
        check_publisher(|n| weir::range(0..3 * n).filter(|x| x % 3 == 2), n, &schedule)?;
    }
}
