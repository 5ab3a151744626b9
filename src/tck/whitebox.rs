//! [`SubscriberWhiteboxVerification`]: the 27 tests of the TCK's
//! `SubscriberWhiteboxVerification`.
//!
//! Your factory gets a [`WhiteboxProbe`] and returns the subscriber under test, which
//! reports its signals to the probe and registers a [`SubscriberPuppet`] on
//! `on_subscribe` (or is wrapped in a [`ProbedSubscriber`](super::ProbedSubscriber)).
//! The kit plays the upstream (see [`upstream`](super::upstream)), drives demand and
//! cancellation through the puppet, and checks what the subscriber requested,
//! cancelled and reported. "Setup" below means: subscribe to a fresh stage and wait
//! for the puppet.
//!
//! Of the 27 tests, 11 are real checks; the three null-argument ones are moot in Rust
//! and 13 are untested in the TCK too (documented skips).

use std::sync::Arc;

use super::harness::{moot, run_case, untested, TestResult, Verification};
use super::upstream::{test_error, ManualSubscription, UnderTest};
use super::whitebox_probe::{SubscriberPuppet, WhiteboxProbe};
use super::{Element, Outcome, Report, Suite, TestEnv};
use crate::{Subscriber, Subscription};

type WhiteboxFactory<T, S> = Arc<dyn Fn(WhiteboxProbe<T>) -> S + Send + Sync>;

/// Configuration and entry point of the white-box subscriber tests.
///
/// ```
/// use weir::prelude::*;
/// use weir::tck::{capture_subscriber, ProbedSubscriber, SubscriberWhiteboxVerification};
///
/// SubscriberWhiteboxVerification::new(
///     |probe| {
///         let (sink, handle) = capture_subscriber::<u64, _>(|p| p.collect_with(2));
///         ProbedSubscriber::with_puppet(sink, probe, handle)
///     },
///     |i| i,
/// )
/// .run_all()
/// .assert_all_passed();
/// ```
pub struct SubscriberWhiteboxVerification<T, S> {
    factory: WhiteboxFactory<T, S>,
    element: Arc<dyn Fn(u64) -> T + Send + Sync>,
    env: TestEnv,
}

impl<T, S> Clone for SubscriberWhiteboxVerification<T, S> {
    fn clone(&self) -> Self {
        SubscriberWhiteboxVerification {
            factory: self.factory.clone(),
            element: self.element.clone(),
            env: self.env.clone(),
        }
    }
}

impl<T, S> std::fmt::Debug for SubscriberWhiteboxVerification<T, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubscriberWhiteboxVerification")
            .field("env", &self.env)
            .finish_non_exhaustive()
    }
}

/// A subscriber on a stage, with its probe and puppet.
struct Rig<T, S> {
    stage: UnderTest<T, S>,
    probe: WhiteboxProbe<T>,
    puppet: Arc<dyn SubscriberPuppet>,
}

impl<T, S> SubscriberWhiteboxVerification<T, S>
where
    T: Element,
    S: Subscriber<T> + Send + 'static,
{
    /// Verify the subscribers `factory` builds around the probe it is given;
    /// `element(i)` makes the i-th element the kit sends (elements should be distinct).
    pub fn new<F, E>(factory: F, element: E) -> Self
    where
        F: Fn(WhiteboxProbe<T>) -> S + Send + Sync + 'static,
        E: Fn(u64) -> T + Send + Sync + 'static,
    {
        SubscriberWhiteboxVerification {
            factory: Arc::new(factory),
            element: Arc::new(element),
            env: TestEnv::new(),
        }
    }

    /// Timeouts; each test runs with a fresh copy.
    pub fn env(mut self, env: TestEnv) -> Self {
        self.env = env;
        self
    }

    /// Run every test, in the TCK's order.
    pub fn run_all(&self) -> Report {
        Suite::run_all(self)
    }

    fn setup(&self, env: &TestEnv) -> Result<Rig<T, S>, String> {
        let probe = WhiteboxProbe::new(env);
        let stage = UnderTest::new(env, (self.factory)(probe.clone()), self.element.clone())?;
        let puppet = probe.puppet(env.default_timeout())?;
        env.verify_no_async_failures_now()?;
        Ok(Rig {
            stage,
            probe,
            puppet,
        })
    }

    /// Send the next element; the probe must report it.
    fn round_trip(env: &TestEnv, s: &mut Rig<T, S>) -> Result<(), String> {
        let item = s.stage.send_next()?;
        s.probe.expect_next(&item, env.default_timeout())
    }

    fn expect_request(env: &TestEnv, s: &Rig<T, S>) -> Result<u64, String> {
        s.stage.subscription.expect_request(env.default_timeout())
    }

    /// Setup: request, receive two elements, cancel.
    ///
    /// TCK: `required_exerciseWhiteboxHappyPath`.
    pub fn happy_path(&self) -> Outcome {
        self.run("happy_path", "setup", |v, env| {
            let mut s = v.setup(env)?;
            s.puppet.trigger_request(1);
            s.puppet.trigger_request(1);
            let n = Self::expect_request(env, &s)?;
            Self::round_trip(env, &mut s)?;
            s.puppet.trigger_request(1);
            if n == 1 {
                Self::expect_request(env, &s)?;
            }
            Self::round_trip(env, &mut s)?;
            s.puppet.signal_cancel();
            s.stage.subscription.expect_cancel(env.default_timeout())?;
            env.verify_no_async_failures()?;
            Ok(())
        })
    }

    /// Rule 2.1: after `trigger_request(1)` the subscriber requests, and accepts
    /// an element.
    ///
    /// TCK: `required_spec201_mustSignalDemandViaSubscriptionRequest`.
    pub fn spec_2_1_must_signal_demand_via_subscription_request(&self) -> Outcome {
        self.run(
            "spec_2_1_must_signal_demand_via_subscription_request",
            "2.1",
            |v, env| {
                let mut s = v.setup(env)?;
                s.puppet.trigger_request(1);
                Self::expect_request(env, &s)?;
                s.stage.send_next()?;
                Ok(())
            },
        )
    }

    /// Rule 2.2: untested (advice).
    ///
    /// TCK: `untested_spec202_shouldAsynchronouslyDispatch`.
    pub fn spec_2_2_should_asynchronously_dispatch(&self) -> Outcome {
        untested("2.2", "asynchronous dispatch is advice")
    }

    /// Rule 2.3: `on_complete` must not call the subscription.
    ///
    /// TCK: `required_spec203_mustNotCallMethodsOnSubscriptionOrPublisherInOnComplete`.
    pub fn spec_2_3_must_not_call_subscription_in_on_complete(&self) -> Outcome {
        self.run(
            "spec_2_3_must_not_call_subscription_in_on_complete",
            "2.3",
            |v, env| {
                let probe = WhiteboxProbe::new(env);
                let mut stage = UnderTest::new(env, (v.factory)(probe), v.element.clone())?;
                stage.send_complete()?;
                Ok(())
            },
        )
    }

    /// Rule 2.3: `on_error` must not call the subscription.
    ///
    /// TCK: `required_spec203_mustNotCallMethodsOnSubscriptionOrPublisherInOnError`.
    pub fn spec_2_3_must_not_call_subscription_in_on_error(&self) -> Outcome {
        self.run(
            "spec_2_3_must_not_call_subscription_in_on_error",
            "2.3",
            |v, env| {
                let probe = WhiteboxProbe::new(env);
                let mut stage = UnderTest::new(env, (v.factory)(probe), v.element.clone())?;
                stage.send_error(test_error())?;
                Ok(())
            },
        )
    }

    /// Rule 2.4: untested.
    ///
    /// TCK: `untested_spec204_mustConsiderTheSubscriptionAsCancelledInAfterRecievingOnCompleteOrOnError`.
    pub fn spec_2_4_must_consider_subscription_cancelled_after_terminal_signal(&self) -> Outcome {
        untested("2.4", "the subscriber's internal state is not observable")
    }

    /// Rule 2.5: a second `on_subscribe` is answered by cancelling the new
    /// subscription (requests on it are ignored here, unlike the black-box test).
    ///
    /// TCK: `required_spec205_mustCallSubscriptionCancelIfItAlreadyHasAnSubscriptionAndReceivesAnotherOnSubscribeSignal`.
    pub fn spec_2_5_must_cancel_a_second_subscription(&self) -> Outcome {
        self.run(
            "spec_2_5_must_cancel_a_second_subscription",
            "2.5",
            |v, env| {
                let mut s = v.setup(env)?;
                let second = ManualSubscription::new(env);
                s.stage.send_subscribe(Subscription::new(second.clone()))?;
                second
                    .expect_cancel(env.default_timeout())
                    .map_err(|e| format!("the second subscription: {e}"))?;
                env.verify_no_async_failures()?;
                Ok(())
            },
        )
    }

    /// Rule 2.6: untested.
    ///
    /// TCK: `untested_spec206_mustCallSubscriptionCancelIfItIsNoLongerValid`.
    pub fn spec_2_6_must_cancel_when_the_subscription_is_no_longer_needed(&self) -> Outcome {
        untested("2.6", "'no longer needed' is not observable")
    }

    /// Rule 2.7: untested (and structural in weir: `Subscription` is `Sync`).
    ///
    /// TCK: `untested_spec207_mustEnsureAllCallsOnItsSubscriptionTakePlaceFromTheSameThreadOrTakeCareOfSynchronization`.
    pub fn spec_2_7_must_call_the_subscription_serially(&self) -> Outcome {
        untested(
            "2.7",
            "calls from one subscriber are not observable as concurrent",
        )
    }

    /// Rule 2.8: after cancelling, the subscriber still accepts an element.
    ///
    /// TCK: `required_spec208_mustBePreparedToReceiveOnNextSignalsAfterHavingCalledSubscriptionCancel`.
    pub fn spec_2_8_must_accept_on_next_after_cancel(&self) -> Outcome {
        self.run(
            "spec_2_8_must_accept_on_next_after_cancel",
            "2.8",
            |v, env| {
                let mut s = v.setup(env)?;
                s.puppet.trigger_request(1);
                Self::expect_request(env, &s)?;
                s.puppet.signal_cancel();
                s.stage.subscription.expect_cancel(env.default_timeout())?;
                s.stage.send_next()?;
                s.puppet.trigger_request(1);
                s.puppet.trigger_request(1);
                env.verify_no_async_failures()?;
                Ok(())
            },
        )
    }

    /// Rule 2.9: after a triggered request, `on_complete` reaches the probe.
    ///
    /// TCK: `required_spec209_mustBePreparedToReceiveAnOnCompleteSignalWithPrecedingRequestCall`.
    pub fn spec_2_9_must_accept_on_complete_with_preceding_request(&self) -> Outcome {
        self.run(
            "spec_2_9_must_accept_on_complete_with_preceding_request",
            "2.9",
            |v, env| v.complete_after(env, 1),
        )
    }

    /// Rule 2.9: `on_complete` right after setup reaches the probe.
    ///
    /// TCK: `required_spec209_mustBePreparedToReceiveAnOnCompleteSignalWithoutPrecedingRequestCall`.
    pub fn spec_2_9_must_accept_on_complete_without_preceding_request(&self) -> Outcome {
        self.run(
            "spec_2_9_must_accept_on_complete_without_preceding_request",
            "2.9",
            |v, env| v.complete_after(env, 0),
        )
    }

    /// Rule 2.10: after triggered requests, the very error sent reaches the probe.
    ///
    /// TCK: `required_spec210_mustBePreparedToReceiveAnOnErrorSignalWithPrecedingRequestCall`.
    pub fn spec_2_10_must_accept_on_error_with_preceding_request(&self) -> Outcome {
        self.run(
            "spec_2_10_must_accept_on_error_with_preceding_request",
            "2.10",
            |v, env| v.error_after(env, 2),
        )
    }

    /// Rule 2.10: an error right after setup reaches the probe.
    ///
    /// TCK: `required_spec210_mustBePreparedToReceiveAnOnErrorSignalWithoutPrecedingRequestCall`.
    pub fn spec_2_10_must_accept_on_error_without_preceding_request(&self) -> Outcome {
        self.run(
            "spec_2_10_must_accept_on_error_without_preceding_request",
            "2.10",
            |v, env| v.error_after(env, 0),
        )
    }

    /// Body of the rule 2.9 tests: after `requests` calls of `trigger_request(1)`, `on_complete`
    /// reaches the probe.
    fn complete_after(&self, env: &TestEnv, requests: usize) -> TestResult {
        let mut s = self.setup(env)?;
        (0..requests).for_each(|_| s.puppet.trigger_request(1));
        s.stage.send_complete()?;
        s.probe.expect_completion(env.default_timeout())?;
        env.verify_no_async_failures()?;
        Ok(())
    }

    /// Body of the rule 2.10 tests: after `requests` calls of `trigger_request(1)`, the very
    /// error sent reaches the probe.
    fn error_after(&self, env: &TestEnv, requests: usize) -> TestResult {
        let mut s = self.setup(env)?;
        (0..requests).for_each(|_| s.puppet.trigger_request(1));
        let error = test_error();
        s.stage.send_error(error.clone())?;
        s.probe.expect_error(&error, env.default_timeout())?;
        Ok(())
    }

    /// Rule 2.11: moot in safe Rust.
    ///
    /// TCK: `untested_spec211_mustMakeSureThatAllCallsOnItsMethodsHappenBeforeTheProcessingOfTheRespectiveEvents`.
    pub fn spec_2_11_signal_calls_happen_before_processing(&self) -> Outcome {
        moot(
            "2.11",
            "Send/Sync and data-race freedom give the happens-before edge",
        )
    }

    /// Rule 2.12: moot, subscribers are moved into `subscribe`.
    ///
    /// TCK: `untested_spec212_mustNotCallOnSubscribeMoreThanOnceBasedOnObjectEquality_specViolation`.
    pub fn spec_2_12_must_not_accept_on_subscribe_twice_for_one_subscriber(&self) -> Outcome {
        moot("2.12", "a moved subscriber cannot be subscribed twice")
    }

    /// Rule 2.13 (failing signal methods): untested. Every test here fails if a
    /// signal method panics.
    ///
    /// TCK: `untested_spec213_failingOnSignalInvocation`.
    pub fn spec_2_13_failing_on_signal_invocation(&self) -> Outcome {
        untested(
            "2.13",
            "every test of this suite fails on a panicking signal method",
        )
    }

    /// Rule 2.13 `on_subscribe(null)`: moot.
    ///
    /// TCK: `required_spec213_onSubscribe_mustThrowNullPointerExceptionWhenParametersAreNull`.
    pub fn spec_2_13_on_subscribe_null_subscription(&self) -> Outcome {
        moot("2.13", "a Subscription cannot be null")
    }

    /// Rule 2.13 `on_next(null)`: moot.
    ///
    /// TCK: `required_spec213_onNext_mustThrowNullPointerExceptionWhenParametersAreNull`.
    pub fn spec_2_13_on_next_null_element(&self) -> Outcome {
        moot("2.13", "an element cannot be null")
    }

    /// Rule 2.13 `on_error(null)`: moot.
    ///
    /// TCK: `required_spec213_onError_mustThrowNullPointerExceptionWhenParametersAreNull`.
    pub fn spec_2_13_on_error_null_error(&self) -> Outcome {
        moot("2.13", "an Error cannot be null")
    }

    /// Rule 3.1: untested.
    ///
    /// TCK: `untested_spec301_mustNotBeCalledOutsideSubscriberContext`.
    pub fn spec_3_1_must_not_be_called_outside_subscriber_context(&self) -> Outcome {
        untested("3.1", "the calling context is not observable")
    }

    /// Rule 3.8: `trigger_request(2)` leads to requests covering two elements,
    /// which both reach the probe; nothing else is reported.
    ///
    /// TCK: `required_spec308_requestMustRegisterGivenNumberElementsToBeProduced`.
    pub fn spec_3_8_request_must_register_demand(&self) -> Outcome {
        self.run("spec_3_8_request_must_register_demand", "3.8", |v, env| {
            let mut s = v.setup(env)?;
            s.puppet.trigger_request(2);
            let n = Self::expect_request(env, &s)?;
            Self::round_trip(env, &mut s)?;
            if n < 2 {
                Self::expect_request(env, &s)?;
            }
            Self::round_trip(env, &mut s)?;
            s.probe.expect_none(env.no_signals_timeout())?;
            s.puppet.trigger_request(3);
            env.verify_no_async_failures()?;
            Ok(())
        })
    }

    /// Rule 3.10: untested.
    ///
    /// TCK: `untested_spec310_requestMaySynchronouslyCallOnNextOnSubscriber`.
    pub fn spec_3_10_request_may_call_on_next_synchronously(&self) -> Outcome {
        untested("3.10", "a permission of the publisher")
    }

    /// Rule 3.11: untested.
    ///
    /// TCK: `untested_spec311_requestMaySynchronouslyCallOnCompleteOrOnError`.
    pub fn spec_3_11_request_may_call_terminal_signals_synchronously(&self) -> Outcome {
        untested("3.11", "a permission of the publisher")
    }

    /// Rule 3.14: untested.
    ///
    /// TCK: `untested_spec314_cancelMayCauseThePublisherToShutdownIfNoOtherSubscriptionExists`.
    pub fn spec_3_14_cancel_may_shut_the_publisher_down(&self) -> Outcome {
        untested("3.14", "a permission of the publisher")
    }

    /// Rule 3.15: untested.
    ///
    /// TCK: `untested_spec315_cancelMustNotThrowExceptionAndMustSignalOnError`.
    pub fn spec_3_15_cancel_must_return_normally(&self) -> Outcome {
        untested("3.15", "concerns the publisher's cancel")
    }

    /// Rule 3.16: untested.
    ///
    /// TCK: `untested_spec316_requestMustNotThrowExceptionAndMustOnErrorTheSubscriber`.
    pub fn spec_3_16_request_must_return_normally(&self) -> Outcome {
        untested("3.16", "concerns the publisher's request")
    }
}

impl<T, S> Verification for SubscriberWhiteboxVerification<T, S>
where
    T: Element,
    S: Subscriber<T> + Send + 'static,
{
    fn base_env(&self) -> &TestEnv {
        &self.env
    }
}

impl<T, S> Suite for SubscriberWhiteboxVerification<T, S>
where
    T: Element,
    S: Subscriber<T> + Send + 'static,
{
    fn tests(&self) -> Vec<(&'static str, &'static str)> {
        crate::__tck_whitebox_tests!(names)
    }

    fn run_one(&self, name: &str) -> Option<Outcome> {
        run_case(self, crate::__tck_whitebox_tests!(cases), name)
    }
}

/// The canonical list of white-box subscriber tests: `happy_path`, then the shared
/// subscriber list (`__tck_subscriber_tests!`, next to the black-box suite).
#[doc(hidden)]
#[macro_export]
macro_rules! __tck_whitebox_tests {
    ($($mode:tt)*) => {
        $crate::__tck_subscriber_tests! { ($($mode)*) [happy_path => "setup",] }
    };
}
