//! The `Subscriber` trait.

use std::collections::VecDeque;

use super::Subscription;
use crate::metrics::DropHook;
use crate::Error;

/// The receiver of a publisher's signals (Reactive Streams `Subscriber`).
///
/// Signals arrive in the order `on_subscribe on_next* (on_error | on_complete)?`.
/// `&mut self` makes serial signalling (rules 1.3 and 2.7) structural.
///
/// # Contract
///
/// * Nothing arrives until the subscriber calls [`Subscription::request`] (2.1).
/// * A second `on_subscribe` must be answered by cancelling the new subscription (2.5);
///   [`SubscriptionSlot`](crate::drain::SubscriptionSlot) does this for you.
/// * `on_complete` and `on_error` must not call the subscription (2.3) and may arrive
///   without any request (2.9, 2.10).
/// * The methods must return normally (2.13): a subscriber that panics is treated as
///   cancelled by weir's publishers.
pub trait Subscriber<T> {
    /// The first signal: the handle to request items with and to cancel.
    fn on_subscribe(&mut self, subscription: Subscription);

    /// One item; only ever delivered against outstanding demand.
    fn on_next(&mut self, item: T);

    /// The stream failed; no further signals follow.
    fn on_error(&mut self, error: Error);

    /// The stream ended; no further signals follow.
    fn on_complete(&mut self);

    /// The pipeline's drop hook, asked for by lossy stages upstream when they are
    /// subscribed. Stages that do not drop items forward the question downstream;
    /// [`PublisherExt::on_dropped`](crate::PublisherExt::on_dropped) answers it.
    /// The default is `None` (no hook: drops are still made, and logged).
    fn drop_hook(&self) -> Option<DropHook> {
        None
    }

    /// True when this subscriber's [`on_next_batch`](Subscriber::on_next_batch) needs
    /// no help to stop after a cancel made from inside the batch: it never cancels
    /// there, or it stops consuming the batch by itself. weir's publishers then hand it
    /// batches as they are (the fused path of a synchronous chain).
    ///
    /// The default, false, suits a subscriber that implements only
    /// [`on_next`](Subscriber::on_next): weir's publishers end the batch's iterator as
    /// soon as the subscription is cancelled, so a cancel made inside `on_next` is
    /// followed by no further item. Operators answer for their downstream.
    fn stops_batches_itself(&self) -> bool {
        false
    }

    /// weir's own stages only (the argument cannot be named outside the crate, so this
    /// cannot be overridden elsewhere): true when this subscriber asked for unbounded
    /// demand and passes on no bounded demand of its own, so that batch credit returned
    /// through it changes nothing. A stage that returns credit for items it swallows
    /// (`filter`, `filter_map`) then skips counting them, which leaves a synchronous
    /// chain's fused loop free of per-item bookkeeping. Sealed because a wrong `true`
    /// would withhold credit a bounded subscriber needs, and stall its stream; the
    /// default, false, is always correct.
    #[doc(hidden)]
    fn demand_is_unbounded(&self, _sealed: sealed::Sealed) -> bool {
        false
    }

    /// weir's own stages only (sealed, as above): true when this subscriber, handed a
    /// batch through [`on_next_batch_of`](Subscriber::on_next_batch_of), returns the
    /// batch credit for all of the batch's items, whether or not each reaches it
    /// (stages between that swallow items then hand them on without counting them).
    /// It must consume every item it is handed, or end the stream. A wrong `true`
    /// would return credit twice for swallowed items (a rule 1.1 breach upstream);
    /// the default, false, is always correct.
    #[doc(hidden)]
    fn credits_by_count(&self, _sealed: sealed::Sealed) -> bool {
        false
    }

    /// weir's own stages only (sealed, as above): the next delivery is a single item
    /// handed over on its own (a channel's direct hand-off, a hub's fan-out of one
    /// arrival). A sink that a waiting thread could serve in batches counts these
    /// (see `SinkHandle::wait`); the default ignores it. Called before the
    /// delivery, outside any batch's path.
    #[doc(hidden)]
    fn handed_one(&mut self, _sealed: sealed::Sealed) {}

    /// weir's own stages only (sealed, as above): [`on_next_batch`] of exactly `n`
    /// items. A subscriber that [`credits_by_count`](Subscriber::credits_by_count)
    /// returns the credit for `n` items without counting them one by one; a 1:1 stage
    /// passes `n` on, and a swallowing one passes it on only to a subscriber that
    /// credits by count (and then does not count what it swallows). The default hands
    /// the items to [`on_next_batch`] and ignores `n`.
    ///
    /// [`on_next_batch`]: Subscriber::on_next_batch
    #[doc(hidden)]
    #[must_use = "the returned batch credit is demand: a publisher must add it as if requested"]
    fn on_next_batch_of<I>(&mut self, items: I, n: u64, _sealed: sealed::Sealed) -> u64
    where
        I: Iterator<Item = T>,
        Self: Sized,
    {
        let _ = n;
        self.on_next_batch(items)
    }

    /// weir's own stages only (sealed, as above): every item of `queue` as one batch
    /// (the caller checked that they fit the outstanding demand); returns how many the
    /// subscriber took and the batch credit. Items it leaves are dropped. The default
    /// is [`on_next_batch`] over the queue's drain, counting what it takes; a
    /// type-erased subscriber (the channel's) overrides it so that the loop runs
    /// monomorphised behind one virtual call per batch instead of one per item.
    ///
    /// [`on_next_batch`]: Subscriber::on_next_batch
    #[doc(hidden)]
    #[must_use = "the returned batch credit is demand: a publisher must add it as if requested"]
    fn on_next_queue(&mut self, queue: &mut VecDeque<T>, _sealed: sealed::Sealed) -> (u64, u64)
    where
        Self: Sized,
    {
        let mut taken = 0u64;
        let credit = self.on_next_batch(queue.drain(..).inspect(|_| taken += 1));
        (taken, credit)
    }

    /// Several items at once, never more than the outstanding demand. Each item counts
    /// as one `on_next` for rule 1.1.
    ///
    /// Returns **batch credit**: further demand, exactly as if the subscriber had called
    /// [`Subscription::request`] with it on its own subscription at the end of the
    /// batch (0: none). A batching subscriber replenishes this way, so a synchronous
    /// chain settles demand once per batch with no call back into the publisher and no
    /// atomic operation. Calling `request` instead (or as well) is equally correct.
    ///
    /// The default calls [`on_next`](Subscriber::on_next) per item and returns 0.
    /// Operators and sinks override it to settle their bookkeeping once per batch,
    /// which lets a synchronous chain compile to one fused loop. An implementation
    /// should consume the whole iterator unless it cancels; items it leaves behind are
    /// dropped.
    #[must_use = "the returned batch credit is demand: a publisher must add it as if requested"]
    fn on_next_batch<I>(&mut self, items: I) -> u64
    where
        I: Iterator<Item = T>,
        Self: Sized,
    {
        for item in items {
            self.on_next(item);
        }
        0
    }
}

/// The sealed argument of `Subscriber::demand_is_unbounded`: its type is public but
/// cannot be named outside the crate.
pub(crate) mod sealed {
    /// The argument of [`Subscriber::demand_is_unbounded`](super::Subscriber): only
    /// weir can make one, so only weir's stages answer that question.
    #[derive(Clone, Copy, Debug)]
    pub struct Sealed(());

    impl Sealed {
        /// The one way to make one (crate-private).
        pub(crate) const NEW: Sealed = Sealed(());
    }
}

impl<T, S: Subscriber<T> + ?Sized> Subscriber<T> for Box<S> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        (**self).on_subscribe(subscription)
    }
    fn on_next(&mut self, item: T) {
        (**self).on_next(item)
    }
    fn on_error(&mut self, error: Error) {
        (**self).on_error(error)
    }
    fn on_complete(&mut self) {
        (**self).on_complete()
    }
    fn drop_hook(&self) -> Option<DropHook> {
        (**self).drop_hook()
    }
    fn demand_is_unbounded(&self, sealed: sealed::Sealed) -> bool {
        (**self).demand_is_unbounded(sealed)
    }
    fn handed_one(&mut self, sealed: sealed::Sealed) {
        (**self).handed_one(sealed)
    }
}
