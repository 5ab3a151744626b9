//! Behaviour tests of the sources (`src/source`): the contract of each (`range` over
//! every integer type, `from_iter`, `just`, `empty`, `error`, `never`, `generate`
//! with `Step::Last`, `from_fn`, `unfold`, `defer`), cold re-subscription, `request(0)`, and random demand schedules from the
//! conformance kit.

#[path = "support/mod.rs"]
pub mod support;

use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use proptest::prelude::*;
use weir::demand::UNBOUNDED;
use weir::prelude::*;
use weir::source::{RangeInt, Step};
use weir::tck::proptest::{check_publisher, demand_schedule, DemandAction};
use weir::tck::{TestProbe, TestSubscriber};
use weir::{Error, ErrorKind};

use support::counting::counting_generator;
use support::shape;

/// Subscribe a zero-demand test subscriber and return its probe.
fn probe_of<P: Publisher>(publisher: P) -> TestProbe<P::Item> {
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    publisher.subscribe(subscriber);
    probe
}

// ---- range --------------------------------------------------------------------

/// `weir::range(r)` must emit exactly what `r` iterates, under demand 1, 2, then
/// unbounded, completing as soon as the last item went out.
fn check_range<T>(r: std::ops::Range<T>)
where
    T: RangeInt + Debug + PartialEq,
    std::ops::Range<T>: Iterator<Item = T>,
{
    let expected: Vec<T> = r.clone().collect();
    let len = expected.len();
    let probe = probe_of(weir::range(r.clone()));
    if len == 0 {
        assert_eq!(shape(&probe), "SC", "{r:?}: empty completes without demand");
        return;
    }
    probe.assert_items(&[]);
    let mut requested = 0usize;
    for k in [1u64, 2, UNBOUNDED] {
        probe.request(k);
        requested = requested.saturating_add(k as usize);
        let seen = requested.min(len);
        probe.assert_items(&expected[..seen]);
        assert_eq!(
            probe.is_completed(),
            seen == len,
            "{r:?}: completes exactly when the last item went out"
        );
    }
    probe.assert_completed();
}

#[test]
fn range_over_every_integer_type() {
    check_range(0u8..10);
    check_range(0u8..u8::MAX);
    check_range(250u8..u8::MAX);
    check_range(0u16..u16::MAX);
    check_range(u16::MAX - 3..u16::MAX);
    check_range(7u32..12);
    check_range(u32::MAX - 3..u32::MAX);
    check_range(3u64..9);
    check_range(u64::MAX - 3..u64::MAX);
    check_range(usize::MAX - 2..usize::MAX);
    check_range(i8::MIN..i8::MAX);
    check_range(-3i8..3);
    check_range(i8::MAX - 2..i8::MAX);
    check_range(i16::MIN..i16::MIN + 3);
    check_range(-2i32..2);
    check_range(i32::MAX - 2..i32::MAX);
    check_range(i64::MIN..i64::MIN + 3);
    check_range(i64::MAX - 3..i64::MAX);
    check_range(isize::MIN..isize::MIN + 2);
}

#[test]
fn range_empty_and_single_element() {
    check_range(5u32..5);
    check_range(0u8..0);
    check_range(u64::MAX..u64::MAX);
    check_range(i64::MIN..i64::MIN);
    // A reversed range is empty, as in std.
    check_range(std::ops::Range {
        start: 9i16,
        end: -9,
    });
    check_range(std::ops::Range {
        start: u8::MAX,
        end: 0,
    });

    check_range(9u64..10);
    check_range(u8::MAX - 1..u8::MAX);
    check_range(u64::MAX - 1..u64::MAX);
    check_range(i64::MAX - 1..i64::MAX);
    check_range(i8::MIN..i8::MIN + 1);
    check_range(-1isize..0);
}

#[test]
fn range_spanning_a_whole_type() {
    // The distance of these ranges is u64::MAX or close: counting must not overflow.
    let out = weir::range(i64::MIN..i64::MAX)
        .take(3)
        .collect()
        .wait()
        .unwrap();
    assert_eq!(out, vec![i64::MIN, i64::MIN + 1, i64::MIN + 2]);
    let out = weir::range(0u64..u64::MAX)
        .take(2)
        .collect()
        .wait()
        .unwrap();
    assert_eq!(out, vec![0, 1]);
    let out = weir::range(isize::MIN..isize::MAX)
        .take(1)
        .collect()
        .wait()
        .unwrap();
    assert_eq!(out, vec![isize::MIN]);
    // Unbounded demand on a long range delivers it all, in order.
    let sum = weir::range(i32::MIN..i32::MIN + 100_000)
        .fold_with(UNBOUNDED, 0i64, |acc, x| acc + i64::from(x))
        .wait()
        .unwrap();
    assert_eq!(
        sum,
        (i32::MIN..i32::MIN + 100_000).map(i64::from).sum::<i64>()
    );
}

// ---- from_iter, just, empty, error, never ----------------------------------------

#[test]
fn from_iter_completes_eagerly_when_exhausted() {
    let probe = probe_of(weir::from_iter(vec!['a', 'b', 'c']));
    probe.request(3);
    // Exactly the three items were requested, and completion did not need a 4th.
    assert_eq!(shape(&probe), "SNNNC");
    assert_eq!(probe.requested(), 3);
    probe.assert_items(&['a', 'b', 'c']);

    // An empty iterator completes without any demand.
    let probe = probe_of(weir::from_iter(Vec::<u8>::new()));
    assert_eq!(shape(&probe), "SC");
}

#[test]
fn from_iter_looks_ahead_by_at_most_one_item() {
    let calls = Arc::new(AtomicU64::new(0));
    let counter = calls.clone();
    let mut next = 0u32;
    let iter = std::iter::from_fn(move || {
        counter.fetch_add(1, Ordering::SeqCst);
        next += 1;
        (next <= 5).then_some(next)
    });
    let probe = probe_of(weir::from_iter(iter));
    let calls = move || calls.load(Ordering::SeqCst);
    assert!(calls() <= 1, "{} calls before any demand", calls());
    for (k, total) in [(1u64, 1u64), (2, 3), (1, 4)] {
        probe.request(k);
        assert_eq!(probe.received_count(), total);
        assert!(
            calls() <= total + 1,
            "{} calls of next for {total} delivered items",
            calls()
        );
    }
    probe.assert_no_terminal();
    // The 5th item is the last: the look-ahead sees the end and completes at once.
    probe.request(1);
    assert_eq!(shape(&probe), "SNNNNNC");
    assert_eq!(calls(), 6, "five items and the end");
}

#[test]
fn from_iter_panic_becomes_panicked_error() {
    let iter = (0u32..10).inspect(|&x| {
        if x == 4 {
            panic!("iterator boom");
        }
    });
    let probe = probe_of(weir::from_iter(iter));
    probe.request(10);
    probe.assert_items(&[0, 1, 2, 3]);
    let error = probe.assert_error();
    assert_eq!(
        (error.kind(), error.message()),
        (ErrorKind::Panicked, "iterator boom")
    );
}

#[test]
fn just_waits_for_demand_then_completes() {
    let probe = probe_of(weir::just("only"));
    assert_eq!(shape(&probe), "S", "no item without demand");
    probe.request(1);
    assert_eq!(shape(&probe), "SNC");
    probe.assert_items(&["only"]);
    probe.request(5);
    assert_eq!(shape(&probe), "SNC");
}

#[test]
fn empty_completes_without_demand() {
    let probe = probe_of(weir::empty::<String>());
    assert_eq!(shape(&probe), "SC");
    probe.request(3);
    assert_eq!(shape(&probe), "SC");
}

#[test]
fn error_fails_without_demand_with_the_same_error() {
    let boom = Error::msg("disk on fire");
    let publisher = weir::error::<u64>(boom.clone());
    for _ in 0..2 {
        let probe = probe_of(publisher.clone());
        assert_eq!(shape(&probe), "SE");
        let error = probe.assert_error();
        assert!(
            Error::ptr_eq(&error, &boom),
            "each subscriber gets the same error"
        );
        assert_eq!(error.kind(), ErrorKind::Upstream);
        probe.request(1);
        probe.request(0);
        assert_eq!(shape(&probe), "SE", "nothing after the error");
    }
}

/// Wraps a subscriber and raises a flag when it is dropped.
struct DropFlag<S> {
    inner: S,
    dropped: Arc<AtomicBool>,
}

impl<S> Drop for DropFlag<S> {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

impl<T, S: Subscriber<T>> Subscriber<T> for DropFlag<S> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        self.inner.on_subscribe(subscription)
    }
    fn on_next(&mut self, item: T) {
        self.inner.on_next(item)
    }
    fn on_error(&mut self, error: Error) {
        self.inner.on_error(error)
    }
    fn on_complete(&mut self) {
        self.inner.on_complete()
    }
}

#[test]
fn never_signals_nothing_and_drops_its_subscriber_on_cancel() {
    let subscriber = TestSubscriber::<u64>::new();
    let probe = subscriber.probe();
    let dropped = Arc::new(AtomicBool::new(false));
    weir::never().subscribe(DropFlag {
        inner: subscriber,
        dropped: dropped.clone(),
    });
    probe.request(1);
    probe.request(UNBOUNDED);
    assert_eq!(shape(&probe), "S", "never signals nothing but on_subscribe");
    assert!(!dropped.load(Ordering::SeqCst));
    probe.cancel();
    assert!(
        dropped.load(Ordering::SeqCst),
        "cancel drops the subscriber (rule 3.13)"
    );
    assert_eq!(shape(&probe), "S");
}

// ---- generate -------------------------------------------------------------------

#[test]
fn generate_calls_its_closure_once_per_delivered_item() {
    let (source, calls) = counting_generator(5);
    let calls = move || calls.load(Ordering::SeqCst);
    let probe = probe_of(source);
    assert_eq!(calls(), 0, "not called without demand");
    probe.request(2);
    assert_eq!((probe.received_count(), calls()), (2, 2));
    probe.request(2);
    assert_eq!((probe.received_count(), calls()), (4, 4));
    probe.request(1);
    assert_eq!((probe.received_count(), calls()), (5, 5));
    // The generator has not been asked whether a 6th item exists.
    probe.assert_no_terminal();
    probe.request(1);
    assert_eq!(calls(), 6);
    assert_eq!(shape(&probe), "SNNNNNC");
    probe.assert_items(&[0, 1, 2, 3, 4]);
    probe.request(10);
    assert_eq!(calls(), 6, "never called after the end");
}

#[test]
fn generate_step_last_emits_and_completes_in_one_call() {
    let calls = Arc::new(AtomicU64::new(0));
    let counter = calls.clone();
    let source = weir::generate(0u32, move |n| {
        counter.fetch_add(1, Ordering::SeqCst);
        *n += 1;
        if *n == 3 {
            Step::Last(*n)
        } else {
            Step::Next(*n)
        }
    });
    let probe = probe_of(source);
    probe.request(2);
    assert_eq!(shape(&probe), "SNN");
    // The last item completes with it: no extra call, no extra demand needed.
    probe.request(1);
    assert_eq!(shape(&probe), "SNNNC");
    probe.assert_items(&[1, 2, 3]);
    probe.request(5);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3,
        "never called after the last"
    );
}

#[test]
fn from_fn_is_called_once_per_request_until_none() {
    let calls = Arc::new(AtomicU64::new(0));
    let counter = calls.clone();
    let source = weir::from_fn(move || {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        (n < 3).then_some(n * 10)
    });
    let probe = probe_of(source);
    assert_eq!(calls.load(Ordering::SeqCst), 0, "not called without demand");
    probe.request(2);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    probe.request(5);
    assert_eq!(shape(&probe), "SNNNC");
    probe.assert_items(&[0, 10, 20]);
    assert_eq!(calls.load(Ordering::SeqCst), 4, "None ended it");
}

#[test]
fn unfold_threads_its_state_and_a_panic_fails_the_stream() {
    let probe = probe_of(weir::unfold((0u64, 1u64), |(a, b)| {
        (a < 20).then_some((a, (b, a + b)))
    }));
    probe.request(UNBOUNDED);
    probe.assert_items(&[0, 1, 1, 2, 3, 5, 8, 13]);
    probe.assert_completed();

    let probe = probe_of(weir::unfold(0u32, |n| {
        assert!(n < 2, "unfold blew up at {n}");
        Some((n, n + 1))
    }));
    probe.request(10);
    assert_eq!(shape(&probe), "SNNE");
    assert_eq!(probe.assert_error().kind(), ErrorKind::Panicked);
}

#[test]
fn generate_step_error_ends_with_that_error() {
    let boom = Error::msg("generator failed");
    let failure = boom.clone();
    let calls = Arc::new(AtomicU64::new(0));
    let counter = calls.clone();
    let source = weir::generate(0u32, move |n| {
        counter.fetch_add(1, Ordering::SeqCst);
        *n += 1;
        if *n == 3 {
            Step::Error(failure.clone())
        } else {
            Step::Next(*n)
        }
    });
    let probe = probe_of(source);
    probe.request(10);
    assert_eq!(shape(&probe), "SNNE");
    probe.assert_items(&[1, 2]);
    assert!(Error::ptr_eq(&probe.assert_error(), &boom));
    probe.request(10);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3,
        "never called after the error"
    );
    assert_eq!(shape(&probe), "SNNE");
}

#[test]
fn generate_panic_becomes_panicked_error() {
    let source = weir::generate(0u32, |n| {
        *n += 1;
        if *n == 2 {
            panic!("generator boom");
        }
        Step::Next(*n)
    });
    let probe = probe_of(source);
    probe.request(5);
    assert_eq!(shape(&probe), "SNE");
    let error = probe.assert_error();
    assert_eq!(
        (error.kind(), error.message()),
        (ErrorKind::Panicked, "generator boom")
    );
}

// ---- defer ----------------------------------------------------------------------

#[test]
fn defer_calls_the_factory_once_per_subscription() {
    let made = Arc::new(AtomicU64::new(0));
    let counter = made.clone();
    let deferred = weir::defer(move || {
        counter.fetch_add(1, Ordering::SeqCst);
        weir::range(0u32..3)
    });
    assert_eq!(
        made.load(Ordering::SeqCst),
        0,
        "not called before subscribe"
    );

    let first = probe_of(deferred.clone());
    assert_eq!(made.load(Ordering::SeqCst), 1);
    first.request(1);
    first.assert_items(&[0]);

    // A clone subscribes independently, from the start.
    let second = probe_of(deferred);
    assert_eq!(made.load(Ordering::SeqCst), 2);
    second.request(10);
    second.assert_items(&[0, 1, 2]);
    second.assert_completed();

    first.request(10);
    first.assert_items(&[0, 1, 2]);
    first.assert_completed();
    assert_eq!(made.load(Ordering::SeqCst), 2);
}

#[test]
fn defer_factory_panic_becomes_panicked_error() {
    let probe = probe_of(weir::defer(|| -> weir::source::Range<u8> {
        panic!("factory boom")
    }));
    assert_eq!(
        shape(&probe),
        "SE",
        "on_subscribe, then the error, without demand"
    );
    let error = probe.assert_error();
    assert_eq!(
        (error.kind(), error.message()),
        (ErrorKind::Panicked, "factory boom")
    );
}

// ---- every source -----------------------------------------------------------------

/// A clone of a cold publisher starts from the beginning, whatever another clone
/// has consumed.
fn resubscribes_from_the_start<P>(publisher: P, expected: &[P::Item])
where
    P: Publisher + Clone,
    P::Item: Clone + PartialEq + Debug,
{
    let first = probe_of(publisher.clone());
    first.request(1);
    first.assert_items(&expected[..1]);
    let second = probe_of(publisher.clone());
    second.request(UNBOUNDED);
    second.assert_items(expected);
    second.assert_completed();
    first.request(UNBOUNDED);
    first.assert_items(expected);
    first.assert_completed();
    let third = probe_of(publisher);
    third.request(UNBOUNDED);
    third.assert_items(expected);
}

#[test]
fn cold_publishers_resubscribe_from_the_start() {
    resubscribes_from_the_start(weir::range(10u16..14), &[10, 11, 12, 13]);
    resubscribes_from_the_start(weir::from_iter(vec!["x", "y"]), &["x", "y"]);
    resubscribes_from_the_start(weir::just(5i8), &[5]);
    resubscribes_from_the_start(counting_generator(3).0, &[0, 1, 2]);
    resubscribes_from_the_start(weir::defer(|| weir::range(0u8..2)), &[0, 1]);
    resubscribes_from_the_start(weir::range(0u32..4).map(|x| x * x), &[0, 1, 4, 9]);
}

/// `request(0)` before the stream ended: on_error naming rule 3.9, then nothing.
fn request_zero_fails<P>(publisher: P, items_first: u64)
where
    P: Publisher,
    P::Item: Clone,
{
    let probe = probe_of(publisher);
    if items_first > 0 {
        probe.request(items_first);
    }
    let before = probe.received_count();
    probe.assert_no_terminal();
    probe.request(0);
    probe.assert_error_rule("3.9");
    assert!(probe.assert_error().to_string().contains("3.9"));
    probe.request(5);
    assert_eq!(
        probe.received_count(),
        before,
        "nothing after the 3.9 error"
    );
    assert_eq!(probe.signal_count() as u64, before + 2);
}

#[test]
fn request_zero_signals_rule_3_9_on_every_source() {
    request_zero_fails(weir::range(0u32..10), 0);
    request_zero_fails(weir::range(0u32..10), 2);
    request_zero_fails(weir::range(i64::MIN..0), 3);
    request_zero_fails(weir::from_iter(vec![1, 2, 3]), 0);
    request_zero_fails(weir::from_iter(vec![1, 2, 3]), 1);
    request_zero_fails(weir::just(1), 0);
    request_zero_fails(counting_generator(u64::MAX).0, 0);
    request_zero_fails(counting_generator(u64::MAX).0, 4);
    request_zero_fails(weir::defer(|| weir::range(0u8..9)), 0);
    request_zero_fails(weir::defer(|| weir::range(0u8..9)), 2);
    request_zero_fails(weir::never::<()>(), 0);

    // Sources that have already terminated ignore it: no second terminal signal.
    let probe = probe_of(weir::empty::<u8>());
    probe.request(0);
    assert_eq!(shape(&probe), "SC");
    let probe = probe_of(weir::error::<u8>(Error::msg("x")));
    probe.request(0);
    assert_eq!(shape(&probe), "SE");
    let probe = probe_of(weir::just(1));
    probe.request(1);
    probe.request(0);
    assert_eq!(shape(&probe), "SNC");
}

// ---- random demand schedules (the conformance kit) ---------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn range_obeys_any_schedule(n in 0u64..40, schedule in demand_schedule()) {
        check_publisher(|n| weir::range(0..n), n, &schedule)?;
        check_publisher(|n| weir::range(-20i16..-20 + n as i16), n, &schedule)?;
        check_publisher(|n| weir::range(u64::MAX - n..u64::MAX), n, &schedule)?;
    }

    #[test]
    fn from_iter_obeys_any_schedule(n in 0u64..40, schedule in demand_schedule()) {
        check_publisher(|n| weir::from_iter((0..n).collect::<Vec<_>>()), n, &schedule)?;
    }

    #[test]
    fn just_and_empty_obey_any_schedule(n in 0u64..=1, schedule in demand_schedule()) {
        check_publisher(|n| if n == 0 { weir::empty() } else { weir::just(7u8) }, n, &schedule)?;
    }

    /// `generate` completes only when its closure says so, which needs demand beyond
    /// the last item (no look-ahead); the kit expects completion at exactly `n`, so
    /// the generator runs endless here and `take(n)` ends it. (Its own completion is
    /// checked by `generate_never_runs_ahead_of_demand`.)
    #[test]
    fn generate_obeys_any_schedule(n in 0u64..40, schedule in demand_schedule()) {
        check_publisher(|n| counting_generator(u64::MAX).0.take(n), n, &schedule)?;
    }

    #[test]
    fn defer_obeys_any_schedule(n in 0u64..40, schedule in demand_schedule()) {
        check_publisher(|n| weir::defer(move || weir::range(0..n)), n, &schedule)?;
    }

    /// `never` and `error` ignore demand: never nothing but a 3.9 error answering a
    /// `request(0)` made before any cancel; error always just its error.
    #[test]
    fn never_and_error_ignore_any_schedule(schedule in demand_schedule()) {
        let actions: Vec<DemandAction> = schedule.threads.iter().flatten().copied().collect();
        let zero_before_cancel = actions
            .iter()
            .take_while(|a| **a != DemandAction::Cancel)
            .any(|a| *a == DemandAction::Request(0));

        let probe = probe_of(weir::never::<u32>());
        apply(&probe, &actions);
        probe.assert_no_violations();
        prop_assert_eq!(probe.received_count(), 0);
        if zero_before_cancel {
            prop_assert_eq!(shape(&probe), "SE");
            prop_assert_eq!(probe.assert_error().rule(), Some("3.9"));
        } else {
            prop_assert_eq!(shape(&probe), "S");
        }

        let boom = Error::msg("always");
        let probe = probe_of(weir::error::<u32>(boom.clone()));
        apply(&probe, &actions);
        prop_assert_eq!(shape(&probe), "SE");
        prop_assert!(Error::ptr_eq(&probe.assert_error(), &boom));
    }

    /// `generate` calls its closure once per delivered item, plus once for the end:
    /// never ahead of demand, under any sequence of requests.
    #[test]
    fn generate_never_runs_ahead_of_demand(
        len in 0u64..30,
        requests in prop::collection::vec(
            prop_oneof![4 => 1u64..=5, 1 => Just(UNBOUNDED)],
            0..6,
        ),
    ) {
        let (source, calls) = counting_generator(len);
        let probe = probe_of(source);
        prop_assert_eq!(calls.load(Ordering::SeqCst), 0);
        let mut requested = 0u64;
        for k in requests {
            probe.request(k);
            requested = requested.saturating_add(k);
            let received = probe.received_count();
            prop_assert_eq!(received, requested.min(len));
            let ended = u64::from(probe.is_terminated());
            prop_assert_eq!(calls.load(Ordering::SeqCst), received + ended);
            prop_assert_eq!(probe.is_completed(), requested > len);
        }
        probe.assert_no_violations();
    }
}

/// Apply a kit schedule's actions in order on the test thread.
fn apply<T>(probe: &TestProbe<T>, actions: &[DemandAction]) {
    for action in actions {
        match *action {
            DemandAction::Request(k) => probe.request(k),
            DemandAction::Cancel => probe.cancel(),
        }
    }
}

/// A generator's closure "runs exactly once per item delivered": also when a fused
/// stage's closure panics on an item, the source is pulled no further (it was pulled
/// for the whole window, 1,000 calls, the items dropped unseen: a queue behind
/// `from_fn` lost them all). Fused (`collect_with`) and subscribed (`boxed`) alike.
#[test]
fn a_panic_in_a_stages_closure_stops_pulling_the_generator() {
    type Stage = fn(weir::BoxPublisher<u64>) -> weir::BoxPublisher<u64>;
    fn boom(x: u64) {
        assert!(x != 0, "deliberate: the stage's closure panics");
    }
    let stages: [(&str, Stage); 5] = [
        ("map", |s| {
            s.map(|x| {
                boom(x);
                x
            })
            .boxed()
        }),
        ("filter", |s| {
            s.filter(|x| {
                boom(*x);
                true
            })
            .boxed()
        }),
        ("filter_map", |s| {
            s.filter_map(|x| {
                boom(x);
                Some(x)
            })
            .boxed()
        }),
        ("inspect", |s| s.inspect(|x| boom(*x)).boxed()),
        ("skip_while", |s| {
            s.skip_while(|x| {
                boom(*x);
                false
            })
            .boxed()
        }),
    ];
    for (name, stage) in stages {
        for fused in [true, false] {
            let calls = Arc::new(AtomicU64::new(0));
            let counter = calls.clone();
            let source = weir::from_fn(move || Some(counter.fetch_add(1, Ordering::SeqCst)));
            let result = if fused {
                // A fused chain: the stage straight into the sink.
                match name {
                    "map" => source
                        .map(|x| {
                            boom(x);
                            x
                        })
                        .collect_with(1_000)
                        .wait(),
                    _ => stage(source.boxed()).collect_with(1_000).wait(),
                }
            } else {
                stage(source.boxed()).boxed().collect_with(1_000).wait()
            };
            let error = result.expect_err("the closure panicked");
            assert_eq!(error.stage(), Some(name), "{name} (fused {fused})");
            assert_eq!(
                calls.load(Ordering::SeqCst),
                1,
                "{name} (fused {fused}): the generator ran for items nobody saw"
            );
        }
    }
}
