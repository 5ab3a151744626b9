//! Every public API that takes a `Duration`, other than the time operators and time
//! sources (`time.rs` has those), × zero, 1 ns and `Duration::MAX`.
//!
//! Each case builds the API the way its docs show it used, in a small pipeline, and
//! runs it. It passes when either
//!
//! * the construction panics with the documented message (checked with
//!   `catch_unwind` around the construction alone), or returns the documented error;
//!   or
//! * the pipeline does what the docs promise for that value: the items delivered,
//!   counted or dropped as promised, the documented error, the documented "never"
//!   (a `Duration::MAX` that means "no limit" leaves the pipeline waiting, and a
//!   cancel then releases it);
//!
//! and never with an undocumented panic (an overflow of `Instant + Duration` or of
//! `Duration × n`), a hang, or something left alive (items, timers). Each case runs
//! on a thread of its own under a watchdog, so a hang fails its case and the others
//! still run; every test reports all its failing cases at the end.
//!
//! Clocks: a [`VirtualTime`] wherever the promise is about elapsed time (ages,
//! deadlines, windows), so nothing depends on the machine's speed; real clocks
//! (`ThreadPool`, tokio) where the promise is about a real timer or a real wait
//! (retry sleeps, `wait_timeout`, a linger). Real sleeps are a few milliseconds.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use weir::deadline::{Deadline, WithDeadline};
use weir::hub::{Hub, Policy};
use weir::limit::Aimd;
use weir::mux::{Mux, MuxError};
use weir::prelude::*;
use weir::queue::{Capacity, TimeBounds};
use weir::retry::{Backoff, CircuitBreaker, RetryBudget, RetryError, RetryPolicy, Verdict};
use weir::runtime::{Immediate, Scheduler, ThreadPool, Tokio, VirtualTime};
use weir::source::channel::{Admission, ChannelBuilder, ChannelPolicy, TrySendError};
use weir::tck::{Outcome, PublisherVerification, TestEnv, TestSubscriber};
use weir::{DropReason, Error, ErrorKind, Overflow};

#[cfg(feature = "metrics")]
use crate::harness::exports::ExportCounter;
use crate::harness::watch::{
    assert_no_failures, built, expect_panic, on_thread, run_rows, silence_deliberate_panics,
    wait_until, PATIENCE,
};
use crate::support::{Live, Tracked};

/// How long a case that must stay silent (a `Duration::MAX` that means "never") is
/// watched on a real clock before it is cancelled. A case that keeps its promise
/// stays silent however long it is watched; this only gives a broken one the chance
/// to show it.
const WATCH: Duration = Duration::from_millis(20);

/// One day, as far as a virtual clock is moved to show that "never" holds.
const DAY: Duration = Duration::from_secs(24 * 3_600);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Span {
    Zero,
    OneNano,
    Max,
}

const SPANS: [Span; 3] = [Span::Zero, Span::OneNano, Span::Max];

impl Span {
    fn d(self) -> Duration {
        match self {
            Span::Zero => Duration::ZERO,
            Span::OneNano => Duration::from_nanos(1),
            Span::Max => Duration::MAX,
        }
    }
}

/// A case: the API at one duration; its failures (empty: it passed).
type Check = fn(Span) -> Vec<String>;

/// Run every API of `apis` at every span, each case on its own thread under the
/// watchdog, two at a time; fail once with every failing case.
fn sweep(what: &str, apis: &[(&'static str, Check)]) {
    silence_deliberate_panics();
    let cases: Vec<(&'static str, Check, Span)> = apis
        .iter()
        .flat_map(|&(api, check)| SPANS.map(|span| (api, check, span)))
        .collect();
    let failures = run_rows(&cases, 2, |&(api, check, span)| {
        let name = format!("{api} with {span:?}");
        match on_thread(&name, PATIENCE, move || check(span)) {
            Ok(failures) => failures
                .into_iter()
                .map(|f| format!("{name}: {f}"))
                .collect(),
            Err(why) => vec![format!("{name}: {why}")],
        }
    });
    assert_no_failures(what, cases.len(), &failures);
}

/// The refusal `message` at `refused_at`, none otherwise.
fn refused_at(span: Span, at: Span, message: &'static str) -> Option<&'static str> {
    (span == at).then_some(message)
}

/// `check` failed: add `what` to `failures`.
fn expect(failures: &mut Vec<String>, check: bool, what: impl FnOnce() -> String) {
    if !check {
        failures.push(what());
    }
}

/// Every counted item was dropped (watchdog: a stage may release on another thread).
fn expect_released(failures: &mut Vec<String>, live: &Live) {
    let left = live.settle();
    expect(failures, left == 0, || {
        format!("{left} items still alive at the end")
    });
}

/// A pool's timers all gone (fired or cancelled), within the watchdog.
fn expect_no_timers(failures: &mut Vec<String>, pool: &ThreadPool, what: &str) {
    if !wait_until(PATIENCE, || pool.pending_timers() == 0) {
        failures.push(format!(
            "{} timers still pending on the pool {what}",
            pool.pending_timers()
        ));
    }
}

fn pool(name: &str) -> ThreadPool {
    ThreadPool::builder().name(name).threads(1).build()
}

/// A virtual clock that has run for a second, as clocks do.
fn clock() -> VirtualTime {
    let clock = VirtualTime::new();
    clock.advance(Duration::from_secs(1));
    clock
}

/// The values of counted items.
fn values(items: Vec<Tracked>) -> Vec<u64> {
    items.into_iter().map(|item| item.value).collect()
}

/// A future that is pending once (it wakes itself), so an async stage sees a round
/// trip (a call that finishes in its first poll gives none).
#[derive(Default)]
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

// ---- mux ------------------------------------------------------------------------------

/// `MuxBuilder::stall_after`: any duration; a channel with items buffered and none
/// delivered for that long reads `stalled` (zero and 1 ns: as soon as items wait;
/// `Duration::MAX`: never). The receiving side is blocked (its one thread busy) while
/// ten items are sent, then released: every item arrives, the pool is whole again.
fn mux_stall_after(span: Span) -> Vec<String> {
    let mut failures = Vec::new();
    let (sending, receiving) = (pool("durations-mux"), pool("durations-mux-rx"));
    let mux = built!(
        None,
        Mux::<u64>::builder()
            .exclusive(16)
            .shared(16)
            .stall_after(span.d())
            .build_local(sending.clone(), receiving.clone())
    );
    let mux = match mux {
        Ok(mux) => mux,
        Err(e) => return vec![format!("build_local refused it: {e}")],
    };
    let (tx, rx) = weir::channel::<u64>(64, ChannelPolicy::Backpressure);
    let source = match rx.via(&mux, 7) {
        Ok(source) => source,
        Err(e) => return vec![format!("via refused channel 7: {e}")],
    };
    let mut all = source.collect();
    let channel = |mux: &Mux<u64>| mux.stats().channel(7).cloned();
    expect(
        &mut failures,
        wait_until(PATIENCE, || channel(&mux).is_some_and(|c| c.demand > 0)),
        || "the receiving subscriber's demand never reached the mux".to_owned(),
    );
    let (gate, closed) = mpsc::channel::<()>();
    let blocked = Arc::new(AtomicBool::new(false));
    let flag = blocked.clone();
    receiving.schedule(Box::new(move || {
        flag.store(true, Ordering::SeqCst);
        let _ = closed.recv_timeout(PATIENCE);
    }));
    wait_until(PATIENCE, || blocked.load(Ordering::SeqCst));
    for i in 0..10 {
        if let Err(e) = tx.try_send(i) {
            failures.push(format!("try_send({i}) refused: {e:?}"));
        }
    }
    let waiting = wait_until(PATIENCE, || channel(&mux).is_some_and(|c| c.buffered > 0));
    expect(&mut failures, waiting, || {
        "no item was ever sent to the blocked receiving side".to_owned()
    });
    std::thread::sleep(Duration::from_millis(1));
    let stalled = channel(&mux).map(|c| c.stalled);
    let documented = Some(span != Span::Max);
    expect(&mut failures, !waiting || stalled == documented, || {
        format!("with items waiting, stalled reads {stalled:?}; documented {documented:?}")
    });
    drop(gate);
    drop(tx);
    let got = all.wait_timeout(PATIENCE);
    expect(
        &mut failures,
        matches!(&got, Some(Ok(items)) if *items == (0..10).collect::<Vec<_>>()),
        || format!("the channel ended with {got:?}; expected Ok(0..10)"),
    );
    let stats = mux.stats();
    expect(&mut failures, stats.pool_free == stats.shared, || {
        format!("{} of {} shared units back", stats.pool_free, stats.shared)
    });
    drop(mux);
    sending.shutdown();
    receiving.shutdown();
    failures
}

/// `MuxBuilder::fairness_window`: "must be above zero" (zero: `build_local` returns
/// `MuxError::Config` naming it); `Duration::MAX` "means the index is never computed"
/// (`fairness` stays `None`). Four channels of 2,000 items each, all summed right.
fn mux_fairness_window(span: Span) -> Vec<String> {
    let mut failures = Vec::new();
    let sched = pool("durations-mux-fair");
    let mux = built!(
        None,
        Mux::<u64>::builder()
            .exclusive(8)
            .shared(32)
            .fairness_window(span.d())
            .build_local(sched.clone(), sched.clone())
    );
    let mux = match (mux, span) {
        (
            Err(MuxError::Config {
                parameter: "fairness_window",
                ..
            }),
            Span::Zero,
        ) => {
            sched.shutdown();
            return failures;
        }
        (Err(e), _) => return vec![format!("build_local returned {e}")],
        (Ok(_), Span::Zero) => {
            return vec!["a zero window was accepted; documented: must be above zero".to_owned()]
        }
        (Ok(mux), _) => mux,
    };
    let mut sums = Vec::new();
    for channel in 0..4u64 {
        match weir::range(0..2_000u64).via(&mux, channel) {
            Ok(source) => sums.push(source.fold(0u64, |sum, x| sum + x)),
            Err(e) => failures.push(format!("via refused channel {channel}: {e}")),
        }
    }
    for (channel, mut sum) in sums.into_iter().enumerate() {
        let got = sum.wait_timeout(PATIENCE);
        expect(&mut failures, matches!(got, Some(Ok(1_999_000))), || {
            format!("channel {channel} ended with {got:?}; expected Ok(1999000)")
        });
    }
    // Shared credit comes back as items are delivered, but a pass run by the
    // demultiplexer defers it to the end of its batch (`src/mux/source.rs`), which
    // may be just after the sink saw the end: waited for, not read at once.
    let whole = wait_until(PATIENCE, || {
        let stats = mux.stats();
        stats.pool_free == stats.shared
    });
    let stats = mux.stats();
    expect(&mut failures, whole, || {
        format!("{} of {} shared units back", stats.pool_free, stats.shared)
    });
    if span == Span::Max {
        expect(&mut failures, stats.fairness.is_none(), || {
            format!("fairness {:?} computed; documented: never", stats.fairness)
        });
    }
    drop(mux);
    sched.shutdown();
    failures
}

#[test]
fn mux_settings_with_extreme_durations() {
    sweep(
        "mux settings × durations",
        &[
            ("MuxBuilder::stall_after", mux_stall_after),
            ("MuxBuilder::fairness_window", mux_fairness_window),
        ],
    );
}

// ---- deadlines: admission, WithDeadline, on_backpressure_buffer -------------------------

/// The four budgets the deadline cases send with, by item value.
const BUDGETS: [Duration; 4] = [
    Duration::ZERO,
    Duration::from_millis(1),
    Duration::from_secs(1),
    Duration::MAX,
];

/// `Admission::deadlines(min_useful)`: an item "already past its deadline or with
/// less than `min_useful` of its budget left" is refused `Late`; one whose deadline
/// passes while it waits is dropped at the head (`DeadlineExceeded`). Items with
/// budgets 0, 1 ms, 1 s and `MAX` (`WithDeadline::within`), then 2 ms pass, then the
/// consumer reads: zero refuses none, 1 ns the one with nothing left, `MAX` all four
/// (no budget reaches `Duration::MAX`); the 0 and 1 ms items that got in expire.
fn admission_deadlines(span: Span) -> Vec<String> {
    let clock = clock();
    let live = Live::new();
    let admission = built!(None, Admission::new().deadlines(span.d()));
    let (tx, rx) = ChannelBuilder::new(8, ChannelPolicy::Backpressure)
        .clock(clock.clone())
        .build_with(admission);
    let items = BUDGETS
        .iter()
        .enumerate()
        .map(|(i, budget)| WithDeadline::within(Tracked::new(i as u64, &live), *budget, &clock));
    let late_expected: Vec<u64> = match span {
        Span::Zero => vec![],
        Span::OneNano => vec![0],
        Span::Max => vec![0, 1, 2, 3],
    };
    run_deadline_channel(tx, rx, items, late_expected, &clock, &live)
}

/// `Admission::deadlines_by(min_useful, read)`: as [`admission_deadlines`], for items
/// that carry their deadline as a plain field (an item without one is never late).
/// Items: no deadline, due now, in 1 ms, in 1 s.
fn admission_deadlines_by(span: Span) -> Vec<String> {
    let clock = clock();
    let live = Live::new();
    let admission = built!(
        None,
        Admission::new().deadlines_by(span.d(), |item: &Timed| item.1)
    );
    let (tx, rx) = ChannelBuilder::new(8, ChannelPolicy::Backpressure)
        .clock(clock.clone())
        .build_with(admission);
    let now = clock.now();
    let deadlines = [
        None,
        Some(now),
        Some(now + Duration::from_millis(1)),
        Some(now + Duration::from_secs(1)),
    ];
    let items = deadlines
        .into_iter()
        .enumerate()
        .map(|(i, at)| Timed(Tracked::new(i as u64, &live), at));
    let late_expected: Vec<u64> = match span {
        Span::Zero => vec![],
        Span::OneNano => vec![1],
        Span::Max => vec![1, 2, 3],
    };
    run_deadline_channel(tx, rx, items, late_expected, &clock, &live)
}

/// An item with its deadline as a field.
#[derive(Debug)]
struct Timed(Tracked, Option<Instant>);

impl Deadline for Timed {
    fn deadline(&self) -> Option<Instant> {
        self.1
    }
}

/// Something that carries a counted item.
trait Carries: Send + 'static + std::fmt::Debug {
    fn value(&self) -> u64;
}

impl Carries for WithDeadline<Tracked> {
    fn value(&self) -> u64 {
        self.get().value
    }
}

impl Carries for Timed {
    fn value(&self) -> u64 {
        self.0.value
    }
}

/// Send `items` (values 0..4) into a deadline-keeping channel, check which were
/// refused `Late`, let 2 ms pass, close, read: the admitted ones whose deadline is
/// more than 2 ms away arrive; the others were dropped at the head.
fn run_deadline_channel<T: Carries + Deadline>(
    tx: weir::source::channel::Sender<T>,
    rx: weir::source::channel::Channel<T>,
    items: impl Iterator<Item = T>,
    late_expected: Vec<u64>,
    clock: &VirtualTime,
    live: &Live,
) -> Vec<String> {
    let mut failures = Vec::new();
    let monitor = rx.monitor();
    let start = clock.now();
    let mut late = Vec::new();
    let mut admitted = Vec::new();
    for item in items {
        let (value, deadline) = (item.value(), item.deadline());
        match tx.try_send(item) {
            Ok(()) => admitted.push((value, deadline)),
            Err(TrySendError::Late(_)) => late.push(value),
            Err(e) => failures.push(format!("item {value} refused: {e:?}")),
        }
    }
    expect(&mut failures, late == late_expected, || {
        format!("refused Late: {late:?}; documented: {late_expected:?}")
    });
    clock.advance(Duration::from_millis(2));
    let now = clock.now();
    let served_expected: Vec<u64> = admitted
        .iter()
        .filter(|(_, deadline)| deadline.map_or(true, |at| at >= now))
        .map(|(value, _)| *value)
        .collect();
    let expired = (admitted.len() - served_expected.len()) as u64;
    drop(tx);
    let got = rx.map(|item| item.value()).collect().wait_timeout(PATIENCE);
    expect(
        &mut failures,
        matches!(&got, Some(Ok(served)) if *served == served_expected),
        || format!("the consumer got {got:?}; documented: Ok({served_expected:?})"),
    );
    let stats = monitor.snapshot();
    expect(
        &mut failures,
        stats.late == late_expected.len() as u64
            && stats.dropped(DropReason::DeadlineExceeded) == expired,
        || {
            format!(
                "counted late {} and DeadlineExceeded {}; documented {} and {expired} \
                 (deadlines from {start:?})",
                stats.late,
                stats.dropped(DropReason::DeadlineExceeded),
                late_expected.len()
            )
        },
    );
    expect_released(&mut failures, live);
    failures
}

/// `WithDeadline::within(item, budget, clock)`: "A budget too large for the clock
/// (`Duration::MAX`) means no deadline in practice". The budget left reads the budget
/// (zero: none left, yet not expired at the instant itself); the item then waits in
/// `on_backpressure_buffer(..).deadlines()` while 2 ns pass: zero and 1 ns are dropped
/// at the head, `MAX` is delivered. Also made on a clock at the end of its range
/// (`VirtualTime` moved by `Duration::MAX`) and on the wall clock: no panic.
fn with_deadline_within(span: Span) -> Vec<String> {
    let mut failures = Vec::new();
    let clock = clock();
    let live = Live::new();
    let now = clock.now();
    let job = built!(
        None,
        WithDeadline::within(Tracked::new(0, &live), span.d(), &clock)
    );
    let left = job.remaining_at(now);
    let left_ok = match span {
        Span::Max => left >= Duration::from_secs(50 * 365 * DAY.as_secs()),
        _ => left == span.d(),
    };
    expect(&mut failures, left_ok && !job.is_expired_at(now), || {
        format!(
            "within({:?}) leaves {left:?}, expired {}",
            span.d(),
            job.is_expired_at(now)
        )
    });
    let other = WithDeadline::within(Tracked::new(1, &live), Duration::from_secs(1), &clock);
    let buffered = weir::from_iter(vec![job, other])
        .on_backpressure_buffer(8, Overflow::DropOldest)
        .deadlines()
        .clock(clock.clone());
    let monitor = buffered.monitor();
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    buffered
        .map(|job| job.into_inner().value)
        .subscribe(subscriber);
    clock.advance(Duration::from_nanos(2));
    probe.request(2);
    let ended = probe.await_completion(PATIENCE);
    let got = probe.items();
    let documented: Vec<u64> = if span == Span::Max {
        vec![0, 1]
    } else {
        vec![1]
    };
    expect(&mut failures, ended.is_ok() && got == documented, || {
        format!("delivered {got:?} ({ended:?}); documented {documented:?} and completion")
    });
    let dropped = monitor.snapshot().dropped(DropReason::DeadlineExceeded);
    let documented_drops = u64::from(span != Span::Max);
    expect(&mut failures, dropped == documented_drops, || {
        format!("{dropped} DeadlineExceeded drops; documented {documented_drops}")
    });
    let ended = VirtualTime::new();
    ended.advance(Duration::MAX);
    match expect_panic(|| WithDeadline::within(2u8, span.d(), &ended)) {
        Ok(job) => expect(&mut failures, !job.is_expired_at(ended.now()), || {
            "made at the clock's last instant, it is expired at once".to_owned()
        }),
        Err(why) => failures.push(format!("within on a clock at its end panicked: {why}")),
    }
    if let Err(why) = expect_panic(|| WithDeadline::within(3u8, span.d(), &Immediate)) {
        failures.push(format!("within on the wall clock panicked: {why}"));
    }
    drop(probe);
    expect_released(&mut failures, &live);
    failures
}

#[test]
fn deadlines_with_extreme_durations() {
    sweep(
        "deadlines × durations",
        &[
            ("Admission::deadlines", admission_deadlines),
            ("Admission::deadlines_by", admission_deadlines_by),
            ("WithDeadline::within", with_deadline_within),
        ],
    );
}

// ---- queues: snapshot_over, Capacity::for_wait, TimeBounds -------------------------

/// `QueueMonitor::snapshot_over(window)`: "clamped to 2 s..=60 s: `Duration::ZERO`
/// reads over 2 s, `Duration::MAX` over a minute". Read on the three queues weir
/// builds (a channel, `on_backpressure_buffer`, `publish_on`) while items wait and
/// after they drained: the counts are right (what entered a queue left it), the
/// rates finite.
fn snapshot_over(span: Span) -> Vec<String> {
    let mut failures = Vec::new();
    let sched = pool("durations-snapshot");
    let read = |failures: &mut Vec<String>, queue: &str, monitor: &weir::metrics::QueueMonitor| {
        match expect_panic(|| monitor.snapshot_over(span.d())) {
            Ok(stats) => {
                let rates = [stats.arrival_rate, stats.drain_rate];
                expect(
                    failures,
                    rates.iter().all(|r| r.is_finite() && *r >= 0.0),
                    || format!("{queue}: rates {rates:?}"),
                );
                Some(stats)
            }
            Err(why) => {
                failures.push(format!("{queue}: snapshot_over panicked: {why}"));
                None
            }
        }
    };
    // A channel: 50 items wait, then drain.
    let (tx, rx) = weir::channel::<u64>(64, ChannelPolicy::Backpressure);
    let monitor = rx.monitor();
    for i in 0..50 {
        let _ = tx.try_send(i);
    }
    if let Some(stats) = read(&mut failures, "channel (waiting)", &monitor) {
        expect(
            &mut failures,
            stats.depth == 50 && stats.enqueued == 50,
            || format!("channel: depth {} enqueued {}", stats.depth, stats.enqueued),
        );
    }
    drop(tx);
    let got = rx.collect().wait_timeout(PATIENCE);
    expect(
        &mut failures,
        matches!(&got, Some(Ok(v)) if v.len() == 50),
        || format!("channel: the consumer got {got:?}"),
    );
    if let Some(stats) = read(&mut failures, "channel (drained)", &monitor) {
        expect(
            &mut failures,
            stats.dequeued == 50 && stats.depth == 0,
            || format!("channel: depth {} dequeued {}", stats.depth, stats.dequeued),
        );
    }
    // on_backpressure_buffer and publish_on, drained.
    let buffered = weir::range(0..50u64).on_backpressure_buffer(64, Overflow::DropOldest);
    let buffer_monitor = buffered.monitor();
    let boundary = weir::range(0..50u64).publish_on(sched.clone(), 16);
    let boundary_monitor = boundary.monitor();
    for (queue, handle, monitor) in [
        (
            "on_backpressure_buffer",
            buffered.boxed().collect(),
            buffer_monitor,
        ),
        ("publish_on", boundary.boxed().collect(), boundary_monitor),
    ] {
        let mut handle = handle;
        let got = handle.wait_timeout(PATIENCE);
        expect(
            &mut failures,
            matches!(&got, Some(Ok(v)) if v.len() == 50),
            || format!("{queue}: the consumer got {got:?}"),
        );
        if let Some(stats) = read(&mut failures, queue, &monitor) {
            // Items the stage hands on at once never wait in its queue: whatever
            // entered it left it.
            expect(
                &mut failures,
                stats.enqueued == stats.dequeued && stats.depth == 0,
                || {
                    format!(
                        "{queue}: enqueued {} dequeued {} depth {}",
                        stats.enqueued, stats.dequeued, stats.depth
                    )
                },
            );
        }
    }
    sched.shutdown();
    failures
}

/// `Capacity::for_wait(drain_rate, budget)` = ⌈rate × budget⌉: zero is refused with
/// "wait budget must be greater than zero"; 1 ns at 1,200/s is one slot (a channel of
/// that capacity takes one item and refuses the next); `MAX` exceeds `MAX_CAPACITY`
/// and is refused with a `SizingError`, not a panic.
fn capacity_for_wait(span: Span) -> Vec<String> {
    let mut failures = Vec::new();
    let sized = built!(None, Capacity::for_wait(1_200.0, span.d()));
    match (span, sized) {
        (Span::Zero, Err(e)) => expect(
            &mut failures,
            e.to_string() == "impossible queue sizing: wait budget must be greater than zero",
            || format!("refused with {e}"),
        ),
        (Span::Max, Err(e)) => expect(
            &mut failures,
            e.to_string().contains("exceeds MAX_CAPACITY"),
            || format!("refused with {e}"),
        ),
        (Span::OneNano, Ok(capacity)) => {
            expect(&mut failures, capacity.get() == 1, || {
                format!("{} slots; documented ⌈1200/s × 1ns⌉ = 1", capacity.get())
            });
            let (tx, rx) =
                ChannelBuilder::new(capacity, ChannelPolicy::Backpressure).build::<u64>();
            let first = tx.try_send(1);
            let second = tx.try_send(2);
            expect(
                &mut failures,
                first.is_ok() && matches!(second, Err(TrySendError::Full(2))),
                || format!("a channel of one slot answered {first:?} then {second:?}"),
            );
            drop(tx);
            let got = rx.collect().wait_timeout(PATIENCE);
            expect(
                &mut failures,
                matches!(&got, Some(Ok(v)) if *v == [1]),
                || format!("the consumer got {got:?}"),
            );
        }
        (_, other) => failures.push(format!("for_wait(1200/s, {:?}) = {other:?}", span.d())),
    }
    failures
}

/// Where a `TimeBounds` is used: the push source and `on_backpressure_buffer` (every
/// bound), `publish_on_with` (maximum age only).
#[derive(Clone, Copy, Debug)]
enum QueueUser {
    Channel,
    Buffer,
    Boundary,
}

/// Items 0..5 queue, `pause` passes on the queue's virtual clock, item 5 arrives, the
/// consumer reads everything: what it got, the drops by reason, and the failures of
/// the run itself (a panic, a consumer that never finished, items left alive).
fn through_bounds(
    user: QueueUser,
    bounds: TimeBounds,
    pause: Duration,
) -> Result<(Vec<u64>, weir::metrics::QueueStats), String> {
    let clock = clock();
    let live = Live::new();
    let result = match user {
        QueueUser::Channel => {
            let (tx, rx) = ChannelBuilder::new(16, ChannelPolicy::Backpressure)
                .time_bounds(bounds)
                .clock(clock.clone())
                .build::<Tracked>();
            let monitor = rx.monitor();
            for i in 0..5 {
                let _ = tx.try_send(Tracked::new(i, &live));
            }
            clock.advance(pause);
            let _ = tx.try_send(Tracked::new(5, &live));
            drop(tx);
            let got = rx.collect().wait_timeout(PATIENCE);
            match got {
                Some(Ok(items)) => Ok((values(items), monitor.snapshot())),
                other => Err(format!("the consumer got {other:?}")),
            }
        }
        QueueUser::Buffer | QueueUser::Boundary => {
            // A plain channel feeds the stage, which holds what nobody asked for yet.
            let (tx, rx) = weir::channel::<Tracked>(16, ChannelPolicy::Backpressure);
            let subscriber = TestSubscriber::new();
            let probe = subscriber.probe();
            let monitor = match user {
                QueueUser::Buffer => {
                    let stage = rx
                        .on_backpressure_buffer(16, Overflow::DropOldest)
                        .time_bounds(bounds)
                        .clock(clock.clone());
                    let monitor = stage.monitor();
                    stage.map(|item| item.value).subscribe(subscriber);
                    monitor
                }
                QueueUser::Boundary => {
                    let stage = rx.publish_on_with(clock.clone(), 16, bounds);
                    let monitor = stage.monitor();
                    stage.map(|item| item.value).subscribe(subscriber);
                    monitor
                }
                QueueUser::Channel => unreachable!(),
            };
            clock.run_ready();
            for i in 0..5 {
                let _ = tx.try_send(Tracked::new(i, &live));
            }
            clock.run_ready();
            clock.advance(pause);
            let _ = tx.try_send(Tracked::new(5, &live));
            drop(tx);
            clock.run_ready();
            probe.request(100);
            clock.run_ready();
            let ended = probe.await_completion(PATIENCE);
            clock.run_ready();
            match ended {
                Ok(()) => Ok((probe.items(), monitor.snapshot())),
                Err(e) => Err(format!(
                    "the consumer never completed: {e} (got {:?})",
                    probe.items()
                )),
            }
        }
    };
    let left = live.settle();
    if left != 0 {
        return Err(format!("{left} items still alive at the end ({result:?})"));
    }
    result
}

/// Run `bounds` on `user`s and compare with what the docs promise: the values
/// delivered (in order) and the drops of `reason`.
fn expect_bounds(
    failures: &mut Vec<String>,
    users: &[QueueUser],
    bounds: TimeBounds,
    pause: Duration,
    delivered: &[u64],
    reason: DropReason,
    drops: u64,
) {
    for &user in users {
        match expect_panic(|| through_bounds(user, bounds, pause)) {
            Ok(Ok((got, stats))) => expect(
                failures,
                got == delivered && stats.dropped(reason) == drops,
                || {
                    format!(
                        "{user:?} after {pause:?}: delivered {got:?} with {} {reason:?} drops; \
                         documented {delivered:?} with {drops}",
                        stats.dropped(reason)
                    )
                },
            ),
            Ok(Err(why)) => failures.push(format!("{user:?} after {pause:?}: {why}")),
            Err(why) => failures.push(format!("{user:?} after {pause:?} panicked: {why}")),
        }
    }
}

const ALL_USERS: [QueueUser; 3] = [QueueUser::Channel, QueueUser::Buffer, QueueUser::Boundary];

/// `TimeBounds::max_age`: zero is refused ("every item would expire"); items that
/// waited longer are dropped (`Expired`). 1 ns: the five items that waited 1 ms are
/// dropped, the fresh one delivered; `MAX`: nothing expires after a day.
fn time_bounds_max_age(span: Span) -> Vec<String> {
    let mut failures = Vec::new();
    let bounds = built!(
        refused_at(
            span,
            Span::Zero,
            "TimeBounds::max_age must be greater than zero (got 0ns)"
        ),
        TimeBounds::none().max_age(span.d())
    );
    match span {
        Span::OneNano => expect_bounds(
            &mut failures,
            &ALL_USERS,
            bounds,
            Duration::from_millis(1),
            &[5],
            DropReason::Expired,
            5,
        ),
        _ => expect_bounds(
            &mut failures,
            &ALL_USERS,
            bounds,
            DAY,
            &[0, 1, 2, 3, 4, 5],
            DropReason::Expired,
            0,
        ),
    }
    failures
}

/// `TimeBounds::adaptive_lifo(interval)`: zero is refused; once the queue stood
/// non-empty for the interval it serves newest first until empty. 1 ns: after 1 ms of
/// standing, 5..0; `MAX`: a day of standing is not the interval, 0..5 in order.
/// `publish_on_with` refuses it, as documented, at every interval.
fn time_bounds_adaptive_lifo(span: Span) -> Vec<String> {
    let mut failures = Vec::new();
    let bounds = built!(
        refused_at(
            span,
            Span::Zero,
            "TimeBounds::adaptive_lifo interval must be greater than zero (got 0ns)"
        ),
        TimeBounds::none().adaptive_lifo(span.d())
    );
    let (pause, order): (Duration, Vec<u64>) = match span {
        Span::OneNano => (Duration::from_millis(1), vec![5, 4, 3, 2, 1, 0]),
        _ => (DAY, vec![0, 1, 2, 3, 4, 5]),
    };
    let users = [QueueUser::Channel, QueueUser::Buffer];
    expect_bounds(
        &mut failures,
        &users,
        bounds,
        pause,
        &order,
        DropReason::CoDel,
        0,
    );
    expect_boundary_refuses(&mut failures, bounds);
    failures
}

/// The documented refusal of adaptive LIFO and CoDel by `publish_on_with`.
fn expect_boundary_refuses(failures: &mut Vec<String>, bounds: TimeBounds) {
    let refused = expect_panic(|| {
        let _ = weir::range(0..3u64).publish_on_with(Immediate, 4, bounds);
    });
    let documented = "publish_on_with: adaptive LIFO and CoDel do not apply to an async boundary";
    expect(
        failures,
        matches!(&refused, Err(message) if message.starts_with(documented)),
        || format!("publish_on_with({bounds:?}): {refused:?}; documented a panic {documented:?}…"),
    );
}

/// `TimeBounds::codel(target, interval)` with the target at the span and an interval
/// of 100 ms: zero is refused, `MAX` is refused (not below the interval); 1 ns: after
/// the queue stood 150 ms, the five items that waited are shed (`CoDel`) and the
/// fresh one delivered (the README's example with a 1 ns target).
fn codel_target(span: Span) -> Vec<String> {
    let mut failures = Vec::new();
    let interval = Duration::from_millis(100);
    let refusal = match span {
        Span::Zero => Some(
            "TimeBounds::codel target and interval must be greater than zero (got 0ns and 100ms)",
        ),
        Span::Max => Some(
            "TimeBounds::codel target (18446744073709551615.999999999s) must be below interval \
             (100ms)",
        ),
        Span::OneNano => None,
    };
    let bounds = built!(refusal, TimeBounds::none().codel(span.d(), interval));
    let users = [QueueUser::Channel, QueueUser::Buffer];
    expect_bounds(
        &mut failures,
        &users,
        bounds,
        Duration::from_millis(150),
        &[5],
        DropReason::CoDel,
        5,
    );
    expect_boundary_refuses(&mut failures, bounds);
    failures
}

/// `TimeBounds::codel(target, interval)` with a 5 ms target and the interval at the
/// span: zero is refused, 1 ns is refused (the target is not below it); `MAX`: the
/// queue never stands a whole interval, so a day of waiting sheds nothing. Then a
/// target 1 ns below `Duration::MAX`: nothing shed either, no overflow.
fn codel_interval(span: Span) -> Vec<String> {
    let mut failures = Vec::new();
    let target = Duration::from_millis(5);
    let refusal = match span {
        Span::Zero => Some(
            "TimeBounds::codel target and interval must be greater than zero (got 5ms and 0ns)",
        ),
        Span::OneNano => Some("TimeBounds::codel target (5ms) must be below interval (1ns)"),
        Span::Max => None,
    };
    let bounds = built!(refusal, TimeBounds::none().codel(target, span.d()));
    let users = [QueueUser::Channel, QueueUser::Buffer];
    let all = [0, 1, 2, 3, 4, 5];
    expect_bounds(
        &mut failures,
        &users,
        bounds,
        DAY,
        &all,
        DropReason::CoDel,
        0,
    );
    let widest = built!(
        None,
        TimeBounds::none().codel(Duration::MAX - Duration::from_nanos(1), Duration::MAX)
    );
    expect_bounds(
        &mut failures,
        &users,
        widest,
        DAY,
        &all,
        DropReason::CoDel,
        0,
    );
    failures
}

#[test]
fn queue_settings_with_extreme_durations() {
    sweep(
        "queue settings × durations",
        &[
            ("QueueMonitor::snapshot_over", snapshot_over),
            ("Capacity::for_wait", capacity_for_wait),
            ("TimeBounds::max_age", time_bounds_max_age),
            ("TimeBounds::adaptive_lifo", time_bounds_adaptive_lifo),
            (
                "TimeBounds::codel(target = span, interval = 100ms)",
                codel_target,
            ),
            (
                "TimeBounds::codel(target = 5ms, interval = span)",
                codel_interval,
            ),
        ],
    );
}

// ---- metrics export -------------------------------------------------------------------

/// `Exporter::every(period, scheduler)`: zero panics ("Exporter::every: the period
/// must be positive"); it exports at once and then every period until the handle is
/// dropped; "a period that does not fit the scheduler's clock (`Duration::MAX`)
/// exports once only". On a `VirtualTime` (exports counted by a recorder of the
/// test's thread): 1 ns exports once more per nanosecond moved, and nothing after the
/// handle is dropped; `MAX` once, with nothing armed. On a `ThreadPool`: no timer
/// left once the handle is dropped.
#[cfg(feature = "metrics")]
fn exporter_every(span: Span) -> Vec<String> {
    use weir::metrics::export::Exporter;
    use weir::metrics::Registry;

    let mut failures = Vec::new();
    let registry = Registry::new();
    let (tx, rx) = weir::channel::<u64>(8, ChannelPolicy::Backpressure);
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    rx.name("durations-export")
        .registry(&registry)
        .subscribe(subscriber);
    let clock = clock();
    let recorder = ExportCounter::default();
    let exports = recorder.exports.clone();
    let count = || exports.load(Ordering::SeqCst);
    let refusal = refused_at(
        span,
        Span::Zero,
        "Exporter::every: the period must be positive",
    );
    let exporter = Exporter::new(&registry);
    let handle = built!(
        refusal,
        metrics::with_local_recorder(&recorder, || exporter.every(span.d(), clock.clone()))
    );
    expect(&mut failures, count() == 1, || {
        format!(
            "{} exports inside every(); documented: the first one",
            count()
        )
    });
    metrics::with_local_recorder(&recorder, || {
        clock.advance(Duration::from_nanos(5));
        let documented = if span == Span::Max { 1 } else { 6 };
        expect(&mut failures, count() == documented, || {
            format!("{} exports after 5 ns; documented {documented}", count())
        });
        drop(handle);
        clock.advance(Duration::from_nanos(5));
        clock.advance(Duration::MAX);
        expect(
            &mut failures,
            count() == documented && clock.pending() == 0,
            || {
                format!(
                    "after the handle was dropped: {} exports, {} tasks queued",
                    count(),
                    clock.pending()
                )
            },
        );
    });
    let sched = pool("durations-export");
    let periodic = Exporter::new(&registry).every(span.d(), sched.clone());
    std::thread::sleep(Duration::from_millis(5));
    drop(periodic);
    expect_no_timers(&mut failures, &sched, "after the export handle was dropped");
    // A period that fits the clock but is far off: dropping the handle removes the
    // queued tick now (the pool held it, and the exporter, until it fell due).
    let hourly = Exporter::new(&registry).every(Duration::from_secs(3_600), sched.clone());
    drop(hourly);
    expect_no_timers(
        &mut failures,
        &sched,
        "after an hourly export's handle was dropped",
    );
    sched.shutdown();
    probe.cancel();
    drop(tx);
    failures
}

#[cfg(feature = "metrics")]
#[test]
fn periodic_export_with_extreme_durations() {
    sweep(
        "Exporter::every × durations",
        &[("Exporter::every", exporter_every)],
    );
}

// ---- hub ------------------------------------------------------------------------------

/// `Policy::disconnect_after(max_age)`: zero panics ("hub: a Disconnect age limit must
/// be positive"); a subscriber whose next item is older than the limit is cut off
/// with `Lagged`. A subscriber that asks for nothing beside one that takes all 200
/// items (a ring of 1,024: never a whole ring behind): 1 ns cuts it (checked at item
/// 64), `MAX` never does, and it then reads all 200 items and the completion.
fn hub_disconnect_after(span: Span) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    let policy = built!(
        refused_at(
            span,
            Span::Zero,
            "hub: a Disconnect age limit must be positive"
        ),
        Policy::disconnect_after(span.d())
    );
    let counted = live.clone();
    let source = weir::range(0..200u64).map(move |i| Arc::new(Tracked::new(i, &counted)));
    let hub = Hub::builder(source, 1_024).connect_at(2).build();
    let lazy = TestSubscriber::<Arc<Tracked>>::new();
    let lazy_probe = lazy.probe();
    hub.join(policy).subscribe(lazy);
    let got = hub
        .clone()
        .map(|item| item.value)
        .collect()
        .wait_timeout(PATIENCE);
    expect(
        &mut failures,
        matches!(&got, Some(Ok(v)) if *v == (0..200).collect::<Vec<_>>()),
        || format!("the Backpressure subscriber got {got:?}"),
    );
    match span {
        Span::OneNano => {
            let error = lazy_probe.await_error(PATIENCE);
            expect(
                &mut failures,
                matches!(&error, Ok(e) if e.kind() == ErrorKind::Lagged),
                || format!("the subscriber behind its 1 ns limit ended with {error:?}"),
            );
        }
        _ => {
            expect(&mut failures, lazy_probe.terminal().is_none(), || {
                format!(
                    "the subscriber with no age limit ended: {:?}",
                    lazy_probe.terminal()
                )
            });
            lazy_probe.request(u64::MAX);
            let ended = lazy_probe.await_completion(PATIENCE);
            expect(
                &mut failures,
                ended.is_ok() && lazy_probe.received_count() == 200,
                || {
                    format!(
                        "then asking for everything: {} items, {ended:?}",
                        lazy_probe.received_count()
                    )
                },
            );
        }
    }
    drop((hub, lazy_probe));
    expect_released(&mut failures, &live);
    failures
}

/// Which scheduler a linger runs on.
#[derive(Clone, Copy, Debug)]
enum LingerOn {
    Pool,
    Virtual,
}

/// `HubBuilder::linger(grace, scheduler)`: when the last subscriber leaves, upstream
/// stays subscribed for the grace, then is cancelled; "`Duration::MAX` never
/// cancels". A hub over an endless range: a subscriber takes 3 items and leaves.
/// Zero and 1 ns: upstream is cancelled (on a `VirtualTime` once its clock reached
/// the grace), and a later subscriber gets `Cancelled`. `MAX`: upstream stays (after
/// a day, or `Duration::MAX`, of virtual time), no timer is armed, and a later
/// subscriber gets items.
fn hub_linger(span: Span) -> Vec<String> {
    let mut failures = Vec::new();
    for on in [LingerOn::Pool, LingerOn::Virtual] {
        let sched = pool("durations-linger");
        let clock = VirtualTime::new();
        let cancelled = Arc::new(AtomicBool::new(false));
        let flag = cancelled.clone();
        let source =
            weir::range(0..u64::MAX).inspect_cancel(move || flag.store(true, Ordering::SeqCst));
        let builder = Hub::builder(source, 16);
        let builder = match on {
            LingerOn::Pool => built!(None, builder.linger(span.d(), sched.clone())),
            LingerOn::Virtual => built!(None, builder.linger(span.d(), clock.clone())),
        };
        let hub = builder.build();
        let first = hub.clone().take(3).collect().wait_timeout(PATIENCE);
        expect(
            &mut failures,
            matches!(&first, Some(Ok(v)) if *v == [0, 1, 2]),
            || format!("{on:?}: the first subscriber got {first:?}"),
        );
        let is_cancelled = || cancelled.load(Ordering::SeqCst);
        match (span, on) {
            (Span::Max, _) => {
                match on {
                    LingerOn::Pool => std::thread::sleep(WATCH),
                    LingerOn::Virtual => {
                        expect(&mut failures, clock.pending() == 0, || {
                            format!(
                                "{on:?}: {} tasks queued for a linger that never ends",
                                clock.pending()
                            )
                        });
                        clock.advance(DAY);
                        clock.advance(Duration::MAX);
                    }
                }
                expect(
                    &mut failures,
                    !is_cancelled() && hub.stats().connected,
                    || format!("{on:?}: upstream was cancelled; documented: never"),
                );
                let again = hub.clone().take(2).collect().wait_timeout(PATIENCE);
                expect(
                    &mut failures,
                    matches!(&again, Some(Ok(v)) if v.len() == 2),
                    || {
                        format!("{on:?}: a later subscriber got {again:?}; documented: the running hub's items")
                    },
                );
            }
            (_, LingerOn::Virtual) => {
                if span == Span::OneNano {
                    clock.run_ready();
                    expect(&mut failures, !is_cancelled(), || {
                        format!("{on:?}: upstream cancelled before the 1 ns grace passed")
                    });
                }
                clock.advance(Duration::from_nanos(1));
                expect(&mut failures, is_cancelled(), || {
                    format!("{on:?}: upstream still subscribed once the grace passed")
                });
            }
            (_, LingerOn::Pool) => {
                expect(&mut failures, wait_until(PATIENCE, is_cancelled), || {
                    format!(
                        "{on:?}: upstream never cancelled after a grace of {:?}",
                        span.d()
                    )
                });
            }
        }
        if span != Span::Max {
            let late = hub.clone().collect().wait_timeout(PATIENCE);
            expect(
                &mut failures,
                matches!(&late, Some(Err(e)) if e.kind() == ErrorKind::Cancelled),
                || {
                    format!(
                        "{on:?}: a subscriber after the linger got {late:?}; documented Cancelled"
                    )
                },
            );
        }
        drop(hub);
        expect_no_timers(&mut failures, &sched, "after the hub stopped");
        sched.shutdown();
    }
    failures
}

#[test]
fn hub_settings_with_extreme_durations() {
    sweep(
        "hub settings × durations",
        &[
            ("Policy::disconnect_after", hub_disconnect_after),
            ("HubBuilder::linger", hub_linger),
        ],
    );
}

// ---- concurrency limit, sink wait ----------------------------------------------------

/// `Aimd::new(initial, min, max, slow, backoff)`: zero `slow` panics with the
/// documented message; "a call slower than `slow` cuts the limit". 64 calls through
/// `map_async_on` (each pending once): all results in order, 64 round trips, the
/// limit within `min..=max`; with `MAX` no call is slower, so the limit never falls
/// below its start.
fn aimd_slow(span: Span) -> Vec<String> {
    let mut failures = Vec::new();
    let aimd = built!(
        refused_at(
            span,
            Span::Zero,
            "Aimd slow must be greater than zero (got 0ns)"
        ),
        Aimd::new(4, 1, 8, span.d(), 0.5)
    );
    let sched = pool("durations-aimd");
    let stage = weir::range(0..64u64)
        .map_async_on(sched.clone(), 8, true, |x| async move {
            YieldOnce::default().await;
            x * 2
        })
        .limit(aimd);
    let monitor = stage.limit_monitor();
    let got = stage.collect().wait_timeout(PATIENCE);
    expect(
        &mut failures,
        matches!(&got, Some(Ok(v)) if *v == (0..64).map(|x| x * 2).collect::<Vec<_>>()),
        || format!("the stage ended with {got:?}"),
    );
    let stats = monitor.snapshot();
    let floor = if span == Span::Max { 4 } else { 1 };
    expect(
        &mut failures,
        stats.samples == 64 && (floor..=8).contains(&stats.limit),
        || {
            format!(
                "{} round trips, limit {}; documented 64 and {floor}..=8",
                stats.samples, stats.limit
            )
        },
    );
    sched.shutdown();
    failures
}

/// `SinkHandle::wait_timeout(timeout)`: `None` "if the stream is still running", the
/// result once it ended; "a timeout that does not fit the clock (`Duration::MAX`)
/// waits as long as `wait`". A running stream (zero and 1 ns: `None` at once), an
/// ended one (the result at once), and one that ends 10 ms later on another thread
/// (`MAX`: one call returns its result; zero and 1 ns: polled until it does).
fn sink_wait_timeout(span: Span) -> Vec<String> {
    let mut failures = Vec::new();
    let d = span.d();
    if span != Span::Max {
        let mut running = weir::never::<u64>().collect();
        let got = running.wait_timeout(d);
        expect(&mut failures, got.is_none(), || {
            format!("a running stream: {got:?}; documented None")
        });
        running.cancel();
    }
    let mut ended = weir::range(0..3u64).collect();
    let got = ended.wait_timeout(d);
    expect(
        &mut failures,
        matches!(&got, Some(Ok(v)) if *v == [0, 1, 2]),
        || format!("an ended stream: {got:?}"),
    );
    let (tx, rx) = weir::channel::<u64>(8, ChannelPolicy::Backpressure);
    let mut later = rx.collect();
    let producer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(10));
        let _ = tx.try_send(1);
        let _ = tx.try_send(2);
    });
    let start = Instant::now();
    let got = loop {
        match later.wait_timeout(d) {
            Some(result) => break Some(result),
            None if span == Span::Max => break None,
            None if start.elapsed() > PATIENCE => break None,
            None => std::thread::sleep(Duration::from_millis(1)),
        }
    };
    expect(
        &mut failures,
        matches!(&got, Some(Ok(v)) if *v == [1, 2]),
        || format!("a stream that ends later: {got:?}"),
    );
    let _ = producer.join();
    failures
}

#[test]
fn limits_and_waits_with_extreme_durations() {
    sweep(
        "Aimd and SinkHandle × durations",
        &[
            ("Aimd::new(slow)", aimd_slow),
            ("SinkHandle::wait_timeout", sink_wait_timeout),
        ],
    );
}

// ---- retry ----------------------------------------------------------------------------

type Call = Result<u64, RetryError<String>>;

/// An operation that always fails, counting its attempts.
fn failing(
    attempts: &Arc<AtomicU64>,
) -> impl Fn(u64) -> std::future::Ready<Result<u64, String>> + Send + Sync + 'static {
    let attempts = attempts.clone();
    move |_| {
        attempts.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Err("down".to_owned()))
    }
}

/// `policy` applied to an always-failing call, `n` items through `map_async_on`
/// (`concurrency` 1: the calls one after another), timers on `sched`: the results,
/// or why there are none.
fn retried<C: Scheduler + Clone>(
    policy: &RetryPolicy<String>,
    sched: C,
    attempts: &Arc<AtomicU64>,
    n: u64,
) -> Result<Vec<Call>, String> {
    let call = policy.wrap(sched.clone(), failing(attempts));
    let mut handle = weir::range(0..n)
        .map_async_on(sched, 1, true, call)
        .collect();
    match handle.wait_timeout(PATIENCE) {
        Some(Ok(results)) => Ok(results),
        Some(Err(e)) => Err(format!("the stage failed: {e}")),
        None => {
            handle.cancel();
            Err(format!("the calls did not end within {PATIENCE:?}"))
        }
    }
}

/// A call whose retry sleeps `Duration::MAX` (a backoff or a server's hint): it waits
/// (no panic, no attempt after the first), and a cancel removes its timer.
fn expect_sleeps_for_ever(failures: &mut Vec<String>, policy: &RetryPolicy<String>) {
    let sched = pool("durations-retry-sleep");
    let runtime = crate::harness::run::tokio_runtime("durations-retry");
    let tokio = Tokio::new(runtime.handle().clone());
    let attempts = Arc::new(AtomicU64::new(0));
    for (on, mut handle) in [
        (
            "ThreadPool",
            weir::range(0..1u64)
                .map_async_on(
                    sched.clone(),
                    1,
                    true,
                    policy.wrap(sched.clone(), failing(&attempts)),
                )
                .collect(),
        ),
        (
            "Tokio",
            weir::range(0..1u64)
                .map_async_on(
                    tokio.clone(),
                    1,
                    true,
                    policy.wrap(tokio.clone(), failing(&attempts)),
                )
                .collect(),
        ),
        (
            // A scheduler that drops a timer it can never run: the sleep must not
            // take that for a timer that fired.
            "Immediate",
            weir::range(0..1u64)
                .map_async_on(
                    Immediate,
                    1,
                    true,
                    policy.wrap(Immediate, failing(&attempts)),
                )
                .collect(),
        ),
    ] {
        std::thread::sleep(WATCH);
        let got = handle.wait_timeout(Duration::ZERO);
        expect(failures, got.is_none(), || {
            format!("on {on}: a retry after Duration::MAX ended the call: {got:?}")
        });
        handle.cancel();
    }
    let made = attempts.load(Ordering::SeqCst);
    expect(failures, made == 3, || {
        format!("{made} attempts made by the three calls; documented 3 (each waits for its retry)")
    });
    expect_no_timers(failures, &sched, "after the sleeping call was cancelled");
    sched.shutdown();
}

/// `Backoff::exponential(base, max)` with the base at the span and `max`
/// `Duration::MAX`: zero panics ("Backoff base must be greater than zero (got 0ns)");
/// 1 ns: five attempts 1, 2, 4, 8 ns apart, then `Exhausted`; `MAX` (no jitter): the
/// first retry waits `Duration::MAX`, no overflow.
fn backoff_base(span: Span) -> Vec<String> {
    let mut failures = Vec::new();
    let backoff = built!(
        refused_at(
            span,
            Span::Zero,
            "Backoff base must be greater than zero (got 0ns)"
        ),
        Backoff::exponential(span.d(), Duration::MAX).jitter(0.0)
    );
    let policy = RetryPolicy::new(5, backoff);
    if span == Span::Max {
        expect_sleeps_for_ever(&mut failures, &policy);
        return failures;
    }
    expect_exhausted(&mut failures, &policy, 5);
    failures
}

/// Eight calls of `policy` (always failing) on a pool: every call `Exhausted` after
/// `max_attempts`.
fn expect_exhausted(failures: &mut Vec<String>, policy: &RetryPolicy<String>, max_attempts: u32) {
    let sched = pool("durations-retry");
    let attempts = Arc::new(AtomicU64::new(0));
    match retried(policy, sched.clone(), &attempts, 8) {
        Ok(results) => {
            let documented: Vec<Call> = (0..8)
                .map(|_| {
                    Err(RetryError::Exhausted {
                        attempts: max_attempts,
                        last: "down".to_owned(),
                    })
                })
                .collect();
            expect(failures, results == documented, || {
                format!("results {results:?}; documented 8 × Exhausted after {max_attempts}")
            });
        }
        Err(why) => failures.push(why),
    }
    let made = attempts.load(Ordering::SeqCst);
    expect(failures, made == 8 * u64::from(max_attempts), || {
        format!("{made} attempts; documented {}", 8 * max_attempts)
    });
    expect_no_timers(failures, &sched, "after the calls ended");
    sched.shutdown();
}

/// `Backoff::exponential(base, max)` with a 1 ns base and `max` at the span: zero is
/// below the base ("Backoff max must be at least base (got base 1ns, max 0ns)"); 1 ns
/// and `MAX`: five attempts, then `Exhausted`.
fn backoff_max(span: Span) -> Vec<String> {
    let mut failures = Vec::new();
    let backoff = built!(
        refused_at(
            span,
            Span::Zero,
            "Backoff max must be at least base (got base 1ns, max 0ns)"
        ),
        Backoff::exponential(Duration::from_nanos(1), span.d())
    );
    expect_exhausted(&mut failures, &RetryPolicy::new(5, backoff), 5);
    failures
}

/// `RetryBudget::new(ratio, window, clock)`: zero panics ("RetryBudget window must be
/// greater than zero"). A policy of unlimited attempts 1 ns apart, stopped only by a
/// budget of 0.5 retries per first attempt: 20 calls of an operation that always
/// fails all end `BudgetExhausted` (none spins for ever). With `MAX` every first
/// attempt stays in the window: exactly 10 retries; with 1 ns (the wall clock) the
/// window forgets them at once: at most 10.
fn retry_budget_window(span: Span) -> Vec<String> {
    let mut failures = Vec::new();
    let sched = pool("durations-budget");
    let budget = built!(
        refused_at(
            span,
            Span::Zero,
            "RetryBudget window must be greater than zero"
        ),
        RetryBudget::new(0.5, span.d(), sched.clone())
    );
    let backoff = Backoff::exponential(Duration::from_nanos(1), Duration::from_nanos(1));
    let policy = RetryPolicy::new(u32::MAX, backoff).budget(budget.clone());
    let attempts = Arc::new(AtomicU64::new(0));
    match retried(&policy, sched.clone(), &attempts, 20) {
        Ok(results) => expect(
            &mut failures,
            results.len() == 20
                && results
                    .iter()
                    .all(|r| matches!(r, Err(RetryError::BudgetExhausted(_)))),
            || format!("results {results:?}; documented 20 × BudgetExhausted"),
        ),
        Err(why) => failures.push(why),
    }
    let retries = budget.stats().retries;
    let documented = if span == Span::Max {
        retries == 10
    } else {
        retries <= 10
    };
    expect(&mut failures, documented, || {
        format!(
            "{retries} retries granted; documented {}10",
            if span == Span::Max { "" } else { "at most " }
        )
    });
    expect_no_timers(&mut failures, &sched, "after the calls ended");
    sched.shutdown();
    failures
}

/// Which of the breaker's durations is at the span.
#[derive(Clone, Copy, Debug)]
enum BreakerField {
    Window,
    OpenFor,
}

/// `CircuitBreaker::new(ratio, min_calls, window, open_for, clock)` on a virtual
/// clock, one attempt per call, ten failing calls: it opens after two. Window zero
/// panics ("CircuitBreaker window must be greater than zero"); 1 ns and `MAX` windows
/// (open for 1 s): calls 3..10 refused, `retry_after` 1 s. `open_for` zero ("it
/// half-opens at the next call"): every call is attempted; 1 ns: refused with 1 ns
/// left until the clock moves, then a probe is let through; `MAX`: refused with
/// `Duration::MAX` left, for ever (also after the clock moved by `Duration::MAX`).
fn breaker(field: BreakerField, span: Span) -> Vec<String> {
    let mut failures = Vec::new();
    let clock = clock();
    let (window, open_for) = match field {
        BreakerField::Window => (span.d(), Duration::from_secs(1)),
        BreakerField::OpenFor => (Duration::from_secs(10), span.d()),
    };
    let refusal = match field {
        BreakerField::Window => refused_at(
            span,
            Span::Zero,
            "CircuitBreaker window must be greater than zero",
        ),
        BreakerField::OpenFor => None,
    };
    let breaker = built!(
        refusal,
        CircuitBreaker::new(0.5, 2, window, open_for, clock.clone())
    );
    let policy = RetryPolicy::new(
        1,
        Backoff::exponential(Duration::from_millis(1), Duration::from_millis(1)),
    )
    .breaker(breaker);
    let sched = pool("durations-breaker");
    let attempts = Arc::new(AtomicU64::new(0));
    let exhausted = || -> Call {
        Err(RetryError::Exhausted {
            attempts: 1,
            last: "down".to_owned(),
        })
    };
    let open = |left: Duration| -> Call { Err(RetryError::CircuitOpen { retry_after: left }) };
    let documented: Vec<Call> = match (field, span) {
        (BreakerField::OpenFor, Span::Zero) => (0..10).map(|_| exhausted()).collect(),
        (BreakerField::Window, _) => (0..10)
            .map(|i| if i < 2 { exhausted() } else { open(open_for) })
            .collect(),
        (BreakerField::OpenFor, _) => (0..10)
            .map(|i| if i < 2 { exhausted() } else { open(open_for) })
            .collect(),
    };
    match retried(&policy, sched.clone(), &attempts, 10) {
        Ok(results) => expect(&mut failures, results == documented, || {
            format!("results {results:?}; documented {documented:?}")
        }),
        Err(why) => failures.push(why),
    }
    if let BreakerField::OpenFor = field {
        // The clock moves past the open period (if it ends): one more call.
        clock.advance(Duration::from_nanos(1));
        clock.advance(if span == Span::Max {
            Duration::MAX
        } else {
            Duration::ZERO
        });
        let after = match span {
            Span::Max => open(Duration::MAX),
            _ => exhausted(),
        };
        match retried(&policy, sched.clone(), &attempts, 1) {
            Ok(results) => expect(&mut failures, results == [after.clone()], || {
                format!("once the clock moved: {results:?}; documented [{after:?}]")
            }),
            Err(why) => failures.push(why),
        }
    }
    sched.shutdown();
    failures
}

fn breaker_window(span: Span) -> Vec<String> {
    breaker(BreakerField::Window, span)
}

fn breaker_open_for(span: Span) -> Vec<String> {
    breaker(BreakerField::OpenFor, span)
}

/// `Verdict::RetryAfter(hint)`: "Retry after at least this long (the server's hint),
/// or the backoff if longer. The hint is honoured even beyond the backoff's `max`".
/// Zero and 1 ns: three attempts (the 1 ns backoff), then `Exhausted`; `MAX`: the
/// retry waits `Duration::MAX`, no overflow.
fn retry_after_hint(span: Span) -> Vec<String> {
    let mut failures = Vec::new();
    let hint = span.d();
    let backoff = Backoff::exponential(Duration::from_nanos(1), Duration::from_nanos(1));
    let policy = RetryPolicy::new(3, backoff).classify(move |_: &String| Verdict::RetryAfter(hint));
    if span == Span::Max {
        expect_sleeps_for_ever(&mut failures, &policy);
    } else {
        expect_exhausted(&mut failures, &policy, 3);
    }
    failures
}

#[test]
fn retries_with_extreme_durations() {
    sweep(
        "retry settings × durations",
        &[
            ("Backoff::exponential(base = span, max = MAX)", backoff_base),
            ("Backoff::exponential(base = 1ns, max = span)", backoff_max),
            ("RetryBudget::new(window)", retry_budget_window),
            (
                "CircuitBreaker::new(window = span, open_for = 1s)",
                breaker_window,
            ),
            (
                "CircuitBreaker::new(window = 10s, open_for = span)",
                breaker_open_for,
            ),
            ("Verdict::RetryAfter", retry_after_hint),
        ],
    );
}

// ---- the conformance kit -----------------------------------------------------------

/// Which `TestEnv` timeout is at the span.
#[derive(Clone, Copy, Debug)]
enum EnvField {
    Default,
    NoSignals,
    Poll,
    ReferenceDrop,
}

/// A `TestEnv` with one timeout at the span (the others at their defaults), given to a
/// `PublisherVerification` of `weir::range`, which signals synchronously: the rules
/// that read that timeout pass. Zero and 1 ns wait for nothing that has not happened
/// already; `MAX` waits "without a deadline" (the kit's own words) for what does
/// happen. A rule that watches a quiet window is not run with a `MAX` quiet window
/// (it would watch for ever, as documented).
fn tck_env(field: EnvField, span: Span) -> Vec<String> {
    let mut failures = Vec::new();
    let d = span.d();
    let builder = TestEnv::builder();
    let env = built!(
        None,
        match field {
            EnvField::Default => builder.default_timeout(d),
            EnvField::NoSignals => builder.no_signals_timeout(d),
            EnvField::Poll => builder.poll_timeout(d),
            EnvField::ReferenceDrop => builder.reference_drop_timeout(d),
        }
        .build()
    );
    let verification = PublisherVerification::new(|n| weir::range(0..n))
        .stochastic_iterations(2)
        .env(env);
    type Rule = fn(&PublisherVerification<weir::source::Range<u64>>) -> Outcome;
    let rules: Vec<(&str, Rule)> = match (field, span) {
        (EnvField::NoSignals, Span::Max) => vec![(
            "spec_1_2",
            PublisherVerification::spec_1_2_may_signal_less_than_requested_and_terminate,
        )],
        (EnvField::NoSignals, _) => vec![(
            "spec_1_1",
            PublisherVerification::spec_1_1_must_not_signal_more_than_requested,
        )],
        (EnvField::Default, _) => vec![
            (
                "spec_1_2",
                PublisherVerification::spec_1_2_may_signal_less_than_requested_and_terminate,
            ),
            (
                "spec_1_3",
                PublisherVerification::spec_1_3_must_signal_serially,
            ),
        ],
        (EnvField::Poll | EnvField::ReferenceDrop, _) => vec![(
            "spec_3_13",
            PublisherVerification::spec_3_13_cancel_must_make_the_publisher_eventually_drop_the_subscriber,
        )],
    };
    for (name, rule) in rules {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rule(&verification))) {
            Ok(Outcome::Pass) => {}
            Ok(other) => failures.push(format!("{name}: {other:?}")),
            Err(payload) => failures.push(format!(
                "{name} panicked: {}",
                crate::harness::watch::panic_message(&*payload)
            )),
        }
    }
    failures
}

fn tck_default_timeout(span: Span) -> Vec<String> {
    tck_env(EnvField::Default, span)
}

fn tck_no_signals_timeout(span: Span) -> Vec<String> {
    tck_env(EnvField::NoSignals, span)
}

fn tck_poll_timeout(span: Span) -> Vec<String> {
    tck_env(EnvField::Poll, span)
}

fn tck_reference_drop_timeout(span: Span) -> Vec<String> {
    tck_env(EnvField::ReferenceDrop, span)
}

/// `TestProbe`'s waits: on a probe whose signals already arrived every `await_*`
/// returns `Ok` at once, and `expect_signal_count` with more signals than expected
/// returns its `Err` at once (none waits out `Duration::MAX`, none overflows). Zero
/// and 1 ns on a stream where nothing comes: the waits time out at once,
/// `expect_no_signals` holds. `MAX` on a stream that keeps producing: `await_items`
/// returns with the items, `expect_no_signals` with its `Err` at the next signal.
fn probe_waits(span: Span) -> Vec<String> {
    let mut failures = Vec::new();
    let d = span.d();
    let subscriber = TestSubscriber::<u64>::new();
    let probe = subscriber.probe();
    weir::range(0..3u64).subscribe(subscriber);
    probe.request(10);
    let arrived = [
        ("await_subscribed", probe.await_subscribed(d)),
        ("await_items(3)", probe.await_items(3, d)),
        ("await_terminal", probe.await_terminal(d)),
        ("await_completion", probe.await_completion(d)),
    ];
    for (wait, result) in arrived {
        expect(&mut failures, result.is_ok(), || {
            format!("{wait} after the signals arrived: {result:?}")
        });
    }
    let counted = probe.expect_signal_count(4, d);
    expect(&mut failures, counted.is_err(), || {
        "expect_signal_count(4) with 5 signals held".to_owned()
    });
    let subscriber = TestSubscriber::<u64>::new();
    let failed = subscriber.probe();
    weir::error::<u64>(Error::msg("down")).subscribe(subscriber);
    let error = failed.await_error(d);
    expect(
        &mut failures,
        matches!(&error, Ok(e) if e.message() == "down"),
        || format!("await_error after the error arrived: {error:?}"),
    );
    if span != Span::Max {
        let subscriber = TestSubscriber::<u64>::new();
        let quiet = subscriber.probe();
        weir::never::<u64>().subscribe(subscriber);
        quiet.request(1);
        expect(&mut failures, quiet.await_items(1, d).is_err(), || {
            "await_items on a silent stream held".to_owned()
        });
        expect(&mut failures, quiet.await_terminal(d).is_err(), || {
            "await_terminal on a silent stream held".to_owned()
        });
        let nothing = quiet.expect_no_signals(d);
        expect(&mut failures, nothing.is_ok(), || {
            format!("expect_no_signals on a silent stream: {nothing:?}")
        });
        quiet.cancel();
        return failures;
    }
    // MAX on a stream that keeps producing, one item every 2 ms, until the waits
    // returned.
    let (tx, rx) = weir::channel::<u64>(4_096, ChannelPolicy::Backpressure);
    let subscriber = TestSubscriber::<u64>::new();
    let producing = subscriber.probe();
    rx.subscribe(subscriber);
    producing.request(u64::MAX);
    let done = Arc::new(AtomicBool::new(false));
    let stop = done.clone();
    let producer = std::thread::spawn(move || {
        for i in 0..4_000 {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
            let _ = tx.try_send(i);
        }
    });
    let items = producing.await_items(1, d);
    expect(&mut failures, items.is_ok(), || {
        format!("await_items(1, MAX): {items:?}")
    });
    let watched = producing.expect_no_signals(d);
    expect(&mut failures, watched.is_err(), || {
        "expect_no_signals(MAX) returned Ok while items kept arriving".to_owned()
    });
    done.store(true, Ordering::SeqCst);
    let _ = producer.join();
    let ended = producing.await_completion(d);
    expect(&mut failures, ended.is_ok(), || {
        format!("await_completion(MAX): {ended:?}")
    });
    failures
}

#[test]
fn conformance_kit_timeouts_with_extreme_durations() {
    sweep(
        "tck timeouts × durations",
        &[
            ("TestEnv default_timeout", tck_default_timeout),
            ("TestEnv no_signals_timeout", tck_no_signals_timeout),
            ("TestEnv poll_timeout", tck_poll_timeout),
            ("TestEnv reference_drop_timeout", tck_reference_drop_timeout),
            ("TestProbe waits", probe_waits),
        ],
    );
}

// ---- VirtualTime::advance_to ---------------------------------------------------------

/// `VirtualTime::advance_to(elapsed)`: runs every task due on the way, each at its due
/// time; "Saturates: a target past the latest representable instant stops there".
/// Tasks due now, at 1 ns, at 1 s and after `Duration::MAX`, and an interval of 1 s
/// taken 3 times. Zero runs the task due now; 1 ns that and the 1 ns one; `MAX` all
/// but the one after `Duration::MAX` (past the clock's end), and the interval
/// completes. Moving there again, or scheduling beyond the end and moving there
/// again, returns; `now()` works; a channel on that clock reads a fresh item's age as
/// zero and expires nothing.
fn advance_to(span: Span) -> Vec<String> {
    let mut failures = Vec::new();
    let clock = VirtualTime::new();
    let ran = Arc::new(Mutex::new(Vec::new()));
    for (name, delay) in [
        ("now", Duration::ZERO),
        ("1ns", Duration::from_nanos(1)),
        ("1s", Duration::from_secs(1)),
        ("MAX", Duration::MAX),
    ] {
        let ran = ran.clone();
        clock.schedule_after(delay, Box::new(move || ran.lock().unwrap().push(name)));
    }
    let mut ticks = weir::interval_on(Duration::from_secs(1), clock.clone())
        .take(3)
        .collect();
    if let Err(why) = expect_panic(|| clock.advance_to(span.d())) {
        return vec![format!("advance_to panicked: {why}")];
    }
    let documented: &[&str] = match span {
        Span::Zero => &["now"],
        Span::OneNano => &["now", "1ns"],
        Span::Max => &["now", "1ns", "1s"],
    };
    let got = ran.lock().unwrap().clone();
    expect(&mut failures, got == documented, || {
        format!("ran {got:?}; documented {documented:?}")
    });
    let elapsed = clock.elapsed();
    let elapsed_ok = match span {
        Span::Max => elapsed > DAY,
        _ => elapsed == span.d(),
    };
    expect(&mut failures, elapsed_ok, || format!("elapsed {elapsed:?}"));
    let ticked = ticks.wait_timeout(Duration::ZERO);
    let ticked_ok = match span {
        Span::Max => matches!(&ticked, Some(Ok(v)) if *v == [0, 1, 2]),
        _ => ticked.is_none(),
    };
    expect(&mut failures, ticked_ok, || {
        format!("the interval: {ticked:?}")
    });
    ticks.cancel();
    let again = expect_panic(|| {
        clock.advance_to(span.d());
        clock.schedule_after(Duration::from_secs(1), Box::new(|| {}));
        clock.advance_to(span.d());
        clock.now()
    });
    if let Err(why) = again {
        failures.push(format!("moving again panicked: {why}"));
    }
    // A channel on the moved clock: a fresh item's age, and no expiry.
    let bounds = TimeBounds::none().max_age(Duration::from_secs(1));
    let (tx, rx) = ChannelBuilder::new(4, ChannelPolicy::Backpressure)
        .time_bounds(bounds)
        .clock(clock.clone())
        .build::<u64>();
    let monitor = rx.monitor();
    let _ = tx.try_send(7);
    match expect_panic(|| monitor.snapshot()) {
        Ok(stats) => expect(
            &mut failures,
            stats.oldest_age == Some(Duration::ZERO),
            || {
                format!(
                    "a fresh item on a clock at {elapsed:?} reads oldest_age {:?}; documented: \
                 how long it has waited (zero)",
                    stats.oldest_age
                )
            },
        ),
        Err(why) => failures.push(format!("a snapshot panicked: {why}")),
    }
    drop(tx);
    let got = rx.collect().wait_timeout(PATIENCE);
    expect(
        &mut failures,
        matches!(&got, Some(Ok(v)) if *v == [7]),
        || format!("the fresh item: {got:?}"),
    );
    failures
}

#[test]
fn virtual_time_advance_to_extreme_durations() {
    sweep(
        "VirtualTime::advance_to × durations",
        &[("VirtualTime::advance_to", advance_to)],
    );
}
