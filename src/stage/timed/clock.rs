//! Time arithmetic shared by the time stages.

use std::time::{Duration, Instant};

/// `nanos` as a `Duration`, saturating at `Duration::MAX`.
pub(crate) fn from_nanos(nanos: u128) -> Duration {
    const NANOS_PER_SEC: u128 = 1_000_000_000;
    match u64::try_from(nanos / NANOS_PER_SEC) {
        Ok(secs) => Duration::new(secs, (nanos % NANOS_PER_SEC) as u32),
        Err(_) => Duration::MAX,
    }
}

/// The next point of the grid `origin + k × period` (k ≥ 1) strictly after `now`, as a
/// delay from `now`.
pub(crate) fn until_next_tick(origin: Instant, period: Duration, now: Instant) -> Duration {
    let period = period.as_nanos().max(1);
    let elapsed = now.saturating_duration_since(origin).as_nanos();
    let next = (elapsed / period + 1) * period;
    from_nanos(next - elapsed)
}

/// Panic unless `value` is positive: `"{what} must be greater than zero (got 0ns)"`.
pub(crate) fn assert_positive(what: &str, value: Duration) {
    assert!(
        !value.is_zero(),
        "{what} must be greater than zero (got {value:?})"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_tick_is_strictly_after_now() {
        let origin = Instant::now();
        let ms = Duration::from_millis;
        let period = ms(100);
        assert_eq!(until_next_tick(origin, period, origin), ms(100));
        assert_eq!(until_next_tick(origin, period, origin + ms(250)), ms(50));
        assert_eq!(until_next_tick(origin, period, origin + ms(300)), ms(100));
    }

    #[test]
    fn nanos_saturate() {
        assert_eq!(from_nanos(1_500_000_000), Duration::from_millis(1_500));
        assert_eq!(from_nanos(u128::MAX), Duration::MAX);
    }
}
