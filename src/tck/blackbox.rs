//! [`SubscriberBlackboxVerification`]: the 26 tests of the TCK's
//! `SubscriberBlackboxVerification`, for subscribers that cannot be instrumented.
//!
//! The kit plays the upstream (see [`upstream`](super::upstream)): it subscribes a fresh
//! subscriber from your factory, records what it requests and whether it cancels, and
//! sends it elements (`element(0)`, `element(1)`, …) and terminal signals. Only the
//! subscriber's calls on its subscription, and whether its signal methods return
//! normally (panics are rule 2.13 failures), are observed. 11 of the Java tests are
//! real checks; the three null-argument ones are moot in Rust, which leaves 8 checks
//! and 18 documented skips.
//!
//! Java's `required_spec201_blackbox_…` never sends an element (its loop condition is
//! inverted: reactive-streams-jvm issue #459). This port implements the intent: send
//! `min(n, 512)` elements, stopping early if the subscriber cancels, then complete.

use std::sync::Arc;

use super::harness::{ensure, moot, run_case, untested, TestResult, Verification};
use super::upstream::{call, test_error, ManualSubscription, UnderTest};
use super::{Element, Outcome, Report, Suite, TestEnv};
use crate::{Subscriber, Subscription};

type SubscriberFactory<S> = Arc<dyn Fn() -> S + Send + Sync>;
type Trigger<S> = Arc<dyn Fn(&mut S) + Send + Sync>;

/// Configuration and entry point of the black-box subscriber tests.
///
/// ```
/// use weir::prelude::*;
/// use weir::tck::{capture_subscriber, SubscriberBlackboxVerification};
///
/// SubscriberBlackboxVerification::new(
///     || capture_subscriber::<u64, _>(|p| p.collect_with(16)).0,
///     |i| i,
/// )
/// .run_all()
/// .assert_all_passed();
/// ```
pub struct SubscriberBlackboxVerification<T, S> {
    factory: SubscriberFactory<S>,
    element: Arc<dyn Fn(u64) -> T + Send + Sync>,
    trigger: Option<Trigger<S>>,
    env: TestEnv,
}

impl<T, S> Clone for SubscriberBlackboxVerification<T, S> {
    fn clone(&self) -> Self {
        SubscriberBlackboxVerification {
            factory: self.factory.clone(),
            element: self.element.clone(),
            trigger: self.trigger.clone(),
            env: self.env.clone(),
        }
    }
}

impl<T, S> std::fmt::Debug for SubscriberBlackboxVerification<T, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubscriberBlackboxVerification")
            .field("env", &self.env)
            .finish_non_exhaustive()
    }
}

impl<T, S> SubscriberBlackboxVerification<T, S>
where
    T: Element,
    S: Subscriber<T> + Send + 'static,
{
    /// Verify the subscribers made by `factory`; `element(i)` makes the i-th element
    /// the kit sends (elements should be distinct).
    pub fn new<F, E>(factory: F, element: E) -> Self
    where
        F: Fn() -> S + Send + Sync + 'static,
        E: Fn(u64) -> T + Send + Sync + 'static,
    {
        SubscriberBlackboxVerification {
            factory: Arc::new(factory),
            element: Arc::new(element),
            trigger: None,
            env: TestEnv::new(),
        }
    }

    /// A hook for subscribers that only request after an outside stimulus (Java's
    /// `triggerRequest`): called on the subscriber before the kit waits for a request.
    pub fn with_trigger_request(
        mut self,
        trigger: impl Fn(&mut S) + Send + Sync + 'static,
    ) -> Self {
        self.trigger = Some(Arc::new(trigger));
        self
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

    /// A fresh subscriber subscribed to a fresh stage.
    fn stage(&self, env: &TestEnv) -> Result<UnderTest<T, S>, String> {
        UnderTest::new(env, (self.factory)(), self.element.clone())
    }

    /// Run the trigger hook, then expect a request.
    fn triggered_request(&self, env: &TestEnv, stage: &mut UnderTest<T, S>) -> Result<u64, String> {
        if let Some(trigger) = &self.trigger {
            call("the trigger_request hook", || {
                trigger(&mut stage.subscriber)
            })?;
        }
        stage
            .subscription
            .expect_request(env.default_timeout())
            .map_err(|e| format!("rule 2.1: {e}"))
    }

    /// Rule 2.1: the subscriber requests; it is sent `min(n, 512)` elements
    /// (fewer if it cancels) and `on_complete`.
    ///
    /// TCK: `required_spec201_blackbox_mustSignalDemandViaSubscriptionRequest`.
    pub fn spec_2_1_must_signal_demand_via_subscription_request(&self) -> Outcome {
        self.run(
            "spec_2_1_must_signal_demand_via_subscription_request",
            "2.1",
            |v, env| {
                let mut stage = v.stage(env)?;
                let n = v.triggered_request(env, &mut stage)?;
                for i in 0..n.min(512) {
                    if i % 10 == 0 && stage.subscription.is_cancelled() {
                        break;
                    }
                    stage.send_next()?;
                }
                stage.send_complete()?;
                Ok(())
            },
        )
    }

    /// Rule 2.2: untested (advice).
    ///
    /// TCK: `untested_spec202_blackbox_shouldAsynchronouslyDispatch`.
    pub fn spec_2_2_should_asynchronously_dispatch(&self) -> Outcome {
        untested("2.2", "asynchronous dispatch is advice")
    }

    /// Rule 2.3: `on_complete` must not call the subscription.
    ///
    /// TCK: `required_spec203_blackbox_mustNotCallMethodsOnSubscriptionOrPublisherInOnComplete`.
    pub fn spec_2_3_must_not_call_subscription_in_on_complete(&self) -> Outcome {
        self.run(
            "spec_2_3_must_not_call_subscription_in_on_complete",
            "2.3",
            |v, env| v.fresh_then(env, |stage| stage.send_complete()),
        )
    }

    /// Rule 2.3: `on_error` must not call the subscription.
    ///
    /// TCK: `required_spec203_blackbox_mustNotCallMethodsOnSubscriptionOrPublisherInOnError`.
    pub fn spec_2_3_must_not_call_subscription_in_on_error(&self) -> Outcome {
        self.run(
            "spec_2_3_must_not_call_subscription_in_on_error",
            "2.3",
            |v, env| v.fresh_then(env, |stage| stage.send_error(test_error())),
        )
    }

    fn fresh_then(
        &self,
        env: &TestEnv,
        send: fn(&mut UnderTest<T, S>) -> Result<(), String>,
    ) -> TestResult {
        let mut stage = self.stage(env)?;
        send(&mut stage)?;
        env.verify_no_async_failures_now()?;
        Ok(())
    }

    /// Rule 2.4: untested.
    ///
    /// TCK: `untested_spec204_blackbox_mustConsiderTheSubscriptionAsCancelledInAfterRecievingOnCompleteOrOnError`.
    pub fn spec_2_4_must_consider_subscription_cancelled_after_terminal_signal(&self) -> Outcome {
        untested("2.4", "the subscriber's internal state is not observable")
    }

    /// Rule 2.5: a second `on_subscribe` must be answered by cancelling the new
    /// subscription, without requesting from it.
    ///
    /// TCK: `required_spec205_blackbox_mustCallSubscriptionCancelIfItAlreadyHasAnSubscriptionAndReceivesAnotherOnSubscribeSignal`.
    pub fn spec_2_5_must_cancel_a_second_subscription(&self) -> Outcome {
        self.run(
            "spec_2_5_must_cancel_a_second_subscription",
            "2.5",
            |v, env| {
                let mut stage = v.stage(env)?;
                let second = ManualSubscription::forbidding_requests(env, "2.5");
                stage.send_subscribe(Subscription::new(second.clone()))?;
                second
                    .expect_cancel(env.default_timeout())
                    .map_err(|e| format!("the second subscription: {e}"))?;
                ensure(!stage.subscription.is_cancelled(), || {
                    "the subscriber cancelled the first subscription".into()
                })?;
                stage.send_complete()?;
                Ok(())
            },
        )
    }

    /// Rule 2.6: untested.
    ///
    /// TCK: `untested_spec206_blackbox_mustCallSubscriptionCancelIfItIsNoLongerValid`.
    pub fn spec_2_6_must_cancel_when_the_subscription_is_no_longer_needed(&self) -> Outcome {
        untested("2.6", "'no longer needed' is not observable from outside")
    }

    /// Rule 2.7: untested (and structural in weir: `Subscription` is `Sync`).
    ///
    /// TCK: `untested_spec207_blackbox_mustEnsureAllCallsOnItsSubscriptionTakePlaceFromTheSameThreadOrTakeCareOfSynchronization`.
    pub fn spec_2_7_must_call_the_subscription_serially(&self) -> Outcome {
        untested(
            "2.7",
            "calls from one subscriber are not observable as concurrent",
        )
    }

    /// Rule 2.8: untested in the black-box suite (the white-box one checks it).
    ///
    /// TCK: `untested_spec208_blackbox_mustBePreparedToReceiveOnNextSignalsAfterHavingCalledSubscriptionCancel`.
    pub fn spec_2_8_must_accept_on_next_after_cancel(&self) -> Outcome {
        untested(
            "2.8",
            "needs the white-box puppet to make the subscriber cancel",
        )
    }

    /// Rule 2.9: after a request, `on_complete` is accepted.
    ///
    /// TCK: `required_spec209_blackbox_mustBePreparedToReceiveAnOnCompleteSignalWithPrecedingRequestCall`.
    pub fn spec_2_9_must_accept_on_complete_with_preceding_request(&self) -> Outcome {
        self.run(
            "spec_2_9_must_accept_on_complete_with_preceding_request",
            "2.9",
            |v, env| {
                let mut stage = v.stage(env)?;
                v.triggered_request(env, &mut stage)?;
                stage.send_complete()?;
                Ok(())
            },
        )
    }

    /// Rule 2.9: `on_complete` right after `on_subscribe` is accepted.
    ///
    /// TCK: `required_spec209_blackbox_mustBePreparedToReceiveAnOnCompleteSignalWithoutPrecedingRequestCall`.
    pub fn spec_2_9_must_accept_on_complete_without_preceding_request(&self) -> Outcome {
        self.run(
            "spec_2_9_must_accept_on_complete_without_preceding_request",
            "2.9",
            |v, env| {
                v.stage(env)?.send_complete()?;
                Ok(())
            },
        )
    }

    /// Rule 2.10: after a request, `on_error` is accepted.
    ///
    /// TCK: `required_spec210_blackbox_mustBePreparedToReceiveAnOnErrorSignalWithPrecedingRequestCall`.
    pub fn spec_2_10_must_accept_on_error_with_preceding_request(&self) -> Outcome {
        self.run(
            "spec_2_10_must_accept_on_error_with_preceding_request",
            "2.10",
            |v, env| {
                let mut stage = v.stage(env)?;
                v.triggered_request(env, &mut stage)?;
                stage.send_error(test_error())?;
                Ok(())
            },
        )
    }

    /// Rule 2.10: `on_error` right after `on_subscribe` is accepted.
    ///
    /// TCK: `required_spec210_blackbox_mustBePreparedToReceiveAnOnErrorSignalWithoutPrecedingRequestCall`.
    pub fn spec_2_10_must_accept_on_error_without_preceding_request(&self) -> Outcome {
        self.run(
            "spec_2_10_must_accept_on_error_without_preceding_request",
            "2.10",
            |v, env| {
                v.stage(env)?.send_error(test_error())?;
                Ok(())
            },
        )
    }

    /// Rule 2.11: moot in safe Rust.
    ///
    /// TCK: `untested_spec211_blackbox_mustMakeSureThatAllCallsOnItsMethodsHappenBeforeTheProcessingOfTheRespectiveEvents`.
    pub fn spec_2_11_signal_calls_happen_before_processing(&self) -> Outcome {
        moot(
            "2.11",
            "Send/Sync and data-race freedom give the happens-before edge",
        )
    }

    /// Rule 2.12: moot, subscribers are moved into `subscribe`.
    ///
    /// TCK: `untested_spec212_blackbox_mustNotCallOnSubscribeMoreThanOnceBasedOnObjectEquality`.
    pub fn spec_2_12_must_not_accept_on_subscribe_twice_for_one_subscriber(&self) -> Outcome {
        moot("2.12", "a moved subscriber cannot be subscribed twice")
    }

    /// Rule 2.13 (failing signal methods): untested. Every test here fails if a
    /// signal method panics.
    ///
    /// TCK: `untested_spec213_blackbox_failingOnSignalInvocation`.
    pub fn spec_2_13_failing_on_signal_invocation(&self) -> Outcome {
        untested(
            "2.13",
            "every test of this suite fails on a panicking signal method",
        )
    }

    /// Rule 2.13 `on_subscribe(null)`: moot.
    ///
    /// TCK: `required_spec213_blackbox_onSubscribe_mustThrowNullPointerExceptionWhenParametersAreNull`.
    pub fn spec_2_13_on_subscribe_null_subscription(&self) -> Outcome {
        moot("2.13", "a Subscription cannot be null")
    }

    /// Rule 2.13 `on_next(null)`: moot.
    ///
    /// TCK: `required_spec213_blackbox_onNext_mustThrowNullPointerExceptionWhenParametersAreNull`.
    pub fn spec_2_13_on_next_null_element(&self) -> Outcome {
        moot("2.13", "an element cannot be null")
    }

    /// Rule 2.13 `on_error(null)`: moot.
    ///
    /// TCK: `required_spec213_blackbox_onError_mustThrowNullPointerExceptionWhenParametersAreNull`.
    pub fn spec_2_13_on_error_null_error(&self) -> Outcome {
        moot("2.13", "an Error cannot be null")
    }

    /// Rule 3.1: untested.
    ///
    /// TCK: `untested_spec301_blackbox_mustNotBeCalledOutsideSubscriberContext`.
    pub fn spec_3_1_must_not_be_called_outside_subscriber_context(&self) -> Outcome {
        untested("3.1", "the calling context is not observable")
    }

    /// Rule 3.8: untested in the black-box suite (the white-box one checks it).
    ///
    /// TCK: `untested_spec308_blackbox_requestMustRegisterGivenNumberElementsToBeProduced`.
    pub fn spec_3_8_request_must_register_demand(&self) -> Outcome {
        untested("3.8", "needs the white-box probe")
    }

    /// Rule 3.10: untested.
    ///
    /// TCK: `untested_spec310_blackbox_requestMaySynchronouslyCallOnNextOnSubscriber`.
    pub fn spec_3_10_request_may_call_on_next_synchronously(&self) -> Outcome {
        untested("3.10", "a permission of the publisher")
    }

    /// Rule 3.11: untested.
    ///
    /// TCK: `untested_spec311_blackbox_requestMaySynchronouslyCallOnCompleteOrOnError`.
    pub fn spec_3_11_request_may_call_terminal_signals_synchronously(&self) -> Outcome {
        untested("3.11", "a permission of the publisher")
    }

    /// Rule 3.14: untested.
    ///
    /// TCK: `untested_spec314_blackbox_cancelMayCauseThePublisherToShutdownIfNoOtherSubscriptionExists`.
    pub fn spec_3_14_cancel_may_shut_the_publisher_down(&self) -> Outcome {
        untested("3.14", "a permission of the publisher")
    }

    /// Rule 3.15: untested.
    ///
    /// TCK: `untested_spec315_blackbox_cancelMustNotThrowExceptionAndMustSignalOnError`.
    pub fn spec_3_15_cancel_must_return_normally(&self) -> Outcome {
        untested("3.15", "concerns the publisher's cancel")
    }

    /// Rule 3.16: untested.
    ///
    /// TCK: `untested_spec316_blackbox_requestMustNotThrowExceptionAndMustOnErrorTheSubscriber`.
    pub fn spec_3_16_request_must_return_normally(&self) -> Outcome {
        untested("3.16", "concerns the publisher's request")
    }
}

impl<T, S> Verification for SubscriberBlackboxVerification<T, S>
where
    T: Element,
    S: Subscriber<T> + Send + 'static,
{
    fn base_env(&self) -> &TestEnv {
        &self.env
    }
}

impl<T, S> Suite for SubscriberBlackboxVerification<T, S>
where
    T: Element,
    S: Subscriber<T> + Send + 'static,
{
    fn tests(&self) -> Vec<(&'static str, &'static str)> {
        crate::__tck_blackbox_tests!(names)
    }

    fn run_one(&self, name: &str) -> Option<Outcome> {
        run_case(self, crate::__tck_blackbox_tests!(cases), name)
    }
}

/// The canonical list of black-box subscriber tests: the shared subscriber list alone.
#[doc(hidden)]
#[macro_export]
macro_rules! __tck_blackbox_tests {
    ($($mode:tt)*) => {
        $crate::__tck_subscriber_tests! { ($($mode)*) [] }
    };
}

/// The tests both subscriber suites share, in the TCK's order, after the suite's own
/// leading entries `$first` (none for the black-box suite, `happy_path` for the
/// white-box one). Same names and rules in both: only the bodies differ.
#[doc(hidden)]
#[macro_export]
macro_rules! __tck_subscriber_tests {
    (($($mode:tt)*) [$($first:tt)*]) => {
        $crate::__tck_expand! { ($($mode)*) [
            $($first)*
            spec_2_1_must_signal_demand_via_subscription_request => "2.1",
            spec_2_2_should_asynchronously_dispatch => "2.2",
            spec_2_3_must_not_call_subscription_in_on_complete => "2.3",
            spec_2_3_must_not_call_subscription_in_on_error => "2.3",
            spec_2_4_must_consider_subscription_cancelled_after_terminal_signal => "2.4",
            spec_2_5_must_cancel_a_second_subscription => "2.5",
            spec_2_6_must_cancel_when_the_subscription_is_no_longer_needed => "2.6",
            spec_2_7_must_call_the_subscription_serially => "2.7",
            spec_2_8_must_accept_on_next_after_cancel => "2.8",
            spec_2_9_must_accept_on_complete_with_preceding_request => "2.9",
            spec_2_9_must_accept_on_complete_without_preceding_request => "2.9",
            spec_2_10_must_accept_on_error_with_preceding_request => "2.10",
            spec_2_10_must_accept_on_error_without_preceding_request => "2.10",
            spec_2_11_signal_calls_happen_before_processing => "2.11",
            spec_2_12_must_not_accept_on_subscribe_twice_for_one_subscriber => "2.12",
            spec_2_13_failing_on_signal_invocation => "2.13",
            spec_2_13_on_subscribe_null_subscription => "2.13",
            spec_2_13_on_next_null_element => "2.13",
            spec_2_13_on_error_null_error => "2.13",
            spec_3_1_must_not_be_called_outside_subscriber_context => "3.1",
            spec_3_8_request_must_register_demand => "3.8",
            spec_3_10_request_may_call_on_next_synchronously => "3.10",
            spec_3_11_request_may_call_terminal_signals_synchronously => "3.11",
            spec_3_14_cancel_may_shut_the_publisher_down => "3.14",
            spec_3_15_cancel_must_return_normally => "3.15",
            spec_3_16_request_must_return_normally => "3.16",
        ] }
    };
}
