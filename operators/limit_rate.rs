//! `limit_rate`: implementation notes. The user contract is on
//! [`PublisherExt::limit_rate`](crate::PublisherExt::limit_rate).
//!
//! The batching arithmetic is [`RateLimit`] (`wanted`: downstream demand not
//! yet forwarded; `outstanding`: forwarded and not yet delivered, never above
//! `high`). Downstream holds a [`Limiter`], which owns the `RateLimit` behind a small
//! mutex shared with the delivery path:
//!
//! * downstream's `request(n)` (any thread): `on_request(n)`, and whatever batch it
//!   frees goes upstream with `request`;
//! * upstream's delivery: `on_delivered(count)` plus `on_request(credit)` for the
//!   batch credit downstream returned, under one lock; the batch this frees is
//!   returned upstream as the stage's own batch credit (item by item: `request`).
//!
//! The lock is taken once per `request` and once per delivered batch, never across a
//! call into another stage. Items pass through untouched; nothing is held.
//! `request(0)` is forwarded for upstream to answer with the rule 3.9 error.
//!
//! State: [`Upstream`] (`Idle` → `Active` → `Done`).

use std::sync::Arc;

use crate::demand::RateLimit;
use crate::drain::Upstream;
use crate::loom::{Mutex, MutexGuardOf};
use crate::metrics::DropHook;
use crate::{Error, Publisher, RawSubscription, Subscriber, Subscription};

/// Publisher for the [`limit_rate`](crate::PublisherExt::limit_rate) method.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct LimitRate<P> {
    source: P,
    high: u64,
    low: u64,
}

impl<P> LimitRate<P> {
    pub(crate) fn new(source: P, high: u64, low: u64) -> Self {
        // Validates `high` (and documents the `low` rules) once, at construction.
        let _ = RateLimit::new(high, low);
        LimitRate { source, high, low }
    }
}

impl<P: Publisher> Publisher for LimitRate<P> {
    type Item = P::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<P::Item> + Send + 'static,
    {
        self.source.subscribe(LimitSubscriber {
            downstream: subscriber,
            rate: RateLimit::new(self.high, self.low),
            limiter: None,
            upstream: Upstream::Idle,
        })
    }

    fn in_flight_bound(&self) -> u64 {
        self.source.in_flight_bound()
    }
}

/// Downstream's subscription and the shared request batching.
struct Limiter {
    /// The batching state.
    rate: Mutex<RateLimit>,
    /// The upstream subscription.
    upstream: Subscription,
}

impl Limiter {
    fn rate(&self) -> MutexGuardOf<'_, RateLimit> {
        self.rate
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl RawSubscription for Limiter {
    fn request(&self, n: u64) {
        if n == 0 {
            // The source answers with the rule 3.9 error.
            self.upstream.request(0);
            return;
        }
        let batch = self.rate().on_request(n);
        if batch > 0 {
            self.upstream.request(batch);
        }
    }

    fn cancel(&self) {
        self.upstream.cancel();
    }
}

struct LimitSubscriber<S> {
    /// The next stage.
    downstream: S,
    /// The batching state until `on_subscribe` moves it into the limiter.
    rate: RateLimit,
    /// Shared with downstream's subscription, once subscribed.
    limiter: Option<Arc<Limiter>>,
    /// Life-cycle state.
    upstream: Upstream,
}

impl<S> LimitSubscriber<S> {
    /// `delivered` items went out and downstream returned `credit`: what to request.
    fn settle(&self, delivered: u64, credit: u64) -> u64 {
        let Some(limiter) = &self.limiter else {
            return 0;
        };
        let mut rate = limiter.rate();
        let mut batch = rate.on_delivered(delivered);
        if credit > 0 {
            batch += rate.on_request(credit);
        }
        batch
    }
}

impl<T, S: Subscriber<T>> Subscriber<T> for LimitSubscriber<S> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        if !self.upstream.accept(&subscription) {
            return;
        }
        let limiter = Arc::new(Limiter {
            rate: Mutex::new(self.rate.clone()),
            upstream: subscription,
        });
        self.limiter = Some(limiter.clone());
        self.downstream.on_subscribe(Subscription::new(limiter));
    }

    fn on_next(&mut self, item: T) {
        if !self.upstream.is_active() {
            return;
        }
        self.downstream.on_next(item);
        let batch = self.settle(1, 0);
        if let (true, Some(upstream)) = (batch > 0, self.upstream.get()) {
            upstream.request(batch);
        }
    }

    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        if !self.upstream.is_active() {
            return 0;
        }
        let mut delivered = 0u64;
        let credit = self
            .downstream
            .on_next_batch(items.inspect(|_| delivered += 1));
        // What the delivery frees goes upstream as our own batch credit.
        self.settle(delivered, credit)
    }

    fn drop_hook(&self) -> Option<DropHook> {
        self.downstream.drop_hook()
    }

    fn stops_batches_itself(&self) -> bool {
        self.downstream.stops_batches_itself()
    }

    fn on_error(&mut self, error: Error) {
        self.upstream.forward_error(&mut self.downstream, error);
    }

    fn on_complete(&mut self) {
        self.upstream.forward_complete(&mut self.downstream);
    }
}
