//! Schedulers: where a stage's work runs, and what time it is.
//!
//! Until a pipeline meets an async boundary ([`publish_on`](crate::PublisherExt::publish_on),
//! [`subscribe_on`](crate::PublisherExt::subscribe_on)) or a time operator, every signal
//! runs on the thread that called `subscribe` or `request`. A [`Scheduler`] is the one
//! abstraction those stages need: run a task soon, run a task after a delay, and read
//! the clock. Time operators read time only through [`Scheduler::now`], so the same
//! operator runs on the wall clock in production and on a manual clock in tests.
//!
//! | scheduler | runs tasks | a stage's [`lane`] | clock | use it for |
//! |---|---|---|---|---|
//! | [`Immediate`] | on the calling thread, at once (delays sleep the caller) | a task per run | wall | tests, trivial pipelines |
//! | [`ThreadPool`] | on named worker threads that park when idle | the stage's task queued unboxed | wall | CPU-bound stages, async boundaries |
//! | [`DefaultPool`] | on the process's shared pool, started on first use | as `ThreadPool` | wall | time operators given no scheduler (`sample(period)`, …) |
//! | `Tokio` (feature `tokio`) | as tasks on a tokio runtime | one long-lived task per subscription | tokio's (pausable) | pipelines inside tokio applications |
//! | [`VirtualTime`] | when the test advances the clock | a task per run | manual | deterministic tests and doctests of time operators |
//!
//! # Boundedness
//!
//! A scheduler's task queue holds *tasks*, not items: each weir stage keeps at most one
//! drain task and one timer queued at a time (its [`Wip`](crate::drain::Wip) or timer
//! flag ensures that), so the queue is bounded by the number of live stages, never by
//! the number of items flowing.

pub(crate) mod backoff;
mod default_pool;
mod immediate;
pub mod lane;
mod thread_pool;
#[cfg(feature = "tokio")]
mod tokio;
mod virtual_time;

use std::sync::Arc;
use std::time::{Duration, Instant};

pub use default_pool::DefaultPool;
pub use immediate::Immediate;
pub use lane::{Lane, Recurring};
pub use thread_pool::{ThreadPool, ThreadPoolBuilder};
#[cfg(feature = "tokio")]
pub use tokio::Tokio;
pub use virtual_time::VirtualTime;

/// A unit of work handed to a [`Scheduler`].
pub type Task = Box<dyn FnOnce() + Send + 'static>;

/// Runs tasks now or later, and tells the time.
///
/// Implementations are cheap handles (`Clone`, usually an `Arc` inside); stages keep
/// one per subscription.
///
/// Contract:
/// - `schedule` never runs the task on the caller's stack *unless* the scheduler is
///   documented as immediate ([`Immediate`]); weir's boundaries are correct either way,
///   because their drain loops are trampolined.
/// - Tasks scheduled from one thread with no delay start in the order they were
///   scheduled on a single-threaded scheduler; on a pool they may run in parallel, so
///   a stage that needs serial execution serialises itself (weir's stages do, with a
///   [`Wip`](crate::drain::Wip)).
/// - `schedule_after(d, task)` runs the task no earlier than `now() + d`.
/// - A task that panics is caught by the scheduler and logged; the worker survives.
///   weir's own tasks catch user panics themselves and turn them into `on_error`.
/// - **A task the scheduler can no longer run is dropped**, never leaked and never run
///   later: a shut-down scheduler drops what it holds and every task handed to it
///   afterwards. weir's stages notice when one of their tasks is dropped unrun and end
///   their pipeline with an error of kind
///   [`SchedulerShutdown`](crate::ErrorKind::SchedulerShutdown): upstream is
///   cancelled and held items are dropped, so nothing hangs and nothing leaks.
/// - A delay whose deadline does not fit the clock (`Duration::MAX`, say) means
///   "never": the task never runs. weir's stages never ask for such a timer.
pub trait Scheduler: Send + Sync + 'static {
    /// Run `task` as soon as possible.
    fn schedule(&self, task: Task);

    /// Run `task` once `delay` has passed on this scheduler's clock.
    fn schedule_after(&self, delay: Duration, task: Task);

    /// This scheduler's clock. Time operators and queue stamps read time only here.
    fn now(&self) -> Instant;

    /// [`schedule_after`](Self::schedule_after), returning a [`TimerHandle`] that removes
    /// the task from the scheduler (unrun) when cancelled. weir's time stages arm
    /// their timers here and cancel them when they end, so a scheduler holds no timer
    /// of a stage that is gone. The default cannot cancel: it calls `schedule_after`
    /// and returns [`TimerHandle::detached`]; weir's schedulers override it.
    fn schedule_timer(&self, delay: Duration, task: Task) -> TimerHandle {
        self.schedule_after(delay, task);
        TimerHandle::detached()
    }

    /// A hint: true when tasks are queued and wait for a thread of this scheduler.
    /// A weir task that lingers for its next batch stops lingering then and gives
    /// the thread to them (on a pool of one thread, a boundary's lingering drain
    /// would otherwise keep the tasks it feeds waiting for its linger to run out).
    /// The default, for schedulers that cannot tell, says false.
    fn has_waiting_tasks(&self) -> bool {
        false
    }

    /// A hint: true when the calling thread is this scheduler's only thread, so a
    /// task scheduled now could not start before the caller's own task ends. weir
    /// then runs some short passes in place instead of queueing a task for them (a
    /// [`Mux`](crate::mux::Mux)'s receiving channels, fed by a demultiplexer that runs
    /// on the same scheduler), which saves a task hand-off per frame without taking
    /// any parallelism away. The default, for schedulers that cannot tell, says false.
    fn current_thread_is_sole_worker(&self) -> bool {
        false
    }

    /// A [`Lane`] for one stage's recurring task, asked for once per subscription (see
    /// the [`lane`] module). The default queues each run as a boxed task through
    /// [`schedule`](Self::schedule) (one allocation per run); a scheduler that can
    /// keep one long-lived task per lane, as `Tokio` does, overrides it and runs
    /// scheduled stages without allocating per pass.
    fn lane(&self) -> Box<dyn Lane> {
        Box::new(lane::TaskPerRun)
    }
}

impl<S: Scheduler + ?Sized> Scheduler for Arc<S> {
    fn schedule(&self, task: Task) {
        (**self).schedule(task)
    }

    fn schedule_after(&self, delay: Duration, task: Task) {
        (**self).schedule_after(delay, task)
    }

    fn now(&self) -> Instant {
        (**self).now()
    }

    fn schedule_timer(&self, delay: Duration, task: Task) -> TimerHandle {
        (**self).schedule_timer(delay, task)
    }

    fn has_waiting_tasks(&self) -> bool {
        (**self).has_waiting_tasks()
    }

    fn current_thread_is_sole_worker(&self) -> bool {
        (**self).current_thread_is_sole_worker()
    }

    fn lane(&self) -> Box<dyn Lane> {
        (**self).lane()
    }
}

/// The handle of a timer armed with [`Scheduler::schedule_timer`].
///
/// [`cancel`](TimerHandle::cancel) removes its task from the scheduler without running it;
/// dropping a `TimerHandle` leaves the task queued.
pub struct TimerHandle {
    cancel: Option<Box<dyn FnOnce() + Send>>,
}

impl TimerHandle {
    /// A timer that `cancel` removes by calling `cancel` (for implementors of
    /// [`Scheduler::schedule_timer`]).
    pub fn new(cancel: impl FnOnce() + Send + 'static) -> Self {
        TimerHandle {
            cancel: Some(Box::new(cancel)),
        }
    }

    /// A timer that cannot be cancelled: its task stays queued until it falls due.
    pub fn detached() -> Self {
        TimerHandle { cancel: None }
    }

    /// Remove the task from its scheduler without running it (a no-op once it ran,
    /// and for a detached timer).
    pub fn cancel(mut self) {
        if let Some(cancel) = self.cancel.take() {
            cancel();
        }
    }
}

impl std::fmt::Debug for TimerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimerHandle")
            .field("cancellable", &self.cancel.is_some())
            .finish()
    }
}

/// The one outstanding timer of something that re-arms (a time stage, a periodic
/// export), and whether it stopped.
///
/// A timer is scheduled before it is kept here (a scheduler may run its task at
/// once, so not under this lock), and a timer that fires may arm the next one on
/// another thread: two arms and the `stop` may reach the slot in any order. Each
/// arm carries a ticket, increasing in the order the arms were decided; the slot
/// keeps the newest timer, and an arm that comes after `stop` cancels its own, so
/// the scheduler holds nothing of what stopped.
#[derive(Debug, Default)]
pub(crate) struct TimerSlot(std::sync::Mutex<Slot>);

#[derive(Debug, Default)]
struct Slot {
    armed: Option<(u64, TimerHandle)>,
    stopped: bool,
}

impl TimerSlot {
    fn lock(&self) -> std::sync::MutexGuard<'_, Slot> {
        // Nothing panics while it is held; recover anyway.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Keep `timer`, set by the arm numbered `ticket`. The timer it replaces has
    /// fired (one arm at a time); one older than the kept timer has fired too and is
    /// let go; after `stop` it is cancelled.
    pub(crate) fn keep(&self, ticket: u64, timer: TimerHandle) {
        let mut slot = self.lock();
        if slot.stopped {
            drop(slot);
            timer.cancel();
            return;
        }
        if slot
            .armed
            .as_ref()
            .is_some_and(|(newer, _)| *newer > ticket)
        {
            return;
        }
        let fired = slot.armed.replace((ticket, timer));
        drop(slot);
        drop(fired);
    }

    /// Whether [`stop`](Self::stop) was called (the periodic export asks).
    #[cfg(feature = "metrics")]
    pub(crate) fn is_stopped(&self) -> bool {
        self.lock().stopped
    }

    /// Stop: the kept timer is cancelled (outside the lock: the scheduler drops its
    /// task), and so is any timer kept later.
    pub(crate) fn stop(&self) {
        let armed = {
            let mut slot = self.lock();
            slot.stopped = true;
            slot.armed.take()
        };
        if let Some((_, timer)) = armed {
            timer.cancel();
        }
    }
}

/// `at + delay`, or `None` when that instant does not fit the clock: a delay that
/// long means "never".
#[inline]
pub(crate) fn deadline(at: Instant, delay: Duration) -> Option<Instant> {
    at.checked_add(delay)
}

/// Panic if the calling thread is driving a tokio runtime's async code (inside
/// `Runtime::block_on` or a task): blocking there stalls the runtime, and on a
/// current-thread runtime the stream that would wake us can never run, so the call
/// would hang for good. `what` names the blocking call in the message. A no-op
/// without the `tokio` feature, outside any runtime, and on threads that may block
/// (`spawn_blocking`, a plain thread that entered a runtime's handle).
///
/// Called only where a wait is about to begin (not on calls that return at once).
#[track_caller]
pub(crate) fn forbid_blocking_in_async(what: &str) {
    #[cfg(feature = "tokio")]
    if let Ok(handle) = ::tokio::runtime::Handle::try_current() {
        // tokio has no public query for "this thread drives async code", but its own
        // `block_on` panics on exactly those threads and returns at once for a ready
        // future elsewhere. (Its panic message is printed before ours.)
        let driving = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            handle.block_on(std::future::ready(()))
        }))
        .is_err();
        if driving {
            panic!(
                "weir: {what} would block a thread that drives a tokio runtime, which \
                 stalls (on a current-thread runtime: hangs) the stream it waits for; \
                 `.await` instead, or call it from `spawn_blocking` or a plain thread"
            );
        }
    }
    #[cfg(not(feature = "tokio"))]
    let _ = what;
}

/// Run a scheduler's task, catching a panic so that the worker survives. Returns
/// whether the task completed without panicking.
fn run_task(task: Task) -> bool {
    run_caught(task)
}

/// [`run_task`] for any closure (no box needed).
fn run_caught(task: impl FnOnce()) -> bool {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(task)) {
        Ok(()) => true,
        Err(_) => {
            tracing::error!("weir: a scheduled task panicked; the worker goes on");
            false
        }
    }
}
