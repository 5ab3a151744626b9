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
//! adaptive-LIFO interval it serves from the tail until it empties.
//!
//! Statistics are gathered in plain fields and published to the [`QueueGauge`] by
//! [`flush`](TimedQueue::flush), which the owner calls once per batch.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use super::{Capacity, TimeBounds};
use crate::metrics::QueueGauge;
use crate::DropReason;

pub(crate) struct TimedQueue<T> {
    items: VecDeque<(Instant, T)>,
    capacity: usize,
    bounds: TimeBounds,
    /// When the queue last went from empty to non-empty.
    busy_since: Option<Instant>,
    gauge: Arc<QueueGauge>,
    offered: u64,
    enqueued: u64,
    dequeued: u64,
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
        TimedQueue {
            // Grows to at most `capacity`; never preallocates a large capacity up front.
            items: VecDeque::with_capacity(capacity.get().min(1024)),
            capacity: capacity.get(),
            bounds,
            busy_since: None,
            gauge,
            offered: 0,
            enqueued: 0,
            dequeued: 0,
        }
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

    /// Append `item` stamped `now`, or hand it back if the queue is full.
    pub(crate) fn push(&mut self, item: T, now: Instant) -> Result<(), T> {
        self.offered += 1;
        if self.is_full() {
            return Err(item);
        }
        self.append(item, now);
        Ok(())
    }

    /// Append `item` stamped `now`; if the queue is full, first take out the oldest
    /// item and return it (the caller reports it as `OverflowOldest`).
    pub(crate) fn push_evicting(&mut self, item: T, now: Instant) -> Option<T> {
        self.offered += 1;
        let evicted = if self.is_full() {
            self.items.pop_front().map(|(_, old)| old)
        } else {
            None
        };
        self.append(item, now);
        evicted
    }

    /// Count an arrival that was refused or dropped without entering the queue.
    pub(crate) fn offered_elsewhere(&mut self, n: u64) {
        self.offered += n;
    }

    fn append(&mut self, item: T, now: Instant) {
        if self.items.is_empty() {
            self.busy_since = Some(now);
        }
        self.items.push_back((now, item));
        self.enqueued += 1;
    }

    /// The next item to deliver at `now`, after handing every expired head item to
    /// `expired`. LIFO once the queue has stood for the adaptive-LIFO interval.
    pub(crate) fn pop(&mut self, now: Instant, expired: &mut impl FnMut(T)) -> Option<T> {
        if let Some(max_age) = self.bounds.get_max_age() {
            let mut n = 0;
            while let Some((stamp, _)) = self.items.front() {
                if now.saturating_duration_since(*stamp) <= max_age {
                    break;
                }
                let (_, item) = self.items.pop_front().expect("front exists");
                n += 1;
                expired(item);
            }
            if n > 0 {
                self.gauge.dropped(DropReason::Expired, n);
            }
        }
        let standing = match (self.bounds.get_adaptive_lifo(), self.busy_since) {
            (Some(interval), Some(since)) => now.saturating_duration_since(since) >= interval,
            _ => false,
        };
        let popped = if standing {
            self.items.pop_back()
        } else {
            self.items.pop_front()
        };
        if self.items.is_empty() {
            self.busy_since = None;
        }
        popped.map(|(_, item)| {
            self.dequeued += 1;
            item
        })
    }

    /// Take every item out (cancellation, abort), oldest first, without counting them
    /// as delivered.
    pub(crate) fn take_all(&mut self) -> impl Iterator<Item = T> + '_ {
        self.busy_since = None;
        self.items.drain(..).map(|(_, item)| item)
    }

    /// Publish this batch's counters, depth and oldest stamp to the gauge.
    pub(crate) fn flush(&mut self, now: Instant) {
        if self.offered > 0 {
            self.gauge.offered(std::mem::take(&mut self.offered), now);
        }
        if self.enqueued > 0 {
            self.gauge.enqueued(std::mem::take(&mut self.enqueued));
        }
        if self.dequeued > 0 {
            self.gauge.dequeued(std::mem::take(&mut self.dequeued), now);
        }
        self.gauge.level(
            self.items.len(),
            self.items.front().map(|(stamp, _)| *stamp),
        );
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

    #[test]
    fn refuses_when_full_and_evicts_the_oldest_on_request() {
        let (vt, mut q, monitor) = queue(2, TimeBounds::none());
        let now = vt.now();
        assert_eq!(q.push(1, now), Ok(()));
        assert_eq!(q.push(2, now), Ok(()));
        assert_eq!(q.push(3, now), Err(3));
        assert_eq!(q.push_evicting(4, now), Some(1));
        assert_eq!(q.len(), 2);
        q.flush(now);
        let stats = monitor.snapshot();
        assert_eq!((stats.depth, stats.enqueued), (2, 3));
        let mut none = |_| panic!("nothing expires");
        assert_eq!(q.pop(now, &mut none), Some(2));
        assert_eq!(q.pop(now, &mut none), Some(4));
        assert_eq!(q.pop(now, &mut none), None);
    }

    #[test]
    fn expired_items_are_dropped_at_dequeue_and_counted() {
        let (vt, mut q, monitor) = queue(8, TimeBounds::none().max_age(Duration::from_secs(1)));
        for i in 0..3 {
            q.push(i, vt.now()).unwrap();
        }
        vt.advance(Duration::from_millis(800));
        q.push(3, vt.now()).unwrap();
        vt.advance(Duration::from_millis(300));
        q.flush(vt.now());
        assert_eq!(
            monitor.snapshot().oldest_age,
            Some(Duration::from_millis(1_100))
        );
        let mut expired = Vec::new();
        assert_eq!(q.pop(vt.now(), &mut |i| expired.push(i)), Some(3));
        assert_eq!(expired, [0, 1, 2]);
        q.flush(vt.now());
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
        let mut none = |_| panic!("nothing expires");
        q.push(1, vt.now()).unwrap();
        q.push(2, vt.now()).unwrap();
        assert_eq!(q.pop(vt.now(), &mut none), Some(1), "FIFO while young");
        vt.advance(Duration::from_millis(100));
        q.push(3, vt.now()).unwrap();
        assert_eq!(q.pop(vt.now(), &mut none), Some(3), "LIFO once standing");
        assert_eq!(q.pop(vt.now(), &mut none), Some(2));
        q.push(4, vt.now()).unwrap();
        q.push(5, vt.now()).unwrap();
        assert_eq!(
            q.pop(vt.now(), &mut none),
            Some(4),
            "FIFO again after emptying"
        );
    }
}
