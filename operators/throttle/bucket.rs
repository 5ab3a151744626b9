//! The token bucket of [`throttle`](crate::PublisherExt::throttle), kept exactly in
//! integer units so that no rounding accumulates.

use std::time::{Duration, Instant};

use super::Rate;
use crate::stage::timed::from_nanos;

/// The token bucket, in units of `1 / rate.tokens` nanoseconds-of-period: a token is
/// `per` units, and every elapsed nanosecond adds `tokens` units.
#[derive(Debug)]
pub(super) struct Bucket {
    /// Units per token (`per` in nanoseconds).
    unit: u128,
    /// Units added per elapsed nanosecond (`tokens`).
    refill: u128,
    /// Capacity in tokens.
    pub(super) burst: u64,
    /// Current level in units; starts full.
    level: u128,
    /// `level / unit`: the whole tokens in the bucket, kept with the level.
    tokens: u64,
    /// The last refill; `None` until first used.
    last: Option<Instant>,
}

impl Bucket {
    pub(super) fn new(rate: Rate, burst: u64) -> Self {
        let unit = rate.per.as_nanos().max(1);
        Bucket {
            unit,
            refill: u128::from(rate.tokens),
            burst,
            level: unit * u128::from(burst),
            tokens: burst,
            last: None,
        }
    }

    /// Refill up to `burst − reserved` tokens; return the whole tokens available.
    #[inline]
    pub(super) fn refill(&mut self, now: Instant, reserved: u64) -> u64 {
        // No time passed (a chunk of items shares one clock reading): nothing accrues,
        // and with fewer whole tokens than the cap the level is below it, so the cap
        // cannot bind either.
        if self.last == Some(now) && self.tokens < self.burst.saturating_sub(reserved) {
            return self.tokens;
        }
        self.refill_at(now, reserved)
    }

    /// [`refill`](Self::refill) when time passed or the cap may bind.
    #[inline(never)]
    fn refill_at(&mut self, now: Instant, reserved: u64) -> u64 {
        let last = *self.last.get_or_insert(now);
        let elapsed = now.saturating_duration_since(last).as_nanos();
        let cap = self.unit * u128::from(self.burst.saturating_sub(reserved));
        self.level = self
            .level
            .saturating_add(elapsed.saturating_mul(self.refill))
            .min(cap);
        self.last = Some(now.max(last));
        self.tokens = u64::try_from(self.level / self.unit).unwrap_or(u64::MAX);
        self.tokens
    }

    /// Spend `n` whole tokens (available per the last `refill`).
    pub(super) fn spend(&mut self, n: u64) {
        self.level -= self.unit * u128::from(n);
        self.tokens -= n;
    }

    /// How long until the next whole token, from the last refill.
    pub(super) fn until_next(&self) -> Duration {
        let missing = self.unit - self.level % self.unit;
        from_nanos(missing.div_ceil(self.refill))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_full_refills_exactly_and_caps_at_the_burst_minus_reservations() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        // 3 tokens per second: one every 333.33… ms, kept exactly.
        let mut bucket = Bucket::new(Rate::new(3, Duration::from_secs(1)), 2);
        assert_eq!(bucket.refill(t0, 0), 2);
        bucket.spend(2);
        assert_eq!(bucket.refill(t0 + ms(333), 0), 0);
        assert_eq!(bucket.until_next(), Duration::from_nanos(333_334));
        assert_eq!(bucket.refill(t0 + ms(334), 0), 1);
        assert_eq!(bucket.refill(t0 + ms(1_000), 0), 2, "capped at the burst");
        bucket.spend(1);
        // One token reserved: the bucket fills only to burst − 1.
        assert_eq!(bucket.refill(t0 + ms(5_000), 1), 1);
        bucket.spend(1);
        assert_eq!(bucket.refill(t0 + ms(9_000), 2), 0, "fully reserved");
    }

    #[test]
    fn a_refill_at_the_same_instant_changes_nothing_but_the_cap_still_binds() {
        let t0 = Instant::now();
        let mut bucket = Bucket::new(Rate::new(1, Duration::from_millis(10)), 4);
        assert_eq!(bucket.refill(t0, 0), 4);
        bucket.spend(1);
        assert_eq!(bucket.refill(t0, 0), 3, "no time passed: no token accrued");
        assert_eq!(bucket.refill(t0, 2), 2, "two reserved: capped at burst - 2");
        bucket.spend(2);
        assert_eq!(bucket.refill(t0, 0), 0);
        // 15 ms: one token and a half accrue; the half is kept for the next one.
        assert_eq!(bucket.refill(t0 + Duration::from_millis(15), 0), 1);
        assert_eq!(bucket.refill(t0 + Duration::from_millis(20), 0), 2);
    }

    #[test]
    fn time_never_runs_backwards() {
        let t0 = Instant::now();
        let mut bucket = Bucket::new(Rate::new(1, Duration::from_millis(10)), 1);
        bucket.refill(t0 + Duration::from_millis(50), 0);
        bucket.spend(1);
        assert_eq!(bucket.refill(t0, 0), 0);
    }
}
