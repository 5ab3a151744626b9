//! `create`: a source your code pushes into, through an [`Emitter`] that knows the
//! demand.
//!
//! # The algorithm
//!
//! Two counters and one short lock:
//!
//! * **credit** (an [`AtomicDemand`]): what downstream requested and no emitter has
//!   emitted yet. A request adds to it; [`Emitter::emit`] takes one unit with a
//!   compare-and-swap *before* it queues the item, and refuses the item
//!   ([`EmitError::NoDemand`]) when there is none ([`Emitter::emit_all`] takes a unit
//!   per item of a burst, under one lock). So the emitters, from any number
//!   of threads, can never get ahead of demand: rule 1.1 holds at the door, not by
//!   buffering. Batch credit a synchronous subscriber hands back counts as a request.
//! * **the queue** (under the state lock): items emitted and not yet delivered. It
//!   never holds more than downstream asked for, since each item there took a unit of
//!   credit first; usually it holds one item for the moment between `emit` and the
//!   pass that delivers it.
//! * **delivery** is the engine room's one drain loop (the signal core): `emit`
//!   queues its item and signals the core; whichever thread owns the loop (the
//!   emitting thread, when nobody else does) takes the queued items under the lock,
//!   releases it, and hands them downstream in one batch. Signals are serialised
//!   there (rule 1.3), and a request made inside `on_next` only records a reason to
//!   run (rule 3.3).
//!
//! Waiting for demand: [`Emitter::ready`] (a future) and [`Emitter::wait_ready`]
//! (blocking) register under the state lock; every request wakes them after it has
//! added its credit. The [`on_request`](Emitter::on_request) hook runs after that, on
//! the requesting thread, outside every lock.
//!
//! # Ending
//!
//! [`Emitter::complete`] / [`Emitter::error`] (or dropping the last emitter, which
//! completes) end the stream after the queued items. A downstream cancel (or a
//! `request(0)`, or a panicking subscriber) closes the emitter: queued items are
//! dropped, waiters wake with [`EmitterClosed`], later emits are refused with
//! [`EmitError::Closed`], and the [`on_cancel`](Emitter::on_cancel) hook runs once.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::task::{Context, Poll, Waker};

use super::channel::Waiters;
use crate::demand::{AtomicDemand, LocalDemand};
use crate::guard::{catch, catch_in};
use crate::stage::{Core, CoreHandle, Cx, Pass, Stage};
use crate::{Error, Publisher, Subscriber};

/// Largest batch one pass takes out of the queue.
const BATCH: u64 = 256;

/// The request hook (only its runner calls it, one call at a time).
type RequestHook = Arc<Mutex<dyn FnMut(u64) + Send>>;
/// The cancel hook.
type CancelHook = Box<dyn FnOnce() + Send>;

/// Publisher for [`create`]. It subscribes once per `create` value; clone it (with a
/// `Clone` closure) to subscribe again, running the closure again.
#[must_use = "publishers do nothing until subscribed"]
pub struct Create<T, F> {
    f: F,
    _item: PhantomData<fn() -> T>,
}

impl<T, F: Clone> Clone for Create<T, F> {
    fn clone(&self) -> Self {
        Create {
            f: self.f.clone(),
            _item: PhantomData,
        }
    }
}

impl<T, F> fmt::Debug for Create<T, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Create").finish_non_exhaustive()
    }
}

/// A publisher fed by your code through an [`Emitter`]: `f` runs once per
/// subscription, right after `on_subscribe`, on the subscribing thread, and gets the
/// emitter. Move the emitter to the thread, task or callback that produces the items;
/// clone it for several producers.
///
/// The emitter tracks the demand: [`requested`](Emitter::requested) says how many
/// items may be emitted now, [`emit`](Emitter::emit) refuses an item beyond it with
/// [`EmitError::NoDemand`] (the item comes back), [`send`](Emitter::send) /
/// [`send_blocking`](Emitter::send_blocking) wait for demand first, and
/// [`ready`](Emitter::ready) / [`wait_ready`](Emitter::wait_ready) /
/// [`on_request`](Emitter::on_request) tell a producer when to produce.
///
/// How it works: a request adds credit; `emit` takes one unit of credit with a
/// compare-and-swap *before* it queues the item (so emitters on any number of threads
/// never get ahead of demand), queues it under a short lock and signals the one drain
/// loop, which delivers on whichever thread owns it (rules 1.3 and 3.3). Batch credit a
/// synchronous subscriber hands back counts as a request.
///
/// Use it to wrap a callback API or a producer that can be told to wait. A producer
/// that cannot wait (a socket that keeps pushing) wants [`channel`](fn@crate::channel)
/// instead: it buffers within a bound and applies an overflow policy.
///
/// # Backpressure
///
/// Full, at the emitter: never more `on_next` than requested (rule 1.1), because an
/// item is only accepted against credit. Nothing is buffered beyond demand; the
/// queue between an emitter and the drain loop holds at most the outstanding demand.
///
/// # Errors
///
/// [`Emitter::error`] ends the stream with that error after the queued items. A panic
/// in `f` (or in an `on_request` hook) ends it with an error of kind
/// [`Panicked`](crate::ErrorKind::Panicked); items already emitted are delivered
/// first. `request(0)` fails the stream with the rule 3.9 error.
///
/// # Threads
///
/// Items are delivered on whichever thread runs the drain loop: usually the emitting
/// thread, or the subscriber's when it requests while items wait. Put
/// [`publish_on`](crate::PublisherExt::publish_on) after the source to consume
/// elsewhere.
///
/// # Cancellation
///
/// Dropped queued items, refused later emits ([`EmitError::Closed`]), waiters woken
/// with [`EmitterClosed`], and the [`on_cancel`](Emitter::on_cancel) hook run once.
/// If downstream cancels inside `on_subscribe`, `f` is not called.
///
/// # Examples
///
/// A producer thread that waits for demand, emits, and completes by dropping the
/// emitter:
///
/// ```
/// use weir::prelude::*;
///
/// let readings = weir::create(|emitter| {
///     std::thread::spawn(move || {
///         for i in 0..1_000u32 {
///             // Blocks while downstream has no demand; Err once it cancelled.
///             if emitter.send_blocking(i).is_err() {
///                 return;
///             }
///         }
///     }); // the last emitter dropped: the stream completes
/// });
/// let sum = readings.fold(0u64, |sum, x| sum + u64::from(x)).wait().unwrap();
/// assert_eq!(sum, 499_500);
/// ```
///
/// Emitting without demand is refused, and the item comes back:
///
/// ```
/// # #[cfg(feature = "tck")] {
/// use weir::prelude::*;
/// use weir::source::EmitError;
/// use weir::tck::TestSubscriber;
///
/// let subscriber = TestSubscriber::<u8>::new();
/// let probe = subscriber.probe();
/// let (tx, rx) = std::sync::mpsc::channel();
/// weir::create(move |emitter| tx.send(emitter).unwrap()).subscribe(subscriber);
/// let emitter = rx.recv().unwrap();
/// assert!(matches!(emitter.emit(1), Err(EmitError::NoDemand(1))));
/// probe.request(1);
/// assert_eq!(emitter.requested(), 1);
/// emitter.emit(1).unwrap();
/// assert!(emitter.emit(2).unwrap_err().is_no_demand());
/// assert_eq!(probe.items(), [1]);
/// # }
/// ```
pub fn create<T, F>(f: F) -> Create<T, F>
where
    T: Send + 'static,
    F: FnOnce(Emitter<T>) + Send + 'static,
{
    Create {
        f,
        _item: PhantomData,
    }
}

impl<T, F> Publisher for Create<T, F>
where
    T: Send + 'static,
    F: FnOnce(Emitter<T>) + Send + 'static,
{
    type Item = T;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<T> + Send + 'static,
    {
        let shared = Arc::new(Shared::new());
        let core = Core::new(Creating {
            shared: shared.clone(),
        });
        core.attach(Vec::new(), subscriber);
        if shared.cancelled.load(Ordering::Relaxed) {
            // Downstream cancelled in on_subscribe: nobody wants the items.
            return;
        }
        // Two counts: the emitter handed to `f`, and one held through `f`, so an
        // emitter dropped while `f` unwinds does not complete the stream before the
        // panic is reported.
        shared.emitters.fetch_add(2, Ordering::Relaxed);
        let emitter = Emitter {
            shared: shared.clone(),
            core: core.clone(),
        };
        if let Err(error) = catch_in("create", || (self.f)(emitter)) {
            tracing::error!(target: "weir::create", "create's closure panicked: {error}");
            shared.end(Err(error));
        }
        release(&shared);
    }
}

/// One emitter count goes away: the last one completes the stream.
fn release<T: Send + 'static>(shared: &Shared<T>) {
    // AcqRel: the last holder must see every emit the others made before they let go
    // (Release on each decrement, Acquire on the last), so its `end` follows them.
    if shared.emitters.fetch_sub(1, Ordering::AcqRel) == 1 {
        shared.end(Ok(()));
    }
}

/// The handle your code emits through, given to [`create`]'s closure. Clone it for
/// several producers; the stream completes when the last clone is dropped (unless it
/// already ended).
pub struct Emitter<T: Send + 'static> {
    shared: Arc<Shared<T>>,
    /// The subscription's core: emitters keep it alive (the subscriber may have let
    /// go of its `Subscription`), as senders keep a channel's.
    core: Arc<dyn CoreHandle>,
}

impl<T: Send + 'static> fmt::Debug for Emitter<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Emitter")
            .field("requested", &self.requested())
            .field("cancelled", &self.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl<T: Send + 'static> Clone for Emitter<T> {
    fn clone(&self) -> Self {
        // Relaxed: a new count from an existing one (as `Arc::clone`).
        self.shared.emitters.fetch_add(1, Ordering::Relaxed);
        Emitter {
            shared: self.shared.clone(),
            core: self.core.clone(),
        }
    }
}

impl<T: Send + 'static> Drop for Emitter<T> {
    fn drop(&mut self) {
        release(&self.shared);
    }
}

impl<T: Send + 'static> Emitter<T> {
    /// How many items may be emitted now: requested by downstream and not yet
    /// emitted (`u64::MAX`: unbounded). Another clone of the emitter may take them
    /// first; [`emit`](Self::emit) is the authority.
    pub fn requested(&self) -> u64 {
        self.shared.credit.get()
    }

    /// True once downstream cancelled (or the subscription ended for a reason other
    /// than this emitter's own end): stop producing.
    pub fn is_cancelled(&self) -> bool {
        // Relaxed: a hint for a producer's loop; `emit` checks under the lock.
        self.shared.cancelled.load(Ordering::Relaxed)
    }

    /// Emit `item` now, against one unit of demand. The item is delivered before this
    /// returns if no other thread is delivering.
    ///
    /// # Errors
    ///
    /// [`EmitError::NoDemand`] when downstream has not requested it (rule 1.1), and
    /// [`EmitError::Closed`] once the stream ended or downstream cancelled; both give
    /// the item back.
    pub fn emit(&self, item: T) -> Result<(), EmitError<T>> {
        let shared = &*self.shared;
        if !shared.credit.try_spend_one() {
            return Err(if shared.closed() {
                EmitError::Closed(item)
            } else {
                EmitError::NoDemand(item)
            });
        }
        {
            let mut state = shared.lock();
            if !state.open {
                return Err(EmitError::Closed(item));
            }
            state.queue.push_back(item);
        }
        self.core.signal();
        Ok(())
    }

    /// Emit the items of `items` in order while demand lasts, as one batch: one
    /// lock and one signal for all of them, so downstream gets them in one pass (a
    /// boundary behind is woken once, not once per item). What the demand did not
    /// cover stays in `items`, in order. Returns how many were emitted.
    ///
    /// # Errors
    ///
    /// [`EmitterClosed`] once the stream ended or downstream cancelled (`items` is
    /// then left as it was).
    ///
    /// ```
    /// # #[cfg(feature = "tck")] {
    /// use weir::prelude::*;
    /// use weir::tck::TestSubscriber;
    ///
    /// let subscriber = TestSubscriber::<u8>::new();
    /// let probe = subscriber.probe();
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// weir::create(move |emitter| tx.send(emitter).unwrap()).subscribe(subscriber);
    /// let emitter = rx.recv().unwrap();
    /// probe.request(3);
    /// let mut burst = vec![1, 2, 3, 4, 5];
    /// assert_eq!(emitter.emit_all(&mut burst), Ok(3));
    /// assert_eq!(burst, [4, 5], "what the demand did not cover stays");
    /// assert_eq!(probe.items(), [1, 2, 3]);
    /// # }
    /// ```
    pub fn emit_all(&self, items: &mut Vec<T>) -> Result<usize, EmitterClosed> {
        let shared = &*self.shared;
        let emitted = {
            let mut state = shared.lock();
            if !state.open {
                return Err(EmitterClosed);
            }
            let mut emitted = 0;
            while emitted < items.len() && shared.credit.try_spend_one() {
                emitted += 1;
            }
            state.queue.extend(items.drain(..emitted));
            emitted
        };
        if emitted > 0 {
            self.core.signal();
        }
        Ok(emitted)
    }

    /// Wait until there is demand, then emit `item`: the async twin of
    /// [`send_blocking`](Self::send_blocking).
    ///
    /// # Errors
    ///
    /// [`EmitError::Closed`] (with the item) once the stream ended or downstream
    /// cancelled.
    pub async fn send(&self, item: T) -> Result<(), EmitError<T>> {
        let mut item = item;
        loop {
            if self.ready().await.is_err() {
                return Err(EmitError::Closed(item));
            }
            match self.emit(item) {
                // Another clone took the demand first: wait again.
                Err(EmitError::NoDemand(back)) => item = back,
                done => return done,
            }
        }
    }

    /// Block this thread until there is demand, then emit `item`.
    ///
    /// # Panics
    ///
    /// As [`wait_ready`](Self::wait_ready), on a thread that drives a tokio runtime:
    /// use [`send`](Self::send) there.
    ///
    /// # Errors
    ///
    /// [`EmitError::Closed`] (with the item) once the stream ended or downstream
    /// cancelled.
    #[track_caller]
    pub fn send_blocking(&self, item: T) -> Result<(), EmitError<T>> {
        let mut item = item;
        loop {
            if self.wait_ready().is_err() {
                return Err(EmitError::Closed(item));
            }
            match self.emit(item) {
                Err(EmitError::NoDemand(back)) => item = back,
                done => return done,
            }
        }
    }

    /// A future that resolves `Ok` once there is demand (at once if there is), or
    /// `Err(EmitterClosed)` once the stream ended or downstream cancelled.
    ///
    /// ```
    /// use weir::prelude::*;
    ///
    /// let numbers = weir::create(|emitter| {
    ///     std::thread::spawn(move || {
    ///         futures::executor::block_on(async move {
    ///             let mut next = 0u32;
    ///             while emitter.ready().await.is_ok() && next < 100 {
    ///                 // Emit what downstream asked for, in one go.
    ///                 while emitter.requested() > 0 && next < 100 {
    ///                     emitter.emit(next).unwrap();
    ///                     next += 1;
    ///                 }
    ///             }
    ///         })
    ///     });
    /// });
    /// assert_eq!(numbers.collect().wait().unwrap(), (0..100).collect::<Vec<_>>());
    /// ```
    pub fn ready(&self) -> Ready<'_, T> {
        Ready {
            shared: &self.shared,
            key: None,
        }
    }

    /// Block this thread until there is demand (`Ok`) or the stream ended or
    /// downstream cancelled (`Err`). See [`ready`](Self::ready).
    ///
    /// # Panics
    ///
    /// With the `tokio` feature, if it would have to wait on a thread that drives a
    /// tokio runtime's async code: use [`ready`](Self::ready) there.
    #[track_caller]
    pub fn wait_ready(&self) -> Result<(), EmitterClosed> {
        let shared = &*self.shared;
        let mut state = shared.lock();
        let mut checked = false;
        loop {
            if !state.open {
                return Err(EmitterClosed);
            }
            // After the lock: a request adds its credit before it takes the lock to
            // notify, so either we see the credit or it sees us blocked.
            if shared.credit.get() > 0 {
                return Ok(());
            }
            if !checked {
                checked = true;
                drop(state);
                crate::runtime::forbid_blocking_in_async("Emitter::wait_ready");
                state = shared.lock();
                continue;
            }
            state.blocked += 1;
            state = shared
                .ready
                .wait(state)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            state.blocked -= 1;
        }
    }

    /// Call `hook(n)` when downstream grants `n` more items (a request, or batch
    /// credit a synchronous subscriber hands back), on the granting thread, after the
    /// credit was added: a producer driven by requests emits from here. If demand is
    /// already outstanding when the hook is set, it is called at once with
    /// [`requested`](Self::requested). Replaces an earlier hook; shared by every clone.
    ///
    /// The hook is never called concurrently or re-entrantly: grants that arrive
    /// while it runs (from other threads, or from a delivery its own `emit` made) are
    /// summed and handed to it in one more call when it returns. So it may own
    /// plain state (an iterator, a cursor) and emit while [`requested`](Self::requested)
    /// is above zero. It runs on the requester's thread: keep it bounded, or hand
    /// the work to a thread. A panic in it ends the stream with an error of kind
    /// [`Panicked`](crate::ErrorKind::Panicked).
    ///
    /// ```
    /// use weir::prelude::*;
    ///
    /// let numbers = weir::create(|emitter| {
    ///     let mut items = 0..10u32;
    ///     let e = emitter.clone();
    ///     emitter.on_request(move |_granted| {
    ///         while e.requested() > 0 {
    ///             match items.next() {
    ///                 Some(i) => { let _ = e.emit(i); }
    ///                 None => { e.complete(); return; }
    ///             }
    ///         }
    ///     });
    /// });
    /// let got = numbers.limit_rate(4, 1).collect().wait().unwrap();
    /// assert_eq!(got, (0..10).collect::<Vec<_>>());
    /// ```
    pub fn on_request(&self, hook: impl FnMut(u64) + Send + 'static) {
        let shared = &*self.shared;
        let (replaced, run) = {
            let mut hooks = shared.hooks();
            if hooks.stopped {
                return; // nobody will request again (the hook is dropped here)
            }
            let replaced = hooks.on_request.replace(Arc::new(Mutex::new(hook)));
            // The new hook is handed the whole outstanding credit once. Read under
            // the lock `grant` adds under, so a request in flight is in it or is
            // handed over by its `grant` afterwards, not both; what was queued for
            // the hook replaced is part of it.
            hooks.pending = 0;
            let run = hooks.queue(shared.credit.get());
            (replaced, run)
        };
        // The hook replaced, and what it captured, go without the lock: their `Drop`
        // is user code, and may use this emitter.
        drop(replaced);
        if run {
            shared.run_request_hook();
        }
    }

    /// Call `hook` once when downstream cancels (or sends `request(0)`, or its
    /// subscriber panics), on the thread that stops the stream: release what the
    /// producer holds. Runs at once if that already happened. Not called when the
    /// stream ends through [`complete`](Self::complete) or [`error`](Self::error).
    /// Replaces an earlier hook; a panic in it is logged.
    pub fn on_cancel(&self, hook: impl FnOnce() + Send + 'static) {
        let cancelled = {
            let mut hooks = self.shared.hooks();
            if !hooks.stopped {
                let replaced = hooks.on_cancel.replace(Box::new(hook));
                // Dropped without the lock (see `on_request`).
                drop(hooks);
                drop(replaced);
                return;
            }
            hooks.cancel_ran
        };
        // Already stopped: run it now if that was a cancel, else just drop it.
        if cancelled && catch(hook).is_err() {
            tracing::error!(target: "weir::create", "create's on_cancel hook panicked");
        }
    }

    /// Complete the stream after the items already emitted. Later emits are refused.
    /// Returns false if the stream had already ended (or was cancelled).
    pub fn complete(&self) -> bool {
        self.shared.end(Ok(()))
    }

    /// End the stream with `error` after the items already emitted. Later emits are
    /// refused. Returns false if the stream had already ended (or was cancelled).
    pub fn error(&self, error: Error) -> bool {
        self.shared.end(Err(error))
    }
}

/// The future of [`Emitter::ready`].
#[must_use = "futures do nothing unless polled"]
pub struct Ready<'a, T> {
    shared: &'a Shared<T>,
    /// This future's place among the waiters.
    key: Option<u64>,
}

impl<T> fmt::Debug for Ready<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ready").finish_non_exhaustive()
    }
}

impl<T> Future for Ready<'_, T> {
    type Output = Result<(), EmitterClosed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let mut state = this.shared.lock();
        if !state.open {
            state.waiters.remove(this.key.take());
            return Poll::Ready(Err(EmitterClosed));
        }
        // After the lock (see `wait_ready`).
        if this.shared.credit.get() > 0 {
            state.waiters.remove(this.key.take());
            return Poll::Ready(Ok(()));
        }
        state.waiters.register(&mut this.key, cx.waker());
        Poll::Pending
    }
}

impl<T> Drop for Ready<'_, T> {
    fn drop(&mut self) {
        if self.key.is_some() {
            self.shared.lock().waiters.remove(self.key.take());
        }
    }
}

/// An item [`Emitter::emit`] could not emit, handed back.
#[derive(Clone, PartialEq, Eq)]
pub enum EmitError<T> {
    /// Downstream has not requested it: emitting it would break rule 1.1. Wait with
    /// [`Emitter::ready`] / [`Emitter::wait_ready`], or use [`Emitter::send`].
    NoDemand(T),
    /// The stream ended (the emitter completed or failed it) or downstream cancelled.
    Closed(T),
}

impl<T> EmitError<T> {
    /// The item that was not emitted.
    pub fn into_inner(self) -> T {
        match self {
            EmitError::NoDemand(item) | EmitError::Closed(item) => item,
        }
    }

    /// True for [`EmitError::NoDemand`].
    pub fn is_no_demand(&self) -> bool {
        matches!(self, EmitError::NoDemand(_))
    }

    /// True for [`EmitError::Closed`].
    pub fn is_closed(&self) -> bool {
        matches!(self, EmitError::Closed(_))
    }
}

impl<T> fmt::Debug for EmitError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EmitError::NoDemand(_) => f.write_str("NoDemand(..)"),
            EmitError::Closed(_) => f.write_str("Closed(..)"),
        }
    }
}

impl<T> fmt::Display for EmitError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EmitError::NoDemand(_) => f.write_str(
                "emit refused: downstream has not requested another item (rule 1.1); \
                 wait with ready()/wait_ready() or use send()/send_blocking()",
            ),
            EmitError::Closed(_) => {
                f.write_str("emit refused: the stream ended or downstream cancelled")
            }
        }
    }
}

impl<T> std::error::Error for EmitError<T> {}

/// The stream of a [`create`] emitter ended, or downstream cancelled, while waiting
/// for demand or emitting a batch ([`Emitter::emit_all`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EmitterClosed;

impl fmt::Display for EmitterClosed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the stream ended or downstream cancelled")
    }
}

impl std::error::Error for EmitterClosed {}

/// What the emitters and the drain loop share.
struct Shared<T> {
    /// Requested by downstream and not yet emitted.
    credit: AtomicDemand,
    state: Mutex<State<T>>,
    /// Threads in `wait_ready`.
    ready: Condvar,
    /// The core, for signals (set once, when it is built).
    core: OnceLock<Weak<dyn CoreHandle>>,
    /// Live emitters (plus one while `create`'s closure runs).
    emitters: AtomicUsize,
    /// Downstream cancelled (a hint for producers).
    cancelled: AtomicBool,
    hooks: Mutex<Hooks>,
}

/// Everything behind the state lock.
struct State<T> {
    /// Emitted, not yet delivered.
    queue: VecDeque<T>,
    /// Emits are accepted (false once the stream ended or was cancelled).
    open: bool,
    /// The end to signal once the queue is empty.
    end: Option<Result<(), Error>>,
    /// The pass signalled the end (so a stop afterwards is not a cancel).
    ended: bool,
    /// Tasks in `ready`.
    waiters: Waiters,
    /// Threads in `wait_ready`.
    blocked: usize,
}

/// The user's hooks.
#[derive(Default)]
struct Hooks {
    on_request: Option<RequestHook>,
    /// Granted and not yet handed to the request hook.
    pending: u64,
    /// A thread is calling the request hook.
    running: bool,
    on_cancel: Option<CancelHook>,
    /// The stream stopped: hooks set later are not kept.
    stopped: bool,
    /// It stopped by a cancel (a cancel hook set later runs at once).
    cancel_ran: bool,
}

impl Hooks {
    /// Queue `n` for the request hook; true when the caller must run it (no thread
    /// is running it).
    fn queue(&mut self, n: u64) -> bool {
        if self.on_request.is_none() || n == 0 {
            return false;
        }
        self.pending = crate::demand::sum(self.pending, n);
        !std::mem::replace(&mut self.running, true)
    }
}

impl<T> Shared<T> {
    /// Lock the state. No user code runs under it (items are dropped and wakers woken
    /// after it is let go), so poisoning can only come from a bug here: recover.
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn hooks(&self) -> MutexGuard<'_, Hooks> {
        self.hooks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl<T: Send + 'static> Shared<T> {
    fn new() -> Self {
        Shared {
            credit: AtomicDemand::new(),
            state: Mutex::new(State {
                queue: VecDeque::new(),
                open: true,
                end: None,
                ended: false,
                waiters: Waiters::default(),
                blocked: 0,
            }),
            ready: Condvar::new(),
            core: OnceLock::new(),
            emitters: AtomicUsize::new(0),
            cancelled: AtomicBool::new(false),
            hooks: Mutex::new(Hooks::default()),
        }
    }

    /// Emits are refused from now on (a hint; `emit` checks under the lock).
    fn closed(&self) -> bool {
        !self.lock().open
    }

    /// Ask the core for a pass (it is alive while an emitter is, and while a request
    /// or a pass runs).
    fn signal(&self) {
        if let Some(core) = self.core.get().and_then(Weak::upgrade) {
            core.signal();
        }
    }

    /// Close the emitters and record `end` for the pass to signal after the queue.
    fn end(&self, end: Result<(), Error>) -> bool {
        let wake = {
            let mut state = self.lock();
            if !state.open {
                return false;
            }
            state.open = false;
            state.end = Some(end);
            Self::wake_all(&mut state, &self.ready)
        };
        crate::guard::wake_all(wake);
        self.signal();
        true
    }

    /// Take the waiting tasks and notify the waiting threads (under the lock).
    fn wake_all(state: &mut State<T>, ready: &Condvar) -> Vec<Waker> {
        if state.blocked > 0 {
            ready.notify_all();
        }
        let mut wakers = Vec::new();
        state.waiters.take_into(&mut wakers);
        wakers
    }

    /// Downstream granted `n` more (a request, or a batch's credit): add it, wake
    /// whoever waits for demand, and call the request hook.
    fn grant(&self, n: u64) {
        let run = {
            let mut hooks = self.hooks();
            // Under the hooks lock: see `Emitter::on_request`.
            self.credit.add(n);
            hooks.queue(n)
        };
        let wake = Self::wake_all(&mut self.lock(), &self.ready);
        crate::guard::wake_all(wake);
        if run {
            self.run_request_hook();
        }
    }

    /// Hand what is queued to the request hook until nothing is, one call at a time
    /// (the caller set `running`): a thread that finds it running queues its amount
    /// for the running thread to hand on next.
    fn run_request_hook(&self) {
        loop {
            let (hook, granted) = {
                let mut hooks = self.hooks();
                let granted = std::mem::take(&mut hooks.pending);
                match (&hooks.on_request, granted) {
                    (Some(hook), 1..) => (hook.clone(), granted),
                    _ => {
                        hooks.running = false;
                        return;
                    }
                }
            };
            let called = catch_in("create", || {
                let mut hook = hook.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                (*hook)(granted)
            });
            if let Err(error) = called {
                tracing::error!(target: "weir::create", "create's on_request hook panicked: {error}");
                {
                    let mut hooks = self.hooks();
                    hooks.on_request = None;
                    hooks.running = false;
                }
                self.end(Err(error));
                return;
            }
        }
    }
}

/// The stage on the signal core.
struct Creating<T: Send + 'static> {
    shared: Arc<Shared<T>>,
}

impl<T: Send + 'static> Stage for Creating<T> {
    const NAME: &'static str = "create";
    type Item = T;
    /// The pass's batch buffer.
    type Owned = Vec<T>;
    type Padding = ();

    fn pass<S: Subscriber<T>>(&self, cx: &Cx<'_>, batch: &mut Vec<T>, downstream: &mut S) -> Pass {
        let shared = &*self.shared;
        let demand = cx.demand();
        let mut local = LocalDemand::default();
        loop {
            if cx.stopped() {
                return Pass::Idle;
            }
            local.take(demand);
            let budget = local.get().min(BATCH);
            let end = {
                let mut state = shared.lock();
                // `budget` as usize: at most BATCH.
                let take = state.queue.len().min(budget as usize);
                batch.extend(state.queue.drain(..take));
                if state.queue.is_empty() {
                    let end = state.end.take();
                    state.ended = end.is_some();
                    end
                } else {
                    None
                }
            };
            let count = batch.len() as u64;
            if count > 0 {
                let credit = cx.hand_over(downstream, batch.drain(..));
                local.spent(count, credit);
                if credit > 0 {
                    shared.grant(credit);
                }
            }
            if let Some(end) = end {
                local.give_back(demand);
                return cx.terminate(downstream, end);
            }
            if count < budget || budget == 0 {
                local.give_back(demand);
                return Pass::Idle;
            }
        }
    }

    fn stop(&self, batch: &mut Vec<T>) {
        let shared = &*self.shared;
        // Let go of last (below): an item's `Drop` is user code, and its panic must
        // not skip the hooks.
        let undelivered = std::mem::take(batch);
        let (items, wake, cancelled) = {
            let mut state = shared.lock();
            state.open = false;
            let items = std::mem::take(&mut state.queue);
            let wake = Shared::wake_all(&mut state, &shared.ready);
            (items, wake, !state.ended)
        };
        // Relaxed: a hint for producers (see `is_cancelled`).
        shared.cancelled.store(cancelled, Ordering::Relaxed);
        crate::guard::wake_all(wake);
        // Take both hooks out: they may hold emitters (a cycle through `shared`), and
        // dropping them, like the items, runs user code, so outside the locks.
        let (on_request, on_cancel) = {
            let mut hooks = shared.hooks();
            hooks.stopped = true;
            hooks.cancel_ran = cancelled;
            (hooks.on_request.take(), hooks.on_cancel.take())
        };
        let unused = match on_cancel {
            Some(hook) if cancelled => {
                if catch(hook).is_err() {
                    tracing::error!(target: "weir::create", "create's on_cancel hook panicked");
                }
                None
            }
            unused => unused,
        };
        let hooks = catch(move || drop((on_request, unused))).is_err();
        let panicked = crate::guard::drop_each(undelivered) + crate::guard::drop_each(items);
        if hooks || panicked > 0 {
            tracing::error!(target: "weir::create", "an item or a hook of create panicked in Drop; contained");
        }
    }

    fn bind(&self, me: Weak<dyn CoreHandle>) {
        let _ = self.shared.core.set(me);
    }

    fn on_request(&self, n: u64, _demand: &AtomicDemand) {
        self.shared.grant(n);
    }

    fn on_cancel(&self) {
        // Relaxed: a hint for producers; the stop that follows closes the emitters.
        self.shared.cancelled.store(true, Ordering::Relaxed);
    }
}
