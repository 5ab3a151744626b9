//! `buffer_timeout` (mirror `operators/buffer_timeout.rs`): batches of `size`, or
//! shorter once the period passed since a batch's first item, only against demand;
//! upstream owes plus the stage holds at most `size` items. Marble-style, under
//! `VirtualTime`.

use std::sync::Arc;

use proptest::prelude::*;
use weir::demand::UNBOUNDED;
use weir::prelude::*;
use weir::runtime::VirtualTime;
use weir::tck::{TestProbe, TestSubscriber};

use crate::baseline;
use crate::support::counting::{counted, Stats};
use crate::support::timed_events::{run_timed, steps};
use crate::support::valve::{valve, ValveHandle};
use crate::support::virtual_clock::ms;

/// `counted(valve(len)).buffer_timeout_on(3, 100 ms)`; nothing requested yet.
fn batched(len: u64) -> (VirtualTime, ValveHandle, TestProbe<Vec<u64>>, Arc<Stats>) {
    let vt = VirtualTime::new();
    let (source, handle) = valve(len);
    let (source, stats) = counted(source);
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source
        .buffer_timeout_on(3, ms(100), vt.clone())
        .subscribe(subscriber);
    (vt, handle, probe, stats)
}

#[test]
fn smoke() {
    baseline::smoke(
        weir::range(0u64..7).buffer_timeout_on(3, ms(100), VirtualTime::new()),
        &[vec![0, 1, 2], vec![3, 4, 5], vec![6]],
    );
}

#[test]
fn full_batches_and_batches_closed_by_time() {
    // source : 0,1,2@0 --- 3@10 4@50 ------------ 5@200 ---------
    // output : [0,1,2]@0 ------------ [3,4]@110 ---------- [5]@300
    let (vt, handle, probe, _) = batched(10);
    probe.request(5);
    handle.release(3);
    probe.assert_items(&[vec![0, 1, 2]]);
    vt.advance_to(ms(10));
    handle.release(1);
    vt.advance_to(ms(50));
    handle.release(1);
    vt.advance_to(ms(109));
    probe.assert_items(&[vec![0, 1, 2]]);
    vt.advance_to(ms(110));
    probe.assert_items(&[vec![0, 1, 2], vec![3, 4]]);
    vt.advance_to(ms(200));
    handle.release(1);
    vt.advance_to(ms(300));
    probe.assert_items(&[vec![0, 1, 2], vec![3, 4], vec![5]]);
    probe.assert_no_violations();
}

#[test]
fn no_demand_when_the_period_passes_holds_the_partial_batch() {
    let (vt, handle, probe, _) = batched(10);
    probe.request(1);
    handle.release(2);
    vt.advance_to(ms(100));
    probe.assert_items(&[vec![0, 1]]); // the one batch requested
    handle.release(1); // the third item upstream still owed
    vt.advance_to(ms(200)); // period passed, no demand: held, not failed, not lost
    probe.assert_items(&[vec![0, 1]]);
    probe.assert_no_terminal();
    vt.advance_to(ms(10_000));
    assert_eq!(vt.pending(), 0, "no timer while the due batch waits");
    probe.request(1);
    probe.assert_items(&[vec![0, 1], vec![2]]);
    probe.assert_no_violations();
}

#[test]
fn upstream_never_owes_more_than_one_batch() {
    let (vt, handle, probe, stats) = batched(1_000);
    probe.request(UNBOUNDED);
    for t in 1..200 {
        handle.release(t % 3);
        vt.advance_to(ms(t * 40));
        assert!(stats.max_outstanding() <= 3, "{}", stats.max_outstanding());
    }
    probe.cancel();
    // Before any request nothing is asked of upstream.
    let (_vt, _handle, _probe, stats) = batched(10);
    assert_eq!(stats.requested(), 0);
}

#[test]
fn one_timer_however_many_batches() {
    let vt = VirtualTime::new();
    let probe = crate::support::probe_of(weir::range(0u64..3_000).buffer_timeout_on(
        3,
        ms(100),
        vt.clone(),
    ));
    probe.request(500);
    assert_eq!(probe.received_count(), 500);
    assert!(vt.pending() <= 1, "{} timers queued", vt.pending());
}

#[test]
fn completion_flushes_the_partial_batch_when_demand_allows() {
    let (vt, handle, probe, _) = batched(2);
    probe.request(1);
    handle.release(2);
    probe.assert_items(&[vec![0, 1]]);
    probe.assert_completed();
    assert_eq!(vt.elapsed(), ms(0));

    let (_vt, handle, probe, _) = batched(4);
    probe.request(1);
    handle.release(4);
    probe.assert_items(&[vec![0, 1, 2]]);
    probe.assert_no_terminal(); // 3 is not even requested yet
    probe.request(1);
    probe.assert_items(&[vec![0, 1, 2], vec![3]]);
    probe.assert_completed();
}

/// An error waits behind the held item, like completion; `errors_first` delivers it
/// at once and releases the item.
#[test]
fn errors_wait_behind_the_held_item_unless_errors_first() {
    crate::support::error_order::check(
        |source, vt, errors_first| {
            let stage = source.buffer_timeout_on(3, ms(100), vt);
            if errors_first {
                stage.errors_first().boxed()
            } else {
                stage.boxed()
            }
        },
        vec![7],
    );
}

#[test]
fn cancel_stops_upstream_and_the_timer() {
    let (vt, handle, probe, stats) = batched(10);
    probe.request(2);
    handle.release(1);
    assert_eq!(vt.pending(), 1);
    probe.cancel();
    assert_eq!(stats.cancels(), 1);
    vt.advance(ms(1_000));
    probe.assert_items(&[]);
    probe.assert_no_terminal();
    assert_eq!(vt.pending(), 0);
}

#[test]
#[should_panic(expected = "buffer_timeout size must be in 1..=2^30 (got 0)")]
fn zero_size_panics() {
    let _ = weir::range(0u64..1).buffer_timeout_on(0, ms(10), VirtualTime::new());
}

#[test]
#[should_panic(expected = "buffer_timeout period must be greater than zero (got 0ns)")]
fn zero_period_panics() {
    let _ = weir::range(0u64..1).buffer_timeout_on(2, ms(0), VirtualTime::new());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Lossless: the batches, concatenated, are the input in order; none is empty or
    /// larger than `size`; nothing is dropped.
    #[test]
    fn lossless_under_random_demand_and_time(steps in steps()) {
        let len = 30;
        let run = run_timed(len, &steps, |source, vt| source.buffer_timeout_on(4, ms(100), vt))?;
        prop_assert!(run.delivered.iter().all(|b| (1..=4).contains(&b.len())));
        let flat: Vec<u64> = run.delivered.concat();
        prop_assert_eq!(flat, (0..len).collect::<Vec<_>>());
        prop_assert_eq!(run.drops.total(), 0);
        run.probe.assert_no_violations();
    }
}

#[test]
fn the_drop_hook_is_forwarded_upstream() {
    let drops = weir::metrics::Drops::new();
    let probe = crate::support::probe_of(
        weir::range(0u64..10)
            .on_backpressure_drop()
            .buffer_timeout_on(2, ms(100), VirtualTime::new())
            .on_dropped(weir::metrics::DropHook::new(drops.clone())),
    );
    // The eager source meets no demand at subscribe time: all ten are dropped, and
    // the lossy stage found the hook through this one.
    assert_eq!(drops.count(weir::DropReason::OverflowNewest), 10);
    probe.request(1);
    probe.assert_completed();
}

#[test]
fn timers_on_a_thread_pool_never_overlap_upstream_signals() {
    // Items from a producer thread, batch timers on pool workers: every item arrives
    // exactly once, in order, and the subscriber sees no protocol violation (its
    // signals are serial: one drain loop delivers them).
    let pool = weir::runtime::ThreadPool::new(2);
    let (source, handle) = valve(2_000);
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source
        .buffer_timeout_on(7, std::time::Duration::from_micros(50), pool)
        .subscribe(subscriber);
    probe.request(UNBOUNDED);
    let producer = std::thread::spawn(move || {
        for _ in 0..2_000 {
            handle.release(1);
        }
    });
    producer.join().unwrap();
    probe
        .await_terminal(crate::support::PATIENCE)
        .expect("completes");
    let flat: Vec<u64> = probe.items().concat();
    assert_eq!(flat, (0..2_000).collect::<Vec<_>>());
    probe.assert_no_violations();
}

/// An upstream that pushes items it was never asked for (rule 1.1) fails the stage
/// with the rule's error after the batch it asked for, instead of growing a batch
/// past `size` (five items into batches of 2 made one batch of 5).
#[test]
fn an_upstream_that_over_delivers_fails_with_rule_1_1() {
    use crate::support::unruly::Greedy;
    // Nothing requested: the first item is already one too many.
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    Greedy(5)
        .buffer_timeout_on(2, std::time::Duration::MAX, VirtualTime::new())
        .subscribe(subscriber);
    assert_eq!(crate::support::shape(&probe), "SE");
    assert_eq!(probe.assert_error().rule(), Some("1.1"));
    // Demand for one batch: the stage asks for 2 and gets them, then the third.
    let subscriber = TestSubscriber::new().request_on_subscribe(1);
    let probe = subscriber.probe();
    Greedy(5)
        .buffer_timeout_on(2, std::time::Duration::MAX, VirtualTime::new())
        .subscribe(subscriber);
    assert_eq!(crate::support::shape(&probe), "SNE");
    probe.assert_items(&[vec![0, 1]]);
    assert_eq!(probe.assert_error().rule(), Some("1.1"));
}
