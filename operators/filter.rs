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
use crate::guard::{blamed, catch_in, swallowing_batch};
use crate::metrics::DropHook;
use crate::spec::Sealed;
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

    fn fuses(&self, sealed: Sealed) -> bool {
        self.source.fuses(sealed)
    }

    #[inline]
    fn fold_fused<A, G>(self, init: A, mut downstream: G, sealed: Sealed) -> Result<A, Error>
    where
        A: Send + 'static,
        G: FnMut(A, P::Item) -> A + Send + 'static,
    {
        let mut predicate = self.predicate;
        self.source.fold_fused(
            init,
            move |acc, item| {
                if blamed("filter", || predicate(&item)) {
                    downstream(acc, item)
                } else {
                    // A swallowed item is the stage's to drop: its `Drop` panicking
                    // names `filter`, as on the subscribed path.
                    blamed("filter", || drop(item));
                    acc
                }
            },
            sealed,
        )
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
        let predicate = &mut self.predicate;
        let keep = |x: T| predicate(&x).then_some(x);
        let (upstream, downstream) = (&mut self.upstream, &mut self.downstream);
        swallowing_batch("filter", upstream, downstream, items, None, keep)
    }

    #[inline]
    fn on_next_batch_of<I: Iterator<Item = T>>(&mut self, items: I, n: u64, _: Sealed) -> u64 {
        let predicate = &mut self.predicate;
        let keep = |x: T| predicate(&x).then_some(x);
        let (upstream, downstream) = (&mut self.upstream, &mut self.downstream);
        swallowing_batch("filter", upstream, downstream, items, Some(n), keep)
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

#[cfg(all(test, not(weir_loom)))]
mod tests {
    use super::*;

    /// A downstream that records what reaches it and, when `by_count`, credits a batch
    /// of exactly `n` items with `n` (as `fold` does); otherwise it credits what it got.
    #[derive(Default)]
    struct Sink {
        items: Vec<u64>,
        by_count: bool,
    }

    impl Subscriber<u64> for Sink {
        fn on_subscribe(&mut self, _: Subscription) {}
        fn on_next(&mut self, item: u64) {
            self.items.push(item);
        }
        fn on_error(&mut self, _: Error) {}
        fn on_complete(&mut self) {}
        fn on_next_batch<I: Iterator<Item = u64>>(&mut self, items: I) -> u64 {
            let before = self.items.len();
            self.items.extend(items);
            (self.items.len() - before) as u64
        }
        fn credits_by_count(&self, _: Sealed) -> bool {
            self.by_count
        }
        fn on_next_batch_of<I: Iterator<Item = u64>>(
            &mut self,
            items: I,
            n: u64,
            _: Sealed,
        ) -> u64 {
            assert!(
                self.by_count,
                "an exact batch only to a by-count downstream"
            );
            self.items.extend(items);
            n
        }
    }

    fn multiples_of_three(by_count: bool) -> FilterSubscriber<Sink, impl FnMut(&u64) -> bool> {
        let mut filter = FilterSubscriber {
            downstream: Sink {
                by_count,
                ..Sink::default()
            },
            predicate: |x: &u64| x % 3 == 0,
            upstream: Upstream::Idle,
        };
        filter.on_subscribe(Subscription::noop());
        filter
    }

    #[test]
    fn an_exact_batch_to_a_by_count_downstream_is_credited_once() {
        let mut filter = multiples_of_three(true);
        assert!(filter.credits_by_count(Sealed::NEW));
        // Ten items, four kept: the downstream's credit for ten, nothing added for the
        // six swallowed ones.
        assert_eq!(filter.on_next_batch_of(0..10, 10, Sealed::NEW), 10);
        assert_eq!(filter.downstream.items, [0, 3, 6, 9]);
    }

    #[test]
    fn otherwise_swallowed_items_come_back_as_credit() {
        // An exact batch to a downstream that counts what it gets.
        let mut filter = multiples_of_three(false);
        assert!(!filter.credits_by_count(Sealed::NEW));
        assert_eq!(filter.on_next_batch_of(0..10, 10, Sealed::NEW), 4 + 6);
        // A batch of unknown length to a by-count downstream.
        let mut filter = multiples_of_three(true);
        assert_eq!(filter.on_next_batch(0..10), 4 + 6);
        assert_eq!(filter.downstream.items, [0, 3, 6, 9]);
    }
}
