//! `into_stream(prefetch)`: a publisher as a `futures::Stream` of `Result<T, Error>`.
//!
//! # Algorithm
//!
//! The stream is lazy: it holds the publisher until its first poll, then subscribes a
//! [`HandoffSubscriber`] that requests `prefetch` items at once. Items cross from the
//! publisher's thread to the polling task through the bounded hand-off
//! ([`handoff`](super::handoff): one queue of at most `prefetch` items, one lock and
//! at most one wake per batch). A poll that finds its own buffer empty moves every
//! queued item into it under one lock; the polls after it hand them out without
//! locking.
//!
//! # Demand contract
//!
//! Requests go upstream through the one [`Replenish`] helper: `prefetch` up front,
//! then, each time the consumer has taken `prefetch - prefetch / 4` items out, exactly
//! that many again. The consumer's items are released from the hand-off's count just
//! before they are requested again, so upstream never has more than `prefetch`
//! items requested and unconsumed, and it keeps producing into that window while the
//! consumer is busy awaiting something else: a slow loop body does not starve
//! upstream (the trap of futures-rs#2387). An upstream that delivers beyond the window
//! is cancelled and the stream ends with a rule 1.1 error.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::stream::{FusedStream, Stream};

use super::handoff::{Handoff, HandoffSubscriber, Subscribe};
use crate::demand::Replenish;
use crate::stage::window;
use crate::{Error, Publisher};

/// A publisher consumed as a [`futures::Stream`], built by
/// [`PublisherExt::into_stream`](crate::PublisherExt::into_stream).
///
/// Yields `Ok(item)` per item, then `Err(error)` once if the publisher failed, then
/// `None` for ever (it is a [`FusedStream`]). Dropping it cancels the subscription.
#[must_use = "streams do nothing unless polled"]
pub struct IntoStream<T> {
    /// The publisher, until the first poll subscribes it.
    subscribe: Option<Subscribe<T>>,
    /// The subscriber half, until the first poll hands it to the publisher.
    subscriber: Option<HandoffSubscriber<T>>,
    shared: Arc<Handoff<T>>,
    /// Items taken from the hand-off in one go, handed out one per poll (still held
    /// in the hand-off's window until released).
    taken: VecDeque<T>,
    replenish: Replenish,
    done: bool,
}

impl<T> std::fmt::Debug for IntoStream<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntoStream")
            .field("prefetch", &self.replenish.prefetch())
            .field("subscribed", &self.subscribe.is_none())
            .field("done", &self.done)
            .field("handoff", &self.shared)
            .finish()
    }
}

impl<T: Send + 'static> IntoStream<T> {
    /// # Panics
    ///
    /// If `prefetch` is outside 1..=2^30.
    pub(crate) fn new<P>(publisher: P, prefetch: u64) -> Self
    where
        P: Publisher<Item = T> + Send + 'static,
    {
        let window = window::validate("into_stream prefetch", prefetch);
        let replenish = Replenish::new(prefetch);
        let (shared, subscriber) = Handoff::new(window, replenish.initial());
        IntoStream {
            subscribe: Some(Box::new(move |subscriber| publisher.subscribe(subscriber))),
            subscriber: Some(subscriber),
            shared,
            taken: VecDeque::new(),
            replenish,
            done: false,
        }
    }
}

impl<T> IntoStream<T> {
    /// The prefetch window.
    pub fn prefetch(&self) -> u64 {
        self.replenish.prefetch()
    }
}

// Nothing is ever pinned structurally: the stream moves its fields freely.
impl<T> Unpin for IntoStream<T> {}

impl<T> Stream for IntoStream<T> {
    type Item = Result<T, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        if let (Some(subscribe), Some(subscriber)) = (this.subscribe.take(), this.subscriber.take())
        {
            // A synchronous publisher delivers its first window inside this call.
            subscribe(subscriber);
        }
        if this.taken.is_empty() {
            match this.shared.poll_take(cx, &mut this.taken) {
                Poll::Ready(Some(Ok(()))) => {}
                Poll::Ready(Some(Err(error))) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(error)));
                }
                Poll::Ready(None) => {
                    this.done = true;
                    return Poll::Ready(None);
                }
                Poll::Pending => return Poll::Pending,
            }
        }
        let item = this.taken.pop_front().expect("taken holds an item");
        if let Some(n) = this.replenish.on_consumed(1) {
            // Release before requesting: the request may deliver at once.
            this.shared.release(n as usize);
            this.shared.request(n);
        }
        Poll::Ready(Some(Ok(item)))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.done {
            (0, Some(0))
        } else {
            (0, None)
        }
    }
}

impl<T> FusedStream for IntoStream<T> {
    fn is_terminated(&self) -> bool {
        self.done
    }
}

impl<T> Drop for IntoStream<T> {
    fn drop(&mut self) {
        // Never subscribed: the publisher is dropped with `subscribe`, nothing to cancel.
        if self.subscribe.is_none() {
            self.shared.cancel();
        }
    }
}
