//! [`Tokio`]: run weir's tasks on a tokio runtime (feature `tokio`).

use std::time::{Duration, Instant};

use super::{run_task, Scheduler, Task, TimerHandle};

/// Runs tasks as tokio tasks on the runtime behind a [`tokio::runtime::Handle`]; delays
/// use `tokio::time::sleep`, and [`now`](Scheduler::now) reads tokio's clock, so a test
/// with `tokio::time::pause()` controls weir's time operators too.
///
/// weir's tasks are short and never block (a drain pass is bounded by demand and
/// prefetch), so they run on the runtime's worker threads, not the blocking pool.
///
/// When the runtime shuts down, tokio drops the tasks it has not run; the weir stages
/// they belonged to end their pipelines with an error of kind
/// [`SchedulerShutdown`](crate::ErrorKind::SchedulerShutdown). A timer armed with
/// [`schedule_timer`](Scheduler::schedule_timer) is a sleeping tokio task, aborted
/// when the timer is cancelled.
///
/// ```
/// # fn main() {
/// use weir::runtime::{Scheduler, Tokio};
///
/// let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).build().unwrap();
/// let scheduler = Tokio::new(rt.handle().clone());
/// let (tx, rx) = std::sync::mpsc::channel();
/// scheduler.schedule(Box::new(move || tx.send(42).unwrap()));
/// assert_eq!(rx.recv().unwrap(), 42);
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Tokio {
    handle: ::tokio::runtime::Handle,
}

impl Tokio {
    /// A scheduler on the runtime behind `handle`.
    pub fn new(handle: ::tokio::runtime::Handle) -> Self {
        Tokio { handle }
    }

    /// A scheduler on the runtime this thread is running in.
    ///
    /// # Panics
    ///
    /// If called outside a tokio runtime (as `tokio::runtime::Handle::current` does).
    pub fn current() -> Self {
        Tokio {
            handle: ::tokio::runtime::Handle::current(),
        }
    }
}

impl Scheduler for Tokio {
    fn schedule(&self, task: Task) {
        self.handle.spawn(async move {
            run_task(task);
        });
    }

    fn schedule_after(&self, delay: Duration, task: Task) {
        let _detached = self.schedule_timer(delay, task);
    }

    fn schedule_timer(&self, delay: Duration, task: Task) -> TimerHandle {
        // tokio's sleep saturates a deadline that does not fit its clock.
        let sleeping = self.handle.spawn(async move {
            ::tokio::time::sleep(delay).await;
            run_task(task);
        });
        TimerHandle::new(move || sleeping.abort())
    }

    fn now(&self) -> Instant {
        let _enter = self.handle.enter();
        ::tokio::time::Instant::now().into_std()
    }
}
