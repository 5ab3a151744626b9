//! Starting a table row: build it in a fresh [`Env`], subscribe a [`Recorder`] on a
//! thread of its own (a synchronous pipeline runs inside `subscribe`), open the env's
//! producers once the recorder is subscribed; and the one "everything released" wait
//! every check ends with.

use std::sync::{mpsc, Arc};
use std::time::Duration;

use weir::prelude::*;
use weir::runtime::ThreadPool;

use super::recorder::{Plan, Record, Recorder};
use super::watch::{on_thread, wait_until, PATIENCE};
use crate::stages::{Env, Feed, Stage};

/// The schedulers a table check shares between its rows: a pool of two workers and a
/// tokio runtime of two workers. Clones share them.
#[derive(Clone, Debug)]
pub struct Schedulers {
    /// The pool.
    pub pool: ThreadPool,
    runtime: Arc<tokio::runtime::Runtime>,
}

impl Schedulers {
    /// New schedulers whose threads are named after `check`.
    pub fn new(check: &str) -> Schedulers {
        Schedulers {
            pool: ThreadPool::builder().name(check).threads(2).build(),
            runtime: Arc::new(tokio_runtime(check)),
        }
    }

    /// An env for one run of a row.
    pub fn env(&self, len: u64, feed: Feed) -> Env {
        Env::new(len, feed, self.pool.clone(), self.runtime.handle().clone())
    }
}

/// A multi-thread tokio runtime of two workers, timers and I/O enabled (the rsocket
/// rows open loopback connections on it).
pub fn tokio_runtime(name: &str) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(format!("{name}-tokio"))
        .enable_all()
        .build()
        .expect("build a tokio runtime")
}

/// A row, built and subscribed.
pub struct Started {
    /// The row's env: ledger and source probes.
    pub env: Arc<Env>,
    /// What the recorder saw.
    pub record: Arc<Record>,
    /// The pipeline's `in_flight_bound()` plus the row's extra bound.
    pub bound: u64,
    /// How `subscribe` returned: `Err` if it panicked or hung.
    pub subscribe: Result<(), String>,
}

/// Build `row` with sources of `len` items fed as `feed`, subscribe a recorder that
/// follows `plan`, and open the producers once it is subscribed. `Err` only if
/// building the row failed or hung.
pub fn start(
    row: &Stage,
    schedulers: &Schedulers,
    len: u64,
    feed: Feed,
    plan: Plan,
) -> Result<Started, String> {
    let env = Arc::new(schedulers.env(len, feed));
    let (built_tx, built_rx) = mpsc::channel();
    let build = row.build;
    let extra = row.extra_bound;
    let shared = env.clone();
    let subscribing = std::thread::Builder::new()
        .name(format!("subscribe {}", row.name))
        .spawn(move || {
            let publisher = build(&shared);
            let bound = publisher.in_flight_bound().saturating_add(extra);
            let (recorder, record) = Recorder::new(plan, shared.ledger.clone(), shared.probes());
            let _ = built_tx.send((record, bound));
            let subscribed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                publisher.subscribe(recorder)
            }));
            subscribed.map_err(|payload| super::watch::panic_message(&*payload))
        })
        .expect("spawn the subscribing thread");
    let (record, bound) = match built_rx.recv_timeout(PATIENCE) {
        Ok(built) => built,
        Err(_) => {
            env.open();
            return Err(format!(
                "building the stage panicked or hung ({:?})",
                subscribing.is_finished()
            ));
        }
    };
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done_tx.send(subscribing.join());
    });
    // A subscribe_on row subscribes on another thread: wait for on_subscribe, not for
    // `subscribe` to return (a synchronous pipeline may need the producers first).
    wait_until(PATIENCE, || record.subscribed());
    env.open();
    let subscribe = match done_rx.recv_timeout(PATIENCE) {
        Ok(Ok(Ok(()))) => Ok(()),
        Ok(Ok(Err(message))) => Err(format!(
            "the subscriber's panic escaped from subscribe(): {message}"
        )),
        Ok(Err(_)) => Err("the subscribing thread panicked".to_owned()),
        Err(_) => Err(format!("subscribe() did not return within {PATIENCE:?}")),
    };
    Ok(Started {
        env,
        record,
        bound,
        subscribe,
    })
}

/// [`start`], then wait for `on_subscribe`: the started run with the failures known so
/// far ([`Started::subscribe_failures`]), or every failure when the row could not start
/// or never subscribed (then the run is already finished).
pub fn start_subscribed(
    row: &Stage,
    schedulers: &Schedulers,
    len: u64,
    feed: Feed,
    plan: Plan,
) -> Result<(Started, Vec<String>), Vec<String>> {
    let started = start(row, schedulers, len, feed, plan).map_err(|why| vec![why])?;
    let mut failures = started.subscribe_failures();
    if !started.record.subscribed() {
        failures.push(format!("no on_subscribe within {PATIENCE:?}"));
        started.finish();
        return Err(failures);
    }
    Ok((started, failures))
}

/// How long a run over [`Feed::Late`] sources lets demand travel to them (rows that
/// ask on a scheduler); a source not asked by then gets no item.
const SETTLE: Duration = Duration::from_millis(200);

/// Start `row` over [`Feed::Late`] sources of one item each and ask for two items;
/// returns once every subscribed source was asked (or after [`SETTLE`]).
pub fn start_late(
    row: &Stage,
    schedulers: &Schedulers,
) -> Result<(Started, Vec<String>), Vec<String>> {
    let (started, failures) = start_subscribed(row, schedulers, 1, Feed::Late, Plan::default())?;
    started.record.request(2);
    let env = started.env.clone();
    wait_until(SETTLE, || {
        env.lates()
            .iter()
            .all(|source| !source.subscribed() || source.asked())
    });
    Ok((started, failures))
}

impl Started {
    /// Wait until the run has let go of everything: no item alive, every source that
    /// subscribed released its subscriber, and (if `recorder` is set) the recorder
    /// dropped. `None` when it did; otherwise what is still held after the watchdog.
    pub fn released(&self, recorder: bool) -> Option<String> {
        released(&self.env, &self.record, recorder)
    }

    /// The failures known once the run started: `subscribe` panicked or did not
    /// return (empty when it did); a check adds its own to them.
    pub fn subscribe_failures(&self) -> Vec<String> {
        self.subscribe.clone().err().into_iter().collect()
    }

    /// Let go of the run's own handles (the subscription the record keeps), and stop
    /// any source a broken stage left running.
    pub fn finish(self) {
        self.record.forget_subscription();
        self.env.open();
        self.env.stop_sources();
    }
}

/// Wait until a run has let go of everything: no item alive, every source that
/// subscribed released its subscriber, and (if `recorder` is set) the recorder dropped.
/// `None` when it did; otherwise what is still held after the watchdog.
pub fn released(env: &Env, record: &Record, recorder: bool) -> Option<String> {
    let done = || {
        env.ledger.live() == 0
            && env.probes().iter().all(|p| !p.holding())
            && (!recorder || record.dropped())
    };
    if wait_until(PATIENCE, done) {
        return None;
    }
    let mut held = Vec::new();
    let live = env.ledger.live();
    if live != 0 {
        held.push(format!("{live} items still alive"));
    }
    for probe in env.probes() {
        if probe.holding() {
            held.push(format!(
                "{} (never released its subscriber)",
                probe.describe()
            ));
        }
    }
    if recorder && !record.dropped() {
        held.push("the subscriber was never dropped".to_owned());
    }
    Some(format!("after {PATIENCE:?}: {}", held.join("; ")))
}

/// Run `f`, a whole check of one case, on a thread of its own with a watchdog of
/// `timeout`; a hang or a panic becomes one failure naming `case`.
pub fn guarded(
    case: &str,
    timeout: Duration,
    f: impl FnOnce() -> Vec<String> + Send + 'static,
) -> Vec<String> {
    match on_thread(case, timeout, f) {
        Ok(failures) => failures,
        Err(why) => vec![format!("{case}: the check itself {why}")],
    }
}

/// Run `check` on every row of the stage table at item `k` = 1 and 3 (where the row
/// delivers that many), eight cases at a time, each under a watchdog; fail once with
/// every failing case, each named by its row and `at` (e.g. "panic at item 3").
pub fn every_row_at_items_1_and_3(
    what: &str,
    at: &str,
    check: fn(&Stage, u64, &Schedulers) -> Vec<String>,
) {
    let schedulers = Schedulers::new(what);
    let rows = crate::stages::table();
    let cases: Vec<(&Stage, u64)> = rows
        .iter()
        .flat_map(|row| [1, 3].map(|k| (row, k)))
        .filter(|(row, k)| (row.expect)(16).len() as u64 >= *k)
        .collect();
    let failures = super::watch::run_rows(&cases, 8, |&(row, k)| {
        let (row, schedulers) = (*row, schedulers.clone());
        guarded(row.name, 5 * PATIENCE, move || check(&row, k, &schedulers))
            .into_iter()
            .map(|f| format!("{} ({at} {k}): {f}", row.label()))
            .collect()
    });
    super::watch::assert_no_failures(what, cases.len(), &failures);
}
