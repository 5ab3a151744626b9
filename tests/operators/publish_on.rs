//! `publish_on` (mirrors `operators/publish_on/`): an async boundary with a prefetch
//! window. Upstream is asked for `prefetch`, then for what was consumed each time 75%
//! of the window left the ring; items are delivered on the scheduler, in order, after
//! which the terminal signal follows. With `Immediate` the boundary is synchronous,
//! which gives the exact baseline checks; `ThreadPool` runs make items cross threads;
//! `VirtualTime` runs test `max_age`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use weir::demand::UNBOUNDED;
use weir::metrics::{DropHook, Drops};
use weir::prelude::*;
use weir::queue::TimeBounds;
use weir::runtime::{Immediate, ThreadPool, VirtualTime};
use weir::source::channel::ChannelPolicy;
use weir::tck::proptest::{check_publisher_with, demand_schedule, PublisherCheck};
use weir::tck::TestSubscriber;
use weir::{DropReason, Error, ErrorKind};

use crate::baseline;
use crate::support::counting::{counted, counted_with, counting_generator, Delivery};
use crate::support::failing::fails_after;
use crate::support::stepper::Stepper;
use crate::support::threaded::ThreadedRange;
use crate::support::valve::valve;
use crate::support::{probe_of, PATIENCE};

fn pool() -> ThreadPool {
    ThreadPool::builder().name("po").threads(1).build()
}

#[test]
fn smoke() {
    let expected = (0..10_000).collect::<Vec<u64>>();
    baseline::smoke(weir::range(0u64..10_000).publish_on(pool(), 16), &expected);
    baseline::smoke(
        weir::range(0u64..10_000).publish_on(Immediate, 7),
        &expected,
    );
}

#[test]
fn items_arrive_on_the_scheduler() {
    let threads = weir::range(0u32..100)
        .publish_on(pool(), 8)
        .map(|_| std::thread::current().name().unwrap_or("").to_owned())
        .collect()
        .wait()
        .unwrap();
    assert_eq!(threads.len(), 100);
    assert!(threads.iter().all(|name| name == "po-0"), "{threads:?}");
}

/// With `Immediate` every signal happens inside `request`: the prefetch goes up at
/// subscribe time, then one replenish per 75% of the window consumed.
#[test]
fn respects_demand() {
    let (source, stats) = counted(weir::range(0u64..100));
    let probe = probe_of(source.publish_on(Immediate, 8));
    assert_eq!(
        stats.request_log(),
        vec![8],
        "the window, before any demand"
    );
    probe.assert_items(&[]);
    probe.request(3);
    probe.assert_items(&[0, 1, 2]);
    assert_eq!(stats.request_log(), vec![8]);
    probe.request(3);
    probe.assert_items(&[0, 1, 2, 3, 4, 5]);
    assert_eq!(stats.request_log(), vec![8, 6], "6 = 75% of 8 consumed");
    probe.request(UNBOUNDED);
    assert_eq!(probe.received_count(), 100);
    probe.assert_completed();
    assert!(stats.max_outstanding() <= 8);
    assert!(!stats.over_delivered());
}

#[test]
fn cancel_stops_upstream() {
    // Window 4: 4 pulled at subscribe, 3 more once 3 were consumed.
    baseline::cancel_stops_upstream(|source| source.publish_on(Immediate, 4), &[0, 1, 2], 7);
}

#[test]
fn cancel_across_threads_stops_the_drain_and_upstream() {
    let (generator, calls) = counting_generator(u64::MAX);
    let (source, stats) = counted(generator);
    let probe = probe_of(source.publish_on(pool(), 16));
    probe.request(5);
    probe.await_items(5, PATIENCE).unwrap();
    probe.cancel();
    assert_eq!(stats.cancels(), 1, "cancel goes upstream at once");
    let pulled = calls.load(Ordering::SeqCst);
    probe.request(100);
    probe.expect_no_signals(Duration::from_millis(20)).unwrap();
    assert_eq!(probe.received_count(), 5);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        pulled,
        "nothing pulled after cancel"
    );
    assert!(
        pulled <= 5 + 16,
        "never more than the window ahead: {pulled}"
    );
}

#[test]
fn error_propagates_once() {
    baseline::error_propagates_once(|source, _| source.publish_on(Immediate, 4), 2, &[1, 2], 0);
}

#[test]
fn completes() {
    let stats = baseline::completes(
        weir::range(0u64..3),
        |source| source.publish_on(Immediate, 2),
        5,
        &[0, 1, 2],
    );
    assert!(stats.max_outstanding() <= 2);
    assert_eq!(
        weir::range(0u64..3)
            .publish_on(Immediate, 64)
            .in_flight_bound(),
        64
    );
}

/// Upstream's error crosses the boundary after every item queued before it.
#[test]
fn error_after_items_across_threads() {
    let boom = Error::msg("source failed");
    let probe = probe_of(fails_after(1_000, boom.clone()).publish_on(pool(), 16));
    probe.request(UNBOUNDED);
    let error = probe.await_error(PATIENCE).unwrap();
    assert!(Error::ptr_eq(&error, &boom));
    assert_eq!(probe.items(), (1..=1_000).collect::<Vec<u64>>());
    probe.assert_no_violations();
}

/// An error waits behind the queued items, like completion; with `errors_first` it
/// arrives at once, without demand, and the queued items are dropped unreported.
#[test]
fn errors_wait_behind_the_queued_items_unless_errors_first() {
    for errors_first in [false, true] {
        let boom = Error::msg("link down");
        let drops = Drops::new();
        let stage = weir::range(0u64..5)
            .concat(weir::error(boom.clone()))
            .publish_on(Immediate, 8);
        let stage = if errors_first {
            stage.errors_first()
        } else {
            stage
        };
        let probe = probe_of(stage.on_dropped(DropHook::new(drops.clone())));
        if errors_first {
            let error = probe.error().expect("the error overtakes, without demand");
            assert!(Error::ptr_eq(&error, &boom));
            probe.request(5);
            assert_eq!(probe.received_count(), 0, "the queued items are dropped");
        } else {
            assert!(probe.error().is_none(), "the error waits behind the items");
            probe.request(5);
            probe.assert_items(&[0, 1, 2, 3, 4]);
            assert!(Error::ptr_eq(&probe.assert_error(), &boom));
        }
        assert_eq!(drops.total(), 0, "an ended stream reports no drops");
        probe.assert_no_violations();
    }
}

/// `1..=n` then an error, through `publish_on(scheduler, 16).errors_first()`, into a
/// probe that has requested nothing; the error, to compare with what arrives.
fn failing_errors_first<C: weir::runtime::Scheduler + Clone>(
    n: u64,
    scheduler: C,
) -> (Error, weir::tck::TestProbe<u64>) {
    let boom = Error::msg("source failed");
    let probe = probe_of(
        fails_after(n, boom.clone())
            .publish_on(scheduler, 16)
            .errors_first(),
    );
    (boom, probe)
}

/// `errors_first` across threads: a subscriber that never requests still hears of
/// the failure.
#[test]
fn errors_first_reaches_a_subscriber_that_never_requests() {
    let (boom, probe) = failing_errors_first(10, pool());
    let error = probe.await_error(PATIENCE).unwrap();
    assert!(Error::ptr_eq(&error, &boom));
    assert_eq!(probe.received_count(), 0);
    probe.assert_no_violations();
}

/// `errors_first` is about errors only: completion still waits behind the items.
#[test]
fn errors_first_leaves_completion_behind_the_queued_items() {
    let probe = probe_of(weir::range(0u64..3).publish_on(Immediate, 4).errors_first());
    assert!(!probe.is_completed());
    probe.request(2);
    probe.assert_items(&[0, 1]);
    assert!(!probe.is_completed());
    probe.request(1);
    probe.assert_items(&[0, 1, 2]);
    probe.assert_completed();
}

/// With demand outstanding, `errors_first` drops only what is queued when the error
/// lands: the items delivered are a prefix of upstream's, in order, short of it by at
/// most one window (`prefetch`).
#[test]
fn errors_first_drops_at_most_the_queued_window() {
    let (boom, probe) = failing_errors_first(100, Immediate);
    probe.request(UNBOUNDED);
    let items = probe.items();
    assert!(items.len() >= 100 - 16, "{} items", items.len());
    assert_eq!(items, (1..=items.len() as u64).collect::<Vec<u64>>());
    assert!(Error::ptr_eq(&probe.assert_error(), &boom));
    probe.assert_no_violations();
}

/// At most `prefetch` items are ever outstanding upstream, and after the first window
/// upstream is asked in batches of at least 75% of it, however downstream requests.
#[test]
fn window_and_replenish_batches() {
    const N: u64 = 100_000;
    for delivery in [Delivery::Batches, Delivery::OneByOne] {
        for sink_prefetch in [UNBOUNDED, 256, 7] {
            let (source, stats) = counted_with(weir::range(0..N), delivery);
            let sum = source
                .subscribe_on(pool())
                .publish_on(pool(), 64)
                .fold_with(sink_prefetch, 0u64, |acc, x| acc + x)
                .wait()
                .unwrap();
            assert_eq!(sum, N * (N - 1) / 2);
            let log = stats.request_log();
            let case = format!("{delivery:?}, sink prefetch {sink_prefetch}");
            assert_eq!(log[0], 64, "{case}: the window first");
            assert!(
                log[1..].iter().all(|&n| (48..=64).contains(&n)),
                "{case}: replenished in batches of 75% of the window: {log:?}"
            );
            assert!(stats.max_outstanding() <= 64, "{case}");
            assert!(!stats.over_delivered(), "{case}");
        }
    }
}

/// A subscriber that panics inside `on_next` (rule 2.13): upstream is cancelled, the
/// queued items are dropped, and the pool's worker survives.
#[test]
fn panic_in_downstream_cancels_upstream() {
    struct Bomb;
    impl Subscriber<u64> for Bomb {
        fn on_subscribe(&mut self, subscription: Subscription) {
            subscription.request(100);
        }
        fn on_next(&mut self, item: u64) {
            if item == 5 {
                panic!("boom at {item}");
            }
        }
        fn on_error(&mut self, _: Error) {}
        fn on_complete(&mut self) {}
    }
    let pool = pool();
    let (generator, _) = counting_generator(u64::MAX);
    let (source, stats) = counted(generator);
    source.publish_on(pool.clone(), 16).subscribe(Bomb);
    let deadline = std::time::Instant::now() + PATIENCE;
    while stats.cancels() == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(stats.cancels(), 1);
    // A panicking closure in a sink becomes that sink's error, as without a boundary.
    let error = weir::range(0u64..100)
        .publish_on(pool.clone(), 8)
        .for_each(|x| assert!(x != 50, "boom"))
        .wait()
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Panicked);
    // The worker is still there.
    let sum = weir::range(0u64..10)
        .publish_on(pool, 4)
        .fold(0, |a, x| a + x);
    assert_eq!(sum.wait().unwrap(), 45);
}

#[test]
fn request_zero_fails_with_rule_3_9() {
    let (source, stats) = counted(weir::range(0u64..100));
    let probe = probe_of(source.publish_on(pool(), 8));
    probe.request(0);
    probe.await_error(PATIENCE).unwrap();
    probe.assert_error_rule("3.9");
    assert_eq!(stats.cancels(), 1);
}

/// An upstream that ignores demand: ten items at once, whatever was requested, then
/// completion.
struct Flood;

impl Publisher for Flood {
    type Item = u64;
    fn subscribe<S: Subscriber<u64> + Send + 'static>(self, mut subscriber: S) {
        subscriber.on_subscribe(Subscription::noop());
        let _ = subscriber.on_next_batch(0..10);
        subscriber.on_complete();
    }
}

/// An upstream that ignores demand fills the ring: the boundary fails with an error
/// naming rule 1.1, after the items that fitted, and reports the rest as dropped.
#[test]
fn a_full_ring_is_a_rule_1_1_error() {
    let drops = Drops::new();
    let probe = probe_of(
        Flood
            .publish_on(Immediate, 4)
            .on_dropped(DropHook::new(drops.clone())),
    );
    probe.request(100);
    probe.assert_items(&[0, 1, 2, 3]);
    probe.assert_error_rule("1.1");
    assert_eq!(drops.count(DropReason::OverflowNewest), 6);
}

/// With `errors_first` the rule 1.1 error of an overfilled ring overtakes the items
/// that fitted.
#[test]
fn errors_first_a_full_ring_fails_at_once() {
    let probe = probe_of(Flood.publish_on(Immediate, 4).errors_first());
    probe.assert_error_rule("1.1");
    probe.request(100);
    assert_eq!(probe.received_count(), 0);
}

#[test]
#[should_panic(expected = "publish_on prefetch must be in 1..=2^30 (got 0)")]
fn zero_prefetch_is_refused() {
    let _ = weir::range(0u8..1).publish_on(Immediate, 0);
}

#[test]
#[should_panic(expected = "publish_on prefetch must be in 1..=2^30 (got 1073741825)")]
fn huge_prefetch_is_refused() {
    let _ = weir::range(0u8..1).publish_on(Immediate, (1 << 30) + 1);
}

/// The ring is allocated whole when upstream subscribes: 2^30 slots of 64-byte items
/// (64 GiB) used to abort the process there; now refused where it is built.
#[test]
#[should_panic(
    expected = "publish_on prefetch of 1073741824 slots of 64 bytes needs 68719476736 bytes up \
                front; at most 2^30 bytes (1 GiB): 16777216 slots for this item type"
)]
fn a_ring_over_a_gib_is_refused_where_it_is_built() {
    let _ = weir::range(0u64..1)
        .map(|x| [x; 8])
        .publish_on(Immediate, 1 << 30);
}

/// The budget counts the stamp each slot of `publish_on_with` also holds.
#[test]
fn publish_on_with_counts_the_stamps_in_the_budget() {
    let item = std::mem::size_of::<u64>();
    let plain = 1u64 << 27; // 2^27 × 8 bytes: exactly 1 GiB
    let _fits = weir::range(0u64..1).publish_on(Immediate, plain);
    let refused = std::panic::catch_unwind(|| {
        weir::range(0u64..1).publish_on_with(Immediate, plain, TimeBounds::none())
    });
    let message = *refused
        .expect_err("the stamps take it over 1 GiB")
        .downcast::<String>()
        .unwrap();
    assert!(
        message.starts_with("publish_on prefetch of 134217728 slots of ")
            && !message.contains(&format!("slots of {item} bytes")),
        "{message}"
    );
}

/// The largest ring a `u64` stream may have (2^27 slots, 1 GiB of address space,
/// touched only as items pass) runs ten items through.
#[test]
fn the_largest_ring_of_u64_runs() {
    let pool = ThreadPool::builder().name("po-big").threads(1).build();
    let sum = weir::range(0u64..10)
        .publish_on(pool, 1 << 27)
        .fold(0, |a, x| a + x)
        .wait();
    assert_eq!(sum.unwrap(), 45);
}

#[test]
#[should_panic(
    expected = "publish_on_with: adaptive LIFO and CoDel do not apply to an async \
                           boundary"
)]
fn adaptive_lifo_is_refused() {
    let bounds = TimeBounds::none().adaptive_lifo(Duration::from_secs(1));
    let _ = weir::range(0u8..1).publish_on_with(Immediate, 4, bounds);
}

#[test]
#[should_panic(
    expected = "publish_on_with: adaptive LIFO and CoDel do not apply to an async \
                           boundary"
)]
fn codel_is_refused() {
    let bounds = TimeBounds::none().codel(Duration::from_millis(5), Duration::from_millis(100));
    let _ = weir::range(0u8..1).publish_on_with(Immediate, 4, bounds);
}

// ---- max_age, under VirtualTime -----------------------------------------------------

/// A producer that sends one item at a time: the drain holds the counts of its
/// one-item passes back (no clock reading or lock per pass) and publishes them every
/// 64 items; a snapshot publishes what is held first, so its counts are exact at any
/// moment and the rates read the true 100/s of an item every 10 ms.
#[test]
fn counts_held_back_by_the_drain_reach_every_snapshot() {
    let time = VirtualTime::new();
    let (source, handle) = valve(u64::MAX);
    let boundary = source.publish_on(time.clone(), 8);
    let monitor = boundary.monitor();
    let probe = probe_of(boundary);
    probe.request(u64::MAX);
    for i in 1..=1_000u64 {
        time.advance(Duration::from_millis(10));
        handle.release(1);
        time.run_ready();
        assert_eq!(probe.received_count(), i);
        if i % 97 == 0 {
            let stats = monitor.snapshot();
            assert_eq!(
                (stats.enqueued, stats.dequeued, stats.depth),
                (i, i, 0),
                "after item {i}"
            );
        }
    }
    let stats = monitor.snapshot();
    assert_eq!((stats.enqueued, stats.dequeued), (1_000, 1_000));
    assert!((stats.arrival_rate - 100.0).abs() < 1.0, "{stats:?}");
    assert!((stats.drain_rate - 100.0).abs() < 1.0, "{stats:?}");
}

/// Items stamped per batch: the first release waits 1.3 s, the second 0.7 s; with a
/// maximum age of 1 s only the second is delivered. The expired items go to the drop
/// hook (which may take them), are counted there and in the monitor, and their slots
/// are replenished like delivered ones.
#[test]
fn max_age_drops_expired_items_at_dequeue() {
    let time = VirtualTime::new();
    let (source, handle) = valve(u64::MAX);
    let (source, stats) = counted(source);
    let drops = Drops::new();
    let taken = Arc::new(Mutex::new(Vec::new()));
    let hook = {
        let taken = taken.clone();
        DropHook::new(drops.clone()).inspect(move |dropped| {
            assert_eq!(dropped.reason(), DropReason::Expired);
            assert_eq!(dropped.stage(), "publish_on");
            taken.lock().unwrap().extend(dropped.take::<u64>());
        })
    };
    let bounds = TimeBounds::none().max_age(Duration::from_secs(1));
    let boundary = source.publish_on_with(time.clone(), 8, bounds);
    let monitor = boundary.monitor();
    let probe = probe_of(boundary.on_dropped(hook));
    handle.release(4);
    time.advance(Duration::from_millis(600));
    handle.release(4);
    time.advance(Duration::from_millis(700));
    let stats_now = monitor.snapshot();
    assert_eq!((stats_now.depth, stats_now.enqueued), (8, 8));
    assert_eq!(stats_now.oldest_age, Some(Duration::from_millis(1_300)));
    probe.request(100);
    time.run_ready();
    probe.assert_items(&[4, 5, 6, 7]);
    assert_eq!(*taken.lock().unwrap(), vec![0, 1, 2, 3]);
    assert_eq!(drops.count(DropReason::Expired), 4);
    let after = monitor.snapshot();
    assert_eq!(after.dropped(DropReason::Expired), 4);
    assert_eq!(
        (after.depth, after.dequeued, after.oldest_age),
        (0, 4, None)
    );
    // 8 slots left the ring (4 expired, 4 delivered): 6 = 75% of 8 went up at once.
    assert_eq!(stats.request_log()[..2], [8, 8]);
    probe.assert_no_terminal();
}

/// Items that are young enough are never dropped, whatever the age of items before
/// them was; and without demand the items wait (held, not failed).
#[test]
fn max_age_keeps_young_items_and_waits_for_demand() {
    let time = VirtualTime::new();
    let bounds = TimeBounds::none().max_age(Duration::from_secs(1));
    let probe = probe_of(weir::range(0u64..5).publish_on_with(time.clone(), 8, bounds));
    time.advance(Duration::from_millis(900));
    probe.assert_items(&[]);
    probe.assert_no_terminal();
    probe.request(2);
    time.run_ready();
    probe.assert_items(&[0, 1]);
    time.advance(Duration::from_millis(200));
    probe.request(10);
    time.run_ready();
    probe.assert_items(&[0, 1]);
    probe.assert_completed();
}

// ---- lossless under random demand, items crossing threads ----------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Every item exactly once, in order: a threaded source through a boundary on a
    /// pool, under random request sizes from the consumer's side.
    #[test]
    fn lossless_in_order_under_random_demand(
        prefetch in 1u64..40,
        requests in prop::collection::vec(1u64..50, 1..12),
        len in 0u64..300,
    ) {
        let subscriber = TestSubscriber::new();
        let probe = subscriber.probe();
        ThreadedRange::new(len).publish_on(pool(), prefetch).subscribe(subscriber);
        let mut asked = 0u64;
        for n in &requests {
            probe.request(*n);
            asked += n;
        }
        let expect = asked.min(len);
        probe.await_items(expect, PATIENCE).map_err(TestCaseError::fail)?;
        if asked >= len {
            probe.await_completion(PATIENCE).map_err(TestCaseError::fail)?;
        } else {
            probe.expect_no_signals(Duration::from_millis(5)).map_err(TestCaseError::fail)?;
        }
        prop_assert_eq!(probe.items(), (0..expect).collect::<Vec<_>>());
        probe.check_violations().map_err(TestCaseError::fail)?;
    }

    /// The conformance kit's demand schedules (1–3 threads, cancels, `request(0)`),
    /// against a two-thread pipeline: `subscribe_on` one pool, `publish_on` another.
    #[test]
    fn obeys_any_demand_schedule(schedule in demand_schedule()) {
        let check = PublisherCheck::asynchronous(PATIENCE, Duration::from_millis(10));
        let (up, down) = (pool(), pool());
        check_publisher_with(
            |n| weir::range(0..n).subscribe_on(up.clone()).publish_on(down.clone(), 4),
            20,
            &schedule,
            check,
        )?;
    }
}

/// A million items through the boundary arrive exactly once, in order, with the
/// sink's batch credit as the only downstream demand.
#[test]
fn a_million_items_in_order() {
    let next = Arc::new(AtomicU64::new(0));
    let seen = next.clone();
    weir::range(0u64..1_000_000)
        .subscribe_on(pool())
        .publish_on(pool(), 256)
        .for_each(move |x| {
            assert_eq!(x, seen.load(Ordering::Relaxed));
            seen.store(x + 1, Ordering::Relaxed);
        })
        .wait()
        .unwrap();
    assert_eq!(next.load(Ordering::Relaxed), 1_000_000);
}

/// The drain lingers while the ring holds items and downstream has demand; a drain
/// that cannot deliver them (cancelled, or already terminated) must leave its task,
/// and the last items must still arrive when they were published without a signal
/// of their own.
#[test]
fn the_drain_task_leaves_once_the_subscription_ended() {
    let stepper = Stepper::default();
    let probe = probe_of(weir::range(0u64..1_000).publish_on(stepper.clone(), 64));
    probe.request(10);
    probe.cancel();
    let ran = stepper.run_until_idle(8);
    assert!(ran <= 2, "{ran} tasks after a cancel");
    probe.assert_items(&[]);

    let probe = probe_of(weir::range(0u64..100).publish_on(stepper.clone(), 16));
    probe.request(UNBOUNDED);
    let ran = stepper.run_until_idle(64);
    assert!(ran >= 1, "the drain ran");
    probe.assert_items(&(0..100).collect::<Vec<u64>>());
    probe.assert_completed();
}

/// Items sent one at a time from a producer thread through a channel: the boundary's
/// producer signals the drain only when no drain task watches the ring (always, for a
/// window above one published run; for a smaller one, while items arrive a few at a
/// time). Pauses on both sides make the drain task leave and come back thousands of
/// times and switch between watching and not, so every way an unsignalled item can
/// meet a leaving task is crossed: each item arrives once, in order, and the
/// completion after the last, for plain and stamped rings.
#[test]
fn single_items_from_another_thread_reach_a_drain_that_comes_and_goes() {
    const N: u64 = 200_000;
    for (prefetch, stamped) in [
        (16, false),
        (64, true),
        (65, false),
        (256, false),
        (65, true),
        (256, true),
    ] {
        let (tx, rx) = weir::channel::<u64>(1_024, ChannelPolicy::Backpressure);
        let producer = std::thread::spawn(move || {
            for i in 0..N {
                tx.send_blocking(i).expect("open");
                if i % 4_099 == 0 {
                    // Long enough for the drain task to stop lingering and leave.
                    std::thread::sleep(Duration::from_micros(300));
                }
            }
        });
        let next = Arc::new(AtomicU64::new(0));
        let seen = next.clone();
        let in_order = move |x: u64| {
            assert_eq!(x, seen.load(Ordering::Relaxed), "in order, none lost");
            seen.store(x + 1, Ordering::Relaxed);
            if x % 7_919 == 0 {
                // The ring fills behind a slow subscriber; its demand runs out.
                std::thread::sleep(Duration::from_micros(200));
            }
        };
        let mut handle = if stamped {
            rx.publish_on_with(pool(), prefetch, TimeBounds::none())
                .for_each(in_order)
        } else {
            rx.publish_on(pool(), prefetch).for_each(in_order)
        };
        // A stranded item would leave the stream waiting for ever.
        let done = handle
            .wait_timeout(PATIENCE * 3)
            .unwrap_or_else(|| panic!("stalled at item {}", next.load(Ordering::Relaxed)));
        done.expect("completes after the last item");
        producer.join().expect("the producer ran");
        assert_eq!(
            next.load(Ordering::Relaxed),
            N,
            "prefetch {prefetch}, stamped {stamped}"
        );
    }
}

/// A drain watching a channel polls for a *run* of written items and takes fewer
/// only when its polls end. Here no run ever comes: the producer sends the next
/// item only once the last one came out (`try_send`, then `send_blocking`), so
/// every item is a lone one; each must come out, in order, to a `publish_on` drain
/// and to a thread waiting for a `fold` (the sink's own watcher), window 256 and 1.
#[test]
fn lone_items_that_never_make_a_run_still_come_out() {
    const ROUND_TRIPS: u64 = 3_000;
    for (behind_publish_on, prefetch) in [(true, 256), (true, 1), (false, 256)] {
        let (tx, rx) = weir::channel::<u64>(1_024, ChannelPolicy::Backpressure);
        let (echo, echoed) = std::sync::mpsc::channel::<u64>();
        let producer = std::thread::spawn(move || {
            for i in 0..ROUND_TRIPS {
                if i % 2 == 0 {
                    tx.try_send(i).expect("room: one item in flight at a time");
                } else {
                    tx.send_blocking(i).expect("open");
                }
                let back = echoed
                    .recv_timeout(PATIENCE)
                    .unwrap_or_else(|_| panic!("item {i} never came out"));
                assert_eq!(back, i, "in order");
            }
        });
        let step = move |n: u64, x: u64| {
            echo.send(x).expect("the producer waits for it");
            n + 1
        };
        let mut handle = if behind_publish_on {
            rx.publish_on(pool(), prefetch).fold(0u64, step)
        } else {
            rx.fold(0u64, step)
        };
        // Waiting while the producer runs: without the boundary, this thread is
        // the channel's watcher.
        let count = handle
            .wait_timeout(PATIENCE * 3)
            .expect("completes once the producer is gone")
            .expect("no error");
        producer.join().expect("every item came out");
        assert_eq!(
            count, ROUND_TRIPS,
            "publish_on {behind_publish_on}, prefetch {prefetch}"
        );
    }
}

#[test]
fn a_boundary_in_front_of_a_slow_subscriber_reports_live_figures() {
    // The drain's pass never ends while the ring keeps refilling (the subscriber
    // takes everything, slowly): the monitor must not wait for the pass's end (16,384
    // items here, 16 s) to show the full ring and the drain rate.
    let pool = ThreadPool::builder().threads(2).build();
    let hop = weir::range(0u64..1_000_000).publish_on(pool.clone(), 16);
    let monitor = hop.monitor();
    let handle = hop.fold(0u64, |n, _| {
        std::thread::sleep(Duration::from_millis(1));
        n + 1
    });
    let start = std::time::Instant::now();
    loop {
        let stats = monitor.snapshot();
        if stats.depth == 16 && stats.dequeued >= 256 && stats.drain_rate > 0.0 {
            break;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "the monitor never showed the full ring and the drain: {stats}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(handle);
    pool.shutdown();
}
