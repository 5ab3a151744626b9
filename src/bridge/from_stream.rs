//! `from_stream_on(stream, scheduler)` (and `from_stream`, `try_from_stream*`,
//! `from_receiver*`): a `futures::Stream` as a publisher that polls only while there
//! is demand.
//!
//! # Algorithm
//!
//! The stream is one more emitter of the engine room's emitter stage, driven on the
//! scheduler: whoever gains ownership of the subscription's drain loop hands it to
//! **one poll task**, and every other reason to run (a `request`, the stream's waker
//! firing, a request made from inside `on_next`) only registers with the loop, which
//! runs another pass for it. So at most one poll task is in flight and signals are
//! serial (rule 1.3).
//!
//! A pass hands the subscriber a *lazy* batch: an iterator whose `next` polls the
//! stream once, at most `min(demand, CHUNK)` times, with a waker that schedules the
//! next pass when the stream is ready again. A stream that is `Pending` ends the pass
//! and its unused demand waits for the next one; a stream that yields `None`
//! completes the subscriber. A task that has emitted its budget yields to the
//! scheduler's other tasks and continues in a new one.
//!
//! # Demand contract
//!
//! The stream is polled only by the batch iterator, and the iterator is bounded by
//! the demand taken for the pass: **never a poll without outstanding demand**, and no
//! item is ever buffered (nothing is spawned to read ahead; in-flight bound 0). The
//! price: when the demand runs out exactly at the stream's last item, completion is
//! only seen on the poll the next `request` allows (a stream cannot be asked "are you
//! done?" without taking an item nobody asked for). Batch credit returned by the
//! subscriber is added to the pass's demand with plain arithmetic.
//!
//! # Cancellation
//!
//! `cancel` sets the flag and enters the `Wip`; if no pass is running, the cancelling
//! thread drops the stream and the subscriber on the spot, otherwise the running pass
//! sees the flag before its next poll and drops them. Either way the stream (and what
//! it holds: a channel receiver, a socket) is released within one scheduler turn.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::stream::Stream;

use super::handoff::into_error;
use crate::guard::catch_in;
use crate::runtime::Scheduler;
use crate::stage::emitter::{self, Emitted, Emitter};
use crate::stage::Cx;
use crate::{Error, Publisher, Subscriber};

/// A stream whose items are emitted as they are ([`from_stream_on`]).
#[derive(Clone, Debug)]
pub struct Plain<S>(S);

#[cfg(feature = "tokio")]
impl<S> Plain<S> {
    pub(crate) fn new(stream: S) -> Self {
        Plain(stream)
    }
}

/// A stream of `Result<T, E>` whose first error ends the stream
/// ([`try_from_stream_on`]).
#[derive(Clone, Debug)]
pub struct Fallible<S>(S);

/// A publisher over a [`futures::Stream`], polled on a [`Scheduler`] only while there
/// is demand. Built by [`from_stream_on`], [`try_from_stream_on`] and (feature
/// `tokio`) `from_stream`, `try_from_stream`.
///
/// `Clone` when the stream and the scheduler are: each clone subscribes its own copy
/// of the stream.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct FromStream<S, C> {
    stream: S,
    scheduler: C,
}

impl<S, C> FromStream<S, C> {
    pub(crate) fn build(stream: S, scheduler: C) -> Self {
        FromStream { stream, scheduler }
    }
}

/// A publisher of the items of `stream`, polled on `scheduler` only while the
/// subscriber has outstanding demand.
///
/// # Backpressure
///
/// Polled only with demand: the stream is polled at most as many times as items were
/// requested and not yet delivered (plus once per `Pending` it answers, and once for
/// the final `None`); with no demand it is not polled at all, even when its waker
/// fires. Nothing is read ahead and nothing is spawned to buffer: in-flight bound 0.
/// Requests are served on a poll task on `scheduler`, at most one at a time; the
/// stream's waker schedules the next one. Because the stream is not polled without
/// demand, a completion right after the last requested item is seen with the next
/// request (the conformance kit's rule 1.2/1.5 tests request once more and pass).
///
/// # Timing
///
/// ```text
/// request : 2-----1-------1
/// polls   : PP----P-------P
/// output  : ab----c-------|
/// ```
///
/// # Errors
///
/// A plain stream never fails; a panic in its `poll_next` becomes `on_error` of kind
/// [`Panicked`](crate::ErrorKind::Panicked). For a stream of `Result`s, use
/// [`try_from_stream_on`]. `request(0)` is answered with the rule 3.9 error.
///
/// # Cancellation
///
/// The stream is moved into the subscription on `subscribe` and dropped when the
/// subscription ends: at completion, or at `cancel`, which drops it on the spot when
/// no poll task is running, or at the end of the running task's current poll (within
/// one scheduler turn) otherwise. What the stream holds (a receiver, a socket) is
/// released with it.
///
/// # Panics
///
/// Never at construction. A panicking subscriber is treated as cancelled (rule 2.13).
///
/// # Examples
///
/// ```
/// use weir::prelude::*;
/// use weir::runtime::Immediate;
///
/// let s = futures::stream::iter(1u32..=3);
/// let items = weir::bridge::from_stream_on(s, Immediate).collect().wait().unwrap();
/// assert_eq!(items, vec![1, 2, 3]);
/// ```
pub fn from_stream_on<S, C>(stream: S, scheduler: C) -> FromStream<Plain<S>, C>
where
    S: Stream + Send + 'static,
    S::Item: Send + 'static,
    C: Scheduler + Clone,
{
    FromStream::build(Plain(stream), scheduler)
}

/// A publisher of the `Ok` items of `stream`, polled on `scheduler` only while there
/// is demand; the first `Err(e)` becomes `on_error` and drops the stream.
///
/// `e` is converted into an [`Error`]: a `weir::Error` passes through unchanged, any
/// other error becomes kind [`Upstream`](crate::ErrorKind::Upstream) with `e` as its
/// [`source`](std::error::Error::source).
///
/// # Examples
///
/// ```
/// use weir::prelude::*;
/// use weir::runtime::Immediate;
///
/// let s = futures::stream::iter(vec![Ok(1u32), Err(std::fmt::Error), Ok(3)]);
/// let err = weir::bridge::try_from_stream_on(s, Immediate).collect().wait().unwrap_err();
/// assert_eq!(err.kind(), weir::ErrorKind::Upstream);
/// ```
pub fn try_from_stream_on<S, T, E, C>(stream: S, scheduler: C) -> FromStream<Fallible<S>, C>
where
    S: Stream<Item = Result<T, E>> + Send + 'static,
    T: Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
    C: Scheduler + Clone,
{
    FromStream::build(Fallible(stream), scheduler)
}

/// How a subscription polls its stream: pinned once at subscribe, then polled with
/// the stream's items (or errors) mapped to `Result<Item, Error>`. Implemented by
/// [`Plain`] and [`Fallible`]; not meant to be implemented outside weir.
pub trait StreamSource: Send + 'static {
    /// What the publisher emits.
    type Item: Send + 'static;
    /// The pinned state `Core` keeps.
    type Pinned: Send + 'static;
    /// Pin the stream (once, at subscribe).
    fn pin(self) -> Self::Pinned;
    /// Poll the pinned stream once.
    fn poll_pinned(
        pinned: &mut Self::Pinned,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Self::Item, Error>>>;
}

impl<S> StreamSource for Plain<S>
where
    S: Stream + Send + 'static,
    S::Item: Send + 'static,
{
    type Item = S::Item;
    type Pinned = Pin<Box<S>>;

    fn pin(self) -> Pin<Box<S>> {
        Box::pin(self.0)
    }

    #[inline]
    fn poll_pinned(
        pinned: &mut Pin<Box<S>>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<S::Item, Error>>> {
        pinned.as_mut().poll_next(cx).map(|item| item.map(Ok))
    }
}

impl<S, T, E> StreamSource for Fallible<S>
where
    S: Stream<Item = Result<T, E>> + Send + 'static,
    T: Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    type Item = T;
    type Pinned = Pin<Box<S>>;

    fn pin(self) -> Pin<Box<S>> {
        Box::pin(self.0)
    }

    #[inline]
    fn poll_pinned(
        pinned: &mut Pin<Box<S>>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<T, Error>>> {
        pinned
            .as_mut()
            .poll_next(cx)
            .map(|item| item.map(|r| r.map_err(into_error)))
    }
}

impl<B, C> Publisher for FromStream<B, C>
where
    B: StreamSource,
    C: Scheduler + Clone,
{
    type Item = B::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<B::Item> + Send + 'static,
    {
        subscribe::<B, S, C>(self.stream.pin(), self.scheduler, subscriber)
    }
}

/// Subscribe `subscriber` to the pinned stream `pinned`, polling on `scheduler`.
pub(crate) fn subscribe<B, S, C>(pinned: B::Pinned, scheduler: C, subscriber: S)
where
    B: StreamSource,
    S: Subscriber<B::Item> + Send + 'static,
    C: Scheduler + Clone,
{
    emitter::subscribe_on(StreamEmitter::<B> { pinned }, scheduler, subscriber);
}

/// The stream as an emitter.
struct StreamEmitter<B: StreamSource> {
    pinned: B::Pinned,
}

impl<B: StreamSource> Emitter for StreamEmitter<B> {
    type Item = B::Item;
    const USES_WAKER: bool = true;

    fn emit<S: Subscriber<B::Item>>(
        &mut self,
        cx: &Cx<'_>,
        subscriber: &mut S,
        budget: u64,
    ) -> Emitted {
        if budget == 0 {
            // Never poll without demand (a stream cannot say "done?" without an item).
            return Emitted::more(0);
        }
        let waker = cx.waker();
        let mut context = Context::from_waker(waker);
        let mut polled = Polled::<B> {
            pinned: &mut self.pinned,
            cx: &mut context,
            stage: cx,
            left: budget,
            count: 0,
            stop: Stop::No,
        };
        let credit = cx.hand_over(subscriber, &mut polled);
        let (count, stop) = (polled.count, polled.stop);
        match stop {
            Stop::End(end) => Emitted {
                count,
                credit,
                end: Some(end),
            },
            Stop::Pending => Emitted::more(count).with_credit(credit),
            Stop::No => {
                if count < budget && !cx.stopped() {
                    // The subscriber stopped pulling without cancelling: the stream is
                    // not pending, so ask for another pass ourselves.
                    waker.wake_by_ref();
                }
                Emitted::more(count).with_credit(credit)
            }
        }
    }
}

/// Why a lazy batch stopped early.
enum Stop {
    /// It did not (budget used, or the subscriber stopped pulling).
    No,
    /// The stream returned `Pending`; its waker will call back.
    Pending,
    /// The stream ended (or failed, or panicked).
    End(Result<(), Error>),
}

/// A lazy batch: each `next` polls the stream once, within the pass's demand, and
/// not after a cancel (the subscribers that stop batches themselves, sinks and
/// bridges, are handed this batch as it is: a cancel from another thread is seen
/// here, before the next poll).
struct Polled<'a, 'c, 's, B: StreamSource> {
    pinned: &'a mut B::Pinned,
    cx: &'a mut Context<'c>,
    stage: &'a Cx<'s>,
    left: u64,
    count: u64,
    stop: Stop,
}

impl<B: StreamSource> Iterator for Polled<'_, '_, '_, B> {
    type Item = B::Item;

    #[inline]
    fn next(&mut self) -> Option<B::Item> {
        if self.left == 0 || !matches!(self.stop, Stop::No) || self.stage.stopped() {
            return None;
        }
        match catch_in("from_stream", || B::poll_pinned(self.pinned, self.cx)) {
            Ok(Poll::Ready(Some(Ok(item)))) => {
                self.left -= 1;
                self.count += 1;
                Some(item)
            }
            Ok(Poll::Ready(Some(Err(error)))) | Err(error) => {
                self.stop = Stop::End(Err(error));
                None
            }
            Ok(Poll::Ready(None)) => {
                self.stop = Stop::End(Ok(()));
                None
            }
            Ok(Poll::Pending) => {
                self.stop = Stop::Pending;
                None
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, usize::try_from(self.left).ok())
    }
}

// ---- tokio defaults (feature `tokio`) ----

#[cfg(feature = "tokio")]
pub(crate) fn current_tokio(what: &str) -> crate::runtime::Tokio {
    match ::tokio::runtime::Handle::try_current() {
        Ok(handle) => crate::runtime::Tokio::new(handle),
        Err(_) => panic!(
            "weir::{what} must be called inside a tokio runtime \
             (or use {what}_on with an explicit scheduler)"
        ),
    }
}

/// [`from_stream_on`] on the tokio runtime this is called in (feature `tokio`).
///
/// The runtime is captured now, so the publisher may be subscribed from any thread.
///
/// # Panics
///
/// Outside a tokio runtime: "weir::from_stream must be called inside a tokio runtime
/// (or use from_stream_on with an explicit scheduler)".
///
/// # Examples
///
/// ```
/// use futures::StreamExt as _;
/// use weir::prelude::*;
///
/// # let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).build().unwrap();
/// # rt.block_on(async {
/// let doubled: Vec<u32> = weir::from_stream(futures::stream::iter(1u32..=3))
///     .map(|x| x * 2)
///     .into_stream(16)
///     .map(Result::unwrap)
///     .collect()
///     .await;
/// assert_eq!(doubled, vec![2, 4, 6]);
/// # });
/// ```
#[cfg(feature = "tokio")]
pub fn from_stream<S>(stream: S) -> FromStream<Plain<S>, crate::runtime::Tokio>
where
    S: Stream + Send + 'static,
    S::Item: Send + 'static,
{
    from_stream_on(stream, current_tokio("from_stream"))
}

/// [`try_from_stream_on`] on the tokio runtime this is called in (feature `tokio`).
///
/// # Panics
///
/// Outside a tokio runtime: "weir::try_from_stream must be called inside a tokio
/// runtime (or use try_from_stream_on with an explicit scheduler)".
#[cfg(feature = "tokio")]
pub fn try_from_stream<S, T, E>(stream: S) -> FromStream<Fallible<S>, crate::runtime::Tokio>
where
    S: Stream<Item = Result<T, E>> + Send + 'static,
    T: Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    try_from_stream_on(stream, current_tokio("try_from_stream"))
}
