//! Every stage × an item that arrives after the cancel.
//!
//! A source that read its demand just before a cancel reached it may still deliver
//! (rule 2.8), and a stage whose queue outlives the cancel may keep such an item for
//! as long as anyone holds the subscription. Here every source is a `Feed::Late`
//! source: the subscriber asks for two items and cancels before any arrived; once the
//! cancel reached each source, the check delivers one item into every source that was
//! asked for one, and the source lets go of its subscriber (rule 3.13). Then nothing
//! may be alive, although the recorder's subscription is still held, and the
//! subscriber must be dropped.

use crate::harness::run::{start_late, Schedulers};
use crate::harness::watch::{assert_no_failures, run_rows, wait_until, PATIENCE};
use crate::stages::{table, Stage};

#[test]
fn every_stage_releases_an_item_that_arrives_after_the_cancel() {
    let schedulers = Schedulers::new("late");
    let rows = table();
    let failures = run_rows(&rows, 2, |row| {
        check(row, &schedulers)
            .into_iter()
            .map(|f| format!("{}: {f}", row.label()))
            .collect()
    });
    assert_no_failures("late item", rows.len(), &failures);
}

fn check(row: &Stage, schedulers: &Schedulers) -> Vec<String> {
    let (started, mut failures) = match start_late(row, schedulers) {
        Ok(started) => started,
        Err(failures) => return failures,
    };
    let record = started.record.clone();
    let env = started.env.clone();
    record.cancel();
    let reached = wait_until(PATIENCE, || {
        env.lates()
            .iter()
            .all(|source| !source.subscribed() || source.cancelled())
    });
    if !reached {
        failures.push(format!(
            "the cancel did not reach every source within {PATIENCE:?}"
        ));
    }
    for (i, source) in env.lates().iter().enumerate() {
        // Refused when never asked: the item is dropped here, which is fine.
        let _ = source.deliver(env.ledger.produce(1_000 + i as u64));
        source.let_go();
    }
    if let Some(held) = started.released(true) {
        failures.push(format!("an item delivered after the cancel: {held}"));
    }
    started.finish();
    failures
}
