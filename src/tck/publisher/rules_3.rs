//! The rule 3.x (Subscription) tests of [`PublisherVerification`]. Each test's doc
//! names the TCK test it ports.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::rules_1::exact_count;
use super::{attach, probing_subscriber, PublisherVerification};
use crate::demand::UNBOUNDED;
use crate::tck::harness::{ensure, moot, untested, TestResult, Verification};
use crate::tck::{Element, Outcome, TestEnv};
use crate::{Error, Publisher, Subscriber, Subscription};

thread_local! {
    /// Nesting depth of `on_next` on this thread, for the rule 3.3 test.
    static DEPTH: Cell<u64> = const { Cell::new(0) };
}

impl<P> PublisherVerification<P>
where
    P: Publisher + 'static,
    P::Item: Element,
{
    /// Rule 3.2: `request` may be called synchronously from `on_subscribe`
    /// (three times) and from every `on_next`.
    ///
    /// TCK: `required_spec302_mustAllowSynchronousRequestCallsFromOnNextAndOnSubscribe`.
    pub fn spec_3_2_must_allow_synchronous_request_from_on_next_and_on_subscribe(&self) -> Outcome {
        let name = "spec_3_2_must_allow_synchronous_request_from_on_next_and_on_subscribe";
        self.run(name, "3.2", |v, env| {
            v.active(6, false)?;
            let subscriber = probing_subscriber(env)
                .on_subscribe_hook(|probe| (0..3).for_each(|_| probe.request(1)))
                .request_on_next(1);
            let probe = attach(env, (v.factory)(6), subscriber)?;
            env.verify_no_async_failures()?;
            probe.cancel();
            Ok(())
        })
    }

    /// Rule 3.3: the synchronous `request` → `on_next` recursion stays within
    /// `bounded_recursion_depth`. The subscriber stops requesting after `bound + 1`
    /// elements, so a recursing publisher cannot overflow the stack.
    ///
    /// TCK: `required_spec303_mustNotAllowUnboundedRecursion`.
    pub fn spec_3_3_must_not_allow_unbounded_recursion(&self) -> Outcome {
        let name = "spec_3_3_must_not_allow_unbounded_recursion";
        self.run(name, "3.3", |v, env| {
            let bound = v.bounded_recursion_depth;
            let n = bound.saturating_add(1);
            v.active(n, false)?;
            let flop = env.clone();
            let subscriber = probing_subscriber(env).on_next_hook(move |probe, received| {
                let depth = DEPTH.with(|d| {
                    d.set(d.get() + 1);
                    d.get()
                });
                if depth > bound {
                    flop.flop(format!(
                        "rule 3.3: on_next recursed to depth {depth}, beyond the bound of {bound}"
                    ));
                } else if received < n {
                    probe.request(1);
                }
                DEPTH.with(|d| d.set(d.get() - 1));
            });
            let probe = attach(env, (v.factory)(n), subscriber)?;
            probe.request(1);
            // Stops after `n` elements or at a terminal signal, whichever comes first.
            let _ = probe.await_items(n, env.default_timeout());
            probe.cancel();
            Ok(())
        })
    }

    /// Rule 3.4: untested in the TCK.
    ///
    /// TCK: `untested_spec304_requestShouldNotPerformHeavyComputations`.
    pub fn spec_3_4_request_should_not_perform_heavy_computations(&self) -> Outcome {
        untested("3.4", "'heavy' is not measurable")
    }

    /// Rule 3.5: untested in the TCK (thread-safety is given by `Subscription: Sync`).
    ///
    /// TCK: `untested_spec305_cancelMustNotSynchronouslyPerformHeavyComputation`.
    pub fn spec_3_5_cancel_must_not_synchronously_perform_heavy_computation(&self) -> Outcome {
        untested("3.5", "'heavy' is not measurable; idempotence is spec_3_7")
    }

    /// Rule 3.6: after `cancel`, three `request(1)` produce no signal at all.
    ///
    /// TCK: `required_spec306_afterSubscriptionIsCancelledRequestMustBeNops`.
    pub fn spec_3_6_request_after_cancel_must_be_a_no_op(&self) -> Outcome {
        let name = "spec_3_6_request_after_cancel_must_be_a_no_op";
        self.run(name, "3.6", |v, env| {
            let probe = v.subscribe(env, 3, false)?;
            probe.cancel();
            (0..3).for_each(|_| probe.request(1));
            probe
                .expect_signal_count(1, env.no_signals_timeout())
                .map_err(|e| format!("after cancel: {e}"))?;
            Ok(())
        })
    }

    /// Rule 3.7: `cancel` three times without a request: no panic, no signal.
    ///
    /// TCK: `required_spec307_afterSubscriptionIsCancelledAdditionalCancelationsMustBeNops`.
    pub fn spec_3_7_cancel_after_cancel_must_be_a_no_op(&self) -> Outcome {
        let name = "spec_3_7_cancel_after_cancel_must_be_a_no_op";
        self.run(name, "3.7", |v, env| {
            let probe = v.subscribe(env, 1, false)?;
            (0..3).for_each(|_| probe.cancel());
            probe
                .expect_signal_count(1, env.no_signals_timeout())
                .map_err(|e| format!("after cancel: {e}"))?;
            Ok(())
        })
    }

    /// Rule 3.9: `request(0)` signals `on_error` with an error naming rule 3.9.
    ///
    /// TCK: `required_spec309_requestZeroMustSignalIllegalArgumentException`.
    pub fn spec_3_9_request_zero_must_signal_error(&self) -> Outcome {
        let name = "spec_3_9_request_zero_must_signal_error";
        self.run(name, "3.9", |v, env| {
            let error = v.request_zero(env)?;
            ensure(error.rule() == Some("3.9"), || {
                format!("request(0) must fail with an error whose rule() is 3.9, got {error:?}")
            })
        })
    }

    /// Rule 3.9 negative request: moot, `request` takes a `u64`.
    ///
    /// TCK: `required_spec309_requestNegativeNumberMustSignalIllegalArgumentException`.
    pub fn spec_3_9_request_negative_must_signal_error(&self) -> Outcome {
        moot(
            "3.9",
            "request takes a u64, so a negative request cannot be made",
        )
    }

    /// Rule 3.9 (optional): the `request(0)` error's text says what was wrong
    /// (mentions `3.9` or a non-positive request). Java checks this on negative requests.
    ///
    /// TCK: `optional_spec309_requestNegativeNumberMaySignalIllegalArgumentExceptionWithSpecificMessage`.
    pub fn spec_3_9_request_zero_should_signal_error_with_specific_message(&self) -> Outcome {
        let name = "spec_3_9_request_zero_should_signal_error_with_specific_message";
        self.run_optional(name, "3.9", |v, env| {
            let text = v.request_zero(env)?.to_string();
            let lower = text.to_lowercase();
            ensure(lower.contains("3.9") || lower.contains("non-positive"), || {
                format!("the error text should mention rule 3.9 or a non-positive request: {text:?}")
            })
        })
    }

    /// Rule 3.12: after `request(10)`, `request(5)`, one element and `cancel`,
    /// the publisher falls quiet without exceeding the 15 requested.
    ///
    /// TCK: `required_spec312_cancelMustMakeThePublisherToEventuallyStopSignaling`.
    pub fn spec_3_12_cancel_must_make_the_publisher_eventually_stop_signalling(&self) -> Outcome {
        let name = "spec_3_12_cancel_must_make_the_publisher_eventually_stop_signalling";
        self.run(name, "3.12", |v, env| {
            let probe = v.subscribe(env, 20, false)?;
            probe.request(10);
            probe.request(5);
            probe.await_items(1, env.default_timeout())?;
            probe.cancel();
            // Watch quiet windows until one passes without a signal (the watchdog ends a
            // publisher that never falls quiet).
            loop {
                let received = probe.received_count();
                ensure(received <= 15, || {
                    format!("{received} elements arrived after cancel for a total demand of 15")
                })?;
                if probe.expect_no_signals(env.no_signals_timeout()).is_ok() {
                    return Ok(());
                }
            }
        })
    }

    /// Rule 3.13: after `cancel`, the publisher drops the subscriber within the
    /// reference-drop grace period (checked with a drop flag: no GC needed).
    ///
    /// TCK: `required_spec313_cancelMustMakeThePublisherEventuallyDropAllReferencesToTheSubscriber`.
    pub fn spec_3_13_cancel_must_make_the_publisher_eventually_drop_the_subscriber(
        &self,
    ) -> Outcome {
        let name = "spec_3_13_cancel_must_make_the_publisher_eventually_drop_the_subscriber";
        self.run(name, "3.13", |v, env| {
            v.active(3, false)?;
            let dropped = Arc::new(AtomicBool::new(false));
            let subscriber = probing_subscriber(env);
            let probe = subscriber.probe();
            (v.factory)(3).subscribe(DropFlag {
                inner: subscriber,
                dropped: dropped.clone(),
            });
            probe
                .await_subscribed(env.default_timeout())
                .map_err(|e| format!("rule 1.9: {e}"))?;
            probe.request(1);
            probe.await_items(1, env.default_timeout())?;
            probe.cancel();
            let deadline = crate::runtime::deadline(Instant::now(), env.reference_drop_timeout());
            // Acquire: pairs with the Release store in `DropFlag::drop`.
            while !dropped.load(Ordering::Acquire) {
                ensure(
                    deadline.map_or(true, |deadline| Instant::now() < deadline),
                    || {
                        format!(
                            "the publisher still holds the subscriber {:?} after cancel",
                            env.reference_drop_timeout()
                        )
                    },
                )?;
                std::thread::sleep(env.poll_timeout().min(Duration::from_millis(5)));
            }
            Ok(())
        })
    }

    /// Rule 3.17: `request(u64::MAX)` (unbounded) yields all 3 elements and
    /// `on_complete`.
    ///
    /// TCK: `required_spec317_mustSupportAPendingElementCountUpToLongMaxValue`.
    pub fn spec_3_17_must_support_pending_element_count_up_to_unbounded(&self) -> Outcome {
        let name = "spec_3_17_must_support_pending_element_count_up_to_unbounded";
        self.run(name, "3.17", |v, env| v.unbounded(env, &[UNBOUNDED]))
    }

    /// Rule 3.17: `request(MAX/2)` twice and `request(1)` (summing to
    /// `u64::MAX`) yield all 3 elements and `on_complete`.
    ///
    /// TCK: `required_spec317_mustSupportACumulativePendingElementCountUpToLongMaxValue`.
    pub fn spec_3_17_must_support_cumulative_pending_element_count_up_to_unbounded(
        &self,
    ) -> Outcome {
        let name = "spec_3_17_must_support_cumulative_pending_element_count_up_to_unbounded";
        self.run(name, "3.17", |v, env| {
            v.unbounded(env, &[UNBOUNDED / 2, UNBOUNDED / 2, 1])
        })
    }

    /// Rule 3.17: demand overflowing `u64::MAX` (every `on_next` requests
    /// `u64::MAX - 1`, ten times) is not an error; later `on_next`s cancel.
    ///
    /// TCK: `required_spec317_mustNotSignalOnErrorWhenPendingAboveLongMaxValue`.
    pub fn spec_3_17_must_not_signal_on_error_when_pending_above_unbounded(&self) -> Outcome {
        let name = "spec_3_17_must_not_signal_on_error_when_pending_above_unbounded";
        self.run(name, "3.17", |v, env| {
            let n = i32::MAX as u64;
            v.active(n, false)?;
            let subscriber =
                probing_subscriber(env)
                    .discard_items()
                    .on_next_hook(|probe, received| {
                        if received <= 10 {
                            probe.request(UNBOUNDED - 1);
                        } else {
                            probe.cancel();
                        }
                    });
            let probe = attach(env, (v.factory)(n), subscriber)?;
            probe.request(1);
            probe.await_items(1, env.default_timeout())?;
            env.verify_no_async_failures()?;
            probe.cancel();
            match probe.error() {
                Some(e) => Err(format!(
                    "overflowing demand must not be an error, got on_error({e})"
                )
                .into()),
                None => Ok(()),
            }
        })
    }

    /// Body of the rule 3.9 tests: the error `request(0)` produced.
    fn request_zero(&self, env: &TestEnv) -> Result<Error, crate::tck::harness::Failure> {
        let probe = self.subscribe(env, 10, false)?;
        probe.request(0);
        let error = probe
            .await_error(env.default_timeout())
            .map_err(|e| format!("after request(0): {e}"))?;
        Ok(error)
    }

    /// Body of the first two rule 3.17 tests.
    fn unbounded(&self, env: &TestEnv, requests: &[u64]) -> TestResult {
        let probe = self.subscribe(env, 3, true)?;
        requests.iter().for_each(|&n| probe.request(n));
        probe.await_items(3, env.default_timeout())?;
        probe.await_completion(env.default_timeout())?;
        exact_count(&probe, 3)?;
        probe.cancel();
        Ok(())
    }
}

/// A subscriber whose `Drop` sets a flag (rule 3.13).
struct DropFlag<S> {
    inner: S,
    dropped: Arc<AtomicBool>,
}

impl<S> Drop for DropFlag<S> {
    fn drop(&mut self) {
        // Release: pairs with the Acquire load in the rule 3.13 test's wait loop.
        self.dropped.store(true, Ordering::Release);
    }
}

impl<T, S: Subscriber<T>> Subscriber<T> for DropFlag<S> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        self.inner.on_subscribe(subscription)
    }
    fn on_next(&mut self, item: T) {
        self.inner.on_next(item)
    }
    fn on_error(&mut self, error: Error) {
        self.inner.on_error(error)
    }
    fn on_complete(&mut self) {
        self.inner.on_complete()
    }
}
