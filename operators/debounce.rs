//! `debounce(quiet)`: implementation notes. The user contract is on
//! [`PublisherExt::debounce`](crate::PublisherExt::debounce).
//!
//! A [`Machine`] on the timed core (`src/stage/timed/`), which owns the drain loop,
//! downstream's demand and the timer. `on_start` requests `UNBOUNDED` upstream.
//!
//! State ([`DebounceSlot`]): `Empty`; `Quiet { item, arrived }` (waiting out the quiet period
//! that began at `arrived`); `Ready(item)` (quiet period over, waiting for demand). An
//! arriving item replaces whatever is held, reported as `ReplacedByLatest` (through
//! `Fx::dropped`), and becomes `Quiet` with a fresh arrival time. `poll` emits a
//! `Ready` item when demand > 0; after upstream completed it emits a `Quiet` one too,
//! at once, and then the end. An upstream error waits behind the held item as
//! completion does, unless `errors_first` is set: then the slot is emptied (released,
//! not reported) and the error is emitted at once.
//!
//! Timers: never one per item; `armed` says one is queued. An item that arrives while
//! none is armed arms one for `quiet`; items that arrive while one is armed only
//! record their arrival time. When the timer fires it compares the clock with the
//! newest item's arrival: if `quiet` has passed the item becomes `Ready`, otherwise
//! the timer is re-armed for the remainder.

use std::time::{Duration, Instant};

use crate::demand::UNBOUNDED;
use crate::runtime::Scheduler;
use crate::stage::timed::{assert_positive, Action, Fx, Machine, TimedSubscriber};
use crate::{DropReason, Error, Publisher, Subscriber};

/// Publisher for the [`debounce`](crate::PublisherExt::debounce) method.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct Debounce<P, C> {
    /// The upstream publisher.
    source: P,
    /// The quiet period.
    quiet: Duration,
    /// Where timers run and what time it is.
    scheduler: C,
    /// An upstream error overtakes the held item ([`errors_first`](Self::errors_first)).
    errors_first: bool,
}

impl<P, C> Debounce<P, C> {
    pub(crate) fn new(source: P, quiet: Duration, scheduler: C) -> Self {
        assert_positive("debounce quiet period", quiet);
        Debounce {
            source,
            quiet,
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

impl<P: Publisher, C: Scheduler + Clone> Publisher for Debounce<P, C> {
    type Item = P::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<P::Item> + Send + 'static,
    {
        let machine = Debouncer {
            errors_first: self.errors_first,
            quiet: self.quiet,
            slot: DebounceSlot::Empty,
            armed: false,
            end: None,
        };
        self.source.subscribe(TimedSubscriber::new(
            "debounce",
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
enum DebounceSlot<T> {
    /// Nothing.
    Empty,
    /// The newest item, waiting out the quiet period that started when it arrived.
    Quiet {
        /// The item.
        item: T,
        /// When it arrived.
        arrived: Instant,
    },
    /// An item whose quiet period passed, waiting for demand.
    Ready(T),
}

/// The stage's state (behind the timed core's lock).
struct Debouncer<T> {
    /// An error overtakes what is held.
    errors_first: bool,
    /// The quiet period.
    quiet: Duration,
    /// The newest item not yet delivered, if any.
    slot: DebounceSlot<T>,
    /// The one timer is queued (it may outlive the item it was armed for).
    armed: bool,
    /// Upstream's terminal signal.
    end: Option<Result<(), Error>>,
}

impl<T: Send + 'static> Machine for Debouncer<T> {
    type In = T;
    type Out = T;
    const NAME: &'static str = "debounce";

    fn on_start(&mut self, fx: &mut Fx<'_, T>) {
        fx.request = UNBOUNDED;
    }

    fn on_item(&mut self, item: T, fx: &mut Fx<'_, T>) {
        match std::mem::replace(&mut self.slot, DebounceSlot::Empty) {
            DebounceSlot::Quiet { item: old, .. } | DebounceSlot::Ready(old) => {
                fx.dropped = Some((DropReason::ReplacedByLatest, old));
            }
            DebounceSlot::Empty => {}
        }
        self.slot = DebounceSlot::Quiet {
            item,
            arrived: fx.now(),
        };
        if !self.armed {
            fx.arm = Some(self.quiet);
            self.armed = true;
        }
    }

    fn on_end(&mut self, end: Result<(), Error>, fx: &mut Fx<'_, T>) {
        if end.is_err() && self.errors_first {
            // Dropped after the lock (see `Fx::released`).
            if let DebounceSlot::Quiet { item, .. } | DebounceSlot::Ready(item) =
                std::mem::replace(&mut self.slot, DebounceSlot::Empty)
            {
                fx.released.push(item);
            }
        }
        self.end = Some(end);
    }

    fn on_timer(&mut self, fx: &mut Fx<'_, T>) {
        self.armed = false;
        let DebounceSlot::Quiet { arrived, .. } = self.slot else {
            return;
        };
        let since = fx.now().saturating_duration_since(arrived);
        if since >= self.quiet {
            if let DebounceSlot::Quiet { item, .. } =
                std::mem::replace(&mut self.slot, DebounceSlot::Empty)
            {
                self.slot = DebounceSlot::Ready(item);
            }
        } else {
            fx.arm = Some(self.quiet - since);
            self.armed = true;
        }
    }

    fn poll(&mut self, demand: u64, _fx: &mut Fx<'_, T>) -> Option<Action<T>> {
        if self.errors_first && matches!(self.end, Some(Err(_))) {
            return self.end.take().map(Action::End);
        }
        match std::mem::replace(&mut self.slot, DebounceSlot::Empty) {
            DebounceSlot::Ready(item) if demand > 0 => Some(Action::Item(item)),
            // At completion the held item need not wait out its quiet period.
            DebounceSlot::Quiet { item, .. } if demand > 0 && self.end.is_some() => {
                Some(Action::Item(item))
            }
            DebounceSlot::Empty => self.end.take().map(Action::End),
            held => {
                self.slot = held;
                None
            }
        }
    }
}
