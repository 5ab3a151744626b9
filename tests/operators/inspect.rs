//! `inspect` (mirrors `operators/inspect.rs`): PassThrough; the tap sees exactly the
//! items that pass, in order, just before downstream; a panic in the tap becomes
//! `on_error(Panicked)` and cancels upstream.

use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use weir::prelude::*;
use weir::tck::proptest::{check_publisher, demand_schedule};

use crate::baseline::{self, request, Spy};
use crate::support::model::{check_model, schedule, Completion};

/// A tap that records what it sees, and the record.
fn recorder<T: Clone + Send + 'static>() -> (impl FnMut(&T) + Send + 'static, Arc<Mutex<Vec<T>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    (move |x: &T| log.lock().unwrap().push(x.clone()), seen)
}

/// `inspect` whose tap reports each item to `spy`, for the baseline checks that count
/// its calls or make it panic.
fn spied<P: Publisher<Item = u64>>(source: P, spy: Spy) -> impl Publisher<Item = u64> {
    source.inspect(move |x| spy.call(*x))
}

#[test]
fn smoke() {
    let (tap, seen) = recorder();
    baseline::smoke(weir::range(0u32..5).inspect(tap), &[0, 1, 2, 3, 4]);
    assert_eq!(*seen.lock().unwrap(), vec![0, 1, 2, 3, 4]);
}

#[test]
fn respects_demand() {
    // Requests pass through unchanged.
    let (tap, seen) = recorder();
    baseline::respects_demand(
        weir::range(0u64..10),
        |source| source.inspect(tap),
        &[
            request(1, &[0], (1, 1)).log(&[1]),
            request(2, &[0, 1, 2], (3, 3)).log(&[1, 2]),
        ],
    );
    assert_eq!(*seen.lock().unwrap(), vec![0, 1, 2]);
}

#[test]
fn cancel_stops_upstream() {
    let (tap, seen) = recorder();
    baseline::cancel_stops_upstream(|source| source.inspect(tap), &[0, 1, 2], 3);
    assert_eq!(seen.lock().unwrap().len(), 3);
}

#[test]
fn error_propagates_once() {
    // A well-behaved source that fails after two items; the tap saw each.
    baseline::error_propagates_once(spied, 2, &[1, 2], 2);
}

#[test]
fn completes() {
    baseline::completes(
        weir::range(0u64..2),
        |source| source.inspect(|_| {}),
        2,
        &[0, 1],
    );
}

#[test]
fn panic_becomes_panicked_error_and_cancels_upstream() {
    baseline::panic_becomes_panicked_error_and_cancels_upstream(spied, 2, &[0, 1], 100);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Output equals the input under any schedule, and the tap saw exactly the
    /// items that went out.
    #[test]
    fn matches_the_iterator_model(
        input in prop::collection::vec(any::<u16>(), 0..48),
        schedule in schedule(),
    ) {
        let model = input.clone();
        let (tap, seen) = recorder();
        let run = check_model(input, |_| model, |s| s.inspect(tap), &schedule, Completion::AtLength)?;
        prop_assert_eq!(&*seen.lock().unwrap(), &run.probe.items());
        prop_assert_eq!(run.stats.requested(), run.probe.requested());
    }

    /// The kit's random schedules (1-3 threads, huge requests, `request(0)`, cancels).
    #[test]
    fn obeys_any_demand_schedule(n in 0u64..40, schedule in demand_schedule()) {
        check_publisher(|n| weir::range(0..n).inspect(|_| {}), n, &schedule)?;
    }
}
