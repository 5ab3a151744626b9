//! `filter_map`: implementation notes. The user contract is on
//! [`PublisherExt::filter_map`](crate::PublisherExt::filter_map).
//!
//! The demand path of `filter`: downstream's `on_subscribe` receives upstream's
//! subscription itself, and each item the closure maps to `None` is owed to
//! downstream again. `on_next_batch` hands downstream a `guard::Guarded` iterator
//! (the closure runs lazily, the `None`s are counted) and returns
//! `demand::sum(downstream's credit, swallowed)` as its batch credit; `on_next` calls
//! `request(1)` upstream per swallowed item. Nothing is held.
//!
//! State: [`Upstream`] (`Idle` → `Active` → `Done`). A panic in the closure is parked
//! in the batch's `BatchOutcome`; after the batch the stage cancels upstream, signals
//! `on_error(Panicked)` and returns no credit.

use crate::drain::Upstream;
use crate::guard::{blamed, catch_in, swallowing_batch};
use crate::metrics::DropHook;
use crate::spec::Sealed;
use crate::{Error, Publisher, Subscriber, Subscription};

/// Publisher for the [`filter_map`](crate::PublisherExt::filter_map) method.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct FilterMap<P, F> {
    source: P,
    f: F,
}

impl<P, F> FilterMap<P, F> {
    pub(crate) fn new(source: P, f: F) -> Self {
        FilterMap { source, f }
    }
}

impl<P, F, U> Publisher for FilterMap<P, F>
where
    P: Publisher,
    F: FnMut(P::Item) -> Option<U> + Send + 'static,
    U: Send + 'static,
{
    type Item = U;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<U> + Send + 'static,
    {
        self.source.subscribe(FilterMapSubscriber {
            downstream: subscriber,
            f: self.f,
            upstream: Upstream::Idle,
        })
    }

    fn in_flight_bound(&self) -> u64 {
        self.source.in_flight_bound()
    }

    fn fuses(&self, sealed: Sealed) -> bool {
        self.source.fuses(sealed)
    }

    #[inline]
    fn fold_fused<A, G>(self, init: A, mut downstream: G, sealed: Sealed) -> Result<A, Error>
    where
        A: Send + 'static,
        G: FnMut(A, U) -> A + Send + 'static,
    {
        let mut f = self.f;
        self.source.fold_fused(
            init,
            move |acc, item| match blamed("filter_map", || f(item)) {
                Some(item) => downstream(acc, item),
                None => acc,
            },
            sealed,
        )
    }
}

struct FilterMapSubscriber<S, F> {
    /// The next stage.
    downstream: S,
    /// The user's closure.
    f: F,
    /// Life-cycle state; holds upstream to re-request swallowed items and to cancel.
    upstream: Upstream,
}

impl<T, U, S, F> Subscriber<T> for FilterMapSubscriber<S, F>
where
    S: Subscriber<U>,
    F: FnMut(T) -> Option<U>,
{
    fn on_subscribe(&mut self, subscription: Subscription) {
        if self.upstream.accept(&subscription) {
            self.downstream.on_subscribe(subscription);
        }
    }

    #[inline]
    fn on_next(&mut self, item: T) {
        if !self.upstream.is_active() {
            return;
        }
        match catch_in("filter_map", || (self.f)(item)) {
            Ok(Some(out)) => self.downstream.on_next(out),
            Ok(None) => {
                // The swallowed item is owed to downstream again.
                if let Some(upstream) = self.upstream.get() {
                    upstream.request(1);
                }
            }
            Err(error) => self.upstream.fail(&mut self.downstream, error),
        }
    }

    #[inline]
    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        let (upstream, downstream) = (&mut self.upstream, &mut self.downstream);
        swallowing_batch("filter_map", upstream, downstream, items, None, &mut self.f)
    }

    #[inline]
    fn on_next_batch_of<I: Iterator<Item = T>>(&mut self, items: I, n: u64, _: Sealed) -> u64 {
        let (upstream, downstream) = (&mut self.upstream, &mut self.downstream);
        swallowing_batch(
            "filter_map",
            upstream,
            downstream,
            items,
            Some(n),
            &mut self.f,
        )
    }

    fn credits_by_count(&self, sealed: Sealed) -> bool {
        self.downstream.credits_by_count(sealed)
    }

    fn drop_hook(&self) -> Option<DropHook> {
        self.downstream.drop_hook()
    }

    fn stops_batches_itself(&self) -> bool {
        self.downstream.stops_batches_itself()
    }

    fn demand_is_unbounded(&self, sealed: crate::spec::Sealed) -> bool {
        self.downstream.demand_is_unbounded(sealed)
    }

    fn on_error(&mut self, error: Error) {
        self.upstream.forward_error(&mut self.downstream, error);
    }

    fn on_complete(&mut self) {
        self.upstream.forward_complete(&mut self.downstream);
    }
}
