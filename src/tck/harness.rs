//! What every verification shares: the [`Outcome`] of one test, the [`Report`] of a
//! suite, and the watchdog that runs a test body. Every suite implements
//! [`Verification`] (its `run*` methods put a test body under the watchdog) and
//! answers [`Suite::run_one`](super::Suite::run_one) with [`run_case`].
//!
//! # The watchdog
//!
//! Reentrancy bugs in Rust publishers show up as deadlocks (a `Mutex` held across
//! `on_next`) or panics (a `RefCell` borrowed twice), not as stack traces. So every
//! test body runs on its own named thread with a fresh [`TestEnv`]; the caller waits
//! for it with a generous deadline (the test's *budget*). A panic becomes
//! [`Outcome::Fail`] with the panic message, a hang becomes a `Fail` saying so (the
//! stuck thread is left behind: a thread cannot be killed, and a stuck CI job is worse).
//!
//! A body returns `Result<(), Failure>`; any `Err(String)` converts into a failure
//! with `?`. After a body returns `Ok`, the failures other threads recorded in the
//! environment are checked (Java's `verifyNoAsyncErrorsNoDelay`). Every failure text
//! starts with `rule <id>`, so a report line always names the rule.

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::time::Duration;

use super::TestEnv;

/// The element types the verifications can work with: comparable (sequences are
/// checked), printable (failure messages show them) and sendable between threads.
pub trait Element: Clone + fmt::Debug + PartialEq + Send + 'static {}

impl<T: Clone + fmt::Debug + PartialEq + Send + 'static> Element for T {}

/// How one conformance test ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The rule held.
    Pass,
    /// The rule was broken; the text starts with `rule <id>` and says what happened.
    Fail(String),
    /// Not run, and why: an untested or Rust-moot rule, a configuration that rules the
    /// test out (for example no failed-publisher factory), or an optional test that
    /// did not hold.
    Skip(String),
}

impl Outcome {
    /// True for [`Outcome::Pass`].
    pub fn is_pass(&self) -> bool {
        matches!(self, Outcome::Pass)
    }

    /// True for [`Outcome::Fail`].
    pub fn is_fail(&self) -> bool {
        matches!(self, Outcome::Fail(_))
    }

    /// True for [`Outcome::Skip`].
    pub fn is_skip(&self) -> bool {
        matches!(self, Outcome::Skip(_))
    }

    /// For generated `#[test]`s: return on `Pass`; on `Skip`, write
    /// `weir tck: SKIPPED {test}: {reason}` to the process's standard error (past the
    /// test harness's capture, so a skip shows in `cargo test`'s output next to the
    /// `ok` it would otherwise be); on `Fail`, panic with the failure text, located at
    /// the caller (the test), not inside weir.
    #[track_caller]
    pub fn assert_not_failed(&self) {
        match self {
            Outcome::Pass => {}
            Outcome::Skip(reason) => {
                use std::io::Write;
                let current = std::thread::current();
                let test = current.name().unwrap_or("a conformance test");
                // Straight to the file descriptor: `eprintln!` would be captured.
                let _ = writeln!(std::io::stderr(), "weir tck: SKIPPED {test}: {reason}");
            }
            Outcome::Fail(message) => panic!("{message}"),
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Pass => f.write_str("pass"),
            Outcome::Fail(message) => write!(f, "FAIL: {message}"),
            Outcome::Skip(reason) => write!(f, "skipped: {reason}"),
        }
    }
}

/// One line of a [`Report`]: the test's name, the rule it checks, and its outcome.
pub type ReportEntry = (String, &'static str, Outcome);

/// The outcomes of a whole suite, in the order the tests ran.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// `(test name, rule, outcome)` per test.
    pub entries: Vec<ReportEntry>,
}

impl Report {
    /// The outcome of the test called `name`, if it ran.
    pub fn outcome(&self, name: &str) -> Option<&Outcome> {
        self.entries
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, _, o)| o)
    }

    /// How many tests passed.
    pub fn passed(&self) -> usize {
        self.entries.iter().filter(|(_, _, o)| o.is_pass()).count()
    }

    /// How many tests failed.
    pub fn failed(&self) -> usize {
        self.entries.iter().filter(|(_, _, o)| o.is_fail()).count()
    }

    /// How many tests were skipped.
    pub fn skipped(&self) -> usize {
        self.entries.iter().filter(|(_, _, o)| o.is_skip()).count()
    }

    /// The failed tests.
    pub fn failures(&self) -> Vec<&ReportEntry> {
        self.entries
            .iter()
            .filter(|(_, _, o)| o.is_fail())
            .collect()
    }

    /// Panic listing every failed test, if any.
    pub fn assert_all_passed(&self) {
        let failures = self.failures();
        if !failures.is_empty() {
            let lines: Vec<String> = failures
                .iter()
                .map(|(name, rule, outcome)| format!("  {name} [{rule}]: {outcome}"))
                .collect();
            panic!(
                "{} of {} conformance tests failed:\n{}",
                failures.len(),
                self.entries.len(),
                lines.join("\n")
            );
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} passed, {} failed, {} skipped",
            self.passed(),
            self.failed(),
            self.skipped()
        )?;
        for (name, rule, outcome) in &self.entries {
            writeln!(f, "  {name} [{rule}]: {outcome}")?;
        }
        Ok(())
    }
}

/// Why a test body stopped early.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The rule was broken.
    Fail(String),
    /// The test does not apply.
    Skip(String),
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure::Fail(message)
    }
}

impl From<&str> for Failure {
    fn from(message: &str) -> Self {
        Failure::Fail(message.to_owned())
    }
}

/// What a test body returns.
pub(crate) type TestResult = Result<(), Failure>;

/// Stop the body with a skip.
pub(crate) fn skip(reason: impl Into<String>) -> TestResult {
    Err(Failure::Skip(reason.into()))
}

/// Stop the body with a failure unless `condition` holds.
pub(crate) fn ensure(condition: bool, message: impl FnOnce() -> String) -> TestResult {
    if condition {
        Ok(())
    } else {
        Err(Failure::Fail(message()))
    }
}

/// One entry of a suite's dispatch table: name, rule, test method.
pub(crate) type Case<V> = (&'static str, &'static str, fn(&V) -> Outcome);

/// The dispatch of every [`Suite::run_one`](super::Suite::run_one): run the test called
/// `name` in `cases` on `verification`; `None` if there is no such test.
pub(crate) fn run_case<V>(verification: &V, cases: Vec<Case<V>>, name: &str) -> Option<Outcome> {
    cases
        .into_iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, _, test)| test(verification))
}

/// How the TCK classifies a test, which decides what a failure means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A failure is a failure.
    Required,
    /// A failure becomes a skip (Java's `optional_` tests), except where noted.
    Optional,
}

/// The watchdog budget shared by most tests: room for many expected signals and
/// quiet windows, plus the test's own `extra`. Saturating: a timeout of
/// `Duration::MAX` (wait as long as it takes) makes the budget unbounded too.
fn budget(env: &TestEnv, extra: Duration) -> Duration {
    env.default_timeout()
        .saturating_mul(20)
        .saturating_add(env.no_signals_timeout().saturating_mul(20))
        .saturating_add(env.reference_drop_timeout().saturating_mul(2))
        .saturating_add(extra)
}

/// What every verification shares: it is a cloneable configuration holding the
/// [`TestEnv`] its tests start from, and runs each test body on a clone of itself
/// under the watchdog.
pub(crate) trait Verification: Clone + Send + 'static {
    /// The timeouts each test gets a fresh copy of.
    fn base_env(&self) -> &TestEnv;

    /// Run the required test `name` with the standard budget.
    fn run(
        &self,
        name: &str,
        rule: &'static str,
        body: fn(&Self, &TestEnv) -> TestResult,
    ) -> Outcome {
        self.run_with(name, rule, Kind::Required, Duration::ZERO, body)
    }

    /// Run the optional test `name` (a failure becomes a skip) with the standard budget.
    fn run_optional(
        &self,
        name: &str,
        rule: &'static str,
        body: fn(&Self, &TestEnv) -> TestResult,
    ) -> Outcome {
        self.run_with(name, rule, Kind::Optional, Duration::ZERO, body)
    }

    /// Run `body` on a clone of this verification under the watchdog; `extra` is added
    /// to the standard budget.
    fn run_with(
        &self,
        name: &str,
        rule: &'static str,
        kind: Kind,
        extra: Duration,
        body: fn(&Self, &TestEnv) -> TestResult,
    ) -> Outcome {
        let verification = self.clone();
        let env = self.base_env();
        run_test(name, rule, kind, env, budget(env, extra), move |env| {
            body(&verification, env)
        })
    }
}

/// Run `body` under the watchdog with a fresh copy of `env` and turn its result into
/// an [`Outcome`] whose failure text names `rule`.
fn run_test<F>(
    name: &str,
    rule: &'static str,
    kind: Kind,
    env: &TestEnv,
    budget: Duration,
    body: F,
) -> Outcome
where
    F: FnOnce(&TestEnv) -> TestResult + Send + 'static,
{
    let env = env.fresh();
    let (tx, rx) = mpsc::channel();
    let thread_env = env.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("tck-{name}"))
        .spawn(move || {
            let result = catch_unwind(AssertUnwindSafe(|| body(&thread_env)));
            let _ = tx.send(result);
        });
    if let Err(e) = spawned {
        return Outcome::Fail(format!("rule {rule}: could not start the test thread: {e}"));
    }
    // A violation a probe recorded while the test failed is the cause, named by its
    // own rule; the test's check saw the consequence (an item past the end of a
    // publisher of 3 seen as "4 of 3 expected" by the rule 1.2 test, say). Also set
    // when the violation is the only failure.
    let mut cause_named = false;
    let result = match rx.recv_timeout(budget) {
        Ok(Ok(Err(Failure::Fail(message)))) => {
            Err(Failure::Fail(match env.verify_no_async_failures_now() {
                Err(cause) => {
                    cause_named = true;
                    format!("{cause} (the test then saw: {message})")
                }
                Ok(()) => message,
            }))
        }
        Ok(Ok(result)) => result.and_then(|()| {
            env.verify_no_async_failures_now().map_err(|violation| {
                cause_named = true;
                Failure::Fail(violation)
            })
        }),
        Ok(Err(panic)) => Err(Failure::Fail(format!(
            "the test panicked: {}",
            panic_message(&*panic)
        ))),
        Err(_) => Err(Failure::Fail(format!(
            "the test did not finish within {budget:?}: a deadlock or a hang \
             (a lock held across a signal breaks rules 3.2/3.3)"
        ))),
    };
    match (result, kind) {
        (Ok(()), _) => Outcome::Pass,
        (Err(Failure::Skip(reason)), _) => Outcome::Skip(reason),
        (Err(Failure::Fail(message)), Kind::Required) => {
            // Violations recorded by probes already start with their rule.
            let prefix = format!("rule {rule}: ");
            if cause_named || message.starts_with(&prefix) {
                Outcome::Fail(message)
            } else {
                Outcome::Fail(prefix + &message)
            }
        }
        // A protocol violation a probe recorded breaks a required rule of its own
        // (1.1, 1.3, 1.7, 1.9, 2.5), whichever test was running when it happened.
        (Err(Failure::Fail(message)), Kind::Optional) if cause_named => Outcome::Fail(message),
        (Err(Failure::Fail(message)), Kind::Optional) => {
            Outcome::Skip(format!("optional rule {rule} does not hold: {message}"))
        }
    }
}

/// The message of a caught panic, when it is a string.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&'static str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_owned()
    }
}

/// Skip text for tests the TCK itself does not verify.
pub(crate) fn untested(rule: &str, why: &str) -> Outcome {
    Outcome::Skip(format!(
        "rule {rule} is not verified by the TCK (untested): {why}"
    ))
}

/// Skip text for tests Rust's type system makes moot.
pub(crate) fn moot(rule: &str, why: &str) -> Outcome {
    Outcome::Skip(format!("rule {rule} is moot in Rust: {why}"))
}
