//! `blocking_iter`: consume a publisher as a blocking `Iterator`.
//!
//! Demand contract: requests `prefetch` up front, then what was consumed each time
//! `prefetch - prefetch/4` items were taken out ([`Replenish`]). The hand-off queue is
//! allocated once with room for `prefetch` items and can never hold more, because
//! outstanding demand never exceeds `prefetch`; an upstream that breaks rule 1.1 is
//! cancelled and reported instead of growing it.
//!
//! The iterator requests only after releasing the queue lock: a synchronous upstream
//! delivers inside `request`, on the iterator's own thread.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::demand::Replenish;
use crate::drain::SubscriptionSlot;
use crate::stage::window::{self, over_delivered, Window};
use crate::{Error, Subscriber, Subscription};

/// The hand-off between the subscriber (upstream's thread) and the iterator: a queue
/// of at most `prefetch` items, the end, and the condvar the iterator blocks on.
struct BlockingQueue<T> {
    /// Items delivered and not yet taken, and how the stream ended.
    state: Mutex<QueueState<T>>,
    /// Signalled when an item or the end arrives.
    ready: Condvar,
    /// The upstream subscription (cancelled when the iterator is dropped).
    slot: SubscriptionSlot,
}

struct QueueState<T> {
    /// Delivered and not yet taken: at most `prefetch`, allocated once.
    queue: Window<T>,
    end: Option<Result<(), Error>>,
}

impl<T> BlockingQueue<T> {
    fn lock(&self) -> MutexGuard<'_, QueueState<T>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A blocking iterator over a publisher's items, built by
/// [`PublisherExt::blocking_iter`](crate::PublisherExt::blocking_iter).
///
/// Yields `Ok(item)` for each item, then `Err(error)` once if the stream failed, then
/// `None`. Dropping it cancels the subscription.
pub struct BlockingIter<T> {
    shared: Arc<BlockingQueue<T>>,
    replenish: Replenish,
    done: bool,
}

impl<T> std::fmt::Debug for BlockingIter<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockingIter")
            .field("prefetch", &self.replenish.prefetch())
            .finish()
    }
}

/// The subscriber half.
pub(crate) struct IterSubscriber<T> {
    shared: Arc<BlockingQueue<T>>,
    prefetch: u64,
    subscribed: bool,
}

/// Build the two halves.
///
/// # Panics
///
/// If `prefetch` is 0 or above 2^30: "blocking_iter prefetch must be in 1..=2^30 (got 0)".
pub(crate) fn blocking_iter<T>(prefetch: u64) -> (IterSubscriber<T>, BlockingIter<T>) {
    let capacity = window::validate("blocking_iter prefetch", prefetch);
    let replenish = Replenish::new(prefetch);
    let shared = Arc::new(BlockingQueue {
        state: Mutex::new(QueueState {
            queue: Window::new(capacity),
            end: None,
        }),
        ready: Condvar::new(),
        slot: SubscriptionSlot::new(),
    });
    (
        IterSubscriber {
            shared: shared.clone(),
            prefetch,
            subscribed: false,
        },
        BlockingIter {
            shared,
            replenish,
            done: false,
        },
    )
}

impl<T> IterSubscriber<T> {
    fn end(&self, end: Result<(), Error>) {
        let mut state = self.shared.lock();
        if state.end.is_none() {
            state.end = Some(end);
        }
        drop(state);
        self.shared.ready.notify_one();
    }
}

impl<T> Subscriber<T> for IterSubscriber<T> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        if self.subscribed {
            subscription.cancel();
            return;
        }
        self.subscribed = true;
        if self.shared.slot.set(subscription.clone()) {
            subscription.request(self.prefetch);
        }
    }

    fn on_next(&mut self, item: T) {
        self.push(std::iter::once(item));
    }

    /// Queues the batch; replenishing is the iterator's job, so no batch credit.
    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        self.push(items);
        0
    }

    /// Consumes every batch it is handed (it never cancels from inside one).
    fn stops_batches_itself(&self) -> bool {
        true
    }

    fn on_error(&mut self, error: Error) {
        self.end(Err(error));
    }

    fn on_complete(&mut self) {
        self.end(Ok(()));
    }
}

impl<T> IterSubscriber<T> {
    /// Queue `items` under one lock; an upstream that overflows the window is
    /// cancelled and reported.
    fn push<I: Iterator<Item = T>>(&mut self, items: I) {
        let mut state = self.shared.lock();
        if state.end.is_some() {
            return;
        }
        if let Err(refused) = state.queue.push(items) {
            state.end = Some(Err(over_delivered("blocking_iter")));
            drop(state);
            // The refused item goes outside the lock (an item's Drop is user code).
            drop(refused);
            self.shared.slot.cancel();
        } else {
            drop(state);
        }
        self.shared.ready.notify_one();
    }
}

impl<T> Iterator for BlockingIter<T> {
    type Item = Result<T, Error>;

    fn next(&mut self) -> Option<Result<T, Error>> {
        if self.done {
            return None;
        }
        let mut state = self.shared.lock();
        let mut checked = false;
        loop {
            if let Some(item) = state.queue.pop_released() {
                drop(state);
                if let Some(n) = self.replenish.on_consumed(1) {
                    self.shared.slot.request(n);
                }
                return Some(Ok(item));
            }
            if let Some(end) = state.end.take() {
                self.done = true;
                return end.err().map(Err);
            }
            if !checked {
                // About to wait: not on a thread that drives a tokio runtime.
                checked = true;
                drop(state);
                crate::runtime::forbid_blocking_in_async("the blocking iterator's next()");
                state = self.shared.lock();
                continue;
            }
            state = self
                .shared
                .ready
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
        }
    }
}

impl<T> Drop for BlockingIter<T> {
    fn drop(&mut self) {
        self.shared.slot.cancel();
    }
}
