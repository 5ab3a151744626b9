//! The conformance kit must catch broken implementations: each publisher here breaks
//! exactly one rule, and the test for that rule must fail naming it. A correct
//! variant of the same toy publisher passes the whole suite, so every failure is
//! caused by the defect alone.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use weir::drain::Wip;
use weir::tck::{Outcome, PublisherVerification, TestEnv};
use weir::{Error, Publisher, RawSubscription, Subscriber, Subscription};

/// What is wrong with a [`Toy`] publisher.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Defect {
    None,
    /// Every `request(n)` is served with `n + 1` items (rule 1.1).
    OneTooMany,
    /// `on_complete` is signalled twice (rule 1.7).
    SignalsAfterComplete,
    /// `cancel` does nothing (rules 3.6, 3.13).
    IgnoresCancel,
    /// `request` emits while holding a lock, so a `request` from `on_next` deadlocks
    /// or panics (rules 3.2 / 3.3).
    LocksAcrossSignals,
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
        while *next < self.n && self.demand.load(Ordering::SeqCst) > 0 {
            if self.cancelled.load(Ordering::SeqCst) && self.defect != Defect::IgnoresCancel {
                *guard = None;
                return;
            }
            self.demand.fetch_sub(1, Ordering::SeqCst);
            *next += 1;
            subscriber.on_next(*next - 1);
        }
        if *next == self.n {
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
fn a_signal_after_on_complete_fails_rule_1_7() {
    let v = verification(Defect::SignalsAfterComplete);
    assert_fails_naming(v.spec_1_7_must_not_signal_after_on_complete(), "1.7");
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
