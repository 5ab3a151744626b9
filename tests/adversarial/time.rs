//! Every time operator and time source × every scheduler × a duration of 1 ns, zero and
//! `Duration::MAX`.
//!
//! * **zero** is refused at construction, with the documented message (checked with
//!   `catch_unwind` around the construction alone). `timer` is the exception its docs
//!   make: a zero delay fires at the scheduler's next turn.
//! * **1 ns**: the pipeline, over a finite source of [`N`] counted items, completes
//!   with what the stage promises (all items; an in-order subsequence ending with the
//!   last item for `sample` and `debounce`; `timeout` may time out, after a prefix).
//! * **`Duration::MAX`** means "never": no panic, no hang. A stage whose timer never
//!   fires still completes over a finite source when its contract allows (`sample`
//!   and `debounce` flush the last item at completion, `timeout` never fires,
//!   `buffer_timeout` batches by size); a stage that needs its timer (`interval`,
//!   `timer`, a shaping `throttle` once the burst is spent) stays silent: it delivers
//!   what it owes without the timer and then nothing, and a cancel releases it.
//!
//! Schedulers: `ThreadPool`, `Tokio`, `VirtualTime` (driven from timer to timer up to
//! an hour of virtual time) for every case; `Immediate`, whose delays block the
//! caller, only where that makes sense: construction, and 1 ns for the stages whose
//! timers do not re-arm forever on the caller's stack.
//!
//! After every run: nothing alive, every source released, the subscriber dropped.

use std::time::Duration;

use weir::operators::{Rate, ThrottleMode};
use weir::prelude::*;
use weir::runtime::{Immediate, Scheduler, ThreadPool, Tokio, VirtualTime};
use weir::BoxPublisher;

use crate::harness::item::Item;
use crate::harness::recorder::{Plan, Record, Recorder};
use crate::harness::run::{guarded, released, tokio_runtime, Schedulers};
use crate::harness::watch::{
    assert_no_failures, expect_panic, on_thread, panic_message, run_rows,
    silence_deliberate_panics, wait_until, PATIENCE,
};
use crate::stages::{describe_mismatch, is_subsequence, Env, Feed};

/// Items of the finite source.
const N: u64 = 50;
/// The throttles' burst.
const BURST: u64 = 8;
/// `buffer_timeout`'s batch size.
const BATCH: u64 = 8;
/// How far the `VirtualTime` driver moves the clock, at most (beyond the second it
/// starts at).
const HORIZON: Duration = Duration::from_secs(3_600);
/// How long a silent stage is watched on a real clock before it is cancelled. A stage
/// that keeps its promise stays silent however long it is watched; this only gives a
/// broken one the chance to show it.
const WATCH: Duration = Duration::from_millis(20);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TimeStage {
    Sample,
    Debounce,
    Timeout,
    BufferTimeout,
    ThrottleShaping,
    ThrottleEnforcing,
    Interval,
    Timer,
}

const STAGES: [TimeStage; 8] = [
    TimeStage::Sample,
    TimeStage::Debounce,
    TimeStage::Timeout,
    TimeStage::BufferTimeout,
    TimeStage::ThrottleShaping,
    TimeStage::ThrottleEnforcing,
    TimeStage::Interval,
    TimeStage::Timer,
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sched {
    Immediate,
    ThreadPool,
    Tokio,
    VirtualTime,
}

const SCHEDULERS: [Sched; 4] = [
    Sched::Immediate,
    Sched::ThreadPool,
    Sched::Tokio,
    Sched::VirtualTime,
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Span {
    Zero,
    OneNano,
    Max,
}

impl Span {
    fn duration(self) -> Duration {
        match self {
            Span::Zero => Duration::ZERO,
            Span::OneNano => Duration::from_nanos(1),
            Span::Max => Duration::MAX,
        }
    }
}

/// What a case must do.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    /// Construction panics with exactly this message.
    Refused(&'static str),
    /// Completes with exactly these values.
    Completes(Vec<u64>),
    /// Completes with an in-order subsequence of `0..N` (ending with `N - 1` if set).
    CompletesLossy(Option<u64>),
    /// Completes with every item, or fails with `Timeout` after a prefix.
    CompletesOrTimesOut,
    /// Delivers exactly these values, then nothing (no item, no terminal signal).
    Silent(Vec<u64>),
}

fn outcome(stage: TimeStage, span: Span) -> Outcome {
    use Outcome::*;
    use TimeStage::*;
    let all: Vec<u64> = (0..N).collect();
    let burst: Vec<u64> = (0..BURST).collect();
    match (span, stage) {
        (Span::Zero, Sample) => Refused("sample period must be greater than zero (got 0ns)"),
        (Span::Zero, Debounce) => {
            Refused("debounce quiet period must be greater than zero (got 0ns)")
        }
        (Span::Zero, Timeout) => Refused("timeout duration must be greater than zero (got 0ns)"),
        (Span::Zero, BufferTimeout) => {
            Refused("buffer_timeout period must be greater than zero (got 0ns)")
        }
        (Span::Zero, ThrottleShaping | ThrottleEnforcing) => {
            Refused("throttle rate period must be greater than zero (got 1 per 0ns)")
        }
        (Span::Zero, Interval) => Refused("interval period must be greater than zero (got 0ns)"),
        (Span::Zero, Timer) => Refused("timer delay must be greater than zero (got 0ns)"),
        (Span::OneNano, Sample | Debounce) => CompletesLossy(Some(N - 1)),
        (Span::OneNano, Timeout) => CompletesOrTimesOut,
        (Span::OneNano, ThrottleEnforcing) => CompletesLossy(None),
        (Span::OneNano, BufferTimeout | ThrottleShaping | Interval) => Completes(all),
        (Span::OneNano, Timer) => Completes(vec![0]),
        (Span::Max, Sample | Debounce) => Completes(vec![N - 1]),
        (Span::Max, Timeout | BufferTimeout) => Completes(all),
        (Span::Max, ThrottleShaping) => Silent(burst),
        (Span::Max, ThrottleEnforcing) => Completes(burst),
        (Span::Max, Interval | Timer) => Silent(Vec::new()),
    }
}

/// `Immediate` runs timers on the caller's stack after sleeping their delay: only the
/// construction checks, and 1 ns for stages whose timers do not re-arm on their own.
fn applies(stage: TimeStage, scheduler: Sched, span: Span) -> bool {
    match (scheduler, span) {
        (Sched::Immediate, Span::Zero) => true,
        (Sched::Immediate, Span::OneNano) => matches!(
            stage,
            TimeStage::Timer
                | TimeStage::Interval
                | TimeStage::Timeout
                | TimeStage::ThrottleShaping
                | TimeStage::ThrottleEnforcing
        ),
        (Sched::Immediate, Span::Max) => false,
        _ => true,
    }
}

fn build<C: Scheduler + Clone>(
    stage: TimeStage,
    span: Span,
    scheduler: C,
    env: &Env,
) -> BoxPublisher<Item> {
    let d = span.duration();
    let ledger = env.ledger.clone();
    match stage {
        TimeStage::Sample => env.source().sample_on(d, scheduler).boxed(),
        TimeStage::Debounce => env.source().debounce_on(d, scheduler).boxed(),
        TimeStage::Timeout => env.source().timeout_on(d, scheduler).boxed(),
        TimeStage::BufferTimeout => env
            .source()
            .buffer_timeout_on(BATCH, d, scheduler)
            .map(move |batch| Item::gather(batch, &ledger))
            .boxed(),
        TimeStage::ThrottleShaping => env
            .source()
            .throttle_on(Rate::new(1, d), BURST, ThrottleMode::Shaping, scheduler)
            .boxed(),
        TimeStage::ThrottleEnforcing => env
            .source()
            .throttle_on(Rate::new(1, d), BURST, ThrottleMode::Enforcing, scheduler)
            .boxed(),
        TimeStage::Interval => env
            .tap("interval", weir::interval_on(d, scheduler))
            .take(N)
            .map(env.produce())
            .boxed(),
        TimeStage::Timer => env
            .tap("timer", weir::timer_on(d, scheduler))
            .map(env.produce())
            .boxed(),
    }
}

/// The schedulers of one run; `VirtualTime` is made fresh per case.
#[derive(Clone)]
struct Clocks {
    pool: ThreadPool,
    tokio: tokio::runtime::Handle,
}

#[test]
fn every_time_stage_on_every_scheduler_with_extreme_durations() {
    silence_deliberate_panics();
    let schedulers = Schedulers::new("time");
    let runtime = tokio_runtime("time");
    let clocks = Clocks {
        pool: schedulers.pool.clone(),
        tokio: runtime.handle().clone(),
    };
    let mut cases = Vec::new();
    for stage in STAGES {
        for scheduler in SCHEDULERS {
            for span in [Span::Zero, Span::OneNano, Span::Max] {
                if applies(stage, scheduler, span) {
                    cases.push((stage, scheduler, span));
                }
            }
        }
    }
    let failures = run_rows(&cases, 8, |&(stage, scheduler, span)| {
        let name = format!("{stage:?} on {scheduler:?} with {span:?}");
        let (schedulers_env, clocks) = (schedulers.env(N, Feed::OnDemand), clocks.clone());
        guarded(&name, 3 * PATIENCE, move || {
            check(stage, scheduler, span, schedulers_env, &clocks)
        })
        .into_iter()
        .map(|f| format!("{name}: {f}"))
        .collect()
    });
    assert_no_failures(
        "time stages × schedulers × durations",
        cases.len(),
        &failures,
    );
}

fn check(stage: TimeStage, scheduler: Sched, span: Span, env: Env, clocks: &Clocks) -> Vec<String> {
    let expected = outcome(stage, span);
    // A clock that has run for a while, as clocks do: a deadline of `now + d` is then
    // beyond `Duration::MAX` from the clock's origin.
    let virtual_time = VirtualTime::new();
    virtual_time.advance(Duration::from_secs(1));
    let built = expect_panic(|| match scheduler {
        Sched::Immediate => build(stage, span, Immediate, &env),
        Sched::ThreadPool => build(stage, span, clocks.pool.clone(), &env),
        Sched::Tokio => build(stage, span, Tokio::new(clocks.tokio.clone()), &env),
        Sched::VirtualTime => build(stage, span, virtual_time.clone(), &env),
    });
    let publisher = match (built, &expected) {
        (Err(got), Outcome::Refused(message)) => {
            return if got == *message {
                Vec::new()
            } else {
                vec![format!("refused with {got:?}, expected {message:?}")]
            };
        }
        (Ok(_), Outcome::Refused(message)) => {
            return vec![format!(
                "accepted at construction; expected a panic: {message:?}"
            )]
        }
        (Err(got), _) => return vec![format!("construction panicked: {got}")],
        (Ok(publisher), _) => publisher,
    };
    let env = std::sync::Arc::new(env);
    let plan = Plan {
        initial: u64::MAX,
        ..Plan::default()
    };
    let (recorder, record) = Recorder::new(plan, env.ledger.clone(), env.probes());
    let mut failures = Vec::new();
    if let Err(why) = on_thread("subscribe", PATIENCE, move || publisher.subscribe(recorder)) {
        failures.push(format!("subscribe {why}"));
    }
    if scheduler == Sched::VirtualTime {
        if let Err(why) = drive(&virtual_time, &record) {
            failures.push(why);
        }
    }
    match &expected {
        Outcome::Silent(owed) => {
            let owed_len = owed.len() as u64;
            if !wait_until(PATIENCE, || record.items() >= owed_len) {
                failures.push(format!(
                    "never delivered the {owed_len} items owed ({})",
                    record.describe()
                ));
            }
            if scheduler != Sched::VirtualTime {
                std::thread::sleep(WATCH);
            }
            let got = record.values();
            if got != *owed || record.terminated() {
                failures.push(format!(
                    "expected {owed:?} and then silence; got {got:?} ({})",
                    record.describe()
                ));
            }
            record.cancel();
        }
        _ => {
            if !wait_until(PATIENCE, || record.terminated()) {
                failures.push(format!(
                    "did not terminate within {PATIENCE:?} ({})",
                    record.describe()
                ));
            }
            failures.extend(verdict(&expected, &record));
        }
    }
    if let Some(held) = released(&env, &record, true) {
        failures.push(format!("not released: {held}"));
    }
    failures.extend(record.violations());
    record.forget_subscription();
    env.stop_sources();
    failures
}

/// Move a `VirtualTime` from due timer to due timer, at most [`HORIZON`] ahead of its
/// start, until the recorder terminated or nothing is due; `Err` if the clock panicked.
fn drive(clock: &VirtualTime, record: &Record) -> Result<(), String> {
    let mut steps = 0u64;
    while !record.terminated() && steps < 1_000_000 {
        let Some(due) = clock.next_due() else {
            return Ok(());
        };
        if due > HORIZON + Duration::from_secs(1) {
            return Ok(());
        }
        let moved =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| clock.advance_to(due)));
        moved.map_err(|payload| {
            format!(
                "VirtualTime::advance_to panicked: {}",
                panic_message(&*payload)
            )
        })?;
        steps += 1;
    }
    Ok(())
}

fn verdict(expected: &Outcome, record: &Record) -> Vec<String> {
    let got = record.values();
    let all: Vec<u64> = (0..N).collect();
    let errors = record.errors();
    let mut failures = Vec::new();
    let mut fail = |what: String| failures.push(format!("{what} ({})", record.describe()));
    match expected {
        Outcome::Completes(values) => {
            if !record.completed() || got != *values {
                fail(format!(
                    "expected {} and completion; {}",
                    compact(values),
                    describe_mismatch(values, &got)
                ));
            }
        }
        Outcome::CompletesLossy(last) => {
            let ends_right = match last {
                Some(last) => got.last() == Some(last),
                None => true,
            };
            if !record.completed() || !is_subsequence(&all, &got) || !ends_right {
                fail(format!(
                    "expected completion with an in-order subsequence of 0..{N} ending with {last:?}; got {got:?}"
                ));
            }
        }
        Outcome::CompletesOrTimesOut => {
            let timed_out = errors.len() == 1
                && errors[0].kind() == weir::ErrorKind::Timeout
                && all.starts_with(&got);
            let completed = record.completed() && got == all;
            if !(timed_out || completed) {
                fail(
                    "expected every item and completion, or a prefix and a Timeout error"
                        .to_owned(),
                );
            }
        }
        Outcome::Refused(_) | Outcome::Silent(_) => unreachable!("handled by the caller"),
    }
    failures
}

/// `values` for a message: `0..n` when it is that range.
fn compact(values: &[u64]) -> String {
    let n = values.len() as u64;
    if n > 8 && values.iter().copied().eq(0..n) {
        format!("0..{n}")
    } else {
        format!("{values:?}")
    }
}

#[test]
fn virtual_time_advances_by_duration_max_without_panicking() {
    let clock = VirtualTime::new();
    let ticks = weir::interval_on(Duration::from_secs(1), clock.clone())
        .take(3)
        .collect();
    clock.advance(Duration::from_millis(1_500));
    let advanced = expect_panic(|| clock.advance(Duration::MAX));
    assert_eq!(
        advanced.err(),
        None,
        "VirtualTime::advance(Duration::MAX), 1.5 s after its start, panicked"
    );
    let result = on_thread("wait", PATIENCE, move || ticks.wait());
    assert!(
        matches!(&result, Ok(Ok(items)) if *items == vec![0, 1, 2]),
        "after advance(Duration::MAX) the interval must have completed with [0, 1, 2]: {result:?}"
    );
}
