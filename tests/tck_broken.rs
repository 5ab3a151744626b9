//! The conformance kit must catch broken implementations: each publisher here breaks
//! exactly one rule, and the test for that rule must fail naming it. A correct
//! variant of the same toy publisher passes the whole suite, so every failure is
//! caused by the defect alone.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use weir::drain::Wip;
use weir::tck::{
    Outcome, ProbedSubscriber, PublisherVerification, SubscriberBlackboxVerification,
    SubscriberWhiteboxVerification, TestEnv,
};
use weir::{Error, Publisher, RawSubscription, Subscriber, Subscription};

/// What is wrong with a [`Toy`] publisher.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Defect {
    None,
    /// Every `request(n)` is served with `n + 1` items (rule 1.1).
    OneTooMany,
    /// A publisher of `n` items emits `n + 1` before it completes (rule 1.5).
    OneTooFar,
    /// `on_complete` is signalled twice (rule 1.7).
    SignalsAfterComplete,
    /// `cancel` does nothing (rules 3.6, 3.13).
    IgnoresCancel,
    /// `request` emits while holding a lock, so a `request` from `on_next` deadlocks
    /// or panics (rules 3.2 / 3.3).
    LocksAcrossSignals,
    /// Delivers with `on_next_batch` but throws away the batch credit it returns, so
    /// a subscriber that replenishes that way starves (rules 3.8 / 1.3).
    DropsBatchCredit,
}

/// A synchronous publisher of `0..n` with an optional defect.
#[derive(Clone, Debug)]
struct Toy {
    n: u64,
    defect: Defect,
}

struct ToySubscription<S> {
    defect: Defect,
    n: u64,
    demand: AtomicU64,
    bad_request: AtomicBool,
    cancelled: AtomicBool,
    wip: Wip,
    /// The subscriber and the next value to emit; `None` once dropped.
    state: Mutex<Option<(S, u64)>>,
}

impl Publisher for Toy {
    type Item = u64;

    fn subscribe<S: Subscriber<u64> + Send + 'static>(self, subscriber: S) {
        let subscription = Arc::new(ToySubscription {
            defect: self.defect,
            n: self.n,
            demand: AtomicU64::new(0),
            bad_request: AtomicBool::new(false),
            cancelled: AtomicBool::new(false),
            wip: Wip::new(),
            state: Mutex::new(None),
        });
        let mut subscriber = subscriber;
        subscriber.on_subscribe(Subscription::new(subscription.clone()));
        *subscription.state.lock().unwrap() = Some((subscriber, 0));
        subscription.drain();
    }
}

impl<S: Subscriber<u64> + Send> ToySubscription<S> {
    fn drain(&self) {
        if self.defect == Defect::LocksAcrossSignals {
            self.pass();
        } else {
            self.wip.drain(|| self.pass());
        }
    }

    fn pass(&self) {
        let mut guard = self.state.lock().unwrap();
        let Some((subscriber, next)) = guard.as_mut() else {
            return;
        };
        if self.cancelled.load(Ordering::SeqCst) && self.defect != Defect::IgnoresCancel {
            *guard = None;
            return;
        }
        if self.bad_request.load(Ordering::SeqCst) {
            subscriber.on_error(weir::demand::validate(0).unwrap_err());
            *guard = None;
            return;
        }
        let len = if self.defect == Defect::OneTooFar {
            self.n + 1
        } else {
            self.n
        };
        while *next < len && self.demand.load(Ordering::SeqCst) > 0 {
            if self.cancelled.load(Ordering::SeqCst) && self.defect != Defect::IgnoresCancel {
                *guard = None;
                return;
            }
            self.demand.fetch_sub(1, Ordering::SeqCst);
            *next += 1;
            if self.defect == Defect::DropsBatchCredit {
                let _dropped_credit = subscriber.on_next_batch(std::iter::once(*next - 1));
            } else {
                subscriber.on_next(*next - 1);
            }
        }
        if *next == len {
            subscriber.on_complete();
            if self.defect == Defect::SignalsAfterComplete {
                subscriber.on_complete();
            }
            *guard = None;
        }
    }
}

impl<S: Subscriber<u64> + Send> RawSubscription for ToySubscription<S> {
    fn request(&self, n: u64) {
        if n == 0 {
            self.bad_request.store(true, Ordering::SeqCst);
        } else {
            let n = if self.defect == Defect::OneTooMany {
                n.saturating_add(1)
            } else {
                n
            };
            let _ = self
                .demand
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |d| {
                    Some(d.saturating_add(n))
                });
        }
        self.drain();
    }

    fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        self.drain();
    }
}

/// A publisher that rejects every subscriber (rules 1.4, 1.9).
#[derive(Clone, Debug)]
struct Failing;

impl Publisher for Failing {
    type Item = u64;

    fn subscribe<S: Subscriber<u64> + Send + 'static>(self, mut subscriber: S) {
        subscriber.on_subscribe(Subscription::noop());
        subscriber.on_error(Error::msg("this publisher always fails"));
    }
}

fn verification(defect: Defect) -> PublisherVerification<Toy> {
    let env = TestEnv::builder()
        .default_timeout(Duration::from_millis(100))
        .no_signals_timeout(Duration::from_millis(50))
        .reference_drop_timeout(Duration::from_millis(100))
        .build();
    PublisherVerification::new(move |n| Toy { n, defect })
        .with_multi_subscribe()
        .with_failed_publisher(|| Failing)
        .env(env)
        .stochastic_iterations(10)
}

fn assert_fails_naming(outcome: Outcome, rule: &str) {
    match outcome {
        Outcome::Fail(message) => {
            assert!(
                message.contains(&format!("rule {rule}")),
                "failure should name rule {rule}: {message}"
            )
        }
        other => panic!("expected a failure naming rule {rule}, got {other:?}"),
    }
}

#[test]
fn the_correct_toy_passes_every_test() {
    let report = verification(Defect::None).run_all();
    report.assert_all_passed();
    assert_eq!(report.entries.len(), 38);
    assert_eq!(report.skipped(), 10, "{report}");
}

#[test]
fn one_more_item_than_requested_fails_rule_1_1() {
    let v = verification(Defect::OneTooMany);
    assert_fails_naming(v.spec_1_1_must_not_signal_more_than_requested(), "1.1");
}

#[test]
fn an_item_beyond_the_publishers_length_fails_rule_1_5_not_1_1() {
    // request(10) on a publisher of 3 that emits 4: within demand, past its end.
    let v = verification(Defect::OneTooFar);
    assert_fails_naming(
        v.spec_1_2_may_signal_less_than_requested_and_terminate(),
        "1.5",
    );
    // Past its end *and* past the demand: still reported as the item after the end.
    let outcome = v.spec_1_1_must_not_signal_more_than_requested();
    if let Outcome::Fail(message) = &outcome {
        assert!(!message.contains("rule 1.1"), "{message}");
    }
}

#[test]
fn a_signal_after_on_complete_fails_rule_1_7() {
    let v = verification(Defect::SignalsAfterComplete);
    assert_fails_naming(v.spec_1_7_must_not_signal_after_on_complete(), "1.7");
}

/// A violation the probe records fails the test that was running, optional or not:
/// the empty-stream test (rule 1.5, optional) of a publisher that completes twice
/// fails naming rule 1.7 (it was reported as a skip, and a suite of only such
/// failures passed).
#[test]
fn a_violation_seen_by_an_optional_test_fails_it() {
    let v = verification(Defect::SignalsAfterComplete);
    assert_fails_naming(
        v.spec_1_5_empty_stream_must_terminate_by_signalling_on_complete(),
        "1.7",
    );
}

#[test]
fn ignoring_cancel_fails_rules_3_6_and_3_13() {
    let v = verification(Defect::IgnoresCancel);
    assert_fails_naming(
        v.spec_3_13_cancel_must_make_the_publisher_eventually_drop_the_subscriber(),
        "3.13",
    );
    assert_fails_naming(v.spec_3_6_request_after_cancel_must_be_a_no_op(), "3.6");
}

#[test]
fn a_lock_held_across_on_next_fails_rule_3_2_instead_of_hanging() {
    let v = verification(Defect::LocksAcrossSignals);
    assert_fails_naming(
        v.spec_3_2_must_allow_synchronous_request_from_on_next_and_on_subscribe(),
        "3.2",
    );
}

/// What is wrong with a [`ToySubscriber`].
#[derive(Clone, Copy, Debug, PartialEq)]
enum SubscriberDefect {
    None,
    /// Never requests anything (rule 2.1).
    NeverRequests,
    /// Requests from inside `on_complete` and `on_error` (rule 2.3).
    RequestsWhenTerminated,
    /// Keeps the first subscription and ignores a second one (rule 2.5).
    IgnoresSecondSubscription,
    /// Panics in `on_error` (rules 2.10 / 2.13).
    PanicsOnError,
}

/// A subscriber that requests 4 up front and one more per element.
#[derive(Debug)]
struct ToySubscriber {
    defect: SubscriberDefect,
    subscription: Option<Subscription>,
}

impl ToySubscriber {
    fn new(defect: SubscriberDefect) -> Self {
        ToySubscriber {
            defect,
            subscription: None,
        }
    }
}

impl Subscriber<u64> for ToySubscriber {
    fn on_subscribe(&mut self, subscription: Subscription) {
        if self.subscription.is_some() {
            if self.defect != SubscriberDefect::IgnoresSecondSubscription {
                subscription.cancel();
            }
            return;
        }
        if self.defect != SubscriberDefect::NeverRequests {
            subscription.request(4);
        }
        self.subscription = Some(subscription);
    }

    fn on_next(&mut self, _item: u64) {
        if let (Some(s), false) = (
            &self.subscription,
            self.defect == SubscriberDefect::NeverRequests,
        ) {
            s.request(1);
        }
    }

    fn on_error(&mut self, _error: Error) {
        match self.defect {
            SubscriberDefect::PanicsOnError => panic!("the toy subscriber cannot handle errors"),
            SubscriberDefect::RequestsWhenTerminated => {
                self.subscription.as_ref().unwrap().request(1)
            }
            _ => {}
        }
    }

    fn on_complete(&mut self) {
        if self.defect == SubscriberDefect::RequestsWhenTerminated {
            self.subscription.as_ref().unwrap().request(1);
        }
    }
}

fn fast_env() -> TestEnv {
    TestEnv::builder()
        .default_timeout(Duration::from_millis(100))
        .no_signals_timeout(Duration::from_millis(30))
        .build()
}

fn blackbox(defect: SubscriberDefect) -> SubscriberBlackboxVerification<u64, ToySubscriber> {
    SubscriberBlackboxVerification::new(move || ToySubscriber::new(defect), |i| i).env(fast_env())
}

fn whitebox(
    defect: SubscriberDefect,
) -> SubscriberWhiteboxVerification<u64, ProbedSubscriber<u64, ToySubscriber>> {
    SubscriberWhiteboxVerification::new(
        move |probe| ProbedSubscriber::new(ToySubscriber::new(defect), probe),
        |i| i,
    )
    .env(fast_env())
}

#[test]
fn the_correct_toy_subscriber_passes_both_subscriber_suites() {
    let report = blackbox(SubscriberDefect::None).run_all();
    report.assert_all_passed();
    assert_eq!((report.entries.len(), report.passed()), (26, 8), "{report}");
    let report = whitebox(SubscriberDefect::None).run_all();
    report.assert_all_passed();
    assert_eq!(
        (report.entries.len(), report.passed()),
        (27, 11),
        "{report}"
    );
}

#[test]
fn a_subscriber_that_never_requests_fails_rule_2_1() {
    assert_fails_naming(
        blackbox(SubscriberDefect::NeverRequests)
            .spec_2_1_must_signal_demand_via_subscription_request(),
        "2.1",
    );
}

#[test]
fn requesting_from_a_terminal_signal_fails_rule_2_3() {
    let (b, w) = (
        blackbox(SubscriberDefect::RequestsWhenTerminated),
        whitebox(SubscriberDefect::RequestsWhenTerminated),
    );
    assert_fails_naming(
        b.spec_2_3_must_not_call_subscription_in_on_complete(),
        "2.3",
    );
    assert_fails_naming(b.spec_2_3_must_not_call_subscription_in_on_error(), "2.3");
    assert_fails_naming(
        w.spec_2_3_must_not_call_subscription_in_on_complete(),
        "2.3",
    );
    assert_fails_naming(w.spec_2_3_must_not_call_subscription_in_on_error(), "2.3");
}

#[test]
fn keeping_a_second_subscription_fails_rule_2_5() {
    assert_fails_naming(
        blackbox(SubscriberDefect::IgnoresSecondSubscription)
            .spec_2_5_must_cancel_a_second_subscription(),
        "2.5",
    );
    assert_fails_naming(
        whitebox(SubscriberDefect::IgnoresSecondSubscription)
            .spec_2_5_must_cancel_a_second_subscription(),
        "2.5",
    );
}

#[test]
fn panicking_in_on_error_fails_rule_2_10() {
    let outcome = blackbox(SubscriberDefect::PanicsOnError)
        .spec_2_10_must_accept_on_error_without_preceding_request();
    assert_fails_naming(outcome.clone(), "2.10");
    assert!(
        matches!(&outcome, Outcome::Fail(m) if m.contains("2.13")),
        "{outcome:?}"
    );
    let outcome = whitebox(SubscriberDefect::PanicsOnError)
        .spec_2_10_must_accept_on_error_with_preceding_request();
    assert_fails_naming(outcome, "2.10");
}

#[test]
fn dropping_batch_credit_fails_the_suite() {
    let report = verification(Defect::DropsBatchCredit).run_all();
    let failed: Vec<&str> = report
        .entries
        .iter()
        .filter(|entry| matches!(entry.2, Outcome::Fail(_)))
        .map(|entry| entry.0.as_str())
        .collect();
    assert!(
        failed.contains(&"spec_1_3_must_signal_serially"),
        "a publisher that drops batch credit must fail the suite: {failed:?}"
    );
}

#[test]
fn demand_schedules_catch_one_more_item_than_requested() {
    let panic = std::panic::catch_unwind(|| {
        weir::tck::proptest::run_publisher(
            |n| Toy {
                n,
                defect: Defect::OneTooMany,
            },
            8,
            64,
        )
    })
    .expect_err("the schedule check must fail");
    let message = panic
        .downcast_ref::<String>()
        .expect("a formatted panic message");
    assert!(message.contains("rule 1.1"), "{message}");
}
