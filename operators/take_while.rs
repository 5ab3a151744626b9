//! `take_while`: implementation notes. The user contract is on
//! [`PublisherExt::take_while`](crate::PublisherExt::take_while).
//!
//! Downstream's `on_subscribe` receives upstream's subscription itself, so requests
//! and batch credit pass unchanged; the rejected item ends the stream, so nothing is
//! owed for it.
//!
//! A batch is handed downstream through [`While`], which stops pulling from
//! upstream's iterator at the first rejected item: its `fold` is a `try_fold`, so a
//! fused chain still stops there and a generator upstream is not called for items
//! nobody wants. `While` records why it stopped ([`Cutoff`]); after the batch the stage
//! acts on it.
//!
//! State: [`Upstream`] (`Idle` → `Active` → `Done`). The first rejected item cancels
//! upstream and completes downstream; a panic in the predicate cancels upstream and
//! signals `on_error(Panicked)`. Either way the batch returns no credit.

use std::ops::ControlFlow;

use crate::drain::Upstream;
use crate::guard::catch_in;
use crate::metrics::DropHook;
use crate::{Error, Publisher, Subscriber, Subscription};

/// Publisher for the [`take_while`](crate::PublisherExt::take_while) method.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct TakeWhile<P, F> {
    source: P,
    predicate: F,
}

impl<P, F> TakeWhile<P, F> {
    pub(crate) fn new(source: P, predicate: F) -> Self {
        TakeWhile { source, predicate }
    }
}

impl<P, F> Publisher for TakeWhile<P, F>
where
    P: Publisher,
    F: FnMut(&P::Item) -> bool + Send + 'static,
{
    type Item = P::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<P::Item> + Send + 'static,
    {
        self.source.subscribe(TakeWhileSubscriber {
            downstream: subscriber,
            predicate: self.predicate,
            upstream: Upstream::Idle,
        })
    }

    fn in_flight_bound(&self) -> u64 {
        self.source.in_flight_bound()
    }
}

/// Why a batch stopped early.
enum Cutoff {
    /// The predicate rejected an item: the stream is over.
    Rejected,
    /// The predicate panicked.
    Panicked(Error),
}

/// An iterator adaptor that yields items while the predicate accepts them and
/// records in `stop` why it ended early. The predicate runs under the panic guard.
struct While<'a, I, F> {
    items: I,
    predicate: F,
    stop: &'a mut Option<Cutoff>,
}

impl<T, I, F> Iterator for While<'_, I, F>
where
    I: Iterator<Item = T>,
    F: FnMut(&T) -> bool,
{
    type Item = T;

    #[inline]
    fn next(&mut self) -> Option<T> {
        if self.stop.is_some() {
            return None;
        }
        let item = self.items.next()?;
        match catch_in("take_while", || (self.predicate)(&item)) {
            Ok(true) => Some(item),
            Ok(false) => {
                *self.stop = Some(Cutoff::Rejected);
                None
            }
            Err(error) => {
                *self.stop = Some(Cutoff::Panicked(error));
                None
            }
        }
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, self.items.size_hint().1)
    }

    #[inline]
    fn fold<B, G>(self, init: B, mut g: G) -> B
    where
        G: FnMut(B, T) -> B,
    {
        let While {
            mut items,
            mut predicate,
            stop,
        } = self;
        if stop.is_some() {
            return init;
        }
        let flow = items.try_fold(init, |acc, item| {
            match catch_in("take_while", || predicate(&item)) {
                Ok(true) => ControlFlow::Continue(g(acc, item)),
                Ok(false) => {
                    *stop = Some(Cutoff::Rejected);
                    ControlFlow::Break(acc)
                }
                Err(error) => {
                    *stop = Some(Cutoff::Panicked(error));
                    ControlFlow::Break(acc)
                }
            }
        });
        match flow {
            ControlFlow::Continue(acc) | ControlFlow::Break(acc) => acc,
        }
    }
}

struct TakeWhileSubscriber<S, F> {
    /// The next stage.
    downstream: S,
    /// The user's predicate.
    predicate: F,
    /// Life-cycle state; holds upstream to cancel it at the first rejected item.
    upstream: Upstream,
}

impl<S, F> TakeWhileSubscriber<S, F> {
    /// End the stream early: cancel upstream, then complete or fail downstream.
    fn stop<T>(&mut self, stop: Cutoff)
    where
        S: Subscriber<T>,
    {
        if self.upstream.cancel() {
            match stop {
                Cutoff::Rejected => self.downstream.on_complete(),
                Cutoff::Panicked(error) => self.downstream.on_error(error),
            }
        }
    }
}

impl<T, S, F> Subscriber<T> for TakeWhileSubscriber<S, F>
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
        match catch_in("take_while", || (self.predicate)(&item)) {
            Ok(true) => self.downstream.on_next(item),
            Ok(false) => self.stop(Cutoff::Rejected),
            Err(error) => self.stop(Cutoff::Panicked(error)),
        }
    }

    #[inline]
    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        if !self.upstream.is_active() {
            return 0;
        }
        let mut stop = None;
        let batch = While {
            items,
            predicate: &mut self.predicate,
            stop: &mut stop,
        };
        // Downstream holds our upstream's subscription, so its credit passes as is.
        let credit = self.downstream.on_next_batch(batch);
        match stop {
            None => credit,
            Some(stop) => {
                self.stop(stop);
                0
            }
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
