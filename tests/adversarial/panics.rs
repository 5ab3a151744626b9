//! Every stage × a subscriber that panics in `on_next`, at the first or the third item.
//!
//! Rule 2.13 as weir documents it: a subscriber that panics is treated as cancelled.
//! So after the panic: upstream is cancelled (a source that had not terminated when
//! the subscriber panicked must not complete afterwards, and must not produce more
//! than a chunk or two once the cancel reached it), every source releases its
//! subscriber, every item is dropped, and the subscriber itself is dropped: all
//! within a generous watchdog.
//!
//! How many items a source makes between the panic and the cancel is not bounded
//! here: a source on another thread runs on while the panic unwinds on the
//! subscriber's thread, and how far it gets depends on how fast it is and on when
//! the scheduler runs the unwinding thread (a few thousand items in tens of
//! microseconds for a fast source; any number on a busy machine). What is checked
//! is what does not depend on timing: the cancel happens, before the source could
//! run out, and the source honours it.
//!
//! The sinks get the same treatment (`every_sink_survives_user_code_that_panics`): the
//! closure of `fold`/`for_each`, the consumer of `blocking_iter`/`into_stream`, the
//! `futures::Sink` of `forward` and the `AsyncSubscriber` of `subscribe_async` panic
//! at the first or third item; the sink reports it as documented (an error of kind
//! `Panicked`, or the consumer's own unwinding), upstream is cancelled, nothing stays
//! alive.
//! A fold fused with its chain (`a_fused_fold_releases_everything_when_any_of_its_closures_panics`)
//! has no subscription to cancel: a panic in any of its closures must name that
//! stage, stop the iterator at once and drop every item.
//!
//! The sources hold [`BIG`] items, far more than any stage consumes between a panic and
//! the cancel it must cause, so "the source completed after the panic" means nobody
//! cancelled it. A case whose stream ends before the item that would panic (a lossy
//! stage may deliver fewer items) checks nothing and is not a failure.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::StreamExt as _;
use weir::bridge::{AsyncSubscriber, SubscribeAsync};
use weir::prelude::*;
use weir::{BoxPublisher, ErrorKind};

use crate::harness::item::{Fate, Item};
use crate::harness::recorder::Plan;
use crate::harness::run::{every_row_at_items_1_and_3, start, tokio_runtime, Schedulers};
use crate::harness::watch::{
    assert_no_failures, on_thread, run_rows, silence_deliberate_panics, wait_until, DELIBERATE,
    PATIENCE,
};
use crate::stages::{Feed, Stage};

/// Items per source: a fast source makes about 200,000 items a millisecond, so this
/// leaves a panic's unwinding and the cancel after it ample time on a busy machine.
const BIG: u64 = 2_000_000;
/// Items a source may still emit once the cancel reached it (it observes a cancel
/// between chunks of at most 1,024 items; a few chunks of slack).
const SLACK: u64 = 4_096;

#[test]
fn every_stage_survives_a_subscriber_that_panics_in_on_next() {
    silence_deliberate_panics();
    every_row_at_items_1_and_3("panicking subscriber", "panic at item", check);
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
    wait_until(PATIENCE, || {
        record.panic_point().is_some() || record.terminated()
    });
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
    for probe in started.env.probes() {
        if let Some(after) = probe.emitted_after_cancel().filter(|after| *after > SLACK) {
            failures.push(format!(
                "{} emitted {after} items after it was cancelled (at most {SLACK} expected; \
                 the sources had made {} items when the subscriber panicked)",
                probe.name(),
                point.produced
            ));
        }
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

/// A sink whose user code panics at item `k`: run it over `source` (on a tokio
/// runtime where it needs one) and say whether it reported the panic as documented.
type SinkRun = fn(BoxPublisher<Item>, u64, &tokio::runtime::Handle) -> Result<(), String>;

/// The sinks, each with user code that panics: the closure of `fold`/`for_each`, the
/// consumer of `blocking_iter` and `into_stream`, the `futures::Sink` of `forward`, the
/// `AsyncSubscriber` of `subscribe_async`, the async closure of `for_each_async`. (`collect` runs no user code: it is `fold`.)
pub const SINKS: [(&str, SinkRun); 11] = [
    ("fold", |source, k, _| {
        expect_panicked(source.fold((), move |(), item| panic_at(item, k)).wait())
    }),
    ("fold_with", |source, k, _| {
        expect_panicked(
            source
                .fold_with(4, (), move |(), item| panic_at(item, k))
                .wait(),
        )
    }),
    ("for_each", |source, k, _| {
        expect_panicked(source.for_each(move |item| panic_at(item, k)).wait())
    }),
    ("for_each_with", |source, k, _| {
        expect_panicked(
            source
                .for_each_with(2, move |item| panic_at(item, k))
                .wait(),
        )
    }),
    ("blocking_iter", |source, k, _| {
        // The consumer's own thread unwinds; the iterator is dropped on the way.
        let mut items = source.blocking_iter(8);
        let consumed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            for item in items.by_ref() {
                panic_at(item.map_err(|e| e.to_string())?, k);
            }
            Ok::<(), String>(())
        }));
        consumed_by_panic(consumed)
    }),
    ("into_stream", |source, k, _| {
        let mut stream = source.into_stream(8);
        let consumed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            futures::executor::block_on(async {
                while let Some(item) = stream.next().await {
                    panic_at(item.map_err(|e| e.to_string())?, k);
                }
                Ok::<(), String>(())
            })
        }));
        consumed_by_panic(consumed)
    }),
    ("forward", |source, k, _| {
        let forward = source.forward(PanickingSink { k });
        let consumed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            futures::executor::block_on(forward).map_err(|e| e.to_string())
        }));
        consumed_by_panic(consumed)
    }),
    ("subscribe_async", |source, k, runtime| {
        let _entered = runtime.enter();
        let handle = source.subscribe_async(PanickingAsync { k });
        expect_panicked(futures::executor::block_on(handle))
    }),
    ("for_each_async", |source, k, runtime| {
        let _entered = runtime.enter();
        let handle = source.for_each_async(move |item| async move { panic_at(item, k) });
        expect_panicked(futures::executor::block_on(handle))
    }),
    ("for_each_async_with", |source, k, runtime| {
        let _entered = runtime.enter();
        let handle = source.for_each_async_with(4, move |item| async move { panic_at(item, k) });
        expect_panicked(futures::executor::block_on(handle))
    }),
    ("subscribe_async_with", |source, k, runtime| {
        let options = SubscribeAsync::new().window(4).runtime(runtime.clone());
        let handle = source.subscribe_async_with(options, PanickingAsync { k });
        expect_panicked(futures::executor::block_on(handle))
    }),
];

/// Sinks that run no user code of their own (and so cannot panic): covered by the
/// rows above (`collect` is `fold`), or not a sink at all (`boxed`).
pub const NO_USER_CODE: [&str; 3] = ["collect", "collect_with", "boxed"];

/// Take `item`; panic (deliberately) if it is the `k`th (values start at 0).
fn panic_at(mut item: Item, k: u64) {
    item.mark(Fate::Delivered);
    if item.value + 1 == k {
        panic!("{DELIBERATE} panic in a sink at item {k}");
    }
}

/// The documented report of a panic in a sink's closure: an error of kind `Panicked`.
fn expect_panicked<T: std::fmt::Debug>(result: Result<T, weir::Error>) -> Result<(), String> {
    match result {
        Err(error) if error.kind() == ErrorKind::Panicked => Ok(()),
        other => Err(format!("expected an error of kind Panicked, got {other:?}")),
    }
}

/// A consumer that unwinds: the panic must have happened (it is the point).
fn consumed_by_panic(consumed: std::thread::Result<Result<(), String>>) -> Result<(), String> {
    match consumed {
        Err(_) => Ok(()),
        Ok(result) => Err(format!(
            "the consumer never panicked: it ended with {result:?}"
        )),
    }
}

/// A `futures::Sink` whose `start_send` panics at the `k`th item.
struct PanickingSink {
    k: u64,
}

impl futures::Sink<Item> for PanickingSink {
    type Error = std::io::Error;

    fn poll_ready(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn start_send(self: Pin<&mut Self>, item: Item) -> Result<(), Self::Error> {
        panic_at(item, self.k);
        Ok(())
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn poll_close(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }
}

/// An async subscriber whose `on_next` panics at the `k`th item.
struct PanickingAsync {
    k: u64,
}

#[async_trait::async_trait]
impl AsyncSubscriber<Item> for PanickingAsync {
    async fn on_next(&mut self, item: Item) -> Result<(), weir::Error> {
        panic_at(item, self.k);
        Ok(())
    }
}

#[test]
fn every_sink_survives_user_code_that_panics() {
    silence_deliberate_panics();
    let schedulers = Schedulers::new("sink-panics");
    let runtime = tokio_runtime("sink-panics");
    let cases: Vec<(&str, SinkRun, u64)> = SINKS
        .iter()
        .flat_map(|&(name, run)| [1, 3].map(|k| (name, run, k)))
        .collect();
    let failures = run_rows(&cases, 6, |&(name, run, k)| {
        sink_check(run, k, &schedulers, runtime.handle())
            .into_iter()
            .map(|f| format!("{name} (panic at item {k}): {f}"))
            .collect()
    });
    assert_no_failures("panicking sink", cases.len(), &failures);
}

fn sink_check(
    run: SinkRun,
    k: u64,
    schedulers: &Schedulers,
    runtime: &tokio::runtime::Handle,
) -> Vec<String> {
    let env = Arc::new(schedulers.env(BIG, Feed::OnDemand));
    let source = env.source();
    let runtime = runtime.clone();
    let mut failures = Vec::new();
    match on_thread("sink", PATIENCE, move || run(source, k, &runtime)) {
        Ok(Ok(())) => {}
        Ok(Err(why)) => failures.push(why),
        Err(why) => failures.push(format!("the sink {why}")),
    }
    if !wait_until(PATIENCE, || {
        env.ledger.live() == 0 && env.probes().iter().all(|p| !p.holding())
    }) {
        let sources: Vec<String> = env.probes().iter().map(|p| p.describe()).collect();
        failures.push(format!(
            "not released after the panic: {} items alive; {}",
            env.ledger.live(),
            sources.join("; ")
        ));
    }
    let produced = env.ledger.produced();
    if env.probes().iter().any(|p| p.completed()) {
        failures.push(format!(
            "upstream was not cancelled: the source ran to completion ({produced} items)"
        ));
    }
    env.stop_sources();
    failures
}

/// A fold at the end of `from_iter` and closure stages runs fused, as one loop in the
/// caller, with no subscription to cancel: a panic in any closure of the chain, at
/// the first or the third item, must still end as documented (an error of kind
/// `Panicked` naming that stage), stop pulling from the iterator, and drop every
/// item (the one in hand, and those the iterator still holds).
#[test]
fn a_fused_fold_releases_everything_when_any_of_its_closures_panics() {
    silence_deliberate_panics();
    const STAGES: [&str; 5] = ["map", "filter", "filter_map", "inspect", "fold"];
    let mut failures = Vec::new();
    for k in [1u64, 3] {
        for stage in STAGES {
            let ledger = crate::harness::item::Ledger::new();
            let held: Vec<Item> = (0..16).map(|v| ledger.produce(1_000 + v)).collect();
            let source = ledger.clone();
            // Lazily made items first, then a vector's worth the iterator still holds.
            let items = (0..BIG).map(move |v| source.produce(v)).take(8).chain(held);
            let boom = move |here: &str, item: &Item| {
                if here == stage && item.value + 1 == k {
                    panic!("{DELIBERATE} panic in {here} at item {k}");
                }
            };
            let result = weir::from_iter(items)
                .map(move |item| {
                    boom("map", &item);
                    item
                })
                .filter(move |item| {
                    boom("filter", item);
                    true
                })
                .filter_map(move |item| {
                    boom("filter_map", &item);
                    Some(item)
                })
                .inspect(move |item| boom("inspect", item))
                .fold(0u64, move |n, mut item| {
                    boom("fold", &item);
                    item.mark(Fate::Delivered);
                    n + 1
                })
                .wait();
            let case = format!("{stage} (panic at item {k})");
            match result {
                Err(error) if error.kind() == ErrorKind::Panicked => {
                    if error.stage() != Some(stage) {
                        failures.push(format!("{case}: the error names {:?}", error.stage()));
                    }
                }
                other => failures.push(format!("{case}: expected Panicked, got {other:?}")),
            }
            if ledger.live() != 0 {
                failures.push(format!("{case}: {} items alive", ledger.live()));
            }
            // 16 items made up front, then one per item pulled: none beyond the panic.
            if ledger.produced() != 16 + k {
                failures.push(format!("{case}: {} items made", ledger.produced() - 16));
            }
            if ledger.ended(Fate::Delivered) != k - 1 {
                failures.push(format!(
                    "{case}: {} items folded",
                    ledger.ended(Fate::Delivered)
                ));
            }
        }
    }
    assert_no_failures("panicking fused fold", 2 * STAGES.len(), &failures);
}
