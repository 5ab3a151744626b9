//! `buffer_timeout(size, period)`: implementation notes. The user contract is on
//! [`PublisherExt::buffer_timeout`](crate::PublisherExt::buffer_timeout).
//!
//! A [`Machine`] on the timed core (`src/stage/timed/`), which owns the drain loop,
//! downstream's demand (counted in batches) and the timer. The stage requests
//! upstream itself, from `poll`: while downstream has demand and upstream has not
//! ended, it tops up `owed` (requested, not yet received) so that `owed` plus the
//! items in `batch` equals `size`. Upstream therefore never owes more than the stage
//! can hold, even when a batch goes out early by time.
//!
//! State: `batch` (capacity `size`, at most `PREALLOCATED` and grown beyond it as it
//! fills, allocated when a batch's first item arrives),
//! `started` (that item's arrival), `due` (the period has passed since), `owed`, and
//! upstream's `end`. `poll` emits the batch when demand > 0 and it is full, due, or
//! upstream has completed; once the batch is empty, the completion. An upstream error
//! waits behind the batch in the same way, unless `errors_first` is set: then it
//! drops the batch and is emitted at once.
//!
//! Timers: at most one outstanding (`armed`). A batch's first item arms it unless one
//! is already queued (left from an earlier batch); when it fires it checks the age of
//! the current batch and either marks it `due` or re-arms for the remainder. So a fast
//! source that fills many batches per period still has one timer queued, not one per
//! batch.

use std::time::{Duration, Instant};

use crate::runtime::Scheduler;
use crate::stage::timed::{assert_positive, Action, Fx, Machine, TimedSubscriber};
use crate::stage::window::{self, PREALLOCATED};
use crate::{Error, Publisher, Subscriber};

/// Publisher for the [`buffer_timeout`](crate::PublisherExt::buffer_timeout) method.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct BufferTimeout<P, C> {
    /// The upstream publisher.
    source: P,
    /// Items per batch.
    size: usize,
    /// How long a batch may wait for more items.
    period: Duration,
    /// Where timers run and what time it is.
    scheduler: C,
    /// An upstream error overtakes the held batch ([`errors_first`](Self::errors_first)).
    errors_first: bool,
}

impl<P, C> BufferTimeout<P, C> {
    pub(crate) fn new(source: P, size: u64, period: Duration, scheduler: C) -> Self {
        let size = window::validate("buffer_timeout size", size);
        assert_positive("buffer_timeout period", period);
        BufferTimeout {
            source,
            size,
            period,
            scheduler,
            errors_first: false,
        }
    }

    /// Deliver an upstream error at once, without demand, releasing the held
    /// batch (not reported as a drop: the stream ended), instead of after it.
    /// By default an error, like completion, waits behind what the stage holds.
    /// See [`OnBackpressureBuffer::errors_first`](crate::operators::OnBackpressureBuffer::errors_first).
    pub fn errors_first(mut self) -> Self {
        self.errors_first = true;
        self
    }
}

impl<P: Publisher, C: Scheduler + Clone> Publisher for BufferTimeout<P, C> {
    type Item = Vec<P::Item>;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<Vec<P::Item>> + Send + 'static,
    {
        let machine = Batcher {
            errors_first: self.errors_first,
            size: self.size,
            period: self.period,
            batch: Vec::new(),
            started: None,
            due: false,
            armed: false,
            owed: 0,
            end: None,
        };
        self.source.subscribe(TimedSubscriber::new(
            "buffer_timeout",
            subscriber,
            machine,
            self.scheduler,
        ));
    }

    fn in_flight_bound(&self) -> u64 {
        self.source
            .in_flight_bound()
            .saturating_add(self.size as u64)
    }
}

/// The stage's state (behind the timed core's lock).
struct Batcher<T> {
    /// An error overtakes what is held.
    errors_first: bool,
    /// Items per batch.
    size: usize,
    /// How long a batch may wait for more items.
    period: Duration,
    /// The batch being filled; capacity 0 until its first item.
    batch: Vec<T>,
    /// When the batch's first item arrived.
    started: Option<Instant>,
    /// `period` passed since `started`: emit when demand allows.
    due: bool,
    /// The one timer is outstanding.
    armed: bool,
    /// Items requested upstream and not yet received.
    owed: u64,
    /// Upstream's terminal signal.
    end: Option<Result<(), Error>>,
}

impl<T: Send + 'static> Machine for Batcher<T> {
    type In = T;
    type Out = Vec<T>;
    const NAME: &'static str = "buffer_timeout";

    fn on_item(&mut self, item: T, fx: &mut Fx<'_, T>) {
        // Never asked for: the batch would grow past `size`.
        let item = match fx.arrival(Self::NAME, &mut self.owed, item) {
            Ok(item) => item,
            Err(error) => return self.on_end(Err(error), fx),
        };
        if self.batch.is_empty() {
            if self.batch.capacity() == 0 {
                self.batch = Vec::with_capacity(self.size.min(PREALLOCATED));
            }
            self.started = Some(fx.now());
            if !self.armed {
                fx.arm = Some(self.period);
                self.armed = true;
            }
        }
        self.batch.push(item);
    }

    fn on_end(&mut self, end: Result<(), Error>, fx: &mut Fx<'_, T>) {
        // The first end stays (a rule 1.1 error, then upstream's own end).
        if self.end.is_some() {
            return;
        }
        if end.is_err() && self.errors_first {
            // Dropped after the lock (see `Fx::released`).
            fx.released.append(&mut self.batch);
        }
        self.end = Some(end);
    }

    fn on_timer(&mut self, fx: &mut Fx<'_, T>) {
        self.armed = false;
        if self.batch.is_empty() || self.due {
            return;
        }
        let now = fx.now();
        let age = now.saturating_duration_since(self.started.unwrap_or(now));
        if age >= self.period {
            self.due = true;
        } else {
            fx.arm = Some(self.period - age);
            self.armed = true;
        }
    }

    fn poll(&mut self, demand: u64, fx: &mut Fx<'_, T>) -> Option<Action<Vec<T>>> {
        if self.errors_first && matches!(self.end, Some(Err(_))) {
            return self.end.take().map(Action::End);
        }
        if demand > 0
            && !self.batch.is_empty()
            && (self.batch.len() == self.size || self.due || self.end.is_some())
        {
            self.due = false;
            return Some(Action::Item(std::mem::take(&mut self.batch)));
        }
        if self.batch.is_empty() && self.end.is_some() {
            return self.end.take().map(Action::End);
        }
        if demand > 0 && self.end.is_none() {
            let window = self.size as u64;
            let have = self.owed + self.batch.len() as u64;
            if have < window {
                fx.request = window - have;
                self.owed = window;
                self.owed -= self.batch.len() as u64;
            }
        }
        None
    }
}
