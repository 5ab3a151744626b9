//! `debounce` (mirror `operators/debounce.rs`): UnboundedIn; an item goes out once the
//! quiet period passed with no newer item, only against demand; superseded items are
//! reported as `ReplacedByLatest`; at most one timer. Marble-style, under `VirtualTime`.

use proptest::prelude::*;
use weir::demand::UNBOUNDED;
use weir::metrics::{DropHook, Drops};
use weir::prelude::*;
use weir::runtime::VirtualTime;
use weir::tck::TestProbe;
use weir::DropReason;

use crate::baseline;
use crate::support::counting::counted;
use crate::support::timed_events::{run_timed, steps};
use crate::support::valve::{valve, ValveHandle};
use crate::support::virtual_clock::ms;

/// `valve(len).debounce_on(50 ms)` with a drop hook; nothing requested yet.
fn debounced(len: u64) -> (VirtualTime, ValveHandle, TestProbe<u64>, Drops) {
    let vt = VirtualTime::new();
    let clock = vt.clone();
    let (probe, handle, drops) =
        baseline::valve_probe(len, |source| source.debounce_on(ms(50), clock));
    (vt, handle, probe, drops)
}

#[test]
fn emits_after_the_quiet_period_and_drops_superseded_items() {
    // source : 0@0 1@20 ---------- 2@100 3@140 ------------ 4@300
    // output : ------------ 1@70 ------------------ 3@190 ------- 4@350
    let (vt, handle, probe, drops) = debounced(10);
    probe.request(10);
    handle.release(1);
    vt.advance_to(ms(20));
    handle.release(1);
    vt.advance_to(ms(69));
    probe.assert_items(&[]);
    vt.advance_to(ms(70));
    probe.assert_items(&[1]);
    vt.advance_to(ms(100));
    handle.release(1);
    vt.advance_to(ms(140));
    handle.release(1);
    vt.advance_to(ms(189));
    probe.assert_items(&[1]);
    vt.advance_to(ms(190));
    probe.assert_items(&[1, 3]);
    vt.advance_to(ms(300));
    handle.release(1);
    vt.advance_to(ms(350));
    probe.assert_items(&[1, 3, 4]);
    assert_eq!(drops.count(DropReason::ReplacedByLatest), 2);
    probe.assert_no_violations();
}

#[test]
fn keeps_one_timer_and_re_arms_for_the_remainder() {
    let (vt, handle, probe, drops) = debounced(100);
    probe.request(UNBOUNDED);
    // An item every 10 ms for 300 ms: never quiet, and never more than one timer.
    for t in 0..30 {
        vt.advance_to(ms(t * 10));
        handle.release(1);
        assert!(vt.pending() <= 1, "{} timers queued", vt.pending());
    }
    // The timer armed at 0 fired at 50 and re-armed for the remainder each time.
    probe.assert_items(&[]);
    vt.advance_to(ms(290 + 49));
    probe.assert_items(&[]);
    vt.advance_to(ms(290 + 50));
    probe.assert_items(&[29]);
    assert_eq!(drops.total(), 29);
    assert_eq!(vt.pending(), 0);
}

#[test]
fn no_demand_when_the_quiet_period_ends_holds_the_item_until_demand() {
    let (vt, handle, probe, drops) = debounced(10);
    handle.release(1);
    vt.advance_to(ms(50)); // quiet passed, no demand: held, not failed, not lost
    probe.assert_items(&[]);
    probe.assert_no_terminal();
    vt.advance_to(ms(10_000));
    assert_eq!(vt.pending(), 0, "no timer while the ready item waits");
    probe.request(1);
    probe.assert_items(&[0]);
    assert_eq!(drops.total(), 0);
    probe.assert_no_violations();
}

#[test]
fn a_newer_item_supersedes_a_ready_one_and_restarts_the_quiet_period() {
    let (vt, handle, probe, drops) = debounced(10);
    handle.release(1);
    vt.advance_to(ms(60)); // 0 ready, no demand
    handle.release(1); // 1 supersedes it
    assert_eq!(drops.count(DropReason::ReplacedByLatest), 1);
    probe.request(1);
    probe.assert_items(&[]); // 1 is not quiet yet
    vt.advance_to(ms(110));
    probe.assert_items(&[1]);
    probe.assert_no_violations();
}

#[test]
fn completion_flushes_the_held_item_at_once_then_completes() {
    let (vt, handle, probe, _) = debounced(2);
    probe.request(5);
    handle.release(2);
    probe.assert_items(&[1]);
    probe.assert_completed();
    assert_eq!(vt.elapsed(), ms(0));

    let (vt, handle, probe, _) = debounced(1);
    handle.release(1);
    vt.advance(ms(500));
    probe.assert_no_terminal();
    probe.request(1);
    probe.assert_items(&[0]);
    probe.assert_completed();
}

/// An error waits behind the held item, like completion; `errors_first` delivers it
/// at once and releases the item.
#[test]
fn errors_wait_behind_the_held_item_unless_errors_first() {
    crate::support::error_order::check(
        |source, vt, errors_first| {
            let stage = source.debounce_on(ms(50), vt);
            if errors_first {
                stage.errors_first().boxed()
            } else {
                stage.boxed()
            }
        },
        7,
    );
}

#[test]
fn requests_unbounded_and_cancel_stops_upstream_and_the_timer() {
    let vt = VirtualTime::new();
    let (source, stats) = counted(weir::never::<u64>());
    let probe = crate::support::probe_of(source.debounce_on(ms(50), vt.clone()));
    assert_eq!(stats.request_log(), vec![UNBOUNDED]);
    probe.cancel();
    assert_eq!(stats.cancels(), 1);

    let (vt, handle, probe, _) = debounced(10);
    probe.request(5);
    handle.release(1);
    vt.advance_to(ms(20));
    handle.release(1); // the fire at 50 would re-arm, but cancel comes first
    probe.cancel();
    vt.advance(ms(1_000));
    probe.assert_items(&[]);
    probe.assert_no_terminal();
    assert_eq!(vt.pending(), 0, "nothing re-armed after cancel");
}

#[test]
fn the_drop_hook_sees_each_superseded_item() {
    let vt = VirtualTime::new();
    let (source, handle) = valve(4);
    let drops = Drops::new();
    let hook = DropHook::new(drops.clone()).inspect(|d| {
        assert_eq!(
            (d.stage(), d.reason()),
            ("debounce", DropReason::ReplacedByLatest)
        );
        assert!(d.peek::<u64>().is_some());
    });
    let probe = crate::support::probe_of(source.debounce_on(ms(10), vt.clone()).on_dropped(hook));
    handle.release(4);
    assert_eq!(drops.count(DropReason::ReplacedByLatest), 3);
    probe.request(1);
    probe.assert_items(&[3]);
    probe.assert_completed();
}

#[test]
#[should_panic(expected = "debounce quiet period must be greater than zero (got 0ns)")]
fn zero_quiet_period_panics() {
    let _ = weir::range(0u64..1).debounce_on(ms(0), VirtualTime::new());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Delivered + dropped == produced, delivered in order, nothing beyond demand.
    #[test]
    fn books_balance_under_random_demand_and_time(steps in steps()) {
        let len = 30;
        let run = run_timed(len, &steps, |source, vt| source.debounce_on(ms(60), vt))?;
        prop_assert_eq!(run.delivered.len() as u64 + run.drops.total(), len);
        prop_assert_eq!(run.drops.count(DropReason::ReplacedByLatest), run.drops.total());
        let mut all: Vec<u64> = run.delivered.iter().chain(&run.dropped).copied().collect();
        all.sort_unstable();
        prop_assert_eq!(all, (0..len).collect::<Vec<_>>());
        prop_assert!(run.delivered.windows(2).all(|w| w[0] < w[1]));
        prop_assert_eq!(run.delivered.last().copied(), Some(len - 1));
    }
}

/// A batch of 1,000 from `range` crosses the stage's chunks of 256: every superseded
/// item is counted, and the newest comes out at completion.
#[test]
fn a_large_batch_counts_every_superseded_item() {
    let vt = VirtualTime::new();
    let drops = Drops::new();
    let probe = crate::support::probe_of(
        weir::range(0u64..1_000)
            .debounce_on(ms(10), vt.clone())
            .on_dropped(DropHook::new(drops.clone())),
    );
    assert_eq!(drops.count(DropReason::ReplacedByLatest), 999);
    probe.request(5);
    probe.assert_items(&[999]);
    probe.assert_completed();
    probe.assert_no_violations();
}

/// A cancel racing the item that arms the timer (the timed core all time stages
/// share): once both have returned, the scheduler holds no timer of the stage.
/// Before the fix, an item that armed its timer just as the cancel's `stop` ran
/// left the new timer queued until it fell due.
#[test]
fn a_cancel_racing_the_arming_item_leaves_no_timer_behind() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use weir::source::channel::ChannelPolicy;

    const ROUNDS: usize = 5_000;
    let vt = VirtualTime::new();
    let (senders, handles): (Vec<_>, Vec<_>) = (0..ROUNDS)
        .map(|_| {
            let (tx, rx) = weir::channel::<u64>(2, ChannelPolicy::Backpressure);
            (tx, rx.debounce_on(ms(50), vt.clone()).collect())
        })
        .unzip();
    // Both threads spin on `go`, so that each send lands within a few hundred
    // nanoseconds of its cancel.
    let go = Arc::new(AtomicUsize::new(0));
    let producer = {
        let go = go.clone();
        std::thread::spawn(move || {
            for (round, tx) in senders.into_iter().enumerate() {
                while go.load(Ordering::Acquire) <= round {
                    std::hint::spin_loop();
                }
                // The channel hands the item to the debounce on this thread.
                let _ = tx.try_send(round as u64);
            }
        })
    };
    for (round, handle) in handles.into_iter().enumerate() {
        go.store(round + 1, Ordering::Release);
        handle.cancel();
    }
    producer.join().unwrap();
    assert_eq!(vt.pending(), 0, "timers left queued by cancelled stages");
}
