// The timed stage (`subscriber.rs` is its upstream side, `clock.rs` its time
// arithmetic): one stage on the signal core shared by the time sources (`interval`,
// `timer`) and the time operators (`sample`, `debounce`, `timeout`, `buffer_timeout`,
// the shaping `throttle`).
//
// A time stage gets signals from three directions at once: upstream (`on_next`,
// `on_complete`, `on_error`, serial among themselves), downstream (`request`,
// `cancel`, any thread, re-entrantly) and its scheduler (a timer firing on a worker
// thread, or in the test's `VirtualTime::advance`). All three only *record* what
// happened in the stage's state machine (a [`Machine`], behind a mutex that is never
// held while another stage is called) and then ask the core for a pass. Only the
// loop's owner calls downstream, so `on_next` is never called concurrently (rule 1.3)
// however many threads fire timers.
//
// # The pass
//
// The owner asks the machine, with the current outstanding demand and the
// scheduler's `now()`, for the next signal ([`Machine::poll`]): an item (only when
// demand > 0), the end of the stream, or nothing. It settles the demand per item and
// repeats until the machine has nothing to say. Everything else (cancel, `request(0)`,
// a panicking subscriber, a timer the scheduler dropped) is the core's: it ends the
// stage, and the stage's `stop` drops the machine (and what it holds), cancels the
// outstanding timer (so the scheduler holds nothing of a stage that is gone) and
// cancels upstream.
//
// # Batches
//
// Items come and go in chunks of up to [`CHUNK`], one lock each: a batch from
// upstream (`on_next_batch`) is fed to the machine's `on_item` a chunk at a time, and
// the pass collects up to a chunk of `poll` answers (never more than the demand)
// before it hands them downstream as one batch. The callbacks of a chunk share one
// [`Fx`], so the clock is read at most once per chunk: the items of one chunk count
// as arriving (or leaving) at the same instant. A chunk ends early at an effect
// that must be carried out before the machine goes on (a timer to arm, upstream to
// cancel); requests add up. What the machine drops during a chunk is handed to the
// drop hook after the lock is released, in order.
//
// # Effects
//
// Every machine callback gets an [`Fx`]: it may ask to arm a timer, to request or
// cancel upstream, and report one dropped item. The stage carries these out *after*
// the machine's lock is released, because requesting upstream may deliver items
// synchronously (which lock the machine again) and an `Immediate` scheduler runs a
// timer on the caller's stack.
//
// # Timers
//
// A timer task holds only a weak reference to the core. When it fires it does
// nothing if the stage is gone or over; dropped unrun by its scheduler (shut down), it
// ends the stage with a `SchedulerShutdown` error. Every machine keeps at most one
// timer outstanding (an "armed" flag, or a state that implies it) and, when it fires,
// compares the clock with the machine's current state: a timer armed for an item or a
// deadline that has since moved on is re-armed for the remainder, or does nothing. A
// scheduler's queue thus holds at most one task per stage, never one per item. A delay
// whose deadline does not fit the clock (`Duration::MAX`) means "never": no timer is
// armed, and the machine, which believes one is, never re-arms.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use super::core::{Core, CoreHandle, Cx, Pass, SharedUpstream, Stage};
use crate::demand::AtomicDemand;
use crate::guard::catch;
use crate::runtime::{deadline, Scheduler, TimerSlot};
use crate::{DropReason, Error, Subscriber, Subscription};

pub(crate) use clock::{assert_positive, from_nanos, until_next_tick};
pub(crate) use subscriber::TimedSubscriber;

mod clock;
mod subscriber;

/// The most items fed to a machine, or collected from it, under one lock.
pub(crate) const CHUNK: usize = 256;

/// What a machine's `poll` asks the drain owner to signal downstream.
#[derive(Debug)]
pub(crate) enum Action<T> {
    /// `on_next(item)`; only returned when demand > 0.
    Item(T),
    /// `on_complete` (`Ok`) or `on_error`; the stage is over.
    End(Result<(), Error>),
}

/// The effects of one machine callback, carried out by the stage after it released
/// the machine's lock; and the clock, read at most once per callback and only if asked.
pub(crate) struct Fx<'a, D> {
    /// The scheduler, for its clock.
    clock: &'a dyn Scheduler,
    /// The clock, once read.
    now: Option<Instant>,
    /// Arm a timer: `on_timer` after this delay.
    pub(crate) arm: Option<Duration>,
    /// Request this many more items upstream (0: none).
    pub(crate) request: u64,
    /// The requests of earlier callbacks of the same chunk, added up.
    requested: u64,
    /// Cancel upstream (the stage ends on its own).
    pub(crate) cancel_upstream: bool,
    /// An item the machine discarded, for the drop hook.
    pub(crate) dropped: Option<(DropReason, D)>,
    /// Items the machine let go without a report (an error overtook them): dropped
    /// once the lock is let go, as their `Drop` is user code (it may call this
    /// stage's subscription, whose request takes the lock).
    pub(crate) released: Vec<D>,
}

impl<'a, D> Fx<'a, D> {
    fn new(clock: &'a dyn Scheduler) -> Self {
        Fx {
            clock,
            now: None,
            arm: None,
            request: 0,
            requested: 0,
            cancel_upstream: false,
            dropped: None,
            released: Vec::new(),
        }
    }

    /// `item` arrived although upstream was never asked for it (rule 1.1), for a
    /// machine that keeps count of what it asked for: upstream is cancelled, the item
    /// is let go (after the lock), and the machine ends with the returned error (after
    /// what it holds, as with any upstream error) instead of growing a buffer.
    fn over_delivered(&mut self, stage: &'static str, item: D) -> Error {
        self.cancel_upstream = true;
        self.released.push(item);
        crate::stage::window::over_delivered(stage)
    }

    /// An item arrived for a machine that counts in `owed` what it asked upstream for
    /// and has not received: counted against `owed` and handed back (`u64::MAX`
    /// stays: unbounded, rule 3.17), or, when nothing is owed (rule 1.1 broken),
    /// [`over_delivered`](Self::over_delivered)'s error, for the machine to end with.
    pub(crate) fn arrival(
        &mut self,
        stage: &'static str,
        owed: &mut u64,
        item: D,
    ) -> Result<D, Error> {
        match *owed {
            0 => Err(self.over_delivered(stage, item)),
            u64::MAX => Ok(item),
            _ => {
                *owed -= 1;
                Ok(item)
            }
        }
    }

    /// The scheduler's clock (read once per callback, or per chunk of callbacks).
    pub(crate) fn now(&mut self) -> Instant {
        *self.now.get_or_insert_with(|| self.clock.now())
    }

    /// Set aside the request of the callback that just ran (machines assign
    /// `request`), so that the next callback of the chunk cannot overwrite it.
    fn add_up_requests(&mut self) {
        self.requested = self
            .requested
            .saturating_add(std::mem::take(&mut self.request));
    }

    /// The chunk is over: its requests, added up, are the one to carry out.
    fn settle_requests(&mut self) {
        self.request = std::mem::take(&mut self.requested);
    }

    /// True when an effect is pending that must be carried out before the machine is
    /// called again (a timer to arm: machines arm one at a time; a cancel). Requests
    /// add up and drops are taken out after each callback, so neither ends a chunk.
    fn must_apply(&self) -> bool {
        self.arm.is_some() || self.cancel_upstream
    }
}

/// A time stage's state machine. Its methods run under the stage's lock: they must not
/// call other stages, nor drop an item (its `Drop` is user code): they say what to do,
/// and hand over what they let go, through the [`Fx`].
pub(crate) trait Machine: Send + 'static {
    /// Items from upstream (sources: never called).
    type In: Send + 'static;
    /// Items downstream.
    type Out: Send + 'static;
    /// The stage's name in errors and logs.
    const NAME: &'static str;

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
    fn poll(&mut self, demand: u64, fx: &mut Fx<'_, Self::In>) -> Option<Action<Self::Out>>;

    /// A chunk of signals at once: push items to `out` (never more than `demand`, and
    /// not past [`CHUNK`] in `out`) and return the end of the stream if it comes. The
    /// default calls [`poll`](Self::poll) until it has nothing more or an effect must
    /// be carried out ([`poll_each`]); machines that queue items move a run of them
    /// first ([`poll_queued_first`]).
    fn poll_into(
        &mut self,
        demand: u64,
        out: &mut Vec<Self::Out>,
        fx: &mut Fx<'_, Self::In>,
    ) -> Option<Result<(), Error>> {
        poll_each(self, demand, out, fx)
    }
}

/// [`Machine::poll_into`] one [`poll`](Machine::poll) at a time, each told what is left
/// of the demand; stops when the machine has nothing more, `out` holds [`CHUNK`]
/// items, or an effect must be carried out (see [`Fx::must_apply`]).
pub(crate) fn poll_each<M: Machine + ?Sized>(
    machine: &mut M,
    demand: u64,
    out: &mut Vec<M::Out>,
    fx: &mut Fx<'_, M::In>,
) -> Option<Result<(), Error>> {
    let mut left = demand;
    while out.len() < CHUNK {
        let signal = machine.poll(left, fx);
        fx.add_up_requests();
        match signal {
            None => return None,
            Some(Action::Item(item)) => {
                debug_assert!(left > 0, "a machine emitted without demand");
                out.push(item);
                left -= 1;
            }
            Some(Action::End(end)) => return Some(end),
        }
        if fx.must_apply() {
            return None;
        }
    }
    None
}

/// [`Machine::poll_into`] for machines that queue items their `poll` would hand out
/// one by one with nothing else to do in between: up to `demand` of them (and no
/// more than fit in the chunk) move from the machine's `queue` to `out` as one run,
/// then [`poll_each`] decides the rest.
pub(crate) fn poll_queued_first<M: Machine>(
    machine: &mut M,
    queue: impl FnOnce(&mut M) -> &mut VecDeque<M::Out>,
    demand: u64,
    out: &mut Vec<M::Out>,
    fx: &mut Fx<'_, M::In>,
) -> Option<Result<(), Error>> {
    let queue = queue(machine);
    let room = CHUNK.saturating_sub(out.len());
    let n = usize::try_from(demand)
        .unwrap_or(usize::MAX)
        .min(room)
        .min(queue.len());
    out.extend(queue.drain(..n));
    poll_each(machine, demand - n as u64, out, fx)
}

fn lock<X>(mutex: &Mutex<X>) -> MutexGuard<'_, X> {
    // Machines never panic while it is held except in a weir bug; recover anyway.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A time stage's shared part: the machine, its clock and timers, and upstream.
pub(crate) struct Timed<M, C> {
    /// The state machine; `None` once the stage is over (what it held is released).
    machine: Mutex<Option<M>>,
    /// Where timers run and what time it is.
    scheduler: C,
    /// Upstream, for operators (sources have none).
    upstream: Option<SharedUpstream>,
    /// The core, for timer tasks (which must not keep the stage alive).
    me: OnceLock<Weak<dyn CoreHandle>>,
    /// The outstanding timer, cancelled when the stage ends.
    timer: TimerSlot,
    /// Tickets of the machine's arms, taken under the machine lock (see [`Timed::arm`]).
    arms: AtomicU64,
}

/// The core of a time stage serving `S`.
pub(crate) type TimedCore<M, C, S> = Core<Timed<M, C>, S>;

/// Subscribe `downstream` to a stage running `machine` on `scheduler`, fed by
/// `upstream` (none for a source). Returns the core, for the upstream side.
pub(crate) fn start<M, C, S>(
    machine: M,
    scheduler: C,
    upstream: Option<Subscription>,
    downstream: S,
) -> Arc<TimedCore<M, C, S>>
where
    M: Machine,
    C: Scheduler + Clone,
    S: Subscriber<M::Out> + Send + 'static,
{
    let core = Core::new(Timed {
        machine: Mutex::new(Some(machine)),
        scheduler,
        upstream: upstream.map(SharedUpstream::new),
        me: OnceLock::new(),
        timer: TimerSlot::default(),
        arms: AtomicU64::new(0),
    });
    core.attach_then(Vec::new(), downstream, |core| {
        if !core.is_stopping() {
            let _starts_drop_nothing = core.stage().call(|m, fx| m.on_start(fx));
        }
    });
    core
}

impl<M: Machine, C: Scheduler + Clone> Timed<M, C> {
    /// Run `f` on the machine (if the stage is not over), then carry out its effects.
    /// Returns the item it dropped, if any.
    pub(crate) fn call(
        &self,
        f: impl FnOnce(&mut M, &mut Fx<'_, M::In>),
    ) -> Option<(DropReason, M::In)> {
        let called = catch(|| {
            let mut fx = Fx::new(&self.scheduler);
            let ticket = {
                let mut machine = lock(&self.machine);
                f(machine.as_mut()?, &mut fx);
                self.ticket(&fx)
            };
            self.apply(fx, ticket)
        });
        called.unwrap_or_else(|error| {
            self.fail(error);
            None
        })
    }

    /// The machine's work panicked: a user scheduler's clock (`Fx::now`) or its
    /// `schedule_timer`, run on upstream's thread or a timer's. The stage ends with
    /// the error at its next pass (the panic is not upstream's subscriber's).
    #[cold]
    fn fail(&self, error: Error) {
        if let Some(core) = self.me.get().and_then(Weak::upgrade) {
            core.fail(error);
        }
    }

    /// The ticket of `fx`'s arm, if it arms (called under the machine lock, which
    /// orders the tickets as the machine's decisions).
    fn ticket(&self, fx: &Fx<'_, M::In>) -> u64 {
        if fx.arm.is_some() {
            // Relaxed: the machine lock orders the tickets.
            self.arms.fetch_add(1, Ordering::Relaxed) + 1
        } else {
            0
        }
    }

    /// Carry out `fx` (no lock held), its arm holding `ticket`; hand back the
    /// dropped item.
    fn apply(&self, mut fx: Fx<'_, M::In>, ticket: u64) -> Option<(DropReason, M::In)> {
        if let Some(delay) = fx.arm {
            // A deadline that does not fit the clock never falls due: arm nothing.
            if deadline(fx.now(), delay).is_some() {
                self.arm(delay, ticket);
            }
        }
        if let Some(upstream) = &self.upstream {
            if fx.cancel_upstream {
                upstream.cancel();
            } else if fx.request > 0 {
                upstream.request(fx.request);
            }
        }
        if !fx.released.is_empty() {
            let released = std::mem::take(&mut fx.released);
            if crate::guard::drop_each(released) > 0 {
                tracing::error!(
                    stage = M::NAME,
                    "an item let go at an error panicked in Drop; contained"
                );
            }
        }
        fx.dropped
    }

    /// Feed the machine up to a chunk of `items` under one lock (see the file header),
    /// pushing what it drops to `dropped` for the caller's drop reporter. Returns how
    /// many items it took and whether `items` may have more, or `None` when the stage
    /// is over (the caller stops: what is left of the batch is released). The caller
    /// then asks the core for a pass.
    pub(crate) fn items<I: Iterator<Item = M::In>>(
        &self,
        items: &mut I,
        dropped: &mut Vec<(DropReason, M::In)>,
    ) -> Option<(usize, bool)> {
        let fed = catch(|| self.feed(items, dropped));
        fed.unwrap_or_else(|error| {
            self.fail(error);
            None
        })
    }

    /// [`items`](Self::items), unguarded.
    fn feed<I: Iterator<Item = M::In>>(
        &self,
        items: &mut I,
        dropped: &mut Vec<(DropReason, M::In)>,
    ) -> Option<(usize, bool)> {
        let mut fx = Fx::new(&self.scheduler);
        let mut taken = 0;
        let mut more = true;
        let ticket = {
            let mut machine = lock(&self.machine);
            let machine = machine.as_mut()?;
            while taken < CHUNK {
                let Some(item) = items.next() else {
                    more = false;
                    break;
                };
                machine.on_item(item, &mut fx);
                fx.add_up_requests();
                taken += 1;
                if let Some(drop) = fx.dropped.take() {
                    if dropped.capacity() == 0 {
                        dropped.reserve_exact(CHUNK);
                    }
                    dropped.push(drop);
                }
                if fx.must_apply() {
                    break;
                }
            }
            self.ticket(&fx)
        };
        fx.settle_requests();
        let _taken_out_above = self.apply(fx, ticket);
        Some((taken, more))
    }

    /// The stage cancelled upstream, or upstream terminated.
    pub(crate) fn upstream_done(&self) -> bool {
        self.upstream.as_ref().is_some_and(SharedUpstream::is_done)
    }

    /// Upstream terminated. The caller then asks the core for a pass.
    pub(crate) fn end(&self, end: Result<(), Error>) {
        if let Some(upstream) = &self.upstream {
            upstream.finished();
        }
        let _ends_drop_nothing = self.call(|m, fx| m.on_end(end, fx));
    }

    /// Arm the one timer, for the machine's arm numbered `ticket` (see
    /// [`TimerSlot`]: an arm that reaches the slot after `stop` cancels its timer).
    fn arm(&self, delay: Duration, ticket: u64) {
        let Some(me) = self.me.get() else {
            return;
        };
        let task = TimerTask {
            target: Some(me.clone()),
        };
        // Not under the slot's lock: a scheduler may run the task right here.
        let timer = self
            .scheduler
            .schedule_timer(delay, Box::new(move || task.fire()));
        self.timer.keep(ticket, timer);
    }
}

/// A timer's task: fires the stage, or (dropped unrun) tells it the scheduler is gone.
struct TimerTask {
    target: Option<Weak<dyn CoreHandle>>,
}

impl TimerTask {
    fn fire(mut self) {
        if let Some(target) = self.target.take().and_then(|weak| weak.upgrade()) {
            target.fire();
        }
    }
}

impl Drop for TimerTask {
    fn drop(&mut self) {
        if let Some(target) = self.target.take().and_then(|weak| weak.upgrade()) {
            target.lost();
        }
    }
}

impl<M: Machine, C: Scheduler + Clone> Stage for Timed<M, C> {
    const NAME: &'static str = M::NAME;
    type Item = M::Out;
    /// Items polled under the lock, on their way downstream as one batch: room for a
    /// chunk, reserved at the first item; empty between passes.
    type Owned = Vec<M::Out>;
    type Padding = ();

    fn pass<S: Subscriber<M::Out>>(
        &self,
        cx: &Cx<'_>,
        out: &mut Vec<M::Out>,
        downstream: &mut S,
    ) -> Pass {
        loop {
            if cx.stopped() {
                return Pass::Idle;
            }
            let demand = cx.demand().get();
            let polled = catch(|| {
                let mut fx = Fx::new(&self.scheduler);
                let (end, ticket) = {
                    let mut machine = lock(&self.machine);
                    let machine = machine.as_mut()?;
                    if out.capacity() == 0 {
                        out.reserve_exact(CHUNK);
                    }
                    (machine.poll_into(demand, out, &mut fx), self.ticket(&fx))
                };
                fx.settle_requests();
                let _polls_drop_nothing = self.apply(fx, ticket);
                Some(end)
            });
            let end = match polled {
                Ok(Some(end)) => end,
                Ok(None) => return Pass::Idle,
                // The machine's work panicked (a user scheduler's clock, say), not the
                // subscriber: it gets the error.
                Err(error) => return cx.terminate(downstream, Err(error.in_stage(M::NAME))),
            };
            let emitted = out.len();
            if emitted > 0 {
                // One batch, within the demand the machine was told of. Items a
                // cancelling downstream leaves behind are released with the drain.
                let mut passed = 0u64;
                let credit = cx.hand_over(downstream, out.drain(..).inspect(|_| passed += 1));
                cx.demand().produced(passed);
                if cx.stopped() {
                    return Pass::Idle;
                }
                // Batch credit is a request made at the end of the batch: the machine
                // hears of it as of any other (`timeout` forwards it upstream).
                if credit > 0 {
                    cx.demand().add(credit);
                    self.on_request(credit, cx.demand());
                }
            }
            if let Some(end) = end {
                return cx.terminate(downstream, end);
            }
            if emitted == 0 {
                return Pass::Idle;
            }
        }
    }

    /// Cancel upstream and the timer, then drop the machine (and what it holds).
    /// Upstream first, and each step contained: a user scheduler whose timer handle
    /// panics in `cancel` must not leave upstream running.
    fn stop(&self, out: &mut Vec<M::Out>) {
        out.clear();
        let machine = lock(&self.machine).take();
        if let Some(upstream) = &self.upstream {
            if catch(|| upstream.cancel()).is_err() {
                tracing::error!(stage = M::NAME, "a source panicked in cancel; contained");
            }
        }
        if catch(|| self.timer.stop()).is_err() {
            tracing::error!(
                stage = M::NAME,
                "a scheduler's timer panicked in cancel; contained"
            );
        }
        drop(machine);
    }

    fn bind(&self, me: Weak<dyn CoreHandle>) {
        let _ = self.me.set(me);
    }

    fn on_request(&self, n: u64, _demand: &AtomicDemand) {
        let _requests_drop_nothing = self.call(|m, fx| m.on_request(n, fx));
    }

    fn on_timer(&self) {
        let _timers_drop_nothing = self.call(|m, fx| m.on_timer(fx));
    }
}
