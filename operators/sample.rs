//! `sample(period)`: the newest item each period, but only when downstream has demand.
//!
//! Demand contract: UnboundedIn. Upstream is asked for `UNBOUNDED` once; the stage
//! holds at most one item (in-flight bound 1). An item that arrives while one is held
//! replaces it, and the replaced item is a counted drop
//! ([`DropReason::ReplacedByLatest`], handed to the drop hook). Never an overflow
//! error.
//!
//! The periods form a grid from the subscription instant: `start + k × period`. At
//! each grid point the held item (if any) becomes *sampled*; a sampled item goes out
//! as soon as there is demand (at once if there is). Without demand it stays held,
//! and a newer item that arrives meanwhile replaces it and is sampled in its place, so
//! the consumer, when it asks, gets the newest item. At upstream completion the held
//! item (sampled or not) goes out when demand allows, then `on_complete`; an upstream
//! error is delivered at once and the held item is released without a report.
//!
//! Timers (the timed core, `src/source/timed/`): at most one, armed only while an
//! unsampled item is held, for the next grid point strictly after the item arrived.
//! An idle stream costs no timer work.

use std::time::{Duration, Instant};

use crate::demand::UNBOUNDED;
use crate::runtime::Scheduler;
use crate::stage::timed::{assert_positive, until_next_tick, Fx, Machine, Signal, TimedSubscriber};
use crate::{DropReason, Error, Publisher, Subscriber};

/// Publisher for the [`sample`](crate::PublisherExt::sample) method.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct Sample<P, C> {
    /// The upstream publisher.
    source: P,
    /// The sampling period.
    period: Duration,
    /// Where timers run and what time it is.
    scheduler: C,
}

impl<P, C> Sample<P, C> {
    pub(crate) fn new(source: P, period: Duration, scheduler: C) -> Self {
        assert_positive("sample period", period);
        Sample {
            source,
            period,
            scheduler,
        }
    }
}

impl<P: Publisher, C: Scheduler + Clone> Publisher for Sample<P, C> {
    type Item = P::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<P::Item> + Send + 'static,
    {
        let machine = Sampler {
            period: self.period,
            origin: None,
            slot: Slot::Empty,
            end: None,
        };
        self.source.subscribe(TimedSubscriber::new(
            "sample",
            subscriber,
            machine,
            self.scheduler,
        ));
    }

    fn in_flight_bound(&self) -> u64 {
        self.source.in_flight_bound().saturating_add(1)
    }
}

/// What the stage holds.
enum Slot<T> {
    /// Nothing; no timer.
    Empty,
    /// An item not sampled yet; the timer for the next grid point is queued.
    Waiting(T),
    /// An item sampled at a grid point, waiting for demand; no timer.
    Sampled(T),
}

/// The stage's state (behind the timed core's lock).
struct Sampler<T> {
    /// The sampling period.
    period: Duration,
    /// The grid's origin (subscription time).
    origin: Option<Instant>,
    /// The newest item not yet delivered, if any.
    slot: Slot<T>,
    /// Upstream's terminal signal.
    end: Option<Result<(), Error>>,
}

impl<T: Send + 'static> Machine for Sampler<T> {
    type In = T;
    type Out = T;
    const NAME: &'static str = "sample";

    fn on_start(&mut self, fx: &mut Fx<'_, T>) {
        self.origin = Some(fx.now());
        fx.request = UNBOUNDED;
    }

    fn on_item(&mut self, item: T, fx: &mut Fx<'_, T>) {
        self.slot = match std::mem::replace(&mut self.slot, Slot::Empty) {
            Slot::Empty => {
                let now = fx.now();
                let origin = *self.origin.get_or_insert(now);
                fx.arm = Some(until_next_tick(origin, self.period, now));
                Slot::Waiting(item)
            }
            Slot::Waiting(replaced) => {
                fx.dropped = Some((DropReason::ReplacedByLatest, replaced));
                Slot::Waiting(item)
            }
            Slot::Sampled(replaced) => {
                fx.dropped = Some((DropReason::ReplacedByLatest, replaced));
                Slot::Sampled(item)
            }
        };
    }

    fn on_end(&mut self, end: Result<(), Error>, _fx: &mut Fx<'_, T>) {
        if end.is_err() {
            self.slot = Slot::Empty;
        }
        self.end = Some(end);
    }

    fn on_timer(&mut self, _fx: &mut Fx<'_, T>) {
        if let Slot::Waiting(item) = std::mem::replace(&mut self.slot, Slot::Empty) {
            self.slot = Slot::Sampled(item);
        }
    }

    fn poll(&mut self, demand: u64, _fx: &mut Fx<'_, T>) -> Option<Signal<T>> {
        if matches!(self.end, Some(Err(_))) {
            return self.end.take().map(Signal::End);
        }
        match std::mem::replace(&mut self.slot, Slot::Empty) {
            Slot::Sampled(item) if demand > 0 => Some(Signal::Item(item)),
            // At completion the held item need not wait for its grid point.
            Slot::Waiting(item) if demand > 0 && self.end.is_some() => Some(Signal::Item(item)),
            Slot::Empty => self.end.take().map(Signal::End),
            held => {
                self.slot = held;
                None
            }
        }
    }
}
