//! Heap allocations per item in steady state (principle 5 of `docs/design.md` §2),
//! counted with a counting global allocator, one module per area; and the largest
//! single allocation of the stages given their largest accepted sizes (`sizes`).
//!
//! Each check runs the same pipeline over a small and a large input and compares the
//! allocation counts: they must not grow with the item count (allocations happen per
//! subscription), except where an operator's contract says otherwise (`buffer`: one
//! `Vec` per emitted batch). Only allocations made on the measuring thread are
//! counted (a thread-local switch), so the test harness's own threads and tests
//! running in parallel cannot disturb the figures.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

#[cfg(feature = "tokio")]
mod bridge;
mod buffer;
mod channel;
mod hub;
mod multi_source;
mod rate;
mod registry;
mod sizes;
mod sync_pipeline;
mod time;
mod transform;

struct Counting;

thread_local! {
    /// True while this thread's allocations are being counted.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    /// This thread's allocations while counting: per thread, so tests measuring in
    /// parallel do not add to each other's figures.
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
    /// The largest single allocation (in bytes) this thread made while counting.
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn count_one(size: usize) {
    // `try_with`: the allocator can be called while thread-locals are torn down.
    if COUNTING.try_with(Cell::get).unwrap_or(false) {
        let _ = ALLOCATIONS.try_with(|a| a.set(a.get() + 1));
        let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
    }
}

// SAFETY: delegates every call to `System`, which upholds the `GlobalAlloc` contract;
// the counter has no effect on the returned memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one(layout.size());
        // SAFETY: the caller's obligations for `alloc` are passed through unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` through `alloc` above with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one(new_size);
        // SAFETY: the caller's obligations for `realloc` are passed through unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Run `f` and return its result with the number of allocations this thread made.
pub fn measure<R>(f: impl FnOnce() -> R) -> (u64, R) {
    COUNTING.with(|c| c.set(true));
    let before = ALLOCATIONS.with(Cell::get);
    let result = f();
    let after = ALLOCATIONS.with(Cell::get);
    COUNTING.with(|c| c.set(false));
    (after - before, result)
}

/// Run `f` and return its result with the largest single allocation (in bytes) this
/// thread made meanwhile.
pub fn largest_allocation<R>(f: impl FnOnce() -> R) -> (usize, R) {
    LARGEST.with(|l| l.set(0));
    let (_, result) = measure(f);
    (LARGEST.with(Cell::get), result)
}

/// Run `pipeline(n)` for a small and a large `n` (after a warm-up) and check that the
/// allocation count does not grow with `n` and stays at most `per_subscription`.
/// `pipeline` returns its output, which is compared with `model(n)`.
pub fn assert_flat<R: PartialEq + std::fmt::Debug>(
    label: &str,
    per_subscription: u64,
    pipeline: impl Fn(u64) -> R,
    model: impl Fn(u64) -> R,
) {
    let _ = pipeline(10);
    let (small, small_out) = measure(|| pipeline(1_000));
    let (large, large_out) = measure(|| pipeline(1_000_000));
    assert_eq!(small_out, model(1_000), "{label}: wrong output");
    assert_eq!(large_out, model(1_000_000), "{label}: wrong output");
    assert_eq!(
        small, large,
        "{label}: {small} allocations for 1,000 items but {large} for 1,000,000"
    );
    assert!(
        small <= per_subscription,
        "{label}: {small} allocations per subscription (at most {per_subscription} expected)"
    );
}
