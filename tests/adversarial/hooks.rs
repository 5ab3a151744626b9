//! Every user hook of the public API, made to panic: the closures, trait impls and
//! callbacks a user hands weir that no other check of the suite makes panic (the
//! inventory is in the report this module came with; `panics.rs` has the panicking
//! `on_next` of every stage and the sinks' closures, the operator tests the closures of
//! `map`, `filter`, …).
//!
//! The promises checked, each as its stage documents it: a panic in user code becomes
//! `on_error` of kind `Panicked` naming the stage the user wrote (`Error::stage`),
//! upstream is cancelled, every item is dropped (counted: the ledger's live items go
//! back to zero), nothing hangs, and the panic never unwinds into a thread that runs
//! other users' work (a pool still runs a task afterwards). Where a stage documents
//! that a hook's panic propagates to the caller (the channel's admission
//! classifiers), the check is that it does, and that the channel still works.
//!
//! | test | hooks |
//! |---|---|
//! | `every_stage_survives_a_subscriber_that_panics_outside_on_next` | a subscriber of every stage of the table panics in `on_subscribe`, in `on_error` (after its own `request(0)`) or in `on_complete` |
//! | `every_user_hook_that_panics_is_handled_as_documented` | `create`'s `on_cancel`, `from_fn`, `unfold`, `concat_map`'s mapper, the `map_async` family's closure, its `Limiter`, `RetryPolicy::classify` behind `map_async_on`, a channel's drop hook, its shed classifier and deadline reader on every send method, the `AsyncSubscriber` hooks other than `on_next`, an `Exporter`'s recorder, a `mux::Transport` panicking in `receiver` or `connect`, hub subscribers that panic in `on_complete`/`on_error`, a `Stream` and a `Future` polled on a pool, an `rsocket::Handler` (feature `rsocket`) |
//! | `a_drop_hook_that_panics_fails_the_lossy_stage_that_called_it` | `on_drop`'s closure and `DropHook::inspect` (through `on_dropped`) behind every stage that hands dropped items to the pipeline's hook, `publish_on_with`'s expiry included |
//! | `a_publisher_that_panics_in_subscribe_fails_the_stage_that_subscribes_it` | the other sources of `zip`, `weir::merge`, `concat_map`'s inners, `subscribe_on`'s source, a hub's upstream, a mux channel's sending publisher |
//! | `a_publisher_that_panics_in_subscribe_panics_in_the_sinks_caller_and_nothing_waits` | the same publisher under `collect`, `blocking_iter`, `into_stream` (polled again after the panic) and `subscribe_async` |
//! | `a_subscription_that_panics_in_request_or_cancel_ends_the_pipeline` | a source whose `request` (the second call) or `cancel` panics, behind the stages that call it from threads of their own |
//! | `an_item_whose_drop_panics_is_contained` | an item whose `Drop` panics when a stage drops it (swallowed, replaced, dropped by a policy, released on cancel) |
//! | `an_item_whose_clone_panics_ends_only_the_hub_subscriber_it_was_cloned_for` | an item whose `Clone` panics in a hub subscriber's pass |
//! | `a_scheduler_that_panics_in_schedule_ends_the_pipeline` | a `Scheduler` whose `schedule` / `schedule_after` / `schedule_timer` panics, under every stage that takes one |
//! | `a_scheduler_whose_lane_or_hint_panics_ends_the_pipeline` | a `Scheduler` whose `lane`, its lane's `queue` or its `has_waiting_tasks` panics, under every stage that takes one |
//!
//! Every case runs on a thread of its own under a watchdog ([`DEADLINE`]); its waits
//! poll until the condition holds and fail after [`WAIT`]. Nothing asserts on
//! timing. All failures of a test are reported at the end.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use weir::bridge::{AsyncSubscriber, SubscribeAsync};
use weir::hub::{Hub, Policy};
use weir::limit::Limiter;
use weir::metrics::{DropHook, Drops};
use weir::prelude::*;
use weir::retry::{Backoff, RetryPolicy, Verdict};
use weir::runtime::{Lane, Recurring, Scheduler, Task, ThreadPool, TimerHandle, VirtualTime};
use weir::source::channel::{Admission, ChannelBuilder, ChannelPolicy, WaterMarks};
use weir::source::Emitter;
use weir::{BoxPublisher, Error, ErrorKind, Overflow, RawSubscription};

#[cfg(feature = "metrics")]
use crate::harness::exports::ExportCounter;
use crate::harness::item::{Item, Ledger};
use crate::harness::run::{guarded, tokio_runtime, Schedulers};
use crate::harness::tap::{SourceProbe, Tap};
use crate::harness::watch::{
    assert_no_failures, on_thread, panic_message, run_rows, silence_deliberate_panics, wait_until,
    DELIBERATE,
};
use crate::stages::{Feed, Stage};

/// The watchdog of one case: a case that has not returned by then hung.
const DEADLINE: Duration = Duration::from_secs(30);

/// How long a case waits for something that must happen (a correct implementation
/// needs microseconds to milliseconds); a few such waits fit in [`DEADLINE`].
const WAIT: Duration = Duration::from_secs(5);

/// Items of a source that should be cancelled long before its end: "completed" then
/// means nobody cancelled it.
const BIG: u64 = 1_000_000;

/// One case: its name and its check (the failures; empty when it holds).
type Case = (&'static str, fn() -> Vec<String>);

/// Run every case, four at a time, each on a thread of its own under [`DEADLINE`],
/// and fail once with every failure.
fn run_cases(what: &str, cases: &[Case]) {
    silence_deliberate_panics();
    let failures = run_rows(cases, 4, |&(name, case)| {
        guarded(name, DEADLINE, case)
            .into_iter()
            .map(|failure| format!("{name}: {failure}"))
            .collect()
    });
    assert_no_failures(what, cases.len(), &failures);
}

/// A panic message the suite's panic hook keeps quiet.
fn boom(what: &str) -> String {
    format!("{DELIBERATE} panic in {what}")
}

// ---- checks ----------------------------------------------------------------------------

/// The failures of one case, with the usual checks.
#[derive(Default)]
struct Check(Vec<String>);

impl Check {
    fn fail(&mut self, failure: impl Into<String>) {
        self.0.push(failure.into());
    }

    fn expect(&mut self, holds: bool, failure: impl FnOnce() -> String) {
        if !holds {
            self.0.push(failure());
        }
    }

    /// `result` (`None`: the sink never ended) is an error of kind `Panicked` naming
    /// `stage`, from a panic of ours.
    fn panicked<T>(&mut self, what: &str, result: Option<Result<T, Error>>, stage: Option<&str>) {
        match result {
            None => self.fail(format!("{what}: the sink did not end within {WAIT:?}")),
            Some(Err(error)) if error.kind() == ErrorKind::Panicked => {
                if error.stage() != stage {
                    self.fail(format!(
                        "{what}: the error names {:?}, expected {stage:?} ({error})",
                        error.stage()
                    ));
                }
                if !error.message().starts_with(DELIBERATE) {
                    self.fail(format!("{what}: not our panic's message: {error}"));
                }
            }
            Some(Ok(_)) => self.fail(format!(
                "{what}: expected an error of kind Panicked, the stream completed"
            )),
            Some(Err(error)) => self.fail(format!(
                "{what}: expected an error of kind Panicked, got {error}"
            )),
        }
    }

    /// Every item of `ledger` is dropped (within [`WAIT`]).
    fn released(&mut self, what: &str, ledger: &Ledger) {
        if !wait_until(WAIT, || ledger.live() == 0) {
            self.fail(format!("{what}: {} items still alive", ledger.live()));
        }
    }

    /// The source behind `probe` was cancelled before it ran out, and let go of its
    /// subscriber.
    fn cancelled(&mut self, what: &str, probe: &SourceProbe) {
        if !wait_until(WAIT, || !probe.holding()) {
            self.fail(format!(
                "{what}: upstream not released: {}",
                probe.describe()
            ));
        } else if probe.completed() || probe.cancels() == 0 {
            self.fail(format!(
                "{what}: upstream not cancelled: {}",
                probe.describe()
            ));
        }
    }

    /// `pool` still runs a task.
    fn pool_runs(&mut self, what: &str, pool: &ThreadPool) {
        let (tx, rx) = mpsc::channel();
        pool.schedule(Box::new(move || {
            let _ = tx.send(());
        }));
        if rx.recv_timeout(WAIT).is_err() {
            self.fail(format!("{what}: the pool no longer runs a task"));
        }
    }

    fn done(self) -> Vec<String> {
        self.0
    }
}

/// A tapped source of `len` counted items (`0..len`), made on demand.
fn counted(name: &str, len: u64, ledger: &Arc<Ledger>) -> (BoxPublisher<Item>, Arc<SourceProbe>) {
    let probe = SourceProbe::new(name);
    let ledger = ledger.clone();
    let source = Tap::new(
        weir::range(0..len).map(move |v| ledger.produce(v)),
        probe.clone(),
    );
    (source.boxed(), probe)
}

/// Wait for a sink, at most [`WAIT`].
fn ended<R>(mut handle: weir::sink::SinkHandle<R>) -> Option<Result<R, Error>> {
    handle.wait_timeout(WAIT)
}

/// A pool of `threads` workers named after the case.
fn pool(name: &str, threads: usize) -> ThreadPool {
    ThreadPool::builder().name(name).threads(threads).build()
}

// ---- a subscriber that panics outside on_next, behind every stage ----------------------

/// Where a [`Hostile`] subscriber panics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Moment {
    /// In `on_subscribe`, before it requests anything.
    Subscribe,
    /// In `on_error` (behind every stage: provoked by its own `request(0)` in
    /// `on_subscribe`, rule 3.9).
    Error,
    /// In `on_complete`, after it requested everything.
    Complete,
}

/// What a [`Hostile`] subscriber saw.
#[derive(Debug, Default)]
struct Seen {
    subscribed: AtomicBool,
    items: AtomicU64,
    completed: AtomicBool,
    error: Mutex<Option<Error>>,
    panicked: AtomicBool,
    /// For each source: had it terminated when the subscriber panicked?
    terminated_at_panic: Mutex<Vec<bool>>,
    after_panic: AtomicU64,
    dropped: AtomicBool,
}

impl Seen {
    fn errored(&self) -> Option<Error> {
        self.error.lock().unwrap().clone()
    }
}

/// A subscriber that drops its items and panics at its [`Moment`] (`None`: never).
struct Hostile {
    moment: Option<Moment>,
    seen: Arc<Seen>,
    /// The sources to look at when it panics.
    probes: Vec<Arc<SourceProbe>>,
    /// Provoke `on_error` with its own `request(0)` (else it requests everything).
    request_zero: bool,
}

impl Hostile {
    fn new(moment: Option<Moment>) -> (Hostile, Arc<Seen>) {
        let seen = Arc::new(Seen::default());
        (
            Hostile {
                moment,
                seen: seen.clone(),
                probes: Vec::new(),
                request_zero: false,
            },
            seen,
        )
    }

    fn signal(&self) {
        if self.seen.panicked.load(Ordering::SeqCst) {
            self.seen.after_panic.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn panic_at(&self, moment: Moment) {
        if self.moment == Some(moment) {
            *self.seen.terminated_at_panic.lock().unwrap() =
                self.probes.iter().map(|p| p.terminated()).collect();
            self.seen.panicked.store(true, Ordering::SeqCst);
            panic!("{}", boom(&format!("{moment:?}")));
        }
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.seen.dropped.store(true, Ordering::SeqCst);
    }
}

impl<T> Subscriber<T> for Hostile {
    fn on_subscribe(&mut self, subscription: Subscription) {
        self.seen.subscribed.store(true, Ordering::SeqCst);
        self.panic_at(Moment::Subscribe);
        subscription.request(if self.request_zero { 0 } else { u64::MAX });
    }

    fn on_next(&mut self, item: T) {
        self.signal();
        self.seen.items.fetch_add(1, Ordering::SeqCst);
        drop(item);
    }

    fn on_error(&mut self, error: Error) {
        self.signal();
        *self.seen.error.lock().unwrap() = Some(error);
        self.panic_at(Moment::Error);
    }

    fn on_complete(&mut self) {
        self.signal();
        self.seen.completed.store(true, Ordering::SeqCst);
        self.panic_at(Moment::Complete);
    }
}

/// Each row × each moment: the subscriber's panic must not escape `subscribe` (rule
/// 2.13: weir's publishers treat it as a cancel), no signal may follow it, and
/// everything must be let go of: the sources released, every item dropped, the
/// subscriber dropped; the pool and the runtime still run tasks.
#[test]
fn every_stage_survives_a_subscriber_that_panics_outside_on_next() {
    silence_deliberate_panics();
    let schedulers = Schedulers::new("hooks-subscriber");
    let rows = crate::stages::table();
    let cases: Vec<(&Stage, Moment)> = rows
        .iter()
        .flat_map(|row| [Moment::Subscribe, Moment::Error, Moment::Complete].map(|m| (row, m)))
        .collect();
    let failures = run_rows(&cases, 8, |&(row, moment)| {
        let (row, schedulers) = (*row, schedulers.clone());
        guarded(row.name, DEADLINE, move || {
            hostile_check(&row, moment, &schedulers)
        })
        .into_iter()
        .map(|f| format!("{} (panic in {moment:?}): {f}", row.label()))
        .collect()
    });
    assert_no_failures("subscriber panics outside on_next", cases.len(), &failures);
}

fn hostile_check(row: &Stage, moment: Moment, schedulers: &Schedulers) -> Vec<String> {
    let mut check = Check::default();
    let env = Arc::new(schedulers.env(16, Feed::OnDemand));
    let (mut subscriber, seen) = Hostile::new(Some(moment));
    subscriber.request_zero = moment == Moment::Error;
    let (build, shared) = (row.build, env.clone());
    let subscribing = std::thread::Builder::new()
        .name(format!("hooks: subscribe {}", row.name))
        .spawn(move || {
            let publisher = build(&shared);
            subscriber.probes = shared.probes();
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                publisher.subscribe(subscriber)
            }))
            .map_err(|payload| panic_message(&*payload))
        })
        .expect("spawn the subscribing thread");
    wait_until(WAIT, || seen.subscribed.load(Ordering::SeqCst));
    env.open();
    if !wait_until(WAIT, || subscribing.is_finished()) {
        check.fail(format!("subscribe() did not return within {WAIT:?}"));
    } else if let Ok(Err(message)) = subscribing.join() {
        check.fail(format!(
            "the subscriber's panic escaped from subscribe(): {message}"
        ));
    }
    let reached = match moment {
        Moment::Subscribe => seen.subscribed.load(Ordering::SeqCst),
        _ => wait_until(WAIT, || seen.panicked.load(Ordering::SeqCst)),
    };
    if !reached {
        check.fail(format!(
            "the subscriber never reached {moment:?} ({} items)",
            seen.items.load(Ordering::SeqCst)
        ));
    }
    let let_go = wait_until(WAIT, || {
        env.ledger.live() == 0
            && env.probes().iter().all(|p| !p.holding())
            && seen.dropped.load(Ordering::SeqCst)
    });
    if !let_go {
        let sources: Vec<String> = env.probes().iter().map(|p| p.describe()).collect();
        check.fail(format!(
            "not let go of: {} items alive, subscriber dropped {}; {}",
            env.ledger.live(),
            seen.dropped.load(Ordering::SeqCst),
            sources.join("; ")
        ));
    }
    // A stage may prefetch (and its sources end) before it calls on_subscribe; a
    // source that had not ended when the subscriber panicked must not end afterwards.
    let before = seen.terminated_at_panic.lock().unwrap().clone();
    for (probe, terminated) in env.probes().iter().zip(before) {
        check.expect(terminated || !probe.completed(), || {
            format!(
                "upstream ran to completion after the panic: {}",
                probe.describe()
            )
        });
    }
    let after = seen.after_panic.load(Ordering::SeqCst);
    check.expect(after == 0, || format!("{after} signals after the panic"));
    check.pool_runs("after the case", &env.pool);
    let (tx, rx) = mpsc::channel();
    env.tokio.spawn(async move {
        let _ = tx.send(());
    });
    check.expect(rx.recv_timeout(WAIT).is_ok(), || {
        "the tokio runtime no longer runs a task".to_owned()
    });
    env.stop_sources();
    check.done()
}

// ---- one hook at a time ----------------------------------------------------------------

#[test]
fn every_user_hook_that_panics_is_handled_as_documented() {
    run_cases(
        "user hooks that panic",
        &[
            ("create's on_cancel hook", create_on_cancel),
            ("from_fn's closure", from_fn_closure),
            ("unfold's closure", unfold_closure),
            ("concat_map's mapper", concat_map_mapper),
            (
                "map_async_unordered's and map_async_on's closures",
                map_async_family,
            ),
            ("a map_async Limiter", map_async_limiter),
            (
                "RetryPolicy::classify behind map_async_on",
                retry_classifier,
            ),
            ("a channel's own drop hook", channel_drop_hook),
            (
                "a channel's shed classifier, on every send",
                shed_classifier,
            ),
            ("a channel's deadline reader", deadline_reader),
            (
                "AsyncSubscriber on_subscribe / on_error / on_complete",
                async_hooks,
            ),
            ("an Exporter's metrics recorder", exporter_recorder),
            ("a hub subscriber in on_complete", || {
                hub_terminal(Moment::Complete)
            }),
            ("a hub subscriber in on_error", || {
                hub_terminal(Moment::Error)
            }),
            ("a mux Transport in receiver / connect", mux_transport),
            ("a Stream polled on a pool (from_stream_on)", stream_on_pool),
            ("a Future polled on a pool (map_async_on)", future_on_pool),
            ("an rsocket Handler", rsocket_handler),
        ],
    );
}

/// `Emitter::on_cancel`: "a panic in it is logged". The cancel (made by `take` inside
/// a delivery on the producer's thread) must return normally to the producer, whose
/// next send is refused as closed; the hook ran; nothing stays alive.
fn create_on_cancel() -> Vec<String> {
    let mut check = Check::default();
    let ledger = Ledger::new();
    let ran = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let flag = ran.clone();
    let source = weir::create(move |emitter: Emitter<Item>| {
        let flag = flag.clone();
        emitter.on_cancel(move || {
            flag.store(true, Ordering::SeqCst);
            panic!("{}", boom("create's on_cancel hook"));
        });
        let _ = tx.send(emitter);
    });
    let handle = source.take(3).collect();
    let Ok(emitter) = rx.recv_timeout(WAIT) else {
        return vec!["create's closure never ran".to_owned()];
    };
    let produce = ledger.clone();
    let producer = on_thread("hooks: create producer", WAIT, move || {
        (0..BIG).find(|&value| emitter.send_blocking(produce.produce(value)).is_err())
    });
    match producer {
        Ok(Some(_)) => {}
        Ok(None) => check.fail("the emitter was never closed"),
        Err(why) => check.fail(format!("the producer thread {why}")),
    }
    match ended(handle) {
        Some(Ok(items)) => check.expect(items.len() == 3, || format!("{} items", items.len())),
        other => check.fail(format!("take(3) ended with {other:?}")),
    }
    check.expect(ran.load(Ordering::SeqCst), || {
        "the hook never ran".to_owned()
    });
    check.released("create", &ledger);
    check.done()
}

/// `from_fn`: "a panic in `f` becomes `on_error` of kind `Panicked`", naming the stage
/// the user wrote (`Error::stage`: "`map` when `map`'s closure panicked, …").
fn from_fn_closure() -> Vec<String> {
    let mut check = Check::default();
    let ledger = Ledger::new();
    let produce = ledger.clone();
    let mut n = 0;
    let source = weir::from_fn(move || {
        n += 1;
        assert!(n != 3, "{}", boom("from_fn"));
        Some(produce.produce(n))
    });
    check.panicked("from_fn", ended(source.collect()), Some("from_fn"));
    check.released("from_fn", &ledger);
    check.done()
}

/// `unfold`: `Panicked` naming `unfold`, "the state is dropped" (it holds an item).
fn unfold_closure() -> Vec<String> {
    let mut check = Check::default();
    let ledger = Ledger::new();
    let produce = ledger.clone();
    let state = (ledger.produce(1_000), 0u64);
    let source = weir::unfold(state, move |(kept, n)| {
        assert!(n != 2, "{}", boom("unfold"));
        Some((produce.derived(n), (kept, n + 1)))
    });
    check.panicked("unfold", ended(source.collect()), Some("unfold"));
    check.released("unfold (the state holds an item)", &ledger);
    check.done()
}

/// `concat_map`: "as `flat_map`: the first error (or a panic in `f`) is signalled at
/// once and everything else is cancelled"; the error names `concat_map`.
fn concat_map_mapper() -> Vec<String> {
    let mut check = Check::default();
    let ledger = Ledger::new();
    let (source, probe) = counted("source", BIG, &ledger);
    let mapped = source.concat_map(
        |item: Item| {
            assert!(item.value != 2, "{}", boom("concat_map"));
            weir::just(item)
        },
        4,
    );
    check.panicked("concat_map", ended(mapped.collect()), Some("concat_map"));
    check.cancelled("concat_map", &probe);
    check.released("concat_map", &ledger);
    check.done()
}

/// `map_async_unordered` and `map_async_on`: "as `map_async`": a panic in `f` fails
/// the stage (one stage, `MapAsync`, named `map_async`) with `Panicked`, and cancels
/// upstream.
fn map_async_family() -> Vec<String> {
    let mut check = Check::default();
    let runtime = tokio_runtime("hooks-map-async");
    let pool = pool("hooks-map-async", 2);
    for stage in ["map_async_unordered", "map_async_on"] {
        let ledger = Ledger::new();
        let (source, probe) = counted("source", BIG, &ledger);
        let f = move |item: Item| {
            assert!(item.value != 2, "{}", boom(stage));
            async move { item }
        };
        let handle = match stage {
            "map_async_unordered" => {
                let _inside = runtime.enter();
                source.map_async_unordered(2, f).collect()
            }
            _ => source.map_async_on(pool.clone(), 2, true, f).collect(),
        };
        check.panicked(stage, ended(handle), Some("map_async"));
        check.cancelled(stage, &probe);
        check.released(stage, &ledger);
    }
    check.pool_runs("map_async_on", &pool);
    check.done()
}

/// A [`Limiter`] that panics at its `at`th call of `limit` (counted across clones).
#[derive(Clone)]
struct PanickingLimiter {
    calls: Arc<AtomicU64>,
    at: u64,
}

impl Limiter for PanickingLimiter {
    fn limit(&self) -> usize {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        assert!(n != self.at, "{}", boom("a Limiter"));
        2
    }

    fn on_sample(&mut self, _rtt: Duration, _in_flight: usize) {}
}

/// `MapAsync::limit`: a limiter that panics fails the stage with `Panicked` (as
/// `flat_map`'s documents), upstream cancelled, every item dropped, the pool alive.
fn map_async_limiter() -> Vec<String> {
    let mut check = Check::default();
    let pool = pool("hooks-limiter", 2);
    for at in [1, 4] {
        let ledger = Ledger::new();
        let (source, probe) = counted("source", BIG, &ledger);
        let limiter = PanickingLimiter {
            calls: Arc::default(),
            at,
        };
        let handle = source
            .map_async_on(pool.clone(), 4, true, |item: Item| async move { item })
            .limit(limiter)
            .collect();
        let what = format!("limit() panics at call {at}");
        check.panicked(&what, ended(handle), Some("map_async"));
        check.cancelled(&what, &probe);
        check.released(&what, &ledger);
    }
    check.pool_runs("map_async_on", &pool);
    check.done()
}

/// `RetryPolicy::classify` behind `map_async_on`: "a panic in any of them propagates
/// to whoever polls the `RetryFuture` (`map_async` turns it into a `Panicked` error of
/// the stage)": upstream cancelled, items dropped, the pool alive.
fn retry_classifier() -> Vec<String> {
    let mut check = Check::default();
    let pool = pool("hooks-retry", 2);
    let ledger = Ledger::new();
    let (source, probe) = counted("source", BIG, &ledger);
    let policy = RetryPolicy::new(
        3,
        Backoff::exponential(Duration::from_millis(1), Duration::from_millis(2)),
    )
    .classify(|error: &u64| -> Verdict {
        assert!(*error != 2, "{}", boom("RetryPolicy::classify"));
        Verdict::Retry
    });
    // The policy clones the item for every attempt: an `Arc` of it, dropped with the last.
    let call = policy.wrap(pool.clone(), |item: Arc<Item>| {
        let value = item.value;
        async move {
            if value == 2 {
                Err(value)
            } else {
                Ok(item)
            }
        }
    });
    let handle = source
        .map(Arc::new)
        .map_async_on(pool.clone(), 2, true, call)
        .collect();
    check.panicked("classify", ended(handle), Some("map_async"));
    check.cancelled("classify", &probe);
    check.released("classify", &ledger);
    check.pool_runs("map_async_on", &pool);
    check.done()
}

/// A lossy stage over a counted source; the pipeline's hook goes below it.
type Lossy = fn(BoxPublisher<Item>, &ThreadPool) -> BoxPublisher<Item>;

/// Every stage that drops items and reports them to the pipeline's drop hook.
/// (`conflate(f)` hands no item to the hook: its merge consumes both.)
const LOSSY: [(&str, Lossy); 9] = [
    ("on_backpressure_drop", |s, _| {
        s.on_backpressure_drop().boxed()
    }),
    ("on_backpressure_latest", |s, _| {
        s.on_backpressure_latest().boxed()
    }),
    ("conflate_latest", |s, _| s.conflate_latest().boxed()),
    ("throttle_on(1/ms, 1, Enforcing, pool)", |s, pool| {
        let rate = weir::operators::Rate::new(1, Duration::from_millis(1));
        s.throttle_on(
            rate,
            1,
            weir::operators::ThrottleMode::Enforcing,
            pool.clone(),
        )
        .boxed()
    }),
    ("on_backpressure_buffer(4, DropOldest)", |s, _| {
        s.on_backpressure_buffer(4, Overflow::DropOldest).boxed()
    }),
    ("on_backpressure_buffer(4, DropNewest)", |s, _| {
        s.on_backpressure_buffer(4, Overflow::DropNewest).boxed()
    }),
    ("sample_on(1ms, pool)", |s, pool| {
        s.sample_on(Duration::from_millis(1), pool.clone()).boxed()
    }),
    ("debounce_on(1ms, pool)", |s, pool| {
        s.debounce_on(Duration::from_millis(1), pool.clone())
            .boxed()
    }),
    ("publish_on_with(pool, 16, max_age 100us)", |s, pool| {
        let bounds = weir::queue::TimeBounds::none().max_age(Duration::from_micros(100));
        s.publish_on_with(pool.clone(), 16, bounds).boxed()
    }),
];

/// A drop hook below a lossy stage, made to panic at the first drop: `on_drop(f)`
/// ("a panic in `f` unwinds into the lossy stage that reported the drop, which treats
/// it as its own") or `on_dropped(DropHook::new(..).inspect(f))` ("a panic in the
/// hook's `inspect` closure unwinds into the lossy stage that reported the drop").
#[derive(Clone, Copy, Debug)]
enum Hook {
    OnDrop,
    Inspect,
}

/// Each lossy stage over a big source into a slow sink on another thread (one item at
/// a time, a pause per item, so items are dropped), with each hook panicking at the
/// first drop. The
/// stage treats the panic as its own, as it does a panic of its own closure: an
/// error of kind `Panicked` naming the stage the hook belongs to (`on_drop`,
/// `on_dropped`), upstream cancelled, every item dropped, the pool alive.
#[test]
fn a_drop_hook_that_panics_fails_the_lossy_stage_that_called_it() {
    silence_deliberate_panics();
    let cases: Vec<(&str, Lossy, Hook)> = LOSSY
        .iter()
        .flat_map(|&(name, lossy)| [Hook::OnDrop, Hook::Inspect].map(|h| (name, lossy, h)))
        .collect();
    let failures = run_rows(&cases, 4, |&(name, lossy, hook)| {
        guarded(name, DEADLINE, move || lossy_check(lossy, hook))
            .into_iter()
            .map(|f| format!("{name} ({hook:?}): {f}"))
            .collect()
    });
    assert_no_failures("drop hooks that panic", cases.len(), &failures);
}

fn lossy_check(lossy: Lossy, hook: Hook) -> Vec<String> {
    let mut check = Check::default();
    let pool = pool("hooks-lossy", 2);
    let ledger = Ledger::new();
    let (source, probe) = counted("source", BIG, &ledger);
    let stage = lossy(source, &pool);
    let (hooked, name) = match hook {
        Hook::OnDrop => (
            stage
                .on_drop(|_dropped: weir::metrics::DroppedItem<Item>| {
                    panic!("{}", boom("on_drop's closure"))
                })
                .boxed(),
            "on_drop",
        ),
        Hook::Inspect => {
            let hook = DropHook::new(Drops::new())
                .inspect(|_dropped| panic!("{}", boom("DropHook::inspect")));
            (stage.on_dropped(hook).boxed(), "on_dropped")
        }
    };
    // The consumer on a thread of its own, so that the source outruns it.
    let pipeline = hooked.publish_on(pool.clone(), 1).for_each_with(1, |item| {
        drop(item);
        std::thread::sleep(Duration::from_micros(200));
    });
    check.panicked(name, ended(pipeline), Some(name));
    check.cancelled(name, &probe);
    check.released(name, &ledger);
    check.pool_runs("the lossy stage's pool", &pool);
    check.done()
}

/// `ChannelBuilder::drop_hook`: the hook runs where the channel drops (here in a
/// sender's `try_send` under `DropOldest`). Its panic must reach that send (the
/// user's own thread and hook) or be contained; either way the channel must go on
/// working: later sends are taken, the subscriber gets them, nothing stays alive.
fn channel_drop_hook() -> Vec<String> {
    let mut check = Check::default();
    let ledger = Ledger::new();
    let armed = Arc::new(AtomicBool::new(true));
    let fuse = armed.clone();
    let hook = DropHook::new(Drops::new()).inspect(move |_dropped| {
        if fuse.swap(false, Ordering::SeqCst) {
            panic!("{}", boom("a channel's drop hook"));
        }
    });
    let (tx, rx) = ChannelBuilder::new(2, ChannelPolicy::DropOldest)
        .drop_hook(hook)
        .build::<Item>();
    for value in 0..2 {
        check.expect(tx.try_send(ledger.produce(value)).is_ok(), || {
            format!("item {value} refused")
        });
    }
    // Full: the oldest is dropped, and the hook panics.
    let item = ledger.produce(2);
    let sent = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| tx.try_send(item)));
    check.expect(!armed.load(Ordering::SeqCst), || {
        "the hook never ran".to_owned()
    });
    if let Ok(Err(refused)) = sent {
        check.fail(format!("the send was refused: {refused:?}"));
    }
    // DropOldest takes every later item, dropping the oldest for it.
    for value in 3..6 {
        let sent = tx.try_send(ledger.produce(value));
        check.expect(sent.is_ok(), || {
            format!("item {value} after the panic: {sent:?}")
        });
    }
    tx.close();
    let handle = rx.collect();
    match ended(handle) {
        Some(Ok(items)) => check.expect(!items.is_empty(), || "nothing delivered".to_owned()),
        other => check.fail(format!("the subscriber got {other:?}")),
    }
    check.released("channel", &ledger);
    check.done()
}

/// How a case offers one item to a channel.
type Send1 = fn(&weir::source::channel::Sender<Item>, Item) -> bool;

/// Every way to offer an item: whether the channel took it.
const SENDS: [(&str, Send1); 5] = [
    ("try_send", |tx, item| tx.try_send(item).is_ok()),
    ("send_blocking", |tx, item| tx.send_blocking(item).is_ok()),
    ("send().await", |tx, item| {
        futures::executor::block_on(tx.send(item)).is_ok()
    }),
    ("try_send_all", |tx, item| tx.try_send_all([item]).is_ok()),
    ("try_admit", |tx, item| tx.try_admit(item).is_ok()),
];

/// Offer item 13 (whose reading by `admission` panics) with every send method: "a
/// panic in them propagates to that send and leaves the channel as it was". So the
/// send panics; the next item is taken by the same method; the subscriber gets just
/// that item; nothing stays alive.
fn admission_panics(admission: fn() -> Admission<Item>) -> Vec<String> {
    let mut check = Check::default();
    for (name, send) in SENDS {
        let ledger = Ledger::new();
        let (tx, rx) = ChannelBuilder::new(4, ChannelPolicy::Backpressure).build_with(admission());
        let item = ledger.produce(13);
        let sent = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| send(&tx, item)));
        check.expect(sent.is_err(), || {
            format!("{name}: the panic did not reach the send ({sent:?})")
        });
        let taken = send(&tx, ledger.produce(1));
        check.expect(taken, || format!("{name}: the next item was refused"));
        tx.close();
        match ended(rx.map(|item| item.value).collect()) {
            Some(Ok(values)) => check.expect(values == [1], || format!("{name}: got {values:?}")),
            other => check.fail(format!("{name}: the subscriber got {other:?}")),
        }
        check.released(name, &ledger);
    }
    check.done()
}

/// `Admission::shed_below`'s classifier.
fn shed_classifier() -> Vec<String> {
    admission_panics(|| {
        Admission::new().shed_below(WaterMarks::new(2, 0), 1u64, |item: &Item| {
            assert!(item.value != 13, "{}", boom("a shed classifier"));
            item.value
        })
    })
}

/// `Admission::deadlines_by`'s reader.
fn deadline_reader() -> Vec<String> {
    admission_panics(|| {
        Admission::new().deadlines_by(Duration::from_millis(1), |item: &Item| {
            assert!(item.value != 13, "{}", boom("a deadline reader"));
            None
        })
    })
}

/// An async subscriber that panics in one of its hooks other than `on_next`.
struct AsyncHostile {
    moment: Moment,
}

#[async_trait::async_trait]
impl AsyncSubscriber<Item> for AsyncHostile {
    async fn on_subscribe(&mut self) -> Result<(), Error> {
        assert!(self.moment != Moment::Subscribe, "{}", boom("on_subscribe"));
        Ok(())
    }

    async fn on_next(&mut self, item: Item) -> Result<(), Error> {
        drop(item);
        Ok(())
    }

    async fn on_error(&mut self, _error: Error) {
        assert!(self.moment != Moment::Error, "{}", boom("on_error"));
    }

    async fn on_complete(&mut self) -> Result<(), Error> {
        assert!(self.moment != Moment::Complete, "{}", boom("on_complete"));
        Ok(())
    }
}

/// `AsyncSubscriber`: "a panic in any hook is caught and does the same [cancels
/// upstream and becomes the task's result] with an error of kind `Panicked`".
fn async_hooks() -> Vec<String> {
    let mut check = Check::default();
    let runtime = tokio_runtime("hooks-async");
    for moment in [Moment::Subscribe, Moment::Error, Moment::Complete] {
        let ledger = Ledger::new();
        let (source, probe) = match moment {
            Moment::Subscribe => counted("source", BIG, &ledger),
            Moment::Error => {
                let (source, probe) = counted("source", 3, &ledger);
                let failed = source.concat(weir::error::<Item>(Error::msg("upstream failed")));
                (failed.boxed(), probe)
            }
            Moment::Complete => counted("source", 3, &ledger),
        };
        let options = SubscribeAsync::new()
            .window(2)
            .runtime(runtime.handle().clone());
        let handle = source.subscribe_async_with(options, AsyncHostile { moment });
        let what = format!("panic in {moment:?}");
        match on_thread("hooks: async handle", WAIT, move || {
            futures::executor::block_on(handle)
        }) {
            Ok(result) => check.panicked(&what, Some(result), Some("subscribe_async")),
            Err(why) => check.fail(format!("{what}: the handle {why}")),
        }
        if moment == Moment::Subscribe {
            check.cancelled(&what, &probe);
        }
        check.released(&what, &ledger);
    }
    check.done()
}

/// `Exporter::every`: "export now and then every `period` on `scheduler`, until the
/// returned handle is dropped". A recorder that panics in one export must not end
/// the periodic export (nor the scheduler): the next period exports again.
#[cfg(not(feature = "metrics"))]
fn exporter_recorder() -> Vec<String> {
    Vec::new() // no exporter without the feature
}

#[cfg(feature = "metrics")]
fn exporter_recorder() -> Vec<String> {
    use weir::metrics::export::Exporter;
    use weir::metrics::Registry;

    let mut check = Check::default();
    let registry = Registry::new();
    let items = weir::range(0u32..3)
        .name("hooks-export")
        .registry(&registry)
        .blocking_iter(1);
    let clock = VirtualTime::new();
    // The second export panics.
    let recorder = ExportCounter::panicking_at(2);
    let exports = recorder.exports.clone();
    let period = Duration::from_millis(1);
    let handle = metrics::with_local_recorder(&recorder, || {
        Exporter::new(&registry).every(period, clock.clone())
    });
    let advanced = metrics::with_local_recorder(&recorder, || {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            clock.advance(period); // the second export: it panics
            clock.advance(period);
            clock.advance(period);
        }))
    });
    check.expect(advanced.is_ok(), || {
        "the recorder's panic escaped from VirtualTime::advance".to_owned()
    });
    let n = exports.load(Ordering::SeqCst);
    check.expect(n == 4, || {
        format!("{n} exports after three periods (the second panicked); expected 4")
    });
    drop(handle);
    check.expect(items.count() == 3, || {
        "the named stage lost items".to_owned()
    });
    check.done()
}

/// A hub's subscriber that panics in `on_complete` (or `on_error`): rule 2.13 makes it
/// a cancel of that subscriber alone; the others still get their terminal signal and
/// every item; nothing stays alive.
fn hub_terminal(moment: Moment) -> Vec<String> {
    let mut check = Check::default();
    {
        let ledger = Ledger::new();
        let (source, probe) = counted("source", 100, &ledger);
        let source = match moment {
            Moment::Error => source
                .concat(weir::error::<Item>(Error::msg("upstream failed")))
                .boxed(),
            _ => source,
        };
        let hub = Hub::builder(source.map(Arc::new), 8).connect_at(3).build();
        let (a, seen_a) = Hostile::new(None);
        let (b, seen_b) = Hostile::new(Some(moment));
        let (c, seen_c) = Hostile::new(None);
        let what = format!("a subscriber panics in {moment:?}");
        let subscribing = on_thread("hooks: hub", WAIT, move || {
            hub.join(Policy::Backpressure).subscribe(a);
            hub.join(Policy::Backpressure).subscribe(b);
            hub.join(Policy::Backpressure).subscribe(c);
        });
        if let Err(why) = subscribing {
            check.fail(format!("{what}: subscribing {why}"));
        }
        for (name, seen) in [("a", &seen_a), ("c", &seen_c)] {
            let ended = wait_until(WAIT, || {
                seen.completed.load(Ordering::SeqCst) || seen.errored().is_some()
            });
            let items = seen.items.load(Ordering::SeqCst);
            let whole = match moment {
                Moment::Error => seen
                    .errored()
                    .is_some_and(|e| e.message() == "upstream failed"),
                _ => seen.completed.load(Ordering::SeqCst) && items == 100,
            };
            check.expect(ended && whole, || {
                format!(
                    "{what}: {name} got {items} items, completed {}, error {:?}",
                    seen.completed.load(Ordering::SeqCst),
                    seen.errored()
                )
            });
        }
        check.expect(seen_b.panicked.load(Ordering::SeqCst), || {
            format!("{what}: b never panicked")
        });
        check.expect(
            wait_until(WAIT, || {
                [&seen_a, &seen_b, &seen_c]
                    .iter()
                    .all(|seen| seen.dropped.load(Ordering::SeqCst))
            }),
            || format!("{what}: a subscriber was never dropped"),
        );
        check.expect(!probe.holding(), || format!("{what}: {}", probe.describe()));
        check.released(&what, &ledger);
    }
    check.done()
}

/// Where a [`Panicky`] transport panics.
#[derive(Clone, Copy, Debug)]
enum TransportPanic {
    /// In `receiver`, before anything of the mux exists.
    Receiver,
    /// In `connect`, before it subscribed anything.
    Connect,
    /// In `connect`, after it subscribed the frames (the worker is there).
    AfterConnecting,
}

/// A `mux::Transport` that carries the frames to a pool (as `mux::Local` does) and
/// panics at its [`TransportPanic`]; its frames go through a [`Watched`] subscriber.
struct Panicky {
    pool: ThreadPool,
    at: TransportPanic,
    frames_ended: Arc<AtomicBool>,
}

/// The demultiplexer, with a flag set when the frames end.
struct Watched {
    demux: weir::mux::Demux<u64>,
    ended: Arc<AtomicBool>,
}

impl Subscriber<weir::mux::ChannelFrame<u64>> for Watched {
    fn on_subscribe(&mut self, subscription: Subscription) {
        self.demux.on_subscribe(subscription);
    }
    fn on_next(&mut self, frame: weir::mux::ChannelFrame<u64>) {
        self.demux.on_next(frame);
    }
    fn on_error(&mut self, error: Error) {
        self.ended.store(true, Ordering::SeqCst);
        self.demux.on_error(error);
    }
    fn on_complete(&mut self) {
        self.ended.store(true, Ordering::SeqCst);
        self.demux.on_complete();
    }
}

impl weir::mux::Transport<u64> for Panicky {
    fn receiver(&self) -> Arc<dyn Scheduler> {
        assert!(
            !matches!(self.at, TransportPanic::Receiver),
            "{}",
            boom("a mux Transport's receiver")
        );
        Arc::new(self.pool.clone())
    }

    fn connect(self, frames: weir::mux::Frames<u64>, demux: weir::mux::Demux<u64>) {
        assert!(
            !matches!(self.at, TransportPanic::Connect),
            "{}",
            boom("a mux Transport's connect")
        );
        let watched = Watched {
            demux,
            ended: self.frames_ended.clone(),
        };
        frames.publish_on(self.pool, 16).subscribe(watched);
        panic!("{}", boom("a mux Transport's connect, after connecting"));
    }
}

/// `MuxBuilder::build` with a transport that panics in `receiver`, in `connect`, or
/// in `connect` after it subscribed the frames: `MuxError::Transport` with the
/// panic's message, never an unwinding `build`; frames already subscribed end (the
/// mux winds down as with its last handle gone), and the pools still run tasks.
fn mux_transport() -> Vec<String> {
    let mut check = Check::default();
    for at in [
        TransportPanic::Receiver,
        TransportPanic::Connect,
        TransportPanic::AfterConnecting,
    ] {
        let worker = pool("hooks-mux-worker", 1);
        let receiving = pool("hooks-mux-receiver", 1);
        let frames_ended = Arc::new(AtomicBool::new(false));
        let transport = Panicky {
            pool: receiving.clone(),
            at,
            frames_ended: frames_ended.clone(),
        };
        let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            weir::mux::Mux::<u64>::builder().build(worker.clone(), transport)
        }));
        match built {
            Err(panic) => check.fail(format!(
                "{at:?}: build unwound: {}",
                panic_message(panic.as_ref())
            )),
            Ok(Ok(_)) => check.fail(format!("{at:?}: build returned a mux")),
            Ok(Err(weir::mux::MuxError::Transport { reason })) => check
                .expect(reason.contains(DELIBERATE), || {
                    format!("{at:?}: the error does not carry the panic's message: {reason}")
                }),
            Ok(Err(other)) => check.fail(format!("{at:?}: build returned {other:?}")),
        }
        if let TransportPanic::AfterConnecting = at {
            check.expect(
                wait_until(WAIT, || frames_ended.load(Ordering::SeqCst)),
                || format!("{at:?}: the frames never ended"),
            );
        }
        check.pool_runs("the mux's worker pool", &worker);
        check.pool_runs("the mux's receiving pool", &receiving);
    }
    check.done()
}

/// `from_stream_on(stream, pool)`: "a panic in its `poll_next` becomes `on_error` of
/// kind `Panicked`", the stream is dropped, and the pool's worker goes on.
fn stream_on_pool() -> Vec<String> {
    use futures::StreamExt as _;

    let mut check = Check::default();
    let pool = pool("hooks-stream", 1);
    let ledger = Ledger::new();
    let produce = ledger.clone();
    let stream = futures::stream::iter(0..BIG).map(move |value| {
        assert!(value != 3, "{}", boom("a Stream's poll_next"));
        produce.produce(value)
    });
    let handle = weir::from_stream_on(stream, pool.clone()).collect();
    check.panicked("from_stream_on", ended(handle), Some("from_stream"));
    check.released("from_stream_on", &ledger);
    check.pool_runs("from_stream_on", &pool);
    check.done()
}

/// A future that panics when polled for item 2.
struct Fragile(Option<Item>);

impl Future for Fragile {
    type Output = Item;

    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Item> {
        let item = self.0.take().expect("polled after it was ready");
        assert!(item.value != 2, "{}", boom("a Future's poll"));
        Poll::Ready(item)
    }
}

/// `map_async_on(pool, ..)`: "a panic in `f` or in a future's `poll` fails the stage
/// with a `Panicked` error and cancels upstream"; the pool's worker goes on.
fn future_on_pool() -> Vec<String> {
    let mut check = Check::default();
    let pool = pool("hooks-future", 1);
    let ledger = Ledger::new();
    let (source, probe) = counted("source", BIG, &ledger);
    let handle = source
        .map_async_on(pool.clone(), 2, true, |item| Fragile(Some(item)))
        .collect();
    check.panicked("map_async_on", ended(handle), Some("map_async"));
    check.cancelled("map_async_on", &probe);
    check.released("map_async_on", &ledger);
    check.pool_runs("map_async_on", &pool);
    check.done()
}

// ---- a publisher that panics in subscribe ------------------------------------------------

/// A publisher whose `subscribe` panics (dropping the subscriber it was given).
struct Refuses;

impl Publisher for Refuses {
    type Item = Item;

    fn subscribe<S>(self, _subscriber: S)
    where
        S: Subscriber<Item> + Send + 'static,
    {
        panic!("{}", boom("a publisher's subscribe"));
    }
}

#[test]
fn a_publisher_that_panics_in_subscribe_fails_the_stage_that_subscribes_it() {
    run_cases(
        "publishers that panic in subscribe",
        &[
            ("zip's other source", refused_by_zip),
            ("weir::merge's second source", refused_by_merge_all),
            ("a concat_map inner", refused_by_concat_map),
            ("flat_map's outer source", refused_as_flat_maps_outer),
            ("concat_map's outer source", refused_as_concat_maps_outer),
            ("subscribe_on's source", refused_by_subscribe_on),
            ("a hub's upstream", refused_by_hub),
            ("a mux channel's sending publisher", refused_by_mux),
        ],
    );
}

/// Sinks subscribe on the caller's thread (`into_stream` on its first poll), so a
/// publisher that panics in `subscribe` panics there, as every sink documents; what
/// must not happen is something left waiting for ever: a stream polled again ends
/// with `Cancelled`, and `subscribe_async`'s task ends and drops its subscriber (it
/// waited for a subscription for ever, holding the subscriber, until it learned to).
#[test]
fn a_publisher_that_panics_in_subscribe_panics_in_the_sinks_caller_and_nothing_waits() {
    run_cases(
        "sinks over a publisher that panics in subscribe",
        &[
            ("collect", || {
                caller_panics("collect", || drop(Refuses.collect()))
            }),
            ("blocking_iter", || {
                caller_panics("blocking_iter", || drop(Refuses.blocking_iter(4)))
            }),
            ("into_stream", into_stream_refused),
            ("subscribe_async", subscribe_async_refused),
        ],
    );
}

/// `subscribe` runs `f`; its panic must reach this caller, with the publisher's
/// message.
fn caller_panics(what: &str, f: impl FnOnce()) -> Vec<String> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(()) => vec![format!(
            "{what}: the publisher's panic did not reach the caller"
        )],
        Err(payload) if panic_message(&*payload).contains("a publisher's subscribe") => Vec::new(),
        Err(payload) => vec![format!(
            "{what}: another panic reached the caller: {}",
            panic_message(&*payload)
        )],
    }
}

fn into_stream_refused() -> Vec<String> {
    use futures::StreamExt as _;
    let mut stream = Refuses.into_stream(4);
    let mut failures = caller_panics("into_stream's first poll", || {
        drop(futures::executor::block_on(stream.next()))
    });
    let again = on_thread("poll again", WAIT, move || {
        futures::executor::block_on(stream.next()).map(|r| r.map(|_| ()))
    });
    match again {
        Ok(Some(Err(error))) if error.kind() == ErrorKind::Cancelled => {}
        other => failures.push(format!(
            "into_stream polled again: expected an error of kind Cancelled, got {other:?}"
        )),
    }
    failures
}

fn subscribe_async_refused() -> Vec<String> {
    struct Holder(Arc<AtomicBool>);
    impl Drop for Holder {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    #[weir::bridge::async_trait]
    impl AsyncSubscriber<Item> for Holder {
        async fn on_next(&mut self, _item: Item) -> Result<(), Error> {
            Ok(())
        }
    }
    let runtime = tokio_runtime("hooks-subscribe-async");
    let dropped = Arc::new(AtomicBool::new(false));
    let holder = Holder(dropped.clone());
    let options = SubscribeAsync::new().runtime(runtime.handle().clone());
    let mut failures = caller_panics("subscribe_async", || {
        drop(Refuses.subscribe_async_with(options, holder))
    });
    if !wait_until(WAIT, || dropped.load(Ordering::SeqCst)) {
        failures.push("subscribe_async: the task still holds the subscriber".to_owned());
    }
    failures
}

/// The end every case expects: an error of kind `Panicked` downstream (the stage
/// subscribed the publisher, so it is the stage's to report: "a panic in ... becomes
/// an error of kind `Panicked`"), the other sources cancelled, every item dropped.
fn refused_case(
    what: &str,
    build: impl FnOnce(BoxPublisher<Item>) -> BoxPublisher<Item>,
) -> Vec<String> {
    let mut check = Check::default();
    let ledger = Ledger::new();
    let (source, probe) = counted("source", BIG, &ledger);
    let handle = build(source).collect();
    match ended(handle) {
        Some(Err(error)) if error.kind() == ErrorKind::Panicked => {}
        other => check.fail(format!("{what}: expected a Panicked error, got {other:?}")),
    }
    if probe.subscribed() {
        check.cancelled(what, &probe);
    }
    check.released(what, &ledger);
    check.done()
}

fn refused_by_zip() -> Vec<String> {
    refused_case("zip", |s| s.zip(Refuses, |a, _b| a).boxed())
}

fn refused_by_merge_all() -> Vec<String> {
    refused_case("weir::merge", |s| weir::merge([s, Refuses.boxed()]).boxed())
}

fn refused_by_concat_map() -> Vec<String> {
    refused_case("concat_map", |s| {
        s.concat_map(
            |item: Item| match item.value {
                2 => Refuses.boxed(),
                _ => weir::just(item).boxed(),
            },
            4,
        )
        .boxed()
    })
}

/// The outer source of `flat_map`/`concat_map` is subscribed in the stage's start,
/// on the subscribing thread: its panic ends the stream with a `Panicked` error, as
/// zip's and merge's do (it went to the sink's caller with the stage's drain loop
/// left owned before).
fn refused_as_flat_maps_outer() -> Vec<String> {
    refused_outer("flat_map", |outer| {
        outer.flat_map(weir::just, 4, 16).boxed()
    })
}

fn refused_as_concat_maps_outer() -> Vec<String> {
    refused_outer("concat_map", |outer| {
        outer.concat_map(weir::just, 16).boxed()
    })
}

fn refused_outer(what: &str, build: impl FnOnce(Refuses) -> BoxPublisher<Item>) -> Vec<String> {
    let mut check = Check::default();
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| build(Refuses).collect())) {
        Ok(handle) => match ended(handle) {
            Some(Err(error)) if error.kind() == ErrorKind::Panicked => {}
            other => check.fail(format!("{what}: expected a Panicked error, got {other:?}")),
        },
        Err(payload) => check.fail(format!(
            "{what}: the outer source's panic reached the subscribing thread: {}",
            panic_message(&*payload)
        )),
    }
    check.done()
}

/// `subscribe_on`: the source is subscribed on a pool worker, which must survive.
fn refused_by_subscribe_on() -> Vec<String> {
    let mut check = Check::default();
    let pool = pool("hooks-subscribe-on", 1);
    let handle = Refuses.subscribe_on(pool.clone()).collect();
    match ended(handle) {
        Some(Err(error)) if error.kind() == ErrorKind::Panicked => {}
        other => check.fail(format!("expected a Panicked error, got {other:?}")),
    }
    check.pool_runs("subscribe_on", &pool);
    check.done()
}

/// A hub connects its upstream when the `connect_at`th subscriber arrives: every
/// subscriber must end (with an error), none may wait for ever.
fn refused_by_hub() -> Vec<String> {
    let mut check = Check::default();
    let hub = Hub::builder(Refuses.map(Arc::new), 8).connect_at(2).build();
    let (a, seen_a) = Hostile::new(None);
    let (b, seen_b) = Hostile::new(None);
    let subscribing = on_thread("hooks: hub", WAIT, move || {
        hub.join(Policy::Backpressure).subscribe(a);
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            hub.join(Policy::Backpressure).subscribe(b)
        }))
        .is_err()
    });
    if let Err(why) = subscribing {
        check.fail(format!("subscribing {why}"));
    }
    for (name, seen) in [("a", &seen_a), ("b", &seen_b)] {
        let ended = wait_until(WAIT, || {
            seen.errored().is_some() || seen.dropped.load(Ordering::SeqCst)
        });
        check.expect(ended, || {
            format!("subscriber {name} never ended nor was dropped")
        });
        if let Some(error) = seen.errored() {
            check.expect(error.kind() == ErrorKind::Panicked, || {
                format!("subscriber {name}: {error}")
            });
        }
    }
    check.done()
}

/// `via(mux, id)`: the channel's sending side subscribes the publisher; its panic
/// must end the channel's receiving side, and the mux must go on serving others.
fn refused_by_mux() -> Vec<String> {
    let mut check = Check::default();
    let pool = pool("hooks-mux", 2);
    let mux = weir::mux::Mux::builder()
        .exclusive(4)
        .shared(8)
        .borrow_cap(2)
        .build_local(pool.clone(), pool.clone())
        .unwrap();
    let via = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Refuses.via(&mux, 0)));
    if let Ok(Ok(channel)) = via {
        match ended(channel.collect()) {
            Some(Err(_)) => {}
            other => check.fail(format!("channel 0 ended with {other:?}, expected an error")),
        }
    }
    let ledger = Ledger::new();
    let (source, _probe) = counted("source", 100, &ledger);
    match source.via(&mux, 1).map(|channel| ended(channel.collect())) {
        Ok(Some(Ok(items))) => {
            check.expect(items.len() == 100, || format!("{} items", items.len()))
        }
        other => check.fail(format!("another channel of the mux: {other:?}")),
    }
    check.released("mux", &ledger);
    check.pool_runs("mux", &pool);
    check.done()
}

// ---- a subscription that panics in request or cancel ------------------------------------

/// What a [`Touchy`] subscription does wrong.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// Its `k`th `request` panics (the demand is lost).
    Request(u64),
    /// Its `cancel` cancels, then panics.
    Cancel,
}

/// A source whose subscription panics as its [`Fault`] says.
struct Touchy<P> {
    source: P,
    fault: Fault,
}

struct TouchySubscriber<S> {
    down: S,
    fault: Fault,
}

struct TouchySubscription {
    up: Subscription,
    fault: Fault,
    requests: AtomicU64,
}

impl RawSubscription for TouchySubscription {
    fn request(&self, n: u64) {
        let k = self.requests.fetch_add(1, Ordering::SeqCst) + 1;
        if let Fault::Request(at) = self.fault {
            assert!(k != at, "{}", boom("a Subscription's request"));
        }
        self.up.request(n);
    }

    fn cancel(&self) {
        self.up.cancel();
        if let Fault::Cancel = self.fault {
            panic!("{}", boom("a Subscription's cancel"));
        }
    }
}

impl<P: Publisher> Publisher for Touchy<P> {
    type Item = P::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<P::Item> + Send + 'static,
    {
        self.source.subscribe(TouchySubscriber {
            down: subscriber,
            fault: self.fault,
        })
    }
}

impl<T, S: Subscriber<T>> Subscriber<T> for TouchySubscriber<S> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        self.down
            .on_subscribe(Subscription::new(Arc::new(TouchySubscription {
                up: subscription,
                fault: self.fault,
                requests: AtomicU64::new(0),
            })));
    }

    fn on_next(&mut self, item: T) {
        self.down.on_next(item);
    }

    fn on_error(&mut self, error: Error) {
        self.down.on_error(error);
    }

    fn on_complete(&mut self) {
        self.down.on_complete();
    }
}

/// A stage over a (touchy) source, on the case's pool.
type Wrap = fn(BoxPublisher<Item>, &ThreadPool, BoxPublisher<Item>) -> BoxPublisher<Item>;

/// The stages that call their upstream's `request` or `cancel` from threads of their
/// own (a pool worker, another source's thread); the third argument is a second,
/// well-behaved source for the stages that take two.
const WRAPPERS: [(&str, Wrap); 10] = [
    ("publish_on(pool, 4)", |s, pool, _| {
        s.publish_on(pool.clone(), 4).boxed()
    }),
    ("subscribe_on(pool)", |s, pool, _| {
        s.subscribe_on(pool.clone()).boxed()
    }),
    ("merge", |s, _, other| s.merge(other).boxed()),
    ("zip", |s, _, other| s.zip(other, |a, _b| a).boxed()),
    ("flat_map(just, 2, 2)", |s, _, _| {
        s.flat_map(weir::just, 2, 2).boxed()
    }),
    ("buffer(4) then publish_on", |s, pool, _| {
        s.buffer(4)
            .publish_on(pool.clone(), 2)
            .map(|mut batch| batch.swap_remove(0))
            .boxed()
    }),
    ("sample_on(1ms, pool)", |s, pool, _| {
        s.sample_on(Duration::from_millis(1), pool.clone()).boxed()
    }),
    ("timeout_on(60s, pool)", |s, pool, _| {
        s.timeout_on(Duration::from_secs(60), pool.clone())
            .publish_on(pool.clone(), 4)
            .boxed()
    }),
    ("map_async_on(pool, 2)", |s, pool, _| {
        s.map_async_on(pool.clone(), 2, true, |item| async move { item })
            .boxed()
    }),
    ("share(16)", |s, _, _| {
        s.map(Arc::new)
            .share(16)
            .map(|shared| shared.derive(shared.value))
            .boxed()
    }),
];

/// A source whose subscription panics in its second `request`, or in `cancel`,
/// behind every stage of [`WRAPPERS`]. No promise covers such a source (rules 3.15
/// and 3.16 are a documented skip), so the checks are the general ones: the pipeline
/// ends (a terminal signal, or the sink told it was dropped), nothing stays alive,
/// the sources are released, and the pool that ran the panicking call still runs a
/// task.
#[test]
fn a_subscription_that_panics_in_request_or_cancel_ends_the_pipeline() {
    silence_deliberate_panics();
    let cases: Vec<(&str, Wrap, Fault)> = WRAPPERS
        .iter()
        .flat_map(|&(name, wrap)| [Fault::Request(2), Fault::Cancel].map(|f| (name, wrap, f)))
        .collect();
    let failures = run_rows(&cases, 4, |&(name, wrap, fault)| {
        guarded(name, DEADLINE, move || touchy_check(wrap, fault))
            .into_iter()
            .map(|f| format!("{name} ({fault:?}): {f}"))
            .collect()
    });
    assert_no_failures("subscriptions that panic", cases.len(), &failures);
}

fn touchy_check(wrap: Wrap, fault: Fault) -> Vec<String> {
    let mut check = Check::default();
    let pool = pool("hooks-touchy", 2);
    let ledger = Ledger::new();
    let (source, probe) = counted("touchy source", BIG, &ledger);
    let (other, other_probe) = counted("other source", BIG, &ledger);
    let touchy = Touchy { source, fault }.boxed();
    let pipeline = wrap(touchy, &pool, other);
    let subscribed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match fault {
        Fault::Request(_) => pipeline.for_each_with(8, drop),
        Fault::Cancel => pipeline.take(3).for_each_with(8, drop),
    }));
    match subscribed {
        Ok(handle) => {
            if ended(handle).is_none() {
                check.fail(format!("the sink did not end within {WAIT:?}"));
            }
        }
        Err(payload) => {
            // The subscriber's own thread made the call that panicked (the user's
            // request through stages that forward it): the user's panic is theirs.
            let _ = panic_message(&*payload);
        }
    }
    for probe in [&probe, &other_probe] {
        if !wait_until(WAIT, || !probe.holding()) {
            check.fail(format!("not released: {}", probe.describe()));
        }
    }
    check.released("the pipeline", &ledger);
    check.pool_runs("the pipeline's pool", &pool);
    probe.stop();
    other_probe.stop();
    check.done()
}

// ---- an item whose Drop panics -----------------------------------------------------------

/// Counts the [`Bomb`]s of one case; `target` panics in its `Drop` once, while armed.
#[derive(Debug)]
struct Bombs {
    live: AtomicI64,
    armed: AtomicBool,
    exploded: AtomicBool,
    target: u64,
}

/// An item counted by its [`Bombs`], whose `Drop` may panic.
#[derive(Debug)]
struct Bomb {
    value: u64,
    bombs: Arc<Bombs>,
}

impl Bombs {
    fn new(target: u64) -> Arc<Bombs> {
        Arc::new(Bombs {
            live: AtomicI64::new(0),
            armed: AtomicBool::new(true),
            exploded: AtomicBool::new(false),
            target,
        })
    }

    fn make(self: &Arc<Self>, value: u64) -> Bomb {
        self.live.fetch_add(1, Ordering::SeqCst);
        Bomb {
            value,
            bombs: self.clone(),
        }
    }

    fn live(&self) -> i64 {
        self.live.load(Ordering::SeqCst)
    }
}

impl Drop for Bomb {
    fn drop(&mut self) {
        let bombs = &self.bombs;
        bombs.live.fetch_sub(1, Ordering::SeqCst);
        if self.value == bombs.target && bombs.armed.swap(false, Ordering::SeqCst) {
            bombs.exploded.store(true, Ordering::SeqCst);
            panic!("{}", boom("an item's Drop"));
        }
    }
}

/// How a case consumes: everything, slowly (so that lossy stages drop), or the first
/// item and then cancel (so that holding stages release what they hold).
#[derive(Clone, Copy, Debug)]
enum Consumer {
    All,
    Slowly,
    First,
}

/// A stage over bomb sources (a maker of tapped sources of `BIG` bombs), on a pool.
type BombStage = fn(&dyn Fn() -> BoxPublisher<Bomb>, &ThreadPool) -> BoxPublisher<Bomb>;

/// Stages that drop items themselves: the bomb that panics, and how it gets dropped.
const BOMB_STAGES: [(&str, BombStage, u64, Consumer); 13] = [
    (
        "filter (swallows it)",
        |s, _| s().filter(|b| b.value != 1).boxed(),
        1,
        Consumer::All,
    ),
    (
        "skip(2) (skips it)",
        |s, _| s().skip(2).boxed(),
        0,
        Consumer::All,
    ),
    (
        "on_backpressure_drop (drops it)",
        |s, _| s().on_backpressure_drop().boxed(),
        20,
        Consumer::Slowly,
    ),
    (
        "on_backpressure_latest (replaces it)",
        |s, _| s().on_backpressure_latest().boxed(),
        20,
        Consumer::Slowly,
    ),
    (
        "conflate_latest (replaces it)",
        |s, _| s().conflate_latest().boxed(),
        20,
        Consumer::Slowly,
    ),
    (
        "on_backpressure_buffer(2, DropOldest)",
        |s, _| s().on_backpressure_buffer(2, Overflow::DropOldest).boxed(),
        20,
        Consumer::Slowly,
    ),
    (
        "sample_on(1ms, pool) (replaces it)",
        |s, pool| {
            s().sample_on(Duration::from_millis(1), pool.clone())
                .boxed()
        },
        20,
        Consumer::Slowly,
    ),
    (
        // Behind a boundary of 1, so that the stage holds the rest of the source's
        // batch (a cancel inside the batch itself releases the rest unread: the
        // bomb would never be made).
        "on_backpressure_buffer(64, Error).publish_on(pool, 1) (holds it, releases it on cancel)",
        |s, pool| {
            s().on_backpressure_buffer(64, Overflow::Error)
                .publish_on(pool.clone(), 1)
                .boxed()
        },
        5,
        Consumer::First,
    ),
    (
        "zip (releases it on cancel)",
        |s, _| s().zip(s(), |a, _b| a).boxed(),
        5,
        Consumer::First,
    ),
    (
        "merge (releases it on cancel)",
        |s, _| s().merge(s()).boxed(),
        100,
        Consumer::First,
    ),
    (
        "flat_map(just, 4, 8) (releases it on cancel)",
        |s, _| s().flat_map(weir::just, 4, 8).boxed(),
        2,
        Consumer::First,
    ),
    (
        "map_async_on(pool, 8) (releases it on cancel)",
        |s, pool| {
            s().map_async_on(pool.clone(), 8, true, |b| async move { b })
                .boxed()
        },
        5,
        Consumer::First,
    ),
    (
        "share(16) (releases it on cancel)",
        |s, _| {
            s().map(Arc::new)
                .share(16)
                .map(|b| b.bombs.make(b.value + BIG))
                .boxed()
        },
        5,
        Consumer::First,
    ),
];

/// A bomb that panics in `Drop` when a stage drops it (swallowed, skipped, dropped
/// or replaced by a lossy stage, released by a holding stage on cancel). Nothing
/// promises what the stage then signals, so the checks are the general ones: the
/// pipeline ends, every other item is dropped exactly once (the count ends at zero,
/// never below), the sources are released and the pool still runs a task.
#[test]
fn an_item_whose_drop_panics_is_contained() {
    silence_deliberate_panics();
    let cases: Vec<(&str, BombStage, u64, Consumer)> = BOMB_STAGES.to_vec();
    let failures = run_rows(&cases, 4, |&(name, stage, target, consumer)| {
        guarded(name, DEADLINE, move || bomb_check(stage, target, consumer))
            .into_iter()
            .map(|f| format!("{name}: {f}"))
            .collect()
    });
    assert_no_failures("items whose Drop panics", cases.len(), &failures);
}

/// An item whose `Clone` panics once, for the item of value `at` (every clone is a
/// counted item of its own).
struct Brittle {
    item: Item,
    ledger: Arc<Ledger>,
    at: u64,
    fuse: Arc<AtomicBool>,
}

impl Clone for Brittle {
    fn clone(&self) -> Self {
        if self.item.value == self.at && self.fuse.swap(false, Ordering::SeqCst) {
            panic!("{}", boom("an item's Clone"));
        }
        Brittle {
            item: self.ledger.produce(self.item.value),
            ledger: self.ledger.clone(),
            at: self.at,
            fuse: self.fuse.clone(),
        }
    }
}

/// `share`: the items' `Clone` runs in a subscriber's pass, under the hub's lock. A
/// `Clone` that panics ends that subscriber with `Panicked` naming `share` (not as if
/// the subscriber had panicked: it gets the error), and the other subscriber, a
/// `Backpressure` one too, still gets every item, in order; upstream completes, and
/// every item (originals and clones) is dropped.
#[test]
fn an_item_whose_clone_panics_ends_only_the_hub_subscriber_it_was_cloned_for() {
    silence_deliberate_panics();
    let failures = guarded("share, Clone", DEADLINE, || {
        let mut check = Check::default();
        let ledger = Ledger::new();
        let (source, probe) = counted("source", 100, &ledger);
        let fuse = Arc::new(AtomicBool::new(true));
        let brittle = {
            let (ledger, fuse) = (ledger.clone(), fuse.clone());
            move |item: Item| Brittle {
                item,
                ledger: ledger.clone(),
                at: 5,
                fuse: fuse.clone(),
            }
        };
        let hub = Hub::builder(source.map(brittle), 16).connect_at(2).build();
        let values = |items: Vec<Brittle>| items.iter().map(|b| b.item.value).collect::<Vec<_>>();
        let first = hub.clone().collect();
        let second = hub.clone().collect();
        let ends = [ended(first), ended(second)];
        let (mut failed, mut complete) = (0, 0);
        for end in ends {
            match end {
                Some(Err(error)) => {
                    failed += 1;
                    check.panicked("share", Some(Err::<(), _>(error)), Some("share"));
                }
                Some(Ok(items)) => {
                    complete += 1;
                    let got = values(items);
                    check.expect(got == (0..100).collect::<Vec<_>>(), || {
                        format!("the other subscriber got {} items: {got:?}", got.len())
                    });
                }
                None => check.fail(format!("a subscriber did not end within {WAIT:?}")),
            }
        }
        check.expect(failed == 1 && complete == 1, || {
            format!("{failed} subscribers failed and {complete} completed; expected one each")
        });
        check.expect(!fuse.load(Ordering::SeqCst), || {
            "the Clone never panicked (the case checks nothing)".to_owned()
        });
        check.expect(wait_until(WAIT, || probe.completed()), || {
            format!("upstream did not complete: {}", probe.describe())
        });
        drop(hub);
        check.released("share", &ledger);
        check.done()
    });
    assert_no_failures("an item's Clone that panics", 1, &failures);
}

fn bomb_check(stage: BombStage, target: u64, consumer: Consumer) -> Vec<String> {
    let mut check = Check::default();
    let pool = pool("hooks-bombs", 2);
    let bombs = Bombs::new(target);
    let probes = Arc::new(Mutex::new(Vec::new()));
    let len = match consumer {
        Consumer::All => 16,
        _ => BIG,
    };
    let make = {
        let (bombs, probes) = (bombs.clone(), probes.clone());
        move || {
            let probe = SourceProbe::new("bombs");
            probes.lock().unwrap().push(probe.clone());
            let bombs = bombs.clone();
            Tap::new(weir::range(0..len).map(move |v| bombs.make(v)), probe).boxed()
        }
    };
    let pipeline = stage(&make, &pool);
    let subscribed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match consumer {
        Consumer::All => pipeline.for_each(drop),
        Consumer::Slowly => pipeline
            .publish_on(pool.clone(), 1)
            .for_each_with(1, |bomb| {
                drop(bomb);
                std::thread::sleep(Duration::from_micros(200));
            }),
        Consumer::First => pipeline.take(1).for_each_with(1, drop),
    }));
    match subscribed {
        Ok(handle) => {
            if ended(handle).is_none() {
                check.fail(format!("the sink did not end within {WAIT:?}"));
            }
        }
        Err(payload) => check.fail(format!(
            "the panic escaped into the subscribing thread: {}",
            panic_message(&*payload)
        )),
    }
    // (A stage may release what it holds on its own thread, after the sink ended.)
    let exploded = wait_until(WAIT, || bombs.exploded.load(Ordering::SeqCst));
    check.expect(exploded, || {
        format!("bomb {target} was never dropped (the case checks nothing)")
    });
    let probes = probes.lock().unwrap().clone();
    for probe in &probes {
        if !wait_until(WAIT, || !probe.holding()) {
            check.fail(format!("not released: {}", probe.describe()));
        }
    }
    if !wait_until(WAIT, || bombs.live() <= 0) || bombs.live() != 0 {
        check.fail(format!(
            "{} items alive (negative: dropped twice)",
            bombs.live()
        ));
    }
    check.pool_runs("the case's pool", &pool);
    for probe in probes {
        probe.stop();
    }
    check.done()
}

// ---- a scheduler that panics in schedule ---------------------------------------------------

/// Which of a [`Flaky`] scheduler's hooks panics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flake {
    /// `schedule`, `schedule_after` or `schedule_timer` (dropping the task it was
    /// given).
    Schedule,
    /// `now`.
    Clock,
    /// `lane` (a stage asks for its lane once per subscription).
    Lane,
    /// The lane's `queue` (the pool's own lane behind it).
    Queue,
    /// `has_waiting_tasks` (a lingering stage's hint).
    Hint,
}

/// A scheduler over a pool whose `at`th call of the `hook` (counted across clones)
/// panics. Its lane queues each run through its own `schedule` (as the default lane
/// does), except with [`Flake::Queue`], where it is the pool's lane behind the panic.
#[derive(Clone)]
struct Flaky {
    pool: ThreadPool,
    calls: Arc<AtomicU64>,
    at: u64,
    hook: Flake,
}

impl Flaky {
    fn call(&self, hook: Flake, what: &str) {
        if self.hook == hook {
            let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
            assert!(n != self.at, "{}", boom(what));
        }
    }
}

impl Scheduler for Flaky {
    fn schedule(&self, task: Task) {
        self.call(Flake::Schedule, "a Scheduler's schedule");
        self.pool.schedule(task);
    }

    fn schedule_after(&self, delay: Duration, task: Task) {
        self.call(Flake::Schedule, "a Scheduler's schedule_after");
        self.pool.schedule_after(delay, task);
    }

    fn schedule_timer(&self, delay: Duration, task: Task) -> TimerHandle {
        self.call(Flake::Schedule, "a Scheduler's schedule_timer");
        self.pool.schedule_timer(delay, task)
    }

    fn now(&self) -> Instant {
        self.call(Flake::Clock, "a Scheduler's now");
        self.pool.now()
    }

    fn has_waiting_tasks(&self) -> bool {
        self.call(Flake::Hint, "a Scheduler's has_waiting_tasks");
        self.pool.has_waiting_tasks()
    }

    fn lane(&self) -> Box<dyn Lane> {
        self.call(Flake::Lane, "a Scheduler's lane");
        Box::new(FlakyLane {
            pool_lane: (self.hook == Flake::Queue).then(|| self.pool.lane()),
            flaky: self.clone(),
        })
    }
}

/// [`Flaky`]'s lane (see there).
struct FlakyLane {
    pool_lane: Option<Box<dyn Lane>>,
    flaky: Flaky,
}

impl Lane for FlakyLane {
    fn queue(&self, on: &dyn Scheduler, task: Arc<dyn Recurring>) {
        match &self.pool_lane {
            Some(lane) => {
                self.flaky.call(Flake::Queue, "a Lane's queue");
                lane.queue(&self.flaky.pool, task);
            }
            None => {
                let run = RunOnce(Some(task));
                on.schedule(Box::new(move || run.run()));
            }
        }
    }
}

/// One queued run of a recurring task: run, or abandoned when dropped unrun (the
/// lane contract).
struct RunOnce(Option<Arc<dyn Recurring>>);

impl RunOnce {
    fn run(mut self) {
        if let Some(task) = self.0.take() {
            task.run();
        }
    }
}

impl Drop for RunOnce {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abandon();
        }
    }
}

/// A stage over a counted source, on a [`Flaky`] scheduler.
type OnFlaky = fn(BoxPublisher<Item>, Flaky, &Arc<Ledger>) -> BoxPublisher<Item>;

/// Every stage that takes a scheduler.
const SCHEDULED: [(&str, OnFlaky); 12] = [
    ("publish_on(flaky, 16)", |s, c, _| {
        s.publish_on(c, 16).boxed()
    }),
    ("subscribe_on(flaky)", |s, c, _| s.subscribe_on(c).boxed()),
    ("sample_on(1ms, flaky)", |s, c, _| {
        s.sample_on(Duration::from_millis(1), c).boxed()
    }),
    ("debounce_on(1ms, flaky)", |s, c, _| {
        s.debounce_on(Duration::from_millis(1), c).boxed()
    }),
    ("timeout_on(60s, flaky)", |s, c, _| {
        s.timeout_on(Duration::from_secs(60), c).boxed()
    }),
    ("buffer_timeout_on(7, 1ms, flaky)", |s, c, _| {
        s.buffer_timeout_on(7, Duration::from_millis(1), c)
            .map(|mut batch| batch.swap_remove(0))
            .boxed()
    }),
    ("throttle_on(10^6/s, 64, Shaping, flaky)", |s, c, _| {
        let rate = weir::operators::Rate::per_second(1_000_000);
        s.throttle_on(rate, 64, weir::operators::ThrottleMode::Shaping, c)
            .boxed()
    }),
    ("throttle_on(10^6/s, 64, Enforcing, flaky)", |s, c, _| {
        let rate = weir::operators::Rate::per_second(1_000_000);
        s.throttle_on(rate, 64, weir::operators::ThrottleMode::Enforcing, c)
            .boxed()
    }),
    ("map_async_on(flaky, 2)", |s, c, _| {
        s.map_async_on(c, 2, true, |item| async move { item })
            .boxed()
    }),
    ("from_stream_on(flaky)", |s, c, _| {
        let items = futures::StreamExt::filter_map(s.into_stream(4), |r| async move { r.ok() });
        weir::from_stream_on(items, c).boxed()
    }),
    ("interval_on(50µs, flaky)", |_, c, ledger| {
        let ledger = ledger.clone();
        weir::interval_on(Duration::from_micros(50), c)
            .take(50)
            .map(move |tick| ledger.derived(tick))
            .boxed()
    }),
    ("timer_on(1ms, flaky)", |_, c, ledger| {
        let ledger = ledger.clone();
        weir::timer_on(Duration::from_millis(1), c)
            .map(move |tick| ledger.derived(tick))
            .boxed()
    }),
];

/// A user `Scheduler` whose `schedule` panics at its first or third call, under every
/// stage that takes a scheduler. No promise covers it beyond the general ones: the
/// pipeline ends (an error, or the sink told it was dropped), upstream is released,
/// nothing stays alive, the pool behind it still runs a task.
#[test]
fn a_scheduler_that_panics_in_schedule_ends_the_pipeline() {
    silence_deliberate_panics();
    let cases: Vec<(&str, OnFlaky, u64)> = SCHEDULED
        .iter()
        .flat_map(|&(name, stage)| [1, 3].map(|at| (name, stage, at)))
        .collect();
    let failures = run_rows(&cases, 4, |&(name, stage, at)| {
        guarded(name, DEADLINE, move || {
            flaky_check(stage, at, Flake::Schedule)
        })
        .into_iter()
        .map(|f| format!("{name} (call {at} panics): {f}"))
        .collect()
    });
    assert_no_failures("schedulers that panic", cases.len(), &failures);
}

/// A user `Scheduler` whose clock (`now`) panics at its first, second, third or
/// fifth reading, under every stage that takes a scheduler: wherever the stage reads
/// it (at its start, in a pass, on upstream's thread, when a timer fires), the same
/// general promises hold, and a pipeline that ends with an error ends with the
/// clock's panic (kind `Panicked`). Found with it: a panic in a stage's start (a
/// time stage's first reading) left the stage's drain loop owned for ever; a panic
/// when a timer fired was lost with the timer (`timeout` never timed out again);
/// a panic in a time stage's or `publish_on`'s pass, or on upstream's thread, was
/// taken for the subscriber's (the sink was told `Cancelled`).
#[test]
fn a_scheduler_whose_clock_panics_ends_the_pipeline() {
    silence_deliberate_panics();
    let cases: Vec<(&str, OnFlaky, u64)> = SCHEDULED
        .iter()
        .flat_map(|&(name, stage)| [1, 2, 3, 5].map(|at| (name, stage, at)))
        .collect();
    let failures = run_rows(&cases, 4, |&(name, stage, at)| {
        guarded(name, DEADLINE, move || flaky_check(stage, at, Flake::Clock))
            .into_iter()
            .map(|f| format!("{name} (reading {at} panics): {f}"))
            .collect()
    });
    assert_no_failures("clocks that panic", cases.len(), &failures);
}

/// A user `Scheduler` whose `lane`, whose lane's `queue`, or whose
/// `has_waiting_tasks` hint panics (at its first or third call), under every stage
/// that takes a scheduler: the general promises of
/// [`a_scheduler_that_panics_in_schedule_ends_the_pipeline`] hold. Found with it:
/// each of the three left the stage's drain loop owned for ever (the sink never
/// ended), as the task was neither run nor abandoned.
#[test]
fn a_scheduler_whose_lane_or_hint_panics_ends_the_pipeline() {
    silence_deliberate_panics();
    let cases: Vec<(&str, OnFlaky, u64, Flake)> = SCHEDULED
        .iter()
        .flat_map(|&(name, stage)| {
            [Flake::Lane, Flake::Queue, Flake::Hint]
                .into_iter()
                .flat_map(move |hook| [1, 3].map(|at| (name, stage, at, hook)))
        })
        .collect();
    let failures = run_rows(&cases, 4, |&(name, stage, at, hook)| {
        guarded(name, DEADLINE, move || flaky_check(stage, at, hook))
            .into_iter()
            .map(|f| format!("{name} ({hook:?} call {at} panics): {f}"))
            .collect()
    });
    assert_no_failures("schedulers whose lanes panic", cases.len(), &failures);
}

fn flaky_check(stage: OnFlaky, at: u64, hook: Flake) -> Vec<String> {
    let clock = hook == Flake::Clock;
    let mut check = Check::default();
    let pool = pool("hooks-flaky", 2);
    let flaky = Flaky {
        pool: pool.clone(),
        calls: Arc::default(),
        at,
        hook,
    };
    let calls = flaky.calls.clone();
    let ledger = Ledger::new();
    let (source, probe) = counted("source", BIG, &ledger);
    let subscribed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        stage(source, flaky, &ledger).for_each_with(8, drop)
    }));
    // Err: the subscribing thread made the call that panicked (in `subscribe`): the
    // user's own panic, on the user's thread.
    if let Ok(handle) = subscribed {
        match ended(handle) {
            None => check.fail(format!(
                "the sink did not end within {WAIT:?} ({} scheduling calls)",
                calls.load(Ordering::SeqCst)
            )),
            // A clock's panic is no scheduler shutting down and no subscriber's
            // panic: it reaches the sink as what it is.
            Some(Err(error)) if clock && error.kind() != ErrorKind::Panicked => check.fail(
                format!("the sink ended with {error} (kind {:?})", error.kind()),
            ),
            Some(_) => {}
        }
    }
    if !wait_until(WAIT, || !probe.holding()) {
        check.fail(format!("upstream not released: {}", probe.describe()));
    }
    check.released("the pipeline", &ledger);
    check.pool_runs("the pool", &pool);
    probe.stop();
    check.done()
}

#[cfg(not(feature = "rsocket"))]
fn rsocket_handler() -> Vec<String> {
    Vec::new() // no RSocket without the feature
}

/// `rsocket::Handler`: "a method that panics fails its stream with
/// `APPLICATION_ERROR`; the connection lives on" (so does a publisher it returns that
/// panics in `subscribe`). Each failing request ends with that error, the
/// fire-and-forget and metadata-push hooks that panic are contained, and a stream on
/// the same connection afterwards delivers everything.
#[cfg(feature = "rsocket")]
fn rsocket_handler() -> Vec<String> {
    use weir::rsocket::{ErrorCode, Handler, Payload, RemoteError, Server};

    /// A publisher of payloads whose `subscribe` panics.
    struct RefusesPayloads;

    impl Publisher for RefusesPayloads {
        type Item = Payload;

        fn subscribe<S>(self, _subscriber: S)
        where
            S: Subscriber<Payload> + Send + 'static,
        {
            panic!("{}", boom("a handler's publisher's subscribe"));
        }
    }

    /// Panics in every method, except a request-stream for "ok".
    struct Touchy;

    impl Handler for Touchy {
        fn request_response(&self, _request: Payload) -> BoxPublisher<Payload> {
            panic!("{}", boom("Handler::request_response"));
        }

        fn fire_and_forget(&self, _request: Payload) {
            panic!("{}", boom("Handler::fire_and_forget"));
        }

        fn request_stream(&self, request: Payload) -> BoxPublisher<Payload> {
            match &request.data[..] {
                b"ok" => weir::from_iter((0u8..3).map(|i| Payload::data(vec![i]))).boxed(),
                b"refuse" => RefusesPayloads.boxed(),
                _ => panic!("{}", boom("Handler::request_stream")),
            }
        }

        fn metadata_push(&self, _metadata: bytes::Bytes) {
            panic!("{}", boom("Handler::metadata_push"));
        }
    }

    let mut check = Check::default();
    let runtime = tokio_runtime("hooks-rsocket");
    let (server, client) = runtime.block_on(async {
        let server = Server::bind("127.0.0.1:0", Touchy)
            .await
            .expect("bind a loopback server");
        let client = weir::rsocket::connect(server.local_addr())
            .await
            .expect("connect to it");
        (server, client)
    });
    let failing = [
        (
            "request_response",
            client.request_response(Payload::data("x")),
        ),
        (
            "request_stream",
            client.request_stream(Payload::data("panic")),
        ),
        (
            "a publisher's subscribe",
            client.request_stream(Payload::data("refuse")),
        ),
    ];
    for (what, stream) in failing {
        match ended(stream.collect()) {
            Some(Err(error)) => {
                let code = std::error::Error::source(&error)
                    .and_then(|source| source.downcast_ref::<RemoteError>())
                    .map(|remote| remote.code);
                check.expect(code == Some(ErrorCode::APPLICATION_ERROR), || {
                    format!("{what}: expected APPLICATION_ERROR, got {error} ({code:?})")
                });
            }
            Some(Ok(items)) => check.fail(format!("{what}: completed with {} items", items.len())),
            None => check.fail(format!("{what}: the stream did not end within {WAIT:?}")),
        }
    }
    check.expect(client.fire_and_forget(Payload::data("x")).is_ok(), || {
        "fire_and_forget was refused".to_owned()
    });
    check.expect(
        client
            .metadata_push(bytes::Bytes::from_static(b"x"))
            .is_ok(),
        || "metadata_push was refused".to_owned(),
    );
    match ended(client.request_stream(Payload::data("ok")).collect()) {
        Some(Ok(items)) => check.expect(items.len() == 3, || {
            format!("the connection after the panics: {} items", items.len())
        }),
        other => check.fail(format!(
            "the connection after the panics: {:?}",
            other.map(|r| r.map(|items| items.len()))
        )),
    }
    check.expect(client.closed_with().is_none(), || {
        format!("the connection closed: {:?}", client.closed_with())
    });
    drop((client, server));
    check.done()
}
