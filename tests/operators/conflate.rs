//! `conflate` (mirrors `operators/conflate.rs`): UnboundedIn; while downstream has no
//! demand, arriving items are merged into the held one, each merge counted as
//! `Merged`.

use proptest::prelude::*;
use weir::demand::UNBOUNDED;
use weir::metrics::{DropHook, Drops};
use weir::prelude::*;
use weir::tck::TestSubscriber;
use weir::{DropReason, ErrorKind};

use crate::baseline;
use crate::support::counting::counted;
use crate::support::lossy::{check_prediction, events, holding_model, run_lossy, ModelFull};
use crate::support::shape;
use crate::support::valve::valve;

#[test]
fn smoke() {
    // Enough demand: nothing merged.
    baseline::smoke(
        weir::range(0u64..100).conflate(|a, b| a + b),
        &(0..100).collect::<Vec<_>>(),
    );
}

/// A marble schedule: items pass while there is demand, and arrivals without demand
/// merge into the held item (the merge appends digits, so the result shows which
/// items went into it); completion waits for the held item.
#[test]
fn respects_demand_and_merges_while_there_is_none() {
    let (source, handle) = valve(5);
    let drops = Drops::new();
    let subscriber = TestSubscriber::new().request_on_subscribe(1);
    let probe = subscriber.probe();
    source
        .map(|x| x + 1)
        .conflate(|held, new| held * 10 + new)
        .on_dropped(DropHook::new(drops.clone()))
        .subscribe(subscriber);
    handle.release(1); // 1 passes
    handle.release(1); // 2 held
    probe.request(1); //  2 goes out
    handle.release(2); // 3 held, 4 merged: 34
    probe.assert_items(&[1, 2]);
    assert_eq!(drops.count(DropReason::Merged), 1);
    handle.release(1); // 345 held; the source completes, completion waits
    assert_eq!(shape(&probe), "SNN");
    probe.request(1);
    probe.assert_items(&[1, 2, 345]);
    probe.assert_completed();
    assert_eq!(drops.count(DropReason::Merged), 2);
}

#[test]
fn cancel_stops_upstream() {
    let (source, stats) = counted(weir::never::<u64>());
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source.conflate(|a, b| a + b).subscribe(subscriber);
    assert_eq!(stats.request_log(), vec![UNBOUNDED]);
    probe.cancel();
    assert_eq!(stats.cancels(), 1);
}

#[test]
fn error_propagates_once() {
    // Before its error the source sends 1, then 2, which is merged into it (the one
    // call of the function): the error waits behind the held 3.
    baseline::error_propagates_once(
        |source, spy| {
            source.conflate(move |held, new| {
                spy.call(new);
                held + new
            })
        },
        2,
        &[3],
        1,
    );
}

#[test]
fn completes_after_the_held_item() {
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::range(0u64..5)
        .conflate(|a, b| a + b)
        .subscribe(subscriber);
    assert_eq!(shape(&probe), "S");
    probe.request(3);
    probe.assert_items(&[10]);
    probe.assert_completed();
    assert_eq!(
        weir::range(0u64..5)
            .conflate(|a, b| a + b)
            .in_flight_bound(),
        1
    );
}

#[test]
fn a_panicking_merge_becomes_panicked_and_cancels_upstream() {
    let (source, stats) = counted(weir::range(0u64..10));
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source
        .conflate(|_, _| panic!("merge failed"))
        .subscribe(subscriber);
    let error = probe.assert_error();
    assert_eq!(error.kind(), ErrorKind::Panicked);
    assert_eq!(error.message(), "merge failed");
    assert_eq!(stats.cancels(), 1);
    assert_eq!(shape(&probe), "SE");
}

fn merge(held: u64, new: u64) -> u64 {
    held.wrapping_mul(1_000).wrapping_add(new)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// delivered + merged == produced (each merge turns two items into one); the
    /// delivered items are exactly the model's merges, in order; every merge is
    /// counted as `Merged`.
    #[test]
    fn merges_what_arrives_without_demand(len in 0u64..40, events in events()) {
        let run = run_lossy(len, &events, |s| s.conflate(merge))?;
        check_prediction(&run, &holding_model(len, &events, 1, ModelFull::Merge(merge)))?;
    }
}

/// Downstream cancels inside upstream's batch: the rest is released unread (see the
/// check).
#[test]
fn a_cancel_inside_a_batch_reads_and_reports_nothing_after_it() {
    crate::support::lossy::check_cancel_inside_a_batch("conflate", |p| {
        p.conflate(|a, b| a.wrapping_add(b))
    });
}
