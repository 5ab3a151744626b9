//! Every stage × a subscriber that panics in `on_next`, at the first or the third item.
//!
//! Rule 2.13 as weir documents it: a subscriber that panics is treated as cancelled.
//! So after the panic: upstream stops (a source that had not terminated when the
//! subscriber panicked must not complete afterwards, and must not produce more than a
//! chunk or two after it), every source releases its subscriber, every item is
//! dropped, and the subscriber itself is dropped: all within a generous watchdog.
//!
//! The sources hold [`BIG`] items, far more than any stage consumes between a panic and
//! the cancel it must cause, so "the source completed after the panic" means nobody
//! cancelled it. A case whose stream ends before the item that would panic (a lossy
//! stage may deliver fewer items) checks nothing and is not a failure.

use crate::harness::recorder::Plan;
use crate::harness::run::{start, Schedulers};
use crate::harness::watch::{assert_no_failures, run_rows, silence_deliberate_panics, wait_until, PATIENCE};
use crate::stages::{table, Feed, Stage};

/// Items per source.
const BIG: u64 = 1_000_000;
/// Items a source may still produce after the panic (it observes a cancel between
/// chunks of at most 1,024 items; a few chunks of slack).
const SLACK: u64 = 4_096;

#[test]
fn every_stage_survives_a_subscriber_that_panics_in_on_next() {
    silence_deliberate_panics();
    let schedulers = Schedulers::new("panics");
    let rows = table();
    let cases: Vec<(&Stage, u64)> = rows
        .iter()
        .flat_map(|row| [1, 3].map(|k| (row, k)))
        .filter(|(row, k)| (row.expect)(16).len() as u64 >= *k)
        .collect();
    let failures = run_rows(&cases, 8, |&(row, k)| {
        check(row, k, &schedulers)
            .into_iter()
            .map(|f| format!("{} (panic at item {k}): {f}", row.name))
            .collect()
    });
    assert_no_failures("panicking subscriber", cases.len(), &failures);
}

fn check(row: &Stage, k: u64, schedulers: &Schedulers) -> Vec<String> {
    let plan = Plan {
        initial: 4,
        per_item: 1,
        panic_at: Some(k),
        ..Plan::default()
    };
    let started = match start(row, schedulers, BIG, Feed::OnDemand, plan) {
        Ok(started) => started,
        Err(why) => return vec![why],
    };
    let mut failures = Vec::new();
    let record = started.record.clone();
    wait_until(PATIENCE, || record.panic_point().is_some() || record.terminated());
    let Some(point) = record.panic_point() else {
        if !record.terminated() {
            failures.push(format!(
                "item {k} never arrived and the stream did not end ({})",
                record.describe()
            ));
        }
        started.finish();
        return failures;
    };
    if let Err(why) = &started.subscribe {
        failures.push(why.clone());
    }
    if let Some(held) = started.released(true) {
        failures.push(format!("not released after the panic: {held}"));
    }
    for (probe, terminated_before) in started.env.probes().iter().zip(&point.terminated) {
        if !terminated_before && probe.completed() {
            failures.push(format!(
                "upstream was not cancelled: {} ran to completion after the panic",
                probe.name()
            ));
        }
    }
    let after = started.env.ledger.produced().saturating_sub(point.produced);
    if after > SLACK {
        failures.push(format!(
            "upstream kept producing: {after} items after the panic (at most {SLACK} expected)"
        ));
    }
    if record.terminated() {
        failures.push(format!(
            "a signal reached the panicked subscriber after its panic: {}",
            record.describe()
        ));
    }
    started.finish();
    failures
}
