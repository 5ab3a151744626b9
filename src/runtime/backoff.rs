//! The one wait of weir: spin a little, then give up (and park, or leave the loop).
//!
//! Three places wait for the other side of a hand-off: a boundary's drain deciding
//! whether to keep its loop for the next batch, `subscribe_on`'s forwarder waiting for
//! the next request, and a [`ThreadPool`](super::ThreadPool) worker deciding whether to
//! park. All three use [`Backoff`].
//!
//! # Why it only spins, and only briefly
//!
//! On a busy boundary the next batch arrives within a microsecond or two, and keeping
//! the loop saves a task hand-off and a wake-up per batch, so a short spin pays. What
//! must never happen is a long wait *while the other side is not running*: when
//! runnable threads outnumber cores, the producer we wait for may be off the CPU, and
//! every microsecond we spin (or every `yield_now`, which on a loaded Linux machine
//! can cost a whole time slice of several milliseconds) delays it further. So the
//! backoff spins with exponentially growing pauses for a bounded number of rounds
//! (well under ten microseconds in all), never yields, and then reports that the
//! caller should stop waiting: a drain leaves its loop (the producer's next signal
//! schedules a new task), a worker parks on its condition variable (the next
//! `schedule` wakes it). Parking costs a futex wake-up when work comes back, which is
//! the price of never stealing the CPU from the thread that would produce the work.

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
    /// rounds are used up.
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
}
