//! The `Subscriber` trait.

use super::Subscription;
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

    /// Several items at once, never more than the outstanding demand. Each item counts
    /// as one `on_next` for rule 1.1.
    ///
    /// The default calls [`on_next`](Subscriber::on_next) per item. Operators and sinks
    /// override it to settle their bookkeeping once per batch, which lets a synchronous
    /// chain compile to one fused loop. An implementation should consume the whole
    /// iterator unless it cancels; items it leaves behind stay with the publisher.
    fn on_next_batch<I>(&mut self, items: I)
    where
        I: Iterator<Item = T>,
        Self: Sized,
    {
        for item in items {
            self.on_next(item);
        }
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
}
