//! Schedulers: where a stage's work runs, and what time it is.
//!
//! Until a pipeline meets an async boundary ([`publish_on`](crate::PublisherExt::publish_on),
//! [`subscribe_on`](crate::PublisherExt::subscribe_on)) or a time operator, every signal
//! runs on the thread that called `subscribe` or `request`. A [`Scheduler`] is the one
//! abstraction those stages need: run a task soon, run a task after a delay, and read
//! the clock. Time operators read time only through [`Scheduler::now`], so the same
//! operator runs on the wall clock in production and on a manual clock in tests.
//!
//! | scheduler | runs tasks | clock | use it for |
//! |---|---|---|---|
//! | [`Immediate`] | on the calling thread, at once (delays sleep the caller) | wall | tests, trivial pipelines |
//! | [`ThreadPool`] | on named worker threads that park when idle | wall | CPU-bound stages, async boundaries |
//! | `Tokio` (feature `tokio`) | as tasks on a tokio runtime | tokio's (pausable) | pipelines inside tokio applications |
//! | [`VirtualTime`] | when the test advances the clock | manual | deterministic tests and doctests of time operators |
//!
//! # Boundedness
//!
//! A scheduler's task queue holds *tasks*, not items: each weir stage keeps at most one
//! drain task and one timer queued at a time (its [`Wip`](crate::drain::Wip) or timer
//! flag ensures that), so the queue is bounded by the number of live stages, never by
//! the number of items flowing.

mod immediate;
mod thread_pool;
#[cfg(feature = "tokio")]
mod tokio;
mod virtual_time;

use std::sync::Arc;
use std::time::{Duration, Instant};

pub use immediate::Immediate;
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
pub trait Scheduler: Send + Sync + 'static {
    /// Run `task` as soon as possible.
    fn schedule(&self, task: Task);

    /// Run `task` once `delay` has passed on this scheduler's clock.
    fn schedule_after(&self, delay: Duration, task: Task);

    /// This scheduler's clock. Time operators and queue stamps read time only here.
    fn now(&self) -> Instant;
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
}

/// Run a scheduler's task, catching a panic so that the worker survives. Returns
/// whether the task completed without panicking.
fn run_task(task: Task) -> bool {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(task)) {
        Ok(()) => true,
        Err(_) => {
            tracing::error!("weir: a scheduled task panicked; the worker goes on");
            false
        }
    }
}
