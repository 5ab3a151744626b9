//! [`ThreadPool`]: named worker threads that park when idle.
//!
//! One mutex-protected queue of ready tasks and one ordered map of timers, shared by
//! all workers. A worker takes the first ready task, or moves due timers to the ready
//! queue, or—finding nothing—polls for a few microseconds, spinning briefly and then
//! yielding its CPU between polls (a boundary's next batch usually arrives within that
//! window, and a futex wake-up costs more than the polling),
//! then parks on a condition variable until a task is scheduled or the earliest timer
//! falls due. An idle pool therefore burns no CPU.
//!
//! The queue holds tasks, not items; see the [module docs](super) for why it is
//! bounded in practice by the number of live stages.
//!
//! Shutdown: when the last `ThreadPool` handle is dropped, workers finish the task they
//! are running and exit; queued tasks are dropped without running. Tasks that hold a
//! handle (a stage that reschedules itself) keep the pool alive while they are queued.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::{run_task, Scheduler, Task};

/// How long an idle worker polls for new work before it parks.
const SPIN: Duration = Duration::from_micros(20);
/// The first part of [`SPIN`], polling with a pure spin; after it the worker yields
/// its CPU between polls, so that on a machine with more runnable threads than cores
/// the thread that will schedule the next task (often the other side of an async
/// boundary) is not kept off the CPU by our polling.
const PURE_SPIN: Duration = Duration::from_nanos(500);

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
    owner: Arc<Owner>,
}

/// Configures a [`ThreadPool`].
#[derive(Clone, Debug)]
pub struct ThreadPoolBuilder {
    name: String,
    threads: usize,
}

#[derive(Debug)]
struct Owner {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    /// Ready tasks, readable without the lock so that spinning workers can poll it.
    queued: AtomicUsize,
}

struct State {
    ready: VecDeque<Task>,
    timers: BTreeMap<(Instant, u64), Task>,
    seq: u64,
    sleeping: usize,
    shutdown: bool,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("ready", &self.ready.len())
            .field("timers", &self.timers.len())
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

    /// Number of worker threads. Default 1.
    ///
    /// # Panics
    ///
    /// If `threads` is 0.
    pub fn threads(mut self, threads: usize) -> Self {
        assert!(threads > 0, "ThreadPool: threads must be at least 1, got 0");
        self.threads = threads;
        self
    }

    /// Start the workers.
    ///
    /// # Panics
    ///
    /// If the operating system refuses to start a thread.
    pub fn build(self) -> ThreadPool {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                ready: VecDeque::new(),
                timers: BTreeMap::new(),
                seq: 0,
                sleeping: 0,
                shutdown: false,
            }),
            wake: Condvar::new(),
            queued: AtomicUsize::new(0),
        });
        for index in 0..self.threads {
            let worker = shared.clone();
            std::thread::Builder::new()
                .name(format!("{}-{index}", self.name))
                .spawn(move || worker.work())
                .unwrap_or_else(|e| panic!("ThreadPool: cannot start worker thread: {e}"));
        }
        ThreadPool {
            owner: Arc::new(Owner { shared }),
        }
    }
}

impl ThreadPool {
    /// A pool of `threads` workers named `weir-0`, `weir-1`, ….
    ///
    /// # Panics
    ///
    /// If `threads` is 0.
    pub fn new(threads: usize) -> Self {
        Self::builder().threads(threads).build()
    }

    /// Configure a pool: name and thread count.
    pub fn builder() -> ThreadPoolBuilder {
        ThreadPoolBuilder::default()
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.shutdown = true;
        state.ready.clear();
        state.timers.clear();
        drop(state);
        self.shared.wake.notify_all();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Tasks never run under this lock, so user code cannot poison it.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn push_ready(&self, task: Task) {
        let mut state = self.lock();
        if state.shutdown {
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

    fn push_timer(&self, due: Instant, task: Task) {
        let mut state = self.lock();
        if state.shutdown {
            return;
        }
        let seq = state.seq;
        state.seq += 1;
        state.timers.insert((due, seq), task);
        drop(state);
        // Sleepers wait for the earliest deadline they knew of; let them re-read it.
        self.wake.notify_all();
    }

    /// Take the next task, parking while there is none. `None`: shut down.
    fn next(&self) -> Option<Task> {
        let mut spun = false;
        let mut state = self.lock();
        loop {
            if state.shutdown {
                return None;
            }
            let now = Instant::now();
            while let Some((&(due, seq), _)) = state.timers.first_key_value() {
                if due > now {
                    break;
                }
                let task = state.timers.remove(&(due, seq)).expect("key just read");
                state.ready.push_back(task);
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
                let start = Instant::now();
                let mut polls = 0u32;
                while self.queued.load(Ordering::Relaxed) == 0 {
                    polls += 1;
                    if polls % 16 == 0 {
                        let waited = start.elapsed();
                        if waited >= SPIN {
                            break;
                        }
                        if waited >= PURE_SPIN {
                            std::thread::yield_now();
                            continue;
                        }
                    }
                    std::hint::spin_loop();
                }
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
        while let Some(task) = self.next() {
            run_task(task);
        }
    }
}

impl Scheduler for ThreadPool {
    fn schedule(&self, task: Task) {
        self.owner.shared.push_ready(task)
    }

    fn schedule_after(&self, delay: Duration, task: Task) {
        if delay.is_zero() {
            return self.schedule(task);
        }
        self.owner.shared.push_timer(Instant::now() + delay, task)
    }

    fn now(&self) -> Instant {
        Instant::now()
    }
}
