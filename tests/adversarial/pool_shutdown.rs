//! PLANNED API: not declared in `main.rs` yet. Declare it (`mod pool_shutdown;`) once
//! `ThreadPool::shutdown(&self)`, `ThreadPool::pending_timers(&self) -> usize` and
//! `ErrorKind::SchedulerShutdown` exist.
//!
//! * A `ThreadPool` shut down mid-stream under every boundary, time operator, time
//!   source and bridge that runs on it: the pipeline ends with an error of kind
//!   `SchedulerShutdown`, upstream is cancelled, nothing stays alive.
//! * The tokio runtime shutdown of `shutdown.rs`, now also checking that kind.
//! * Timers of cancelled stages leave the pool's timer map at once, not when they
//!   would have fired: many requests, each with a one-hour `timeout`, cancelled, must
//!   not leave that many timers behind.

use std::time::Duration;

use weir::prelude::*;
use weir::runtime::ThreadPool;
use weir::ErrorKind;

use crate::harness::recorder::{Plan, Recorder};
use crate::harness::run::{guarded, released, tokio_runtime};
use crate::harness::watch::{assert_no_failures, run_rows, wait_until, PATIENCE};
use crate::shutdown::{check, stage, Boundary, CASES};
use crate::stages::{Env, Feed};

/// Items to see flowing before the shutdown.
const FLOWING: u64 = 5;

fn scheduler_shut_down(error: &weir::Error) -> bool {
    error.kind() == ErrorKind::SchedulerShutdown
}

#[test]
fn a_tokio_runtime_shut_down_mid_stream_fails_with_scheduler_shutdown() {
    let failures = run_rows(&CASES, 6, |&case| {
        guarded(&format!("{case:?}"), 5 * PATIENCE, move || {
            check(case, scheduler_shut_down)
        })
        .into_iter()
        .map(|f| format!("{case:?}: {f}"))
        .collect()
    });
    assert_no_failures(
        "tokio runtime shut down mid-stream (error kind)",
        CASES.len(),
        &failures,
    );
}

/// The stages of `weir::nats` run on a tokio runtime only.
#[cfg(feature = "nats")]
#[test]
fn a_tokio_runtime_shut_down_under_the_nats_stages_fails_with_scheduler_shutdown() {
    let failures = guarded("Nats", 5 * PATIENCE, || {
        check(Boundary::Nats, scheduler_shut_down)
    });
    assert_no_failures(
        "tokio runtime shut down under the nats stages",
        1,
        &failures,
    );
}

#[test]
fn a_thread_pool_shut_down_mid_stream_ends_every_pipeline_on_it() {
    // The bridges whose consumer is a tokio task have no pool to shut down.
    let cases: Vec<Boundary> = CASES
        .into_iter()
        .filter(|case| !matches!(case, Boundary::IntoStream | Boundary::SubscribeAsync))
        .collect();
    let failures = run_rows(&cases, 6, |&case| {
        guarded(&format!("{case:?}"), 5 * PATIENCE, move || pool_check(case))
            .into_iter()
            .map(|f| format!("{case:?}: {f}"))
            .collect()
    });
    assert_no_failures("thread pool shut down mid-stream", cases.len(), &failures);
}

fn pool_check(case: Boundary) -> Vec<String> {
    let pool = ThreadPool::builder().name("shut-down").threads(2).build();
    let source_pool = ThreadPool::builder()
        .name("shutdown-source")
        .threads(1)
        .build();
    let runtime = tokio_runtime("pool-shutdown");
    let env = Env::new(0, Feed::OnDemand, source_pool, runtime.handle().clone());
    let publisher = stage(case, &env, pool.clone()).expect("a publisher stage");
    let plan = Plan {
        initial: 16,
        per_item: 1,
        ..Plan::default()
    };
    let (recorder, record) = Recorder::new(plan, env.ledger.clone(), env.probes());
    publisher.subscribe(recorder);
    env.open();
    let mut failures = Vec::new();
    let enough = if case == Boundary::Timer { 0 } else { FLOWING };
    if !wait_until(PATIENCE, || record.subscribed() && record.items() >= enough) {
        failures.push(format!("items never flowed ({})", record.describe()));
    }
    pool.shutdown();
    if !wait_until(PATIENCE, || record.terminated()) {
        failures.push(format!(
            "no terminal signal after the shutdown ({})",
            record.describe()
        ));
    } else if record.error_kind() != Some(ErrorKind::SchedulerShutdown) {
        failures.push(format!(
            "expected an error of kind SchedulerShutdown ({})",
            record.describe()
        ));
    }
    if let Some(held) = released(&env, &record, true) {
        failures.push(format!("not released after the shutdown: {held}"));
    }
    failures.extend(record.violations());
    record.forget_subscription();
    env.stop_sources();
    failures
}

/// Pipelines whose timers are cancelled.
const CANCELLED: u64 = 100_000;
/// Timers the pool may still hold afterwards (none is needed).
const LEFT_OVER: usize = 16;

#[test]
fn cancelled_stages_leave_no_timers_in_the_pool() {
    let pool = ThreadPool::builder().name("timers").threads(1).build();
    let hour = Duration::from_secs(3_600);
    for i in 0..CANCELLED {
        // Each arms a one-hour timer as soon as it has demand, then is cancelled.
        let handle = match i % 3 {
            0 => weir::never::<u64>()
                .timeout_on(hour, pool.clone())
                .collect(),
            1 => weir::timer_on(hour, pool.clone()).collect(),
            _ => weir::interval_on(hour, pool.clone()).collect(),
        };
        handle.cancel();
    }
    let drained = wait_until(PATIENCE, || pool.pending_timers() <= LEFT_OVER);
    assert!(
        drained,
        "{CANCELLED} cancelled stages with one-hour timers left {} timers in the pool (at most \
         {LEFT_OVER} expected)",
        pool.pending_timers()
    );
}
