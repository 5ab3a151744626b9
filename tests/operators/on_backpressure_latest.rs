//! `on_backpressure_latest` and `conflate_latest` (mirror
//! `operators/on_backpressure_latest.rs`): UnboundedIn; keeps only the newest
//! undelivered item, replaced items reported as `ReplacedByLatest`.

use proptest::prelude::*;
use weir::demand::UNBOUNDED;
use weir::metrics::{DropHook, Drops};
use weir::prelude::*;
use weir::tck::TestSubscriber;
use weir::DropReason;

use crate::baseline;
use crate::support::counting::counted;
use crate::support::lossy::{check_prediction, events, holding_model, run_lossy, ModelFull};
use crate::support::shape;
use crate::support::valve::{mirrored, valve};

#[test]
fn smoke() {
    // Enough demand: nothing replaced.
    baseline::smoke(
        weir::range(0u64..100).on_backpressure_latest(),
        &(0..100).collect::<Vec<_>>(),
    );
}

#[test]
fn respects_demand_and_keeps_the_newest() {
    for latest in [true, false] {
        let (source, handle) = valve(100);
        let drops = Drops::new();
        let subscriber = TestSubscriber::new();
        let probe = subscriber.probe();
        let hook = DropHook::new(drops.clone()).inspect(move |d| {
            let stage = if latest {
                "on_backpressure_latest"
            } else {
                "conflate_latest"
            };
            assert_eq!(d.stage(), stage);
        });
        if latest {
            source
                .on_backpressure_latest()
                .on_dropped(hook)
                .subscribe(subscriber);
        } else {
            source
                .conflate_latest()
                .on_dropped(hook)
                .subscribe(subscriber);
        }
        handle.release(4);
        probe.assert_items(&[]);
        assert_eq!(drops.count(DropReason::ReplacedByLatest), 3);
        probe.request(2);
        probe.assert_items(&[3]);
        handle.release(2);
        probe.assert_items(&[3, 4]);
        probe.request(1);
        probe.assert_items(&[3, 4, 5]);
        assert_eq!(drops.total(), 3);
        probe.assert_no_violations();
    }
}

#[test]
fn cancel_stops_upstream() {
    let (source, stats) = counted(weir::never::<u64>());
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source.on_backpressure_latest().subscribe(subscriber);
    assert_eq!(stats.request_log(), vec![UNBOUNDED]);
    probe.cancel();
    assert_eq!(stats.cancels(), 1);
    probe.request(1);
    probe.assert_no_terminal();
}

#[test]
fn error_propagates_once() {
    // Before its error the source sends 1, then 2, which replaces it: the error waits
    // behind the held 2.
    baseline::error_propagates_once(|source, _| source.on_backpressure_latest(), 2, &[2], 0);
}

#[test]
fn completes_after_the_held_item() {
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::range(0u64..5)
        .on_backpressure_latest()
        .subscribe(subscriber);
    assert_eq!(shape(&probe), "S", "4 is held; completion waits for it");
    probe.request(1);
    probe.assert_items(&[4]);
    probe.assert_completed();
    assert_eq!(
        weir::range(0u64..5)
            .on_backpressure_latest()
            .in_flight_bound(),
        1
    );
}

#[test]
fn a_source_that_follows_demand_loses_nothing() {
    let out = mirrored(50, |s| s.on_backpressure_latest())
        .collect_with(3)
        .wait()
        .unwrap();
    assert_eq!(out, (0..50).collect::<Vec<_>>());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// delivered + dropped == produced; every replaced item reached the hook as
    /// `ReplacedByLatest`; what is delivered is what arrived with demand, or the
    /// newest item held when demand came.
    #[test]
    fn keeps_the_newest(len in 0u64..40, events in events(), latest in any::<bool>()) {
        let run = if latest {
            run_lossy(len, &events, |s| s.on_backpressure_latest())?
        } else {
            run_lossy(len, &events, |s| s.conflate_latest())?
        };
        let full = ModelFull::DropOldest(DropReason::ReplacedByLatest);
        check_prediction(&run, &holding_model(len, &events, 1, full))?;
    }
}

/// The default: an upstream error waits behind the held item, as completion does.
#[test]
fn an_error_waits_behind_the_held_item_by_default() {
    let failing = weir::range(0u32..5).concat(weir::error(weir::Error::msg("sensor lost")));
    let subscriber = TestSubscriber::new().request_on_subscribe(1);
    let probe = subscriber.probe();
    failing.on_backpressure_latest().subscribe(subscriber);
    assert_eq!(shape(&probe), "SN", "the error waits behind the held 4");
    probe.request(1);
    assert_eq!(shape(&probe), "SNNE");
    probe.assert_items(&[0, 4]);
}

/// `errors_first`: the error overtakes, without demand; the held item is released,
/// not reported as a drop.
#[test]
fn errors_first_delivers_the_error_at_once_and_releases_the_held_item() {
    let (source, stats) =
        counted(weir::range(0u32..5).concat(weir::error(weir::Error::msg("lost"))));
    let drops = Drops::new();
    let subscriber = TestSubscriber::new().request_on_subscribe(1);
    let probe = subscriber.probe();
    source
        .on_backpressure_latest()
        .errors_first()
        .on_dropped(DropHook::new(drops.clone()))
        .subscribe(subscriber);
    assert_eq!(shape(&probe), "SNE");
    probe.assert_items(&[0]);
    assert_eq!(probe.assert_error().message(), "lost");
    assert_eq!(
        drops.count(DropReason::ReplacedByLatest),
        3,
        "1, 2, 3 replaced"
    );
    assert_eq!(drops.total(), 3, "the held 4 was released, not dropped");
    assert_eq!(
        (stats.errors(), stats.cancels()),
        (1, 0),
        "upstream failed on its own: no cancel"
    );
}

/// With demand outstanding, `errors_first` changes nothing: held items go out as
/// they arrive, and the error follows the last one.
#[test]
fn errors_first_with_demand_loses_nothing() {
    let failing = weir::range(0u32..5).concat(weir::error(weir::Error::msg("lost")));
    let subscriber = TestSubscriber::new().request_on_subscribe(UNBOUNDED);
    let probe = subscriber.probe();
    failing
        .on_backpressure_latest()
        .errors_first()
        .subscribe(subscriber);
    assert_eq!(shape(&probe), "SNNNNNE");
}

/// Completion is not an error: it still waits behind the held item.
#[test]
fn errors_first_leaves_completion_behind_the_held_item() {
    let subscriber = TestSubscriber::new().request_on_subscribe(1);
    let probe = subscriber.probe();
    weir::range(0u32..5)
        .on_backpressure_latest()
        .errors_first()
        .subscribe(subscriber);
    assert_eq!(shape(&probe), "SN");
    probe.request(1);
    assert_eq!(shape(&probe), "SNNC");
}

/// Downstream cancels inside upstream's batch: the rest is released unread (see the
/// check).
#[test]
fn a_cancel_inside_a_batch_reads_and_reports_nothing_after_it() {
    crate::support::lossy::check_cancel_inside_a_batch("on_backpressure_latest()", |p| {
        p.on_backpressure_latest()
    });
}
