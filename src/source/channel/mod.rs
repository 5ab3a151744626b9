//! `channel`: a push source for producers you cannot slow down (sockets, callbacks,
//! other threads).
//!
//! [`channel(capacity, policy)`](fn@channel) returns a [`Sender`] and a [`Channel`]
//! (a [`Publisher`]). Producers offer items through the sender; the publisher delivers
//! them to its one subscriber as it requests them.
//!
//! # The algorithm
//!
//! One bounded, time-stamped queue (`TimedQueue`: capacity in items or from a wait
//! budget, optional max age and adaptive LIFO) sits between the senders and the
//! subscriber, under one short lock.
//!
//! * **Offer** (`try_send`, `send`, `send_blocking`; `try_send_all` offers up to 256
//!   items per locked step, taken from its iterator before the lock): under the lock, the item is
//!   stamped and appended if there is room. If the queue is full the [`ChannelPolicy`]
//!   decides: `Backpressure` hands the item back (`try_send`) or waits for room
//!   (`send`, `send_blocking`); `Reject` hands it back and counts a rejection;
//!   `DropOldest`, `DropNewest` and `KeepLatest` make room (or drop the item) and
//!   report the dropped item to the subscriber's drop hook. The queue's stats are
//!   published once per offer. The lock is released before any user code runs (the
//!   drop hook, wakers, the subscriber, a `tracing` layer).
//! * **Water marks**: when an offer brings the depth to the high mark the channel turns
//!   [`Paused`](FlowState::Paused); when delivery brings it down to the low mark it turns
//!   [`Flowing`](FlowState::Flowing) again and wakes [`Sender::resumed`] /
//!   [`Sender::wait_resumed`]. Each change is a `tracing` event (target
//!   `weir::channel`; fields `from`, `to`, `depth`, `capacity`, and `change`, the
//!   change's number), never one per item: `info` when the pause (or an admission
//!   ladder's shed rung) turns on or off, `debug` when only the reduce rung moves.
//!   Events are emitted once the channel's lock is let go, so a `tracing` layer may
//!   call back into the channel (send into it, read its monitor); two threads'
//!   events may come in either order, which `change` sorts out. Paused is advice: a
//!   cooperative producer stops producing, but whatever it still offers is handled
//!   by the policy up to capacity (that room above the high mark is what
//!   [`WaterMarks::derive`] sizes).
//! * **Delivery** is demand-driven, through one [`Wip`](crate::drain::Wip) drain loop.
//!   A pass reads the demand, takes up to `min(demand, 256)` items out of the queue in
//!   one locked step (items older than the max age are dropped there, reason
//!   `Expired`), releases the lock, hands them to the subscriber in one
//!   `on_next_batch`, settles the demand once and repeats. Taking items out wakes
//!   senders waiting for room and may resume the flow. Items past the max age also
//!   leave while nobody reads: an offer, and each monitor snapshot, first take the
//!   dead items at the head out (reported as `Expired` after the lock is let go).
//!
//! **Which thread delivers**: whichever thread runs the drain loop: the subscriber's
//! thread when it calls `request`, or a producer's thread when its `send` finds
//! demand waiting. A sender runs the loop only when the subscriber has demand (or,
//! when it closes the channel, to deliver the end). A single send (`try_send`,
//! `send_blocking`, the first poll of `send`) that finds demand waiting, nothing
//! queued, no admission rung on and the loop free hands its item straight to the
//! subscriber (the *direct hand-off*: no lock, no clock reading; an item with a
//! deadline is checked under the lock instead). When another thread holds the loop
//! at that moment (typically the subscriber's thread, briefly, serving a request),
//! the send waits a few microseconds for it (a bounded spin) rather than queue its
//! item and make that thread serve it: a producer sending one item at a time would
//! otherwise keep the subscriber's thread serving one item per pass, both threads
//! taking the state lock for every item. The item counts as passing through
//! the queue when the loop's owner next flushes (at the latest after 64 items: it
//! then reads the clock). A `try_send_all` step whose items admission does not read
//! is handed over the same way, whole, when the demand covers it. With
//! items queued, it takes the loop and offers its item inside the first pass, under
//! the lock that takes the batch out (one lock and one clock reading for both); when
//! another thread owns the loop, the sender offers under its own lock and that owner
//! runs one more pass.
//! Put [`publish_on`](crate::PublisherExt::publish_on) after the channel to deliver on
//! a scheduler of your choice instead.
//!
//! **The lane** (channels without time bounds, shed rung or deadlines). While the
//! drain of a `publish_on` right behind the channel (or behind a subscriber of a
//! [`share`](crate::PublisherExt::share) hub over it: see [`hub`](crate::hub))
//! lingers on its thread and *watches* the channel, or a thread blocked in
//! [`SinkHandle::wait`](crate::sink::SinkHandle::wait) on a sink of the channel
//! (`fold`, `for_each`, `collect`) waits while items keep coming, or a
//! [`blocking_iter`](crate::PublisherExt::blocking_iter) polls for its next item,
//! a single send that finds the channel vacant does not
//! take the drain loop: it claims a slot of the channel's *lane*, a lock-free ring
//! of one batch (256 items, or the capacity if smaller), with one compare-and-swap,
//! writes its item there, and signals only if every watcher has stopped watching
//! since. A watcher takes the lane's items on its own thread, running the
//! channel's drain loop there, whole runs at a time and without the state lock
//! while nothing is queued. So one item at a time from a producer thread to a
//! consumer on another costs the producer one read-modify-write, as a bounded
//! crossbeam channel's `try_send` does. Items in the lane count as the one batch
//! being handed over (the in-flight bound below is unchanged) and as passing
//! through the queue when the drain takes them. A send that finds the lane full
//! while the watcher still watches waits a few microseconds (the same bounded spin)
//! for it to free a slot: queueing the item would send it, and every later item
//! until the queue is drained, down the locked path (a window of 16 behind the
//! channel ran at 0.4–0.7 × a crossbeam channel that way, 0.85–1.3 × with the wait).
//! When no slot frees up in time (the watcher's thread is not running), or the
//! watcher left, the send takes the paths above; every pass takes the lane's items before the queue's, and
//! the queue's only once the lane is empty, so each sender's items keep their
//! order. Closing marks the lane (a claim after that is refused as closed), and the
//! end waits for the claims made before it.
//!
//! # Demand contract
//!
//! Never more items than requested (rule 1.1); `on_complete` / `on_error` need no
//! demand and follow the last queued item. In-flight bound: the capacity, plus one
//! batch being handed over. `request(0)` fails the stream with the rule 3.9 error.
//!
//! # Ending
//!
//! * Every [`Sender`] dropped, or [`Sender::close`]: the publisher completes after the
//!   queued items are delivered. [`Sender::fail`]: `on_error` after the queued items.
//! * Every [`Channel`] handle dropped without subscribing: nobody can read the items
//!   any more, so the channel closes as if cancelled.
//! * The subscriber cancels (or terminates, or panics): senders get their items back
//!   as [`TrySendError::Closed`], waiting senders wake up with `Closed`, and the items
//!   still queued are released (dropped, not reported: nothing was lost to overflow).
//!
//! # One subscriber
//!
//! A channel delivers each item once, to one subscriber: [`Channel`] is not `Clone`,
//! and `subscribe` consumes it, so a second subscription cannot be written. Put a
//! multicasting processor after the channel to fan out. Read its statistics through
//! a [`monitor`](Channel::monitor) taken before subscribing.
//!
//! # Drops
//!
//! Items the policy drops (and items that expire) go to one drop hook: the one given
//! to [`ChannelBuilder::drop_hook`], which sees every drop from the first send, or
//! else the subscriber's ([`PublisherExt::on_dropped`](crate::PublisherExt::on_dropped)
//! downstream), which sees the drops made once it is subscribed. Drops with no hook
//! are still counted in the [`monitor`](Channel::monitor). Hook or not, drops are
//! logged as a rate-limited summary (debug, target `weir::drops`: the running total
//! per reason at each power of two, and at the end), never one event per item.
//!
//! # Stats
//!
//! [`Channel::monitor`] and [`Sender::monitor`] give the queue's
//! [`QueueMonitor`]: depth, capacity, oldest-item age, enqueued/dequeued, dropped by
//! reason, rejected, time senders spent blocked, arrival and drain rates, lag and
//! time-to-drain, and how many times the water marks paused the producers. Updated
//! per batch: once per offer and once per drain step.
//!
//! ```
//! use weir::prelude::*;
//! use weir::source::channel::ChannelPolicy;
//!
//! let (tx, rx) = weir::channel::<u64>(1_024, ChannelPolicy::Backpressure);
//! let producer = std::thread::spawn(move || {
//!     for i in 0..10_000 {
//!         tx.send_blocking(i).unwrap(); // waits while the channel is full
//!     }
//! }); // the last Sender dropped: the stream completes
//! let sum = rx.fold(0, |sum, x| sum + x).wait().unwrap();
//! producer.join().unwrap();
//! assert_eq!(sum, (0..10_000).sum::<u64>());
//! ```

mod admission;
mod link;
mod marks;
mod sender;

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub use admission::Admission;
pub use marks::{FlowState, WaterMarks};
pub use sender::{RejectReason, Rejected, Resumed, SendFuture, Sender};

pub(crate) use self::link::Waiters;
#[cfg(all(test, not(weir_loom)))]
use self::link::BATCH;
use self::link::{Chan, Link};
use crate::metrics::DropHook;
use crate::metrics::{QueueGauge, QueueMonitor};
use crate::queue::timed::TimedQueue;
use crate::queue::{Capacity, IntoCapacity, TimeBounds};
use crate::runtime::{Immediate, Scheduler};
use crate::{Publisher, Subscriber};

/// What a full channel does with an offered item.
///
/// ```
/// use weir::source::channel::{ChannelPolicy, TrySendError};
/// use weir::DropReason;
///
/// let offer = |policy| {
///     let (tx, rx) = weir::channel::<u32>(2, policy);
///     let answers: Vec<_> = (0..3).map(|i| tx.try_send(i).is_ok()).collect();
///     (answers, rx.monitor().snapshot())
/// };
/// let (answers, stats) = offer(ChannelPolicy::Backpressure);
/// assert_eq!((answers, stats.rejected), (vec![true, true, false], 1));
/// let (answers, stats) = offer(ChannelPolicy::DropOldest);
/// assert_eq!((answers, stats.dropped(DropReason::OverflowOldest)), (vec![true; 3], 1));
/// let (_, stats) = offer(ChannelPolicy::KeepLatest);
/// assert_eq!(stats.dropped(DropReason::ReplacedByLatest), 1);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChannelPolicy {
    /// Lossless: `try_send` hands the item back (`Full`, counted as rejected);
    /// `send` and `send_blocking` wait for room.
    Backpressure,
    /// Refuse: every send hands the item back at once (`Full`), counted as rejected.
    Reject,
    /// Drop the oldest queued item to make room (reason `OverflowOldest`).
    DropOldest,
    /// Drop the offered item (reason `OverflowNewest`).
    DropNewest,
    /// Replace the newest queued item with the offered one (the replaced item is
    /// dropped with reason `ReplacedByLatest`): the queue keeps the oldest items and
    /// the very latest one.
    KeepLatest,
}

/// Why a send handed its item back.
///
/// ```
/// use weir::source::channel::{ChannelPolicy, TrySendError};
///
/// let (tx, _rx) = weir::channel::<String>(1, ChannelPolicy::Reject);
/// tx.try_send("a".to_owned()).unwrap();
/// let refused = tx.try_send("b".to_owned()).unwrap_err();
/// assert!(refused.is_full() && !refused.is_closed());
/// assert_eq!(refused.into_inner(), "b", "the item comes back");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum TrySendError<T> {
    /// The channel is full (`Backpressure` with `try_send`, or `Reject`).
    Full(T),
    /// The channel is closed: every sender closed it, it failed, or its subscriber
    /// cancelled or terminated.
    Closed(T),
    /// The shed rung of the channel's [`Admission`] ladder is on and the item's class
    /// is below its threshold (counted as `shed` and `rejected`).
    Shed(T),
    /// The item's deadline leaves less than the minimum useful time of the channel's
    /// [`Admission::deadlines`] (counted as `late` and `rejected`).
    Late(T),
}

impl<T> TrySendError<T> {
    /// The item handed back.
    pub fn into_inner(self) -> T {
        match self {
            TrySendError::Full(item)
            | TrySendError::Closed(item)
            | TrySendError::Shed(item)
            | TrySendError::Late(item) => item,
        }
    }

    /// True for [`Full`](TrySendError::Full).
    pub fn is_full(&self) -> bool {
        matches!(self, TrySendError::Full(_))
    }

    /// True for [`Closed`](TrySendError::Closed).
    pub fn is_closed(&self) -> bool {
        matches!(self, TrySendError::Closed(_))
    }

    /// True for [`Shed`](TrySendError::Shed).
    pub fn is_shed(&self) -> bool {
        matches!(self, TrySendError::Shed(_))
    }

    /// True for [`Late`](TrySendError::Late).
    pub fn is_late(&self) -> bool {
        matches!(self, TrySendError::Late(_))
    }
}

impl<T> fmt::Debug for TrySendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrySendError::Full(_) => f.write_str("Full(..)"),
            TrySendError::Closed(_) => f.write_str("Closed(..)"),
            TrySendError::Shed(_) => f.write_str("Shed(..)"),
            TrySendError::Late(_) => f.write_str("Late(..)"),
        }
    }
}

impl<T> fmt::Display for TrySendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrySendError::Full(_) => f.write_str("channel full: item handed back"),
            TrySendError::Closed(_) => f.write_str("channel closed: item handed back"),
            TrySendError::Shed(_) => {
                f.write_str("channel shedding: item below the admitted class handed back")
            }
            TrySendError::Late(_) => {
                f.write_str("item refused: its deadline leaves less than the minimum useful time")
            }
        }
    }
}

impl<T> std::error::Error for TrySendError<T> {}

/// What [`Sender::try_send_all`] hands back when the channel does not take an item:
/// how many went in before it, why it was refused (with the item), and the items
/// after it, never offered. Nothing is lost: `sent`, the refused item and `unsent`
/// are together exactly the items given.
///
/// ```
/// use weir::source::channel::{ChannelPolicy, TrySendError};
///
/// let (tx, _rx) = weir::channel::<u32>(3, ChannelPolicy::Backpressure);
/// let refused = tx.try_send_all(1..=5).unwrap_err();
/// assert_eq!(refused.sent, 3);
/// assert_eq!(refused.error, TrySendError::Full(4));
/// assert_eq!(refused.unsent.collect::<Vec<_>>(), vec![5]);
/// ```
pub struct SendAllError<T, I> {
    /// Items the channel took (accepted, or dropped by its policy) before the refusal.
    pub sent: usize,
    /// Why the channel refused the next item, with that item.
    pub error: TrySendError<T>,
    /// The items after the refused one, in order, never offered.
    pub unsent: Unsent<T, I>,
}

impl<T, I> fmt::Debug for SendAllError<T, I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SendAllError")
            .field("sent", &self.sent)
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl<T, I> fmt::Display for SendAllError<T, I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (after {} sent)", self.error, self.sent)
    }
}

impl<T, I> std::error::Error for SendAllError<T, I> {}

/// The items a [`Sender::try_send_all`] did not offer, in order: those it had taken
/// from the iterator for its last locked step, then the rest of the iterator.
pub struct Unsent<T, I> {
    taken: std::collections::vec_deque::IntoIter<T>,
    rest: I,
}

impl<T, I> Unsent<T, I> {
    pub(crate) fn new(taken: std::collections::VecDeque<T>, rest: I) -> Self {
        Unsent {
            taken: taken.into_iter(),
            rest,
        }
    }
}

impl<T, I: Iterator<Item = T>> Iterator for Unsent<T, I> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        self.taken.next().or_else(|| self.rest.next())
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let (low, high) = self.rest.size_hint();
        let taken = self.taken.len();
        (
            low.saturating_add(taken),
            high.and_then(|h| h.checked_add(taken)),
        )
    }
}

impl<T, I> fmt::Debug for Unsent<T, I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Unsent")
            .field("taken", &self.taken.len())
            .finish_non_exhaustive()
    }
}

/// The channel closed while waiting for it to resume ([`Sender::resumed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChannelClosed;

impl fmt::Display for ChannelClosed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("channel closed")
    }
}

impl std::error::Error for ChannelClosed {}

/// A push source: a [`Sender`] for the producers and a [`Channel`] publisher for the
/// pipeline. `capacity` is in items (`usize`) or a [`Capacity`] (e.g.
/// [`Capacity::for_wait`]); water marks default to high = capacity, low = capacity / 2;
/// no time bounds; the wall clock. Use [`ChannelBuilder`] for the rest. See the
/// [module docs](self).
///
/// # Panics
///
/// If `capacity` is 0 or above [`MAX_CAPACITY`](crate::queue::MAX_CAPACITY): "channel
/// capacity must be in 1..=2^30 (got 0)".
///
/// # Examples
///
/// ```
/// use weir::prelude::*;
/// use weir::source::channel::ChannelPolicy;
/// use weir::DropReason;
///
/// let (tx, rx) = weir::channel::<u32>(3, ChannelPolicy::DropOldest);
/// let monitor = rx.monitor();
/// for i in 0..6 {
///     tx.try_send(i).unwrap(); // never refused: the oldest queued item makes room
/// }
/// drop(tx);
/// // Dropped before anyone subscribed: counted in the queue's stats. Drops after
/// // subscribe also go to the subscriber's drop hook (`PublisherExt::on_dropped`).
/// assert_eq!(monitor.snapshot().dropped(DropReason::OverflowOldest), 3);
/// assert_eq!(rx.collect().wait().unwrap(), vec![3, 4, 5]);
/// ```
pub fn channel<T: Send + 'static>(
    capacity: impl IntoCapacity,
    policy: ChannelPolicy,
) -> (Sender<T>, Channel<T>) {
    ChannelBuilder::new(capacity, policy).build()
}

/// Configures a [`channel`](fn@channel): water marks, time bounds, clock, and graded
/// admission ([`build_with`](Self::build_with)).
///
/// ```
/// use std::time::Duration;
/// use weir::queue::{Capacity, TimeBounds};
/// use weir::runtime::VirtualTime;
/// use weir::source::channel::{ChannelBuilder, ChannelPolicy, WaterMarks};
///
/// let clock = VirtualTime::new();
/// let capacity = Capacity::for_wait(1_000.0, Duration::from_secs(2)).unwrap(); // 2,000
/// let (tx, rx) = ChannelBuilder::new(capacity, ChannelPolicy::DropOldest)
///     .water_marks(WaterMarks::new(1_500, 500))
///     .time_bounds(TimeBounds::none().max_age(Duration::from_secs(2)))
///     .clock(clock.clone())
///     .build::<String>();
/// assert_eq!(tx.capacity(), 2_000);
/// # drop(rx);
/// ```
#[derive(Clone)]
pub struct ChannelBuilder {
    capacity: Capacity,
    policy: ChannelPolicy,
    marks: Option<WaterMarks>,
    bounds: TimeBounds,
    clock: Arc<dyn Scheduler>,
    hook: Option<DropHook>,
}

impl fmt::Debug for ChannelBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChannelBuilder")
            .field("capacity", &self.capacity)
            .field("policy", &self.policy)
            .field("marks", &self.marks)
            .field("bounds", &self.bounds)
            .finish_non_exhaustive()
    }
}

impl ChannelBuilder {
    /// A channel of `capacity` items with `policy`.
    ///
    /// # Panics
    ///
    /// If `capacity` is a `usize` that is 0 or above [`MAX_CAPACITY`](crate::queue::MAX_CAPACITY):
    /// "channel capacity must be in 1..=2^30 (got 0)".
    pub fn new(capacity: impl IntoCapacity, policy: ChannelPolicy) -> Self {
        ChannelBuilder {
            capacity: capacity.into_capacity("channel"),
            policy,
            marks: None,
            bounds: TimeBounds::none(),
            clock: Arc::new(Immediate),
            hook: None,
        }
    }

    /// Report every item the channel drops (policy drops and expired items, from the
    /// first send on, whether or not a subscriber is attached yet) to `hook`. Without
    /// it, drops go to the subscriber's hook once it subscribes.
    ///
    /// ```
    /// use weir::metrics::{DropHook, Drops};
    /// use weir::source::channel::{ChannelBuilder, ChannelPolicy};
    /// use weir::DropReason;
    ///
    /// let drops = Drops::new();
    /// let (tx, rx) = ChannelBuilder::new(2, ChannelPolicy::DropOldest)
    ///     .drop_hook(DropHook::new(drops.clone()))
    ///     .build::<u32>();
    /// for i in 0..5 {
    ///     tx.try_send(i).unwrap();
    /// }
    /// assert_eq!(drops.count(DropReason::OverflowOldest), 3, "before any subscriber");
    /// # drop(rx);
    /// ```
    pub fn drop_hook(mut self, hook: DropHook) -> Self {
        self.hook = Some(hook);
        self
    }

    /// Pause at `marks.high()`, resume at `marks.low()` (checked against the capacity
    /// in [`build`](Self::build)). See [`WaterMarks::derive`].
    pub fn water_marks(mut self, marks: WaterMarks) -> Self {
        self.marks = Some(marks);
        self
    }

    /// Max age, CoDel and adaptive LIFO for the queue (see [`TimeBounds`]).
    pub fn time_bounds(mut self, bounds: TimeBounds) -> Self {
        self.bounds = bounds;
        self
    }

    /// The clock that stamps items and times the stats (default: the wall clock);
    /// pass a [`VirtualTime`](crate::runtime::VirtualTime) in tests.
    pub fn clock(mut self, clock: impl Scheduler) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Build the channel.
    ///
    /// # Panics
    ///
    /// If the high water mark is above the capacity.
    ///
    /// ```should_panic
    /// use weir::source::channel::{ChannelBuilder, ChannelPolicy, WaterMarks};
    ///
    /// // panics: "channel water mark high must be in 1..=capacity (got high 20, capacity 10)"
    /// let _ = ChannelBuilder::new(10, ChannelPolicy::Reject)
    ///     .water_marks(WaterMarks::new(20, 5))
    ///     .build::<u8>();
    /// ```
    pub fn build<T: Send + 'static>(self) -> (Sender<T>, Channel<T>) {
        self.build_with(Admission::new())
    }

    /// Build the channel with graded admission: the reduce and shed rungs of
    /// `admission` between flowing and paused, and its deadline rules (see
    /// [`Admission`]).
    ///
    /// # Panics
    ///
    /// If the high water mark is above the capacity, or the rungs do not rise (the
    /// reduce rung's high mark must be below the shed rung's, and both at most the
    /// pause mark), with the marks in the message.
    ///
    /// ```should_panic
    /// use weir::source::channel::{Admission, ChannelBuilder, ChannelPolicy, WaterMarks};
    ///
    /// // panics: "channel: rungs must rise: the reduce rung's high mark must be below
    /// // the shed rung's (got reduce high 90, shed high 70)"
    /// let admission = Admission::new()
    ///     .reduce_at(WaterMarks::new(90, 50), 0.5)
    ///     .shed_below(WaterMarks::new(70, 60), 1u8, |x: &u8| *x);
    /// let _ = ChannelBuilder::new(100, ChannelPolicy::Reject).build_with(admission);
    /// ```
    pub fn build_with<T: Send + 'static>(self, admission: Admission<T>) -> (Sender<T>, Channel<T>) {
        let capacity = self.capacity.get();
        let marks = self
            .marks
            .unwrap_or_else(|| WaterMarks::default_for(capacity));
        assert!(
            marks.high() <= capacity,
            "channel water mark high must be in 1..=capacity (got high {}, capacity {capacity})",
            marks.high()
        );
        let gauge = QueueGauge::new(capacity, self.clock.clone());
        admission.check(marks, capacity);
        let queue = TimedQueue::new(self.capacity, self.bounds, gauge.clone())
            .with_deadlines(admission.keeps_deadlines());
        // Lane mode (a claim ring for senders while a drain on another thread
        // watches it) where nothing reads an item or its age: no time bounds, no
        // shed rung, no deadlines.
        let lane = self.bounds == TimeBounds::none() && !admission.reads_items();
        let shared = Link::new(Chan::new(
            self.policy,
            marks,
            queue,
            self.hook,
            admission,
            lane,
        ));
        // Before the stats are read: the counts the queue holds back are published,
        // and items that died while nobody reads leave.
        let sweeper: Arc<dyn crate::metrics::Sweep> = shared.clone();
        gauge.set_sweeper(Arc::downgrade(&sweeper));
        // The flow state senders read, for snapshots (weak: a monitor does not keep
        // the channel and its items alive).
        let link = Arc::downgrade(&shared);
        gauge.set_flow(move || {
            link.upgrade()
                .map_or(FlowState::Flowing, |link| link.stage().flow())
        });
        (
            Sender {
                shared: shared.clone(),
            },
            Channel { shared },
        )
    }
}

/// The publisher half of a [`channel`](fn@channel). Serves one subscriber (it is not
/// `Clone`, and `subscribe` consumes it); see the [module docs](self).
///
/// ```compile_fail
/// let (_tx, rx) = weir::channel::<u64>(8, weir::source::channel::ChannelPolicy::Reject);
/// let _second = rx.clone(); // a channel has one subscriber: no clones
/// ```
#[must_use = "publishers do nothing until subscribed"]
pub struct Channel<T: Send + 'static> {
    shared: Arc<Link<T>>,
}

impl<T: Send + 'static> Drop for Channel<T> {
    /// Dropped without subscribing: nobody can read the channel any more, so it closes
    /// (senders get `Closed`, waiting senders wake up) and the queued items are
    /// released.
    fn drop(&mut self) {
        // Relaxed: only this handle's own `subscribe` sets it.
        if !self.shared.stage().subscribed.load(Ordering::Relaxed) {
            self.shared.stage().shut();
        }
    }
}

impl<T: Send + 'static> fmt::Debug for Channel<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Channel")
            .field("policy", &self.shared.stage().policy)
            .field("marks", &self.shared.stage().marks)
            .finish_non_exhaustive()
    }
}

impl<T: Send + 'static> Channel<T> {
    /// The queue's statistics, readable from any thread while the pipeline runs.
    ///
    /// ```
    /// use weir::source::channel::ChannelPolicy;
    ///
    /// let (tx, rx) = weir::channel::<u32>(10, ChannelPolicy::Backpressure);
    /// let monitor = rx.monitor();
    /// tx.try_send(1).unwrap();
    /// tx.try_send(2).unwrap();
    /// let stats = monitor.snapshot();
    /// assert_eq!((stats.depth, stats.capacity, stats.enqueued), (2, 10, 2));
    /// ```
    pub fn monitor(&self) -> QueueMonitor {
        QueueMonitor::new(self.shared.stage().gauge.clone())
    }
}

impl<T: Send + 'static> Publisher for Channel<T> {
    type Item = T;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<T> + Send + 'static,
    {
        // Relaxed: read only by this handle's `Drop`, on this thread.
        self.shared
            .stage()
            .subscribed
            .store(true, Ordering::Relaxed);
        self.shared.attach_subscriber(subscriber);
    }

    fn in_flight_bound(&self) -> u64 {
        (self.shared.stage().capacity() + self.shared.stage().batch_size()) as u64
    }

    fn queue_monitor(&self) -> Option<QueueMonitor> {
        Some(self.monitor())
    }
}

#[cfg(all(test, not(weir_loom)))]
mod tests {
    use super::*;
    use crate::PublisherExt;

    #[test]
    #[should_panic(
        expected = "channel water mark high must be in 1..=capacity (got high 20, capacity 10)"
    )]
    fn marks_above_capacity_are_refused() {
        let _ = ChannelBuilder::new(10, ChannelPolicy::Reject)
            .water_marks(WaterMarks::new(20, 5))
            .build::<u8>();
    }

    #[test]
    #[should_panic(expected = "channel capacity must be in 1..=2^30 (got 0)")]
    fn a_zero_capacity_is_refused_naming_the_channel() {
        let _ = channel::<u8>(0, ChannelPolicy::Reject);
    }

    #[test]
    fn in_flight_bound_is_capacity_plus_one_batch() {
        let (_tx, rx) = channel::<u8>(10, ChannelPolicy::Reject);
        assert_eq!(rx.in_flight_bound(), 20);
        let (_tx, rx) = channel::<u8>(1_000, ChannelPolicy::Reject);
        assert_eq!(rx.in_flight_bound(), 1_000 + BATCH as u64);
        assert_eq!(rx.map(|x| x).in_flight_bound(), 1_000 + BATCH as u64);
    }
}
