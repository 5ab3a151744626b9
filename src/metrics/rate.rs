//! A rate over a window of time that holds for batch-polling consumers.
//!
//! # Algorithm
//!
//! The queue records `(n items, at instant t)` once per batch. Records at the same
//! instant are one *event*. The estimator keeps, per bucket of [`BUCKET`] of time, the
//! bucket's first event (instant and items), its last instant and its total, in a ring
//! of buckets that covers [`MAX_RATE_WINDOW`].
//!
//! The rate over a window `W` at `now` looks at the buckets that saw an event after
//! `now − W` (whole buckets: the window reaches back up to one bucket further). With
//! `t₁` the first of those events, `c₁` its items, `tₙ` the last event and `S` the
//! items of all of them:
//!
//! * the measured interval starts at `max(b, min(now − W, t₁))`, where `b` is the
//!   event before `t₁` (the last one the ring holds before the window, or the
//!   estimator's creation when it holds none). The items of an event are what arrived
//!   since the event before it, so the interval holds `S − c₁` plus the share of `c₁`
//!   that falls inside it, `c₁ · (t₁ − start) / (t₁ − b)`: a poller whose previous
//!   poll lies before the window counts its first batch pro rata, and a flow that
//!   starts after a long silence is not averaged over the silence;
//! * the interval ends at `tₙ`, unless the next event is overdue: with `g` the mean gap
//!   between events (`(tₙ − t₁) / (events − 1)`, or `t₁ − b` for one event), it ends
//!   at `max(tₙ, now − g)`;
//! * rate = items / (end − start).
//!
//! A consumer that takes 500 items every 250 ms therefore reads exactly 2,000/s at
//! every instant, between its polls as well as at them: the time since its last poll
//! counts only once it exceeds its usual gap. So does one that polls every 8 s with a
//! window of 10 s; one whose polls are further apart than the window reads 0 between
//! them (choose a window longer than the polling period). One that stops reads a
//! rate that falls as `1 / elapsed`, and 0 once a whole window has passed without an
//! event. Items arriving evenly read their rate whatever the window. The window's
//! length decides how far back the average reaches: a window of several polling
//! periods (the default, [`RATE_WINDOW`], is 10 s) averages over whole periods, a
//! one-minute window is what dashboards show.

use std::time::{Duration, Instant};

/// The default window of a queue's arrival and drain rates
/// ([`QueueMonitor::snapshot`](super::QueueMonitor::snapshot)): long enough to
/// average over the polls of consumers that take work in batches.
pub const RATE_WINDOW: Duration = Duration::from_secs(10);

/// The longest window a rate can be read over
/// ([`QueueMonitor::snapshot_over`](super::QueueMonitor::snapshot_over)).
pub const MAX_RATE_WINDOW: Duration = Duration::from_secs(60);

/// The time each bucket of the ring covers.
const BUCKET: Duration = Duration::from_secs(2);

/// Buckets in the ring: the longest window and the bucket it starts in.
const BUCKETS: usize = (MAX_RATE_WINDOW.as_secs() / BUCKET.as_secs()) as usize + 1;

/// One bucket's events, instants in nanoseconds since the estimator's creation.
#[derive(Clone, Copy, Debug, Default)]
struct Bucket {
    /// Which bucket of time this is (nanoseconds since creation / bucket length);
    /// the slot holds a stale bucket when this is not the one its instants fall in.
    epoch: u64,
    first_at: u64,
    first_items: u64,
    last_at: u64,
    items: u64,
    /// Distinct instants recorded.
    events: u64,
}

/// A rate over a window of recent events (see the module docs).
#[derive(Debug)]
pub(crate) struct WindowedRate {
    origin: Instant,
    /// The ring, allocated at the first event.
    buckets: Vec<Bucket>,
    /// The latest event's instant (records are kept in order: an instant before it
    /// counts as it).
    latest: Option<u64>,
}

impl WindowedRate {
    /// An estimator created at `origin` (no events yet: rate 0).
    pub(crate) fn new(origin: Instant) -> Self {
        WindowedRate {
            origin,
            buckets: Vec::new(),
            latest: None,
        }
    }

    fn nanos(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.origin).as_nanos()).unwrap_or(u64::MAX)
    }

    /// `n` items at `now`.
    pub(crate) fn record(&mut self, n: u64, now: Instant) {
        if n == 0 {
            return;
        }
        let at = self.nanos(now).max(self.latest.unwrap_or(0));
        self.latest = Some(at);
        if self.buckets.is_empty() {
            self.buckets = vec![Bucket::default(); BUCKETS];
        }
        let epoch = at / bucket_nanos();
        let slot = &mut self.buckets[(epoch % BUCKETS as u64) as usize];
        if slot.epoch != epoch || slot.items == 0 {
            *slot = Bucket {
                epoch,
                first_at: at,
                first_items: n,
                last_at: at,
                items: n,
                events: 1,
            };
            return;
        }
        if slot.first_at == at {
            slot.first_items += n;
        }
        if slot.last_at != at {
            slot.events += 1;
        }
        slot.last_at = at;
        slot.items += n;
    }

    /// Items per second over the `window` before `now` (clamped to
    /// `BUCKET..=MAX_RATE_WINDOW`).
    pub(crate) fn rate(&self, now: Instant, window: Duration) -> f64 {
        let window = window.clamp(BUCKET, MAX_RATE_WINDOW);
        let now = self.nanos(now).max(self.latest.unwrap_or(0));
        let from = now.saturating_sub(duration_nanos(window));
        let (from_epoch, now_epoch) = (from / bucket_nanos(), now / bucket_nanos());
        // The buckets in the window, oldest first.
        let mut first: Option<Bucket> = None;
        let mut last_at = 0;
        let mut items = 0u64;
        let mut events = 0u64;
        for epoch in from_epoch..=now_epoch {
            let Some(bucket) = self.bucket(epoch).filter(|b| b.last_at > from) else {
                continue;
            };
            if first.is_none() {
                first = Some(*bucket);
            }
            last_at = last_at.max(bucket.last_at);
            items += bucket.items;
            events += bucket.events;
        }
        let Some(first) = first else {
            return 0.0;
        };
        // The event before the window's first, if the ring still holds it (else the
        // creation): the first event's items arrived since then.
        let oldest_held = now_epoch.saturating_sub(BUCKETS as u64 - 1);
        let before = (oldest_held..first.epoch)
            .rev()
            .find_map(|epoch| self.bucket(epoch))
            .map_or(0, |b| b.last_at);
        let t1 = first.first_at;
        let start = before.max(from.min(t1));
        // The share of the first event's items that arrived after `start`.
        let share = if t1 > before {
            (t1 - start) as f64 / (t1 - before) as f64
        } else {
            0.0
        };
        let counted = (items - first.first_items) as f64 + first.first_items as f64 * share;
        let gap = if events > 1 {
            (last_at - t1) / (events - 1)
        } else {
            t1 - before
        };
        let end = last_at.max(now.saturating_sub(gap));
        if end <= start {
            return 0.0;
        }
        counted / ((end - start) as f64 / 1e9)
    }

    /// The ring's bucket for `epoch`, if it holds events of that epoch.
    fn bucket(&self, epoch: u64) -> Option<&Bucket> {
        self.buckets
            .get((epoch % BUCKETS as u64) as usize)
            .filter(|b| b.epoch == epoch && b.items > 0)
    }
}

fn bucket_nanos() -> u64 {
    duration_nanos(BUCKET)
}

fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(all(test, not(weir_loom)))]
mod tests {
    use super::*;

    fn at(origin: Instant, ms: u64) -> Instant {
        origin + Duration::from_millis(ms)
    }

    /// `items` every `period_ms` until `end_ms`; the rate over `window` read every
    /// 10 ms from `from_ms` on: the worst relative error of a reading.
    fn worst_error(items: u64, period_ms: u64, from_ms: u64, end_ms: u64, window: Duration) -> f64 {
        let origin = Instant::now();
        let mut rate = WindowedRate::new(origin);
        let truth = items as f64 * 1000.0 / period_ms as f64;
        let mut worst = 0.0f64;
        let mut next = period_ms;
        for ms in (0..=end_ms).step_by(10) {
            if ms == next {
                rate.record(items, at(origin, ms));
                next += period_ms;
            }
            if ms >= from_ms {
                let read = rate.rate(at(origin, ms), window);
                worst = worst.max((read - truth).abs() / truth);
            }
        }
        worst
    }

    #[test]
    fn batch_pollers_read_their_rate_between_polls_as_well_as_at_them() {
        for window in [RATE_WINDOW, MAX_RATE_WINDOW] {
            let from = duration_nanos(window) / 1_000_000 + 2_000;
            // 500 every 250 ms and 2,000 every second: 2,000/s.
            assert!(worst_error(500, 250, from, 150_000, window) < 1e-9);
            assert!(worst_error(2_000, 1_000, from, 150_000, window) < 1e-9);
            // Even arrivals, 20 every 10 ms.
            assert!(worst_error(20, 10, from, 150_000, window) < 1e-9);
        }
        // Polls almost a window apart, once one poll went before the window: 8,000
        // every 8 s over 10 s, 1,500 every 1.5 s over 2 s (the shortest window).
        assert!(worst_error(8_000, 8_000, 18_000, 150_000, RATE_WINDOW) < 1e-9);
        assert!(worst_error(1_500, 1_500, 3_000, 150_000, Duration::ZERO) < 1e-9);
    }

    #[test]
    fn a_flow_that_starts_after_a_silence_is_not_averaged_over_the_silence() {
        let origin = Instant::now();
        let mut rate = WindowedRate::new(origin);
        // One batch at 1 s, then 10 every 10 ms (1,000/s) from 50 s.
        rate.record(100, at(origin, 1_000));
        for ms in (50_010..=51_000).step_by(10) {
            rate.record(10, at(origin, ms));
        }
        let now = at(origin, 51_000);
        // Over 10 s: the 1,000 items of the last second, 100/s (averaged over the 49 s
        // of silence it read 22/s). Over 2 s: 500/s. Within 2 %: the first batch's
        // items are counted pro rata over the silence before it.
        let ten = rate.rate(now, RATE_WINDOW);
        assert!((ten - 100.0).abs() < 2.0, "{ten}");
        let two = rate.rate(now, Duration::ZERO);
        assert!((two - 500.0).abs() < 10.0, "{two}");
        // Once the flow fills the window: its rate.
        for ms in (51_010..=61_000).step_by(10) {
            rate.record(10, at(origin, ms));
        }
        let full = rate.rate(at(origin, 61_000), RATE_WINDOW);
        assert!((full - 1_000.0).abs() < 1e-6, "{full}");
    }

    #[test]
    fn polls_further_apart_than_the_window_read_zero_between_them() {
        let origin = Instant::now();
        let mut rate = WindowedRate::new(origin);
        for s in 1..=4 {
            rate.record(15_000, at(origin, s * 15_000));
        }
        let just_after = rate.rate(at(origin, 60_000), RATE_WINDOW);
        assert!((just_after - 1_000.0).abs() < 1e-9, "{just_after}");
        assert_eq!(rate.rate(at(origin, 71_000), RATE_WINDOW), 0.0);
    }

    #[test]
    fn a_stopped_consumer_reads_a_falling_rate_then_zero() {
        let origin = Instant::now();
        let mut rate = WindowedRate::new(origin);
        for s in 1..=20 {
            rate.record(1_000, at(origin, s * 1_000));
        }
        let steady = rate.rate(at(origin, 20_500), RATE_WINDOW);
        assert!((steady - 1_000.0).abs() < 1e-6, "{steady}");
        let mut previous = steady;
        for s in [22, 25, 28, 31] {
            let read = rate.rate(at(origin, s * 1_000), RATE_WINDOW);
            assert!(read < previous, "{read} after {previous} at {s} s");
            previous = read;
        }
        assert_eq!(rate.rate(at(origin, 33_000), RATE_WINDOW), 0.0);
    }

    #[test]
    fn one_event_counts_over_the_window_and_nothing_reads_zero() {
        let origin = Instant::now();
        let mut rate = WindowedRate::new(origin);
        assert_eq!(rate.rate(at(origin, 5_000), RATE_WINDOW), 0.0);
        rate.record(100, at(origin, 100));
        // Created 100 ms before the only event.
        assert_eq!(rate.rate(at(origin, 100), RATE_WINDOW), 1_000.0);
        // Records in the same instant are one event; an instant before the latest
        // counts as the latest.
        rate.record(100, at(origin, 100));
        rate.record(100, at(origin, 50));
        assert_eq!(rate.rate(at(origin, 100), RATE_WINDOW), 3_000.0);
    }

    #[test]
    fn extreme_windows_are_clamped() {
        let origin = Instant::now();
        let mut rate = WindowedRate::new(origin);
        // 1,000/s for a minute, then 2,000/s for a minute.
        for ms in (10..=120_000).step_by(10) {
            rate.record(if ms <= 60_000 { 10 } else { 20 }, at(origin, ms));
        }
        let now = at(origin, 120_000);
        // Over 2 s (the shortest window) and a minute (the longest): 2,000/s, where
        // two minutes would read 1,500/s.
        for window in [Duration::ZERO, Duration::from_nanos(1), Duration::MAX] {
            let read = rate.rate(now, window);
            assert!((read - 2_000.0).abs() < 2.0, "{window:?}: {read}");
        }
        // An instant far beyond the ring's reach reads zero, without overflow.
        assert_eq!(
            rate.rate(origin + Duration::from_secs(1 << 40), RATE_WINDOW),
            0.0
        );
    }
}
