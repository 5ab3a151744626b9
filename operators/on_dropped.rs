//! `on_dropped`: implementation notes. The user contract is on
//! [`PublisherExt::on_dropped`](crate::PublisherExt::on_dropped).
//!
//! A transparent subscriber: every signal, the subscription and batch credit go
//! straight through. Its only job is to answer [`Subscriber::drop_hook`] with its
//! [`DropHook`] for the lossy stages above it, which ask while they are being
//! subscribed (so the hook must be below them in the chain).

use crate::metrics::DropHook;
use crate::{Error, Publisher, Subscriber, Subscription};

/// Publisher for the [`on_dropped`](crate::PublisherExt::on_dropped) method.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct OnDropped<P> {
    source: P,
    hook: DropHook,
}

impl<P> OnDropped<P> {
    pub(crate) fn new(source: P, hook: DropHook) -> Self {
        OnDropped {
            source,
            hook: hook.installed_by("on_dropped"),
        }
    }
}

impl<P: Publisher> Publisher for OnDropped<P> {
    type Item = P::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<P::Item> + Send + 'static,
    {
        self.source
            .subscribe(OnDroppedSubscriber::new(subscriber, self.hook))
    }

    fn in_flight_bound(&self) -> u64 {
        self.source.in_flight_bound()
    }
}

/// The pass-through subscriber that answers `drop_hook` with `hook` (also behind
/// [`on_drop`](crate::PublisherExt::on_drop), with a typed hook).
pub(crate) struct OnDroppedSubscriber<S> {
    /// The next stage; every signal goes straight to it.
    downstream: S,
    /// The answer to `drop_hook`.
    hook: DropHook,
}

impl<S> OnDroppedSubscriber<S> {
    pub(crate) fn new(downstream: S, hook: DropHook) -> Self {
        OnDroppedSubscriber { downstream, hook }
    }
}

impl<T, S: Subscriber<T>> Subscriber<T> for OnDroppedSubscriber<S> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        self.downstream.on_subscribe(subscription);
    }

    #[inline]
    fn on_next(&mut self, item: T) {
        self.downstream.on_next(item);
    }

    #[inline]
    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        self.downstream.on_next_batch(items)
    }

    fn drop_hook(&self) -> Option<DropHook> {
        Some(self.hook.clone())
    }

    fn stops_batches_itself(&self) -> bool {
        self.downstream.stops_batches_itself()
    }

    fn on_error(&mut self, error: Error) {
        self.downstream.on_error(error);
    }

    fn on_complete(&mut self) {
        self.downstream.on_complete();
    }
}
