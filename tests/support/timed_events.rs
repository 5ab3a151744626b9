//! Random schedules for the time operators: items arrive from a
//! [`valve`](super::valve), downstream requests, and the virtual clock advances, in an
//! order proptest chooses. Afterwards the run requests without bound, releases the
//! rest and lets a long time pass, so that nothing stays held and the books close.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use weir::demand::UNBOUNDED;
use weir::metrics::{DropHook, Drops};
use weir::prelude::*;
use weir::runtime::VirtualTime;
use weir::tck::{TestProbe, TestSubscriber};

use super::valve::{valve, ValveSource};

/// One event of a timed schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// `k` items arrive from upstream (as far as upstream demand allows).
    Arrive(u64),
    /// Downstream calls `request(k)`.
    Request(u64),
    /// The virtual clock moves on by this many milliseconds.
    Advance(u64),
}

/// Up to 32 steps: arrivals of 1 to 4 items, requests of 1 to 4 (rarely huge),
/// advances of 1 to 250 ms.
pub fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        3 => (1u64..=4).prop_map(Step::Arrive),
        2 => (1u64..=4).prop_map(Step::Request),
        1 => Just(Step::Request(u64::MAX / 2)),
        3 => (1u64..=250).prop_map(Step::Advance),
    ];
    prop::collection::vec(step, 0..32)
}

/// What the stage did.
#[derive(Debug)]
pub struct TimedRun<T> {
    /// Items delivered downstream, in order.
    pub delivered: Vec<T>,
    /// Items handed to the drop hook, in order.
    pub dropped: Vec<u64>,
    /// The hook's counters.
    pub drops: Drops,
    /// The downstream probe.
    pub probe: TestProbe<T>,
}

/// Run `build(valve over 0..len, clock)` under `steps`, then request without bound,
/// release everything and advance an hour. Checks the protocol and completion.
pub fn run_timed<T, P>(
    len: u64,
    steps: &[Step],
    build: impl FnOnce(ValveSource, VirtualTime) -> P,
) -> Result<TimedRun<T>, TestCaseError>
where
    T: Clone + Send + 'static,
    P: Publisher<Item = T>,
{
    let vt = VirtualTime::new();
    let (source, handle) = valve(len);
    let drops = Drops::new();
    let dropped = Arc::new(Mutex::new(Vec::new()));
    let seen = dropped.clone();
    let hook = DropHook::new(drops.clone()).inspect(move |d| {
        if let Some(item) = d.peek::<u64>() {
            seen.lock().unwrap().push(*item);
        }
    });
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    build(source, vt.clone())
        .on_dropped(hook)
        .subscribe(subscriber);
    for step in steps {
        match *step {
            Step::Arrive(k) => handle.release(k),
            Step::Request(k) => probe.request(k),
            Step::Advance(ms) => vt.advance(Duration::from_millis(ms)),
        }
        prop_assert!(probe.violations().is_empty(), "{:?}", probe.violations());
    }
    probe.request(UNBOUNDED);
    handle.release(len);
    vt.advance(Duration::from_secs(3600));
    prop_assert!(probe.violations().is_empty(), "{:?}", probe.violations());
    prop_assert!(
        probe.is_completed(),
        "not completed: {:?}",
        probe.terminal()
    );
    let dropped = dropped.lock().unwrap().clone();
    Ok(TimedRun {
        delivered: probe.items(),
        dropped,
        drops,
        probe,
    })
}
