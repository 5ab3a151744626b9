//! The generic operator model check: an operator built over a counted `from_iter`
//! source, driven by a random schedule of requests (and maybe a cancel) from the test
//! thread plus optional re-entrant requests from inside `on_next`, compared after every
//! step with a reference model computed by `Iterator` over the same input.
//!
//! Every source and operator here is synchronous, so once a `request` returns, every
//! signal it allows has been delivered: the checks after each step are exact.

use std::fmt::Debug;
use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use weir::tck::{Terminal, TestProbe, TestSubscriber};
use weir::Publisher;

use super::counting::{counted_with, Counted, Delivery, Stats};

/// One call the test thread makes on the subscription.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// `request(k)`, `k >= 1`.
    Request(u64),
    /// `cancel()`.
    Cancel,
}

/// A demand schedule for [`check_model`].
#[derive(Clone, Debug)]
pub struct Schedule {
    /// The calls, in order.
    pub actions: Vec<Action>,
    /// Requested again from inside every `on_next` (0: never).
    pub reentrant: u64,
    /// How the counted source hands items to the operator.
    pub delivery: Delivery,
}

impl Schedule {
    /// How many cancels the schedule makes.
    pub fn cancels(&self) -> u64 {
        self.actions
            .iter()
            .filter(|a| **a == Action::Cancel)
            .count() as u64
    }
}

/// Request sizes: mostly small, sometimes large, sometimes huge (saturating).
pub fn amount() -> impl Strategy<Value = u64> {
    prop_oneof![
        8 => 1u64..=4,
        4 => 5u64..=40,
        1 => Just(u64::MAX / 2),
        1 => Just(u64::MAX - 1),
        1 => Just(u64::MAX),
    ]
}

/// Up to 8 actions, mostly requests, rarely a cancel; re-entrant requests in a fifth
/// of the cases; either delivery mode.
pub fn schedule() -> impl Strategy<Value = Schedule> {
    let action = prop_oneof![
        14 => amount().prop_map(Action::Request),
        1 => Just(Action::Cancel),
    ];
    (
        prop::collection::vec(action, 0..8),
        prop_oneof![4 => Just(0u64), 1 => 1u64..=2],
        prop_oneof![Just(Delivery::Batches), Just(Delivery::OneByOne)],
    )
        .prop_map(|(actions, reentrant, delivery)| Schedule {
            actions,
            reentrant,
            delivery,
        })
}

/// When the operator must complete without a request beyond the model's length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// As soon as the last model item went out (the source looks ahead, or the
    /// operator knows it is done).
    AtLength,
    /// Only once demand exceeds the model's length (an operator that must pull
    /// upstream further to learn that nothing more passes, such as `filter`).
    BeyondLength,
}

/// What a model run leaves for operator-specific checks.
pub struct Run<U> {
    /// The downstream test subscriber.
    pub probe: TestProbe<U>,
    /// What crossed the boundary between the source and the operator.
    pub stats: Arc<Stats>,
    /// True if the schedule cancelled.
    pub cancelled: bool,
}

/// Build `operator(counted(from_iter(input)))`, run `schedule` on it, and check
/// after every step that the output is the prefix of `model(&input)` (the reference
/// over `Vec`) allowed by the demand so far: in order, nothing lost or duplicated,
/// never more than requested, and complete exactly when `completion` says it must.
/// At the end, upstream must never have delivered more than it was asked for.
pub fn check_model<T, U, P>(
    input: Vec<T>,
    model: impl FnOnce(&[T]) -> Vec<U>,
    operator: impl FnOnce(Counted<weir::source::FromIter<std::vec::IntoIter<T>>>) -> P,
    schedule: &Schedule,
    completion: Completion,
) -> Result<Run<U>, TestCaseError>
where
    T: Send + 'static,
    U: Clone + PartialEq + Debug + Send + 'static,
    P: Publisher<Item = U>,
{
    let model = model(&input);
    let model = &model[..];
    let (source, stats) = counted_with(weir::from_iter(input), schedule.delivery);
    let subscriber = TestSubscriber::new().request_on_next(schedule.reentrant);
    let probe = subscriber.probe();
    operator(source).subscribe(subscriber);
    prop_assert!(probe.is_subscribed(), "on_subscribe inside subscribe");

    // (items, terminal) frozen at the cancel.
    let mut frozen: Option<(u64, bool)> = None;
    check_step(&probe, model, completion, frozen, "after subscribe")?;
    for (i, action) in schedule.actions.iter().enumerate() {
        match *action {
            Action::Request(k) => probe.request(k),
            Action::Cancel => {
                probe.cancel();
                if frozen.is_none() {
                    frozen = Some((probe.received_count(), probe.is_terminated()));
                }
            }
        }
        check_step(
            &probe,
            model,
            completion,
            frozen,
            &format!("after action #{i} {action:?}"),
        )?;
    }
    prop_assert!(
        !stats.over_delivered(),
        "upstream delivered more than was requested from it"
    );
    Ok(Run {
        probe,
        stats,
        cancelled: frozen.is_some(),
    })
}

fn check_step<U>(
    probe: &TestProbe<U>,
    model: &[U],
    completion: Completion,
    frozen: Option<(u64, bool)>,
    when: &str,
) -> Result<(), TestCaseError>
where
    U: Clone + PartialEq + Debug,
{
    probe
        .check_violations()
        .map_err(|v| TestCaseError::fail(format!("{when}: {v}")))?;
    let items = probe.items();
    let received = items.len() as u64;
    let requested = probe.requested();
    let len = model.len() as u64;
    prop_assert!(
        received <= requested,
        "{when}: {received} items delivered against {requested} requested"
    );
    prop_assert!(
        received <= len && items[..] == model[..items.len()],
        "{when}: output {items:?} is not a prefix of the model {model:?}"
    );
    let terminal = probe.terminal();
    if let Some(Terminal::Error(e)) = &terminal {
        return Err(TestCaseError::fail(format!(
            "{when}: unexpected on_error({e})"
        )));
    }
    let completed = matches!(terminal, Some(Terminal::Complete));
    prop_assert!(
        !completed || received == len,
        "{when}: completed after {received} of {len} items"
    );
    match frozen {
        Some((at_cancel, terminated)) => {
            prop_assert!(
                received == at_cancel,
                "{when}: {} items arrived after cancel",
                received - at_cancel
            );
            prop_assert!(
                completed == terminated,
                "{when}: a terminal signal arrived after cancel"
            );
        }
        None => {
            prop_assert!(
                received == requested.min(len),
                "{when}: {received} items delivered, expected min(requested {requested}, model {len})"
            );
            let must_complete = match completion {
                Completion::AtLength => requested >= len,
                Completion::BeyondLength => requested > len,
            };
            prop_assert!(
                !must_complete || completed,
                "{when}: demand {requested} covers all {len} items, yet no on_complete"
            );
        }
    }
    Ok(())
}
