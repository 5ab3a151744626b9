//! `sample(period)`: implementation notes. The user contract is on
//! [`PublisherExt::sample`](crate::PublisherExt::sample).
//!
//! A [`Machine`] on the timed core (`src/stage/timed/`): the core owns the drain
//! loop, downstream's demand and the timer; this file holds the state. `on_start`
//! records the grid's origin (the subscription instant) and requests `UNBOUNDED`
//! upstream.
//!
//! State ([`SampleSlot`]): `Empty` → `Waiting(item)` (not sampled yet; a timer is queued for
//! the next grid point `origin + k × period` strictly after the item arrived) →
//! `Sampled(item)` (that grid point passed; waiting for demand). An arriving item
//! replaces the held one in either state, which stays as it was, so the replacement
//! of a sampled item is sampled too; the replaced item goes to the drop reporter as
//! `ReplacedByLatest` (through `Fx::dropped`). `poll` emits a `Sampled` item when
//! demand > 0; after upstream completed it emits a `Waiting` one too, without waiting
//! for its grid point, and then the end. An upstream error waits behind the held
//! item in the same way, unless `errors_first` is set: then it empties the slot (no
//! drop report) and is emitted at once.
//!
//! Timers: at most one, armed only when an item arrives in an empty slot, so an idle
//! stream costs no timer work.

use std::time::{Duration, Instant};

use crate::demand::UNBOUNDED;
use crate::runtime::Scheduler;
use crate::stage::timed::{assert_positive, until_next_tick, Action, Fx, Machine, TimedSubscriber};
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
    /// An upstream error overtakes the held item ([`errors_first`](Self::errors_first)).
    errors_first: bool,
}

impl<P, C> Sample<P, C> {
    pub(crate) fn new(source: P, period: Duration, scheduler: C) -> Self {
        assert_positive("sample period", period);
        Sample {
            source,
            period,
            scheduler,
            errors_first: false,
        }
    }

    /// Deliver an upstream error at once, without demand, releasing the held
    /// item (not reported as a drop: the stream ended), instead of after it.
    /// By default an error, like completion, waits behind what the stage holds.
    /// See [`OnBackpressureBuffer::errors_first`](crate::operators::OnBackpressureBuffer::errors_first).
    pub fn errors_first(mut self) -> Self {
        self.errors_first = true;
        self
    }
}

impl<P: Publisher, C: Scheduler + Clone> Publisher for Sample<P, C> {
    type Item = P::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<P::Item> + Send + 'static,
    {
        let machine = Sampler {
            errors_first: self.errors_first,
            period: self.period,
            origin: None,
            slot: SampleSlot::Empty,
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
enum SampleSlot<T> {
    /// Nothing; no timer.
    Empty,
    /// An item not sampled yet; the timer for the next grid point is queued.
    Waiting(T),
    /// An item sampled at a grid point, waiting for demand; no timer.
    Sampled(T),
}

/// The stage's state (behind the timed core's lock).
struct Sampler<T> {
    /// An error overtakes what is held.
    errors_first: bool,
    /// The sampling period.
    period: Duration,
    /// The grid's origin (subscription time).
    origin: Option<Instant>,
    /// The newest item not yet delivered, if any.
    slot: SampleSlot<T>,
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
        self.slot = match std::mem::replace(&mut self.slot, SampleSlot::Empty) {
            SampleSlot::Empty => {
                let now = fx.now();
                let origin = *self.origin.get_or_insert(now);
                fx.arm = Some(until_next_tick(origin, self.period, now));
                SampleSlot::Waiting(item)
            }
            SampleSlot::Waiting(replaced) => {
                fx.dropped = Some((DropReason::ReplacedByLatest, replaced));
                SampleSlot::Waiting(item)
            }
            SampleSlot::Sampled(replaced) => {
                fx.dropped = Some((DropReason::ReplacedByLatest, replaced));
                SampleSlot::Sampled(item)
            }
        };
    }

    fn on_end(&mut self, end: Result<(), Error>, fx: &mut Fx<'_, T>) {
        if end.is_err() && self.errors_first {
            // Dropped after the lock (see `Fx::released`).
            if let SampleSlot::Waiting(item) | SampleSlot::Sampled(item) =
                std::mem::replace(&mut self.slot, SampleSlot::Empty)
            {
                fx.released.push(item);
            }
        }
        self.end = Some(end);
    }

    fn on_timer(&mut self, _fx: &mut Fx<'_, T>) {
        if let SampleSlot::Waiting(item) = std::mem::replace(&mut self.slot, SampleSlot::Empty) {
            self.slot = SampleSlot::Sampled(item);
        }
    }

    fn poll(&mut self, demand: u64, _fx: &mut Fx<'_, T>) -> Option<Action<T>> {
        if self.errors_first && matches!(self.end, Some(Err(_))) {
            return self.end.take().map(Action::End);
        }
        match std::mem::replace(&mut self.slot, SampleSlot::Empty) {
            SampleSlot::Sampled(item) if demand > 0 => Some(Action::Item(item)),
            // At completion the held item need not wait for its grid point.
            SampleSlot::Waiting(item) if demand > 0 && self.end.is_some() => {
                Some(Action::Item(item))
            }
            SampleSlot::Empty => self.end.take().map(Action::End),
            held => {
                self.slot = held;
                None
            }
        }
    }
}
