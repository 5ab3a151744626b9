//! [`AsyncSubscriber`]: a subscriber whose `on_next` is an `async fn`, driven by one
//! tokio task ([`subscribe_async`]).
//!
//! # The algorithm
//!
//! Two halves share one small state (`Mailbox`):
//!
//! * The **inlet** is the synchronous [`Subscriber`] the publisher sees. It never runs
//!   user code and never blocks: `on_subscribe` stores the subscription (a second one
//!   is cancelled, rule 2.5), `on_next`/`on_next_batch` append to a bounded hand-off
//!   (a `Window` of the window's size), `on_complete`/`on_error`
//!   record the terminal signal. Each signal wakes the task through a
//!   [`tokio::sync::Notify`] (its stored permit means no wake-up is lost between the
//!   task's check and its wait). Signals that arrive after the task ended (after
//!   `abort`, a panic, an error returned by the subscriber) are dropped.
//! * The **driver** is the spawned task. It waits for the subscription, awaits the
//!   user's `on_subscribe`, requests the window, and then loops: take the oldest item
//!   out of the hand-off and await the user's `on_next` with it; only when that future
//!   has completed does it count the item as consumed in a [`Replenish`] and request
//!   more. Items that arrived before the terminal signal are processed before it.
//!
//! # Demand contract
//!
//! With a window of `w` (default 1): `w` requested up front, then, through the one
//! [`Replenish`] helper, what was consumed each time `w - w/4` items were processed
//! (for `w = 1`: `request(1)` after each completed `on_next`). Outstanding demand plus
//! items in the hand-off never exceed `w`, so the hand-off holds at most `w` items;
//! an item beyond that is a rule 1.1 violation by the publisher, answered by
//! cancelling upstream and ending with an error naming rule 1.1. No request is made
//! once the terminal signal has arrived (rule 2.4), nor from inside the inlet's
//! terminal methods (2.3).
//!
//! # Ending
//!
//! The [`AsyncHandle`] resolves once the task ends: `Ok(())` after the user's
//! `on_complete`; the upstream error after the user's `on_error`; an error returned by
//! a hook, or a panic in a hook (kind [`Panicked`](crate::ErrorKind::Panicked)), after
//! cancelling upstream; [`Cancelled`](crate::ErrorKind::Cancelled) after
//! [`AsyncHandle::abort`]; an error of kind
//! [`SchedulerShutdown`](crate::ErrorKind::SchedulerShutdown) when the runtime drops
//! the task unfinished (it shut down, possibly before the task first ran). Either
//! way a guard the task owns from its spawn on (it is one of the task's arguments,
//! so it exists even in a task never polled) cancels upstream, so a publisher never
//! keeps feeding a subscriber that is gone.
//!
//! An inlet released by its publisher without a terminal signal (a publisher that
//! panicked in `subscribe`: the panic reaches the caller, as every sink's does)
//! ends the stream with an error of kind [`Cancelled`](crate::ErrorKind::Cancelled):
//! the task runs `on_subscribe` (if it had not) and `on_error`, and ends.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use futures::FutureExt;
use tokio::runtime::Handle;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::demand::Replenish;
use crate::drain::SubscriptionSlot;
use crate::stage::window::{self, gather, over_delivered, Window};
use crate::{Error, Publisher, Subscriber, Subscription};

/// A subscriber whose signal methods are `async`, run by a tokio task that
/// [`subscribe_async`] spawns.
///
/// Implement it with the [`async_trait`](crate::bridge::async_trait) attribute weir
/// re-exports (`#[weir::bridge::async_trait]`: a plain `async fn on_next` without it is
/// error E0195). Only [`on_next`](Self::on_next)
/// is required. Every hook is async and returns `Result<(), Error>` (except
/// [`on_error`](Self::on_error)): an `Err` from a hook cancels upstream and becomes
/// the task's result. A panic in any hook is caught and does the same with an error
/// of kind [`Panicked`](crate::ErrorKind::Panicked).
///
/// The next item is requested only when the previous `on_next` future has completed
/// (with a [window](SubscribeAsync::window) above 1, up to that many items wait in a
/// bounded buffer meanwhile). Each call returns a boxed future (that is how
/// `async-trait` works): one allocation per item.
///
/// # Examples
///
/// ```
/// use weir::bridge::{async_trait, AsyncSubscriber};
/// use weir::prelude::*;
///
/// struct Store {
///     rows: Vec<u32>,
/// }
///
/// #[async_trait]
/// impl AsyncSubscriber<u32> for Store {
///     async fn on_next(&mut self, item: u32) -> Result<(), weir::Error> {
///         tokio::task::yield_now().await; // an insert into a database, say
///         self.rows.push(item);
///         Ok(())
///     }
///
///     async fn on_complete(&mut self) -> Result<(), weir::Error> {
///         assert_eq!(self.rows, (0..100).collect::<Vec<_>>());
///         Ok(())
///     }
/// }
///
/// # fn main() {
/// let rt = tokio::runtime::Runtime::new().unwrap();
/// rt.block_on(async {
///     let result = weir::range(0u32..100).subscribe_async(Store { rows: Vec::new() }).await;
///     assert!(result.is_ok());
/// });
/// # }
/// ```
#[async_trait::async_trait]
pub trait AsyncSubscriber<T: Send + 'static>: Send {
    /// Runs once, before anything is requested (open a connection, say). An `Err`
    /// cancels upstream before any item was requested.
    async fn on_subscribe(&mut self) -> Result<(), Error> {
        Ok(())
    }

    /// One item. The next item is requested when this future completes; an `Err`
    /// cancels upstream, drops the items waiting in the window and ends the task with
    /// that error (no further hook is called).
    async fn on_next(&mut self, item: T) -> Result<(), Error>;

    /// Upstream failed, after every item that arrived before the error was processed.
    /// The task's result is `error` itself.
    async fn on_error(&mut self, error: Error) {
        let _ = error;
    }

    /// Upstream completed, after every item was processed. An `Err` becomes the
    /// task's result (a final flush that failed, say).
    async fn on_complete(&mut self) -> Result<(), Error> {
        Ok(())
    }
}

/// The [`AsyncSubscriber`] behind
/// [`PublisherExt::for_each_async`](crate::PublisherExt::for_each_async): one call of
/// an async closure per item.
pub(crate) struct ForEachAsync<F> {
    pub(crate) f: F,
}

#[async_trait::async_trait]
impl<T, F, Fut> AsyncSubscriber<T> for ForEachAsync<F>
where
    T: Send + 'static,
    F: FnMut(T) -> Fut + Send,
    Fut: Future<Output = ()> + Send,
{
    async fn on_next(&mut self, item: T) -> Result<(), Error> {
        (self.f)(item).await;
        Ok(())
    }
}

/// How [`subscribe_async`] runs: the window and the runtime. Start from
/// [`SubscribeAsync::new`] (window 1, the current runtime).
///
/// ```
/// use weir::bridge::SubscribeAsync;
///
/// let rt = tokio::runtime::Runtime::new().unwrap();
/// let options = SubscribeAsync::new().window(8).runtime(rt.handle().clone());
/// assert_eq!(options.window_size(), 8);
/// ```
#[derive(Clone, Debug)]
pub struct SubscribeAsync {
    window: u64,
    runtime: Option<Handle>,
}

impl Default for SubscribeAsync {
    fn default() -> Self {
        Self::new()
    }
}

impl SubscribeAsync {
    /// Window 1 (`request(1)` after each completed `on_next`), spawned on the runtime
    /// that is current when subscribing.
    pub fn new() -> Self {
        SubscribeAsync {
            window: 1,
            runtime: None,
        }
    }

    /// Keep up to `window` items requested ahead of the one being processed. A window
    /// above 1 means that up to `window` items wait in a bounded buffer of that size
    /// while `on_next` runs; demand is replenished through
    /// [`Replenish`] (`window` up front, then what was
    /// consumed each time `window - window/4` items were processed).
    ///
    /// # Panics
    ///
    /// If `window` is 0 or above 2^30 ([`MAX_CAPACITY`](crate::queue::MAX_CAPACITY),
    /// the limit of every queue weir sizes):
    /// "subscribe_async window must be in 1..=2^30 (got 0)".
    pub fn window(mut self, window: u64) -> Self {
        window::validate("subscribe_async window", window);
        self.window = window;
        self
    }

    /// Spawn the driving task on the runtime behind `handle` instead of the current
    /// one (so `subscribe` may be called from any thread).
    pub fn runtime(mut self, handle: Handle) -> Self {
        self.runtime = Some(handle);
        self
    }

    /// The configured window.
    pub fn window_size(&self) -> u64 {
        self.window
    }

    /// Spawn the task and subscribe it to `publisher`. See [`subscribe_async`].
    ///
    /// # Panics
    ///
    /// If no runtime was given and this thread is not inside a tokio runtime.
    pub fn subscribe<P, A>(self, publisher: P, subscriber: A) -> AsyncHandle
    where
        P: Publisher,
        A: AsyncSubscriber<P::Item> + 'static,
    {
        self.subscribe_as("subscribe_async", publisher, subscriber)
    }

    /// [`subscribe`](Self::subscribe) for the sink called `sink` (named in the panic).
    pub(crate) fn subscribe_as<P, A>(
        self,
        sink: &'static str,
        publisher: P,
        subscriber: A,
    ) -> AsyncHandle
    where
        P: Publisher,
        A: AsyncSubscriber<P::Item> + 'static,
    {
        let runtime = match self.runtime {
            Some(handle) => handle,
            None => Handle::try_current().unwrap_or_else(|_| {
                panic!(
                    "{sink} must be called inside a tokio runtime \
                     (or given one with SubscribeAsync::runtime)"
                )
            }),
        };
        let shared = Arc::new(Mailbox::new(self.window));
        // The guard goes into the task as an argument, so it exists from the spawn on:
        // a runtime that drops the task unpolled (shut down) still closes the mailbox,
        // and the subscription that arrives next is cancelled on arrival.
        let guard = CloseGuard(shared.clone());
        let join = runtime.spawn(drive(guard, subscriber, self.window, sink));
        publisher.subscribe(Inlet::new(shared.clone()));
        AsyncHandle {
            shared,
            join,
            sink,
            aborted: AtomicBool::new(false),
        }
    }
}

/// Subscribe `subscriber` to `publisher` with a window of 1, driving it from a task
/// spawned on the current tokio runtime; returns the task's [`AsyncHandle`].
/// [`PublisherExt::subscribe_async`](crate::PublisherExt::subscribe_async) is the
/// same as a method; [`SubscribeAsync`] sets the window and the runtime.
///
/// # Panics
///
/// If this thread is not inside a tokio runtime.
pub fn subscribe_async<P, A>(publisher: P, subscriber: A) -> AsyncHandle
where
    P: Publisher,
    A: AsyncSubscriber<P::Item> + 'static,
{
    SubscribeAsync::new().subscribe(publisher, subscriber)
}

/// The task driving an [`AsyncSubscriber`]: await it for the terminal result, or
/// [`abort`](Self::abort) it.
///
/// Awaiting gives `Ok(())` when the stream completed, the upstream error when it
/// failed, the subscriber's own error or panic (kind
/// [`Panicked`](crate::ErrorKind::Panicked)), an error of kind
/// [`Cancelled`](crate::ErrorKind::Cancelled) after `abort`, or one of kind
/// [`SchedulerShutdown`](crate::ErrorKind::SchedulerShutdown) when the runtime shut
/// down before the task finished.
///
/// **Dropping the handle detaches** the task, as dropping a `tokio::task::JoinHandle`
/// does: the subscriber keeps running to the end of the stream. Call
/// [`abort`](Self::abort) to stop it.
#[must_use = "the handle reports the result; dropping it detaches the task (it keeps running)"]
pub struct AsyncHandle {
    shared: Arc<dyn Abort>,
    join: JoinHandle<Result<(), Error>>,
    /// The sink's name, for the error of a task its runtime dropped.
    sink: &'static str,
    /// [`abort`](Self::abort) was called: a cancelled task reports `Cancelled`, not
    /// `SchedulerShutdown`.
    aborted: AtomicBool,
}

impl fmt::Debug for AsyncHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncHandle")
            .field("finished", &self.join.is_finished())
            .finish()
    }
}

impl AsyncHandle {
    /// Cancel upstream (at once, on this thread), drop the items waiting in the window
    /// and abort the task (the subscriber is dropped, no further hook runs; an
    /// `on_next` in progress is dropped at its next `.await`). The result becomes an
    /// error of kind [`Cancelled`](crate::ErrorKind::Cancelled) unless the task had
    /// already finished. Idempotent.
    pub fn abort(&self) {
        // Release: pairs with the Acquire load in `poll`, which runs after the task's
        // cancellation that `join.abort()` below starts.
        self.aborted.store(true, Ordering::Release);
        self.shared.abort();
        self.join.abort();
    }

    /// True once the task has finished (the result is ready).
    pub fn is_finished(&self) -> bool {
        self.join.is_finished()
    }
}

impl Future for AsyncHandle {
    type Output = Result<(), Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match Pin::new(&mut self.join).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(result)) => Poll::Ready(result),
            Poll::Ready(Err(e)) if e.is_panic() => {
                Poll::Ready(Err(Error::panicked(e.into_panic())))
            }
            // Cancelled by `abort`, or dropped by its runtime (shut down).
            Poll::Ready(Err(_)) if self.aborted.load(Ordering::Acquire) => {
                Poll::Ready(Err(Error::cancelled()))
            }
            Poll::Ready(Err(_)) => Poll::Ready(Err(Error::scheduler_shutdown(self.sink))),
        }
    }
}

/// What the handle needs from the shared state, without its item type.
trait Abort: Send + Sync {
    fn abort(&self);
}

/// The state shared by the inlet, the driver and the handle.
struct Mailbox<T> {
    slot: SubscriptionSlot,
    state: Mutex<MailboxState<T>>,
    wake: Notify,
}

struct MailboxState<T> {
    /// The hand-off: at most `window` items.
    items: Window<T>,
    /// The terminal signal from upstream (or a protocol violation), once it arrived.
    terminal: Option<Result<(), Error>>,
    /// The task ended or was aborted: later signals are dropped.
    closed: bool,
}

impl<T> Mailbox<T> {
    fn new(window: u64) -> Self {
        let window = usize::try_from(window).expect("the window is at most 2^30");
        Mailbox {
            slot: SubscriptionSlot::new(),
            state: Mutex::new(MailboxState {
                items: Window::new(window),
                terminal: None,
                closed: false,
            }),
            wake: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, MailboxState<T>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The task is gone (or going): drop waiting items, refuse later signals, cancel
    /// upstream unless it already terminated.
    fn close(&self) {
        let (items, terminated) = {
            let mut st = self.lock();
            st.closed = true;
            (st.items.take_all(), st.terminal.is_some())
        };
        drop(items); // outside the lock: an item's Drop is user code
        if !terminated {
            self.slot.cancel();
        }
    }

    fn terminated(&self) -> bool {
        self.lock().terminal.is_some()
    }
}

impl<T: Send> Abort for Mailbox<T> {
    fn abort(&self) {
        self.close();
        // Cancel even when terminated: a no-op then (rule 3.6), but it marks the slot
        // so a subscription that has not arrived yet is cancelled on arrival.
        self.slot.cancel();
        self.wake.notify_one();
    }
}

/// The synchronous subscriber the publisher sees.
struct Inlet<T> {
    shared: Arc<Mailbox<T>>,
    /// A delivery, [`gather`]ed before the lock is taken; empty between deliveries.
    gathered: VecDeque<T>,
    /// The most one delivery may hold: one more than the window (an overflow shows).
    bound: usize,
}

impl<T> Inlet<T> {
    fn new(shared: Arc<Mailbox<T>>) -> Self {
        let (gathered, bound) = {
            let st = shared.lock();
            (st.items.spare(), st.items.size().saturating_add(1))
        };
        Inlet {
            shared,
            gathered,
            bound,
        }
    }

    /// Append items under one lock (gathered first: a lazy batch runs user code,
    /// which must not run under the lock); a rule 1.1 violation ends the stream.
    fn push(&mut self, items: impl Iterator<Item = T>) {
        gather(&mut self.gathered, items, self.bound);
        let mut overflow = false;
        {
            let mut st = self.shared.lock();
            if !(st.closed || st.terminal.is_some())
                && st.items.push_gathered(&mut self.gathered).is_err()
            {
                overflow = true;
                st.terminal = Some(Err(over_delivered("subscribe_async")));
            }
        }
        // Late or refused items go outside the lock (an item's Drop is user code).
        self.gathered.clear();
        if overflow {
            self.shared.slot.cancel();
        }
        self.shared.wake.notify_one();
    }

    fn end(&mut self, result: Result<(), Error>) {
        {
            let mut st = self.shared.lock();
            if st.closed || st.terminal.is_some() {
                return;
            }
            st.terminal = Some(result);
        }
        self.shared.wake.notify_one();
    }
}

impl<T> Drop for Inlet<T> {
    /// Released by its publisher without a terminal signal (a publisher that panicked
    /// in `subscribe`, or one that ended without telling): the task must not wait for
    /// ever, so the stream ends with an error of kind
    /// [`Cancelled`](crate::ErrorKind::Cancelled), as a `fold`'s handle does (a no-op
    /// after a terminal signal or once the task ended).
    fn drop(&mut self) {
        self.end(Err(Error::cancelled()));
    }
}

impl<T: Send> Subscriber<T> for Inlet<T> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        // A second subscription, or one arriving after abort, is cancelled by `set`.
        if self.shared.slot.set(subscription) {
            self.shared.wake.notify_one();
        }
    }

    fn on_next(&mut self, item: T) {
        self.push(std::iter::once(item));
    }

    fn on_next_batch<I>(&mut self, items: I) -> u64
    where
        I: Iterator<Item = T>,
    {
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

/// Cancels upstream if the driver is dropped before it finished (abort, runtime
/// shutdown) or when it ends early.
struct CloseGuard<T>(Arc<Mailbox<T>>);

impl<T> Drop for CloseGuard<T> {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// What the driver found in the hand-off.
enum Next<T> {
    Item(T),
    End(Result<(), Error>),
}

/// Wait until the subscription arrived (or was cancelled: a rule 1.1 violation by
/// the publisher, whose error then waits in the hand-off), or the stream ended
/// without one (the inlet was released unsubscribed). False after an abort.
async fn subscribed<T>(shared: &Mailbox<T>) -> bool {
    loop {
        let notified = shared.wake.notified();
        {
            let st = shared.lock();
            if st.closed {
                return false;
            }
            if st.terminal.is_some() {
                return true;
            }
        }
        if shared.slot.get().is_some() || shared.slot.is_cancelled() {
            return true;
        }
        notified.await;
    }
}

/// Wait for the next item or the terminal signal.
async fn next<T>(shared: &Mailbox<T>) -> Next<T> {
    loop {
        let notified = shared.wake.notified();
        {
            let mut st = shared.lock();
            if st.closed {
                return Next::End(Err(Error::cancelled()));
            }
            if let Some(item) = st.items.pop_released() {
                return Next::Item(item);
            }
            if let Some(end) = st.terminal.take() {
                // Keep a marker so the inlet drops late signals and no request follows.
                st.terminal = Some(Ok(()));
                return Next::End(end);
            }
        }
        notified.await;
    }
}

/// Run a hook's future, turning a panic into an error of kind `Panicked` that names
/// the sink.
async fn guarded<R>(sink: &'static str, future: impl Future<Output = R>) -> Result<R, Error> {
    // AssertUnwindSafe: after a panic the subscriber is never called again (the task
    // ends and drops it), so no broken invariant is observed.
    AssertUnwindSafe(future)
        .catch_unwind()
        .await
        .map_err(|payload| Error::panicked(payload).in_stage(sink))
}

/// The task: see the module docs.
async fn drive<T, A>(
    guard: CloseGuard<T>,
    mut subscriber: A,
    window: u64,
    sink: &'static str,
) -> Result<(), Error>
where
    T: Send + 'static,
    A: AsyncSubscriber<T>,
{
    let shared = &guard.0;
    if !subscribed(shared).await {
        return Err(Error::cancelled());
    }
    // Requests go through the slot: once it is cancelled they are dropped.
    let subscription = &shared.slot;
    guarded(sink, async { subscriber.on_subscribe().await }).await??;
    let mut replenish = Replenish::new(window);
    if !shared.terminated() {
        subscription.request(replenish.initial());
    }
    loop {
        match next(shared).await {
            Next::Item(item) => {
                guarded(sink, async { subscriber.on_next(item).await }).await??;
                if let Some(n) = replenish.on_consumed(1) {
                    if !shared.terminated() {
                        subscription.request(n);
                    }
                }
            }
            Next::End(Ok(())) => {
                return guarded(sink, async { subscriber.on_complete().await }).await?;
            }
            Next::End(Err(error)) => {
                if shared.lock().closed {
                    return Err(error); // aborted: no hook runs
                }
                guarded(sink, async { subscriber.on_error(error.clone()).await }).await?;
                return Err(error);
            }
        }
    }
}
