//! The `Publisher` trait and its boxed, object-safe form.

use super::Subscriber;

/// A provider of a potentially unbounded number of items, delivered according to the
/// demand its subscribers signal (Reactive Streams `Publisher`).
///
/// `subscribe` consumes the publisher, so operator chains monomorphise like iterator
/// chains. Cold publishers that can be subscribed again implement `Clone`.
///
/// # Contract
///
/// An implementation calls `on_subscribe` first (rule 1.9), never calls `on_next`
/// more often than requested (1.1), signals serially (1.3), ends with at most one of
/// `on_complete` / `on_error` and nothing after it (1.7), and stops and drops the
/// subscriber after `cancel` (3.12, 3.13). A publisher that delivers with
/// [`Subscriber::on_next_batch`] adds the batch credit it returns to the outstanding
/// demand, exactly as if the subscriber had called `request` with it. The conformance
/// kit (`weir::tck`, feature
/// `tck`) checks all of this for your own publishers.
#[must_use = "publishers do nothing until subscribed"]
pub trait Publisher {
    /// The items this publisher emits.
    type Item: Send + 'static;

    /// Attach `subscriber`; it receives `on_subscribe` and then items as it requests them.
    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<Self::Item> + Send + 'static;

    /// The most items this publisher, with all its upstream stages, can hold at once
    /// (principle 2: every buffer is bounded). Sources and pass-through stages hold
    /// none; a buffering stage adds its capacity to its upstream's bound (saturating).
    /// The default is 0: override it if your publisher buffers.
    fn in_flight_bound(&self) -> u64 {
        0
    }
}

/// Object-safe form of [`Publisher`], used by [`BoxPublisher`].
trait DynPublisher<T>: Send {
    fn subscribe_boxed(self: Box<Self>, subscriber: Box<dyn Subscriber<T> + Send>);
    fn bound(&self) -> u64;
}

impl<P> DynPublisher<P::Item> for P
where
    P: Publisher + Send,
{
    fn subscribe_boxed(self: Box<Self>, subscriber: Box<dyn Subscriber<P::Item> + Send>) {
        (*self).subscribe(subscriber)
    }
    fn bound(&self) -> u64 {
        self.in_flight_bound()
    }
}

/// A type-erased publisher of `T`, for heterogeneous pipelines (for example a `Vec` of
/// differently built sources). Built with [`PublisherExt::boxed`](crate::PublisherExt::boxed).
///
/// Each stage behind the box costs a virtual call per signal, so keep hot chains generic.
#[must_use = "publishers do nothing until subscribed"]
pub struct BoxPublisher<T> {
    inner: Box<dyn DynPublisher<T>>,
}

impl<T: Send + 'static> BoxPublisher<T> {
    /// Erase the type of `publisher`.
    pub fn new<P>(publisher: P) -> Self
    where
        P: Publisher<Item = T> + Send + 'static,
    {
        BoxPublisher {
            inner: Box::new(publisher),
        }
    }
}

impl<T> std::fmt::Debug for BoxPublisher<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BoxPublisher")
    }
}

impl<T: Send + 'static> Publisher for BoxPublisher<T> {
    type Item = T;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<T> + Send + 'static,
    {
        self.inner.subscribe_boxed(Box::new(subscriber))
    }

    fn in_flight_bound(&self) -> u64 {
        self.inner.bound()
    }
}
