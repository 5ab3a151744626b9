//! The timed core (`subscriber.rs` is its upstream side, `clock.rs` its time
//! arithmetic): one drain loop shared by the time sources (`interval`, `timer`) and
//! the time operators (`sample`, `debounce`, `timeout`, `buffer_timeout`, the shaping
//! `throttle`).
//!
//! A time stage gets signals from three directions at once: upstream (`on_next`,
//! `on_complete`, `on_error`, serial among themselves), downstream (`request`,
//! `cancel`, any thread, re-entrantly) and its scheduler (a timer firing on a worker
//! thread, or in the test's `VirtualTime::advance`). All three only *record* what
//! happened in the stage's state machine (a [`Machine`], behind a mutex that is never
//! held while another stage is called) and then enter the one [`Wip`] drain loop. Only
//! the loop's owner calls downstream, so `on_next` is never called concurrently
//! (rule 1.3) however many threads fire timers.
//!
//! # The pass
//!
//! The owner locks downstream (only owners do) and asks the machine, with the current
//! outstanding demand and the scheduler's `now()`, for the next signal ([`Machine::poll`]):
//! an item (only when demand > 0), the end of the stream, or nothing. It settles the
//! demand per item and repeats until the machine has nothing to say. A cancel or a
//! `request(0)` seen at the top of a pass ends the stage: upstream is cancelled, the
//! machine (and what it holds) is dropped, `request(0)` is answered with the rule 3.9
//! error, and downstream is dropped (rule 3.13).
//!
//! # Effects
//!
//! Every machine callback gets an [`Fx`]: it may ask to arm a timer, to request or
//! cancel upstream, and report one dropped item. The core carries these out *after*
//! the machine's lock is released, because requesting upstream may deliver items
//! synchronously (which lock the machine again) and an `Immediate` scheduler runs a
//! timer on the caller's stack.
//!
//! # Timers
//!
//! A scheduler's timers cannot be cancelled, so a timer task holds only a [`Weak`]
//! reference to the core. When it fires it does nothing if the stage is gone,
//! cancelled or terminated (the core's flags). Every machine keeps at most one timer
//! outstanding (an "armed" flag, or a state that implies it) and, when it fires,
//! compares the clock with the machine's current state: a timer armed for an item or a
//! deadline that has since moved on is re-armed for the remainder, or does nothing.
//! A scheduler's queue thus holds at most one task per stage, never one per item, and
//! after cancel or termination nothing re-arms.

use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use crate::demand::{self, AtomicDemand};
use crate::drain::Wip;
use crate::loom::{AtomicU8, Ordering};
use crate::runtime::Scheduler;
use crate::{DropReason, Error, RawSubscription, Subscriber, Subscription};

pub(crate) use clock::{assert_positive, from_nanos, until_next_tick};
pub(crate) use subscriber::TimedSubscriber;

mod clock;
mod subscriber;

/// Flag: downstream cancelled.
const CANCELLED: u8 = 1;
/// Flag: downstream called `request(0)` (rule 3.9).
const BAD_REQUEST: u8 = 2;
/// Flag: the stage terminated downstream; timers and items are ignored.
const DONE: u8 = 4;

/// What a machine's `poll` asks the drain owner to signal downstream.
#[derive(Debug)]
pub(crate) enum Emit<T> {
    /// `on_next(item)`; only returned when demand > 0.
    Item(T),
    /// `on_complete` (`Ok`) or `on_error`; the stage is over.
    End(Result<(), Error>),
}

/// The effects of one machine callback, carried out by the core after it released the
/// machine's lock; and the clock, read at most once per callback and only if asked.
pub(crate) struct Fx<'a, D> {
    /// The scheduler, for its clock.
    clock: &'a dyn Scheduler,
    /// The clock, once read.
    now: Option<Instant>,
    /// Arm a timer: `on_timer` after this delay.
    pub(crate) arm: Option<Duration>,
    /// Request this many more items upstream (0: none).
    pub(crate) request: u64,
    /// Cancel upstream (the stage ends on its own).
    pub(crate) cancel_upstream: bool,
    /// An item the machine discarded, for the drop hook.
    pub(crate) dropped: Option<(DropReason, D)>,
}

impl<'a, D> Fx<'a, D> {
    fn new(clock: &'a dyn Scheduler) -> Self {
        Fx {
            clock,
            now: None,
            arm: None,
            request: 0,
            cancel_upstream: false,
            dropped: None,
        }
    }

    /// The scheduler's clock (read once per callback).
    pub(crate) fn now(&mut self) -> Instant {
        *self.now.get_or_insert_with(|| self.clock.now())
    }
}

/// A time stage's state machine. Its methods run under the core's lock: they must not
/// call other stages; they say what to do through the [`Fx`].
pub(crate) trait Machine: Send + 'static {
    /// Items from upstream (sources: never called).
    type In: Send + 'static;
    /// Items downstream.
    type Out: Send + 'static;

    /// Downstream is subscribed (its `on_subscribe` returned).
    fn on_start(&mut self, _fx: &mut Fx<'_, Self::In>) {}

    /// Downstream requested `n` more (already added to the demand).
    fn on_request(&mut self, _n: u64, _fx: &mut Fx<'_, Self::In>) {}

    /// An item from upstream.
    fn on_item(&mut self, _item: Self::In, _fx: &mut Fx<'_, Self::In>) {}

    /// Upstream terminated.
    fn on_end(&mut self, _end: Result<(), Error>, _fx: &mut Fx<'_, Self::In>) {}

    /// A timer fired. Machines keep at most one outstanding, so this is the one they
    /// armed; it may have been armed for an item or a deadline that has moved on since,
    /// which the machine checks against the clock.
    fn on_timer(&mut self, fx: &mut Fx<'_, Self::In>);

    /// The next signal for downstream, given the outstanding `demand` (an item only
    /// when `demand > 0`), or `None` when there is nothing to signal now.
    fn poll(&mut self, demand: u64, fx: &mut Fx<'_, Self::In>) -> Option<Emit<Self::Out>>;
}

fn lock<X>(mutex: &Mutex<X>) -> MutexGuard<'_, X> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The state a time stage shares between upstream, downstream and its timers.
pub(crate) struct Core<M: Machine, S, C> {
    /// The one drain loop.
    wip: Wip,
    /// Downstream's outstanding demand.
    demand: AtomicDemand,
    /// `CANCELLED | BAD_REQUEST | DONE`.
    flags: AtomicU8,
    /// The state machine; `None` once the stage is over (what it held is released).
    machine: Mutex<Option<M>>,
    /// Downstream; locked only by the `Wip` owner. `None` once the stage is over.
    downstream: Mutex<Option<S>>,
    /// Upstream, for operators (sources have none).
    upstream: Option<Subscription>,
    /// Where timers run and what time it is.
    scheduler: C,
    /// For timer tasks, which must not keep the stage alive.
    me: Weak<Self>,
}

impl<M, S, C> Core<M, S, C>
where
    M: Machine,
    S: Subscriber<M::Out> + Send + 'static,
    C: Scheduler + Clone,
{
    /// A core around `machine`, fed by `upstream` (none for a source).
    pub(crate) fn new(machine: M, scheduler: C, upstream: Option<Subscription>) -> Arc<Self> {
        Arc::new_cyclic(|me| Core {
            wip: Wip::new(),
            demand: AtomicDemand::new(),
            flags: AtomicU8::new(0),
            machine: Mutex::new(Some(machine)),
            downstream: Mutex::new(None),
            upstream,
            scheduler,
            me: me.clone(),
        })
    }

    /// Subscribe `downstream`: `on_subscribe` runs while this call owns the loop (its
    /// requests only count), then the machine starts and the first pass runs.
    pub(crate) fn start(self: &Arc<Self>, mut downstream: S) {
        let entered = self.wip.enter();
        debug_assert!(entered, "a new loop has no other owner");
        downstream.on_subscribe(Subscription::new(self.clone()));
        *lock(&self.downstream) = Some(downstream);
        // Relaxed: this thread set any flag seen here (inside `on_subscribe`), or the
        // pass below sees it through the `Wip`.
        if self.flags.load(Ordering::Relaxed) == 0 {
            let _starts_drop_nothing = self.call(|m, fx| m.on_start(fx));
        }
        self.wip.run(|| self.pass());
    }

    /// Run `f` on the machine (if the stage is not over), then carry out its effects.
    /// Returns the item it dropped, if any.
    fn call(&self, f: impl FnOnce(&mut M, &mut Fx<'_, M::In>)) -> Option<(DropReason, M::In)> {
        let mut fx = Fx::new(&self.scheduler);
        {
            let mut machine = lock(&self.machine);
            f(machine.as_mut()?, &mut fx);
        }
        self.apply(fx)
    }

    /// Carry out `fx` (no lock held); hand back the dropped item.
    fn apply(&self, fx: Fx<'_, M::In>) -> Option<(DropReason, M::In)> {
        if let Some(delay) = fx.arm {
            let me = self.me.clone();
            self.scheduler.schedule_after(
                delay,
                Box::new(move || {
                    if let Some(core) = me.upgrade() {
                        core.fire();
                    }
                }),
            );
        }
        if let Some(upstream) = &self.upstream {
            if fx.cancel_upstream {
                upstream.cancel();
            } else if fx.request > 0 {
                upstream.request(fx.request);
            }
        }
        fx.dropped
    }

    /// A timer fired.
    fn fire(&self) {
        // Relaxed: an early exit only; a stale read is caught by the machine being gone.
        if self.flags.load(Ordering::Relaxed) != 0 {
            return;
        }
        let _timers_drop_nothing = self.call(|m, fx| m.on_timer(fx));
        self.wip.drain(|| self.pass());
    }

    /// An item from upstream; returns the item the machine dropped, for the caller's
    /// drop reporter.
    pub(crate) fn item(&self, item: M::In) -> Option<(DropReason, M::In)> {
        let dropped = self.call(|m, fx| m.on_item(item, fx));
        self.wip.drain(|| self.pass());
        dropped
    }

    /// Upstream terminated.
    pub(crate) fn end(&self, end: Result<(), Error>) {
        let _ends_drop_nothing = self.call(|m, fx| m.on_end(end, fx));
        self.wip.drain(|| self.pass());
    }

    /// The stage is over: no more timers or items; release what the machine held.
    fn finish(&self) {
        // Relaxed: read only by `fire`'s early exit (see there).
        self.flags.fetch_or(DONE, Ordering::Relaxed);
        let machine = lock(&self.machine).take();
        drop(machine);
    }

    /// One drain pass (see the module docs).
    fn pass(&self) {
        let mut slot = lock(&self.downstream);
        let Some(downstream) = slot.as_mut() else {
            return;
        };
        loop {
            // Relaxed: set before the setter's `Wip::enter` (AcqRel), which this owner
            // acquired before the pass.
            let flags = self.flags.load(Ordering::Relaxed);
            if flags & (CANCELLED | BAD_REQUEST) != 0 {
                self.finish();
                if let Some(upstream) = &self.upstream {
                    upstream.cancel();
                }
                if flags & CANCELLED == 0 {
                    downstream.on_error(demand::validate(0).unwrap_err());
                }
                *slot = None;
                return;
            }
            let demand = self.demand.get();
            let mut fx = Fx::new(&self.scheduler);
            let signal = {
                let mut machine = lock(&self.machine);
                let Some(machine) = machine.as_mut() else {
                    return;
                };
                machine.poll(demand, &mut fx)
            };
            let _polls_drop_nothing = self.apply(fx);
            match signal {
                None => return,
                Some(Emit::Item(item)) => {
                    debug_assert!(demand > 0, "a machine emitted without demand");
                    self.demand.produced(1);
                    downstream.on_next(item);
                }
                Some(Emit::End(end)) => {
                    self.finish();
                    match end {
                        Ok(()) => downstream.on_complete(),
                        Err(error) => downstream.on_error(error),
                    }
                    *slot = None;
                    return;
                }
            }
        }
    }
}

impl<M, S, C> RawSubscription for Core<M, S, C>
where
    M: Machine,
    S: Subscriber<M::Out> + Send + 'static,
    C: Scheduler + Clone,
{
    fn request(&self, n: u64) {
        if demand::validate(n).is_ok() {
            self.demand.add(n);
            let _requests_drop_nothing = self.call(|m, fx| m.on_request(n, fx));
        } else {
            // Relaxed: published by the `Wip::enter` below (see `pass`).
            self.flags.fetch_or(BAD_REQUEST, Ordering::Relaxed);
        }
        self.wip.drain(|| self.pass());
    }

    fn cancel(&self) {
        // Relaxed: published by the `Wip::enter` below (see `pass`).
        self.flags.fetch_or(CANCELLED, Ordering::Relaxed);
        self.wip.drain(|| self.pass());
    }
}
