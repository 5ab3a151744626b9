//! Every stage × request and cancel storms from four threads.
//!
//! Three scenarios, one `#[test]` each:
//!
//! * **request storm**: four threads request 1 to 3 items at a time, racing each other
//!   and the deliveries, until they have asked for every expected item (a synchronous
//!   source then runs on whichever thread owns the drain);
//! * **cancel storm**: items arrive from a producer thread; at a random item the four
//!   threads all cancel at once, then keep requesting (no-ops, rules 3.6 and 3.7);
//! * **unbounded twice**: `request(u64::MAX)` from inside `on_subscribe`, then from
//!   four threads at once (`u64::MAX` again, and `request(1)` in a loop), while items
//!   arrive from a producer thread: every item finds demand, so even the stages that
//!   drop without demand must deliver everything.
//!
//! The recorder also requests and cancels from inside `on_complete`/`on_error`. Checked
//! for every row: no item beyond what was requested (counted before each request),
//! nothing after the terminal signal and exactly one of them (none after a cancel is
//! fine), each item exactly once and in the order the row promises (a lossy row: an
//! in-order subsequence, with `delivered + dropped == produced` when it completed),
//! and afterwards: nothing alive, every source released, the subscriber dropped.

use std::sync::Barrier;

use weir::DropReason;

use crate::harness::recorder::{Plan, Record};
use crate::harness::rng::Rng;
use crate::harness::run::{guarded, start_subscribed, Schedulers, Started};
use crate::harness::watch::{assert_no_failures, run_rows, wait_until, PATIENCE};
use crate::stages::{
    describe_mismatch, distinct, is_subsequence, lossless_mismatch, table, Feed, Nature, Order,
    Stage,
};

/// Items per source in the request and cancel storms.
const LEN: u64 = 1_000;
/// Items per source in the unbounded scenario: the race it looks for (an item that
/// arrives while another thread's `request` owns the drain) needs many arrivals.
const LONG: u64 = 100_000;
/// Storm threads.
const THREADS: u64 = 4;
/// The most `request(1)` calls a thread of the unbounded scenario makes.
const SPINS: u64 = 2_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scenario {
    Requests,
    Cancels,
    UnboundedTwice,
}

#[test]
fn every_stage_under_a_request_storm() {
    run(Scenario::Requests);
}

#[test]
fn every_stage_under_a_cancel_storm() {
    run(Scenario::Cancels);
}

#[test]
fn every_stage_with_unbounded_requests_from_five_threads() {
    run(Scenario::UnboundedTwice);
}

fn run(scenario: Scenario) {
    let schedulers = Schedulers::new("storms");
    let rows = table();
    let failures = run_rows(&rows, 2, |row| {
        let (row_copy, schedulers) = (*row, schedulers.clone());
        guarded(row.name, 5 * PATIENCE, move || {
            check(&row_copy, scenario, &schedulers)
        })
        .into_iter()
        .map(|f| format!("{}: {f}", row.label()))
        .collect()
    });
    assert_no_failures(&format!("{scenario:?} storm"), rows.len(), &failures);
}

fn check(row: &Stage, scenario: Scenario, schedulers: &Schedulers) -> Vec<String> {
    let (feed, plan) = match scenario {
        Scenario::Requests => (Feed::OnDemand, Plan::default()),
        Scenario::Cancels => (Feed::Threaded(8), Plan::default()),
        Scenario::UnboundedTwice => (
            Feed::Threaded(8),
            Plan {
                initial: u64::MAX,
                ..Plan::default()
            },
        ),
    };
    let len = if scenario == Scenario::UnboundedTwice {
        LONG
    } else {
        LEN
    };
    let (started, mut failures) = match start_subscribed(row, schedulers, len, feed, plan) {
        Ok(started) => started,
        Err(failures) => return failures,
    };
    let record = started.record.clone();
    let expected = (row.expect)(len);
    let mut rng = Rng::new(row.name.len() as u64 * 7919 + scenario as u64);
    let cancel_at = rng.below(expected.len() as u64 / 2 + 1);
    storm(&record, scenario, expected.len() as u64, cancel_at, &rng);
    match scenario {
        Scenario::Cancels => {
            // After a cancel no terminal signal is owed; the subscriber must be released.
            if let Some(held) = started.released(true) {
                failures.push(format!(
                    "not released after the cancel at item {cancel_at}: {held}"
                ));
            }
            failures.extend(cancelled_output(row, &expected, &record));
        }
        Scenario::Requests | Scenario::UnboundedTwice => {
            if !wait_until(PATIENCE, || record.terminated()) {
                failures.push(format!(
                    "no terminal signal within {PATIENCE:?} of requesting every item ({})",
                    record.describe()
                ));
            }
            if let Some(held) = started.released(true) {
                failures.push(format!("not released after the terminal signal: {held}"));
            }
            let nature = match scenario {
                Scenario::UnboundedTwice => row.with_demand(),
                _ => row.nature,
            };
            failures.extend(finished_output(nature, &expected, &started));
            let terminals = record.terminals();
            if terminals != 1 {
                failures.push(format!("{terminals} terminal signals instead of one"));
            }
        }
    }
    failures.extend(record.violations());
    started.finish();
    failures
}

/// The storm itself: four threads, all started together.
fn storm(record: &Record, scenario: Scenario, expected: u64, cancel_at: u64, rng: &Rng) {
    let barrier = Barrier::new(THREADS as usize);
    // Enough demand for every expected item (a lossy stage may need one more request
    // to flush what it holds); the threads stop once it was requested.
    let target = expected + 1;
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let mut rng = rng.clone();
            rng.below(thread + 1);
            let barrier = &barrier;
            scope.spawn(move || {
                barrier.wait();
                match scenario {
                    Scenario::Requests => {
                        while !record.terminated() && record.requested() < target {
                            record.request(rng.below(3) + 1);
                            if rng.below(4) == 0 {
                                std::thread::yield_now();
                            }
                        }
                    }
                    Scenario::Cancels => {
                        while !record.terminated()
                            && record.items() < cancel_at
                            && record.requested() < target
                        {
                            record.request(rng.below(3) + 1);
                            if rng.below(4) == 0 {
                                std::thread::yield_now();
                            }
                        }
                        record.cancel();
                        for _ in 0..3 {
                            record.request(rng.below(3) + 1);
                        }
                        record.cancel();
                    }
                    Scenario::UnboundedTwice => {
                        record.request(u64::MAX);
                        // Race the deliveries with more (saturated) requests; bounded, so a
                        // stage that never completes cannot keep this thread spinning.
                        let mut spins = 0;
                        while !record.terminated() && record.items() < expected && spins < SPINS {
                            record.request(1);
                            spins += 1;
                        }
                    }
                }
            });
        }
    });
}

/// What a completed (or failed) run delivered, against what the row promises.
fn finished_output(nature: Nature, expected: &[u64], started: &Started) -> Vec<String> {
    let record = &started.record;
    let got = record.values();
    let mut failures = Vec::new();
    if !distinct(&got) {
        failures.push("an item was delivered twice".to_owned());
    }
    match nature {
        Nature::Lossless(order) => {
            if let Some(mismatch) = lossless_mismatch(order, expected, &got) {
                failures.push(format!("wrong output: {mismatch}"));
            }
            if let Some(error) = record.errors().first() {
                failures.push(format!("failed: {error}"));
            }
        }
        Nature::Lossy(_) => {
            if !is_subsequence(expected, &got) {
                failures.push(format!(
                    "delivered items are not an in-order subsequence of the input: {}",
                    describe_mismatch(expected, &got)
                ));
            }
            if let Some(error) = record.errors().first() {
                failures.push(format!("failed: {error}"));
            } else if record.completed() {
                failures.extend(accounting(
                    record,
                    started.env.ledger.produced(),
                    got.len() as u64,
                ));
            }
        }
        Nature::Overflowing => {
            if !expected.starts_with(&got) {
                failures.push(format!(
                    "delivered items are not a prefix of the input: {}",
                    describe_mismatch(expected, &got)
                ));
            }
            match record.error_kind() {
                None if got != expected => failures.push(format!(
                    "completed without every item: {}",
                    describe_mismatch(expected, &got)
                )),
                Some(kind) if kind != weir::ErrorKind::Overflow => {
                    failures.push(format!("failed with {:?}", record.errors()))
                }
                _ => {}
            }
        }
    }
    failures
}

/// A completed lossy run: produced == delivered + handed to the hook + merged, and the
/// hook's counters agree with what it was handed.
fn accounting(record: &Record, produced: u64, delivered: u64) -> Vec<String> {
    let hooked = record.hooked_count();
    let merged = record.drops().count(DropReason::Merged);
    let counted = record.drops().total();
    let mut failures = Vec::new();
    if delivered + hooked + merged != produced {
        failures.push(format!(
            "items unaccounted for: produced {produced} != delivered {delivered} + dropped \
             {hooked} + merged {merged}"
        ));
    }
    if counted != hooked + merged {
        failures.push(format!(
            "drop counters ({:?}) disagree with the {hooked} items handed to the hook (+ {merged} merged)",
            record.drops()
        ));
    }
    failures
}

/// What a cancelled run delivered: a prefix (or subset, or subsequence) of the
/// expected output, each item once, and never a terminal signal twice.
fn cancelled_output(row: &Stage, expected: &[u64], record: &Record) -> Vec<String> {
    let got = record.values();
    let mut failures = Vec::new();
    if !distinct(&got) {
        failures.push("an item was delivered twice".to_owned());
    }
    let fits = match row.nature {
        Nature::Lossless(Order::Exact) | Nature::Overflowing => expected.starts_with(&got),
        Nature::Lossless(_) => got.iter().all(|v| expected.contains(v)),
        Nature::Lossy(_) => is_subsequence(expected, &got),
    };
    if !fits {
        failures.push(format!(
            "delivered items do not fit the promised output: {}",
            describe_mismatch(expected, &got)
        ));
    }
    if record.terminals() > 1 {
        failures.push(format!("{} terminal signals", record.terminals()));
    }
    failures
}
