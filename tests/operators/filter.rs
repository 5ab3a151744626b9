//! `filter` (mirrors `operators/filter.rs`): PassThrough with replenishment. The
//! items the predicate swallows are re-requested once per batch, so upstream's
//! outstanding demand always equals downstream's; a panic in the predicate becomes
//! `on_error(Panicked)` and cancels upstream.

use proptest::prelude::*;
use weir::demand::UNBOUNDED;
use weir::prelude::*;
use weir::tck::proptest::{check_publisher, demand_schedule};

use crate::baseline::{self, request, Spy};
use crate::support::counting::{counted, counted_with, Delivery};
use crate::support::model::{check_model, schedule, Completion};
use crate::support::probe_of;
use crate::support::unfused::unfused;

/// `filter` whose predicate (keeps the odd items) reports each call to `spy`, for the
/// baseline checks that count its calls or make it panic. It would keep the item
/// [`Unruly`](crate::support::unruly::Unruly) sends after its error.
fn spied<P: Publisher<Item = u64>>(source: P, spy: Spy) -> impl Publisher<Item = u64> {
    source.filter(move |x| {
        spy.call(*x);
        x % 2 == 1
    })
}

#[test]
fn smoke() {
    baseline::smoke(weir::range(0u32..10).filter(|x| x % 3 == 0), &[0, 3, 6, 9]);
    baseline::smoke(weir::range(0u32..1_000).filter(|_| false), &[] as &[u32]);
}

#[test]
fn respects_demand() {
    baseline::respects_demand(
        weir::range(1u64..100),
        |source| source.filter(|x| x % 3 == 0),
        &[
            // Upstream was pulled exactly up to the first accepted item (1 and 2 were
            // swallowed and re-requested), and no demand is left over upstream.
            request(1, &[3], (3, 3)),
            request(2, &[3, 6, 9], (9, 9)),
        ],
    );
}

#[test]
fn cancel_stops_upstream() {
    // 1 and 3 are swallowed: 0..=4 pulled for three items.
    baseline::cancel_stops_upstream(|source| source.filter(|x| x % 2 == 0), &[0, 2, 4], 5);
}

#[test]
fn error_propagates_once() {
    // The predicate runs on each of the six items before the error.
    baseline::error_propagates_once(spied, 6, &[1, 3, 5], 6);
}

#[test]
fn completes() {
    // Demand beyond what passes: the rest of the source is pulled, then completion.
    let stats = baseline::completes(
        weir::range(0u32..20),
        |source| source.filter(|x| *x < 3),
        4,
        &[0, 1, 2],
    );
    assert_eq!(stats.delivered(), 20);

    // A source that ends right after the last accepted item completes with it.
    baseline::completes(
        weir::range(0u32..10),
        |source| source.filter(|x| x % 3 == 0),
        4,
        &[0, 3, 6, 9],
    );

    // Nothing passes and the source ends: completion with no items.
    baseline::completes(
        weir::range(0u32..1_000),
        |source| source.filter(|_| false),
        1,
        &[],
    );
}

/// `range → map → filter → fold_with(p)`, subscribed (not fused): the range knows each
/// batch's length, and the fold credits a whole batch by it (swallowed items included, none counted one by
/// one). Every window, from one item up, with filters that keep everything, nothing
/// and a tenth: the right sum, and no stall. (In debug builds the fold also asserts
/// that no batch exceeds its outstanding window, so credit given twice would fail
/// here.)
#[test]
fn exact_batches_into_a_batched_fold_credit_each_item_once() {
    const ITEMS: u64 = 10_000;
    type Keep = fn(&u64) -> bool;
    let keeps: [(&str, Keep); 3] = [
        ("all", |_| true),
        ("none", |_| false),
        ("a tenth", |x| x % 10 == 0),
    ];
    for prefetch in [1, 2, 3, 4, 7, 64, 1_000, 20_000] {
        for (name, keep) in keeps {
            let sum = unfused(weir::range(0..ITEMS))
                .map(|x| x.wrapping_mul(3))
                .filter(keep)
                .fold_with(prefetch, 0u64, |acc, x| acc.wrapping_add(x))
                .wait()
                .unwrap();
            let expected = (0..ITEMS)
                .map(|x| x.wrapping_mul(3))
                .filter(keep)
                .fold(0u64, |acc, x| acc.wrapping_add(x));
            assert_eq!(sum, expected, "prefetch {prefetch}, keeping {name}");
        }
    }
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
    let probe = probe_of(source.filter(|x| x % 5 == 4));
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
    baseline::panic_becomes_panicked_error_and_cancels_upstream(spied, 5, &[1, 3], 500);
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
        let positions: Vec<u64> = input
            .iter()
            .enumerate()
            .filter(|(_, x)| keep(x))
            .map(|(i, _)| i as u64)
            .collect();
        let run = check_model(
            input,
            |input| input.iter().copied().filter(keep).collect(),
            |s| s.filter(keep),
            &schedule,
            Completion::BeyondLength,
        )?;
        // Every swallowed item was requested again, once.
        baseline::check_replenished(&run, &schedule)?;
        let (stats, probe) = (&run.stats, &run.probe);
        let received = probe.received_count();
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

/// Under unbounded demand `filter` does not count what it swallows (nobody is owed
/// credit); under bounded demand it gives every swallowed item back as credit. Both
/// ways every kept item arrives, in order, and the stream completes: a sink whose
/// window is 1 stalls at the first swallowed item if its credit is lost. The chains
/// are subscribed (an unfused source), then fused: both give the model's result.
#[test]
fn swallowed_items_are_given_back_under_bounded_demand_and_not_counted_under_unbounded() {
    const N: u64 = 100_000;
    const PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);
    fn kept(x: &u64) -> bool {
        x % 7 == 0
    }
    /// Count and sum what `range → map → filter → map → inspect` and `range →
    /// filter_map` deliver to a fold with window `prefetch`.
    fn run<P: Publisher<Item = u64>>(range: impl Fn() -> P, prefetch: u64) -> [(u64, u64); 2] {
        let filtered = range()
            .map(|x| x ^ 1)
            .filter(|x| kept(&(x ^ 1)))
            .map(|x| x ^ 1)
            .inspect(|_| {})
            .fold_with(prefetch, (0u64, 0u64), |(n, s), x| {
                (n + 1, s.wrapping_add(x))
            })
            .wait_timeout(PATIENCE)
            .expect("the stream completes (a lost credit stalls it)")
            .unwrap();
        let filter_mapped = range()
            .filter_map(|x| kept(&x).then_some(x))
            .fold_with(prefetch, (0u64, 0u64), |(n, s), x| {
                (n + 1, s.wrapping_add(x))
            })
            .wait_timeout(PATIENCE)
            .expect("the stream completes (a lost credit stalls it)")
            .unwrap();
        [filtered, filter_mapped]
    }
    let model: (u64, u64) = (0..N)
        .filter(kept)
        .fold((0, 0), |(n, s), x| (n + 1, s.wrapping_add(x)));
    for prefetch in [UNBOUNDED, 1, 2, 64, 1_024] {
        let subscribed = run(|| unfused(weir::range(0..N)), prefetch);
        assert_eq!(subscribed, [model; 2], "subscribed, prefetch {prefetch}");
        let fused = run(|| weir::range(0..N), prefetch);
        assert_eq!(fused, [model; 2], "fused, prefetch {prefetch}");
    }
}

/// A swallowed item whose `Drop` panics: the error names `filter`, fused and
/// subscribed alike (the fused loop dropped it outside the stage's blame, and the error
/// named no stage).
#[test]
fn a_swallowed_item_whose_drop_panics_is_blamed_on_filter_fused_or_not() {
    #[derive(Debug)]
    struct Touchy(u64);
    impl Drop for Touchy {
        fn drop(&mut self) {
            if self.0 == 3 && !std::thread::panicking() {
                panic!("deliberate: item 3 panics in Drop");
            }
        }
    }
    fn run<P: Publisher<Item = Touchy>>(source: P) -> weir::Error {
        source
            .filter(|item| item.0 != 3)
            .fold(0u64, |n, item| n + item.0)
            .wait_timeout(std::time::Duration::from_secs(30))
            .expect("the fold ends")
            .expect_err("the swallowed item's Drop panicked")
    }
    let items = || (0..6).map(Touchy).collect::<Vec<_>>();
    for (path, error) in [
        ("fused", run(weir::from_iter(items()))),
        ("subscribed", run(unfused(weir::from_iter(items())))),
    ] {
        assert_eq!(error.kind(), weir::ErrorKind::Panicked, "{path}: {error}");
        assert_eq!(error.stage(), Some("filter"), "{path}: {error}");
    }
}
