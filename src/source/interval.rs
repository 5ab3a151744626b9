//! `interval`: 0, 1, 2, … one per period, on a scheduler's clock.
//!
//! Demand contract: emits only against demand; a tick that falls due without demand
//! is never lost and never an error. Ticks are counted from the clock, not from timer
//! fires: tick `k` falls due at `start + (k + 1) × period`, so the ticks held for lack
//! of demand are `due(now) − emitted`, a pending-tick counter kept in O(1) memory
//! whatever the backlog. When demand arrives the held ticks go out at once (in order,
//! in bursts: see below), then one per period again.
//!
//! Timers: the stage keeps at most one timer, and only while there is outstanding
//! demand and no tick is due yet (it fires when the next tick falls due). Without
//! demand no timer is armed at all: the clock does the counting. Cancel stops it: a
//! timer that fires after cancel does nothing and does not re-arm.
//!
//! Bursts: a pass delivers at most [`BURST`] ticks; with more due (a backlog, or a
//! period shorter than a delivery takes, where ticks fall due faster than they go
//! out) it arms a timer of zero delay and ends, and the timer's task goes on. So a
//! `request` returns, and a downstream's `cancel` is heard, whatever the period.

use std::time::{Duration, Instant};

use crate::runtime::{DefaultPool, Scheduler};
use crate::stage::timed::{self, assert_positive, from_nanos, Action, Fx, Machine};
use crate::{Publisher, Subscriber};

/// Publisher for [`interval`] and [`interval_on`]: emits 0, 1, 2, … once per `period`.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct Interval<C> {
    /// Time between ticks.
    period: Duration,
    /// Where timers run and what time it is.
    scheduler: C,
}

/// Signal 0, 1, 2, … one per `period` on `scheduler`'s clock, forever (combine with
/// [`take`](crate::PublisherExt::take) to stop).
///
/// # Backpressure
///
/// Only against demand. A tick that falls due while there is no demand is held as a
/// pending-tick count (O(1) memory, never an overflow error, never lost) and
/// delivered as soon as demand arrives.
///
/// # Timing
///
/// ```text
/// ticks  : ----|----|----|----|
/// demand : 1--------1-------------2
/// output : ----0----1-------------(23)
/// ```
///
/// Ticks 2 and 3 fall due without demand: held as a count, delivered together when
/// demand arrives.
///
/// # Errors
///
/// Never fails.
///
/// # Cancellation
///
/// Cancel stops the ticks: the outstanding timer (if any) does nothing when it fires.
///
/// # Panics
///
/// If `period` is zero: "interval period must be greater than zero (got 0ns)".
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use weir::prelude::*;
/// use weir::runtime::VirtualTime;
///
/// let vt = VirtualTime::new();
/// let ticks = weir::interval_on(Duration::from_secs(1), vt.clone()).take(3).collect();
/// vt.advance(Duration::from_secs(3));
/// assert_eq!(ticks.wait().unwrap(), vec![0, 1, 2]);
/// ```
pub fn interval_on<C: Scheduler + Clone>(period: Duration, scheduler: C) -> Interval<C> {
    assert_positive("interval period", period);
    Interval { period, scheduler }
}

/// Signal 0, 1, 2, … one per `period` on the shared [`DefaultPool`]:
/// [`interval_on`] with the scheduler chosen for you (the wall clock).
///
/// # Panics
///
/// As [`interval_on`].
///
/// ```
/// use std::time::Duration;
/// use weir::prelude::*;
///
/// let first = weir::interval(Duration::from_millis(1)).take(3).collect().wait().unwrap();
/// assert_eq!(first, [0, 1, 2]);
/// ```
pub fn interval(period: Duration) -> Interval<DefaultPool> {
    interval_on(period, DefaultPool::get())
}

impl<C: Scheduler + Clone> Publisher for Interval<C> {
    type Item = u64;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<u64> + Send + 'static,
    {
        let machine = Ticks {
            period: self.period,
            origin: None,
            next: 0,
            armed: false,
            burst: 0,
        };
        timed::start(machine, self.scheduler, None, subscriber);
    }
}

/// Ticks one pass delivers at most (see the module docs).
const BURST: u64 = 16 * 1024;

/// The tick counter.
struct Ticks {
    /// Time between ticks.
    period: Duration,
    /// Subscription time; tick `k` is due at `origin + (k + 1) × period`.
    origin: Option<Instant>,
    /// The next tick to emit (= ticks emitted).
    next: u64,
    /// A timer is outstanding.
    armed: bool,
    /// Ticks delivered since the last timer fired or request came (see the module
    /// docs, "Bursts").
    burst: u64,
}

impl Ticks {
    /// Ticks due by `now`.
    fn due(&self, origin: Instant, now: Instant) -> u64 {
        let elapsed = now.saturating_duration_since(origin).as_nanos();
        u64::try_from(elapsed / self.period.as_nanos()).unwrap_or(u64::MAX)
    }
}

impl Machine for Ticks {
    type In = ();
    type Out = u64;
    const NAME: &'static str = "interval";

    fn on_start(&mut self, fx: &mut Fx<'_, ()>) {
        self.origin = Some(fx.now());
    }

    fn on_timer(&mut self, _fx: &mut Fx<'_, ()>) {
        self.armed = false;
        self.burst = 0;
    }

    fn poll(&mut self, demand: u64, fx: &mut Fx<'_, ()>) -> Option<Action<u64>> {
        let origin = self.origin?;
        if demand == 0 {
            return None;
        }
        if self.next < self.due(origin, fx.now()) {
            if self.burst >= BURST {
                // More are due than a pass delivers: the timer's task goes on.
                if !self.armed {
                    fx.arm = Some(Duration::ZERO);
                    self.armed = true;
                }
                return None;
            }
            self.burst += 1;
            self.next += 1;
            return Some(Action::Item(self.next - 1));
        }
        if !self.armed {
            let at = self.period.as_nanos() * (u128::from(self.next) + 1);
            let elapsed = fx.now().saturating_duration_since(origin).as_nanos();
            fx.arm = Some(from_nanos(at.saturating_sub(elapsed)));
            self.armed = true;
        }
        None
    }
}
