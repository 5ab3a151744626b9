//! The drop-reporting plumbing (`weir::metrics`) and `Publisher::in_flight_bound`.

use std::sync::{Arc, Mutex};

use weir::metrics::{DropHook, Drops};
use weir::prelude::*;
use weir::DropReason;

#[test]
fn drops_count_per_reason_and_clones_share_counters() {
    let drops = Drops::new();
    let clone = drops.clone();
    drops.add(DropReason::OverflowOldest, 3);
    clone.add(DropReason::Merged, 2);
    clone.add(DropReason::Expired, 0);
    assert_eq!(drops.count(DropReason::OverflowOldest), 3);
    assert_eq!(drops.count(DropReason::Merged), 2);
    assert_eq!(drops.count(DropReason::Expired), 0);
    assert_eq!(clone.total(), 5);
    let shown = format!("{drops:?}");
    assert!(shown.contains("OverflowOldest: 3"), "{shown}");
}

#[test]
fn a_hook_can_take_or_peek_the_dropped_item() {
    let drops = Drops::new();
    let taken = Arc::new(Mutex::new(Vec::new()));
    let log = taken.clone();
    let hook = DropHook::new(drops.clone()).inspect(move |dropped| {
        assert_eq!(dropped.stage(), "test");
        assert_eq!(dropped.peek::<String>().map(String::len), Some(5));
        assert!(
            dropped.peek::<u32>().is_none(),
            "a wrong type is not a match"
        );
        let item = dropped.take::<String>().expect("the item is a String");
        assert!(dropped.take::<String>().is_none(), "an item is taken once");
        log.lock().unwrap().push((dropped.reason(), item));
    });
    hook.report("test", DropReason::ReplacedByLatest, String::from("hello"));
    assert_eq!(drops.count(DropReason::ReplacedByLatest), 1);
    assert_eq!(
        *taken.lock().unwrap(),
        vec![(DropReason::ReplacedByLatest, String::from("hello"))]
    );
}

#[test]
fn drop_reasons_are_listed_once_and_displayed() {
    let mut seen = std::collections::HashSet::new();
    for reason in DropReason::ALL {
        assert!(seen.insert(reason), "{reason:?} listed twice");
        assert!(!reason.to_string().is_empty());
    }
    assert_eq!(seen.len(), DropReason::COUNT);
}

#[test]
fn in_flight_bound_sums_the_stages() {
    // Stages that hold nothing add nothing.
    let pipeline = weir::range(0u32..10)
        .map(|x| x + 1)
        .filter(|x| x % 2 == 0)
        .on_backpressure_drop()
        .on_dropped(DropHook::new(Drops::new()))
        .take(3);
    assert_eq!(pipeline.in_flight_bound(), 0);
    assert_eq!(pipeline.boxed().in_flight_bound(), 0);

    // Holding stages add what they can hold, and a pipeline reports the sum.
    let holding = weir::range(0u32..10)
        .on_backpressure_buffer(16, weir::Overflow::DropOldest)
        .buffer(8)
        .map(|batch| batch.len() as u32)
        .on_backpressure_latest()
        .flat_map(|n| weir::range(0..n), 3, 4)
        .conflate(|a, b| a.max(b));
    assert_eq!(holding.in_flight_bound(), 16 + 8 + 1 + 3 * 4 + 1);
    assert_eq!(
        weir::range(0u32..4)
            .merge(weir::range(0u32..4))
            .in_flight_bound(),
        2 * weir::operators::MERGE_PREFETCH
    );
}
