//! Lanes: how a stage's one recurring task is handed to its scheduler.
//!
//! A scheduled stage (a boundary, a stream bridge, a time operator) runs its drain
//! loop on tasks of its scheduler, one task at a time: when the loop has work and no
//! task is queued or running, the stage queues one. Queuing a fresh boxed closure
//! each time costs an allocation per pass (and on tokio a spawned task per pass), which
//! on a busy boundary is an allocation every few hundred items.
//!
//! So a stage asks its scheduler once, when it first needs a task, for a [`Lane`],
//! and queues the *same* task, a [`Recurring`] (the stage itself behind an `Arc`),
//! through it every time. What a lane does with it is the scheduler's business:
//!
//! * the default lane ([`Scheduler::lane`] not overridden) boxes the task into a
//!   [`Task`](super::Task) per run: correct on any scheduler, one allocation per run;
//! * `Tokio`'s lane keeps one long-lived tokio task per lane: queuing stores the
//!   recurring task in the lane and wakes that tokio task, which runs it once per
//!   wake-up and yields back to the runtime in between (so a busy stage still shares
//!   its worker), with no allocation per run;
//! * [`ThreadPool`](super::ThreadPool)'s (and [`DefaultPool`](super::DefaultPool)'s)
//!   lane puts the recurring task itself in the pool's ready queue, next to the boxed
//!   tasks, with no allocation per run; a pool that shut down abandons it.
//!
//! A scheduler of your own gets the default lane, which is correct; override
//! [`Scheduler::lane`] to save the box per run, or to watch a stage's runs:
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use std::sync::Arc;
//! use std::time::{Duration, Instant};
//!
//! use weir::prelude::*;
//! use weir::runtime::{Lane, Recurring, Scheduler, Task, ThreadPool};
//!
//! /// A pool that counts the runs its stages queue.
//! struct Counted {
//!     pool: ThreadPool,
//!     runs: Arc<AtomicUsize>,
//! }
//!
//! struct CountingLane {
//!     inner: Box<dyn Lane>,
//!     runs: Arc<AtomicUsize>,
//! }
//!
//! impl Lane for CountingLane {
//!     fn queue(&self, on: &dyn Scheduler, task: Arc<dyn Recurring>) {
//!         self.runs.fetch_add(1, Ordering::Relaxed);
//!         self.inner.queue(on, task);
//!     }
//! }
//!
//! impl Scheduler for Counted {
//!     fn schedule(&self, task: Task) {
//!         self.pool.schedule(task)
//!     }
//!     fn schedule_after(&self, delay: Duration, task: Task) {
//!         self.pool.schedule_after(delay, task)
//!     }
//!     fn now(&self) -> Instant {
//!         self.pool.now()
//!     }
//!     fn lane(&self) -> Box<dyn Lane> {
//!         Box::new(CountingLane {
//!             inner: self.pool.lane(),
//!             runs: self.runs.clone(),
//!         })
//!     }
//! }
//!
//! let runs = Arc::new(AtomicUsize::new(0));
//! let scheduler = Arc::new(Counted {
//!     pool: ThreadPool::new(1),
//!     runs: runs.clone(),
//! });
//! let total = weir::range(0u64..10_000)
//!     .publish_on(scheduler, 64)
//!     .fold(0u64, |sum, x| sum + x)
//!     .wait()
//!     .unwrap();
//! assert_eq!(total, 49_995_000);
//! assert!(runs.load(Ordering::Relaxed) >= 1, "the boundary's drain ran on the lane");
//! ```
//!
//! # Contract
//!
//! * A lane runs each queued task once, or, if its scheduler can no longer run it (it
//!   shut down), calls [`Recurring::abandon`] on it instead, once, on whichever
//!   thread finds out: never both, never neither, never later.
//! * The caller queues at most one run at a time on a lane (weir's stages own their
//!   drain loop through a [`Wip`](crate::drain::Wip), so at most one task of theirs is
//!   ever queued); a lane may rely on it.
//! * Whatever the queuing thread wrote before [`Lane::queue`] is visible to the run
//!   (the hand-off synchronises, as a scheduler's `schedule` does).
//! * A lane that learns its scheduler is gone while nothing is queued (a runtime
//!   that dropped the lane's long-lived task) may call [`Recurring::lost`] on the
//!   last task it was given, so that an idle stage ends too instead of waiting for
//!   a signal that may never come.

use std::sync::Arc;

use super::{run_caught, Scheduler};

/// A stage's recurring task: the one task a scheduled stage queues on its [`Lane`]
/// each time its drain loop has work. See the [module docs](self).
pub trait Recurring: Send + Sync + 'static {
    /// Run the task once (for this queuing). Called on a thread of the scheduler.
    fn run(self: Arc<Self>);

    /// The scheduler will never run this queuing (it shut down): called instead of
    /// [`run`](Self::run), once, on whichever thread finds out (possibly the one
    /// queuing it). weir's stages end their pipeline with an error of kind
    /// [`SchedulerShutdown`](crate::ErrorKind::SchedulerShutdown) here.
    fn abandon(self: Arc<Self>);

    /// The scheduler is gone while no run of this task is queued (see the module
    /// docs' contract): weir's stages end their pipeline with an error of kind
    /// [`SchedulerShutdown`](crate::ErrorKind::SchedulerShutdown), on this thread or
    /// on the thread that owns their drain loop. The default does nothing.
    fn lost(self: Arc<Self>) {}
}

/// Where one stage queues its [`Recurring`] task, made once per subscription by
/// [`Scheduler::lane`]. See the [module docs](self) for the contract.
pub trait Lane: Send + Sync + 'static {
    /// Queue one run of `task` on `on` (the scheduler that made this lane).
    fn queue(&self, on: &dyn Scheduler, task: Arc<dyn Recurring>);
}

/// The default lane: each run is a boxed [`Task`](super::Task) handed to
/// [`Scheduler::schedule`] (one allocation per run).
#[derive(Debug, Default)]
pub(crate) struct TaskPerRun;

impl Lane for TaskPerRun {
    fn queue(&self, on: &dyn Scheduler, task: Arc<dyn Recurring>) {
        let once = Once(Some(task));
        on.schedule(Box::new(move || once.run()));
    }
}

/// One queuing of a recurring task: run it, or abandon it if dropped unrun.
pub(crate) struct Once(pub(crate) Option<Arc<dyn Recurring>>);

impl Once {
    /// Run the task (under the scheduler's panic guard: a worker survives a panic).
    pub(crate) fn run(mut self) {
        if let Some(task) = self.0.take() {
            run_caught(move || task.run());
        }
    }
}

impl Drop for Once {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abandon();
        }
    }
}
