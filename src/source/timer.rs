//! `timer`: one `0u64` after a delay, then complete.
//!
//! Demand contract: the item goes out only against demand; if the delay passes
//! without demand the item is held (never lost, never an error) and delivered, followed
//! by `on_complete`, as soon as demand arrives. One timer, armed at subscribe time; a
//! fire after cancel does nothing.

use std::time::Duration;

use crate::runtime::{DefaultPool, Scheduler};
use crate::stage::timed::{self, assert_positive, Action, Fx, Machine};
use crate::{Publisher, Subscriber};

/// Publisher for [`timer`] and [`timer_on`]: one `0u64` after the delay.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct Timer<C> {
    /// How long to wait before the item.
    delay: Duration,
    /// Where timers run and what time it is.
    scheduler: C,
}

/// Signal one `0u64` once `delay` has passed on `scheduler`'s clock, then complete.
///
/// # Backpressure
///
/// The item waits for demand: if the delay passes with none, it is held and
/// delivered, then `on_complete`, when demand arrives.
///
/// # Timing
///
/// ```text
/// clock  : |----delay----|
/// output : --------------(0|)
/// ```
///
/// # Errors
///
/// Never fails.
///
/// # Cancellation
///
/// Cancel before the delay passes: the timer does nothing when it fires.
///
/// # Panics
///
/// If `delay` is zero: "timer delay must be greater than zero (got 0ns)" (every time
/// source and operator refuses a zero duration; use [`just`](crate::just) for an item
/// now). `Duration::MAX` (a delay that does not fit the clock) never fires.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use weir::prelude::*;
/// use weir::runtime::VirtualTime;
///
/// let vt = VirtualTime::new();
/// let fired = weir::timer_on(Duration::from_secs(5), vt.clone()).collect();
/// vt.advance(Duration::from_secs(4));
/// assert!(!fired.is_terminated());
/// vt.advance(Duration::from_secs(1));
/// assert_eq!(fired.wait().unwrap(), vec![0]);
/// ```
pub fn timer_on<C: Scheduler + Clone>(delay: Duration, scheduler: C) -> Timer<C> {
    assert_positive("timer delay", delay);
    Timer { delay, scheduler }
}

/// Signal one `0u64` after `delay` on the shared [`DefaultPool`]:
/// [`timer_on`] with the scheduler chosen for you (the wall clock).
///
/// # Panics
///
/// As [`timer_on`].
///
/// ```
/// use std::time::Duration;
/// use weir::prelude::*;
///
/// let fired = weir::timer(Duration::from_millis(1)).collect().wait().unwrap();
/// assert_eq!(fired, [0]);
/// ```
pub fn timer(delay: Duration) -> Timer<DefaultPool> {
    timer_on(delay, DefaultPool::get())
}

impl<C: Scheduler + Clone> Publisher for Timer<C> {
    type Item = u64;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<u64> + Send + 'static,
    {
        let machine = Once {
            delay: self.delay,
            fired: false,
            sent: false,
        };
        timed::start(machine, self.scheduler, None, subscriber);
    }
}

/// The one-shot.
struct Once {
    /// How long to wait before the item.
    delay: Duration,
    /// The delay passed.
    fired: bool,
    /// The item went out.
    sent: bool,
}

impl Machine for Once {
    type In = ();
    type Out = u64;
    const NAME: &'static str = "timer";

    fn on_start(&mut self, fx: &mut Fx<'_, ()>) {
        fx.arm = Some(self.delay);
    }

    fn on_timer(&mut self, _fx: &mut Fx<'_, ()>) {
        self.fired = true;
    }

    fn poll(&mut self, demand: u64, _fx: &mut Fx<'_, ()>) -> Option<Action<u64>> {
        if self.sent {
            Some(Action::End(Ok(())))
        } else if self.fired && demand > 0 {
            self.sent = true;
            Some(Action::Item(0))
        } else {
            None
        }
    }
}
