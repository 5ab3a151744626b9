//! `flat_map`: map each item to a publisher and merge the inner publishers, at most
//! `concurrency` at a time, or fewer under a [`Limiter`] ([`FlatMap::limit`]).
//!
//! # Algorithm
//!
//! The merging stage of `merge.rs` with an outer source: [`Outer`] subscribes to it,
//! asks for `concurrency` items up front, and turns each item into an inner publisher
//! (`f` under a panic guard) that it connects to a new lane of the stage's lane set
//! (a bounded window of `prefetch`, replenished by the 75% rule). The merging stage
//! asks the outer source for 1 more each time an inner lane finished and was drained,
//! so live inner subscriptions never exceed `concurrency` and at most
//! `concurrency × prefetch` items are buffered. The outer source's end is recorded in
//! the lane set: the stage completes once it completed and every lane finished.
//!
//! The outer subscriber follows [`Upstream`] (`Idle` → `Active` → `Done`, also after
//! `f` panicked, an inner `subscribe` panicked, or the outer source over-delivered).
//! `f` and inner `subscribe` run on the outer source's thread; inner sources deliver
//! on theirs; both only fill lanes and ask the core for a pass, which makes every
//! downstream signal and every replenishing request.
//!
//! # With a limiter
//!
//! [`LimitedOuter`] replaces [`Outer`], and a [`Gate`] (one per subscription, with its
//! own clone of the limiter) decides what starts. An inner holds a *place* from the
//! moment it is started until its lane is retired (completed and drained, as without
//! a limiter); the places held never exceed `min(concurrency, limit)`.
//!
//! * Demand: the gate asks the outer source for the limit less the places held, the
//!   items waiting to start and the items asked for and not yet delivered
//!   (`outstanding`); at subscribe, after every arrival and after every retirement.
//!   Items over the limit wait upstream, as demand not given. An item delivered beyond
//!   `outstanding` is a rule 1.1 breach that fails the stage.
//! * An arriving item joins the gate's `waiting` queue (it never holds more than was
//!   asked, so at most `concurrency`; allocated once), and items start from its front
//!   while fewer places are held than the limit: `f` runs (under a panic guard, behind
//!   a lock of its own, since it may run on two threads) and its publisher is
//!   connected to a lane wrapped in [`Timed`]. Items asked for under a higher limit
//!   wait there for a lower one.
//! * The merging stage's `request(1)` on the outer slot (a lane was retired) reaches
//!   the gate through [`Freed`]: a place is freed, the waiting items start and the
//!   outer source is asked for what fits. Items therefore start on the outer source's
//!   thread (as they arrive) or inside a pass (after a retirement), never recursively
//!   from an inner's signal.
//! * Round trips: [`Timed`] reads `Instant::now()` when it subscribes the inner and
//!   when the inner completes, and gives the difference to the limiter (with the
//!   places held, its own included, as the calls in flight) and to the monitor before
//!   the completion reaches the lane. The stage has no scheduler, so this is the
//!   system's monotonic clock, also when the inners run on virtual time. An inner
//!   that fails gives no sample (its error ends the stage, and the limiter with it),
//!   nor does one that was cancelled.
//! * A limiter that panics fails the stage with `Panicked`. In `limit` (at subscribe,
//!   on an arrival, after a retirement) the gate ends the outer side with the error as
//!   a panic of `f` does: the outer source is cancelled and the next pass signals the
//!   error and cancels the inners. In `on_sample` the inner's completion goes to its
//!   lane as that error instead, and the pass fails the stage the same way. The gate
//!   is closed from then on: nothing starts, nothing is asked, the limiter is not
//!   called again.
//!
//! Locks: the gate's state lock is held for its bookkeeping and the limiter's calls
//! only, `f`'s lock for `f` only; neither is held while connecting an inner,
//! requesting, cancelling or dropping items. The stage's end closes the lane set,
//! whose cancel of the outer slot closes the gate (waiting items are dropped) and
//! cancels the outer source.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use super::merge::{connect, start};
use crate::drain::{SubscriptionSlot, Upstream};
use crate::guard::catch_in;
use crate::limit::{maker, LimitMonitor, Limiter, MakeLimiter};
use crate::metrics::DropHook;
use crate::stage::core::CoreHandle;
use crate::stage::lanes::LaneSet;
use crate::stage::window;
use crate::{Error, Publisher, RawSubscription, Subscriber, Subscription};

/// Largest concurrency accepted: one slot per inner is allocated up front.
const MAX_CONCURRENCY: u64 = 1 << 16;

/// Publisher for the [`flat_map`](crate::PublisherExt::flat_map) method.
#[derive(Clone)]
#[must_use = "publishers do nothing until subscribed"]
pub struct FlatMap<P, F> {
    source: P,
    f: F,
    concurrency: u64,
    prefetch: u64,
    /// Makes each subscription's limiter, if [`limit`](Self::limit) gave one.
    limiter: Option<MakeLimiter>,
    /// Where the limited subscriptions report ([`limit_monitor`](Self::limit_monitor)).
    monitor: LimitMonitor,
    /// The public method the user called (`flat_map`, `concat_map`): the stage's
    /// name, in a panic's error.
    stage: &'static str,
}

impl<P: std::fmt::Debug, F> std::fmt::Debug for FlatMap<P, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlatMap")
            .field("source", &self.source)
            .field("concurrency", &self.concurrency)
            .field("prefetch", &self.prefetch)
            .field("limited", &self.limiter.is_some())
            .finish_non_exhaustive()
    }
}

impl<P, F> FlatMap<P, F> {
    pub(crate) fn new(source: P, f: F, concurrency: u64, prefetch: u64) -> Self {
        assert!(
            (1..=MAX_CONCURRENCY).contains(&concurrency),
            "flat_map concurrency must be in 1..=2^16 (got {concurrency})"
        );
        window::validate("flat_map prefetch", prefetch);
        FlatMap {
            source,
            f,
            concurrency,
            prefetch,
            limiter: None,
            monitor: LimitMonitor::default(),
            stage: "flat_map",
        }
    }

    /// The same stage, named `stage` (`concat_map` is a `flat_map` of one).
    pub(crate) fn named(mut self, stage: &'static str) -> Self {
        self.stage = stage;
        self
    }

    /// Let `limiter` decide how many inner publishers run at once, up to the stage's
    /// `concurrency`: an inner starts (`f` runs and its publisher is subscribed) only
    /// while fewer than `min(concurrency, limit)` hold a place, and this publisher is
    /// asked only for that many items, so items over the limit wait upstream as demand
    /// not yet given. An inner holds its place until it completed and its items went
    /// downstream; items asked for under a higher limit wait for a lower one.
    ///
    /// Each subscription gets a clone of `limiter`, told the round trip of every inner
    /// that completes: from its `subscribe` to its `on_complete`, read on the system's
    /// monotonic clock ([`Instant::now`]; the stage has no scheduler, so not on
    /// virtual time even when the inners use it). An inner that fails gives no sample:
    /// its error ends the stage. A limiter that panics fails the stage with an error
    /// of kind [`Panicked`](crate::ErrorKind::Panicked), cancelling this publisher and
    /// every inner. See [`weir::limit`](crate::limit).
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir::limit::Aimd;
    /// use weir::prelude::*;
    ///
    /// // Each item is a call to a service answering with 0 to 3 records.
    /// let stage = weir::range(0u64..100)
    ///     .flat_map(|n| weir::range(0..n % 4), 16, 8)
    ///     .limit(Aimd::new(4, 1, 16, Duration::from_millis(250), 0.9));
    /// let monitor = stage.limit_monitor();
    /// assert_eq!(stage.collect().wait().unwrap().len(), 150);
    /// let figures = monitor.snapshot();
    /// // One round trip per inner; none runs any more.
    /// assert_eq!((figures.samples, figures.in_flight), (100, 0));
    /// assert!((1..=16).contains(&figures.limit));
    /// ```
    pub fn limit<L: Limiter + Clone + Sync>(mut self, limiter: L) -> Self {
        self.limiter = Some(maker(limiter));
        self
    }

    /// The stage's concurrency figures: limit, inners holding a place, round trips
    /// (all subscriptions of this publisher and its clones report here; only with a
    /// [`limit`](Self::limit)).
    pub fn limit_monitor(&self) -> LimitMonitor {
        self.monitor.clone()
    }

    /// Bound of the buffers this stage holds itself.
    fn own_bound(&self) -> u64 {
        self.concurrency.saturating_mul(self.prefetch)
    }
}

impl<P, F, Q> Publisher for FlatMap<P, F>
where
    P: Publisher,
    F: FnMut(P::Item) -> Q + Send + 'static,
    Q: Publisher,
{
    type Item = Q::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<Q::Item> + Send + 'static,
    {
        let concurrency = usize::try_from(self.concurrency).expect("validated to 2^16");
        let (source, f, window) = (self.source, self.f, self.concurrency);
        let limiter = self.limiter.map(|make| make());
        let (monitor, stage) = (self.monitor, self.stage);
        start(
            stage,
            subscriber,
            concurrency,
            self.prefetch as usize,
            true,
            move |set, core| {
                let Some(limiter) = limiter else {
                    source.subscribe(Outer {
                        f,
                        stage,
                        set: set.clone(),
                        core: core.clone(),
                        window,
                        upstream: Upstream::Idle,
                    });
                    return;
                };
                let gate = Arc::new(Gate {
                    state: Mutex::new(GateState {
                        limiter,
                        places: 0,
                        outstanding: 0,
                        waiting: VecDeque::with_capacity(concurrency),
                        outer_ended: false,
                        closed: false,
                        mapping: false,
                    }),
                    f: Mutex::new(Mapper { f, panicked: false }),
                    outer: SubscriptionSlot::new(),
                    set: Arc::downgrade(set),
                    core: Arc::downgrade(core),
                    concurrency,
                    monitor,
                });
                source.subscribe(LimitedOuter {
                    gate,
                    set: set.clone(),
                    core: core.clone(),
                    upstream: Upstream::Idle,
                });
            },
        );
    }

    fn in_flight_bound(&self) -> u64 {
        self.source
            .in_flight_bound()
            .saturating_add(self.own_bound())
    }
}

/// The subscriber to the outer source: maps each item and connects its publisher.
struct Outer<F, U, N: CoreHandle> {
    /// The user's closure.
    f: F,
    /// The stage's name, in the error of a panic in `f`.
    stage: &'static str,
    /// The inner lanes (shared with the drain).
    set: Arc<LaneSet<U>>,
    /// Asked for a pass when the outer source ends.
    core: Arc<N>,
    /// The first request: the concurrency.
    window: u64,
    /// Life cycle; `Done` also after `f` panicked or the source over-delivered.
    upstream: Upstream,
}

impl<F, U, N: CoreHandle> Outer<F, U, N> {
    /// End the outer side with `error` (cancelling the outer source).
    fn fail(&mut self, error: Error) {
        if self.upstream.finish() {
            // Through the shared slot, so the drain's own cancel is not a second call.
            self.set.outer.cancel();
            self.set.end_outer(Err(error));
            self.core.signal();
        }
    }
}

impl<F, U, N: CoreHandle> Drop for Outer<F, U, N> {
    /// Released by the outer source without a terminal signal (one that ended
    /// without telling, or whose thread panicked holding it): the stage fails once
    /// its inners are done, instead of waiting for more for ever. A no-op after the
    /// end.
    fn drop(&mut self) {
        // After the stage's own cancel of the outer source, it let go as asked.
        if !self.set.outer.is_cancelled() && self.upstream.finish() {
            self.set.end_outer(Err(crate::guard::abandoned(self.stage)));
            self.core.signal();
        }
    }
}

impl<T, F, Q, N> Subscriber<T> for Outer<F, Q::Item, N>
where
    F: FnMut(T) -> Q,
    Q: Publisher,
    N: CoreHandle,
{
    fn on_subscribe(&mut self, subscription: Subscription) {
        if self.upstream.accept(&subscription) && self.set.outer.set(subscription.clone()) {
            subscription.request(self.window);
        }
    }

    fn on_next(&mut self, item: T) {
        if !self.upstream.is_active() {
            return;
        }
        match catch_in(self.stage, || (self.f)(item)) {
            Ok(inner) => {
                if !connect(&self.set, inner, &self.core) && !self.set.is_closed() {
                    self.fail(over_delivered());
                }
            }
            Err(error) => self.fail(error),
        }
    }

    fn on_error(&mut self, error: Error) {
        if self.upstream.finish() {
            self.set.end_outer(Err(error));
            self.core.signal();
        }
    }

    fn on_complete(&mut self) {
        if self.upstream.finish() {
            self.set.end_outer(Ok(()));
            self.core.signal();
        }
    }

    fn drop_hook(&self) -> Option<DropHook> {
        self.set.hook.clone()
    }
}

/// The outer source delivered more than it was asked for.
fn over_delivered() -> Error {
    Error::spec_violation(
        "1.1",
        "the outer source of flat_map delivered more items than requested (rule 1.1)",
    )
}

// ---- with a limiter -----------------------------------------------------------------

/// What the limited outer subscriber, the merging stage (through [`Freed`]) and the
/// inners' [`Timed`] subscribers share: the places, the limiter and the items waiting
/// to start.
struct Gate<T, F, U, N> {
    /// The bookkeeping and the limiter.
    state: Mutex<GateState<T>>,
    /// The user's closure: it runs on the outer source's thread or in a pass.
    f: Mutex<Mapper<F>>,
    /// The outer source's own subscription (the lane set holds a [`Freed`]).
    outer: SubscriptionSlot,
    /// The lanes, where started inners are connected. Weak: the lane set holds the
    /// gate (through [`Freed`]) until the stage ends.
    set: Weak<LaneSet<U>>,
    /// The stage's core, asked for a pass when the gate fails (weak, likewise).
    core: Weak<N>,
    /// The stage's concurrency: the most places, whatever the limit.
    concurrency: usize,
    /// Where the limit, the places and the round trips are reported.
    monitor: LimitMonitor,
}

/// The gate's bookkeeping, behind its lock.
struct GateState<T> {
    /// This subscription's limiter.
    limiter: Box<dyn Limiter>,
    /// Inners started and not yet retired (completed and drained).
    places: usize,
    /// Items asked of the outer source and not yet delivered.
    outstanding: u64,
    /// Items delivered and not yet started (at most what was asked; allocated once).
    waiting: VecDeque<T>,
    /// The outer source ended: nothing more is asked of it.
    outer_ended: bool,
    /// The stage ended or the limiter panicked: nothing starts, nothing is asked, the
    /// limiter is not called again.
    closed: bool,
    /// A thread is in `f` (one item is mapped at a time). `f` is user code and may
    /// free a place on its own thread (completing an earlier inner) and so start
    /// the next item there: that item waits instead, and the thread in `f` starts it
    /// when `f` returns (its `advance` looks again), rather than waiting for the
    /// lock it holds.
    mapping: bool,
}

/// The user's closure, and whether it panicked (then it is never called again).
struct Mapper<F> {
    /// The user's closure.
    f: F,
    /// It panicked: the stage is failing, no item is mapped any more.
    panicked: bool,
}

impl<T, F, U, N> Gate<T, F, U, N> {
    fn lock(&self) -> MutexGuard<'_, GateState<T>> {
        // User code under this lock (the limiter) runs under a panic guard; recover
        // from poisoning anyway.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Close the gate (the stage ended): drop the waiting items and cancel the outer
    /// source.
    fn cancel(&self) {
        let waiting = {
            let mut state = self.lock();
            state.closed = true;
            std::mem::take(&mut state.waiting)
        };
        drop(waiting);
        self.outer.cancel();
    }
}

impl<T, F, Q, N> Gate<T, F, Q::Item, N>
where
    T: Send + 'static,
    F: FnMut(T) -> Q + Send + 'static,
    Q: Publisher,
    N: CoreHandle,
{
    /// The most places now: the limiter's limit within the concurrency. `Err`: the
    /// limiter panicked (the gate is closed).
    fn cap(&self, state: &mut GateState<T>) -> Result<usize, Error> {
        match catch_in("flat_map", || state.limiter.limit()) {
            Ok(limit) => Ok(limit.clamp(1, self.concurrency)),
            Err(error) => {
                state.closed = true;
                Err(error)
            }
        }
    }

    /// Start the waiting items while fewer places are held than the limit, then ask
    /// the outer source for what fits. `Err`: the limiter or `f` panicked (the
    /// caller fails the stage).
    fn advance(self: &Arc<Self>) -> Result<(), Error> {
        let ask = loop {
            let item = {
                let mut state = self.lock();
                if state.closed {
                    return Ok(());
                }
                let cap = self.cap(&mut state)?;
                let next = if state.places < cap && !state.mapping {
                    state.waiting.pop_front()
                } else {
                    None
                };
                match next {
                    Some(item) => {
                        state.places += 1;
                        state.mapping = true;
                        item
                    }
                    None => {
                        // Each term is at most the concurrency (asks never lift the
                        // sum above the limit), so the sum does not overflow.
                        let held = state.places + state.waiting.len() + state.outstanding as usize;
                        let ask = if state.outer_ended {
                            0
                        } else {
                            cap.saturating_sub(held)
                        };
                        state.outstanding += ask as u64;
                        self.monitor.record_limit(cap, state.places);
                        break ask;
                    }
                }
            };
            self.start(item)?;
        };
        if ask > 0 {
            self.outer.request(ask as u64);
        }
        Ok(())
    }

    /// Map `item` with `f` and connect its publisher, timed, to a new lane (its place
    /// is taken). `Err`: `f` panicked.
    fn start(self: &Arc<Self>, item: T) -> Result<(), Error> {
        let mapped = {
            let mut mapper = self.f.lock().unwrap_or_else(|p| p.into_inner());
            // (`panicked`: the stage is failing already.)
            (!mapper.panicked).then(|| {
                let f = &mut mapper.f;
                let mapped = catch_in("flat_map", move || f(item));
                mapper.panicked = mapped.is_err();
                mapped
            })
        };
        // `f` returned: the next item may be mapped (see `GateState::mapping`).
        self.lock().mapping = false;
        let inner = match mapped {
            None => return Ok(()),
            Some(mapped) => mapped?,
        };
        let (Some(set), Some(core)) = (self.set.upgrade(), self.core.upgrade()) else {
            return Ok(());
        };
        let gate: Arc<dyn Sample> = self.clone();
        let connected = connect(
            &set,
            Timed {
                source: inner,
                gate,
            },
            &core,
        );
        // The places bound the lanes: only a closed set refuses one.
        debug_assert!(
            connected || set.is_closed(),
            "a started inner found no lane"
        );
        Ok(())
    }

    /// The gate failed inside a pass (the limiter or `f` panicked): end the outer side
    /// with `error`, as [`LimitedOuter`] does, and ask for the pass that signals it.
    fn fail(&self, error: Error) {
        let (Some(set), Some(core)) = (self.set.upgrade(), self.core.upgrade()) else {
            self.cancel();
            return;
        };
        // The lane set's cancel of its outer slot closes the gate (see `Freed`).
        set.outer.cancel();
        set.end_outer(Err(error));
        core.signal();
    }
}

/// What a [`Timed`] subscriber needs of its gate.
trait Sample: Send + Sync {
    /// An inner completed after `rtt`: tell the limiter (with the places held as the
    /// calls in flight) and the monitor. `Err`: the limiter panicked.
    fn sample(&self, rtt: Duration) -> Result<(), Error>;
}

impl<T, F, U, N> Sample for Gate<T, F, U, N>
where
    T: Send,
    F: Send,
    U: Send + 'static,
    N: CoreHandle,
{
    fn sample(&self, rtt: Duration) -> Result<(), Error> {
        {
            let mut state = self.lock();
            if state.closed {
                return Ok(());
            }
            let in_flight = state.places;
            let limiter = &mut state.limiter;
            if let Err(error) = catch_in("flat_map", || limiter.on_sample(rtt, in_flight)) {
                state.closed = true;
                return Err(error);
            }
        }
        self.monitor.record_sample(rtt);
        Ok(())
    }
}

/// The outer subscription the lane set holds under a limiter: the merging stage's
/// `request(1)` for a retired lane frees a place; its cancel closes the gate.
struct Freed<G>(Arc<G>);

impl<T, F, Q, N> RawSubscription for Freed<Gate<T, F, Q::Item, N>>
where
    T: Send + 'static,
    F: FnMut(T) -> Q + Send + 'static,
    Q: Publisher,
    N: CoreHandle,
{
    fn request(&self, n: u64) {
        let gate = &self.0;
        {
            let mut state = gate.lock();
            let freed = usize::try_from(n).unwrap_or(usize::MAX);
            state.places = state.places.saturating_sub(freed);
        }
        if let Err(error) = gate.advance() {
            gate.fail(error);
        }
    }

    fn cancel(&self) {
        self.0.cancel();
    }
}

/// The subscriber to the outer source under a limiter: queues each item at the gate,
/// which starts what fits.
struct LimitedOuter<T, F, U, N: CoreHandle> {
    /// The places, the limiter, the waiting items and `f`.
    gate: Arc<Gate<T, F, U, N>>,
    /// The inner lanes (shared with the drain).
    set: Arc<LaneSet<U>>,
    /// Asked for a pass when the outer source ends.
    core: Arc<N>,
    /// Life cycle; `Done` also after the limiter or `f` panicked here or the source
    /// over-delivered.
    upstream: Upstream,
}

impl<T, F, U, N: CoreHandle> Drop for LimitedOuter<T, F, U, N> {
    /// As [`Outer`]'s: released by the outer source without a terminal signal, the
    /// stage fails once its inners are done. A no-op after the end.
    fn drop(&mut self) {
        // After the stage's own cancel of the outer source, it let go as asked.
        if !self.set.outer.is_cancelled() {
            let stage = self.set.stage();
            self.end(Err(crate::guard::abandoned(stage)));
        }
    }
}

impl<T, F, U, N: CoreHandle> LimitedOuter<T, F, U, N> {
    /// End the outer side with `error` (closing the gate, which cancels the outer
    /// source).
    fn fail(&mut self, error: Error) {
        if self.upstream.finish() {
            // Through the shared slot, so the drain's own cancel is not a second call.
            self.set.outer.cancel();
            self.set.end_outer(Err(error));
            self.core.signal();
        }
    }

    /// The outer source ended with `end`.
    fn end(&mut self, end: Result<(), Error>) {
        if self.upstream.finish() {
            self.gate.lock().outer_ended = true;
            self.set.end_outer(end);
            self.core.signal();
        }
    }
}

impl<T, F, Q, N> Subscriber<T> for LimitedOuter<T, F, Q::Item, N>
where
    T: Send + 'static,
    F: FnMut(T) -> Q + Send + 'static,
    Q: Publisher,
    N: CoreHandle,
{
    fn on_subscribe(&mut self, subscription: Subscription) {
        if !self.upstream.accept(&subscription) || !self.gate.outer.set(subscription) {
            return;
        }
        // A lane set already closed cancels the `Freed`, which cancels the source.
        let freed = Subscription::new(Arc::new(Freed(self.gate.clone())));
        if self.set.outer.set(freed) {
            if let Err(error) = self.gate.advance() {
                self.fail(error);
            }
        }
    }

    fn on_next(&mut self, item: T) {
        if !self.upstream.is_active() {
            return;
        }
        let over = {
            let mut state = self.gate.lock();
            if state.closed {
                return;
            }
            if state.outstanding == 0 {
                true
            } else {
                state.outstanding -= 1;
                state.waiting.push_back(item);
                false
            }
        };
        let result = if over {
            Err(over_delivered())
        } else {
            self.gate.advance()
        };
        if let Err(error) = result {
            self.fail(error);
        }
    }

    fn on_error(&mut self, error: Error) {
        self.end(Err(error));
    }

    fn on_complete(&mut self) {
        self.end(Ok(()));
    }

    fn drop_hook(&self) -> Option<DropHook> {
        self.set.hook.clone()
    }
}

/// An inner publisher under a limiter: its subscriber is timed.
struct Timed<Q> {
    /// The inner publisher `f` made.
    source: Q,
    /// Told the inner's round trip.
    gate: Arc<dyn Sample>,
}

impl<Q: Publisher> Publisher for Timed<Q> {
    type Item = Q::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<Q::Item> + Send + 'static,
    {
        self.source.subscribe(TimedSubscriber {
            downstream: subscriber,
            gate: self.gate,
            subscribed: Instant::now(),
            ended: false,
        });
    }

    fn in_flight_bound(&self) -> u64 {
        self.source.in_flight_bound()
    }
}

/// Between an inner and its lane: gives the gate the inner's round trip when it
/// completes, and forwards everything else unchanged.
struct TimedSubscriber<S> {
    /// The lane's subscriber.
    downstream: S,
    /// Told the round trip.
    gate: Arc<dyn Sample>,
    /// When the inner was subscribed.
    subscribed: Instant,
    /// A terminal signal passed (a second one gives no sample).
    ended: bool,
}

impl<T, S: Subscriber<T>> Subscriber<T> for TimedSubscriber<S> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        self.downstream.on_subscribe(subscription);
    }

    fn on_next(&mut self, item: T) {
        self.downstream.on_next(item);
    }

    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        self.downstream.on_next_batch(items)
    }

    fn stops_batches_itself(&self) -> bool {
        self.downstream.stops_batches_itself()
    }

    fn on_error(&mut self, error: Error) {
        self.ended = true;
        self.downstream.on_error(error);
    }

    fn on_complete(&mut self) {
        if std::mem::replace(&mut self.ended, true) {
            // A second terminal signal: the lane ignores it.
            self.downstream.on_complete();
            return;
        }
        let rtt = Instant::now().saturating_duration_since(self.subscribed);
        match self.gate.sample(rtt) {
            Ok(()) => self.downstream.on_complete(),
            // The limiter panicked: the lane fails, and the stage with it.
            Err(error) => self.downstream.on_error(error),
        }
    }

    fn drop_hook(&self) -> Option<DropHook> {
        self.downstream.drop_hook()
    }
}
