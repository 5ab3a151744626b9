//! `timeout(duration)`: implementation notes. The user contract is on
//! [`PublisherExt::timeout`](crate::PublisherExt::timeout).
//!
//! A [`Machine`] on the timed core (`src/stage/timed/`), which owns the drain loop,
//! downstream's demand and the timer. Downstream's requests are forwarded upstream
//! unchanged (`on_request` sets `Fx::request`), so upstream only delivers against
//! demand. Items pass through `transit` on their way to the core's drain loop (a
//! timer may own the loop on another thread; an item that arrives meanwhile waits
//! there for a moment), which therefore never holds more than the outstanding demand.
//!
//! The clock is `deadline`. `poll` starts it (`now + duration`) when demand is
//! outstanding, nothing is waiting in `transit` and upstream has not ended; an
//! arriving item or upstream's end clears it, and `poll` clears it when the demand is
//! used up. So it restarts at every item and stops while nothing is requested. When
//! the timer finds the deadline passed it sets `expired`; the next `poll` cancels
//! upstream (`Fx::cancel_upstream`) and emits the `Timeout` error. Upstream's own
//! completion or error is emitted after the items in transit.
//!
//! Timers: never one per item; at most one outstanding (`armed`). A clock that starts
//! while a timer is still queued (left from an earlier deadline) arms none; when that
//! timer fires it compares the clock with the current deadline: past it, the stage
//! times out; before it, the timer is re-armed for the remainder; no deadline, it does
//! nothing.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::runtime::deadline;
use crate::runtime::Scheduler;
use crate::stage::timed::{
    assert_positive, poll_queued_first, Action, Fx, Machine, TimedSubscriber,
};
use crate::{Error, Publisher, Subscriber};

/// Publisher for the [`timeout`](crate::PublisherExt::timeout) method.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct Timeout<P, C> {
    /// The upstream publisher.
    source: P,
    /// How long downstream may wait for an item.
    duration: Duration,
    /// Where timers run and what time it is.
    scheduler: C,
}

impl<P, C> Timeout<P, C> {
    pub(crate) fn new(source: P, duration: Duration, scheduler: C) -> Self {
        assert_positive("timeout duration", duration);
        Timeout {
            source,
            duration,
            scheduler,
        }
    }
}

impl<P: Publisher, C: Scheduler + Clone> Publisher for Timeout<P, C> {
    type Item = P::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<P::Item> + Send + 'static,
    {
        let machine = Watchdog {
            duration: self.duration,
            transit: VecDeque::new(),
            deadline: None,
            armed: false,
            expired: false,
            never: false,
            end: None,
            owed: 0,
        };
        self.source.subscribe(TimedSubscriber::new(
            "timeout",
            subscriber,
            machine,
            self.scheduler,
        ));
    }

    fn in_flight_bound(&self) -> u64 {
        self.source.in_flight_bound()
    }
}

/// The stage's state (behind the timed core's lock).
struct Watchdog<T> {
    /// How long downstream may wait for an item.
    duration: Duration,
    /// Items on their way through the drain loop (only against demand).
    transit: VecDeque<T>,
    /// When the running clock runs out; `None` while it is stopped.
    deadline: Option<Instant>,
    /// The one timer is outstanding.
    armed: bool,
    /// The clock ran out.
    expired: bool,
    /// The duration does not fit the clock (`Duration::MAX`): it never runs out.
    never: bool,
    /// Upstream's terminal signal.
    end: Option<Result<(), Error>>,
    /// Items requested upstream (downstream's requests, passed on) and not yet
    /// received; `u64::MAX`: unbounded.
    owed: u64,
}

impl<T: Send + 'static> Machine for Watchdog<T> {
    type In = T;
    type Out = T;
    const NAME: &'static str = "timeout";

    fn on_request(&mut self, n: u64, fx: &mut Fx<'_, T>) {
        self.owed = self.owed.saturating_add(n);
        fx.request = n;
    }

    fn on_item(&mut self, item: T, fx: &mut Fx<'_, T>) {
        // Never asked for: refused, not queued in `transit`. Once unbounded
        // (`u64::MAX` in all), it stays unbounded (rule 3.17).
        match fx.arrival(Self::NAME, &mut self.owed, item) {
            Ok(item) => self.transit.push_back(item),
            Err(error) => self.on_end(Err(error), fx),
        }
        self.deadline = None;
    }

    fn on_end(&mut self, end: Result<(), Error>, _fx: &mut Fx<'_, T>) {
        // The first end stays (a rule 1.1 error, then upstream's own end).
        self.end.get_or_insert(end);
        self.deadline = None;
    }

    fn on_timer(&mut self, fx: &mut Fx<'_, T>) {
        self.armed = false;
        let Some(deadline) = self.deadline else {
            return;
        };
        let now = fx.now();
        if now >= deadline {
            self.expired = true;
        } else {
            fx.arm = Some(deadline - now);
            self.armed = true;
        }
    }

    fn poll(&mut self, demand: u64, fx: &mut Fx<'_, T>) -> Option<Action<T>> {
        if demand > 0 {
            if let Some(item) = self.transit.pop_front() {
                return Some(Action::Item(item));
            }
        }
        if self.transit.is_empty() {
            if let Some(end) = self.end.take() {
                return Some(Action::End(end));
            }
        }
        if self.expired {
            fx.cancel_upstream = true;
            return Some(Action::End(Err(Error::timeout(format!(
                "no item within {:?} of outstanding demand",
                self.duration
            )))));
        }
        if demand == 0 {
            self.deadline = None;
        } else if self.deadline.is_none() && self.end.is_none() && !self.never {
            let now = fx.now();
            match deadline(now, self.duration) {
                Some(at) => {
                    self.deadline = Some(at);
                    if !self.armed {
                        fx.arm = Some(self.duration);
                        self.armed = true;
                    }
                }
                // A duration past the end of the clock: the clock never runs out.
                None => self.never = true,
            }
        }
        None
    }

    /// The items in transit that the demand covers move as one run (`poll` would
    /// hand them out one by one with nothing else to do); `poll` then decides the
    /// rest (the end, the timeout, the deadline).
    fn poll_into(
        &mut self,
        demand: u64,
        out: &mut Vec<T>,
        fx: &mut Fx<'_, T>,
    ) -> Option<Result<(), Error>> {
        poll_queued_first(self, |m| &mut m.transit, demand, out, fx)
    }
}
