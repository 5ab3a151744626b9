//! Time-operator fixtures: a [`VirtualTime`] that drives itself, for code that waits in
//! real time (the conformance kit), and small helpers for marble-style tests.
//!
//! # Why a self-driving clock, and why a scaled one
//!
//! The conformance kit waits in real time for signals (200 ms for expected ones, 50 ms
//! quiet windows), while a `VirtualTime` only moves when told. [`driven_clock`] is a
//! process-wide `VirtualTime` with a background thread that runs it at [`SPEED`] times
//! real time: every turn it advances the clock to `SPEED × real time elapsed`
//! ([`VirtualTime::advance_to`], which runs the due timers in due order), then sleeps
//! until the next queued timer is due ([`VirtualTime::next_due`]), at most a
//! millisecond.
//!
//! A driver that *jumps* to the next timer whenever one is queued would be faster,
//! but it makes any two things that are "simultaneous" in the test race: a stage arms
//! a one-second timeout while its upstream is a few instructions away from delivering
//! the item synchronously, and a jump in between fires the timeout. Real clocks do not
//! do that, and neither does a clock that only runs `SPEED` times faster than real
//! time: an operator's timer of `d` virtual time needs `d / SPEED` of real time, which
//! the suites keep far above any scheduling hiccup (a 10 s timeout is 0.5 s of real
//! time) while the periods that move items along (5–10 ms) cost well under a
//! millisecond each. What the kit checks (counts, order, demand, terminal signals) is
//! then deterministic. The clock is shared by all tests of a test binary; tests only
//! see each other's timers as more work for the driver.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use weir::runtime::VirtualTime;

/// How many times faster than real time the driven clock runs.
pub const SPEED: u32 = 20;
/// The longest the driver sleeps between turns.
const MAX_NAP: Duration = Duration::from_millis(1);
/// The shortest (so a busy queue cannot make the driver spin).
const MIN_NAP: Duration = Duration::from_micros(50);

/// The process-wide self-driving `VirtualTime`, running at [`SPEED`] times real time
/// (see the module docs).
pub fn driven_clock() -> VirtualTime {
    static CLOCK: OnceLock<VirtualTime> = OnceLock::new();
    CLOCK
        .get_or_init(|| {
            let clock = VirtualTime::new();
            let driver = clock.clone();
            let start = Instant::now();
            std::thread::Builder::new()
                .name("virtual-time-driver".into())
                .spawn(move || loop {
                    let target = start.elapsed() * SPEED;
                    driver.advance_to(target);
                    let nap = driver
                        .next_due()
                        .map_or(MAX_NAP, |due| due.saturating_sub(target) / SPEED);
                    std::thread::sleep(nap.clamp(MIN_NAP, MAX_NAP));
                })
                .expect("spawn the virtual-time driver");
            clock
        })
        .clone()
}

/// `n` milliseconds.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}
