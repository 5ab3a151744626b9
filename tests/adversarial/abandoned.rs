//! Every stage × a source that abandons its subscriber.
//!
//! A publisher must end every subscription it does not cancel with `on_complete` or
//! `on_error` (rules 1.4, 1.5). One that breaks that, by dropping its subscriber
//! without a terminal signal (a thread that panicked holding it, a custom source
//! that returns early), must not leave the pipeline waiting for ever. Here every
//! source is a `Feed::Late` source: the subscriber asks for two items, each source
//! asked for one delivers it, and then every source drops its subscriber without a
//! terminal signal (no cancel came). Nothing may then wait for ever: the subscriber
//! gets a terminal signal (a stage that holds items or runs on a scheduler ends the
//! stream with an error of kind `Cancelled`, as weir's sinks do), or is dropped with
//! its upstream (a fused operator just lets go of it, as its source did: a
//! subscriber's `Drop` is where it learns that), and nothing may stay alive.

use crate::harness::run::{start_late, Schedulers};
use crate::harness::watch::{assert_no_failures, run_rows, wait_until, PATIENCE};
use crate::stages::{table, Stage};

#[test]
fn every_stage_ends_its_stream_when_a_source_abandons_its_subscriber() {
    let schedulers = Schedulers::new("abandoned");
    let rows = table();
    let failures = run_rows(&rows, 2, |row| {
        check(row, &schedulers)
            .into_iter()
            .map(|f| format!("{}: {f}", row.label()))
            .collect()
    });
    assert_no_failures("abandoning source", rows.len(), &failures);
}

fn check(row: &Stage, schedulers: &Schedulers) -> Vec<String> {
    let (started, mut failures) = match start_late(row, schedulers) {
        Ok(started) => started,
        Err(failures) => return failures,
    };
    let record = started.record.clone();
    let env = started.env.clone();
    for (i, source) in env.lates().iter().enumerate() {
        // Refused when never asked: the item is dropped here, which is fine.
        let _ = source.deliver(env.ledger.produce(1_000 + i as u64));
        source.let_go();
    }
    // Sources some stages subscribe only now (an inner made from the item above)
    // abandon as they arrive.
    let ended = wait_until(PATIENCE, || {
        for source in env.lates() {
            source.let_go();
        }
        record.terminated() || record.dropped()
    });
    if !ended {
        failures.push(format!(
            "neither a terminal signal nor dropped within {PATIENCE:?} after every source \
             dropped its subscriber ({})",
            record.describe()
        ));
    }
    if record.terminated() && !record.completed() {
        let errors = record.errors();
        // Kind `Cancelled`, or (across a connection or a durable log, where errors
        // arrive as the peer's) a message that names what happened.
        let said = errors.iter().all(|e| {
            e.kind() == weir::ErrorKind::Cancelled
                || e.message().contains("without a terminal signal")
        });
        if !said {
            failures.push(format!(
                "an abandoned stream ended with another error: {errors:?}"
            ));
        }
    }
    failures.extend(record.violations());
    if let Some(held) = started.released(false) {
        failures.push(format!("not released after the end: {held}"));
    }
    started.finish();
    failures
}
