//! `on_drop`: the typed drop hook. Items of the stage's type reach the closure by
//! value; items of another type and every count go on to the hook below.

use std::sync::{Arc, Mutex};

use weir::metrics::{DropHook, Drops};
use weir::prelude::*;
use weir::DropReason;

type Log<T> = Arc<Mutex<Vec<(DropReason, &'static str, T)>>>;

fn log<T: Send + 'static>() -> (Log<T>, impl Fn(weir::metrics::DroppedItem<T>) + Send + Sync) {
    let log: Log<T> = Arc::new(Mutex::new(Vec::new()));
    let writer = log.clone();
    let f = move |dropped: weir::metrics::DroppedItem<T>| {
        let (reason, stage) = (dropped.reason(), dropped.stage());
        writer
            .lock()
            .unwrap()
            .push((reason, stage, dropped.into_inner()));
    };
    (log, f)
}

#[test]
fn the_closure_gets_each_dropped_item_by_value_with_reason_and_stage() {
    let (lost, f) = log::<String>();
    // Demand for 2: the source's one batch of 5 keeps 2 and drops 3.
    let subscriber = weir::tck::TestSubscriber::new().request_on_subscribe(2);
    let probe = subscriber.probe();
    weir::from_iter((0..5).map(|i| format!("reading {i}")))
        .on_backpressure_drop()
        .on_drop(f)
        .subscribe(subscriber);
    probe.assert_items(&["reading 0".to_owned(), "reading 1".to_owned()]);
    let lost = lost.lock().unwrap().clone();
    assert_eq!(
        lost,
        (2..5)
            .map(|i| (
                DropReason::OverflowNewest,
                "on_backpressure_drop",
                format!("reading {i}")
            ))
            .collect::<Vec<_>>()
    );
}

#[test]
fn counts_reach_the_erased_hook_below_and_other_types_go_on_to_it() {
    let drops = Drops::new();
    let erased = Arc::new(Mutex::new(Vec::new()));
    let erased_log = erased.clone();
    let global = DropHook::new(drops.clone()).inspect(move |dropped| {
        erased_log.lock().unwrap().extend(dropped.take::<u32>());
    });
    let (typed, f) = log::<String>();
    let subscriber = weir::tck::TestSubscriber::new().request_on_subscribe(1);
    let probe = subscriber.probe();
    // The lossy stage sits above a map: it drops u32s, which a String hook cannot
    // take; they go on to the erased hook below instead of vanishing.
    weir::range(0u32..4)
        .on_backpressure_drop()
        .map(|x| x.to_string())
        .on_drop(f)
        .on_dropped(global)
        .subscribe(subscriber);
    probe.assert_items(&["0".to_owned()]);
    assert_eq!(
        *erased.lock().unwrap(),
        [1, 2, 3],
        "u32 drops went on to the erased hook"
    );
    assert!(
        typed.lock().unwrap().is_empty(),
        "nothing of type String was dropped"
    );
    assert_eq!(
        drops.count(DropReason::OverflowNewest),
        3,
        "every drop counted below"
    );
}

#[test]
fn without_a_hook_below_drops_are_still_handed_over() {
    let (lost, f) = log::<u64>();
    let latest = weir::range(0u64..100)
        .on_backpressure_latest()
        .on_drop(f)
        .blocking_iter(1)
        .next()
        .unwrap()
        .unwrap();
    assert_eq!(latest, 0);
    let lost = lost.lock().unwrap();
    assert!(lost.iter().all(|(reason, stage, _)| {
        *reason == DropReason::ReplacedByLatest && *stage == "on_backpressure_latest"
    }));
    // Items 1..=98 were replaced by newer ones; 99 is held (not a drop) or dropped
    // with the iterator (released, not reported).
    assert_eq!(lost.len(), 98);
}

#[test]
fn passes_every_signal_through() {
    let (lost, f) = log::<u32>();
    let items = weir::range(0u32..1_000)
        .on_drop(f)
        .filter(|x| x % 7 == 0)
        .collect_with(16)
        .wait()
        .unwrap();
    assert_eq!(
        items,
        (0u32..1_000).filter(|x| x % 7 == 0).collect::<Vec<_>>()
    );
    assert!(lost.lock().unwrap().is_empty());
}

#[test]
fn the_erased_hook_below_still_sees_every_drop_after_the_typed_one_took_the_item() {
    let drops = Drops::new();
    let events = Arc::new(Mutex::new(Vec::new()));
    let events_log = events.clone();
    let global = DropHook::new(drops.clone()).inspect(move |dropped| {
        events_log
            .lock()
            .unwrap()
            .push((dropped.reason(), dropped.take::<u32>()));
    });
    let (typed, f) = log::<u32>();
    let subscriber = weir::tck::TestSubscriber::new().request_on_subscribe(1);
    let probe = subscriber.probe();
    weir::range(0u32..4)
        .on_backpressure_drop()
        .on_drop(f)
        .on_dropped(global)
        .subscribe(subscriber);
    probe.assert_items(&[0]);
    let typed: Vec<u32> = typed.lock().unwrap().iter().map(|(_, _, x)| *x).collect();
    assert_eq!(typed, [1, 2, 3], "the typed hook got the items");
    assert_eq!(
        *events.lock().unwrap(),
        [(DropReason::OverflowNewest, None); 3],
        "the erased hook saw each drop, item already taken"
    );
    assert_eq!(drops.total(), 3);
}
