//! `skip_while`: implementation notes. The user contract is on
//! [`PublisherExt::skip_while`](crate::PublisherExt::skip_while).
//!
//! While `skipping`, the stage works like `filter`: downstream's `on_subscribe`
//! receives upstream's subscription itself; `on_next_batch` hands downstream a
//! `guard::Guarded` iterator whose step calls the predicate until it first rejects an
//! item (then flips `skipping` to false and passes everything after it without
//! calling the predicate), and returns `demand::sum(downstream's credit, skipped)` as
//! its batch credit; `on_next` calls `request(1)` upstream per skipped item. Once
//! `skipping` is false, batches go downstream untouched and downstream's credit is
//! returned as is.
//!
//! State: [`Upstream`] (`Idle` → `Active` → `Done`) plus `skipping`, which goes from
//! true to false once. A panic in the predicate is parked in the batch's
//! `BatchOutcome`; after the batch the stage cancels upstream, signals
//! `on_error(Panicked)` and returns no credit.

use crate::demand;
use crate::drain::Upstream;
use crate::guard::{catch_in, BatchOutcome, Guarded};
use crate::metrics::DropHook;
use crate::{Error, Publisher, Subscriber, Subscription};

/// Publisher for the [`skip_while`](crate::PublisherExt::skip_while) method.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct SkipWhile<P, F> {
    source: P,
    predicate: F,
}

impl<P, F> SkipWhile<P, F> {
    pub(crate) fn new(source: P, predicate: F) -> Self {
        SkipWhile { source, predicate }
    }
}

impl<P, F> Publisher for SkipWhile<P, F>
where
    P: Publisher,
    F: FnMut(&P::Item) -> bool + Send + 'static,
{
    type Item = P::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<P::Item> + Send + 'static,
    {
        self.source.subscribe(SkipWhileSubscriber {
            downstream: subscriber,
            predicate: self.predicate,
            skipping: true,
            upstream: Upstream::Idle,
        })
    }

    fn in_flight_bound(&self) -> u64 {
        self.source.in_flight_bound()
    }
}

struct SkipWhileSubscriber<S, F> {
    /// The next stage.
    downstream: S,
    /// The user's predicate; called only while `skipping`.
    predicate: F,
    /// True until the predicate rejected an item.
    skipping: bool,
    /// Life-cycle state; holds upstream to re-request skipped items and to cancel.
    upstream: Upstream,
}

impl<T, S, F> Subscriber<T> for SkipWhileSubscriber<S, F>
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
        if !self.skipping {
            self.downstream.on_next(item);
            return;
        }
        match catch_in("skip_while", || (self.predicate)(&item)) {
            Ok(true) => {
                // The skipped item is owed to downstream again.
                if let Some(upstream) = self.upstream.get() {
                    upstream.request(1);
                }
            }
            Ok(false) => {
                self.skipping = false;
                self.downstream.on_next(item);
            }
            Err(error) => self.upstream.fail(&mut self.downstream, error),
        }
    }

    #[inline]
    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        if !self.upstream.is_active() {
            return 0;
        }
        if !self.skipping {
            // Downstream holds our upstream's subscription: its credit passes as is.
            return self.downstream.on_next_batch(items);
        }
        let mut outcome = BatchOutcome::of("skip_while");
        let (predicate, skipping) = (&mut self.predicate, &mut self.skipping);
        let step = |x: T| {
            if *skipping && predicate(&x) {
                return None;
            }
            *skipping = false;
            Some(x)
        };
        let credit = self
            .downstream
            .on_next_batch(Guarded::new(items, step, &mut outcome));
        match outcome.panic {
            Some(error) => {
                self.upstream.fail(&mut self.downstream, error);
                0
            }
            // Downstream's credit, plus the skipped items, owed to downstream again.
            None => demand::sum(credit, outcome.swallowed),
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
