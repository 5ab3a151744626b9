//! Water marks with hysteresis: when a push source tells its producers to pause, and
//! when to resume.
//!
//! A channel is [`Flowing`](FlowState::Flowing) until its depth reaches the high mark;
//! then it is [`Paused`](FlowState::Paused) until the depth has fallen to the low mark.
//! The gap between the two marks is what makes pauses long and rare: with one threshold
//! (high = low + 1, [`WaterMarks::single`]) a producer that reacts to every signal
//! toggles on almost every item around the mark (`docs/design.md` §10: "one threshold flaps; two
//! give long, rare pauses").
//!
//! The marks come from the system, not from taste ([`WaterMarks::derive`]):
//!
//! * `high ≤ capacity − max_arrival_rate × reaction_time`: after the pause signal the
//!   producer keeps sending for its reaction time (a socket's kernel buffer, a batch in
//!   flight); that much room must be left above the high mark.
//! * `low ≥ drain_rate × resume_time`: after the resume signal the producer needs its
//!   resume time to deliver again; the consumer must not run dry meanwhile.

use std::fmt;
use std::time::Duration;

use crate::queue::{IntoCapacity, SizingError};

/// Whether a push source wants more items, and how many. Advice to cooperative
/// producers: items offered while `Paused` are still accepted by the channel's policy
/// up to capacity. A channel without an [`Admission`](super::Admission) ladder is only
/// ever `Flowing` or `Paused`.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum FlowState {
    /// Depth is below every mark (or has fallen back to their low marks): send.
    Flowing,
    /// The reduce rung is on ([`Admission::reduce_at`](super::Admission::reduce_at)):
    /// send at `factor` times your rate.
    Reducing {
        /// The fraction of its rate a producer should send at, in (0, 1).
        factor: f64,
    },
    /// The shed rung is on ([`Admission::shed_below`](super::Admission::shed_below)):
    /// items below its class are refused; send the others at `factor` times your rate
    /// (1 without a reduce rung).
    Shedding {
        /// The fraction of its rate a producer should send at, in (0, 1].
        factor: f64,
    },
    /// Depth reached the high water mark and has not yet fallen to the low mark: stop
    /// producing (e.g. stop reading the socket) until [`Sender::resumed`](super::Sender::resumed).
    /// What still arrives is handled by the policy up to capacity (after an
    /// admission ladder's shed and late refusals).
    Paused,
}

impl FlowState {
    /// The fraction of its full rate a cooperative producer should send at: 1 when
    /// flowing, the rung's factor when reducing or shedding, 0 when paused.
    ///
    /// ```
    /// use weir::source::channel::FlowState;
    ///
    /// assert_eq!(FlowState::Flowing.rate_factor(), 1.0);
    /// assert_eq!(FlowState::Reducing { factor: 0.5 }.rate_factor(), 0.5);
    /// assert_eq!(FlowState::Paused.rate_factor(), 0.0);
    /// ```
    pub fn rate_factor(&self) -> f64 {
        match *self {
            FlowState::Flowing => 1.0,
            FlowState::Reducing { factor } | FlowState::Shedding { factor } => factor,
            FlowState::Paused => 0.0,
        }
    }

    /// True when `Paused`: producers should stop until
    /// [`Sender::resumed`](super::Sender::resumed).
    pub fn is_paused(&self) -> bool {
        matches!(self, FlowState::Paused)
    }
}

impl fmt::Display for FlowState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FlowState::Flowing => f.write_str("flowing"),
            FlowState::Reducing { factor } => write!(f, "reducing to {:.0}%", factor * 100.0),
            FlowState::Shedding { factor } => {
                write!(f, "shedding (rate {:.0}%)", factor * 100.0)
            }
            FlowState::Paused => f.write_str("paused"),
        }
    }
}

/// High and low water marks of a push source, in items.
///
/// Once the depth reaches `high` the channel is paused; once it has fallen to `low` it
/// flows again. `low < high`; the channel checks `high ≤ capacity` when it is built.
/// The gap makes pauses long and rare: with one threshold ([`single`](Self::single))
/// the state flips around the mark at every delivery (`docs/design.md` §10: "one threshold
/// flaps; two give long, rare pauses"). Size them with [`derive`](Self::derive).
///
/// ```
/// use weir::source::channel::WaterMarks;
///
/// let marks = WaterMarks::new(800, 500);
/// assert_eq!((marks.high(), marks.low()), (800, 500));
/// // One threshold, no hysteresis: paused at 800, flowing again at 799.
/// assert_eq!(WaterMarks::single(800), WaterMarks::new(800, 799));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WaterMarks {
    high: usize,
    low: usize,
}

impl WaterMarks {
    /// Pause at `high` items, resume at `low` items.
    ///
    /// # Panics
    ///
    /// If `high` is 0 ("WaterMarks high must be at least 1 (got 0)") or `low` is not
    /// below `high` ("WaterMarks low must be in 0..high (got low 8, high 8)").
    pub fn new(high: usize, low: usize) -> Self {
        assert!(high >= 1, "WaterMarks high must be at least 1 (got 0)");
        assert!(
            low < high,
            "WaterMarks low must be in 0..high (got low {low}, high {high})"
        );
        WaterMarks { high, low }
    }

    /// One threshold without hysteresis: paused while the depth is at least `mark`,
    /// flowing below it (`new(mark, mark - 1)`). Flaps; provided to compare against.
    ///
    /// # Panics
    ///
    /// If `mark` is 0: "WaterMarks::single mark must be at least 1 (got 0)".
    pub fn single(mark: usize) -> Self {
        assert!(
            mark >= 1,
            "WaterMarks::single mark must be at least 1 (got 0)"
        );
        WaterMarks::new(mark, mark - 1)
    }

    /// The default for a channel of `capacity`: pause when full, resume at half.
    pub(crate) fn default_for(capacity: usize) -> Self {
        WaterMarks::new(capacity, capacity / 2)
    }

    /// The high water mark: the channel pauses when its depth reaches it.
    pub fn high(&self) -> usize {
        self.high
    }

    /// The low water mark: a paused channel flows again when its depth falls to it.
    pub fn low(&self) -> usize {
        self.low
    }

    /// Derive the marks from the system (`docs/design.md` §10):
    ///
    /// * `high = capacity − ⌈max_arrival_rate × reaction_time⌉`: the room above the
    ///   high mark absorbs what still arrives while the producer reacts to the pause;
    /// * `low = ⌈drain_rate × resume_time⌉`: the items below the low mark keep the
    ///   consumer busy while the producer wakes up.
    ///
    /// Rates are items per second. Fails with a [`SizingError`] naming the parameters
    /// when the combination is impossible: a rate that is negative or not finite, a
    /// zero drain rate, a capacity that cannot even absorb the in-flight arrivals, or
    /// a low mark that does not fit below the high mark.
    ///
    /// # Examples
    ///
    /// A channel of 10,000 items, fed at up to 5,000/s by a producer that needs 200 ms
    /// to react, drained at 2,000/s by a consumer, producer resuming within 1 s:
    /// high = 10,000 − 5,000 × 0.2 = 9,000; low = 2,000 × 1 = 2,000.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir::source::channel::WaterMarks;
    ///
    /// let marks = WaterMarks::derive(
    ///     10_000,
    ///     5_000.0,
    ///     Duration::from_millis(200),
    ///     2_000.0,
    ///     Duration::from_secs(1),
    /// )
    /// .unwrap();
    /// assert_eq!((marks.high(), marks.low()), (9_000, 2_000));
    ///
    /// // Resuming takes 5 s: the consumer would need 10,000 items below the low mark,
    /// // more than fits under the high mark of 9,000.
    /// let error = WaterMarks::derive(
    ///     10_000,
    ///     5_000.0,
    ///     Duration::from_millis(200),
    ///     2_000.0,
    ///     Duration::from_secs(5),
    /// )
    /// .unwrap_err();
    /// assert!(error.to_string().contains("low water mark 10000"), "{error}");
    /// ```
    pub fn derive(
        capacity: impl IntoCapacity,
        max_arrival_rate: f64,
        reaction_time: Duration,
        drain_rate: f64,
        resume_time: Duration,
    ) -> Result<WaterMarks, SizingError> {
        let capacity = capacity.into_capacity("WaterMarks::derive").get();
        if !(max_arrival_rate.is_finite() && max_arrival_rate >= 0.0) {
            return Err(SizingError::new(format!(
                "max_arrival_rate must be a finite, non-negative number of items per second (got {max_arrival_rate})"
            )));
        }
        if !(drain_rate.is_finite() && drain_rate > 0.0) {
            return Err(SizingError::new(format!(
                "drain_rate must be a positive, finite number of items per second (got {drain_rate})"
            )));
        }
        let in_flight = (max_arrival_rate * reaction_time.as_secs_f64()).ceil();
        if in_flight >= capacity as f64 {
            return Err(SizingError::new(format!(
                "capacity {capacity} leaves no room for a high water mark: \
                 max_arrival_rate {max_arrival_rate}/s × reaction_time {reaction_time:?} = \
                 {in_flight} items may still arrive after the pause signal; \
                 capacity must exceed {in_flight}"
            )));
        }
        let in_flight = in_flight as usize;
        let high = capacity - in_flight;
        let low = (drain_rate * resume_time.as_secs_f64()).ceil();
        if low >= high as f64 {
            return Err(SizingError::new(format!(
                "low water mark {low} (drain_rate {drain_rate}/s × resume_time {resume_time:?}) \
                 must be below the high water mark {high} (capacity {capacity} − \
                 max_arrival_rate {max_arrival_rate}/s × reaction_time {reaction_time:?}); \
                 raise capacity to at least {} or shorten reaction_time or resume_time",
                low + in_flight as f64 + 1.0
            )));
        }
        Ok(WaterMarks::new(high, low as usize))
    }
}

#[cfg(all(test, not(weir_loom)))]
mod tests {
    use super::*;

    #[test]
    fn derive_follows_the_sizing_rules() {
        let m = WaterMarks::derive(
            1_000,
            100.0,
            Duration::from_millis(500),
            50.0,
            Duration::from_secs(2),
        )
        .unwrap();
        assert_eq!((m.high(), m.low()), (950, 100));
        // Nothing arrives after the signal: the high mark is the capacity.
        let m = WaterMarks::derive(10, 0.0, Duration::from_secs(1), 1.0, Duration::ZERO).unwrap();
        assert_eq!((m.high(), m.low()), (10, 0));
    }

    #[test]
    fn derive_rejects_impossible_combinations_with_specific_messages() {
        let s = Duration::from_secs(1);
        let err = |r: Result<WaterMarks, SizingError>| r.unwrap_err().to_string();
        assert!(err(WaterMarks::derive(100, -1.0, s, 1.0, s)).contains("max_arrival_rate must be"));
        assert!(err(WaterMarks::derive(100, f64::NAN, s, 1.0, s)).contains("max_arrival_rate"));
        assert!(err(WaterMarks::derive(100, 1.0, s, 0.0, s)).contains("drain_rate must be"));
        let e = err(WaterMarks::derive(100, 100.0, s, 1.0, s));
        assert!(e.contains("capacity 100 leaves no room"), "{e}");
        assert!(e.contains("capacity must exceed 100"), "{e}");
        let e = err(WaterMarks::derive(100, 50.0, s, 50.0, s));
        assert!(e.contains("low water mark 50"), "{e}");
        assert!(e.contains("high water mark 50"), "{e}");
        assert!(e.contains("raise capacity to at least 101"), "{e}");
    }

    #[test]
    #[should_panic(expected = "WaterMarks low must be in 0..high (got low 5, high 5)")]
    fn equal_marks_are_refused() {
        let _ = WaterMarks::new(5, 5);
    }

    #[test]
    #[should_panic(expected = "WaterMarks high must be at least 1")]
    fn zero_high_is_refused() {
        let _ = WaterMarks::new(0, 0);
    }
}
