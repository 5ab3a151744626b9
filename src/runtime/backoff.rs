//! The one wait of weir: spin a little, then give up (and park, or leave the loop).
//!
//! Two places wait for the other side of a hand-off: a scheduled stage's loop deciding
//! whether to linger for its next reason to run (a batch, a request), and a
//! [`ThreadPool`](super::ThreadPool) worker deciding whether to park.
//!
//! # Why it only spins, and only briefly
//!
//! On a busy boundary the next batch arrives within a microsecond or two, and keeping
//! the loop saves a task hand-off and a wake-up per batch, so a short spin pays. What
//! must never happen is a long wait *while the other side is not running*: when
//! runnable threads outnumber cores, the producer we wait for may be off the CPU, and
//! every microsecond we spin (or every `yield_now`, which on a loaded Linux machine
//! can cost a whole time slice of several milliseconds) delays it further. So nothing
//! here yields, and every wait is bounded:
//!
//! * [`Backoff::wait`] (a lingering stage): exponentially growing pauses for
//!   [`ROUNDS`] rounds, well under ten microseconds, then the stage leaves its loop
//!   (the producer's next signal schedules a new task);
//! * [`Backoff::wait_idle`] (a worker with nothing to run): the same, then polls for
//!   up to [`IDLE_SPIN`] before parking on its condition variable. Parking costs a
//!   futex wake-up when work comes back, tens of microseconds on this kind of
//!   machine; a worker that parked after the rounds alone made `range → subscribe_on
//!   → publish_on → fold` 3–7× slower on a quiet machine (`benches/async_boundary.rs`:
//!   4–69 M items/s against 32–349). Measured the other way, a stage lingering for the
//!   full `IDLE_SPIN` too cost the busy-machine test (eight spinning threads on two
//!   cores) up to 4 s per boundary instead of 0.05–1.4 s: the stage spins on the CPU
//!   its producer needs, while an idle worker only spins when it has nothing to do.

use std::time::{Duration, Instant};

/// Exponential spinning for a bounded number of rounds.
///
/// ```ignore
/// let mut backoff = Backoff::new();
/// while !ready() {
///     if !backoff.spin() {
///         break; // give up: park or leave the loop
///     }
/// }
/// ```
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    round: u32,
}

/// Rounds of spinning: round `k` pauses `2^k` times, so the whole backoff pauses
/// `2^(ROUNDS) - 1` times (255 pauses: about one to eight microseconds depending on
/// how long the CPU's pause instruction is).
const ROUNDS: u32 = 8;

/// How long [`Backoff::wait_idle`] polls after the rounds.
const IDLE_SPIN: Duration = Duration::from_micros(20);

/// Polls between two reads of the clock in [`Backoff::wait_idle`].
const POLLS_PER_CLOCK_READ: u32 = 32;

impl Backoff {
    /// A fresh backoff.
    pub(crate) fn new() -> Self {
        Backoff { round: 0 }
    }

    /// Pause for the current round and move to the next; false once the rounds are
    /// used up (the caller should stop waiting). Never yields the CPU.
    #[inline]
    pub(crate) fn spin(&mut self) -> bool {
        if self.round >= ROUNDS {
            return false;
        }
        for _ in 0..1u32 << self.round {
            std::hint::spin_loop();
        }
        self.round += 1;
        true
    }

    /// Poll `ready` between the rounds; true as soon as it holds, false once the
    /// rounds are used up. A drain lingering for its next batch waits this long.
    ///
    /// Loom models do not wait (a spin is an unbounded schedule for loom): one poll.
    #[inline]
    pub(crate) fn wait(mut ready: impl FnMut() -> bool) -> bool {
        if cfg!(weir_loom) {
            return ready();
        }
        let mut backoff = Backoff::new();
        loop {
            if ready() {
                return true;
            }
            if !backoff.spin() {
                return ready();
            }
        }
    }

    /// [`wait`](Self::wait), then keep polling (a pause between polls, the clock read
    /// every [`POLLS_PER_CLOCK_READ`] polls) until [`IDLE_SPIN`] has passed. A worker
    /// about to park waits this long; see the module docs.
    #[inline]
    pub(crate) fn wait_idle(mut ready: impl FnMut() -> bool) -> bool {
        if cfg!(weir_loom) {
            return Self::wait(ready);
        }
        if Self::wait(&mut ready) {
            return true;
        }
        let start = Instant::now();
        loop {
            for _ in 0..POLLS_PER_CLOCK_READ {
                if ready() {
                    return true;
                }
                std::hint::spin_loop();
            }
            if start.elapsed() >= IDLE_SPIN {
                return ready();
            }
        }
    }
}

#[cfg(all(test, not(weir_loom)))]
mod tests {
    use super::*;

    #[test]
    fn gives_up_after_a_bounded_number_of_rounds() {
        let mut backoff = Backoff::new();
        let mut rounds = 0;
        while backoff.spin() {
            rounds += 1;
        }
        assert_eq!(rounds, ROUNDS);
        let mut polls = 0;
        assert!(!Backoff::wait(|| {
            polls += 1;
            false
        }));
        assert_eq!(
            polls,
            ROUNDS + 2,
            "one poll per round, one before, one after"
        );
        assert!(Backoff::wait(|| true));
    }

    #[test]
    fn an_idle_wait_polls_past_the_rounds_and_then_gives_up() {
        let mut polls = 0;
        assert!(!Backoff::wait_idle(|| {
            polls += 1;
            false
        }));
        assert!(
            polls > ROUNDS + 2 + POLLS_PER_CLOCK_READ,
            "{polls} polls: the idle wait stopped with the rounds"
        );
        assert!(Backoff::wait_idle(|| true));
    }
}
