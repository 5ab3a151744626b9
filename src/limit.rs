//! Concurrency limits for async stages: how many calls may run at once, fixed or
//! adapted to the latency the calls see.
//!
//! A [`Limiter`] is asked for its limit before a stage starts calls, and told the
//! round-trip time of every call that finished. [`map_async`] and its forms take one
//! with [`MapAsync::limit`], and `flat_map` with [`FlatMap::limit`] (a call is then an
//! inner publisher, from its subscribe to its completion): the stage then starts a
//! call only while fewer than the limit run, and asks upstream only for that many, so
//! items over the limit wait upstream (as demand not yet given), never in a queue of
//! the stage.
//!
//! * [`Fixed`]: a constant limit.
//! * [`Aimd`]: additive increase, multiplicative decrease. The limit grows by one per
//!   limit's worth of calls that finished within `slow` while the stage used the
//!   whole limit, and is cut by `backoff` when a call took longer.
//! * [`Gradient`]: the limit follows the ratio of the no-load latency to the latency
//!   seen. The no-load latency is the smallest round trip seen since the last
//!   windows: the smallest round trip of the current window of `probe_every` samples
//!   and of the one before, so a dependency that became slower for good is taken as
//!   its new normal after at most two windows. Each sample
//!   moves the limit towards `gradient × limit + headroom`, where
//!   `gradient = clamp(tolerance × no_load / sample, 0.5, 1)` and
//!   `headroom = sqrt(limit)`, smoothed, within `min..=max`; it does not grow while
//!   fewer than half of it run, and round trips of zero carry no information.
//!
//! [`map_async`]: crate::PublisherExt::map_async
//! [`MapAsync::limit`]: crate::operators::MapAsync::limit
//! [`FlatMap::limit`]: crate::operators::FlatMap::limit

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Makes each subscription's limiter: a stage's `limit(limiter)` keeps one, and every
/// subscription gets a clone of the limiter from it.
pub(crate) type MakeLimiter = Arc<dyn Fn() -> Box<dyn Limiter> + Send + Sync>;

/// The [`MakeLimiter`] that clones `limiter`.
pub(crate) fn maker<L: Limiter + Clone + Sync>(limiter: L) -> MakeLimiter {
    Arc::new(move || Box::new(limiter.clone()))
}

/// Decides how many calls may run at once (see the [module docs](self)).
pub trait Limiter: Send + 'static {
    /// The limit now: at least 1.
    fn limit(&self) -> usize;

    /// A call finished after `rtt`; `in_flight` calls were running when it finished
    /// (itself included).
    fn on_sample(&mut self, rtt: Duration, in_flight: usize);
}

/// A constant limit.
#[derive(Clone, Copy, Debug)]
pub struct Fixed(usize);

impl Fixed {
    /// A limit of `limit` calls.
    ///
    /// # Panics
    ///
    /// If `limit` is 0: "Fixed limit must be at least 1 (got 0)".
    pub fn new(limit: usize) -> Self {
        assert!(limit >= 1, "Fixed limit must be at least 1 (got 0)");
        Fixed(limit)
    }
}

impl Limiter for Fixed {
    fn limit(&self) -> usize {
        self.0
    }

    fn on_sample(&mut self, _rtt: Duration, _in_flight: usize) {}
}

/// Additive increase, multiplicative decrease (see the [module docs](self)).
#[derive(Clone, Debug)]
pub struct Aimd {
    limit: f64,
    min: usize,
    max: usize,
    slow: Duration,
    backoff: f64,
}

impl Aimd {
    /// Start at `initial`, stay within `min..=max`; a call slower than `slow` cuts
    /// the limit to `backoff ×` it (0.9 is usual).
    ///
    /// # Panics
    ///
    /// If `min` is 0 or `initial` is not in `min..=max` ("Aimd limits must satisfy
    /// 1 <= min <= initial <= max (got min 0, initial 4, max 16)"), `slow` is zero or
    /// `backoff` is not in `(0, 1)`, with the values.
    pub fn new(initial: usize, min: usize, max: usize, slow: Duration, backoff: f64) -> Self {
        assert!(
            min >= 1 && (min..=max).contains(&initial),
            "Aimd limits must satisfy 1 <= min <= initial <= max (got min {min}, initial \
             {initial}, max {max})"
        );
        assert!(
            !slow.is_zero(),
            "Aimd slow must be greater than zero (got 0ns)"
        );
        assert!(
            backoff > 0.0 && backoff < 1.0,
            "Aimd backoff must be in (0, 1) (got {backoff})"
        );
        Aimd {
            limit: initial as f64,
            min,
            max,
            slow,
            backoff,
        }
    }
}

impl Limiter for Aimd {
    fn limit(&self) -> usize {
        // The float is within min..=max, but rounds above 2^53: clamp the cast too.
        (self.limit as usize).clamp(self.min, self.max)
    }

    fn on_sample(&mut self, rtt: Duration, in_flight: usize) {
        if rtt > self.slow {
            self.limit = (self.limit * self.backoff).max(self.min as f64);
        } else if in_flight >= self.limit() {
            // Saturated and fast: one more per limit's worth of calls.
            self.limit = (self.limit + 1.0 / self.limit).min(self.max as f64);
        }
    }
}

/// The gradient limiter (see the [module docs](self)).
#[derive(Clone, Debug)]
pub struct Gradient {
    limit: f64,
    min: usize,
    max: usize,
    tolerance: f64,
    smoothing: f64,
    probe_every: u64,
    samples: u64,
    /// The smallest round trip of the current window of `probe_every` samples, and
    /// of the window before it.
    window_min: Option<Duration>,
    previous_min: Option<Duration>,
}

impl Gradient {
    /// Start at `initial`, within `min..=max`, with a tolerance of 1.5 (latency up to
    /// 1.5 × the no-load latency costs no concurrency), a smoothing of 0.2 and
    /// windows of 100 samples for the no-load latency.
    ///
    /// # Panics
    ///
    /// If `min` is 0 or `initial` is not in `min..=max`: "Gradient limits must satisfy
    /// 1 <= min <= initial <= max (got min 0, initial 4, max 16)".
    pub fn new(initial: usize, min: usize, max: usize) -> Self {
        assert!(
            min >= 1 && (min..=max).contains(&initial),
            "Gradient limits must satisfy 1 <= min <= initial <= max (got min {min}, \
             initial {initial}, max {max})"
        );
        Gradient {
            limit: initial as f64,
            min,
            max,
            tolerance: 1.5,
            smoothing: 0.2,
            probe_every: 100,
            samples: 0,
            window_min: None,
            previous_min: None,
        }
    }

    /// Latency up to `tolerance ×` the no-load latency costs no concurrency.
    ///
    /// # Panics
    ///
    /// If `tolerance` is below 1: "Gradient tolerance must be at least 1 (got 0.5)".
    pub fn tolerance(mut self, tolerance: f64) -> Self {
        assert!(
            tolerance >= 1.0,
            "Gradient tolerance must be at least 1 (got {tolerance})"
        );
        self.tolerance = tolerance;
        self
    }

    /// The no-load latency is the smallest round trip of the current window of
    /// `samples` samples and the one before it: a latency that rose for good is the
    /// new normal after at most two windows, and a rise just after a window began
    /// still meets the old minimum for a whole window.
    ///
    /// # Panics
    ///
    /// If `samples` is 0: "Gradient probe_every must be at least 1 (got 0)".
    pub fn probe_every(mut self, samples: u64) -> Self {
        assert!(
            samples >= 1,
            "Gradient probe_every must be at least 1 (got 0)"
        );
        self.probe_every = samples;
        self
    }

    /// The no-load latency now (the smallest round trip of this window and the one
    /// before).
    pub fn no_load(&self) -> Option<Duration> {
        match (self.window_min, self.previous_min) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

impl Limiter for Gradient {
    fn limit(&self) -> usize {
        // The float is within min..=max, but rounds above 2^53: clamp the cast too.
        (self.limit as usize).clamp(self.min, self.max)
    }

    fn on_sample(&mut self, rtt: Duration, in_flight: usize) {
        if rtt.is_zero() {
            // Finished within the clock's resolution: nothing to learn from.
            return;
        }
        self.samples += 1;
        if self.samples % self.probe_every == 0 {
            self.previous_min = self.window_min.take();
        }
        self.window_min = Some(self.window_min.map_or(rtt, |m| m.min(rtt)));
        let no_load = self.no_load().unwrap_or(rtt);
        let gradient = (self.tolerance * no_load.as_secs_f64() / rtt.as_secs_f64()).clamp(0.5, 1.0);
        let target = gradient * self.limit + self.limit.sqrt();
        let mut next = self.limit * (1.0 - self.smoothing) + target * self.smoothing;
        if (in_flight as f64) * 2.0 < self.limit {
            // Using less than half of it: fast answers say nothing about more.
            next = next.min(self.limit);
        }
        self.limit = next.clamp(self.min as f64, self.max as f64);
    }
}

/// A stage's concurrency figures, readable from any thread
/// ([`MapAsync::limit_monitor`](crate::operators::MapAsync::limit_monitor)). With
/// several subscriptions of one publisher, the limit and calls in flight are the
/// latest reported by any of them, the round trips and samples all of theirs.
#[derive(Clone, Debug, Default)]
pub struct LimitMonitor(Arc<LimitGauge>);

#[derive(Debug, Default)]
struct LimitGauge {
    limit: AtomicU64,
    in_flight: AtomicU64,
    rtt_min_nanos: AtomicU64,
    rtt_last_nanos: AtomicU64,
    samples: AtomicU64,
}

/// One reading of a [`LimitMonitor`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitStats {
    /// The limiter's limit (the stage's concurrency without a limiter).
    pub limit: usize,
    /// Calls running (reported by stages with a limiter, once per pass).
    pub in_flight: usize,
    /// The smallest round trip seen (none before the first call finished).
    pub rtt_min: Option<Duration>,
    /// The last call's round trip.
    pub rtt_last: Option<Duration>,
    /// Calls finished.
    pub samples: u64,
}

impl LimitMonitor {
    /// The figures now.
    pub fn snapshot(&self) -> LimitStats {
        let g = &self.0;
        // Relaxed throughout: statistics, no other memory is published through them.
        let nanos = |a: &AtomicU64| match a.load(Ordering::Relaxed) {
            0 => None,
            n => Some(Duration::from_nanos(n)),
        };
        LimitStats {
            limit: g.limit.load(Ordering::Relaxed) as usize,
            in_flight: g.in_flight.load(Ordering::Relaxed) as usize,
            rtt_min: nanos(&g.rtt_min_nanos),
            rtt_last: nanos(&g.rtt_last_nanos),
            samples: g.samples.load(Ordering::Relaxed),
        }
    }

    // The limited stages (map_async, flat_map) write the figures.
    pub(crate) fn record_limit(&self, limit: usize, in_flight: usize) {
        self.0.limit.store(limit as u64, Ordering::Relaxed);
        self.0.in_flight.store(in_flight as u64, Ordering::Relaxed);
    }

    pub(crate) fn record_sample(&self, rtt: Duration) {
        let nanos = u64::try_from(rtt.as_nanos()).unwrap_or(u64::MAX).max(1);
        let g = &self.0;
        g.rtt_last_nanos.store(nanos, Ordering::Relaxed);
        // 0 means "none yet": the first sample replaces it.
        let _ = g
            .rtt_min_nanos
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |min| {
                (min == 0 || nanos < min).then_some(nanos)
            });
        g.samples.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(all(test, not(weir_loom)))]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Limits above 2^53 do not fit an `f64` exactly: the limit read back still
    /// stays within `min..=max` (it read 2^53, below `min`, before the clamp).
    #[cfg(target_pointer_width = "64")]
    #[test]
    fn limits_above_2_pow_53_stay_within_their_bounds() {
        let n = (1usize << 53) + 1;
        let mut aimd = Aimd::new(n, n, n, ms(100), 0.5);
        let mut gradient = Gradient::new(n, n, n);
        assert_eq!((aimd.limit(), gradient.limit()), (n, n));
        for rtt in [ms(1), ms(500), ms(1), ms(500)] {
            aimd.on_sample(rtt, n);
            gradient.on_sample(rtt, n);
            assert_eq!((aimd.limit(), gradient.limit()), (n, n));
        }
    }

    #[test]
    fn aimd_grows_by_one_per_window_when_saturated_and_backs_off_when_slow() {
        let mut aimd = Aimd::new(10, 2, 100, ms(100), 0.5);
        for _ in 0..10 {
            aimd.on_sample(ms(10), 10);
        }
        assert_eq!(aimd.limit(), 10, "about one more per limit's worth: 10.99");
        aimd.on_sample(ms(10), 10);
        assert_eq!(aimd.limit(), 11);
        // Not saturated: no growth.
        for _ in 0..100 {
            aimd.on_sample(ms(10), 3);
        }
        assert_eq!(aimd.limit(), 11);
        aimd.on_sample(ms(150), 11);
        assert_eq!(aimd.limit(), 5);
        for _ in 0..10 {
            aimd.on_sample(ms(150), 1);
        }
        assert_eq!(aimd.limit(), 2, "never below min");
    }

    #[test]
    fn gradient_shrinks_when_latency_rises_and_grows_back_when_it_falls() {
        let mut gradient = Gradient::new(20, 1, 200);
        for _ in 0..100 {
            gradient.on_sample(ms(40), 20);
        }
        let steady = gradient.limit();
        assert!(
            steady > 20,
            "at no-load latency the headroom grows it: {steady}"
        );
        for _ in 0..50 {
            gradient.on_sample(ms(900), steady);
        }
        let slow = gradient.limit();
        assert!(slow < 10, "{slow}");
        // Slower for good: after a re-probe the new latency is the normal.
        let mut gradient = Gradient::new(20, 1, 200).probe_every(50);
        for _ in 0..49 {
            gradient.on_sample(ms(40), 20);
        }
        for _ in 0..200 {
            gradient.on_sample(ms(900), 20);
        }
        assert_eq!(gradient.no_load(), Some(ms(900)));
        assert!(gradient.limit() > 20, "{}", gradient.limit());
    }

    #[test]
    fn settings_are_checked_with_their_values() {
        let message = |f: fn()| {
            let payload = std::panic::catch_unwind(f).unwrap_err();
            crate::Error::panicked(payload).message().to_owned()
        };
        assert_eq!(
            message(|| {
                Fixed::new(0);
            }),
            "Fixed limit must be at least 1 (got 0)"
        );
        let aimd = message(|| {
            Aimd::new(5, 1, 4, ms(1), 0.5);
        });
        assert!(aimd.contains("initial 5, max 4"), "{aimd}");
        let backoff = message(|| {
            Aimd::new(2, 1, 4, ms(1), 1.0);
        });
        assert!(backoff.contains("(got 1)"), "{backoff}");
        let gradient = message(|| {
            Gradient::new(1, 0, 4);
        });
        assert!(gradient.contains("min 0"), "{gradient}");
        let tolerance = message(|| {
            Gradient::new(1, 1, 4).tolerance(0.5);
        });
        assert!(tolerance.contains("0.5"), "{tolerance}");
        // Extreme but valid.
        let mut aimd = Aimd::new(1, 1, usize::MAX, Duration::MAX, 0.5);
        aimd.on_sample(Duration::MAX, 1);
        assert_eq!(
            aimd.limit(),
            2,
            "not slower than Duration::MAX, and saturated"
        );
        let mut gradient = Gradient::new(1, 1, 1);
        gradient.on_sample(Duration::ZERO, 1);
        gradient.on_sample(Duration::MAX, 1);
        assert_eq!(gradient.limit(), 1);
    }
}
