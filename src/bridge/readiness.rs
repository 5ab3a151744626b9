//! Readiness for I/O producers: [`SenderReadiness::send_or_pause`], the one call a
//! socket reader makes per item so that it stops reading while the channel is paused.
//!
//! # The pattern
//!
//! A push source ([`channel`](crate::channel())) with water marks tells its producers
//! [`Paused`](crate::source::channel::FlowState::Paused) once its depth reached the high mark, and
//! [`Flowing`](crate::source::channel::FlowState::Flowing) again once it fell to the low mark
//! ([`Sender::state`], [`Sender::resumed`]). An I/O producer honours that by not
//! *reading* while paused: the bytes stay in the kernel, the socket's receive window
//! closes, and TCP slows the peer down. The item in hand is still offered (it was
//! already read); the room above the high mark absorbs it.
//!
//! `send_or_pause(item)` is that loop body: offer the item (waiting for room under
//! `Backpressure`, like [`Sender::send`]); then, if the channel is paused, wait until
//! it flows again. The caller reads the next item only after it returns:
//!
//! ```text
//! loop { read a line → send_or_pause(line).await }   // no read happens while paused
//! ```
//!
//! Both steps are futures that register wakers with the channel, so they work on any
//! executor (tokio included); nothing spins and nothing blocks a thread.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::source::channel::{Resumed, SendFuture, Sender, TrySendError};

/// What [`send_or_pause`](SenderReadiness::send_or_pause) did after the item went in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterSend {
    /// The channel was not paused: read on (under an admission ladder it may be
    /// reducing or shedding: pace the reads by
    /// [`FlowState::rate_factor`](crate::source::channel::FlowState::rate_factor)).
    Flowing,
    /// The channel was paused; it flows again after `paused_for`.
    Resumed {
        /// How long the producer waited for the resume, on the channel's clock
        /// ([`ChannelBuilder::clock`](crate::source::channel::ChannelBuilder::clock)),
        /// as the monitor's blocked time is.
        paused_for: Duration,
    },
    /// The item went in, but the channel closed while the producer waited for the
    /// resume (its subscriber cancelled, or another sender closed it): stop reading.
    Closed,
}

/// Readiness helpers on a channel [`Sender`] for async producers.
pub trait SenderReadiness<T: Send + 'static> {
    /// Offer `item` (waiting for room under `Backpressure`), then wait while the
    /// channel is paused. Resolves to what happened after the send, or hands the item
    /// back like [`Sender::send`] (`Closed`; `Full` under `Reject`).
    ///
    /// ```
    /// use weir::bridge::{AfterSend, SenderReadiness};
    /// use weir::prelude::*;
    /// use weir::source::channel::{ChannelBuilder, ChannelPolicy, WaterMarks};
    ///
    /// let (tx, rx) = ChannelBuilder::new(16, ChannelPolicy::Backpressure)
    ///     .water_marks(WaterMarks::new(8, 2))
    ///     .build::<u32>();
    /// let consumer = std::thread::spawn(move || rx.collect_with(4).wait().unwrap());
    /// let pauses = futures::executor::block_on(async {
    ///     let mut pauses = 0;
    ///     for i in 0..1_000 {
    ///         // a socket reader would read item `i` here, and not while paused
    ///         if let AfterSend::Resumed { .. } = tx.send_or_pause(i).await.unwrap() {
    ///             pauses += 1;
    ///         }
    ///     }
    ///     pauses
    /// });
    /// drop(tx);
    /// assert_eq!(consumer.join().unwrap(), (0..1_000).collect::<Vec<_>>());
    /// assert!(pauses <= 1_000);
    /// ```
    fn send_or_pause(&self, item: T) -> SendOrPause<'_, T>;
}

impl<T: Send + 'static> SenderReadiness<T> for Sender<T> {
    fn send_or_pause(&self, item: T) -> SendOrPause<'_, T> {
        SendOrPause {
            sender: self,
            step: SendPhase::Sending(self.send(item)),
        }
    }
}

/// The future of [`SenderReadiness::send_or_pause`].
#[must_use = "futures do nothing unless polled"]
pub struct SendOrPause<'a, T: Send + 'static> {
    sender: &'a Sender<T>,
    step: SendPhase<'a, T>,
}

enum SendPhase<'a, T: Send + 'static> {
    Sending(SendFuture<'a, T>),
    Pausing(Resumed<'a, T>, Instant),
    Done,
}

impl<T: Send + 'static> fmt::Debug for SendOrPause<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let step = match self.step {
            SendPhase::Sending(_) => "sending",
            SendPhase::Pausing(..) => "paused",
            SendPhase::Done => "done",
        };
        f.debug_struct("SendOrPause").field("step", &step).finish()
    }
}

impl<T: Send + 'static> Future for SendOrPause<'_, T> {
    type Output = Result<AfterSend, TrySendError<T>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // Both inner futures are `Unpin`, so this one is too.
        let this = self.get_mut();
        loop {
            match &mut this.step {
                SendPhase::Sending(send) => match Pin::new(send).poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Err(back)) => {
                        this.step = SendPhase::Done;
                        return Poll::Ready(Err(back));
                    }
                    Poll::Ready(Ok(())) => {
                        if !this.sender.state().is_paused() {
                            this.step = SendPhase::Done;
                            return Poll::Ready(Ok(AfterSend::Flowing));
                        }
                        let since = this.sender.now();
                        this.step = SendPhase::Pausing(this.sender.resumed(), since);
                    }
                },
                SendPhase::Pausing(resumed, since) => {
                    let outcome = match Pin::new(resumed).poll(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Ok(())) => AfterSend::Resumed {
                            paused_for: this.sender.now().saturating_duration_since(*since),
                        },
                        Poll::Ready(Err(_closed)) => AfterSend::Closed,
                    };
                    this.step = SendPhase::Done;
                    return Poll::Ready(Ok(outcome));
                }
                SendPhase::Done => panic!("SendOrPause polled after completion"),
            }
        }
    }
}
