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
//! Timers (the timed core, `source/timed.rs`): at most one, armed only while an
//! unsampled item is held, for the next grid point strictly after the item arrived.
//! An idle stream costs no timer work.

use std::time::{Duration, Instant};

use crate::demand::UNBOUNDED;
use crate::runtime::Scheduler;
use crate::source::timed::{assert_positive, until_next_tick, Emit, Fx, Machine, TimedSubscriber};
use crate::{DropReason, Error, Publisher, Subscriber};

/// Publisher for the [`sample`](crate::PublisherExt::sample) method.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct Sample<P, C> {
    source: P,
    period: Duration,
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
            held: None,
            sampled: false,
            armed: false,
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

struct Sampler<T> {
    period: Duration,
    /// The grid's origin (subscription time).
    origin: Option<Instant>,
    /// The newest item not yet delivered.
    held: Option<T>,
    /// A grid point passed while `held` was there: deliver it when demand allows.
    sampled: bool,
    /// A timer is outstanding.
    armed: bool,
    /// Upstream's terminal signal.
    end: Option<Result<(), Error>>,
}

impl<T: Send + 'static> Machine for Sampler<T> {
    type In = T;
    type Out = T;

    fn on_start(&mut self, fx: &mut Fx<'_, T>) {
        self.origin = Some(fx.now());
        fx.request = UNBOUNDED;
    }

    fn on_item(&mut self, item: T, fx: &mut Fx<'_, T>) {
        if let Some(replaced) = self.held.replace(item) {
            fx.dropped = Some((DropReason::ReplacedByLatest, replaced));
        }
        if !self.sampled && !self.armed {
            let origin = *self.origin.get_or_insert(fx.now());
            fx.arm = Some((until_next_tick(origin, self.period, fx.now()), 0));
            self.armed = true;
        }
    }

    fn on_end(&mut self, end: Result<(), Error>, _fx: &mut Fx<'_, T>) {
        if end.is_err() {
            self.held = None;
        }
        self.end = Some(end);
    }

    fn on_timer(&mut self, _token: u64, _fx: &mut Fx<'_, T>) {
        self.armed = false;
        self.sampled = self.held.is_some();
    }

    fn poll(&mut self, demand: u64, _fx: &mut Fx<'_, T>) -> Option<Emit<T>> {
        if matches!(self.end, Some(Err(_))) {
            return self.end.take().map(Emit::End);
        }
        if demand > 0 && (self.sampled || self.end.is_some()) {
            if let Some(item) = self.held.take() {
                self.sampled = false;
                return Some(Emit::Item(item));
            }
        }
        if self.held.is_none() {
            return self.end.take().map(Emit::End);
        }
        None
    }
}
