//! `buffer(n)` allocates exactly one `Vec` per emitted batch and nothing per item
//! (issue 3). A counting global allocator counts every allocation of this test
//! binary; the same pipeline runs over two lengths and the difference in allocations
//! must equal the difference in emitted batches. Only allocations made on the test's
//! own thread are counted (the pipeline is synchronous and runs there), so the test
//! harness's threads cannot disturb the count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use weir::demand::UNBOUNDED;
use weir::prelude::*;

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// True on the thread whose allocations are counted.
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}

fn count() {
    if COUNTED.try_with(Cell::get).unwrap_or(false) {
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

/// (allocations, batches, items) for `range(0..n).buffer(size)` into a fold.
fn run(n: u64, size: usize, prefetch: u64) -> (u64, u64, u64) {
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let (batches, items) = weir::range(0..n)
        .buffer(size)
        .fold_with(prefetch, (0u64, 0u64), move |(b, i), batch| {
            assert!(batch.len() <= size && batch.capacity() == size);
            (b + 1, i + batch.len() as u64)
        })
        .wait()
        .expect("range does not fail");
    (ALLOCATIONS.load(Ordering::Relaxed) - before, batches, items)
}

#[test]
fn buffer_allocates_one_vec_per_batch_and_nothing_per_item() {
    COUNTED.with(|c| c.set(true));
    for prefetch in [UNBOUNDED, 64, 1] {
        let _ = run(10, 7, prefetch);
        // 1,000 items in 143 batches (the last holds 6); 1,000,000 in 142,858.
        let (small, small_batches, small_items) = run(1_000, 7, prefetch);
        let (large, large_batches, large_items) = run(1_000_000, 7, prefetch);
        assert_eq!((small_items, large_items), (1_000, 1_000_000));
        assert_eq!((small_batches, large_batches), (143, 142_858));
        assert_eq!(
            large - small,
            large_batches - small_batches,
            "prefetch {prefetch}: allocations grow by exactly one per batch"
        );
        // A stream that ends on a batch boundary allocates no empty remainder.
        let (exact, batches, _) = run(700, 7, prefetch);
        assert_eq!(batches, 100);
        assert_eq!(small - exact, 43, "prefetch {prefetch}");
    }
}
