//! `share`: one source, many subscribers, and a policy per subscriber so that the
//! slowest one does not decide for everyone.
//!
//! [`PublisherExt::share`](crate::PublisherExt::share) (or [`Hub::builder`]) turns a
//! publisher into a [`Hub`]: one subscription upstream, one bounded ring of
//! `capacity` items shared by every subscriber, and a cursor per subscriber. Each
//! subscriber picks its [`Policy`] when it joins:
//!
//! * [`Backpressure`](Policy::Backpressure) (what subscribing to the `Hub` itself
//!   gives): lossless; the hub never asks upstream for more than the slowest such
//!   subscriber can still take, so a stalled one stops the source, with memory held
//!   at the ring.
//! * [`DropOldest`](Policy::DropOldest): never holds anyone back; when it falls a
//!   whole ring behind it skips the items the ring no longer has, counted as dropped
//!   ([`DropReason::OverflowOldest`](crate::DropReason::OverflowOldest)).
//! * [`Latest`](Policy::Latest): never holds anyone back, and gets the newest items
//!   its demand covers: older items waiting beyond its demand are skipped, counted as
//!   dropped ([`DropReason::ReplacedByLatest`](crate::DropReason::ReplacedByLatest)); a dashboard asking for one item at
//!   a time sees the newest.
//! * [`Disconnect`](Policy::Disconnect): never holds anyone back; once it is further
//!   behind than its [`LagLimit`] (in items, or the age of its next item), or a whole
//!   ring behind, it gets `on_error` of kind [`Lagged`](crate::ErrorKind::Lagged) and
//!   leaves.
//!
//! Each subscriber's own `request(n)` is honoured exactly (rule 1.1 per subscriber):
//! items it has not asked for wait in the ring (or, under a lossy policy, are skipped
//! once the ring moves on).
//!
//! # The algorithm
//!
//! The ring, the cursors and the upstream credit sit under one short lock. No user
//! code runs under it but the items' own `Clone`: a delivery is pulled out of its
//! iterator (which may run a fused `map`'s closure) before the lock is taken, and
//! items the ring evicts are dropped after it. A `Clone` that panics ends the
//! subscriber it was cloned for with an error of kind
//! [`Panicked`](crate::ErrorKind::Panicked) naming `share`, and the others go on; so
//! does a `Clone` that calls its own hub (`stats`, `join`, …), which panics instead
//! of waiting for the lock it runs under. Two kinds of drain loop do the work, each
//! the crate's one `Wip`:
//!
//! * **A subscriber's pass** (its own signal core, run by whichever thread signals
//!   it): under the lock it clones up to `min(demand, 256)` items from its cursor
//!   into its batch and moves the cursor; then, without the lock, hands the batch
//!   downstream in one `on_next_batch` and settles its demand once. A pass that finds
//!   fewer items than its demand marks the subscriber *hungry*: the next arrival
//!   wakes it.
//! * **The hub's pump**: asks upstream for credit and wakes hungry subscribers. It
//!   runs after every event that can change either (an arrival, the end, a
//!   `Backpressure` subscriber moving, a subscriber leaving, one waiting for items).
//!   Credit: with `held` the items the slowest `Backpressure` subscriber has not
//!   read and `outstanding` what upstream still owes, the pump requests `capacity -
//!   held - outstanding` once `outstanding` has fallen to a quarter of the ring (the
//!   75% rule), so `held + outstanding` never exceeds the ring: an arriving item
//!   never finds the ring full of items a `Backpressure` subscriber still needs.
//!   With no `Backpressure` subscriber, it requests only while some subscriber waits
//!   for items (it has read everything and has demand left), and only what the
//!   hungriest of them still wants (up to the ring): the fastest one that wants items
//!   sets the pace, and items nobody asked for stay upstream. A synchronous upstream delivers
//!   inside the pump's `request`; the arrivals then only record their wake-ups, and
//!   the pump wakes each subscriber once per batch instead of once per item.
//!
//! An arriving item that finds the ring full evicts the oldest item; subscribers whose
//! cursor pointed at it are handled by their policy (skip or disconnect). Lag in
//! seconds comes from the arrival time of each block of 64 items (one clock reading
//! per block, none per item). An arriving batch visits the subscribers once per run
//! of items within a block, not once per item: the evictions of a run move the
//! cursors they pass as far as the run's items, one by one, would have (a unit
//! proptest holds the two ways equal), so an arrival costs a copy per item and a
//! visit per subscriber per block.
//!
//! **Adoption.** A [`Backpressure`](Policy::Backpressure) subscriber whose first stage is
//! [`publish_on`](crate::PublisherExt::publish_on) (directly, or through stages that
//! pass its subscription on) is *adopted* by that boundary's drain: where an arrival
//! would run the subscriber's pass on the arriving thread, the hub marks the
//! subscriber woken and signals the drain instead, and the drain's next pass runs the
//! subscriber's pass on the drain's own thread (it *pulls* it). The thread that feeds
//! the hub (a boundary's, a producer's) then copies each item into the ring once and
//! signals, however many subscribers there are, and the copies out of the ring run on
//! the subscribers' threads, in parallel. (Four subscribers on a pool of two behind a
//! hop that feeds the hub: without adoption the hop's thread was the bottleneck, at
//! 137 ns of its own time per item for the four copies and the signals.) An arrival
//! that a subscriber's drain brings about itself (its pull of the channel below the
//! hub, or its pass asking upstream for more) runs the woken subscribers' passes
//! right there: that thread is one of theirs already, and
//! scheduling each one's drain instead would only add hand-offs.
//!
//! # Feeding the hub one item at a time
//!
//! Each subscriber pays one pass (a lock, its drain loop, its demand) per batch it
//! takes, so the hub is cheapest when items arrive in batches, as every weir source
//! and boundary hands them over. A producer that pushes one item at a time (a
//! [`channel`](fn@crate::channel) fed by a socket reader) would run every
//! subscriber's pass per item on its own thread. Two shapes avoid that:
//!
//! * **Subscribers behind boundaries** (`hub.publish_on(pool, 256)` per subscriber):
//!   the hub hands its upstream channel's *lane* on to each subscriber, so a
//!   boundary's drain that lingers on its thread watches the channel through the
//!   hub, as it watches a channel right in front of it. While one watches, a send
//!   only claims a slot of the lane (one compare-and-swap) and skips its signal;
//!   the first drain to see items runs the channel's drain loop on its own thread,
//!   and what arrived meanwhile reaches the hub, and every subscriber, as one
//!   batch from there. A subscriber's mark counts once, and goes with it (when it
//!   cancels, or its scheduler drops its task).
//! * **A boundary in front** (`channel.publish_on(pool, 256).share(n)`): the
//!   producer only sends, and the hub gets what arrived meanwhile as one batch on
//!   the boundary's thread, whatever its subscribers are.
//!
//! * **Sinks waited for** (`hub.fold(..)`, `for_each`, `collect`, then
//!   [`wait`](crate::sink::SinkHandle::wait)): a thread blocked in `wait` watches
//!   the channel through the hub the same way while items keep coming, and runs
//!   the channel's drain loop, and the hub's fan-out to every subscriber, on its
//!   own thread, in batches.
//!
//! Subscribed directly with nobody waiting or watching (no boundary on either
//! side), the whole fan-out runs on the producer's thread, item by item.
//!
//! # Connecting and stopping
//!
//! The hub subscribes upstream when the `k`-th subscriber is present
//! ([`HubBuilder::connect_at`], 1 by default); an upstream whose `subscribe` panics
//! ends the hub as an upstream error would, with an error of kind
//! [`Panicked`](crate::ErrorKind::Panicked). When the last subscriber leaves while
//! upstream still runs, the hub cancels upstream and releases the ring (at once, or
//! after [`HubBuilder::linger`]'s grace period if nobody joins meanwhile); a
//! subscriber that arrives after that gets `on_error` of kind
//! [`Cancelled`](crate::ErrorKind::Cancelled) at once. Build with
//! [`HubBuilder::keep_connected`] to keep upstream subscribed with nobody there
//! instead (it is asked for items again once a subscriber wants some). A
//! subscriber joins at the live position (it sees
//! what arrives after it joined), or [`HubBuilder::replay`]`(r)` items back (fewer
//! for a `Backpressure` subscriber while upstream owes items, and for a
//! `Disconnect` subscriber's lag limit: see there). After
//! upstream ended, subscribers read what the ring still has for them and then get the
//! same end; later ones get it at once (after their replay). Once upstream ended and
//! nobody is subscribed, the ring keeps only the replay's items (none without one).
//!
//! # Events
//!
//! `tracing` events, target `weir::hub`, none per item: `info` when a
//! [`Disconnect`](Policy::Disconnect) subscriber is cut off (fields `subscriber` (its
//! id), `name`, `lag` (items behind when cut off), `error`), emitted by its last pass,
//! outside the hub's lock; `debug` when a subscriber joins (or is refused) or leaves,
//! when the hub subscribes upstream, and when it stops upstream (the last subscriber
//! left, or the linger ran out).
//!
//! # Demand contract
//!
//! Per subscriber, never more items than it requested (rule 1.1). Upstream is never
//! asked for more than the ring has room for: at most `capacity` items are held, plus
//! one batch of at most 256 per subscriber on its way downstream. In-flight bound:
//! upstream's, plus `capacity + 256`.
//!
//! # Example
//!
//! ```
//! use weir::prelude::*;
//! use weir::hub::{Hub, Policy};
//!
//! // The hub subscribes upstream once two subscribers are there.
//! let hub = Hub::builder(weir::range(0u32..1_000), 64).connect_at(2).build();
//! let audit = std::thread::spawn({
//!     let hub = hub.clone();
//!     move || hub.fold(0u64, |n, _| n + 1).wait().unwrap()
//! });
//! let latest = hub.join(Policy::Latest).named("dashboard").collect().wait().unwrap();
//! assert_eq!(audit.join().unwrap(), 1_000, "the Backpressure subscriber lost nothing");
//! assert!(latest.windows(2).all(|w| w[0] < w[1]), "in order, perhaps with gaps");
//! ```

#[cfg(all(test, weir_loom))]
mod loom_tests;
mod member;
pub(crate) mod ring;

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use self::member::Inlet;
use self::ring::Ring;
use crate::drain::{SubscriptionSlot, Wip};
use crate::loom::{AtomicU64, Mutex, MutexGuardOf, Ordering};
use crate::runtime::{Scheduler, TimerHandle};
use crate::stage::window::validate;
use crate::{Error, Publisher, Subscriber};

thread_local! {
    /// The hub whose items this thread is cloning under that hub's lock (its
    /// address), or 0: see [`Shared::lock`].
    static CLONING: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Marks this thread as cloning a hub's items until dropped (also when a `Clone`
/// panics).
struct Cloning(usize);

impl Cloning {
    fn enter(hub: usize) -> Self {
        Cloning(CLONING.replace(hub))
    }
}

impl Drop for Cloning {
    fn drop(&mut self) {
        CLONING.set(self.0);
    }
}

/// Items a subscriber's pass takes out of the ring at most, per batch.
pub const HUB_BATCH: usize = 256;

/// What a subscriber of a [`Hub`] does when it cannot keep up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Policy {
    /// Lossless: the hub asks upstream only for what this subscriber can still take,
    /// so it slows the source (and, through the ring, the other subscribers) to its
    /// pace.
    Backpressure,
    /// Never slows anyone: a whole ring behind, it skips to the oldest item the ring
    /// still has; the skipped items count as dropped
    /// ([`DropReason::OverflowOldest`](crate::DropReason::OverflowOldest)).
    DropOldest,
    /// Never slows anyone, and gets the newest items its demand covers: when more
    /// items wait for it than it has asked for, the older ones are skipped (so a
    /// subscriber asking for one item at a time always gets the newest), and a whole
    /// ring behind it skips to the newest item. The skipped items count as dropped
    /// ([`DropReason::ReplacedByLatest`](crate::DropReason::ReplacedByLatest)).
    Latest,
    /// Never slows anyone: further behind than the limit (or a whole ring behind), it
    /// gets `on_error` of kind [`Lagged`](crate::ErrorKind::Lagged) and is removed.
    Disconnect(LagLimit),
}

impl Policy {
    /// [`Disconnect`](Policy::Disconnect) once more than `max_lag` items wait for it.
    ///
    /// While such a subscriber is in, the hub asks upstream for at most `max_lag`
    /// items at a time, so that one batch (a synchronous source hands over all it is
    /// asked for at once) cannot put a subscriber that has read everything past its
    /// limit; a small limit means small upstream batches for the whole hub.
    ///
    /// # Panics
    ///
    /// If `max_lag` is 0 ("hub: a Disconnect lag limit must be at least 1 item").
    #[track_caller]
    pub fn disconnect_after_items(max_lag: u64) -> Self {
        assert!(
            max_lag > 0,
            "hub: a Disconnect lag limit must be at least 1 item"
        );
        Policy::Disconnect(LagLimit::Items(max_lag))
    }

    /// [`Disconnect`](Policy::Disconnect) once the next item waiting for it is older
    /// than `max_age` (checked as items arrive, once per block of 64).
    ///
    /// # Panics
    ///
    /// If `max_age` is zero ("hub: a Disconnect age limit must be positive").
    #[track_caller]
    pub fn disconnect_after(max_age: Duration) -> Self {
        assert!(
            !max_age.is_zero(),
            "hub: a Disconnect age limit must be positive"
        );
        Policy::Disconnect(LagLimit::Age(max_age))
    }
}

/// How far behind a [`Policy::Disconnect`] subscriber may fall.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LagLimit {
    /// More items than this waiting for it.
    Items(u64),
    /// Its next item older than this.
    Age(Duration),
}

/// Where a subscriber stands (see [`SubscriberStats`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MemberState {
    /// It has read everything and is not waiting (no demand outstanding).
    Live,
    /// It has read everything and waits for the next item (demand outstanding).
    Waiting,
    /// Items wait for it (it has not asked for them yet, or is about to take them).
    Behind,
    /// Cut off by its `Disconnect` limit; it ends at its next pass.
    Disconnected,
}

/// One subscriber's figures, from [`Hub::stats`].
#[derive(Clone, Debug, PartialEq)]
pub struct SubscriberStats {
    /// The hub's id for it (in order of subscription, from 0).
    pub id: u64,
    /// The name given with [`Join::named`], if any.
    pub name: Option<String>,
    /// Its policy.
    pub policy: Policy,
    /// Sequence number of the next item it will read (items are numbered from 0 in
    /// order of arrival).
    pub position: u64,
    /// Items that arrived and that it has not read.
    pub lag: u64,
    /// How long its next item has waited (0 when none waits), to the block of 64.
    pub lag_seconds: f64,
    /// Items handed to it.
    pub delivered: u64,
    /// Items it skipped (lossy policies).
    pub dropped: u64,
    /// Where it stands.
    pub state: MemberState,
}

/// The hub's figures, from [`Hub::stats`].
#[derive(Clone, Debug, PartialEq)]
pub struct HubStats {
    /// The ring's capacity.
    pub capacity: usize,
    /// Items in the ring now.
    pub occupancy: usize,
    /// Items requested from upstream and not yet received.
    pub upstream_outstanding: u64,
    /// The `Backpressure` subscriber that keeps the hub from asking upstream for more
    /// (the ring is full of items it has not read), if one does.
    pub bounded_by: Option<u64>,
    /// Subscribed upstream (and not stopped).
    pub connected: bool,
    /// Every current subscriber, in no particular order.
    pub subscribers: Vec<SubscriberStats>,
}

impl fmt::Display for HubStats {
    /// An aligned table: one line for the hub, one per subscriber.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "hub: {}/{} items in the ring, {} requested upstream{}",
            self.occupancy,
            self.capacity,
            self.upstream_outstanding,
            match self.bounded_by {
                Some(id) => format!(", held back by subscriber {id}"),
                None => String::new(),
            }
        )?;
        writeln!(
            f,
            "{:>4} {:<14} {:<22} {:>10} {:>8} {:>9} {:>11} {:>9}  state",
            "id", "name", "policy", "position", "lag", "lag (s)", "delivered", "dropped"
        )?;
        let mut rows: Vec<&SubscriberStats> = self.subscribers.iter().collect();
        rows.sort_by_key(|s| s.id);
        for s in rows {
            writeln!(
                f,
                "{:>4} {:<14} {:<22} {:>10} {:>8} {:>9.3} {:>11} {:>9}  {:?}",
                s.id,
                s.name.as_deref().unwrap_or("-"),
                format!("{:?}", s.policy),
                s.position,
                s.lag,
                s.lag_seconds,
                s.delivered,
                s.dropped,
                s.state
            )?;
        }
        Ok(())
    }
}

/// The linger timer's task: stops the hub when it is dropped, run or not (see
/// [`Shared::arm_linger`]).
struct Expiry<T: Clone + Send + 'static> {
    shared: std::sync::Weak<Shared<T>>,
    epoch: u64,
}

impl<T: Clone + Send + 'static> Drop for Expiry<T> {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.upgrade() {
            shared.expire(self.epoch);
        }
    }
}

/// Subscribes upstream with the hub's inlet (taken once, when the hub connects).
type Connect<T> = Box<dyn FnOnce(Inlet<T>) + Send>;

/// Whether the hub has subscribed upstream.
enum Phase<T> {
    /// Waiting for `connect_at` subscribers.
    Waiting(Connect<T>),
    /// Subscribed upstream (or about to be).
    Connected,
    /// The last subscriber left; upstream was cancelled.
    Stopped,
}

/// How the hub wakes a subscriber.
type Handle = Arc<member::MemberWake>;

/// Subscribers woken in one step, as positions in the roster: up to 32 without
/// allocating.
type Wakes = smallvec::SmallVec<[u32; 32]>;

/// One step of the pump: the roster (when someone is woken), who to wake, and
/// the credit to request (reserved).
type Step = (Option<Arc<[Handle]>>, Wakes, u64);

/// What the lock protects.
struct State<T> {
    ring: Ring<T, Handle>,
    /// The members' handles in the ring's order, shared with whoever wakes them
    /// (one reference count per wake-up step instead of one per subscriber);
    /// rebuilt when a subscriber joins or leaves.
    roster: Arc<[Handle]>,
    phase: Phase<T>,
    /// Upstream's subscription arrived: the pump may ask it for credit.
    subscribed: bool,
    /// Bumped when a subscriber joins and when the last one leaves: a linger timer
    /// stops the hub only if nothing happened since it was armed.
    epoch: u64,
    /// The linger timer armed when the last subscriber left, if any.
    timer: Option<TimerHandle>,
}

/// The hub itself, shared by its handles, its subscribers and its inlet.
pub(crate) struct Shared<T> {
    state: Mutex<State<T>>,
    /// The hub's pump (see the module docs).
    pump: Wip,
    upstream: SubscriptionSlot,
    /// Upstream's [`Pull`](crate::spec::Pull) (a channel's lane), if it has one:
    /// handed on to every subscriber, whose boundary's drain may then take the
    /// arrivals on its own thread (see the module docs).
    pull: std::sync::OnceLock<Arc<dyn crate::spec::Pull>>,
    next_id: AtomicU64,
    capacity: usize,
    /// Upstream's own in-flight bound.
    upstream_bound: u64,
    connect_at: usize,
    replay: usize,
    keep_connected: bool,
    /// How long to keep upstream after the last subscriber left, on which clock.
    linger: Option<(Duration, Arc<dyn Scheduler>)>,
}

impl<T: Clone + Send + 'static> Shared<T> {
    fn lock(&self) -> MutexGuardOf<'_, State<T>> {
        self.refuse_reentry();
        // Only the items' Clone runs under the lock; recover if one panicked (the
        // ring is consistent between its steps).
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An item's `Clone` runs under the lock (in `take`): one that calls back into
    /// this hub would wait for itself for ever. It panics instead, and the member it
    /// was cloned for ends with `Panicked` (see `take`). Checked before the lock and
    /// before the pump is taken (a panic then must not leave the pump taken).
    fn refuse_reentry(&self) {
        if CLONING.get() == self.address() {
            panic!(
                "share: an item's Clone called its own hub (Clone runs under the hub's \
                 lock; the call would wait for itself)"
            );
        }
    }

    /// This hub's identity, for [`CLONING`].
    fn address(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    /// Run the pump: request what the ring has room for, wake who is due.
    pub(crate) fn pump(&self) {
        self.refuse_reentry();
        if self.pump.enter() {
            // The lock's guard ends with this statement: a step runs without it.
            let step = self.due(&mut self.lock());
            self.run_step(step);
            self.release_pump();
        }
    }

    /// Under the lock: who to wake and what to request (reserved as outstanding).
    fn due(&self, state: &mut State<T>) -> Step {
        let mut wakes = Wakes::new();
        state.ring.woken(|at| wakes.push(at as u32));
        // The roster is shared (one reference count) only when someone is woken.
        let roster = (!wakes.is_empty()).then(|| Arc::clone(&state.roster));
        (roster, wakes, self.credit(state))
    }

    /// Credit to request now (reserved), if upstream is there to ask.
    fn credit(&self, state: &mut State<T>) -> u64 {
        if state.subscribed && matches!(state.phase, Phase::Connected) {
            state.ring.credit()
        } else {
            0
        }
    }

    /// Without the lock: wake, then request.
    fn run_step(&self, (roster, wakes, credit): Step) {
        // Wake first: a subscriber with demand takes what arrived before the next
        // request brings more (a synchronous upstream delivers inside it, and a
        // lossy subscriber that had no chance to read would skip items).
        if let Some(roster) = roster {
            for at in wakes {
                roster[at as usize].wake();
            }
        }
        if credit > 0 {
            self.ask(credit);
        }
    }

    /// Request `credit` from upstream. A request that panics (rule 3.16 broken)
    /// fails the hub as an upstream error would, upstream cancelled: the credit it
    /// reserved will never come, and the panic must not unwind through the pump (or
    /// into whichever subscriber's pass made the call).
    fn ask(&self, credit: u64) {
        if let Err(error) = crate::guard::catch_in("share", || self.upstream.request(credit)) {
            self.cancel_upstream();
            self.finish(Err(error));
        }
    }

    /// Cancel upstream; a cancel that panics (rule 3.15 broken) is contained.
    fn cancel_upstream(&self) {
        if crate::guard::catch(|| self.upstream.cancel()).is_err() {
            tracing::error!(target: "weir::hub", "hub: upstream panicked in cancel; contained");
        }
    }

    /// The roster changed (a subscriber joined or left): rebuild it.
    fn enroll(state: &mut State<T>) {
        state.roster = state.ring.handles().cloned().collect();
    }

    /// Upstream's subscription arrived.
    pub(crate) fn subscribed(&self, subscription: crate::Subscription) {
        if let Some(pull) = subscription.pull() {
            let _ = self.pull.set(pull.clone());
        }
        if self.upstream.set(subscription) {
            self.lock().subscribed = true;
            self.pump();
        }
    }

    /// Items arrived: [`gather`](crate::stage::window::gather)ed into `batch` first
    /// (no user code runs under the hub's lock), then the ring takes them, oldest
    /// first, and what it evicts goes to `evicted`. The caller drops what is left of
    /// both after this returns, outside the lock. `Err` when an item was never
    /// requested (it and the rest stay in `batch`). When nobody runs the pump, this
    /// thread takes it and does its first step under the same lock as the arrival.
    pub(crate) fn arrive(
        &self,
        items: impl Iterator<Item = T>,
        batch: &mut VecDeque<T>,
        evicted: &mut VecDeque<T>,
    ) -> Result<(), ()> {
        // One more than the ring: a delivery beyond what the hub asked for shows.
        // Gathered before the pump is taken: the iterator is user code, and its
        // panic must not leave the pump taken.
        crate::stage::window::gather(batch, items, self.capacity.saturating_add(1));
        self.refuse_reentry();
        let owner = self.pump.try_enter();
        let (refused, step) = {
            let mut state = self.lock();
            if matches!(state.phase, Phase::Stopped) {
                // Upstream was cancelled and nobody will read: items that were on
                // their way are let go at once (by the caller, after the lock).
                drop(state);
                if owner {
                    self.release_pump();
                }
                return Ok(());
            }
            let refused = state.ring.push_all(batch, Instant::now, evicted).is_err();
            if refused {
                state
                    .ring
                    .finish(Err(crate::stage::window::over_delivered("share")));
            }
            (refused, owner.then(|| self.due(&mut state)))
        };
        if refused {
            self.cancel_upstream();
        }
        match step {
            Some(step) => {
                self.run_step(step);
                self.release_pump();
            }
            None => self.pump(),
        }
        if refused {
            Err(())
        } else {
            Ok(())
        }
    }

    /// This thread owns the pump and has done the step it owed: let go, or run
    /// the steps asked for meanwhile (the pump's one loop).
    fn release_pump(&self) {
        let mut missed = self.pump.leave(1);
        while missed > 0 {
            // The lock's guard ends with this statement: a step runs without it.
            let step = self.due(&mut self.lock());
            self.run_step(step);
            missed = self.pump.leave(missed);
        }
    }

    /// Upstream ended.
    pub(crate) fn finish(&self, end: Result<(), Error>) {
        let released = {
            let mut state = self.lock();
            state.ring.finish(end);
            self.release_after_end(&mut state)
        };
        if crate::guard::drop_each(released.into_iter().flatten()) > 0 {
            tracing::error!(target: "weir::hub", "hub: an item panicked in Drop; contained");
        }
        self.pump();
    }

    /// Upstream ended and nobody is subscribed: keep only what a late subscriber's
    /// replay can ask for (nothing without `replay`); the rest is returned, to be
    /// dropped outside the lock.
    fn release_after_end(&self, state: &mut State<T>) -> Option<std::collections::VecDeque<T>> {
        (state.ring.ended() && state.ring.members() == 0).then(|| state.ring.trim(self.replay))
    }

    /// A subscriber left (cancelled, ended, or panicked).
    pub(crate) fn leave(self: &Arc<Self>, id: u64) {
        // The linger's clock is user code: read before the lock (it may call this
        // hub, or panic), in case this is the last subscriber.
        let linger_now = self
            .linger
            .as_ref()
            .map(|(_, scheduler)| crate::guard::catch(|| scheduler.now()));
        let mut expiry = None;
        let (left, released, cancel, members) = {
            let mut state = self.lock();
            let left = state.ring.leave(id);
            Self::enroll(&mut state);
            let members = state.ring.members();
            // After upstream ended there is nothing to cancel: the ring stays, for
            // late subscribers' replay and end.
            let last = members == 0
                && !self.keep_connected
                && !state.ring.ended()
                && matches!(state.phase, Phase::Connected);
            let lingers = match &linger_now {
                Some(Ok(now)) if last => Some(*now),
                _ => None,
            };
            // A clock that panicked gives no deadline: the hub stops at once, as
            // without a linger (it must not keep upstream for good).
            if let Some(now) = lingers {
                expiry = self.linger_epoch(&mut state, now);
                (left, None, false, members)
            } else if last {
                (left, Some(self.stop(&mut state)), true, members)
            } else {
                (left, self.release_after_end(&mut state), false, members)
            }
        };
        if let Some(member) = &left {
            tracing::debug!(
                target: "weir::hub",
                subscriber = id,
                name = member.name.as_deref(),
                policy = ?member.policy,
                members,
                "hub: subscriber left"
            );
        }
        // Items and handles are dropped here, without the lock; an item whose `Drop`
        // panics must not keep upstream subscribed.
        let left = crate::guard::catch(move || drop(left)).is_err();
        let items = crate::guard::drop_each(released.into_iter().flatten());
        if left || items > 0 {
            tracing::error!(target: "weir::hub", "hub: an item panicked in Drop; contained");
        }
        if let Some(expiry) = expiry {
            tracing::debug!(
                target: "weir::hub",
                grace = ?self.linger.as_ref().map(|(grace, _)| *grace),
                "hub: the last subscriber left; upstream stays subscribed for the linger"
            );
            self.arm_linger(expiry);
        }
        if cancel {
            tracing::debug!(
                target: "weir::hub",
                "hub: the last subscriber left; upstream cancelled, the ring released"
            );
            self.cancel_upstream();
        } else {
            self.pump();
        }
    }

    /// Stop: nobody is left and upstream still runs. Returns the ring's items, to be
    /// dropped outside the lock; the caller cancels upstream.
    fn stop(&self, state: &mut State<T>) -> std::collections::VecDeque<T> {
        state.phase = Phase::Stopped;
        state.ring.clear()
    }

    /// The last subscriber left (under the lock): a new epoch, and the timer's task
    /// to arm once the lock is let go (a scheduler that drops the task at once runs
    /// its expiry there, which takes the lock).
    fn linger_epoch(self: &Arc<Self>, state: &mut State<T>, now: Instant) -> Option<Expiry<T>> {
        let (grace, _) = self.linger.as_ref()?;
        state.epoch += 1;
        // A linger that does not fit the clock (`Duration::MAX`) never ends.
        crate::runtime::deadline(now, *grace)?;
        Some(Expiry {
            shared: Arc::downgrade(self),
            epoch: state.epoch,
        })
    }

    /// Arm the linger timer (without the lock). Its task stops the hub when it runs,
    /// or when the scheduler drops it unrun (shut down): either way the hub does not
    /// keep upstream for good.
    fn arm_linger(&self, expiry: Expiry<T>) {
        let Some((grace, scheduler)) = &self.linger else {
            return;
        };
        let epoch = expiry.epoch;
        // A scheduler that panics here (user code) drops the task unrun, and with it
        // the expiry, which stops the hub: contained, not unwound into the caller
        // (a subscriber's cancel).
        let armed = crate::guard::catch(|| {
            scheduler.schedule_timer(*grace, Box::new(move || drop(expiry)))
        });
        let Ok(timer) = armed else {
            tracing::error!(target: "weir::hub", "hub: the linger's scheduler panicked; contained");
            return;
        };
        let mut state = self.lock();
        if state.epoch == epoch {
            state.timer = Some(timer);
        } else {
            // Someone joined meanwhile: this timer stops nothing.
            drop(state);
            timer.cancel();
        }
    }

    /// A linger timer armed at `epoch` ran out (or was dropped): stop if nobody
    /// came back since.
    fn expire(&self, epoch: u64) {
        let released = {
            let mut state = self.lock();
            let idle = state.epoch == epoch
                && state.ring.members() == 0
                && !state.ring.ended()
                && matches!(state.phase, Phase::Connected);
            if !idle {
                return;
            }
            state.timer = None;
            self.stop(&mut state)
        };
        // Without the lock, and contained as in `leave`: an item whose `Drop` panics
        // must not keep upstream subscribed, nor reach the thread running the timer
        // (a pool shutting down, a subscriber's cancel).
        if crate::guard::drop_each(released) > 0 {
            tracing::error!(target: "weir::hub", "hub: an item panicked in Drop; contained");
        }
        tracing::debug!(
            target: "weir::hub",
            "hub: the linger ran out with nobody subscribed; upstream cancelled, the ring released"
        );
        self.cancel_upstream();
    }

    /// One subscriber's figures now, if it is still there.
    fn subscriber_stats(&self, id: u64) -> Option<SubscriberStats> {
        let (_, _, _, members) = self.lock().ring.stats(Instant::now());
        members.into_iter().find(|m| m.id == id)
    }

    /// Upstream's bound, the ring, and one batch on its way to a subscriber.
    fn in_flight_bound(&self) -> u64 {
        self.upstream_bound
            .saturating_add((self.capacity + HUB_BATCH) as u64)
    }

    /// Items a subscriber's pass takes, and the upstream credit its move freed
    /// (reserved: the caller requests it).
    fn take(&self, id: u64, demand: u64, want: usize, batch: &mut Vec<T>) -> (ring::Taken, u64) {
        let mut state = self.lock();
        let taken = {
            // The items are cloned here, under the lock (see `lock`).
            let _cloning = Cloning::enter(self.address());
            state.ring.take(id, demand, want, batch)
        };
        let credit = if taken.credit_moved {
            self.credit(&mut state)
        } else {
            0
        };
        (taken, credit)
    }

    /// Ask upstream for `credit` (reserved by [`take`](Self::take)), as the pump
    /// when nobody runs it: what a synchronous upstream delivers inside the request
    /// then wakes each subscriber once, after it, instead of once per item.
    fn request(&self, credit: u64) {
        self.refuse_reentry();
        let owner = self.pump.try_enter();
        self.ask(credit);
        if owner {
            self.release_pump();
        }
    }
}

/// A multicast hub: one upstream subscription, a ring of `capacity` items, many
/// subscribers each with its own [`Policy`]. Made by
/// [`PublisherExt::share`](crate::PublisherExt::share) or [`Hub::builder`]; see the
/// [module docs](self).
///
/// Cheap to clone; every clone is the same hub. Subscribing to the `Hub` itself joins
/// with [`Policy::Backpressure`]; [`join`](Hub::join) picks another policy.
pub struct Hub<T: Clone + Send + 'static> {
    shared: Arc<Shared<T>>,
}

impl<T: Clone + Send + 'static> Clone for Hub<T> {
    fn clone(&self) -> Self {
        Hub {
            shared: self.shared.clone(),
        }
    }
}

impl<T: Clone + Send + 'static> fmt::Debug for Hub<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hub")
            .field("capacity", &self.shared.capacity)
            .field("connect_at", &self.shared.connect_at)
            .field("replay", &self.shared.replay)
            .field("keep_connected", &self.shared.keep_connected)
            .finish_non_exhaustive()
    }
}

impl<T: Clone + Send + 'static> Hub<T> {
    /// A builder for a hub over `upstream` with a ring of `capacity` items.
    ///
    /// # Panics
    ///
    /// If `capacity` is not in `1..=2^30` ("share capacity must be in 1..=2^30 (got 0)").
    #[track_caller]
    pub fn builder<P>(upstream: P, capacity: usize) -> HubBuilder<T>
    where
        P: Publisher<Item = T> + Send + 'static,
    {
        let capacity = validate("share capacity", capacity as u64);
        HubBuilder {
            upstream_bound: upstream.in_flight_bound(),
            connect: Box::new(move |inlet| upstream.subscribe(inlet)),
            capacity,
            connect_at: 1,
            replay: 0,
            keep_connected: false,
            linger: None,
        }
    }

    /// A publisher that joins this hub with `policy` when subscribed.
    pub fn join(&self, policy: Policy) -> Join<T> {
        Join {
            shared: self.shared.clone(),
            policy,
            name: None,
            registry: None,
        }
    }

    /// The hub's figures now: the ring, the upstream credit, each subscriber.
    pub fn stats(&self) -> HubStats {
        let state = self.shared.lock();
        let (occupancy, outstanding, bounded_by, subscribers) = state.ring.stats(Instant::now());
        HubStats {
            capacity: self.shared.capacity,
            occupancy,
            upstream_outstanding: outstanding,
            bounded_by,
            connected: matches!(state.phase, Phase::Connected) && !state.ring.ended(),
            subscribers,
        }
    }
}

impl<T: Clone + Send + 'static> Publisher for Hub<T> {
    type Item = T;

    /// Join with [`Policy::Backpressure`].
    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<T> + Send + 'static,
    {
        self.join(Policy::Backpressure).subscribe(subscriber);
    }

    fn in_flight_bound(&self) -> u64 {
        self.shared.in_flight_bound()
    }
}

/// Configures a [`Hub`]: see [`Hub::builder`].
#[must_use = "a builder does nothing until built"]
pub struct HubBuilder<T: Clone + Send + 'static> {
    connect: Connect<T>,
    upstream_bound: u64,
    capacity: usize,
    connect_at: usize,
    replay: usize,
    keep_connected: bool,
    linger: Option<(Duration, Arc<dyn Scheduler>)>,
}

impl<T: Clone + Send + 'static> fmt::Debug for HubBuilder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HubBuilder")
            .field("capacity", &self.capacity)
            .field("connect_at", &self.connect_at)
            .field("replay", &self.replay)
            .field("keep_connected", &self.keep_connected)
            .field("linger", &self.linger.as_ref().map(|(grace, _)| grace))
            .finish_non_exhaustive()
    }
}

impl<T: Clone + Send + 'static> HubBuilder<T> {
    /// Subscribe upstream once `k` subscribers are present (default 1).
    ///
    /// # Panics
    ///
    /// If `k` is 0 ("hub: connect_at(k) needs k >= 1").
    #[track_caller]
    pub fn connect_at(mut self, k: usize) -> Self {
        assert!(k >= 1, "hub: connect_at(k) needs k >= 1");
        self.connect_at = k;
        self
    }

    /// A subscriber that joins starts up to `r` items back (as far as the ring still
    /// reaches) instead of at the live position (default 0).
    ///
    /// Two policies replay fewer: a [`Backpressure`](Policy::Backpressure) subscriber
    /// only what the ring can keep beside the items upstream was already asked for
    /// (the ring never holds more than `capacity` items a `Backpressure` subscriber
    /// has not read, counting those on their way), and a
    /// [`Disconnect`](Policy::Disconnect) subscriber at most `n` items with a lag
    /// limit of `n` items, and with a limit in time only items that have not waited
    /// longer than it (to the block of 64 items: see
    /// [`Policy::disconnect_after`]); more would have it join already cut off.
    ///
    /// # Panics
    ///
    /// If `r` exceeds the capacity ("hub: replay(r) needs r <= capacity (got r = 9,
    /// capacity 8)").
    #[track_caller]
    pub fn replay(mut self, r: usize) -> Self {
        assert!(
            r <= self.capacity,
            "hub: replay(r) needs r <= capacity (got r = {r}, capacity {})",
            self.capacity
        );
        self.replay = r;
        self
    }

    /// Keep upstream subscribed when the last subscriber leaves (it is asked for
    /// items again once a subscriber wants some; a later subscriber joins at the
    /// live position); by default the hub cancels upstream then.
    pub fn keep_connected(mut self) -> Self {
        self.keep_connected = true;
        self
    }

    /// When the last subscriber leaves, keep upstream subscribed for `grace` (on
    /// `scheduler`'s clock) before cancelling it: a subscriber that joins meanwhile
    /// finds the hub running (Reactor's `refCount(n, grace)`). `Duration::MAX`
    /// never cancels. If the scheduler shuts down before the grace ran out, the hub
    /// stops then. Ignored with [`keep_connected`](Self::keep_connected).
    pub fn linger(mut self, grace: Duration, scheduler: impl Scheduler) -> Self {
        self.linger = Some((grace, Arc::new(scheduler)));
        self
    }

    /// The hub.
    pub fn build(self) -> Hub<T> {
        Hub {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    ring: Ring::new(self.capacity),
                    roster: Arc::new([]),
                    epoch: 0,
                    timer: None,
                    phase: Phase::Waiting(self.connect),
                    subscribed: false,
                }),
                pump: Wip::new(),
                upstream: SubscriptionSlot::new(),
                pull: std::sync::OnceLock::new(),
                next_id: AtomicU64::new(0),
                capacity: self.capacity,
                upstream_bound: self.upstream_bound,
                connect_at: self.connect_at,
                replay: self.replay,
                keep_connected: self.keep_connected,
                linger: self.linger,
            }),
        }
    }
}

/// A publisher that joins a [`Hub`] with a chosen [`Policy`]: see [`Hub::join`].
#[must_use = "publishers do nothing until subscribed"]
pub struct Join<T: Clone + Send + 'static> {
    shared: Arc<Shared<T>>,
    policy: Policy,
    name: Option<String>,
    /// Where a named subscriber is listed (`None`: the global registry).
    registry: Option<crate::metrics::Registry>,
}

impl<T: Clone + Send + 'static> Clone for Join<T> {
    fn clone(&self) -> Self {
        Join {
            shared: self.shared.clone(),
            policy: self.policy,
            name: self.name.clone(),
            registry: self.registry.clone(),
        }
    }
}

impl<T: Clone + Send + 'static> fmt::Debug for Join<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Join")
            .field("policy", &self.policy)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<T: Clone + Send + 'static> Join<T> {
    /// Name the subscriber in [`Hub::stats`] and in its `Lagged` error, and list it
    /// in the [`Registry`](crate::metrics::Registry) while it is subscribed (with its
    /// lag in items and seconds, skipped items and state: a
    /// [`StageSnapshot::subscriber`](crate::metrics::StageSnapshot::subscriber)).
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// List a [named](Self::named) subscriber in `registry` instead of
    /// [`Registry::global`](crate::metrics::Registry::global).
    ///
    /// ```
    /// use weir::hub::{Hub, Policy};
    /// use weir::metrics::Registry;
    /// use weir::prelude::*;
    ///
    /// let registry = Registry::new();
    /// let hub = Hub::builder(weir::range(0u32..100), 16).build();
    /// let items = hub
    ///     .join(Policy::DropOldest)
    ///     .named("dashboard")
    ///     .registry(&registry)
    ///     .blocking_iter(1);
    /// let listed = registry.snapshot();
    /// assert!(listed.stage("dashboard").unwrap().subscriber.is_some());
    /// drop(items);
    /// ```
    pub fn registry(mut self, registry: &crate::metrics::Registry) -> Self {
        self.registry = Some(registry.clone());
        self
    }
}

impl<T: Clone + Send + 'static> Publisher for Join<T> {
    type Item = T;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<T> + Send + 'static,
    {
        let shared = self.shared;
        // Relaxed: a unique number; nothing is published with it.
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let registration = self.name.as_ref().map(|name| {
            let hub = Arc::downgrade(&shared);
            let read: crate::metrics::ReadSubscriber =
                Arc::new(move || hub.upgrade()?.subscriber_stats(id));
            self.registry
                .as_ref()
                .unwrap_or(crate::metrics::Registry::global())
                .enter_subscriber(name.as_str().into(), shared.in_flight_bound(), read)
        });
        let (policy, name) = (self.policy, self.name);
        // For the event below (the ring keeps the name): once per subscription.
        let label = name.clone();
        let mut connect = None;
        let mut lingering = None;
        let mut joined = None;
        let adoptable = policy == Policy::Backpressure;
        member::attach(
            shared.clone(),
            id,
            adoptable,
            subscriber,
            registration,
            |handle| {
                let mut state = shared.lock();
                if matches!(state.phase, Phase::Stopped) {
                    let error = Error::cancelled_with(
                        "hub: its last subscriber left and upstream was cancelled; \
                     subscribe before that, or build the hub with keep_connected()",
                    );
                    state.ring.refuse(id, name, policy, error, handle);
                    Shared::enroll(&mut state);
                    return;
                }
                state.ring.join(id, name, policy, shared.replay, handle);
                Shared::enroll(&mut state);
                joined = Some(state.ring.members());
                // A subscriber came (back): a linger timer armed before stops nothing.
                state.epoch += 1;
                lingering = state.timer.take();
                if state.ring.members() >= shared.connect_at {
                    if let Phase::Waiting(_) = state.phase {
                        if let Phase::Waiting(f) =
                            std::mem::replace(&mut state.phase, Phase::Connected)
                        {
                            connect = Some(f);
                        }
                    }
                }
            },
        );
        match joined {
            Some(members) => tracing::debug!(
                target: "weir::hub",
                subscriber = id,
                name = label.as_deref(),
                ?policy,
                members,
                "hub: subscriber joined"
            ),
            None => tracing::debug!(
                target: "weir::hub",
                subscriber = id,
                name = label.as_deref(),
                "hub: subscriber refused: the hub stopped (its last subscriber left before)"
            ),
        }
        if let Some(timer) = lingering {
            timer.cancel();
        }
        if let Some(connect) = connect {
            tracing::debug!(
                target: "weir::hub",
                members = joined,
                "hub: subscribing upstream (connect_at reached)"
            );
            // An upstream whose `subscribe` panics ends the hub as an upstream error
            // would: every subscriber gets it, none waits for items that never come.
            let inlet = Inlet::new(shared.clone());
            if let Err(error) =
                crate::guard::catch(|| crate::guard::subscribe_guarded(|| connect(inlet)))
            {
                shared.finish(Err(error));
            }
        }
        shared.pump();
    }

    fn in_flight_bound(&self) -> u64 {
        self.shared.in_flight_bound()
    }
}
