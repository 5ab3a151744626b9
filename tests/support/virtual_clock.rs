//! Time-operator fixtures: a [`VirtualTime`] that drives itself, for code that waits in
//! real time (the conformance kit), and small helpers for marble-style tests.
//!
//! # Why a self-driving clock
//!
//! The conformance kit waits in real time for signals (200 ms for expected ones, 50 ms
//! quiet windows), while a `VirtualTime` only moves when told. [`driven_clock`] is a
//! process-wide `VirtualTime` with a background thread that, whenever a task is
//! queued, jumps the clock straight to the earliest due time
//! ([`VirtualTime::next_due`] then [`VirtualTime::advance_to`]) and runs it. Time
//! stages therefore behave exactly as on a real clock, only with every wait cut to
//! nothing: what the kit checks (counts, order, demand, terminal signals) is
//! deterministic, because weir's time stages arm timers only while they have
//! something to do (no idle periodic timers), and each jump runs the tasks of one due
//! instant in scheduling order. The driver sleeps a few microseconds after each jump
//! and longer when idle, so a stage that keeps a timer armed forever cannot hog a
//! core. The clock is shared by all tests of a test binary: tests only see each
//! other's timers as more jumps.

use std::sync::OnceLock;
use std::time::Duration;

use weir::runtime::VirtualTime;

/// Pause after each jump of the driven clock.
const STEP_PAUSE: Duration = Duration::from_micros(20);
/// Pause when nothing is queued.
const IDLE_PAUSE: Duration = Duration::from_micros(200);

/// The process-wide self-driving `VirtualTime` (see the module docs).
pub fn driven_clock() -> VirtualTime {
    static CLOCK: OnceLock<VirtualTime> = OnceLock::new();
    CLOCK
        .get_or_init(|| {
            let clock = VirtualTime::new();
            let driver = clock.clone();
            std::thread::Builder::new()
                .name("virtual-time-driver".into())
                .spawn(move || loop {
                    match driver.next_due() {
                        Some(due) => {
                            driver.advance_to(due);
                            std::thread::sleep(STEP_PAUSE);
                        }
                        None => std::thread::sleep(IDLE_PAUSE),
                    }
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
