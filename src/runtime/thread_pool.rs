//! [`ThreadPool`]: named worker threads that park when idle.
//!
//! One mutex-protected queue of ready tasks and one ordered map of timers, shared by
//! all workers. A worker takes the first ready task, or moves due timers to the ready
//! queue, or, finding nothing, polls for up to 20 µs with the crate's one
//! [`Backoff`] (`wait_idle`: a boundary's next batch usually arrives within that
//! window, and a futex wake-up costs more than the spin), then parks on a condition variable until a
//! task is scheduled or the earliest timer falls due. An idle pool burns no CPU, and a
//! worker never yields its CPU in a loop while other threads need it.
//!
//! The queue holds tasks, not items; see the [module docs](super) for why it is
//! bounded in practice by the number of live stages. Timers armed with
//! [`schedule_timer`](Scheduler::schedule_timer) are removed from the map when their
//! stage cancels them, so a pool holds no timer of a stage that is gone.
//!
//! Shutdown ([`ThreadPool::shutdown`], or dropping the last handle): workers finish
//! the task they are running and exit; queued tasks and timers are dropped without
//! running, and so is every task scheduled afterwards. Tasks are dropped outside the
//! pool's lock (dropping one of weir's tasks ends its pipeline, which is user code).
//! Tasks that hold a handle (a stage that reschedules itself) keep the pool alive
//! while they are queued, so a pool that pipelines still use is stopped with
//! `shutdown`, not by dropping a handle.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::backoff::Backoff;
use super::lane::Once;
use super::{deadline, run_task, Lane, Recurring, Scheduler, Task, TimerHandle};

/// The most worker threads a pool starts. Without a bound, `threads(usize::MAX)`
/// would start threads until the operating system refused one, then panic in
/// `build` and leave the started ones parked for ever (no handle was made to stop
/// them).
pub(crate) const MAX_THREADS: usize = 1024;

/// A fixed set of named worker threads that run scheduled tasks and park when idle.
///
/// Cloning gives another handle to the same pool. Workers exit when the last handle is
/// dropped.
///
/// ```
/// use std::sync::mpsc;
/// use weir::runtime::{Scheduler, ThreadPool};
///
/// let pool = ThreadPool::builder().name("doc").threads(2).build();
/// let (tx, rx) = mpsc::channel();
/// pool.schedule(Box::new(move || {
///     tx.send(std::thread::current().name().map(str::to_owned)).unwrap()
/// }));
/// let name = rx.recv().unwrap().unwrap();
/// assert!(name.starts_with("doc-"), "{name}");
/// ```
#[derive(Clone, Debug)]
pub struct ThreadPool {
    owner: Arc<PoolOwner>,
}

/// Configures a [`ThreadPool`].
#[derive(Clone, Debug)]
pub struct ThreadPoolBuilder {
    name: String,
    threads: usize,
}

#[derive(Debug)]
struct PoolOwner {
    shared: Arc<Workers>,
}

#[derive(Debug)]
struct Workers {
    state: Mutex<PoolState>,
    wake: Condvar,
    /// Ready tasks, readable without the lock so that spinning workers can poll it.
    queued: AtomicUsize,
    /// Worker threads (fixed at build).
    threads: usize,
}

thread_local! {
    /// The pool whose worker this thread is (null on every other thread): compared by
    /// address only, never dereferenced.
    static WORKER_OF: std::cell::Cell<*const Workers> = const { std::cell::Cell::new(std::ptr::null()) };
}

struct PoolState {
    ready: VecDeque<Ready>,
    /// Timers by (due, sequence number): the map's order is the firing order.
    timers: BTreeMap<(Instant, u64), Task>,
    /// Timers whose deadline does not fit the clock ("never"), by sequence number:
    /// kept (not run) until cancelled or shut down.
    never: BTreeMap<u64, Task>,
    seq: u64,
    sleeping: usize,
    shutdown: bool,
}

impl std::fmt::Debug for PoolState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolState")
            .field("ready", &self.ready.len())
            .field("timers", &(self.timers.len() + self.never.len()))
            .field("sleeping", &self.sleeping)
            .field("shutdown", &self.shutdown)
            .finish()
    }
}

impl Default for ThreadPoolBuilder {
    fn default() -> Self {
        ThreadPoolBuilder {
            name: "weir".to_owned(),
            threads: 1,
        }
    }
}

impl ThreadPoolBuilder {
    /// Worker threads are named `{name}-{index}`. Default `"weir"`.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Number of worker threads, at most 1,024 (every one is started by
    /// [`build`](Self::build)). Default 1.
    ///
    /// # Panics
    ///
    /// If `threads` is 0: "ThreadPool threads must be at least 1 (got 0)"; if it is
    /// above 1,024: "ThreadPool threads must be at most 1024 (got 5000)".
    pub fn threads(mut self, threads: usize) -> Self {
        assert!(threads > 0, "ThreadPool threads must be at least 1 (got 0)");
        assert!(
            threads <= MAX_THREADS,
            "ThreadPool threads must be at most {MAX_THREADS} (got {threads})"
        );
        self.threads = threads;
        self
    }

    /// Start the workers.
    ///
    /// # Panics
    ///
    /// If the operating system refuses to start a thread.
    pub fn build(self) -> ThreadPool {
        let shared = Arc::new(Workers {
            state: Mutex::new(PoolState {
                ready: VecDeque::new(),
                timers: BTreeMap::new(),
                never: BTreeMap::new(),
                seq: 0,
                sleeping: 0,
                shutdown: false,
            }),
            wake: Condvar::new(),
            queued: AtomicUsize::new(0),
            threads: self.threads,
        });
        for index in 0..self.threads {
            let worker = shared.clone();
            std::thread::Builder::new()
                .name(format!("{}-{index}", self.name))
                .spawn(move || worker.work())
                .unwrap_or_else(|e| panic!("ThreadPool: cannot start worker thread: {e}"));
        }
        ThreadPool {
            owner: Arc::new(PoolOwner { shared }),
        }
    }
}

impl ThreadPool {
    /// A pool of `threads` workers named `weir-0`, `weir-1`, ….
    ///
    /// # Panics
    ///
    /// If `threads` is 0 or above 1,024, as [`ThreadPoolBuilder::threads`].
    pub fn new(threads: usize) -> Self {
        Self::builder().threads(threads).build()
    }

    /// Configure a pool: name and thread count.
    pub fn builder() -> ThreadPoolBuilder {
        ThreadPoolBuilder::default()
    }

    /// Stop the pool: workers finish the task they are running and exit; queued tasks
    /// and timers are dropped without running, and so is every task scheduled later.
    /// The pipelines whose tasks are dropped end with an error of kind
    /// [`SchedulerShutdown`](crate::ErrorKind::SchedulerShutdown), cancelling
    /// upstream and dropping what they held. Idempotent.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir::prelude::*;
    /// use weir::runtime::ThreadPool;
    ///
    /// let pool = ThreadPool::new(1);
    /// pool.shutdown();
    /// let ticks = weir::interval_on(Duration::from_millis(1), pool).take(3);
    /// let result = ticks.collect().wait();
    /// assert_eq!(result.unwrap_err().kind(), weir::ErrorKind::SchedulerShutdown);
    /// ```
    pub fn shutdown(&self) {
        self.owner.shared.shutdown();
    }

    /// True once [`shutdown`](Self::shutdown) ran (or the last handle was dropped).
    pub fn is_shut_down(&self) -> bool {
        self.owner.shared.lock().shutdown
    }

    /// How many timers are queued (armed and neither fired nor cancelled).
    pub fn pending_timers(&self) -> usize {
        let state = self.owner.shared.lock();
        state.timers.len() + state.never.len()
    }
}

impl Drop for PoolOwner {
    fn drop(&mut self) {
        self.shared.shutdown();
    }
}

impl Workers {
    fn lock(&self) -> MutexGuard<'_, PoolState> {
        // Tasks never run under this lock, so user code cannot poison it.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Stop accepting tasks and drop what is queued, outside the lock.
    fn shutdown(&self) {
        let (ready, timers, never) = {
            let mut state = self.lock();
            state.shutdown = true;
            (
                std::mem::take(&mut state.ready),
                std::mem::take(&mut state.timers),
                std::mem::take(&mut state.never),
            )
        };
        self.wake.notify_all();
        // Dropping weir's tasks ends their pipelines (user code): no lock held.
        drop(ready);
        drop(timers);
        drop(never);
    }

    fn push_ready(&self, task: Ready) {
        let mut state = self.lock();
        if state.shutdown {
            drop(state);
            drop(task);
            return;
        }
        state.ready.push_back(task);
        // Relaxed: a spinning worker only uses this as a hint and re-checks under the
        // lock.
        self.queued.fetch_add(1, Ordering::Relaxed);
        let sleeping = state.sleeping > 0;
        drop(state);
        if sleeping {
            self.wake.notify_one();
        }
    }

    /// Queue a timer (`due == None`: never); returns its key, or `None` when the pool
    /// is shut down (the task has been dropped).
    fn push_timer(&self, due: Option<Instant>, task: Task) -> Option<(Option<Instant>, u64)> {
        let mut state = self.lock();
        if state.shutdown {
            drop(state);
            drop(task);
            return None;
        }
        let seq = state.seq;
        state.seq += 1;
        match due {
            Some(due) => {
                state.timers.insert((due, seq), task);
                drop(state);
                // Sleepers wait for the earliest deadline they knew of; let them
                // re-read it.
                self.wake.notify_all();
            }
            None => {
                state.never.insert(seq, task);
            }
        }
        Some((due, seq))
    }

    /// Remove a timer that has not fired; its task is dropped outside the lock.
    fn cancel_timer(&self, (due, seq): (Option<Instant>, u64)) {
        let task = {
            let mut state = self.lock();
            match due {
                Some(due) => state.timers.remove(&(due, seq)),
                None => state.never.remove(&seq),
            }
        };
        drop(task);
    }

    /// Take the next task, parking while there is none. `None`: shut down.
    fn next(&self) -> Option<Ready> {
        let mut spun = false;
        let mut state = self.lock();
        loop {
            if state.shutdown {
                return None;
            }
            // No clock reading while no timer is armed: a boundary's drain task
            // comes through here once per batch.
            let mut now = None;
            while let Some((&(due, seq), _)) = state.timers.first_key_value() {
                if due > *now.get_or_insert_with(Instant::now) {
                    break;
                }
                let task = state.timers.remove(&(due, seq)).expect("key just read");
                state.ready.push_back(Ready::Task(task));
                self.queued.fetch_add(1, Ordering::Relaxed);
            }
            if let Some(task) = state.ready.pop_front() {
                self.queued.fetch_sub(1, Ordering::Relaxed);
                if !state.ready.is_empty() && state.sleeping > 0 {
                    self.wake.notify_one();
                }
                return Some(task);
            }
            if !spun {
                spun = true;
                drop(state);
                // Relaxed: a hint only; the task is taken under the lock.
                Backoff::wait_idle(|| self.queued.load(Ordering::Relaxed) > 0);
                state = self.lock();
                continue;
            }
            let deadline = state.timers.first_key_value().map(|(&(due, _), _)| due);
            state.sleeping += 1;
            state = match deadline {
                Some(due) => {
                    let wait = due.saturating_duration_since(Instant::now());
                    self.wake
                        .wait_timeout(state, wait)
                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                        .0
                }
                None => self
                    .wake
                    .wait(state)
                    .unwrap_or_else(|poisoned| poisoned.into_inner()),
            };
            state.sleeping -= 1;
            spun = false;
        }
    }

    fn work(&self) {
        WORKER_OF.with(|pool| pool.set(self as *const Workers));
        while let Some(ready) = self.next() {
            match ready {
                Ready::Task(task) => {
                    run_task(task);
                }
                Ready::Again(run) => run.run(),
            }
        }
    }
}

impl Scheduler for ThreadPool {
    fn schedule(&self, task: Task) {
        self.owner.shared.push_ready(Ready::Task(task))
    }

    fn schedule_after(&self, delay: Duration, task: Task) {
        let _detached = self.schedule_timer(delay, task);
    }

    fn schedule_timer(&self, delay: Duration, task: Task) -> TimerHandle {
        if delay.is_zero() {
            self.schedule(task);
            return TimerHandle::detached();
        }
        let shared = &self.owner.shared;
        match shared.push_timer(deadline(Instant::now(), delay), task) {
            Some(key) => {
                let shared = Arc::downgrade(shared);
                TimerHandle::new(move || {
                    if let Some(shared) = shared.upgrade() {
                        shared.cancel_timer(key);
                    }
                })
            }
            None => TimerHandle::detached(),
        }
    }

    fn now(&self) -> Instant {
        Instant::now()
    }

    /// Ready tasks are queued (a hint: another idle worker may take them first).
    fn has_waiting_tasks(&self) -> bool {
        // Relaxed: a hint, as for the spinning workers.
        self.owner.shared.queued.load(Ordering::Relaxed) > 0
    }

    /// True on the worker of a pool of one thread.
    fn current_thread_is_sole_worker(&self) -> bool {
        let workers: &Workers = &self.owner.shared;
        workers.threads == 1 && WORKER_OF.with(|pool| std::ptr::eq(pool.get(), workers))
    }

    /// A lane that queues the stage's recurring task itself, not a boxed task per run.
    fn lane(&self) -> Box<dyn Lane> {
        Box::new(PoolLane(self.owner.shared.clone()))
    }
}

/// A ready entry: a task, or one run of a stage's recurring task (dropped unrun, as
/// at shutdown, it is abandoned: its pipeline ends).
enum Ready {
    Task(Task),
    Again(Once),
}

/// [`ThreadPool`]'s lane: runs queued on the ready queue as they are, without boxing.
struct PoolLane(Arc<Workers>);

impl Lane for PoolLane {
    fn queue(&self, _on: &dyn Scheduler, task: Arc<dyn Recurring>) {
        // Refused after shutdown: dropped outside the lock, which abandons the run.
        self.0.push_ready(Ready::Again(Once(Some(task))));
    }
}
