//! Overload: a producer that offers far more than its consumer can take, through each
//! bounded hand-off weir offers. Live heap is measured process-wide with a counting
//! global allocator (items cross threads, so a per-thread count would miss them); the
//! peak above the level at the start of a run must stay below the queue's capacity ×
//! item size plus a constant that does not grow with the item count.
//!
//! Runs are serialised by [`measure`], so parallel tests cannot add to each other's
//! peaks. One module per hand-off.

mod channel;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

mod boundary;

struct PeakCounting;

/// Bytes currently allocated, process-wide.
static LIVE: AtomicUsize = AtomicUsize::new(0);
/// The highest `LIVE` seen since the last reset.
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(by: usize) {
    // Relaxed: statistics only; no memory is published through these counters.
    let live = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

fn shrank(by: usize) {
    LIVE.fetch_sub(by, Ordering::Relaxed);
}

// SAFETY: delegates every call to `System`, which upholds the `GlobalAlloc` contract;
// the counters have no effect on the returned memory.
unsafe impl GlobalAlloc for PeakCounting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's obligations for `alloc` are passed through unchanged.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        shrank(layout.size());
        // SAFETY: `ptr` was allocated by `System` through `alloc`/`realloc` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's obligations for `realloc` are passed through unchanged.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            shrank(layout.size());
            grew(new_size);
        }
        new
    }
}

#[global_allocator]
static GLOBAL: PeakCounting = PeakCounting;

static SERIAL: Mutex<()> = Mutex::new(());

/// Run `f` alone (no other overload run in parallel) and return its result with the
/// peak live heap it added above the level when it started, in bytes.
pub fn measure<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let _alone = SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let result = f();
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(base);
    (result, peak)
}

#[test]
fn the_counter_sees_a_large_allocation() {
    let (len, peak) = measure(|| {
        let v = vec![0u8; 1 << 20];
        std::hint::black_box(&v);
        v.len()
    });
    assert_eq!(len, 1 << 20);
    // Process-wide count: another test's thread may free a little meanwhile.
    assert!(peak >= (1 << 20) - (64 << 10), "peak {peak}");
}
