//! Task wakers for tests that poll futures by hand: one that panics in `wake` (a
//! broken executor) and one that records that it was woken.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A waker that panics in `wake`.
pub struct PanickyWaker;

impl std::task::Wake for PanickyWaker {
    fn wake(self: Arc<Self>) {
        panic!("deliberate: this waker panics in wake");
    }
}

/// A waker that records that it was woken.
#[derive(Default)]
pub struct Flag(AtomicBool);

impl Flag {
    /// True once woken.
    pub fn woken(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

impl std::task::Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}
