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
//! `announce_at` units are unannounced, or the sender has no free credit and backlog
//! (the liveness rule: a channel must never wait below the mark for credit that is
//! only waiting to be announced), they are all announced at once (one
//! announcement). In process an announcement is this ledger's update and one wake-up
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

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::demand::UNBOUNDED;

use super::stats::{ChannelStats, MuxStats};
use super::ChannelId;

/// The validated configuration of a mux.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Config {
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
#[derive(Debug)]
struct Chan {
    life: Life,
    weight: u64,
    class: u8,
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
    /// In its class's ready FIFO.
    queued: bool,
    /// The last delivery (or the open), for stall detection.
    last_delivery: Instant,
    stats: ChannelStats,
    /// When the sender started waiting for credit with backlog and demand.
    blocked_since: Option<Instant>,
}

impl Chan {
    fn buffered(&self) -> u64 {
        self.exclusive_in_flight + self.shared_in_flight
    }

    fn held_shared(&self) -> u64 {
        self.shared_in_flight + self.shared_returning
    }
}

/// What [`Ledger::next_send`] hands the worker.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Send {
    /// The channel.
    pub(crate) channel: ChannelId,
    /// Items to move from its staging window to the transport (≥ 1).
    pub(crate) items: u64,
}

/// The ledger of one mux. See the module docs.
#[derive(Debug)]
pub(crate) struct Ledger {
    config: Config,
    pool_free: u64,
    channels: HashMap<ChannelId, Chan>,
    /// Ready FIFOs, one per priority class (index 0 is served first).
    ready: Vec<VecDeque<ChannelId>>,
    /// Items sent and not delivered, over all channels.
    buffered_total: u64,
    high_water: u64,
    announcements: u64,
    sends: u64,
    pool_blocked: u64,
}

impl Ledger {
    /// An empty ledger; `classes` priority classes.
    pub(crate) fn new(config: Config, classes: usize) -> Self {
        Ledger {
            config,
            pool_free: config.shared,
            channels: HashMap::new(),
            ready: (0..classes.max(1)).map(|_| VecDeque::new()).collect(),
            buffered_total: 0,
            high_water: 0,
            announcements: 0,
            sends: 0,
            pool_blocked: 0,
        }
    }

    /// The configuration.
    pub(crate) fn config(&self) -> &Config {
        &self.config
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
            Chan {
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
                stats: ChannelStats::default(),
                blocked_since: None,
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
        chan.demand = if outstanding == UNBOUNDED {
            UNBOUNDED
        } else {
            outstanding.saturating_sub(chan.buffered())
        };
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
        let wake = self.release(channel, n, now, false);
        wake | self.demand(channel, outstanding, now)
    }

    /// `n` items of `channel` were dropped by the receiving side (the channel was
    /// cancelled or failed): their credit comes back as for delivered items.
    pub(crate) fn dropped(&mut self, channel: ChannelId, n: u64, now: Instant) -> bool {
        self.release(channel, n, now, true)
    }

    /// Buffered items of `channel` (sent, not yet delivered or dropped); `None` once
    /// closed.
    pub(crate) fn buffered(&self, channel: ChannelId) -> Option<u64> {
        self.channels.get(&channel).map(Chan::buffered)
    }

    fn release(&mut self, channel: ChannelId, n: u64, now: Instant, dropped: bool) -> bool {
        let config = self.config;
        let Some(chan) = self.channels.get_mut(&channel) else {
            return false;
        };
        debug_assert!(n <= chan.buffered(), "delivered more than was sent");
        let n = n.min(chan.buffered());
        if n == 0 {
            return false;
        }
        self.buffered_total -= n;
        chan.last_delivery = now;
        if dropped {
            chan.stats.dropped += n;
        } else {
            chan.stats.delivered += n;
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
        let starving = chan.exclusive_free == 0 && chan.backlog > 0;
        if chan.unannounced > 0 && (chan.unannounced >= config.announce_at || starving) {
            chan.exclusive_free += std::mem::take(&mut chan.unannounced);
            chan.stats.announcements += 1;
            self.announcements += 1;
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
    /// receiving side drops them ([`delivered`](Self::delivered)). Returns true when
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
        let buffered = chan.buffered();
        self.buffered_total -= buffered;
        self.pool_free += chan.held_shared();
        chan.exclusive_free += chan.exclusive_in_flight + chan.unannounced;
        debug_assert_eq!(
            chan.exclusive_free, self.config.exclusive,
            "exclusive credit conserved"
        );
        if chan.queued {
            for fifo in &mut self.ready {
                fifo.retain(|c| *c != channel);
            }
        }
        chan.stats.dropped += buffered;
        let stats = self.snapshot_of(&chan, now);
        let wake = self.requeue_pool_waiters(now);
        Some((stats, wake))
    }

    /// The next frame for the worker to send, credit taken; `None` when no channel is
    /// ready.
    pub(crate) fn next_send(&mut self, now: Instant) -> Option<Send> {
        let config = self.config;
        loop {
            let class = self.ready.iter().position(|fifo| !fifo.is_empty())?;
            let ready_here = self.ready[class].len() as u64;
            let channel = self.ready[class].pop_front()?;
            let pool_free = self.pool_free;
            let chan = self
                .channels
                .get_mut(&channel)
                .expect("queued channels exist");
            chan.queued = false;
            let shared_room = config.borrow_cap - chan.held_shared();
            let fair_share = pool_free.div_ceil(ready_here.max(1));
            let shared_may = shared_room.min(pool_free).min(fair_share);
            let wanted = chan.backlog.min(chan.demand);
            if chan.life != Life::Open || wanted == 0 || chan.exclusive_free + shared_may == 0 {
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
            if chan.demand != UNBOUNDED {
                chan.demand -= n;
            }
            chan.stats.sent += n;
            chan.stats.frames += 1;
            chan.stats.shared_grants += from_shared;
            self.pool_free -= from_shared;
            self.buffered_total += n;
            self.high_water = self.high_water.max(self.buffered_total);
            self.sends += 1;
            // Still ready: back to the tail of its class for its next turn.
            let _ = self.make_ready(channel, now);
            return Some(Send { channel, items: n });
        }
    }

    /// Queue `channel` if it is ready and not queued; note when its sender starts or
    /// stops waiting for credit. True when it was queued now (wake the worker).
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
                chan.blocked_since = Some(now);
                chan.stats.blocked_events += 1;
                if chan.exclusive_free == 0 && chan.held_shared() < config.borrow_cap {
                    self.pool_blocked += 1;
                }
            }
            (false, Some(since)) => {
                chan.stats.blocked += now.saturating_duration_since(since);
                chan.blocked_since = None;
            }
            _ => {}
        }
        if wants && has_credit && !chan.queued {
            chan.queued = true;
            let class = chan.class as usize;
            self.ready[class].push_back(channel);
            return true;
        }
        false
    }

    /// Pool credit came back: channels waiting only for it may be ready now.
    fn requeue_pool_waiters(&mut self, now: Instant) -> bool {
        if self.pool_free == 0 {
            return false;
        }
        let waiting: Vec<ChannelId> = self
            .channels
            .iter()
            .filter(|(_, c)| !c.queued && c.blocked_since.is_some())
            .map(|(id, _)| *id)
            .collect();
        let mut wake = false;
        for channel in waiting {
            wake |= self.make_ready(channel, now);
        }
        wake
    }

    /// Statistics of one channel.
    pub(crate) fn channel_stats(&self, channel: ChannelId, now: Instant) -> Option<ChannelStats> {
        self.channels
            .get(&channel)
            .map(|c| self.snapshot_of(c, now))
    }

    fn snapshot_of(&self, chan: &Chan, now: Instant) -> ChannelStats {
        let mut stats = chan.stats.clone();
        stats.exclusive_free = chan.exclusive_free;
        stats.unannounced = chan.unannounced;
        stats.shared_held = chan.held_shared();
        stats.backlog = chan.backlog;
        stats.buffered = chan.buffered();
        stats.demand = chan.demand;
        if let Some(since) = chan.blocked_since {
            stats.blocked += now.saturating_duration_since(since);
        }
        stats.stalled = chan.buffered() > 0
            && now.saturating_duration_since(chan.last_delivery) >= self.config.stall_after;
        stats
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
            channels,
        }
    }

    /// Check I2 and I3 as far as they hold at every instant (tests).
    #[cfg(test)]
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
        assert!(
            self.buffered_total <= exclusive * self.channels.len() as u64 + self.config.shared,
            "buffered {} over the bound",
            self.buffered_total
        );
    }
}
