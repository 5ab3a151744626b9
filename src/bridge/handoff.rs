//! The hand-off between a publisher's thread and a polling task, shared by
//! [`into_stream`](crate::PublisherExt::into_stream) and
//! [`forward`](crate::PublisherExt::forward).
//!
//! # Algorithm
//!
//! A [`HandoffSubscriber`] receives the publisher's signals on whatever thread the
//! publisher runs, and a polling task takes the items out with [`Handoff::poll_pop`]
//! (one at a time) or [`Handoff::poll_take`] (all that are queued, under one lock).
//! Between them sits one [`Window`] (the engine room's bounded hand-off, of at most
//! `window` items) and a `futures::task::AtomicWaker`:
//!
//! * the subscriber pushes a whole `on_next_batch` under one lock and wakes the task
//!   once (and only when the queue was empty before the batch: a task that found items
//!   has not gone to sleep, and a task that found none registered its waker before it
//!   looked, under the same lock);
//! * the task registers its waker, then looks under the lock, so a push that lands
//!   between the two is never missed.
//!
//! # Demand contract
//!
//! The window counts items delivered and not yet given back by the consumer with
//! [`Handoff::release`]. The consumer gives items back only when it requests the same
//! number again, so "held" plus the outstanding demand never exceeds the window: a push
//! that finds the window full was not requested. That is upstream breaking rule 1.1;
//! the subscriber cancels upstream and ends the stream with an error naming the rule,
//! instead of growing the queue. Nothing here is unbounded.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use futures::task::AtomicWaker;

use crate::drain::SubscriptionSlot;
use crate::stage::window::{gather, over_delivered, Window};
use crate::{Error, Subscriber, Subscription};

struct HandoffState<T> {
    /// Delivered and not yet released by the consumer (queued or popped).
    window: Window<T>,
    /// How the stream ended, once it did.
    end: Option<Result<(), Error>>,
    /// Requests made before the subscription arrived: made on arrival.
    pending: u64,
}

/// The state shared by the subscriber half and the consumer half.
pub(crate) struct Handoff<T> {
    state: Mutex<HandoffState<T>>,
    waker: AtomicWaker,
    slot: SubscriptionSlot,
}

impl<T> std::fmt::Debug for Handoff<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("Handoff")
            .field("window", &state.window)
            .field("ended", &state.end.is_some())
            .finish()
    }
}

impl<T> Handoff<T> {
    /// A hand-off with room for `window` items (already validated) and the subscriber
    /// that feeds it, which requests `initial` items on subscribe (0: none).
    pub(crate) fn new(window: usize, initial: u64) -> (Arc<Self>, HandoffSubscriber<T>) {
        let shared = Arc::new(Handoff {
            state: Mutex::new(HandoffState {
                window: Window::new(window),
                end: None,
                pending: 0,
            }),
            waker: AtomicWaker::new(),
            slot: SubscriptionSlot::new(),
        });
        let (gathered, bound) = {
            let state = shared.lock();
            (state.window.spare(), state.window.size().saturating_add(1))
        };
        let subscriber = HandoffSubscriber {
            shared: shared.clone(),
            initial,
            subscribed: false,
            gathered,
            bound,
        };
        (shared, subscriber)
    }

    fn lock(&self) -> MutexGuard<'_, HandoffState<T>> {
        // Never poisoned in practice: nothing panics while holding it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next item, the end of the stream (`Some(Err)` once for a failure, then
    /// `None`), or `Pending` with the task's waker registered. A popped item is
    /// released at once (the caller requests one per item).
    pub(crate) fn poll_pop(&self, cx: &mut Context<'_>) -> Poll<Option<Result<T, Error>>> {
        self.poll_with(cx, |window| window.pop_released())
    }

    /// Every queued item moved to `out` (`Some(Ok(()))`; each still held until
    /// [`release`](Self::release)), the end of the stream (`Some(Err)` once for a
    /// failure, then `None`), or `Pending` with the task's waker registered. One lock
    /// for all the items a batch delivered: the consumer pops them from `out`.
    pub(crate) fn poll_take(
        &self,
        cx: &mut Context<'_>,
        out: &mut VecDeque<T>,
    ) -> Poll<Option<Result<(), Error>>> {
        self.poll_with(cx, |window| (window.take_queued(out) > 0).then_some(()))
    }

    /// What `take` got from the window, else the end, else `Pending` with the waker
    /// registered.
    fn poll_with<R>(
        &self,
        cx: &mut Context<'_>,
        mut take: impl FnMut(&mut Window<T>) -> Option<R>,
    ) -> Poll<Option<Result<R, Error>>> {
        // Fast path: items are there; no need to touch the waker.
        if let Some(ready) = self.try_take(&mut take) {
            return Poll::Ready(ready);
        }
        // Register first, then look again under the lock: a push after our look sees
        // an empty queue and wakes us; a push before it is found by the look.
        self.waker.register(cx.waker());
        match self.try_take(&mut take) {
            Some(ready) => Poll::Ready(ready),
            None => Poll::Pending,
        }
    }

    /// `None`: nothing yet. `Some(None)`: the stream is over.
    fn try_take<R>(
        &self,
        take: &mut impl FnMut(&mut Window<T>) -> Option<R>,
    ) -> Option<Option<Result<R, Error>>> {
        let mut state = self.lock();
        if let Some(taken) = take(&mut state.window) {
            return Some(Some(Ok(taken)));
        }
        match state.end.take() {
            Some(Ok(())) => {
                // Keep the stream over for later polls.
                state.end = Some(Ok(()));
                Some(None)
            }
            Some(Err(error)) => {
                state.end = Some(Ok(()));
                Some(Some(Err(error)))
            }
            None => None,
        }
    }

    /// The consumer is done with `n` popped items: upstream may deliver `n` more.
    /// Call before requesting them.
    pub(crate) fn release(&self, n: usize) {
        self.lock().window.release(n);
    }

    /// Request `n` more from upstream (after [`release`](Self::release), or for a
    /// window that starts empty); before upstream's `on_subscribe`, the request is
    /// made when it arrives.
    pub(crate) fn request(&self, n: u64) {
        if let Some(subscription) = self.slot.get() {
            return subscription.request(n);
        }
        // Not subscribed yet (a publisher may call `on_subscribe` later, on another
        // thread): kept for `on_subscribe`, which sets the slot before it takes the
        // state lock to collect them, so one of the two sees the other.
        let mut state = self.lock();
        match self.slot.get() {
            Some(subscription) => {
                drop(state);
                subscription.request(n);
            }
            None => state.pending = state.pending.saturating_add(n),
        }
    }

    /// Cancel upstream (idempotent; before subscription, the subscription that
    /// arrives later is cancelled).
    pub(crate) fn cancel(&self) {
        self.slot.cancel();
    }

    /// Record the end of the stream (the first one wins) and wake the consumer.
    fn end(&self, end: Result<(), Error>) {
        let mut state = self.lock();
        if state.end.is_none() {
            state.end = Some(end);
        }
        drop(state);
        crate::guard::wake_all(self.waker.take());
    }
}

/// The publisher's `subscribe`, deferred: a lazy stream or future calls it with its
/// [`HandoffSubscriber`] on its first poll.
pub(crate) type Subscribe<T> = Box<dyn FnOnce(HandoffSubscriber<T>) + Send>;

/// The subscriber half: pushes what upstream delivers into the hand-off.
pub(crate) struct HandoffSubscriber<T> {
    shared: Arc<Handoff<T>>,
    initial: u64,
    subscribed: bool,
    /// A delivery, [`gather`]ed before the lock is taken; empty between deliveries.
    gathered: VecDeque<T>,
    /// The most one delivery may hold: one more than the window (an overflow shows).
    bound: usize,
}

impl<T> std::fmt::Debug for HandoffSubscriber<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandoffSubscriber")
            .field("shared", &self.shared)
            .finish()
    }
}

impl<T> HandoffSubscriber<T> {
    /// Push `items` under one lock and wake the consumer once. They are
    /// [`gather`]ed first: a lazy batch runs user code, which must not run under
    /// the lock.
    fn push<I: Iterator<Item = T>>(&mut self, items: I) {
        gather(&mut self.gathered, items, self.bound);
        let mut state = self.shared.lock();
        if state.end.is_some() {
            drop(state);
            self.gathered.clear();
            return;
        }
        let was_empty = state.window.is_empty();
        let pushed = state.window.push_gathered(&mut self.gathered);
        let overflowed = pushed.is_err();
        if overflowed {
            state.end = Some(Err(over_delivered("bridge")));
        }
        drop(state);
        // What was refused goes outside the lock (an item's Drop is user code).
        self.gathered.clear();
        if overflowed {
            self.shared.slot.cancel();
            crate::guard::wake_all(self.shared.waker.take());
        } else if pushed.is_ok_and(|n| n > 0) && was_empty {
            crate::guard::wake_all(self.shared.waker.take());
        }
    }
}

impl<T> Drop for HandoffSubscriber<T> {
    /// Released by its publisher without a terminal signal (one that ended without
    /// telling, or whose thread panicked holding it): the consumer must not wait for
    /// ever, so the stream ends with an error of kind
    /// [`Cancelled`](crate::ErrorKind::Cancelled) after the items it holds (a no-op
    /// once the stream ended).
    fn drop(&mut self) {
        self.shared.end(Err(Error::cancelled()));
    }
}

impl<T> Subscriber<T> for HandoffSubscriber<T> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        if self.subscribed {
            subscription.cancel();
            return;
        }
        self.subscribed = true;
        if self.shared.slot.set(subscription.clone()) {
            let pending = std::mem::take(&mut self.shared.lock().pending);
            let n = self.initial.saturating_add(pending);
            if n > 0 {
                subscription.request(n);
            }
        }
    }

    fn on_next(&mut self, item: T) {
        self.push(std::iter::once(item));
    }

    /// One lock and at most one wake per batch. Replenishing is the consumer's job
    /// (it requests as it takes items out), so no batch credit.
    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        self.push(items);
        0
    }

    /// Consumes every batch it is handed (it never cancels from inside one).
    fn stops_batches_itself(&self) -> bool {
        true
    }

    fn on_error(&mut self, error: Error) {
        self.shared.end(Err(error));
    }

    fn on_complete(&mut self) {
        self.shared.end(Ok(()));
    }
}

/// Turn a foreign error into a weir [`Error`]: a `weir::Error` passes through
/// unchanged (same identity); anything else becomes kind
/// [`Upstream`](crate::ErrorKind::Upstream) with the error as its source.
pub(crate) fn into_error<E>(error: E) -> Error
where
    E: std::error::Error + Send + Sync + 'static,
{
    let boxed: Box<dyn std::any::Any + Send> = Box::new(error);
    match boxed.downcast::<Error>() {
        Ok(error) => *error,
        Err(other) => match other.downcast::<E>() {
            Ok(error) => Error::upstream(*error),
            Err(_) => unreachable!("the box holds an E"),
        },
    }
}
