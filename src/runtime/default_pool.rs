//! The scheduler a time operator uses when it is not given one: one pool for the
//! process, started on first use.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::{Scheduler, Task, ThreadPool, TimerHandle};

/// The process's shared [`ThreadPool`] (like Reactor's `parallel()`): what
/// [`sample`](crate::PublisherExt::sample), [`debounce`](crate::PublisherExt::debounce),
/// [`timeout`](crate::PublisherExt::timeout),
/// [`buffer_timeout`](crate::PublisherExt::buffer_timeout),
/// [`throttle`](crate::PublisherExt::throttle), [`interval`](crate::interval) and
/// [`timer`](crate::timer) run their timers on. Their `_on` forms (`sample_on(period,
/// scheduler)`, …) take a scheduler of your choice instead: a [`VirtualTime`](super::VirtualTime)
/// in tests, a [`Tokio`](super) handle inside a tokio application, a pool of its own
/// for isolation.
///
/// Started on the first [`get`](Self::get): one worker per available core (at least
/// two), named `weir-default-0`, `weir-default-1`, …; workers park while idle. It lives as
/// long as the process and cannot be shut down through this handle, so one pipeline
/// cannot stop the timers of every other.
///
/// ```
/// use std::time::Duration;
/// use weir::prelude::*;
/// use weir::runtime::{DefaultPool, Scheduler};
///
/// let pool = DefaultPool::get();
/// assert!(pool.threads() >= 2);
/// // The same pool every time.
/// assert_eq!(DefaultPool::get().threads(), pool.threads());
/// let start = pool.now();
/// let ticks = weir::interval(Duration::from_millis(1)).take(3).collect().wait().unwrap();
/// assert_eq!(ticks, [0, 1, 2]);
/// assert!(pool.now() >= start);
/// ```
#[derive(Clone, Debug)]
pub struct DefaultPool {
    pool: ThreadPool,
    threads: usize,
}

impl DefaultPool {
    /// The shared pool (started by the first call).
    pub fn get() -> DefaultPool {
        static POOL: OnceLock<DefaultPool> = OnceLock::new();
        POOL.get_or_init(|| {
            let threads = std::thread::available_parallelism()
                .map_or(2, |n| n.get())
                .clamp(2, super::thread_pool::MAX_THREADS);
            DefaultPool {
                pool: ThreadPool::builder()
                    .name("weir-default")
                    .threads(threads)
                    .build(),
                threads,
            }
        })
        .clone()
    }

    /// How many worker threads it has.
    pub fn threads(&self) -> usize {
        self.threads
    }
}

impl Scheduler for DefaultPool {
    fn schedule(&self, task: Task) {
        self.pool.schedule(task)
    }

    fn schedule_after(&self, delay: Duration, task: Task) {
        self.pool.schedule_after(delay, task)
    }

    fn now(&self) -> Instant {
        self.pool.now()
    }

    fn schedule_timer(&self, delay: Duration, task: Task) -> TimerHandle {
        self.pool.schedule_timer(delay, task)
    }

    fn has_waiting_tasks(&self) -> bool {
        self.pool.has_waiting_tasks()
    }

    fn current_thread_is_sole_worker(&self) -> bool {
        self.pool.current_thread_is_sole_worker()
    }

    fn lane(&self) -> Box<dyn super::Lane> {
        self.pool.lane()
    }
}
