//! `skip(n)`: implementation notes. The user contract is on
//! [`PublisherExt::skip`](crate::PublisherExt::skip).
//!
//! `skip(0)` is transparent: downstream receives upstream's subscription. Otherwise
//! downstream holds a [`FirstRequest`]. Its `pending` flag is swapped to 0 by the
//! first grant (a downstream `request` from any thread, or non-zero batch credit),
//! which goes upstream as `demand::sum(m, n)`; every later request and all later
//! credit pass unchanged. The swap is one atomic read-modify-write, so exactly one
//! grant carries the `n`; concurrent requests may reach upstream in either order,
//! which changes no total. `request(0)` is forwarded for upstream to answer with the
//! rule 3.9 error.
//!
//! Delivery: `remaining` counts the items still to skip. `on_next` decrements it or
//! forwards the item. `on_next_batch` consumes up to `remaining` items from the front
//! of the batch (`take(..).count()`); if that used up the batch it returns 0 (those
//! items were requested as part of the `n`, nothing is owed), otherwise it hands the
//! rest downstream as one batch and passes downstream's credit through
//! `FirstRequest::grant`. Skipped items are dropped as they arrive, never held.
//!
//! State: [`Upstream`] (`Idle` → `Active` → `Done`) plus `remaining`.

use std::sync::Arc;

use crate::demand;
use crate::drain::Upstream;
use crate::loom::{AtomicU8, Ordering};
use crate::metrics::DropHook;
use crate::{Error, Publisher, RawSubscription, Subscriber, Subscription};

/// Publisher for the [`skip`](crate::PublisherExt::skip) method.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct Skip<P> {
    source: P,
    n: u64,
}

impl<P> Skip<P> {
    pub(crate) fn new(source: P, n: u64) -> Self {
        Skip { source, n }
    }
}

impl<P: Publisher> Publisher for Skip<P> {
    type Item = P::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<P::Item> + Send + 'static,
    {
        self.source.subscribe(SkipSubscriber {
            downstream: subscriber,
            remaining: self.n,
            first: None,
            upstream: Upstream::Idle,
        })
    }

    fn in_flight_bound(&self) -> u64 {
        self.source.in_flight_bound()
    }
}

/// The subscription downstream holds (for `n > 0`): adds the skipped items to the
/// first request.
struct FirstRequest {
    /// 1 until the first request (or batch credit) went upstream, then 0.
    pending: AtomicU8,
    /// The items to skip.
    n: u64,
    /// The upstream subscription.
    upstream: Subscription,
}

impl FirstRequest {
    /// What upstream must be asked for when downstream asks for `m >= 1`.
    fn grant(&self, m: u64) -> u64 {
        // Relaxed: the swap only elects the one request that carries `n` (a
        // read-modify-write, so exactly one caller sees 1); the request itself
        // is published by the upstream's demand counter.
        if self.pending.swap(0, Ordering::Relaxed) == 1 {
            demand::sum(m, self.n)
        } else {
            m
        }
    }
}

impl RawSubscription for FirstRequest {
    fn request(&self, m: u64) {
        if m == 0 {
            // The source answers with the rule 3.9 error.
            self.upstream.request(0);
        } else {
            self.upstream.request(self.grant(m));
        }
    }

    fn cancel(&self) {
        self.upstream.cancel();
    }
}

struct SkipSubscriber<S> {
    /// The next stage.
    downstream: S,
    /// Items still to skip.
    remaining: u64,
    /// Shared with downstream's subscription (`None` for `skip(0)`): translates
    /// downstream's batch credit like its requests.
    first: Option<Arc<FirstRequest>>,
    /// Life-cycle state.
    upstream: Upstream,
}

impl<T, S: Subscriber<T>> Subscriber<T> for SkipSubscriber<S> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        if !self.upstream.accept(&subscription) {
            return;
        }
        if self.remaining == 0 {
            self.downstream.on_subscribe(subscription);
            return;
        }
        let first = Arc::new(FirstRequest {
            pending: AtomicU8::new(1),
            n: self.remaining,
            upstream: subscription,
        });
        self.first = Some(first.clone());
        self.downstream.on_subscribe(Subscription::new(first));
    }

    #[inline]
    fn on_next(&mut self, item: T) {
        if !self.upstream.is_active() {
            return;
        }
        if self.remaining > 0 {
            self.remaining -= 1;
        } else {
            self.downstream.on_next(item);
        }
    }

    #[inline]
    fn on_next_batch<I: Iterator<Item = T>>(&mut self, mut items: I) -> u64 {
        if !self.upstream.is_active() {
            return 0;
        }
        if self.remaining > 0 {
            let limit = usize::try_from(self.remaining).unwrap_or(usize::MAX);
            let skipped = items.by_ref().take(limit).count() as u64;
            self.remaining -= skipped;
            if self.remaining > 0 {
                // The whole batch was skipped: upstream was asked for it, nothing is owed.
                return 0;
            }
        }
        let credit = self.downstream.on_next_batch(items);
        match (&self.first, credit) {
            (Some(first), 1..) => first.grant(credit),
            _ => credit,
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
