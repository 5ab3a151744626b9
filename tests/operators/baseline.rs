//! The baseline checks every operator file runs (`docs/contributing.md`, "Tests"),
//! written once, in the
//! spirit of Reactor's `FluxOperatorTest` scenarios.
//!
//! Each function builds its sources, applies the operator (a closure over the source,
//! passed by the operator's file), subscribes a zero-demand `TestSubscriber` and makes
//! the generic assertions. The caller passes only what is specific to its operator:
//! the items that must arrive, what upstream must have been asked for, how often its
//! closure runs. The proptest model check is `support::model::check_model`; for the
//! operators that interleave several sources it is [`check_interleaved`].
//!
//! Closures that take a [`Spy`] must call [`Spy::call`] once for every item they are
//! given, first thing: the spy counts the calls and panics where a check asks it to.

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use weir::metrics::{DropHook, Drops};
use weir::prelude::*;
use weir::source::Fail;
use weir::tck::{TestProbe, TestSubscriber};
use weir::{DropReason, Error, ErrorKind};

use crate::support::counting::{
    counted, counted_with, counting_generator, Counted, CountingGenerator, Delivery, Stats,
};
use crate::support::failing::{fails_after, FailsAfter};
use crate::support::late::{late, Late, Live};
use crate::support::model::{Action, Run, Schedule};
use crate::support::unruly::Unruly;
use crate::support::valve::{valve, ValveHandle, ValveSource};
use crate::support::{probe_of, shape, PATIENCE};

/// The shape (see [`shape`]) of `on_subscribe`, `items` items, then `end` (`'C'` or
/// `'E'`).
fn ended(items: usize, end: char) -> String {
    format!("S{}{end}", "N".repeat(items))
}

/// `smoke`: collecting `publisher` with the default sink yields exactly `expected`.
pub fn smoke<P, E>(publisher: P, expected: &[E])
where
    P: Publisher,
    P::Item: PartialEq<E> + Debug,
    E: Debug,
{
    assert_eq!(publisher.collect().wait().unwrap(), expected);
}

/// One step of [`respects_demand`]: a `request`, and what must hold once it returns.
#[derive(Debug)]
pub struct Demand<'a, U> {
    request: u64,
    items: &'a [U],
    upstream: (u64, u64),
    log: Option<&'a [u64]>,
    completed: bool,
}

/// `request(n)`, after which exactly `items` have arrived in all, upstream has been
/// asked for `requested` items in total and has delivered `delivered`, and the stream
/// has not terminated.
pub fn request<U>(n: u64, items: &[U], (requested, delivered): (u64, u64)) -> Demand<'_, U> {
    Demand {
        request: n,
        items,
        upstream: (requested, delivered),
        log: None,
        completed: false,
    }
}

impl<'a, U> Demand<'a, U> {
    /// Also: every request upstream so far, in order, was exactly `log`.
    pub fn log(self, log: &'a [u64]) -> Self {
        Demand {
            log: Some(log),
            ..self
        }
    }

    /// The stream has completed after this step (instead of not having terminated).
    pub fn completes(self) -> Self {
        Demand {
            completed: true,
            ..self
        }
    }
}

/// `respects_demand`: `op(counted(source))` under a subscriber that starts at zero
/// demand. Before any request nothing arrives and nothing is asked of upstream; after
/// each of `steps`, exactly what it says arrived, upstream was asked and delivered
/// exactly what it says, and never more than it was asked for. Returns the probe, for
/// the checks that go on from there.
pub fn respects_demand<S, P>(
    source: S,
    op: impl FnOnce(Counted<S>) -> P,
    steps: &[Demand<'_, P::Item>],
) -> TestProbe<P::Item>
where
    S: Publisher,
    P: Publisher,
    P::Item: Clone + PartialEq + Debug,
{
    let (source, stats) = counted(source);
    let probe = probe_of(op(source));
    probe.assert_items(&[]);
    probe.assert_no_terminal();
    assert_eq!(
        (stats.request_calls(), stats.delivered()),
        (0, 0),
        "nothing asked of upstream at zero demand"
    );
    for (i, step) in steps.iter().enumerate() {
        probe.request(step.request);
        probe.assert_items(step.items);
        assert_eq!(
            (stats.requested(), stats.delivered()),
            step.upstream,
            "step {i}: (requested, delivered) upstream"
        );
        if let Some(log) = step.log {
            assert_eq!(stats.request_log(), log, "step {i}: the upstream requests");
        }
        if step.completed {
            probe.assert_completed();
        } else {
            probe.assert_no_terminal();
        }
        assert!(!stats.over_delivered(), "step {i}: upstream over-delivered");
    }
    probe
}

/// `cancel_stops_upstream`: `op` over an endless counted [`counting_generator`].
/// `request(items.len())` brings exactly `items`, for which the generator was called
/// `pulled` times; after `cancel` (which must reach upstream once) further requests
/// bring nothing, no terminal signal, and no further call of the generator.
pub fn cancel_stops_upstream<P>(
    op: impl FnOnce(Counted<CountingGenerator>) -> P,
    items: &[P::Item],
    pulled: u64,
) where
    P: Publisher,
    P::Item: Clone + PartialEq + Debug,
{
    let (generator, calls) = counting_generator(u64::MAX);
    let (source, stats) = counted(generator);
    let probe = probe_of(op(source));

    probe.request(items.len() as u64);
    probe.assert_items(items);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        pulled,
        "pulled exactly up to the last item and no further"
    );

    probe.cancel();
    assert_eq!(stats.cancels(), 1, "cancel reaches upstream");
    probe.request(10);
    probe.assert_items(items);
    probe.assert_no_terminal();
    assert_eq!(
        calls.load(Ordering::SeqCst),
        pulled,
        "upstream not pulled after cancel"
    );
    assert_eq!(stats.delivered(), pulled);
}

/// Counts the calls of an operator's closure, and panics at a chosen item. Clones
/// share the count.
#[derive(Clone, Debug, Default)]
pub struct Spy {
    calls: Arc<AtomicU64>,
    panic_at: Option<u64>,
}

impl Spy {
    /// A spy that panics with `boom at {item}` when it is called with `item`.
    fn panicking_at(item: u64) -> Self {
        Spy {
            panic_at: Some(item),
            ..Spy::default()
        }
    }

    /// Record a call of the closure with `item`; panic if it is the chosen one.
    pub fn call(&self, item: u64) {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.panic_at == Some(item) {
            panic!("boom at {item}");
        }
    }

    /// How many times the closure was called.
    fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }
}

/// The failing sources of [`error_propagates_once`], as one type so that one closure
/// can apply the operator to each.
#[derive(Debug)]
pub enum Faulty {
    /// A well-behaved source that fails after some items.
    After(FailsAfter),
    /// `weir::error`: fails at once, without demand.
    Now(Fail<u64>),
    /// [`Unruly`]: two errors, a completion and an item.
    Unruly(Unruly),
}

impl Publisher for Faulty {
    type Item = u64;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<u64> + Send + 'static,
    {
        match self {
            Faulty::After(source) => source.subscribe(subscriber),
            Faulty::Now(source) => source.subscribe(subscriber),
            Faulty::Unruly(source) => source.subscribe(subscriber),
        }
    }
}

/// `error_propagates_once`, over three sources:
///
/// * one that emits `1..=sent` and then fails: under a request of 10, exactly `items`
///   arrive, then that very error, and nothing after it whatever is requested; the
///   operator's closure ran `calls` times;
/// * `weir::error`: the error arrives without any demand;
/// * [`Unruly`]: only its first error passes, and no protocol violation;
///
/// and the closure never runs for the last two.
pub fn error_propagates_once<P>(
    op: impl Fn(Faulty, Spy) -> P,
    sent: u64,
    items: &[P::Item],
    calls: u64,
) where
    P: Publisher,
    P::Item: Clone + PartialEq + Debug,
{
    let boom = Error::msg("source failed");
    let spy = Spy::default();

    let probe = probe_of(op(
        Faulty::After(fails_after(sent, boom.clone())),
        spy.clone(),
    ));
    probe.request(10);
    probe.assert_items(items);
    assert!(
        Error::ptr_eq(&probe.assert_error(), &boom),
        "the same error"
    );
    assert_eq!(shape(&probe), ended(items.len(), 'E'));
    assert_eq!(
        spy.calls(),
        calls,
        "the closure runs once per item it is given"
    );
    probe.request(5);
    assert_eq!(
        shape(&probe),
        ended(items.len(), 'E'),
        "nothing after the error"
    );

    // An error needs no demand, and the closure never runs.
    let probe = probe_of(op(Faulty::Now(weir::error(boom.clone())), spy.clone()));
    assert_eq!(shape(&probe), "SE");
    assert!(Error::ptr_eq(&probe.assert_error(), &boom));

    // An upstream that keeps signalling after its error: only the first error passes.
    let probe = probe_of(op(Faulty::Unruly(Unruly::new(boom.clone())), spy.clone()));
    assert_eq!(shape(&probe), "SE");
    assert!(Error::ptr_eq(&probe.assert_error(), &boom));
    probe.assert_no_violations();

    assert_eq!(spy.calls(), calls, "the closure ran after an error");
}

/// `completes`: `op(counted(source))`, given `request` (0: none at all), brings exactly
/// `items` and then `on_complete`, and nothing else. Returns what upstream saw.
pub fn completes<S, P>(
    source: S,
    op: impl FnOnce(Counted<S>) -> P,
    request: u64,
    items: &[P::Item],
) -> Arc<Stats>
where
    S: Publisher,
    P: Publisher,
    P::Item: Clone + PartialEq + Debug,
{
    let (source, stats) = counted(source);
    let probe = probe_of(op(source));
    if request > 0 {
        probe.request(request);
    }
    probe.assert_items(items);
    probe.assert_completed();
    assert_eq!(shape(&probe), ended(items.len(), 'C'));
    assert!(!stats.over_delivered());
    stats
}

/// A panic in the operator's closure, over an endless [`counting_generator`] seen
/// through a counting adaptor.
///
/// * Item by item (both delivery modes), under a request of 10, with the spy panicking
///   at item `at`: exactly `items` arrive, then `on_error` of kind `Panicked` carrying
///   the panic's message; upstream is cancelled once; the closure ran for `0..=at`;
///   nothing was pulled beyond the demand of 10; more demand pulls, calls and signals
///   nothing.
/// * Through a batching sink (`fold_with(64, ..)`, the fused path), with the spy
///   panicking at `batch_at`: the sink fails with that panic, upstream is cancelled
///   once, the closure stops at the panic, and no more than the batch in flight was
///   pulled.
///
/// Returns how many times the generator was called with
/// [`Delivery::Batches`], for the operators that promise a tighter bound than the
/// demand. (Item by item, the counting adaptor itself drains the source's batch.)
pub fn panic_becomes_panicked_error_and_cancels_upstream<P>(
    op: impl Fn(Counted<CountingGenerator>, Spy) -> P,
    at: u64,
    items: &[P::Item],
    batch_at: u64,
) -> u64
where
    P: Publisher,
    P::Item: Clone + PartialEq + Debug,
{
    let mut pulled_in_batches = 0;
    for delivery in [Delivery::Batches, Delivery::OneByOne] {
        let (generator, calls) = counting_generator(u64::MAX);
        let (source, stats) = counted_with(generator, delivery);
        let spy = Spy::panicking_at(at);
        let probe = probe_of(op(source, spy.clone()));
        probe.request(10);

        probe.assert_items(items);
        let error = probe.assert_error();
        assert_eq!(error.kind(), ErrorKind::Panicked, "{delivery:?}");
        assert_eq!(error.message(), format!("boom at {at}"), "{delivery:?}");
        assert_eq!(shape(&probe), ended(items.len(), 'E'), "{delivery:?}");
        assert_eq!(stats.cancels(), 1, "{delivery:?}: upstream cancelled");
        assert_eq!(spy.calls(), at + 1, "{delivery:?}");

        // Nothing follows: more demand pulls nothing and signals nothing.
        let pulled = calls.load(Ordering::SeqCst);
        assert!(
            pulled <= 10,
            "{delivery:?}: pulled {pulled} against a demand of 10"
        );
        probe.request(100);
        assert_eq!(
            shape(&probe),
            ended(items.len(), 'E'),
            "{delivery:?}: nothing follows"
        );
        assert_eq!(calls.load(Ordering::SeqCst), pulled, "{delivery:?}");
        assert_eq!(spy.calls(), at + 1, "{delivery:?}");
        assert!(!stats.over_delivered(), "{delivery:?}");
        if delivery == Delivery::Batches {
            pulled_in_batches = pulled;
        }
    }

    // Through a batching sink (the fused fold path).
    let (generator, calls) = counting_generator(u64::MAX);
    let (source, stats) = counted(generator);
    let spy = Spy::panicking_at(batch_at);
    let error = op(source, spy.clone())
        .fold_with(64, (), |(), _| ())
        .wait()
        .unwrap_err();
    assert_eq!(
        (error.kind(), error.message()),
        (ErrorKind::Panicked, format!("boom at {batch_at}").as_str())
    );
    assert_eq!(stats.cancels(), 1);
    assert_eq!(spy.calls(), batch_at + 1, "the closure stops at the panic");
    // At most the batch in flight is pulled: never beyond what was requested.
    assert!(calls.load(Ordering::SeqCst) <= stats.requested());
    assert!(!stats.over_delivered());
    assert!(
        stats.delivered() <= batch_at + 64,
        "{} pulled",
        stats.delivered()
    );
    pulled_in_batches
}

/// The multiset model of an operator that interleaves several sources: `publisher`
/// emits `(tag, item)` pairs, and `sides` gives each tag's items in order. Driven by
/// `schedule` (re-entrant requests included), after every step and once more at the
/// end: no protocol violation; never more items than requested; each tag's items, in
/// order, are the start of its side; then either nothing more since the first cancel,
/// or exactly `min(requested, total)` items, completed once everything went out.
pub fn check_interleaved<P, K, T>(
    publisher: P,
    sides: &[(K, Vec<T>)],
    schedule: &Schedule,
) -> Result<(), TestCaseError>
where
    P: Publisher<Item = (K, T)>,
    K: Clone + PartialEq + Debug + Send + 'static,
    T: Clone + PartialEq + Debug + Send + 'static,
{
    let subscriber = TestSubscriber::new().request_on_next(schedule.reentrant);
    let probe = subscriber.probe();
    publisher.subscribe(subscriber);
    let total: u64 = sides.iter().map(|(_, side)| side.len() as u64).sum();
    let mut frozen: Option<u64> = None;
    for action in schedule.actions.iter().copied().map(Some).chain([None]) {
        match action {
            Some(Action::Request(k)) => probe.request(k),
            Some(Action::Cancel) => {
                probe.cancel();
                frozen.get_or_insert(probe.received_count());
            }
            None => {}
        }
        prop_assert!(probe.check_violations().is_ok(), "{:?}", probe.violations());
        let items = probe.items();
        let received = items.len() as u64;
        prop_assert!(received <= probe.requested());
        for (tag, side) in sides {
            let got: Vec<T> = items
                .iter()
                .filter(|p| p.0 == *tag)
                .map(|p| p.1.clone())
                .collect();
            prop_assert_eq!(Some(&got[..]), side.get(..got.len()), "{:?}", tag);
        }
        match frozen {
            Some(at_cancel) => prop_assert_eq!(received, at_cancel),
            None => {
                prop_assert_eq!(received, probe.requested().min(total));
                prop_assert_eq!(probe.is_completed(), received == total);
            }
        }
    }
    Ok(())
}

/// An item a source delivers after the operator cancelled it (the source read its
/// demand before the cancel arrived, rule 2.8) is not kept: `op` over a [`late`]
/// source of [`Live`] items, subscribed by a `TestSubscriber` that cancels before any
/// item came. Once the source lets go of its subscriber (rule 3.13), the late item is
/// gone, although the probe still holds the subscription. (Cancels and releases that
/// run on a scheduler are waited for, up to [`PATIENCE`].)
pub fn late_item_after_cancel_is_released<P>(op: impl FnOnce(Late<Live>) -> P)
where
    P: Publisher,
    P::Item: Clone,
{
    let (source, handle) = late();
    let probe = probe_of(op(source));
    probe.request(1);
    probe.cancel();
    assert!(
        eventually(|| handle.cancelled()),
        "the cancel reached the source"
    );
    let alive = Arc::new(AtomicUsize::new(0));
    handle.deliver(Live::new(&alive));
    handle.let_go();
    assert!(
        eventually(|| alive.load(Ordering::SeqCst) == 0),
        "an item delivered after the cancel outlives the source's subscriber"
    );
    probe.assert_no_terminal();
    drop(probe);
}

/// True once `condition` holds, polled for up to [`PATIENCE`].
fn eventually(condition: impl Fn() -> bool) -> bool {
    let deadline = std::time::Instant::now() + PATIENCE;
    while !condition() {
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    true
}

/// A drop hook attached below `publisher` reaches the lossy stages of all its sources:
/// collected with the default sink, some items are reported dropped for
/// `OverflowNewest`, and each of the `items` the sources emitted either arrived or was
/// reported dropped.
pub fn drop_hook_reaches_every_source<P: Publisher>(publisher: P, items: u64) {
    let drops = Drops::new();
    let out = publisher
        .on_dropped(DropHook::new(drops.clone()))
        .collect()
        .wait()
        .unwrap();
    assert!(drops.count(DropReason::OverflowNewest) > 0);
    assert_eq!(out.len() as u64 + drops.total(), items);
}

/// `op` over a [`valve`] of `len` items, with a drop hook below it, subscribed by a
/// zero-demand `TestSubscriber`: the probe, the valve's handle and the drops reported.
pub fn valve_probe<P>(
    len: u64,
    op: impl FnOnce(ValveSource) -> P,
) -> (TestProbe<P::Item>, ValveHandle, Drops)
where
    P: Publisher,
{
    let (source, handle) = valve(len);
    let drops = Drops::new();
    let probe = probe_of(op(source).on_dropped(DropHook::new(drops.clone())));
    (probe, handle, drops)
}

/// `publisher` (a synchronous source of `0..len`, handing its items over in one batch,
/// under a lossy stage) with a drop hook below it, under a subscriber that requests 1
/// on subscribe and 1 more inside each `on_next`: every item arrives while there is
/// demand, nothing is reported dropped, and the stream completes.
pub fn demand_inside_a_batch_loses_nothing<P>(publisher: P, len: u64)
where
    P: Publisher<Item = u64>,
{
    let drops = Drops::new();
    let subscriber = TestSubscriber::new()
        .request_on_subscribe(1)
        .request_on_next(1);
    let probe = subscriber.probe();
    publisher
        .on_dropped(DropHook::new(drops.clone()))
        .subscribe(subscriber);
    probe.assert_items(&(0..len).collect::<Vec<_>>());
    assert_eq!(drops.total(), 0);
    probe.assert_completed();
}

/// The demand invariant of a replenishing operator (one that re-requests what it
/// swallows) after a [`check_model`](crate::support::model::check_model) `run` under
/// `schedule`: upstream never over-delivered, was cancelled exactly as often as the
/// schedule cancelled, and (short of saturation) was asked for downstream's demand
/// plus every item swallowed, each once.
pub fn check_replenished<U: Clone>(run: &Run<U>, schedule: &Schedule) -> Result<(), TestCaseError> {
    let (stats, probe) = (&run.stats, &run.probe);
    prop_assert!(!stats.over_delivered());
    prop_assert_eq!(stats.cancels(), schedule.cancels());
    if probe.requested() < u64::MAX / 4 {
        prop_assert_eq!(
            stats.requested(),
            probe.requested() + (stats.delivered() - probe.received_count()),
            "upstream outstanding differs from downstream outstanding"
        );
    }
    Ok(())
}

/// `op` over a counted `range(0..items)` into a sink that requests 64 at a time
/// (`fold_with(64, ..)`), where `op` passes `kept` of the items: all of them arrive,
/// upstream delivers every item, never has more than the sink's window outstanding,
/// and the swallowed items are re-requested once per batch (plus the sink's own
/// replenishes, one per 48 kept), never once per item.
pub fn re_requested_in_batches<P>(
    op: impl FnOnce(Counted<weir::source::Range<u64>>) -> P,
    items: u64,
    kept: u64,
) where
    P: Publisher,
{
    let (source, stats) = counted(weir::range(0..items));
    let count = op(source).fold_with(64, 0u64, |n, _| n + 1).wait().unwrap();
    assert_eq!(count, kept);
    assert_eq!(stats.delivered(), items);
    assert!(stats.max_outstanding() <= 64);
    assert!(stats.request_calls() <= 1 + stats.deliveries() + kept / 48);
    assert!(stats.request_calls() <= items / 10);
}
