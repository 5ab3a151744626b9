//! The `Publisher` trait and its boxed, object-safe form.

use super::{Sealed, Subscriber, Subscription};
use crate::demand::UNBOUNDED;
use crate::metrics::DropHook;
use crate::Error;

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

    /// A handle on the statistics of the queue this publisher's own stage holds, if
    /// it holds one (an async boundary, a push source, `on_backpressure_buffer`):
    /// what the stage enters a [`Registry`](crate::metrics::Registry) with when it is
    /// [named](crate::PublisherExt::name). The default is `None`: override it if your
    /// publisher keeps a queue with a [`QueueMonitor`](crate::metrics::QueueMonitor).
    fn queue_monitor(&self) -> Option<crate::metrics::QueueMonitor> {
        None
    }

    /// weir's own stages only (the argument cannot be named outside the crate): true
    /// when this publisher and every stage upstream of it can run as one loop in the
    /// caller's thread ([`fold_fused`](Publisher::fold_fused)): a synchronous source
    /// (`range`, `from_iter`) and stages that run nothing between the source and their
    /// downstream but the user's closures (`map`, `filter`, `filter_map`, `inspect`),
    /// or a `merge` of such chains. The default, false, is always correct.
    #[doc(hidden)]
    fn fuses(&self, _sealed: Sealed) -> bool {
        false
    }

    /// weir's own stages only (sealed, as above): fold every item into `init` with
    /// `f`, in the caller's thread, when [`fuses`](Publisher::fuses) said so. The chain
    /// then compiles like an `Iterator` chain: the source's loop with each stage's
    /// closure nested in it. No subscription is made and no demand exchanged: between
    /// the source and the fold nothing runs that could observe either, and the fold
    /// takes every item. Panics unwind to the caller of this method (`sink::fold`
    /// catches them). The default subscribes an unbounded fold and waits for it, which
    /// is correct for any publisher.
    #[doc(hidden)]
    fn fold_fused<A, F>(self, init: A, f: F, _sealed: Sealed) -> Result<A, Error>
    where
        Self: Sized,
        A: Send + 'static,
        F: FnMut(A, Self::Item) -> A + Send + 'static,
    {
        let (subscriber, handle) = crate::sink::fold_subscriber("fold", UNBOUNDED, init, f);
        self.subscribe(subscriber);
        handle.wait()
    }
}

/// Object-safe form of [`Publisher`], used by [`BoxPublisher`].
trait DynPublisher<T>: Send {
    fn subscribe_boxed(self: Box<Self>, subscriber: ErasedSubscriber<T>);
    fn bound(&self) -> u64;
    fn monitor(&self) -> Option<crate::metrics::QueueMonitor>;
}

impl<P> DynPublisher<P::Item> for P
where
    P: Publisher + Send,
{
    fn subscribe_boxed(self: Box<Self>, subscriber: ErasedSubscriber<P::Item>) {
        (*self).subscribe(subscriber)
    }
    fn bound(&self) -> u64 {
        self.in_flight_bound()
    }
    fn monitor(&self) -> Option<crate::metrics::QueueMonitor> {
        self.queue_monitor()
    }
}

/// Object-safe form of [`Subscriber`]: what a [`BoxPublisher`] hands its publisher.
/// Unlike `Box<dyn Subscriber<T>>`, whose batches fall back to one virtual `on_next`
/// per item, it passes a batch on whole (its items behind one `&mut dyn Iterator`),
/// so the subscriber's own `on_next_batch` settles its bookkeeping once per batch.
trait DynSubscriber<T>: Send {
    fn on_subscribe(&mut self, subscription: Subscription);
    fn on_next(&mut self, item: T);
    fn on_next_dyn(&mut self, items: &mut dyn Iterator<Item = T>) -> u64;
    fn on_error(&mut self, error: Error);
    fn on_complete(&mut self);
    fn drop_hook(&self) -> Option<DropHook>;
    fn stops_batches_itself(&self) -> bool;
}

impl<T, S: Subscriber<T> + Send> DynSubscriber<T> for S {
    fn on_subscribe(&mut self, subscription: Subscription) {
        Subscriber::on_subscribe(self, subscription)
    }
    fn on_next(&mut self, item: T) {
        Subscriber::on_next(self, item)
    }
    fn on_next_dyn(&mut self, items: &mut dyn Iterator<Item = T>) -> u64 {
        Subscriber::on_next_batch(self, items)
    }
    fn on_error(&mut self, error: Error) {
        Subscriber::on_error(self, error)
    }
    fn on_complete(&mut self) {
        Subscriber::on_complete(self)
    }
    fn drop_hook(&self) -> Option<DropHook> {
        Subscriber::drop_hook(self)
    }
    fn stops_batches_itself(&self) -> bool {
        Subscriber::stops_batches_itself(self)
    }
}

/// The subscriber behind a [`BoxPublisher`]'s box (see [`DynSubscriber`]).
struct ErasedSubscriber<T>(Box<dyn DynSubscriber<T>>);

impl<T> Subscriber<T> for ErasedSubscriber<T> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        self.0.on_subscribe(subscription)
    }
    fn on_next(&mut self, item: T) {
        self.0.on_next(item)
    }
    fn on_error(&mut self, error: Error) {
        self.0.on_error(error)
    }
    fn on_complete(&mut self) {
        self.0.on_complete()
    }
    fn drop_hook(&self) -> Option<DropHook> {
        self.0.drop_hook()
    }
    // Batches reach the subscriber's own `on_next_batch`, so its answer holds here.
    fn stops_batches_itself(&self) -> bool {
        self.0.stops_batches_itself()
    }
    fn on_next_batch<I: Iterator<Item = T>>(&mut self, mut items: I) -> u64 {
        self.0.on_next_dyn(&mut items)
    }
}

/// A type-erased publisher of `T`, for heterogeneous pipelines (for example a `Vec` of
/// differently built sources). Built with [`PublisherExt::boxed`](crate::PublisherExt::boxed).
///
/// Each stage behind the box costs a virtual call per signal (a batch of items is one
/// signal, its items then one virtual call each), so keep hot chains generic.
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
        self.inner
            .subscribe_boxed(ErasedSubscriber(Box::new(subscriber)))
    }

    fn in_flight_bound(&self) -> u64 {
        self.inner.bound()
    }

    fn queue_monitor(&self) -> Option<crate::metrics::QueueMonitor> {
        self.inner.monitor()
    }
}
