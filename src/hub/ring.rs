// The hub's state: one bounded ring, a cursor per subscriber, the upstream credit.
//
// # Sequence numbers
//
// Every item the hub receives gets the next sequence number. The ring holds the
// items `head .. tail` (`tail = head + len`, `len ≤ capacity`). A member's cursor is
// the sequence number of the next item it will read; `tail - cursor` is its lag.
//
// # Who holds the ring
//
// Only `Backpressure` members hold items: the hub never evicts an item such a member
// has not read. The others never hold anything back: when an arriving item finds the
// ring full, the oldest item leaves, and a member whose cursor pointed at it falls
// behind the ring and its policy decides: `DropOldest` moves its cursor to the new
// head (one item counted as dropped), `Latest` jumps to the newest item (everything
// before it counted as dropped), `Disconnect` is cut off with a `Lagged` error. A
// `Latest` member also skips, when it takes, the items beyond the newest its demand
// covers: it never gets an item while a newer one waits past its demand.
//
// # Upstream credit
//
// `held = tail - min(cursor of the Backpressure members)` (0 without any) and
// `outstanding` (requested from upstream, not yet received). The hub asks upstream
// for `capacity - held - outstanding` whenever that is positive and `outstanding` has
// fallen to a quarter of the ring (the 75% rule, measured on what is still coming),
// so `held + outstanding ≤ capacity` always: an arriving item never finds the ring
// full of items a `Backpressure` member still needs. Without any `Backpressure`
// member, it asks only while some member waits for items (has read everything and
// has demand left), and only for what the hungriest of them still wants (up to the
// ring): the fastest wanting member sets the pace, nobody's absence of demand pulls
// items only to throw them away, and a lossy member skips only items a faster
// member (or a holder) pulled in. Either way the hub asks for no more at a time than
// the smallest lag limit in items of a `Disconnect` member: a synchronous upstream
// hands over all it is asked for in one batch, and that batch must not put a member
// that has read everything past its limit. An item that arrives with
// `outstanding == 0` was never requested (rule 1.1) and is refused.
//
// # Time
//
// Items are not stamped one by one: the ring keeps the arrival time of each block of
// `STAMP_EVERY` sequence numbers (one clock reading per block). A member's lag in
// seconds is the age of the block of its next item, and `Disconnect` after a time
// checks ages when a block starts.
//
// # Wake-ups
//
// A member whose take found fewer items than it wanted while the hub still runs is
// `hungry`; the next arrival (or the end) marks it `wake`, and the caller signals the
// marked members once it has let go of the lock. An arrival visits the
// members only while one may be hungry or has a lag limit in items (`per_arrival`):
// with subscribers that still have items to read, an arrival is a push and a count.
//
// # Runs
//
// A batch arrives as runs (`push_all`): the items up to the next block's first one,
// no more than the ring holds, while nothing is to be done per arrival. A run of `r`
// items into a ring holding `len` evicts `over = len + r - capacity` of the items that
// were there, and arrival `i` of the run evicts when `i >= r - over`, leaving the head
// at `head + i - (r - over) + 1`. So a cursor `c` behind the new head is passed by
// arrival `r - over + (c - head)`, and each policy's outcome follows in one step per
// member: `DropOldest` moves to the new head, `Latest` to that arrival's item, and
// `Disconnect` is cut with the lag it had then. A block's first item and every item
// while something is due per arrival go through `push`, one at a time.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::{LagLimit, MemberState, Policy, SubscriberStats};
use crate::stage::window::PREALLOCATED;
use crate::{DropReason, Error};

/// Sequence numbers per time stamp.
pub(crate) const STAMP_EVERY: u64 = 64;

/// One subscriber's place in the hub.
pub(crate) struct Member<H> {
    pub(crate) id: u64,
    pub(crate) name: Option<String>,
    pub(crate) policy: Policy,
    /// Sequence number of the next item to read.
    cursor: u64,
    /// Its last take wanted more than there was.
    hungry: bool,
    /// While hungry: the demand it has left.
    wants: u64,
    /// Signal it when the caller lets go of the lock.
    wake: bool,
    /// Cut off (`Disconnect`): the error it gets at its next pass.
    cut: Option<Error>,
    /// Cut off by its `Disconnect` limit: how many items it was behind then (taken
    /// by the pass that ends it, which logs it).
    lagged: Option<u64>,
    delivered: u64,
    dropped: u64,
    /// Dropped since its last take (handed to its drop hook's counters there).
    pending_drops: u64,
    /// How it is woken.
    pub(crate) handle: H,
}

/// What one take handed over.
#[derive(Debug)]
pub(crate) struct Taken {
    /// Items appended to the caller's batch.
    pub(crate) count: usize,
    /// Items this member lost since its last take, and why.
    pub(crate) dropped: Option<(DropReason, u64)>,
    /// The member must end after this batch: the hub's end (the member has read
    /// everything), or its cut-off error.
    pub(crate) end: Option<Result<(), Error>>,
    /// Upstream credit may have grown (a `Backpressure` member moved, or the
    /// member waits for items).
    pub(crate) credit_moved: bool,
    /// The member was cut off by its `Disconnect` limit and this take ends it:
    /// what the event of its disconnection reports (once).
    pub(crate) lagged: Option<Lagged>,
    /// The member has read everything there is and still has demand: it is marked
    /// hungry, and the next arrival wakes it (no need to look again now).
    pub(crate) hungry: bool,
}

/// A `Disconnect` member cut off, as its pass reports it (outside the lock).
#[derive(Debug)]
pub(crate) struct Lagged {
    /// Items it was behind when it was cut off.
    pub(crate) lag: u64,
    /// Its name, if it was given one.
    pub(crate) name: Option<String>,
}

/// The ring, its members and its credit. Not synchronised: the hub keeps it under
/// one lock.
pub(crate) struct Ring<T, H> {
    items: VecDeque<T>,
    capacity: usize,
    /// Sequence number of `items[0]`.
    head: u64,
    /// `(first sequence number of a block, when its first item arrived)`, oldest first.
    stamps: VecDeque<(u64, Instant)>,
    /// The most blocks the ring's items can span: `stamps` keeps no more.
    max_stamps: usize,
    /// Requested from upstream and not yet received.
    outstanding: u64,
    members: Vec<Member<H>>,
    /// An arrival has something to do per member: some member may be hungry (set
    /// when a take marks one; cleared by the arrival that wakes them all), or one
    /// has a lag limit in items (set when it joins; cleared by an arrival that finds
    /// none left). While false, an arrival does not visit the members: the common
    /// case of subscribers that have items still to read.
    per_arrival: bool,
    /// Upstream's end, once it came.
    end: Option<Result<(), Error>>,
}

impl<T: Clone, H> Ring<T, H> {
    /// An empty ring of `capacity` items (validated by the caller). Room for up to
    /// `PREALLOCATED` items (and their stamps) is allocated now; a larger ring grows
    /// as items arrive, up to its capacity (a ring of 2^30 `u64`s over ten items
    /// would otherwise take 8 GiB at once).
    pub(crate) fn new(capacity: usize) -> Self {
        let max_stamps = capacity / STAMP_EVERY as usize + 2;
        Ring {
            items: VecDeque::with_capacity(capacity.min(PREALLOCATED)),
            capacity,
            head: 0,
            stamps: VecDeque::with_capacity(max_stamps.min(PREALLOCATED)),
            max_stamps,
            outstanding: 0,
            members: Vec::new(),
            per_arrival: false,
            end: None,
        }
    }

    /// Sequence number of the next item to arrive.
    #[inline]
    pub(crate) fn tail(&self) -> u64 {
        self.head + self.items.len() as u64
    }

    /// How many members there are.
    pub(crate) fn members(&self) -> usize {
        self.members.len()
    }

    /// Add a member at the live position, or `replay` items back (as far as the
    /// ring reaches). A `Backpressure` member replays only what the ring can keep
    /// beside the items already asked of upstream (`held + outstanding <= capacity`
    /// must hold for it from the start: credit granted before it joined cannot be
    /// taken back, and an arrival must never evict an item it still needs). A
    /// `Disconnect` member replays at most its lag limit in items, or only the items
    /// of blocks no older than its limit in time (it would join already cut off).
    pub(crate) fn join(
        &mut self,
        id: u64,
        name: Option<String>,
        policy: Policy,
        replay: usize,
        handle: H,
    ) {
        let mut cursor = self.tail().saturating_sub(replay as u64).max(self.head);
        match policy {
            Policy::Backpressure => {
                let keeps = (self.tail() + self.outstanding).saturating_sub(self.capacity as u64);
                cursor = cursor.max(keeps);
            }
            Policy::Disconnect(LagLimit::Items(max)) => {
                cursor = cursor.max(self.tail().saturating_sub(max));
            }
            Policy::Disconnect(LagLimit::Age(max)) => {
                // Only items of blocks no older than the limit (an older one would
                // have it join already cut off): from the first such block on.
                let now = Instant::now();
                let young = self
                    .stamps
                    .iter()
                    .find(|&&(_, at)| now.saturating_duration_since(at) <= max)
                    .map_or(self.tail(), |&(first, _)| first);
                cursor = cursor.max(young);
            }
            _ => {}
        }
        if let Policy::Disconnect(LagLimit::Items(_)) = policy {
            self.per_arrival = true;
        }
        self.members.push(Member {
            id,
            name,
            policy,
            cursor,
            hungry: false,
            wants: 0,
            wake: false,
            cut: None,
            lagged: None,
            delivered: 0,
            dropped: 0,
            pending_drops: 0,
            handle,
        });
    }

    /// Add a member that is refused at once: its first pass ends it with `error`.
    pub(crate) fn refuse(
        &mut self,
        id: u64,
        name: Option<String>,
        policy: Policy,
        error: Error,
        handle: H,
    ) {
        self.join(id, name, policy, 0, handle);
        if let Some(member) = self.members.last_mut() {
            member.cut = Some(error);
        }
    }

    /// Remove a member; returns whether the upstream credit may have grown.
    pub(crate) fn leave(&mut self, id: u64) -> Option<Member<H>> {
        let at = self.members.iter().position(|m| m.id == id)?;
        Some(self.members.swap_remove(at))
    }

    /// Upstream ended: every member that is waiting for items is woken (it ends once
    /// it has read the ring).
    pub(crate) fn finish(&mut self, end: Result<(), Error>) {
        if self.end.is_some() {
            return;
        }
        self.end = Some(end);
        for member in &mut self.members {
            member.wake = true;
            member.hungry = false;
        }
    }

    /// True once upstream ended.
    pub(crate) fn ended(&self) -> bool {
        self.end.is_some()
    }

    /// Keep only the newest `keep` items (upstream ended and nobody reads: only a
    /// late subscriber's replay can still want them); returns the others, to be
    /// dropped outside the lock.
    pub(crate) fn trim(&mut self, keep: usize) -> VecDeque<T> {
        let excess = self.items.len().saturating_sub(keep);
        let gone: VecDeque<T> = self.items.drain(..excess).collect();
        self.head += excess as u64;
        while self.stamps.len() > 1 && self.stamps[1].0 <= self.head {
            self.stamps.pop_front();
        }
        gone
    }

    /// Let go of every item (the hub stopped); returns them, to be dropped outside
    /// the lock.
    pub(crate) fn clear(&mut self) -> VecDeque<T> {
        self.head = self.tail();
        self.stamps.clear();
        std::mem::take(&mut self.items)
    }

    /// The oldest cursor of a `Backpressure` member, and that member's id.
    fn slowest_holder(&self) -> Option<(u64, u64)> {
        self.members
            .iter()
            .filter(|m| m.policy == Policy::Backpressure && m.cut.is_none())
            .map(|m| (m.cursor, m.id))
            .min()
    }

    /// The smallest lag limit in items of a member still in (`u64::MAX`: none).
    fn smallest_item_limit(&self) -> u64 {
        self.members
            .iter()
            .filter(|m| m.cut.is_none())
            .filter_map(|m| match m.policy {
                Policy::Disconnect(LagLimit::Items(max)) => Some(max),
                _ => None,
            })
            .min()
            .unwrap_or(u64::MAX)
    }

    /// How much more to request from upstream now (already counted as outstanding),
    /// or 0. See the file header.
    pub(crate) fn credit(&mut self) -> u64 {
        if self.end.is_some() {
            return 0;
        }
        let capacity = self.capacity as u64;
        // Nothing is asked for before `outstanding` falls to a quarter of the ring
        // (below): skip the scan of the members on the way there.
        if self.outstanding > capacity / 4 {
            return 0;
        }
        // With a holder: what the ring has room for beside its unread items. Without
        // one, only what the hungriest waiting member asked for (up to the ring):
        // pulling for nobody would only push items out of the ring (and run a
        // synchronous upstream on the puller's thread for ever), and pulling past
        // every member's demand would make lossy members skip items nobody outran.
        let target = match self.slowest_holder() {
            Some((cursor, _)) => capacity - (self.tail() - cursor).min(capacity),
            None => self
                .members
                .iter()
                .filter(|m| m.hungry)
                .map(|m| m.wants)
                .max()
                .unwrap_or(0)
                .min(capacity),
        };
        // No more at a time than the smallest lag limit in items: one batch must not
        // put a member that has read everything past its limit.
        let target = target.min(self.smallest_item_limit());
        let room = target.saturating_sub(self.outstanding);
        if room > 0 && self.outstanding <= target / 4 {
            self.outstanding += room;
            room
        } else {
            0
        }
    }

    /// Take one arriving item. `now` is read once per block of `STAMP_EVERY`. An
    /// item it evicts goes to `evicted`, to be dropped outside the lock (if dropping
    /// it runs any code). `Err(item)`
    /// when nothing was outstanding (upstream broke rule 1.1).
    pub(crate) fn push(
        &mut self,
        item: T,
        now: impl FnOnce() -> Instant,
        evicted: &mut VecDeque<T>,
    ) -> Result<(), T> {
        // A run of one that evicts one.
        self.push_evicting(item, now, evicted, |ring, evicted| {
            ring.evict_for_run(1, 1, evicted)
        })
    }

    /// [`push`](Self::push), with the eviction of the oldest item (into a full
    /// ring) done by `evict` (the unit test's item-by-item model replaces it).
    fn push_evicting(
        &mut self,
        item: T,
        now: impl FnOnce() -> Instant,
        evicted: &mut VecDeque<T>,
        evict: impl FnOnce(&mut Self, &mut VecDeque<T>),
    ) -> Result<(), T> {
        if self.outstanding == 0 {
            return Err(item);
        }
        self.outstanding -= 1;
        if self.items.len() == self.capacity {
            evict(self, evicted);
        }
        let seq = self.tail();
        self.items.push_back(item);
        if seq % STAMP_EVERY == 0 {
            let now = now();
            if self.stamps.len() == self.max_stamps {
                self.stamps.pop_front();
            }
            self.stamps.push_back((seq, now));
            self.check_ages(now);
        }
        if !self.per_arrival {
            return Ok(());
        }
        let tail = self.tail();
        let mut limits = false;
        for member in &mut self.members {
            if member.cut.is_some() {
                continue;
            }
            if let Policy::Disconnect(LagLimit::Items(max)) = member.policy {
                limits = true;
                let lag = tail - member.cursor;
                if lag > max {
                    cut(
                        member,
                        lag,
                        format!("fell {lag} items behind (the limit is {max})"),
                    );
                    continue;
                }
            }
            if member.hungry {
                member.hungry = false;
                member.wake = true;
            }
        }
        // Nobody is hungry now; the limits stay while a member that has one does.
        self.per_arrival = limits;
        Ok(())
    }

    /// Take the arriving items of `batch`, oldest first, with the outcome of a
    /// [`push`](Self::push) of each in turn (the same cursors, drops, cuts, stamps
    /// and wake-ups), but visiting the members once per run instead of once per
    /// item: a run is the items up to the next block's first one, while no arrival
    /// has work per member (`per_arrival`); those items, and each block's first
    /// one, go through `push`. `Err` when an item was never requested: it and the
    /// rest stay in `batch`.
    pub(crate) fn push_all(
        &mut self,
        batch: &mut VecDeque<T>,
        mut now: impl FnMut() -> Instant,
        evicted: &mut VecDeque<T>,
    ) -> Result<(), ()> {
        while !batch.is_empty() {
            let seq = self.tail();
            if self.outstanding == 0 || self.per_arrival || seq % STAMP_EVERY == 0 {
                let item = batch.pop_front().expect("not empty");
                if let Err(item) = self.push(item, &mut now, evicted) {
                    batch.push_front(item);
                    return Err(());
                }
                continue;
            }
            // Up to the next block, within the credit, and never more than the
            // ring (then only items that were there before the run leave for it).
            let to_block = STAMP_EVERY - seq % STAMP_EVERY;
            let run = to_block
                .min(self.outstanding)
                .min(batch.len() as u64)
                .min(self.capacity as u64) as usize;
            self.outstanding -= run as u64;
            let over = (self.items.len() + run).saturating_sub(self.capacity);
            if over > 0 {
                self.evict_for_run(over, run, evicted);
            }
            self.items.extend(batch.drain(..run));
        }
        Ok(())
    }

    /// A run of `run` items is about to arrive and the oldest `over` items leave
    /// for them (the last `over` arrivals of the run each evict one; `over` is at
    /// most what the ring holds): they go to `evicted` (to be dropped outside the
    /// lock), `head` moves, and members that fall behind the ring are handled by
    /// their policy, as if the run's items had arrived one by one (see the file
    /// header).
    fn evict_for_run(&mut self, over: usize, run: usize, evicted: &mut VecDeque<T>) {
        let (h0, t0) = (self.head, self.tail());
        // An item whose `Drop` is user code is dropped after the lock; one without
        // drop glue costs nothing to drop here (and keeping it costs a copy per
        // arrival: the ring is full in steady state).
        if std::mem::needs_drop::<T>() {
            evicted.extend(self.items.drain(..over));
        } else {
            self.items.drain(..over);
        }
        // Arrival `i` of the run (sequence number `t0 + i`) evicts when `i >= first`,
        // and leaves `head` at `h0 + i - first + 1`: a cursor `c` behind the new
        // head is passed by arrival `first + (c - h0)`.
        let first = (run - over) as u64;
        self.head += over as u64;
        while self.stamps.len() > 1 && self.stamps[1].0 <= self.head {
            self.stamps.pop_front();
        }
        let head = self.head;
        let passed_by = |c: u64| t0 + first + (c - h0);
        for member in &mut self.members {
            if member.cursor >= head || member.cut.is_some() {
                continue;
            }
            match member.policy {
                Policy::Backpressure => {
                    debug_assert!(
                        false,
                        "the credit never lets a Backpressure member fall behind"
                    );
                }
                Policy::DropOldest => {
                    member.dropped += head - member.cursor;
                    member.pending_drops += head - member.cursor;
                    member.cursor = head;
                }
                Policy::Latest => {
                    // It jumps to the item arriving when the ring passes it (one of
                    // the run's: at or past the new head, as the run is no longer
                    // than the ring).
                    let newest = passed_by(member.cursor);
                    member.dropped += newest - member.cursor;
                    member.pending_drops += newest - member.cursor;
                    member.cursor = newest;
                }
                Policy::Disconnect(_) => {
                    let lag = passed_by(member.cursor) - member.cursor;
                    cut(member, lag, "it fell a whole ring behind".to_owned());
                }
            }
        }
    }

    /// A block started at `now`: cut the `Disconnect` members whose next item is
    /// older than their limit.
    fn check_ages(&mut self, now: Instant) {
        let (stamps, newest) = (&self.stamps, self.tail() - 1);
        for member in &mut self.members {
            let Policy::Disconnect(LagLimit::Age(max)) = member.policy else {
                continue;
            };
            if member.cut.is_some() || member.cursor >= newest {
                continue;
            }
            if let Some(age) = age_of(stamps, member.cursor, now) {
                if age > max {
                    cut(
                        member,
                        newest + 1 - member.cursor,
                        format!("its next item waited {age:?} (the limit is {max:?})"),
                    );
                }
            }
        }
    }

    /// Move up to `want` items from `id`'s cursor into `batch` (cloned). `demand` is
    /// the member's whole outstanding demand (`want` is it capped by the batch): a
    /// `Latest` member first skips what waits beyond it.
    pub(crate) fn take(&mut self, id: u64, demand: u64, want: usize, batch: &mut Vec<T>) -> Taken {
        let (head, tail) = (self.head, self.tail());
        let Some(member) = self.members.iter_mut().find(|m| m.id == id) else {
            return Taken {
                count: 0,
                dropped: None,
                end: Some(Ok(())),
                credit_moved: false,
                lagged: None,
                hungry: false,
            };
        };
        if member.policy == Policy::Latest && member.cut.is_none() && demand > 0 {
            let waiting = tail - member.cursor;
            if waiting > demand {
                let skip = waiting - demand;
                member.cursor += skip;
                member.dropped += skip;
                member.pending_drops += skip;
            }
        }
        let dropped = match std::mem::take(&mut member.pending_drops) {
            0 => None,
            n => Some((drop_reason(member.policy), n)),
        };
        if let Some(error) = member.cut.clone() {
            let lagged = member.lagged.take().map(|lag| Lagged {
                lag,
                name: member.name.clone(),
            });
            return Taken {
                count: 0,
                dropped,
                end: Some(Err(error)),
                credit_moved: false,
                lagged,
                hungry: false,
            };
        }
        let available = (tail - member.cursor) as usize;
        let count = want.min(available);
        let from = (member.cursor - head) as usize;
        batch.extend(self.items.range(from..from + count).cloned());
        member.cursor += count as u64;
        member.delivered += count as u64;
        let drained = member.cursor == tail;
        let end = if drained { self.end.clone() } else { None };
        member.hungry = drained && end.is_none() && count < want;
        if member.hungry {
            self.per_arrival = true;
        }
        member.wants = demand.saturating_sub(count as u64);
        Taken {
            count,
            dropped,
            end,
            credit_moved: (count > 0 && member.policy == Policy::Backpressure) || member.hungry,
            lagged: None,
            hungry: member.hungry,
        }
    }

    /// Hand the position (in [`handles`](Self::handles) order) of every member
    /// marked for waking to `wake`, and clear the marks.
    pub(crate) fn woken(&mut self, mut wake: impl FnMut(usize)) {
        for (at, member) in self.members.iter_mut().enumerate() {
            if std::mem::take(&mut member.wake) {
                wake(at);
            }
        }
    }

    /// Every member's handle, in the order [`woken`](Self::woken) counts positions.
    pub(crate) fn handles(&self) -> impl Iterator<Item = &H> {
        self.members.iter().map(|m| &m.handle)
    }

    /// The ring's figures (see [`HubStats`](super::HubStats)): occupancy,
    /// outstanding, the member bounding upstream, and each member's figures.
    pub(crate) fn stats(&self, now: Instant) -> (usize, u64, Option<u64>, Vec<SubscriberStats>) {
        let tail = self.tail();
        let bound = self
            .slowest_holder()
            .filter(|&(cursor, _)| tail - cursor + self.outstanding >= self.capacity as u64)
            .map(|(_, id)| id);
        let members = self
            .members
            .iter()
            .map(|m| SubscriberStats {
                id: m.id,
                name: m.name.clone(),
                policy: m.policy,
                position: m.cursor,
                lag: tail - m.cursor,
                lag_seconds: if m.cursor < tail {
                    age_of(&self.stamps, m.cursor, now).map_or(0.0, |age| age.as_secs_f64())
                } else {
                    0.0
                },
                delivered: m.delivered,
                dropped: m.dropped,
                state: match (&m.cut, m.hungry) {
                    (Some(_), _) => MemberState::Disconnected,
                    (None, true) => MemberState::Waiting,
                    (None, false) if m.cursor < tail => MemberState::Behind,
                    (None, false) => MemberState::Live,
                },
            })
            .collect();
        (self.items.len(), self.outstanding, bound, members)
    }
}

/// Cut `member` off, `lag` items behind, with a `Lagged` error saying `why`, and
/// wake it.
fn cut<H>(member: &mut Member<H>, lag: u64, why: String) {
    let name = member.name.as_deref().unwrap_or("a subscriber");
    member.cut = Some(Error::lagged(format!(
        "hub: {name} (id {}) was disconnected: {why}",
        member.id
    )));
    member.lagged = Some(lag);
    member.wake = true;
    member.hungry = false;
}

/// The reason a lossy policy's skipped items count under.
pub(crate) fn drop_reason(policy: Policy) -> DropReason {
    match policy {
        Policy::Latest => DropReason::ReplacedByLatest,
        _ => DropReason::OverflowOldest,
    }
}

/// How long ago the block holding `seq` started.
fn age_of(stamps: &VecDeque<(u64, Instant)>, seq: u64, now: Instant) -> Option<Duration> {
    let at = stamps.partition_point(|&(first, _)| first <= seq);
    let (_, since) = stamps.get(at.checked_sub(1)?)?;
    Some(now.saturating_duration_since(*since))
}

#[cfg(all(test, not(weir_loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// One step of a schedule, applied to two rings alike.
    #[derive(Clone, Debug)]
    enum Op {
        /// `items` arrive, `credit` outstanding before (fewer: the rest is refused).
        Arrive {
            items: usize,
            credit: u64,
        },
        /// A member (by position, modulo the count) takes up to `want` of `demand`.
        Take {
            at: usize,
            demand: u64,
            want: usize,
        },
        Join {
            policy: Policy,
            replay: usize,
        },
        Leave {
            at: usize,
        },
        /// Collect the wake-ups.
        Woken,
    }

    fn policy() -> impl Strategy<Value = Policy> {
        // No `Backpressure`: the schedule sets the credit by hand, and a holder must
        // never fall behind (the ring asserts that).
        prop_oneof![
            Just(Policy::DropOldest),
            Just(Policy::Latest),
            (1u64..40).prop_map(|n| Policy::Disconnect(LagLimit::Items(n))),
            (1u64..6).prop_map(|ms| Policy::Disconnect(LagLimit::Age(Duration::from_millis(ms)))),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0usize..200, 0u64..220).prop_map(|(items, credit)| Op::Arrive { items, credit }),
            3 => (0usize..8, 0u64..100, 0usize..80).prop_map(|(at, demand, want)| Op::Take { at, demand, want }),
            1 => (policy(), 0usize..10).prop_map(|(policy, replay)| Op::Join { policy, replay }),
            1 => (0usize..8).prop_map(|at| Op::Leave { at }),
            1 => Just(Op::Woken),
        ]
    }

    /// The model: a full ring takes one item, the oldest leaves, and each member
    /// still pointing at it is handled by its policy (`newest` is the arriving item).
    fn evict_one(ring: &mut Ring<u64, ()>, evicted: &mut VecDeque<u64>) {
        evicted.extend(
            ring.items
                .pop_front()
                .filter(|_| std::mem::needs_drop::<u64>()),
        );
        ring.head += 1;
        while ring.stamps.len() > 1 && ring.stamps[1].0 <= ring.head {
            ring.stamps.pop_front();
        }
        let (head, newest) = (ring.head, ring.tail());
        for member in &mut ring.members {
            if member.cursor >= head || member.cut.is_some() {
                continue;
            }
            let skip_to = match member.policy {
                Policy::Backpressure => unreachable!("no holder in these schedules"),
                Policy::DropOldest => head,
                Policy::Latest => newest,
                Policy::Disconnect(_) => {
                    let lag = newest - member.cursor;
                    cut(member, lag, "it fell a whole ring behind".to_owned());
                    continue;
                }
            };
            member.dropped += skip_to - member.cursor;
            member.pending_drops += skip_to - member.cursor;
            member.cursor = skip_to;
        }
    }

    /// Everything a ring's callers and its stats can see.
    fn state(ring: &Ring<u64, ()>) -> String {
        let members: Vec<_> = ring
            .members
            .iter()
            .map(|m| {
                (
                    m.id,
                    m.cursor,
                    m.hungry,
                    m.wants,
                    m.wake,
                    m.cut.as_ref().map(ToString::to_string),
                    m.lagged,
                    m.delivered,
                    m.dropped,
                    m.pending_drops,
                )
            })
            .collect();
        format!(
            "head {} items {:?} outstanding {} per_arrival {} stamps {:?} members {members:?}",
            ring.head, ring.items, ring.outstanding, ring.per_arrival, ring.stamps
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

        /// `push_all` (members visited once per run) leaves every ring exactly as
        /// pushing the same items one by one with the plain eviction of one item
        /// (`evict_one`, the model) does: cursors, drops, cuts, stamps, wake-ups,
        /// refusals.
        #[test]
        fn push_all_is_push_item_by_item(
            capacity in prop_oneof![Just(1usize), Just(2), 3usize..80, Just(256)],
            ops in proptest::collection::vec(op(), 1..60),
        ) {
            let base = Instant::now();
            let (mut a, mut b) = (Ring::<u64, ()>::new(capacity), Ring::<u64, ()>::new(capacity));
            // One fake clock per ring, a millisecond per reading: both read it
            // equally often, or the stamps differ.
            let (clock_a, clock_b) = (std::cell::Cell::new(0u64), std::cell::Cell::new(0u64));
            let tick = |c: &std::cell::Cell<u64>| {
                c.set(c.get() + 1);
                base + Duration::from_millis(c.get())
            };
            let mut next_id = 0u64;
            for op in ops {
                match op {
                    Op::Arrive { items, credit } => {
                        a.outstanding = credit;
                        b.outstanding = credit;
                        let first = a.tail();
                        let mut batch: VecDeque<u64> = (first..first + items as u64).collect();
                        let (mut evicted_a, mut evicted_b) = (VecDeque::new(), VecDeque::new());
                        let pushed_all = a.push_all(&mut batch, || tick(&clock_a), &mut evicted_a);
                        let mut left: VecDeque<u64> = (first..first + items as u64).collect();
                        let mut pushed = Ok(());
                        while let Some(item) = left.pop_front() {
                            if let Err(item) = b.push_evicting(item, || tick(&clock_b), &mut evicted_b, evict_one) {
                                left.push_front(item);
                                pushed = Err(());
                                break;
                            }
                        }
                        prop_assert_eq!(pushed_all, pushed);
                        prop_assert_eq!(&batch, &left, "what was refused");
                        prop_assert_eq!(evicted_a, evicted_b);
                    }
                    Op::Take { at, demand, want } => {
                        if a.members.is_empty() {
                            continue;
                        }
                        let id = a.members[at % a.members.len()].id;
                        let (mut got_a, mut got_b) = (Vec::new(), Vec::new());
                        let ta = a.take(id, demand, want, &mut got_a);
                        let tb = b.take(id, demand, want, &mut got_b);
                        prop_assert_eq!(format!("{ta:?}"), format!("{tb:?}"));
                        prop_assert_eq!(got_a, got_b);
                    }
                    Op::Join { policy, replay } => {
                        a.join(next_id, None, policy, replay, ());
                        b.join(next_id, None, policy, replay, ());
                        next_id += 1;
                    }
                    Op::Leave { at } => {
                        if a.members.is_empty() {
                            continue;
                        }
                        let id = a.members[at % a.members.len()].id;
                        prop_assert_eq!(a.leave(id).is_some(), b.leave(id).is_some());
                    }
                    Op::Woken => {
                        let (mut wa, mut wb) = (Vec::new(), Vec::new());
                        a.woken(|at| wa.push(at));
                        b.woken(|at| wb.push(at));
                        prop_assert_eq!(wa, wb);
                    }
                }
                prop_assert_eq!(state(&a), state(&b));
            }
        }
    }
}
