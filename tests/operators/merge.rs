//! `merge` and `weir::merge` (mirror `operators/merge.rs`): Prefetching per source
//! (a bounded lane of `MERGE_PREFETCH`, replenished by the 75% rule); items of all
//! sources interleaved, each source's order kept; the first error wins and cancels
//! the rest.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use weir::demand::UNBOUNDED;
use weir::operators::MERGE_PREFETCH;
use weir::prelude::*;
use weir::tck::proptest::{check_publisher, check_publisher_with, demand_schedule, PublisherCheck};
use weir::tck::TestSubscriber;
use weir::Error;

use crate::baseline;
use crate::support::counting::counted;
use crate::support::model::schedule;
use crate::support::threaded::ThreadedRange;
use crate::support::unfused::unfused;
use crate::support::unruly::{PanicsOnRequest, Unruly};
use crate::support::{shape, PATIENCE};

#[test]
fn smoke() {
    let mut out = weir::range(0u32..5)
        .merge(weir::range(100..103))
        .collect()
        .wait()
        .unwrap();
    out.sort();
    assert_eq!(out, vec![0, 1, 2, 3, 4, 100, 101, 102]);

    let mut out = weir::merge(vec![
        weir::range(0u8..2),
        weir::range(5..7),
        weir::range(9..10),
    ])
    .collect()
    .wait()
    .unwrap();
    out.sort();
    assert_eq!(out, vec![0, 1, 5, 6, 9]);
}

#[test]
fn respects_demand_and_prefetches_per_source() {
    let (a, a_stats) = counted(weir::range(0u64..1_000));
    let (b, b_stats) = counted(weir::range(1_000u64..2_000));
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    a.merge(b).subscribe(subscriber);

    // Each side is asked for its window up front, nothing reaches downstream yet.
    assert_eq!(a_stats.request_log(), vec![MERGE_PREFETCH]);
    assert_eq!(b_stats.request_log(), vec![MERGE_PREFETCH]);
    assert_eq!(probe.received_count(), 0);

    probe.request(3);
    assert_eq!(probe.received_count(), 3);
    probe.request(400);
    assert_eq!(probe.received_count(), 403);
    probe.assert_no_violations();
    for stats in [&a_stats, &b_stats] {
        assert!(!stats.over_delivered());
        // Replenished in batches of at least 3/4 of the window, never per item.
        assert!(stats.request_log().iter().skip(1).all(|&n| n >= 192));
        // Outstanding demand plus queued items never exceed the window.
        assert!(stats.max_outstanding() <= MERGE_PREFETCH);
    }
    probe.request(u64::MAX);
    assert_eq!(probe.received_count(), 2_000);
    probe.assert_completed();
}

#[test]
fn cancel_stops_upstream() {
    let (a, a_stats) = counted(weir::range(0u64..u64::MAX));
    let (b, b_stats) = counted(weir::never::<u64>());
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    a.merge(b).subscribe(subscriber);
    probe.request(5);
    probe.cancel();
    assert_eq!((a_stats.cancels(), b_stats.cancels()), (1, 1));
    let delivered = a_stats.delivered();
    probe.request(10);
    assert_eq!(probe.received_count(), 5);
    assert_eq!(
        a_stats.delivered(),
        delivered,
        "nothing pulled after cancel"
    );
    probe.assert_no_terminal();
}

#[test]
fn error_propagates_once() {
    let boom = Error::msg("side failed");
    let (b, b_stats) = counted(weir::never::<u64>());
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::error::<u64>(boom.clone())
        .merge(b)
        .subscribe(subscriber);
    assert_eq!(shape(&probe), "SE", "an error needs no demand");
    assert!(Error::ptr_eq(&probe.assert_error(), &boom));
    assert_eq!(b_stats.cancels(), 1, "the other side is cancelled");

    // A side that keeps signalling after its error: one error passes.
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    Unruly::new(boom.clone())
        .merge(weir::range(0u64..3))
        .subscribe(subscriber);
    probe.request(10);
    assert!(shape(&probe).ends_with('E'));
    assert_eq!(shape(&probe).matches('E').count(), 1);
    probe.assert_no_violations();
}

#[test]
fn completes_when_every_source_has() {
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::empty::<u8>()
        .merge(weir::empty())
        .subscribe(subscriber);
    assert_eq!(shape(&probe), "SC", "completion needs no demand");

    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::merge(Vec::<weir::BoxPublisher<u8>>::new()).subscribe(subscriber);
    assert_eq!(shape(&probe), "SC");

    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::range(0u8..2)
        .merge(weir::never())
        .subscribe(subscriber);
    probe.request(5);
    probe.assert_items(&[0, 1]);
    probe.assert_no_terminal();
}

/// Fairness: each pass starts at the source after the last one served, and a pass
/// that serves nothing does not move on. Items queued in every source before any
/// demand come out from the first source first; demand of one at a time alternates.
#[test]
fn sources_are_served_round_robin_from_the_first() {
    let all_at_once = TestSubscriber::new();
    let probe = all_at_once.probe();
    weir::from_iter([1, 2, 3])
        .merge(weir::from_iter([4, 5, 6]))
        .subscribe(all_at_once);
    probe.request(6);
    probe.assert_items(&[1, 2, 3, 4, 5, 6]);

    let one_by_one = TestSubscriber::new();
    let probe = one_by_one.probe();
    weir::merge(vec![
        weir::from_iter([1, 2, 3]).boxed(),
        weir::from_iter([4, 5, 6]).boxed(),
        weir::from_iter([7, 8, 9]).boxed(),
    ])
    .subscribe(one_by_one);
    for _ in 0..9 {
        probe.request(1);
    }
    probe.assert_items(&[1, 4, 7, 2, 5, 8, 3, 6, 9]);
    probe.assert_completed();
}

#[test]
fn in_flight_bound_is_one_window_per_source() {
    let merged = weir::range(0u8..1).merge(weir::range(0..1));
    assert_eq!(merged.in_flight_bound(), 2 * MERGE_PREFETCH);
    let all = weir::merge(vec![weir::range(0u8..1); 3]);
    assert_eq!(all.in_flight_bound(), 3 * MERGE_PREFETCH);
}

#[test]
fn threaded_sources_lose_and_duplicate_nothing() {
    for _ in 0..20 {
        let out = ThreadedRange::new(2_000)
            .map(|x| (0u8, x))
            .merge(ThreadedRange::new(2_000).map(|x| (1u8, x)))
            .collect_with(7)
            .wait()
            .unwrap();
        for tag in [0u8, 1] {
            let side: Vec<u64> = out.iter().filter(|p| p.0 == tag).map(|p| p.1).collect();
            assert_eq!(side, (0..2_000).collect::<Vec<_>>(), "side {tag} in order");
        }
    }
}

#[test]
fn forwards_the_drop_hook_to_every_source() {
    baseline::drop_hook_reaches_every_source(
        weir::range(0u64..1_000)
            .on_backpressure_drop()
            .merge(weir::range(0u64..1_000).on_backpressure_drop()),
        2_000,
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Output is, per source, the source's items in order (so, as a multiset, the
    /// union of the inputs), never more than requested, exactly `min(requested, len)`
    /// items, complete once everything went out, nothing after a cancel.
    #[test]
    fn matches_the_multiset_model(
        a in prop::collection::vec(any::<u16>(), 0..40),
        b in prop::collection::vec(any::<u16>(), 0..40),
        schedule in schedule(),
    ) {
        let merged = weir::from_iter(a.clone())
            .map(|x| (0u8, x))
            .merge(weir::from_iter(b.clone()).map(|x| (1u8, x)));
        baseline::check_interleaved(merged, &[(0, a), (1, b)], &schedule)?;
    }

    /// The kit's random schedules (1-3 threads, huge requests, `request(0)`, cancels).
    #[test]
    fn obeys_any_demand_schedule(n in 0u64..40, schedule in demand_schedule()) {
        check_publisher(|n| weir::range(0..n / 2).merge(weir::range(n / 2..n)), n, &schedule)?;
        check_publisher(
            |n| weir::merge(vec![weir::range(0..n / 3), weir::range(n / 3..n), weir::range(0..0)]),
            n,
            &schedule,
        )?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// The kit's random schedules over sources that emit from threads of their own.
    #[test]
    fn obeys_any_demand_schedule_with_threaded_sources(n in 0u64..24, schedule in demand_schedule()) {
        let check = PublisherCheck::asynchronous(PATIENCE, Duration::from_millis(10));
        check_publisher_with(|n| ThreadedRange::new(n / 2).merge(ThreadedRange::new(n - n / 2)), n, &schedule, check)?;
    }
}

#[test]
fn a_source_that_panics_in_subscribe_fails_the_merge_and_cancels_the_others() {
    let (source, stats) = crate::support::counting::counted(weir::never::<u32>());
    let result = source
        .merge(crate::support::failing::PanicsOnSubscribe)
        .collect()
        .wait();
    assert_eq!(result.unwrap_err().kind(), weir::ErrorKind::Panicked);
    assert_eq!(stats.cancels(), 1, "the other source is cancelled");
}

/// The same when the source panics after its `on_subscribe`: the merge fails with
/// the panic's message (not waiting for the panicked source's end) and cancels the
/// other source.
#[test]
fn a_source_that_panics_after_its_on_subscribe_fails_the_merge() {
    let (source, stats) = crate::support::counting::counted(weir::never::<u32>());
    let mut handle = source
        .merge(crate::support::failing::PanicsAfterOnSubscribe("merge"))
        .collect();
    match handle.wait_timeout(PATIENCE) {
        Some(Err(error)) => {
            assert_eq!(error.kind(), weir::ErrorKind::Panicked);
            assert!(
                error.message().contains("boom after on_subscribe in merge"),
                "{error}"
            );
        }
        other => panic!("ended with {other:?}, expected the panic"),
    }
    assert_eq!(stats.cancels(), 1, "the other source is cancelled");
}

#[test]
fn an_item_delivered_after_the_cancel_is_released() {
    baseline::late_item_after_cancel_is_released(|late| late.merge(weir::never()).map(|_| ()));
}

/// A source the test drives by hand, ignoring demand; it records what it was asked
/// for.
#[derive(Clone, Default)]
struct ByHand {
    subscriber: Arc<Mutex<Option<Box<dyn Subscriber<u64> + Send>>>>,
    requested: Arc<std::sync::atomic::AtomicU64>,
    /// The call of `request` that panics (0: none).
    panic_at: u64,
}

impl Publisher for ByHand {
    type Item = u64;
    fn subscribe<S: Subscriber<u64> + Send + 'static>(self, mut subscriber: S) {
        let requested = self.requested.clone();
        subscriber.on_subscribe(PanicsOnRequest::subscription(
            self.panic_at,
            move |n| {
                requested.fetch_add(n, std::sync::atomic::Ordering::SeqCst);
            },
            || {},
        ));
        *self.subscriber.lock().unwrap() = Some(Box::new(subscriber));
    }
}

impl ByHand {
    fn send(&self, items: std::ops::Range<u64>) {
        let mut slot = self.subscriber.lock().unwrap();
        let subscriber = slot.as_mut().expect("subscribed");
        for i in items {
            subscriber.on_next(i);
        }
    }
    fn requested(&self) -> u64 {
        self.requested.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// `source` in a lane of `stage` (`merge` beside a silent source, `zip` beside an
/// endless one, or the one inner of `flat_map` with `prefetch`), subscribed by a probe.
fn lane_of(stage: &str, source: &ByHand, prefetch: u64) -> weir::tck::TestProbe<u64> {
    match stage {
        "merge" => crate::support::probe_of(source.clone().merge(weir::never())),
        "zip" => {
            crate::support::probe_of(source.clone().zip(weir::range(0u64..1_000_000), |a, _| a))
        }
        _ => {
            let inner = Mutex::new(Some(source.clone()));
            crate::support::probe_of(weir::just(0u64).flat_map(
                move |_| inner.lock().unwrap().take().expect("one inner"),
                1,
                prefetch,
            ))
        }
    }
}

/// Rule 1.1 is enforced on every delivery, also after downstream took part of a
/// lane: items taken but not yet asked for again (the lane asks again at 75%) are no
/// room. 50 items beyond the 256 asked for used to pass as if requested.
#[test]
fn a_source_that_delivers_unasked_after_a_partial_drain_fails_the_stage() {
    for stage in ["merge", "zip", "flat_map"] {
        let source = ByHand::default();
        let probe = lane_of(stage, &source, 256);
        probe.request(100);
        let asked = source.requested();
        assert_eq!(asked, 256, "{stage}: the lane's window");
        source.send(0..asked);
        assert_eq!(probe.received_count(), 100, "{stage}");
        assert!(probe.error().is_none(), "{stage}");
        // 100 taken: below the 75% mark, nothing asked for again.
        assert_eq!(source.requested(), asked, "{stage}");
        source.send(asked..asked + 50);
        probe.request(1_000);
        let error = probe
            .error()
            .unwrap_or_else(|| panic!("{stage}: no error after {} items", probe.received_count()));
        assert_eq!(error.rule(), Some("1.1"), "{stage}: {error}");
        assert!(
            probe.received_count() <= asked,
            "{stage}: only what was asked for"
        );
    }
}

/// A source whose `request` panics when its lane asks for more (the second call, at
/// the 75% mark) fails the stage with `Panicked`: the subscriber used to get no
/// terminal signal at all (the pass's guard took the panic for the subscriber's).
#[test]
fn a_source_whose_request_panics_on_a_refill_fails_the_stage() {
    for stage in ["merge", "zip", "flat_map"] {
        let source = ByHand {
            panic_at: 2,
            ..ByHand::default()
        };
        let probe = lane_of(stage, &source, 8);
        probe.request(u64::MAX);
        let asked = source.requested();
        // Downstream takes them as they come: at the 75% mark the lane asks again,
        // and the request panics.
        source.send(0..asked);
        let error = probe
            .error()
            .unwrap_or_else(|| panic!("{stage}: no terminal signal"));
        assert_eq!(error.kind(), weir::ErrorKind::Panicked, "{stage}: {error}");
        // The items up to the mark went out; the stage ended at the refill.
        assert_eq!(probe.received_count(), asked * 3 / 4, "{stage}");
    }
}

/// Fusion: when every source fuses and a fold ends the chain, the sources are folded
/// one after another in the caller's loop. Each source's order is kept and the items
/// are those of the subscribed path, which interleaves the sources' windows instead.
#[test]
fn a_fold_over_sources_that_all_fuse_takes_them_in_turn() {
    const N: u64 = 10_000;
    let part = |i: u64| weir::range(i * N..(i + 1) * N).map(|x| x ^ 1);
    let in_turn: Vec<u64> = (0..4 * N).map(|x| x ^ 1).collect();
    fn collect<P: Publisher<Item = u64>>(merged: P, prefetch: u64) -> Vec<u64> {
        merged
            .fold_with(prefetch, Vec::new(), |mut all, x| {
                all.push(x);
                all
            })
            .wait_timeout(PATIENCE)
            .expect("the merge completes")
            .unwrap()
    }
    let mut sorted = in_turn.clone();
    sorted.sort_unstable();
    for prefetch in [UNBOUNDED, 1, 64] {
        let fused = collect(weir::merge((0..4).map(part)), prefetch);
        assert_eq!(fused, in_turn, "weir::merge, prefetch {prefetch}");
        let pair = collect(part(0).merge(part(1)), prefetch);
        assert_eq!(
            pair,
            in_turn[..2 * N as usize],
            "merge, prefetch {prefetch}"
        );

        // One source that does not fuse: the whole merge is subscribed, and its
        // windows interleave.
        let mut subscribed = collect(
            weir::merge((0..4).map(|i| unfused(part(i).boxed()))),
            prefetch,
        );
        assert_ne!(
            subscribed, in_turn,
            "the subscribed path interleaves windows"
        );
        subscribed.sort_unstable();
        assert_eq!(subscribed, sorted, "prefetch {prefetch}");
        let mut pair = collect(part(0).merge(unfused(part(1))), prefetch);
        assert_ne!(
            pair,
            in_turn[..2 * N as usize],
            "merge, prefetch {prefetch}"
        );
        pair.sort_unstable();
        assert_eq!(pair, sorted[..2 * N as usize], "merge, prefetch {prefetch}");
    }
    let none = weir::merge(Vec::<weir::source::Range<u64>>::new())
        .fold(7u64, |a, x| a + x)
        .wait()
        .unwrap();
    assert_eq!(none, 7, "no sources: the fold's initial value");
}

/// A panic in a fused source's closure names that stage, and no later source is
/// folded (the subscribed path would cancel it).
#[test]
fn a_panic_in_a_fused_sources_closure_names_it_and_folds_no_later_source() {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    let later = Arc::new(AtomicU64::new(0));
    let seen = later.clone();
    let result = weir::range(0..10u64)
        .map(|x| {
            assert!(x != 5, "boom");
            x
        })
        .merge(weir::range(0..10u64).inspect(move |_| {
            seen.fetch_add(1, Relaxed);
        }))
        .fold(0u64, |a, x| a + x)
        .wait();
    let error = result.expect_err("the map panicked");
    assert_eq!(error.kind(), weir::ErrorKind::Panicked, "{error}");
    assert_eq!(error.stage(), Some("map"), "{error}");
    assert_eq!(later.load(Relaxed), 0, "the second source was folded");
}
