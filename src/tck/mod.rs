//! The conformance kit: a Rust port of the Reactive Streams TCK (feature `tck`).
//!
//! * [`TestSubscriber`] / [`TestProbe`]: a recording subscriber with zero initial
//!   demand, blocking waiters and protocol checks, for your own tests.
//! * [`TestEnv`]: timeouts (overridable by environment variables) and the list of
//!   failures recorded on other threads.
//! * [`PublisherVerification`]: the TCK's 38 publisher tests.
//! * [`SubscriberBlackboxVerification`] (26 tests) and [`SubscriberWhiteboxVerification`]
//!   (27 tests, with [`WhiteboxProbe`], [`SubscriberPuppet`], [`ProbedSubscriber`]);
//!   [`capture_subscriber`] turns a weir sink into a subscriber value to verify.
//! * [`ProcessorVerification`]: the 68 identity-processor tests (38 publisher + 27
//!   white-box + 3 of its own).
//! * [`proptest`]: random demand schedules (1–3 threads of requests, `request(0)` and
//!   cancels) checked against any publisher factory.
//! * [`Suite`], [`Outcome`], [`Report`]: how any verification is run and reported;
//!   [`publisher_tck!`](crate::publisher_tck) makes one `#[test]` per conformance test.
//!
//! # Quick start
//!
//! In a test file (with `weir = { features = ["tck"] }` as a dev-dependency):
//!
//! ```ignore
//! // One #[test] per rule, printed by name; a skip passes and writes
//! // "weir tck: SKIPPED <test>: why" to standard error, visible in `cargo test`.
//! weir::publisher_tck!(my_source_tck, |n| my_source(n));
//!
//! // Or configure the suite: a failing publisher, multi-subscribe, timeouts.
//! weir::publisher_tck!(
//!     my_source_full_tck,
//!     weir::tck::PublisherVerification::new(|n| my_source(n))
//!         .with_failed_publisher(|| weir::error::<u64>(weir::Error::msg("boom")))
//!         .with_multi_subscribe()
//! );
//!
//! #[test]
//! fn my_source_obeys_random_demand() {
//!     weir::tck::proptest::run_publisher(|n| my_source(n), 16, 64);
//! }
//! ```
//!
//! Without the macros, `run_all()` returns a [`Report`] and
//! [`Report::assert_all_passed`] panics listing every failure.
//!
//! # Timeouts
//!
//! Expected signals are awaited for 200 ms and quiet windows last as long (Java: 100
//! ms); set `DEFAULT_TIMEOUT_MILLIS`, `DEFAULT_NO_SIGNALS_TIMEOUT_MILLIS`,
//! `DEFAULT_POLL_TIMEOUT_MILLIS` or `PUBLISHER_REFERENCE_GC_TIMEOUT_MILLIS`, or pass a
//! [`TestEnv`]. Each test runs on its own thread under a watchdog, so a deadlock fails
//! the test instead of hanging the run.

mod blackbox;
mod capture;
mod env;
mod harness;
mod macros;
mod processor;
pub mod proptest;
mod publisher;
mod subscriber;
mod upstream;
mod whitebox;
mod whitebox_probe;

pub use blackbox::SubscriberBlackboxVerification;
pub use capture::{capture_subscriber, Capture, CapturedSubscriber};
pub use env::{TestEnv, TestEnvBuilder};
pub use harness::{Element, Outcome, Report, ReportEntry};
pub use processor::ProcessorVerification;
pub use publisher::PublisherVerification;
pub use subscriber::{Signal, Terminal, TestProbe, TestSubscriber, Violation};
pub use whitebox::SubscriberWhiteboxVerification;
pub use whitebox_probe::{ProbedSubscriber, SubscriberPuppet, WhiteboxProbe};

/// A conformance suite: a list of named tests, each checking one rule.
///
/// Implemented by every verification; the `*_tck!` macros use [`run_one`](Suite::run_one)
/// to give each test its own `#[test]`.
pub trait Suite {
    /// `(test name, rule)` of every test, in the TCK's order.
    fn tests(&self) -> Vec<(&'static str, &'static str)>;

    /// Run the test called `name`; `None` if the suite has no such test.
    fn run_one(&self, name: &str) -> Option<Outcome>;

    /// Run every test, in order.
    fn run_all(&self) -> Report {
        let entries = self
            .tests()
            .into_iter()
            .map(|(name, rule)| {
                let outcome = self.run_one(name).expect("every listed test runs");
                (name.to_owned(), rule, outcome)
            })
            .collect();
        Report { entries }
    }
}
