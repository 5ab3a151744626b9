//! [`PublisherVerification`]: the 38 tests of the TCK's `PublisherVerification`, run
//! against publishers made by your factory.
//!
//! # Shape
//!
//! The verification holds a factory `Fn(u64) -> P`: `factory(n)` must return a fresh
//! publisher of exactly `n` elements that then completes (`n == u64::MAX` means an
//! infinite stream). Each test is a method named after its rule
//! (`spec_1_1_must_not_signal_more_than_requested`, …) returning an [`Outcome`]; the
//! body runs under the watchdog of [`harness`](super) with a fresh [`TestEnv`], so a
//! deadlock or a panic fails the test instead of the process. [`run_all`]
//! runs every test and returns a [`Report`]; the [`publisher_tck!`](crate::publisher_tck)
//! macro turns each test into its own `#[test]`.
//!
//! The probing subscriber is [`TestSubscriber`], built with
//! [`reporting_to`](super::TestSubscriber::reporting_to) so every protocol violation it
//! sees (rules 1.1, 1.3, 1.7, 1.9, 2.5) fails the running test.
//!
//! # Adaptations to Rust
//!
//! * Negative requests and null subscribers cannot be expressed: those tests are
//!   documented skips. The rule 3.9 message check moves onto `request(0)`.
//! * Rule 1.11 needs several subscriptions to one publisher, and `subscribe` consumes
//!   it: the 1.11 tests subscribe *clones* and run only after
//!   [`with_multi_subscribe`](PublisherVerification::with_multi_subscribe) (`P: Clone`);
//!   otherwise they skip.
//! * Rule 3.13 is checked deterministically: the publisher gets a subscriber whose
//!   `Drop` sets a flag, which must be set within the reference-drop grace period
//!   after `cancel`.
//! * Rule 3.17's `Long.MAX_VALUE` is `u64::MAX` ([`UNBOUNDED`](crate::demand::UNBOUNDED)).
//! * The 3.3 test stops requesting after `bound + 1` elements, so a publisher that
//!   recurses cannot overflow the stack (which would abort the process).
//!
//! [`run_all`]: PublisherVerification::run_all

use std::sync::Arc;

use super::harness::{run_case, Failure, TestResult, Verification};
use super::{Element, Outcome, Report, Suite, TestEnv, TestProbe, TestSubscriber};
use crate::{BoxPublisher, Publisher};

mod rules_1;
mod rules_3;

type PublisherFactory<P> = Arc<dyn Fn(u64) -> P + Send + Sync>;
type FailedFactory<T> = Arc<dyn Fn() -> BoxPublisher<T> + Send + Sync>;
/// Makes another handle on a publisher, for the tests that subscribe several times.
pub(crate) type Cloner<P> = Arc<dyn Fn(&P) -> P + Send + Sync>;

/// Configuration and entry point of the publisher conformance tests.
///
/// ```
/// use weir::tck::PublisherVerification;
///
/// let report = PublisherVerification::new(|n| weir::range(0..n))
///     .with_multi_subscribe()
///     .stochastic_iterations(10)
///     .run_all();
/// report.assert_all_passed();
/// ```
pub struct PublisherVerification<P: Publisher> {
    factory: PublisherFactory<P>,
    failed: Option<FailedFactory<P::Item>>,
    cloner: Option<Cloner<P>>,
    max_elements: u64,
    bounded_recursion_depth: u64,
    skip_stochastic: bool,
    stochastic_iterations: u32,
    env: TestEnv,
}

impl<P: Publisher> Clone for PublisherVerification<P> {
    fn clone(&self) -> Self {
        PublisherVerification {
            factory: self.factory.clone(),
            failed: self.failed.clone(),
            cloner: self.cloner.clone(),
            max_elements: self.max_elements,
            bounded_recursion_depth: self.bounded_recursion_depth,
            skip_stochastic: self.skip_stochastic,
            stochastic_iterations: self.stochastic_iterations,
            env: self.env.clone(),
        }
    }
}

impl<P: Publisher> std::fmt::Debug for PublisherVerification<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublisherVerification")
            .field("failed_publisher", &self.failed.is_some())
            .field("multi_subscribe", &self.cloner.is_some())
            .field("max_elements", &self.max_elements)
            .field("bounded_recursion_depth", &self.bounded_recursion_depth)
            .field("skip_stochastic", &self.skip_stochastic)
            .field("stochastic_iterations", &self.stochastic_iterations)
            .field("env", &self.env)
            .finish()
    }
}

impl<P> PublisherVerification<P>
where
    P: Publisher + 'static,
    P::Item: Element,
{
    /// Verify the publishers made by `factory`: `factory(n)` returns a fresh publisher
    /// of exactly `n` elements followed by `on_complete` (`u64::MAX`: infinite).
    pub fn new<F>(factory: F) -> Self
    where
        F: Fn(u64) -> P + Send + Sync + 'static,
    {
        PublisherVerification {
            factory: Arc::new(factory),
            failed: None,
            cloner: None,
            max_elements: u64::MAX - 1,
            bounded_recursion_depth: 1,
            skip_stochastic: false,
            stochastic_iterations: 100,
            env: TestEnv::new(),
        }
    }

    /// A factory of publishers that call `on_subscribe` and then fail with `on_error`
    /// (rules 1.4 and 1.9). Without one, the two tests that need it skip.
    pub fn with_failed_publisher<F, Q>(mut self, factory: F) -> Self
    where
        F: Fn() -> Q + Send + Sync + 'static,
        Q: Publisher<Item = P::Item> + Send + 'static,
    {
        self.failed = Some(Arc::new(move || BoxPublisher::new(factory())));
        self
    }

    /// Run the rule 1.11 tests, which subscribe several clones of one publisher.
    pub fn with_multi_subscribe(mut self) -> Self
    where
        P: Clone,
    {
        self.cloner = Some(Arc::new(P::clone));
        self
    }

    /// Subscribe clones made by `cloner` in the rule 1.11 tests (processor halves).
    pub(crate) fn with_cloner(mut self, cloner: Cloner<P>) -> Self {
        self.cloner = Some(cloner);
        self
    }

    /// The largest stream the factory can make (default `u64::MAX - 1`). Tests needing
    /// more elements skip; `u64::MAX` means "never completes" and skips every test that
    /// needs `on_complete`.
    pub fn max_elements(mut self, max: u64) -> Self {
        self.max_elements = max;
        self
    }

    /// The synchronous `request` → `on_next` recursion depth the rule 3.3 test allows
    /// (default 1). Must be at least 1.
    pub fn bounded_recursion_depth(mut self, depth: u64) -> Self {
        self.bounded_recursion_depth = depth;
        self
    }

    /// Skip the stochastic rule 1.3 test.
    pub fn skip_stochastic(mut self, skip: bool) -> Self {
        self.skip_stochastic = skip;
        self
    }

    /// Iterations of the stochastic rule 1.3 test (default 100, as in Java).
    pub fn stochastic_iterations(mut self, iterations: u32) -> Self {
        self.stochastic_iterations = iterations;
        self
    }

    /// Timeouts; each test runs with a [`fresh`](TestEnv::fresh) copy.
    pub fn env(mut self, env: TestEnv) -> Self {
        self.env = env;
        self
    }

    /// The timeouts in use.
    pub fn test_env(&self) -> &TestEnv {
        &self.env
    }

    /// Run every test, in the TCK's order.
    pub fn run_all(&self) -> Report {
        Suite::run_all(self)
    }

    /// Skip unless the factory can make `n` elements (and complete, if `complete`).
    fn active(&self, n: u64, complete: bool) -> TestResult {
        if n > self.max_elements {
            return Err(Failure::Skip(format!(
                "needs {n} elements; max_elements is {}",
                self.max_elements
            )));
        }
        if complete && self.max_elements == u64::MAX {
            return Err(Failure::Skip(
                "needs on_complete; max_elements is u64::MAX (never completes)".into(),
            ));
        }
        Ok(())
    }

    /// A fresh publisher of `n` elements with a plain probing subscriber attached; skips
    /// unless the factory can make them (and complete, if `complete`).
    fn subscribe(
        &self,
        env: &TestEnv,
        n: u64,
        complete: bool,
    ) -> Result<TestProbe<P::Item>, Failure> {
        self.active(n, complete)?;
        let subscriber = probing_subscriber(env).expected_len(n);
        Ok(attach(env, (self.factory)(n), subscriber)?)
    }
}

/// A probing subscriber reporting to `env`.
pub(crate) fn probing_subscriber<T>(env: &TestEnv) -> TestSubscriber<T> {
    TestSubscriber::new().reporting_to(env)
}

/// Subscribe `subscriber` to `publisher` and wait for `on_subscribe`.
pub(crate) fn attach<T, Q>(
    env: &TestEnv,
    publisher: Q,
    subscriber: TestSubscriber<T>,
) -> Result<TestProbe<T>, String>
where
    T: Element,
    Q: Publisher<Item = T>,
{
    let probe = subscriber.probe();
    publisher.subscribe(subscriber);
    probe
        .await_subscribed(env.default_timeout())
        .map_err(|e| format!("rule 1.9: {e}"))?;
    Ok(probe)
}

/// A plain probing subscriber on `publisher`, once `on_subscribe` arrived.
pub(crate) fn attach_probe<T, Q>(env: &TestEnv, publisher: Q) -> Result<TestProbe<T>, String>
where
    T: Element,
    Q: Publisher<Item = T>,
{
    attach(env, publisher, probing_subscriber(env))
}

/// `count` plain probing subscribers: on clones of `publisher` made by `cloner`, the
/// last on `publisher` itself.
pub(crate) fn attach_clones<T, Q>(
    env: &TestEnv,
    publisher: Q,
    cloner: &Cloner<Q>,
    count: usize,
) -> Result<Vec<TestProbe<T>>, String>
where
    T: Element,
    Q: Publisher<Item = T>,
{
    let mut probes = Vec::with_capacity(count);
    for _ in 1..count {
        probes.push(attach_probe(env, cloner(&publisher))?);
    }
    probes.push(attach_probe(env, publisher)?);
    Ok(probes)
}

impl<P> Verification for PublisherVerification<P>
where
    P: Publisher + 'static,
    P::Item: Element,
{
    fn base_env(&self) -> &TestEnv {
        &self.env
    }
}

impl<P> Suite for PublisherVerification<P>
where
    P: Publisher + 'static,
    P::Item: Element,
{
    fn tests(&self) -> Vec<(&'static str, &'static str)> {
        crate::__tck_publisher_tests!(names)
    }

    fn run_one(&self, name: &str) -> Option<Outcome> {
        run_case(self, crate::__tck_publisher_tests!(cases), name)
    }
}

/// The canonical list of publisher tests, expanded by `$crate::__tck_expand!`.
#[doc(hidden)]
#[macro_export]
macro_rules! __tck_publisher_tests {
    ($($mode:tt)*) => {
        $crate::__tck_expand! { ($($mode)*) [
            create_publisher_1_must_produce_a_stream_of_exactly_1_element => "setup",
            create_publisher_3_must_produce_a_stream_of_exactly_3_elements => "setup",
            validate_max_elements_from_publisher => "config",
            validate_bounded_depth_of_on_next_and_request_recursion => "config",
            spec_1_1_must_not_signal_more_than_requested => "1.1",
            spec_1_2_may_signal_less_than_requested_and_terminate => "1.2",
            spec_1_3_must_signal_serially => "1.3",
            spec_1_4_must_signal_on_error_when_fails => "1.4",
            spec_1_5_must_signal_on_complete_when_finite_stream_terminates => "1.5",
            spec_1_5_empty_stream_must_terminate_by_signalling_on_complete => "1.5",
            spec_1_6_must_consider_subscription_cancelled_after_terminal_signal => "1.6",
            spec_1_7_must_not_signal_after_on_complete => "1.7",
            spec_1_7_must_not_signal_after_on_error => "1.7",
            spec_1_8_cancelled_subscription_should_not_receive_terminal_signals => "1.8",
            spec_1_9_subscribe_should_not_panic => "1.9",
            spec_1_9_subscribe_with_null_subscriber => "1.9",
            spec_1_9_must_signal_on_subscribe_first => "1.9",
            spec_1_9_may_reject_subscribe_with_on_error_after_on_subscribe => "1.9",
            spec_1_10_reject_same_subscriber_subscribing_twice => "1.10",
            spec_1_11_may_support_multi_subscribe => "1.11",
            spec_1_11_subscribers_must_receive_on_next_or_on_complete => "1.11",
            spec_1_11_multicast_same_sequence_when_requesting_one_by_one => "1.11",
            spec_1_11_multicast_same_sequence_when_requesting_many_upfront => "1.11",
            spec_1_11_multicast_same_sequence_and_completion_when_requesting_many_upfront => "1.11",
            spec_3_2_must_allow_synchronous_request_from_on_next_and_on_subscribe => "3.2",
            spec_3_3_must_not_allow_unbounded_recursion => "3.3",
            spec_3_4_request_should_not_perform_heavy_computations => "3.4",
            spec_3_5_cancel_must_not_synchronously_perform_heavy_computation => "3.5",
            spec_3_6_request_after_cancel_must_be_a_no_op => "3.6",
            spec_3_7_cancel_after_cancel_must_be_a_no_op => "3.7",
            spec_3_9_request_zero_must_signal_error => "3.9",
            spec_3_9_request_negative_must_signal_error => "3.9",
            spec_3_9_request_zero_should_signal_error_with_specific_message => "3.9",
            spec_3_12_cancel_must_make_the_publisher_eventually_stop_signalling => "3.12",
            spec_3_13_cancel_must_make_the_publisher_eventually_drop_the_subscriber => "3.13",
            spec_3_17_must_support_pending_element_count_up_to_unbounded => "3.17",
            spec_3_17_must_support_cumulative_pending_element_count_up_to_unbounded => "3.17",
            spec_3_17_must_not_signal_on_error_when_pending_above_unbounded => "3.17",
        ] }
    };
}
