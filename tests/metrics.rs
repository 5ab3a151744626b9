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
fn on_dropped_passes_every_signal_through() {
    let drops = Drops::new();
    let items = weir::range(0u32..1000)
        .on_dropped(DropHook::new(drops.clone()))
        .filter(|x| x % 7 == 0)
        .collect_with(16)
        .wait()
        .unwrap();
    assert_eq!(
        items,
        (0u32..1000).filter(|x| x % 7 == 0).collect::<Vec<_>>()
    );
    assert_eq!(drops.total(), 0, "nothing upstream drops");
}

#[test]
fn the_nearest_hook_downstream_is_the_one_used() {
    let (near, far) = (Drops::new(), Drops::new());
    let kept = weir::range(0u32..10)
        .on_backpressure_drop()
        .on_dropped(DropHook::new(near.clone()))
        .map(|x| x)
        .on_dropped(DropHook::new(far.clone()))
        .take(4)
        .collect_with(4)
        .wait()
        .unwrap();
    assert_eq!(kept, vec![0, 1, 2, 3]);
    assert_eq!(near.count(DropReason::OverflowNewest), 6);
    assert_eq!(far.total(), 0);
}

#[test]
fn in_flight_bound_sums_the_stages() {
    // No stage so far holds items: sources, map, filter, take, drop and the hook.
    let pipeline = weir::range(0u32..10)
        .map(|x| x + 1)
        .filter(|x| x % 2 == 0)
        .on_backpressure_drop()
        .on_dropped(DropHook::new(Drops::new()))
        .take(3);
    assert_eq!(pipeline.in_flight_bound(), 0);
    assert_eq!(pipeline.boxed().in_flight_bound(), 0);
}
