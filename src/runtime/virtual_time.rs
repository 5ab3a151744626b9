//! [`VirtualTime`]: a manual clock for deterministic tests of time operators.
//!
//! Nothing runs until the test says so. `schedule` queues a task for the current
//! instant; `schedule_after` queues it for `now + delay`. [`VirtualTime::advance`]
//! moves the clock forward, running every task that falls due, in due order (ties in
//! scheduling order), with the clock set to each task's due time while it runs. Tasks
//! that schedule more tasks are handled in the same call, so after `advance(d)` returns
//! the queue holds only tasks due after the new `now`.
//!
//! The lock is never held while a task runs, so tasks may schedule freely.
//!
//! Time saturates: `advance(Duration::MAX)` moves the clock to the latest instant the
//! platform's `Instant` can represent, and a task due past that never runs. Timers armed with
//! [`schedule_timer`](Scheduler::schedule_timer) leave the queue when cancelled.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{run_task, Scheduler, Task, TimerHandle};

/// A scheduler whose clock only moves when told to.
///
/// Cloning gives another handle to the same clock and queue.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use std::time::Duration;
/// use weir::runtime::{Scheduler, VirtualTime};
///
/// let vt = VirtualTime::new();
/// let log = Arc::new(Mutex::new(Vec::new()));
/// let (a, b) = (log.clone(), log.clone());
/// vt.schedule_after(Duration::from_secs(2), Box::new(move || a.lock().unwrap().push("2s")));
/// vt.schedule(Box::new(move || b.lock().unwrap().push("now")));
///
/// vt.advance(Duration::from_secs(1));
/// assert_eq!(*log.lock().unwrap(), ["now"]);
/// vt.advance(Duration::from_secs(1));
/// assert_eq!(*log.lock().unwrap(), ["now", "2s"]);
/// assert_eq!(vt.elapsed(), Duration::from_secs(2));
/// ```
#[derive(Clone)]
pub struct VirtualTime {
    inner: Arc<Mutex<Timeline>>,
}

struct Timeline {
    /// The real instant that virtual time zero maps to.
    origin: Instant,
    /// Virtual time elapsed since `origin`.
    elapsed: Duration,
    /// Tasks keyed by (due, scheduling sequence): the map's order is the run order.
    queue: BTreeMap<(Duration, u64), Task>,
    seq: u64,
    /// The latest virtual time whose instant fits the clock, found on first need.
    horizon: Option<Duration>,
}

impl std::fmt::Debug for VirtualTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("VirtualTime")
            .field("elapsed", &state.elapsed)
            .field("pending", &state.queue.len())
            .finish()
    }
}

impl Default for VirtualTime {
    fn default() -> Self {
        Self::new()
    }
}

impl VirtualTime {
    /// A clock at virtual time zero with nothing queued.
    pub fn new() -> Self {
        VirtualTime {
            inner: Arc::new(Mutex::new(Timeline {
                origin: Instant::now(),
                elapsed: Duration::ZERO,
                queue: BTreeMap::new(),
                seq: 0,
                horizon: None,
            })),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Timeline> {
        // A task never runs under this lock, so it cannot be poisoned by user code;
        // recover the state anyway rather than propagate a panic.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Virtual time passed since this clock was created.
    pub fn elapsed(&self) -> Duration {
        self.lock().elapsed
    }

    /// How many tasks are queued (due now or later).
    pub fn pending(&self) -> usize {
        self.lock().queue.len()
    }

    /// The virtual time (since creation) at which the earliest queued task falls due,
    /// or `None` when nothing queued can fall due: nothing is queued, or only tasks
    /// due past the latest instant the clock can show (a delay of `Duration::MAX`),
    /// which never run (a loop driving the clock to each `next_due` ends). With [`advance_to`](Self::advance_to) this
    /// lets a driver jump straight to the next timer instead of stepping the clock:
    /// for example a test helper that runs a `VirtualTime` from a background thread so
    /// that code waiting in real time (the conformance kit) sees timers fire.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir::runtime::{Scheduler, VirtualTime};
    ///
    /// let vt = VirtualTime::new();
    /// assert_eq!(vt.next_due(), None);
    /// vt.schedule_after(Duration::from_millis(30), Box::new(|| {}));
    /// vt.schedule_after(Duration::from_millis(10), Box::new(|| {}));
    /// assert_eq!(vt.next_due(), Some(Duration::from_millis(10)));
    /// vt.advance_to(vt.next_due().unwrap());
    /// assert_eq!(vt.next_due(), Some(Duration::from_millis(30)));
    /// ```
    pub fn next_due(&self) -> Option<Duration> {
        let mut state = self.lock();
        let horizon = state.horizon();
        state
            .queue
            .first_key_value()
            .map(|(&(due, _), _)| due)
            .filter(|&due| due <= horizon)
    }

    /// Run every task that is due now (and those they schedule for now), without
    /// moving the clock.
    pub fn run_ready(&self) {
        self.advance(Duration::ZERO)
    }

    /// Move the clock forward by `by`, running every task that falls due on the way,
    /// each at its own due time.
    ///
    /// Saturates: a target past the latest representable instant stops there.
    pub fn advance(&self, by: Duration) {
        let target = self.elapsed().saturating_add(by);
        self.advance_to(target)
    }

    /// Move the clock to `elapsed` virtual time since creation (no-op if already past),
    /// running every task that falls due on the way.
    pub fn advance_to(&self, elapsed: Duration) {
        loop {
            let task = {
                let mut state = self.lock();
                let target = elapsed.max(state.elapsed).min(state.horizon());
                match state.queue.first_key_value() {
                    Some((&(due, seq), _)) if due <= target => {
                        state.elapsed = state.elapsed.max(due);
                        state.queue.remove(&(due, seq))
                    }
                    _ => {
                        state.elapsed = target;
                        None
                    }
                }
            };
            match task {
                Some(task) => {
                    run_task(task);
                }
                None => return,
            }
        }
    }

    fn push(&self, delay: Duration, task: Task) -> (Duration, u64) {
        let mut state = self.lock();
        let due = state.elapsed.saturating_add(delay);
        let seq = state.seq;
        state.seq += 1;
        state.queue.insert((due, seq), task);
        (due, seq)
    }
}

impl Timeline {
    /// The latest virtual time the clock can show (`origin + horizon` fits `Instant`).
    fn horizon(&mut self) -> Duration {
        if let Some(horizon) = self.horizon {
            return horizon;
        }
        let origin = self.origin;
        let horizon = if origin.checked_add(Duration::MAX).is_some() {
            Duration::MAX
        } else {
            // Binary search on whole nanoseconds for the largest offset that fits.
            let (mut fits, mut overflows) = (0u128, Duration::MAX.as_nanos());
            while overflows - fits > 1 {
                let mid = fits + (overflows - fits) / 2;
                if origin.checked_add(nanos(mid)).is_some() {
                    fits = mid;
                } else {
                    overflows = mid;
                }
            }
            nanos(fits)
        };
        self.horizon = Some(horizon);
        horizon
    }
}

fn nanos(n: u128) -> Duration {
    const PER_SEC: u128 = 1_000_000_000;
    Duration::new((n / PER_SEC) as u64, (n % PER_SEC) as u32)
}

impl Scheduler for VirtualTime {
    fn schedule(&self, task: Task) {
        self.push(Duration::ZERO, task);
    }

    fn schedule_after(&self, delay: Duration, task: Task) {
        self.push(delay, task);
    }

    fn schedule_timer(&self, delay: Duration, task: Task) -> TimerHandle {
        let key = self.push(delay, task);
        let inner = Arc::downgrade(&self.inner);
        TimerHandle::new(move || {
            if let Some(inner) = inner.upgrade() {
                let task = inner
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .queue
                    .remove(&key);
                // Dropped outside the lock: a task's drop may be user code.
                drop(task);
            }
        })
    }

    fn now(&self) -> Instant {
        let mut state = self.lock();
        let elapsed = state.elapsed.min(state.horizon());
        state.origin + elapsed
    }

    /// A task is due at the current virtual instant (it runs once the running one
    /// returns).
    fn has_waiting_tasks(&self) -> bool {
        let state = self.lock();
        state
            .queue
            .first_key_value()
            .is_some_and(|(&(due, _), _)| due <= state.elapsed)
    }
}
