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
//!
//! # Why a thread that keeps missing stops spinning for a while
//!
//! When runnable threads outnumber cores, the kernel may put both sides of a
//! boundary on one core. Then the side we wait for cannot run while we poll: every
//! wait polls to its bound and fails, and every hand-off pays that bound on top of the
//! switch (measured: `range → subscribe_on → publish_on(256) → fold` beside two
//! spinning threads settled, for a whole run of rounds, at 3.3–3.5 M items/s where
//! crossbeam's bounded channel moved 20 M, about 55 µs per hand-off). A wait that
//! polled and missed is a sign of that. So each thread counts its consecutive misses
//! (waits that polled to the end without the event); after [`MISSES_BEFORE_SKIPPING`]
//! of them it stops polling (a wait checks once, and an idle worker parks at once),
//! except one wait in [`PROBE_EVERY`], which still polls: when the other side runs
//! on another core again, the probe catches an event, the count resets and polling
//! resumes. A wait that finds its event at the first check says nothing either way
//! and is not counted. Where polling pays (the sides on different cores), waits hit
//! and nothing changes; an idle pool stops spinning after a few misses.

use std::cell::Cell;
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

/// Consecutive missed waits after which a thread stops polling (see the module docs).
const MISSES_BEFORE_SKIPPING: u32 = 4;

/// While a thread skips, one wait in this many still polls (the probe).
const PROBE_EVERY: u32 = 8;

thread_local! {
    /// This thread's consecutive missed waits (see the module docs).
    static MISSES: Cell<u32> = const { Cell::new(0) };
}

/// Whether this thread's next wait may poll: it has not missed too often in a row,
/// or this wait is a probe.
fn may_poll() -> bool {
    let misses = MISSES.with(Cell::get);
    misses < MISSES_BEFORE_SKIPPING || (misses - MISSES_BEFORE_SKIPPING) % PROBE_EVERY == 0
}

/// Record how a wait that did not see its event at the first check ended.
fn record(hit: bool) {
    MISSES.with(|misses| {
        misses.set(if hit {
            0
        } else {
            misses.get().saturating_add(1)
        })
    });
}

impl Backoff {
    /// Poll `ready` [`POLLS`] times, one pause apart; true as soon as it holds, false
    /// once the polls are used up (the caller stops waiting). Never yields the CPU.
    /// A thread that keeps missing checks once instead (see the module docs).
    ///
    /// Loom models do not wait (a spin is an unbounded schedule for loom): one poll.
    #[inline]
    pub(crate) fn wait(mut ready: impl FnMut() -> bool) -> bool {
        if cfg!(weir_loom) {
            return ready();
        }
        if ready() {
            return true;
        }
        let hit = may_poll() && Self::poll(&mut ready);
        record(hit);
        hit
    }

    /// [`wait`](Self::wait) for a *run* of work, settling for any at the end:
    /// `ready(false)` asks for a run (each poll), `ready(true)` for anything (once,
    /// when the polls are used up or skipped). A wait whose last look finds work
    /// after polls counts as a hit, as a poll that found it would: the other side
    /// was running meanwhile, so the thread keeps polling (counted as a miss, a
    /// producer too slow to fill a run within the polls would soon turn polling
    /// off for every wait of the thread).
    #[inline]
    pub(crate) fn wait_settling(mut ready: impl FnMut(bool) -> bool) -> bool {
        if cfg!(weir_loom) {
            return ready(false) || ready(true);
        }
        if ready(false) {
            return true;
        }
        if !may_poll() {
            // As `wait`'s single check: not counted either way.
            return ready(true);
        }
        let hit = Self::poll(&mut || ready(false)) || ready(true);
        record(hit);
        hit
    }

    /// The polls of [`wait`](Self::wait), after a first check that missed.
    #[inline]
    fn poll(ready: &mut impl FnMut() -> bool) -> bool {
        for _ in 0..POLLS {
            std::hint::spin_loop();
            if ready() {
                return true;
            }
        }
        false
    }

    /// [`wait`](Self::wait), then keep polling (a pause between polls, the clock read
    /// every [`POLLS_PER_CLOCK_READ`] polls) until [`IDLE_SPIN`] has passed. A worker
    /// about to park waits this long; see the module docs. A thread that keeps missing
    /// checks once instead, and the worker parks at once.
    #[inline]
    pub(crate) fn wait_idle(mut ready: impl FnMut() -> bool) -> bool {
        if cfg!(weir_loom) {
            return ready();
        }
        if ready() {
            return true;
        }
        let hit = may_poll() && (Self::poll(&mut ready) || Self::poll_for(IDLE_SPIN, &mut ready));
        record(hit);
        hit
    }

    /// Poll until `ready` holds (true) or `spin` has passed (false).
    fn poll_for(spin: Duration, ready: &mut impl FnMut() -> bool) -> bool {
        let start = Instant::now();
        loop {
            for _ in 0..POLLS_PER_CLOCK_READ {
                std::hint::spin_loop();
                if ready() {
                    return true;
                }
            }
            if start.elapsed() >= spin {
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

    /// Runs `f` on a thread of its own: the miss count is per thread.
    fn on_fresh_thread(f: impl FnOnce() + Send) {
        std::thread::scope(|scope| {
            scope.spawn(f);
        });
    }

    /// Checks one missing `wait` makes.
    fn checks_of_a_missed_wait() -> u32 {
        let mut polls = 0;
        assert!(!Backoff::wait(|| {
            polls += 1;
            false
        }));
        polls
    }

    #[test]
    fn a_thread_that_keeps_missing_checks_once_and_probes_one_wait_in_eight() {
        on_fresh_thread(|| {
            for _ in 0..MISSES_BEFORE_SKIPPING {
                assert_eq!(checks_of_a_missed_wait(), POLLS + 1, "before skipping");
            }
            // The first wait after the limit is a probe; the next seven check once.
            for round in 0..3 {
                assert_eq!(checks_of_a_missed_wait(), POLLS + 1, "probe {round}");
                for _ in 1..PROBE_EVERY {
                    assert_eq!(checks_of_a_missed_wait(), 1, "skipping, round {round}");
                }
            }
            // After the next probe, an idle worker parks at once.
            assert_eq!(checks_of_a_missed_wait(), POLLS + 1, "the fourth probe");
            let mut polls = 0;
            assert!(!Backoff::wait_idle(|| {
                polls += 1;
                false
            }));
            assert_eq!(polls, 1, "an idle wait while skipping checks once");
        });
    }

    #[test]
    fn a_hit_on_a_probe_resumes_polling() {
        on_fresh_thread(|| {
            for _ in 0..MISSES_BEFORE_SKIPPING {
                checks_of_a_missed_wait();
            }
            // The probe sees its event at the third check.
            let mut polls = 0;
            assert!(Backoff::wait(|| {
                polls += 1;
                polls == 3
            }));
            assert_eq!(checks_of_a_missed_wait(), POLLS + 1, "polling again");
        });
    }

    #[test]
    fn an_event_at_the_first_check_leaves_the_miss_count_alone() {
        on_fresh_thread(|| {
            for _ in 0..MISSES_BEFORE_SKIPPING {
                checks_of_a_missed_wait();
            }
            assert!(Backoff::wait(|| true));
            assert!(Backoff::wait_idle(|| true));
            // Still skipping: the probe comes first, then a wait that checks once.
            assert_eq!(checks_of_a_missed_wait(), POLLS + 1, "probe");
            assert_eq!(checks_of_a_missed_wait(), 1, "skipping");
        });
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
