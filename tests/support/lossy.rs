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

/// What a holding stage's model predicts.
#[derive(Debug, Default)]
pub struct Predicted {
    /// Items delivered, in order.
    pub kept: Vec<u64>,
    /// Items handed to the hook, with reasons, in order.
    pub dropped: Vec<(DropReason, u64)>,
    /// Merges counted (not handed over).
    pub merged: u64,
    /// Items that left the source (fewer than `len` when the stage failed).
    pub produced: u64,
    /// True when the stage failed with an overflow error.
    pub failed: bool,
}

/// What a full holding stage does with an arriving item in the model.
pub enum ModelFull {
    /// Drop the oldest held item, hold the new one.
    DropOldest(DropReason),
    /// Drop the arriving item.
    DropNewest,
    /// Refuse the arriving item and fail.
    Fail,
    /// Merge the arriving item into the newest held one.
    Merge(fn(u64, u64) -> u64),
}

/// The model of the holding core (`on_backpressure_buffer`, `_latest`, `conflate`):
/// an arriving item passes when downstream has demand and nothing is held; otherwise
/// it is held, up to `capacity`, and `full` decides when there is no room. Held items
/// go out oldest first as demand arrives. The run ends like [`run_lossy`]'s.
pub fn holding_model(len: u64, events: &[Event], capacity: usize, full: ModelFull) -> Predicted {
    let mut out = Predicted::default();
    let mut held = std::collections::VecDeque::new();
    let mut demand = 0u64;
    let take = |demand: &mut u64| {
        if *demand != UNBOUNDED {
            *demand -= 1;
        }
    };
    let ending = [Event::Request(UNBOUNDED), Event::Arrive(len)];
    for event in events.iter().copied().chain(ending) {
        match event {
            Event::Request(k) => demand = demand.saturating_add(k),
            Event::Arrive(k) => {
                for _ in 0..k.min(len - out.produced) {
                    if out.failed {
                        break;
                    }
                    let item = out.produced;
                    out.produced += 1;
                    if demand > 0 && held.is_empty() {
                        out.kept.push(item);
                        take(&mut demand);
                    } else if held.len() < capacity {
                        held.push_back(item);
                    } else {
                        match full {
                            ModelFull::DropOldest(reason) => {
                                out.dropped.push((reason, held.pop_front().unwrap()));
                                held.push_back(item);
                            }
                            ModelFull::DropNewest => {
                                out.dropped.push((DropReason::OverflowNewest, item))
                            }
                            ModelFull::Fail => {
                                out.dropped.push((DropReason::OverflowNewest, item));
                                out.failed = true;
                            }
                            ModelFull::Merge(f) => {
                                let last = held.pop_back().unwrap();
                                held.push_back(f(last, item));
                                out.merged += 1;
                            }
                        }
                    }
                }
            }
        }
        while demand > 0 {
            let Some(item) = held.pop_front() else { break };
            out.kept.push(item);
            take(&mut demand);
        }
    }
    out
}

/// Compare a run with its prediction: the same items delivered and dropped, the same
/// counts, the books closed, and the right terminal signal.
pub fn check_prediction(run: &LossyRun, predicted: &Predicted) -> Result<(), TestCaseError> {
    prop_assert_eq!(&run.delivered, &predicted.kept);
    prop_assert_eq!(&run.dropped, &predicted.dropped);
    prop_assert_eq!(run.drops.count(DropReason::Merged), predicted.merged);
    let handed: u64 = run.dropped.len() as u64;
    prop_assert_eq!(
        run.delivered.len() as u64 + handed + predicted.merged,
        predicted.produced,
        "delivered + dropped == produced"
    );
    if predicted.failed {
        let error = run.probe.error();
        prop_assert!(
            error
                .as_ref()
                .is_some_and(|e| e.kind() == weir::ErrorKind::Overflow),
            "overflow error expected, got {:?}",
            error
        );
    } else {
        prop_assert!(
            matches!(run.probe.terminal(), Some(Terminal::Complete)),
            "completed"
        );
    }
    Ok(())
}

/// What a lossy stage did when downstream cancelled inside one of upstream's batches.
#[derive(Debug, PartialEq, Eq)]
pub struct CancelInBatch {
    /// Items downstream got.
    pub delivered: Vec<u64>,
    /// Drops reported to the hook.
    pub dropped: u64,
    /// Items the upstream `map` produced (its closure runs as the batch is read).
    pub produced: u64,
}

/// `range(0..1_000)` behind a counting `map`, then `stage`, then `take(3)`: the
/// source hands its items over as one batch, and `take` cancels inside it. The rest
/// of the batch must be released unread: neither reported as dropped nor read (the
/// `map` runs for the three items only).
pub fn check_cancel_inside_a_batch<P>(name: &str, stage: impl FnOnce(weir::BoxPublisher<u64>) -> P)
where
    P: Publisher<Item = u64>,
{
    let expected = CancelInBatch {
        delivered: vec![0, 1, 2],
        dropped: 0,
        produced: 3,
    };
    assert_eq!(cancel_inside_a_batch(stage), expected, "{name}");
}

/// What [`check_cancel_inside_a_batch`] runs.
fn cancel_inside_a_batch<P>(stage: impl FnOnce(weir::BoxPublisher<u64>) -> P) -> CancelInBatch
where
    P: Publisher<Item = u64>,
{
    let produced = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = produced.clone();
    let upstream = weir::range(0u64..1_000)
        .map(move |x| {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            x
        })
        .boxed();
    let drops = Drops::new();
    let delivered = stage(upstream)
        .on_dropped(DropHook::new(drops.clone()))
        .take(3)
        .collect()
        .wait()
        .expect("take completes");
    CancelInBatch {
        delivered,
        dropped: drops.total(),
        produced: produced.load(std::sync::atomic::Ordering::Relaxed),
    }
}
