//! `inspect_cancel`: implementation notes. The user contract is on
//! [`PublisherExt::inspect_cancel`](crate::PublisherExt::inspect_cancel).
//!
//! Downstream holds a thin [`CancelTap`]: `request` is forwarded unchanged, and batch
//! credit passes as is. The tap sits in a mutex as an `Option`, touched only by
//! `cancel`: the first `cancel` takes it, runs it under `guard::catch` (a panic is
//! logged, since downstream expects no further signal), then cancels upstream; later
//! cancels find `None` and only forward. The stage does not watch termination or
//! cancels made by other stages: only a `cancel` through its own subscription runs
//! the tap.
//!
//! State: [`Upstream`] (`Idle` → `Active` → `Done`).

use std::sync::Arc;

use crate::drain::Upstream;
use crate::guard::catch_in;
use crate::loom::Mutex;
use crate::metrics::DropHook;
use crate::{Error, Publisher, RawSubscription, Subscriber, Subscription};

/// Publisher for the [`inspect_cancel`](crate::PublisherExt::inspect_cancel) method.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct InspectCancel<P, F> {
    source: P,
    f: F,
}

impl<P, F> InspectCancel<P, F> {
    pub(crate) fn new(source: P, f: F) -> Self {
        InspectCancel { source, f }
    }
}

impl<P, F> Publisher for InspectCancel<P, F>
where
    P: Publisher,
    F: FnOnce() + Send + 'static,
{
    type Item = P::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<P::Item> + Send + 'static,
    {
        self.source.subscribe(InspectCancelSubscriber {
            downstream: subscriber,
            f: Some(self.f),
            upstream: Upstream::Idle,
        })
    }

    fn in_flight_bound(&self) -> u64 {
        self.source.in_flight_bound()
    }
}

/// Downstream's subscription: requests pass, the first cancel runs the tap.
struct CancelTap<F> {
    /// The user's tap, taken by the first cancel.
    f: Mutex<Option<F>>,
    /// The upstream subscription.
    upstream: Subscription,
}

impl<F: FnOnce() + Send> RawSubscription for CancelTap<F> {
    fn request(&self, n: u64) {
        self.upstream.request(n);
    }

    fn cancel(&self) {
        let f = self.f.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(Err(error)) = f.map(|f| catch_in("inspect_cancel", f)) {
            // Downstream cancelled and expects no more signals: log, do not signal.
            tracing::error!("inspect_cancel tap panicked: {error}");
        }
        self.upstream.cancel();
    }
}

struct InspectCancelSubscriber<S, F> {
    /// The next stage.
    downstream: S,
    /// The tap, until `on_subscribe` moves it into downstream's subscription.
    f: Option<F>,
    /// Life-cycle state.
    upstream: Upstream,
}

impl<T, S, F> Subscriber<T> for InspectCancelSubscriber<S, F>
where
    S: Subscriber<T>,
    F: FnOnce() + Send + 'static,
{
    fn on_subscribe(&mut self, subscription: Subscription) {
        if !self.upstream.accept(&subscription) {
            return;
        }
        let tap = CancelTap {
            f: Mutex::new(self.f.take()),
            upstream: subscription,
        };
        self.downstream
            .on_subscribe(Subscription::new(Arc::new(tap)));
    }

    #[inline]
    fn on_next(&mut self, item: T) {
        if self.upstream.is_active() {
            self.downstream.on_next(item);
        }
    }

    #[inline]
    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        if !self.upstream.is_active() {
            return 0;
        }
        // Downstream's subscription forwards requests unchanged: so does its credit.
        self.downstream.on_next_batch(items)
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
