//! [`TestEnv`]: the timeouts of the conformance kit and the list of failures recorded
//! on threads other than the test's own.
//!
//! Port of the TCK's `TestEnvironment`. The four timeouts are `Duration`s; each is
//! resolved once, when the environment is built, in this order:
//!
//! 1. a value set on the [`TestEnvBuilder`] (explicit values always win);
//! 2. the environment variable of the same meaning (`DEFAULT_TIMEOUT_MILLIS`,
//!    `DEFAULT_NO_SIGNALS_TIMEOUT_MILLIS`, `DEFAULT_POLL_TIMEOUT_MILLIS`,
//!    `PUBLISHER_REFERENCE_GC_TIMEOUT_MILLIS`);
//! 3. the default. The Java TCK waits 100 ms for an expected signal; weir's kit waits
//!    [`TestEnv::DEFAULT_TIMEOUT`] = **200 ms**, because CI machines with two cores
//!    running many test binaries at once miss 100 ms deadlines. The no-signals and
//!    poll timeouts default to the resolved default timeout; the reference-drop grace
//!    defaults to 300 ms as in Java.
//!
//! Failures seen inside callbacks (a probing subscriber on a publisher's thread, a fake
//! subscription called from inside `on_complete`) cannot fail the test directly: they
//! are recorded with [`TestEnv::flop`] and checked by the test thread. Every test gets
//! a [`fresh`](TestEnv::fresh) environment: `cargo test` runs tests in parallel and a
//! shared list would blame one test for another's failure.

use std::fmt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Timeouts and the asynchronous-failure list of one conformance test.
///
/// Cheap to clone: clones share the failure list.
#[derive(Clone)]
pub struct TestEnv {
    default_timeout: Duration,
    no_signals_timeout: Duration,
    poll_timeout: Duration,
    reference_drop_timeout: Duration,
    failures: Arc<Mutex<Vec<String>>>,
}

impl fmt::Debug for TestEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestEnv")
            .field("default_timeout", &self.default_timeout)
            .field("no_signals_timeout", &self.no_signals_timeout)
            .field("poll_timeout", &self.poll_timeout)
            .field("reference_drop_timeout", &self.reference_drop_timeout)
            .field("async_failures", &self.async_failures().len())
            .finish()
    }
}

impl Default for TestEnv {
    fn default() -> Self {
        Self::new()
    }
}

impl TestEnv {
    /// How long to wait for an expected signal when neither the builder nor
    /// `DEFAULT_TIMEOUT_MILLIS` says otherwise (Java uses 100 ms; see the module docs).
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(200);

    /// Grace period after `cancel` before rule 3.13 checks that the subscriber was
    /// dropped, when neither the builder nor `PUBLISHER_REFERENCE_GC_TIMEOUT_MILLIS`
    /// says otherwise.
    pub const DEFAULT_REFERENCE_DROP_TIMEOUT: Duration = Duration::from_millis(300);

    /// An environment from the environment variables and defaults.
    pub fn new() -> Self {
        TestEnvBuilder::default().build()
    }

    /// A builder; values set on it win over environment variables.
    pub fn builder() -> TestEnvBuilder {
        TestEnvBuilder::default()
    }

    /// Same timeouts, new empty failure list (one environment per test).
    pub fn fresh(&self) -> TestEnv {
        TestEnv {
            failures: Arc::default(),
            ..self.clone()
        }
    }

    /// How long to wait for a signal that is expected (element, completion, request,
    /// cancel, `on_subscribe`).
    pub fn default_timeout(&self) -> Duration {
        self.default_timeout
    }

    /// How long to watch while asserting that *nothing* happens.
    pub fn no_signals_timeout(&self) -> Duration {
        self.no_signals_timeout
    }

    /// Interval for conditions that must be polled rather than awaited (for example
    /// the rule 3.13 drop flag).
    pub fn poll_timeout(&self) -> Duration {
        self.poll_timeout
    }

    /// Grace period after `cancel` within which a publisher must drop its subscriber
    /// (rule 3.13).
    pub fn reference_drop_timeout(&self) -> Duration {
        self.reference_drop_timeout
    }

    /// Record a failure seen on another thread (Java's `flop`). The test fails when it
    /// next checks the list.
    pub fn flop(&self, message: impl Into<String>) {
        lock(&self.failures).push(message.into());
    }

    /// The failures recorded so far, oldest first.
    pub fn async_failures(&self) -> Vec<String> {
        lock(&self.failures).clone()
    }

    /// Forget the recorded failures.
    pub fn clear_async_failures(&self) {
        lock(&self.failures).clear();
    }

    /// `Err` listing every recorded failure, without waiting.
    pub fn verify_no_async_failures_now(&self) -> Result<(), String> {
        let failures = self.async_failures();
        if failures.is_empty() {
            Ok(())
        } else {
            Err(failures.join("; "))
        }
    }

    /// Check now, wait [`no_signals_timeout`](Self::no_signals_timeout), check again:
    /// gives late failures on other threads time to arrive.
    pub fn verify_no_async_failures(&self) -> Result<(), String> {
        self.verify_no_async_failures_now()?;
        std::thread::sleep(self.no_signals_timeout);
        self.verify_no_async_failures_now()
    }
}

/// Builds a [`TestEnv`]; see the module docs for how values are resolved.
#[derive(Clone, Debug, Default)]
pub struct TestEnvBuilder {
    default_timeout: Option<Duration>,
    no_signals_timeout: Option<Duration>,
    poll_timeout: Option<Duration>,
    reference_drop_timeout: Option<Duration>,
}

impl TestEnvBuilder {
    /// How long to wait for an expected signal.
    pub fn default_timeout(mut self, timeout: Duration) -> Self {
        self.default_timeout = Some(timeout);
        self
    }

    /// How long to watch while asserting that nothing happens.
    pub fn no_signals_timeout(mut self, timeout: Duration) -> Self {
        self.no_signals_timeout = Some(timeout);
        self
    }

    /// Polling interval.
    pub fn poll_timeout(mut self, timeout: Duration) -> Self {
        self.poll_timeout = Some(timeout);
        self
    }

    /// Grace period for rule 3.13 (the publisher must drop a cancelled subscriber).
    pub fn reference_drop_timeout(mut self, timeout: Duration) -> Self {
        self.reference_drop_timeout = Some(timeout);
        self
    }

    /// Resolve every timeout: explicit value, then environment variable, then default.
    pub fn build(self) -> TestEnv {
        let default_timeout = self
            .default_timeout
            .or_else(|| env_millis("DEFAULT_TIMEOUT_MILLIS"))
            .unwrap_or(TestEnv::DEFAULT_TIMEOUT);
        let no_signals_timeout = self
            .no_signals_timeout
            .or_else(|| env_millis("DEFAULT_NO_SIGNALS_TIMEOUT_MILLIS"))
            .unwrap_or(default_timeout);
        let poll_timeout = self
            .poll_timeout
            .or_else(|| env_millis("DEFAULT_POLL_TIMEOUT_MILLIS"))
            .unwrap_or(default_timeout);
        let reference_drop_timeout = self
            .reference_drop_timeout
            .or_else(|| env_millis("PUBLISHER_REFERENCE_GC_TIMEOUT_MILLIS"))
            .unwrap_or(TestEnv::DEFAULT_REFERENCE_DROP_TIMEOUT);
        TestEnv {
            default_timeout,
            no_signals_timeout,
            poll_timeout,
            reference_drop_timeout,
            failures: Arc::default(),
        }
    }
}

/// Reads `name` as a number of milliseconds. An unparsable value is a configuration
/// error worth shouting about, so it panics with the variable's name.
fn env_millis(name: &str) -> Option<Duration> {
    let value = std::env::var(name).ok()?;
    let millis: u64 = value
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{name} must be a number of milliseconds, got {value:?}"));
    Some(Duration::from_millis(millis))
}

/// Lock, ignoring poison: a panicking test thread must not hide other failures.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Lock `mutex` and wait on `changed` until `done` holds or `timeout` has passed; the
/// guard is returned either way (poison is ignored, as in [`lock`]).
pub(crate) fn wait_for<'a, S>(
    mutex: &'a Mutex<S>,
    changed: &Condvar,
    timeout: Duration,
    done: impl Fn(&S) -> bool,
) -> MutexGuard<'a, S> {
    // A timeout that does not fit the clock (`Duration::MAX`) waits without a deadline.
    let deadline = crate::runtime::deadline(Instant::now(), timeout);
    let mut state = lock(mutex);
    while !done(&state) {
        state = match deadline {
            None => changed
                .wait(state)
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
            Some(deadline) => {
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                changed
                    .wait_timeout(state, deadline - now)
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .0
            }
        };
    }
    state
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_values_win_and_derived_defaults_follow_the_default_timeout() {
        let env = TestEnv::builder()
            .default_timeout(Duration::from_millis(7))
            .reference_drop_timeout(Duration::from_millis(9))
            .build();
        assert_eq!(env.default_timeout(), Duration::from_millis(7));
        assert_eq!(env.reference_drop_timeout(), Duration::from_millis(9));
        // Unless the variables are set in the environment of this test run, the
        // derived timeouts follow the default timeout.
        if std::env::var("DEFAULT_NO_SIGNALS_TIMEOUT_MILLIS").is_err() {
            assert_eq!(env.no_signals_timeout(), Duration::from_millis(7));
        }
    }

    #[test]
    fn fresh_environments_do_not_share_failures() {
        let env = TestEnv::builder()
            .no_signals_timeout(Duration::ZERO)
            .build();
        env.flop("rule 1.1: boom");
        let fresh = env.fresh();
        assert!(fresh.verify_no_async_failures().is_ok());
        assert_eq!(
            env.verify_no_async_failures_now().unwrap_err(),
            "rule 1.1: boom"
        );
    }
}
