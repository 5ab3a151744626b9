//! `from_receiver(rx)`: a tokio `mpsc::Receiver` as a publisher (feature `tokio`).
//!
//! Built on [`from_stream`](super::from_stream())'s machinery: the receiver is wrapped
//! in a minimal `Stream` that calls `poll_recv` (no tokio-stream dependency), so it
//! is polled only while there is demand, on one poll task at a time, and the
//! receiver is dropped (closing the channel: senders see `SendError`) within one
//! scheduler turn of `cancel`. The channel's own capacity is the only buffer.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::mpsc::Receiver;

use super::from_stream::{current_tokio, subscribe, Plain, StreamSource};
use crate::runtime::{Scheduler, Tokio};
use crate::{Publisher, Subscriber};

/// The receiver as a stream: `poll_recv` per poll.
#[derive(Debug)]
struct Recv<T>(Receiver<T>);

impl<T> futures::Stream for Recv<T> {
    type Item = T;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        self.get_mut().0.poll_recv(cx)
    }
}

/// A publisher of what arrives on a tokio `mpsc` channel, built by [`from_receiver`]
/// and [`from_receiver_on`]. It completes when every sender is dropped and the
/// channel is empty.
#[derive(Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct FromReceiver<T, C = Tokio> {
    receiver: Receiver<T>,
    scheduler: C,
}

/// A publisher of the items sent on `receiver`'s channel, polled (with `poll_recv`)
/// on the tokio runtime this is called in, only while there is demand.
///
/// The channel's capacity is the bound: while the subscriber has no demand, senders
/// wait (`send().await`) or get `Full` (`try_send`). `cancel` drops the receiver
/// within one scheduler turn, so senders then see the channel closed.
///
/// # Panics
///
/// Outside a tokio runtime: "weir::from_receiver must be called inside a tokio
/// runtime (or use from_receiver_on with an explicit scheduler)".
///
/// # Examples
///
/// ```
/// use weir::prelude::*;
///
/// # let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).build().unwrap();
/// # rt.block_on(async {
/// let (tx, rx) = tokio::sync::mpsc::channel(4);
/// tokio::spawn(async move {
///     for i in 0..10u32 {
///         tx.send(i).await.unwrap();
///     }
/// });
/// let sum = weir::from_receiver(rx).fold(0, |a, x| a + x);
/// let sum = tokio::task::spawn_blocking(move || sum.wait()).await.unwrap().unwrap();
/// assert_eq!(sum, 45);
/// # });
/// ```
pub fn from_receiver<T: Send + 'static>(receiver: Receiver<T>) -> FromReceiver<T, Tokio> {
    from_receiver_on(receiver, current_tokio("from_receiver"))
}

/// [`from_receiver`] polled on `scheduler`.
pub fn from_receiver_on<T, C>(receiver: Receiver<T>, scheduler: C) -> FromReceiver<T, C>
where
    T: Send + 'static,
    C: Scheduler + Clone,
{
    FromReceiver {
        receiver,
        scheduler,
    }
}

impl<T, C> Publisher for FromReceiver<T, C>
where
    T: Send + 'static,
    C: Scheduler + Clone,
{
    type Item = T;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<T> + Send + 'static,
    {
        let pinned = Plain::new(Recv(self.receiver)).pin();
        subscribe::<Plain<Recv<T>>, S, C>(pinned, self.scheduler, subscriber)
    }
}
