//! `SinkHandle`: how the caller of a sink cancels it and learns how it ended, by
//! blocking ([`SinkHandle::wait`]) or awaiting (`.await`, through [`IntoFuture`]).
//!
//! The result sits behind one mutex with the waker of the future awaiting it, if
//! any: the sink records its result and takes the waker under that lock, and the
//! future checks for a result and leaves its waker under it, so no wake-up is lost.
//!
//! # Waiting on a channel
//!
//! When the sink's upstream is a [`channel`](fn@crate::channel) (right in front, or
//! through stages that hand its subscription on, or through a hub), the
//! subscription carries a crate-internal pull handle, and a thread blocked in
//! [`SinkHandle::wait`] (or `wait_timeout`) does not just sleep while items keep
//! coming. It *watches* the channel's lane, as a `publish_on` drain or a blocking
//! iterator does: the senders then only claim a slot (one compare-and-swap) and
//! skip their signal, and the waiting thread runs the channel's drain loop itself.
//! So the sink's work (and the stages' between) moves off the senders' threads onto
//! the thread that waits anyway, the way a consumer thread takes items out of a
//! crossbeam channel.
//!
//! * It polls for a *run* of written items (half the lane: 128 of a channel's
//!   lane of 256), and after a moment (the crate's one `Backoff`) takes whatever
//!   is there: a fast sender fills a run in a fraction of that moment, and a
//!   waiter that took each item as soon as it was written made its thread and the
//!   sender's fight over the same cache line for every item (measured: 2 to 3
//!   times slower than no watching).
//! * It stops watching when nothing came for that moment, or when a pull took
//!   nothing out of the lane (no demand upstream: a hub held back by a sibling).
//!   It clears its mark, fences (`SeqCst`) and looks at the lane's claims once
//!   more: a claim it does not see was made by a sender that sees the mark gone
//!   and hands its item over itself. Then it sleeps, and the senders deliver on
//!   their own threads as before.
//! * The sink wakes it to watch again after [`NUDGE_AFTER`] items handed over to
//!   it one at a time on other threads (one wake-up per that many, never one per
//!   item). Only single items count (`on_next`, and the crate-internal hint a
//!   channel's direct hand-off and a hub's fan-out of one arrival give the sink
//!   before they deliver): a sender that hands over batches (`try_send_all`) does
//!   not use the lane, and any look at a batch's size in the fold's batch path cost
//!   it (steps of 64 items: 2.4 ms per 1M without, 2.7–4.1 ms with a count per
//!   batch, 2.7–3.0 ms with a check for a batch of one). A stage between that does
//!   not pass the hint on (`map`, …) leaves a sleeping waiter asleep until its
//!   next wait.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use smallvec::SmallVec;

use crate::drain::SubscriptionSlot;
use crate::runtime::backoff::Backoff;
use crate::spec::{Pull, PullMark};
use crate::{Error, Subscription};

/// Items a sink takes one at a time on its senders' threads while its waiter
/// sleeps before it wakes the waiter to watch the lane again (see the module docs).
const NUDGE_AFTER: u32 = 1_024;

/// State shared by a sink subscriber and its handle: the upstream subscription and
/// the terminal result (`Result<R, E>`, first one wins, taken once).
pub(crate) struct SinkState<R, E = Error> {
    /// The upstream subscription, for `cancel` from the handle.
    pub(crate) slot: SubscriptionSlot,
    /// The terminal result, once there is one, and the waker of a future awaiting it.
    result: Mutex<Slot<R, E>>,
    /// Signalled when `result` is set, or a sleeping waiter is nudged.
    ready: Condvar,
    /// Set (after `result`) when the sink ended: polled by a watching waiter.
    ended: AtomicBool,
    /// Upstream's pull handle, if it has one (see the module docs).
    pull: OnceLock<Arc<dyn Pull>>,
    /// While a waiter sleeps that would watch upstream's lane: the single items
    /// left before the sink nudges it (0: nobody to nudge).
    nudge_in: AtomicU32,
}

struct Slot<R, E> {
    completion: Completion<R, E>,
    /// The task awaiting the result to take it (a [`SinkFuture`]): the waker of its
    /// last poll only, as a future keeps (one polled by one task after another must
    /// not keep every task's waker).
    taker: Option<Waker>,
    /// The tasks awaiting a copy of the result (a shared state read by reference
    /// may have several).
    wakers: SmallVec<[Waker; 1]>,
}

enum Completion<R, E> {
    Running,
    Ended(Result<R, E>),
    Taken,
}

impl<R, E> SinkState<R, E> {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(SinkState {
            slot: SubscriptionSlot::new(),
            result: Mutex::new(Slot {
                completion: Completion::Running,
                taker: None,
                wakers: SmallVec::new(),
            }),
            ready: Condvar::new(),
            ended: AtomicBool::new(false),
            pull: OnceLock::new(),
            nudge_in: AtomicU32::new(0),
        })
    }

    /// Remember `subscription`'s pull handle, if it has one, for a waiter to watch
    /// (see the module docs).
    pub(crate) fn watch_from(&self, subscription: &Subscription) {
        if let Some(pull) = subscription.pull() {
            let _ = self.pull.set(pull.clone());
        }
    }

    /// The sink took an item handed over on its own (`on_next`, or a delivery the
    /// publisher announced with `Subscriber::handed_one`): nudge a sleeping waiter
    /// that would watch upstream's lane once [`NUDGE_AFTER`] such items went by on
    /// other threads. Larger batches do not count (see the module docs).
    #[inline]
    pub(crate) fn took_one(&self) {
        // Relaxed: a hint (a missed or early nudge only moves where the sink's work
        // runs); the wake itself goes through the lock.
        let left = self.nudge_in.load(Ordering::Relaxed);
        if left != 0 {
            self.count_down(left);
        }
    }

    #[cold]
    fn count_down(&self, left: u32) {
        if left > 1 {
            // Only the sink (one signal at a time) counts down; a waiter that
            // stores over this is starting or ending its sleep.
            self.nudge_in.store(left - 1, Ordering::Relaxed);
        } else if self.nudge_in.swap(0, Ordering::Relaxed) != 0 {
            // Under the lock: the waiter checks `nudge_in` and starts waiting under
            // it, so this wake cannot fall between the two.
            drop(self.lock());
            self.ready.notify_all();
        }
    }

    /// Record the terminal result; the first one wins. Returns false if one was set.
    pub(crate) fn finish(&self, result: Result<R, E>) -> bool {
        let mut slot = self.lock();
        if !matches!(slot.completion, Completion::Running) {
            return false;
        }
        slot.completion = Completion::Ended(result);
        // Relaxed: a watching waiter's hint; it reads the result under the lock.
        self.ended.store(true, Ordering::Relaxed);
        let taker = slot.taker.take();
        let wakers = std::mem::take(&mut slot.wakers);
        drop(slot);
        self.ready.notify_all();
        crate::guard::wake_all(taker.into_iter().chain(wakers));
        true
    }

    fn lock(&self) -> MutexGuard<'_, Slot<R, E>> {
        // Little user code under this lock: a waker may be cloned under it, and is
        // woken after it.
        self.result.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// True once a result was recorded (taken or not).
    pub(crate) fn is_terminated(&self) -> bool {
        !matches!(self.lock().completion, Completion::Running)
    }

    /// Block until there is a result or `deadline` (`None`: no deadline) passes;
    /// the slot, locked, once it holds the result.
    fn wait_for(&self, deadline: Option<Instant>) -> Option<MutexGuard<'_, Slot<R, E>>> {
        if let Some(pull) = self.pull.get() {
            return self.wait_watching(&**pull, deadline);
        }
        let mut slot = self.lock();
        while matches!(slot.completion, Completion::Running) {
            slot = self.sleep(slot, deadline)?;
        }
        Some(slot)
    }

    /// One wait on the condition variable, until `deadline` (`None` when it has
    /// passed).
    fn sleep<'a>(
        &'a self,
        slot: MutexGuard<'a, Slot<R, E>>,
        deadline: Option<Instant>,
    ) -> Option<MutexGuard<'a, Slot<R, E>>> {
        Some(match deadline {
            None => self.ready.wait(slot).unwrap_or_else(|p| p.into_inner()),
            Some(deadline) => {
                let now = Instant::now();
                if now >= deadline {
                    return None;
                }
                self.ready
                    .wait_timeout(slot, deadline - now)
                    .unwrap_or_else(|p| p.into_inner())
                    .0
            }
        })
    }

    /// [`wait_for`](Self::wait_for) on a sink whose upstream can be pulled: watch
    /// its lane while items keep coming, sleep when they stop (module docs).
    fn wait_watching(
        &self,
        pull: &dyn Pull,
        deadline: Option<Instant>,
    ) -> Option<MutexGuard<'_, Slot<R, E>>> {
        let passed = || deadline.is_some_and(|deadline| Instant::now() >= deadline);
        // Clears the mark however this returns (a panic in a pull included), so
        // the senders never skip a signal for a waiter that is gone.
        let watching = Watching {
            pull,
            mark: PullMark::default(),
        };
        loop {
            // Relaxed: a hint; the result is read under the lock below.
            let ended = || self.ended.load(Ordering::Relaxed);
            if !ended() && !passed() {
                watching.mark.set(pull, true);
                loop {
                    // A run of items, or after a moment whatever is there: a
                    // fast sender fills a run in a fraction of that moment, and
                    // taking items one by one as each is written made this thread
                    // and the sender's fight over the same line per item.
                    let found = Backoff::wait_settling(|settle| {
                        ended()
                            || if settle {
                                pull.ready()
                            } else {
                                pull.ready_run()
                            }
                    });
                    if ended() || !found {
                        break;
                    }
                    let before = pull.taken();
                    // The channel's drain loop, here: what it delivers reaches
                    // the sink on this thread.
                    pull.pull();
                    // No progress (no demand upstream: a hub held back by a
                    // sibling; or the loop's owner is another thread): sleep
                    // rather than poll items that cannot move.
                    if pull.taken() == before || passed() {
                        break;
                    }
                }
                watching.mark.unwatch(pull);
            }
            let mut slot = self.lock();
            // Relaxed: read and written under the lock here; the sink's count
            // down is a hint (see `took_one`).
            self.nudge_in.store(NUDGE_AFTER, Ordering::Relaxed);
            while matches!(slot.completion, Completion::Running)
                && self.nudge_in.load(Ordering::Relaxed) != 0
            {
                slot = match self.sleep(slot, deadline) {
                    Some(slot) => slot,
                    None => {
                        self.nudge_in.store(0, Ordering::Relaxed);
                        return None;
                    }
                };
            }
            if !matches!(slot.completion, Completion::Running) {
                self.nudge_in.store(0, Ordering::Relaxed);
                return Some(slot);
            }
            // Nudged: items are flowing again; watch.
        }
    }

    /// The slot, locked, once it holds the result; otherwise `cx`'s waker is left to
    /// be woken by [`finish`](Self::finish) (checked and left under one lock: no lost
    /// wake-up): as the taker's (replacing the one of its last poll), or `shared`,
    /// beside the other readers'.
    fn poll_ended(&self, cx: &mut Context<'_>, shared: bool) -> Poll<MutexGuard<'_, Slot<R, E>>> {
        let mut slot = self.lock();
        if matches!(slot.completion, Completion::Running) {
            if shared {
                if !slot.wakers.iter().any(|w| w.will_wake(cx.waker())) {
                    slot.wakers.push(cx.waker().clone());
                }
            } else if !slot.taker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                slot.taker = Some(cx.waker().clone());
            }
            return Poll::Pending;
        }
        Poll::Ready(slot)
    }

    /// Block until there is a result or `deadline` passes, and take it.
    ///
    /// # Panics
    ///
    /// If the result was already taken.
    pub(crate) fn wait_until(&self, deadline: Option<Instant>) -> Option<Result<R, E>> {
        self.wait_for(deadline)
            .map(|mut slot| take(&mut slot.completion))
    }

    /// Take the result if there is one (else wake `cx` when there is).
    ///
    /// # Panics
    ///
    /// If the result was already taken.
    pub(crate) fn poll_take(&self, cx: &mut Context<'_>) -> Poll<Result<R, E>> {
        self.poll_ended(cx, false)
            .map(|mut slot| take(&mut slot.completion))
    }
}

// Read by copy only by `nats::SinkDone` so far.
#[cfg(feature = "nats")]
impl<R: Clone, E: Clone> SinkState<R, E> {
    /// Block until there is a result or `deadline` passes; a copy of it (never
    /// taken: any number of readers).
    pub(crate) fn wait_cloned(&self, deadline: Option<Instant>) -> Option<Result<R, E>> {
        self.wait_for(deadline).map(|slot| cloned(&slot.completion))
    }

    /// A copy of the result if there is one (else wake `cx` when there is).
    pub(crate) fn poll_cloned(&self, cx: &mut Context<'_>) -> Poll<Result<R, E>> {
        self.poll_ended(cx, true)
            .map(|slot| cloned(&slot.completion))
    }
}

/// A waiter's mark on upstream's lane, cleared when it goes.
struct Watching<'a> {
    pull: &'a dyn Pull,
    mark: PullMark,
}

impl Drop for Watching<'_> {
    fn drop(&mut self) {
        self.mark.release(self.pull);
    }
}

/// The caller's side of a sink: cancel it, or wait for its terminal result, blocking
/// ([`wait`](Self::wait)) or in async code (`.await`: the handle is
/// [`IntoFuture`], and the future blocks no thread).
///
/// The sink has already subscribed when you get the handle; for a synchronous source
/// the stream may already be over.
///
/// ```
/// use weir::prelude::*;
///
/// let sum = futures::executor::block_on(async {
///     weir::range(0u64..100).fold(0, |sum, x| sum + x).await
/// });
/// assert_eq!(sum.unwrap(), 4_950);
/// ```
#[must_use = "the handle reports errors; dropping it ignores them (the sink keeps running)"]
pub struct SinkHandle<R> {
    shared: Arc<SinkState<R>>,
}

impl<R> std::fmt::Debug for SinkHandle<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SinkHandle")
            .field("terminated", &self.is_terminated())
            .finish()
    }
}

impl<R> SinkHandle<R> {
    /// A handle whose sink has already ended with `result` (a fused fold).
    pub(crate) fn ended(result: Result<R, Error>) -> Self {
        let shared = SinkState::new();
        shared.finish(result);
        SinkHandle::new(shared)
    }

    pub(crate) fn new(shared: Arc<SinkState<R>>) -> Self {
        SinkHandle { shared }
    }

    /// Cancel the subscription. If the stream had not terminated yet, the result
    /// becomes an error of kind [`Cancelled`](crate::ErrorKind::Cancelled).
    /// Idempotent.
    pub fn cancel(&self) {
        self.shared.slot.cancel();
        self.shared.finish(Err(Error::cancelled()));
    }

    /// True once the stream completed, failed or was cancelled.
    pub fn is_terminated(&self) -> bool {
        self.shared.is_terminated()
    }

    /// Block until the stream terminates and return its result. In async code,
    /// `.await` the handle instead: it blocks no thread.
    ///
    /// When the sink's upstream is a [`channel`](fn@crate::channel) (directly, or
    /// through stages or a hub), the waiting thread takes the channel's items
    /// itself while they keep coming, as a consumer thread of a bounded queue
    /// would: the sink's closure (and the stages between) may then run on this
    /// thread instead of the senders'. When items stop coming for a moment it
    /// sleeps, and the senders deliver on their own threads until items flow
    /// again.
    ///
    /// # Panics
    ///
    /// If the result was already taken by [`wait_timeout`](Self::wait_timeout). With
    /// the `tokio` feature, if it would have to wait on a thread that drives a tokio
    /// runtime's async code (inside `block_on` or a task), as tokio's own `block_on`
    /// does: the message says to `.await` instead. On a current-thread runtime that
    /// wait would hang for good. `spawn_blocking` threads may wait.
    ///
    /// ```should_panic
    /// # #[cfg(not(feature = "tokio"))] panic!("`.await` instead");
    /// # #[cfg(feature = "tokio")] {
    /// use weir::prelude::*;
    ///
    /// let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    /// runtime.block_on(async {
    ///     let (tx, rx) = tokio::sync::mpsc::channel::<u32>(8);
    ///     let all = weir::from_receiver(rx).collect();
    ///     drop(tx);
    ///     // panics: "… `.await` instead …" (the receiver's task cannot run meanwhile)
    ///     let _ = all.wait();
    /// });
    /// # }
    /// ```
    #[track_caller]
    pub fn wait(self) -> Result<R, Error> {
        self.wait_until(None)
            .expect("waiting without a deadline ends with a result")
    }

    /// Wait at most `timeout`; `None` if the stream is still running. A returned
    /// result is taken: a second call panics. A timeout that does not fit the clock
    /// (`Duration::MAX`) waits as long as [`wait`](Self::wait).
    ///
    /// # Panics
    ///
    /// As [`wait`](Self::wait), on a thread that drives a tokio runtime.
    #[track_caller]
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<Result<R, Error>> {
        self.wait_until(crate::runtime::deadline(Instant::now(), timeout))
    }

    /// Wait until the stream terminates or `deadline` (`None`: no deadline) passes.
    #[track_caller]
    fn wait_until(&self, deadline: Option<Instant>) -> Option<Result<R, Error>> {
        if !self.shared.is_terminated() {
            crate::runtime::forbid_blocking_in_async("SinkHandle::wait");
        }
        self.shared.wait_until(deadline)
    }
}

impl<R> IntoFuture for SinkHandle<R> {
    type Output = Result<R, Error>;
    type IntoFuture = SinkFuture<R>;

    /// Await the stream's terminal result without blocking a thread.
    fn into_future(self) -> SinkFuture<R> {
        SinkFuture { handle: Some(self) }
    }
}

/// The future of a [`SinkHandle`] (`handle.await`): resolves to the stream's terminal
/// result. Dropping it before the stream ended cancels the sink (nobody can read its
/// result any more); to let a sink run unobserved, drop the handle instead.
#[must_use = "futures do nothing unless awaited; dropping this one cancels the sink"]
pub struct SinkFuture<R> {
    /// `None` once the result was returned.
    handle: Option<SinkHandle<R>>,
}

impl<R> std::fmt::Debug for SinkFuture<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SinkFuture")
            .field("done", &self.handle.is_none())
            .finish()
    }
}

impl<R> Unpin for SinkFuture<R> {}

impl<R> Future for SinkFuture<R> {
    type Output = Result<R, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let handle = this
            .handle
            .as_ref()
            .expect("SinkFuture polled after it returned its result");
        let result = std::task::ready!(handle.shared.poll_take(cx));
        this.handle = None;
        Poll::Ready(result)
    }
}

impl<R> Drop for SinkFuture<R> {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            if !handle.is_terminated() {
                handle.cancel();
            }
        }
    }
}

#[cfg(feature = "nats")]
fn cloned<R: Clone, E: Clone>(slot: &Completion<R, E>) -> Result<R, E> {
    match slot {
        Completion::Ended(result) => result.clone(),
        Completion::Taken | Completion::Running => {
            unreachable!("a result that is read by copy is never taken")
        }
    }
}

fn take<R, E>(slot: &mut Completion<R, E>) -> Result<R, E> {
    match std::mem::replace(slot, Completion::Taken) {
        Completion::Ended(result) => result,
        Completion::Taken => panic!("the sink's result was already taken"),
        Completion::Running => unreachable!("take is only called after termination"),
    }
}

#[cfg(all(test, not(weir_loom)))]
mod tests {
    use std::sync::atomic::{AtomicIsize, AtomicUsize};

    use super::*;

    /// A lane that always has items and never lets any through (no demand upstream:
    /// a hub held back by a sibling), or never has any (`items == false`). Counts
    /// its pulls and its watchers.
    #[derive(Default)]
    struct Lane {
        items: bool,
        pulls: AtomicUsize,
        watches: AtomicUsize,
        watchers: AtomicIsize,
    }

    impl Pull for Lane {
        fn watch(&self, on: bool) {
            if on {
                self.watches.fetch_add(1, Ordering::SeqCst);
                self.watchers.fetch_add(1, Ordering::SeqCst);
            } else {
                self.watchers.fetch_sub(1, Ordering::SeqCst);
            }
        }
        fn ready(&self) -> bool {
            self.items
        }
        fn ready_run(&self) -> bool {
            self.items
        }
        fn claimed(&self) -> bool {
            self.items
        }
        fn pull(&self) {
            self.pulls.fetch_add(1, Ordering::SeqCst);
        }
        fn taken(&self) -> usize {
            // Nothing ever moves.
            0
        }
    }

    fn watched(lane: &Arc<Lane>) -> Arc<SinkState<u32>> {
        let state = SinkState::<u32>::new();
        let pull: Arc<dyn Pull> = lane.clone();
        assert!(state.pull.set(pull).is_ok());
        state
    }

    #[test]
    fn a_waiter_whose_pulls_deliver_nothing_sleeps_instead_of_pulling_on() {
        let lane = Arc::new(Lane {
            items: true,
            ..Lane::default()
        });
        let state = watched(&lane);
        let deadline = Instant::now() + Duration::from_millis(50);
        assert!(state.wait_for(Some(deadline)).is_none(), "no result yet");
        // One pull while watching, one after the fence (the claims it saw); a
        // waiter that kept pulling would count thousands in 50 ms.
        assert_eq!(lane.pulls.load(Ordering::SeqCst), 2);
        assert_eq!(lane.watches.load(Ordering::SeqCst), 1);
        assert_eq!(lane.watchers.load(Ordering::SeqCst), 0, "the mark is gone");
    }

    #[test]
    fn a_sleeping_waiter_is_nudged_back_to_watch_after_a_run_of_deliveries() {
        let lane = Arc::new(Lane::default());
        let state = watched(&lane);
        let waiter = {
            let state = state.clone();
            std::thread::spawn(move || state.wait_until(None))
        };
        // The first watch finds nothing and the waiter sleeps.
        let started = Instant::now();
        while state.nudge_in.load(Ordering::SeqCst) == 0 {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "it never slept"
            );
            std::thread::yield_now();
        }
        assert_eq!(lane.watches.load(Ordering::SeqCst), 1);
        // Items handed over one at a time on other threads: the last of the run
        // wakes it.
        for _ in 0..NUDGE_AFTER {
            state.took_one();
        }
        while lane.watches.load(Ordering::SeqCst) < 2 {
            assert!(started.elapsed() < Duration::from_secs(30), "not nudged");
            std::thread::yield_now();
        }
        assert!(state.finish(Ok(7)));
        assert!(matches!(waiter.join().unwrap(), Some(Ok(7))));
        assert_eq!(lane.watchers.load(Ordering::SeqCst), 0, "the mark is gone");
    }
}
