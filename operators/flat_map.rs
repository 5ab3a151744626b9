//! `flat_map`: map each item to a publisher and merge the inner publishers, at most
//! `concurrency` at a time.
//!
//! # Algorithm
//!
//! The merging stage of `merge.rs` with an outer source: [`Outer`] subscribes to it,
//! asks for `concurrency` items up front, and turns each item into an inner publisher
//! (`f` under a panic guard) that it connects to a new lane of the stage's lane set
//! (a bounded window of `prefetch`, replenished by the 75% rule). The merging stage
//! asks the outer source for 1 more each time an inner lane finished and was drained,
//! so live inner subscriptions never exceed `concurrency` and at most
//! `concurrency × prefetch` items are buffered. The outer source's end is recorded in
//! the lane set: the stage completes once it completed and every lane finished.
//!
//! The outer subscriber follows [`Upstream`] (`Idle` → `Active` → `Done`, also after
//! `f` panicked, an inner `subscribe` panicked, or the outer source over-delivered).
//! `f` and inner `subscribe` run on the outer source's thread; inner sources deliver
//! on theirs; both only fill lanes and ask the core for a pass, which makes every
//! downstream signal and every replenishing request.

use std::sync::Arc;

use super::merge::{connect, start};
use crate::drain::Upstream;
use crate::guard::catch;
use crate::metrics::DropHook;
use crate::stage::core::CoreHandle;
use crate::stage::lanes::LaneSet;
use crate::stage::window;
use crate::{Error, Publisher, Subscriber, Subscription};

/// Largest concurrency accepted: one slot per inner is allocated up front.
const MAX_CONCURRENCY: u64 = 1 << 16;

/// Publisher for the [`flat_map`](crate::PublisherExt::flat_map) method.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct FlatMap<P, F> {
    source: P,
    f: F,
    concurrency: u64,
    prefetch: u64,
}

impl<P, F> FlatMap<P, F> {
    pub(crate) fn new(source: P, f: F, concurrency: u64, prefetch: u64) -> Self {
        assert!(
            (1..=MAX_CONCURRENCY).contains(&concurrency),
            "flat_map concurrency must be in 1..=2^16 (got {concurrency})"
        );
        window::validate("flat_map prefetch", prefetch);
        FlatMap {
            source,
            f,
            concurrency,
            prefetch,
        }
    }

    /// Bound of the buffers this stage holds itself.
    fn own_bound(&self) -> u64 {
        self.concurrency.saturating_mul(self.prefetch)
    }
}

impl<P, F, Q> Publisher for FlatMap<P, F>
where
    P: Publisher,
    F: FnMut(P::Item) -> Q + Send + 'static,
    Q: Publisher,
{
    type Item = Q::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<Q::Item> + Send + 'static,
    {
        let concurrency = usize::try_from(self.concurrency).expect("validated to 2^16");
        let (source, f, window) = (self.source, self.f, self.concurrency);
        start(
            "flat_map",
            subscriber,
            concurrency,
            self.prefetch as usize,
            true,
            move |set, core| {
                source.subscribe(Outer {
                    f,
                    set: set.clone(),
                    core: core.clone(),
                    window,
                    upstream: Upstream::Idle,
                });
            },
        );
    }

    fn in_flight_bound(&self) -> u64 {
        self.source
            .in_flight_bound()
            .saturating_add(self.own_bound())
    }
}

/// The subscriber to the outer source: maps each item and connects its publisher.
struct Outer<F, U, N> {
    /// The user's closure.
    f: F,
    /// The inner lanes (shared with the drain).
    set: Arc<LaneSet<U>>,
    /// Asked for a pass when the outer source ends.
    core: Arc<N>,
    /// The first request: the concurrency.
    window: u64,
    /// Life cycle; `Done` also after `f` panicked or the source over-delivered.
    upstream: Upstream,
}

impl<F, U, N: CoreHandle> Outer<F, U, N> {
    /// End the outer side with `error` (cancelling the outer source).
    fn fail(&mut self, error: Error) {
        if self.upstream.finish() {
            // Through the shared slot, so the drain's own cancel is not a second call.
            self.set.outer.cancel();
            self.set.end_outer(Err(error));
            self.core.signal();
        }
    }
}

impl<T, F, Q, N> Subscriber<T> for Outer<F, Q::Item, N>
where
    F: FnMut(T) -> Q,
    Q: Publisher,
    N: CoreHandle,
{
    fn on_subscribe(&mut self, subscription: Subscription) {
        if self.upstream.accept(&subscription) && self.set.outer.set(subscription.clone()) {
            subscription.request(self.window);
        }
    }

    fn on_next(&mut self, item: T) {
        if !self.upstream.is_active() {
            return;
        }
        match catch(|| (self.f)(item)) {
            Ok(inner) => {
                if !connect(&self.set, inner, &self.core) && !self.set.is_closed() {
                    self.fail(Error::spec_violation(
                        "1.1",
                        "the outer source of flat_map delivered more items than requested (rule 1.1)",
                    ));
                }
            }
            Err(error) => self.fail(error),
        }
    }

    fn on_error(&mut self, error: Error) {
        if self.upstream.finish() {
            self.set.end_outer(Err(error));
            self.core.signal();
        }
    }

    fn on_complete(&mut self) {
        if self.upstream.finish() {
            self.set.end_outer(Ok(()));
            self.core.signal();
        }
    }

    fn drop_hook(&self) -> Option<DropHook> {
        self.set.hook.clone()
    }
}
