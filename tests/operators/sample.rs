//! `sample` (mirror `operators/sample.rs`): UnboundedIn; the newest item at each period
//! boundary, delivered only against demand; held (and replaceable) otherwise; replaced
//! items reported as `ReplacedByLatest`. Marble-style, under `VirtualTime`.

use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use weir::demand::UNBOUNDED;
use weir::metrics::{DropHook, Drops};
use weir::prelude::*;
use weir::runtime::VirtualTime;
use weir::tck::{TestProbe, TestSubscriber};
use weir::{DropReason, ErrorKind};

use crate::baseline;
use crate::support::counting::counted;
use crate::support::timed_events::{run_timed, steps};
use crate::support::valve::{valve, ValveHandle};
use crate::support::virtual_clock::ms;

/// `valve(len).sample_on(100 ms)` with a drop hook; nothing requested yet.
fn sampled(len: u64) -> (VirtualTime, ValveHandle, TestProbe<u64>, Drops) {
    let vt = VirtualTime::new();
    let clock = vt.clone();
    let (probe, handle, drops) =
        baseline::valve_probe(len, |source| source.sample_on(ms(100), clock));
    (vt, handle, probe, drops)
}

#[test]
fn samples_the_newest_item_each_period() {
    // source : 0@10 1,2@30 ----- 3@150 ------ 4@350
    // ticks  : |100 ------ |200 ------ |300 ----- |400
    // output : 2@100       3@200       (none)     4@400
    let (vt, handle, probe, drops) = sampled(10);
    probe.request(10);
    vt.advance_to(ms(10));
    handle.release(1);
    vt.advance_to(ms(30));
    handle.release(2);
    assert_eq!(drops.count(DropReason::ReplacedByLatest), 2);
    vt.advance_to(ms(99));
    probe.assert_items(&[]);
    vt.advance_to(ms(100));
    probe.assert_items(&[2]);
    vt.advance_to(ms(150));
    handle.release(1);
    vt.advance_to(ms(199));
    probe.assert_items(&[2]);
    vt.advance_to(ms(200));
    probe.assert_items(&[2, 3]);
    vt.advance_to(ms(350));
    probe.assert_items(&[2, 3]);
    handle.release(1);
    vt.advance_to(ms(400));
    probe.assert_items(&[2, 3, 4]);
    assert_eq!(drops.total(), 2);
    probe.assert_no_terminal();
    probe.assert_no_violations();
}

#[test]
fn no_demand_when_the_tick_fires_holds_the_item_until_demand() {
    let (vt, handle, probe, drops) = sampled(10);
    vt.advance_to(ms(10));
    handle.release(1);
    vt.advance_to(ms(100)); // sampled, no demand: held, not failed, not lost
    probe.assert_items(&[]);
    probe.assert_no_terminal();
    vt.advance_to(ms(5_000));
    probe.assert_items(&[]);
    assert_eq!(vt.pending(), 0, "no timer while the sampled item waits");
    probe.request(1); // delivered at once
    probe.assert_items(&[0]);
    assert_eq!(drops.total(), 0);
    probe.assert_no_violations();
}

#[test]
fn a_newer_item_replaces_a_sampled_one_waiting_for_demand() {
    let (vt, handle, probe, drops) = sampled(10);
    handle.release(1);
    vt.advance_to(ms(100)); // 0 sampled, no demand
    vt.advance_to(ms(130));
    handle.release(1); // 1 replaces it and is sampled in its place
    assert_eq!(drops.count(DropReason::ReplacedByLatest), 1);
    probe.request(1);
    probe.assert_items(&[1]);
    probe.assert_no_violations();
}

#[test]
fn completion_delivers_the_held_item_when_demand_arrives_then_completes() {
    // Held and not yet sampled when upstream completes: no need to wait for the tick.
    let (vt, handle, probe, _) = sampled(2);
    probe.request(5);
    handle.release(2);
    probe.assert_items(&[1]);
    probe.assert_completed();
    assert_eq!(vt.elapsed(), ms(0));

    // No demand at completion: the item waits, then goes out with on_complete.
    let (vt, handle, probe, _) = sampled(1);
    handle.release(1);
    vt.advance(ms(1_000));
    probe.assert_items(&[]);
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
            let stage = source.sample_on(ms(100), vt);
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
    let probe = crate::support::probe_of(source.sample_on(ms(100), vt.clone()));
    assert_eq!(stats.request_log(), vec![UNBOUNDED]);
    probe.cancel();
    assert_eq!(stats.cancels(), 1);

    let (vt, handle, probe, _) = sampled(10);
    probe.request(5);
    handle.release(1);
    assert_eq!(vt.pending(), 1, "one timer for the held item");
    probe.cancel();
    vt.advance(ms(1_000)); // the timer fires and does nothing
    probe.assert_items(&[]);
    probe.assert_no_terminal();
    assert_eq!(vt.pending(), 0, "nothing re-armed after cancel");
}

#[test]
fn at_most_one_timer_whatever_the_arrivals() {
    let (vt, handle, probe, _) = sampled(1_000);
    probe.request(UNBOUNDED);
    for t in 0..500 {
        vt.advance_to(ms(t));
        handle.release(2);
        assert!(vt.pending() <= 1, "{} timers queued", vt.pending());
    }
}

#[test]
fn the_drop_hook_sees_each_replaced_item() {
    let vt = VirtualTime::new();
    let (source, handle) = valve(5);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let hook = DropHook::new(Drops::new()).inspect(move |d| {
        assert_eq!(
            (d.stage(), d.reason()),
            ("sample", DropReason::ReplacedByLatest)
        );
        log.lock().unwrap().push(d.take::<u64>().unwrap());
    });
    let probe = crate::support::probe_of(source.sample_on(ms(10), vt.clone()).on_dropped(hook));
    handle.release(5);
    assert_eq!(*seen.lock().unwrap(), vec![0, 1, 2, 3]);
    probe.request(1);
    probe.assert_items(&[4]);
    probe.assert_completed();
}

#[test]
#[should_panic(expected = "sample period must be greater than zero (got 0ns)")]
fn zero_period_panics() {
    let _ = weir::range(0u64..1).sample_on(ms(0), VirtualTime::new());
}

#[test]
fn error_kind_is_never_overflow() {
    // Many arrivals with no demand at all: drops, never an error.
    let (vt, handle, probe, drops) = sampled(100);
    for t in 0..100 {
        vt.advance_to(ms(t * 7));
        handle.release(1);
    }
    assert!(probe.error().map(|e| e.kind()) != Some(ErrorKind::Overflow));
    probe.assert_no_terminal();
    assert_eq!(drops.total(), 99);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Delivered + dropped == produced, delivered in source order, nothing beyond demand.
    #[test]
    fn books_balance_under_random_demand_and_time(steps in steps()) {
        let len = 30;
        let run = run_timed(len, &steps, |source, vt| source.sample_on(ms(100), vt))?;
        prop_assert_eq!(run.delivered.len() as u64 + run.drops.total(), len);
        prop_assert_eq!(run.drops.count(DropReason::ReplacedByLatest), run.drops.total());
        let mut all: Vec<u64> = run.delivered.iter().chain(&run.dropped).copied().collect();
        all.sort_unstable();
        prop_assert_eq!(all, (0..len).collect::<Vec<_>>());
        prop_assert!(run.delivered.windows(2).all(|w| w[0] < w[1]));
        prop_assert_eq!(run.delivered.last().copied(), Some(len - 1));
    }
}

#[test]
fn timers_on_a_thread_pool_never_overlap_upstream_signals() {
    // Items from a producer thread, sample ticks on pool workers, requests from the
    // test thread: the books balance and the subscriber sees serial signals.
    let pool = weir::runtime::ThreadPool::new(2);
    let (source, handle) = valve(3_000);
    let drops = Drops::new();
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source
        .sample_on(std::time::Duration::from_micros(100), pool)
        .on_dropped(DropHook::new(drops.clone()))
        .subscribe(subscriber);
    let producer = std::thread::spawn(move || {
        for _ in 0..3_000 {
            handle.release(1);
        }
    });
    for _ in 0..50 {
        probe.request(1);
        std::thread::yield_now();
    }
    producer.join().unwrap();
    probe.request(UNBOUNDED);
    probe
        .await_terminal(crate::support::PATIENCE)
        .expect("completes");
    assert_eq!(probe.received_count() + drops.total(), 3_000);
    assert_eq!(probe.items().last().copied(), Some(2_999));
    probe.assert_no_violations();
}

#[test]
fn cancel_inside_on_subscribe_requests_nothing() {
    let vt = VirtualTime::new();
    let (source, stats) = counted(weir::never::<u64>());
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    probe.cancel(); // before subscribing: the subscriber cancels in on_subscribe
    source.sample_on(ms(100), vt).subscribe(subscriber);
    assert_eq!(stats.request_calls(), 0);
    assert_eq!(stats.cancels(), 1);
}

/// A batch of 1,000 from `range` crosses the stage's chunks of 256 (one lock each):
/// every replaced item reaches the drop hook, in order, and the newest is sampled.
#[test]
fn a_large_batch_reports_every_replaced_item_in_order() {
    let vt = VirtualTime::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let hook = DropHook::new(Drops::new()).inspect(move |d| {
        assert_eq!(d.reason(), DropReason::ReplacedByLatest);
        log.lock().unwrap().push(d.take::<u64>().unwrap());
    });
    let probe = crate::support::probe_of(
        weir::range(0u64..1_000)
            .sample_on(ms(10), vt.clone())
            .on_dropped(hook),
    );
    assert_eq!(*seen.lock().unwrap(), (0..999).collect::<Vec<_>>());
    probe.request(1);
    probe.assert_items(&[999]);
    probe.assert_completed();
    probe.assert_no_violations();
}

/// A pool whose timer handles panic when cancelled (a user `Scheduler` can hand out
/// any `TimerHandle`).
#[derive(Clone)]
struct TimerCancelPanics(weir::runtime::ThreadPool);

impl weir::runtime::Scheduler for TimerCancelPanics {
    fn schedule(&self, task: weir::runtime::Task) {
        self.0.schedule(task);
    }
    fn schedule_after(&self, delay: std::time::Duration, task: weir::runtime::Task) {
        self.0.schedule_after(delay, task);
    }
    fn now(&self) -> std::time::Instant {
        self.0.now()
    }
    fn schedule_timer(
        &self,
        delay: std::time::Duration,
        task: weir::runtime::Task,
    ) -> weir::runtime::TimerHandle {
        let handle = self.0.schedule_timer(delay, task);
        weir::runtime::TimerHandle::new(move || {
            handle.cancel();
            panic!("deliberate: the timer's cancel broke");
        })
    }
}

/// A time stage that ends cancels upstream even when the scheduler's timer handle
/// panics in `cancel` (it used to stop the timer first, and the panic skipped the
/// upstream cancel: an `interval` went on ticking for ever).
#[test]
fn upstream_is_cancelled_when_the_timers_cancel_panics() {
    let pool = weir::runtime::ThreadPool::new(1);
    let (source, stats) = counted(weir::interval(std::time::Duration::from_millis(1)));
    let out = source
        .sample_on(
            std::time::Duration::from_millis(5),
            TimerCancelPanics(pool.clone()),
        )
        .take(1)
        .collect()
        .wait()
        .expect("take(1) completes");
    assert_eq!(out.len(), 1);
    // The stage ends on the pool's thread, after `take` completed the sink: wait
    // for its cancel (a bound on time, not a timing assertion).
    let patience = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while stats.cancels() == 0 && std::time::Instant::now() < patience {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(stats.cancels(), 1, "upstream cancelled");
    pool.shutdown();
}
