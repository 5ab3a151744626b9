//! The state a channel's senders and its subscriber share, the offer path (one per
//! policy) and the drain pass. The algorithm is described in the [module
//! docs](super); this file only adds the locking details:
//!
//! * `state` (queue, open/closed, pending end, flow state, waiters) is locked by
//!   senders for one offer and by the drain owner for one batch. Nobody calls user
//!   code while holding it: dropped and expired items go to the drop hook, wakers are
//!   woken and the subscriber is called only after it is released.
//! * `consumer` (the subscriber and the pass's batch buffers) is locked only by the
//!   [`Wip`] owner, so it is never contended; it exists to hand the subscriber from one
//!   owner thread to the next without `unsafe`.
//! * Demand is an [`AtomicDemand`] read with `get` and settled with `produced`, so it
//!   never reads 0 while undelivered demand exists. That is what lets a sender skip
//!   the drain loop when it sees no demand: if it reads 0 after its push, any request
//!   not yet seen is ordered after the push by the state lock, and the pass that
//!   request triggers finds the item.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::task::Waker;
use std::time::Instant;

use super::marks::{FlowState, WaterMarks};
use super::ChannelPolicy;
use crate::demand::{self, AtomicDemand};
use crate::drain::Wip;
use crate::guard::catch;
use crate::metrics::{DropHook, QueueGauge};
use crate::queue::timed::TimedQueue;
use crate::{DropReason, Error, RawSubscription, Subscriber};

// The loom models at the end of this file check the real channel, so every atomic,
// lock and condition variable here is loom's under `cfg(weir_loom)`.
#[cfg(weir_loom)]
use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize};
#[cfg(weir_loom)]
use loom::sync::{Condvar, Mutex, MutexGuard};
#[cfg(not(weir_loom))]
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize};
#[cfg(not(weir_loom))]
use std::sync::{Condvar, Mutex, MutexGuard};

/// The stage name drops are reported under.
pub(super) const STAGE: &str = "channel";

/// Largest batch one drain step takes out of the queue (and the size of the pass's
/// reusable buffer, for channels at least this large).
pub(super) const BATCH: usize = 256;

/// Flag: the subscriber cancelled.
const CANCELLED: u8 = 1;
/// Flag: the subscriber called `request(0)` (rule 3.9).
const BAD_REQUEST: u8 = 2;

/// Lock a mutex, recovering from poisoning: no user code runs under these locks, so a
/// poisoned lock can only come from a bug in this module's own arithmetic.
pub(super) fn lock<S>(m: &Mutex<S>) -> MutexGuard<'_, S> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Async tasks waiting for a condition, each under a key its future remembers, so a
/// re-polled future replaces its waker instead of adding one (bounded by the number
/// of live futures) and a dropped future removes itself.
#[derive(Default)]
pub(super) struct Waiters {
    next_key: u64,
    list: Vec<(u64, Waker)>,
}

impl Waiters {
    pub(super) fn register(&mut self, key: &mut Option<u64>, waker: &Waker) {
        if let Some(k) = *key {
            if let Some((_, w)) = self.list.iter_mut().find(|(id, _)| *id == k) {
                if !w.will_wake(waker) {
                    w.clone_from(waker);
                }
                return;
            }
        }
        let k = self.next_key;
        self.next_key += 1;
        self.list.push((k, waker.clone()));
        *key = Some(k);
    }

    pub(super) fn remove(&mut self, key: Option<u64>) {
        if let Some(k) = key {
            self.list.retain(|(id, _)| *id != k);
        }
    }

    fn take_into(&mut self, out: &mut Vec<Waker>) {
        out.extend(self.list.drain(..).map(|(_, w)| w));
    }
}

/// Everything behind the state lock.
pub(super) struct State<T> {
    pub(super) queue: TimedQueue<T>,
    /// Senders may still send (false after close, fail, cancel or the end).
    pub(super) open: bool,
    /// The end to deliver once the queue is empty.
    end: Option<Result<(), Error>>,
    pub(super) flow: FlowState,
    /// Threads in `send_blocking` waiting for room.
    pub(super) blocked_threads: usize,
    /// Threads in `wait_resumed`.
    pub(super) resume_threads: usize,
    pub(super) send_wakers: Waiters,
    pub(super) resume_wakers: Waiters,
    /// Items refused so far, for rate-limited logging.
    refused: u64,
}

/// What an offer did, decided under the state lock and settled after it.
pub(super) enum Offer<T> {
    Accepted,
    /// Accepted, and this item was dropped to make room (or was the item itself).
    Dropped(DropReason, T),
    /// Full: refused (counted as rejected) or, for a waiting sender, to wait.
    Full(T),
    Closed(T),
}

/// Wakers collected under the lock, woken after it.
#[must_use]
pub(super) struct Wake(Vec<Waker>);

impl Wake {
    pub(super) fn run(self) {
        self.0.into_iter().for_each(Waker::wake);
    }
}

/// The subscriber and the pass's reusable buffers, owned by the drain loop.
struct Consumer<T> {
    sink: Box<dyn Sink<T>>,
    batch: Vec<T>,
    expired: Vec<T>,
}

/// Object-safe view of a `Subscriber` that keeps batch delivery.
trait Sink<T>: Send {
    fn next_batch(&mut self, items: &mut dyn Iterator<Item = T>) -> u64;
    fn error(&mut self, error: Error);
    fn complete(&mut self);
}

impl<T, S: Subscriber<T> + Send> Sink<T> for S {
    fn next_batch(&mut self, items: &mut dyn Iterator<Item = T>) -> u64 {
        self.on_next_batch(items)
    }
    fn error(&mut self, error: Error) {
        self.on_error(error)
    }
    fn complete(&mut self) {
        self.on_complete()
    }
}

/// How a drain pass ended.
enum Pass {
    Idle,
    Over,
}

pub(super) struct Shared<T> {
    pub(super) policy: ChannelPolicy,
    pub(super) marks: WaterMarks,
    pub(super) gauge: Arc<QueueGauge>,
    pub(super) state: Mutex<State<T>>,
    /// Blocked senders wait here for room (Backpressure).
    pub(super) room: Condvar,
    /// `wait_resumed` waits here for `Flowing`.
    pub(super) resume: Condvar,
    /// Mirror of `state.flow == Paused`, for lock-free `Sender::state`.
    pub(super) paused: AtomicBool,
    /// Live `Sender` handles; the last one dropped closes the channel.
    pub(super) senders: AtomicUsize,
    /// Set by the first `subscribe`.
    pub(super) subscribed: AtomicBool,
    /// Live `Channel` handles; the last one dropped unsubscribed closes the channel.
    pub(super) publishers: AtomicUsize,
    demand: AtomicDemand,
    wip: Wip,
    flags: AtomicU8,
    hook: OnceLock<DropHook>,
    /// Drops seen without a hook, for rate-limited logging.
    unhooked: AtomicU64,
    consumer: Mutex<Option<Consumer<T>>>,
    capacity: usize,
    batch_size: usize,
}

impl<T: Send + 'static> Shared<T> {
    pub(super) fn new(policy: ChannelPolicy, marks: WaterMarks, queue: TimedQueue<T>) -> Self {
        let queue_capacity = queue.capacity();
        let batch_size = queue_capacity.min(BATCH);
        Shared {
            policy,
            marks,
            gauge: queue.gauge().clone(),
            state: Mutex::new(State {
                queue,
                open: true,
                end: None,
                flow: FlowState::Flowing,
                blocked_threads: 0,
                resume_threads: 0,
                send_wakers: Waiters::default(),
                resume_wakers: Waiters::default(),
                refused: 0,
            }),
            room: Condvar::new(),
            resume: Condvar::new(),
            paused: AtomicBool::new(false),
            senders: AtomicUsize::new(1),
            subscribed: AtomicBool::new(false),
            publishers: AtomicUsize::new(1),
            demand: AtomicDemand::new(),
            wip: Wip::new(),
            flags: AtomicU8::new(0),
            hook: OnceLock::new(),
            unhooked: AtomicU64::new(0),
            consumer: Mutex::new(None),
            capacity: queue_capacity,
            batch_size,
        }
    }

    pub(super) fn capacity(&self) -> usize {
        self.capacity
    }

    pub(super) fn batch_size(&self) -> usize {
        self.batch_size
    }

    // ---- the sender side --------------------------------------------------------

    /// Offer `item` under the lock, applying the policy. With `will_wait` (a waiting
    /// sender under `Backpressure`) a full queue answers `Full` without counting a
    /// rejection. Publishes this call's stats to the gauge (one batch = one call).
    pub(super) fn offer(
        &self,
        st: &mut State<T>,
        item: T,
        now: Instant,
        will_wait: bool,
    ) -> Offer<T> {
        if !st.open {
            return Offer::Closed(item);
        }
        let full = st.queue.is_full();
        let outcome = match self.policy {
            ChannelPolicy::Backpressure | ChannelPolicy::Reject if full => {
                if !(will_wait && self.policy == ChannelPolicy::Backpressure) {
                    st.queue.offered_elsewhere(1);
                    self.gauge.rejected(1);
                    st.refused += 1;
                    if st.refused.is_power_of_two() {
                        tracing::debug!(
                            target: "weir::channel",
                            refused = st.refused,
                            capacity = st.queue.capacity(),
                            "channel full: item handed back to its sender"
                        );
                    }
                }
                Offer::Full(item)
            }
            ChannelPolicy::DropNewest if full => {
                st.queue.offered_elsewhere(1);
                Offer::Dropped(DropReason::OverflowNewest, item)
            }
            ChannelPolicy::DropOldest => match st.queue.push_evicting(item, now) {
                Some(old) => Offer::Dropped(DropReason::OverflowOldest, old),
                None => Offer::Accepted,
            },
            ChannelPolicy::KeepLatest if full => match st.queue.replace_newest(item, now) {
                Some(old) => Offer::Dropped(DropReason::ReplacedByLatest, old),
                None => Offer::Accepted,
            },
            _ => match st.queue.push(item, now) {
                Ok(()) => Offer::Accepted,
                Err(item) => Offer::Full(item),
            },
        };
        if let Offer::Dropped(reason, _) = &outcome {
            self.gauge.dropped(*reason, 1);
        }
        if st.flow == FlowState::Flowing && st.queue.len() >= self.marks.high() {
            st.flow = FlowState::Paused;
            // Relaxed: advisory mirror; the authoritative state is under the lock.
            self.paused.store(true, Ordering::Relaxed);
            self.gauge.paused();
            tracing::debug!(
                target: "weir::channel",
                depth = st.queue.len(),
                high = self.marks.high(),
                low = self.marks.low(),
                "channel paused: depth reached the high water mark"
            );
        }
        st.queue.flush(now);
        outcome
    }

    /// Settle an offer after the lock is released: report a drop, run the drain loop
    /// if the subscriber has demand, and turn the outcome into the sender's answer.
    pub(super) fn settle(&self, outcome: Offer<T>) -> Result<(), super::TrySendError<T>> {
        match outcome {
            Offer::Accepted => {
                self.kick();
                Ok(())
            }
            Offer::Dropped(reason, item) => {
                self.report_drop(reason, item);
                self.kick();
                Ok(())
            }
            Offer::Full(item) => Err(super::TrySendError::Full(item)),
            Offer::Closed(item) => Err(super::TrySendError::Closed(item)),
        }
    }

    /// Run the drain loop if there is demand to serve (see the file docs for why
    /// skipping it otherwise loses nothing).
    fn kick(&self) {
        if self.demand.get() > 0 {
            self.wip.drain(|| self.pass());
        }
    }

    fn report_drop(&self, reason: DropReason, item: T) {
        match self.hook.get() {
            Some(hook) => hook.report(STAGE, reason, item),
            None => self.unhooked(reason, 1),
        }
    }

    fn unhooked(&self, reason: DropReason, n: u64) {
        // Relaxed: a statistic for rate-limited logging only.
        let before = self.unhooked.fetch_add(n, Ordering::Relaxed);
        let after = before + n;
        if (before + 1..=after).any(u64::is_power_of_two) {
            tracing::debug!(
                target: "weir::channel",
                ?reason,
                dropped = after,
                "channel dropped items without a drop hook (add PublisherExt::on_dropped to see them)"
            );
        }
    }

    /// Stop accepting items and deliver `end` after the queued ones. Returns false if
    /// the channel was already closed.
    pub(super) fn close(&self, end: Result<(), Error>) -> bool {
        let wake = {
            let mut st = lock(&self.state);
            if !st.open {
                return false;
            }
            st.open = false;
            st.end = Some(end);
            self.wake_all(&mut st)
        };
        wake.run();
        self.wip.drain(|| self.pass());
        true
    }

    /// Wake every waiter (the channel closed): they see `Closed`.
    fn wake_all(&self, st: &mut State<T>) -> Wake {
        let mut wakers = Vec::new();
        st.send_wakers.take_into(&mut wakers);
        st.resume_wakers.take_into(&mut wakers);
        self.room.notify_all();
        self.resume.notify_all();
        Wake(wakers)
    }

    /// Items left the queue: flow again at the low mark, wake senders waiting for room.
    fn after_removal(&self, st: &mut State<T>) -> Wake {
        let mut wakers = Vec::new();
        if st.flow == FlowState::Paused && st.queue.len() <= self.marks.low() {
            st.flow = FlowState::Flowing;
            // Relaxed: advisory mirror; see `offer`.
            self.paused.store(false, Ordering::Relaxed);
            tracing::debug!(
                target: "weir::channel",
                depth = st.queue.len(),
                low = self.marks.low(),
                "channel flowing: depth fell to the low water mark"
            );
            st.resume_wakers.take_into(&mut wakers);
            if st.resume_threads > 0 {
                self.resume.notify_all();
            }
        }
        if st.blocked_threads > 0 {
            self.room.notify_all();
        }
        st.send_wakers.take_into(&mut wakers);
        Wake(wakers)
    }

    // ---- the subscriber side ----------------------------------------------------

    /// Attach the (only) subscriber. `on_subscribe` runs before the subscriber is
    /// stored, so no pass can deliver to it first (rule 1.9); a request made inside
    /// `on_subscribe` is kept in the demand and served by the drain that follows.
    pub(super) fn attach<S>(self: &Arc<Self>, mut subscriber: S)
    where
        S: Subscriber<T> + Send + 'static,
    {
        if let Some(hook) = subscriber.drop_hook() {
            // The first subscribe is the only one that gets here, so the cell is empty.
            let _ = self.hook.set(hook);
        }
        let subscription = crate::Subscription::new(Arc::new(Link(self.clone())));
        if !crate::guard::on_subscribe(&mut subscriber, subscription) {
            self.flags.fetch_or(CANCELLED, Ordering::Relaxed);
            self.shut();
            return;
        }
        *lock(&self.consumer) = Some(Consumer {
            sink: Box::new(subscriber),
            batch: Vec::with_capacity(self.batch_size),
            expired: Vec::new(),
        });
        self.wip.drain(|| self.pass());
    }

    /// One drain pass; runs only on the `Wip` owner.
    fn pass(&self) {
        let mut slot = lock(&self.consumer);
        let Some(consumer) = slot.as_mut() else {
            return;
        };
        let over = match catch(|| self.deliver(consumer)) {
            Ok(Pass::Idle) => false,
            Ok(Pass::Over) => true,
            Err(_) => {
                tracing::error!("subscriber panicked (rule 2.13); treated as cancelled");
                true
            }
        };
        if over {
            // Terminated or cancelled: drop the subscriber (rule 3.13) outside the
            // lock, then close for the senders and release anything still queued.
            let gone = slot.take();
            drop(slot);
            drop(gone);
            self.shut();
        }
    }

    /// Deliver batches while there is demand; see the module docs.
    fn deliver(&self, c: &mut Consumer<T>) -> Pass {
        loop {
            // Relaxed: flags are set before the setter's `Wip::enter` (Release), which
            // this owner Acquired before the pass (drain.rs); a flag set re-entrantly
            // is our own write.
            let flags = self.flags.load(Ordering::Relaxed);
            if flags & CANCELLED != 0 {
                return Pass::Over;
            }
            if flags & BAD_REQUEST != 0 {
                c.sink.error(demand::validate(0).unwrap_err());
                return Pass::Over;
            }
            let wanted = self.demand.get();
            let budget = usize::try_from(wanted)
                .unwrap_or(usize::MAX)
                .min(self.batch_size);
            let now = self.gauge.now();
            let (taken, end, wake) = {
                let mut st = lock(&self.state);
                let taken = if budget > 0 {
                    st.queue
                        .pop_batch(now, budget, &mut c.batch, &mut c.expired)
                } else {
                    0
                };
                let end = if st.queue.is_empty() {
                    st.end.take()
                } else {
                    None
                };
                let wake = if taken > 0 {
                    st.queue.flush(now);
                    Some(self.after_removal(&mut st))
                } else {
                    None
                };
                (taken, end, wake)
            };
            if let Some(wake) = wake {
                wake.run();
            }
            self.report_expired(&mut c.expired);
            if c.expired.capacity() > self.batch_size {
                // An expiry storm took many items out at once: give the memory back.
                c.expired.shrink_to(self.batch_size);
            }
            let delivered = c.batch.len() as u64;
            if delivered > 0 {
                let credit = c.sink.next_batch(&mut c.batch.drain(..));
                self.demand.produced(delivered);
                if credit > 0 {
                    self.demand.add(credit);
                }
            }
            if let Some(end) = end {
                match end {
                    Ok(()) => c.sink.complete(),
                    Err(error) => c.sink.error(error),
                }
                return Pass::Over;
            }
            if taken < budget || budget == 0 {
                return Pass::Idle;
            }
        }
    }

    fn report_expired(&self, expired: &mut Vec<T>) {
        if expired.is_empty() {
            return;
        }
        let n = expired.len() as u64;
        match self.hook.get() {
            Some(hook) => {
                hook.drops().add(DropReason::Expired, n);
                for item in expired.drain(..) {
                    hook.hand_over(STAGE, DropReason::Expired, item);
                }
            }
            None => {
                expired.clear();
                self.unhooked(DropReason::Expired, n);
            }
        }
    }

    /// The subscription is over (terminated, cancelled, or its subscriber broke):
    /// close for the senders, wake every waiter, and release what is still queued
    /// (outside the lock: an item's `Drop` is user code).
    pub(super) fn shut(&self) {
        let (released, wake) = {
            let mut st = lock(&self.state);
            st.open = false;
            st.end = None;
            let released: Vec<T> = st.queue.take_all().collect();
            let now = self.gauge.now();
            st.queue.flush(now);
            if st.flow == FlowState::Paused {
                st.flow = FlowState::Flowing;
                // Relaxed: advisory mirror; see `offer`.
                self.paused.store(false, Ordering::Relaxed);
            }
            (released, self.wake_all(&mut st))
        };
        wake.run();
        drop(released);
    }
}

/// The subscription handed to the subscriber.
struct Link<T>(Arc<Shared<T>>);

impl<T: Send + 'static> RawSubscription for Link<T> {
    fn request(&self, n: u64) {
        let shared = &self.0;
        if shared.flags.load(Ordering::Relaxed) & CANCELLED != 0 {
            return;
        }
        match demand::validate(n) {
            Ok(n) => {
                shared.demand.add(n);
            }
            Err(_) => {
                // Relaxed: published by the `Wip::enter` below (see `deliver`).
                shared.flags.fetch_or(BAD_REQUEST, Ordering::Relaxed);
            }
        }
        shared.wip.drain(|| shared.pass());
    }

    fn cancel(&self) {
        let shared = &self.0;
        // Relaxed: published by the `Wip::enter` below (see `deliver`).
        shared.flags.fetch_or(CANCELLED, Ordering::Relaxed);
        shared.wip.drain(|| shared.pass());
    }
}

/// Loom models of the channel: `RUSTFLAGS="--cfg weir_loom" cargo test --release --lib loom`.
#[cfg(all(test, weir_loom))]
mod loom_tests {
    use std::sync::Mutex as StdMutex;

    use loom::thread;

    use super::super::{channel, ChannelPolicy, TrySendError};
    use super::Arc;
    use crate::{Error, Publisher, Subscriber, Subscription};

    /// Records what it receives; the subscription is handed out for the model to drive.
    struct Recorder {
        items: Arc<StdMutex<Vec<u32>>>,
        subscription: Arc<StdMutex<Option<Subscription>>>,
    }

    impl Subscriber<u32> for Recorder {
        fn on_subscribe(&mut self, subscription: Subscription) {
            *self.subscription.lock().unwrap() = Some(subscription);
        }
        fn on_next(&mut self, item: u32) {
            self.items.lock().unwrap().push(item);
        }
        fn on_error(&mut self, error: Error) {
            panic!("unexpected error {error}");
        }
        fn on_complete(&mut self) {}
    }

    /// A sender that skips the drain loop when it sees no demand, racing requests:
    /// whatever the interleaving, both items are delivered once both requests and both
    /// sends have returned (no item stranded with demand outstanding), in order.
    #[test]
    fn loom_sends_racing_requests_strand_nothing() {
        loom::model(|| {
            let (tx, rx) = channel::<u32>(2, ChannelPolicy::Backpressure);
            let items = Arc::new(StdMutex::new(Vec::new()));
            let slot = Arc::new(StdMutex::new(None));
            rx.subscribe(Recorder {
                items: items.clone(),
                subscription: slot.clone(),
            });
            let subscription = slot.lock().unwrap().clone().unwrap();
            let producer = thread::spawn(move || {
                tx.try_send(1).unwrap();
                tx.try_send(2).unwrap();
                tx // kept alive: closing would run the drain loop and hide a stranded item
            });
            subscription.request(1);
            subscription.request(1);
            let tx = producer.join().unwrap();
            assert_eq!(*items.lock().unwrap(), [1, 2]);
            drop(tx);
        });
    }

    /// Cancel racing a send: the item is either queued (and then released by the
    /// cancel) or handed back as `Closed`; after the cancel every send is `Closed`.
    #[test]
    fn loom_cancel_racing_a_send_closes_the_channel() {
        loom::model(|| {
            let (tx, rx) = channel::<u32>(2, ChannelPolicy::Backpressure);
            let items = Arc::new(StdMutex::new(Vec::new()));
            let slot = Arc::new(StdMutex::new(None));
            rx.subscribe(Recorder {
                items: items.clone(),
                subscription: slot.clone(),
            });
            let subscription = slot.lock().unwrap().clone().unwrap();
            let producer = thread::spawn(move || {
                let first = tx.try_send(1);
                assert!(matches!(first, Ok(()) | Err(TrySendError::Closed(1))));
                tx
            });
            subscription.cancel();
            let tx = producer.join().unwrap();
            assert_eq!(tx.try_send(2), Err(TrySendError::Closed(2)));
            assert!(items.lock().unwrap().is_empty(), "nothing was requested");
        });
    }
}
