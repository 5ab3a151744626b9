//! The state a channel's senders and its subscriber share ([`Chan`], the channel's
//! stage on the engine room's signal core), the offer path (one per policy) and the
//! drain pass. The algorithm is described in the [module docs](super); this file only
//! adds the locking details:
//!
//! * `state` (queue, open/closed, pending end, flow state, waiters) is locked by
//!   senders for one offer and by the drain owner for one batch. Nobody calls user
//!   code while holding it: dropped and expired items go to the drop hook, wakers are
//!   woken and the subscriber is called only after it is released, and the `tracing`
//!   events decided under it ([`Notice`]) are emitted once it is let go: a `tracing`
//!   layer is user code too, and may call back into the channel (send a log record
//!   into it, read its monitor).
//! * The subscriber and the pass's batch buffers live in the signal core's slot, which
//!   only the loop's owner locks.
//! * Demand is the core's `AtomicDemand`, read with `get` and settled (after each
//!   batch, by the core's `deliver`), so it never reads 0 while undelivered demand
//!   exists. That is what
//!   lets a sender skip the drain loop when it sees no demand: if it reads 0 after its
//!   push, any request not yet seen is ordered after the push by the state lock, and
//!   the pass that request triggers finds the item.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::task::Waker;
use std::time::Instant;

use super::admission::{Admission, Assessed, Refusal, Rungs, Step};
use super::marks::{FlowState, WaterMarks};
use super::ChannelPolicy;
use crate::loom::fence;
use crate::metrics::{crossed_power_of_two, drop_summary, DropHook, QueueGauge, Sweep};
use crate::queue::claim::{ClaimRing, Pop, Reader, Refused};
use crate::queue::timed::TimedQueue;
use crate::runtime::backoff::Backoff;
use crate::spec::{Pull, Sealed};
use crate::stage::{Core, Cx, Pass, Stage};
use crate::{DropReason, Error, Subscriber};

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

/// Items handed over directly after which the loop's owner reads the clock and
/// flushes, to stamp their counts ([`Link::hand_off`]).
const UNSTAMPED: usize = 64;

/// Hand-offs whose demand the owner settles at once ([`Buffers::unsettled`]).
const UNSETTLED: u64 = 64;

/// Largest batch one drain step takes out of the queue (and the size of the pass's
/// reusable buffer, for channels at least this large).
pub(super) const BATCH: usize = 256;

/// Lock a mutex, recovering from poisoning: no user code runs under these locks, so a
/// poisoned lock can only come from a bug in this module's own arithmetic.
fn lock<S>(m: &Mutex<S>) -> MutexGuard<'_, S> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The state lock, held. On release (and before a wait on a condition variable) it
/// publishes whether the channel is *vacant* (open, its queue empty, no admission
/// rung on: see [`Chan::vacant`]), so that a sender can tell without the lock whether
/// its item may skip the queue. The flag is written only under the lock, so its
/// order of writes is the order of the lock's holders, each writing the state it
/// leaves behind.
pub(super) struct StateGuard<'a, T> {
    chan: &'a Chan<T>,
    guard: Option<MutexGuard<'a, ChannelState<T>>>,
}

impl<T> StateGuard<'_, T> {
    fn publish(&self) {
        if let Some(st) = &self.guard {
            let vacant = st.open && st.queue.is_empty() && st.rungs == Rungs::default();
            // Relaxed: a hint read by the direct hand-off, which re-reads it as the
            // drain loop's owner; see `Chan::vacant` for why a stale read is safe.
            self.chan.vacant.store(vacant, Ordering::Relaxed);
        }
    }

    /// Wait on `condvar` (which releases the lock) after publishing the state. With
    /// events to emit, it lets the lock go, emits them and takes the lock again
    /// instead of waiting (a spurious wake-up: every caller waits in a loop that
    /// checks its condition again), so that no event waits for a wake-up.
    pub(super) fn wait(mut self, condvar: &Condvar) -> Self {
        self.publish();
        if self.guard.as_ref().is_some_and(|st| !st.notices.is_empty()) {
            let chan = self.chan;
            drop(self);
            return chan.lock_state();
        }
        let guard = self.guard.take().expect("held until dropped");
        let guard = condvar
            .wait(guard)
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        StateGuard {
            chan: self.chan,
            guard: Some(guard),
        }
    }
}

impl<T> std::ops::Deref for StateGuard<'_, T> {
    type Target = ChannelState<T>;
    fn deref(&self) -> &ChannelState<T> {
        self.guard.as_ref().expect("held until dropped")
    }
}

impl<T> std::ops::DerefMut for StateGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut ChannelState<T> {
        self.guard.as_mut().expect("held until dropped")
    }
}

impl<T> Drop for StateGuard<'_, T> {
    fn drop(&mut self) {
        self.publish();
        let Some(mut st) = self.guard.take() else {
            return;
        };
        if st.notices.is_empty() {
            return;
        }
        let notices = std::mem::take(&mut st.notices);
        drop(st);
        for notice in notices {
            self.chan.announce(notice);
        }
    }
}

/// A `tracing` event decided under the state lock and emitted once the lock is let
/// go ([`StateGuard`]'s `Drop`): a layer that calls back into the channel must not
/// find the lock held by its own thread. Two threads' events may therefore be
/// emitted in either order; a flow change carries its number (`change`) for that.
#[derive(Clone, Copy, Debug)]
pub(super) enum Notice {
    /// The flow state went `from` → `to` at `depth`: the `change`-th change; `loud`
    /// when the pause or the shed rung turned on or off.
    Flow {
        from: FlowState,
        to: FlowState,
        loud: bool,
        depth: usize,
        change: u64,
    },
    /// The `refused`-th item was handed back (a power of two) by a full queue.
    Refused { refused: u64, capacity: usize },
    /// Closed in flow state `from` (now reset), `depth` items released.
    Closed { from: FlowState, depth: usize },
}

/// Async tasks waiting for a condition, each under a key its future remembers, so a
/// re-polled future replaces its waker instead of adding one (bounded by the number
/// of live futures) and a dropped future removes itself.
#[derive(Default)]
pub(crate) struct Waiters {
    next_key: u64,
    list: Vec<(u64, Waker)>,
}

impl Waiters {
    pub(crate) fn register(&mut self, key: &mut Option<u64>, waker: &Waker) {
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

    pub(crate) fn remove(&mut self, key: Option<u64>) {
        if let Some(k) = key {
            self.list.retain(|(id, _)| *id != k);
        }
    }

    pub(crate) fn take_into(&mut self, out: &mut Vec<Waker>) {
        out.extend(self.list.drain(..).map(|(_, w)| w));
    }
}

/// Everything behind the state lock.
pub(super) struct ChannelState<T> {
    pub(super) queue: TimedQueue<T>,
    /// Senders may still send (false after close, fail, cancel or the end).
    pub(super) open: bool,
    /// The end to deliver once the queue is empty.
    end: Option<Result<(), Error>>,
    /// The rungs of the admission ladder that are on (pause included).
    pub(super) rungs: Rungs,
    /// Threads in `send_blocking` waiting for room.
    pub(super) blocked_threads: usize,
    /// Threads in `wait_resumed`.
    pub(super) resume_threads: usize,
    pub(super) send_wakers: Waiters,
    pub(super) resume_wakers: Waiters,
    /// Items refused so far, for rate-limited logging.
    refused: u64,
    /// How much of `Chan::passed` the queue's counts already hold.
    passed_seen: u64,
    /// Changes of the flow state so far (numbering their events).
    changes: u64,
    /// Events to emit once the lock is let go ([`Notice`]).
    notices: smallvec::SmallVec<[Notice; 2]>,
}

/// What an offer did, decided under the state lock and settled after it.
pub(super) enum Offer<T> {
    Accepted,
    /// Accepted, and this item was dropped to make room (or was the item itself).
    Dropped(DropReason, T),
    /// Full: refused (counted as rejected) or, for a waiting sender, to wait.
    Full(T),
    /// Refused by admission (shed or late), whatever the room; counted as rejected.
    Refused(Refusal, T),
    Closed(T),
}

impl<T> Offer<T> {
    /// The sender's side of the outcome: taken (with the item the policy dropped to
    /// make room, if any, to report), or refused with the item handed back.
    fn into_answer(self) -> Result<Option<(DropReason, T)>, super::TrySendError<T>> {
        match self {
            Offer::Accepted => Ok(None),
            Offer::Dropped(reason, item) => Ok(Some((reason, item))),
            Offer::Full(item) => Err(super::TrySendError::Full(item)),
            Offer::Refused(Refusal::Shed, item) => Err(super::TrySendError::Shed(item)),
            Offer::Refused(Refusal::Late, item) => Err(super::TrySendError::Late(item)),
            Offer::Closed(item) => Err(super::TrySendError::Closed(item)),
        }
    }
}

/// An offer's outcome, and what it did first: items past the maximum age taken out
/// (the queue may be unread), with the wake-ups their room brings. Settled after the
/// lock is let go ([`Link::settle`]).
pub(super) struct Offered<T> {
    pub(super) outcome: Offer<T>,
    pub(super) swept: Vec<(DropReason, T)>,
    pub(super) wake: Option<Wake>,
}

/// A waiting sender's item that its first try did not place (the sender keeps its
/// admission record), with that try's clock reading when it is still fresh
/// ([`Link::offer_first`]).
pub(super) type Unsent<T> = (T, Option<Instant>);

/// A sender's item offered inside a drain pass ([`Link::offer_now`]): taken out of
/// `entry` under the state lock, at the sender's clock reading `now`, the outcome left
/// in `answer`.
struct SendersOffer<'a, T> {
    entry: &'a mut Option<(T, Assessed)>,
    now: Instant,
    will_wait: bool,
    answer: &'a mut Option<Offered<T>>,
}

/// Wakers collected under the lock, woken after it.
#[must_use]
pub(super) struct Wake(Vec<Waker>);

impl Wake {
    pub(super) fn run(self) {
        crate::guard::wake_all(self.0);
    }
}

/// The pass's reusable buffers, owned by the drain loop.
pub(super) struct Buffers<T> {
    batch: VecDeque<T>,
    /// Items that waited too long, with the reason, on their way to the drop hook.
    expired: Vec<(DropReason, T)>,
    /// Items handed over directly since the last flush ([`Link::hand_off`]).
    unstamped: usize,
    /// The claim ring's reading end, in lane mode ([`Chan::lane`]).
    reader: Option<Reader<T>>,
    /// Items handed over directly ([`Link::hand_off_item`]) whose demand is not yet
    /// settled: the core's demand still counts them, so every owner's look at the
    /// demand subtracts them ([`Buffers::demand`]) and a pass settles them first.
    /// Settled once [`UNSETTLED`] accumulate, when a batch returns credit, and at
    /// the start of every pass: one read-modify-write of the demand per run of
    /// hand-offs instead of one per item.
    unsettled: u64,
}

impl<T> Buffers<T> {
    /// The subscriber's demand as the loop's owner sees it: the core's, less the
    /// hand-offs not yet settled.
    fn demand(&self, cx: &Cx<'_>) -> u64 {
        cx.demand().get().saturating_sub(self.unsettled)
    }

    /// One item handed over directly, whose batch returned `credit`: counted as
    /// unsettled, and settled with the rest once [`UNSETTLED`] accumulate or the
    /// batch returned credit.
    fn handed_one(&mut self, cx: &Cx<'_>, credit: u64) {
        self.unsettled += 1;
        if credit > 0 || self.unsettled >= UNSETTLED {
            cx.demand()
                .settle(std::mem::take(&mut self.unsettled), credit);
        }
    }

    /// Settle the hand-offs counted in [`unsettled`](Self::unsettled).
    fn settle(&mut self, cx: &Cx<'_>) {
        if self.unsettled > 0 {
            cx.demand().settle(std::mem::take(&mut self.unsettled), 0);
        }
    }
}

/// The one subscriber, with its type erased: senders exist before it does, so the
/// core's type cannot name it. Batches stay batches (`on_next_batch` through a
/// `&mut dyn Iterator`).
pub(super) struct ErasedSink<T>(Box<dyn Sink<T>>);

/// Object-safe view of a `Subscriber` that keeps batch delivery.
trait Sink<T>: Send {
    fn subscribed(&mut self, subscription: crate::Subscription);
    fn stops_batches_itself(&self) -> bool;
    fn next_batch(&mut self, items: &mut dyn Iterator<Item = T>) -> u64;
    fn next_queue(&mut self, queue: &mut VecDeque<T>) -> (u64, u64);
    fn next_one(&mut self, item: T) -> u64;
    fn hint_one(&mut self);
    fn error(&mut self, error: Error);
    fn complete(&mut self);
}

impl<T, S: Subscriber<T> + Send> Sink<T> for S {
    fn subscribed(&mut self, subscription: crate::Subscription) {
        self.on_subscribe(subscription)
    }
    fn stops_batches_itself(&self) -> bool {
        Subscriber::stops_batches_itself(self)
    }
    fn next_batch(&mut self, items: &mut dyn Iterator<Item = T>) -> u64 {
        self.on_next_batch(items)
    }
    fn next_queue(&mut self, queue: &mut VecDeque<T>) -> (u64, u64) {
        self.on_next_queue(queue, Sealed::NEW)
    }
    fn next_one(&mut self, item: T) -> u64 {
        self.handed_one(Sealed::NEW);
        self.on_next_batch(std::iter::once(item))
    }
    fn hint_one(&mut self) {
        self.handed_one(Sealed::NEW);
    }
    fn error(&mut self, error: Error) {
        self.on_error(error)
    }
    fn complete(&mut self) {
        self.on_complete()
    }
}

impl<T> Subscriber<T> for ErasedSink<T> {
    fn on_subscribe(&mut self, subscription: crate::Subscription) {
        self.0.subscribed(subscription)
    }
    fn stops_batches_itself(&self) -> bool {
        self.0.stops_batches_itself()
    }
    fn on_next(&mut self, item: T) {
        let _credit = self.0.next_one(item);
    }
    fn on_next_batch<I: Iterator<Item = T>>(&mut self, mut items: I) -> u64 {
        self.0.next_batch(&mut items)
    }
    /// The whole queue behind one virtual call: the subscriber's loop over it is
    /// monomorphised (a `dyn Iterator` would cost a virtual call per item).
    fn on_next_queue(&mut self, queue: &mut VecDeque<T>, _: Sealed) -> (u64, u64) {
        self.0.next_queue(queue)
    }
    fn handed_one(&mut self, _: Sealed) {
        self.0.hint_one();
    }
    fn on_error(&mut self, error: Error) {
        self.0.error(error)
    }
    fn on_complete(&mut self) {
        self.0.complete()
    }
}

/// A channel: its stage on the signal core, which senders and the publisher share.
pub(super) type Link<T> = Core<Chan<T>, ErasedSink<T>>;

/// The channel's shared state (the stage).
pub(super) struct Chan<T> {
    pub(super) policy: ChannelPolicy,
    pub(super) marks: WaterMarks,
    pub(super) gauge: Arc<QueueGauge>,
    pub(super) state: Mutex<ChannelState<T>>,
    /// Blocked senders wait here for room (Backpressure).
    pub(super) room: Condvar,
    /// `wait_resumed` waits here until the pause rung is off.
    pub(super) resume: Condvar,
    /// The admission ladder's rungs and deadline rules.
    pub(super) admission: Admission<T>,
    /// Mirror of `state.rungs`, for lock-free `Sender::state`.
    pub(super) rungs: AtomicU8,
    /// Live `Sender` handles; the last one dropped closes the channel.
    pub(super) senders: AtomicUsize,
    /// Set by the first `subscribe`.
    pub(super) subscribed: AtomicBool,
    /// Set once the subscriber is attached, by the thread that attaches it while it
    /// owns the drain loop: until then a close or a sweep does not enter the loop
    /// (see [`Link::signal_attached`]).
    attached: AtomicBool,
    /// Open, the queue empty, no rung on, as the last holder of the state lock left
    /// it ([`StateGuard`]): a sender's item may skip the queue ([`Link::hand_off`]).
    vacant: AtomicBool,
    /// Items handed straight to the subscriber ([`Link::hand_off`]) so far, written
    /// only by the drain loop's owner; folded into the queue's counts at its next
    /// flush ([`Chan::flush`]). On a block of its own: in lane mode the owner (a
    /// watcher on another thread) writes it every pass, while senders read the
    /// flags around it for every item.
    passed: crate::loom::Padded<AtomicU64>,
    /// Where drops are reported: the hook given to the builder, or else the
    /// subscriber's (set when it attaches).
    hook: OnceLock<DropHook>,
    /// Drops so far by reason, hook or not, and the totals the last summary
    /// reported: the rate-limited drop summary's running totals
    /// ([`count_drops`](Self::count_drops)). Statistics for logging only, so std's
    /// atomics even in loom models.
    dropped: [std::sync::atomic::AtomicU64; DropReason::COUNT],
    reported: [std::sync::atomic::AtomicU64; DropReason::COUNT],
    capacity: usize,
    batch_size: usize,
    /// Lane mode: a claim ring of one batch that senders fill while a downstream
    /// drain on another thread watches it ([`Pull`]), and the ring's reader until
    /// the subscriber's buffers take it. See [`Link::claim`].
    lane: Option<crate::loom::Arc<ClaimRing<T>>>,
    lane_reader: std::sync::Mutex<Option<Reader<T>>>,
    /// How many downstream drains watch the lane ([`Pull::watch`]: one behind a
    /// `publish_on`, one per watching subscriber behind a hub): read by senders for
    /// every item, written when a watcher starts or stops.
    watchers: crate::loom::Padded<AtomicUsize>,
}

/// What the state guard needs of the channel, for any item type.
impl<T> Chan<T> {
    /// Lock the state (see [`StateGuard`]).
    pub(super) fn lock_state(&self) -> StateGuard<'_, T> {
        StateGuard {
            chan: self,
            guard: Some(lock(&self.state)),
        }
    }

    /// Emit a [`Notice`] (target `weir::channel`), without the state lock. A flow
    /// change is `info` when the pause or the shed rung turned on or off (rare with
    /// marks apart, and what an operator wants to see), `debug` when only the reduce
    /// rung moved; a full queue's refusals (at powers of two) and the reset of the
    /// flow state at the close are `debug`. Out of line: events are rare.
    #[cold]
    #[inline(never)]
    fn announce(&self, notice: Notice) {
        let capacity = self.capacity;
        match notice {
            Notice::Flow {
                from,
                to,
                loud,
                depth,
                change,
            } => {
                // One event, at a level fixed per call site (as `tracing` wants).
                macro_rules! flow_changed {
                    ($level:ident) => {
                        tracing::$level!(
                            target: "weir::channel",
                            %from,
                            %to,
                            depth,
                            capacity,
                            change,
                            "channel flow state changed"
                        )
                    };
                }
                if loud {
                    flow_changed!(info);
                } else {
                    flow_changed!(debug);
                }
            }
            Notice::Refused { refused, capacity } => tracing::debug!(
                target: "weir::channel",
                refused,
                capacity,
                "channel full: item handed back to its sender"
            ),
            // Not a flow change producers act on (they now get `Closed`): debug.
            Notice::Closed { from, depth } => tracing::debug!(
                target: "weir::channel",
                %from,
                depth,
                capacity,
                "channel closed; its flow state is reset"
            ),
        }
    }
}

impl<T: Send + 'static> Chan<T> {
    pub(super) fn new(
        policy: ChannelPolicy,
        marks: WaterMarks,
        queue: TimedQueue<T>,
        hook: Option<DropHook>,
        admission: Admission<T>,
        lane: bool,
    ) -> Self {
        let queue_capacity = queue.capacity();
        let batch_size = queue_capacity.min(BATCH);
        let (lane, lane_reader) = match lane {
            true => {
                let (ring, reader) = ClaimRing::new(batch_size);
                (Some(ring), Some(reader))
            }
            false => (None, None),
        };
        let cell = OnceLock::new();
        if let Some(hook) = hook {
            let _ = cell.set(hook);
        }
        Chan {
            policy,
            marks,
            gauge: queue.gauge().clone(),
            state: Mutex::new(ChannelState {
                queue,
                open: true,
                end: None,
                rungs: Rungs::default(),
                blocked_threads: 0,
                resume_threads: 0,
                send_wakers: Waiters::default(),
                resume_wakers: Waiters::default(),
                refused: 0,
                passed_seen: 0,
                changes: 0,
                notices: smallvec::SmallVec::new(),
            }),
            room: Condvar::new(),
            resume: Condvar::new(),
            admission,
            rungs: AtomicU8::new(0),
            senders: AtomicUsize::new(1),
            subscribed: AtomicBool::new(false),
            attached: AtomicBool::new(false),
            vacant: AtomicBool::new(true),
            passed: crate::loom::Padded::new(AtomicU64::new(0)),
            hook: cell,
            dropped: Default::default(),
            reported: Default::default(),
            capacity: queue_capacity,
            batch_size,
            lane,
            lane_reader: std::sync::Mutex::new(lane_reader),
            watchers: crate::loom::Padded::new(AtomicUsize::new(0)),
        }
    }

    pub(super) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Lock the state if nobody holds it.
    fn try_lock_state(&self) -> Option<StateGuard<'_, T>> {
        let guard = self.state.try_lock().ok()?;
        Some(StateGuard {
            chan: self,
            guard: Some(guard),
        })
    }

    /// Whether the channel was vacant (open, its queue empty, no rung on) when the
    /// state lock was last let go. A hint: the direct hand-off reads it again as the
    /// drain loop's owner, and only the owner takes items out of the queue, so a
    /// queue the flag calls empty holds nothing a previous pass took out and has not
    /// delivered. A sender reads its own last write, or a later one: so its previous
    /// item, if queued, is seen (unless a pass took it out, and so delivered it, since).
    fn vacant(&self) -> bool {
        // Relaxed: see above; the flag guards no other memory.
        self.vacant.load(Ordering::Relaxed)
    }

    /// Whether a downstream drain watches the lane ([`Chan::watchers`]), read with
    /// `order` (see each caller).
    #[inline]
    fn pulled(&self, order: Ordering) -> bool {
        self.watchers.load(order) > 0
    }

    /// Publish the queue's statistics at `now` ([`TimedQueue::flush`]), the items
    /// handed over directly since the last flush counted as passing through it.
    fn flush(&self, st: &mut ChannelState<T>, now: Instant) {
        // Relaxed: a statistic, written only by the drain loop's owner; a stale read
        // leaves the rest for the next flush.
        let passed = self.passed.load(Ordering::Relaxed);
        if passed > st.passed_seen {
            st.queue.passed_through(passed - st.passed_seen);
            st.passed_seen = passed;
        }
        st.queue.flush(now);
    }

    pub(super) fn batch_size(&self) -> usize {
        self.batch_size
    }

    // ---- the sender side --------------------------------------------------------

    /// Offer `item` under the lock, applying the policy. With `will_wait` (a waiting
    /// sender under `Backpressure`) a full queue answers `Full` without counting a
    /// rejection. Publishes this call's stats to the gauge.
    pub(super) fn offer(
        &self,
        st: &mut ChannelState<T>,
        offered: (T, Assessed),
        now: Instant,
        will_wait: bool,
    ) -> Offered<T> {
        let outcome = self.offer_unflushed(st, offered, now, will_wait);
        self.flush(st, now);
        outcome
    }

    /// `n` items handed straight to the subscriber by the loop's owner (`c` is its):
    /// counted as passing through the queue, before the subscriber runs (as a dequeue
    /// is: an item it panics on was taken too).
    fn passed_over(&self, c: &mut Buffers<T>, n: usize) {
        c.unstamped += n;
        // Relaxed: written only by the loop's owner (owners are ordered by the
        // `Wip`); read by flushes as a statistic.
        let passed = self.passed.load(Ordering::Relaxed);
        self.passed.store(passed + n as u64, Ordering::Relaxed);
    }

    /// Once [`UNSTAMPED`] items were handed over since the last clock reading, read
    /// the clock and flush (which folds them into the queue's counts at that instant).
    fn stamp_if_due(&self, c: &mut Buffers<T>) {
        if c.unstamped >= UNSTAMPED {
            let now = self.gauge.now();
            let mut st = self.lock_state();
            self.flush(&mut st, now);
            c.unstamped = 0;
        }
    }

    /// [`offer`](Self::offer) without publishing the stats: a batch offer calls
    /// `flush` once after its last item.
    pub(super) fn offer_unflushed(
        &self,
        st: &mut ChannelState<T>,
        (item, assessed): (T, Assessed),
        now: Instant,
        will_wait: bool,
    ) -> Offered<T> {
        if !st.open {
            return Offered {
                outcome: Offer::Closed(item),
                swept: Vec::new(),
                wake: None,
            };
        }
        // Items that died in the queue go first: the room is the living's.
        let mut swept = Vec::new();
        let wake = (st.queue.expire_stale(now, &mut swept) > 0).then(|| self.after_removal(st));
        if let Some(refusal) = self
            .admission
            .refuses(assessed, st.rungs.has(Rungs::SHED), now)
        {
            st.queue.offered_elsewhere(1);
            self.gauge.rejected(1);
            match refusal {
                Refusal::Shed => self.gauge.shed(1),
                Refusal::Late => self.gauge.late(1),
            }
            return Offered {
                outcome: Offer::Refused(refusal, item),
                swept,
                wake,
            };
        }
        let full = st.queue.is_full();
        let deadline = assessed.deadline;
        let outcome = match self.policy {
            ChannelPolicy::Backpressure | ChannelPolicy::Reject if full => {
                if !(will_wait && self.policy == ChannelPolicy::Backpressure) {
                    st.queue.offered_elsewhere(1);
                    self.gauge.rejected(1);
                    st.refused += 1;
                    if st.refused.is_power_of_two() {
                        let notice = Notice::Refused {
                            refused: st.refused,
                            capacity: st.queue.capacity(),
                        };
                        st.notices.push(notice);
                    }
                }
                Offer::Full(item)
            }
            ChannelPolicy::DropNewest if full => {
                st.queue.offered_elsewhere(1);
                Offer::Dropped(DropReason::OverflowNewest, item)
            }
            ChannelPolicy::DropOldest => match st.queue.push_evicting(item, now, deadline) {
                Some(old) => Offer::Dropped(DropReason::OverflowOldest, old),
                None => Offer::Accepted,
            },
            ChannelPolicy::KeepLatest if full => {
                match st.queue.replace_newest(item, now, deadline) {
                    Some(old) => Offer::Dropped(DropReason::ReplacedByLatest, old),
                    None => Offer::Accepted,
                }
            }
            _ => match st.queue.push(item, now, deadline) {
                Ok(()) => Offer::Accepted,
                Err(item) => Offer::Full(item),
            },
        };
        if let Offer::Dropped(reason, _) = &outcome {
            self.gauge.dropped(*reason, 1);
        }
        self.climb(st);
        Offered {
            outcome,
            swept,
            wake,
        }
    }

    /// The run of a batch offer that one step can take at once: under `Backpressure`
    /// or `Reject`, with no shed rung and no deadlines (admission reads nothing, so no
    /// item can be refused but for room), the items that fit go in together, stamped
    /// with the step's `now`.
    ///
    /// The same as offering them one by one with that `now`: the first item's sweep
    /// of stale items is the only one that can find any (an item stamped `now` is not
    /// stale at `now`), and the rungs, which only rise while items go in, end where
    /// the last item's climb would leave them (a flow-state event reports the depth
    /// after the run rather than the depth where a mark was crossed). Returns how
    /// many went in; what is left of `chunk` takes the item-by-item path.
    fn offer_run(
        &self,
        st: &mut ChannelState<T>,
        chunk: &mut Step<T>,
        now: Instant,
        dropped: &mut Vec<(DropReason, T)>,
        wakes: &mut Vec<Wake>,
    ) -> usize {
        let plain = matches!(
            self.policy,
            ChannelPolicy::Backpressure | ChannelPolicy::Reject
        ) && chunk.unread();
        if !plain || !st.open || chunk.is_empty() {
            return 0;
        }
        if st.queue.expire_stale(now, dropped) > 0 {
            wakes.push(self.after_removal(st));
        }
        let room = st.queue.capacity().saturating_sub(st.queue.len());
        let n = room.min(chunk.len());
        if n == 0 {
            return 0;
        }
        st.queue.push_run(chunk.unread_items(), n, now);
        self.climb(st);
        n
    }

    fn report_drop(&self, reason: DropReason, item: T) {
        if let Some(hook) = self.hook.get() {
            hook.report(STAGE, reason, item);
        }
        self.count_drops(reason, 1);
    }

    /// `n` drops of `reason` for the rate-limited summary: an event when the running
    /// total reaches a power of two (never one per item), and at the end
    /// ([`summarize_drops_at_end`](Self::summarize_drops_at_end)).
    fn count_drops(&self, reason: DropReason, n: u64) {
        let at = reason as usize;
        // Relaxed: statistics for the summary only.
        let before = self.dropped[at].fetch_add(n, Ordering::Relaxed);
        if crossed_power_of_two(before, before + n) {
            self.reported[at].fetch_max(before + n, Ordering::Relaxed);
            drop_summary(STAGE, reason, before + n, self.hook.get().is_some(), false);
        }
    }

    /// The subscription is over: report each reason's total if drops came after its
    /// last summary.
    fn summarize_drops_at_end(&self) {
        for reason in DropReason::ALL {
            let at = reason as usize;
            // Relaxed: statistics for the summary only.
            let total = self.dropped[at].load(Ordering::Relaxed);
            if total > self.reported[at].fetch_max(total, Ordering::Relaxed) {
                drop_summary(STAGE, reason, total, self.hook.get().is_some(), true);
            }
        }
    }

    /// Wake every waiter (the channel closed): they see `Closed`.
    fn wake_all(&self, st: &mut ChannelState<T>) -> Wake {
        let mut wakers = Vec::new();
        st.send_wakers.take_into(&mut wakers);
        st.resume_wakers.take_into(&mut wakers);
        self.room.notify_all();
        self.resume.notify_all();
        Wake(wakers)
    }

    /// The ladder's high marks: after an offer, turn on each rung whose high mark the
    /// depth reached.
    fn climb(&self, st: &mut ChannelState<T>) {
        let depth = st.queue.len();
        let before = st.rungs;
        for (rung, marks) in self.ladder() {
            if !st.rungs.has(rung) && depth >= marks.high() {
                st.rungs.set(rung, true);
                if rung == Rungs::PAUSE {
                    self.gauge.paused();
                }
            }
        }
        self.publish_rungs(st, before, depth);
    }

    /// Items left the queue: turn off each rung whose low mark the depth fell to (the
    /// pause rung's resumes the producers), and wake senders waiting for room.
    fn after_removal(&self, st: &mut ChannelState<T>) -> Wake {
        let mut wakers = Vec::new();
        let depth = st.queue.len();
        let before = st.rungs;
        for (rung, marks) in self.ladder() {
            if st.rungs.has(rung) && depth <= marks.low() {
                st.rungs.set(rung, false);
            }
        }
        if before.has(Rungs::PAUSE) && !st.rungs.has(Rungs::PAUSE) {
            st.resume_wakers.take_into(&mut wakers);
            if st.resume_threads > 0 {
                self.resume.notify_all();
            }
        }
        self.publish_rungs(st, before, depth);
        if st.blocked_threads > 0 {
            self.room.notify_all();
        }
        st.send_wakers.take_into(&mut wakers);
        Wake(wakers)
    }

    /// Every rung with its marks, lowest first (the pause rung always).
    fn ladder(&self) -> impl Iterator<Item = (u8, WaterMarks)> {
        let reduce = self
            .admission
            .reduce
            .map(|(marks, _)| (Rungs::REDUCE, marks));
        let shed = self
            .admission
            .shed
            .as_ref()
            .map(|(marks, _)| (Rungs::SHED, *marks));
        reduce
            .into_iter()
            .chain(shed)
            .chain(std::iter::once((Rungs::PAUSE, self.marks)))
    }

    /// Mirror a change of rungs for the lock-free state, and note its event (once
    /// per change, never per item: the rungs are compared as a byte, and nothing else
    /// is done unless they changed).
    fn publish_rungs(&self, st: &mut ChannelState<T>, before: Rungs, depth: usize) {
        let after = st.rungs;
        if before == after {
            return;
        }
        // Relaxed: advisory mirror; the authoritative rungs are under the lock.
        self.rungs.store(after.0, Ordering::Relaxed);
        st.changes += 1;
        st.notices.push(Notice::Flow {
            from: self.admission.flow(before),
            to: self.admission.flow(after),
            loud: before.has(Rungs::PAUSE) != after.has(Rungs::PAUSE)
                || before.has(Rungs::SHED) != after.has(Rungs::SHED),
            depth,
            change: st.changes,
        });
    }

    /// The flow state senders read (lock-free, advisory).
    pub(super) fn flow(&self) -> FlowState {
        // Relaxed: advisory; `resumed`/`wait_resumed` read the rungs under the lock.
        self.admission
            .flow(Rungs(self.rungs.load(Ordering::Relaxed)))
    }

    // ---- the subscriber side ----------------------------------------------------

    /// Deliver batches while there is demand; see the module docs.
    fn deliver<S: Subscriber<T>>(&self, cx: &Cx<'_>, c: &mut Buffers<T>, sink: &mut S) -> Pass {
        self.deliver_offering(cx, c, sink, None)
    }

    /// [`deliver`](Self::deliver), run by a sender that owns the drain loop
    /// ([`Link::offer_now`]) when `offer` is given: the first step offers the sender's
    /// item under the same lock, at the sender's clock reading, before it takes the
    /// batch out, and leaves the outcome for the sender to settle. The item stays
    /// where it is (not offered) if the subscription is stopping.
    fn deliver_offering<S: Subscriber<T>>(
        &self,
        cx: &Cx<'_>,
        c: &mut Buffers<T>,
        sink: &mut S,
        mut offer: Option<SendersOffer<'_, T>>,
    ) -> Pass {
        c.settle(cx);
        loop {
            if cx.stopped() {
                return Pass::Idle;
            }
            let wanted = cx.demand().get();
            let budget = usize::try_from(wanted)
                .unwrap_or(usize::MAX)
                .min(self.batch_size);
            // The lane's items first: senders use it only while the queue is empty,
            // so its items are older than any queued item of the same sender.
            // Not what stopped the batch (a look at the lane's tail, which every
            // claim writes): only the locked step below needs that, and asks.
            let from_lane = match &mut c.reader {
                Some(reader) => {
                    let batch = &mut c.batch;
                    reader.pop_batch(budget, |item| batch.push_back(item))
                }
                None => 0,
            };
            if from_lane > 0 {
                self.passed_over(c, from_lane);
            }
            if c.reader.is_some() && offer.is_none() && {
                // SeqCst: pairs with the fence in `kick`. A sender that queued an
                // item (its unlock published the flag) and then saw no demand did
                // not signal; either its read of the demand saw the request that
                // runs this pass, or this read sees the flag it left.
                fence(Ordering::SeqCst);
                self.vacant()
            } {
                // Nothing queued, no end due, no rung on (as the last holder of the
                // state lock left it): the lane's items alone, without the lock.
                if from_lane > 0 {
                    cx.deliver_queue(sink, &mut c.batch);
                    self.stamp_if_due(c);
                }
                if from_lane < budget || budget == 0 {
                    return Pass::Idle;
                }
                continue;
            }
            // The clock only for the locked step (the lane's items alone are
            // stamped by `stamp_if_due`).
            let now = match &offer {
                Some(offer) => offer.now,
                None => self.gauge.now(),
            };
            let (taken, end, wake, end_waits, lane_refilled) = {
                let mut st = self.lock_state();
                // The lane again, under the lock: a sender that claimed a slot and
                // then queued an item did both before its unlock, which our lock
                // follows, so its claim is seen here (the batch above may predate it).
                // The queue's items only once the lane is empty: a slot still being
                // written (or left for want of demand) may hold an item older than
                // a queued one of the same sender.
                let lane = c.reader.as_ref().map_or(Pop::Closed, Reader::state);
                let queue_turn = matches!(lane, Pop::Empty | Pop::Closed);
                let mut offered = false;
                let mut taken = from_lane;
                if let Some(offer) = offer.take() {
                    if let Some(entry) = offer.entry.take() {
                        if budget > taken && queue_turn && st.queue.is_full() {
                            // The room this pass frees is the sender's: a send that
                            // finds demand waiting is not refused (or, under a lossy
                            // policy, made to drop) for it. The items taken out are
                            // older than the sender's; they leave first.
                            taken += st.queue.pop_batch(
                                now,
                                budget - taken,
                                &mut c.batch,
                                &mut c.expired,
                            );
                        }
                        *offer.answer =
                            Some(self.offer_unflushed(&mut st, entry, now, offer.will_wait));
                        offered = true;
                    }
                }
                if budget > taken && queue_turn {
                    taken += st
                        .queue
                        .pop_batch(now, budget - taken, &mut c.batch, &mut c.expired);
                }
                // The end waits for the lane too: closing marks it, so once the
                // reader reports it closed, no claim can follow.
                let lane_done = matches!(lane, Pop::Closed);
                let end = if st.queue.is_empty() && lane_done {
                    st.end.take()
                } else {
                    None
                };
                let end_waits = st.end.is_some() && matches!(lane, Pop::Pending);
                // Items the lane got since the look above, with demand left: this
                // pass goes round again for them. (A slot being written is left to
                // its sender's signal or the watcher's look.)
                let lane_refilled = matches!(lane, Pop::Item(())) && taken < budget;
                if offered || taken > 0 {
                    self.flush(&mut st, now);
                    c.unstamped = 0;
                }
                let wake = (taken > 0).then(|| self.after_removal(&mut st));
                (taken, end, wake, end_waits, lane_refilled)
            };
            if let Some(wake) = wake {
                wake.run();
            }
            self.report_drops(&mut c.expired);
            if c.expired.capacity() > self.batch_size {
                // An expiry storm took many items out at once: give the memory back.
                c.expired.shrink_to(self.batch_size);
            }
            if !c.batch.is_empty() {
                if c.batch.len() == 1 {
                    // One item at a time through the queue: a sleeping waiter
                    // would rather take them (`SinkHandle::wait`).
                    sink.handed_one(Sealed::NEW);
                }
                // Items a cancelling subscriber leaves in the batch are released.
                cx.deliver_queue(sink, &mut c.batch);
            }
            if let Some(end) = end {
                return cx.terminate(sink, end);
            }
            if end_waits || lane_refilled {
                // The end waits for a sender that claimed a slot of the lane before
                // the close and is writing it (a moment), or the lane has items
                // for the demand left: round again.
                crate::loom::spin_hint();
                continue;
            }
            if taken < budget || budget == 0 {
                return Pass::Idle;
            }
        }
    }

    /// Hand dropped items (expired, or dropped by the policy in a batch offer) to the
    /// drop hook, each with its reason, counted per reason.
    fn report_drops(&self, expired: &mut Vec<(DropReason, T)>) {
        if expired.is_empty() {
            return;
        }
        // Counted once per reason and batch, not per item.
        let mut per_reason = [0u64; DropReason::COUNT];
        for (reason, _) in expired.iter() {
            per_reason[*reason as usize] += 1;
        }
        let counts = DropReason::ALL
            .into_iter()
            .zip(per_reason)
            .filter(|(_, n)| *n > 0);
        match self.hook.get() {
            Some(hook) => {
                for (reason, n) in counts.clone() {
                    hook.drops().add(reason, n);
                }
                for (reason, item) in expired.drain(..) {
                    hook.hand_over(STAGE, reason, item);
                }
            }
            None => expired.clear(),
        }
        for (reason, n) in counts {
            self.count_drops(reason, n);
        }
    }

    /// The subscription is over (terminated, cancelled, or its subscriber broke):
    /// close for the senders, wake every waiter, and release what is still queued
    /// (outside the lock: an item's `Drop` is user code).
    pub(super) fn shut(&self) {
        // Before the lock, and a panic of a user clock contained: the channel shuts
        // and its waiting senders wake up whatever the clock does (without a
        // reading, the last counts are not flushed into the rates).
        let now = crate::guard::catch(|| self.gauge.now())
            .map_err(|error| {
                tracing::error!(target: "weir::channel", %error, "the channel's clock panicked at its close; contained");
            })
            .ok();
        let (released, wake) = {
            let mut st = self.lock_state();
            st.open = false;
            st.end = None;
            if let Some(lane) = &self.lane {
                lane.close();
            }
            let released: Vec<T> = st.queue.take_all().collect();
            if let Some(now) = now {
                self.flush(&mut st, now);
            }
            let before = std::mem::take(&mut st.rungs);
            if before != st.rungs {
                // Relaxed: advisory mirror, as in `publish_rungs`.
                self.rungs.store(st.rungs.0, Ordering::Relaxed);
                let (from, depth) = (self.admission.flow(before), released.len());
                st.notices.push(Notice::Closed { from, depth });
            }
            (released, self.wake_all(&mut st))
        };
        wake.run();
        // Each item under a guard of its own: an item's `Drop` is user code, and
        // this runs on whoever closed the channel (a sender, the subscriber's cancel).
        if crate::guard::drop_each(released) > 0 {
            tracing::error!(target: "weir::channel", "an item panicked in Drop; contained");
        }
        self.summarize_drops_at_end();
    }
}

impl<T: Send + 'static> Stage for Chan<T> {
    const NAME: &'static str = STAGE;
    type Item = T;
    type Owned = Buffers<T>;
    type Padding = ();

    fn pass<S: Subscriber<T>>(&self, cx: &Cx<'_>, buffers: &mut Buffers<T>, sink: &mut S) -> Pass {
        self.deliver(cx, buffers, sink)
    }

    /// Terminated, cancelled, or the subscriber broke: close for the senders and
    /// release what is queued.
    fn stop(&self, buffers: &mut Buffers<T>) {
        buffers.batch.clear();
        self.shut();
        if let Some(reader) = &mut buffers.reader {
            // Closed by `shut`: what the lane still holds is released (a claim being
            // written now is released by the ring's `Drop`).
            reader.pop_batch(usize::MAX, drop);
        }
    }
}

impl<T: Send + 'static> Link<T> {
    /// Answer an offer after the lock is released: wake who the swept items' room
    /// concerns, report them and a drop, and turn the outcome into the sender's
    /// answer.
    pub(super) fn answer(&self, offered: Offered<T>) -> Result<(), super::TrySendError<T>> {
        let Offered {
            outcome,
            mut swept,
            wake,
        } = offered;
        if let Some(wake) = wake {
            wake.run();
        }
        self.stage().report_drops(&mut swept);
        if let Some((reason, item)) = outcome.into_answer()? {
            self.stage().report_drop(reason, item);
        }
        Ok(())
    }

    /// Settle an offer (see [`answer`](Self::answer)) and run the drain loop if the
    /// subscriber has demand.
    pub(super) fn settle(&self, offered: Offered<T>) -> Result<(), super::TrySendError<T>> {
        let answer = self.answer(offered);
        if answer.is_ok() {
            self.kick();
        }
        answer
    }

    /// `try_send`'s offer: in a pass of its own when it can ([`offer_in_pass`]),
    /// else under its own lock, then signalling the drain loop.
    ///
    /// [`offer_in_pass`]: Self::offer_in_pass
    pub(super) fn offer_now(&self, entry: (T, Assessed)) -> Result<(), super::TrySendError<T>> {
        let entry = match self.hand_off(entry) {
            Ok(()) => return Ok(()),
            Err(entry) => entry,
        };
        let chan = self.stage();
        let now = chan.gauge.now();
        match self.offer_in_pass(entry, now, false) {
            Ok(offered) => self.answer(offered),
            Err(entry) => {
                let offered = {
                    let mut st = chan.lock_state();
                    chan.offer(&mut st, entry, now, false)
                };
                self.settle(offered)
            }
        }
    }

    /// A waiting sender's first try (`send_blocking`, `send().await`):
    /// [`offer_in_pass`](Self::offer_in_pass), settled, unless the queue is full under
    /// `Backpressure` or the item was not offered: then the entry comes back for the
    /// sender's own waiting loop (which offers again under the lock), with the
    /// clock reading this try took when nothing ran since (the item was not offered:
    /// no pass ran, so the reading is as fresh as a new one; a pass that found the
    /// queue full may have run the subscriber for a while, so then `None`).
    ///
    /// Inlined into the sender, as [`offer_now`](Self::offer_now) is: called out of
    /// line, the entry went through memory on its way to the hand-off, and a
    /// `send_blocking` per item behind `publish_on(pool, 256)` took 21.5 ms per 1M
    /// instead of 14.0 (the `try_send` loop's 13.6).
    #[inline]
    pub(super) fn offer_first(
        &self,
        entry: (T, Assessed),
    ) -> Result<Result<(), super::TrySendError<T>>, Unsent<T>> {
        let entry = match self.hand_off(entry) {
            Ok(()) => return Ok(Ok(())),
            Err(entry) => entry,
        };
        let now = self.stage().gauge.now();
        match self.offer_in_pass(entry, now, true) {
            // (Nothing was swept: a sweep leaves room.)
            Ok(Offered {
                outcome: Offer::Full(back),
                ..
            }) if self.stage().policy == ChannelPolicy::Backpressure => Err((back, None)),
            Ok(offered) => Ok(self.answer(offered)),
            Err((item, _)) => Err((item, Some(now))),
        }
    }

    /// The direct hand-off: when the channel is vacant (open, nothing queued, no
    /// rung on), the item has no deadline and the subscriber has demand, a sender that
    /// takes the drain loop hands its item straight to the subscriber: no state lock,
    /// no clock reading, no queue. Any policy takes an item into an empty queue and
    /// the pass would deliver it at once, so the outcome is the queued path's; the
    /// item counts as passing through the queue (offered, enqueued, dequeued) at the
    /// next flush ([`Chan::flush`]: the next locked offer or pass, a snapshot's sweep,
    /// the end). So that the counts reach the rates with a fresh instant, the loop's
    /// owner reads the clock and flushes once [`UNSTAMPED`] items went over since the
    /// last flush ([`Chan::stamp_if_due`]).
    ///
    /// Returns the entry, untouched, when the item must take the queued path.
    fn hand_off(&self, entry: (T, Assessed)) -> Result<(), (T, Assessed)> {
        if entry.1.deadline.is_some() {
            return Err(entry);
        }
        let (item, assessed) = entry;
        self.hand_off_item(item).map_err(|item| (item, assessed))
    }

    /// Lane mode: while a drain on another thread watches the lane ([`Pull`]) and
    /// the channel is vacant, a send claims a slot of the
    /// lane (one compare-and-swap) and writes its item there, and signals only if the
    /// watcher has stopped watching since: the watcher takes the items on its own
    /// thread. Items in the lane count as one batch being handed over (the lane holds
    /// one batch, so the in-flight bound is unchanged) and as passing through the
    /// queue when the drain takes them. A send that finds the lane full waits a
    /// moment (the crate's one backoff) for the watcher to free a slot while it
    /// still watches. Per-sender order: a send that finds the lane full after that
    /// (or is not allowed in) takes the paths below, and every pass takes the
    /// lane's items before the queue's; the direct hand-off waits for an empty lane
    /// ([`hand_over`](Self::hand_over)); and the lane is used only while the queue is
    /// empty (vacant), as the sender sees it (its own last offer, or later).
    ///
    /// Returns the item when it must take another path. Called from
    /// [`hand_off_item`](Self::hand_off_item), which the item alone goes into:
    /// anything more in [`hand_off`](Self::hand_off) made the compiler copy the
    /// entry through memory right after the caller stored it in two halves (a
    /// store-forwarding stall: 13.6 to 19.5 ms per 1M inline sends).
    #[inline]
    fn claim(&self, item: T) -> Result<(), T> {
        let chan = self.stage();
        let Some(lane) = &chan.lane else {
            return Err(item);
        };
        // Relaxed: a hint; a stale answer only sends the item down another path
        // (see above for the order). The caller read the watcher's mark. Not the
        // demand: the drain settles it every pass, and reading it per item moved
        // its line; the lane holds one batch whatever the demand.
        if !chan.vacant() {
            return Err(item);
        }
        if let Err(refused) = lane.push(item) {
            let item = match refused {
                Refused::Full(item) => item,
                Refused::Closed(item) => return Err(item),
            };
            // The watcher drains the lane a batch at a time: wait a moment for a
            // slot rather than queue the item, which would send every later item
            // down the locked path until the queue is drained (module docs). Not
            // once the watcher left: nobody would free a slot.
            let room = Backoff::wait(|| lane.has_room() || !chan.pulled(Ordering::Relaxed));
            if !room || !chan.pulled(Ordering::Relaxed) {
                return Err(item);
            }
            if let Err(refused) = lane.push(item) {
                return Err(refused.into_inner());
            }
        }
        // Loom models `SeqCst` accesses as `AcqRel`: the fence makes the order the
        // claim and this load have on real targets explicit there (see `claim.rs`).
        #[cfg(weir_loom)]
        crate::loom::fence(Ordering::SeqCst);
        // SeqCst: after our claim (`SeqCst`), pairs with the fence of a watcher
        // that clears its mark and then looks at the lane's claims: either it sees
        // ours or we see the mark cleared and run the drain loop for it.
        if !chan.pulled(Ordering::SeqCst) {
            // Not `kick`: with no demand seen, a request racing this claim may have
            // run its pass before the claim was visible; this pass (or the owner's
            // next) comes after the claim.
            self.signal();
        }
        Ok(())
    }

    /// [`hand_off`](Self::hand_off) of an item the channel may take: the item alone
    /// goes in (in a register, for a small one), out of line.
    #[inline(never)]
    fn hand_off_item(&self, item: T) -> Result<(), T> {
        // Relaxed: a hint (see `claim`).
        let item = if self.stage().pulled(Ordering::Relaxed) {
            match self.claim(item) {
                Ok(()) => return Ok(()),
                Err(item) => item,
            }
        } else {
            item
        };
        let mut entry = Some(item);
        self.hand_over(1, |cx, c, sink| {
            let item = entry.take().expect("offered once");
            let credit = sink.0.next_one(item);
            c.handed_one(cx, credit);
        });
        match entry {
            None => Ok(()),
            Some(item) => Err(item),
        }
    }

    /// The direct hand-off of a whole step of `try_send_all`: when admission read
    /// nothing of its items (so only room could refuse them), the channel is vacant,
    /// the demand covers the step and the step is no larger than a drain's batch (so
    /// the items in flight stay within the channel's bound: nothing is queued), its
    /// items go to the subscriber in one `on_next_queue`, without the state lock, the
    /// clock or the queue (see [`hand_off`](Self::hand_off)). Returns how many it
    /// handed over: all of the step, or none. Items a subscriber that cancels or
    /// panics inside the batch does not take are released, as a batch taken out of
    /// the queue would be.
    fn hand_off_step(&self, chunk: &mut Step<T>) -> usize {
        let n = chunk.len();
        if n == 0 || n > self.stage().batch_size() || !chunk.unread() {
            return 0;
        }
        let handed = self.hand_over(n, |cx, c, sink| {
            c.settle(cx);
            cx.deliver_queue(sink, chunk.unread_items());
        });
        if !handed {
            return 0;
        }
        // Left by a subscriber that broke off inside the batch: released.
        chunk.unread_items().clear();
        n
    }

    /// The one hand-off: when the channel is vacant and the demand covers `n` items,
    /// take the drain loop, check both again as its owner (nobody else takes items
    /// out meanwhile, and the demand only grows), count the `n` items as passing
    /// through (before the subscriber runs), let `deliver` hand them over, and stamp
    /// the counts when due. Returns whether `deliver` ran.
    #[inline(always)]
    fn hand_over(
        &self,
        n: usize,
        deliver: impl FnOnce(&Cx<'_>, &mut Buffers<T>, &mut ErasedSink<T>),
    ) -> bool {
        let chan = self.stage();
        let wanted = n as u64;
        if !chan.vacant() || self.demand().get() < wanted {
            return false;
        }
        let mut handed = false;
        self.try_pass_if_idle(|cx, c, sink| {
            if cx.stopped()
                || !chan.vacant()
                || c.demand(cx) < wanted
                || c.reader.as_ref().is_some_and(|reader| reader.has_work())
            {
                return Pass::Idle;
            }
            chan.passed_over(c, n);
            handed = true;
            deliver(cx, c, sink);
            chan.stamp_if_due(c);
            Pass::Idle
        });
        handed
    }

    /// When the subscriber has demand and no other thread runs the drain loop, take
    /// the loop and offer `entry` (at `now`, waiting for room if `will_wait`: see
    /// [`Chan::offer`]) inside its first pass, under the lock that takes the batch
    /// out: one lock, one clock reading and one statistics update for the offer and
    /// its delivery, instead of one each for the offer and then for the pass. The
    /// passes for whatever arrived meanwhile run before this returns, so nothing is
    /// left to signal. Returns the outcome to settle with [`answer`](Self::answer),
    /// or the entry, not offered, when there is no demand, the loop is busy elsewhere
    /// (its owner then runs another pass) or the subscription is ending.
    pub(super) fn offer_in_pass(
        &self,
        entry: (T, Assessed),
        now: Instant,
        will_wait: bool,
    ) -> Result<Offered<T>, (T, Assessed)> {
        let mut entry = Some(entry);
        if self.demand().get() > 0 {
            let chan = self.stage();
            let mut answer = None;
            let _owned = self.try_pass(|cx, c, sink| {
                let offer = SendersOffer {
                    entry: &mut entry,
                    now,
                    will_wait,
                    answer: &mut answer,
                };
                chan.deliver_offering(cx, c, sink, Some(offer))
            });
            if let Some(offered) = answer {
                return Ok(offered);
            }
        }
        Err(entry.expect("not offered: no answer"))
    }

    /// Offer the items of `chunk` in order, as single sends would one by one, in
    /// locked steps ([`offer_locked`](Self::offer_locked)), or handed straight over
    /// when the channel is vacant ([`hand_off_step`](Self::hand_off_step)). A single
    /// send that finds the queue full with demand waiting would first have seen the
    /// queue drain (the items before it delivered on its own thread), so a step that
    /// reaches a full queue while demand waits stops there, runs the drain loop
    /// itself if it is free, and goes on with the rest: only a full queue that no
    /// drain here can empty refuses (or, under a lossy policy, drops). Stops at the
    /// first item the channel does not take. Returns how many it took and, if it
    /// stopped, the refusal; the items after the refused one stay in `chunk`, in
    /// order, never offered.
    pub(super) fn offer_all(&self, chunk: &mut Step<T>) -> (usize, Option<super::TrySendError<T>>) {
        let chan = self.stage();
        let mut taken = 0;
        let mut may_drain = true;
        loop {
            let handed = self.hand_off_step(chunk);
            if handed > 0 {
                return (taken + handed, None);
            }
            let (took, refused, stalled) = self.offer_locked(chunk, may_drain);
            taken += took;
            if !stalled {
                return (taken, refused);
            }
            // Deliver what demand allows on this thread, as the sends of the items
            // before would have; if another thread runs the loop, offer the rest as a
            // single send would find the queue then.
            may_drain = self.try_pass(|cx, c, sink| chan.deliver(cx, c, sink));
        }
    }

    /// One locked step of [`offer_all`](Self::offer_all) (one clock read, one stats
    /// flush), then settle once: wake waiters, report what expired and what the policy
    /// dropped, run the drain if there is demand. Stops at the first item the channel
    /// does not take, and (with `may_drain`) before an item that finds the queue full
    /// while demand waits: then `stalled` is true and that item and the rest stay in
    /// `chunk`. Returns how many it took, the refusal if any, and `stalled`.
    fn offer_locked(
        &self,
        chunk: &mut Step<T>,
        may_drain: bool,
    ) -> (usize, Option<super::TrySendError<T>>, bool) {
        let chan = self.stage();
        let now = chan.gauge.now();
        let mut dropped = Vec::new();
        let mut wakes = Vec::new();
        let mut refused = None;
        let mut stalled = false;
        let mut taken = 0;
        {
            let mut st = chan.lock_state();
            taken += chan.offer_run(&mut st, chunk, now, &mut dropped, &mut wakes);
            while !chunk.is_empty() {
                if may_drain && st.open && st.queue.is_full() && self.demand().get() > 0 {
                    stalled = true;
                    break;
                }
                let entry = chunk.pop_front().expect("not empty");
                let Offered {
                    outcome,
                    mut swept,
                    wake,
                } = chan.offer_unflushed(&mut st, entry, now, false);
                dropped.append(&mut swept);
                wakes.extend(wake);
                match outcome.into_answer() {
                    Ok(drop) => {
                        taken += 1;
                        dropped.extend(drop);
                    }
                    Err(error) => {
                        refused = Some(error);
                        break;
                    }
                }
            }
            chan.flush(&mut st, now);
        }
        wakes.into_iter().for_each(Wake::run);
        // Counted in the gauge by the offers; the hook counts them here.
        chan.report_drops(&mut dropped);
        if taken > 0 && !stalled {
            self.kick();
        }
        (taken, refused, stalled)
    }
}

/// Publish the counts waiting for their grain, and take the items past the maximum
/// age out of the queue now; the end parked behind them goes out if they were the
/// last.
impl<T: Send + 'static> Sweep for Link<T> {
    fn sweep(&self) {
        let chan = self.stage();
        let now = chan.gauge.now();
        let mut swept = Vec::new();
        let (wake, end_due) = {
            // Never waits: a snapshot taken while this thread holds the lock (no user
            // code runs under it, but a cheap guarantee) skips the sweep.
            let Some(mut st) = chan.try_lock_state() else {
                return;
            };
            // The items handed over directly since the last flush, counted now.
            chan.flush(&mut st, now);
            st.queue.publish();
            if st.queue.expire_stale(now, &mut swept) == 0 {
                return;
            }
            chan.flush(&mut st, now);
            let end_due = st.queue.is_empty() && st.end.is_some();
            (chan.after_removal(&mut st), end_due)
        };
        wake.run();
        chan.report_drops(&mut swept);
        if end_due {
            self.signal_attached();
        }
    }
}

/// Lane mode's watcher: a `publish_on` drain behind the channel (see [`Link::claim`]).
impl<T: Send + 'static> Pull for Link<T> {
    fn watch(&self, on: bool) {
        // Relaxed: a watcher fences after uncounting itself (`Core::clear_mark`); a
        // sender reads the count with SeqCst after its claim.
        if on {
            self.stage().watchers.fetch_add(1, Ordering::Relaxed);
        } else {
            self.stage().watchers.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn ready(&self) -> bool {
        self.stage()
            .lane
            .as_ref()
            .is_some_and(|lane| lane.has_ready())
    }

    /// Half the lane written (128 items of a lane of 256): senders fill the other
    /// half while the watcher (a waiting sink, a lingering `publish_on` drain)
    /// takes a run. The watcher reads the line of the run's last slot, which
    /// senders reach only as the run completes: polling nearer slots took lines
    /// from a sender that was still filling them. A `try_send` per item into a
    /// channel of 4,096 summed by `fold(..).wait()` took 25.5 ms per 1M items at a
    /// run of 16, 22.9–25.0 at 32, 19.0–19.2 at 64, 18.1–19.4 at 128 (a probe,
    /// medians of 30); in the `channel` bench's paired phase, three rounds each way
    /// alternating, 20.1–22.2 ms at 64 and 19.1–20.5 at 128.
    fn ready_run(&self) -> bool {
        self.stage()
            .lane
            .as_ref()
            .is_some_and(|lane| lane.has_run(lane.capacity() / 2))
    }

    fn taken(&self) -> usize {
        self.stage().lane.as_ref().map_or(0, |lane| lane.taken())
    }

    fn claimed(&self) -> bool {
        self.stage()
            .lane
            .as_ref()
            .is_some_and(|lane| lane.has_claims())
    }

    fn pull(&self) {
        self.signal();
    }
}

impl<T: Send + 'static> Link<T> {
    /// Run the drain loop if there is demand to serve (see the file docs for why
    /// skipping it otherwise loses nothing).
    fn kick(&self) {
        if self.stage().lane.is_some() {
            // SeqCst: pairs with the fence of a lane-mode pass that skips the state
            // lock when it finds the channel vacant: the flag this sender's unlock
            // published (the queue not empty) is seen there, or the request that
            // pass serves is seen here.
            fence(Ordering::SeqCst);
        }
        if self.demand().get() > 0 {
            self.signal();
        }
    }

    /// Stop accepting items and deliver `end` after the queued ones. Returns false if
    /// the channel was already closed.
    pub(super) fn close(&self, end: Result<(), Error>) -> bool {
        let chan = self.stage();
        let wake = {
            let mut st = chan.lock_state();
            if !st.open {
                return false;
            }
            st.open = false;
            st.end = Some(end);
            if let Some(lane) = &chan.lane {
                // Under the lock, before a pass can take the end: a claim after this
                // is refused, and the end waits for the claims before it.
                lane.close();
            }
            chan.wake_all(&mut st)
        };
        wake.run();
        self.signal_attached();
        true
    }

    /// Run the drain loop for a reason that can come before the subscriber is
    /// attached (the end, a sweep that finds it due): the senders share the core
    /// before `subscribe` attaches it, and a pass entered then would own the loop
    /// while the attaching thread writes the subscriber in. Before the attach this
    /// skips the loop, and the attaching thread's first pass sees what was written
    /// before.
    fn signal_attached(&self) {
        // SeqCst: pairs with the fence in `attach_subscriber`, after the flag is
        // set. Either this load sees the flag (the attach has entered the loop, so
        // this signal counts as a reason for its owner), or that fence comes after
        // this one and the attaching thread's first pass sees what this thread
        // wrote before it (the end, `vacant` cleared, under or after the lock).
        fence(Ordering::SeqCst);
        // Relaxed: ordered by the fences.
        if self.stage().attached.load(Ordering::Relaxed) {
            self.signal();
        }
    }

    /// Attach the (only) subscriber, with the pass's buffers.
    pub(super) fn attach_subscriber<S>(self: &Arc<Self>, subscriber: S)
    where
        S: Subscriber<T> + Send + 'static,
    {
        if let Some(hook) = subscriber.drop_hook() {
            // The builder's hook, if any, keeps its place.
            let _ = self.stage().hook.set(hook);
        }
        let chan = self.stage();
        let reader = chan
            .lane_reader
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        let pulled = reader.is_some();
        let buffers = Buffers {
            batch: VecDeque::with_capacity(chan.batch_size),
            expired: Vec::new(),
            unstamped: 0,
            reader,
            unsettled: 0,
        };
        let sink = ErasedSink(Box::new(subscriber));
        // Still owning the loop, before its first pass: from here on a close or a
        // sweep signals (see `signal_attached`).
        let started = |link: &Arc<Self>| {
            // Relaxed: ordered by the fence.
            link.stage().attached.store(true, Ordering::Relaxed);
            // SeqCst: pairs with the fence in `signal_attached` (see there).
            fence(Ordering::SeqCst);
        };
        if pulled {
            let pull: Arc<dyn Pull> = self.clone();
            let subscription = crate::Subscription::with_pull(self.clone(), pull);
            self.attach_as(subscription, buffers, sink, started);
        } else {
            self.attach_then(buffers, sink, started);
        }
    }
}

/// Loom models of the channel: `RUSTFLAGS="--cfg weir_loom" cargo test --release --lib loom`.
#[cfg(all(test, weir_loom))]
mod loom_tests {
    use loom::thread;

    use super::super::{channel, ChannelPolicy, Sender, TrySendError};
    use crate::loom::model::Recorder;
    use crate::{Publisher, Subscription};

    /// A channel of two slots with a recorder subscribed: its sender, the recorder and
    /// the recorder's subscription.
    fn subscribed() -> (Sender<u32>, Recorder, Subscription) {
        let (tx, rx) = channel::<u32>(2, ChannelPolicy::Backpressure);
        let recorder = Recorder::default();
        rx.subscribe(recorder.clone());
        let subscription = recorder.subscription();
        (tx, recorder, subscription)
    }

    /// A sender that skips the drain loop when it sees no demand, racing requests:
    /// whatever the interleaving, both items are delivered once both requests and both
    /// sends have returned (no item stranded with demand outstanding), in order.
    #[test]
    fn loom_sends_racing_requests_strand_nothing() {
        loom::model(|| {
            let (tx, recorder, subscription) = subscribed();
            let producer = thread::spawn(move || {
                tx.try_send(1).unwrap();
                tx.try_send(2).unwrap();
                tx // kept alive: closing would run the drain loop and hide a stranded item
            });
            subscription.request(1);
            subscription.request(1);
            let tx = producer.join().unwrap();
            assert_eq!(recorder.items(), [1, 2]);
            drop(tx);
        });
    }

    /// The last sender closing the channel while another thread subscribes: the
    /// close enters the drain loop only once the subscriber is attached, and the
    /// subscriber gets the queued item and the end either way.
    #[test]
    fn loom_a_close_racing_the_subscribe_ends_the_subscriber() {
        loom::model(|| {
            let (tx, rx) = channel::<u32>(2, ChannelPolicy::Backpressure);
            tx.try_send(1).unwrap();
            let closer = thread::spawn(move || drop(tx));
            let recorder = Recorder::default();
            rx.subscribe(recorder.clone());
            recorder.subscription().request(2);
            closer.join().unwrap();
            assert_eq!(recorder.items(), [1]);
            assert!(recorder.completed());
        });
    }

    /// Lane mode: a watcher (this thread, as a `publish_on` drain would) marks the
    /// channel watched, then stops watching (mark cleared, fence, a look at the
    /// lane's claims, a pull if it sees one) while a sender's `try_send` claims a slot
    /// and reads the mark. Whichever wins, the item is delivered once before both
    /// return: taken by the watcher's pull, or by the drain loop the sender runs when
    /// it sees the mark cleared.
    #[test]
    fn loom_lane_a_leaving_watcher_strands_no_claimed_item() {
        leaving_watchers_strand_no_claimed_item(1);
    }

    /// Lane mode with two watchers (two subscribers' drains behind a hub): one
    /// stops watching while a sender claims a slot, the other stops after it. The
    /// sender skips its signal only while one still watches, and that one's look
    /// after its fence sees the claim: the item is delivered once either way.
    #[test]
    fn loom_lane_the_last_of_two_watchers_to_leave_strands_no_claimed_item() {
        leaving_watchers_strand_no_claimed_item(2);
    }

    /// `watchers` watchers (this thread) stop watching one after the other (mark
    /// cleared, fence, a look at the lane's claims) while a sender's `try_send`
    /// claims a slot and reads the mark; one that saw the claim pulls until the
    /// item is there.
    fn leaving_watchers_strand_no_claimed_item(watchers: usize) {
        loom::model(move || {
            let (tx, recorder, subscription) = subscribed();
            subscription.request(1);
            let pull = subscription.pull().expect("a lane-mode channel").clone();
            for _ in 0..watchers {
                pull.watch(true);
            }
            let producer = thread::spawn(move || {
                tx.try_send(7).unwrap();
                tx // kept alive: closing would run the drain loop and hide a stranded item
            });
            let mut seen = false;
            for _ in 0..watchers {
                pull.watch(false);
                crate::loom::fence(std::sync::atomic::Ordering::SeqCst);
                seen |= pull.claimed();
            }
            if seen {
                // Claimed, perhaps not written yet: the pass comes back for it.
                while recorder.items().is_empty() {
                    pull.pull();
                    thread::yield_now();
                }
            }
            let tx = producer.join().unwrap();
            assert_eq!(recorder.items(), [7], "delivered once");
            drop(tx);
        });
    }

    /// Lane mode: a sender fills the lane (two slots) and sends a third item, which
    /// finds it full and waits for a slot or takes the queue, while the watcher
    /// pulls: every item is delivered once, in order.
    #[test]
    fn loom_lane_a_send_that_finds_the_lane_full_keeps_the_order() {
        loom::model(|| {
            let (tx, recorder, subscription) = subscribed();
            subscription.request(3);
            let pull = subscription.pull().expect("a lane-mode channel").clone();
            pull.watch(true);
            let producer = thread::spawn(move || {
                for item in 1..=3 {
                    tx.try_send(item).unwrap();
                }
                tx // kept alive: closing would run the drain loop
            });
            while recorder.items().len() < 3 {
                pull.pull();
                thread::yield_now();
            }
            let tx = producer.join().unwrap();
            assert_eq!(recorder.items(), [1, 2, 3]);
            pull.watch(false);
            drop(tx);
        });
    }

    /// Lane mode: `close` racing a sender's claim while a watcher watches: the item
    /// is either refused as closed or delivered before `on_complete`, never after it
    /// and never lost.
    #[test]
    fn loom_lane_close_racing_a_claim_keeps_the_item_before_the_end() {
        loom::model(|| {
            let (tx, recorder, subscription) = subscribed();
            subscription.request(1);
            let pull = subscription.pull().expect("a lane-mode channel").clone();
            pull.watch(true);
            let closer = tx.clone();
            let producer = thread::spawn(move || tx.try_send(7).is_ok());
            closer.close();
            let sent = producer.join().unwrap();
            // The watcher's last look: whatever was claimed, then the end.
            while !recorder.completed() {
                pull.pull();
                thread::yield_now();
            }
            let expected: &[u32] = if sent { &[7] } else { &[] };
            assert_eq!(recorder.items(), expected, "sent {sent}");
        });
    }

    /// Demand for three items; a second sender sends 3 on its own thread while this
    /// one sends 1 and 2 with `send_both`: whichever path each item takes (straight
    /// to the subscriber or through the queue), every item is delivered once and 1
    /// arrives before 2.
    fn two_senders_race(send_both: fn(&Sender<u32>)) {
        loom::model(move || {
            let (tx, recorder, subscription) = subscribed();
            subscription.request(3);
            let other = tx.clone();
            let producer = thread::spawn(move || {
                other.try_send(3).unwrap();
                other
            });
            send_both(&tx);
            let other = producer.join().unwrap();
            let items = recorder.items();
            let mut sorted = items.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, [1, 2, 3], "each item once: {items:?}");
            let first = |x| items.iter().position(|&i| i == x).unwrap();
            assert!(first(1) < first(2), "one sender's order: {items:?}");
            drop((tx, other));
        });
    }

    /// Direct hand-offs from two senders racing each other for the drain loop.
    #[test]
    fn loom_hand_offs_from_two_senders_keep_each_senders_order() {
        two_senders_race(|tx| {
            tx.try_send(1).unwrap();
            tx.try_send(2).unwrap();
        });
    }

    /// A whole `try_send_all` step (handed over at once or queued) racing a send.
    #[test]
    fn loom_a_step_racing_a_send_keeps_the_steps_order() {
        two_senders_race(|tx| assert_eq!(tx.try_send_all([1, 2]).ok(), Some(2)));
    }

    /// A hand-off racing `close`: the item is delivered before the completion or
    /// handed back `Closed`, never after `on_complete` (the recorder fails the model
    /// on that); once both returned, the subscriber has completed.
    #[test]
    fn loom_a_hand_off_racing_close_never_follows_the_completion() {
        loom::model(|| {
            let (tx, recorder, subscription) = subscribed();
            subscription.request(2);
            let other = tx.clone();
            let producer = thread::spawn(move || other.try_send(1));
            tx.close();
            let sent = producer.join().unwrap();
            match sent {
                Ok(()) => assert_eq!(recorder.items(), [1]),
                Err(TrySendError::Closed(1)) => assert!(recorder.items().is_empty()),
                other => panic!("unexpected {other:?}"),
            }
            assert!(recorder.completed());
        });
    }

    /// Cancel racing a send: the item is either queued (and then released by the
    /// cancel) or handed back as `Closed`; after the cancel every send is `Closed`.
    #[test]
    fn loom_cancel_racing_a_send_closes_the_channel() {
        loom::model(|| {
            let (tx, recorder, subscription) = subscribed();
            let producer = thread::spawn(move || {
                let first = tx.try_send(1);
                assert!(matches!(first, Ok(()) | Err(TrySendError::Closed(1))));
                tx
            });
            subscription.cancel();
            let tx = producer.join().unwrap();
            assert_eq!(tx.try_send(2), Err(TrySendError::Closed(2)));
            assert!(recorder.items().is_empty(), "nothing was requested");
        });
    }
}
