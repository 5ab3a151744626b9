//! [`Immediate`]: run every task on the calling thread, at once.

use std::time::{Duration, Instant};

use super::{run_task, Scheduler, Task};

/// Runs each task on the calling thread before `schedule` returns; a delayed task
/// blocks the caller in `std::thread::sleep` for the delay first. A delay whose
/// deadline does not fit the clock (`Duration::MAX`) means never: the task is dropped
/// unrun at once instead of blocking the caller for ever.
///
/// Useful in tests and for stages that must stay on the caller's thread. Delays block,
/// so do not use it for time operators in production (use [`ThreadPool`](super::ThreadPool)
/// or `Tokio` (feature `tokio`)); in tests prefer [`VirtualTime`](super::VirtualTime).
///
/// ```
/// use weir::runtime::{Immediate, Scheduler};
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use std::sync::Arc;
///
/// let ran = Arc::new(AtomicBool::new(false));
/// let flag = ran.clone();
/// Immediate.schedule(Box::new(move || flag.store(true, Ordering::Relaxed)));
/// assert!(ran.load(Ordering::Relaxed));
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Immediate;

impl Scheduler for Immediate {
    fn schedule(&self, task: Task) {
        run_task(task);
    }

    fn schedule_after(&self, delay: Duration, task: Task) {
        if super::deadline(Instant::now(), delay).is_none() {
            drop(task);
            return;
        }
        std::thread::sleep(delay);
        run_task(task);
    }

    fn now(&self) -> Instant {
        Instant::now()
    }
}
