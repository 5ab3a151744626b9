//! Behaviour tests of the sinks (`src/sink`): how `fold`, `for_each`, `collect` and
//! `blocking_iter` request (the 75% rule, counted exactly with an adaptor upstream),
//! their handles (`cancel`, `wait_timeout`), errors and panics, and `blocking_iter`
//! fed from another thread.
//!
//! The request counts follow from `demand::Replenish`: a window of `P` is requested up
//! front; `limit = P - P/4` (48 for 64); each time at least `limit` items were
//! consumed since the last request, exactly that many are requested again.

#[path = "support/mod.rs"]
pub mod support;

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use proptest::prelude::*;
use weir::demand::UNBOUNDED;
use weir::prelude::*;
use weir::sink::{SinkHandle, DEFAULT_PREFETCH};
use weir::{Error, ErrorKind};

use support::counting::{
    counted, counted_with, counting_generator, Counted, CountingGenerator, Delivery, Stats,
};
use support::failing::{fails_after, Abandons};
use support::threaded::{current_thread_id, thread_cpu_nanos, Gate, ThreadedRange};
use support::PATIENCE;

/// The low-water mark of a window of `prefetch` (the 75% rule).
fn limit(prefetch: u64) -> u64 {
    prefetch - prefetch / 4
}

/// Which of the three fold-based sinks to run.
#[derive(Clone, Copy, Debug)]
enum Sink {
    Fold,
    ForEach,
    Collect,
}

const SINKS: [Sink; 3] = [Sink::Fold, Sink::ForEach, Sink::Collect];

/// Run `sink` with window `prefetch` over `range(0..n)` seen through a counting
/// adaptor; check the items arrived in order; return what upstream saw.
fn run_sink(sink: Sink, prefetch: u64, n: u64, delivery: Delivery) -> Arc<Stats> {
    let (source, stats) = counted_with(weir::range(0..n), delivery);
    match sink {
        Sink::Fold => {
            let (count, sum) = source
                .fold_with(prefetch, (0u64, 0u64), |(count, sum), x| {
                    assert_eq!(x, count, "in order");
                    (count + 1, sum + x)
                })
                .wait()
                .unwrap();
            assert_eq!((count, sum), (n, (0..n).sum::<u64>()));
        }
        Sink::ForEach => {
            let mut expected = 0;
            let seen = Arc::new(AtomicU64::new(0));
            let counter = seen.clone();
            source
                .for_each_with(prefetch, move |x| {
                    assert_eq!(x, expected, "in order");
                    expected += 1;
                    counter.fetch_add(1, Ordering::SeqCst);
                })
                .wait()
                .unwrap();
            assert_eq!(seen.load(Ordering::SeqCst), n);
        }
        Sink::Collect => {
            let out = source.collect_with(prefetch).wait().unwrap();
            assert_eq!(out, (0..n).collect::<Vec<_>>());
        }
    }
    assert!(!stats.over_delivered());
    stats
}

// ---- demand ---------------------------------------------------------------------

/// `collect_with(64)` over 10,000 items.
///
/// * Item by item (upstream calls `on_next`): 64 up front, then 48 each time 48 were
///   consumed: `1 + floor(10,000 / 48) = 1 + 208 = 209` requests, `64 + 208 * 48 =
///   10,048` requested in total.
/// * In batches (a synchronous source emits the whole window as one batch): each
///   batch of 64 consumes 64 >= 48 and re-requests those 64; the final batch of
///   `10,000 mod 64 = 16 < 48` does not. `1 + floor(10,000 / 64) = 157` requests of 64.
///
/// Either way, never more than 64 outstanding.
#[test]
fn collect_requests_in_batches_with_the_75_percent_rule() {
    for sink in SINKS {
        let stats = run_sink(sink, 64, 10_000, Delivery::OneByOne);
        let mut expected = vec![64];
        expected.extend(std::iter::repeat(48).take(208));
        assert_eq!(stats.request_log(), expected, "{sink:?}");
        assert_eq!(stats.requested(), 10_048);
        assert_eq!(stats.max_outstanding(), 64, "{sink:?}");

        let stats = run_sink(sink, 64, 10_000, Delivery::Batches);
        assert_eq!(stats.request_log(), vec![64; 157], "{sink:?}");
        assert_eq!(stats.max_outstanding(), 64, "{sink:?}");
    }
}

#[test]
fn default_prefetch_is_the_documented_constant() {
    let n = 10 * DEFAULT_PREFETCH + 7;
    let (source, stats) = counted(weir::range(0..n));
    assert_eq!(source.collect().wait().unwrap().len() as u64, n);
    assert_eq!(stats.request_log()[0], DEFAULT_PREFETCH);
    assert_eq!(stats.max_outstanding(), DEFAULT_PREFETCH);

    let (source, stats) = counted(weir::range(0..n));
    assert_eq!(source.fold(0u64, |c, _| c + 1).wait().unwrap(), n);
    assert_eq!(stats.request_log()[0], DEFAULT_PREFETCH);
    assert_eq!(stats.max_outstanding(), DEFAULT_PREFETCH);

    let (source, stats) = counted_with(weir::range(0..n), Delivery::OneByOne);
    source.for_each(|_| {}).wait().unwrap();
    let log = stats.request_log();
    assert_eq!(log[0], DEFAULT_PREFETCH);
    assert!(log[1..].iter().all(|&r| r == limit(DEFAULT_PREFETCH)));
    assert_eq!(stats.max_outstanding(), DEFAULT_PREFETCH);
}

#[test]
fn unbounded_prefetch_requests_exactly_once() {
    for sink in SINKS {
        for delivery in [Delivery::Batches, Delivery::OneByOne] {
            let stats = run_sink(sink, UNBOUNDED, 5_000, delivery);
            assert_eq!(
                stats.request_log(),
                vec![UNBOUNDED],
                "{sink:?} {delivery:?}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// The exact request sequence of the 75% rule for any window and length.
    #[test]
    fn sinks_follow_the_75_percent_rule(
        prefetch in 1u64..=100,
        n in 0u64..2_000,
        sink in prop_oneof![Just(Sink::Fold), Just(Sink::ForEach), Just(Sink::Collect)],
    ) {
        let limit = limit(prefetch);

        let stats = run_sink(sink, prefetch, n, Delivery::OneByOne);
        let mut expected = vec![prefetch];
        expected.extend(std::iter::repeat(limit).take((n / limit) as usize));
        prop_assert_eq!(stats.request_log(), expected);
        prop_assert!(stats.max_outstanding() <= prefetch);

        // Whole windows as batches: every full batch re-requests itself; the last,
        // partial batch only if it reaches the limit.
        let stats = run_sink(sink, prefetch, n, Delivery::Batches);
        let mut expected = vec![prefetch; 1 + (n / prefetch) as usize];
        if n % prefetch >= limit {
            expected.push(n % prefetch);
        }
        prop_assert_eq!(stats.request_log(), expected);
        prop_assert!(stats.max_outstanding() <= prefetch);
    }

    /// `blocking_iter` yields everything in order, requests `limit` per `limit`
    /// taken, and never has more than `prefetch` outstanding.
    #[test]
    fn blocking_iter_follows_the_75_percent_rule(prefetch in 1u64..=40, n in 0u64..300) {
        let (source, stats) = counted(weir::range(0..n));
        let items: Vec<u64> = source.blocking_iter(prefetch).map(Result::unwrap).collect();
        prop_assert_eq!(items, (0..n).collect::<Vec<_>>());
        let limit = limit(prefetch);
        let mut expected = vec![prefetch];
        expected.extend(std::iter::repeat(limit).take((n / limit) as usize));
        prop_assert_eq!(stats.request_log(), expected);
        prop_assert!(stats.max_outstanding() <= prefetch);
        prop_assert!(!stats.over_delivered());
    }
}

#[test]
#[should_panic(expected = "collect_with prefetch must be at least 1 (got 0)")]
fn zero_prefetch_panics_naming_the_sink() {
    let _ = weir::range(0u8..3).collect_with(0);
}

#[test]
#[should_panic(expected = "fold_with prefetch must be at least 1 (got 0)")]
fn zero_fold_prefetch_panics_naming_the_sink() {
    let _ = weir::range(0u8..3).fold_with(0, 0u8, |a, _| a);
}

#[test]
#[should_panic(expected = "for_each_with prefetch must be at least 1 (got 0)")]
fn zero_for_each_prefetch_panics_naming_the_sink() {
    let _ = weir::range(0u8..3).for_each_with(0, |_| {});
}

// ---- handles --------------------------------------------------------------------

#[test]
fn cancel_before_completion_reports_cancelled_and_cancels_upstream() {
    let (source, stats) = counted(weir::never::<u32>());
    let mut handle = source.collect();
    assert!(!handle.is_terminated());
    handle.cancel();
    assert!(handle.is_terminated());
    assert_eq!(stats.cancels(), 1, "upstream cancelled");
    handle.cancel();
    assert_eq!(stats.cancels(), 1, "cancel is idempotent");
    let result = handle.wait_timeout(PATIENCE).expect("terminated");
    assert_eq!(result.unwrap_err().kind(), ErrorKind::Cancelled);
}

#[test]
fn cancel_mid_stream_stops_an_asynchronous_upstream() {
    let gate = Gate::new();
    let publisher = ThreadedRange::new(1_000).paused_at(100, gate.clone());
    let exited = publisher.exited();
    let (source, stats) = counted(publisher);
    let (tx, rx) = mpsc::channel();
    let handle = source.for_each_with(16, move |x| tx.send(x).unwrap());
    for expected in 0..100 {
        assert_eq!(rx.recv_timeout(PATIENCE), Ok(expected));
    }
    handle.cancel();
    gate.open();
    assert!(exited.wait_timeout(PATIENCE), "the producer must stop");
    assert_eq!(handle.wait().unwrap_err().kind(), ErrorKind::Cancelled);
    assert_eq!(stats.cancels(), 1);
    assert_eq!(stats.delivered(), 100, "nothing produced after the cancel");
    assert!(rx.try_recv().is_err());
}

#[test]
fn cancel_before_on_subscribe_cancels_the_subscription_when_it_arrives() {
    // The producer calls on_subscribe on its own thread, after the gate opens: the
    // sink was cancelled before it had a subscription.
    let gate = Gate::new();
    let publisher = ThreadedRange::new(1_000).subscribed_after(gate.clone());
    let exited = publisher.exited();
    let (source, stats) = counted(publisher);
    let handle = source.collect_with(16);
    handle.cancel();
    gate.open();
    assert!(exited.wait_timeout(PATIENCE), "the producer must stop");
    assert_eq!(handle.wait().unwrap_err().kind(), ErrorKind::Cancelled);
    assert_eq!(stats.cancels(), 1, "the late subscription is cancelled");
    assert_eq!(stats.request_calls(), 0, "and never requested from");
    assert_eq!(stats.delivered(), 0);

    // The same for a blocking iterator dropped before its subscription arrived.
    let gate = Gate::new();
    let publisher = ThreadedRange::new(1_000).subscribed_after(gate.clone());
    let exited = publisher.exited();
    let (source, stats) = counted(publisher);
    drop(source.blocking_iter(8));
    gate.open();
    assert!(exited.wait_timeout(PATIENCE), "the producer must stop");
    assert_eq!((stats.cancels(), stats.request_calls()), (1, 0));
}

#[test]
fn sinks_drain_an_asynchronous_upstream() {
    for sink in SINKS {
        let publisher = ThreadedRange::new(20_000);
        let (source, stats) = counted(publisher);
        let (count, sum) = match sink {
            Sink::Fold => source
                .fold_with(64, (0u64, 0u64), |(c, s), x| (c + 1, s + x))
                .wait()
                .unwrap(),
            Sink::ForEach => {
                let seen = Arc::new(AtomicU64::new(0));
                let counter = seen.clone();
                let mut next = 0;
                source
                    .for_each_with(64, move |x| {
                        assert_eq!(x, next, "in order");
                        next += 1;
                        counter.fetch_add(x, Ordering::SeqCst);
                    })
                    .wait()
                    .unwrap();
                (20_000, seen.load(Ordering::SeqCst))
            }
            Sink::Collect => {
                let out = source.collect_with(64).wait().unwrap();
                assert_eq!(out, (0..20_000).collect::<Vec<_>>());
                (out.len() as u64, out.iter().sum())
            }
        };
        assert_eq!((count, sum), (20_000, (0..20_000u64).sum()), "{sink:?}");
        assert!(!stats.over_delivered(), "{sink:?}");
        assert!(stats.max_outstanding() <= 64, "{sink:?}");
        assert_eq!(stats.delivered(), 20_000, "{sink:?}");
    }
}

#[test]
#[should_panic(expected = "the sink's result was already taken")]
fn wait_timeout_takes_the_result() {
    let mut handle = weir::just(1u8).collect();
    assert_eq!(handle.wait_timeout(PATIENCE).unwrap().unwrap(), vec![1]);
    let _ = handle.wait_timeout(PATIENCE);
}

#[test]
fn cancel_after_completion_keeps_the_result() {
    let handle = weir::range(0u8..3).collect();
    assert!(handle.is_terminated());
    handle.cancel();
    assert_eq!(handle.wait().unwrap(), vec![0, 1, 2]);
}

#[test]
fn wait_timeout_on_never_returns_none() {
    let mut handle: SinkHandle<()> = weir::never::<u8>().for_each(|_| {});
    assert!(handle.wait_timeout(Duration::from_millis(20)).is_none());
    assert!(!handle.is_terminated());
    handle.cancel();
    let result = handle.wait_timeout(PATIENCE).expect("cancelled");
    assert_eq!(result.unwrap_err().kind(), ErrorKind::Cancelled);
}

#[test]
fn errors_are_the_result() {
    let boom = Error::msg("upstream down");
    let error = weir::error::<u32>(boom.clone())
        .collect()
        .wait()
        .unwrap_err();
    assert!(Error::ptr_eq(&error, &boom));
    assert_eq!(error.kind(), ErrorKind::Upstream);

    // After some items: for_each saw them, the result is the error.
    let source = fails_after(3, boom.clone());
    let seen = Arc::new(AtomicU64::new(0));
    let counter = seen.clone();
    let error = source
        .for_each_with(2, move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
        })
        .wait()
        .unwrap_err();
    assert!(Error::ptr_eq(&error, &boom));
    assert_eq!(seen.load(Ordering::SeqCst), 3);
}

/// Run `sink` over an endless counting generator seen through a counting adaptor
/// (`delivery`): it must fail with a `Panicked` error carrying `message`, and cancel
/// upstream once. Returns what upstream saw and how often the generator was called.
fn fails_with_panic<A: Debug>(
    delivery: Delivery,
    sink: impl FnOnce(Counted<CountingGenerator>) -> SinkHandle<A>,
    message: &str,
) -> (Arc<Stats>, u64) {
    let (generator, calls) = counting_generator(u64::MAX);
    let (source, stats) = counted_with(generator, delivery);
    let error = sink(source).wait().unwrap_err();
    assert_eq!(
        (error.kind(), error.message()),
        (ErrorKind::Panicked, message)
    );
    assert_eq!(stats.cancels(), 1);
    (stats, calls.load(Ordering::SeqCst))
}

#[test]
fn panics_in_the_closure_become_panicked_and_cancel_upstream() {
    let (stats, pulled) = fails_with_panic(
        Delivery::Batches,
        |source| {
            source.fold_with(8, 0u64, |acc, x| {
                if x == 20 {
                    panic!("fold boom");
                }
                acc + x
            })
        },
        "fold boom",
    );
    assert!(pulled <= stats.requested());
    assert!(
        stats.requested() <= 20 + 8,
        "requested {}",
        stats.requested()
    );

    let (stats, _) = fails_with_panic(
        Delivery::OneByOne,
        |source| {
            source.for_each_with(4, |x| {
                if x == 9 {
                    panic!("for_each boom at {x}");
                }
            })
        },
        "for_each boom at 9",
    );
    // Window 4, limit 3: upstream batches are [0, 4), [4, 7), [7, 10); the panic at 9
    // ends the third, and nothing more is pulled.
    assert_eq!(stats.delivered(), 10, "upstream stops at the panic");
}

// ---- fused folds -------------------------------------------------------------------
//
// A fold at the end of a synchronous source and closure stages (`map`, `filter`,
// `filter_map`, `inspect`) runs as one loop in the caller. These tests check that it
// gives what the subscribed path gives (the same chain behind an unfused source) and
// what the `Iterator` chain gives, and that a panic's error names the right stage.

/// `source → map → filter → filter_map → inspect → fold_with(prefetch)`, with the
/// inspect's calls counted: the fold's (count, wrapping sum, order digest) and the
/// number of items inspected.
fn chain<P: Publisher<Item = u64>>(
    source: P,
    prefetch: u64,
    (mul, modulus, keep, shift): (u64, u64, u64, u32),
) -> ((u64, u64, u64), u64) {
    let inspected = Arc::new(AtomicU64::new(0));
    let counter = inspected.clone();
    let folded = source
        .map(move |x| x.wrapping_mul(mul))
        .filter(move |x| x % modulus != keep)
        .filter_map(move |x| (x & 3 != 1).then_some(x >> shift))
        .inspect(move |_| {
            counter.fetch_add(1, Ordering::Relaxed);
        })
        .fold_with(prefetch, (0u64, 0u64, 0u64), |(n, sum, digest), x| {
            (
                n + 1,
                sum.wrapping_add(x),
                digest.wrapping_mul(31).wrapping_add(x),
            )
        })
        .wait_timeout(PATIENCE)
        .expect("a synchronous chain completes")
        .expect("no stage fails");
    (folded, inspected.load(Ordering::Relaxed))
}

proptest! {
    /// Over `range` and `from_iter`, fused and subscribed, and a fused `merge` of two
    /// `range`s, any window: the same count, sum, order and inspections as the
    /// `Iterator` chain.
    #[test]
    fn fused_folds_equal_the_subscribed_path_and_the_iterator_chain(
        start in 0u64..1_000,
        len in 0u64..3_000,
        prefetch in prop_oneof![Just(UNBOUNDED), 1u64..300],
        params in (1u64..50, 1u64..9, 0u64..9, 0u32..4),
        split in 0u64..=100,
    ) {
        let (mul, modulus, keep, shift) = params;
        let items = start..start + len;
        let mid = start + len * split / 100;
        let model = items
            .clone()
            .map(|x| x.wrapping_mul(mul))
            .filter(|x| x % modulus != keep)
            .filter_map(|x| (x & 3 != 1).then_some(x >> shift))
            .fold((0u64, 0u64, 0u64), |(n, sum, digest), x| {
                (n + 1, sum.wrapping_add(x), digest.wrapping_mul(31).wrapping_add(x))
            });
        let expected = (model, model.0);
        let vec: Vec<u64> = items.clone().collect();
        prop_assert_eq!(chain(weir::range(items.clone()), prefetch, params), expected);
        prop_assert_eq!(chain(weir::from_iter(vec.clone()), prefetch, params), expected);
        // A merge of two parts fuses too, folding the parts in turn: the chain's order.
        let halves = weir::range(start..mid).merge(weir::range(mid..start + len));
        prop_assert_eq!(chain(halves, prefetch, params), expected);
        prop_assert_eq!(
            chain(support::unfused::unfused(weir::range(items)), prefetch, params),
            expected
        );
        prop_assert_eq!(
            chain(support::unfused::unfused(weir::from_iter(vec)), prefetch, params),
            expected
        );
    }
}

/// A fused fold has finished when `fold` returns: its handle is terminated, `cancel`
/// keeps the result, and awaiting it (where the features allow) is immediate; an
/// empty source gives the initial value; `collect` keeps the order.
#[test]
fn a_fused_fold_returns_a_finished_handle() {
    let handle = weir::range(0u64..1_000)
        .map(|x| x * 2)
        .fold(0, |a, x| a + x);
    assert!(handle.is_terminated());
    handle.cancel();
    assert_eq!(handle.wait().unwrap(), 999_000);
    assert_eq!(
        weir::range(5u8..5).fold(7u8, |a, x| a + x).wait().unwrap(),
        7
    );
    assert_eq!(
        weir::range(9i32..std::hint::black_box(3))
            .collect()
            .wait()
            .unwrap(),
        Vec::<i32>::new()
    );
    let words = weir::from_iter(["c", "a", "b"])
        .filter(|w| *w != "a")
        .collect()
        .wait()
        .unwrap();
    assert_eq!(words, vec!["c", "b"]);
    let mut seen = Vec::new();
    let (tx, rx) = mpsc::channel();
    weir::range(u64::MAX - 3..u64::MAX)
        .for_each_with(1, move |x| tx.send(x).unwrap())
        .wait()
        .unwrap();
    seen.extend(rx.try_iter());
    assert_eq!(seen, vec![u64::MAX - 3, u64::MAX - 2, u64::MAX - 1]);
}

/// The stage a fused fold's panic names: the closure that panicked, also when a
/// closure runs a fused fold of its own whose panic it handles, and never a stage
/// left over from an earlier panic on the same thread.
#[test]
fn a_fused_folds_panic_names_the_stage_whose_closure_panicked() {
    fn stage(result: Result<u64, Error>) -> Option<&'static str> {
        let error = result.expect_err("a closure panicked");
        assert_eq!(error.kind(), ErrorKind::Panicked, "{error}");
        assert!(error.message().contains("boom"), "{error}");
        error.stage()
    }
    fn boom_at(n: u64) -> impl Fn(u64) -> u64 + Copy {
        move |x| {
            assert!(x != n, "boom");
            x
        }
    }
    // The innermost closure wins over the closures around it and over the source.
    let vec: Vec<u64> = (0..10).collect();
    assert_eq!(
        stage(
            weir::from_iter(vec.clone())
                .map(boom_at(4))
                .fold(0, |a, x| a + x)
                .wait()
        ),
        Some("map")
    );
    assert_eq!(
        stage(
            weir::from_iter(vec)
                .map(|x| x)
                .fold(0, |a, x| a + boom_at(4)(x))
                .wait()
        ),
        Some("fold")
    );
    let panicking_iter = (0u64..10).map(boom_at(6));
    assert_eq!(
        stage(
            weir::from_iter(panicking_iter)
                .map(|x| x + 1)
                .fold(0, |a, x| a + x)
                .wait()
        ),
        Some("from_iter")
    );
    // A closure that runs a fused fold which panics, and handles its error: the outer
    // fold goes on, and the outer panic (in `filter`) names `filter`.
    let outer = weir::range(0u64..10)
        .map(|x| {
            let inner = weir::range(0..x)
                .map(boom_at(3))
                .fold(0, |a, x| a + x)
                .wait();
            assert_eq!(inner.is_err(), x > 3, "the inner fold at {x}");
            x
        })
        .filter(|x| boom_at(8)(*x) % 2 == 0)
        .fold(0, |a, x| a + x)
        .wait();
    assert_eq!(stage(outer), Some("filter"));
    // And the next fold on this thread starts with no name left over.
    assert_eq!(
        stage(
            weir::range(0u64..10)
                .inspect(|x| {
                    boom_at(2)(*x);
                })
                .fold(0, |a, x| a + x)
                .wait()
        ),
        Some("inspect")
    );
    assert_eq!(
        weir::range(0u64..10).fold(0, |a, x| a + x).wait().unwrap(),
        45
    );
}

// ---- blocking_iter ----------------------------------------------------------------

#[test]
fn blocking_iter_yields_everything_in_order() {
    let mut iter = weir::range(0u32..1_000).blocking_iter(16);
    let items: Vec<u32> = iter.by_ref().map(Result::unwrap).collect();
    assert_eq!(items, (0..1_000).collect::<Vec<_>>());
    assert!(iter.next().is_none(), "fused");
}

#[test]
fn blocking_iter_yields_the_error_then_none() {
    let boom = Error::msg("broken");
    let mut iter = fails_after(3, boom.clone()).blocking_iter(2);
    for expected in 1..=3 {
        assert_eq!(iter.next().unwrap().unwrap(), expected);
    }
    let error = iter.next().unwrap().unwrap_err();
    assert!(Error::ptr_eq(&error, &boom));
    assert!(iter.next().is_none());
    assert!(iter.next().is_none());
}

#[test]
fn blocking_iter_requests_exactly_by_the_75_percent_rule() {
    // Window 16, limit 12: 16 up front, then 12 per 12 taken: 1 + floor(1000 / 12) = 84.
    let (source, stats) = counted(weir::range(0u64..1_000));
    let items: Vec<u64> = source.blocking_iter(16).map(Result::unwrap).collect();
    assert_eq!(items.len(), 1_000);
    let mut expected = vec![16];
    expected.extend(std::iter::repeat(12).take(83));
    assert_eq!(stats.request_log(), expected);
    assert_eq!(stats.max_outstanding(), 16);
}

#[test]
fn dropping_blocking_iter_cancels_upstream() {
    let (source, stats) = counted(weir::range(0u64..1_000_000));
    let mut iter = source.blocking_iter(8);
    assert_eq!(iter.next().unwrap().unwrap(), 0);
    assert_eq!(iter.next().unwrap().unwrap(), 1);
    assert_eq!(iter.next().unwrap().unwrap(), 2);
    assert_eq!(stats.cancels(), 0);
    drop(iter);
    assert_eq!(stats.cancels(), 1, "drop cancels upstream");
    assert_eq!(stats.delivered(), 8, "only the first window was delivered");
}

/// A publisher that drops its subscriber without a terminal signal (its thread
/// panicked, say): every sink ends with `Cancelled` after the items it got, none
/// waits for ever (`blocking_iter` did until it learned to).
#[test]
fn a_publisher_that_abandons_its_subscriber_ends_every_sink_with_cancelled() {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut iter = Abandons { items: 3 }.blocking_iter(8);
        let got: Vec<_> = iter.by_ref().take(4).collect();
        tx.send((got, iter.next().is_none())).unwrap();
    });
    let (got, fused) = rx
        .recv_timeout(PATIENCE)
        .expect("blocking_iter waited for ever for an abandoned stream");
    assert_eq!(got.len(), 4, "{got:?}");
    for (item, expected) in got[..3].iter().zip(1..) {
        assert_eq!(*item.as_ref().unwrap(), expected);
    }
    assert_eq!(got[3].as_ref().unwrap_err().kind(), ErrorKind::Cancelled);
    assert!(fused, "then None");
    let mut handle = Abandons { items: 3 }.collect();
    let result = handle.wait_timeout(PATIENCE).expect("collect ended");
    assert_eq!(result.unwrap_err().kind(), ErrorKind::Cancelled);
}

#[test]
fn blocking_iter_fed_from_another_thread() {
    const N: u64 = 100_000;
    let publisher = ThreadedRange::new(N);
    let exited = publisher.exited();
    let (source, stats) = counted(publisher);
    let mut expected = 0u64;
    for item in source.blocking_iter(32) {
        assert_eq!(item.unwrap(), expected);
        expected += 1;
    }
    assert_eq!(expected, N);
    assert!(exited.wait_timeout(PATIENCE));
    assert!(!stats.over_delivered());
    assert!(stats.max_outstanding() <= 32, "{}", stats.max_outstanding());
    assert_eq!(stats.completes(), 1);

    // Dropping it mid-stream cancels the producer, which then exits.
    let publisher = ThreadedRange::new(u64::MAX);
    let exited = publisher.exited();
    let (source, stats) = counted(publisher);
    let taken: Vec<u64> = source
        .blocking_iter(8)
        .take(500)
        .map(Result::unwrap)
        .collect();
    assert_eq!(taken, (0..500).collect::<Vec<_>>());
    assert!(exited.wait_timeout(PATIENCE), "the producer must stop");
    assert_eq!(stats.cancels(), 1);
    assert!(stats.delivered() <= 500 + 8);
}

#[test]
fn blocking_iter_over_a_channel_takes_every_item_once_in_each_senders_order() {
    // The iterator watches the channel's lane while it polls and runs the channel's
    // drain loop on its own thread; senders that find it watching only claim a
    // slot. Two senders (one `try_send`, one `send_blocking`), windows of 1 and 64,
    // a consumer that sometimes pauses: every item once, each sender's in order.
    const N: u64 = 50_000;
    for prefetch in [1u64, 64] {
        let (tx, rx) =
            weir::channel::<u64>(256, weir::source::channel::ChannelPolicy::Backpressure);
        let senders: Vec<_> = (0..2u64)
            .map(|p| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for i in (p..N).step_by(2) {
                        if p == 0 {
                            let mut item = i;
                            while let Err(refused) = tx.try_send(item) {
                                item = refused.into_inner();
                                std::thread::yield_now();
                            }
                        } else {
                            tx.send_blocking(i).expect("the iterator reads");
                        }
                    }
                })
            })
            .collect();
        drop(tx);
        let mut next = [0u64, 1];
        let mut count = 0u64;
        for item in rx.blocking_iter(prefetch) {
            let item = item.expect("the channel completes");
            let p = (item % 2) as usize;
            assert_eq!(
                item, next[p],
                "sender {p}'s items in order (prefetch {prefetch})"
            );
            next[p] += 2;
            count += 1;
            if count % 5_000 == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        assert_eq!(count, N, "every item once (prefetch {prefetch})");
        for sender in senders {
            sender.join().unwrap();
        }
    }
}

#[test]
fn blocking_iter_consumed_on_another_thread() {
    let iter = weir::range(0u32..10_000).map(|x| x * 2).blocking_iter(64);
    let items = std::thread::spawn(move || iter.map(Result::unwrap).collect::<Vec<_>>())
        .join()
        .unwrap();
    assert_eq!(items, (0..10_000).map(|x| x * 2).collect::<Vec<_>>());
}

/// A consumer waiting for items parks: over an observation window in which no item
/// can arrive (the producer is held at a gate) its thread uses next to no CPU. A
/// spinning wait would burn most of the window. The window's length only limits how
/// strongly spinning is detected; a parked consumer passes for any length.
#[test]
fn blocking_iter_parks_while_waiting() {
    const WINDOW: Duration = Duration::from_millis(200);
    const MAX_BUSY: Duration = Duration::from_millis(20);
    let gate = Gate::new();
    let (source, stats) = counted(ThreadedRange::new(100).paused_at(50, gate.clone()));
    let (tx, rx) = mpsc::channel();
    let consumer = std::thread::spawn(move || {
        tx.send(current_thread_id()).unwrap();
        let mut out = Vec::new();
        for item in source.blocking_iter(8) {
            out.push(item.unwrap());
            if out.len() == 50 {
                // The next `next()` must block until the gate opens.
                tx.send(String::new()).unwrap();
            }
        }
        out
    });
    let id = rx.recv_timeout(PATIENCE).unwrap();
    assert_eq!(rx.recv_timeout(PATIENCE), Ok(String::new()));
    let before = thread_cpu_nanos(&id);
    std::thread::sleep(WINDOW);
    let busy = Duration::from_nanos(thread_cpu_nanos(&id) - before);
    gate.open();
    let out = consumer.join().unwrap();
    assert_eq!(out, (0..100).collect::<Vec<_>>());
    assert!(stats.max_outstanding() <= 8);
    assert!(
        busy < MAX_BUSY,
        "the blocked consumer ran {busy:?} during a {WINDOW:?} wait: it spins"
    );
}

#[test]
#[should_panic(expected = "blocking_iter prefetch must be in 1..=2^30")]
fn blocking_iter_rejects_an_unbounded_window() {
    let _ = weir::never::<u8>().blocking_iter(UNBOUNDED);
}

#[test]
#[should_panic(expected = "blocking_iter prefetch must be in 1..=2^30 (got 0)")]
fn blocking_iter_zero_prefetch_panics() {
    let _ = weir::range(0u8..3).blocking_iter(0);
}

#[test]
#[should_panic(expected = "blocking_iter prefetch must be in 1..=2^30 (got 1073741825)")]
fn blocking_iter_prefetch_above_the_limit_panics() {
    let _ = weir::never::<u64>().blocking_iter((1 << 30) + 1);
}

/// A blocking iterator is `Send + Sync` for any `Send` item, as it was before it kept
/// its own buffer of taken items: a `Cell` (`Send`, not `Sync`) still goes through,
/// and the iterator moves to another thread and is shared by reference.
#[test]
fn a_blocking_iter_is_send_and_sync_for_items_that_are_only_send() {
    use std::cell::Cell;
    fn assert_send_sync<T: Send + Sync>(_: &T) {}
    let iter = weir::from_iter((0..100u32).map(Cell::new)).blocking_iter(8);
    assert_send_sync(&iter);
    let shared = std::sync::Mutex::new(iter);
    let got: Vec<u32> = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let mut iter = shared.lock().unwrap();
                iter.by_ref().map(|item| item.unwrap().get()).collect()
            })
            .join()
            .unwrap()
    });
    assert_eq!(got, (0..100).collect::<Vec<_>>());
}

/// `SinkHandle` is `IntoFuture`: `.await` gives the terminal result without blocking a
/// thread, dropping the future before the end cancels the sink.
mod awaiting {
    use super::*;
    use std::sync::atomic::AtomicBool;

    /// A current-thread tokio runtime with its drivers on.
    fn current_thread() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// A receiver of `0..n`, fed by a task on the current runtime.
    fn spawned_numbers(n: u64) -> tokio::sync::mpsc::Receiver<u64> {
        let (tx, rx) = tokio::sync::mpsc::channel::<u64>(4);
        tokio::spawn(async move {
            for i in 0..n {
                tx.send(i).await.unwrap();
            }
        });
        rx
    }

    /// The newcomer's hang: `.wait()` inside a current-thread runtime, on a stream
    /// whose source needs that runtime. It panics at once, saying what to do.
    #[test]
    #[should_panic(expected = "`.await` instead")]
    fn wait_inside_a_current_thread_runtime_panics_instead_of_hanging() {
        let rt = current_thread();
        rt.block_on(async {
            let (_tx, rx) = tokio::sync::mpsc::channel::<u64>(4);
            let _ = weir::from_receiver(rx).collect().wait();
        });
    }

    /// The same inside a task of a multi-threaded runtime (tokio's `block_on` panics
    /// there too: the worker would be taken from every other task).
    #[test]
    fn wait_inside_a_task_panics_and_names_the_call() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        let task = rt.spawn(async {
            let (_tx, rx) = tokio::sync::mpsc::channel::<u64>(4);
            let _ = weir::from_receiver(rx).collect().wait();
        });
        let joined = rt.block_on(task);
        let panic = joined.unwrap_err().into_panic();
        let message = panic.downcast_ref::<String>().expect("a formatted message");
        assert!(message.contains("SinkHandle::wait"), "{message}");
        assert!(message.contains("`.await` instead"), "{message}");
    }

    /// Threads that may block still may: `spawn_blocking`, and a finished stream
    /// (nothing to wait for) anywhere.
    #[test]
    fn wait_is_allowed_where_blocking_is() {
        let rt = current_thread();
        let total = rt.block_on(async {
            let rx = spawned_numbers(100);
            let sink = weir::from_receiver(rx).fold(0u64, |sum, x| sum + x);
            tokio::task::spawn_blocking(move || sink.wait())
                .await
                .unwrap()
        });
        assert_eq!(total.unwrap(), 4_950);
        let ready = rt.block_on(async { weir::range(0u64..10).collect().wait() });
        assert_eq!(
            ready.unwrap().len(),
            10,
            "a synchronous stream is done before wait"
        );
    }

    #[test]
    #[should_panic(expected = "the blocking iterator's next()")]
    fn the_blocking_iterator_panics_inside_a_runtime_too() {
        let rt = current_thread();
        rt.block_on(async {
            let (_tx, rx) = tokio::sync::mpsc::channel::<u64>(4);
            let _ = weir::from_receiver(rx).blocking_iter(16).next();
        });
    }

    #[test]
    #[should_panic(expected = "Sender::send_blocking")]
    fn a_blocking_send_panics_inside_a_runtime() {
        let rt = current_thread();
        rt.block_on(async {
            let (tx, _rx) =
                weir::channel::<u64>(1, weir::source::channel::ChannelPolicy::Backpressure);
            tx.send_blocking(1).unwrap(); // room: no wait, no panic
            let _ = tx.send_blocking(2); // full: would wait
        });
    }

    #[test]
    #[should_panic(expected = "Emitter::wait_ready")]
    fn an_emitter_blocking_send_panics_inside_a_runtime() {
        let rt = current_thread();
        rt.block_on(async {
            let (tx, rx) = std::sync::mpsc::channel();
            let subscriber = weir::tck::TestSubscriber::new();
            let _probe = subscriber.probe();
            weir::create(move |emitter: weir::source::Emitter<u64>| {
                tx.send(emitter).unwrap();
            })
            .subscribe(subscriber);
            let emitter = rx.recv().unwrap();
            let _ = emitter.send_blocking(1); // no demand: would wait
        });
    }

    /// On a current-thread runtime, a sink whose source runs on that same runtime can
    /// be awaited: the await yields the thread to the source (`.wait()` would block
    /// the only thread the source could run on).
    #[test]
    fn a_sink_is_awaited_on_the_runtime_its_source_runs_on() {
        let rt = current_thread();
        let total = rt.block_on(async {
            let rx = spawned_numbers(1_000);
            weir::from_receiver(rx).fold(0u64, |sum, x| sum + x).await
        });
        assert_eq!(total.unwrap(), 499_500);
    }

    #[test]
    fn every_sink_can_be_awaited_and_errors_come_through() {
        futures::executor::block_on(async {
            assert_eq!(
                weir::range(0u32..5).collect().await.unwrap(),
                [0, 1, 2, 3, 4]
            );
            let seen = Arc::new(AtomicU64::new(0));
            let count = seen.clone();
            weir::range(0u64..10)
                .for_each(move |_| {
                    count.fetch_add(1, Ordering::SeqCst);
                })
                .await
                .unwrap();
            assert_eq!(seen.load(Ordering::SeqCst), 10);
            let error = weir::error::<u8>(Error::msg("broken")).collect().await;
            assert_eq!(error.unwrap_err().message(), "broken");
        });
    }

    /// The result arrives from another thread while the future waits: woken, never
    /// lost (many rounds, each racing the end against the first poll).
    #[test]
    fn a_result_from_another_thread_wakes_the_awaiting_task() {
        let pool = weir::runtime::ThreadPool::new(2);
        for round in 0..200u64 {
            let sum = futures::executor::block_on(
                weir::range(0..round)
                    .publish_on(pool.clone(), 16)
                    .fold(0u64, |sum, x| sum + x)
                    .into_future(),
            );
            assert_eq!(sum.unwrap(), (0..round).sum::<u64>());
        }
    }

    #[test]
    fn dropping_the_future_before_the_end_cancels_the_sink() {
        let cancelled = Arc::new(AtomicBool::new(false));
        let flag = cancelled.clone();
        let handle = weir::never::<u8>()
            .inspect_cancel(move || flag.store(true, Ordering::SeqCst))
            .collect();
        let mut future = handle.into_future();
        let waker = futures::task::noop_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        assert!(std::pin::Pin::new(&mut future).poll(&mut cx).is_pending());
        assert!(!cancelled.load(Ordering::SeqCst));
        drop(future);
        assert!(cancelled.load(Ordering::SeqCst));
    }

    #[test]
    fn a_finished_future_dropped_cancels_nothing() {
        let cancelled = Arc::new(AtomicBool::new(false));
        let flag = cancelled.clone();
        let result = futures::executor::block_on(
            weir::range(0u8..3)
                .inspect_cancel(move || flag.store(true, Ordering::SeqCst))
                .collect()
                .into_future(),
        );
        assert_eq!(result.unwrap(), [0, 1, 2]);
        assert!(!cancelled.load(Ordering::SeqCst));
    }

    use std::future::{Future, IntoFuture};
}

/// The iterator blocks only after polling, and a delivery wakes it only when it is
/// marked waiting: single items from another thread, with windows of 1 and 4 (every
/// hand-off finds the iterator polling, waiting, or about to wait), and a consumer
/// that sometimes sleeps: nothing is lost, nothing hangs.
#[test]
fn blocking_iter_single_items_from_another_thread_are_never_stranded() {
    for prefetch in [1u64, 4] {
        let (tx, rx) = weir::channel::<u64>(8, weir::source::channel::ChannelPolicy::Backpressure);
        let producer = std::thread::spawn(move || {
            for i in 0..20_000u64 {
                tx.send_blocking(i).unwrap();
                if i % 4_096 == 0 {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
        });
        let mut expected = 0u64;
        for item in rx.blocking_iter(prefetch) {
            assert_eq!(item.unwrap(), expected);
            expected += 1;
            if expected % 5_000 == 0 {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        }
        assert_eq!(expected, 20_000, "prefetch {prefetch}");
        producer.join().unwrap();
    }
}

/// `SinkHandle::wait` over a channel: the waiting thread watches the channel's lane
/// while items keep coming and runs the channel's drain loop itself (so the sink's
/// closure may run there), and sleeps when they stop. Under every policy, with
/// every send method racing a `close` or a `fail`, each accepted item is delivered
/// or dropped (to the hook) exactly once.
mod waiting_on_a_channel {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{mpsc, Arc};
    use std::time::{Duration, Instant};

    use weir::demand::UNBOUNDED;
    use weir::hub::Hub;
    use weir::prelude::*;
    use weir::sink::SinkHandle;
    use weir::source::channel::{ChannelPolicy, Sender};
    use weir::tck::TestSubscriber;
    use weir::ErrorKind;

    use super::support::threaded::{current_thread_id, thread_cpu_nanos};
    use super::support::PATIENCE;

    /// Sends `0..n` from two threads (even items by `try_send`, odd ones by
    /// `send_blocking`), pausing now and then, and closes.
    fn two_senders(tx: Sender<u64>, n: u64) -> Vec<std::thread::JoinHandle<()>> {
        (0..2u64)
            .map(|p| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for i in (p..n).step_by(2) {
                        if p == 0 {
                            let mut item = i;
                            while let Err(refused) = tx.try_send(item) {
                                assert!(refused.is_full(), "open while we send");
                                item = refused.into_inner();
                                std::thread::yield_now();
                            }
                        } else {
                            tx.send_blocking(i).expect("the sink reads");
                        }
                        if i % 10_000 < 2 {
                            // A pause: the waiter stops watching and sleeps, and the
                            // sends that follow are delivered on this thread until it
                            // is nudged back.
                            std::thread::sleep(Duration::from_millis(2));
                        }
                    }
                })
            })
            .collect()
    }

    /// Each sender's items in order, every item once.
    fn check_order(items: &[u64], n: u64, case: &str) {
        let mut next = [0u64, 1];
        for &item in items {
            let p = (item % 2) as usize;
            assert_eq!(item, next[p], "sender {p}'s items in order ({case})");
            next[p] += 2;
        }
        assert_eq!(items.len() as u64, n, "every item once ({case})");
    }

    #[test]
    fn a_waiter_gets_every_item_once_in_each_senders_order() {
        const N: u64 = 60_000;
        type Sink = fn(weir::source::Channel<u64>) -> SinkHandle<Vec<u64>>;
        let sinks: [(&str, Sink); 5] = [
            ("collect", |rx| rx.collect()),
            ("fold_with(1)", |rx| {
                rx.fold_with(1, Vec::new(), |mut v, x| {
                    v.push(x);
                    v
                })
            }),
            ("fold_with(UNBOUNDED)", |rx| {
                rx.fold_with(UNBOUNDED, Vec::new(), |mut v, x| {
                    v.push(x);
                    v
                })
            }),
            ("map.filter.collect_with(16)", |rx| {
                rx.map(|x| x + 1)
                    .filter(|_| true)
                    .map(|x| x - 1)
                    .collect_with(16)
            }),
            ("share(64).collect", |rx| rx.share(64).collect()),
        ];
        for (case, sink) in sinks {
            for capacity in [1usize, 256] {
                let (tx, rx) = weir::channel::<u64>(capacity, ChannelPolicy::Backpressure);
                let handle = sink(rx);
                let senders = two_senders(tx, N);
                let items = handle.wait().expect("the channel completes");
                check_order(&items, N, &format!("{case}, capacity {capacity}"));
                for sender in senders {
                    sender.join().unwrap();
                }
            }
        }
    }

    /// The sink's closure runs on the waiting thread while items keep coming (that is
    /// the point), and on the senders' threads before anyone waits. The sender goes
    /// on until an item ran on the waiting thread (bounded by `PATIENCE`), so a busy
    /// machine that keeps the waiter off the CPU for a while only makes it send more.
    #[test]
    fn a_waiter_takes_the_sinks_work_off_the_sender() {
        let (tx, rx) = weir::channel::<u64>(1_024, ChannelPolicy::Backpressure);
        let waiter = std::thread::current().id();
        let on_waiter = Arc::new(AtomicU64::new(0));
        let count = on_waiter.clone();
        let handle = rx.fold(0u64, move |n, _| {
            if std::thread::current().id() == waiter {
                count.fetch_add(1, Ordering::Relaxed);
            }
            n + 1
        });
        let seen = on_waiter.clone();
        let sender = std::thread::spawn(move || {
            let started = Instant::now();
            let mut sent = 0u64;
            while seen.load(Ordering::Relaxed) == 0 && started.elapsed() < PATIENCE {
                for _ in 0..1_000 {
                    tx.send_blocking(sent).expect("the sink reads");
                    sent += 1;
                }
            }
            sent
        });
        let taken = handle.wait().expect("completes");
        let sent = sender.join().unwrap();
        assert_eq!(taken, sent, "every item once");
        assert!(
            on_waiter.load(Ordering::Relaxed) > 0,
            "no item ran on the waiting thread in {PATIENCE:?} of sending"
        );
    }

    /// A `wait_timeout` that returns leaves no mark: the senders hand their items
    /// over themselves again at once (a mark left set would make them park the items
    /// in the lane for a watcher that is gone).
    #[test]
    fn a_waiter_that_times_out_leaves_no_mark() {
        let (tx, rx) = weir::channel::<u64>(1_024, ChannelPolicy::Backpressure);
        let seen = Arc::new(AtomicU64::new(0));
        let count = seen.clone();
        let mut handle = rx.for_each(move |_| {
            count.fetch_add(1, Ordering::Relaxed);
        });
        for round in 0..20u64 {
            // Items flowing while it waits (so it watches), then it times out.
            let sender = {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for i in 0..5_000 {
                        tx.send_blocking(i).expect("open");
                    }
                })
            };
            let started = Instant::now();
            while !sender.is_finished() {
                assert!(handle.wait_timeout(Duration::from_micros(200)).is_none());
                assert!(
                    started.elapsed() < PATIENCE,
                    "round {round}: the sender is stuck"
                );
            }
            sender.join().unwrap();
            // Nobody waits now: every send is delivered before it returns.
            for i in 0..10 {
                tx.try_send(i).expect("room");
            }
            assert_eq!(
                seen.load(Ordering::Relaxed),
                (round + 1) * 5_010,
                "round {round}: items left in the lane after the wait returned"
            );
        }
        drop(tx);
        assert!(handle.wait().is_ok());
    }

    /// A waiter over a quiet channel sleeps: over a window in which nothing is sent,
    /// its thread uses next to no CPU (the window's length only limits how strongly
    /// spinning is detected).
    #[test]
    fn a_waiter_sleeps_while_the_channel_is_quiet() {
        const WINDOW: Duration = Duration::from_millis(200);
        const MAX_BUSY: Duration = Duration::from_millis(20);
        let (tx, rx) = weir::channel::<u64>(64, ChannelPolicy::Backpressure);
        let (id_tx, id_rx) = mpsc::channel();
        let waiter = std::thread::spawn(move || {
            id_tx.send(current_thread_id()).unwrap();
            rx.collect().wait()
        });
        let id = id_rx.recv_timeout(PATIENCE).unwrap();
        for i in 0..10_000 {
            tx.send_blocking(i).expect("open");
        }
        std::thread::sleep(Duration::from_millis(20));
        let before = thread_cpu_nanos(&id);
        std::thread::sleep(WINDOW);
        let busy = Duration::from_nanos(thread_cpu_nanos(&id) - before);
        for i in 10_000..20_000 {
            tx.send_blocking(i).expect("open");
        }
        drop(tx);
        let items = waiter.join().unwrap().expect("completes");
        assert_eq!(items, (0..20_000).collect::<Vec<_>>());
        assert!(
            busy < MAX_BUSY,
            "the waiter ran {busy:?} during a quiet {WINDOW:?}: it spins"
        );
    }

    /// Behind a hub held back by a stalled sibling, a waiter that waits on (a
    /// millisecond at a time: each wait starts by watching) uses next to no CPU,
    /// and gets every item once the sibling goes on. (The case of items left in the
    /// lane with no demand to take them, where a waiter that kept pulling would
    /// spin, is the unit test `a_waiter_whose_pulls_deliver_nothing_sleeps_instead_
    /// of_pulling_on` of the sink handle: here the senders' items mostly go past
    /// the lane.)
    #[test]
    fn a_waiter_behind_a_hub_held_back_by_a_sibling_sleeps() {
        const N: u64 = 200;
        const WINDOW: Duration = Duration::from_millis(200);
        const MAX_BUSY: Duration = Duration::from_millis(40);
        let (tx, rx) = weir::channel::<u64>(1_024, ChannelPolicy::Backpressure);
        let hub = Hub::builder(rx, 16).connect_at(2).build();
        let stalled = TestSubscriber::<u64>::new();
        let sibling = stalled.probe();
        hub.clone().subscribe(stalled);
        let mut handle = hub.collect();
        let sender = std::thread::spawn(move || {
            for i in 0..N {
                tx.try_send(i).expect("room");
                std::thread::sleep(Duration::from_micros(100));
            }
            tx
        });
        let started = Instant::now();
        while !sender.is_finished() {
            assert!(started.elapsed() < PATIENCE, "the sender is stuck");
            assert!(handle.wait_timeout(Duration::from_millis(1)).is_none());
        }
        // The hub took its ring's 16 and stopped asking: wait on, a millisecond at
        // a time.
        let me = current_thread_id();
        let before = thread_cpu_nanos(&me);
        let window = Instant::now();
        while window.elapsed() < WINDOW {
            assert!(handle.wait_timeout(Duration::from_millis(1)).is_none());
        }
        let busy = Duration::from_nanos(thread_cpu_nanos(&me) - before);
        let tx = sender.join().unwrap();
        sibling.request(u64::MAX);
        drop(tx);
        let items = handle.wait().expect("completes");
        assert_eq!(items, (0..N).collect::<Vec<_>>());
        assert_eq!(sibling.received_count(), N);
        assert!(
            busy < MAX_BUSY,
            "the waiter ran {busy:?} of {WINDOW:?} while the hub was held back: it spins"
        );
    }

    /// A stage that panics in the drain loop the waiter runs: the wait returns the
    /// `Panicked` error, the senders see the channel closed.
    #[test]
    fn a_panic_in_a_stage_the_waiter_runs_ends_the_wait_with_its_error() {
        let (tx, rx) = weir::channel::<u64>(256, ChannelPolicy::Backpressure);
        let handle = rx
            .map(|x| {
                assert!(x != 50_000, "boom at 50,000");
                x
            })
            .fold(0u64, |n, _| n + 1);
        // The first item the channel refuses (closed by the panic).
        let sender =
            std::thread::spawn(move || (0..1_000_000u64).find(|&i| tx.send_blocking(i).is_err()));
        let error = handle.wait().expect_err("the map panicked");
        assert_eq!(error.kind(), ErrorKind::Panicked);
        let refused_at = sender.join().unwrap().expect("the channel closed");
        assert!(refused_at > 50_000, "closed after the panic: {refused_at}");
    }

    /// How an accounting case's stream ends.
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Ending {
        /// Every sender finishes and drops its sender.
        SendersDropped,
        /// A sender calls `close` while the others send.
        Close,
        /// A sender calls `fail` while the others send.
        Fail,
    }

    /// What one sender saw: the items the channel took (`Ok`), in sending order,
    /// and how many it refused (`Full` under `Reject`) or found closed.
    #[derive(Debug, Default)]
    struct Sent {
        accepted: Vec<u64>,
        refused: u64,
        closed: u64,
    }

    /// Items of sender `p` are `p * OFFSET + i`.
    const OFFSET: u64 = 1 << 32;

    /// Sender `p` of an accounting case: `try_send` (0), `send_blocking` (1) or
    /// `try_send_all` in steps of 1–37 (2), each sending `n` items or until the
    /// channel closes. Under `Backpressure` a `Full` is retried (after a yield);
    /// under any other policy it counts as refused. `sent` is raised after every
    /// `Ok`, for the ender to watch.
    fn accounting_sender(
        p: u64,
        tx: Sender<u64>,
        n: u64,
        policy: ChannelPolicy,
        sent: Arc<AtomicU64>,
    ) -> Sent {
        let mut out = Sent::default();
        let mut i = 0;
        while i < n {
            let item = p * OFFSET + i;
            if p == 2 {
                let step = 1 + (i * 7 + 3) % 37;
                let end = (i + step).min(n);
                match tx.try_send_all((i..end).map(|j| p * OFFSET + j)) {
                    Ok(taken) => {
                        assert_eq!(taken as u64, end - i, "all of an accepted step");
                        out.accepted.extend((i..end).map(|j| p * OFFSET + j));
                        sent.fetch_add(end - i, Ordering::Relaxed);
                        i = end;
                    }
                    Err(refused) => {
                        let taken = refused.sent as u64;
                        out.accepted.extend((i..i + taken).map(|j| p * OFFSET + j));
                        sent.fetch_add(taken, Ordering::Relaxed);
                        i += taken;
                        if refused.error.is_closed() {
                            out.closed += 1;
                            return out;
                        }
                        assert!(refused.error.is_full(), "only room or the end refuses");
                        if policy != ChannelPolicy::Backpressure {
                            out.refused += 1;
                            i += 1;
                        }
                        std::thread::yield_now();
                    }
                }
                continue;
            }
            let answer = if p == 0 {
                tx.try_send(item)
            } else {
                tx.send_blocking(item)
            };
            match answer {
                Ok(()) => {
                    out.accepted.push(item);
                    sent.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
                Err(e) if e.is_closed() => {
                    out.closed += 1;
                    return out;
                }
                Err(e) => {
                    assert!(e.is_full(), "only room or the end refuses: {e:?}");
                    if policy != ChannelPolicy::Backpressure {
                        out.refused += 1;
                        i += 1;
                    }
                    std::thread::yield_now();
                }
            }
            if i % 5_000 == 0 {
                // A pause: the waiter stops watching and sleeps; the next sends
                // are delivered on this thread until it watches again.
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        out
    }

    /// Every item a sender got `Ok` for reaches the waited-for sink or the drop
    /// hook (with the policy's reason), exactly once, each sender's delivered items
    /// in its order, under every policy, while the waiting thread runs the
    /// channel's drain loop (and sleeps, and is nudged back) and three senders race
    /// with every send method against a `close` or a `fail` from another thread.
    /// The sink is slow now and then, so that items queue and lossy policies drop.
    #[test]
    fn every_accepted_item_is_delivered_or_dropped_once_while_a_waiter_watches() {
        use std::sync::Mutex;
        use weir::metrics::{DropHook, Drops};
        use weir::source::channel::ChannelBuilder;
        use weir::DropReason;

        const N: u64 = 6_000;
        let policies = [
            (ChannelPolicy::Backpressure, None),
            (ChannelPolicy::Reject, None),
            (ChannelPolicy::DropOldest, Some(DropReason::OverflowOldest)),
            (ChannelPolicy::DropNewest, Some(DropReason::OverflowNewest)),
            (
                ChannelPolicy::KeepLatest,
                Some(DropReason::ReplacedByLatest),
            ),
        ];
        let endings = [Ending::SendersDropped, Ending::Close, Ending::Fail];
        for (policy, allowed) in policies {
            for ending in endings {
                for capacity in [1usize, 64] {
                    let case = format!("{policy:?}, {ending:?}, capacity {capacity}");
                    let dropped = Arc::new(Mutex::new(Vec::<(u64, DropReason)>::new()));
                    let hook = {
                        let dropped = dropped.clone();
                        DropHook::new(Drops::new()).inspect(move |d| {
                            let reason = d.reason();
                            let item = d.take::<u64>().expect("a u64 was dropped");
                            dropped.lock().unwrap().push((item, reason));
                        })
                    };
                    let (tx, rx) = ChannelBuilder::new(capacity, policy)
                        .drop_hook(hook)
                        .build::<u64>();
                    let delivered = Arc::new(Mutex::new(Vec::<u64>::new()));
                    let log = delivered.clone();
                    let mut handle = rx.for_each(move |x| {
                        if x % 997 == 0 {
                            std::thread::sleep(Duration::from_micros(200));
                        }
                        log.lock().unwrap().push(x);
                    });
                    let sent = Arc::new(AtomicU64::new(0));
                    let senders: Vec<_> = (0..3u64)
                        .map(|p| {
                            let (tx, sent) = (tx.clone(), sent.clone());
                            std::thread::spawn(move || accounting_sender(p, tx, N, policy, sent))
                        })
                        .collect();
                    if ending != Ending::SendersDropped {
                        let (closer, sent) = (tx.clone(), sent.clone());
                        std::thread::spawn(move || {
                            let started = Instant::now();
                            while sent.load(Ordering::Relaxed) < N && started.elapsed() < PATIENCE {
                                std::thread::yield_now();
                            }
                            match ending {
                                Ending::Close => closer.close(),
                                _ => {
                                    closer.fail(weir::Error::msg("failed by a sender"));
                                }
                            }
                        });
                    }
                    drop(tx);
                    let result = handle
                        .wait_timeout(PATIENCE)
                        .unwrap_or_else(|| panic!("the stream did not end ({case})"));
                    match ending {
                        Ending::Fail => assert_eq!(
                            result.expect_err("failed").message(),
                            "failed by a sender",
                            "{case}"
                        ),
                        _ => result.unwrap_or_else(|e| panic!("completes ({case}): {e}")),
                    }
                    let sent: Vec<Sent> = senders.into_iter().map(|s| s.join().unwrap()).collect();
                    let delivered = delivered.lock().unwrap().clone();
                    let dropped = dropped.lock().unwrap().clone();
                    for (item, reason) in &dropped {
                        assert_eq!(Some(*reason), allowed, "{case}: {item} dropped");
                    }
                    for (p, s) in sent.iter().enumerate() {
                        let p = p as u64;
                        if ending == Ending::SendersDropped {
                            assert_eq!(s.closed, 0, "{case}: sender {p} found it closed");
                        }
                        if policy == ChannelPolicy::Backpressure {
                            assert_eq!(s.refused, 0, "{case}: sender {p} refused");
                        }
                        let mine: Vec<u64> = delivered
                            .iter()
                            .copied()
                            .filter(|x| x / OFFSET == p)
                            .collect();
                        assert!(
                            mine.windows(2).all(|w| w[0] < w[1]),
                            "{case}: sender {p}'s items out of order or twice"
                        );
                        let mut accounted: Vec<u64> = mine;
                        accounted
                            .extend(dropped.iter().map(|&(x, _)| x).filter(|x| x / OFFSET == p));
                        accounted.sort_unstable();
                        assert_eq!(
                            accounted,
                            s.accepted,
                            "{case}: sender {p}'s accepted items against delivered + dropped \
                             ({} delivered, {} dropped, {} refused, {} accepted)",
                            delivered.len(),
                            dropped.len(),
                            s.refused,
                            s.accepted.len()
                        );
                    }
                }
            }
        }
    }
}

/// A waker that counts how many of its kind are alive.
struct CountedWaker(Arc<AtomicU64>);

impl std::task::Wake for CountedWaker {
    fn wake(self: Arc<Self>) {}
}

impl Drop for CountedWaker {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An awaited handle polled by one task after another keeps only the last poll's
/// waker (the future contract), and that one is woken at the end. It used to keep
/// every task's waker until the stream ended, and scan them all on each poll.
#[test]
fn an_awaited_handle_keeps_only_the_last_polls_waker() {
    use std::future::{Future, IntoFuture};
    use std::task::{Context, Poll, Waker};
    let (tx, rx) = weir::channel::<u32>(4, weir::source::channel::ChannelPolicy::Backpressure);
    let mut future = rx.collect().into_future();
    let alive = Arc::new(AtomicU64::new(0));
    for _ in 0..1_000 {
        alive.fetch_add(1, Ordering::SeqCst);
        let waker = Waker::from(Arc::new(CountedWaker(alive.clone())));
        let polled = std::pin::Pin::new(&mut future).poll(&mut Context::from_waker(&waker));
        assert!(polled.is_pending());
        drop(waker);
        assert!(
            alive.load(Ordering::SeqCst) <= 1,
            "one waker kept, not every task's"
        );
    }
    tx.try_send(7).expect("room");
    drop(tx);
    let waker = Waker::from(Arc::new(CountedWaker(alive.clone())));
    alive.fetch_add(1, Ordering::SeqCst);
    assert!(matches!(
        std::pin::Pin::new(&mut future).poll(&mut Context::from_waker(&waker)),
        Poll::Ready(Ok(items)) if items == [7]
    ));
}
