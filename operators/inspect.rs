//! `inspect`: implementation notes. The user contract is on
//! [`PublisherExt::inspect`](crate::PublisherExt::inspect).
//!
//! Downstream's `on_subscribe` receives upstream's subscription itself; requests,
//! cancels and batch credit pass unchanged. The tap runs lazily inside
//! `on_next_batch`, as a `guard::Guarded` step that calls it and passes the item on,
//! so a synchronous chain still fuses into one loop. The request and cancel taps are
//! separate stages (`inspect_request.rs`, `inspect_cancel.rs`).
//!
//! State: [`Upstream`] (`Idle` → `Active` → `Done`). A panic in the tap drops that
//! item; after the batch the stage cancels upstream, signals `on_error(Panicked)` and
//! returns no credit.

use crate::drain::Upstream;
use crate::guard::{blamed, catch_in, BatchOutcome, Guarded};
use crate::metrics::DropHook;
use crate::spec::Sealed;
use crate::{Error, Publisher, Subscriber, Subscription};

/// Publisher for the [`inspect`](crate::PublisherExt::inspect) method.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct Inspect<P, F> {
    source: P,
    f: F,
}

impl<P, F> Inspect<P, F> {
    pub(crate) fn new(source: P, f: F) -> Self {
        Inspect { source, f }
    }
}

impl<P, F> Publisher for Inspect<P, F>
where
    P: Publisher,
    F: FnMut(&P::Item) + Send + 'static,
{
    type Item = P::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<P::Item> + Send + 'static,
    {
        self.source.subscribe(InspectSubscriber {
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
        G: FnMut(A, P::Item) -> A + Send + 'static,
    {
        let mut f = self.f;
        self.source.fold_fused(
            init,
            move |acc, item| {
                blamed("inspect", || f(&item));
                downstream(acc, item)
            },
            sealed,
        )
    }
}

struct InspectSubscriber<S, F> {
    /// The next stage.
    downstream: S,
    /// The user's tap.
    f: F,
    /// Life-cycle state; holds upstream to cancel it if the tap panics.
    upstream: Upstream,
}

impl<T, S, F> Subscriber<T> for InspectSubscriber<S, F>
where
    S: Subscriber<T>,
    F: FnMut(&T),
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
        match catch_in("inspect", || (self.f)(&item)) {
            Ok(()) => self.downstream.on_next(item),
            Err(error) => self.upstream.fail(&mut self.downstream, error),
        }
    }

    #[inline]
    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        if !self.upstream.is_active() {
            return 0;
        }
        let mut outcome = BatchOutcome::of("inspect");
        let f = &mut self.f;
        let tapped = |x: T| {
            f(&x);
            Some(x)
        };
        // Downstream holds our upstream's subscription, so its credit passes as is.
        let credit = self
            .downstream
            .on_next_batch(Guarded::new(items, tapped, &mut outcome));
        match outcome.panic {
            Some(error) => {
                self.upstream.fail(&mut self.downstream, error);
                0
            }
            None => credit,
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
