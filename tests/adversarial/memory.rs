//! A subscriber that never requests, behind every stage, while the source keeps
//! producing: memory stays flat.
//!
//! Every tapped source is a producer thread pushing [`PUSHED`] items into a
//! `weir::channel` of [`CAPACITY`] with `DropOldest` (it never waits, so it keeps
//! producing whatever happens downstream). The subscriber requests nothing. The
//! ledger's peak of live items, over the whole run, must stay within the pipeline's
//! documented `in_flight_bound()` (the channel's capacity plus one batch, plus each
//! stage's own bound; a bridge whose buffer is not a publisher adds its own) plus a
//! few items in transit per source. Then a cancel must release everything.
//!
//! The buffering sinks get the same treatment: `into_stream`, `blocking_iter` and
//! `subscribe_async_with` whose consumer stops consuming after the first item.

use std::sync::Arc;

use futures::StreamExt as _;
use weir::bridge::{AsyncSubscriber, SubscribeAsync};
use weir::prelude::*;

use crate::harness::item::Item;
use crate::harness::recorder::Plan;
use crate::harness::run::{guarded, start, tokio_runtime, Schedulers};
use crate::harness::watch::{assert_no_failures, on_thread, run_rows, wait_until, PATIENCE};
use crate::stages::{table, Env, Feed, Stage};

/// Items each source pushes.
const PUSHED: u64 = 20_000;
/// The pushing channel's capacity.
const CAPACITY: usize = 8;
/// Items in transit per source besides what the bounds count: the one in the
/// producer's hand, the oldest being dropped while the newest goes in, one being
/// mapped into a new item.
const SLACK_PER_SOURCE: u64 = 4;

#[test]
fn memory_stays_flat_behind_every_stage_when_nothing_is_requested() {
    let schedulers = Schedulers::new("memory");
    let rows = table();
    let failures = run_rows(&rows, 2, |row| {
        let (row_copy, schedulers) = (*row, schedulers.clone());
        guarded(row.name, 5 * PATIENCE, move || {
            check(&row_copy, &schedulers)
        })
        .into_iter()
        .map(|f| format!("{}: {f}", row.label()))
        .collect()
    });
    assert_no_failures("never-requesting subscriber", rows.len(), &failures);
}

fn check(row: &Stage, schedulers: &Schedulers) -> Vec<String> {
    let plan = Plan::default();
    let started = match start(row, schedulers, PUSHED, Feed::Pushy(CAPACITY), plan) {
        Ok(started) => started,
        Err(why) => return vec![why],
    };
    let mut failures = started.subscribe_failures();
    let env = &started.env;
    if !wait_until(PATIENCE, || env.pushed()) {
        failures.push(format!(
            "the producers did not get their {PUSHED} items out within {PATIENCE:?}"
        ));
    }
    let record = &started.record;
    if record.items() > 0 {
        failures.push(format!(
            "{} items delivered without a request",
            record.items()
        ));
    }
    let sources = env.probes().len() as u64;
    let allowed = started.bound + SLACK_PER_SOURCE * sources;
    let peak = env.ledger.peak();
    if peak > allowed as i64 {
        failures.push(format!(
            "{peak} items alive at once, more than the in-flight bound {} + {} in transit \
             ({} produced)",
            started.bound,
            SLACK_PER_SOURCE * sources,
            env.ledger.produced()
        ));
    }
    record.cancel();
    if let Some(held) = started.released(true) {
        failures.push(format!("not released after the cancel: {held}"));
    }
    failures.extend(record.violations());
    started.finish();
    failures
}

/// A buffering sink whose consumer takes the first item and then nothing more.
#[derive(Clone, Copy, Debug)]
enum Sink {
    IntoStream,
    BlockingIter,
    SubscribeAsync,
}

/// The window each sink is given.
const WINDOW: u64 = 32;

#[test]
fn memory_stays_flat_behind_every_buffering_sink_whose_consumer_stops() {
    let sinks = [Sink::IntoStream, Sink::BlockingIter, Sink::SubscribeAsync];
    let failures = run_rows(&sinks, 3, |&sink| {
        sink_check(sink)
            .into_iter()
            .map(|f| format!("{sink:?}: {f}"))
            .collect()
    });
    assert_no_failures(
        "stopped consumer behind a buffering sink",
        sinks.len(),
        &failures,
    );
}

/// Never completes `on_next` after the first item.
struct Stuck;

#[async_trait::async_trait]
impl AsyncSubscriber<Item> for Stuck {
    async fn on_next(&mut self, _item: Item) -> Result<(), weir::Error> {
        futures::future::pending::<()>().await;
        Ok(())
    }
}

fn sink_check(sink: Sink) -> Vec<String> {
    let schedulers = Schedulers::new("memory-sink");
    let runtime = tokio_runtime("memory-sink");
    let env = Arc::new(schedulers.env(PUSHED, Feed::Pushy(CAPACITY)));
    let source = env.source();
    let bound = source.in_flight_bound() + WINDOW;
    let mut failures = Vec::new();
    // The consumer: subscribe, take one item, then hold on without consuming. Dropping
    // what `hold` returns lets go.
    let held: Result<Box<dyn FnOnce() + Send>, String> = match sink {
        Sink::IntoStream => on_thread("into_stream consumer", PATIENCE, {
            let env = env.clone();
            move || {
                let mut stream = source.into_stream(WINDOW);
                env.open();
                let first = futures::executor::block_on(stream.next());
                drop(first);
                Box::new(move || drop(stream)) as Box<dyn FnOnce() + Send>
            }
        }),
        Sink::BlockingIter => on_thread("blocking_iter consumer", PATIENCE, {
            let env = env.clone();
            move || {
                let mut items = source.blocking_iter(WINDOW);
                env.open();
                drop(items.next());
                Box::new(move || drop(items)) as Box<dyn FnOnce() + Send>
            }
        }),
        Sink::SubscribeAsync => {
            let options = SubscribeAsync::new()
                .window(WINDOW)
                .runtime(runtime.handle().clone());
            let handle = source.subscribe_async_with(options, Stuck);
            env.open();
            Ok(Box::new(move || handle.abort()) as Box<dyn FnOnce() + Send>)
        }
    };
    let release = match held {
        Ok(release) => release,
        Err(why) => return vec![format!("the consumer {why}")],
    };
    if !wait_until(PATIENCE, || env.pushed()) {
        failures.push(format!(
            "the producer did not get its {PUSHED} items out within {PATIENCE:?}"
        ));
    }
    let allowed = bound + SLACK_PER_SOURCE;
    let peak = env.ledger.peak();
    if peak > allowed as i64 {
        failures.push(format!(
            "{peak} items alive at once, more than the bound {bound} + {SLACK_PER_SOURCE} in transit"
        ));
    }
    release();
    if !wait_until(PATIENCE, || released(&env)) {
        failures.push(format!(
            "after letting go of the consumer: {} items still alive; {}",
            env.ledger.live(),
            env.probes()
                .iter()
                .map(|p| p.describe())
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    failures
}

fn released(env: &Env) -> bool {
    env.ledger.live() == 0 && env.probes().iter().all(|p| !p.holding())
}
