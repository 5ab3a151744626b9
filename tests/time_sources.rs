//! The time sources `weir::interval` and `weir::timer`, marble-style under
//! `VirtualTime`: ticks only against demand, ticks that fall due without demand held
//! (counted, never lost, never an error) and delivered once demand arrives, no timer
//! work after cancel.

#[path = "support/mod.rs"]
pub mod support;

use std::time::Duration;

use weir::demand::UNBOUNDED;
use weir::prelude::*;
use weir::runtime::VirtualTime;
use weir::tck::TestProbe;

use support::probe_of;
use support::virtual_clock::ms;

/// `interval(100 ms)` on a fresh clock; nothing requested yet.
fn ticking() -> (VirtualTime, TestProbe<u64>) {
    let vt = VirtualTime::new();
    let probe = probe_of(weir::interval_on(ms(100), vt.clone()));
    (vt, probe)
}

#[test]
fn interval_ticks_once_per_period_against_demand() {
    // clock  : |100 |200 |300 |400
    // demand : 3-----------------
    // output : 0    1    2    -
    let (vt, probe) = ticking();
    probe.request(3);
    vt.advance_to(ms(99));
    probe.assert_items(&[]);
    vt.advance_to(ms(100));
    probe.assert_items(&[0]);
    vt.advance_to(ms(200));
    probe.assert_items(&[0, 1]);
    vt.advance_to(ms(300));
    probe.assert_items(&[0, 1, 2]);
    vt.advance_to(ms(400));
    probe.assert_items(&[0, 1, 2]);
    probe.assert_no_terminal();
    probe.assert_no_violations();
}

#[test]
fn interval_holds_ticks_that_fall_due_without_demand() {
    let (vt, probe) = ticking();
    probe.request(1);
    vt.advance_to(ms(100));
    probe.assert_items(&[0]);
    // Demand used up: the next ticks fall due with no demand. Held, not failed, not
    // lost, and no timer runs meanwhile (the clock does the counting).
    vt.advance_to(ms(450));
    assert_eq!(vt.pending(), 0);
    probe.assert_items(&[0]);
    probe.assert_no_terminal();
    probe.request(2); // two of the three held ticks, at once
    probe.assert_items(&[0, 1, 2]);
    probe.request(5); // the third, then one per period again
    probe.assert_items(&[0, 1, 2, 3]);
    vt.advance_to(ms(499));
    probe.assert_items(&[0, 1, 2, 3]);
    vt.advance_to(ms(500));
    probe.assert_items(&[0, 1, 2, 3, 4]);
    probe.assert_no_violations();
}

#[test]
fn interval_backlog_is_a_counter_not_a_queue() {
    let (vt, probe) = ticking();
    vt.advance_to(ms(100 * 100_000)); // 100,000 ticks due, nothing queued anywhere
    assert_eq!(vt.pending(), 0);
    probe.request(UNBOUNDED);
    // In bursts: each pass delivers a bounded number, and a timer of zero delay
    // (due now) goes on.
    for _ in 0..100 {
        vt.run_ready();
    }
    assert_eq!(probe.received_count(), 100_000);
    assert_eq!(probe.items().last().copied(), Some(99_999));
    assert_eq!(vt.pending(), 1, "one timer for the next tick");
}

#[test]
fn interval_cancel_stops_the_ticks() {
    let (vt, probe) = ticking();
    probe.request(UNBOUNDED);
    vt.advance_to(ms(250));
    probe.assert_items(&[0, 1]);
    probe.cancel();
    vt.advance_to(ms(10_000)); // the queued timer fires and does nothing
    probe.assert_items(&[0, 1]);
    probe.assert_no_terminal();
    assert_eq!(vt.pending(), 0, "no re-arming after cancel");
}

#[test]
fn interval_request_zero_is_the_rule_3_9_error() {
    let (vt, probe) = ticking();
    probe.request(0);
    probe.assert_error_rule("3.9");
    vt.advance(ms(1_000));
    assert_eq!(probe.received_count(), 0);
}

#[test]
#[should_panic(expected = "interval period must be greater than zero (got 0ns)")]
fn interval_zero_period_panics() {
    let _ = weir::interval_on(ms(0), VirtualTime::new());
}

#[test]
fn timer_emits_one_zero_after_the_delay_then_completes() {
    // clock  : |------500------|
    // output : ----------------(0|)
    let vt = VirtualTime::new();
    let probe = probe_of(weir::timer_on(ms(500), vt.clone()));
    probe.request(1);
    vt.advance_to(ms(499));
    probe.assert_items(&[]);
    vt.advance_to(ms(500));
    probe.assert_items(&[0]);
    probe.assert_completed();
    probe.assert_no_violations();
}

#[test]
fn timer_holds_its_item_when_it_fires_without_demand() {
    let vt = VirtualTime::new();
    let probe = probe_of(weir::timer_on(ms(500), vt.clone()));
    vt.advance_to(ms(5_000)); // fired, no demand: held, not failed, not lost
    probe.assert_items(&[]);
    probe.assert_no_terminal();
    probe.request(3);
    probe.assert_items(&[0]);
    probe.assert_completed();
}

#[test]
fn timer_cancel_before_it_fires() {
    let vt = VirtualTime::new();
    let probe = probe_of(weir::timer_on(ms(500), vt.clone()));
    probe.request(1);
    probe.cancel();
    vt.advance_to(ms(1_000));
    probe.assert_items(&[]);
    probe.assert_no_terminal();
    assert_eq!(vt.pending(), 0);
}

#[test]
#[should_panic(expected = "timer delay must be greater than zero (got 0ns)")]
fn timer_refuses_a_zero_delay() {
    let _ = weir::timer_on(ms(0), VirtualTime::new());
}

#[test]
fn timer_with_the_shortest_delay_fires_after_it() {
    let vt = VirtualTime::new();
    let probe = probe_of(weir::timer_on(Duration::from_nanos(1), vt.clone()));
    probe.request(1);
    vt.run_ready();
    probe.assert_items(&[]);
    vt.advance(Duration::from_nanos(1));
    probe.assert_items(&[0]);
    probe.assert_completed();
}

#[test]
fn time_sources_run_on_a_thread_pool_too() {
    // Wall clock, short periods; only counts and order are asserted.
    let pool = weir::runtime::ThreadPool::new(2);
    let ticks = weir::interval_on(ms(1), pool.clone())
        .take(5)
        .collect()
        .wait()
        .unwrap();
    assert_eq!(ticks, vec![0, 1, 2, 3, 4]);
    let fired = weir::timer_on(ms(1), pool).collect().wait().unwrap();
    assert_eq!(fired, vec![0]);
}

#[test]
fn time_sources_run_on_the_immediate_scheduler() {
    // `Immediate` sleeps the caller for a delay and runs the timer on its stack.
    let immediate = weir::runtime::Immediate;
    let ticks = weir::interval_on(ms(1), immediate)
        .take(3)
        .collect()
        .wait()
        .unwrap();
    assert_eq!(ticks, vec![0, 1, 2]);
    assert_eq!(
        weir::timer_on(ms(1), immediate).collect().wait().unwrap(),
        vec![0]
    );
}

#[cfg(feature = "tokio")]
#[test]
fn time_operators_run_on_tokio() {
    // Wall clock, short periods (about 20 ms in all); only counts and order are asserted.
    use weir::operators::{Rate, ThrottleMode};
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_time()
        .build()
        .unwrap();
    let tokio = weir::runtime::Tokio::new(runtime.handle().clone());
    let batches = weir::interval_on(ms(1), tokio.clone())
        .take(20)
        .throttle_on(Rate::new(1, ms(1)), 1, ThrottleMode::Shaping, tokio.clone())
        .buffer_timeout_on(5, ms(2), tokio)
        .collect()
        .wait()
        .unwrap();
    assert_eq!(batches.concat(), (0..20).collect::<Vec<_>>());
    assert!(batches.iter().all(|b| (1..=5).contains(&b.len())));
}

/// A period shorter than a delivery takes: ticks fall due faster than they go out.
/// `request` returns (each pass delivers a bounded burst, a timer goes on), and a
/// cancel is heard. (The requesting call used to deliver for ever.)
#[test]
fn interval_shorter_than_a_delivery_returns_from_request_and_hears_cancel() {
    let (done_tx, done) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let subscriber = weir::tck::TestSubscriber::<u64>::new();
        let probe = subscriber.probe();
        weir::interval(Duration::from_nanos(1)).subscribe(subscriber);
        probe.request(UNBOUNDED);
        let _ = done_tx.send(probe);
    });
    let probe = done
        .recv_timeout(Duration::from_secs(20))
        .expect("request(UNBOUNDED) returned");
    probe.cancel();
    let after = probe.received_count();
    assert!(after > 0);
    std::thread::sleep(Duration::from_millis(50));
    // At most the burst running when the cancel came.
    assert!(probe.received_count() - after <= 16 * 1024 + 1);
    probe.assert_no_terminal();
}
