//! `on_backpressure_drop` (mirrors `operators/on_backpressure_drop.rs`): UnboundedIn.
//! Upstream is asked for everything once; items that arrive while downstream has no
//! demand are dropped with `OverflowNewest` and reported; nothing is held.

use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use weir::demand::UNBOUNDED;
use weir::metrics::{DropHook, Drops};
use weir::prelude::*;
use weir::tck::TestSubscriber;
use weir::DropReason;

use crate::baseline;
use crate::support::counting::counted;
use crate::support::lossy::{check_books, events, run_lossy, Event};
use crate::support::shape;
use crate::support::valve::{mirrored, valve};

#[test]
fn smoke() {
    // Enough demand: nothing dropped.
    baseline::smoke(
        weir::range(0u64..10).on_backpressure_drop(),
        &(0..10).collect::<Vec<_>>(),
    );
}

#[test]
fn respects_demand() {
    let (probe, handle, drops) = baseline::valve_probe(10, |source| source.on_backpressure_drop());

    handle.release(2);
    probe.assert_items(&[]);
    assert_eq!(drops.count(DropReason::OverflowNewest), 2);

    probe.request(1);
    probe.assert_items(&[]);
    handle.release(3);
    probe.assert_items(&[2]);
    assert_eq!(drops.count(DropReason::OverflowNewest), 4);
    probe.assert_no_violations();
}

#[test]
fn requests_unbounded_once_and_cancel_stops_upstream() {
    let (source, stats) = counted(weir::range(0u64..1_000_000));
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source.on_backpressure_drop().subscribe(subscriber);
    assert_eq!(stats.request_log(), vec![UNBOUNDED]);
    probe.request(3);
    probe.cancel();
    assert_eq!(stats.cancels(), 1, "cancel reaches upstream");
    probe.request(5);
    assert_eq!(
        stats.request_log(),
        vec![UNBOUNDED],
        "downstream demand stays here"
    );

    // Cancel while items are arriving: nothing more is delivered.
    let (source, handle) = valve(100);
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source.on_backpressure_drop().subscribe(subscriber);
    probe.request(10);
    handle.release(2);
    probe.cancel();
    handle.release(5);
    probe.assert_items(&[0, 1]);
    probe.assert_no_terminal();
}

#[test]
fn error_propagates_once() {
    // Upstream is asked for everything at once: what it sends before its error is
    // dropped for want of demand, and the error needs none.
    baseline::error_propagates_once(|source, _| source.on_backpressure_drop(), 2, &[], 0);
}

#[test]
fn completes_without_demand() {
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::range(0u64..5)
        .on_backpressure_drop()
        .subscribe(subscriber);
    assert_eq!(shape(&probe), "SC", "all dropped, then completed");
}

#[test]
fn request_zero_is_reported() {
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::never::<u64>()
        .on_backpressure_drop()
        .subscribe(subscriber);
    probe.request(0);
    probe.assert_error_rule("3.9");
}

/// A synchronous source hands all 10 items over in one batch; downstream asks for
/// one more inside each `on_next`, so every item arrives while there is demand.
#[test]
fn demand_requested_inside_a_batch_lets_later_items_pass() {
    baseline::demand_inside_a_batch_loses_nothing(weir::range(0u64..10).on_backpressure_drop(), 10);
}

#[test]
fn holds_nothing() {
    let p = weir::range(0u64..3).on_backpressure_drop();
    assert_eq!(p.in_flight_bound(), 0);
}

#[test]
fn hook_can_take_the_items() {
    let taken = Arc::new(Mutex::new(Vec::new()));
    let log = taken.clone();
    let hook = DropHook::new(Drops::new()).inspect(move |d| {
        log.lock().unwrap().extend(d.take::<String>());
    });
    // Demand for 2: the source's one batch of 5 keeps 2 and drops 3, then completes.
    let subscriber = weir::tck::TestSubscriber::new().request_on_subscribe(2);
    let probe = subscriber.probe();
    weir::from_iter((0..5).map(|i| i.to_string()))
        .on_backpressure_drop()
        .on_dropped(hook)
        .subscribe(subscriber);
    probe.assert_items(&["0".to_owned(), "1".to_owned()]);
    probe.assert_completed();
    assert_eq!(*taken.lock().unwrap(), vec!["2", "3", "4"]);
}

#[test]
fn a_source_that_follows_demand_loses_nothing() {
    let out = mirrored(50, |s| s.on_backpressure_drop())
        .collect_with(7)
        .wait()
        .unwrap();
    assert_eq!(out, (0..50).collect::<Vec<_>>());
}

/// The policy over plain numbers: an arriving item passes if downstream has demand,
/// else it is dropped as the newest.
fn model(len: u64, events: &[Event]) -> (Vec<u64>, Vec<(DropReason, u64)>) {
    let (mut kept, mut dropped) = (Vec::new(), Vec::new());
    let (mut demand, mut next) = (0u64, 0u64);
    let arrivals = events
        .iter()
        .copied()
        .chain([Event::Request(UNBOUNDED), Event::Arrive(len)]);
    for event in arrivals {
        match event {
            Event::Request(k) => demand = demand.saturating_add(k),
            Event::Arrive(k) => {
                for _ in 0..k.min(len - next) {
                    if demand > 0 {
                        kept.push(next);
                        if demand != UNBOUNDED {
                            demand -= 1;
                        }
                    } else {
                        dropped.push((DropReason::OverflowNewest, next));
                    }
                    next += 1;
                }
            }
        }
    }
    (kept, dropped)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// delivered + dropped == produced; every drop reached the hook as
    /// `OverflowNewest`; the kept items are exactly those that arrived while
    /// downstream had demand.
    #[test]
    fn drops_exactly_what_arrives_without_demand(len in 0u64..40, events in events()) {
        let run = run_lossy(len, &events, |s| s.on_backpressure_drop())?;
        check_books(&run)?;
        let (kept, dropped) = model(len, &events);
        prop_assert_eq!(&run.delivered, &kept);
        prop_assert_eq!(&run.dropped, &dropped);
        prop_assert_eq!(run.drops.count(DropReason::OverflowNewest), dropped.len() as u64);
    }
}

/// Downstream cancels inside upstream's batch: the rest is released unread (see the
/// check).
#[test]
fn a_cancel_inside_a_batch_reads_and_reports_nothing_after_it() {
    crate::support::lossy::check_cancel_inside_a_batch("on_backpressure_drop()", |p| {
        p.on_backpressure_drop()
    });
}

/// "Downstream's demand is honoured exactly; items that arrive while it is zero are
/// dropped": demand that arrives from another thread in the middle of an upstream
/// batch takes the rest of it. (The rest used to be dropped whole: 0 delivered of
/// the 50 asked for, 100 dropped.)
#[test]
fn demand_that_arrives_inside_a_batch_takes_the_rest_of_it() {
    let drops = Drops::new();
    let hook = DropHook::new(drops.clone());
    let probe = crate::on_backpressure_buffer::request_in_the_middle_of_a_batch(move |s| {
        s.on_backpressure_drop().on_dropped(hook).boxed()
    });
    assert_eq!(probe.items(), (10..60).collect::<Vec<_>>());
    assert_eq!(drops.count(DropReason::OverflowNewest), 50);
}
