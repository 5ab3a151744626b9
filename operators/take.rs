//! `take(n)`: implementation notes. The user contract is on
//! [`PublisherExt::take`](crate::PublisherExt::take).
//!
//! Downstream holds a [`Cap`]: an `allowance`, initially `n`, of items that may still
//! be requested upstream. Each `request(m)` takes `min(m, allowance)` out of it with
//! one `fetch_update` and forwards that amount (nothing when it is 0), so upstream is
//! asked for at most `n` in total, even under unbounded demand. Downstream's batch
//! credit goes through the same grant. The CAS runs once per request or batch, never
//! per item. `request(0)` is forwarded for upstream to answer with the rule 3.9 error.
//!
//! Delivery: `remaining` counts the items still to pass. When the batch's upper size
//! hint fits in `remaining` (upstream honours the cap, the usual case) the batch goes
//! downstream as is, counted by an `inspect`; otherwise it is cut with `take`, whose
//! `fold` does not fuse as well. When `remaining` reaches 0 the stage cancels
//! upstream and completes downstream; whatever upstream still delivers is ignored
//! (rule 2.8), unless downstream cancelled (then it hears nothing more, rule 3.12).
//! `take(0)` cancels upstream inside `on_subscribe` and completes downstream at once
//! (unless it cancelled in `on_subscribe`), behind a cap of 0 in front of nothing.
//!
//! State: [`Upstream`] (`Idle` → `Active` → `Done`) plus `remaining`.

use std::sync::Arc;

use crate::drain::Upstream;
use crate::loom::{AtomicBool, AtomicU64, Ordering};
use crate::metrics::DropHook;
use crate::{Error, Publisher, RawSubscription, Subscriber, Subscription};

/// Publisher for the [`take`](crate::PublisherExt::take) method.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct Take<P> {
    source: P,
    n: u64,
}

impl<P> Take<P> {
    pub(crate) fn new(source: P, n: u64) -> Self {
        Take { source, n }
    }
}

impl<P: Publisher> Publisher for Take<P> {
    type Item = P::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<P::Item> + Send + 'static,
    {
        self.source.subscribe(TakeSubscriber {
            downstream: subscriber,
            remaining: self.n,
            cap: None,
            upstream: Upstream::Idle,
        })
    }

    fn in_flight_bound(&self) -> u64 {
        self.source.in_flight_bound()
    }
}

/// The subscription downstream holds: caps requests at what `take` may still pass.
struct Cap {
    /// How many items may still be requested upstream.
    allowance: AtomicU64,
    /// The upstream subscription.
    upstream: Subscription,
    /// Set when downstream cancels: `take` then does not complete it when the
    /// limit is reached (rule 3.12: a cancelled subscriber hears nothing more).
    cancelled: AtomicBool,
}

impl Cap {
    fn new(allowance: u64, upstream: Subscription) -> Arc<Self> {
        Arc::new(Cap {
            allowance: AtomicU64::new(allowance),
            upstream,
            cancelled: AtomicBool::new(false),
        })
    }

    /// Take up to `n` from the allowance; returns what may go upstream.
    fn grant(&self, n: u64) -> u64 {
        // Relaxed: the allowance only partitions a number; the request itself is
        // published by the upstream's demand counter.
        let previous = self
            .allowance
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                Some(left - left.min(n))
            })
            .unwrap_or_else(|left| left);
        previous.min(n)
    }
}

impl RawSubscription for Cap {
    fn request(&self, n: u64) {
        if n == 0 {
            // The source answers with the rule 3.9 error.
            self.upstream.request(0);
            return;
        }
        let grant = self.grant(n);
        if grant > 0 {
            self.upstream.request(grant);
        }
    }

    fn cancel(&self) {
        // Relaxed: read by `take` on the thread that signals; a cancel from inside
        // a signal is that thread's own write, one from elsewhere races the
        // completion as any cancel does (rule 3.12's "eventually").
        self.cancelled.store(true, Ordering::Relaxed);
        self.upstream.cancel();
    }
}

struct TakeSubscriber<S> {
    /// The next stage.
    downstream: S,
    /// Items still to pass.
    remaining: u64,
    /// The cap downstream's requests go through (and its batch credit).
    cap: Option<Arc<Cap>>,
    /// Life-cycle state; upstream is cancelled once `remaining` reaches 0.
    upstream: Upstream,
}

impl<S> TakeSubscriber<S> {
    /// Account for `passed` items; complete when the limit is reached.
    fn passed<T>(&mut self, passed: u64)
    where
        S: Subscriber<T>,
    {
        self.remaining -= passed;
        if self.remaining == 0 && self.upstream.cancel() && !self.downstream_cancelled() {
            self.downstream.on_complete();
        }
    }

    /// True once downstream cancelled its subscription.
    fn downstream_cancelled(&self) -> bool {
        // Relaxed: see `Cap::cancel`.
        self.cap
            .as_ref()
            .is_some_and(|cap| cap.cancelled.load(Ordering::Relaxed))
    }
}

impl<T, S: Subscriber<T>> Subscriber<T> for TakeSubscriber<S> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        if !self.upstream.accept(&subscription) {
            return;
        }
        if self.remaining == 0 {
            self.upstream.cancel();
            // Downstream gets a cap of 0 in front of nothing (upstream is cancelled
            // already), which sees a cancel in `on_subscribe`.
            let cap = Cap::new(0, Subscription::noop());
            self.cap = Some(cap.clone());
            self.downstream.on_subscribe(Subscription::new(cap));
            if !self.downstream_cancelled() {
                self.downstream.on_complete();
            }
            return;
        }
        let cap = Cap::new(self.remaining, subscription);
        self.cap = Some(cap.clone());
        self.downstream.on_subscribe(Subscription::new(cap));
    }

    #[inline]
    fn on_next(&mut self, item: T) {
        if self.upstream.is_active() {
            self.downstream.on_next(item);
            self.passed(1);
        }
    }

    #[inline]
    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        if !self.upstream.is_active() {
            return 0;
        }
        let mut passed = 0u64;
        let remaining = self.remaining;
        let within = items
            .size_hint()
            .1
            .is_some_and(|upper| upper as u64 <= remaining);
        let credit = if within {
            // The common case: upstream honours the cap, so no `Take` adaptor (whose
            // `fold` cannot fuse) is needed.
            self.downstream
                .on_next_batch(items.inspect(|_| passed += 1))
        } else {
            let limit = usize::try_from(remaining).unwrap_or(usize::MAX);
            self.downstream
                .on_next_batch(items.take(limit).inspect(|_| passed += 1))
        };
        self.passed(passed);
        // Downstream's credit goes through the cap, like its requests.
        match (&self.cap, self.upstream.is_active(), credit) {
            (Some(cap), true, 1..) => cap.grant(credit),
            _ => 0,
        }
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
