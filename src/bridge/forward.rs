//! `forward(sink)`: drive a `futures::Sink` with a publisher's items, using the
//! sink's readiness as demand.
//!
//! # Algorithm
//!
//! A future (lazy: it subscribes on its first poll) that owns the sink and the
//! consumer half of a one-slot [`handoff`](super::handoff). Each turn of its loop:
//!
//! 1. An item in hand goes to the sink: `poll_ready` (again, so a flush in between is
//!    harmless), then `start_send`.
//! 2. Otherwise it takes what upstream delivered: an item, or the end. Completion
//!    closes the sink (`poll_close`) and resolves `Ok(())`; an upstream error resolves
//!    `Err` at once (the sink is not closed: it is dropped with the future).
//! 3. With nothing requested, it asks the sink: when `poll_ready` says `Ready`, it
//!    requests exactly one item.
//! 4. With an item requested and not arrived, it flushes what it sent and waits.
//!
//! # Demand contract
//!
//! **One item per readiness**: upstream is asked for an item only after the sink
//! reported room for it, so outstanding demand is never more than 1 and the sink
//! never sees an item it had no room for. Nothing is buffered besides the one item
//! in hand. A sink error cancels upstream and resolves to the error.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::Sink;

use super::handoff::{into_error, Handoff, HandoffSubscriber, Subscribe};
use crate::{Error, Publisher};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ForwardPhase {
    /// Moving items.
    Running,
    /// Upstream completed: closing the sink.
    Closing,
    /// Resolved.
    Done,
}

/// The future returned by [`PublisherExt::forward`](crate::PublisherExt::forward):
/// resolves to `Ok(())` once upstream completed and the sink closed, or to the first
/// error of either side. Dropping it cancels upstream.
#[must_use = "futures do nothing unless polled"]
pub struct Forward<T, K> {
    subscribe: Option<Subscribe<T>>,
    subscriber: Option<HandoffSubscriber<T>>,
    shared: Arc<Handoff<T>>,
    sink: Pin<Box<K>>,
    /// The item taken from upstream and not yet accepted by the sink.
    held: Option<T>,
    /// One item is requested and has not arrived.
    requested: bool,
    /// Items were sent since the last flush.
    dirty: bool,
    phase: ForwardPhase,
}

impl<T, K> std::fmt::Debug for Forward<T, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forward")
            .field("phase", &self.phase)
            .field("requested", &self.requested)
            .field("holding", &self.held.is_some())
            .finish()
    }
}

impl<T: Send + 'static, K> Forward<T, K> {
    pub(crate) fn new<P>(publisher: P, sink: K) -> Self
    where
        P: Publisher<Item = T> + Send + 'static,
    {
        // A one-item window that starts empty: demand comes from the sink.
        let (shared, subscriber) = Handoff::new(1, 0);
        Forward {
            subscribe: Some(Box::new(move |subscriber| publisher.subscribe(subscriber))),
            subscriber: Some(subscriber),
            shared,
            sink: Box::pin(sink),
            held: None,
            requested: false,
            dirty: false,
            phase: ForwardPhase::Running,
        }
    }
}

// Nothing is pinned structurally: the sink is boxed, the held item moves freely.
impl<T, K> Unpin for Forward<T, K> {}

impl<T, K> Forward<T, K>
where
    K: Sink<T>,
    K::Error: std::error::Error + Send + Sync + 'static,
{
    /// The sink failed: cancel upstream and resolve with its error.
    fn fail(&mut self, error: K::Error) -> Poll<Result<(), Error>> {
        self.phase = ForwardPhase::Done;
        self.shared.cancel();
        Poll::Ready(Err(into_error(error)))
    }

    /// Flush what was sent, if anything; `Some` when the sink failed.
    fn flush(&mut self, cx: &mut Context<'_>) -> Option<Poll<Result<(), Error>>> {
        if self.dirty {
            match self.sink.as_mut().poll_flush(cx) {
                Poll::Ready(Ok(())) => self.dirty = false,
                Poll::Ready(Err(error)) => return Some(self.fail(error)),
                Poll::Pending => {}
            }
        }
        None
    }
}

impl<T, K> Future for Forward<T, K>
where
    K: Sink<T>,
    K::Error: std::error::Error + Send + Sync + 'static,
{
    type Output = Result<(), Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        let this = self.get_mut();
        if let (Some(subscribe), Some(subscriber)) = (this.subscribe.take(), this.subscriber.take())
        {
            subscribe(subscriber);
        }
        loop {
            match this.phase {
                // Its result (perhaps an error) went out already: a second
                // `Ok(())` would hide it.
                ForwardPhase::Done => panic!("forward: polled after it returned its result"),
                ForwardPhase::Closing => {
                    return match this.sink.as_mut().poll_close(cx) {
                        Poll::Ready(Ok(())) => {
                            this.phase = ForwardPhase::Done;
                            Poll::Ready(Ok(()))
                        }
                        Poll::Ready(Err(error)) => this.fail(error),
                        Poll::Pending => Poll::Pending,
                    };
                }
                ForwardPhase::Running => {}
            }
            // 1. The item in hand goes to the sink.
            if let Some(item) = this.held.take() {
                match this.sink.as_mut().poll_ready(cx) {
                    Poll::Ready(Ok(())) => {}
                    Poll::Ready(Err(error)) => return this.fail(error),
                    Poll::Pending => {
                        this.held = Some(item);
                        if let Some(failed) = this.flush(cx) {
                            return failed;
                        }
                        return Poll::Pending;
                    }
                }
                if let Err(error) = this.sink.as_mut().start_send(item) {
                    return this.fail(error);
                }
                this.dirty = true;
                continue;
            }
            // 2. What upstream delivered.
            match this.shared.poll_pop(cx) {
                Poll::Ready(Some(Ok(item))) => {
                    this.requested = false;
                    this.held = Some(item);
                    continue;
                }
                Poll::Ready(Some(Err(error))) => {
                    this.phase = ForwardPhase::Done;
                    return Poll::Ready(Err(error));
                }
                Poll::Ready(None) => {
                    this.phase = ForwardPhase::Closing;
                    continue;
                }
                Poll::Pending => {}
            }
            // 3. Nothing requested: the sink's readiness is the demand.
            if !this.requested {
                match this.sink.as_mut().poll_ready(cx) {
                    Poll::Ready(Ok(())) => {
                        this.requested = true;
                        // A synchronous upstream delivers inside this call.
                        this.shared.request(1);
                        continue;
                    }
                    Poll::Ready(Err(error)) => return this.fail(error),
                    Poll::Pending => {
                        // A buffering sink may need a flush to make room.
                        if let Some(failed) = this.flush(cx) {
                            return failed;
                        }
                        return Poll::Pending;
                    }
                }
            }
            // 4. Waiting for upstream: flush what was sent meanwhile.
            if let Some(failed) = this.flush(cx) {
                return failed;
            }
            return Poll::Pending;
        }
    }
}

impl<T, K> Drop for Forward<T, K> {
    fn drop(&mut self) {
        if self.subscribe.is_none() && self.phase != ForwardPhase::Done {
            self.shared.cancel();
        }
    }
}
