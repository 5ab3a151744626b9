//! A tokio runtime shut down mid-stream (`Runtime::shutdown_timeout`) under every
//! boundary and bridge that runs on it: the pipeline must terminate with an error
//! (the scheduler can no longer run its tasks), upstream must be cancelled, and
//! nothing may stay alive.
//!
//! Upstream is a paced, endless source on a `ThreadPool` of its own (an `interval`
//! mapped to counted items), so it is not touched by the shutdown: only the stage on
//! tokio is. Each case waits until items flow (or, for a timer that has not fired,
//! until it is subscribed), shuts the runtime down, then checks, under the watchdog:
//! a terminal error reached the subscriber (for the bridges whose consumer is a tokio
//! task: the consumer's end is reported), every source released its subscriber, no
//! item is alive, the subscriber was dropped.
//!
//! `pool_shutdown.rs` (planned API) does the same for `ThreadPool::shutdown` and also
//! checks the error kind, `ErrorKind::SchedulerShutdown`.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use weir::bridge::{AsyncSubscriber, SubscribeAsync};
use weir::operators::{Rate, ThrottleMode};
use weir::prelude::*;
use weir::runtime::{ThreadPool, Tokio};
use weir::BoxPublisher;

use crate::harness::item::{Fate, Item};
use crate::harness::recorder::{Plan, Recorder};
use crate::harness::run::{guarded, released, tokio_runtime};
use crate::harness::watch::{assert_no_failures, on_thread, run_rows, wait_until, PATIENCE};
use crate::stages::{Env, Feed};

/// What runs on the runtime that is shut down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Boundary {
    PublishOn,
    SubscribeOn,
    Sample,
    Debounce,
    Timeout,
    BufferTimeout,
    ThrottleShaping,
    Interval,
    Timer,
    FromStream,
    FromReceiver,
    IntoStream,
    SubscribeAsync,
    Mux,
    /// Through a JetStream stream (`nats::Sink` → stream → `nats::Source`, the
    /// table's row), both stages on the runtime; not in [`CASES`] (it needs the
    /// feature), see `pool_shutdown.rs`.
    #[cfg(feature = "nats")]
    Nats,
}

/// Every boundary and bridge that runs on a scheduler.
pub const CASES: [Boundary; 14] = [
    Boundary::PublishOn,
    Boundary::SubscribeOn,
    Boundary::Sample,
    Boundary::Debounce,
    Boundary::Timeout,
    Boundary::BufferTimeout,
    Boundary::ThrottleShaping,
    Boundary::Interval,
    Boundary::Timer,
    Boundary::FromStream,
    Boundary::FromReceiver,
    Boundary::IntoStream,
    Boundary::SubscribeAsync,
    Boundary::Mux,
];

/// Items to see flowing before the shutdown.
const FLOWING: u64 = 5;

#[test]
fn a_tokio_runtime_shut_down_mid_stream_ends_every_pipeline_on_it() {
    let failures = run_rows(&CASES, 6, |&case| {
        guarded(&format!("{case:?}"), 5 * PATIENCE, move || {
            check(case, |_| true)
        })
        .into_iter()
        .map(|f| format!("{case:?}: {f}"))
        .collect()
    });
    assert_no_failures("tokio runtime shut down mid-stream", CASES.len(), &failures);
}

/// A paced, endless source of counted items on the env's pool.
pub fn paced(env: &Env) -> BoxPublisher<Item> {
    let ticks = weir::interval_on(Duration::from_micros(200), env.pool.clone());
    env.tap("paced source", ticks).map(env.produce()).boxed()
}

/// The stage of `case` over `env`'s paced source, on `scheduler`; `None` for the
/// bridges whose consumer is a task (`IntoStream`, `SubscribeAsync`).
pub fn stage<C: weir::runtime::Scheduler + Clone>(
    case: Boundary,
    env: &Env,
    scheduler: C,
) -> Option<BoxPublisher<Item>> {
    let ms = Duration::from_millis;
    let gather = {
        let ledger = env.ledger.clone();
        move |batch| Item::gather(batch, &ledger)
    };
    Some(match case {
        Boundary::PublishOn => paced(env).publish_on(scheduler, 16).boxed(),
        // The worker, the lane and every channel's receiving stage on the scheduler.
        Boundary::Mux => {
            let mux = weir::mux::Mux::builder()
                .build_local(scheduler.clone(), scheduler)
                .expect("the default mux configuration");
            paced(env).via(&mux, 0).expect("channel 0 is free").boxed()
        }
        Boundary::SubscribeOn => paced(env).subscribe_on(scheduler).boxed(),
        Boundary::Sample => paced(env).sample_on(ms(1), scheduler).boxed(),
        Boundary::Debounce => paced(env)
            .debounce_on(Duration::from_micros(50), scheduler)
            .boxed(),
        Boundary::Timeout => paced(env)
            .timeout_on(Duration::from_secs(60), scheduler)
            .boxed(),
        Boundary::BufferTimeout => paced(env)
            .buffer_timeout_on(4, ms(1), scheduler)
            .map(gather)
            .boxed(),
        Boundary::ThrottleShaping => paced(env)
            .throttle_on(
                Rate::new(1, Duration::from_micros(100)),
                4,
                ThrottleMode::Shaping,
                scheduler,
            )
            .boxed(),
        Boundary::Interval => env
            .tap(
                "interval",
                weir::interval_on(Duration::from_micros(200), scheduler),
            )
            .map(env.produce())
            .boxed(),
        Boundary::Timer => env
            .tap(
                "timer",
                weir::timer_on(Duration::from_secs(3_600), scheduler),
            )
            .map(env.produce())
            .boxed(),
        Boundary::FromStream => {
            let stream = futures::stream::iter((0..).map(env.produce()));
            env.tap("stream", weir::from_stream_on(stream, scheduler))
                .boxed()
        }
        Boundary::FromReceiver => {
            let (tx, rx) = tokio::sync::mpsc::channel::<Item>(16);
            let mut produce = env.produce();
            env.spawn_producer(move || {
                for value in 0.. {
                    if let Err(refused) = tx.blocking_send(produce(value)) {
                        let mut item = refused.0;
                        item.mark(Fate::HandedBack);
                        return;
                    }
                }
            });
            env.tap("receiver", weir::bridge::from_receiver_on(rx, scheduler))
                .boxed()
        }
        #[cfg(feature = "nats")]
        Boundary::Nats => crate::nats::through_jetstream(env, paced(env)),
        Boundary::IntoStream | Boundary::SubscribeAsync => return None,
    })
}

/// Counts what it is given; never fails.
pub struct Counting(pub Arc<std::sync::atomic::AtomicU64>);

#[async_trait::async_trait]
impl AsyncSubscriber<Item> for Counting {
    async fn on_next(&mut self, mut item: Item) -> Result<(), weir::Error> {
        item.mark(Fate::Delivered);
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

/// Run `case`, shut the runtime down, and check the ending; a stage's terminal error
/// must also pass `accept` (the planned error kind, in `pool_shutdown.rs`).
pub fn check(case: Boundary, accept: fn(&weir::Error) -> bool) -> Vec<String> {
    let runtime = tokio_runtime("shutdown");
    let source_pool = ThreadPool::builder()
        .name("shutdown-source")
        .threads(1)
        .build();
    let env = Arc::new(Env::new(
        0,
        Feed::OnDemand,
        source_pool,
        runtime.handle().clone(),
    ));
    let tokio = Tokio::new(runtime.handle().clone());
    let mut failures = Vec::new();
    let seen = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let count = || seen.load(std::sync::atomic::Ordering::SeqCst);
    match case {
        Boundary::IntoStream => {
            let mut stream = paced(&env).into_stream(16);
            let counter = seen.clone();
            runtime.spawn(async move {
                while let Some(item) = stream.next().await {
                    if let Ok(mut item) = item {
                        item.mark(Fate::Delivered);
                        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                }
            });
            env.open();
            if !wait_until(PATIENCE, || count() >= FLOWING) {
                failures.push(format!("items never flowed ({} seen)", count()));
            }
            runtime.shutdown_timeout(Duration::from_millis(500));
            if !wait_until(PATIENCE, || released_all(&env)) {
                failures.push(held(&env));
            }
        }
        Boundary::SubscribeAsync => {
            let options = SubscribeAsync::new()
                .window(4)
                .runtime(runtime.handle().clone());
            let handle = paced(&env).subscribe_async_with(options, Counting(seen.clone()));
            env.open();
            if !wait_until(PATIENCE, || count() >= FLOWING) {
                failures.push(format!("items never flowed ({} seen)", count()));
            }
            runtime.shutdown_timeout(Duration::from_millis(500));
            match on_thread("await the handle", PATIENCE, move || {
                futures::executor::block_on(handle)
            }) {
                Ok(Err(error)) if accept(&error) => {}
                Ok(Err(error)) => {
                    failures.push(format!("the handle failed with the wrong kind: {error}"))
                }
                Ok(Ok(())) => {
                    failures.push("the handle resolved to Ok(()) after the shutdown".to_owned())
                }
                Err(why) => failures.push(format!("awaiting the handle {why}")),
            }
            if !wait_until(PATIENCE, || released_all(&env)) {
                failures.push(held(&env));
            }
        }
        _ => {
            let publisher = stage(case, &env, tokio).expect("a publisher stage");
            let plan = Plan {
                initial: 16,
                per_item: 1,
                ..Plan::default()
            };
            let (recorder, record) = Recorder::new(plan, env.ledger.clone(), env.probes());
            publisher.subscribe(recorder);
            env.open();
            let enough = if case == Boundary::Timer { 0 } else { FLOWING };
            if !wait_until(PATIENCE, || record.subscribed() && record.items() >= enough) {
                failures.push(format!("items never flowed ({})", record.describe()));
            }
            runtime.shutdown_timeout(Duration::from_millis(500));
            if !wait_until(PATIENCE, || record.terminated()) {
                failures.push(format!(
                    "no terminal signal after the shutdown ({})",
                    record.describe()
                ));
            } else if record.completed() {
                failures.push(format!(
                    "completed instead of failing ({})",
                    record.describe()
                ));
            } else if !record.errors().iter().all(accept) {
                failures.push(format!(
                    "failed with the wrong kind of error ({})",
                    record.describe()
                ));
            }
            if let Some(held) = released(&env, &record, true) {
                failures.push(format!("not released after the shutdown: {held}"));
            }
            failures.extend(record.violations());
            record.forget_subscription();
        }
    }
    env.stop_sources();
    failures
}

/// Nothing alive and every source released.
pub fn released_all(env: &Env) -> bool {
    env.ledger.live() == 0 && env.probes().iter().all(|p| !p.holding())
}

/// What is still held, for a failure message.
pub fn held(env: &Env) -> String {
    let sources: Vec<String> = env.probes().iter().map(|p| p.describe()).collect();
    format!(
        "not released after the shutdown: {} items alive; {}",
        env.ledger.live(),
        sources.join("; ")
    )
}

/// Stages on tokio that are idle when the runtime shuts down (upstream silent, a
/// stream that stays pending): nothing of theirs is queued, but their lane's task is
/// dropped, and each must end with `SchedulerShutdown`, its upstream cancelled.
/// Before the fix they waited for a signal that never came (a sink's `wait` hung).
#[test]
fn idle_stages_end_when_their_tokio_runtime_shuts_down() {
    use weir::source::channel::ChannelPolicy;
    use weir::ErrorKind;

    let cases = [
        "publish_on behind a silent channel",
        "from_stream_on(pending)",
    ];
    let failures = run_rows(&cases, 2, |&case| {
        guarded(case, 5 * PATIENCE, move || {
            let runtime = tokio_runtime("shutdown-idle");
            let tokio = Tokio::new(runtime.handle().clone());
            let (tx, rx) = weir::channel::<u64>(4, ChannelPolicy::Backpressure);
            let mut handle = if case.starts_with("publish_on") {
                rx.publish_on(tokio, 16).collect()
            } else {
                drop(rx);
                weir::from_stream_on(futures::stream::pending::<u64>(), tokio).collect()
            };
            // The stage's first pass runs on the runtime, which then has nothing
            // to do (not a timing assertion: a shutdown before it must end the
            // stage as well).
            std::thread::sleep(Duration::from_millis(50));
            runtime.shutdown_timeout(Duration::from_secs(1));
            let mut failures = Vec::new();
            match handle.wait_timeout(5 * PATIENCE) {
                Some(Err(error)) if error.kind() == ErrorKind::SchedulerShutdown => {}
                other => failures.push(format!("{case}: ended with {other:?}")),
            }
            if !wait_until(PATIENCE, || tx.is_closed()) {
                failures.push(format!("{case}: upstream (the channel) not cancelled"));
            }
            failures
        })
    });
    assert_no_failures("idle stages at shutdown", cases.len(), &failures);
}
