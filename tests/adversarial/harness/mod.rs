//! The suite's shared helpers: counted items, source taps, the recording subscriber,
//! watchdogs, the random generator and the row runner.

#[cfg(feature = "metrics")]
pub mod exports;
pub mod item;
pub mod late;
pub mod recorder;
pub mod rng;
pub mod run;
pub mod spinners;
pub mod tap;
pub mod watch;
