//! Random demand schedules against any publisher: a `proptest` strategy
//! and the checks to run each schedule through.
//!
//! A [`DemandSchedule`] is one to three threads, each with a short list of
//! [`DemandAction`]s: `request(k)` with `k` from 1 to huge (`u64::MAX / 2`,
//! `u64::MAX - 1`, `u64::MAX`), the illegal `request(0)`, and `cancel()`. The threads
//! start together (a barrier) and act on one [`TestSubscriber`], which checks the
//! protocol as it goes. [`check_publisher`] runs a schedule against `factory(n)` and
//! then checks:
//!
//! * no violation seen by the subscriber: never more items than requested at any
//!   instant (1.1), `on_subscribe` first (1.9), serial signals (1.3), at most one
//!   terminal signal and nothing after it (1.7);
//! * never more than `n` items; `on_complete` only after exactly `n`;
//! * `on_error` only as the answer to a `request(0)`, naming rule 3.9; and, when no
//!   thread cancels, a `request(0)` made before the stream ended must be answered
//!   with it (or the stream completed because other requests covered all `n`);
//! * without cancel or `request(0)`: demand `R > n` gives all `n` items then
//!   `on_complete` (with `R == n` completion may wait for one more request, as a
//!   publisher like `generate` only learns of the end when asked for the next item,
//!   and as the TCK's rule 1.5 test allows); demand `R < n` gives exactly `R` items
//!   and no terminal signal;
//! * with a cancel: quiescence. By default the publisher is taken to be
//!   **synchronous**: once every thread's calls have returned, all signals must
//!   already have happened, so the checks are made at once and are deterministic.
//!   For an asynchronous publisher use [`PublisherCheck::asynchronous`], which waits
//!   for expected signals and watches a grace period for unexpected ones.
//!
//! One line runs a whole property test:
//!
//! ```
//! weir::tck::proptest::run_publisher(|n| weir::range(0..n), 16, 32);
//! ```
//!
//! or, inside your own `proptest!` block (in a test file, put `#[test]` on the fn):
//!
//! ```
//! use proptest::prelude::*;
//! use weir::tck::proptest::{check_publisher, demand_schedule};
//!
//! proptest! {
//!     #![proptest_config(ProptestConfig::with_cases(16))]
//!     fn range_obeys_any_demand_schedule(schedule in demand_schedule()) {
//!         check_publisher(|n| weir::range(0..n), 10, &schedule)?;
//!     }
//! }
//! range_obeys_any_demand_schedule();
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::Duration;

use ::proptest::prelude::*;
use ::proptest::test_runner::{Config, TestCaseError, TestRunner};

use super::{Terminal, TestProbe, TestSubscriber};
use crate::Publisher;

/// One call a schedule thread makes on the subscription.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DemandAction {
    /// `request(k)`; `k == 0` is the illegal request of rule 3.9.
    Request(u64),
    /// `cancel()`.
    Cancel,
}

/// One to three threads of [`DemandAction`]s, started together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DemandSchedule {
    /// The actions of each thread, in order.
    pub threads: Vec<Vec<DemandAction>>,
}

/// Request sizes: mostly small, sometimes large or huge, rarely 0.
pub fn demand_amount() -> impl Strategy<Value = u64> {
    prop_oneof![
        8 => 1u64..=3,
        4 => 4u64..=64,
        1 => 65u64..=100_000,
        1 => Just(u64::MAX / 2),
        1 => Just(u64::MAX - 1),
        1 => Just(u64::MAX),
        1 => Just(0u64),
    ]
}

/// A single action: mostly requests, sometimes a cancel.
pub fn demand_action() -> impl Strategy<Value = DemandAction> {
    prop_oneof![
        12 => demand_amount().prop_map(DemandAction::Request),
        1 => Just(DemandAction::Cancel),
    ]
}

/// A schedule of 1–3 threads with up to 6 actions each.
pub fn demand_schedule() -> impl Strategy<Value = DemandSchedule> {
    prop::collection::vec(prop::collection::vec(demand_action(), 0..=6), 1..=3)
        .prop_map(|threads| DemandSchedule { threads })
}

/// How [`check_publisher_with`] waits. The default is for synchronous publishers.
#[derive(Clone, Copy, Debug)]
pub struct PublisherCheck {
    timeout: Duration,
    grace: Option<Duration>,
}

impl Default for PublisherCheck {
    fn default() -> Self {
        PublisherCheck {
            timeout: Duration::from_secs(1),
            grace: None,
        }
    }
}

impl PublisherCheck {
    /// Synchronous publishers: every signal happens inside `subscribe`, `request` or
    /// `cancel`, so everything is checked as soon as the schedule's threads return.
    pub fn synchronous() -> Self {
        Self::default()
    }

    /// Asynchronous publishers: wait up to `timeout` for expected signals, and watch
    /// `grace` for unexpected ones (after a cancel, after the expected items).
    pub fn asynchronous(timeout: Duration, grace: Duration) -> Self {
        PublisherCheck {
            timeout,
            grace: Some(grace),
        }
    }
}

/// Run `schedule` against `factory(expected_len)` with the synchronous checks; see
/// the module docs.
pub fn check_publisher<P, F>(
    factory: F,
    expected_len: u64,
    schedule: &DemandSchedule,
) -> Result<(), TestCaseError>
where
    P: Publisher,
    F: Fn(u64) -> P,
{
    check_publisher_with(factory, expected_len, schedule, PublisherCheck::default())
}

/// Run `schedule` against `factory(expected_len)` with the given waiting policy.
pub fn check_publisher_with<P, F>(
    factory: F,
    expected_len: u64,
    schedule: &DemandSchedule,
    check: PublisherCheck,
) -> Result<(), TestCaseError>
where
    P: Publisher,
    F: Fn(u64) -> P,
{
    let n = expected_len;
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    factory(n).subscribe(subscriber);
    probe
        .await_subscribed(check.timeout)
        .map_err(|e| fail(format!("rule 1.9: {e}")))?;

    let cancelled = AtomicBool::new(false);
    let zero_while_live = AtomicBool::new(false);
    let barrier = Barrier::new(schedule.threads.len());
    std::thread::scope(|scope| {
        for actions in &schedule.threads {
            let (probe, barrier) = (probe.clone(), &barrier);
            let (cancelled, zero_while_live) = (&cancelled, &zero_while_live);
            scope.spawn(move || {
                barrier.wait();
                for action in actions {
                    match *action {
                        DemandAction::Request(0) => {
                            if !probe.is_terminated() {
                                // SeqCst: read after the scope's join; conservative.
                                zero_while_live.store(true, Ordering::SeqCst);
                            }
                            probe.request(0);
                        }
                        DemandAction::Request(k) => probe.request(k),
                        DemandAction::Cancel => {
                            // SeqCst: read after the scope's join; conservative.
                            cancelled.store(true, Ordering::SeqCst);
                            probe.cancel();
                        }
                    }
                }
            });
        }
    });

    let actions = schedule.threads.iter().flatten();
    let any_zero = actions.clone().any(|a| *a == DemandAction::Request(0));
    let demand = actions.fold(0u64, |sum, a| match a {
        DemandAction::Request(k) => sum.saturating_add(*k),
        DemandAction::Cancel => sum,
    });
    // SeqCst is conservative: the scope's join already orders the threads' stores
    // before these loads, so any ordering would do.
    let cancelled = cancelled.load(Ordering::SeqCst);
    let zero_while_live = zero_while_live.load(Ordering::SeqCst);
    let wait = check.grace.map_or(Duration::ZERO, |_| check.timeout);

    // What must eventually arrive, when nothing was cancelled.
    if !cancelled {
        if zero_while_live || demand > n {
            let _ = probe.await_terminal(wait);
        } else {
            let _ = probe.await_items(demand, wait);
        }
    }
    if let Some(grace) = check.grace {
        let _ = probe.expect_no_signals(grace);
    }
    let settled = probe.signal_count();
    verdict(&probe, n, demand, any_zero, zero_while_live, cancelled)?;
    // Quiescence: nothing more may arrive (immediately for synchronous publishers).
    if let Some(grace) = check.grace {
        let _ = probe.expect_no_signals(grace);
    }
    let now = probe.signal_count();
    prop_assert!(
        now == settled,
        "signals kept arriving after the schedule settled: {settled} then {now}"
    );
    Ok(())
}

fn fail(message: String) -> TestCaseError {
    TestCaseError::fail(message)
}

/// The checks of the module docs, on the settled state.
fn verdict<T>(
    probe: &TestProbe<T>,
    n: u64,
    demand: u64,
    any_zero: bool,
    zero_while_live: bool,
    cancelled: bool,
) -> Result<(), TestCaseError> {
    probe.check_violations().map_err(fail)?;
    let received = probe.received_count();
    let terminal = probe.terminal();
    prop_assert!(
        received <= n,
        "rule 1.1: a publisher of {n} items delivered {received}"
    );
    match &terminal {
        Some(Terminal::Error(e)) => {
            prop_assert!(any_zero, "on_error({e}) although no request(0) was made");
            prop_assert!(
                e.rule() == Some("3.9"),
                "request(0) must fail with rule 3.9, got {e}"
            );
        }
        Some(Terminal::Complete) => {
            prop_assert!(
                received == n,
                "rule 1.5: on_complete after {received} of {n} items"
            );
        }
        None => {}
    }
    if cancelled {
        return Ok(());
    }
    if zero_while_live {
        let answered = match &terminal {
            Some(Terminal::Error(_)) => true,
            Some(Terminal::Complete) => demand >= n,
            None => false,
        };
        prop_assert!(
            answered,
            "rule 3.9: request(0) before the end was not answered with on_error ({terminal:?})"
        );
    } else if demand > n {
        prop_assert!(
            matches!(terminal, Some(Terminal::Complete)),
            "rule 1.5: demand {demand} covers all {n} items, yet the stream did not complete ({received} items, {terminal:?})"
        );
    } else if demand == n {
        prop_assert!(
            received == n,
            "rule 1.1/3.8: demand {demand} for all {n} items delivered only {received} ({terminal:?})"
        );
    } else {
        prop_assert!(
            received == demand && terminal.is_none(),
            "rule 1.1/3.8: demand {demand} of {n} must deliver exactly {demand} items and not end ({received} items, {terminal:?})"
        );
    }
    Ok(())
}

/// Run [`check_publisher`] on `cases` random schedules; panic with the smallest
/// failing schedule, if any. `PROPTEST_CASES` is ignored: `cases` is the count.
///
/// For synchronous publishers (every signal happens inside `subscribe`, `request` or
/// `cancel`). A publisher that delivers from a thread or a task of its own wants
/// [`run_publisher_with`] and [`PublisherCheck::asynchronous`].
pub fn run_publisher<P, F>(factory: F, expected_len: u64, cases: u32)
where
    P: Publisher,
    F: Fn(u64) -> P,
{
    run_publisher_with(factory, expected_len, cases, PublisherCheck::synchronous());
}

/// [`run_publisher`] with the waiting policy `check`: use
/// [`PublisherCheck::asynchronous`] for a publisher that delivers from its own thread
/// or task.
///
/// ```
/// use std::time::Duration;
/// use weir::tck::proptest::{run_publisher_with, PublisherCheck};
///
/// let threaded = |n: u64| {
///     weir::create(move |emitter| {
///         std::thread::spawn(move || {
///             for i in 0..n {
///                 if emitter.send_blocking(i).is_err() {
///                     return;
///                 }
///             }
///         });
///     })
/// };
/// let check = PublisherCheck::asynchronous(Duration::from_secs(5), Duration::from_millis(20));
/// run_publisher_with(threaded, 100, 8, check);
/// ```
pub fn run_publisher_with<P, F>(factory: F, expected_len: u64, cases: u32, check: PublisherCheck)
where
    P: Publisher,
    F: Fn(u64) -> P,
{
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let result = runner.run(&demand_schedule(), |schedule| {
        check_publisher_with(&factory, expected_len, &schedule, check)
    });
    if let Err(error) = result {
        panic!("demand schedule check failed: {error}");
    }
}
