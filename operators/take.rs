//! `take`: the first `n` items, then complete and cancel upstream.
//!
//! Demand contract: Limiting. Downstream requests go upstream capped by what is
//! still allowed, so upstream is never asked for more than `n` in total, even under
//! unbounded demand (Reactor's `limitRequest` semantics). The cap is a CAS on one
//! counter per `request`, never per item.
//!
//! States: `Idle` → `Active { upstream, remaining }` → `Done`. Reaching `remaining ==
//! 0` cancels upstream and completes downstream; items that were already in flight
//! are ignored (rule 2.8).

use std::sync::Arc;

use crate::loom::{AtomicU64, Ordering};
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
            n: self.n,
            state: State::Idle,
        })
    }
}

/// The subscription downstream holds: caps requests at what `take` may still pass.
struct Cap {
    /// How many items may still be requested upstream.
    allowance: AtomicU64,
    /// The upstream subscription.
    upstream: Subscription,
}

impl RawSubscription for Cap {
    fn request(&self, n: u64) {
        if n == 0 {
            // The source answers with the rule 3.9 error.
            self.upstream.request(0);
            return;
        }
        // Relaxed: the allowance only partitions a number; the request itself is
        // published by the upstream's demand counter.
        let previous = self
            .allowance
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                Some(left - left.min(n))
            })
            .unwrap_or_else(|left| left);
        let grant = previous.min(n);
        if grant > 0 {
            self.upstream.request(grant);
        }
    }

    fn cancel(&self) {
        self.upstream.cancel();
    }
}

/// Where a `take` subscription is in its life.
enum State {
    /// Waiting for `on_subscribe`.
    Idle,
    /// Passing items.
    Active {
        /// The upstream subscription, cancelled once `remaining` reaches 0.
        upstream: Subscription,
        /// Items still to pass.
        remaining: u64,
    },
    /// Terminated; later signals are ignored.
    Done,
}

struct TakeSubscriber<S> {
    /// The next stage.
    downstream: S,
    /// The limit.
    n: u64,
    /// Life-cycle state.
    state: State,
}

impl<S> TakeSubscriber<S> {
    /// Account for `passed` items; complete when the limit is reached.
    fn passed<T>(&mut self, passed: u64)
    where
        S: Subscriber<T>,
    {
        if let State::Active { remaining, .. } = &mut self.state {
            *remaining -= passed;
            if *remaining == 0 {
                if let State::Active { upstream, .. } =
                    std::mem::replace(&mut self.state, State::Done)
                {
                    upstream.cancel();
                }
                self.downstream.on_complete();
            }
        }
    }
}

impl<T, S: Subscriber<T>> Subscriber<T> for TakeSubscriber<S> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        if !matches!(self.state, State::Idle) {
            // Rule 2.5: a second subscription is cancelled.
            subscription.cancel();
            return;
        }
        if self.n == 0 {
            subscription.cancel();
            self.state = State::Done;
            self.downstream.on_subscribe(Subscription::noop());
            self.downstream.on_complete();
            return;
        }
        let cap = Arc::new(Cap {
            allowance: AtomicU64::new(self.n),
            upstream: subscription.clone(),
        });
        self.state = State::Active {
            upstream: subscription,
            remaining: self.n,
        };
        self.downstream.on_subscribe(Subscription::new(cap));
    }

    #[inline]
    fn on_next(&mut self, item: T) {
        if let State::Active { .. } = self.state {
            self.downstream.on_next(item);
            self.passed(1);
        }
    }

    #[inline]
    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) {
        let State::Active { remaining, .. } = self.state else {
            return;
        };
        let mut passed = 0u64;
        let within = items
            .size_hint()
            .1
            .is_some_and(|upper| upper as u64 <= remaining);
        if within {
            // The common case: upstream honours the cap, so no `Take` adaptor (whose
            // `fold` cannot fuse) is needed.
            self.downstream
                .on_next_batch(items.inspect(|_| passed += 1));
        } else {
            let limit = usize::try_from(remaining).unwrap_or(usize::MAX);
            self.downstream
                .on_next_batch(items.take(limit).inspect(|_| passed += 1));
        }
        self.passed(passed);
    }

    fn on_error(&mut self, error: Error) {
        if !matches!(std::mem::replace(&mut self.state, State::Done), State::Done) {
            self.downstream.on_error(error);
        }
    }

    fn on_complete(&mut self) {
        if !matches!(std::mem::replace(&mut self.state, State::Done), State::Done) {
            self.downstream.on_complete();
        }
    }
}
