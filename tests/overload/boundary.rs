//! `publish_on` under overload and at rest.
//!
//! * Overload: `range(0..10_000_000)`, emitting on its own pool worker (through
//!   `subscribe_on`) as fast as credit allows, into `publish_on(pool, 256)` whose
//!   consumer spins about ten times as long per item as the producer needs (about
//!   19 ns against 1–2 ns per item at the test profile's opt-level 1: the whole run
//!   takes about 0.2 s). Every item
//!   arrives exactly once and in order, and the peak heap stays below
//!   `256 × size_of::<u64>()` (the ring) plus [`CONSTANT`].
//! * Idle: a warm boundary (items flowed, the stream is still open) with no traffic for
//!   one second uses well under 5% of one core.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::sync::OnceLock;

use weir::prelude::*;
use weir::runtime::ThreadPool;

use crate::measure;

/// Two single-worker pools for the whole test binary: producer side and consumer
/// side. Kept for the life of the process so that no worker exits (and frees its
/// bookkeeping) while another test measures the heap.
fn pools() -> &'static (ThreadPool, ThreadPool) {
    static POOLS: OnceLock<(ThreadPool, ThreadPool)> = OnceLock::new();
    POOLS.get_or_init(|| {
        (
            ThreadPool::builder().name("overload-up").threads(1).build(),
            ThreadPool::builder()
                .name("overload-down")
                .threads(1)
                .build(),
        )
    })
}

/// Let the pool tasks that are still finishing (dropping their `Arc`s after the last
/// signal) finish inside the measured run, not during the next one.
fn settle() {
    std::thread::sleep(Duration::from_millis(20));
}

/// Heap that does not depend on the item count: the pools' ready-queue growth to a
/// few tasks (the pools themselves are built before the measurement), the
/// boundary's shared state and its padded ring indices (two 128-byte lines), the
/// subscriptions' `Arc`s, one boxed task per drain or forwarding hop (alive while
/// queued), the fold sink's state, and `tracing`'s lazy statics. Measured at 4–15 KiB
/// over runs (the ring itself is 2 KiB of it); 32 KiB leaves room for allocator and
/// platform differences, and is still far below what a backlog of even 1% of the
/// items (800 KB) would take.
const CONSTANT: usize = 32 * 1024;

const PREFETCH: u64 = 256;

/// The consumer's extra work per item: about ten times the producer's cost per item.
#[inline(never)]
fn slow(x: u64) -> u64 {
    let mut acc = x;
    for i in 0..12 {
        acc = black_box(acc.rotate_left(1) ^ i);
    }
    acc
}

#[test]
fn publish_on_overload_holds_the_window_and_loses_nothing() {
    const N: u64 = 10_000_000;
    let (up, down) = pools();
    let start = Instant::now();
    let ((count, sum, folded), peak) = measure(|| {
        let result = weir::range(0..N)
            .subscribe_on(up.clone())
            .publish_on(down.clone(), PREFETCH)
            .fold((0u64, 0u64, 0u64), |(count, sum, folded), x| {
                assert_eq!(x, count, "out of order or duplicated");
                (count + 1, sum + x, folded ^ slow(x))
            })
            .wait()
            .unwrap();
        settle();
        result
    });
    black_box(folded);
    assert_eq!(count, N, "every item delivered");
    assert_eq!(sum, N * (N - 1) / 2, "exactly once");
    let bound = PREFETCH as usize * std::mem::size_of::<u64>() + CONSTANT;
    println!(
        "publish_on overload: {N} items in {:?}, peak heap {peak} B (bound {bound} B)",
        start.elapsed()
    );
    assert!(peak <= bound, "peak heap {peak} B above {bound} B");
}

/// CPU time each live thread of this process has run so far, by thread id, from
/// `/proc/self/task/*/schedstat` (nanoseconds).
fn thread_cpu() -> std::collections::HashMap<String, u64> {
    let mut ran = std::collections::HashMap::new();
    for task in std::fs::read_dir("/proc/self/task").expect("procfs") {
        let task = task.expect("task entry");
        if let Ok(stat) = std::fs::read_to_string(task.path().join("schedstat")) {
            if let Some(nanos) = stat.split_whitespace().next().and_then(|n| n.parse().ok()) {
                ran.insert(task.file_name().to_string_lossy().into_owned(), nanos);
            }
        }
    }
    ran
}

/// CPU time the process's threads used between two `thread_cpu` readings. Threads that
/// exited meanwhile are left out (their time is gone from procfs); threads that started
/// meanwhile count from zero. So a thread of an earlier test that exits during the
/// window cannot make the difference negative.
fn cpu_between(
    before: &std::collections::HashMap<String, u64>,
    after: &std::collections::HashMap<String, u64>,
) -> Duration {
    let nanos = after
        .iter()
        .map(|(tid, now)| now.saturating_sub(before.get(tid).copied().unwrap_or(0)))
        .sum();
    Duration::from_nanos(nanos)
}

#[test]
fn an_idle_boundary_burns_no_cpu() {
    let (up, down) = pools();
    let ((), _) = measure(|| {
        let seen = Arc::new(AtomicU64::new(0));
        let counter = seen.clone();
        // 1,000 items, then an open stream with nothing in it.
        let handle = weir::range(0u64..1_000)
            .concat(weir::never())
            .subscribe_on(up.clone())
            .publish_on(down.clone(), 64)
            .for_each(move |_| {
                counter.fetch_add(1, Ordering::Relaxed);
            });
        let deadline = Instant::now() + Duration::from_secs(10);
        while seen.load(Ordering::Relaxed) < 1_000 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(seen.load(Ordering::Relaxed), 1_000);
        // Let the last spins run out, then watch one idle second.
        std::thread::sleep(Duration::from_millis(20));
        let (cpu_before, wall_before) = (thread_cpu(), Instant::now());
        std::thread::sleep(Duration::from_secs(1));
        let (cpu, wall) = (
            cpu_between(&cpu_before, &thread_cpu()),
            wall_before.elapsed(),
        );
        let share = cpu.as_secs_f64() / wall.as_secs_f64();
        println!(
            "idle boundary: {cpu:?} CPU in {wall:?} ({:.3}% of one core)",
            share * 100.0
        );
        assert!(
            share < 0.05,
            "an idle boundary used {:.1}% of a core",
            share * 100.0
        );
        // The stream stays open: cancel it, and let the cancel settle.
        handle.cancel();
        settle();
    });
}
