//! `from_stream_on(stream, scheduler)` (and `from_stream`, `try_from_stream*`,
//! `from_receiver*`): a `futures::Stream` as a publisher that polls only while there
//! is demand.
//!
//! # Algorithm
//!
//! One subscription is one `Core`: the pinned stream and the subscriber behind a lock
//! that only the owner of the core's [`Wip`] takes, the outstanding demand, and a
//! flags byte (cancelled, bad request). Whoever moves the `Wip` from 0 to 1 owns the
//! core and hands the ownership to **one poll task** on the scheduler; every other
//! reason to run (a `request`, the stream's waker firing, a request made from inside
//! `on_next`) only increments the counter, and the task runs another pass for it. So
//! there is at most one poll task in flight, and signals are serial (rule 1.3).
//!
//! A pass takes the demand and hands the subscriber a *lazy* batch: an iterator whose
//! `next` polls the stream once, at most `min(demand, CHUNK)` times, with a waker that
//! re-enters the `Wip` (and so schedules the next poll task) when the stream is ready
//! again. A stream that is `Pending` ends the pass and its unused demand waits in the
//! `AtomicDemand`; a stream that yields `None` completes the subscriber. A pass that
//! has emitted `TASK_BUDGET` items reschedules itself instead of looping, so an
//! always-ready stream under unbounded demand does not hold a worker thread for ever.
//!
//! # Demand contract
//!
//! The stream is polled only by the batch iterator, and the iterator is bounded by
//! the demand taken for the pass: **never a poll without outstanding demand**, and no
//! item is ever buffered (nothing is spawned to read ahead; in-flight bound 0). The
//! price: when the demand runs out exactly at the stream's last item, completion is
//! only seen on the poll the next `request` allows (a stream cannot be asked "are you
//! done?" without taking an item nobody asked for). Batch credit returned by the
//! subscriber is added to the pass's demand with plain arithmetic.
//!
//! # Cancellation
//!
//! `cancel` sets the flag and enters the `Wip`; if no pass is running, the cancelling
//! thread drops the stream and the subscriber on the spot, otherwise the running pass
//! sees the flag before its next poll and drops them. Either way the stream (and what
//! it holds: a channel receiver, a socket) is released within one scheduler turn.

use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll};

use futures::stream::Stream;
use futures::task::{waker_ref, ArcWake};

use super::handoff::into_error;
use crate::demand::{self, AtomicDemand, UNBOUNDED};
use crate::drain::Wip;
use crate::guard::catch;
use crate::runtime::Scheduler;
use crate::{Error, Publisher, RawSubscription, Subscriber, Subscription};

/// Largest batch handed to the subscriber in one `on_next_batch`; the cancelled flag
/// is also read before every poll.
const CHUNK: u64 = 1024;
/// Items one poll task may emit before it reschedules itself (fairness to the
/// scheduler's other tasks).
const TASK_BUDGET: u64 = 16 * CHUNK;
/// Passes one poll task may run (woken streams, re-entrant requests) before it
/// reschedules itself.
const TASK_PASSES: u32 = 32;

/// Flag: the subscriber cancelled.
const CANCELLED: u8 = 1;
/// Flag: the subscriber called `request(0)` (rule 3.9).
const BAD_REQUEST: u8 = 2;

/// A stream whose items are emitted as they are ([`from_stream_on`]).
#[derive(Clone, Debug)]
pub struct Plain<S>(S);

#[cfg(feature = "tokio")]
impl<S> Plain<S> {
    pub(crate) fn new(stream: S) -> Self {
        Plain(stream)
    }
}

/// A stream of `Result<T, E>` whose first error ends the stream
/// ([`try_from_stream_on`]).
#[derive(Clone, Debug)]
pub struct Fallible<S>(S);

/// A publisher over a [`futures::Stream`], polled on a [`Scheduler`] only while there
/// is demand. Built by [`from_stream_on`], [`try_from_stream_on`] and (feature
/// `tokio`) `from_stream`, `try_from_stream`.
///
/// `Clone` when the stream and the scheduler are: each clone subscribes its own copy
/// of the stream.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct FromStream<S, C> {
    stream: S,
    scheduler: C,
}

impl<S, C> FromStream<S, C> {
    pub(crate) fn build(stream: S, scheduler: C) -> Self {
        FromStream { stream, scheduler }
    }
}

/// A publisher of the items of `stream`, polled on `scheduler` only while the
/// subscriber has outstanding demand.
///
/// # Backpressure
///
/// Polled only with demand: the stream is polled at most as many times as items were
/// requested and not yet delivered (plus once per `Pending` it answers, and once for
/// the final `None`); with no demand it is not polled at all, even when its waker
/// fires. Nothing is read ahead and nothing is spawned to buffer: in-flight bound 0.
/// Requests are served on a poll task on `scheduler`, at most one at a time; the
/// stream's waker schedules the next one. Because the stream is not polled without
/// demand, a completion right after the last requested item is seen with the next
/// request (the conformance kit's rule 1.2/1.5 tests request once more and pass).
///
/// # Timing
///
/// ```text
/// request : 2-----1-------1
/// polls   : PP----P-------P
/// output  : ab----c-------|
/// ```
///
/// # Errors
///
/// A plain stream never fails; a panic in its `poll_next` becomes `on_error` of kind
/// [`Panicked`](crate::ErrorKind::Panicked). For a stream of `Result`s, use
/// [`try_from_stream_on`]. `request(0)` is answered with the rule 3.9 error.
///
/// # Cancellation
///
/// The stream is moved into the subscription on `subscribe` and dropped when the
/// subscription ends: at completion, or at `cancel`, which drops it on the spot when
/// no poll task is running, or at the end of the running task's current poll (within
/// one scheduler turn) otherwise. What the stream holds (a receiver, a socket) is
/// released with it.
///
/// # Panics
///
/// Never at construction. A panicking subscriber is treated as cancelled (rule 2.13).
///
/// # Examples
///
/// ```
/// use weir::prelude::*;
/// use weir::runtime::Immediate;
///
/// let s = futures::stream::iter(1u32..=3);
/// let items = weir::bridge::from_stream_on(s, Immediate).collect().wait().unwrap();
/// assert_eq!(items, vec![1, 2, 3]);
/// ```
pub fn from_stream_on<S, C>(stream: S, scheduler: C) -> FromStream<Plain<S>, C>
where
    S: Stream + Send + 'static,
    S::Item: Send + 'static,
    C: Scheduler + Clone,
{
    FromStream::build(Plain(stream), scheduler)
}

/// A publisher of the `Ok` items of `stream`, polled on `scheduler` only while there
/// is demand; the first `Err(e)` becomes `on_error` and drops the stream.
///
/// `e` is converted into an [`Error`]: a `weir::Error` passes through unchanged, any
/// other error becomes kind [`Upstream`](crate::ErrorKind::Upstream) with `e` as its
/// [`source`](std::error::Error::source).
///
/// # Examples
///
/// ```
/// use weir::prelude::*;
/// use weir::runtime::Immediate;
///
/// let s = futures::stream::iter(vec![Ok(1u32), Err(std::fmt::Error), Ok(3)]);
/// let err = weir::bridge::try_from_stream_on(s, Immediate).collect().wait().unwrap_err();
/// assert_eq!(err.kind(), weir::ErrorKind::Upstream);
/// ```
pub fn try_from_stream_on<S, T, E, C>(stream: S, scheduler: C) -> FromStream<Fallible<S>, C>
where
    S: Stream<Item = Result<T, E>> + Send + 'static,
    T: Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
    C: Scheduler + Clone,
{
    FromStream::build(Fallible(stream), scheduler)
}

/// How a subscription polls its stream: pinned once at subscribe, then polled with
/// the stream's items (or errors) mapped to `Result<Item, Error>`. Implemented by
/// [`Plain`] and [`Fallible`]; not meant to be implemented outside weir.
pub trait StreamSource: Send + 'static {
    /// What the publisher emits.
    type Item: Send + 'static;
    /// The pinned state `Core` keeps.
    type Pinned: Send + 'static;
    /// Pin the stream (once, at subscribe).
    fn pin(self) -> Self::Pinned;
    /// Poll the pinned stream once.
    fn poll_pinned(
        pinned: &mut Self::Pinned,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Self::Item, Error>>>;
}

impl<S> StreamSource for Plain<S>
where
    S: Stream + Send + 'static,
    S::Item: Send + 'static,
{
    type Item = S::Item;
    type Pinned = Pin<Box<S>>;

    fn pin(self) -> Pin<Box<S>> {
        Box::pin(self.0)
    }

    #[inline]
    fn poll_pinned(
        pinned: &mut Pin<Box<S>>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<S::Item, Error>>> {
        pinned.as_mut().poll_next(cx).map(|item| item.map(Ok))
    }
}

impl<S, T, E> StreamSource for Fallible<S>
where
    S: Stream<Item = Result<T, E>> + Send + 'static,
    T: Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    type Item = T;
    type Pinned = Pin<Box<S>>;

    fn pin(self) -> Pin<Box<S>> {
        Box::pin(self.0)
    }

    #[inline]
    fn poll_pinned(
        pinned: &mut Pin<Box<S>>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<T, Error>>> {
        pinned
            .as_mut()
            .poll_next(cx)
            .map(|item| item.map(|r| r.map_err(into_error)))
    }
}

impl<B, C> Publisher for FromStream<B, C>
where
    B: StreamSource,
    C: Scheduler + Clone,
{
    type Item = B::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<B::Item> + Send + 'static,
    {
        subscribe::<B, S, C>(self.stream.pin(), self.scheduler, subscriber)
    }
}

/// Subscribe `subscriber` to the pinned stream `pinned`, polling on `scheduler`.
pub(crate) fn subscribe<B, S, C>(pinned: B::Pinned, scheduler: C, subscriber: S)
where
    B: StreamSource,
    S: Subscriber<B::Item> + Send + 'static,
    C: Scheduler + Clone,
{
    let core = Arc::new_cyclic(|this| Core::<B, S, C> {
        this: this.clone(),
        demand: AtomicDemand::new(),
        wip: Wip::new(),
        flags: AtomicU8::new(0),
        scheduler,
        state: Mutex::new(None),
    });
    let entered = core.wip.enter();
    debug_assert!(entered, "a new core has no other owner");
    {
        let mut state = core.lock();
        let mut subscriber = subscriber;
        let subscription = Subscription::new(core.clone());
        if crate::guard::on_subscribe(&mut subscriber, subscription) {
            *state = Some((pinned, subscriber));
        } else {
            // Relaxed: only this thread (the owner) reads it before `leave`.
            core.flags.fetch_or(CANCELLED, Ordering::Relaxed);
        }
    }
    // Whatever on_subscribe did (requests, cancel) was counted while we owned the
    // loop: hand those reasons to a poll task (or handle a cancel here).
    let missed = core.wip.leave(1);
    if missed > 0 {
        core.hand_off(missed);
    }
}

/// How a pass ended.
enum PassEnd {
    /// Out of demand, or the stream is pending: wait for a request or a wake.
    Idle,
    /// Emitted a task's budget with demand left: reschedule.
    Yield,
}

/// One subscription. See the module docs.
struct Core<B: StreamSource, S, C> {
    /// Ourselves, for `request` (which only has `&self`) to hand to a poll task.
    this: Weak<Self>,
    /// Demand requested and not yet taken by a pass.
    demand: AtomicDemand,
    /// Ownership of the poll loop; reasons to run another pass.
    wip: Wip,
    /// `CANCELLED | BAD_REQUEST`.
    flags: AtomicU8,
    scheduler: C,
    /// The pinned stream and the subscriber; `None` once terminated or cancelled.
    /// Locked only by the `Wip` owner, so never contended.
    state: Mutex<Option<(B::Pinned, S)>>,
}

impl<B, S, C> Core<B, S, C>
where
    B: StreamSource,
    S: Subscriber<B::Item> + Send + 'static,
    C: Scheduler + Clone,
{
    fn lock(&self) -> MutexGuard<'_, Option<(B::Pinned, S)>> {
        // Panics are caught inside the lock, so it is never poisoned in practice.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Register a reason to run; the caller that takes ownership hands it off.
    fn signal(self: &Arc<Self>) {
        if self.wip.enter() {
            self.hand_off(1);
        }
    }

    /// We own the loop with `missed` reasons to account for. A cancel is handled on
    /// this thread at once (it only drops); anything else goes to a poll task.
    fn hand_off(self: &Arc<Self>, missed: usize) {
        // Relaxed: our own `Wip::enter`/`leave` (AcqRel) ordered us after the write.
        if self.flags.load(Ordering::Relaxed) & CANCELLED != 0 {
            self.run(missed);
        } else {
            self.schedule(missed);
        }
    }

    /// Give our ownership (with `missed` reasons) to a new poll task.
    fn schedule(self: &Arc<Self>, missed: usize) {
        let core = Arc::clone(self);
        self.scheduler.schedule(Box::new(move || core.run(missed)));
    }

    /// The poll task: run passes until no reason is left, or reschedule after a
    /// budget. Only ever called by the `Wip` owner.
    fn run(self: &Arc<Self>, mut missed: usize) {
        let mut passes = 0u32;
        loop {
            let end = self.pass();
            passes += 1;
            if matches!(end, PassEnd::Yield) {
                // Keep ownership (and the unaccounted reasons) for the next task.
                self.schedule(missed);
                return;
            }
            missed = self.wip.leave(missed);
            if missed == 0 {
                return;
            }
            if passes == TASK_PASSES {
                // Still woken or requested after many passes: let other tasks run.
                self.schedule(missed);
                return;
            }
        }
    }

    /// The subscription is over: later requests are no-ops (rules 1.6, 3.6), later
    /// wakes find nothing to poll.
    fn over(&self) {
        // Relaxed: read by `request` only as a shortcut; the owner re-checks the
        // state under the lock.
        self.flags.fetch_or(CANCELLED, Ordering::Relaxed);
    }

    /// One drain pass; runs only on the `Wip` owner.
    fn pass(self: &Arc<Self>) -> PassEnd {
        let mut state = self.lock();
        let Some((pinned, subscriber)) = state.as_mut() else {
            return PassEnd::Idle;
        };
        let waker = waker_ref(self);
        let mut cx = Context::from_waker(&waker);
        // One guard around the whole pass: a panic here can only be the subscriber's
        // (the stream's own panics are caught per poll by `Polled`).
        match catch(|| self.emit(pinned, subscriber, &mut cx)) {
            Ok(Some(end)) => end,
            Ok(None) => {
                *state = None;
                self.over();
                PassEnd::Idle
            }
            Err(_) => {
                tracing::error!("subscriber panicked (rule 2.13); treated as cancelled");
                *state = None;
                self.over();
                PassEnd::Idle
            }
        }
    }

    /// Emit batches while there is demand. `None`: the subscription is over (drop
    /// the stream and the subscriber).
    #[inline]
    fn emit(
        &self,
        pinned: &mut B::Pinned,
        subscriber: &mut S,
        cx: &mut Context<'_>,
    ) -> Option<PassEnd> {
        let mut local = 0u64;
        let mut emitted_in_task = 0u64;
        loop {
            // Relaxed: flags are written before the writer's `Wip::enter` (AcqRel),
            // which this owner's `enter`/`leave` Acquired before the pass; a flag set
            // re-entrantly from inside `on_next` is our own thread's write.
            let flags = self.flags.load(Ordering::Relaxed);
            if flags & CANCELLED != 0 {
                return None;
            }
            if flags & BAD_REQUEST != 0 {
                subscriber.on_error(demand::validate(0).unwrap_err());
                return None;
            }
            if local != UNBOUNDED {
                local = local.saturating_add(self.demand.take());
            }
            if local == 0 {
                return Some(PassEnd::Idle);
            }
            let budget = local.min(CHUNK);
            let mut polled = Polled::<B> {
                pinned: &mut *pinned,
                cx: &mut *cx,
                flags: &self.flags,
                left: budget,
                count: 0,
                stop: Stop::No,
            };
            let credit = subscriber.on_next_batch(&mut polled);
            let (count, stop) = (polled.count, polled.stop);
            if local != UNBOUNDED {
                local = (local - count).saturating_add(credit);
            }
            emitted_in_task += count;
            match stop {
                Stop::End(Ok(())) => {
                    subscriber.on_complete();
                    return None;
                }
                Stop::End(Err(error)) => {
                    subscriber.on_error(error);
                    return None;
                }
                Stop::Pending => {
                    // The waker schedules the next pass; keep the unused demand.
                    if local > 0 {
                        self.demand.add(local);
                    }
                    return Some(PassEnd::Idle);
                }
                Stop::No => {}
            }
            if emitted_in_task >= TASK_BUDGET {
                if local > 0 {
                    self.demand.add(local);
                }
                return Some(PassEnd::Yield);
            }
        }
    }
}

/// Why a lazy batch stopped early.
enum Stop {
    /// It did not (budget used, subscriber stopped pulling, or cancelled).
    No,
    /// The stream returned `Pending`; its waker will call back.
    Pending,
    /// The stream ended (or failed, or panicked).
    End(Result<(), Error>),
}

/// A lazy batch: each `next` polls the stream once, within the pass's demand.
struct Polled<'a, 'c, B: StreamSource> {
    pinned: &'a mut B::Pinned,
    cx: &'a mut Context<'c>,
    flags: &'a AtomicU8,
    left: u64,
    count: u64,
    stop: Stop,
}

impl<B: StreamSource> Iterator for Polled<'_, '_, B> {
    type Item = B::Item;

    #[inline]
    fn next(&mut self) -> Option<B::Item> {
        // Relaxed: see `Core::emit`; a cancel from inside `on_next` is our own write.
        if self.left == 0
            || !matches!(self.stop, Stop::No)
            || self.flags.load(Ordering::Relaxed) & CANCELLED != 0
        {
            return None;
        }
        match catch(|| B::poll_pinned(self.pinned, self.cx)) {
            Ok(Poll::Ready(Some(Ok(item)))) => {
                self.left -= 1;
                self.count += 1;
                Some(item)
            }
            Ok(Poll::Ready(Some(Err(error)))) | Err(error) => {
                self.stop = Stop::End(Err(error));
                None
            }
            Ok(Poll::Ready(None)) => {
                self.stop = Stop::End(Ok(()));
                None
            }
            Ok(Poll::Pending) => {
                self.stop = Stop::Pending;
                None
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, usize::try_from(self.left).ok())
    }
}

impl<B, S, C> ArcWake for Core<B, S, C>
where
    B: StreamSource,
    S: Subscriber<B::Item> + Send + 'static,
    C: Scheduler + Clone,
{
    fn wake_by_ref(arc_self: &Arc<Self>) {
        arc_self.signal();
    }
}

impl<B, S, C> RawSubscription for Core<B, S, C>
where
    B: StreamSource,
    S: Subscriber<B::Item> + Send + 'static,
    C: Scheduler + Clone,
{
    fn request(&self, n: u64) {
        // Relaxed: a stale "not cancelled" only costs one pass that sees the flag.
        if self.flags.load(Ordering::Relaxed) & CANCELLED != 0 {
            return;
        }
        match demand::validate(n) {
            Ok(n) => {
                self.demand.add(n);
            }
            Err(_) => {
                // Relaxed: published to the owner by the `Wip::enter` below (AcqRel).
                self.flags.fetch_or(BAD_REQUEST, Ordering::Relaxed);
            }
        }
        if self.wip.enter() {
            self.schedule_from_ref(1);
        }
    }

    fn cancel(&self) {
        // Relaxed: published to the owner by the `Wip::enter` below (AcqRel).
        self.flags.fetch_or(CANCELLED, Ordering::Relaxed);
        if self.wip.enter() {
            // We own the loop: drop the stream and the subscriber right here.
            *self.lock() = None;
            let mut missed = 1;
            loop {
                missed = self.wip.leave(missed);
                if missed == 0 {
                    return;
                }
                // Later reasons (a wake, a request) find nothing left to do.
            }
        }
    }
}

impl<B, S, C> Core<B, S, C>
where
    B: StreamSource,
    S: Subscriber<B::Item> + Send + 'static,
    C: Scheduler + Clone,
{
    /// `request` has only `&self`: the poll task needs an `Arc`, which the core's
    /// weak self-reference gives back while any handle (the subscription) lives.
    fn schedule_from_ref(&self, missed: usize) {
        match self.this.upgrade() {
            Some(core) => core.schedule(missed),
            None => {
                let _ = self.wip.leave(missed);
            }
        }
    }
}

// ---- tokio defaults (feature `tokio`) ----

#[cfg(feature = "tokio")]
pub(crate) fn current_tokio(what: &str) -> crate::runtime::Tokio {
    match ::tokio::runtime::Handle::try_current() {
        Ok(handle) => crate::runtime::Tokio::new(handle),
        Err(_) => panic!(
            "weir::{what} must be called inside a tokio runtime \
             (or use {what}_on with an explicit scheduler)"
        ),
    }
}

/// [`from_stream_on`] on the tokio runtime this is called in (feature `tokio`).
///
/// The runtime is captured now, so the publisher may be subscribed from any thread.
///
/// # Panics
///
/// Outside a tokio runtime: "weir::from_stream must be called inside a tokio runtime
/// (or use from_stream_on with an explicit scheduler)".
///
/// # Examples
///
/// ```
/// use futures::StreamExt as _;
/// use weir::prelude::*;
///
/// # let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).build().unwrap();
/// # rt.block_on(async {
/// let doubled: Vec<u32> = weir::from_stream(futures::stream::iter(1u32..=3))
///     .map(|x| x * 2)
///     .into_stream(16)
///     .map(Result::unwrap)
///     .collect()
///     .await;
/// assert_eq!(doubled, vec![2, 4, 6]);
/// # });
/// ```
#[cfg(feature = "tokio")]
pub fn from_stream<S>(stream: S) -> FromStream<Plain<S>, crate::runtime::Tokio>
where
    S: Stream + Send + 'static,
    S::Item: Send + 'static,
{
    from_stream_on(stream, current_tokio("from_stream"))
}

/// [`try_from_stream_on`] on the tokio runtime this is called in (feature `tokio`).
///
/// # Panics
///
/// Outside a tokio runtime: "weir::try_from_stream must be called inside a tokio
/// runtime (or use try_from_stream_on with an explicit scheduler)".
#[cfg(feature = "tokio")]
pub fn try_from_stream<S, T, E>(stream: S) -> FromStream<Fallible<S>, crate::runtime::Tokio>
where
    S: Stream<Item = Result<T, E>> + Send + 'static,
    T: Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    try_from_stream_on(stream, current_tokio("try_from_stream"))
}
