//! Per-item deadlines: items that say how long they are still worth working on.
//!
//! A request whose caller gave up after one second is worth nothing at second two,
//! yet a plain queue serves it anyway, spending capacity on work nobody waits for
//! while live requests queue behind it. That is how a short overload turns into a
//! long one. An item that carries its deadline lets every stage it passes decide:
//!
//! * **Admission** ([`Admission::deadlines`](crate::source::channel::Admission::deadlines)):
//!   a push source refuses an item whose remaining budget is below a minimum useful
//!   time (the time the work takes at best), handing it back as
//!   [`Late`](crate::source::channel::TrySendError::Late).
//! * **Dequeue**: the queue drops an item whose deadline has passed when it reaches
//!   the head, reason [`DropReason::DeadlineExceeded`](crate::DropReason::DeadlineExceeded),
//!   counted and reported to the drop hook like every other drop.
//! * **Downstream**: [`WithDeadline::remaining_at`] gives the budget left, so an async
//!   stage can pass it on (as a timeout, or a header of the call it makes).
//!
//! Items carry a deadline by implementing [`Deadline`], or by being wrapped in
//! [`WithDeadline`]. Deadlines are instants on the clock of the stage that reads them
//! (the channel's [`clock`](crate::source::channel::ChannelBuilder::clock)): make them
//! from that clock's `now()` ([`WithDeadline::within`]).
//!
//! ```
//! use std::time::Duration;
//! use weir::deadline::{Deadline, WithDeadline};
//! use weir::runtime::{Scheduler, VirtualTime};
//!
//! let clock = VirtualTime::new();
//! let request = WithDeadline::within("GET /", Duration::from_secs(1), &clock);
//! clock.advance(Duration::from_millis(300));
//! assert_eq!(request.remaining_at(clock.now()), Duration::from_millis(700));
//! assert_eq!(request.deadline(), Some(clock.now() + Duration::from_millis(700)));
//! assert_eq!(*request.get(), "GET /");
//! ```

use std::time::{Duration, Instant};

use crate::runtime::Scheduler;

/// An item that knows until when it is worth working on.
pub trait Deadline {
    /// The instant after which the item is worthless, on the clock of the stage that
    /// reads it; `None` for an item without one (never dropped for its deadline).
    fn deadline(&self) -> Option<Instant>;
}

/// An item with a deadline attached (see the [module docs](self)).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WithDeadline<T> {
    item: T,
    deadline: Instant,
}

impl<T> WithDeadline<T> {
    /// `item`, worth working on until `deadline`.
    pub fn new(item: T, deadline: Instant) -> Self {
        WithDeadline { item, deadline }
    }

    /// `item`, worth working on for `budget` from now on `clock`. A budget too large
    /// for the clock (`Duration::MAX`) means no deadline in practice: the deadline is
    /// set as far ahead as the clock can say, within about two centuries.
    pub fn within(item: T, budget: Duration, clock: &impl Scheduler) -> Self {
        let now = clock.now();
        let deadline = crate::runtime::deadline(now, budget).unwrap_or_else(|| far_future(now));
        WithDeadline { item, deadline }
    }

    /// The budget left at `now`: zero once the deadline has passed.
    pub fn remaining_at(&self, now: Instant) -> Duration {
        self.deadline.saturating_duration_since(now)
    }

    /// True once `now` is past the deadline.
    pub fn is_expired_at(&self, now: Instant) -> bool {
        now > self.deadline
    }

    /// The item.
    pub fn get(&self) -> &T {
        &self.item
    }

    /// The item, to change in place.
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.item
    }

    /// The item, without its deadline.
    pub fn into_inner(self) -> T {
        self.item
    }

    /// Another item under the same deadline (a stage's result keeps its request's
    /// budget).
    ///
    /// ```
    /// use std::time::Instant;
    /// use weir::deadline::{Deadline, WithDeadline};
    ///
    /// let at = Instant::now();
    /// let parsed = WithDeadline::new("42", at).map(|s| s.parse::<u32>().unwrap());
    /// assert_eq!((*parsed.get(), parsed.deadline()), (42, Some(at)));
    /// ```
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> WithDeadline<U> {
        WithDeadline {
            item: f(self.item),
            deadline: self.deadline,
        }
    }
}

impl<T> Deadline for WithDeadline<T> {
    fn deadline(&self) -> Option<Instant> {
        Some(self.deadline)
    }
}

/// The latest instant after `now` that the platform represents, within about two
/// centuries (100 years, then 50, 25, ... added while they fit).
fn far_future(now: Instant) -> Instant {
    let mut step = Duration::from_secs(100 * 365 * 24 * 3600);
    let mut at = now;
    while !step.is_zero() {
        if let Some(later) = at.checked_add(step) {
            at = later;
        }
        step /= 2;
    }
    at
}

#[cfg(all(test, not(weir_loom)))]
mod tests {
    use super::*;
    use crate::runtime::VirtualTime;

    #[test]
    fn the_budget_counts_down_to_zero_and_stays_there() {
        let clock = VirtualTime::new();
        let item = WithDeadline::within(7u8, Duration::from_millis(10), &clock);
        assert_eq!(item.remaining_at(clock.now()), Duration::from_millis(10));
        assert!(!item.is_expired_at(clock.now()));
        clock.advance(Duration::from_millis(10));
        assert_eq!(item.remaining_at(clock.now()), Duration::ZERO);
        assert!(
            !item.is_expired_at(clock.now()),
            "the deadline instant itself is in time"
        );
        clock.advance(Duration::from_millis(1));
        assert!(item.is_expired_at(clock.now()));
        assert_eq!(item.remaining_at(clock.now()), Duration::ZERO);
    }

    #[test]
    fn an_unrepresentable_budget_is_far_away_not_a_panic() {
        let clock = VirtualTime::new();
        let item = WithDeadline::within((), Duration::MAX, &clock);
        assert!(item.remaining_at(clock.now()) >= Duration::from_secs(50 * 365 * 24 * 3600));
        assert_eq!(item.deadline(), Some(item.deadline));
    }
}
