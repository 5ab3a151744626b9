//! Regression tests for the defects listed below, found by using weir as a hostile
//! user would. Each test states, in its doc comment, the promise it checks; each
//! failed on the code before its fix (commit 36c5bf5) and passes now.
//!
//! 1. Lossy holding stages (`on_backpressure_latest`, `on_backpressure_buffer`,
//!    `conflate`, `conflate_latest`) dropped, merged or reordered items that had
//!    demand when `request` came from another thread.
//! 2. A cancelled holding stage kept an item that arrived during the cancel pass.
//! 3. A panicking subscriber behind `sample`, `debounce` and other stages never
//!    cancelled upstream (rule 2.13), and the stage stayed allocated.
//! 4. `Duration::MAX` hung `timeout` on a `ThreadPool`, and panicked in `timer`,
//!    `interval` and `VirtualTime::advance`.
//! 5. A scheduler shut down mid-stream (a tokio runtime, a `ThreadPool`) left the
//!    pipeline hung, upstream running and queued items alive.
//!
//! And the smaller ones, lettered:
//!
//! * (a) a subscriber that cancels inside `on_next` received up to 1,019 more items
//!   (the rest of the batch);
//! * (b) `flat_map`/`concat` whose inner publisher panics in `subscribe` hung;
//! * (c) a panicking `Drop` of an item in `publish_on`'s cancel clean-up left the
//!   drain stuck;
//! * (d) timers of cancelled stages stayed in the `ThreadPool`'s timer map until they
//!   fired;
//! * (e) `Channel` was `Clone` yet served one subscriber (now it is not `Clone`:
//!   `channel_hook.rs` checks it);
//! * (f) drops made by `weir::channel` before a subscriber was attached reached no
//!   drop hook.
//!
//! 5 for a `ThreadPool`, (d) and (f) are in `regressions_new_api.rs`. A promise in
//! quotation marks is the wording of the defect list this suite was written against.
//!
//! The tests assert counts, orders and invariants, never timings. A pipeline that may
//! hang runs on a helper thread under a watchdog ([`support::watch`]), so a hang fails
//! the test instead of hanging the suite. Tests with several cases (stages, sources,
//! schedulers) run every case and report all failing ones in one message.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use weir::demand::UNBOUNDED;
use weir::metrics::{DropHook, Drops};
use weir::operators::{Rate, ThrottleMode};
use weir::prelude::*;
use weir::runtime::{Scheduler, ThreadPool, Tokio, VirtualTime};
use weir::source::channel::{Channel, ChannelPolicy};
use weir::{Error, ErrorKind, Overflow, RawSubscription};

use crate::support::{
    self, assert_no_failures, run_watched, wait_until, watch, Live, Token, Tracked, Watched,
    PATIENCE, WATCHDOG,
};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

// ---- shared subscribers and publishers --------------------------------------------

/// What a [`Probe`] saw; shared with the test.
#[derive(Debug, Default)]
struct ProbeState {
    subscription: Mutex<Option<Subscription>>,
    received: AtomicU64,
    terminals: AtomicU64,
}

impl ProbeState {
    fn subscription(&self) -> Subscription {
        self.subscription
            .lock()
            .unwrap()
            .clone()
            .expect("on_subscribe was called")
    }

    fn received(&self) -> u64 {
        self.received.load(Ordering::SeqCst)
    }
}

/// A subscriber that requests `initial` in `on_subscribe` (0: nothing), keeps its
/// subscription (as real subscribers do) and counts what arrives. Counted alive by its
/// token.
struct Probe {
    state: Arc<ProbeState>,
    initial: u64,
    _token: Token,
}

impl Probe {
    fn new(initial: u64, live: &Live) -> (Self, Arc<ProbeState>) {
        let state = Arc::new(ProbeState::default());
        let probe = Probe {
            state: state.clone(),
            initial,
            _token: live.token(),
        };
        (probe, state)
    }
}

impl<T> Subscriber<T> for Probe {
    fn on_subscribe(&mut self, subscription: Subscription) {
        if self.initial > 0 {
            subscription.request(self.initial);
        }
        *self.state.subscription.lock().unwrap() = Some(subscription);
    }

    fn on_next(&mut self, _item: T) {
        self.state.received.fetch_add(1, Ordering::SeqCst);
    }

    fn on_error(&mut self, _error: Error) {
        self.state.terminals.fetch_add(1, Ordering::SeqCst);
    }

    fn on_complete(&mut self) {
        self.state.terminals.fetch_add(1, Ordering::SeqCst);
    }
}

/// `items` against the expectation `0..expected`: `None` when equal, otherwise what
/// differs (count, first deviation, order).
fn sequence_problem(items: &[u64], expected: u64) -> Option<String> {
    if items.iter().copied().eq(0..expected) {
        return None;
    }
    let mut problem = format!("delivered {} of {expected} items", items.len());
    if let Some((index, &got)) = items
        .iter()
        .enumerate()
        .find(|&(index, &item)| item != index as u64)
    {
        problem += &format!(", first deviation at #{index}: expected {index}, got {got}");
    }
    let out_of_order = items.windows(2).filter(|w| w[1] <= w[0]).count();
    if out_of_order > 0 {
        problem += &format!(", {out_of_order} times not strictly increasing");
    }
    Some(problem)
}

// ---- defect 1: lossy holding stages under cross-thread requests ----------------------

/// Items pushed through each lossy stage.
const LOSSY_ITEMS: u64 = 200_000;
/// Outstanding demand the bounded consumer keeps at most.
const LOSSY_WINDOW: u64 = 64;

/// What a [`LossyRecorder`] saw, and the bounded consumer's request counters.
#[derive(Debug, Default)]
struct LossyRecord {
    subscription: Mutex<Option<Subscription>>,
    items: Mutex<Vec<u64>>,
    delivered: AtomicU64,
    /// Bumped before each `request(1)` of the bounded consumer.
    requested_before: AtomicU64,
    /// Bumped after each `request(1)` of the bounded consumer returned: demand the
    /// stage certainly knows about.
    requested_after: AtomicU64,
    beyond_demand: AtomicU64,
    completes: AtomicU64,
    errors: Mutex<Vec<Error>>,
}

impl LossyRecord {
    fn terminals(&self) -> u64 {
        self.completes.load(Ordering::SeqCst) + self.errors.lock().unwrap().len() as u64
    }

    fn outstanding(&self) -> u64 {
        self.requested_before
            .load(Ordering::SeqCst)
            .saturating_sub(self.delivered.load(Ordering::SeqCst))
    }
}

/// Records every item; requests `initial` in `on_subscribe` (`UNBOUNDED` or 0). With
/// bounded demand it counts items delivered beyond what was requested.
struct LossyRecorder {
    record: Arc<LossyRecord>,
    initial: u64,
}

impl Subscriber<u64> for LossyRecorder {
    fn on_subscribe(&mut self, subscription: Subscription) {
        *self.record.subscription.lock().unwrap() = Some(subscription.clone());
        if self.initial > 0 {
            subscription.request(self.initial);
        }
    }

    fn on_next(&mut self, item: u64) {
        let delivered = self.record.delivered.fetch_add(1, Ordering::SeqCst) + 1;
        if self.initial != UNBOUNDED
            && delivered > self.record.requested_before.load(Ordering::SeqCst)
        {
            self.record.beyond_demand.fetch_add(1, Ordering::SeqCst);
        }
        self.record.items.lock().unwrap().push(item);
    }

    fn on_error(&mut self, error: Error) {
        self.record.errors.lock().unwrap().push(error);
    }

    fn on_complete(&mut self) {
        self.record.completes.fetch_add(1, Ordering::SeqCst);
    }
}

/// Push [`LOSSY_ITEMS`] through `weir::channel` into the stage `build` makes, while a
/// second thread requests 1 at a time; `None` if every item arrived once, in order,
/// with nothing dropped, nothing beyond demand and one completion.
///
/// * `bounded == false` (the reproduction of defect 1): downstream requests `UNBOUNDED` in
///   `on_subscribe`; the second thread calls `request(1)` in a loop.
/// * `bounded == true`: nothing in `on_subscribe`; the second thread keeps at most
///   [`LOSSY_WINDOW`] requested and undelivered, one `request(1)` at a time, and the
///   producer pushes item `k` only once `k + 1` requests have returned. So every item
///   arrives while the stage knows of outstanding demand for it: a lossy stage must
///   not drop, merge or refuse any of them.
fn lossy_case<P>(name: &str, bounded: bool, build: impl FnOnce(Channel<u64>) -> P) -> Option<String>
where
    P: Publisher<Item = u64>,
{
    let (tx, rx) = weir::channel::<u64>(1_024, ChannelPolicy::Backpressure);
    let drops = Drops::new();
    let record = Arc::new(LossyRecord::default());
    build(rx)
        .on_dropped(DropHook::new(drops.clone()))
        .subscribe(LossyRecorder {
            record: record.clone(),
            initial: if bounded { 0 } else { UNBOUNDED },
        });
    let subscription = record
        .subscription
        .lock()
        .unwrap()
        .clone()
        .expect("on_subscribe was called");
    let stop = Arc::new(AtomicBool::new(false));
    let requester = {
        let (record, stop) = (record.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut calls = 0u64;
            while !stop.load(Ordering::SeqCst) && record.terminals() == 0 {
                if bounded {
                    if record.outstanding() >= LOSSY_WINDOW {
                        std::thread::yield_now();
                        continue;
                    }
                    record.requested_before.fetch_add(1, Ordering::SeqCst);
                    subscription.request(1);
                    record.requested_after.fetch_add(1, Ordering::SeqCst);
                } else {
                    subscription.request(1);
                }
                calls += 1;
                if calls % 64 == 0 {
                    std::thread::yield_now();
                }
            }
        })
    };
    let producer = {
        let (record, stop) = (record.clone(), stop.clone());
        std::thread::spawn(move || {
            for k in 0..LOSSY_ITEMS {
                if bounded {
                    while record.requested_after.load(Ordering::SeqCst) <= k {
                        if stop.load(Ordering::SeqCst) || record.terminals() > 0 {
                            return;
                        }
                        std::thread::yield_now();
                    }
                }
                if tx.send_blocking(k).is_err() {
                    return;
                }
            }
            // The last sender dropped: the channel completes.
        })
    };
    let ended = wait_until(WATCHDOG, || record.terminals() > 0);
    stop.store(true, Ordering::SeqCst);
    if ended {
        requester.join().expect("requester thread");
        producer.join().expect("producer thread");
    }

    let mut problems = Vec::new();
    if !ended {
        problems.push(format!("did not terminate within {WATCHDOG:?}"));
    }
    for error in record.errors.lock().unwrap().iter() {
        problems.push(format!("failed: {error}"));
    }
    if let Some(problem) = sequence_problem(&record.items.lock().unwrap(), LOSSY_ITEMS) {
        problems.push(problem);
    }
    if drops.total() > 0 {
        problems.push(format!("counted drops {drops:?}"));
    }
    let beyond = record.beyond_demand.load(Ordering::SeqCst);
    if beyond > 0 {
        problems.push(format!("{beyond} items delivered beyond demand"));
    }
    (!problems.is_empty()).then(|| format!("{name}: {}", problems.join("; ")))
}

/// Run [`lossy_case`] for every lossy holding stage.
fn lossy_stages(bounded: bool) -> Vec<String> {
    [
        lossy_case("on_backpressure_latest", bounded, |rx| {
            rx.on_backpressure_latest()
        }),
        lossy_case(
            "on_backpressure_buffer(16, Overflow::Error)",
            bounded,
            |rx| rx.on_backpressure_buffer(16, Overflow::Error),
        ),
        lossy_case(
            "on_backpressure_buffer(16, Overflow::DropOldest)",
            bounded,
            |rx| rx.on_backpressure_buffer(16, Overflow::DropOldest),
        ),
        lossy_case("conflate", bounded, |rx| rx.conflate(|_held, new| new)),
        lossy_case("conflate_latest", bounded, |rx| rx.conflate_latest()),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Defect 1. Promise (`on_backpressure_latest`, `on_backpressure_buffer`, `conflate`,
/// `conflate_latest` in `ext.rs`): "An item passes straight through when downstream
/// has demand"; "nothing may be dropped, merged or reordered while demand is
/// outstanding". The reproduction: downstream requests `UNBOUNDED` in
/// `on_subscribe`, a second thread calls `request(1)` in a loop, a producer pushes
/// 200,000 items through `weir::channel` into the stage. Every item must arrive exactly
/// once, in order, with no drop counted and no error.
#[test]
fn regression_lossy_stage_drops_items_with_unbounded_demand() {
    assert_no_failures(
        "lossy stages, unbounded demand, request(1) from another thread",
        &lossy_stages(false),
    );
}

/// Defect 1, bounded demand. Same promise ("an item passes straight through when
/// downstream has demand"), with a consumer thread that requests one at a time and
/// keeps at most 64 outstanding; the producer only pushes an item once the request
/// for it has returned, so every item arrives with outstanding demand. Nothing may be
/// delivered beyond demand, and nothing dropped, merged, refused or reordered: the
/// delivered sequence is exactly `0..200_000`.
#[test]
fn regression_lossy_stage_drops_items_with_bounded_demand() {
    assert_no_failures(
        "lossy stages, bounded demand requested 1 at a time from another thread",
        &lossy_stages(true),
    );
}

// ---- defect 2: an item arriving during the cancel pass outlives cancel ---------------

type BoxedSubscriber<T> = Box<dyn Subscriber<T> + Send>;

/// A publisher the test drives by hand: `push` calls `on_next` on the thread that calls
/// it, whatever was requested or cancelled (a publisher may deliver items already in
/// flight after `cancel`, rule 3.12 says "eventually"); `release` drops the subscriber
/// as a publisher does once it has seen the cancel.
struct Manual<T> {
    subscriber: Arc<Mutex<Option<BoxedSubscriber<T>>>>,
    cancelled: Arc<AtomicBool>,
}

impl<T> Clone for Manual<T> {
    fn clone(&self) -> Self {
        Manual {
            subscriber: self.subscriber.clone(),
            cancelled: self.cancelled.clone(),
        }
    }
}

impl<T> Manual<T> {
    fn new() -> Self {
        Manual {
            subscriber: Arc::new(Mutex::new(None)),
            cancelled: Arc::new(AtomicBool::new(false)),
        }
    }

    fn push(&self, item: T) {
        if let Some(subscriber) = self.subscriber.lock().unwrap().as_mut() {
            subscriber.on_next(item);
        }
    }

    fn release(&self) {
        let subscriber = self.subscriber.lock().unwrap().take();
        drop(subscriber);
    }

    fn was_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }
}

/// [`Manual`]'s subscription: records the cancel.
struct ManualSubscription(Arc<AtomicBool>);

impl RawSubscription for ManualSubscription {
    fn request(&self, _n: u64) {}

    fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl<T: Send + 'static> Publisher for Manual<T> {
    type Item = T;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<T> + Send + 'static,
    {
        let mut subscriber: BoxedSubscriber<T> = Box::new(subscriber);
        subscriber.on_subscribe(Subscription::new(Arc::new(ManualSubscription(
            self.cancelled.clone(),
        ))));
        *self.subscriber.lock().unwrap() = Some(subscriber);
    }
}

/// A subscriber that requests nothing and, when the stage drops it (inside the cancel
/// pass), runs `on_drop`.
struct DropSignal {
    slot: Arc<Mutex<Option<Subscription>>>,
    on_drop: Option<Box<dyn FnOnce() + Send>>,
    _token: Token,
}

impl Subscriber<Tracked> for DropSignal {
    fn on_subscribe(&mut self, subscription: Subscription) {
        *self.slot.lock().unwrap() = Some(subscription);
    }
    fn on_next(&mut self, _item: Tracked) {}
    fn on_error(&mut self, _error: Error) {}
    fn on_complete(&mut self) {}
}

impl Drop for DropSignal {
    fn drop(&mut self) {
        if let Some(on_drop) = self.on_drop.take() {
            on_drop();
        }
    }
}

/// Item 0 is held (no demand); the test thread cancels; while the cancel pass runs
/// (it is dropping the downstream subscriber, which lets the producer thread go) the
/// producer thread pushes item 1 and then releases the stage. A clone of the
/// subscription stays alive throughout.
fn cancel_pass_case<P>(name: &str, build: impl FnOnce(Manual<Tracked>) -> P) -> Option<String>
where
    P: Publisher<Item = Tracked>,
{
    let items = Live::new();
    let subscribers = Live::new();
    let upstream = Manual::new();
    let slot = Arc::new(Mutex::new(None));
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (pushed_tx, pushed_rx) = mpsc::channel::<()>();
    build(upstream.clone()).subscribe(DropSignal {
        slot: slot.clone(),
        on_drop: Some(Box::new(move || {
            let _producer_may_be_gone = go_tx.send(());
            let _ = pushed_rx.recv_timeout(PATIENCE);
        })),
        _token: subscribers.token(),
    });
    upstream.push(Tracked::new(0, &items));
    let producer = {
        let (upstream, items) = (upstream.clone(), items.clone());
        std::thread::spawn(move || {
            let during_cancel = go_rx.recv_timeout(PATIENCE).is_ok();
            if during_cancel {
                upstream.push(Tracked::new(1, &items));
            }
            let _ = pushed_tx.send(());
            upstream.release();
            during_cancel
        })
    };
    let subscription = slot
        .lock()
        .unwrap()
        .clone()
        .expect("on_subscribe was called");
    subscription.cancel();
    let pushed_during_cancel = producer.join().expect("producer thread");
    // Nothing runs any more: the cancel returned, and the producer pushed its last item
    // and released the stage.
    let left = items.count();

    let mut problems = Vec::new();
    if !pushed_during_cancel {
        problems.push("the subscriber was not dropped by the cancel pass".to_owned());
    }
    if !upstream.was_cancelled() {
        problems.push("upstream was not cancelled".to_owned());
    }
    if left != 0 {
        problems.push(format!(
            "{left} item(s) still alive after cancel and the producer finished, while a \
             Subscription clone lives"
        ));
    }
    drop(subscription);
    (!problems.is_empty()).then(|| format!("{name}: {}", problems.join("; ")))
}

/// Defect 2. Promise (`on_backpressure_latest` / `on_backpressure_buffer` in `ext.rs`):
/// "Cancel goes upstream; the held item(s) are released"; "Cancel must
/// release everything the stage holds, including items that arrive while the cancel
/// pass runs", even while a clone of the `Subscription` lives. After cancel and the
/// producer's last push, the live item count must be 0.
#[test]
fn regression_cancelled_holding_stage_keeps_item_arriving_during_cancel() {
    let failures: Vec<String> = [
        cancel_pass_case("on_backpressure_latest", |up| up.on_backpressure_latest()),
        cancel_pass_case("on_backpressure_buffer(16, DropOldest)", |up| {
            up.on_backpressure_buffer(16, Overflow::DropOldest)
        }),
    ]
    .into_iter()
    .flatten()
    .collect();
    assert_no_failures("cancel during an arriving item", &failures);
}

// ---- defect 3: a panicking subscriber behind a stage -------------------------------

/// Requests everything, keeps its subscription, and panics in `on_next`.
struct PanicOnNext {
    subscription: Option<Subscription>,
    panicked: Arc<AtomicBool>,
    _token: Token,
}

impl<T> Subscriber<T> for PanicOnNext {
    fn on_subscribe(&mut self, subscription: Subscription) {
        subscription.request(UNBOUNDED);
        self.subscription = Some(subscription);
    }

    fn on_next(&mut self, _item: T) {
        self.panicked.store(true, Ordering::SeqCst);
        panic!("adversarial: this subscriber panics in on_next (rule 2.13)");
    }

    fn on_error(&mut self, _error: Error) {}
    fn on_complete(&mut self) {}
}

/// One row of the panicking-subscriber table, on a helper thread: a channel (unless
/// `has_upstream` is false: the stage is a source itself) feeds the stage built by
/// `build` on a pool of its own; the producer offers one item per poll until the
/// channel reports `Closed`. `None` when the subscriber panicked, upstream was cancelled (the channel
/// closed) and the subscriber was dropped.
fn panic_case<P, F>(name: &'static str, has_upstream: bool, build: F) -> Watched<Option<String>>
where
    P: Publisher,
    F: FnOnce(Channel<u64>, ThreadPool) -> P + Send + 'static,
{
    watch(name, WATCHDOG + PATIENCE, move || {
        let pool = ThreadPool::builder().name("adv-panic").threads(1).build();
        let (tx, rx) = weir::channel::<u64>(64, ChannelPolicy::Backpressure);
        let subscribers = Live::new();
        let panicked = Arc::new(AtomicBool::new(false));
        build(rx, pool).subscribe(PanicOnNext {
            subscription: None,
            panicked: panicked.clone(),
            _token: subscribers.token(),
        });
        let (mut next, mut after_panic, mut closed) = (0u64, 0u64, !has_upstream);
        let done = wait_until(WATCHDOG, || {
            if !closed {
                match tx.try_send(next) {
                    Ok(()) => {
                        next += 1;
                        if panicked.load(Ordering::SeqCst) {
                            after_panic += 1;
                        }
                    }
                    Err(refused) => closed = refused.is_closed(),
                }
            }
            panicked.load(Ordering::SeqCst) && closed && subscribers.count() == 0
        });
        if done {
            return None;
        }
        let mut problems = Vec::new();
        if !panicked.load(Ordering::SeqCst) {
            problems.push(format!(
                "the subscriber never received an item ({next} items offered)"
            ));
        }
        if !closed {
            problems.push(format!(
                "upstream was never cancelled: the channel accepted {after_panic} more items \
                 after the panic and is still open"
            ));
        }
        if subscribers.count() != 0 {
            problems.push("the panicking subscriber was never dropped".to_owned());
        }
        Some(format!("{name}: {}", problems.join("; ")))
    })
}

/// Defect 3. Promise (`Subscriber` docs, rule 2.13): "a subscriber that panics is
/// treated as cancelled by weir's publishers"; "must hold behind every stage:
/// upstream cancelled, stage and subscriber released". A subscriber that panics in
/// `on_next` sits behind each stage (time operators and the `interval` source on a
/// `ThreadPool`, `subscribe_on`, the holding stages, `buffer`, `limit_rate`); upstream
/// (a `weir::channel`) must then report `Closed` to its producer, and the subscriber
/// must be dropped.
#[test]
fn regression_panicking_subscriber_never_cancels_upstream() {
    let us = Duration::from_micros;
    let rate = Rate::new(1, ms(1));
    let cases = vec![
        panic_case("sample", true, |rx, pool| rx.sample_on(ms(1), pool)),
        panic_case("debounce", true, move |rx, pool| {
            rx.debounce_on(us(200), pool)
        }),
        panic_case("interval (source)", false, |_rx, pool| {
            weir::interval_on(ms(1), pool)
        }),
        panic_case("timeout", true, |rx, pool| {
            rx.timeout_on(Duration::from_secs(3_600), pool)
        }),
        panic_case("buffer_timeout", true, |rx, pool| {
            rx.buffer_timeout_on(4, ms(1), pool)
        }),
        panic_case("subscribe_on", true, |rx, pool| rx.subscribe_on(pool)),
        panic_case("throttle(Shaping)", true, move |rx, pool| {
            rx.throttle_on(rate, 1, ThrottleMode::Shaping, pool)
        }),
        panic_case("throttle(Enforcing)", true, move |rx, pool| {
            rx.throttle_on(rate, 1, ThrottleMode::Enforcing, pool)
        }),
        panic_case("on_backpressure_buffer", true, |rx, _pool| {
            rx.on_backpressure_buffer(16, Overflow::DropOldest)
        }),
        panic_case("on_backpressure_latest", true, |rx, _pool| {
            rx.on_backpressure_latest()
        }),
        panic_case("buffer", true, |rx, _pool| rx.buffer(2)),
        panic_case("limit_rate", true, |rx, _pool| rx.limit_rate(4, 2)),
    ];
    let failures: Vec<String> = cases
        .into_iter()
        .filter_map(|case| case.join().unwrap_or_else(Some))
        .collect();
    assert_no_failures("subscriber panicking in on_next", &failures);
}

// ---- defect 4: Duration::MAX ---------------------------------------------------------

/// `range(0..10).timeout_on(Duration::MAX, scheduler)` collected on a helper thread.
fn timeout_max_case<C>(name: &'static str, scheduler: C) -> Watched<Option<String>>
where
    C: Scheduler + Clone,
{
    let what = format!("range(0..10).timeout_on(Duration::MAX) {name}");
    watch(what, WATCHDOG, move || {
        match weir::range(0u64..10)
            .timeout_on(Duration::MAX, scheduler)
            .collect()
            .wait()
        {
            Ok(items) if items == (0..10).collect::<Vec<u64>>() => None,
            Ok(items) => Some(format!("{name}: wrong items {items:?}")),
            Err(error) => Some(format!("{name}: failed: {error}")),
        }
    })
}

/// Defect 4, `timeout`. Promise: "`Duration::MAX` is the common way to say
/// 'never': saturate deadlines (it means 'never fires') on every scheduler ... Never a
/// hang, never a panic later." `range(0..10).timeout_on(Duration::MAX, s)` must complete
/// with its 10 items on a `ThreadPool` (and on a `VirtualTime` whose clock has moved,
/// and on `Tokio`).
#[test]
fn regression_timeout_duration_max_hangs() {
    let virtual_time = VirtualTime::new();
    virtual_time.advance(ms(1));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let cases = [
        timeout_max_case("on ThreadPool", ThreadPool::new(1)),
        timeout_max_case("on VirtualTime (advanced 1 ms)", virtual_time),
        timeout_max_case("on Tokio", Tokio::new(runtime.handle().clone())),
    ];
    let failures: Vec<String> = cases
        .into_iter()
        .filter_map(|case| case.join().unwrap_or_else(Some))
        .collect();
    runtime.shutdown_background();
    assert_no_failures("timeout(Duration::MAX)", &failures);
}

/// Subscribe a probe to `source`, cancel, and check: no panic, nothing delivered, the
/// subscriber dropped.
fn never_fires_case<P>(name: &'static str, source: P) -> Option<String>
where
    P: Publisher + Send + 'static,
{
    let outcome = run_watched(name, WATCHDOG, move || {
        let subscribers = Live::new();
        let (probe, state) = Probe::new(UNBOUNDED, &subscribers);
        source.subscribe(probe);
        state.subscription().cancel();
        let released = wait_until(PATIENCE, || subscribers.count() == 0);
        (
            state.received(),
            state.terminals.load(Ordering::SeqCst),
            released,
        )
    });
    match outcome {
        Ok((0, 0, true)) => None,
        Ok((received, terminals, released)) => Some(format!(
            "{name}: {received} item(s) and {terminals} terminal signal(s) delivered; \
             subscriber dropped after cancel: {released}"
        )),
        Err(failure) => Some(format!("{name}: subscribe + cancel {failure}")),
    }
}

/// Defect 4, time sources. Promise: `Duration::MAX` means "never fires":
/// "Never a hang, never a panic later". `weir::timer_on(Duration::MAX, pool)` and
/// `weir::interval_on(Duration::MAX, pool)` must subscribe without panicking, deliver
/// nothing, and release the subscriber on cancel.
#[test]
fn regression_timer_and_interval_duration_max_panic_in_subscribe() {
    let pool = ThreadPool::new(1);
    let failures: Vec<String> = [
        never_fires_case(
            "timer(Duration::MAX, pool)",
            weir::timer_on(Duration::MAX, pool.clone()),
        ),
        never_fires_case(
            "interval(Duration::MAX, pool)",
            weir::interval_on(Duration::MAX, pool),
        ),
    ]
    .into_iter()
    .flatten()
    .collect();
    assert_no_failures("time sources with Duration::MAX", &failures);
}

/// Run `step`, catching a panic; its message, prefixed with `what`.
fn no_panic(what: &str, step: impl FnOnce()) -> Option<String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(step))
        .err()
        .map(|payload| format!("{what}: panicked: {}", support::panic_message(&*payload)))
}

/// Defect 4, `VirtualTime`. Promise: "`VirtualTime::advance(Duration::MAX)`
/// panics" must not happen: `Duration::MAX` is "never", and never a panic later. On a
/// clock that has already moved, `advance(Duration::MAX)` must run the due timer and
/// return; the clock must stay usable afterwards (`now()`, a new timer, another
/// `advance(Duration::MAX)`).
#[test]
fn regression_virtual_time_advance_duration_max_panics() {
    let vt = VirtualTime::new();
    let mut fired = weir::timer_on(Duration::from_secs(1), vt.clone()).collect();
    let mut failures = Vec::new();
    failures.extend(no_panic("advance(1 ms)", || vt.advance(ms(1))));
    failures.extend(no_panic("then advance(Duration::MAX)", || {
        vt.advance(Duration::MAX)
    }));
    // Nothing runs outside `advance`: the timer has fired by now, or never will.
    match fired.wait_timeout(Duration::ZERO) {
        Some(Ok(items)) if items == vec![0] => {}
        other => failures.push(format!("the 1 s timer: {other:?}, expected Some(Ok([0]))")),
    }
    failures.extend(no_panic("then now()", || {
        let _ = vt.now();
    }));
    failures.extend(no_panic("then subscribe timer(1 s)", || {
        let _late = weir::timer_on(Duration::from_secs(1), vt.clone()).collect();
    }));
    failures.extend(no_panic("then advance(Duration::MAX) again", || {
        vt.advance(Duration::MAX)
    }));
    assert_no_failures("VirtualTime with Duration::MAX", &failures);
}

// ---- defect 5: a scheduler shut down mid-stream --------------------------------------

/// `range(0..).map(Tracked).publish_on(scheduler, 16).fold(..)`: once 1,000 items went
/// through, `shut_down` stops the scheduler. What broke the promise of defect 5 (the
/// sink must terminate with an error, upstream must be cancelled, no item may stay
/// alive once everything is dropped), one line each; empty when it held. Shared with
/// `regressions_new_api` (`ThreadPool::shutdown`).
pub(crate) fn shutdown_mid_stream<S>(scheduler: S, shut_down: impl FnOnce()) -> Vec<String>
where
    S: Scheduler + Clone,
{
    let items = Live::new();
    let cancelled = Arc::new(AtomicBool::new(false));
    let consumed = Arc::new(AtomicU64::new(0));
    let mut handle = {
        let (items, cancelled, consumed) = (items.clone(), cancelled.clone(), consumed.clone());
        weir::range(0u64..u64::MAX)
            .map(move |i| Tracked::new(i, &items))
            .inspect_cancel(move || cancelled.store(true, Ordering::SeqCst))
            .publish_on(scheduler, 16)
            .fold(0u64, move |_last, item| {
                consumed.fetch_add(1, Ordering::SeqCst);
                item.value
            })
    };
    let streaming = wait_until(PATIENCE, || consumed.load(Ordering::SeqCst) >= 1_000);
    assert!(
        streaming,
        "precondition: the pipeline streams before the shutdown"
    );
    shut_down();

    let mut failures = Vec::new();
    match handle.wait_timeout(WATCHDOG) {
        Some(Err(_)) => {}
        Some(Ok(last)) => failures.push(format!(
            "the sink completed (last item {last}) instead of failing"
        )),
        None => failures.push(format!(
            "the sink did not terminate within {WATCHDOG:?} of the shutdown"
        )),
    }
    if !cancelled.load(Ordering::SeqCst) {
        failures.push("upstream was never cancelled".to_owned());
    }
    drop(handle);
    // Waiting only makes sense once the pipeline ended; a hung one holds its items.
    let left = if failures.is_empty() {
        items.settle()
    } else {
        items.count()
    };
    if left != 0 {
        failures.push(format!(
            "{left} item(s) still alive after everything was dropped"
        ));
    }
    failures
}

/// Defect 5. Promise: "Every scheduler must report a task it can no longer
/// run: the pipeline ends with an error of its own kind (scheduler shut down),
/// upstream is cancelled, held items are dropped." `publish_on(Tokio, 16)` into
/// `fold`, the runtime shut down with `shutdown_timeout` mid-stream: the sink must
/// terminate with an error, upstream must be cancelled, and no item may stay alive.
#[test]
fn regression_tokio_shutdown_mid_stream_hangs_and_leaks() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let scheduler = Tokio::new(runtime.handle().clone());
    let failures = shutdown_mid_stream(scheduler, move || {
        runtime.shutdown_timeout(Duration::from_secs(1))
    });
    assert_no_failures(
        "publish_on(Tokio) with the runtime shut down mid-stream",
        &failures,
    );
}

// ---- also fix: cancel inside on_next -------------------------------------------------

/// Implements only `on_next` (the default `on_next_batch`), requests everything, and
/// cancels inside `on_next` on the first item.
struct CancelOnFirst {
    subscription: Option<Subscription>,
    received: Arc<AtomicU64>,
}

impl Subscriber<u64> for CancelOnFirst {
    fn on_subscribe(&mut self, subscription: Subscription) {
        subscription.request(UNBOUNDED);
        self.subscription = Some(subscription);
    }

    fn on_next(&mut self, _item: u64) {
        if self.received.fetch_add(1, Ordering::SeqCst) == 0 {
            self.subscription.as_ref().expect("subscribed").cancel();
        }
    }

    fn on_error(&mut self, _error: Error) {}
    fn on_complete(&mut self) {}
}

/// Items after the cancelling one.
fn after_cancel<P: Publisher<Item = u64>>(name: &str, source: P) -> Option<String> {
    let received = Arc::new(AtomicU64::new(0));
    source.subscribe(CancelOnFirst {
        subscription: None,
        received: received.clone(),
    });
    let further = received.load(Ordering::SeqCst).saturating_sub(1);
    (further > 1).then(|| format!("{name}: {further} further on_next calls after cancel"))
}

/// Also fix (a). Promise: "Target: at most one further item after a cancel
/// made inside `on_next`" for a subscriber that implements only `on_next`. Over
/// `range(0..100_000)` with unbounded demand, behind `map`, and through a pre-filled
/// `weir::channel`.
#[test]
fn regression_cancel_inside_on_next_keeps_delivering() {
    const N: u64 = 100_000;
    let (tx, rx) = weir::channel::<u64>(N as usize, ChannelPolicy::Backpressure);
    for i in 0..N {
        tx.try_send(i).expect("room for every item");
    }
    tx.close();
    let failures: Vec<String> = [
        after_cancel("range(0..100_000)", weir::range(0..N)),
        after_cancel(
            "range(0..100_000).map(..)",
            weir::range(0..N).map(|x| x + 1),
        ),
        after_cancel("weir::channel (100,000 queued)", rx),
        // Stages that pass the question on (`stops_batches_itself`) to the subscriber.
        after_cancel("range.filter(..)", weir::range(0..N).filter(|x| x % 2 == 0)),
        after_cancel(
            "range.filter_map(..)",
            weir::range(0..N).filter_map(|x| (x % 5 != 0).then_some(x)),
        ),
        after_cancel("range.scan(..)", weir::range(0..N).scan(0, |a, x| a + x)),
        after_cancel("range.skip(10)", weir::range(0..N).skip(10)),
        after_cancel("range.take(90_000)", weir::range(0..N).take(90_000)),
        after_cancel("range.inspect(..)", weir::range(0..N).inspect(|_| ())),
        after_cancel(
            "range.limit_rate(256, 192)",
            weir::range(0..N).limit_rate(256, 192),
        ),
        after_cancel(
            "range.buffer(4).map(len)",
            weir::range(0..N).buffer(4).map(|batch| batch.len() as u64),
        ),
    ]
    .into_iter()
    .flatten()
    .collect();
    assert_no_failures("cancel inside on_next", &failures);
}

// ---- also fix: an inner publisher that panics in subscribe ---------------------------

/// A publisher whose `subscribe` panics.
struct PanicsInSubscribe;

impl Publisher for PanicsInSubscribe {
    type Item = u64;

    fn subscribe<S>(self, _subscriber: S)
    where
        S: Subscriber<u64> + Send + 'static,
    {
        panic!("adversarial: this inner publisher panics in subscribe");
    }
}

/// Also fix (b). Promise: "`flat_map`/`concat` whose inner publisher panics
/// in `subscribe`: the sink hangs. It must end with `on_error(Panicked)`" (and
/// `ext.rs`: "A panic in `f` becomes an error of kind `Panicked`"; the inner's
/// `subscribe` is user code in the same place). `range(0..3)` into `flat_map` /
/// `concat_map` of a publisher that panics in `subscribe`, collected: the result must
/// be an error of kind `Panicked`, under a watchdog.
#[test]
fn regression_inner_subscribe_panic_hangs_flat_map() {
    let cases = [
        (
            "flat_map",
            watch("flat_map", WATCHDOG, || {
                weir::range(0u64..3)
                    .flat_map(|_| PanicsInSubscribe, 2, 4)
                    .collect()
                    .wait()
            }),
        ),
        (
            "concat_map",
            watch("concat_map", WATCHDOG, || {
                weir::range(0u64..3)
                    .concat_map(|_| PanicsInSubscribe, 4)
                    .collect()
                    .wait()
            }),
        ),
    ];
    let failures: Vec<String> = cases
        .into_iter()
        .filter_map(|(name, case)| match case.join() {
            Ok(Err(error)) if error.kind() == ErrorKind::Panicked => None,
            Ok(other) => Some(format!(
                "{name}: ended with {other:?}, expected a Panicked error"
            )),
            Err(failure) => Some(format!("{name}: {failure}")),
        })
        .collect();
    assert_no_failures("inner publisher panicking in subscribe", &failures);
}

// ---- also fix: a panicking Drop in publish_on's cancel clean-up ----------------------

/// Live [`Bomb`]s (created minus dropped). Only the test below makes bombs.
static BOMBS_LIVE: AtomicI64 = AtomicI64::new(0);
/// Set while bomb 0 is to panic in its `Drop` (once).
static BOMB_ARMED: AtomicBool = AtomicBool::new(false);

/// An item whose `Drop` panics once (bomb 0, while armed). Counted in a static rather
/// than through an `Arc`, so that a second drop of the same bomb only shows up in the
/// count and cannot touch freed memory.
struct Bomb(u64);

impl Bomb {
    fn new(value: u64) -> Self {
        BOMBS_LIVE.fetch_add(1, Ordering::SeqCst);
        Bomb(value)
    }
}

impl Drop for Bomb {
    fn drop(&mut self) {
        BOMBS_LIVE.fetch_sub(1, Ordering::SeqCst);
        if self.0 == 0 && BOMB_ARMED.swap(false, Ordering::SeqCst) {
            panic!("adversarial: this item panics in Drop");
        }
    }
}

/// Also fix (c). Promise: "A panicking `Drop` of an item inside
/// `publish_on`'s cancel clean-up leaves the drain stuck: contain it" (and `ext.rs`:
/// "Cancel goes upstream at once ...; the drain stops, and the queued items are
/// dropped"). 16 items wait in the boundary's ring (no demand); the first one's `Drop`
/// panics. After cancel (a `Subscription` clone stays alive), upstream must be
/// cancelled, every other queued item dropped, exactly once, and the pool must still
/// run a new pipeline.
#[test]
fn regression_publish_on_cancel_with_panicking_item_drop() {
    let pool = ThreadPool::new(1);
    let subscribers = Live::new();
    let cancelled = Arc::new(AtomicBool::new(false));
    let (probe, state) = Probe::new(0, &subscribers);
    {
        let cancelled = cancelled.clone();
        weir::range(0u64..1_000)
            .map(Bomb::new)
            .inspect_cancel(move || cancelled.store(true, Ordering::SeqCst))
            .publish_on(pool.clone(), 16)
            .subscribe(probe);
    }
    // Taken out of the probe's state: once the test drops it, no handle is left.
    let subscription = state
        .subscription
        .lock()
        .unwrap()
        .take()
        .expect("on_subscribe was called");
    assert_eq!(
        BOMBS_LIVE.load(Ordering::SeqCst),
        16,
        "precondition: the ring holds the 16 prefetched items"
    );
    BOMB_ARMED.store(true, Ordering::SeqCst);
    subscription.cancel();

    let mut failures = Vec::new();
    let released = wait_until(PATIENCE, || BOMBS_LIVE.load(Ordering::SeqCst) <= 0);
    if !released {
        failures.push(format!(
            "{} queued item(s) still alive after cancel (a Subscription clone lives)",
            BOMBS_LIVE.load(Ordering::SeqCst)
        ));
    }
    if !cancelled.load(Ordering::SeqCst) {
        failures.push("upstream was not cancelled".to_owned());
    }
    if subscribers.settle() != 0 {
        failures.push("the subscriber was not dropped".to_owned());
    }
    let mut again = weir::range(0u64..100).publish_on(pool, 16).collect();
    match again.wait_timeout(WATCHDOG) {
        Some(Ok(items)) if items.len() == 100 => {}
        other => failures.push(format!("a new pipeline on the same pool: {other:?}")),
    }
    // The last handle: the stage is released now, and with it whatever it still held.
    drop(subscription);
    wait_until(PATIENCE, || BOMBS_LIVE.load(Ordering::SeqCst) <= 0);
    let live = BOMBS_LIVE.load(Ordering::SeqCst);
    if live < 0 {
        failures.push(format!(
            "{} item(s) dropped twice once the last Subscription clone was dropped",
            -live
        ));
    }
    assert_no_failures(
        "publish_on cancel clean-up with a panicking Drop",
        &failures,
    );
}
