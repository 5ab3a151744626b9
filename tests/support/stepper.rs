//! A scheduler the test drives one task at a time, to check that a stage's tasks stop:
//! a lingering task whose stage keeps reporting work it cannot take would reschedule
//! itself for ever, and [`Stepper::run_until_idle`] turns that into a failure instead
//! of a hang.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weir::runtime::{Scheduler, Task};

/// Queues tasks (delays ignored: they run in order when the test steps).
#[derive(Clone, Default)]
pub struct Stepper {
    queue: Arc<Mutex<VecDeque<Task>>>,
}

impl Scheduler for Stepper {
    fn schedule(&self, task: Task) {
        self.queue.lock().unwrap().push_back(task);
    }
    fn schedule_after(&self, _delay: Duration, task: Task) {
        self.schedule(task);
    }
    fn now(&self) -> Instant {
        Instant::now()
    }
}

impl Stepper {
    /// Run queued tasks (and the ones they queue) until none is left; returns how many
    /// ran. Panics once more than `limit` ran: something keeps scheduling.
    pub fn run_until_idle(&self, limit: usize) -> usize {
        let mut ran = 0;
        loop {
            let next = self.queue.lock().unwrap().pop_front();
            let Some(task) = next else {
                return ran;
            };
            task();
            ran += 1;
            assert!(
                ran <= limit,
                "still scheduling after {limit} tasks: a task that never leaves"
            );
        }
    }
}
