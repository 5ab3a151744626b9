//! Fixtures: a shared multi-thread runtime, and streams that count their polls,
//! report their drop, or go `Pending` now and then.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use weir::runtime::Tokio;

/// Generous bound for waits on things that must happen (never reached when they do).
pub const PATIENCE: Duration = Duration::from_secs(10);

/// A process-wide tokio runtime with two worker threads (the machine has two cores).
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

/// A weir scheduler on [`runtime`].
pub fn tokio() -> Tokio {
    Tokio::new(runtime().handle().clone())
}

/// What a [`Counted`] stream saw.
#[derive(Debug, Default)]
pub struct Counts {
    /// Every `poll_next`.
    pub polls: AtomicU64,
    /// Items the stream yielded.
    pub yielded: AtomicU64,
    /// `Pending` answers.
    pub pendings: AtomicU64,
    /// Demand the subscriber requested so far (fed by an `inspect_request` tap;
    /// saturating, `u64::MAX` = unbounded).
    pub requested: AtomicU64,
    /// Polls made while every requested item had already been yielded.
    pub polls_without_demand: AtomicU64,
}

impl Counts {
    /// Fresh counters.
    pub fn new() -> Arc<Self> {
        Arc::new(Counts::default())
    }

    /// Record a request of `n` (the `inspect_request` tap).
    pub fn request(&self, n: u64) {
        let mut current = self.requested.load(Ordering::SeqCst);
        loop {
            let next = current.saturating_add(n);
            match self
                .requested
                .compare_exchange(current, next, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return,
                Err(actual) => current = actual,
            }
        }
    }

    /// Read a counter.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::SeqCst)
    }
}

/// A stream that counts its polls and checks each one against the demand recorded
/// in its [`Counts`]; every `pending_every`th poll (0: never) it answers `Pending`
/// and wakes itself at once.
pub struct Counted<S> {
    inner: S,
    counts: Arc<Counts>,
    pending_every: u64,
}

impl<S> Counted<S> {
    /// Wrap `inner`.
    pub fn new(inner: S, counts: Arc<Counts>, pending_every: u64) -> Self {
        Counted {
            inner,
            counts,
            pending_every,
        }
    }
}

impl<S: Stream + Unpin> Stream for Counted<S> {
    type Item = S::Item;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        let this = self.get_mut();
        let polls = this.counts.polls.fetch_add(1, Ordering::SeqCst) + 1;
        if Counts::get(&this.counts.yielded) >= Counts::get(&this.counts.requested) {
            this.counts
                .polls_without_demand
                .fetch_add(1, Ordering::SeqCst);
        }
        if this.pending_every > 0 && polls % this.pending_every == 0 {
            this.counts.pendings.fetch_add(1, Ordering::SeqCst);
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let next = Pin::new(&mut this.inner).poll_next(cx);
        match &next {
            Poll::Ready(Some(_)) => {
                this.counts.yielded.fetch_add(1, Ordering::SeqCst);
            }
            Poll::Pending => {
                this.counts.pendings.fetch_add(1, Ordering::SeqCst);
            }
            Poll::Ready(None) => {}
        }
        next
    }
}

/// A stream that sets a flag when it is dropped (what it "holds" is released).
pub struct DropFlag<S> {
    inner: S,
    dropped: Arc<AtomicBool>,
}

impl<S> DropFlag<S> {
    /// Wrap `inner`; returns the stream and its flag.
    pub fn new(inner: S) -> (Self, Arc<AtomicBool>) {
        let dropped = Arc::new(AtomicBool::new(false));
        (
            DropFlag {
                inner,
                dropped: dropped.clone(),
            },
            dropped,
        )
    }
}

impl<S> Drop for DropFlag<S> {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

impl<S: Stream + Unpin> Stream for DropFlag<S> {
    type Item = S::Item;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        Pin::new(&mut self.get_mut().inner).poll_next(cx)
    }
}

/// Wait (sleeping a millisecond at a time, at most [`PATIENCE`]) until `done()`.
pub async fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !done() {
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    true
}

/// Blocking variant of [`eventually`], for tests outside the runtime.
pub fn eventually_blocking(mut done: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + PATIENCE;
    while !done() {
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}
