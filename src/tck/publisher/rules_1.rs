//! The setup, configuration and rule 1.x (Publisher) tests of
//! [`PublisherVerification`]. Each test's doc names the TCK test it ports.

use super::{attach, attach_clones, attach_probe, probing_subscriber, PublisherVerification};
use crate::tck::harness::{ensure, moot, skip, untested, Failure, Kind, TestResult, Verification};
use crate::tck::{Element, Outcome, TestEnv, TestProbe};
use crate::Publisher;

impl<P> PublisherVerification<P>
where
    P: Publisher + 'static,
    P::Item: Element,
{
    /// Setup: `factory(1)` emits one element on `request(1)`, then completes.
    ///
    /// TCK: `required_createPublisher1MustProduceAStreamOfExactly1Element`.
    pub fn create_publisher_1_must_produce_a_stream_of_exactly_1_element(&self) -> Outcome {
        let name = "create_publisher_1_must_produce_a_stream_of_exactly_1_element";
        self.run(name, "setup", |v, env| v.exactly(env, 1))
    }

    /// Setup: `factory(3)` emits three elements one request at a time, then completes.
    ///
    /// TCK: `required_createPublisher3MustProduceAStreamOfExactly3Elements`.
    pub fn create_publisher_3_must_produce_a_stream_of_exactly_3_elements(&self) -> Outcome {
        let name = "create_publisher_3_must_produce_a_stream_of_exactly_3_elements";
        self.run(name, "setup", |v, env| v.exactly(env, 3))
    }

    /// Configuration: Java asserts `maxElementsFromPublisher() >= 0`; a `u64` cannot be
    /// negative, so this is a documented skip.
    ///
    /// TCK: `required_validate_maxElementsFromPublisher`.
    pub fn validate_max_elements_from_publisher(&self) -> Outcome {
        moot("config", "max_elements is a u64 and cannot be negative")
    }

    /// Configuration: the allowed recursion depth of the 3.3 test must be at least 1.
    ///
    /// TCK: `required_validate_boundedDepthOfOnNextAndRequestRecursion`.
    pub fn validate_bounded_depth_of_on_next_and_request_recursion(&self) -> Outcome {
        if self.bounded_recursion_depth >= 1 {
            Outcome::Pass
        } else {
            Outcome::Fail("rule config: bounded_recursion_depth must be at least 1, got 0".into())
        }
    }

    /// Rule 1.1: nothing arrives before a request; `request(1)` yields exactly
    /// one element; `request(1)` + `request(2)` yield exactly three more.
    ///
    /// TCK: `required_spec101_subscriptionRequestMustResultInTheCorrectNumberOfProducedElements`.
    pub fn spec_1_1_must_not_signal_more_than_requested(&self) -> Outcome {
        let name = "spec_1_1_must_not_signal_more_than_requested";
        self.run(name, "1.1", |v, env| {
            let (t, quiet) = (env.default_timeout(), env.no_signals_timeout());
            let probe = v.subscribe(env, 5, false)?;
            probe
                .expect_signal_count(1, quiet)
                .map_err(|e| format!("before any request: {e}"))?;
            probe.request(1);
            probe.await_items(1, t)?;
            probe
                .expect_signal_count(2, quiet)
                .map_err(|e| format!("after request(1): {e}"))?;
            probe.request(1);
            probe.request(2);
            probe.await_items(4, t)?;
            probe
                .expect_signal_count(5, quiet)
                .map_err(|e| format!("after 4 requested: {e}"))?;
            probe.cancel();
            Ok(())
        })
    }

    /// Rule 1.2: `request(10)` on a stream of 3 yields 3 elements and `on_complete`.
    ///
    /// TCK: `required_spec102_maySignalLessThanRequestedAndTerminateSubscription`.
    pub fn spec_1_2_may_signal_less_than_requested_and_terminate(&self) -> Outcome {
        let name = "spec_1_2_may_signal_less_than_requested_and_terminate";
        self.run(name, "1.2", |v, env| {
            let probe = v.subscribe(env, 3, true)?;
            probe.request(10);
            probe.await_items(3, env.default_timeout())?;
            probe.await_completion(env.default_timeout())?;
            exact_count(&probe, 3)
        })
    }

    /// Rule 1.3 (stochastic): a subscriber requesting one more from every
    /// `on_next` must see serial signals and completion, `stochastic_iterations` times.
    ///
    /// TCK: `stochastic_spec103_mustSignalOnMethodsSequentially`.
    pub fn spec_1_3_must_signal_serially(&self) -> Outcome {
        if self.skip_stochastic {
            return Outcome::Skip("stochastic tests are skipped by configuration".into());
        }
        // Saturating: `Duration::MAX` stays "as long as it takes".
        let per_iteration = self.env.default_timeout().saturating_mul(10);
        let extra = per_iteration.saturating_mul(self.stochastic_iterations);
        self.run_with(
            "spec_1_3_must_signal_serially",
            "1.3",
            Kind::Required,
            extra,
            |v, env| {
                v.active(10, true)?;
                for iteration in 0..v.stochastic_iterations {
                    let subscriber = probing_subscriber(env)
                        .request_on_subscribe(1)
                        .request_on_next(1);
                    let probe = attach(env, (v.factory)(10), subscriber)?;
                    let at = |e: String| format!("iteration {iteration}: {e}");
                    probe
                        .await_completion(env.default_timeout().saturating_mul(10))
                        .map_err(at)?;
                    exact_count(&probe, 10)?;
                    env.verify_no_async_failures_now().map_err(at)?;
                }
                Ok(())
            },
        )
    }

    /// Rule 1.4: the failed publisher signals `on_subscribe` then `on_error`,
    /// without any request, and nothing else. Skips without a failed-publisher factory;
    /// unlike other optional tests, a failure is a failure.
    ///
    /// TCK: `optional_spec104_mustSignalOnErrorWhenFails`.
    pub fn spec_1_4_must_signal_on_error_when_fails(&self) -> Outcome {
        let name = "spec_1_4_must_signal_on_error_when_fails";
        self.run(name, "1.4", |v, env| {
            v.rejects(env)?;
            env.verify_no_async_failures().map_err(Failure::Fail)
        })
    }

    /// Rule 1.5: three elements one request at a time, then `on_complete`, then
    /// silence.
    ///
    /// TCK: `required_spec105_mustSignalOnCompleteWhenFiniteStreamTerminates`.
    pub fn spec_1_5_must_signal_on_complete_when_finite_stream_terminates(&self) -> Outcome {
        let name = "spec_1_5_must_signal_on_complete_when_finite_stream_terminates";
        self.run(name, "1.5", |v, env| {
            let probe = v.subscribe(env, 3, true)?;
            for i in 1..=3 {
                probe.request(1);
                probe.await_items(i, env.default_timeout())?;
            }
            probe.request(1);
            probe.await_completion(env.default_timeout())?;
            probe
                .expect_signal_count(5, env.no_signals_timeout())
                .map_err(|e| format!("after on_complete: {e}"))?;
            exact_count(&probe, 3)
        })
    }

    /// Rule 1.5 (optional): an empty stream completes after `request(1)`.
    ///
    /// TCK: `optional_spec105_emptyStreamMustTerminateBySignallingOnComplete`.
    pub fn spec_1_5_empty_stream_must_terminate_by_signalling_on_complete(&self) -> Outcome {
        let name = "spec_1_5_empty_stream_must_terminate_by_signalling_on_complete";
        self.run_optional(name, "1.5", |v, env| {
            let probe = v.subscribe(env, 0, true)?;
            probe.request(1);
            probe.await_completion(env.default_timeout())?;
            probe
                .expect_signal_count(2, env.no_signals_timeout())
                .map_err(|e| format!("after on_complete: {e}"))?;
            exact_count(&probe, 0)
        })
    }

    /// Rule 1.6: untested in the TCK (internal state).
    ///
    /// TCK: `untested_spec106_mustConsiderSubscriptionCancelledAfterOnErrorOrOnCompleteHasBeenCalled`.
    pub fn spec_1_6_must_consider_subscription_cancelled_after_terminal_signal(&self) -> Outcome {
        untested(
            "1.6",
            "the publisher's internal state after a terminal signal is not observable",
        )
    }

    /// Rule 1.7: after `on_complete`, a further `request(10)` produces nothing.
    ///
    /// TCK: `required_spec107_mustNotEmitFurtherSignalsOnceOnCompleteHasBeenSignalled`.
    pub fn spec_1_7_must_not_signal_after_on_complete(&self) -> Outcome {
        let name = "spec_1_7_must_not_signal_after_on_complete";
        self.run(name, "1.7", |v, env| {
            let probe = v.subscribe(env, 1, true)?;
            probe.request(10);
            probe.await_items(1, env.default_timeout())?;
            probe.await_completion(env.default_timeout())?;
            probe.request(10);
            probe
                .expect_signal_count(3, env.no_signals_timeout())
                .map_err(|e| format!("after on_complete: {e}"))?;
            Ok(())
        })
    }

    /// Rule 1.7 after `on_error`: untested in the TCK. Every test's probing
    /// subscriber flags any signal after a terminal one.
    ///
    /// TCK: `untested_spec107_mustNotEmitFurtherSignalsOnceOnErrorHasBeenSignalled`.
    pub fn spec_1_7_must_not_signal_after_on_error(&self) -> Outcome {
        untested(
            "1.7",
            "no signals after on_error; every probing subscriber flags them",
        )
    }

    /// Rule 1.8: untested in the TCK (the 3.12 test covers similar ground).
    ///
    /// TCK: `untested_spec108_possiblyCanceledSubscriptionShouldNotReceiveOnErrorOrOnCompleteSignals`.
    pub fn spec_1_8_cancelled_subscription_should_not_receive_terminal_signals(&self) -> Outcome {
        untested("1.8", "'eventually' is not observable; see spec_3_12")
    }

    /// Rule 1.9 "subscribe must return normally": untested in the TCK. In this
    /// kit a panicking `subscribe` fails whichever test it happens in.
    ///
    /// TCK: `untested_spec109_subscribeShouldNotThrowNonFatalThrowable`.
    pub fn spec_1_9_subscribe_should_not_panic(&self) -> Outcome {
        untested("1.9", "a panic in subscribe fails every other test")
    }

    /// Rule 1.9 null subscriber: moot, a Rust subscriber cannot be null.
    ///
    /// TCK: `required_spec109_subscribeThrowNPEOnNullSubscriber`.
    pub fn spec_1_9_subscribe_with_null_subscriber(&self) -> Outcome {
        moot("1.9", "there is no null subscriber to reject")
    }

    /// Rule 1.9: `on_subscribe` arrives once, before any other signal, without
    /// any request.
    ///
    /// TCK: `required_spec109_mustIssueOnSubscribeForNonNullSubscriber`.
    pub fn spec_1_9_must_signal_on_subscribe_first(&self) -> Outcome {
        let name = "spec_1_9_must_signal_on_subscribe_first";
        self.run(name, "1.9", |v, env| {
            let probe = v.subscribe(env, 0, false)?;
            probe.cancel();
            Ok(())
        })
    }

    /// Rule 1.9: a publisher that rejects a subscriber signals `on_subscribe`,
    /// then `on_error`. Skips without a failed-publisher factory.
    ///
    /// TCK: `required_spec109_mayRejectCallsToSubscribeIfPublisherIsUnableOrUnwillingToServeThemRejectionMustTriggerOnErrorAfterOnSubscribe`.
    pub fn spec_1_9_may_reject_subscribe_with_on_error_after_on_subscribe(&self) -> Outcome {
        let name = "spec_1_9_may_reject_subscribe_with_on_error_after_on_subscribe";
        self.run(name, "1.9", |v, env| v.rejects(env))
    }

    /// Rule 1.10: moot, `subscribe` takes the subscriber by value.
    ///
    /// TCK: `untested_spec110_rejectASubscriptionRequestIfTheSameSubscriberSubscribesTwice`.
    pub fn spec_1_10_reject_same_subscriber_subscribing_twice(&self) -> Outcome {
        moot(
            "1.10",
            "subscribe moves the subscriber, so it cannot be subscribed twice",
        )
    }

    /// Rule 1.11 (optional): two clones of one publisher each signal `on_subscribe`.
    ///
    /// TCK: `optional_spec111_maySupportMultiSubscribe`.
    pub fn spec_1_11_may_support_multi_subscribe(&self) -> Outcome {
        let name = "spec_1_11_may_support_multi_subscribe";
        self.run_optional(name, "1.11", |v, env| {
            let probes = v.subscribe_many(env, 1, false, 2)?;
            env.verify_no_async_failures()?;
            probes.iter().for_each(TestProbe::cancel);
            Ok(())
        })
    }

    /// Rule 1.11 (optional): two subscribers each get an element or `on_complete`
    /// after `request(1)` (unicast is allowed).
    ///
    /// TCK: `optional_spec111_registeredSubscribersMustReceiveOnNextOrOnCompleteSignals`.
    pub fn spec_1_11_subscribers_must_receive_on_next_or_on_complete(&self) -> Outcome {
        let name = "spec_1_11_subscribers_must_receive_on_next_or_on_complete";
        self.run_optional(name, "1.11", |v, env| {
            let probes = v.subscribe_many(env, 1, false, 2)?;
            for probe in &probes {
                probe.request(1);
                let _ = probe.await_items(1, env.default_timeout());
                ensure(probe.received_count() == 1 || probe.is_completed(), || {
                    "a subscriber got neither an element nor on_complete".into()
                })?;
            }
            env.verify_no_async_failures()?;
            probes.iter().for_each(TestProbe::cancel);
            Ok(())
        })
    }

    /// Rule 1.11 (optional): three subscribers requesting with different
    /// patterns receive the same five elements and complete.
    ///
    /// TCK: `optional_spec111_multicast_mustProduceTheSameElementsInTheSameSequenceToAllOfItsSubscribersWhenRequestingOneByOne`.
    pub fn spec_1_11_multicast_same_sequence_when_requesting_one_by_one(&self) -> Outcome {
        let name = "spec_1_11_multicast_same_sequence_when_requesting_one_by_one";
        self.run_optional(name, "1.11", |v, env| {
            let p = v.subscribe_many(env, 5, true, 3)?;
            let t = env.default_timeout();
            let take = |probe: &TestProbe<P::Item>, k: u64| {
                let target = probe.received_count() + k;
                probe.request(k);
                probe.await_items(target, t)
            };
            take(&p[0], 1)?;
            take(&p[1], 2)?;
            take(&p[0], 1)?;
            take(&p[2], 3)?;
            take(&p[2], 1)?;
            take(&p[2], 1)?;
            take(&p[1], 3)?;
            take(&p[0], 2)?;
            take(&p[0], 1)?;
            for probe in &p {
                probe.request(1);
                probe.await_completion(t)?;
            }
            same_sequences(&p, 5)
        })
    }

    /// Rule 1.11 (optional): three subscribers requesting 4 up front receive the
    /// same three elements.
    ///
    /// TCK: `optional_spec111_multicast_mustProduceTheSameElementsInTheSameSequenceToAllOfItsSubscribersWhenRequestingManyUpfront`.
    pub fn spec_1_11_multicast_same_sequence_when_requesting_many_upfront(&self) -> Outcome {
        let name = "spec_1_11_multicast_same_sequence_when_requesting_many_upfront";
        self.run_optional(name, "1.11", |v, env| v.many_upfront(env, false))
    }

    /// Rule 1.11 (optional): as the previous test, and each subscriber completes.
    ///
    /// TCK: `optional_spec111_multicast_mustProduceTheSameElementsInTheSameSequenceToAllOfItsSubscribersWhenRequestingManyUpfrontAndCompleteAsExpected`.
    pub fn spec_1_11_multicast_same_sequence_and_completion_when_requesting_many_upfront(
        &self,
    ) -> Outcome {
        let name = "spec_1_11_multicast_same_sequence_and_completion_when_requesting_many_upfront";
        self.run_optional(name, "1.11", |v, env| v.many_upfront(env, true))
    }

    /// Body of the two setup tests.
    fn exactly(&self, env: &TestEnv, n: u64) -> TestResult {
        let probe = self.subscribe(env, n, true)?;
        for i in 1..=n {
            probe.request(1);
            probe
                .await_items(i, env.default_timeout())
                .map_err(|e| format!("factory({n}): {e}"))?;
        }
        probe.request(1);
        probe
            .await_completion(env.default_timeout())
            .map_err(|e| format!("factory({n}): {e}"))?;
        exact_count(&probe, n)
    }

    /// Body of the rule 1.4 test and the rule 1.9 rejection test.
    fn rejects(&self, env: &TestEnv) -> TestResult {
        let Some(failed) = &self.failed else {
            return skip("no failed-publisher factory was configured (with_failed_publisher)");
        };
        let probe = attach_probe(env, failed())?;
        probe.await_error(env.default_timeout())?;
        exact_count(&probe, 0)
    }

    /// Body of the two rule 1.11 "requesting many up front" tests.
    fn many_upfront(&self, env: &TestEnv, complete: bool) -> TestResult {
        let probes = self.subscribe_many(env, 3, complete, 3)?;
        for probe in &probes {
            probe.request(4);
        }
        for probe in &probes {
            probe.await_items(3, env.default_timeout())?;
            if complete {
                probe.await_completion(env.default_timeout())?;
            }
        }
        same_sequences(&probes, 3)
    }

    /// `count` subscribers on clones of one publisher of `n` elements; skips unless the
    /// factory can make them (and complete, if `complete`) and the publisher can be cloned.
    fn subscribe_many(
        &self,
        env: &TestEnv,
        n: u64,
        complete: bool,
        count: usize,
    ) -> Result<Vec<TestProbe<P::Item>>, Failure> {
        self.active(n, complete)?;
        let Some(cloner) = &self.cloner else {
            return Err(Failure::Skip(
                "subscribing several times needs a Clone publisher and with_multi_subscribe()"
                    .into(),
            ));
        };
        Ok(attach_clones(env, (self.factory)(n), cloner, count)?)
    }
}

/// Fail unless exactly `n` elements arrived.
pub(super) fn exact_count<T>(probe: &TestProbe<T>, n: u64) -> TestResult {
    let received = probe.received_count();
    ensure(received == n, || {
        format!("expected exactly {n} elements, received {received}")
    })
}

/// Fail unless every probe received the same `n` elements.
fn same_sequences<T: Element>(probes: &[TestProbe<T>], n: u64) -> TestResult {
    let first = probes[0].items();
    for probe in probes {
        let items = probe.items();
        ensure(items.len() as u64 == n && items == first, || {
            format!("subscribers received different sequences: {first:?} vs {items:?}")
        })?;
    }
    Ok(())
}
