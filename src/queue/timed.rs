//! `TimedQueue`: a bounded FIFO whose items carry their enqueue instant.
//!
//! The building block of the push source and `on_backpressure_buffer` (the async
//! boundary has its own lock-free ring and stamps per batch). It never holds more than
//! its capacity: `push` refuses when full and `push_evicting` makes room by taking the
//! oldest out, so the caller decides what a full queue means (wait, refuse, drop).
//!
//! Dequeue applies the [`TimeBounds`]: items at the head that waited longer than
//! `max_age` are handed to the caller's `expired` callback (and counted in the gauge as
//! `Expired`) instead of being returned; once the queue has been non-empty for the
//! CoDel interval, so are head items that waited longer than the CoDel target
//! (`CoDel`); once it has been non-empty for the adaptive-LIFO interval it serves from
//! the tail until it empties. An item whose own deadline has passed when it is taken
//! out (a queue told how to read deadlines, [`with_deadlines`](TimedQueue::with_deadlines))
//! goes to `expired` too (`DeadlineExceeded`). [`expire_stale`](TimedQueue::expire_stale) takes the
//! items past the maximum age out without a dequeue (its owners call it when an item
//! arrives and when the queue's statistics are read), so a queue nobody reads does not
//! count dead items as depth.
//!
//! Statistics are gathered in plain fields and published to the [`QueueGauge`] by
//! [`flush`](TimedQueue::flush), which the owner calls once per batch. The depth and
//! the oldest stamp go out at every flush (two plain stores); the counts in and out,
//! which feed the rates under the gauge's lock, go out at most once per [`GRAIN`]: a
//! flush within a grain of the last one that published only adds its counts to the
//! pending ones and notes its instant. The pending counts are published at that
//! instant by the next flush a grain later, by [`publish`](TimedQueue::publish) (the
//! queue's owner calls it before a snapshot reads the gauge, so a snapshot sees every
//! count) and when the queue is dropped. A producer offering one item at a time
//! therefore takes the gauge's lock once a millisecond, not once an item, and no
//! count is ever attributed to an instant later than the flush that counted it.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Capacity, TimeBounds};
use crate::metrics::QueueGauge;
use crate::DropReason;

/// The longest a count waits in a queue before it reaches the gauge's rates (unless a
/// snapshot asks for it first): see the module docs.
const GRAIN: Duration = Duration::from_millis(1);

/// Items in and out since a flush.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counts {
    offered: u64,
    enqueued: u64,
    dequeued: u64,
}

impl Counts {
    fn add(&mut self, other: Counts) {
        self.offered += other.offered;
        self.enqueued += other.enqueued;
        self.dequeued += other.dequeued;
    }

    fn publish(self, gauge: &QueueGauge, at: Instant) {
        gauge.moved(self.offered, self.enqueued, self.dequeued, at);
    }
}

pub(crate) struct TimedQueue<T> {
    /// Oldest first. Kept apart from the stamps so that holding policies can work on
    /// the items directly ([`items_mut`](Self::items_mut)).
    items: VecDeque<T>,
    /// `stamps[i]` is when `items[i]` was enqueued.
    stamps: VecDeque<Instant>,
    capacity: usize,
    bounds: TimeBounds,
    /// When the queue last went from empty to non-empty.
    busy_since: Option<Instant>,
    gauge: Arc<QueueGauge>,
    /// `deadlines[i]` is `items[i]`'s own deadline, for a queue that honours them
    /// ([`with_deadlines`](Self::with_deadlines)); `None` otherwise. Read by the
    /// owner outside the lock and handed in with the item, so no user code runs here.
    deadlines: Option<VecDeque<Option<Instant>>>,
    offered: u64,
    enqueued: u64,
    dequeued: u64,
    /// Counts flushed but not yet published, and the instant of the latest flush
    /// that counted them (see the module docs).
    pending: Option<(Counts, Instant)>,
    /// When counts were last published.
    published_at: Option<Instant>,
}

/// What [`TimedQueue::pop_or_expired`] found at the head.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Popped<T> {
    /// The next item to deliver.
    Item(T),
    /// An item that waited too long: past the maximum age (`Expired`) or past the
    /// CoDel limit (`CoDel`). Already counted in the gauge; the caller hands it to
    /// the drop hook with the reason.
    Expired(DropReason, T),
}

impl<T> std::fmt::Debug for TimedQueue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimedQueue")
            .field("len", &self.items.len())
            .field("capacity", &self.capacity)
            .field("bounds", &self.bounds)
            .finish()
    }
}

impl<T> TimedQueue<T> {
    pub(crate) fn new(capacity: Capacity, bounds: TimeBounds, gauge: Arc<QueueGauge>) -> Self {
        // Grows to at most `capacity`; never preallocates a large capacity up front.
        let initial = capacity.get().min(1024);
        TimedQueue {
            items: VecDeque::with_capacity(initial),
            stamps: VecDeque::with_capacity(initial),
            capacity: capacity.get(),
            bounds,
            busy_since: None,
            gauge,
            deadlines: None,
            offered: 0,
            enqueued: 0,
            dequeued: 0,
            pending: None,
            published_at: None,
        }
    }

    /// Keep the deadline each item is pushed with (`push_until`, ...) and drop the
    /// items whose deadline has passed when they are taken out, reason
    /// `DeadlineExceeded`.
    pub(crate) fn with_deadlines(mut self, on: bool) -> Self {
        self.deadlines = on.then(VecDeque::new);
        self
    }

    pub(crate) fn gauge(&self) -> &Arc<QueueGauge> {
        &self.gauge
    }

    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub(crate) fn is_full(&self) -> bool {
        self.items.len() >= self.capacity
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Append `item` stamped `now`, worthless after `deadline` (kept by a queue
    /// [`with_deadlines`](Self::with_deadlines)), or hand it back if the queue is full.
    pub(crate) fn push(
        &mut self,
        item: T,
        now: Instant,
        deadline: Option<Instant>,
    ) -> Result<(), T> {
        self.offered += 1;
        if self.is_full() {
            return Err(item);
        }
        self.append(item, now, deadline);
        Ok(())
    }

    /// Append `item` stamped `now`, worthless after `deadline` (kept by a queue
    /// [`with_deadlines`](Self::with_deadlines)); if the queue is full, first take out
    /// the oldest item and return it (the caller reports it as `OverflowOldest`).
    pub(crate) fn push_evicting(
        &mut self,
        item: T,
        now: Instant,
        deadline: Option<Instant>,
    ) -> Option<T> {
        self.offered += 1;
        let evicted = if self.is_full() {
            self.pop_front_stamp();
            self.items.pop_front()
        } else {
            None
        };
        self.append(item, now, deadline);
        evicted
    }

    /// Count an arrival that was refused or dropped without entering the queue.
    pub(crate) fn offered_elsewhere(&mut self, n: u64) {
        self.offered += n;
    }

    /// `n` items passed through the queue without waiting in it (handed straight to
    /// the consumer while the queue was empty): offered, enqueued and dequeued.
    pub(crate) fn passed_through(&mut self, n: u64) {
        self.offered += n;
        self.enqueued += n;
        self.dequeued += n;
    }

    /// Replace the newest queued item with `item` (stamped `now`, worthless after
    /// `deadline`) and return the one it replaced (the caller reports it as
    /// `ReplacedByLatest`); on an empty queue this is a plain append and returns `None`.
    pub(crate) fn replace_newest(
        &mut self,
        item: T,
        now: Instant,
        deadline: Option<Instant>,
    ) -> Option<T> {
        self.offered += 1;
        self.pop_back_stamp();
        let replaced = self.items.pop_back();
        self.append(item, now, deadline);
        replaced
    }

    /// Set the newest item's deadline (a policy merged a value into it).
    pub(crate) fn set_newest_deadline(&mut self, deadline: Option<Instant>) {
        if let Some(newest) = self.deadlines.as_mut().and_then(VecDeque::back_mut) {
            *newest = deadline;
        }
    }

    /// A holding policy took items off the tail without saying so (a merge that
    /// panicked consumed the newest item): drop the stamps (and deadlines) left
    /// without an item.
    pub(crate) fn resync_tail(&mut self) {
        while self.stamps.len() > self.items.len() {
            self.pop_back_stamp();
        }
    }

    /// Take the head item's stamp and deadline off, returning its deadline (if the
    /// queue keeps them and it has one); the caller takes the item.
    fn pop_front_stamp(&mut self) -> Option<Instant> {
        self.stamps.pop_front();
        self.deadlines
            .as_mut()
            .and_then(VecDeque::pop_front)
            .flatten()
    }

    /// [`pop_front_stamp`](Self::pop_front_stamp) at the tail.
    fn pop_back_stamp(&mut self) -> Option<Instant> {
        self.stamps.pop_back();
        self.deadlines
            .as_mut()
            .and_then(VecDeque::pop_back)
            .flatten()
    }

    fn append(&mut self, item: T, now: Instant, deadline: Option<Instant>) {
        // Only a queue that was empty starts standing now: an eviction or replacement
        // that empties it for a moment (capacity 1) does not.
        if self.busy_since.is_none() {
            self.busy_since = Some(now);
        }
        if self.items.len() == self.items.capacity() {
            self.grow(1);
        }
        self.items.push_back(item);
        self.stamps.push_back(now);
        if let Some(deadlines) = &mut self.deadlines {
            deadlines.push_back(deadline);
        }
        self.enqueued += 1;
    }

    /// Make room in the buffers for `n` more items: grow by doubling, but never past
    /// `capacity`, so the buffer's memory stays within `capacity` slots whatever the
    /// capacity (no power-of-two rounding).
    fn grow(&mut self, n: usize) {
        let len = self.items.len();
        let doubled = len.max(1).min(self.capacity.saturating_sub(len).max(1));
        let more = doubled.max(n);
        self.items.reserve_exact(more);
        self.stamps.reserve_exact(more);
    }

    /// Move the `n` oldest items of `from` to the back, all stamped `now` and without
    /// a deadline (as [`push`](Self::push) would one by one with the same `now`);
    /// returns `n`. The caller checked that they fit: at most the room left. All of
    /// `from` moves as a block copy (`VecDeque::append`).
    pub(crate) fn push_run(&mut self, from: &mut VecDeque<T>, n: usize, now: Instant) -> usize {
        debug_assert!(n <= from.len(), "a run of {n} from {}", from.len());
        debug_assert!(n <= self.capacity - self.items.len(), "a run past capacity");
        if n == 0 {
            return 0;
        }
        if self.busy_since.is_none() {
            self.busy_since = Some(now);
        }
        if self.items.capacity() - self.items.len() < n {
            self.grow(n);
        }
        if n == from.len() {
            self.items.append(from);
        } else {
            self.items.extend(from.drain(..n));
        }
        self.stamps.extend(std::iter::repeat(now).take(n));
        if let Some(deadlines) = &mut self.deadlines {
            deadlines.extend(std::iter::repeat(None).take(n));
        }
        self.offered += n as u64;
        self.enqueued += n as u64;
        n
    }

    /// The items, oldest first, for a holding policy that rearranges a full queue.
    /// After changing them, say what changed: [`evicted_oldest`](Self::evicted_oldest)
    /// or [`refreshed_newest`](Self::refreshed_newest); a policy that merges into the
    /// newest item keeps its stamp (the merged value holds data that old).
    pub(crate) fn items_mut(&mut self) -> &mut VecDeque<T> {
        &mut self.items
    }

    /// A policy took the oldest item out and appended one at `now`, worthless after
    /// `deadline`.
    pub(crate) fn evicted_oldest(&mut self, now: Instant, deadline: Option<Instant>) {
        self.pop_front_stamp();
        self.stamps.push_back(now);
        if let Some(deadlines) = &mut self.deadlines {
            deadlines.push_back(deadline);
        }
        self.enqueued += 1;
    }

    /// A policy replaced the newest item with one that arrived at `now`, worthless
    /// after `deadline`.
    pub(crate) fn refreshed_newest(&mut self, now: Instant, deadline: Option<Instant>) {
        if let Some(stamp) = self.stamps.back_mut() {
            *stamp = now;
        }
        if let Some(newest) = self.deadlines.as_mut().and_then(VecDeque::back_mut) {
            *newest = deadline;
        }
    }

    /// The next item to deliver at `now`, or the next expired head item. LIFO once the
    /// queue has stood for the adaptive-LIFO interval. `None` when empty.
    pub(crate) fn pop_or_expired(&mut self, now: Instant) -> Option<Popped<T>> {
        let stood = |interval: Duration| {
            self.busy_since
                .is_some_and(|since| now.saturating_duration_since(since) >= interval)
        };
        if let Some(&stamp) = self.stamps.front() {
            let waited = now.saturating_duration_since(stamp);
            // Before the queue stood for the interval no item can have waited longer
            // than it (the head arrived after the queue went non-empty): a burst is
            // absorbed whole.
            let past_codel = self
                .bounds
                .get_codel()
                .is_some_and(|(target, interval)| stood(interval) && waited > target);
            let reason = if self.bounds.get_max_age().is_some_and(|max| waited > max) {
                Some(DropReason::Expired)
            } else if past_codel {
                Some(DropReason::CoDel)
            } else {
                None
            };
            if let Some(reason) = reason {
                self.pop_front_stamp();
                let item = self.items.pop_front().expect("a stamp has its item");
                self.left();
                self.gauge.dropped(reason, 1);
                return Some(Popped::Expired(reason, item));
            }
        }
        let standing = self.bounds.get_adaptive_lifo().is_some_and(stood);
        let (item, deadline) = if standing {
            let deadline = self.pop_back_stamp();
            (self.items.pop_back()?, deadline)
        } else {
            let deadline = self.pop_front_stamp();
            (self.items.pop_front()?, deadline)
        };
        self.left();
        if deadline.is_some_and(|deadline| now > deadline) {
            self.gauge.dropped(DropReason::DeadlineExceeded, 1);
            return Some(Popped::Expired(DropReason::DeadlineExceeded, item));
        }
        self.dequeued += 1;
        Some(Popped::Item(item))
    }

    /// No time bound and no deadlines: items leave oldest first, none expires.
    fn is_plain(&self) -> bool {
        self.deadlines.is_none()
            && self.bounds.get_max_age().is_none()
            && self.bounds.get_codel().is_none()
            && self.bounds.get_adaptive_lifo().is_none()
    }

    fn left(&mut self) {
        if self.items.is_empty() {
            self.busy_since = None;
        }
    }

    /// Take out the head items older than the maximum age at `now` (nobody may be
    /// reading: the queue's depth and oldest age then describe live work), counted as
    /// `Expired`, into `out`. Returns how many. A look at the head stamp when nothing
    /// is stale; nothing without a maximum age.
    pub(crate) fn expire_stale(&mut self, now: Instant, out: &mut Vec<(DropReason, T)>) -> usize {
        let Some(max_age) = self.bounds.get_max_age() else {
            return 0;
        };
        let mut n = 0;
        while let Some(&stamp) = self.stamps.front() {
            if now.saturating_duration_since(stamp) <= max_age {
                break;
            }
            self.pop_front_stamp();
            let item = self.items.pop_front().expect("a stamp has its item");
            out.push((DropReason::Expired, item));
            n += 1;
        }
        if n > 0 {
            self.left();
            self.gauge.dropped(DropReason::Expired, n as u64);
        }
        n
    }

    /// The next item to deliver at `now`, after handing every expired head item to
    /// `expired`.
    pub(crate) fn pop(
        &mut self,
        now: Instant,
        expired: &mut impl FnMut(DropReason, T),
    ) -> Option<T> {
        loop {
            match self.pop_or_expired(now)? {
                Popped::Item(item) => return Some(item),
                Popped::Expired(reason, item) => expired(reason, item),
            }
        }
    }

    /// Take up to `max` items out at `now` into `out`, in delivery order (the
    /// [`pop`](Self::pop) rules: expired head items go to `expired` and are counted,
    /// LIFO once standing). Returns how many items were delivered plus expired.
    pub(crate) fn pop_batch(
        &mut self,
        now: Instant,
        max: usize,
        out: &mut VecDeque<T>,
        expired: &mut Vec<(DropReason, T)>,
    ) -> usize {
        if self.is_plain() {
            // Nothing can expire or be served out of order: move a run in bulk. The
            // whole queue (a drain that keeps up) moves as the ring's one or two
            // slices, copied at once; the queue keeps its buffer.
            let n = max.min(self.items.len());
            if n == self.items.len() {
                out.append(&mut self.items);
                self.stamps.clear();
            } else {
                out.extend(self.items.drain(..n));
                self.stamps.drain(..n);
            }
            self.dequeued += n as u64;
            self.left();
            return n;
        }
        let (out_before, expired_before) = (out.len(), expired.len());
        while out.len() - out_before < max {
            match self.pop(now, &mut |reason, item| expired.push((reason, item))) {
                Some(item) => out.push_back(item),
                None => break,
            }
        }
        out.len() - out_before + expired.len() - expired_before
    }

    /// Take every item out (cancellation, abort), oldest first, without counting them
    /// as delivered.
    pub(crate) fn take_all(&mut self) -> impl Iterator<Item = T> + '_ {
        self.busy_since = None;
        self.stamps.clear();
        if let Some(deadlines) = &mut self.deadlines {
            deadlines.clear();
        }
        self.items.drain(..)
    }

    /// Publish this batch's depth and oldest stamp to the gauge, and its counts
    /// unless the last publication was less than a [`GRAIN`] before `now` (then they
    /// wait; see the module docs).
    pub(crate) fn flush(&mut self, now: Instant) {
        self.gauge
            .level(self.items.len(), self.stamps.front().copied());
        let batch = Counts {
            offered: std::mem::take(&mut self.offered),
            enqueued: std::mem::take(&mut self.enqueued),
            dequeued: std::mem::take(&mut self.dequeued),
        };
        if batch == Counts::default() {
            return;
        }
        let recent = self
            .published_at
            .is_some_and(|at| now.saturating_duration_since(at) < GRAIN);
        if recent {
            let (counts, at) = self.pending.get_or_insert((Counts::default(), now));
            counts.add(batch);
            *at = (*at).max(now);
            return;
        }
        self.publish();
        batch.publish(&self.gauge, now);
        self.published_at = Some(now);
    }

    /// Publish the counts that wait for their grain (see the module docs), at the
    /// instant of the flush that counted them last.
    pub(crate) fn publish(&mut self) {
        if let Some((counts, at)) = self.pending.take() {
            counts.publish(&self.gauge, at);
        }
    }
}

impl<T> Drop for TimedQueue<T> {
    /// The counts still waiting reach the gauge, which may outlive the queue.
    fn drop(&mut self) {
        self.publish();
    }
}

#[cfg(all(test, not(weir_loom)))]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::metrics::QueueMonitor;
    use crate::runtime::{Scheduler, VirtualTime};

    fn queue(capacity: usize, bounds: TimeBounds) -> (VirtualTime, TimedQueue<u32>, QueueMonitor) {
        let vt = VirtualTime::new();
        let gauge = QueueGauge::new(capacity, Arc::new(vt.clone()));
        let monitor = QueueMonitor::new(gauge.clone());
        (
            vt,
            TimedQueue::new(Capacity::items(capacity), bounds, gauge),
            monitor,
        )
    }

    /// Depth goes out at every flush; counts at most once per grain, then at the
    /// next flush a grain later, on `publish` (before a snapshot) or on drop.
    #[test]
    fn counts_reach_the_gauge_once_per_grain_and_never_get_lost() {
        let (vt, mut q, monitor) = queue(16, TimeBounds::none());
        let counts = |m: &QueueMonitor| {
            let s = m.snapshot();
            (s.enqueued, s.dequeued, s.depth)
        };
        // `after` from now, push `items` and flush.
        let arrive = |q: &mut TimedQueue<u32>, after: Duration, items: &[u32]| {
            vt.advance(after);
            for &item in items {
                q.push(item, vt.now(), None).unwrap();
            }
            q.flush(vt.now());
        };
        arrive(&mut q, Duration::ZERO, &[1]);
        assert_eq!(counts(&monitor), (1, 0, 1), "the first flush publishes");
        arrive(&mut q, GRAIN / 4, &[2, 3]);
        vt.advance(GRAIN / 4);
        let mut out = VecDeque::new();
        q.pop_batch(vt.now(), 1, &mut out, &mut Vec::new());
        q.flush(vt.now());
        assert_eq!(counts(&monitor), (1, 0, 2), "within the grain: depth only");
        q.publish();
        assert_eq!(counts(&monitor), (3, 1, 2), "published on request");
        q.publish();
        assert_eq!(counts(&monitor), (3, 1, 2), "nothing is published twice");
        arrive(&mut q, GRAIN, &[4]);
        let published_at_once = counts(&monitor);
        assert_eq!(published_at_once, (4, 1, 3), "a grain later: at once");
        arrive(&mut q, GRAIN / 2, &[5]);
        arrive(&mut q, GRAIN, &[6]);
        let held = counts(&monitor);
        assert_eq!(held, (6, 1, 5), "the held count goes out with the next");
        arrive(&mut q, GRAIN / 2, &[7]);
        assert_eq!(counts(&monitor).0, 6);
        drop(q);
        let dropped = counts(&monitor).0;
        assert_eq!(dropped, 7, "a dropped queue publishes what it held");
    }

    /// Counts held back are recorded at the instant of the flush that counted them,
    /// not at the later one that publishes them: a burst followed by a long silence
    /// does not read as a burst at the end of the silence.
    #[test]
    fn held_counts_keep_their_instant() {
        let (vt, mut q, monitor) = queue(4_096, TimeBounds::none());
        q.push(0, vt.now(), None).unwrap();
        q.flush(vt.now());
        for i in 1..1_000 {
            q.push(i, vt.now(), None).unwrap();
            q.flush(vt.now());
        }
        // A 10 s window ending 30 s later holds none of the 1,000 arrivals.
        vt.advance(Duration::from_secs(30));
        q.push(1_000, vt.now(), None).unwrap();
        q.flush(vt.now());
        let stats = monitor.snapshot_over(Duration::from_secs(10));
        assert_eq!(stats.enqueued, 1_001);
        assert!(stats.arrival_rate < 1.0, "{stats:?}");
    }

    #[test]
    fn refuses_when_full_and_evicts_the_oldest_on_request() {
        let (vt, mut q, monitor) = queue(2, TimeBounds::none());
        let now = vt.now();
        assert_eq!(q.push(1, now, None), Ok(()));
        assert_eq!(q.push(2, now, None), Ok(()));
        assert_eq!(q.push(3, now, None), Err(3));
        assert_eq!(q.push_evicting(4, now, None), Some(1));
        assert_eq!(q.len(), 2);
        q.flush(now);
        let stats = monitor.snapshot();
        assert_eq!((stats.depth, stats.enqueued), (2, 3));
        let mut none = |_, _| panic!("nothing expires");
        assert_eq!(q.pop(now, &mut none), Some(2));
        assert_eq!(q.pop(now, &mut none), Some(4));
        assert_eq!(q.pop(now, &mut none), None);
    }

    #[test]
    fn expired_items_are_dropped_at_dequeue_and_counted() {
        let (vt, mut q, monitor) = queue(8, TimeBounds::none().max_age(Duration::from_secs(1)));
        for i in 0..3 {
            q.push(i, vt.now(), None).unwrap();
        }
        vt.advance(Duration::from_millis(800));
        q.push(3, vt.now(), None).unwrap();
        vt.advance(Duration::from_millis(300));
        q.flush(vt.now());
        assert_eq!(
            monitor.snapshot().oldest_age,
            Some(Duration::from_millis(1_100))
        );
        let mut expired = Vec::new();
        assert_eq!(q.pop(vt.now(), &mut |r, i| expired.push((r, i))), Some(3));
        assert_eq!(expired, [0, 1, 2].map(|i| (DropReason::Expired, i)));
        q.flush(vt.now());
        // Within a grain of the first flush: the owner publishes before a snapshot.
        q.publish();
        let stats = monitor.snapshot();
        assert_eq!(stats.dropped(DropReason::Expired), 3);
        assert_eq!(
            (stats.depth, stats.dequeued, stats.oldest_age),
            (0, 1, None)
        );
    }

    #[test]
    fn a_standing_queue_serves_newest_first_until_it_empties() {
        let (vt, mut q, _) = queue(
            8,
            TimeBounds::none().adaptive_lifo(Duration::from_millis(100)),
        );
        let mut none = |_, _| panic!("nothing expires");
        q.push(1, vt.now(), None).unwrap();
        q.push(2, vt.now(), None).unwrap();
        assert_eq!(q.pop(vt.now(), &mut none), Some(1), "FIFO while young");
        vt.advance(Duration::from_millis(100));
        q.push(3, vt.now(), None).unwrap();
        assert_eq!(q.pop(vt.now(), &mut none), Some(3), "LIFO once standing");
        assert_eq!(q.pop(vt.now(), &mut none), Some(2));
        q.push(4, vt.now(), None).unwrap();
        q.push(5, vt.now(), None).unwrap();
        assert_eq!(
            q.pop(vt.now(), &mut none),
            Some(4),
            "FIFO again after emptying"
        );
    }

    /// CoDel (target 5 ms, interval 100 ms): while the queue empties now and then an
    /// item may wait up to the interval; once it has stood non-empty for an interval,
    /// items past the target are dropped at the head, counted as `CoDel`.
    #[test]
    fn codel_allows_the_interval_to_a_burst_and_the_target_to_a_standing_queue() {
        let (target, interval) = (Duration::from_millis(5), Duration::from_millis(100));
        let (vt, mut q, monitor) = queue(64, TimeBounds::none().codel(target, interval));
        let mut dropped = Vec::new();
        // A burst: 3 items, served 50 ms later (queue non-empty 50 ms < interval).
        for i in 0..3 {
            q.push(i, vt.now(), None).unwrap();
        }
        vt.advance(Duration::from_millis(50));
        let mut take = |q: &mut TimedQueue<u32>, now| q.pop(now, &mut |r, i| dropped.push((r, i)));
        assert_eq!(take(&mut q, vt.now()), Some(0), "within the interval");
        assert_eq!(take(&mut q, vt.now()), Some(1));
        // 3 arrives at 93 ms and 4 at 100 ms: the queue (2 in it since 0 ms) has then
        // stood non-empty for the interval, so 2 (100 ms) and 3 (7 ms) are past the
        // target; 4 is served.
        vt.advance(Duration::from_millis(43));
        q.push(3, vt.now(), None).unwrap();
        vt.advance(Duration::from_millis(7));
        q.push(4, vt.now(), None).unwrap();
        assert_eq!(take(&mut q, vt.now()), Some(4));
        assert_eq!(take(&mut q, vt.now()), None);
        // Empty again: a new burst may wait up to the interval.
        q.push(6, vt.now(), None).unwrap();
        vt.advance(Duration::from_millis(99));
        assert_eq!(take(&mut q, vt.now()), Some(6));
        assert_eq!(dropped, [(DropReason::CoDel, 2), (DropReason::CoDel, 3)]);
        q.flush(vt.now());
        let stats = monitor.snapshot();
        assert_eq!(stats.dropped(DropReason::CoDel), 2);
        assert_eq!(stats.dropped(DropReason::Expired), 0);
        assert_eq!((stats.depth, stats.dequeued), (0, 4));
    }

    /// CoDel with adaptive LIFO: a standing queue serves its newest item first and
    /// sheds the items at the head that are past the target; with a maximum age too,
    /// an item past it is `Expired` first.
    #[test]
    fn codel_sheds_the_head_while_adaptive_lifo_serves_the_tail() {
        let bounds = TimeBounds::none()
            .max_age(Duration::from_millis(150))
            .codel(Duration::from_millis(5), Duration::from_millis(100))
            .adaptive_lifo(Duration::from_millis(100));
        let (vt, mut q, _) = queue(64, bounds);
        let mut dropped = Vec::new();
        for i in 0..4 {
            q.push(i, vt.now(), None).unwrap();
            vt.advance(Duration::from_millis(50));
        }
        // At 200 ms: 0 waited 200 ms (past the maximum age), 1 150 ms, 2 100 ms,
        // 3 50 ms (all past the target); 4 and 5 arrive now.
        q.push(4, vt.now(), None).unwrap();
        q.push(5, vt.now(), None).unwrap();
        let mut take = |q: &mut TimedQueue<u32>| q.pop(vt.now(), &mut |r, i| dropped.push((r, i)));
        assert_eq!(take(&mut q), Some(5), "the newest, served fresh");
        assert_eq!(take(&mut q), Some(4));
        assert_eq!(take(&mut q), None, "the rest are past the target");
        assert_eq!(
            dropped,
            [
                (DropReason::Expired, 0),
                (DropReason::CoDel, 1),
                (DropReason::CoDel, 2),
                (DropReason::CoDel, 3),
            ]
        );
    }

    #[test]
    fn codel_refuses_zero_and_inverted_settings_with_the_values() {
        let panics = |f: fn() -> TimeBounds| {
            let error = std::panic::catch_unwind(f).expect_err("refused");
            error.downcast_ref::<String>().cloned().unwrap_or_default()
        };
        let ms = Duration::from_millis;
        assert!(
            panics(|| TimeBounds::none().codel(Duration::ZERO, Duration::from_millis(100)))
                .contains("must be greater than zero")
        );
        assert!(
            panics(|| TimeBounds::none().codel(Duration::from_millis(5), Duration::ZERO))
                .contains("must be greater than zero")
        );
        assert!(panics(
            || TimeBounds::none().codel(Duration::from_millis(100), Duration::from_millis(100))
        )
        .contains("must be below interval"));
        // The extremes that make sense are accepted: an interval that never ends.
        let bounds = TimeBounds::none().codel(ms(5), Duration::MAX);
        assert_eq!(bounds.get_codel(), Some((ms(5), Duration::MAX)));
        let (vt, mut q, _) = queue(4, bounds);
        q.push(1, vt.now(), None).unwrap();
        vt.advance(Duration::from_secs(3_600));
        assert_eq!(
            q.pop(vt.now(), &mut |_, _| panic!("never dropped")),
            Some(1)
        );
    }

    /// At capacity 1, replacing or evicting the only item does not restart the
    /// standing clock: a queue replaced every 50 ms has stood since its first item,
    /// so CoDel (5 ms, 100 ms) drops one that waited 10 ms at 160 ms.
    #[test]
    fn replacing_the_only_item_keeps_the_queue_standing() {
        let bounds = TimeBounds::none().codel(Duration::from_millis(5), Duration::from_millis(100));
        for evict in [false, true] {
            let (vt, mut q, _) = queue(1, bounds);
            q.push(0, vt.now(), None).unwrap();
            for i in 1..4 {
                vt.advance(Duration::from_millis(50));
                let out = if evict {
                    q.push_evicting(i, vt.now(), None)
                } else {
                    q.replace_newest(i, vt.now(), None)
                };
                assert_eq!(out, Some(i - 1));
            }
            vt.advance(Duration::from_millis(10));
            assert_eq!(
                q.pop_or_expired(vt.now()),
                Some(Popped::Expired(DropReason::CoDel, 3)),
                "evict: {evict}"
            );
        }
    }

    #[test]
    fn replace_newest_swaps_the_tail_and_counts_an_arrival() {
        let (vt, mut q, monitor) = queue(2, TimeBounds::none());
        let now = vt.now();
        assert_eq!(
            q.replace_newest(1, now, None),
            None,
            "empty: a plain append"
        );
        q.push(2, now, None).unwrap();
        assert_eq!(q.replace_newest(3, now, None), Some(2));
        q.flush(now);
        let stats = monitor.snapshot();
        assert_eq!((stats.depth, stats.enqueued), (2, 3));
        let mut none = |_, _| panic!("nothing expires");
        assert_eq!(q.pop(now, &mut none), Some(1));
        assert_eq!(q.pop(now, &mut none), Some(3));
    }

    /// A plain queue moves a part item by item and the whole queue at once (its one
    /// or two slices, across the ring's wrap); either way in order, the stamps going
    /// with the items.
    #[test]
    fn pop_batch_of_a_plain_queue_moves_parts_and_wholes_in_order() {
        let (vt, mut q, monitor) = queue(8, TimeBounds::none());
        let mut out = VecDeque::new();
        for i in 0..6 {
            q.push(i, vt.now(), None).unwrap();
        }
        assert_eq!(q.pop_batch(vt.now(), 4, &mut out, &mut Vec::new()), 4);
        assert_eq!(out.drain(..).collect::<Vec<_>>(), [0, 1, 2, 3]);
        vt.advance(Duration::from_millis(5));
        for i in 6..12 {
            q.push(i, vt.now(), None).unwrap();
        }
        assert_eq!(q.len(), 8);
        assert_eq!(q.pop_batch(vt.now(), 100, &mut out, &mut Vec::new()), 8);
        assert_eq!(
            out.drain(..).collect::<Vec<_>>(),
            (4..12).collect::<Vec<_>>()
        );
        assert!(q.is_empty());
        q.flush(vt.now());
        let stats = monitor.snapshot();
        assert_eq!(
            (stats.depth, stats.oldest_age, stats.dequeued),
            (0, None, 12)
        );
        // Refilled to capacity after moving whole, it serves in order again.
        for i in 0..8 {
            q.push(i, vt.now(), None).unwrap();
        }
        assert_eq!(q.pop_batch(vt.now(), 8, &mut out, &mut Vec::new()), 8);
        assert_eq!(
            out.into_iter().collect::<Vec<_>>(),
            (0..8).collect::<Vec<_>>()
        );
    }

    /// A run comes in as a part (the oldest `n` of a step, the rest left behind) or as
    /// the whole step (moved as a block), across the ring's wrap, stamped with its
    /// instant, counted as offered and enqueued, and served in order.
    #[test]
    fn push_run_moves_parts_and_wholes_in_order_with_their_stamp() {
        let (vt, mut q, monitor) = queue(8, TimeBounds::none());
        let mut out = VecDeque::new();
        for i in 0..5 {
            q.push(i, vt.now(), None).unwrap();
        }
        assert_eq!(q.pop_batch(vt.now(), 5, &mut out, &mut Vec::new()), 5);
        out.clear();
        // The ring's head is now past its middle: the runs wrap.
        let mut step: VecDeque<u32> = (100..106).collect();
        assert_eq!(q.push_run(&mut step, 2, vt.now()), 2);
        assert_eq!(step, [102, 103, 104, 105], "the part left behind");
        vt.advance(Duration::from_millis(7));
        assert_eq!(q.push_run(&mut step, 4, vt.now()), 4);
        assert!(step.is_empty(), "the whole step moved");
        assert_eq!(q.push_run(&mut step, 0, vt.now()), 0);
        assert_eq!(q.len(), 6);
        q.flush(vt.now());
        let stats = monitor.snapshot();
        assert_eq!(stats.depth, 6);
        assert_eq!(stats.oldest_age, Some(Duration::from_millis(7)));
        assert_eq!(q.pop_batch(vt.now(), 8, &mut out, &mut Vec::new()), 6);
        assert_eq!(out, [100, 101, 102, 103, 104, 105]);
        q.flush(vt.now());
        q.publish();
        let stats = monitor.snapshot();
        assert_eq!((stats.enqueued, stats.dequeued), (11, 11));
    }

    #[test]
    fn pop_batch_takes_at_most_max_and_hands_out_expired_items() {
        let (vt, mut q, monitor) = queue(16, TimeBounds::none().max_age(Duration::from_secs(1)));
        for i in 0..4 {
            q.push(i, vt.now(), None).unwrap();
        }
        vt.advance(Duration::from_secs(2));
        for i in 4..10 {
            q.push(i, vt.now(), None).unwrap();
        }
        let (mut out, mut expired) = (VecDeque::new(), Vec::new());
        assert_eq!(q.pop_batch(vt.now(), 3, &mut out, &mut expired), 7);
        assert_eq!(out, [4, 5, 6]);
        assert_eq!(expired, [0, 1, 2, 3].map(|i| (DropReason::Expired, i)));
        out.clear();
        assert_eq!(q.pop_batch(vt.now(), 10, &mut out, &mut expired), 3);
        assert_eq!(out, [7, 8, 9]);
        q.flush(vt.now());
        let stats = monitor.snapshot();
        assert_eq!(
            (
                stats.dequeued,
                stats.dropped(DropReason::Expired),
                stats.depth
            ),
            (6, 4, 0)
        );
    }

    #[test]
    fn the_ring_never_grows_past_the_capacity() {
        let (vt, mut q, _) = queue(1_500, TimeBounds::none());
        for i in 0..1_500 {
            q.push(i, vt.now(), None).unwrap();
        }
        assert_eq!(q.push(0, vt.now(), None), Err(0));
        assert!(q.items.capacity() < 2_048, "{} slots", q.items.capacity());
        assert!(q.items.capacity() >= 1_500);
    }

    /// Deadlines travel with their items through every way in and out: push, evict,
    /// replace, refresh, FIFO and LIFO takes; a dead item is dropped when taken out.
    #[test]
    fn deadlines_stay_with_their_items() {
        let (vt, q, monitor) = queue(3, TimeBounds::none());
        let mut q = q.with_deadlines(true);
        let t0 = vt.now();
        let soon = Some(t0 + Duration::from_millis(10));
        let late = Some(t0 + Duration::from_secs(10));
        q.push(1, t0, soon).unwrap();
        q.push(2, t0, late).unwrap();
        q.push(3, t0, None).unwrap();
        assert_eq!(q.push_evicting(4, t0, soon), Some(1)); // 2 (late), 3, 4 (soon)
        assert_eq!(q.replace_newest(5, t0, soon), Some(4)); // 2, 3, 5 (soon)
        q.items_mut().pop_front();
        q.items_mut().push_back(6);
        q.evicted_oldest(t0, None); // 3, 5 (soon), 6
        *q.items_mut().back_mut().unwrap() = 7;
        q.refreshed_newest(t0, soon); // 3, 5 (soon), 7 (soon)
        vt.advance(Duration::from_millis(20));
        let (mut out, mut dropped) = (VecDeque::new(), Vec::new());
        q.pop_batch(vt.now(), 10, &mut out, &mut dropped);
        assert_eq!(out, [3]);
        assert_eq!(dropped, [5, 7].map(|i| (DropReason::DeadlineExceeded, i)));
        assert_eq!(monitor.snapshot().dropped(DropReason::DeadlineExceeded), 2);
        assert!(q.deadlines.as_ref().unwrap().is_empty());
    }

    #[test]
    fn a_queue_without_deadlines_keeps_none() {
        let (vt, mut q, _) = queue(2, TimeBounds::none());
        let past = Some(vt.now());
        q.push(1, vt.now(), past).unwrap();
        vt.advance(Duration::from_secs(1));
        assert_eq!(q.pop(vt.now(), &mut |_, _| panic!("not dropped")), Some(1));
        assert!(q.deadlines.is_none());
    }
}
