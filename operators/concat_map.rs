//! `concat_map`: map each item to a publisher and emit the inner publishers one after
//! another, in order.
//!
//! # Algorithm
//!
//! [`FlatMap`] with a concurrency of 1: one lane slot, so the outer source is asked
//! for 1 item, and for 1 more only once the current inner publisher has completed and
//! its lane is drained. Only one inner is ever live, so the order of the outer items
//! is kept. States and races: those of [`FlatMap`] (one lane).

use super::flat_map::FlatMap;
use crate::stage::window;
use crate::{Publisher, Subscriber};

/// Publisher for the [`concat_map`](crate::PublisherExt::concat_map) method.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct ConcatMap<P, F> {
    inner: FlatMap<P, F>,
}

impl<P, F> ConcatMap<P, F> {
    pub(crate) fn new(source: P, f: F, prefetch: u64) -> Self {
        window::validate("concat_map prefetch", prefetch);
        ConcatMap {
            inner: FlatMap::new(source, f, 1, prefetch).named("concat_map"),
        }
    }
}

impl<P, F, Q> Publisher for ConcatMap<P, F>
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
        self.inner.subscribe(subscriber)
    }

    fn in_flight_bound(&self) -> u64 {
        self.inner.in_flight_bound()
    }
}
