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

/// What [`two_waiters`] returns: the two futures, the flag and its waker.
pub type Waiters<F> = (
    std::pin::Pin<Box<F>>,
    std::pin::Pin<Box<F>>,
    Arc<Flag>,
    std::task::Waker,
);

/// Two waiters polled by hand, each once and each still pending: `first` under a
/// waker that panics, `second` under a [`Flag`]. Returns them with the flag and its
/// waker (to poll `second` again).
pub fn two_waiters<F: std::future::Future>(first: F, second: F) -> Waiters<F> {
    use std::task::{Context, Waker};
    let mut first = Box::pin(first);
    let panicky = Waker::from(Arc::new(PanickyWaker));
    assert!(first
        .as_mut()
        .poll(&mut Context::from_waker(&panicky))
        .is_pending());
    let mut second = Box::pin(second);
    let flag = Arc::new(Flag::default());
    let flagged = Waker::from(flag.clone());
    assert!(second
        .as_mut()
        .poll(&mut Context::from_waker(&flagged))
        .is_pending());
    (first, second, flag, flagged)
}
