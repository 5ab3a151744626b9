//! Every stage × a subscriber that leaks the rest of a batch.
//!
//! `on_next_batch` hands the subscriber an iterator by value, so safe code may
//! `mem::forget` it instead of consuming or dropping it. Whatever a stage does to
//! account for the items it handed out, a leaked iterator must stay a leak: the items
//! it still held are never dropped, and no item is dropped twice (which would be a
//! double free). Here the subscriber takes the first or the third item, cancels, and
//! forgets the iterator. Afterwards every source must let go of its subscriber, the
//! subscriber must be dropped, and the count of live items must not go below zero
//! (each item counts itself alive at creation and dead at its `Drop`; a double drop
//! counts one death too many). Items left alive are the leak, and expected.

use crate::harness::recorder::Plan;
use crate::harness::run::{every_row_at_items_1_and_3, start, Schedulers};
use crate::harness::watch::{wait_until, PATIENCE};
use crate::stages::{Feed, Stage};

/// Items per source: more than any stage hands over before the cancel takes effect.
const LEN: u64 = 20_000;

#[test]
fn every_stage_survives_a_subscriber_that_forgets_a_batch() {
    every_row_at_items_1_and_3("forgetful subscriber", "forgets at item", check);
}

fn check(row: &Stage, k: u64, schedulers: &Schedulers) -> Vec<String> {
    let plan = Plan {
        initial: 8,
        per_item: 1,
        cancel_at: Some(k),
        forget_at: Some(k),
        ..Plan::default()
    };
    let started = match start(row, schedulers, LEN, Feed::OnDemand, plan) {
        Ok(started) => started,
        Err(why) => return vec![why],
    };
    let mut failures = started.subscribe_failures();
    let record = started.record.clone();
    wait_until(PATIENCE, || record.items() >= k || record.terminated());
    if record.items() < k && !record.terminated() {
        failures.push(format!(
            "item {k} never arrived and the stream did not end ({})",
            record.describe()
        ));
    }
    let env = started.env.clone();
    started.finish();
    let let_go = wait_until(PATIENCE, || {
        env.probes().iter().all(|p| !p.holding()) && record.dropped()
    });
    if !let_go {
        failures.push(format!(
            "not released after the cancel: sources holding {}, subscriber dropped {}",
            env.probes().iter().filter(|p| p.holding()).count(),
            record.dropped()
        ));
    }
    let live = env.ledger.live();
    if live < 0 {
        failures.push(format!(
            "{} more items dropped than made: an item was dropped twice",
            -live
        ));
    }
    failures
}
