//! `timeout` (mirror `operators/timeout.rs`): PassThrough; `on_error(Timeout)` when no
//! item arrives within the duration while downstream has outstanding demand; the clock
//! stops while there is none. Marble-style, under `VirtualTime`.

use weir::prelude::*;
use weir::runtime::VirtualTime;
use weir::tck::{TestProbe, TestSubscriber};
use weir::{Error, ErrorKind};

use crate::baseline;
use crate::support::counting::{counted, Stats};
use crate::support::valve::{valve, ValveHandle};
use crate::support::virtual_clock::ms;

use std::sync::Arc;

/// `counted(valve(len)).timeout_on(100 ms)`; nothing requested yet.
fn watched(len: u64) -> (VirtualTime, ValveHandle, TestProbe<u64>, Arc<Stats>) {
    let vt = VirtualTime::new();
    let (source, handle) = valve(len);
    let (source, stats) = counted(source);
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source.timeout_on(ms(100), vt.clone()).subscribe(subscriber);
    (vt, handle, probe, stats)
}

#[test]
fn smoke() {
    baseline::smoke(
        weir::range(0u64..100).timeout_on(ms(100), VirtualTime::new()),
        &(0..100).collect::<Vec<_>>(),
    );
}

#[test]
fn times_out_when_no_item_arrives_within_the_duration_and_cancels_upstream() {
    // demand : 1---------------
    // source : ----------------
    // output : ----------#@100   (# = on_error(Timeout))
    let (vt, _handle, probe, stats) = watched(10);
    probe.request(1);
    vt.advance_to(ms(99));
    probe.assert_no_terminal();
    vt.advance_to(ms(100));
    let error = probe.error().expect("timed out");
    assert_eq!(error.kind(), ErrorKind::Timeout);
    assert_eq!(stats.cancels(), 1);
    probe.assert_no_violations();
}

#[test]
fn every_item_restarts_the_clock() {
    // demand : 5----------------------------
    // source : 0@60 1@150 2@240 ------------
    // output : 0@60 1@150 2@240 ------#@340
    let (vt, handle, probe, _) = watched(10);
    probe.request(5);
    for (t, expected) in [(60, 1), (150, 2), (240, 3)] {
        vt.advance_to(ms(t));
        handle.release(1);
        assert_eq!(probe.received_count(), expected);
    }
    vt.advance_to(ms(339));
    probe.assert_no_terminal();
    vt.advance_to(ms(340));
    assert_eq!(probe.error().unwrap().kind(), ErrorKind::Timeout);
}

#[test]
fn a_slow_consumer_never_causes_a_timeout() {
    // The clock runs only while demand is outstanding.
    let (vt, handle, probe, stats) = watched(10);
    vt.advance_to(ms(10_000)); // nothing requested: no clock
    probe.assert_no_terminal();
    probe.request(1);
    vt.advance_to(ms(10_050));
    handle.release(1); // demand met: clock stops
    vt.advance_to(ms(60_000)); // the consumer takes its time
    probe.assert_items(&[0]);
    probe.assert_no_terminal();
    assert_eq!(vt.pending(), 0, "no timer while nothing is requested");
    probe.request(1); // the clock starts again here
    vt.advance_to(ms(60_099));
    probe.assert_no_terminal();
    vt.advance_to(ms(60_100));
    assert_eq!(probe.error().unwrap().kind(), ErrorKind::Timeout);
    assert_eq!(stats.cancels(), 1);
}

#[test]
fn no_demand_when_the_timer_fires_is_not_a_timeout() {
    // The timer armed for the first request is still queued when the demand is met;
    // its fire is stale and does nothing.
    let (vt, handle, probe, _) = watched(10);
    probe.request(1);
    vt.advance_to(ms(40));
    handle.release(1);
    assert_eq!(vt.pending(), 1, "the stale timer is still queued");
    vt.advance_to(ms(500));
    probe.assert_items(&[0]);
    probe.assert_no_terminal();
}

#[test]
fn requests_pass_through_unchanged() {
    let (_vt, handle, probe, stats) = watched(10);
    probe.request(3);
    probe.request(2);
    assert_eq!(stats.request_log(), vec![3, 2]);
    handle.release(10);
    probe.assert_items(&[0, 1, 2, 3, 4]);
    probe.assert_no_violations();
}

#[test]
fn completion_and_errors_pass_through() {
    let vt = VirtualTime::new();
    let probe = crate::support::probe_of(weir::range(0u64..3).timeout_on(ms(100), vt.clone()));
    probe.request(10);
    probe.assert_items(&[0, 1, 2]);
    probe.assert_completed();
    vt.advance(ms(1_000));
    probe.assert_no_violations();

    let failure = Error::msg("boom");
    let subscriber = TestSubscriber::<u64>::new();
    let probe = subscriber.probe();
    weir::error::<u64>(failure.clone())
        .timeout_on(ms(100), vt.clone())
        .subscribe(subscriber);
    assert!(Error::ptr_eq(&probe.error().unwrap(), &failure));
    vt.advance(ms(1_000));
    probe.assert_no_violations();
}

#[test]
fn cancel_stops_upstream_and_the_timer() {
    let (vt, _handle, probe, stats) = watched(10);
    probe.request(1);
    assert_eq!(vt.pending(), 1);
    probe.cancel();
    assert_eq!(stats.cancels(), 1);
    vt.advance(ms(1_000));
    probe.assert_no_terminal();
    assert_eq!(vt.pending(), 0);
}

#[test]
#[should_panic(expected = "timeout duration must be greater than zero (got 0ns)")]
fn zero_duration_panics() {
    let _ = weir::range(0u64..1).timeout_on(ms(0), VirtualTime::new());
}

#[test]
fn the_drop_hook_is_forwarded_upstream() {
    let drops = weir::metrics::Drops::new();
    let probe = crate::support::probe_of(
        weir::range(0u64..10)
            .on_backpressure_drop()
            .timeout_on(ms(100), VirtualTime::new())
            .on_dropped(weir::metrics::DropHook::new(drops.clone())),
    );
    // The eager source meets no demand at subscribe time: all ten are dropped, and
    // the lossy stage found the hook through this one.
    assert_eq!(drops.count(weir::DropReason::OverflowNewest), 10);
    probe.request(1);
    probe.assert_completed();
}

#[test]
fn one_timer_however_many_items() {
    // A fast stream restarts the clock at every item; the stage still keeps a single
    // timer queued, re-armed for the remainder when it fires early.
    let vt = VirtualTime::new();
    let probe = crate::support::probe_of(
        weir::range(0u64..5_000)
            .concat(weir::never())
            .timeout_on(ms(100), vt.clone()),
    );
    probe.request(5_001);
    assert_eq!(probe.received_count(), 5_000);
    assert_eq!(vt.pending(), 1, "{} timers queued", vt.pending());
    vt.advance(ms(99));
    probe.assert_no_terminal();
    vt.advance(ms(1));
    assert_eq!(probe.error().unwrap().kind(), ErrorKind::Timeout);
}

/// Batch credit (a subscriber that replenishes by returning credit from
/// `on_next_batch`, as `fold_with` does) is a request like any other: it is forwarded
/// upstream, so the stream runs to its end instead of timing out.
#[test]
fn batch_credit_is_forwarded_upstream() {
    let vt = VirtualTime::new();
    let (source, stats) = counted(weir::range(0u64..1_000));
    let subscriber = TestSubscriber::new()
        .request_on_subscribe(1)
        .request_on_next(1);
    let probe = subscriber.probe();
    source.timeout_on(ms(100), vt.clone()).subscribe(subscriber);
    probe.assert_completed();
    assert_eq!(probe.items(), (0..1_000).collect::<Vec<_>>());
    assert_eq!(stats.request_log().iter().sum::<u64>(), 1_001);
    probe.assert_no_violations();
}

/// Large batches pass in chunks, never beyond the demand (rule 1.1), in order.
#[test]
fn large_batches_pass_within_the_demand_in_order() {
    let vt = VirtualTime::new();
    let probe = crate::support::probe_of(weir::range(0u64..5_000).timeout_on(ms(100), vt.clone()));
    probe.request(700);
    assert_eq!(probe.items(), (0..700).collect::<Vec<_>>());
    probe.request(4_300);
    probe.assert_completed();
    assert_eq!(probe.items(), (0..5_000).collect::<Vec<_>>());
    probe.assert_no_violations();
}

/// An upstream that pushes items it was never asked for (rule 1.1) fails the stage
/// with the rule's error after the items asked for, instead of growing its queue.
#[test]
fn an_upstream_that_over_delivers_fails_with_rule_1_1() {
    use crate::support::unruly::Greedy;
    let subscriber = TestSubscriber::new().request_on_subscribe(2);
    let probe = subscriber.probe();
    Greedy(10)
        .timeout_on(ms(100), VirtualTime::new())
        .subscribe(subscriber);
    assert_eq!(crate::support::shape(&probe), "SNNE");
    probe.assert_items(&[0, 1]);
    assert_eq!(probe.assert_error().rule(), Some("1.1"));
}
