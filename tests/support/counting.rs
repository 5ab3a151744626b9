//! A counting adaptor: sits between a publisher and its subscriber and records what
//! crosses the boundary, so tests can assert on what upstream was asked for.
//!
//! * every `request` call and the total requested (saturating), with a log of amounts;
//! * every item delivered, and the number of deliveries (`on_next_batch` calls);
//! * the largest outstanding demand (`requested - delivered`) seen just after a request;
//! * cancels and terminal signals;
//! * any item delivered beyond the total requested (a rule 1.1 breach upstream).
//!
//! Requests are forwarded unchanged (through [`Subscription::request`], so a
//! re-entrant request still takes the source's own re-entrant path). Items are
//! forwarded in the batches they came in, or one `on_next` at a time with
//! [`Delivery::OneByOne`], which exercises the item-by-item paths downstream.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use weir::demand::UNBOUNDED;
use weir::source::{Generate, Step};
use weir::{Error, Publisher, RawSubscription, Subscriber, Subscription};

/// How the adaptor hands items downstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Forward each upstream batch as one `on_next_batch`.
    Batches,
    /// Split every batch into single `on_next` calls.
    OneByOne,
}

/// What crossed the boundary. Shared between the adaptor and the test.
#[derive(Debug, Default)]
pub struct Stats {
    request_calls: AtomicU64,
    requested: AtomicU64,
    request_log: Mutex<Vec<u64>>,
    delivered: AtomicU64,
    deliveries: AtomicU64,
    max_outstanding: AtomicU64,
    over_delivered: AtomicBool,
    cancels: AtomicU64,
    completes: AtomicU64,
    errors: AtomicU64,
}

impl Stats {
    /// Number of `request` calls made on the upstream subscription (including
    /// `request(0)`).
    pub fn request_calls(&self) -> u64 {
        self.request_calls.load(Ordering::SeqCst)
    }

    /// Total requested upstream, saturating at `u64::MAX`.
    pub fn requested(&self) -> u64 {
        self.requested.load(Ordering::SeqCst)
    }

    /// Every requested amount, in order.
    pub fn request_log(&self) -> Vec<u64> {
        self.request_log.lock().unwrap().clone()
    }

    /// Items delivered by upstream.
    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::SeqCst)
    }

    /// Number of non-empty deliveries (`on_next_batch` with at least one item, or
    /// `on_next`) made by upstream.
    pub fn deliveries(&self) -> u64 {
        self.deliveries.load(Ordering::SeqCst)
    }

    /// The largest bounded outstanding demand (`requested - delivered`) seen right
    /// after a request.
    pub fn max_outstanding(&self) -> u64 {
        self.max_outstanding.load(Ordering::SeqCst)
    }

    /// True if upstream ever delivered more items than were requested in total.
    pub fn over_delivered(&self) -> bool {
        self.over_delivered.load(Ordering::SeqCst)
    }

    /// Number of `cancel` calls made on the upstream subscription.
    pub fn cancels(&self) -> u64 {
        self.cancels.load(Ordering::SeqCst)
    }

    /// Number of `on_complete` signals from upstream.
    pub fn completes(&self) -> u64 {
        self.completes.load(Ordering::SeqCst)
    }

    /// Number of `on_error` signals from upstream.
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::SeqCst)
    }

    fn record_request(&self, n: u64) {
        self.request_calls.fetch_add(1, Ordering::SeqCst);
        self.request_log.lock().unwrap().push(n);
        let previous = self
            .requested
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |r| {
                Some(r.saturating_add(n))
            })
            .unwrap_or_else(|r| r);
        let total = previous.saturating_add(n);
        if total != UNBOUNDED {
            let outstanding = total.saturating_sub(self.delivered());
            self.max_outstanding
                .fetch_max(outstanding, Ordering::SeqCst);
        }
    }

    fn record_item(&self) {
        let delivered = self.delivered.fetch_add(1, Ordering::SeqCst) + 1;
        if delivered > self.requested() {
            self.over_delivered.store(true, Ordering::SeqCst);
        }
    }
}

/// Wrap `source` in a counting adaptor that forwards batches unchanged.
pub fn counted<P: Publisher>(source: P) -> (Counted<P>, Arc<Stats>) {
    counted_with(source, Delivery::Batches)
}

/// Wrap `source` in a counting adaptor with the given delivery mode.
pub fn counted_with<P: Publisher>(source: P, delivery: Delivery) -> (Counted<P>, Arc<Stats>) {
    let stats = Arc::new(Stats::default());
    (
        Counted {
            source,
            stats: stats.clone(),
            delivery,
        },
        stats,
    )
}

/// The counting publisher adaptor built by [`counted`].
#[derive(Clone, Debug)]
pub struct Counted<P> {
    source: P,
    stats: Arc<Stats>,
    delivery: Delivery,
}

impl<P: Publisher> Publisher for Counted<P> {
    type Item = P::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<P::Item> + Send + 'static,
    {
        self.source.subscribe(CountingSubscriber {
            downstream: subscriber,
            stats: self.stats,
            delivery: self.delivery,
        })
    }
}

struct CountingSubscriber<S> {
    downstream: S,
    stats: Arc<Stats>,
    delivery: Delivery,
}

struct CountingSubscription {
    upstream: Subscription,
    stats: Arc<Stats>,
}

impl RawSubscription for CountingSubscription {
    fn request(&self, n: u64) {
        self.stats.record_request(n);
        self.upstream.request(n);
    }

    fn cancel(&self) {
        self.stats.cancels.fetch_add(1, Ordering::SeqCst);
        self.upstream.cancel();
    }
}

impl<T, S: Subscriber<T>> Subscriber<T> for CountingSubscriber<S> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        self.downstream
            .on_subscribe(Subscription::new(Arc::new(CountingSubscription {
                upstream: subscription,
                stats: self.stats.clone(),
            })));
    }

    fn on_next(&mut self, item: T) {
        self.stats.deliveries.fetch_add(1, Ordering::SeqCst);
        self.stats.record_item();
        self.downstream.on_next(item);
    }

    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        let stats = self.stats.clone();
        let mut first = true;
        let counted = items.inspect(move |_| {
            if first {
                stats.deliveries.fetch_add(1, Ordering::SeqCst);
                first = false;
            }
            stats.record_item();
        });
        match self.delivery {
            Delivery::Batches => {
                // Batch credit is a request made at the end of the batch: count it
                // like one, and pass it on.
                let credit = self.downstream.on_next_batch(counted);
                if credit > 0 {
                    self.stats.record_request(credit);
                }
                credit
            }
            Delivery::OneByOne => {
                for item in counted {
                    self.downstream.on_next(item);
                }
                0
            }
        }
    }

    fn on_error(&mut self, error: Error) {
        self.stats.errors.fetch_add(1, Ordering::SeqCst);
        self.downstream.on_error(error);
    }

    fn on_complete(&mut self) {
        self.stats.completes.fetch_add(1, Ordering::SeqCst);
        self.downstream.on_complete();
    }
}

/// A `generate` source of `0, 1, 2, …` that completes after `len` items
/// (`u64::MAX`: practically endless) and counts every call of its closure.
///
/// Clones share the call counter but each starts again from 0.
pub fn counting_generator(len: u64) -> (CountingGenerator, Arc<AtomicU64>) {
    let calls = Arc::new(AtomicU64::new(0));
    let state = Counter {
        next: 0,
        len,
        calls: calls.clone(),
    };
    (weir::generate(state, Counter::step), calls)
}

/// The source built by [`counting_generator`], a `generate` with a named state and
/// step function so that a test harness can take a closure over
/// `Counted<CountingGenerator>`.
pub type CountingGenerator = Generate<Counter, fn(&mut Counter) -> Step<u64>>;

/// The state of a [`CountingGenerator`].
#[derive(Clone, Debug)]
pub struct Counter {
    next: u64,
    len: u64,
    calls: Arc<AtomicU64>,
}

impl Counter {
    fn step(&mut self) -> Step<u64> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.next == self.len {
            return Step::Complete;
        }
        self.next += 1;
        Step::Next(self.next - 1)
    }
}
