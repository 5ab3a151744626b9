//! `weir::channel` accounting: 1–4 producers, each using one of the send methods
//! (`try_send`, `try_send_all` in batches of 1–37, `send_blocking`, `send().await` and
//! `send_or_pause().await` on a tokio runtime), racing the end of the stream (every sender dropped, `close`, `fail`, or a
//! consumer that cancels), under every `ChannelPolicy`, into a slow consumer (one
//! item requested at a time, pausing), an eager one (unbounded demand, no pause:
//! nearly every single send then races the others for the direct hand-off), or an
//! eager one on another thread behind `publish_on(pool, 4)` (whose drain watches the
//! channel's lane: single sends then claim slots of it while the watcher comes and
//! goes).
//!
//! Every produced item must be accounted for, exactly:
//!
//! * each send answers once: `Ok`, or `Err` with the item handed back;
//! * each accepted item is delivered, or dropped and handed to the drop hook with a
//!   reason the policy allows, or (only when the consumer cancelled, at most the
//!   channel's in-flight bound) released with the queue;
//! * the hook's counters, the queue monitor's drop and rejection counters and what the
//!   hook actually received agree;
//! * each producer's items arrive in the order it sent them, each at most once; the
//!   stream ends as the ending says (complete, the sender's error, or nothing after a
//!   cancel); and afterwards nothing is alive and the channel released its subscriber.
//!
//! The consumer subscribes before the producers start, so every drop has a hook to go
//! to (drops before subscription are the planned `ChannelBuilder::drop_hook`'s job:
//! `channel_hook.rs`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use weir::bridge::{AfterSend, SenderReadiness};
use weir::prelude::*;
use weir::source::channel::{ChannelPolicy, Sender, TrySendError};
use weir::{DropReason, Error};

use crate::harness::item::{Fate, Item, Ledger};
use crate::harness::recorder::{Plan, Record, Recorder};
use crate::harness::rng::Rng;
use crate::harness::run::{guarded, tokio_runtime};
use crate::harness::tap::{SourceProbe, Tap};
use crate::harness::watch::{assert_no_failures, run_rows, wait_until, PATIENCE};
use crate::stages::OFFSET;

const POLICIES: [ChannelPolicy; 5] = [
    ChannelPolicy::Backpressure,
    ChannelPolicy::Reject,
    ChannelPolicy::DropOldest,
    ChannelPolicy::DropNewest,
    ChannelPolicy::KeepLatest,
];

/// How a producer offers its items.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    TrySend,
    TrySendAll,
    SendBlocking,
    SendAwait,
    SendOrPause,
}

const METHODS: [Method; 5] = [
    Method::TrySend,
    Method::TrySendAll,
    Method::SendBlocking,
    Method::SendAwait,
    Method::SendOrPause,
];

/// How the stream ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    /// Every producer finishes and drops its sender.
    SendersDropped,
    /// A sender calls `close` while the producers run.
    Close,
    /// A sender calls `fail` while the producers run.
    Fail,
    /// The consumer cancels from inside `on_next`.
    ConsumerCancels,
}

const ENDINGS: [Ending; 4] = [
    Ending::SendersDropped,
    Ending::Close,
    Ending::Fail,
    Ending::ConsumerCancels,
];

const CAPACITY: usize = 8;
const PER_PRODUCER: u64 = 1_000;
const FAILURE: &str = "adversarial: failed by a sender";

/// How the consumer asks for items.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Consumer {
    /// One at a time, pausing every 16 items: items queue.
    Slow,
    /// Unbounded demand from `on_subscribe`, no pause: single sends hand their items
    /// straight over whenever nothing is queued.
    Eager,
    /// As `Eager`, on a pool's thread behind `publish_on(pool, ACROSS_WINDOW)`: single
    /// sends go into the channel's lane while the boundary's drain watches it.
    Across,
}

/// The window of the `Across` consumer's boundary.
const ACROSS_WINDOW: u64 = 4;

#[derive(Clone, Copy, Debug)]
struct Case {
    index: u64,
    policy: ChannelPolicy,
    producers: u64,
    ending: Ending,
    consumer: Consumer,
}

/// What the producers saw.
#[derive(Debug, Default)]
struct Sends {
    offered: AtomicU64,
    ok: AtomicU64,
    full: AtomicU64,
    closed: AtomicU64,
}

#[test]
fn every_channel_item_is_accounted_for_under_every_policy_and_ending() {
    let mut cases = Vec::new();
    for policy in POLICIES {
        for producers in 1..=4 {
            for ending in ENDINGS {
                for consumer in [Consumer::Slow, Consumer::Eager, Consumer::Across] {
                    let index = cases.len() as u64;
                    cases.push(Case {
                        index,
                        policy,
                        producers,
                        ending,
                        consumer,
                    });
                }
            }
        }
    }
    let runtime = tokio_runtime("channel");
    let handle = runtime.handle().clone();
    let failures = run_rows(&cases, 2, |&case| {
        let handle = handle.clone();
        guarded(
            &format!("channel case {}", case.index),
            5 * PATIENCE,
            move || check(case, &handle),
        )
        .into_iter()
        .map(|f| {
            format!(
                "{:?}, {} producers ({:?}), {:?}, {:?} consumer: {f}",
                case.policy,
                case.producers,
                methods(case),
                case.ending,
                case.consumer
            )
        })
        .collect()
    });
    assert_no_failures("channel accounting", cases.len(), &failures);
}

fn methods(case: Case) -> Vec<Method> {
    (0..case.producers)
        .map(|p| METHODS[((p + case.index) % METHODS.len() as u64) as usize])
        .collect()
}

fn check(case: Case, runtime: &tokio::runtime::Handle) -> Vec<String> {
    let mut rng = Rng::new(50_000 + case.index);
    let total = case.producers * PER_PRODUCER;
    let ledger = Ledger::new();
    let (tx, rx) = weir::channel::<Item>(CAPACITY, case.policy);
    // Across a boundary, its window is in flight too.
    let bound = rx.in_flight_bound()
        + match case.consumer {
            Consumer::Across => ACROSS_WINDOW,
            _ => 0,
        };
    let monitor = rx.monitor();
    let probe = SourceProbe::new("channel");
    let cancel_at = (case.ending == Ending::ConsumerCancels).then(|| rng.below(total / 2) + 1);
    let plan = match case.consumer {
        Consumer::Slow => Plan {
            initial: 1,
            per_item: 1,
            cancel_at,
            pause: Some((16, Duration::from_micros(50))),
            record_drops: true,
            ..Plan::default()
        },
        Consumer::Eager | Consumer::Across => Plan {
            initial: u64::MAX,
            cancel_at,
            record_drops: true,
            ..Plan::default()
        },
    };
    let (recorder, record) = Recorder::new(plan, ledger.clone(), vec![probe.clone()]);
    match case.consumer {
        Consumer::Across => {
            Tap::new(rx.publish_on(across_pool(), ACROSS_WINDOW), probe.clone()).subscribe(recorder)
        }
        _ => Tap::new(rx, probe.clone()).subscribe(recorder),
    }

    let sends = Arc::new(Sends::default());
    let (done_tx, done_rx) = mpsc::channel();
    for (p, method) in methods(case).into_iter().enumerate() {
        let producer = Producer {
            tx: tx.clone(),
            ledger: ledger.clone(),
            sends: sends.clone(),
            base: p as u64 * OFFSET,
        };
        let done = done_tx.clone();
        match method {
            Method::TrySendAll => {
                std::thread::spawn(move || {
                    producer.run_batches(case.index);
                    let _ = done.send(());
                });
            }
            Method::TrySend | Method::SendBlocking => {
                std::thread::spawn(move || {
                    producer.run_blocking(method);
                    let _ = done.send(());
                });
            }
            Method::SendAwait | Method::SendOrPause => {
                runtime.spawn(async move {
                    producer.run_async(method).await;
                    let _ = done.send(());
                });
            }
        }
    }
    drop(done_tx);
    let ender = match case.ending {
        Ending::Close | Ending::Fail => {
            let threshold = rng.below(total);
            let (sends, ending) = (sends.clone(), case.ending);
            let closer = tx.clone();
            Some(std::thread::spawn(move || {
                wait_until(PATIENCE, || {
                    sends.offered.load(Ordering::SeqCst) >= threshold
                });
                match ending {
                    Ending::Close => closer.close(),
                    _ => {
                        closer.fail(Error::msg(FAILURE));
                    }
                }
            }))
        }
        _ => None,
    };
    drop(tx);

    let mut failures = Vec::new();
    let mut finished = 0;
    while finished < case.producers {
        match done_rx.recv_timeout(PATIENCE) {
            Ok(()) => finished += 1,
            Err(_) => break,
        }
    }
    if finished < case.producers {
        failures.push(format!(
            "{} of {} producers still sending after {PATIENCE:?} ({:?})",
            case.producers - finished,
            case.producers,
            sends
        ));
    }
    if let Some(ender) = ender {
        let _ = ender.join();
    }
    match case.ending {
        Ending::ConsumerCancels => {
            if !wait_until(PATIENCE, || record.dropped()) {
                failures.push(format!(
                    "the consumer was never dropped ({})",
                    record.describe()
                ));
            }
        }
        _ => {
            if !wait_until(PATIENCE, || record.terminated() && record.dropped()) {
                failures.push(format!("the stream did not end ({})", record.describe()));
            }
        }
    }
    if !wait_until(PATIENCE, || ledger.live() == 0 && !probe.holding()) {
        failures.push(format!(
            "after {PATIENCE:?}: {} items still alive; {}",
            ledger.live(),
            probe.describe()
        ));
    }
    failures.extend(accounting(case, &ledger, &sends, &record, bound, &monitor));
    failures.extend(ending(case, &record));
    failures.extend(record.violations());
    record.forget_subscription();
    failures
}

/// One producer's side: a sender and its counters.
struct Producer {
    tx: Sender<Item>,
    ledger: Arc<Ledger>,
    sends: Arc<Sends>,
    base: u64,
}

impl Producer {
    /// Count one send's answer; false when the channel is closed (stop sending).
    fn answered(&self, answer: Result<(), TrySendError<Item>>) -> bool {
        match answer {
            Ok(()) => {
                self.sends.ok.fetch_add(1, Ordering::SeqCst);
                true
            }
            Err(refused) => {
                let closed = refused.is_closed();
                let counter = if closed {
                    &self.sends.closed
                } else {
                    &self.sends.full
                };
                counter.fetch_add(1, Ordering::SeqCst);
                refused.into_inner().mark(Fate::HandedBack);
                !closed
            }
        }
    }

    fn run_blocking(self, method: Method) {
        for i in 0..PER_PRODUCER {
            let item = self.ledger.produce(self.base + i);
            self.sends.offered.fetch_add(1, Ordering::SeqCst);
            let answer = match method {
                Method::TrySend => self.tx.try_send(item),
                _ => self.tx.send_blocking(item),
            };
            let full = matches!(answer, Err(TrySendError::Full(_)));
            if !self.answered(answer) {
                return;
            }
            if full {
                std::thread::yield_now();
            }
        }
    }

    /// `try_send_all` in batches of 1–37: what a refused batch did not offer goes
    /// first into the next one; on `Closed` the unsent items are handed back too.
    fn run_batches(self, seed: u64) {
        let mut rng = Rng::new(seed);
        let mut pending: std::collections::VecDeque<Item> = Default::default();
        let mut next = 0;
        while next < PER_PRODUCER || !pending.is_empty() {
            let fresh = (rng.below(37) + 1).min(PER_PRODUCER - next);
            for i in next..next + fresh {
                pending.push_back(self.ledger.produce(self.base + i));
                self.sends.offered.fetch_add(1, Ordering::SeqCst);
            }
            next += fresh;
            let batch = std::mem::take(&mut pending);
            let size = batch.len() as u64;
            match self.tx.try_send_all(batch) {
                Ok(sent) => {
                    assert_eq!(sent as u64, size, "Ok means every item went in");
                    self.sends.ok.fetch_add(size, Ordering::SeqCst);
                }
                Err(refused) => {
                    self.sends
                        .ok
                        .fetch_add(refused.sent as u64, Ordering::SeqCst);
                    let closed = refused.error.is_closed();
                    let unsent: Vec<Item> = refused.unsent.collect();
                    assert_eq!(
                        refused.sent as u64 + 1 + unsent.len() as u64,
                        size,
                        "sent, refused and unsent are the batch"
                    );
                    self.answered(Err(refused.error));
                    if closed {
                        for mut item in unsent {
                            self.sends.closed.fetch_add(1, Ordering::SeqCst);
                            item.mark(Fate::HandedBack);
                        }
                        // What was never produced is not counted.
                        return;
                    }
                    pending.extend(unsent);
                    std::thread::yield_now();
                }
            }
        }
    }

    async fn run_async(self, method: Method) {
        for i in 0..PER_PRODUCER {
            let item = self.ledger.produce(self.base + i);
            self.sends.offered.fetch_add(1, Ordering::SeqCst);
            let answer = match method {
                Method::SendAwait => self.tx.send(item).await,
                _ => match self.tx.send_or_pause(item).await {
                    Ok(AfterSend::Closed) => {
                        // The item went in; the channel closed while we waited to resume.
                        self.sends.ok.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                    Ok(_) => Ok(()),
                    Err(refused) => Err(refused),
                },
            };
            if !self.answered(answer) {
                return;
            }
            tokio::task::yield_now().await;
        }
    }
}

fn accounting(
    case: Case,
    ledger: &Ledger,
    sends: &Sends,
    record: &Record,
    bound: u64,
    monitor: &weir::metrics::QueueMonitor,
) -> Vec<String> {
    let mut failures = Vec::new();
    let produced = ledger.produced();
    let ok = sends.ok.load(Ordering::SeqCst);
    let full = sends.full.load(Ordering::SeqCst);
    let closed = sends.closed.load(Ordering::SeqCst);
    let delivered = ledger.ended(Fate::Delivered);
    let hooked = ledger.ended(Fate::Hooked);
    let released = ledger.ended(Fate::Released);
    let handed_back = ledger.ended(Fate::HandedBack);
    let books = format!(
        "produced {produced}: ok {ok}, full {full}, closed {closed}; delivered {delivered}, \
         dropped to the hook {hooked}, released {released}, handed back {handed_back}"
    );
    if produced != ok + full + closed {
        failures.push(format!("a send never answered: {books}"));
    }
    if handed_back != full + closed {
        failures.push(format!(
            "items handed back do not match the Err answers: {books}"
        ));
    }
    if ok != delivered + hooked + released {
        failures.push(format!("accepted items unaccounted for: {books}"));
    }
    match case.ending {
        Ending::ConsumerCancels if released > bound => failures.push(format!(
            "{released} items released at the cancel, more than the in-flight bound {bound}: {books}"
        )),
        Ending::ConsumerCancels => {}
        _ if released > 0 => failures.push(format!(
            "{released} accepted items were neither delivered nor reported (no cancel): {books}"
        )),
        _ => {}
    }
    let may_be_full = case.policy == ChannelPolicy::Reject
        || (case.policy == ChannelPolicy::Backpressure
            && methods(case)
                .iter()
                .any(|m| matches!(m, Method::TrySend | Method::TrySendAll)));
    if full > 0 && !may_be_full {
        failures.push(format!(
            "{full} sends answered Full under {:?} with {:?}",
            case.policy,
            methods(case)
        ));
    }
    // Drops: what the hook received, its counters and the monitor's, by reason.
    let mut received: HashMap<DropReason, u64> = HashMap::new();
    for (reason, _) in record.hooked() {
        *received.entry(reason).or_default() += 1;
    }
    let allowed = match case.policy {
        ChannelPolicy::DropOldest => Some(DropReason::OverflowOldest),
        ChannelPolicy::DropNewest => Some(DropReason::OverflowNewest),
        ChannelPolicy::KeepLatest => Some(DropReason::ReplacedByLatest),
        _ => None,
    };
    let stats = monitor.snapshot();
    for reason in DropReason::ALL {
        let got = received.get(&reason).copied().unwrap_or(0);
        let counted = record.drops().count(reason);
        let monitored = stats.dropped(reason);
        if got != counted || counted != monitored {
            failures.push(format!(
                "{reason:?}: the hook received {got} items, its counters say {counted}, the \
                 monitor {monitored}"
            ));
        }
        if got > 0 && Some(reason) != allowed {
            failures.push(format!(
                "{got} items dropped as {reason:?} under {:?}",
                case.policy
            ));
        }
    }
    if stats.rejected != full {
        failures.push(format!(
            "the monitor counts {} rejections, the senders got {full} Full answers",
            stats.rejected
        ));
    }
    // Order and uniqueness per producer.
    let mut last: HashMap<u64, u64> = HashMap::new();
    for value in record.values() {
        let producer = value / OFFSET;
        if let Some(previous) = last.insert(producer, value) {
            if previous >= value {
                failures.push(format!(
                    "producer {producer}'s items out of order or twice: {previous} then {value}"
                ));
                break;
            }
        }
    }
    failures
}

fn ending(case: Case, record: &Record) -> Vec<String> {
    let completes = u64::from(record.completed());
    let errors = record.errors();
    let mut failures = Vec::new();
    match case.ending {
        Ending::SendersDropped | Ending::Close => {
            if completes != 1 || !errors.is_empty() {
                failures.push(format!("expected one on_complete: {}", record.describe()));
            }
        }
        Ending::Fail => {
            let failed_as_told = errors.len() == 1 && errors[0].message() == FAILURE;
            if completes != 0 || !failed_as_told {
                failures.push(format!(
                    "expected one on_error({FAILURE}): {}",
                    record.describe()
                ));
            }
        }
        Ending::ConsumerCancels => {
            if record.terminals() > 1 {
                failures.push(format!(
                    "more than one terminal signal: {}",
                    record.describe()
                ));
            }
        }
    }
    failures
}

/// The `Across` consumers' pool: one thread, shared by the cases.
fn across_pool() -> weir::runtime::ThreadPool {
    static POOL: std::sync::OnceLock<weir::runtime::ThreadPool> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        weir::runtime::ThreadPool::builder()
            .name("across")
            .threads(1)
            .build()
    })
    .clone()
}
