//! Bounded queues and how to size them.
//!
//! Every queue weir builds is bounded by construction (principle 2) and bounded in
//! *time* as well as in count (principle 4):
//!
//! - [`Capacity`] sizes a queue in items, or from a wait budget:
//!   `Capacity::for_wait(drain_rate, budget)` = `drain_rate × budget` (`docs/design.md` §10: a
//!   queue drained at 1,200/s with a 5 s budget holds 6,000).
//! - [`TimeBounds`] adds an optional maximum age (items that waited longer are dropped
//!   at dequeue, counted as [`DropReason::Expired`](crate::DropReason::Expired), so no
//!   work is done for callers that gave up), optional CoDel (an item may wait up to an
//!   interval while the queue empties now and then, and only up to a short target once
//!   it has stood non-empty for a whole interval; older items are dropped at dequeue
//!   as [`DropReason::CoDel`](crate::DropReason::CoDel)) and optional adaptive LIFO
//!   (once the queue has not been empty for an interval, serve the newest item first:
//!   a standing queue then hurts only the items already too old, not every new
//!   arrival).
//! - Items are stamped at enqueue; each queue's [`QueueMonitor`](crate::metrics::QueueMonitor)
//!   reports depth, oldest-item age, rates, and lag in seconds.

// The crate's two unsafe modules: a lock-free SPSC ring publishes a whole batch of
// slots with one index store, and a claim ring hands each slot from the producer
// that claimed it to the consumer by its stamp; safe Rust cannot express either
// without a lock (see each module's docs for the protocol that makes it sound).
#[allow(unsafe_code)]
pub(crate) mod claim;
#[allow(unsafe_code)]
pub(crate) mod spsc;
pub(crate) mod timed;

use std::fmt;
use std::time::Duration;

/// The largest capacity a weir queue accepts (2^30 items): a guard against sizing
/// arithmetic gone wrong, not a memory budget.
pub const MAX_CAPACITY: usize = 1 << 30;

/// How many items a queue may hold. See the [module docs](self).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Capacity(usize);

impl Capacity {
    /// Exactly `n` items.
    ///
    /// # Panics
    ///
    /// If `n` is 0 or greater than [`MAX_CAPACITY`]: "Capacity::items must be in
    /// 1..=2^30 (got 0)".
    pub fn items(n: usize) -> Self {
        Capacity(crate::stage::window::validate("Capacity::items", n as u64))
    }

    /// Enough room for `budget` worth of work at `drain_rate` items per second:
    /// `⌈drain_rate × budget⌉` (Little's law). Keep the budget below your callers' own
    /// timeout, or admitted work is dead on arrival.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir::queue::Capacity;
    ///
    /// let capacity = Capacity::for_wait(1_200.0, Duration::from_secs(5)).unwrap();
    /// assert_eq!(capacity.get(), 6_000);
    /// assert!(Capacity::for_wait(0.0, Duration::from_secs(5)).is_err());
    /// ```
    pub fn for_wait(drain_rate: f64, budget: Duration) -> Result<Self, SizingError> {
        if !(drain_rate.is_finite() && drain_rate > 0.0) {
            return Err(SizingError::new(format!(
                "drain_rate must be a positive, finite number of items per second (got {drain_rate})"
            )));
        }
        if budget.is_zero() {
            return Err(SizingError::new("wait budget must be greater than zero"));
        }
        let items = (drain_rate * budget.as_secs_f64()).ceil();
        if items > MAX_CAPACITY as f64 {
            return Err(SizingError::new(format!(
                "{drain_rate}/s × {budget:?} = {items} items exceeds MAX_CAPACITY ({MAX_CAPACITY})"
            )));
        }
        Ok(Capacity((items as usize).max(1)))
    }

    /// The capacity in items.
    pub fn get(self) -> usize {
        self.0
    }
}

impl From<usize> for Capacity {
    /// [`Capacity::items`].
    fn from(n: usize) -> Self {
        Capacity::items(n)
    }
}

/// A queue's size as its builder takes it: a number of items (of any integer type), or
/// a [`Capacity`]. A number is checked on the way in, and its panic names the queue it
/// was for.
pub trait IntoCapacity {
    /// The capacity; a size out of range panics with "`{user}` capacity must be in
    /// 1..=2^30 (got …)".
    fn into_capacity(self, user: &str) -> Capacity;
}

/// Any integer type: a `usize` from a collection's length, a `u64` from the operator
/// API's counts (`buffer(n)`, `take(n)`), or a plain literal.
macro_rules! into_capacity_for_integers {
    ($($int:ty),*) => {$(
        impl IntoCapacity for $int {
            fn into_capacity(self, user: &str) -> Capacity {
                match u64::try_from(self) {
                    Ok(n) => {
                        Capacity(crate::stage::window::validate(format_args!("{user} capacity"), n))
                    }
                    // Negative.
                    Err(_) => panic!("{user} capacity must be in 1..=2^30 (got {self})"),
                }
            }
        }
    )*};
}

into_capacity_for_integers!(usize, u64, u32, i32);

impl IntoCapacity for Capacity {
    fn into_capacity(self, _user: &str) -> Capacity {
        self
    }
}

/// Time limits on a queue: maximum age at dequeue, CoDel and adaptive LIFO. Default:
/// none of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeBounds {
    max_age: Option<Duration>,
    lifo_after: Option<Duration>,
    codel: Option<(Duration, Duration)>,
}

impl TimeBounds {
    /// No time limits: FIFO, items never expire.
    pub fn none() -> Self {
        Self::default()
    }

    /// Drop items that waited longer than `max_age` when they reach the head of the
    /// queue (reason [`Expired`](crate::DropReason::Expired), counted, sent to the
    /// drop hook). In the push source and `on_backpressure_buffer` they also leave
    /// while nobody reads: an arriving item, and each
    /// [`QueueMonitor`](crate::metrics::QueueMonitor) snapshot, first take the items
    /// already past `max_age` out of the head (an arriving item gets their room), so
    /// the queue's depth, oldest age and lag describe live work. (`publish_on_with`
    /// expires at its next pass: its ring holds only what was requested.)
    ///
    /// # Panics
    ///
    /// If `max_age` is zero (every item would expire).
    pub fn max_age(mut self, max_age: Duration) -> Self {
        assert!(
            !max_age.is_zero(),
            "TimeBounds::max_age must be greater than zero (got 0ns)"
        );
        self.max_age = Some(max_age);
        self
    }

    /// Adaptive LIFO: once the queue has been non-empty for `interval` without a break
    /// (a standing queue), serve the newest item first until it empties again.
    ///
    /// # Panics
    ///
    /// If `interval` is zero.
    pub fn adaptive_lifo(mut self, interval: Duration) -> Self {
        assert!(
            !interval.is_zero(),
            "TimeBounds::adaptive_lifo interval must be greater than zero (got 0ns)"
        );
        self.lifo_after = Some(interval);
        self
    }

    /// CoDel, controlled delay as a queue discipline: while the queue has been empty
    /// at some moment in the last `interval`, an item may wait up to `interval`; once
    /// it has stood non-empty for a whole `interval`, only up to `target`. Items that
    /// waited longer are dropped when they reach the head (reason
    /// [`CoDel`](crate::DropReason::CoDel), counted, sent to the drop hook), so a
    /// burst is absorbed, and a standing queue is cut down to `target` of waiting
    /// instead of making every caller wait behind it (typical: 5 ms and 100 ms).
    ///
    /// With [`adaptive_lifo`](Self::adaptive_lifo) as well, a standing queue serves
    /// its newest item first and CoDel sheds the old items at the head: new arrivals
    /// are served fresh, and the ones already past `target` are dropped rather than
    /// served late. With [`max_age`](Self::max_age) as well, an item past its maximum
    /// age is dropped as `Expired` first. CoDel drops at dequeue only (a queue
    /// nobody reads has no waiting to control; a maximum age still applies there).
    ///
    /// # Panics
    ///
    /// If `target` or `interval` is zero, or `target` is not below `interval`.
    pub fn codel(mut self, target: Duration, interval: Duration) -> Self {
        assert!(
            !target.is_zero() && !interval.is_zero(),
            "TimeBounds::codel target and interval must be greater than zero (got {target:?} and {interval:?})"
        );
        assert!(
            target < interval,
            "TimeBounds::codel target ({target:?}) must be below interval ({interval:?})"
        );
        self.codel = Some((target, interval));
        self
    }

    /// CoDel's target and interval, if set.
    pub fn get_codel(&self) -> Option<(Duration, Duration)> {
        self.codel
    }

    /// The maximum age, if set.
    pub fn get_max_age(&self) -> Option<Duration> {
        self.max_age
    }

    /// The adaptive-LIFO interval, if set.
    pub fn get_adaptive_lifo(&self) -> Option<Duration> {
        self.lifo_after
    }
}

/// A queue-sizing request that cannot be met, with the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizingError {
    message: String,
}

impl SizingError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        SizingError {
            message: message.into(),
        }
    }
}

impl fmt::Display for SizingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "impossible queue sizing: {}", self.message)
    }
}

impl std::error::Error for SizingError {}
