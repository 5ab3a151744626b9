//! Zero heap allocations per item through the issue-3 transformation operators
//! (`filter_map`, `skip`, `skip_while`, `take_while`, `scan`, `inspect`,
//! `inspect_request`, `inspect_cancel`, `reduce`), in their own test binary so that
//! no other test allocates concurrently.
//!
//! The same pipeline runs over 1,000 and over 1,000,000 items; the count must not
//! grow with the item count: the only allocations are per subscription (the engine,
//! the subscription wrappers of `skip`, the two taps and `reduce`, the sink's handle).
//!
//! Only allocations made on the measuring thread are counted (the pipeline is
//! synchronous, so that is all of them): the test harness's own threads allocate now
//! and then, which made whole-process counts flaky.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use weir::demand::UNBOUNDED;
use weir::prelude::*;

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// True on the thread whose allocations are counted. Const-initialised and
    /// without a destructor, so reading it never allocates.
    static MEASURED: Cell<bool> = const { Cell::new(false) };
}

fn count() {
    if MEASURED.with(Cell::get) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: delegates every call to `System`, which upholds the `GlobalAlloc` contract;
// the counter has no effect on the returned memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's obligations for `alloc` are passed through unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` through `alloc` above with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: the caller's obligations for `realloc` are passed through unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The pipeline over `0..n`, and the same computation with `Iterator`.
fn run(n: u64, prefetch: u64) -> (u64, u64, u64) {
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let out = weir::range(0..n)
        .filter_map(|x| (x % 3 != 0).then_some(x * 2))
        .skip(5)
        .skip_while(|x| *x < 40)
        .take_while(|x| *x < u64::MAX / 4)
        .scan(0u64, |acc, x| acc.wrapping_add(x))
        .inspect(|x| assert!(*x != u64::MAX))
        .inspect_request(|n| assert!(n > 0))
        .inspect_cancel(|| {})
        .reduce(|a, b| a ^ b)
        .fold_with(prefetch, 0u64, |acc, x| acc + x)
        .wait()
        .expect("range does not fail");
    let after = ALLOCATIONS.load(Ordering::Relaxed);
    let model = (0..n)
        .filter_map(|x| (x % 3 != 0).then_some(x * 2))
        .skip(5)
        .skip_while(|x| *x < 40)
        .take_while(|x| *x < u64::MAX / 4)
        .scan(0u64, |acc, x| {
            *acc = acc.wrapping_add(x);
            Some(*acc)
        })
        .reduce(|a, b| a ^ b)
        .unwrap_or(0);
    (after - before, out, model)
}

#[test]
fn transformation_operators_allocate_nothing_per_item() {
    MEASURED.with(|measured| measured.set(true));
    for prefetch in [UNBOUNDED, 64, 1] {
        // Warm up lazily initialised thread-locals and the like.
        let _ = run(10, prefetch);
        let (small, small_out, small_model) = run(1_000, prefetch);
        let (large, large_out, large_model) = run(1_000_000, prefetch);
        assert_eq!(small_out, small_model);
        assert_eq!(large_out, large_model);
        assert_eq!(
            small, large,
            "prefetch {prefetch}: {small} allocations for 1,000 items but {large} for 1,000,000"
        );
        assert!(
            small <= 16,
            "prefetch {prefetch}: {small} allocations per subscription"
        );
    }
}
