//! The lossy-operator check: items arrive from a [`valve`](super::valve) on one random
//! schedule and downstream requests on another, so the stage must drop (or merge, or
//! hold) what it has no demand for. After the schedule the test requests without bound
//! and releases the rest, so that nothing stays held and the books close:
//! `delivered + dropped == produced`. Each operator test compares the run with a model
//! of its policy written over plain `Vec`s.

use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use weir::demand::UNBOUNDED;
use weir::metrics::{DropHook, Drops};
use weir::prelude::*;
use weir::tck::{Terminal, TestProbe, TestSubscriber};
use weir::DropReason;

use super::valve::{valve, ValveSource};

/// One event of a lossy schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// `k` items arrive from upstream.
    Arrive(u64),
    /// Downstream calls `request(k)`.
    Request(u64),
}

/// Up to 24 events: arrivals of 1 to 6 items, requests of 1 to 5 (rarely huge).
pub fn events() -> impl Strategy<Value = Vec<Event>> {
    let event = prop_oneof![
        3 => (1u64..=6).prop_map(Event::Arrive),
        2 => (1u64..=5).prop_map(Event::Request),
        1 => Just(Event::Request(u64::MAX / 2)),
    ];
    prop::collection::vec(event, 0..24)
}

/// What the stage did.
#[derive(Debug)]
pub struct LossyRun {
    /// Items delivered downstream, in order.
    pub delivered: Vec<u64>,
    /// Items handed to the drop hook, with their reasons, in order.
    pub dropped: Vec<(DropReason, u64)>,
    /// The hook's counters.
    pub drops: Drops,
    /// How many items left the source.
    pub produced: u64,
    /// The downstream probe (terminal signal, violations).
    pub probe: TestProbe<u64>,
}

/// Run `build(source)` over `0..len` under `events`, then request without bound and
/// release the rest. Checks the protocol (never more than requested), completion, and
/// that every counted drop is one the hook saw (except `Merged`, which is counted
/// only: a merged item is consumed by the user's function).
pub fn run_lossy<P>(
    len: u64,
    events: &[Event],
    build: impl FnOnce(ValveSource) -> P,
) -> Result<LossyRun, TestCaseError>
where
    P: Publisher<Item = u64>,
{
    let (source, handle) = valve(len);
    let drops = Drops::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let hook = DropHook::new(drops.clone()).inspect(move |dropped| {
        let reason = dropped.reason();
        let item = dropped.take::<u64>().expect("the hook receives the item");
        log.lock().unwrap().push((reason, item));
    });
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    build(source).on_dropped(hook).subscribe(subscriber);
    for event in events {
        match *event {
            Event::Arrive(k) => {
                handle.release(k);
            }
            Event::Request(k) => probe.request(k),
        }
        probe
            .check_violations()
            .map_err(|v| TestCaseError::fail(format!("after {event:?}: {v}")))?;
    }
    probe.request(UNBOUNDED);
    handle.release(len);
    probe
        .check_violations()
        .map_err(|v| TestCaseError::fail(format!("at the end: {v}")))?;
    let dropped = seen.lock().unwrap().clone();
    let run = LossyRun {
        delivered: probe.items(),
        dropped,
        drops,
        produced: len,
        probe,
    };
    let counted = run.drops.total();
    let handed = run.dropped.len() as u64;
    prop_assert_eq!(
        counted - run.drops.count(DropReason::Merged),
        handed,
        "every counted drop (but merges) reached the hook"
    );
    Ok(run)
}

/// The books close: everything produced was delivered or dropped, and the stream
/// completed.
pub fn check_books(run: &LossyRun) -> Result<(), TestCaseError> {
    prop_assert_eq!(
        run.delivered.len() as u64 + run.drops.total(),
        run.produced,
        "delivered + dropped == produced"
    );
    prop_assert!(
        matches!(run.probe.terminal(), Some(Terminal::Complete)),
        "completed"
    );
    Ok(())
}
