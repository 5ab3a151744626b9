//! `filter`: pass on only the items a predicate accepts.
//!
//! Demand contract: PassThrough with replenishment. Downstream requests go upstream
//! unchanged; every swallowed item is owed to downstream again, and the debt is
//! requested upstream in one batch when upstream's outstanding window runs dry
//! ([`UpstreamWindow`](crate::demand::UpstreamWindow)), not one `request(1)` per drop.
//! With unbounded demand nothing is re-requested.
//!
//! States: `Idle` → `Active { credit, window }` → `Done` (terminal, or the predicate
//! panicked: upstream cancelled, downstream `on_error(Panicked)`).

use std::sync::Arc;

use crate::demand::{AtomicDemand, UpstreamWindow};
use crate::guard::{catch, Guarded};
use crate::{Error, Publisher, RawSubscription, Subscriber, Subscription};

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
            state: State::Idle,
        })
    }
}

/// The subscription downstream holds: it records demand so the stage knows its window.
struct Credit {
    /// Requests made by downstream and not yet absorbed into the window.
    pending: AtomicDemand,
    /// The upstream subscription.
    upstream: Subscription,
}

impl RawSubscription for Credit {
    fn request(&self, n: u64) {
        if n > 0 {
            self.pending.add(n);
        }
        // `request(0)` goes upstream as is: the source signals the rule 3.9 error.
        self.upstream.request(n);
    }

    fn cancel(&self) {
        self.upstream.cancel();
    }
}

/// Where a `filter` subscription is in its life.
enum State {
    /// Waiting for `on_subscribe`.
    Idle,
    /// Filtering.
    Active {
        /// Shared with the downstream's subscription handle.
        credit: Arc<Credit>,
        /// Items upstream still owes, and the swallowed ones to re-request.
        window: UpstreamWindow,
    },
    /// Terminated; later signals are ignored.
    Done,
}

struct FilterSubscriber<S, F> {
    /// The next stage.
    downstream: S,
    /// The user's predicate.
    predicate: F,
    /// Life-cycle state.
    state: State,
}

impl<S, F> FilterSubscriber<S, F> {
    fn settle(&mut self, received: u64, swallowed: u64) {
        if let State::Active { credit, window } = &mut self.state {
            if let Some(n) = window.settle(&credit.pending, received, swallowed) {
                credit.upstream.request(n);
            }
        }
    }

    fn fail<T>(&mut self, error: Error)
    where
        S: Subscriber<T>,
    {
        if let State::Active { credit, .. } = std::mem::replace(&mut self.state, State::Done) {
            credit.upstream.cancel();
            self.downstream.on_error(error);
        }
    }
}

impl<T, S, F> Subscriber<T> for FilterSubscriber<S, F>
where
    S: Subscriber<T>,
    F: FnMut(&T) -> bool,
{
    fn on_subscribe(&mut self, subscription: Subscription) {
        match self.state {
            State::Idle => {
                let credit = Arc::new(Credit { pending: AtomicDemand::new(), upstream: subscription });
                self.state = State::Active { credit: credit.clone(), window: UpstreamWindow::new() };
                self.downstream.on_subscribe(Subscription::new(credit));
            }
            // Rule 2.5: a second subscription is cancelled.
            _ => subscription.cancel(),
        }
    }

    #[inline]
    fn on_next(&mut self, item: T) {
        if !matches!(self.state, State::Active { .. }) {
            return;
        }
        match catch(|| (self.predicate)(&item)) {
            Ok(true) => {
                self.downstream.on_next(item);
                self.settle(1, 0);
            }
            Ok(false) => self.settle(1, 1),
            Err(error) => self.fail(error),
        }
    }

    #[inline]
    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) {
        if !matches!(self.state, State::Active { .. }) {
            return;
        }
        let mut panic = None;
        let (mut received, mut swallowed) = (0u64, 0u64);
        let predicate = &mut self.predicate;
        let batch = Guarded::new(
            items,
            |x: T| {
                received += 1;
                if predicate(&x) {
                    Some(x)
                } else {
                    swallowed += 1;
                    None
                }
            },
            &mut panic,
        );
        self.downstream.on_next_batch(batch);
        if let Some(error) = panic {
            self.fail(error);
        } else {
            self.settle(received, swallowed);
        }
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
