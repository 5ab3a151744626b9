//! `name`: implementation notes. The user contract is on
//! [`PublisherExt::name`](crate::PublisherExt::name).
//!
//! The named publisher enters its registry when it is subscribed, with the stage's
//! in-flight bound and queue monitor read from the publisher before `subscribe`
//! consumes it, and hands the stage a transparent subscriber that holds the
//! registration. The registration ends at the stage's terminal signal, or when the
//! stage drops its subscriber (after a cancel, rule 3.13, or a panic): whichever
//! comes first. Every other signal, batches and sealed fast paths included, passes
//! straight through, so naming a stage costs nothing per item. A fused synchronous
//! chain has no stage to list: its fold passes through untouched.
//!
//! While the stage subscribes its upstream, it is the thread's current named stage
//! (`Scope::run`): a named stage upstream that enters then records it as its
//! downstream, which is how the registry knows pipelines.
//!
//! Tracing: a `weir_stage` span per subscription (fields `stage`, `id`), with a
//! `debug` event when it is subscribed, completes or is cancelled, and an `info`
//! event with the error when it fails. Nothing per item.

use std::sync::Arc;

use crate::metrics::{DropHook, Registration, Registry};
use crate::spec::Sealed;
use crate::{Error, Publisher, Subscriber, Subscription};

/// Publisher for the [`name`](crate::PublisherExt::name) method.
#[must_use = "publishers do nothing until subscribed"]
#[derive(Clone)]
pub struct Named<P> {
    source: P,
    name: Arc<str>,
    /// `None`: the global registry.
    registry: Option<Registry>,
}

impl<P: std::fmt::Debug> std::fmt::Debug for Named<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Named")
            .field("name", &self.name)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl<P> Named<P> {
    pub(crate) fn new(source: P, name: Arc<str>) -> Self {
        Named {
            source,
            name,
            registry: None,
        }
    }

    /// Enter `registry` instead of [`Registry::global`].
    ///
    /// ```
    /// use weir::metrics::Registry;
    /// use weir::prelude::*;
    ///
    /// let registry = Registry::new();
    /// let items = weir::range(0u32..3).name("numbers").registry(&registry).collect();
    /// assert_eq!(items.wait().unwrap(), vec![0, 1, 2]);
    /// assert!(registry.is_empty(), "it left when it completed");
    /// ```
    pub fn registry(mut self, registry: &Registry) -> Self {
        self.registry = Some(registry.clone());
        self
    }

    fn enter(&self) -> Registration
    where
        P: Publisher,
    {
        self.registry.as_ref().unwrap_or(Registry::global()).enter(
            self.name.clone(),
            self.source.in_flight_bound(),
            self.source.queue_monitor(),
        )
    }
}

impl<P: Publisher> Publisher for Named<P> {
    type Item = P::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<P::Item> + Send + 'static,
    {
        let registration = self.enter();
        let scope = registration.scope();
        let span = tracing::debug_span!("weir_stage", stage = %self.name, id = registration.id());
        tracing::debug!(parent: &span, "stage subscribed");
        let subscriber = Registered {
            downstream: subscriber,
            registration: Some(registration),
            span,
        };
        let source = self.source;
        scope.run(move || source.subscribe(subscriber));
    }

    fn in_flight_bound(&self) -> u64 {
        self.source.in_flight_bound()
    }

    fn queue_monitor(&self) -> Option<crate::metrics::QueueMonitor> {
        self.source.queue_monitor()
    }

    fn fuses(&self, sealed: Sealed) -> bool {
        self.source.fuses(sealed)
    }

    #[inline]
    fn fold_fused<A, G>(self, init: A, downstream: G, sealed: Sealed) -> Result<A, Error>
    where
        A: Send + 'static,
        G: FnMut(A, P::Item) -> A + Send + 'static,
    {
        // A fused chain has no stage: one loop in the caller, nothing to list.
        self.source.fold_fused(init, downstream, sealed)
    }
}

/// The named stage's downstream, as the stage sees it: everything passes through;
/// the registration ends with the stream.
struct Registered<S> {
    downstream: S,
    /// `None` once the stream ended.
    registration: Option<Registration>,
    span: tracing::Span,
}

impl<S> Drop for Registered<S> {
    fn drop(&mut self) {
        if self.registration.is_some() {
            tracing::debug!(parent: &self.span, "stage cancelled");
        }
    }
}

impl<T, S: Subscriber<T>> Subscriber<T> for Registered<S> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        self.downstream.on_subscribe(subscription);
    }

    #[inline]
    fn on_next(&mut self, item: T) {
        self.downstream.on_next(item);
    }

    fn on_error(&mut self, error: Error) {
        self.registration = None;
        tracing::info!(parent: &self.span, %error, "stage failed");
        self.downstream.on_error(error);
    }

    fn on_complete(&mut self) {
        self.registration = None;
        tracing::debug!(parent: &self.span, "stage completed");
        self.downstream.on_complete();
    }

    fn drop_hook(&self) -> Option<DropHook> {
        self.downstream.drop_hook()
    }

    fn stops_batches_itself(&self) -> bool {
        self.downstream.stops_batches_itself()
    }

    fn demand_is_unbounded(&self, sealed: Sealed) -> bool {
        self.downstream.demand_is_unbounded(sealed)
    }

    fn credits_by_count(&self, sealed: Sealed) -> bool {
        self.downstream.credits_by_count(sealed)
    }

    #[inline]
    fn on_next_batch_of<I>(&mut self, items: I, n: u64, sealed: Sealed) -> u64
    where
        I: Iterator<Item = T>,
    {
        self.downstream.on_next_batch_of(items, n, sealed)
    }

    fn on_next_queue(
        &mut self,
        queue: &mut std::collections::VecDeque<T>,
        sealed: Sealed,
    ) -> (u64, u64) {
        self.downstream.on_next_queue(queue, sealed)
    }

    #[inline]
    fn on_next_batch<I>(&mut self, items: I) -> u64
    where
        I: Iterator<Item = T>,
    {
        self.downstream.on_next_batch(items)
    }
}
