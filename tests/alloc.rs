//! Zero heap allocations per item in steady state (issue 2, principle 5).
//!
//! A counting global allocator counts every allocation made by this test binary. The
//! same pipeline runs over 1,000 and over 1,000,000 items; the count must not grow
//! with the item count (the only allocations are per subscription: the engine, the
//! sink's handle). Only allocations made on the measuring thread count, so the test
//! harness's own threads cannot disturb the figures.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use weir::demand::UNBOUNDED;
use weir::prelude::*;

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// True on the thread whose allocations are being counted.
    static COUNTING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn count_one() {
    // `try_with`: the allocator can be called while thread-locals are torn down.
    if COUNTING.try_with(std::cell::Cell::get).unwrap_or(false) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: delegates every call to `System`, which upholds the `GlobalAlloc` contract;
// the counter has no effect on the returned memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: the caller's obligations for `alloc` are passed through unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` through `alloc` above with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        // SAFETY: the caller's obligations for `realloc` are passed through unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_for(n: u64, prefetch: u64) -> (u64, u64) {
    COUNTING.with(|c| c.set(true));
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let sum = weir::range(0..n)
        .map(|x| x * 3)
        .filter(|x| x % 2 == 0)
        .fold_with(prefetch, 0u64, |acc, x| acc + x)
        .wait()
        .expect("range does not fail");
    let after = ALLOCATIONS.load(Ordering::Relaxed);
    COUNTING.with(|c| c.set(false));
    (after - before, sum)
}

#[test]
fn sync_pipeline_allocates_nothing_per_item() {
    for prefetch in [UNBOUNDED, 64, 1] {
        // Warm up lazily initialised thread-locals and the like.
        let _ = allocations_for(10, prefetch);
        let (small, small_sum) = allocations_for(1_000, prefetch);
        let (large, large_sum) = allocations_for(1_000_000, prefetch);
        assert_eq!(
            small_sum,
            (0..1_000u64)
                .map(|x| x * 3)
                .filter(|x| x % 2 == 0)
                .sum::<u64>()
        );
        assert_eq!(
            large_sum,
            (0..1_000_000u64)
                .map(|x| x * 3)
                .filter(|x| x % 2 == 0)
                .sum::<u64>()
        );
        assert_eq!(
            small, large,
            "prefetch {prefetch}: {small} allocations for 1,000 items but {large} for 1,000,000"
        );
        assert!(
            small <= 8,
            "prefetch {prefetch}: {small} allocations per subscription"
        );
    }
}
