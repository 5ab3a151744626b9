//! The one wait of weir: poll a little, then give up (and park, or leave the loop).
//!
//! Three places wait for the other side of a hand-off: a scheduled stage's loop
//! deciding whether to linger for its next reason to run (a batch, a request), a
//! [`ThreadPool`](super::ThreadPool) worker deciding whether to park, and the mux's
//! worker and demultiplexer polling the mux's lock before they block on it.
//!
//! # Why it polls at an even pace, and only briefly
//!
//! On a busy boundary the next batch arrives within a microsecond or two, and keeping
//! the loop saves a task hand-off and a wake-up per batch, so a short wait pays. Two
//! things decide what it costs:
//!
//! * **How soon it sees the event.** The wait polls with one pause between polls,
//!   never longer gaps: with gaps that double (a classic exponential backoff), a side
//!   that has already waited a while checks rarely, and every round trip of a boundary
//!   pays the late check. Measured on `range → subscribe_on → publish_on → fold`
//!   (2 vCPUs, prefetch 16 / 64 / 256 / 1024): doubling gaps 43 / 108 / 197 / 164 M
//!   items/s, even polls 60 / 162 / 284 / 288.
//! * **What it takes from others.** When runnable threads outnumber cores, the producer
//!   we wait for may be off the CPU, and every microsecond we spin (or every
//!   `yield_now`, which on a loaded Linux machine can cost a whole time slice) delays
//!   it further. So nothing here yields, and every wait is bounded:
//!   * [`Backoff::wait`] (a lingering stage): [`POLLS`] polls, a few microseconds
//!     (255 pauses: 6 µs where a pause takes 25 ns), then the stage leaves its loop
//!     (the producer's next signal schedules a new task);
//!   * [`Backoff::wait_idle`] (a worker with nothing to run): the same, then polls for
//!     up to [`IDLE_SPIN`] before parking on its condition variable. Parking costs a
//!     futex wake-up when work comes back, tens of microseconds on this kind of
//!     machine; a worker that parked right away made the pipeline above 3–7× slower.
//!     Measured the other way, a stage lingering for the full `IDLE_SPIN` cost the
//!     busy-machine test (eight spinning threads on two cores) up to 4 s per
//!     boundary instead of 0.05–1.4 s: the stage spins on the CPU its producer needs,
//!     while an idle worker only spins when it has nothing to do.

use std::time::{Duration, Instant};

/// The waits (see the module docs).
#[derive(Debug)]
pub(crate) struct Backoff;

/// Polls of [`Backoff::wait`], one pause apart.
const POLLS: u32 = 255;

/// How long [`Backoff::wait_idle`] polls after [`Backoff::wait`].
const IDLE_SPIN: Duration = Duration::from_micros(20);

/// Polls between two reads of the clock in [`Backoff::wait_idle`].
const POLLS_PER_CLOCK_READ: u32 = 32;

impl Backoff {
    /// Poll `ready` [`POLLS`] times, one pause apart; true as soon as it holds, false
    /// once the polls are used up (the caller stops waiting). Never yields the CPU.
    ///
    /// Loom models do not wait (a spin is an unbounded schedule for loom): one poll.
    #[inline]
    pub(crate) fn wait(mut ready: impl FnMut() -> bool) -> bool {
        if cfg!(weir_loom) {
            return ready();
        }
        for _ in 0..POLLS {
            if ready() {
                return true;
            }
            std::hint::spin_loop();
        }
        ready()
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
    fn gives_up_after_a_bounded_number_of_polls() {
        let mut polls = 0;
        assert!(!Backoff::wait(|| {
            polls += 1;
            false
        }));
        assert_eq!(polls, POLLS + 1, "one poll per pause, one after the last");
        assert!(Backoff::wait(|| true));
    }

    #[test]
    fn returns_at_the_first_poll_that_holds() {
        let mut polls = 0;
        assert!(Backoff::wait(|| {
            polls += 1;
            polls == 7
        }));
        assert_eq!(polls, 7, "an even pace: the wait checks after every pause");
    }

    #[test]
    fn an_idle_wait_polls_past_the_short_wait_and_then_gives_up() {
        let mut polls = 0;
        assert!(!Backoff::wait_idle(|| {
            polls += 1;
            false
        }));
        assert!(
            polls > POLLS + 1 + POLLS_PER_CLOCK_READ,
            "{polls} polls: the idle wait stopped with the short wait"
        );
        assert!(Backoff::wait_idle(|| true));
    }
}
