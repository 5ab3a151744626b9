//! `map_async` and `map_async_unordered`: map each item through a future, at most
//! `concurrency` futures at a time; results in input order, or as they finish.
//!
//! # Algorithm
//!
//! The stage runs its passes on a scheduler (the current tokio runtime, or the one
//! given to the `_on` forms), so every future is polled there, inside the runtime it
//! may need. It owns `concurrency` *slots*, each with one allocation for its whole
//! life (a pinned `Option<Fut>`, replaced in place) and a waker of its own; a slot is
//! taken when an item arrives and given back when its result goes downstream.
//!
//! * The upstream subscriber puts arriving items in a locked inbox and signals the
//!   core. Upstream was asked only for free slots, so the inbox never holds more than
//!   there are slots (more is a rule 1.1 breach: the stage fails).
//! * A pass polls the slots whose wakers fired since the last pass (a slot's waker
//!   records its index and wakes the pass: nothing else is polled), then moves the
//!   arrived items into free slots while fewer calls run than the limit (all of them
//!   without a limiter; `f` runs here, under a panic guard of the stage's own) and
//!   polls each new future once, and delivers finished results within downstream's
//!   demand in one batch: ordered, from the oldest slot while it is finished (a slot
//!   index is the item's sequence number modulo `concurrency`); unordered, in the
//!   order they finished.
//! * Delivered results free their slots; the freed slots are requested from upstream
//!   by the 75 % rule (`Replenish` over `concurrency`): a wave of calls that finish
//!   together is replaced in one request. With a [`Limiter`], upstream is asked for
//!   the limit less the calls running, the items waiting to start and those asked
//!   for; items asked for under a higher limit wait to start until the calls running
//!   fall below a lower one. Each call's round trip (on the scheduler's clock, from
//!   its start to the poll that finished it) goes to the limiter; a call that
//!   finishes in its first poll gives no sample.
//! * Everything upstream delivers was asked for (`outstanding`); more is a rule 1.1
//!   breach that fails the stage.
//!
//! Items waiting in the inbox, futures running and results waiting for demand all
//! hold a slot, so together they never exceed `concurrency`: upstream demand is the
//! free slots, and a downstream that stops asking stops new calls.
//!
//! Upstream's completion goes out once every slot is free; its error goes out at
//! once, right after the running futures and the waiting results are dropped (like
//! a cancel), so a subscriber that sees the error sees every call gone. A cancel
//! drops the futures, the results and the inbox, and cancels upstream.

use std::collections::VecDeque;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

use crate::demand::Replenish;
use crate::drain::Upstream;
use crate::guard::{catch, catch_in};
use crate::limit::{maker, LimitMonitor, Limiter, MakeLimiter};
use crate::runtime::Scheduler;
use crate::stage::core::{Drive, SharedUpstream};
use crate::stage::window::gather;
use crate::stage::{Core, Cx, Pass, Stage};
use crate::{Error, Publisher, Subscriber, Subscription};

/// Largest concurrency accepted: the slots are allocated up front.
const MAX_CONCURRENCY: usize = 1 << 16;

/// Publisher for the [`map_async`](crate::PublisherExt::map_async),
/// [`map_async_unordered`](crate::PublisherExt::map_async_unordered) methods and
/// their `_on` forms.
#[derive(Clone)]
#[must_use = "publishers do nothing until subscribed"]
pub struct MapAsync<P, F, C> {
    source: P,
    f: F,
    concurrency: usize,
    scheduler: C,
    ordered: bool,
    /// Makes each subscription's limiter ([`limit`](Self::limit)).
    limiter: Option<MakeLimiter>,
    monitor: LimitMonitor,
}

impl<P: std::fmt::Debug, F, C: std::fmt::Debug> std::fmt::Debug for MapAsync<P, F, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MapAsync")
            .field("source", &self.source)
            .field("concurrency", &self.concurrency)
            .field("scheduler", &self.scheduler)
            .field("ordered", &self.ordered)
            .field("limited", &self.limiter.is_some())
            .finish_non_exhaustive()
    }
}

impl<P, F, C> MapAsync<P, F, C> {
    pub(crate) fn new(
        source: P,
        scheduler: C,
        concurrency: u64,
        f: F,
        ordered: bool,
        name: &str,
    ) -> Self {
        assert!(
            (1..=MAX_CONCURRENCY as u64).contains(&concurrency),
            "{name} concurrency must be in 1..=2^16 (got {concurrency})"
        );
        // At most 2^16: fits.
        let concurrency = concurrency as usize;
        MapAsync {
            source,
            f,
            concurrency,
            scheduler,
            ordered,
            limiter: None,
            monitor: LimitMonitor::default(),
        }
    }

    /// Let `limiter` decide how many calls run at once, up to the stage's
    /// concurrency (its slots): a call starts only while fewer than the limit run,
    /// and upstream is asked only for that many, so items over the limit wait
    /// upstream as demand not yet given. Each subscription gets a clone of
    /// `limiter`, told the round trip of every call (read on the stage's
    /// scheduler's clock). See [`weir::limit`](crate::limit). A limiter that panics
    /// fails the stage with an error of kind [`Panicked`](crate::ErrorKind::Panicked)
    /// and cancels upstream.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir::limit::Aimd;
    /// use weir::prelude::*;
    ///
    /// let runtime = tokio::runtime::Runtime::new().unwrap();
    /// let _inside = runtime.enter();
    /// let stage = weir::range(0u64..100)
    ///     .map_async(64, |x| async move {
    ///         tokio::task::yield_now().await; // the call waits once
    ///         x
    ///     })
    ///     .limit(Aimd::new(8, 1, 64, Duration::from_millis(250), 0.9));
    /// let monitor = stage.limit_monitor();
    /// assert_eq!(stage.collect().wait().unwrap().len(), 100);
    /// // One round trip per call (a call that finishes in its first poll gives none).
    /// assert_eq!(monitor.snapshot().samples, 100);
    /// ```
    pub fn limit<L: Limiter + Clone + Sync>(mut self, limiter: L) -> Self {
        self.limiter = Some(maker(limiter));
        self
    }

    /// The stage's concurrency figures: limit, calls in flight, round trips (all
    /// subscriptions of this publisher and its clones report here).
    pub fn limit_monitor(&self) -> LimitMonitor {
        self.monitor.clone()
    }
}

impl<P, F, Fut, C> Publisher for MapAsync<P, F, C>
where
    P: Publisher,
    F: FnMut(P::Item) -> Fut + Send + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: Send + 'static,
    C: Scheduler + Clone,
{
    type Item = Fut::Output;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<Fut::Output> + Send + 'static,
    {
        self.source.subscribe(Arrivals {
            waiting: Some(Waiting {
                downstream: subscriber,
                scheduler: self.scheduler,
                f: self.f,
                limiter: self.limiter.map(|make| make()),
                monitor: self.monitor,
            }),
            core: None,
            concurrency: self.concurrency,
            ordered: self.ordered,
            upstream: Upstream::Idle,
            gathered: VecDeque::new(),
        });
    }

    fn in_flight_bound(&self) -> u64 {
        self.source
            .in_flight_bound()
            .saturating_add(self.concurrency as u64)
    }
}

// ---- the stage --------------------------------------------------------------------

/// What the upstream subscriber hands the pass.
struct Inbox<T> {
    items: VecDeque<T>,
    /// Upstream's end, once it came.
    end: Option<Result<(), Error>>,
    /// Set when the stage stopped: items that still arrive (upstream read its demand
    /// before the cancel, rule 2.8) are dropped, not kept where no pass takes them.
    closed: bool,
}

/// The slots whose wakers fired since the last pass.
struct Woken {
    slots: Mutex<Vec<usize>>,
    /// The pass's waker (the stage's task), set at the first pass.
    pass: Mutex<Option<Waker>>,
}

impl Woken {
    fn lock_slots(&self) -> MutexGuard<'_, Vec<usize>> {
        // No user code runs under this lock; recover from poisoning anyway.
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A slot's waker: records the slot and wakes the pass.
struct SlotWaker {
    slot: usize,
    woken: Arc<Woken>,
}

impl Wake for SlotWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.lock_slots().push(self.slot);
        let pass = self
            .woken
            .pass
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(pass) = pass {
            pass.wake();
        }
    }
}

/// The stage's shared part (`F` and `Fut` name the pass's own state).
struct MapStage<T, F, Fut, C> {
    scheduler: C,
    upstream: SharedUpstream,
    inbox: Mutex<Inbox<T>>,
    woken: Arc<Woken>,
    _calls: PhantomData<fn(F) -> Fut>,
}

impl<T, F, Fut, C> MapStage<T, F, Fut, C> {
    fn lock_inbox(&self) -> MutexGuard<'_, Inbox<T>> {
        // No user code runs under this lock; recover from poisoning anyway.
        self.inbox.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One slot: its future (pinned in place for the slot's life) and its result.
struct Slot<Fut: Future> {
    future: Pin<Box<Option<Fut>>>,
    result: Option<Fut::Output>,
    waker: Waker,
}

/// What only the pass touches.
struct Owned<T, F, Fut: Future> {
    f: F,
    slots: Vec<Slot<Fut>>,
    ordered: bool,
    /// Ordered: the sequence number of the oldest busy slot, and of the next item.
    head: u64,
    next: u64,
    /// Unordered: the free slots, and the finished ones in the order they finished.
    free: Vec<usize>,
    finished: VecDeque<usize>,
    /// Slots busy (items in them, running or finished).
    busy: usize,
    /// Calls running (busy slots without a result yet).
    running: usize,
    /// Without a limiter: the freed slots go upstream by the 75% rule.
    replenish: Replenish,
    /// With one: its limit bounds running calls plus upstream demand not yet
    /// delivered (`outstanding`); the calls' start instants give the round trips.
    limiter: Option<Box<dyn Limiter>>,
    outstanding: u64,
    started: Vec<Instant>,
    monitor: LimitMonitor,
    /// Upstream's completion, delivered once every slot is free.
    end: Option<Result<(), Error>>,
    /// Reused buffers: arrivals taken from the inbox, slots to poll, results to send.
    arrived: VecDeque<T>,
    to_poll: Vec<usize>,
    out: Vec<Fut::Output>,
}

impl<T, F, Fut> Owned<T, F, Fut>
where
    F: FnMut(T) -> Fut,
    Fut: Future,
{
    /// Drop the running calls, the results waiting for demand and the items waiting
    /// to start (from `stop`, which the core runs before the stage's error goes
    /// downstream, so that a subscriber that sees the error sees every call already
    /// dropped); a `Drop` that panics is contained (the error that ends the stage is
    /// the one it goes out with).
    fn drop_calls(&mut self) {
        // User code all of it (the futures', results' and items' `Drop`): a panic
        // must not turn the pass that sends the error into a panicked pass.
        let dropped = catch(|| {
            for slot in self.slots.iter_mut() {
                slot.future.set(None);
                slot.result = None;
            }
            self.out.clear();
            self.arrived.clear();
        });
        if dropped.is_err() {
            tracing::error!("map_async: a call's or an item's Drop panicked; contained");
        }
    }

    /// A slot for the next item.
    fn take_slot(&mut self) -> usize {
        self.busy += 1;
        if self.ordered {
            let slot = (self.next % self.slots.len() as u64) as usize;
            self.next += 1;
            slot
        } else {
            self.free.pop().expect("an item arrived for a free slot")
        }
    }

    /// Start a call for `item` and poll it once. `Err`: `f` or the poll panicked. A
    /// call that finishes in this first poll gives the limiter no sample: it did not
    /// wait for anything (a cache hit), and its round trip of zero would pass for the
    /// no-load latency.
    fn start(&mut self, item: T, clock: Option<&dyn Fn() -> Instant>) -> Result<(), Error> {
        let slot = self.take_slot();
        let f = &mut self.f;
        let future = catch_in("map_async", move || f(item))?;
        let entry = &mut self.slots[slot];
        debug_assert!(
            entry.future.is_none() && entry.result.is_none(),
            "slot {slot} is free"
        );
        entry.future.set(Some(future));
        self.running += 1;
        if let Some(clock) = clock {
            self.started[slot] = catch_in("map_async", clock)?;
        }
        self.poll(slot, None)
    }

    /// Poll slot `slot`'s future, if it still runs; keep its result when it is ready
    /// (and, with `clock`, tell the limiter its round trip). `Err`: the poll or the
    /// limiter panicked.
    fn poll(&mut self, slot: usize, clock: Option<&dyn Fn() -> Instant>) -> Result<(), Error> {
        let entry = &mut self.slots[slot];
        let Some(mut future) = entry.future.as_mut().as_pin_mut() else {
            return Ok(());
        };
        let mut context = Context::from_waker(&entry.waker);
        if let Poll::Ready(result) = catch_in("map_async", || future.as_mut().poll(&mut context))? {
            // The finished future's `Drop` is user code too (if it panics, the slot
            // is still left empty: an assignment writes the new value on unwind).
            catch_in("map_async", || entry.future.set(None))?;
            entry.result = Some(result);
            if !self.ordered {
                self.finished.push_back(slot);
            }
            if let (Some(limiter), Some(clock)) = (self.limiter.as_mut(), clock) {
                // The clock is the user's scheduler's `now`.
                let rtt =
                    catch_in("map_async", clock)?.saturating_duration_since(self.started[slot]);
                let in_flight = self.running;
                catch_in("map_async", || limiter.on_sample(rtt, in_flight))?;
                self.monitor.record_sample(rtt);
            }
            self.running -= 1;
        }
        Ok(())
    }

    /// The most calls that may run now: the limiter's limit within the slots, or
    /// every slot without one. `Err`: the limiter panicked.
    fn cap(&self) -> Result<usize, Error> {
        match self.limiter.as_ref() {
            Some(limiter) => {
                Ok(catch_in("map_async", || limiter.limit())?.clamp(1, self.slots.len()))
            }
            None => Ok(self.slots.len()),
        }
    }

    /// Start the items that arrived, while fewer than `cap` calls run (items asked
    /// for under a higher limit wait here for a lower one).
    fn start_waiting(
        &mut self,
        cap: usize,
        clock: Option<&dyn Fn() -> Instant>,
    ) -> Result<(), Error> {
        while self.running < cap {
            let Some(item) = self.arrived.pop_front() else {
                break;
            };
            self.start(item, clock)?;
        }
        Ok(())
    }

    /// How many more items to ask upstream for now (added to `outstanding`). Without
    /// a limiter: the slots `delivered` freed, by the 75% rule. With one: up to its
    /// limit of running calls, items waiting to start and demand not yet delivered,
    /// within the free slots; in batches of a quarter of the limit unless nothing is
    /// asked, waiting or running.
    fn refill(&mut self, delivered: u64, cap: usize) -> u64 {
        let n = if self.limiter.is_none() {
            self.replenish.on_consumed(delivered).unwrap_or(0)
        } else {
            self.monitor.record_limit(cap, self.running);
            let held = self.arrived.len() + self.outstanding as usize;
            let room = cap
                .saturating_sub(self.running + held)
                .min(self.slots.len().saturating_sub(self.busy + held));
            let idle = self.running + held == 0;
            if room == 0 || (room < cap.div_ceil(4) && !idle) {
                0
            } else {
                room as u64
            }
        };
        self.outstanding += n;
        n
    }

    /// Move up to `max` finished results, in delivery order, to `out`, freeing their
    /// slots. Returns how many.
    fn take_results(&mut self, max: u64) -> u64 {
        let mut taken = 0;
        while taken < max {
            let slot = if self.ordered {
                if self.busy == 0 {
                    break;
                }
                let slot = (self.head % self.slots.len() as u64) as usize;
                if self.slots[slot].result.is_none() {
                    break;
                }
                self.head += 1;
                slot
            } else {
                match self.finished.pop_front() {
                    Some(slot) => {
                        self.free.push(slot);
                        slot
                    }
                    None => break,
                }
            };
            let entry = &mut self.slots[slot];
            let result = entry.result.take().expect("a finished slot has its result");
            self.busy -= 1;
            self.out.push(result);
            taken += 1;
        }
        taken
    }
}

impl<T, F, Fut, C> Stage for MapStage<T, F, Fut, C>
where
    T: Send + 'static,
    F: FnMut(T) -> Fut + Send + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: Send + 'static,
    C: Scheduler + Clone,
{
    const NAME: &'static str = "map_async";
    const USES_WAKER: bool = true;
    type Item = Fut::Output;
    type Owned = Owned<T, F, Fut>;
    type Padding = ();

    fn drive(&self) -> Drive<'_> {
        Drive::Scheduled {
            on: &self.scheduler,
            linger: false,
        }
    }

    fn pass<S: Subscriber<Fut::Output>>(
        &self,
        cx: &Cx<'_>,
        owned: &mut Owned<T, F, Fut>,
        downstream: &mut S,
    ) -> Pass {
        {
            let mut pass = self.woken.pass.lock().unwrap_or_else(|p| p.into_inner());
            if !pass.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *pass = Some(cx.waker().clone());
            }
        }
        // The round trips of a limited stage are read on the scheduler's clock.
        let now = || self.scheduler.now();
        let clock: Option<&dyn Fn() -> Instant> = owned.limiter.is_some().then_some(&now);
        // Arrivals join the items waiting to start.
        let (arrived, end) = {
            let mut inbox = self.lock_inbox();
            let arrived = inbox.items.len();
            owned.arrived.extend(inbox.items.drain(..));
            (arrived, inbox.end.take())
        };
        let over = arrived as u64 > owned.outstanding;
        owned.outstanding = owned.outstanding.saturating_sub(arrived as u64);
        if over {
            return cx.terminate(
                downstream,
                Err(Error::spec_violation(
                    "1.1",
                    format!(
                        "map_async: upstream delivered more items than requested \
                         ({} slots); rule 1.1",
                        owned.slots.len()
                    ),
                )),
            );
        }
        match end {
            Some(Err(error)) => return cx.terminate(downstream, Err(error)),
            Some(Ok(())) => owned.end = Some(Ok(())),
            None => {}
        }
        // Calls whose wakers fired, then the waiting items while the limit allows. A
        // panic in `f`, a poll or the limiter fails the stage (and cancels upstream).
        std::mem::swap(&mut *self.woken.lock_slots(), &mut owned.to_poll);
        let mut called = Ok(());
        for i in 0..owned.to_poll.len() {
            let slot = owned.to_poll[i];
            called = owned.poll(slot, clock);
            if called.is_err() {
                break;
            }
        }
        owned.to_poll.clear();
        let cap = called.and_then(|()| owned.cap());
        let cap = match cap.and_then(|cap| owned.start_waiting(cap, clock).map(|()| cap)) {
            Ok(cap) => cap,
            Err(error) => return cx.terminate(downstream, Err(error)),
        };
        // Results within demand, in one batch.
        let taken = owned.take_results(cx.demand().get());
        if taken > 0 {
            cx.deliver(downstream, owned.out.drain(..));
            owned.out.clear();
        }
        let more = owned.refill(taken, cap);
        if more > 0 {
            self.upstream.request(more);
        }
        if owned.busy == 0 && owned.arrived.is_empty() {
            if let Some(end) = owned.end.take() {
                return cx.terminate(downstream, end);
            }
        }
        Pass::Idle
    }

    fn stop(&self, owned: &mut Owned<T, F, Fut>) {
        // First: the pass waker holds the core, which holds this (a future's `Drop`
        // that panics below must not leave that cycle behind).
        *self.woken.pass.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.upstream.cancel();
        owned.drop_calls();
        let arrived = {
            let mut inbox = self.lock_inbox();
            inbox.closed = true;
            std::mem::take(&mut inbox.items)
        };
        drop(arrived);
    }
}

// ---- the upstream subscriber ------------------------------------------------------

/// Downstream, the scheduler, `f` and the limiter, until `on_subscribe`.
struct Waiting<S, C, F> {
    downstream: S,
    scheduler: C,
    f: F,
    limiter: Option<Box<dyn Limiter>>,
    monitor: LimitMonitor,
}

/// The stage's core, shared by the upstream subscriber and the scheduler's tasks.
type MapCore<T, F, Fut, C, S> = Arc<Core<MapStage<T, F, Fut, C>, S>>;

/// The subscriber to upstream: puts items in the inbox and signals the pass.
struct Arrivals<T, F, Fut, S, C>
where
    T: Send + 'static,
    F: FnMut(T) -> Fut + Send + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: Send + 'static,
    S: Subscriber<Fut::Output> + Send + 'static,
    C: Scheduler + Clone,
{
    waiting: Option<Waiting<S, C, F>>,
    core: Option<MapCore<T, F, Fut, C, S>>,
    concurrency: usize,
    ordered: bool,
    upstream: Upstream,
    /// A delivery, gathered before the inbox's lock is taken; empty between
    /// deliveries.
    gathered: VecDeque<T>,
}

impl<T, F, Fut, S, C> Arrivals<T, F, Fut, S, C>
where
    T: Send + 'static,
    F: FnMut(T) -> Fut + Send + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: Send + 'static,
    S: Subscriber<Fut::Output> + Send + 'static,
    C: Scheduler + Clone,
{
    fn terminate(&mut self, end: Result<(), Error>) {
        if let (true, Some(core)) = (self.upstream.finish(), &self.core) {
            core.stage().upstream.finished();
            core.stage().lock_inbox().end.get_or_insert(end);
            core.signal();
        }
    }
}

impl<T, F, Fut, S, C> Drop for Arrivals<T, F, Fut, S, C>
where
    T: Send + 'static,
    F: FnMut(T) -> Fut + Send + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: Send + 'static,
    S: Subscriber<Fut::Output> + Send + 'static,
    C: Scheduler + Clone,
{
    /// Released by upstream without a terminal signal (a publisher that ended
    /// without telling, or whose thread panicked holding it): the calls in flight
    /// finish and deliver, then downstream gets an error of kind
    /// [`Cancelled`](crate::ErrorKind::Cancelled) instead of waiting for ever. A
    /// no-op after the end; before `on_subscribe`, downstream is dropped with it.
    fn drop(&mut self) {
        // After the stage's own cancel, upstream let go as asked.
        if self
            .core
            .as_ref()
            .is_some_and(|core| core.stage().upstream.is_done())
        {
            return;
        }
        self.terminate(Err(crate::guard::abandoned("map_async")));
    }
}

impl<T, F, Fut, S, C> Subscriber<T> for Arrivals<T, F, Fut, S, C>
where
    T: Send + 'static,
    F: FnMut(T) -> Fut + Send + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: Send + 'static,
    S: Subscriber<Fut::Output> + Send + 'static,
    C: Scheduler + Clone,
{
    fn on_subscribe(&mut self, subscription: Subscription) {
        if !self.upstream.accept(&subscription) {
            return;
        }
        let Some(Waiting {
            downstream,
            scheduler,
            f,
            limiter,
            monitor,
        }) = self.waiting.take()
        else {
            return;
        };
        let n = self.concurrency;
        let woken = Arc::new(Woken {
            slots: Mutex::new(Vec::with_capacity(n)),
            pass: Mutex::new(None),
        });
        let slots = (0..n)
            .map(|slot| Slot {
                future: Box::pin(None),
                result: None,
                waker: Waker::from(Arc::new(SlotWaker {
                    slot,
                    woken: woken.clone(),
                })),
            })
            .collect();
        let replenish = Replenish::new(n as u64);
        let (first, failed) = match &limiter {
            Some(limiter) => match catch_in("map_async", || limiter.limit()) {
                Ok(limit) => (limit.clamp(1, n), None),
                // A limiter that panics here fails the stage before anything is asked
                // for, as one that panics later does.
                Err(error) => (1, Some(error)),
            },
            None => (n, None),
        };
        monitor.record_limit(first, 0);
        let started = if limiter.is_some() {
            vec![scheduler.now(); n]
        } else {
            Vec::new()
        };
        let owned = Owned {
            f,
            slots,
            ordered: self.ordered,
            head: 0,
            next: 0,
            free: (0..n).rev().collect(),
            finished: VecDeque::with_capacity(if self.ordered { 0 } else { n }),
            busy: 0,
            running: 0,
            replenish,
            outstanding: first as u64,
            limiter,
            started,
            monitor,
            end: None,
            arrived: VecDeque::with_capacity(n),
            to_poll: Vec::with_capacity(n),
            out: Vec::with_capacity(n),
        };
        let core = Core::new(MapStage {
            scheduler,
            upstream: SharedUpstream::new(subscription.clone()),
            inbox: Mutex::new(Inbox {
                items: VecDeque::with_capacity(n),
                end: None,
                closed: false,
            }),
            woken,
            _calls: PhantomData,
        });
        core.attach(owned, downstream);
        let stopped = core.is_stopping();
        if let Some(error) = failed {
            // Upstream is cancelled, and the pass signals the error.
            self.upstream.cancel();
            core.stage().upstream.finished();
            core.stage().lock_inbox().end.get_or_insert(Err(error));
            core.signal();
        } else if !stopped {
            subscription.request(first as u64);
        }
        self.core = Some(core);
    }

    fn on_next(&mut self, item: T) {
        let _no_credit = self.on_next_batch(std::iter::once(item));
    }

    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        let (Some(core), true) = (&self.core, self.upstream.is_active()) else {
            return 0;
        };
        // Gathered before the inbox's lock is taken: a lazy batch runs user code
        // (see `gather`). Bounded by upstream's credit, as the inbox is.
        gather(&mut self.gathered, items, usize::MAX);
        let mut inbox = core.stage().lock_inbox();
        if !inbox.closed {
            inbox.items.append(&mut self.gathered);
        }
        drop(inbox);
        // Late items go outside the lock.
        self.gathered.clear();
        core.signal();
        0
    }

    fn on_error(&mut self, error: Error) {
        self.terminate(Err(error));
    }

    fn on_complete(&mut self) {
        self.terminate(Ok(()));
    }
}
