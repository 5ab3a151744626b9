//! The conformance kit: a Rust port of the Reactive Streams TCK (feature `tck`).
//!
//! * [`TestSubscriber`] / [`TestProbe`]: a recording subscriber with zero initial
//!   demand, blocking waiters and protocol checks, for your own tests.
//! * [`TestEnv`]: timeouts (overridable by environment variables) and the list of
//!   failures recorded on other threads.

mod env;
mod subscriber;

pub use env::{TestEnv, TestEnvBuilder};
pub use subscriber::{Signal, Terminal, TestProbe, TestSubscriber, Violation};
