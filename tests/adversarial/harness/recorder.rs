//! [`Recorder`]: the subscriber at the end of every table pipeline. It follows a
//! [`Plan`] (what to request when, at which item to panic), checks the protocol as
//! signals arrive (nothing beyond what was requested, nothing after a terminal signal,
//! one `on_subscribe`) and records what it got in a shared [`Record`] the test reads.
//!
//! Requests made through [`Record::request`] are counted *before* they are made, so
//! "items received ≤ items requested" can be checked at every `on_next` without any
//! race: an item can only exist once its request was counted.
//!
//! The recorder always answers a terminal signal the way a careless subscriber would:
//! `request(1)`, `request(u64::MAX)` and `cancel()` from inside `on_complete` /
//! `on_error` (rules 3.6, 3.7: no-ops, and nothing may follow).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use weir::metrics::{DropHook, Drops};
use weir::{DropReason, Error, ErrorKind, Subscriber, Subscription};

use super::item::{Fate, Item, Ledger};
use super::tap::SourceProbe;
use super::watch::DELIBERATE;

/// What the recorder does by itself.
#[derive(Clone, Copy, Debug, Default)]
pub struct Plan {
    /// Requested from inside `on_subscribe` (0: nothing).
    pub initial: u64,
    /// Requested from inside `on_next`, after each item (0: nothing).
    pub per_item: u64,
    /// Panic in `on_next` at this item (1-based).
    pub panic_at: Option<u64>,
    /// Cancel from inside `on_next` at this item (1-based).
    pub cancel_at: Option<u64>,
    /// Inside `on_next_batch`, after this item (1-based), leak the rest of the batch's
    /// iterator with `mem::forget` (safe code may); pair it with `cancel_at`.
    pub forget_at: Option<u64>,
    /// A slow consumer: sleep this long after every `n`th item.
    pub pause: Option<(u64, std::time::Duration)>,
    /// Record the value of every item a drop hook receives (otherwise only count).
    pub record_drops: bool,
}

/// The state at the moment the recorder panicked.
#[derive(Clone, Debug)]
pub struct PanicPoint {
    /// Items the sources had produced.
    pub produced: u64,
    /// For each source probe: had it terminated?
    pub terminated: Vec<bool>,
}

/// Everything the recorder saw, shared with the test.
#[derive(Debug)]
pub struct Record {
    plan: Plan,
    ledger: Arc<Ledger>,
    probes: Vec<Arc<SourceProbe>>,
    subscription: Mutex<Option<Subscription>>,
    subscribes: AtomicU64,
    requested: AtomicU64,
    items: AtomicU64,
    values: Mutex<Vec<u64>>,
    completes: AtomicU64,
    errors: Mutex<Vec<Error>>,
    violations: Mutex<Vec<String>>,
    dropped: AtomicBool,
    panic_point: Mutex<Option<PanicPoint>>,
    drops: Drops,
    hooked: Hooked,
    hooked_count: Arc<AtomicU64>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What a drop hook received: each item's reason and values.
type Hooked = Arc<Mutex<Vec<(DropReason, Vec<u64>)>>>;

/// The most protocol violations kept per run (the first ones say it all).
const KEEP: usize = 6;

impl Record {
    fn violation(&self, what: String) {
        let mut violations = lock(&self.violations);
        if violations.len() < KEEP {
            violations.push(what);
        }
    }

    /// Count `n` as requested, then request it (if subscribed).
    pub fn request(&self, n: u64) {
        let _ = self
            .requested
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |r| {
                Some(r.saturating_add(n))
            });
        let subscription = lock(&self.subscription).clone();
        if let Some(subscription) = subscription {
            subscription.request(n);
        }
    }

    /// Cancel (if subscribed).
    pub fn cancel(&self) {
        let subscription = lock(&self.subscription).clone();
        if let Some(subscription) = subscription {
            subscription.cancel();
        }
    }

    /// Let go of the subscription handle the record keeps.
    pub fn forget_subscription(&self) {
        lock(&self.subscription).take();
    }

    /// `on_subscribe` arrived.
    pub fn subscribed(&self) -> bool {
        self.subscribes.load(Ordering::SeqCst) > 0
    }

    /// Total requested so far (saturating).
    pub fn requested(&self) -> u64 {
        self.requested.load(Ordering::SeqCst)
    }

    /// `on_next` calls so far.
    pub fn items(&self) -> u64 {
        self.items.load(Ordering::SeqCst)
    }

    /// The values received, in order (a batch item contributes all of its values).
    pub fn values(&self) -> Vec<u64> {
        lock(&self.values).clone()
    }

    /// `on_complete` plus `on_error` signals.
    pub fn terminals(&self) -> u64 {
        self.completes.load(Ordering::SeqCst) + lock(&self.errors).len() as u64
    }

    /// A terminal signal arrived.
    pub fn terminated(&self) -> bool {
        self.terminals() > 0
    }

    /// `on_complete` arrived.
    pub fn completed(&self) -> bool {
        self.completes.load(Ordering::SeqCst) > 0
    }

    /// The errors received.
    pub fn errors(&self) -> Vec<Error> {
        lock(&self.errors).clone()
    }

    /// The first error's kind, if any.
    pub fn error_kind(&self) -> Option<ErrorKind> {
        lock(&self.errors).first().map(Error::kind)
    }

    /// Protocol violations seen while the signals arrived.
    pub fn violations(&self) -> Vec<String> {
        lock(&self.violations).clone()
    }

    /// The pipeline dropped the recorder.
    pub fn dropped(&self) -> bool {
        self.dropped.load(Ordering::SeqCst)
    }

    /// Where things stood when the recorder panicked (`None`: it did not).
    pub fn panic_point(&self) -> Option<PanicPoint> {
        lock(&self.panic_point).clone()
    }

    /// The drop hook's counters.
    pub fn drops(&self) -> &Drops {
        &self.drops
    }

    /// Items the drop hook received (counted even when their values are not kept).
    pub fn hooked_count(&self) -> u64 {
        self.hooked_count.load(Ordering::SeqCst)
    }

    /// The items the drop hook received, with their reasons (if the plan records them).
    pub fn hooked(&self) -> Vec<(DropReason, Vec<u64>)> {
        lock(&self.hooked).clone()
    }

    /// A one-line summary for failure messages.
    pub fn describe(&self) -> String {
        format!(
            "subscriber: requested {}, items {}, values {}, completes {}, errors {:?}, \
             dropped {}",
            self.requested(),
            self.items(),
            lock(&self.values).len(),
            self.completes.load(Ordering::SeqCst),
            lock(&self.errors)
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>(),
            self.dropped()
        )
    }
}

/// The subscriber; see the module docs.
#[derive(Debug)]
pub struct Recorder {
    record: Arc<Record>,
}

impl Recorder {
    /// A recorder following `plan`, for a pipeline whose items are counted by
    /// `ledger` and whose sources report to `probes`.
    pub fn new(
        plan: Plan,
        ledger: Arc<Ledger>,
        probes: Vec<Arc<SourceProbe>>,
    ) -> (Self, Arc<Record>) {
        let record = Arc::new(Record {
            plan,
            ledger,
            probes,
            subscription: Mutex::new(None),
            subscribes: AtomicU64::new(0),
            requested: AtomicU64::new(0),
            items: AtomicU64::new(0),
            values: Mutex::new(Vec::new()),
            completes: AtomicU64::new(0),
            errors: Mutex::new(Vec::new()),
            violations: Mutex::new(Vec::new()),
            dropped: AtomicBool::new(false),
            panic_point: Mutex::new(None),
            drops: Drops::new(),
            hooked: Arc::new(Mutex::new(Vec::new())),
            hooked_count: Arc::new(AtomicU64::new(0)),
        });
        (
            Recorder {
                record: record.clone(),
            },
            record,
        )
    }

    fn after_terminal(&self) {
        // A careless subscriber: rules 3.6 and 3.7 make all of these no-ops.
        let subscription = lock(&self.record.subscription).clone();
        if let Some(subscription) = subscription {
            subscription.request(1);
            subscription.request(u64::MAX);
            subscription.cancel();
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.record.dropped.store(true, Ordering::SeqCst);
    }
}

impl Subscriber<Item> for Recorder {
    fn on_subscribe(&mut self, subscription: Subscription) {
        let record = &self.record;
        if record.subscribes.fetch_add(1, Ordering::SeqCst) > 0 {
            record.violation("a second on_subscribe (rule 1.9/2.5)".to_owned());
            subscription.cancel();
            return;
        }
        *lock(&record.subscription) = Some(subscription);
        if record.plan.initial > 0 {
            record.request(record.plan.initial);
        }
    }

    fn on_next(&mut self, mut item: Item) {
        let record = &self.record;
        if record.terminated() {
            record.violation(format!(
                "on_next (value {}) after a terminal signal",
                item.value
            ));
        }
        let n = record.items.fetch_add(1, Ordering::SeqCst) + 1;
        let requested = record.requested();
        if n > requested {
            record.violation(format!(
                "item #{n} (value {}) delivered beyond demand: {requested} requested (rule 1.1)",
                item.value
            ));
        }
        item.mark(Fate::Delivered);
        lock(&record.values).extend(item.values());
        drop(item);
        if record.plan.panic_at == Some(n) {
            let point = PanicPoint {
                produced: record.ledger.produced(),
                terminated: record.probes.iter().map(|p| p.terminated()).collect(),
            };
            *lock(&record.panic_point) = Some(point);
            panic!("{DELIBERATE} panic in on_next at item {n}");
        }
        if record.plan.cancel_at == Some(n) {
            record.cancel();
        }
        if let Some((every, pause)) = record.plan.pause {
            if n % every == 0 {
                std::thread::sleep(pause);
            }
        }
        if record.plan.per_item > 0 {
            record.request(record.plan.per_item);
        }
    }

    fn on_next_batch<I: Iterator<Item = Item>>(&mut self, items: I) -> u64 {
        let mut items = items;
        while let Some(item) = items.next() {
            self.on_next(item);
            if self.record.plan.forget_at == Some(self.record.items()) {
                std::mem::forget(items);
                return 0;
            }
        }
        0
    }

    fn on_error(&mut self, error: Error) {
        if self.record.terminated() {
            self.record
                .violation(format!("a second terminal signal: on_error({error})"));
        }
        lock(&self.record.errors).push(error);
        self.after_terminal();
    }

    fn on_complete(&mut self) {
        if self.record.terminated() {
            self.record
                .violation("a second terminal signal: on_complete".to_owned());
        }
        self.record.completes.fetch_add(1, Ordering::SeqCst);
        self.after_terminal();
    }

    fn drop_hook(&self) -> Option<DropHook> {
        let hooked = self.record.hooked.clone();
        let count = self.record.hooked_count.clone();
        let keep = self.record.plan.record_drops;
        Some(
            DropHook::new(self.record.drops.clone()).inspect(move |dropped| {
                count.fetch_add(1, Ordering::SeqCst);
                let reason = dropped.reason();
                let values = match dropped.take::<Item>() {
                    Some(mut item) => {
                        item.mark(Fate::Hooked);
                        item.values().collect()
                    }
                    None => Vec::new(),
                };
                if keep {
                    lock(&hooked).push((reason, values));
                }
            }),
        )
    }
}
