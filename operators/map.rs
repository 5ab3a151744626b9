//! `map`: implementation notes. The user contract is on
//! [`PublisherExt::map`](crate::PublisherExt::map).
//!
//! The stage adds no subscription of its own: downstream's `on_subscribe` receives
//! upstream's subscription, so requests and cancels go straight through at no cost,
//! and downstream's batch credit is returned unchanged. `on_next` applies the closure
//! under `guard::catch`. `on_next_batch` wraps upstream's iterator in
//! `guard::Guarded` and hands it downstream as one batch: the closure runs lazily as
//! downstream pulls, so a synchronous chain still compiles to one loop.
//!
//! State: [`Upstream`] (`Idle` → `Active` → `Done`). A panic in the closure is parked
//! in the batch's `BatchOutcome` (the guarded iterator yields nothing after it); once
//! the batch returns, the stage cancels upstream, signals `on_error(Panicked)` and
//! returns no credit. Signals after `Done` are ignored.

use crate::drain::Upstream;
use crate::guard::{blamed, catch_in, BatchOutcome, Guarded};
use crate::metrics::DropHook;
use crate::spec::Sealed;
use crate::{Error, Publisher, Subscriber, Subscription};

/// Publisher for the [`map`](crate::PublisherExt::map) method.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct Map<P, F> {
    source: P,
    f: F,
}

impl<P, F> Map<P, F> {
    pub(crate) fn new(source: P, f: F) -> Self {
        Map { source, f }
    }
}

impl<P, F, U> Publisher for Map<P, F>
where
    P: Publisher,
    F: FnMut(P::Item) -> U + Send + 'static,
    U: Send + 'static,
{
    type Item = U;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<U> + Send + 'static,
    {
        self.source.subscribe(MapSubscriber {
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
            move |acc, item| downstream(acc, blamed("map", || f(item))),
            sealed,
        )
    }
}

struct MapSubscriber<S, F> {
    /// The next stage.
    downstream: S,
    /// The user's closure.
    f: F,
    /// Life-cycle state; holds upstream to cancel it if the closure panics.
    upstream: Upstream,
}

impl<S, F> MapSubscriber<S, F> {
    /// One batch, mapped under a panic guard (of exactly `exact` items, passed on as
    /// such, when the source knows).
    #[inline]
    fn batch<T, U, I>(&mut self, items: I, exact: Option<u64>) -> u64
    where
        S: Subscriber<U>,
        F: FnMut(T) -> U,
        I: Iterator<Item = T>,
    {
        if !self.upstream.is_active() {
            return 0;
        }
        let mut outcome = BatchOutcome::of("map");
        let f = &mut self.f;
        let mapped = Guarded::new(items, |x| Some(f(x)), &mut outcome);
        // Downstream holds our upstream's subscription, so its credit passes as is.
        let credit = match exact {
            Some(n) => self.downstream.on_next_batch_of(mapped, n, Sealed::NEW),
            None => self.downstream.on_next_batch(mapped),
        };
        match outcome.panic {
            Some(error) => {
                self.upstream.fail(&mut self.downstream, error);
                0
            }
            None => credit,
        }
    }
}

impl<T, U, S, F> Subscriber<T> for MapSubscriber<S, F>
where
    S: Subscriber<U>,
    F: FnMut(T) -> U,
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
        match catch_in("map", || (self.f)(item)) {
            Ok(out) => self.downstream.on_next(out),
            Err(error) => self.upstream.fail(&mut self.downstream, error),
        }
    }

    #[inline]
    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        self.batch(items, None)
    }

    /// One item out for each in: the batch stays exactly `n` items.
    #[inline]
    fn on_next_batch_of<I: Iterator<Item = T>>(&mut self, items: I, n: u64, _: Sealed) -> u64 {
        self.batch(items, Some(n))
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
