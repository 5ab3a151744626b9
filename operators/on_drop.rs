//! `on_drop`: implementation notes. The user contract is on
//! [`PublisherExt::on_drop`](crate::PublisherExt::on_drop).
//!
//! `on_dropped`'s transparent subscriber, which answers [`Subscriber::drop_hook`]
//! for the lossy stages above it. The hook it answers with is
//! built once, when it is subscribed, from the closure and the hook found below it
//! (`DropHook::typed`): a dropped item of the stage's own type goes to the closure;
//! one of another type (from a lossy stage above a `map`) goes on to the hook below;
//! counts go to the counters below, when there are any, so an erased `on_dropped`
//! further down still counts every drop.

use std::sync::Arc;

use super::on_dropped::OnDroppedSubscriber;
use crate::metrics::{DropHook, DroppedItem, Drops};
use crate::{Publisher, Subscriber};

/// Publisher for the [`on_drop`](crate::PublisherExt::on_drop) method.
#[must_use = "publishers do nothing until subscribed"]
pub struct OnDrop<P, F> {
    source: P,
    f: Arc<F>,
}

impl<P: Clone, F> Clone for OnDrop<P, F> {
    fn clone(&self) -> Self {
        OnDrop {
            source: self.source.clone(),
            f: self.f.clone(),
        }
    }
}

impl<P: std::fmt::Debug, F> std::fmt::Debug for OnDrop<P, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnDrop")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl<P, F> OnDrop<P, F> {
    pub(crate) fn new(source: P, f: F) -> Self {
        OnDrop {
            source,
            f: Arc::new(f),
        }
    }
}

impl<P, F> Publisher for OnDrop<P, F>
where
    P: Publisher,
    P::Item: 'static,
    F: Fn(DroppedItem<P::Item>) + Send + Sync + 'static,
{
    type Item = P::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<P::Item> + Send + 'static,
    {
        let next = subscriber.drop_hook();
        let drops = next
            .as_ref()
            .map_or_else(Drops::new, |hook| hook.drops().clone());
        let f = self.f;
        let hook = DropHook::typed(drops, next, move |dropped| f(dropped));
        self.source
            .subscribe(OnDroppedSubscriber::new(subscriber, hook))
    }

    fn in_flight_bound(&self) -> u64 {
        self.source.in_flight_bound()
    }
}
