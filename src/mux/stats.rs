//! Statistics of a mux and of its channels: snapshots taken under the ledger's lock.

use std::time::Duration;

use super::ChannelId;

/// One channel's credit, queues and counters, as of a [`Mux::stats`](super::Mux::stats)
/// or [`ChannelSource::stats`](super::ChannelSource::stats) call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChannelStats {
    /// Exclusive credit the sender may use now.
    pub exclusive_free: u64,
    /// Exclusive credit whose items were delivered, waiting for the low-water mark to
    /// be announced to the sender.
    pub unannounced: u64,
    /// Shared credit this channel holds (backing its buffered items, or delivered and
    /// waiting for a return batch).
    pub shared_held: u64,
    /// Items staged at the sender, waiting for credit or their turn.
    pub backlog: u64,
    /// Items sent and not yet delivered to the receiving subscriber (on the transport
    /// or in the receive window).
    pub buffered: u64,
    /// The receiving subscriber's demand not yet covered by sent items
    /// ([`u64::MAX`]: unbounded).
    pub demand: u64,
    /// Items sent over the transport.
    pub sent: u64,
    /// Items delivered to the receiving subscriber.
    pub delivered: u64,
    /// Items sent and never delivered (the channel was cancelled or failed).
    pub dropped: u64,
    /// Frames sent (turns of the scheduler).
    pub frames: u64,
    /// Credit announcements to the sender (one per low-water mark reached, or per
    /// liveness announcement).
    pub announcements: u64,
    /// Shared credit units taken from the pool.
    pub shared_grants: u64,
    /// Times the sender had backlog and demand but no credit.
    pub blocked_events: u64,
    /// Total time the sender had backlog and demand but no credit.
    pub blocked: Duration,
    /// Items are buffered and none was delivered for the mux's `stall_after`.
    pub stalled: bool,
}

/// A whole mux, as of one [`Mux::stats`](super::Mux::stats) call.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct MuxStats {
    /// The shared pool's size (`S`).
    pub shared: u64,
    /// Shared credit not held by any channel.
    pub pool_free: u64,
    /// Exclusive credit reserved by the open channels (`Σ E`).
    pub exclusive_total: u64,
    /// Items sent and not yet delivered, over all channels. Never above
    /// `exclusive_total + shared`.
    pub buffered_total: u64,
    /// The highest `buffered_total` seen.
    pub high_water: u64,
    /// Channels waiting for their turn.
    pub ready: usize,
    /// Credit announcements, all channels.
    pub announcements: u64,
    /// Frames sent, all channels.
    pub frames: u64,
    /// Times a channel without exclusive credit found the pool empty.
    pub pool_blocked: u64,
    /// Jain's fairness index ([`jain_index`]) over the last complete window of
    /// [`fairness_window`](super::MuxBuilder::fairness_window): of the items sent to
    /// each channel that wanted to send (was ready, or blocked on credit) during the
    /// window, each divided by its weight. 1 when the worker served them evenly; it
    /// says how evenly saturating channels were served, so a channel that wanted
    /// little lowers it. `None` until a window completes, or when nothing was sent in
    /// the last one.
    pub fairness: Option<f64>,
    /// Every open channel, by id.
    pub channels: Vec<(ChannelId, ChannelStats)>,
}

impl MuxStats {
    /// Shared credit in use, as a fraction of the pool (0 with no pool).
    pub fn pool_usage(&self) -> f64 {
        if self.shared == 0 {
            0.0
        } else {
            (self.shared - self.pool_free) as f64 / self.shared as f64
        }
    }

    /// One channel's statistics.
    pub fn channel(&self, channel: ChannelId) -> Option<&ChannelStats> {
        self.channels
            .iter()
            .find(|(id, _)| *id == channel)
            .map(|(_, stats)| stats)
    }
}

/// Jain's fairness index of `shares`: `(Σx)² / (n · Σx²)`, 1 when all are equal,
/// `k / n` when `k` of `n` get equal shares and the rest nothing, 0 for no shares or
/// nothing shared. Use it on per-channel deliveries over a window.
///
/// ```
/// use weir::mux::jain_index;
///
/// assert_eq!(jain_index(&[5, 5, 5, 5]), 1.0);
/// assert_eq!(jain_index(&[4, 4, 0, 0]), 0.5);
/// assert_eq!(jain_index(&[]), 0.0);
/// ```
pub fn jain_index(shares: &[u64]) -> f64 {
    jain(shares.iter().map(|&x| x as f64)).unwrap_or(0.0)
}

/// Jain's index of `shares`; `None` when there are none or they are all zero.
pub(crate) fn jain(shares: impl Iterator<Item = f64>) -> Option<f64> {
    let (mut n, mut sum, mut squares) = (0.0, 0.0, 0.0);
    for x in shares {
        n += 1.0;
        sum += x;
        squares += x * x;
    }
    (squares > 0.0).then(|| sum * sum / (n * squares))
}
