//! `timeout(duration)`: fail with [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) if
//! no item arrives within `duration` while downstream is waiting for one.
//!
//! Demand contract: PassThrough. Downstream's requests go upstream unchanged, so
//! upstream only ever delivers against demand. Items pass through the stage's drain
//! loop (the timer may signal from another thread); one that arrives while another
//! thread owns the loop waits there for a moment, so what is in transit never exceeds
//! downstream's outstanding demand.
//!
//! The clock only runs while downstream has outstanding demand: it starts when demand
//! becomes outstanding (the first request, or a request after demand was used up),
//! restarts at every item, and stops when the demand is used up. A slow consumer that
//! simply has not asked for more therefore never causes a timeout upstream. When the
//! clock runs out: upstream is cancelled and downstream receives `on_error` of kind
//! `Timeout`. Upstream's own completion or error passes through (after the items in
//! transit).
//!
//! Timers: at most one outstanding; each carries the generation it was armed in, and
//! every item (or the demand running out) starts a new generation, so a stale fire
//! does nothing.

use std::collections::VecDeque;
use std::time::Duration;

use crate::runtime::Scheduler;
use crate::source::timed::{assert_positive, Emit, Fx, Machine, TimedSubscriber};
use crate::{Error, Publisher, Subscriber};

/// Publisher for the [`timeout`](crate::PublisherExt::timeout) method.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct Timeout<P, C> {
    source: P,
    duration: Duration,
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
        let machine = Watch {
            duration: self.duration,
            transit: VecDeque::new(),
            generation: 0,
            armed: false,
            expired: false,
            end: None,
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

struct Watch<T> {
    duration: Duration,
    /// Items on their way through the drain loop (only against demand).
    transit: VecDeque<T>,
    /// The current clock's generation; timers of older ones are stale.
    generation: u64,
    /// The clock runs (a timer of this generation is outstanding).
    armed: bool,
    /// The clock ran out.
    expired: bool,
    /// Upstream's terminal signal.
    end: Option<Result<(), Error>>,
}

impl<T> Watch<T> {
    /// Stop the clock: the outstanding timer, if any, becomes stale.
    fn stop(&mut self) {
        self.generation += 1;
        self.armed = false;
    }
}

impl<T: Send + 'static> Machine for Watch<T> {
    type In = T;
    type Out = T;

    fn on_request(&mut self, n: u64, fx: &mut Fx<T>) {
        fx.request = n;
    }

    fn on_item(&mut self, item: T, _fx: &mut Fx<T>) {
        self.transit.push_back(item);
        self.stop();
    }

    fn on_end(&mut self, end: Result<(), Error>, _fx: &mut Fx<T>) {
        self.end = Some(end);
        self.stop();
    }

    fn on_timer(&mut self, token: u64, _fx: &mut Fx<T>) {
        if self.armed && token == self.generation {
            self.expired = true;
        }
    }

    fn poll(&mut self, demand: u64, fx: &mut Fx<T>) -> Option<Emit<T>> {
        if demand > 0 {
            if let Some(item) = self.transit.pop_front() {
                return Some(Emit::Item(item));
            }
        }
        if self.transit.is_empty() {
            if let Some(end) = self.end.take() {
                return Some(Emit::End(end));
            }
        }
        if self.expired {
            fx.cancel_upstream = true;
            return Some(Emit::End(Err(Error::timeout(format!(
                "no item within {:?} of outstanding demand",
                self.duration
            )))));
        }
        if demand == 0 {
            if self.armed {
                self.stop();
            }
        } else if !self.armed && self.end.is_none() {
            fx.arm = Some((self.duration, self.generation));
            self.armed = true;
        }
        None
    }
}
