//! `filter`: implementation notes. The user contract is on
//! [`PublisherExt::filter`](crate::PublisherExt::filter).
//!
//! Downstream's `on_subscribe` receives upstream's subscription itself, so its
//! requests and cancels reach upstream unchanged. Every item the predicate swallows
//! is owed to downstream again and goes back upstream as demand:
//!
//! * `on_next_batch` wraps the batch in `guard::Guarded`, which runs the predicate
//!   lazily as downstream pulls and counts the swallowed items. The stage returns
//!   downstream's batch credit plus that count (saturating) as its own batch credit:
//!   no call into the publisher and no atomic operation; the emitter adds it to its
//!   pass-local demand.
//! * `on_next` (an upstream that delivers item by item) calls `request(1)` on the
//!   upstream subscription for each swallowed item.
//!
//! Either way upstream's outstanding demand stays equal to downstream's.
//!
//! State: [`Upstream`] (`Idle` → `Active` → `Done`). A panic in the predicate is
//! parked in the batch's `BatchOutcome`; after the batch the stage cancels upstream,
//! signals `on_error(Panicked)` and returns no credit.

use crate::drain::Upstream;
use crate::guard::{catch_in, swallowing_batch, BatchOutcome};
use crate::metrics::DropHook;
use crate::{Error, Publisher, Subscriber, Subscription};

/// Publisher for the [`filter`](crate::PublisherExt::filter) method.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct Filter<P, F> {
    source: P,
    predicate: F,
}

impl<P, F> Filter<P, F> {
    pub(crate) fn new(source: P, predicate: F) -> Self {
        Filter { source, predicate }
    }
}

impl<P, F> Publisher for Filter<P, F>
where
    P: Publisher,
    F: FnMut(&P::Item) -> bool + Send + 'static,
{
    type Item = P::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<P::Item> + Send + 'static,
    {
        self.source.subscribe(FilterSubscriber {
            downstream: subscriber,
            predicate: self.predicate,
            upstream: Upstream::Idle,
        })
    }

    fn in_flight_bound(&self) -> u64 {
        self.source.in_flight_bound()
    }
}

struct FilterSubscriber<S, F> {
    /// The next stage.
    downstream: S,
    /// The user's predicate.
    predicate: F,
    /// Life-cycle state; holds upstream to re-request swallowed items and to cancel.
    upstream: Upstream,
}

impl<S, F> FilterSubscriber<S, F> {
    /// Re-request the items that were swallowed, so downstream's demand still holds.
    fn replenish(&self, swallowed: u64) {
        if let (Some(upstream), true) = (self.upstream.get(), swallowed > 0) {
            upstream.request(swallowed);
        }
    }
}

impl<T, S, F> Subscriber<T> for FilterSubscriber<S, F>
where
    S: Subscriber<T>,
    F: FnMut(&T) -> bool,
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
        match catch_in("filter", || (self.predicate)(&item)) {
            Ok(true) => self.downstream.on_next(item),
            Ok(false) => self.replenish(1),
            Err(error) => self.upstream.fail(&mut self.downstream, error),
        }
    }

    #[inline]
    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        if !self.upstream.is_active() {
            return 0;
        }
        let mut outcome = BatchOutcome::of("filter");
        let predicate = &mut self.predicate;
        let keep = |x: T| predicate(&x).then_some(x);
        let credit = swallowing_batch(&mut self.downstream, items, keep, &mut outcome);
        match outcome.panic {
            Some(error) => {
                self.upstream.fail(&mut self.downstream, error);
                0
            }
            // Downstream holds our upstream's subscription: its credit passes as is,
            // plus the swallowed items, which are owed to downstream again.
            None => credit.saturating_add(outcome.swallowed),
        }
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
