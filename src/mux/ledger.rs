//! The credit ledger: every unit of credit of one mux and the ready set, behind one
//! lock.
//!
//! # Credit
//!
//! A channel may put an item on the shared transport only after it took one unit of
//! credit for it (I1). Credit comes from two places:
//!
//! * **exclusive** credit, `E` units per open channel, reserved when the channel
//!   opens. A unit is *free* (the sender may use it), *in flight* (it backs an item
//!   sent and not yet delivered to the receiving subscriber), or *unannounced* (its
//!   item was delivered, and the unit waits to be handed back to the sender in a
//!   batch: the low-water mark). Free + in flight + unannounced = `E` at every instant.
//! * **shared** credit, from a pool of `S` units. A channel takes a shared unit only
//!   at the moment it sends with no free exclusive unit left, and only while it has
//!   backlog (items waiting at the sender) and demand (its subscriber asked for the
//!   item): so pool credit is never granted to a channel that cannot use it at once,
//!   and a channel never holds a shared unit that does not back a buffered item
//!   (nothing is ever "granted and unused", so there is nothing to revoke from a
//!   stalled channel; what backs its buffered items comes back as they are
//!   delivered). At most `C` shared units per channel. Delivered items give shared
//!   units back first, to the pool, at once (or in batches of `shared_return`, which
//!   the builder only allows while they cannot strand the pool).
//!
//! A channel also never sends more than its subscriber asked for: what it may send
//! is `min(free credit, demand not yet covered)`. So buffered items (in flight on the
//! transport, or in receive windows) never exceed `Σ E + S` (I2), and a channel
//! whose subscriber stops asking stops taking credit at once.
//!
//! Announcing: a delivered item's exclusive unit becomes *unannounced*; once at least
//! `announce_at` units are unannounced they are all announced at once (one
//! announcement). A sender can never wait below the mark for credit that is only
//! waiting to be announced (the liveness rule of credit protocols): the mark is at
//! most `E`, and a sender without a free exclusive unit has all `E` in flight or
//! unannounced, so the deliveries it is owed reach the mark. In process an announcement is this ledger's update and one wake-up
//! of the worker; on a network transport it is one credit frame.
//!
//! # Scheduling
//!
//! A channel is *ready* when it has backlog, demand and credit (free exclusive, or a
//! shared unit it may take). Ready channels wait in a FIFO per priority class, each at
//! most once (`queued`). The worker serves the highest class that has a ready
//! channel; within a class, weighted round robin in turns of whole items (deficit
//! round robin where every item costs one): the channel at the head sends up to
//! `quantum × weight` items (fewer when its credit, backlog or demand is smaller) as
//! one frame, and goes back to the tail if it is still ready. Every change that can make a channel
//! ready (backlog, demand, credit back) checks it under this lock and reports whether
//! the worker must be woken, so no wake-up is lost.
//!
//! Shared units are spread across the channels that need them: in one turn a channel
//! takes at most `ceil(free pool / channels in the ready set)`, so three needy channels
//! and a pool of three get one unit each.
//!
//! # Backlog reported late
//!
//! Backlog only matters here when it is zero (the channel cannot be ready) or when the
//! channel's turn comes (how many items the frame takes). So the mux's senders report
//! staged items under this lock ([`staged`](Ledger::staged)) only while their
//! channel's backlog here is zero (the channel is *parked*); otherwise they add them
//! to a counter of their own, which the worker folds in when the channel's turn comes
//! ([`next_send_with`](Ledger::next_send_with)). A turn that leaves the backlog at
//! zero parks the channel again, unless items arrived meanwhile, which are folded in
//! instead. The counter and its parked mark are one atomic word (the mux's
//! `Plumbing`), so a sender either sees the mark and reports under the lock, or adds
//! before the worker parks and is folded in: no staged item is left uncounted while
//! its channel waits. A ledger whose backlog is a little behind is never wrong about
//! readiness: an unparked channel has backlog here already.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::demand::UNBOUNDED;

use super::ids::{id_map, IdMap};
use super::stats::{ChannelStats, MuxStats};
use super::ChannelId;

/// The validated configuration of a mux.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MuxConfig {
    /// Exclusive credit per channel (`E`).
    pub(crate) exclusive: u64,
    /// The shared pool (`S`).
    pub(crate) shared: u64,
    /// Shared units one channel may hold (`C`).
    pub(crate) borrow_cap: u64,
    /// Items per deficit-round-robin turn, times the channel's weight.
    pub(crate) quantum: u64,
    /// Unannounced exclusive units that trigger an announcement.
    pub(crate) announce_at: u64,
    /// Shared units a channel gives back to the pool at once.
    pub(crate) shared_return: u64,
    /// No delivery for this long with items buffered: the channel counts as stalled.
    pub(crate) stall_after: Duration,
    /// The window of the fairness index.
    pub(crate) fairness_window: Duration,
}

/// Where a channel's life stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Life {
    /// Serving.
    Open,
    /// The receiving subscriber cancelled (or panicked): sends stop, credit is back.
    Cancelled,
}

/// One channel's credit and scheduling state.
///
/// The worker (a turn) and the receiving side (a delivery) both write it for every
/// frame, on two threads, so each frame moves its lines between them. The fields a
/// frame writes come first, in declaration order (`repr(C)`), and the account starts
/// a cache line (`align(64)`): a frame then moves two lines, not the five that the
/// compiler's own layout spread them over (a full `ChannelStats` inside, a copy of
/// figures kept here anyway, and the counters between the credit words). Counters a
/// snapshot can derive (`sent` is `delivered + dropped + buffered`) are not kept.
#[derive(Debug)]
#[repr(C, align(64))]
struct Account {
    // First line: credit and scheduling, read and written by every turn and delivery.
    /// Exclusive units the sender may use.
    exclusive_free: u64,
    /// Exclusive units backing items sent and not yet delivered.
    exclusive_in_flight: u64,
    /// Exclusive units whose items were delivered, not yet announced.
    unannounced: u64,
    /// Shared units backing items sent and not yet delivered.
    shared_in_flight: u64,
    /// Shared units whose items were delivered, kept until a return batch is full.
    shared_returning: u64,
    /// Demand of the receiving subscriber not yet covered by sent items.
    demand: u64,
    /// Items staged at the sender.
    backlog: u64,
    weight: u64,
    // Second line: counters of every frame, the flags, the last delivery.
    /// Items sent in the current fairness window.
    window_sent: u64,
    /// Frames sent.
    frames: u64,
    /// Items delivered.
    delivered: u64,
    /// Announcements to the sender.
    announcements: u64,
    /// Shared units taken from the pool.
    shared_grants: u64,
    /// The last delivery (or the open), for stall detection.
    last_delivery: Instant,
    life: Life,
    class: u8,
    /// In its class's ready FIFO.
    queued: bool,
    /// Wanted to send (ready or blocked on credit) at some point of the window.
    window_seen: bool,
    // Then what changes only when the sender is blocked, or the channel drops items.
    /// When the sender started waiting for credit with backlog and demand.
    blocked_since: Option<Instant>,
    /// Items dropped.
    dropped: u64,
    /// Times the sender had backlog and demand but no credit.
    blocked_events: u64,
    /// Total time blocked on credit, over the waits that ended.
    blocked: Duration,
    /// In the ledger's `waiting` list (see there).
    listed: bool,
}

impl Account {
    fn buffered(&self) -> u64 {
        self.exclusive_in_flight + self.shared_in_flight
    }

    fn held_shared(&self) -> u64 {
        self.shared_in_flight + self.shared_returning
    }

    /// The subscriber's outstanding demand is `outstanding`: what may still be sent
    /// is that, less what is buffered ([`UNBOUNDED`] sticks).
    fn set_demand(&mut self, outstanding: u64) {
        self.demand = if outstanding == UNBOUNDED {
            UNBOUNDED
        } else {
            outstanding.saturating_sub(self.buffered())
        };
    }
}

/// How buffered items left the mux, for [`Ledger::release`].
#[derive(Clone, Copy)]
enum Release {
    /// Delivered to the subscriber, with its outstanding demand after the delivery
    /// when it is still subscribed.
    Delivered(Option<u64>),
    /// Dropped by the receiving side.
    Dropped,
}

/// What [`Ledger::next_send_with`] hands the worker.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Turn {
    /// The channel.
    pub(crate) channel: ChannelId,
    /// Items to move from its staging window to the transport (≥ 1).
    pub(crate) items: u64,
}

/// The ledger of one mux. See the module docs.
#[derive(Debug)]
pub(crate) struct Ledger {
    config: MuxConfig,
    pool_free: u64,
    channels: IdMap<Account>,
    /// Ready FIFOs, one per priority class (index 0 is served first).
    ready: Vec<VecDeque<ChannelId>>,
    /// Items sent and not delivered, over all channels.
    buffered_total: u64,
    high_water: u64,
    announcements: u64,
    sends: u64,
    pool_blocked: u64,
    /// Every channel blocked on credit (`blocked_since` set), and perhaps some that
    /// stopped since: the only ones that returning pool credit can make ready, so a
    /// return costs what they number, not what the mux carries. A channel is listed
    /// at most once (`listed`); one that stops waiting stays listed, in its place,
    /// until the next return looks at it (a block and its end then cost a flag each
    /// instead of a search tree's insert and remove, which were a tenth of the
    /// ledger's time with 16 channels sharing the pool). So the list is in the order
    /// the channels were listed, roughly the order they started waiting: one that
    /// stopped and started again between two returns keeps its earlier place.
    /// Closed channels leave the list at once (a scan of it: closing is rare).
    waiting: Vec<ChannelId>,
    /// When the current fairness window ends: `None` before the first turn, `Some(None)`
    /// for a window too long to add to the clock (it never ends). An end rather than a
    /// start, so that each turn compares two instants instead of subtracting them.
    window_end: Option<Option<Instant>>,
    /// Jain's index of the last complete window.
    fairness: Option<f64>,
    /// The worker found no ready channel at its last look and has not been woken
    /// since: the next channel queued must wake it. While it is false the worker is
    /// running (it will find the channel at its next look) or was already woken, so
    /// queueing a channel asks nothing of it; this saves a signal on the worker's
    /// core, a write to a line the worker thread owns, for nearly every frame
    /// delivered while the worker is busy.
    worker_waiting: bool,
}

impl Ledger {
    /// An empty ledger; `classes` priority classes.
    pub(crate) fn new(config: MuxConfig, classes: usize) -> Self {
        Ledger {
            config,
            pool_free: config.shared,
            channels: id_map(),
            ready: (0..classes.max(1)).map(|_| VecDeque::new()).collect(),
            buffered_total: 0,
            high_water: 0,
            announcements: 0,
            sends: 0,
            pool_blocked: 0,
            waiting: Vec::new(),
            window_end: None,
            fairness: None,
            worker_waiting: true,
        }
    }

    /// The configuration.
    pub(crate) fn config(&self) -> &MuxConfig {
        &self.config
    }

    /// Shared units in the pool now.
    pub(crate) fn pool_free(&self) -> u64 {
        self.pool_free
    }

    /// Open `channel` with `E` exclusive units. False when the id is taken.
    pub(crate) fn open(
        &mut self,
        channel: ChannelId,
        weight: u64,
        class: u8,
        now: Instant,
    ) -> bool {
        if self.channels.contains_key(&channel) {
            return false;
        }
        let class = class.min((self.ready.len() - 1) as u8);
        self.channels.insert(
            channel,
            Account {
                life: Life::Open,
                weight,
                class,
                exclusive_free: self.config.exclusive,
                exclusive_in_flight: 0,
                unannounced: 0,
                shared_in_flight: 0,
                shared_returning: 0,
                demand: 0,
                backlog: 0,
                queued: false,
                last_delivery: now,
                window_sent: 0,
                frames: 0,
                delivered: 0,
                announcements: 0,
                shared_grants: 0,
                window_seen: false,
                blocked_since: None,
                dropped: 0,
                blocked_events: 0,
                blocked: Duration::ZERO,
                listed: false,
            },
        );
        true
    }

    /// True while `channel` is open and not cancelled.
    pub(crate) fn is_open(&self, channel: ChannelId) -> bool {
        matches!(self.channels.get(&channel), Some(c) if c.life == Life::Open)
    }

    /// The sender staged `n` more items. True when the worker must be woken.
    pub(crate) fn staged(&mut self, channel: ChannelId, n: u64, now: Instant) -> bool {
        let Some(chan) = self.channels.get_mut(&channel) else {
            return false;
        };
        if chan.life != Life::Open {
            return false;
        }
        chan.backlog += n;
        self.make_ready(channel, now)
    }

    /// The receiving subscriber's outstanding demand is `outstanding` (requested and
    /// not yet delivered; [`UNBOUNDED`] sticks): what the channel may still send is
    /// that, less what it has buffered. Read the demand while holding the ledger's
    /// lock, so that the last update applied is the latest reading. True when the
    /// worker must be woken.
    pub(crate) fn demand(&mut self, channel: ChannelId, outstanding: u64, now: Instant) -> bool {
        let Some(chan) = self.channels.get_mut(&channel) else {
            return false;
        };
        if chan.life != Life::Open {
            return false;
        }
        chan.set_demand(outstanding);
        self.make_ready(channel, now)
    }

    /// `n` items of `channel` were delivered to its subscriber: their credit comes
    /// back; then [`demand`](Self::demand) with the subscriber's outstanding demand
    /// after the delivery (which includes batch credit it returned). True when the
    /// worker must be woken.
    pub(crate) fn delivered_with_demand(
        &mut self,
        channel: ChannelId,
        n: u64,
        outstanding: u64,
        now: Instant,
    ) -> bool {
        self.release(channel, n, now, Release::Delivered(Some(outstanding)))
    }

    /// `n` items of `channel` were delivered to its subscriber, which is going away:
    /// their credit comes back (its demand no longer matters).
    pub(crate) fn delivered(&mut self, channel: ChannelId, n: u64, now: Instant) -> bool {
        self.release(channel, n, now, Release::Delivered(None))
    }

    /// `n` items of `channel` were dropped by the receiving side (the channel was
    /// cancelled or failed): their credit comes back as for delivered items.
    pub(crate) fn dropped(&mut self, channel: ChannelId, n: u64, now: Instant) -> bool {
        self.release(channel, n, now, Release::Dropped)
    }

    /// Buffered items of `channel` (sent, not yet delivered or dropped); `None` once
    /// closed.
    pub(crate) fn buffered(&self, channel: ChannelId) -> Option<u64> {
        self.channels.get(&channel).map(Account::buffered)
    }

    /// `n` buffered items of `channel` left the mux (`how`); with the subscriber's
    /// demand after a delivery, the channel's demand is updated too, so that one
    /// look decides whether it is ready.
    fn release(&mut self, channel: ChannelId, n: u64, now: Instant, how: Release) -> bool {
        let config = self.config;
        let Some(chan) = self.channels.get_mut(&channel) else {
            return false;
        };
        debug_assert!(n <= chan.buffered(), "delivered more than was sent");
        let n = n.min(chan.buffered());
        let outstanding = match how {
            Release::Delivered(outstanding) => outstanding.filter(|_| chan.life == Life::Open),
            Release::Dropped => None,
        };
        if n == 0 {
            let Some(outstanding) = outstanding else {
                return false;
            };
            chan.set_demand(outstanding);
            return self.make_ready(channel, now);
        }
        self.buffered_total -= n;
        chan.last_delivery = now;
        if matches!(how, Release::Dropped) {
            chan.dropped += n;
        } else {
            chan.delivered += n;
        }
        // Shared units first, back to the pool (in return batches).
        let shared = n.min(chan.shared_in_flight);
        chan.shared_in_flight -= shared;
        chan.shared_returning += shared;
        if chan.shared_returning >= config.shared_return
            || (chan.shared_in_flight == 0 && chan.life != Life::Open)
        {
            self.pool_free += chan.shared_returning;
            chan.shared_returning = 0;
        }
        let exclusive = n - shared;
        chan.exclusive_in_flight -= exclusive;
        chan.unannounced += exclusive;
        // No separate liveness rule is needed: `announce_at <= E`, and a sender with
        // no free exclusive unit has all `E` in flight or unannounced, so deliveries
        // it is owed always reach the mark.
        if chan.unannounced >= config.announce_at {
            chan.exclusive_free += std::mem::take(&mut chan.unannounced);
            chan.announcements += 1;
            self.announcements += 1;
        }
        if let Some(outstanding) = outstanding {
            chan.set_demand(outstanding);
        }
        // Freed pool credit may make any channel ready, not only this one.
        let mut wake = self.make_ready(channel, now);
        if shared > 0 {
            wake |= self.requeue_pool_waiters(now);
        }
        wake
    }

    /// The receiving subscriber cancelled (or failed): no more sends; everything not
    /// backing a buffered item returns at once, and the buffered items' credit as the
    /// receiving side drops them ([`dropped`](Self::dropped)). Returns true when
    /// freed credit may make another channel ready.
    pub(crate) fn cancel(&mut self, channel: ChannelId, now: Instant) -> bool {
        let Some(chan) = self.channels.get_mut(&channel) else {
            return false;
        };
        if chan.life == Life::Cancelled {
            return false;
        }
        chan.life = Life::Cancelled;
        chan.demand = 0;
        chan.backlog = 0;
        chan.exclusive_free += std::mem::take(&mut chan.unannounced);
        self.pool_free += std::mem::take(&mut chan.shared_returning);
        self.requeue_pool_waiters(now)
    }

    /// Remove `channel` (its stream ended and its items were delivered, or it was
    /// cancelled and its items dropped). Returns the channel's final statistics and
    /// whether freed credit may make another channel ready.
    pub(crate) fn close(
        &mut self,
        channel: ChannelId,
        now: Instant,
    ) -> Option<(ChannelStats, bool)> {
        let mut chan = self.channels.remove(&channel)?;
        if chan.listed {
            self.waiting.retain(|c| *c != channel);
        }
        let buffered = chan.buffered();
        self.buffered_total -= buffered;
        self.pool_free += chan.held_shared();
        chan.exclusive_free += chan.exclusive_in_flight + chan.unannounced;
        // All of it returned: the final snapshot shows nothing buffered or held.
        chan.exclusive_in_flight = 0;
        chan.unannounced = 0;
        chan.shared_in_flight = 0;
        chan.shared_returning = 0;
        debug_assert_eq!(
            chan.exclusive_free, self.config.exclusive,
            "exclusive credit conserved"
        );
        if chan.queued {
            for fifo in &mut self.ready {
                fifo.retain(|c| *c != channel);
            }
        }
        chan.dropped += buffered;
        let stats = self.snapshot_of(&chan, now);
        let wake = self.requeue_pool_waiters(now);
        Some((stats, wake))
    }

    /// The next frame for the worker to send, credit taken; `None` when no channel is
    /// ready. For a ledger told of every staged item with [`staged`](Self::staged).
    #[cfg(all(test, not(weir_loom)))]
    pub(crate) fn next_send(&mut self, now: Instant) -> Option<Turn> {
        self.next_send_with(now, |_| 0, |_| 0)
    }

    /// The next frame for the worker to send, credit taken; `None` when no channel is
    /// ready. For senders that report staged items only while their channel's
    /// backlog here is zero (see the module docs): `fold(channel)` takes
    /// the items staged and not yet reported for the channel whose turn it is; after
    /// the turn, if its backlog here is zero, `park(channel)` marks it as needing a
    /// report and returns 0, or returns the items that arrived meanwhile.
    pub(crate) fn next_send_with(
        &mut self,
        now: Instant,
        mut fold: impl FnMut(ChannelId) -> u64,
        mut park: impl FnMut(ChannelId) -> u64,
    ) -> Option<Turn> {
        let config = self.config;
        self.roll_window(now);
        loop {
            let Some(class) = self.ready.iter().position(|fifo| !fifo.is_empty()) else {
                self.worker_waiting = true;
                return None;
            };
            let ready_here = self.ready[class].len() as u64;
            let channel = self.ready[class].pop_front()?;
            let pool_free = self.pool_free;
            let chan = self
                .channels
                .get_mut(&channel)
                .expect("queued channels exist");
            chan.queued = false;
            if chan.life == Life::Open {
                chan.backlog += fold(channel);
            }
            let shared_room = config.borrow_cap - chan.held_shared();
            let fair_share = pool_free.div_ceil(ready_here.max(1));
            let shared_may = shared_room.min(pool_free).min(fair_share);
            let wanted = chan.backlog.min(chan.demand);
            if chan.life != Life::Open || wanted == 0 || chan.exclusive_free + shared_may == 0 {
                // Not ready any more (the pool ran dry since it was queued, say): note
                // it as waiting, so that credit coming back queues it again.
                let requeued = self.make_ready(channel, now);
                debug_assert!(!requeued, "make_ready and next_send agree on readiness");
                continue;
            }
            let allowance = config.quantum.saturating_mul(chan.weight);
            let n = wanted.min(allowance).min(chan.exclusive_free + shared_may);
            let from_exclusive = n.min(chan.exclusive_free);
            let from_shared = n - from_exclusive;
            chan.exclusive_free -= from_exclusive;
            chan.exclusive_in_flight += from_exclusive;
            chan.shared_in_flight += from_shared;
            chan.backlog -= n;
            if chan.backlog == 0 {
                chan.backlog = park(channel);
            }
            if chan.demand != UNBOUNDED {
                chan.demand -= n;
            }
            chan.window_sent += n;
            chan.frames += 1;
            chan.shared_grants += from_shared;
            self.pool_free -= from_shared;
            self.buffered_total += n;
            self.high_water = self.high_water.max(self.buffered_total);
            self.sends += 1;
            // Still ready: back to the tail of its class for its next turn.
            let _ = self.make_ready(channel, now);
            return Some(Turn { channel, items: n });
        }
    }

    /// The channel at the head of the ready set: the one [`next_send_with`] looks
    /// at first (it sends for another only if this one stopped being ready).
    ///
    /// [`next_send_with`]: Self::next_send_with
    pub(crate) fn next_in_line(&self) -> Option<ChannelId> {
        self.ready.iter().find_map(|fifo| fifo.front().copied())
    }

    /// Queue `channel` if it is ready and not queued; note when its sender starts or
    /// stops waiting for credit. True when it was queued now and the worker waits for
    /// a ready channel (wake it; see `worker_waiting`).
    fn make_ready(&mut self, channel: ChannelId, now: Instant) -> bool {
        let pool_free = self.pool_free;
        let config = self.config;
        let Some(chan) = self.channels.get_mut(&channel) else {
            return false;
        };
        let wants = chan.life == Life::Open && chan.backlog > 0 && chan.demand > 0;
        let shared_ok = pool_free > 0 && chan.held_shared() < config.borrow_cap;
        let has_credit = chan.exclusive_free > 0 || shared_ok;
        // Blocked on credit: backlog and demand, but no credit to send with.
        match (wants && !has_credit, chan.blocked_since) {
            (true, None) => {
                if !chan.listed {
                    chan.listed = true;
                    self.waiting.push(channel);
                }
                chan.window_seen = true;
                chan.blocked_since = Some(now);
                chan.blocked_events += 1;
                if chan.exclusive_free == 0 && chan.held_shared() < config.borrow_cap {
                    self.pool_blocked += 1;
                }
            }
            (false, Some(since)) => {
                chan.blocked += now.saturating_duration_since(since);
                chan.blocked_since = None;
            }
            _ => {}
        }
        if wants && has_credit && !chan.queued {
            chan.queued = true;
            chan.window_seen = true;
            let class = chan.class as usize;
            self.ready[class].push_back(channel);
            return std::mem::replace(&mut self.worker_waiting, false);
        }
        false
    }

    /// Close the fairness window once it is `fairness_window` old: Jain's index of the
    /// items each channel that wanted to send got, per unit of weight. The next window
    /// starts with the channels that want to send now.
    #[inline]
    fn roll_window(&mut self, now: Instant) {
        match self.window_end {
            Some(Some(end)) if now < end => {}
            Some(None) => {}
            None => self.window_end = Some(now.checked_add(self.config.fairness_window)),
            Some(Some(_)) => self.close_window(now),
        }
    }

    /// The fairness window ended at `now`: see [`roll_window`](Self::roll_window).
    #[cold]
    fn close_window(&mut self, now: Instant) {
        let window = self.config.fairness_window;
        let shares = self
            .channels
            .values()
            .filter(|c| c.window_seen)
            .map(|c| c.window_sent as f64 / c.weight as f64);
        self.fairness = super::stats::jain(shares);
        for chan in self.channels.values_mut() {
            chan.window_sent = 0;
            chan.window_seen = chan.queued || chan.blocked_since.is_some();
        }
        self.window_end = Some(now.checked_add(window));
    }

    /// Pool credit came back: channels waiting only for it may be ready now. Each
    /// listed channel is looked at once, in list order (see `waiting`); those no
    /// longer waiting leave the list.
    fn requeue_pool_waiters(&mut self, now: Instant) -> bool {
        if self.pool_free == 0 || self.waiting.is_empty() {
            return false;
        }
        // Walked out of place (no allocation: `take` leaves an empty `Vec`). Nothing
        // is listed meanwhile: only the channel looked at changes, and it is listed.
        let mut list = std::mem::take(&mut self.waiting);
        let mut wake = false;
        list.retain(|&channel| {
            let Some(chan) = self.channels.get(&channel) else {
                debug_assert!(false, "closed channels leave the list");
                return false;
            };
            if chan.blocked_since.is_some() && !chan.queued {
                wake |= self.make_ready(channel, now);
            }
            let chan = self.channels.get_mut(&channel).expect("looked up above");
            chan.listed = chan.blocked_since.is_some();
            chan.listed
        });
        debug_assert!(self.waiting.is_empty(), "listed during the walk");
        self.waiting = list;
        wake
    }

    /// Statistics of one channel.
    pub(crate) fn channel_stats(&self, channel: ChannelId, now: Instant) -> Option<ChannelStats> {
        self.channels
            .get(&channel)
            .map(|c| self.snapshot_of(c, now))
    }

    fn snapshot_of(&self, chan: &Account, now: Instant) -> ChannelStats {
        let mut blocked = chan.blocked;
        if let Some(since) = chan.blocked_since {
            blocked += now.saturating_duration_since(since);
        }
        ChannelStats {
            exclusive_free: chan.exclusive_free,
            unannounced: chan.unannounced,
            shared_held: chan.held_shared(),
            backlog: chan.backlog,
            buffered: chan.buffered(),
            demand: chan.demand,
            sent: chan.delivered + chan.dropped + chan.buffered(),
            delivered: chan.delivered,
            dropped: chan.dropped,
            frames: chan.frames,
            announcements: chan.announcements,
            shared_grants: chan.shared_grants,
            blocked_events: chan.blocked_events,
            blocked,
            stalled: chan.buffered() > 0
                && now.saturating_duration_since(chan.last_delivery) >= self.config.stall_after,
        }
    }

    /// Statistics of the whole mux.
    pub(crate) fn stats(&self, now: Instant) -> MuxStats {
        let mut channels: Vec<(ChannelId, ChannelStats)> = self
            .channels
            .iter()
            .map(|(id, c)| (*id, self.snapshot_of(c, now)))
            .collect();
        channels.sort_by_key(|(id, _)| *id);
        MuxStats {
            shared: self.config.shared,
            pool_free: self.pool_free,
            exclusive_total: self.config.exclusive * self.channels.len() as u64,
            buffered_total: self.buffered_total,
            high_water: self.high_water,
            ready: self.ready.iter().map(VecDeque::len).sum(),
            announcements: self.announcements,
            frames: self.sends,
            pool_blocked: self.pool_blocked,
            fairness: self.fairness,
            channels,
        }
    }

    /// Check I2 and I3 as far as they hold at every instant (tests).
    #[cfg(all(test, not(weir_loom)))]
    pub(crate) fn check(&self) {
        let exclusive = self.config.exclusive;
        let mut held_shared = 0;
        let mut buffered = 0;
        for (id, c) in &self.channels {
            assert_eq!(
                c.exclusive_free + c.exclusive_in_flight + c.unannounced,
                exclusive,
                "channel {id:?}: exclusive credit not conserved"
            );
            assert!(
                c.held_shared() <= self.config.borrow_cap,
                "channel {id:?} over its cap"
            );
            held_shared += c.held_shared();
            buffered += c.buffered();
        }
        assert_eq!(
            self.pool_free + held_shared,
            self.config.shared,
            "shared credit not conserved"
        );
        assert_eq!(buffered, self.buffered_total, "buffered total drifted");
        let listed: std::collections::BTreeSet<ChannelId> = self.waiting.iter().copied().collect();
        assert_eq!(listed.len(), self.waiting.len(), "a channel listed twice");
        for (id, c) in &self.channels {
            assert_eq!(
                c.listed,
                listed.contains(id),
                "channel {id:?}: listed flag drifted"
            );
            assert!(
                c.blocked_since.is_none() || c.listed,
                "channel {id:?} waits for credit unlisted"
            );
        }
        assert!(
            listed.iter().all(|id| self.channels.contains_key(id)),
            "a closed channel is listed"
        );
        assert!(
            self.buffered_total <= exclusive * self.channels.len() as u64 + self.config.shared,
            "buffered {} over the bound",
            self.buffered_total
        );
    }
}

#[cfg(all(test, not(weir_loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn config(exclusive: u64, shared: u64, borrow_cap: u64, quantum: u64) -> MuxConfig {
        MuxConfig {
            exclusive,
            shared,
            borrow_cap,
            quantum,
            announce_at: (exclusive / 2).max(1),
            shared_return: 1,
            stall_after: Duration::from_millis(10),
            fairness_window: Duration::from_secs(1),
        }
    }

    /// Send everything ready; the channels in send order, one entry per frame.
    fn drain(ledger: &mut Ledger, now: Instant) -> Vec<(ChannelId, u64)> {
        let mut order = Vec::new();
        while let Some(send) = ledger.next_send(now) {
            order.push((send.channel, send.items));
            ledger.check();
        }
        order
    }

    /// A ledger (E = 64, no pool, quantum 4) with channels 1, 2 and 3 open, weight 1,
    /// each with unbounded demand and no backlog (so none is ready yet).
    fn three_open_channels(now: Instant) -> Ledger {
        let mut ledger = Ledger::new(config(64, 0, 0, 4), 1);
        for id in [1, 2, 3] {
            assert!(ledger.open(id, 1, 0, now));
            assert!(!ledger.demand(id, UNBOUNDED, now), "no backlog: not ready");
        }
        ledger
    }

    #[test]
    fn equal_channels_take_turns_in_order() {
        // Three channels, three quanta of backlog each: a, b, c, a, b, c, a, b, c.
        let now = Instant::now();
        let mut ledger = three_open_channels(now);
        for id in [1, 2, 3] {
            ledger.staged(id, 12, now);
        }
        let order: Vec<ChannelId> = drain(&mut ledger, now)
            .into_iter()
            .map(|(c, _)| c)
            .collect();
        assert_eq!(order, [1, 2, 3, 1, 2, 3, 1, 2, 3]);
    }

    #[test]
    fn the_worker_is_woken_once_per_wait_not_per_channel_queued() {
        let now = Instant::now();
        let mut ledger = three_open_channels(now);
        assert!(
            ledger.staged(1, 4, now),
            "the worker waits from the start: wake it"
        );
        assert!(
            !ledger.staged(2, 4, now),
            "already woken: it will find channel 2"
        );
        let first = ledger.next_send(now).unwrap();
        assert_eq!((first.channel, first.items), (1, 4));
        assert!(!ledger.staged(3, 4, now), "the worker is running: no wake");
        assert_eq!(ledger.next_send(now).unwrap().channel, 2);
        assert_eq!(ledger.next_send(now).unwrap().channel, 3);
        assert!(
            ledger.next_send(now).is_none(),
            "nothing ready: the worker waits"
        );
        assert!(
            ledger.staged(1, 4, now),
            "a channel queued while it waits wakes it"
        );
        assert!(!ledger.staged(2, 4, now));
    }

    #[test]
    fn weights_scale_the_items_per_turn() {
        let now = Instant::now();
        let mut ledger = Ledger::new(config(1 << 20, 0, 0, 4), 1);
        for (id, weight) in [(1, 1), (2, 2), (3, 4)] {
            ledger.open(id, weight, 0, now);
            ledger.demand(id, UNBOUNDED, now);
            ledger.staged(id, 100_000, now);
        }
        let mut sent = [0u64; 4];
        for _ in 0..3_000 {
            let send = ledger.next_send(now).unwrap();
            sent[send.channel as usize] += send.items;
        }
        assert_eq!(sent[2], 2 * sent[1], "{sent:?}");
        assert_eq!(sent[3], 4 * sent[1], "{sent:?}");
    }

    #[test]
    fn the_fairness_window_measures_how_evenly_wanting_channels_were_served() {
        let start = Instant::now();
        let second = Duration::from_secs(1);
        // Equal weights and 1:2:4 weights, all saturating: even per unit of weight.
        for weights in [[1, 1, 1], [1, 2, 4]] {
            let mut ledger = Ledger::new(config(1 << 20, 0, 0, 4), 1);
            for (id, weight) in (1..).zip(weights) {
                ledger.open(id, weight, 0, start);
                ledger.demand(id, UNBOUNDED, start);
                ledger.staged(id, 1 << 20, start);
            }
            for _ in 0..700 {
                ledger.next_send(start).unwrap();
            }
            assert_eq!(
                ledger.stats(start).fairness,
                None,
                "no window completed yet"
            );
            ledger.next_send(start + second).unwrap();
            let fairness = ledger.stats(start + second).fairness.unwrap();
            assert!(fairness > 0.999, "{weights:?}: {fairness}");
        }
        // A strict class starves the other: two wanting channels, one served: 1/2.
        let mut ledger = Ledger::new(config(1 << 20, 0, 0, 4), 2);
        ledger.open(1, 1, 0, start);
        ledger.open(2, 1, 1, start);
        for id in [1, 2] {
            ledger.demand(id, UNBOUNDED, start);
            ledger.staged(id, 1 << 20, start);
        }
        for _ in 0..100 {
            assert_eq!(ledger.next_send(start).unwrap().channel, 1);
        }
        ledger.next_send(start + second).unwrap();
        assert_eq!(ledger.stats(start + second).fairness, Some(0.5));
        // A window in which nothing wanted to send has no index.
        let mut ledger = Ledger::new(config(8, 0, 0, 4), 1);
        ledger.open(1, 1, 0, start);
        assert_eq!(ledger.next_send(start), None);
        assert_eq!(ledger.next_send(start + second), None);
        assert_eq!(ledger.stats(start + second).fairness, None);
    }

    #[test]
    fn a_stricter_class_goes_first() {
        let now = Instant::now();
        let mut ledger = Ledger::new(config(8, 0, 0, 4), 2);
        ledger.open(1, 1, 1, now);
        ledger.open(2, 1, 0, now);
        for id in [1, 2] {
            ledger.demand(id, UNBOUNDED, now);
            ledger.staged(id, 8, now);
        }
        let order: Vec<ChannelId> = drain(&mut ledger, now)
            .into_iter()
            .map(|(c, _)| c)
            .collect();
        assert_eq!(order, [2, 2, 1, 1]);
    }

    #[test]
    fn a_channel_never_sends_more_than_its_demand() {
        let now = Instant::now();
        let mut ledger = Ledger::new(config(32, 32, 32, 16), 1);
        ledger.open(1, 1, 0, now);
        ledger.staged(1, 100, now);
        assert_eq!(ledger.next_send(now), None, "no demand, nothing sent");
        ledger.demand(1, 5, now);
        assert_eq!(drain(&mut ledger, now), [(1, 5)]);
        // Outstanding 5, all buffered: nothing more may go.
        ledger.demand(1, 5, now);
        assert_eq!(ledger.next_send(now), None);
    }

    #[test]
    fn a7_the_pool_is_shared_one_unit_each_among_needy_channels_and_returned() {
        // Three channels with backlog 8, no exclusive credit, a pool of 3.
        let now = Instant::now();
        let mut ledger = Ledger::new(config(0, 3, 3, 16), 1);
        for id in [1, 2, 3] {
            ledger.open(id, 1, 0, now);
            ledger.demand(id, UNBOUNDED, now);
            ledger.staged(id, 8, now);
        }
        // The first round goes in the order the channels were queued. Each later one
        // starts with the channel whose delivery freed the first unit (its own
        // release queues it), then the channels waiting for the pool, longest wait
        // first: after round 1, 3 started waiting first (the pool ran dry at its
        // turn), then 1 and 2 at their next looks; after round 2, 2 ran it dry.
        for order in [[1, 2, 3], [1, 3, 2], [1, 2, 3]] {
            let sent: Vec<(ChannelId, u64)> = order.iter().map(|&id| (id, 1)).collect();
            assert_eq!(drain(&mut ledger, now), sent);
            let stats = ledger.stats(now);
            for id in [1, 2, 3] {
                assert_eq!(stats.channel(id).unwrap().shared_held, 1);
            }
            assert_eq!(stats.pool_free, 0);
            // Each item delivered: its unit back to the pool, and shared out again.
            for id in [1, 2, 3] {
                ledger.delivered(id, 1, now);
                ledger.check();
            }
            assert_eq!(ledger.stats(now).pool_free, 3);
        }
    }

    #[test]
    fn a_closed_channel_leaves_the_waiting_list_and_its_id_is_listed_once_again() {
        // E = 1, no pool: a channel with backlog waits as soon as its one unit is out.
        let now = Instant::now();
        let mut ledger = Ledger::new(config(1, 0, 0, 4), 1);
        for id in [1, 2] {
            ledger.open(id, 1, 0, now);
            ledger.demand(id, UNBOUNDED, now);
            ledger.staged(id, 3, now);
        }
        assert_eq!(drain(&mut ledger, now), [(1, 1), (2, 1)]);
        assert_eq!(
            ledger.waiting,
            [1, 2],
            "both wait, in the order they started"
        );
        ledger.check();
        // Channel 1 is cancelled and closed while waiting: it leaves the list.
        ledger.cancel(1, now);
        ledger.dropped(1, 1, now);
        ledger.close(1, now).expect("open");
        assert_eq!(ledger.waiting, [2]);
        ledger.check();
        // The id opens again and waits again: listed once, behind channel 2.
        ledger.open(1, 1, 0, now);
        ledger.demand(1, UNBOUNDED, now);
        ledger.staged(1, 3, now);
        assert_eq!(drain(&mut ledger, now), [(1, 1)]);
        assert_eq!(ledger.waiting, [2, 1]);
        ledger.check();
        // Channel 2's delivery announces its unit: it sends again and, waiting
        // again before any pool return looked at the list, keeps its place.
        ledger.delivered(2, 1, now);
        assert_eq!(drain(&mut ledger, now), [(2, 1)]);
        assert_eq!(ledger.waiting, [2, 1]);
        ledger.check();
    }

    #[test]
    fn the_next_in_line_is_the_next_sent_while_it_is_ready() {
        let now = Instant::now();
        let mut ledger = three_open_channels(now);
        assert_eq!(ledger.next_in_line(), None, "nothing ready yet");
        for id in [3, 1, 2] {
            ledger.demand(id, UNBOUNDED, now);
            ledger.staged(id, 40, now);
        }
        for _ in 0..6 {
            let head = ledger.next_in_line().expect("all three ready");
            assert_eq!(ledger.next_send(now).map(|t| t.channel), Some(head));
        }
        // The head stops being ready (no demand left): the next send skips it.
        let head = ledger.next_in_line().unwrap();
        ledger.demand(head, 0, now);
        assert_eq!(ledger.next_in_line(), Some(head), "still queued");
        assert_ne!(ledger.next_send(now).map(|t| t.channel), Some(head));
    }

    #[test]
    fn exclusive_credit_is_announced_at_the_low_water_mark() {
        // E = 32, announce at 16: one announcement per 16 delivered items.
        let now = Instant::now();
        let mut ledger = Ledger::new(config(32, 0, 0, 32), 1);
        ledger.open(1, 1, 0, now);
        ledger.demand(1, UNBOUNDED, now);
        ledger.staged(1, 1_000_000, now);
        let mut delivered = 0;
        while delivered < 160_000 {
            let send = ledger.next_send(now).unwrap();
            // Delivered one at a time: the worst case for announcements.
            for _ in 0..send.items {
                ledger.delivered_with_demand(1, 1, UNBOUNDED, now);
                delivered += 1;
            }
            ledger.check();
        }
        let announcements = ledger.stats(now).announcements;
        assert_eq!(announcements, 160_000 / 16, "one per 16 items");
    }

    #[test]
    fn a_sender_without_credit_gets_it_back_at_the_mark_however_it_was_spent() {
        // Liveness with the mark at E: demand comes in dribbles of 1 and 3.
        let now = Instant::now();
        let mut c = config(4, 0, 0, 4);
        c.announce_at = 4;
        let mut ledger = Ledger::new(c, 1);
        ledger.open(1, 1, 0, now);
        ledger.staged(1, 10, now);
        ledger.demand(1, 1, now);
        assert_eq!(drain(&mut ledger, now), [(1, 1)]);
        ledger.delivered_with_demand(1, 1, 0, now);
        ledger.demand(1, 3, now);
        assert_eq!(drain(&mut ledger, now), [(1, 3)]);
        ledger.demand(1, 6, now);
        assert_eq!(
            ledger.next_send(now),
            None,
            "all four units in flight or unannounced"
        );
        assert!(
            ledger.delivered_with_demand(1, 3, 3, now),
            "the mark: wake the worker"
        );
        assert_eq!(drain(&mut ledger, now), [(1, 3)]);
    }

    #[test]
    fn cancel_returns_everything_but_the_buffered_items_credit() {
        let now = Instant::now();
        let mut ledger = Ledger::new(config(4, 8, 4, 16), 1);
        ledger.open(1, 1, 0, now);
        ledger.open(2, 1, 0, now);
        ledger.demand(1, UNBOUNDED, now);
        ledger.staged(1, 100, now);
        assert_eq!(drain(&mut ledger, now), [(1, 8)]);
        assert_eq!(ledger.stats(now).pool_free, 4);
        ledger.cancel(1, now);
        ledger.check();
        // The receiving side drops the 8 buffered items: all credit back.
        ledger.dropped(1, 8, now);
        ledger.check();
        let (stats, _) = ledger.close(1, now).unwrap();
        assert_eq!(stats.dropped, 8);
        assert_eq!((stats.sent, stats.delivered, stats.buffered), (8, 0, 0));
        assert_eq!((stats.exclusive_free, stats.shared_held), (4, 0));
        assert_eq!(ledger.stats(now).pool_free, 8);
        ledger.check();
    }

    #[derive(Clone, Debug)]
    enum Op {
        Open(u8),
        Stage(u8, u16),
        Request(u8, u16),
        Send,
        Deliver(u8, u16),
        Cancel(u8),
        Close(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..6).prop_map(Op::Open),
            (0u8..6, 1u16..64).prop_map(|(c, n)| Op::Stage(c, n)),
            (0u8..6, 1u16..64).prop_map(|(c, n)| Op::Request(c, n)),
            Just(Op::Send),
            Just(Op::Send),
            (0u8..6, 1u16..64).prop_map(|(c, n)| Op::Deliver(c, n)),
            (0u8..6).prop_map(Op::Cancel),
            (0u8..6).prop_map(Op::Close),
        ]
    }

    /// A model of what the real sides keep: requested and delivered per channel.
    #[derive(Default, Clone, Copy)]
    struct Side {
        open: bool,
        cancelled: bool,
        requested: u64,
        delivered: u64,
        sent: u64,
    }

    fn run(config: MuxConfig, ops: &[Op]) {
        let now = Instant::now();
        let mut ledger = Ledger::new(config, 2);
        let mut sides = [Side::default(); 6];
        for op in ops {
            match *op {
                Op::Open(c) => {
                    let opened = ledger.open(u64::from(c), 1 + u64::from(c % 3), c % 2, now);
                    assert_eq!(opened, !sides[c as usize].open);
                    if opened {
                        sides[c as usize] = Side {
                            open: true,
                            ..Side::default()
                        };
                    }
                }
                Op::Stage(c, n) => {
                    ledger.staged(u64::from(c), u64::from(n), now);
                }
                Op::Request(c, n) => {
                    let side = &mut sides[c as usize];
                    side.requested += u64::from(n);
                    let outstanding = side.requested - side.delivered;
                    ledger.demand(u64::from(c), outstanding, now);
                }
                Op::Send => {
                    if let Some(send) = ledger.next_send(now) {
                        let side = &mut sides[send.channel as usize];
                        assert!(side.open && !side.cancelled, "sent on a closed channel");
                        side.sent += send.items;
                        assert!(
                            side.sent <= side.requested,
                            "channel {} sent {} of {} requested",
                            send.channel,
                            side.sent,
                            side.requested
                        );
                    }
                }
                Op::Deliver(c, n) => {
                    let side = &mut sides[c as usize];
                    let buffered = side.sent - side.delivered;
                    let n = u64::from(n).min(buffered);
                    if n > 0 {
                        if side.cancelled {
                            side.delivered += n;
                            ledger.dropped(u64::from(c), n, now);
                        } else {
                            side.delivered += n;
                            let outstanding = side.requested - side.delivered;
                            ledger.delivered_with_demand(u64::from(c), n, outstanding, now);
                        }
                    }
                }
                Op::Cancel(c) => {
                    if sides[c as usize].open {
                        sides[c as usize].cancelled = true;
                    }
                    ledger.cancel(u64::from(c), now);
                }
                Op::Close(c) => {
                    if ledger.close(u64::from(c), now).is_some() {
                        sides[c as usize].open = false;
                    }
                }
            }
            ledger.check();
            let stats = ledger.stats(now);
            assert!(stats.high_water <= 6 * config.exclusive + config.shared);
        }
        // Liveness: consumers take everything and ask for more; the senders' backlog
        // must drain (no credit stranded below a mark, in the pool, or anywhere).
        for c in 0..6u64 {
            ledger.staged(c, 1, now);
        }
        for _round in 0..10_000 {
            let mut progress = false;
            for (c, side) in sides.iter_mut().enumerate() {
                let buffered = side.sent - side.delivered;
                if side.open && !side.cancelled {
                    side.requested += 64;
                    side.delivered += buffered;
                    let outstanding = side.requested - side.delivered;
                    ledger.delivered_with_demand(c as u64, buffered, outstanding, now);
                    progress |= buffered > 0;
                } else if side.open && buffered > 0 {
                    // A cancelled channel's receiving side drops what arrives.
                    side.delivered += buffered;
                    ledger.dropped(c as u64, buffered, now);
                    progress = true;
                }
            }
            while let Some(send) = ledger.next_send(now) {
                sides[send.channel as usize].sent += send.items;
                progress = true;
            }
            ledger.check();
            if !progress {
                break;
            }
        }
        for (id, chan) in ledger.stats(now).channels {
            if sides[id as usize].open && !sides[id as usize].cancelled {
                assert_eq!(chan.backlog, 0, "channel {id} stuck with backlog: {chan:?}");
            }
        }
        // Close everything: conservation (I3).
        for c in 0..6u64 {
            ledger.close(c, now);
        }
        ledger.check();
        assert_eq!(
            ledger.stats(now).pool_free,
            config.shared,
            "pool whole after close"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1_000, ..ProptestConfig::default() })]

        /// A3: a million random operations (1,000 cases × 1,000), the bound and
        /// conservation checked after each.
        #[test]
        fn a3_bounded_and_conserved_under_random_operations(
            exclusive in 0u64..6,
            shared in 1u64..10,
            cap_share in 1u64..4,
            quantum in 1u64..6,
            ops in proptest::collection::vec(op(), 1_000),
        ) {
            let borrow_cap = (shared / cap_share).max(1);
            run(config(exclusive, shared, borrow_cap, quantum), &ops);
        }
    }
}
