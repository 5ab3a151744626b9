//! `blocking_iter`: consume a publisher as a blocking `Iterator`.
//!
//! Demand contract: requests `prefetch` up front, then what was consumed each time
//! `prefetch - prefetch/4` items were taken out ([`Replenish`]). The hand-off queue
//! (a `Window`) holds at most `prefetch` items and can never hold more, because
//! outstanding demand never exceeds `prefetch`; an upstream that breaks rule 1.1 is
//! cancelled and reported instead of growing it past that.
//!
//! The iterator requests only after releasing the queue lock: a synchronous upstream
//! delivers inside `request`, on the iterator's own thread.
//!
//! Taking items: an iterator whose own buffer is empty takes everything queued under
//! one lock (the window's buffers trade places), and returns it item by item without
//! the lock. Those items stay counted in the window until they are returned and the
//! next lock (or a request, which always releases first) lets them go, so the window
//! still counts every item delivered and not yet consumed.
//!
//! Waiting: an iterator that finds the queue empty first polls a moment for the next
//! delivery (the crate's one `Backoff`, watching a count of deliveries it can read
//! without the lock), then marks itself waiting and blocks on the condition
//! variable. A delivery signals the condition variable only when the iterator is
//! marked waiting: a producer handing over one item at a time to an iterator that
//! keeps up used to pay a `futex` wake-up per item (on this kind of machine, four
//! iterators fed by a hub one item at a time ran 40× slower than four crossbeam
//! channels).
//!
//! Pulling a channel: when upstream is a [`channel`](fn@crate::channel) (or a hub
//! over one: its subscription carries a crate-internal pull handle), the iterator
//! *watches* the channel's lane while it polls, as a `publish_on` drain does: the
//! channel's senders then only claim a slot (one compare-and-swap) and skip their
//! signal, and an iterator that finds items there runs the channel's drain loop on
//! its own thread (so the items, and a hub's fan-out, arrive in batches there).
//! At the end of its poll (so before `next` returns or blocks) it stops watching,
//! fences, and looks at the lane's claims once more: a claim it does not see was
//! made by a sender that sees the mark gone and hands its item over itself.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

use crate::demand::Replenish;
use crate::drain::SubscriptionSlot;
use crate::runtime::backoff::Backoff;
use crate::spec::{Pull, PullMark};
use crate::stage::window::{self, over_delivered, Window};
use crate::{Error, Subscriber, Subscription};

/// The hand-off between the subscriber (upstream's thread) and the iterator: a queue
/// of at most `prefetch` items, the end, and the condvar the iterator blocks on.
struct BlockingQueue<T> {
    /// Items delivered and not yet taken, and how the stream ended.
    state: Mutex<QueueState<T>>,
    /// Signalled when an item or the end arrives while the iterator waits.
    ready: Condvar,
    /// Deliveries so far (items or the end), bumped under the lock: the iterator
    /// polls it before it blocks.
    delivered: AtomicU64,
    /// The upstream subscription (cancelled when the iterator is dropped).
    slot: SubscriptionSlot,
    /// Upstream's pull handle, if it has one (see the module docs).
    pull: OnceLock<Arc<dyn Pull>>,
}

struct QueueState<T> {
    /// Delivered and not yet taken: at most `prefetch`.
    queue: Window<T>,
    end: Option<Result<(), Error>>,
    /// The iterator is blocked (or about to block) on `ready`.
    waiting: bool,
}

impl<T> BlockingQueue<T> {
    fn lock(&self) -> MutexGuard<'_, QueueState<T>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Something was delivered under `state`: count it, and wake the iterator if
    /// it waits.
    fn delivered(&self, state: MutexGuard<'_, QueueState<T>>) {
        // Deliveries are serialised by the lock, so a load and a store count them
        // (no locked read-modify-write per delivery). Relaxed load: the lock orders
        // the writers. Release store: pairs with the iterator's Acquire poll (a
        // hint: it takes the lock before it reads the queue).
        let count = self.delivered.load(Ordering::Relaxed);
        self.delivered.store(count + 1, Ordering::Release);
        let waiting = state.waiting;
        drop(state);
        if waiting {
            self.ready.notify_one();
        }
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
    /// Items taken out of the queue under one lock, not yet returned: still held
    /// in the window, as are the `unreleased` ones returned since the last lock.
    /// Behind a mutex that is never locked (only `get_mut`, which costs nothing),
    /// so that the iterator is `Sync` for any `T: Send`, as the queue it reads
    /// is: a bare `VecDeque<T>` would make it `Sync` only for `T: Sync`.
    local: Mutex<VecDeque<T>>,
    /// Items returned from `local` and not yet released in the window (released
    /// at the next lock, and always before a request: see the module docs).
    unreleased: usize,
    /// This iterator's mark on upstream's pull handle (see the module docs).
    mark: PullMark,
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
    /// A delivery, [`gather`](window::gather)ed before the lock is taken; empty
    /// between deliveries.
    gathered: VecDeque<T>,
    /// The most one delivery may hold: one more than the window (an overflow shows).
    bound: usize,
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
            waiting: false,
        }),
        ready: Condvar::new(),
        delivered: AtomicU64::new(0),
        slot: SubscriptionSlot::new(),
        pull: OnceLock::new(),
    });
    (
        IterSubscriber {
            shared: shared.clone(),
            prefetch,
            subscribed: false,
            gathered: VecDeque::with_capacity(capacity.min(window::PREALLOCATED)),
            bound: capacity.saturating_add(1),
        },
        BlockingIter {
            shared,
            replenish,
            done: false,
            local: Mutex::new(VecDeque::new()),
            unreleased: 0,
            mark: PullMark::default(),
        },
    )
}

impl<T> IterSubscriber<T> {
    fn end(&self, end: Result<(), Error>) {
        let mut state = self.shared.lock();
        if state.end.is_none() {
            state.end = Some(end);
        }
        self.shared.delivered(state);
    }
}

impl<T> Drop for IterSubscriber<T> {
    /// Released by its publisher without a terminal signal (one that ended without
    /// telling, or whose thread panicked holding it): the iterating thread must not
    /// block for ever, so it gets the items queued and then an error of kind
    /// [`Cancelled`](crate::ErrorKind::Cancelled) (a no-op once the stream ended).
    fn drop(&mut self) {
        self.end(Err(Error::cancelled()));
    }
}

impl<T> Subscriber<T> for IterSubscriber<T> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        if self.subscribed {
            subscription.cancel();
            return;
        }
        self.subscribed = true;
        if let Some(pull) = subscription.pull() {
            let _ = self.shared.pull.set(pull.clone());
        }
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
    /// Queue `items` under one lock (gathered first: a lazy batch runs user code,
    /// which must not run under the lock); an upstream that overflows the window is
    /// cancelled and reported.
    fn push<I: Iterator<Item = T>>(&mut self, items: I) {
        window::gather(&mut self.gathered, items, self.bound);
        let mut state = self.shared.lock();
        if state.end.is_some() {
            drop(state);
            self.gathered.clear();
            return;
        }
        let overflowed = state.queue.push_gathered(&mut self.gathered).is_err();
        if overflowed {
            state.end = Some(Err(over_delivered("blocking_iter")));
        }
        self.shared.delivered(state);
        // What was refused goes outside the lock (an item's Drop is user code).
        self.gathered.clear();
        if overflowed {
            self.shared.slot.cancel();
        }
    }
}

impl<T> Iterator for BlockingIter<T> {
    type Item = Result<T, Error>;

    fn next(&mut self) -> Option<Result<T, Error>> {
        if let Some(item) = self.local().pop_front() {
            return Some(Ok(self.returned(item)));
        }
        if self.done {
            return None;
        }
        let mut state = self.shared.lock();
        let mut checked = false;
        loop {
            // What was returned since the last lock leaves the window now.
            state.queue.release(std::mem::take(&mut self.unreleased));
            // (The field, not `local()`: `state` borrows `self.shared`.)
            let local = self.local.get_mut().unwrap_or_else(|p| p.into_inner());
            if state.queue.take_queued(local) > 0 {
                drop(state);
                let item = self.local().pop_front().expect("just taken");
                return Some(Ok(self.returned(item)));
            }
            if let Some(end) = state.end.take() {
                self.done = true;
                return end.err().map(Err);
            }
            if !checked {
                // About to wait: not on a thread that drives a tokio runtime.
                checked = true;
                // Acquire: pairs with the Release count of a delivery.
                let seen = self.shared.delivered.load(Ordering::Acquire);
                drop(state);
                crate::runtime::forbid_blocking_in_async("the blocking iterator's next()");
                // Poll a moment for the next delivery before blocking (watching
                // upstream's lane meanwhile, if it has one).
                let delivered = &self.shared.delivered;
                match self.shared.pull.get() {
                    None => {
                        Backoff::wait(|| delivered.load(Ordering::Acquire) != seen);
                    }
                    Some(pull) => {
                        self.mark.set(&**pull, true);
                        Backoff::wait(|| delivered.load(Ordering::Acquire) != seen || pull.ready());
                        if pull.ready() {
                            // Upstream's drain loop, here: what it delivers lands
                            // in our queue (if upstream has demand to serve).
                            pull.pull();
                        }
                        // Not watching outside `next`: the caller may take its
                        // time with the item, and the senders would wait for us.
                        self.mark.unwatch(&**pull);
                    }
                }
                state = self.shared.lock();
                continue;
            }
            state.waiting = true;
            state = self
                .shared
                .ready
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
            state.waiting = false;
        }
    }
}

impl<T> BlockingIter<T> {
    /// The items taken out of the queue and not yet returned.
    fn local(&mut self) -> &mut VecDeque<T> {
        // Never locked, so never poisoned: `get_mut` only reads the flag.
        self.local.get_mut().unwrap_or_else(|p| p.into_inner())
    }

    /// `item` leaves for the caller: count it, and replenish upstream if due,
    /// after releasing what was returned in the window (so upstream's next items
    /// always find room).
    fn returned(&mut self, item: T) -> T {
        self.unreleased += 1;
        if let Some(n) = self.replenish.on_consumed(1) {
            self.shared
                .lock()
                .queue
                .release(std::mem::take(&mut self.unreleased));
            self.shared.slot.request(n);
        }
        item
    }
}

impl<T> Drop for BlockingIter<T> {
    fn drop(&mut self) {
        if let Some(pull) = self.shared.pull.get() {
            self.mark.release(&**pull);
        }
        self.shared.slot.cancel();
    }
}
