//! [`Sender`]: the producer's handle on a channel, and its two futures.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use super::admission::{Assessed, Rungs, Step};
use super::link::{Link, Offer, Offered};
use super::marks::FlowState;
use super::{ChannelClosed, ChannelPolicy, SendAllError, TrySendError, Unsent};
use crate::metrics::QueueMonitor;
use crate::Error;

/// Items [`Sender::try_send_all`] offers under one lock.
const SEND_STEP: usize = 256;

/// The sending half of a [`channel`](super::channel()). Cheap to clone; every clone
/// feeds the same queue. `Send + Sync`, so producers on several threads may share one
/// handle or each own a clone.
///
/// The channel closes (the publisher completes after the queued items) when every
/// `Sender` is dropped or one of them calls [`close`](Self::close).
///
/// # Examples
///
/// ```
/// use weir::prelude::*;
/// use weir::source::channel::{ChannelPolicy, TrySendError};
///
/// let (tx, rx) = weir::channel::<u32>(2, ChannelPolicy::Backpressure);
/// assert_eq!(tx.try_send(1), Ok(()));
/// assert_eq!(tx.try_send(2), Ok(()));
/// assert_eq!(tx.try_send(3), Err(TrySendError::Full(3)), "full: the item comes back");
/// drop(tx);
/// assert_eq!(rx.collect().wait().unwrap(), vec![1, 2]);
/// ```
pub struct Sender<T: Send + 'static> {
    pub(super) shared: Arc<Link<T>>,
}

impl<T: Send + 'static> std::fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender")
            .field("policy", &self.shared.stage().policy)
            .field("marks", &self.shared.stage().marks)
            .finish_non_exhaustive()
    }
}

impl<T: Send + 'static> Clone for Sender<T> {
    fn clone(&self) -> Self {
        // Relaxed: a reference count; the Arc clone below does the synchronising.
        self.shared.stage().senders.fetch_add(1, Ordering::Relaxed);
        Sender {
            shared: self.shared.clone(),
        }
    }
}

impl<T: Send + 'static> Drop for Sender<T> {
    fn drop(&mut self) {
        // AcqRel: the last sender must see every other sender's decrement (and what
        // they did before it) before it closes the channel.
        if self.shared.stage().senders.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.shared.close(Ok(()));
        }
    }
}

impl<T: Send + 'static> Sender<T> {
    /// Offer `item` and answer at once.
    ///
    /// * `Ok(())`: the channel took the item. Under `DropOldest`, `DropNewest` and
    ///   `KeepLatest` that includes a full channel: the policy made room (or dropped
    ///   this very item) and reported the loss to the drop hook.
    /// * `Err(Full(item))`: full under `Backpressure` or `Reject`; the item is handed
    ///   back and counted as rejected.
    /// * `Err(Closed(item))`: the channel was closed, failed, terminated or cancelled
    ///   by its subscriber; the item is handed back.
    ///
    /// If the subscriber has demand, the item is delivered on this thread before
    /// `try_send` returns (see the [module docs](super)).
    ///
    /// ```
    /// use weir::source::channel::{ChannelPolicy, TrySendError};
    ///
    /// let (tx, rx) = weir::channel::<&str>(1, ChannelPolicy::Reject);
    /// tx.try_send("a").unwrap();
    /// assert_eq!(tx.try_send("b"), Err(TrySendError::Full("b")));
    /// assert_eq!(tx.monitor().snapshot().rejected, 1);
    /// tx.close();
    /// assert_eq!(tx.try_send("c"), Err(TrySendError::Closed("c")));
    /// # drop(rx);
    /// ```
    pub fn try_send(&self, item: T) -> Result<(), TrySendError<T>> {
        let assessed = self.shared.stage().admission.assess(&item);
        self.shared.offer_now((item, assessed))
    }

    /// Offer the items of `items` in order, as [`try_send`](Self::try_send) would one
    /// by one, but in locked steps of up to 256: one lock, one clock read, one stats
    /// update and at most one drain run per step instead of per item. When nothing is
    /// queued, the demand covers the step and admission reads nothing of the items
    /// (no shed rung, no deadlines), the step goes straight to the subscriber in one
    /// batch, without the lock (as [`try_send`](Self::try_send) hands over one item).
    /// The items of a step are taken from the iterator (and classified by the
    /// admission ladder) before the lock is taken or the subscriber runs, so the
    /// iterator may do anything, even send on this channel.
    ///
    /// Returns how many items the channel took (accepted, or dropped by its policy and
    /// reported, as `try_send` counts them). It stops at the first item the channel
    /// does not take (full under `Backpressure` or `Reject`, closed, shed, late): the
    /// [`SendAllError`] holds how many went in, the error with that item, and the
    /// items after it, never offered. Nothing is lost and nothing is offered twice.
    ///
    /// Nothing is allocated per item: one step buffer per call, and in a step where
    /// the policy drops items (or items expire), one list to hand them to the hook.
    ///
    /// ```
    /// use weir::prelude::*;
    /// use weir::source::channel::ChannelPolicy;
    ///
    /// let (tx, rx) = weir::channel::<u32>(1_024, ChannelPolicy::Backpressure);
    /// let frames: Vec<u32> = (0..1_000).collect();
    /// assert_eq!(tx.try_send_all(frames).unwrap(), 1_000);
    /// drop(tx);
    /// assert_eq!(rx.fold(0u32, |n, _| n + 1).wait().unwrap(), 1_000);
    /// ```
    pub fn try_send_all<I>(&self, items: I) -> Result<usize, SendAllError<T, I::IntoIter>>
    where
        I: IntoIterator<Item = T>,
    {
        let chan = self.shared.stage();
        let mut items = items.into_iter();
        // One allocation, of what the iterator says it holds, up to a step.
        let room = items.size_hint().1.unwrap_or(SEND_STEP).min(SEND_STEP);
        let mut chunk = Step::new(room, &chan.admission);
        let mut sent = 0;
        loop {
            // User code (the iterator, the classifier) runs here, outside the lock.
            chunk.fill(items.by_ref(), SEND_STEP, &chan.admission);
            if chunk.is_empty() {
                return Ok(sent);
            }
            let (taken, refused) = self.shared.offer_all(&mut chunk);
            sent += taken;
            if let Some(error) = refused {
                let left = chunk.into_items();
                return Err(SendAllError {
                    sent,
                    error,
                    unsent: Unsent::new(left, items),
                });
            }
        }
    }

    /// Offer `item`, waiting for room under `Backpressure` (other policies answer at
    /// once, like [`try_send`](Self::try_send)). Works in any executor: the future
    /// registers its waker and is woken when the subscriber takes items out, or the
    /// channel closes. The time spent waiting is added to the queue's `blocked` stat.
    ///
    /// Resolves to `Ok(())` once the item is in, `Err(Closed(item))` if the channel
    /// closed first, and (under `Reject` only) `Err(Full(item))`.
    ///
    /// ```
    /// use weir::prelude::*;
    /// use weir::source::channel::ChannelPolicy;
    ///
    /// let (tx, rx) = weir::channel::<u32>(4, ChannelPolicy::Backpressure);
    /// let consumer = std::thread::spawn(move || rx.collect().wait().unwrap());
    /// futures::executor::block_on(async move {
    ///     for i in 0..100 {
    ///         tx.send(i).await.unwrap();
    ///     }
    /// });
    /// assert_eq!(consumer.join().unwrap(), (0..100).collect::<Vec<_>>());
    /// ```
    pub fn send(&self, item: T) -> SendFuture<'_, T> {
        SendFuture {
            sender: self,
            item: Some(item),
            assessed: None,
            key: None,
            since: None,
        }
    }

    /// Offer `item`, blocking this thread until there is room under `Backpressure`
    /// (other policies answer at once). Answers like [`send`](Self::send). The time
    /// spent waiting is added to the queue's `blocked` stat.
    ///
    /// Do not call it from the channel's own subscriber (the thread that must make
    /// room would be the one waiting).
    ///
    /// # Panics
    ///
    /// With the `tokio` feature, if it would have to wait on a thread that drives a
    /// tokio runtime's async code (inside `block_on` or a task): use
    /// [`send`](Self::send) there.
    ///
    /// ```
    /// use weir::prelude::*;
    /// use weir::source::channel::ChannelPolicy;
    ///
    /// let (tx, rx) = weir::channel::<u32>(8, ChannelPolicy::Backpressure);
    /// let producer = std::thread::spawn(move || {
    ///     for i in 0..1_000 {
    ///         tx.send_blocking(i).unwrap();
    ///     }
    /// });
    /// let total = rx.fold(0u64, |sum, x| sum + u64::from(x)).wait().unwrap();
    /// producer.join().unwrap();
    /// assert_eq!(total, 499_500);
    /// ```
    #[track_caller]
    pub fn send_blocking(&self, item: T) -> Result<(), TrySendError<T>> {
        let shared = &self.shared;
        let assessed = shared.stage().admission.assess(&item);
        // With demand waiting, in a pass of this thread's own (see `try_send`).
        // The first try's clock reading, when nothing ran since (see `offer_first`):
        // one reading per queued item, not two.
        let (mut item, fresh) = match shared.offer_first((item, assessed)) {
            Ok(answer) => return answer,
            Err(unsent) => unsent,
        };
        let clock = &shared.stage().gauge;
        let mut now = fresh.unwrap_or_else(|| clock.now());
        let mut since: Option<Instant> = None;
        let mut st = shared.stage().lock_state();
        let outcome = loop {
            match shared.stage().offer(&mut st, (item, assessed), now, true) {
                // (Nothing was swept: a sweep leaves room.)
                Offered {
                    outcome: Offer::Full(back),
                    ..
                } if shared.stage().policy == ChannelPolicy::Backpressure => {
                    item = back;
                    if since.is_none() {
                        // About to wait for the first time: not on a thread that
                        // drives a tokio runtime (checked without the lock; `now`
                        // stays the reading of a moment ago).
                        drop(st);
                        crate::runtime::forbid_blocking_in_async("Sender::send_blocking");
                        st = shared.stage().lock_state();
                        since = Some(now);
                        continue;
                    }
                    st.blocked_threads += 1;
                    st = st.wait(&shared.stage().room);
                    st.blocked_threads -= 1;
                    now = clock.now();
                }
                other => break other,
            }
        };
        drop(st);
        if let Some(since) = since {
            // Blocked until the reading the accepting offer took.
            clock.blocked(now.saturating_duration_since(since));
        }
        shared.settle(outcome)
    }

    /// The channel's flow state: `Paused` from the moment its depth reached the high
    /// water mark until it fell to the low mark; with an [`Admission`](super::Admission)
    /// ladder, `Reducing` or `Shedding` while those rungs are on (their
    /// [`rate_factor`](FlowState::rate_factor) is the rate to send at). Advice for
    /// cooperative producers (a socket reader stops reading); a lock-free read.
    ///
    /// ```
    /// use weir::source::channel::{ChannelPolicy, FlowState, WaterMarks};
    ///
    /// let (tx, rx) = weir::source::channel::ChannelBuilder::new(4, ChannelPolicy::Backpressure)
    ///     .water_marks(WaterMarks::new(3, 1))
    ///     .build::<u32>();
    /// tx.try_send(1).unwrap();
    /// tx.try_send(2).unwrap();
    /// assert_eq!(tx.state(), FlowState::Flowing);
    /// tx.try_send(3).unwrap();
    /// assert_eq!(tx.state(), FlowState::Paused);
    /// # drop(rx);
    /// ```
    pub fn state(&self) -> FlowState {
        self.shared.stage().flow()
    }

    /// A future that completes with `Ok(())` once the channel is not `Paused` (at once
    /// if it is not: `Flowing`, or `Reducing`/`Shedding` under an
    /// [`Admission`](super::Admission) ladder, where the producer sends at the state's
    /// [`rate_factor`](FlowState::rate_factor)), or `Err(ChannelClosed)` if the channel
    /// closes first.
    ///
    /// ```
    /// use weir::prelude::*;
    /// use weir::source::channel::{ChannelBuilder, ChannelPolicy, FlowState, WaterMarks};
    ///
    /// let (tx, rx) = ChannelBuilder::new(8, ChannelPolicy::Backpressure)
    ///     .water_marks(WaterMarks::new(4, 1))
    ///     .build::<u32>();
    /// let consumer = std::thread::spawn(move || rx.collect().wait().unwrap());
    /// futures::executor::block_on(async {
    ///     for i in 0..100 {
    ///         if tx.state() == FlowState::Paused {
    ///             tx.resumed().await.unwrap(); // a socket reader would stop reading here
    ///         }
    ///         tx.send(i).await.unwrap();
    ///     }
    /// });
    /// drop(tx);
    /// assert_eq!(consumer.join().unwrap().len(), 100);
    /// ```
    pub fn resumed(&self) -> Resumed<'_, T> {
        Resumed {
            sender: self,
            key: None,
        }
    }

    /// Block this thread until the channel is not `Paused` (`Ok`) or closed (`Err`).
    /// See [`resumed`](Self::resumed).
    ///
    /// # Panics
    ///
    /// With the `tokio` feature, if it would have to wait on a thread that drives a
    /// tokio runtime's async code: use [`resumed`](Self::resumed) there.
    ///
    /// ```
    /// use weir::prelude::*;
    /// use weir::source::channel::{ChannelBuilder, ChannelPolicy, FlowState, WaterMarks};
    ///
    /// let (tx, rx) = ChannelBuilder::new(64, ChannelPolicy::Backpressure)
    ///     .water_marks(WaterMarks::new(32, 8))
    ///     .build::<u32>();
    /// let consumer = std::thread::spawn(move || rx.collect().wait().unwrap());
    /// for i in 0..1_000 {
    ///     if tx.state() == FlowState::Paused {
    ///         tx.wait_resumed().unwrap(); // stop reading the socket until then
    ///     }
    ///     tx.send_blocking(i).unwrap();
    /// }
    /// drop(tx);
    /// assert_eq!(consumer.join().unwrap().len(), 1_000);
    /// ```
    #[track_caller]
    pub fn wait_resumed(&self) -> Result<(), ChannelClosed> {
        let shared = &self.shared;
        let mut st = shared.stage().lock_state();
        let mut checked = false;
        loop {
            if !st.open {
                return Err(ChannelClosed);
            }
            if !st.rungs.has(Rungs::PAUSE) {
                return Ok(());
            }
            if !checked {
                checked = true;
                drop(st);
                crate::runtime::forbid_blocking_in_async("Sender::wait_resumed");
                st = shared.stage().lock_state();
                continue;
            }
            st.resume_threads += 1;
            st = st.wait(&shared.stage().resume);
            st.resume_threads -= 1;
        }
    }

    /// Close the channel for every sender: later sends answer `Closed`, and the
    /// publisher completes once the queued items are delivered. Idempotent.
    ///
    /// ```
    /// use weir::prelude::*;
    /// use weir::source::channel::ChannelPolicy;
    ///
    /// let (tx, rx) = weir::channel::<u32>(4, ChannelPolicy::Backpressure);
    /// let other = tx.clone();
    /// tx.try_send(1).unwrap();
    /// tx.close();
    /// assert!(other.is_closed(), "closed for every sender");
    /// assert_eq!(rx.collect().wait().unwrap(), vec![1]);
    /// ```
    pub fn close(&self) {
        self.shared.close(Ok(()));
    }

    /// Close the channel with an error: the subscriber receives `on_error(error)`
    /// after the queued items. Returns false (and drops `error`) if the channel was
    /// already closed.
    ///
    /// ```
    /// use weir::prelude::*;
    /// use weir::source::channel::ChannelPolicy;
    ///
    /// let (tx, rx) = weir::channel::<u32>(4, ChannelPolicy::Backpressure);
    /// tx.try_send(1).unwrap();
    /// assert!(tx.fail(weir::Error::msg("socket reset")));
    /// assert!(tx.try_send(2).unwrap_err().is_closed());
    /// let items = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    /// let seen = items.clone();
    /// let result = rx.inspect(move |x| seen.lock().unwrap().push(*x)).collect().wait();
    /// assert_eq!(result.unwrap_err().message(), "socket reset");
    /// assert_eq!(*items.lock().unwrap(), [1], "the queued item came first");
    /// ```
    pub fn fail(&self, error: Error) -> bool {
        self.shared.close(Err(error))
    }

    /// True once the channel no longer accepts items.
    pub fn is_closed(&self) -> bool {
        !self.shared.stage().lock_state().open
    }

    /// The channel's capacity in items.
    pub fn capacity(&self) -> usize {
        self.shared.stage().capacity()
    }

    /// The queue's statistics (the same as [`Channel::monitor`](super::Channel::monitor)).
    pub fn monitor(&self) -> QueueMonitor {
        QueueMonitor::new(self.shared.stage().gauge.clone())
    }

    /// A reading of the channel's clock ([`ChannelBuilder::clock`](super::ChannelBuilder::clock)),
    /// for `send_or_pause`.
    #[cfg(feature = "tokio")]
    pub(crate) fn now(&self) -> Instant {
        self.shared.stage().gauge.now()
    }

    /// Offer `item` like [`try_send`](Self::try_send); a refusal is a [`Rejected`]
    /// that says when to come back ([`retry_after`](Self::retry_after)), so an edge
    /// can answer "503, Retry-After" with a number that is true.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir::runtime::VirtualTime;
    /// use weir::source::channel::{ChannelBuilder, ChannelPolicy, RejectReason, WaterMarks};
    /// use weir::prelude::*;
    ///
    /// let clock = VirtualTime::new();
    /// let (tx, rx) = ChannelBuilder::new(4, ChannelPolicy::Reject)
    ///     .water_marks(WaterMarks::new(4, 2))
    ///     .clock(clock.clone())
    ///     .build::<u32>();
    /// # #[cfg(feature = "tck")] {
    /// let probe = weir::tck::TestSubscriber::new();
    /// let consumer = probe.probe();
    /// rx.subscribe(probe);
    /// // The consumer takes 2 items per second for a while; the queue fills.
    /// for second in 0..4 {
    ///     for i in 0..4 {
    ///         let _ = tx.try_admit(second * 10 + i);
    ///     }
    ///     clock.advance(Duration::from_secs(1));
    ///     consumer.request(2);
    /// }
    /// tx.try_admit(99).unwrap(); // 2 slots were freed
    /// tx.try_admit(98).unwrap();
    /// let rejected = tx.try_admit(97).unwrap_err();
    /// assert_eq!(rejected.reason(), RejectReason::Full);
    /// // 4 queued, down to the low mark (2) at 2 per second: 1 s.
    /// assert_eq!(rejected.retry_after(), Some(Duration::from_secs(1)));
    /// assert_eq!(rejected.into_inner(), 97);
    /// # }
    /// ```
    ///
    /// A shed item ([`Admission::shed_below`](super::Admission::shed_below)) is told
    /// the time to drain to the shed rung's low mark, when its class is admitted
    /// again; a late one ([`Admission::deadlines`](super::Admission::deadlines)) gets
    /// no time: coming back later cannot help it.
    pub fn try_admit(&self, item: T) -> Result<(), Rejected<T>> {
        let (item, reason, retry_after) = match self.try_send(item) {
            Ok(()) => return Ok(()),
            Err(TrySendError::Full(item)) => (item, RejectReason::Full, self.retry_after()),
            Err(TrySendError::Closed(item)) => (item, RejectReason::Closed, None),
            Err(TrySendError::Shed(item)) => {
                let low = self
                    .shared
                    .stage()
                    .admission
                    .shed
                    .as_ref()
                    .map(|(m, _)| m.low());
                let wait = low.and_then(|low| self.drain_time_to(low));
                (item, RejectReason::Shed, wait)
            }
            Err(TrySendError::Late(item)) => (item, RejectReason::Late, None),
        };
        Err(Rejected {
            item,
            reason,
            retry_after,
        })
    }

    /// How long the queue takes to drain down to its low water mark at the measured
    /// drain rate (over the default rate window), were nothing more admitted:
    /// `(depth − low) / drain rate`. `Some(ZERO)` at or below the low mark; `None`
    /// when nothing was taken out over the window (a stalled consumer: no true
    /// number exists) or the channel is closed.
    pub fn retry_after(&self) -> Option<Duration> {
        self.drain_time_to(self.shared.stage().marks.low())
    }

    /// The time to drain to `low` items at the measured rate (see `retry_after`).
    fn drain_time_to(&self, low: usize) -> Option<Duration> {
        if self.is_closed() {
            return None;
        }
        let stats = self.monitor().snapshot();
        let above = stats.depth.saturating_sub(low);
        if above == 0 {
            return Some(Duration::ZERO);
        }
        (stats.drain_rate > 0.0)
            .then(|| Duration::try_from_secs_f64(above as f64 / stats.drain_rate).ok())
            .flatten()
    }
}

/// Why a [`Sender::try_admit`] refused its item.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RejectReason {
    /// The channel is full (`Backpressure` or `Reject`).
    Full,
    /// The channel is closed.
    Closed,
    /// The channel is shedding and the item's class is below the admitted one
    /// ([`Admission::shed_below`](super::Admission::shed_below)).
    Shed,
    /// The item's deadline leaves less than the minimum useful time
    /// ([`Admission::deadlines`](super::Admission::deadlines)).
    Late,
}

/// An item [`Sender::try_admit`] refused, with the reason and when to come back.
#[derive(Clone, PartialEq, Eq)]
pub struct Rejected<T> {
    item: T,
    reason: RejectReason,
    retry_after: Option<Duration>,
}

impl<T> Rejected<T> {
    /// Why the item was refused.
    pub fn reason(&self) -> RejectReason {
        self.reason
    }

    /// When to come back ([`Sender::retry_after`] at the refusal); `None` when the
    /// channel is closed or its consumer took nothing over the rate window.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// The item handed back.
    pub fn into_inner(self) -> T {
        self.item
    }
}

impl<T> std::fmt::Debug for Rejected<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rejected")
            .field("reason", &self.reason)
            .field("retry_after", &self.retry_after)
            .finish_non_exhaustive()
    }
}

impl<T> std::fmt::Display for Rejected<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.reason {
            RejectReason::Closed => return f.write_str("channel closed: item handed back"),
            RejectReason::Late => {
                return f.write_str(
                    "item refused: its deadline leaves less than the minimum useful time",
                )
            }
            RejectReason::Full => "channel full",
            RejectReason::Shed => "channel shedding: item below the admitted class",
        };
        match self.retry_after {
            Some(after) => write!(f, "{what}: item handed back, retry after {after:?}"),
            None => write!(f, "{what}: item handed back (no drain measured)"),
        }
    }
}

impl<T> std::error::Error for Rejected<T> {}

/// The future returned by [`Sender::send`].
#[must_use = "futures do nothing unless polled"]
pub struct SendFuture<'a, T: Send + 'static> {
    sender: &'a Sender<T>,
    item: Option<T>,
    /// What admission read of the item (at the first poll).
    assessed: Option<Assessed>,
    key: Option<u64>,
    /// When this send first found the channel full.
    since: Option<Instant>,
}

impl<T: Send + 'static> std::fmt::Debug for SendFuture<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendFuture")
            .field("done", &self.item.is_none())
            .field("waiting", &self.since.is_some())
            .finish()
    }
}

// The future is never pinned structurally: the item is moved in and out by value.
impl<T: Send + 'static> Unpin for SendFuture<'_, T> {}

impl<T: Send + 'static> Future for SendFuture<'_, T> {
    type Output = Result<(), TrySendError<T>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let shared = &this.sender.shared;
        let item = this
            .item
            .take()
            .expect("SendFuture polled after completion");
        let assessed = *this
            .assessed
            .get_or_insert_with(|| shared.stage().admission.assess(&item));
        // The first poll, with demand waiting: in a pass of this thread's own (see
        // `try_send`). Later polls (a waker registered) offer under the lock.
        let (item, fresh) = if this.key.is_none() {
            match shared.offer_first((item, assessed)) {
                Ok(answer) => return Poll::Ready(answer),
                Err(unsent) => unsent,
            }
        } else {
            (item, None)
        };
        // The first try's clock reading, when nothing ran since (see `offer_first`).
        let now = fresh.unwrap_or_else(|| shared.stage().gauge.now());
        let outcome = {
            let mut st = shared.stage().lock_state();
            match shared.stage().offer(&mut st, (item, assessed), now, true) {
                // (Nothing was swept: a sweep leaves room.)
                Offered {
                    outcome: Offer::Full(back),
                    ..
                } if shared.stage().policy == ChannelPolicy::Backpressure => {
                    this.since.get_or_insert(now);
                    st.send_wakers.register(&mut this.key, cx.waker());
                    this.item = Some(back);
                    return Poll::Pending;
                }
                other => {
                    st.send_wakers.remove(this.key.take());
                    other
                }
            }
        };
        if let Some(since) = this.since.take() {
            // Blocked until the reading the accepting offer took.
            shared
                .stage()
                .gauge
                .blocked(now.saturating_duration_since(since));
        }
        Poll::Ready(shared.settle(outcome))
    }
}

impl<T: Send + 'static> Drop for SendFuture<'_, T> {
    fn drop(&mut self) {
        let shared = &self.sender.shared;
        if self.key.is_some() {
            shared
                .stage()
                .lock_state()
                .send_wakers
                .remove(self.key.take());
        }
        if let Some(since) = self.since.take() {
            shared
                .stage()
                .gauge
                .blocked(shared.stage().gauge.now().saturating_duration_since(since));
        }
    }
}

/// The future returned by [`Sender::resumed`].
#[must_use = "futures do nothing unless polled"]
pub struct Resumed<'a, T: Send + 'static> {
    sender: &'a Sender<T>,
    key: Option<u64>,
}

impl<T: Send + 'static> std::fmt::Debug for Resumed<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resumed").finish_non_exhaustive()
    }
}

impl<T: Send + 'static> Future for Resumed<'_, T> {
    type Output = Result<(), ChannelClosed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let mut st = this.sender.shared.stage().lock_state();
        if !st.open {
            st.resume_wakers.remove(this.key.take());
            return Poll::Ready(Err(ChannelClosed));
        }
        if !st.rungs.has(Rungs::PAUSE) {
            st.resume_wakers.remove(this.key.take());
            return Poll::Ready(Ok(()));
        }
        st.resume_wakers.register(&mut this.key, cx.waker());
        Poll::Pending
    }
}

impl<T: Send + 'static> Drop for Resumed<'_, T> {
    fn drop(&mut self) {
        if self.key.is_some() {
            self.sender
                .shared
                .stage()
                .lock_state()
                .resume_wakers
                .remove(self.key.take());
        }
    }
}
