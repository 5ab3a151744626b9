//! Tests of `weir::nats` against a real `nats-server` with JetStream, installed on
//! first use and started by the tests themselves on loopback (see `server.rs`).
//!
//! The binary counts the bytes its heap holds (a counting global allocator) so that
//! the slow-consumer test can show the client's memory stays bounded; that test runs
//! alone (it takes [`fixture::exclusive`], the others [`fixture::shared`]).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};

mod bad_input;
mod cluster;
mod faults;
mod fixture;
mod hostile;
mod server;
mod sink;
mod slow;
mod source;

/// Bytes allocated and not freed, by every thread of the process.
pub static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);

struct Counting;

// SAFETY: delegates every call to `System`, which upholds the `GlobalAlloc` contract;
// the counter has no effect on the returned memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // Relaxed: a statistic, read by one test while it runs alone.
        LIVE_BYTES.fetch_add(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: the caller's obligations for `alloc` are passed through unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: `ptr` was allocated by `System` through this allocator with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE_BYTES.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        // SAFETY: the caller's obligations for `realloc` are passed through unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;
