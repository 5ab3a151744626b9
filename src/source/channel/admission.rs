//! Graded admission: a ladder of water marks between "flowing" and "paused", each
//! with its action, and per-item deadlines at the door.
//!
//! A plain channel has one step: below the high mark it flows, at it producers are
//! told to pause. Production systems grade the answer, so that the least valuable
//! work goes first and the producers hear early that they should slow down:
//!
//! 1. **Reduce** ([`Admission::reduce_at`]): from the rung's high mark until the depth
//!    falls back to its low mark, the channel asks cooperative producers to send at a
//!    fraction of their rate ([`FlowState::Reducing`]; [`FlowState::rate_factor`]).
//!    Nothing is refused yet.
//! 2. **Shed** ([`Admission::shed_below`]): from the rung's high mark until it falls
//!    back to the low mark, items whose priority class is below a threshold are
//!    refused at once ([`TrySendError::Shed`](super::TrySendError::Shed), counted in
//!    `QueueStats::shed`); items at or above it are admitted as before.
//! 3. **Pause** (the channel's [`WaterMarks`]): [`FlowState::Paused`], as without a
//!    ladder; the policy handles what still arrives, up to capacity.
//!
//! Each rung has its own hysteresis: it turns on when an offer brings the depth to its
//! high mark and off when items leaving bring it down to its low mark. The state the
//! senders read is the highest rung that is on. Rungs must rise: the reduce mark below
//! the shed mark, both at most the pause mark.
//!
//! **Deadlines** ([`Admission::deadlines`]): an item whose remaining budget is below a
//! minimum useful time is refused at the door ([`TrySendError::Late`](super::TrySendError::Late),
//! counted in `QueueStats::late`), and an item whose deadline passed while it waited
//! is dropped when it reaches the head, reason
//! [`DeadlineExceeded`](crate::DropReason::DeadlineExceeded). See
//! [`weir::deadline`](crate::deadline).

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::marks::{FlowState, WaterMarks};
use crate::deadline::Deadline;

/// Which items a shedding channel refuses.
type Sheddable<T> = Arc<dyn Fn(&T) -> bool + Send + Sync>;

/// How a channel reads its items' deadlines.
type DeadlineOf<T> = Arc<dyn Fn(&T) -> Option<Instant> + Send + Sync>;

/// The graded-admission rules of a channel: the reduce and shed rungs of its ladder,
/// and deadlines. Built up with the methods below and given to
/// [`ChannelBuilder::build_with`](super::ChannelBuilder::build_with).
///
/// A plain channel has one step: below the high mark it flows, at it producers are
/// told to pause. A ladder grades the answer, so that producers hear early that they
/// should slow down and the least valuable work goes first:
///
/// 1. **Reduce** ([`reduce_at`](Self::reduce_at)): the channel asks cooperative
///    producers to send at a fraction of their rate ([`FlowState::Reducing`],
///    [`FlowState::rate_factor`]). Nothing is refused.
/// 2. **Shed** ([`shed_below`](Self::shed_below)): items whose priority class is
///    below a threshold are refused at once ([`TrySendError::Shed`](super::TrySendError::Shed));
///    the others are admitted as before.
/// 3. **Pause** (the channel's [`WaterMarks`]): [`FlowState::Paused`], as without a
///    ladder; the policy handles what still arrives, up to capacity (shed and late
///    items are still refused first).
///
/// Each rung has its own hysteresis: it turns on when an offer brings the depth to
/// its high mark and off when items leaving bring it down to its low mark; senders
/// read the highest rung that is on ([`Sender::state`](super::Sender::state)). Rungs
/// must rise: the reduce mark below the shed mark, both at most the pause mark.
///
/// The classifier and the deadline reader run on the sender's thread before the
/// channel's lock is taken: a panic in them propagates to that send and leaves the
/// channel as it was.
///
/// # Examples
///
/// An image service with 10,000 slots: producers are asked to halve their rate at 70 %
/// (until the queue is back to 20 %), and jobs below `Critical` are refused at 90 %
/// (until 85 %).
///
/// ```
/// use weir::source::channel::{
///     Admission, ChannelBuilder, ChannelPolicy, FlowState, TrySendError, WaterMarks,
/// };
///
/// #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
/// enum Class { Batch, Interactive, Critical }
///
/// let admission = Admission::new()
///     .reduce_at(WaterMarks::new(7_000, 2_000), 0.5)
///     .shed_below(WaterMarks::new(9_000, 8_500), Class::Critical, |job: &(Class, u32)| job.0);
/// let (tx, rx) = ChannelBuilder::new(10_000, ChannelPolicy::Backpressure).build_with(admission);
/// for i in 0..7_000 {
///     tx.try_send((Class::Batch, i)).unwrap();
/// }
/// assert_eq!(tx.state(), FlowState::Reducing { factor: 0.5 });
/// for i in 0..2_000 {
///     tx.try_send((Class::Interactive, i)).unwrap();
/// }
/// assert_eq!(tx.state(), FlowState::Shedding { factor: 0.5 });
/// assert_eq!(tx.try_send((Class::Batch, 0)), Err(TrySendError::Shed((Class::Batch, 0))));
/// assert_eq!(tx.try_send((Class::Critical, 1)), Ok(()), "critical jobs still get in");
/// assert_eq!(rx.monitor().snapshot().shed, 1);
/// ```
pub struct Admission<T> {
    pub(super) reduce: Option<(WaterMarks, f64)>,
    pub(super) shed: Option<(WaterMarks, Sheddable<T>)>,
    pub(super) deadlines: Option<(DeadlineOf<T>, Duration)>,
}

impl<T> Clone for Admission<T> {
    fn clone(&self) -> Self {
        Admission {
            reduce: self.reduce,
            shed: self.shed.clone(),
            deadlines: self.deadlines.clone(),
        }
    }
}

impl<T> Default for Admission<T> {
    fn default() -> Self {
        Admission {
            reduce: None,
            shed: None,
            deadlines: None,
        }
    }
}

impl<T> fmt::Debug for Admission<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admission")
            .field("reduce", &self.reduce)
            .field("shed", &self.shed.as_ref().map(|(marks, _)| marks))
            .field("min_useful", &self.deadlines.as_ref().map(|(_, min)| min))
            .finish()
    }
}

impl<T: 'static> Admission<T> {
    /// No rungs, no deadlines: the channel flows and pauses at its water marks only.
    pub fn new() -> Self {
        Self::default()
    }

    /// The reduce rung: from `marks.high()` until the depth is back at `marks.low()`
    /// the channel reads [`FlowState::Reducing { factor }`](FlowState::Reducing):
    /// cooperative producers send at `factor` times their rate.
    ///
    /// # Panics
    ///
    /// If `factor` is not in `0.0 < factor < 1.0` (a factor of 0 is a pause, of 1 no
    /// reduction): "Admission::reduce_at factor must be in (0, 1) (got {factor})".
    pub fn reduce_at(mut self, marks: WaterMarks, factor: f64) -> Self {
        assert!(
            factor > 0.0 && factor < 1.0,
            "Admission::reduce_at factor must be in (0, 1) (got {factor})"
        );
        self.reduce = Some((marks, factor));
        self
    }

    /// The shed rung: from `marks.high()` until the depth is back at `marks.low()`,
    /// items whose class (`classify(item)`) is below `class` are refused at once
    /// ([`TrySendError::Shed`](super::TrySendError::Shed), counted in `shed` and
    /// `rejected`); the others are admitted as before. The class is any ordered type:
    /// an enum of your priorities, a number.
    pub fn shed_below<P, F>(mut self, marks: WaterMarks, class: P, classify: F) -> Self
    where
        P: Ord + Send + Sync + 'static,
        F: Fn(&T) -> P + Send + Sync + 'static,
    {
        self.shed = Some((marks, Arc::new(move |item: &T| classify(item) < class)));
        self
    }

    /// Honour the items' deadlines ([`Deadline`]): refuse an item already past its
    /// deadline or with less than `min_useful` of its budget left ([`TrySendError::Late`](super::TrySendError::Late),
    /// counted in `late` and `rejected`), and drop an item whose deadline passed while
    /// it waited when it reaches the head (reason
    /// [`DeadlineExceeded`](crate::DropReason::DeadlineExceeded)). Deadlines are read
    /// on the channel's clock.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir::deadline::WithDeadline;
    /// use weir::runtime::VirtualTime;
    /// use weir::source::channel::{Admission, ChannelBuilder, ChannelPolicy, TrySendError};
    /// use weir::prelude::*;
    ///
    /// let clock = VirtualTime::new();
    /// let (tx, rx) = ChannelBuilder::new(8, ChannelPolicy::Backpressure)
    ///     .clock(clock.clone())
    ///     .build_with(Admission::new().deadlines(Duration::from_millis(50)));
    /// let monitor = rx.monitor();
    /// let ms = Duration::from_millis;
    /// // 20 ms left is less than the 50 ms the work needs: refused at the door.
    /// let hurried = WithDeadline::within(1, ms(20), &clock);
    /// assert!(matches!(tx.try_send(hurried), Err(TrySendError::Late(_))));
    /// tx.try_send(WithDeadline::within(2, ms(100), &clock)).unwrap();
    /// tx.try_send(WithDeadline::within(3, ms(500), &clock)).unwrap();
    /// clock.advance(ms(200)); // item 2's caller has given up
    /// drop(tx);
    /// let served: Vec<u32> = rx.map(|job| job.into_inner()).collect().wait().unwrap();
    /// assert_eq!(served, [3]);
    /// let stats = monitor.snapshot();
    /// assert_eq!((stats.late, stats.dropped(weir::DropReason::DeadlineExceeded)), (1, 1));
    /// ```
    pub fn deadlines(self, min_useful: Duration) -> Self
    where
        T: Deadline,
    {
        self.deadlines_by(min_useful, |item: &T| item.deadline())
    }

    /// [`deadlines`](Self::deadlines) for items that do not implement [`Deadline`]:
    /// `deadline_of` reads an item's deadline (`None`: it has none).
    pub fn deadlines_by<F>(mut self, min_useful: Duration, deadline_of: F) -> Self
    where
        F: Fn(&T) -> Option<Instant> + Send + Sync + 'static,
    {
        self.deadlines = Some((Arc::new(deadline_of), min_useful));
        self
    }

    /// Check the rungs against the channel's pause marks and capacity (`build`).
    pub(super) fn check(&self, pause: WaterMarks, capacity: usize) {
        let rungs = [
            ("reduce", self.reduce.map(|(m, _)| m)),
            ("shed", self.shed.as_ref().map(|(m, _)| *m)),
        ];
        for (name, marks) in rungs {
            if let Some(marks) = marks {
                assert!(
                    marks.high() <= pause.high(),
                    "channel: the {name} rung's high mark must be at most the pause mark \
                     (got {name} high {}, pause high {}, capacity {capacity})",
                    marks.high(),
                    pause.high()
                );
            }
        }
        if let (Some((reduce, _)), Some((shed, _))) = (&self.reduce, &self.shed) {
            assert!(
                reduce.high() < shed.high(),
                "channel: rungs must rise: the reduce rung's high mark must be below the \
                 shed rung's (got reduce high {}, shed high {})",
                reduce.high(),
                shed.high()
            );
        }
    }

    /// Read what admission needs to know of `item`: its deadline and whether its
    /// class may be shed. Runs the user's functions, so the caller holds no lock (a
    /// panic in them propagates to the sender's call and leaves the channel as it
    /// was).
    pub(super) fn assess(&self, item: &T) -> Assessed {
        Assessed {
            deadline: self.deadlines.as_ref().and_then(|(of, _)| of(item)),
            sheddable: self
                .shed
                .as_ref()
                .is_some_and(|(_, sheddable)| sheddable(item)),
        }
    }

    /// Whether an item so assessed is refused at `now`, and why.
    pub(super) fn refuses(&self, item: Assessed, shedding: bool, now: Instant) -> Option<Refusal> {
        if let (Some(deadline), Some((_, min_useful))) = (item.deadline, &self.deadlines) {
            // Already dead (the dequeue's test) or too close to it.
            if now > deadline || deadline.saturating_duration_since(now) < *min_useful {
                return Some(Refusal::Late);
            }
        }
        (shedding && item.sheddable).then_some(Refusal::Shed)
    }

    /// True when the channel keeps deadlines.
    pub(super) fn keeps_deadlines(&self) -> bool {
        self.deadlines.is_some()
    }

    /// True when admission reads anything of an item (a shed rung or deadlines):
    /// otherwise [`assess`](Self::assess) says the same of every item and
    /// [`refuses`](Self::refuses) refuses none.
    pub(super) fn reads_items(&self) -> bool {
        self.shed.is_some() || self.deadlines.is_some()
    }

    /// The flow state the senders read for the rungs that are on.
    pub(super) fn flow(&self, rungs: Rungs) -> FlowState {
        let factor = self.reduce.map_or(1.0, |(_, factor)| factor);
        if rungs.has(Rungs::PAUSE) {
            FlowState::Paused
        } else if rungs.has(Rungs::SHED) {
            FlowState::Shedding { factor }
        } else if rungs.has(Rungs::REDUCE) {
            FlowState::Reducing { factor }
        } else {
            FlowState::Flowing
        }
    }
}

/// What admission read of an item before the lock was taken.
#[derive(Clone, Copy, Debug)]
pub(super) struct Assessed {
    pub(super) deadline: Option<Instant>,
    pub(super) sheddable: bool,
}

impl Assessed {
    /// What an admission that reads nothing of items (no shed rung, no deadlines)
    /// says of every item.
    const UNREAD: Assessed = Assessed {
        deadline: None,
        sheddable: false,
    };
}

/// The items of one step of a batch offer, taken from the sender's iterator (and
/// assessed) before the lock is taken. What admission read of each item is kept
/// beside it only when admission reads items at all; otherwise a step is just its
/// items, and nothing but room can refuse them.
pub(super) struct Step<T> {
    items: VecDeque<T>,
    /// `assessed[i]` is what admission read of `items[i]`; empty when it reads nothing.
    assessed: VecDeque<Assessed>,
    /// Whether admission reads items (a shed rung or deadlines).
    reads: bool,
}

impl<T: 'static> Step<T> {
    /// An empty step with room for `room` items, for `admission`.
    pub(super) fn new(room: usize, admission: &Admission<T>) -> Self {
        let reads = admission.reads_items();
        Step {
            items: VecDeque::with_capacity(room),
            assessed: VecDeque::with_capacity(if reads { room } else { 0 }),
            reads,
        }
    }

    /// Take up to `n` items from `items`, assessing each if admission reads items.
    /// Runs the user's iterator and classifiers: the caller holds no lock.
    pub(super) fn fill(
        &mut self,
        items: impl Iterator<Item = T>,
        n: usize,
        admission: &Admission<T>,
    ) {
        if self.reads {
            for item in items.take(n) {
                self.assessed.push_back(admission.assess(&item));
                self.items.push_back(item);
            }
        } else {
            self.items.extend(items.take(n));
        }
    }

    pub(super) fn len(&self) -> usize {
        self.items.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Whether only room can refuse these items (admission reads nothing of them).
    pub(super) fn unread(&self) -> bool {
        !self.reads
    }

    /// The oldest item and what admission read of it.
    pub(super) fn pop_front(&mut self) -> Option<(T, Assessed)> {
        let item = self.items.pop_front()?;
        let assessed = match self.reads {
            true => self.assessed.pop_front().expect("one assessment per item"),
            false => Assessed::UNREAD,
        };
        Some((item, assessed))
    }

    /// The items of a step admission did not read, in order, to take a run from.
    pub(super) fn unread_items(&mut self) -> &mut VecDeque<T> {
        debug_assert!(!self.reads, "a run skips what admission read");
        &mut self.items
    }

    /// The items left, in order.
    pub(super) fn into_items(self) -> VecDeque<T> {
        self.items
    }
}

/// Why admission refused an item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Below the shed rung's class while it is on.
    Shed,
    /// Less than the minimum useful time left before its deadline.
    Late,
}

/// Which rungs of the ladder are on (bits), under the state lock and mirrored in an
/// atomic for the lock-free [`Sender::state`](super::Sender::state).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Rungs(pub(super) u8);

impl Rungs {
    pub(super) const REDUCE: u8 = 1;
    pub(super) const SHED: u8 = 2;
    pub(super) const PAUSE: u8 = 4;

    pub(super) fn has(self, rung: u8) -> bool {
        self.0 & rung != 0
    }

    pub(super) fn set(&mut self, rung: u8, on: bool) {
        if on {
            self.0 |= rung;
        } else {
            self.0 &= !rung;
        }
    }
}
