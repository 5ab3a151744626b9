//! [`Tokio`]: run weir's tasks on a tokio runtime (feature `tokio`).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use super::{run_caught, run_task, Lane, Recurring, Scheduler, Task, TimerHandle};

/// Runs tasks as tokio tasks on the runtime behind a [`tokio::runtime::Handle`]; delays
/// use `tokio::time::sleep`, and [`now`](Scheduler::now) reads tokio's clock, so a test
/// with `tokio::time::pause()` controls weir's time operators too.
///
/// weir's tasks are short and never block (a drain pass is bounded by demand and
/// prefetch), so they run on the runtime's worker threads, not the blocking pool.
///
/// A scheduled stage (a boundary, a stream bridge) gets a [`Lane`] of one long-lived
/// tokio task for its subscription: each time its drain loop has work, that task is
/// woken and runs one turn of the loop, then yields to the runtime. Scheduling a pass
/// costs a wake-up, not a spawned task and a boxed closure.
///
/// When the runtime shuts down, tokio drops the tasks it has not run; the weir stages
/// they belonged to end their pipelines with an error of kind
/// [`SchedulerShutdown`](crate::ErrorKind::SchedulerShutdown). A timer armed with
/// [`schedule_timer`](Scheduler::schedule_timer) is a sleeping tokio task, aborted
/// when the timer is cancelled.
///
/// The runtime needs its time driver (`enable_time`, or `enable_all`) for weir's
/// timers (time operators, retry back-off, a hub's linger, periodic export): on a
/// runtime without one, tokio fails every timer task, and weir takes a failed timer
/// task for a scheduler that shut down (`SchedulerShutdown`).
///
/// ```
/// # fn main() {
/// use weir::runtime::{Scheduler, Tokio};
///
/// let rt = tokio::runtime::Builder::new_multi_thread()
///     .worker_threads(1)
///     .enable_all()
///     .build()
///     .unwrap();
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

    fn lane(&self) -> Box<dyn Lane> {
        Box::new(TokioLane {
            handle: self.handle.clone(),
            shared: Arc::default(),
        })
    }
}

/// A lane of one long-lived tokio task (spawned with the first run queued), which
/// runs each queued run when woken and ends when the lane is dropped. See the
/// [lane module](super::lane) for the contract.
///
/// Everything goes through one mutex, held only for a few moves (never while a run
/// or a waker runs): the queuing side stores the run and takes the task's waker; the
/// task takes the run, or registers its waker. So a wake-up is never lost.
struct TokioLane {
    handle: ::tokio::runtime::Handle,
    shared: Arc<Mutex<LaneState>>,
}

/// What a lane and its tokio task share.
#[derive(Default)]
struct LaneState {
    /// The queued run, until the task takes it.
    queued: Option<Arc<dyn Recurring>>,
    /// The stage whose runs this lane queues (set at the first), told if the
    /// runtime drops the task while nothing is queued.
    owner: Option<std::sync::Weak<dyn Recurring>>,
    /// The task's waker while it waits for a run.
    waker: Option<Waker>,
    /// The task has been spawned.
    spawned: bool,
    /// The lane was dropped (its stage is gone): the task ends.
    closed: bool,
    /// The runtime dropped the task (it shut down): runs queued from now on are
    /// abandoned at once.
    gone: bool,
}

fn lock(state: &Mutex<LaneState>) -> MutexGuard<'_, LaneState> {
    // No user code runs under the lock; recover from poisoning anyway.
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Lane for TokioLane {
    fn queue(&self, _on: &dyn Scheduler, task: Arc<dyn Recurring>) {
        let mut state = lock(&self.shared);
        if state.gone {
            drop(state);
            task.abandon();
            return;
        }
        debug_assert!(state.queued.is_none(), "one queued run per lane at a time");
        if state.owner.is_none() {
            state.owner = Some(Arc::downgrade(&task));
        }
        state.queued = Some(task);
        if !state.spawned {
            state.spawned = true;
            drop(state);
            // A runtime that has shut down drops the task at once: its drop then
            // abandons the run.
            drop(self.handle.spawn(LaneTask {
                shared: self.shared.clone(),
            }));
            return;
        }
        let waker = state.waker.take();
        drop(state);
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl Drop for TokioLane {
    fn drop(&mut self) {
        let waker = {
            let mut state = lock(&self.shared);
            state.closed = true;
            state.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// The lane's long-lived tokio task.
struct LaneTask {
    shared: Arc<Mutex<LaneState>>,
}

impl Future for LaneTask {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = lock(&self.shared);
        if let Some(task) = state.queued.take() {
            drop(state);
            // Caught like any scheduled task's panic: the worker (and this task) survive.
            run_caught(move || task.run());
            state = lock(&self.shared);
            if state.queued.is_some() {
                // Queued again during the run (its budget of passes used): let the
                // runtime's other tasks go first, then run it.
                drop(state);
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
        }
        if state.closed {
            return Poll::Ready(());
        }
        match &state.waker {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            _ => state.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

impl Drop for LaneTask {
    /// The runtime dropped the task (it shut down), or the task ended (its lane was
    /// closed). A queued run is abandoned; with none queued, a stage still there is
    /// told it lost its scheduler, so that an idle stage ends too.
    fn drop(&mut self) {
        let (queued, idle, _waker) = {
            let mut state = lock(&self.shared);
            state.gone = true;
            let queued = state.queued.take();
            let idle = match (&queued, state.closed) {
                (None, false) => state.owner.as_ref().and_then(std::sync::Weak::upgrade),
                _ => None,
            };
            (queued, idle, state.waker.take())
        };
        if let Some(task) = queued {
            task.abandon();
        } else if let Some(stage) = idle {
            stage.lost();
        }
    }
}
