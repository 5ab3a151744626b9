//! `subscribe_on` (mirrors `operators/subscribe_on.rs`): `subscribe` and every
//! forwarded `request` run on the scheduler; items pass through unchanged; requests
//! accumulate and go upstream from one task at a time; cancel goes at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use weir::demand::UNBOUNDED;
use weir::prelude::*;
use weir::runtime::{Immediate, Scheduler, Task, ThreadPool, VirtualTime};
use weir::tck::proptest::{check_publisher_with, demand_schedule, PublisherCheck};
use weir::tck::Signal;
use weir::Error;

use crate::baseline;
use crate::support::counting::{counted, counting_generator};
use crate::support::failing::{fails_after, PanicsAfterOnSubscribe, PanicsOnSubscribe};
use crate::support::stepper::Stepper;
use crate::support::{probe_of, PATIENCE};

fn pool() -> ThreadPool {
    ThreadPool::builder().name("so").threads(1).build()
}

/// A scheduler that counts the tasks it was given and runs them on a `VirtualTime`.
#[derive(Clone, Default)]
struct Counting {
    tasks: Arc<AtomicUsize>,
    time: VirtualTime,
}

impl Scheduler for Counting {
    fn schedule(&self, task: Task) {
        self.tasks.fetch_add(1, Ordering::SeqCst);
        self.time.schedule(task)
    }
    fn schedule_after(&self, delay: Duration, task: Task) {
        self.tasks.fetch_add(1, Ordering::SeqCst);
        self.time.schedule_after(delay, task)
    }
    fn now(&self) -> std::time::Instant {
        self.time.now()
    }
}

#[test]
fn smoke() {
    let expected = (0..10_000).collect::<Vec<u64>>();
    baseline::smoke(weir::range(0u64..10_000).subscribe_on(pool()), &expected);
}

/// A synchronous source, subscribed on the pool, emits on the pool's thread.
#[test]
fn subscribe_and_emission_run_on_the_scheduler() {
    let names = weir::range(0u32..50)
        .map(|_| std::thread::current().name().unwrap_or("").to_owned())
        .subscribe_on(pool())
        .collect_with(4)
        .wait()
        .unwrap();
    assert_eq!(names.len(), 50);
    assert!(names.iter().all(|name| name == "so-0"), "{names:?}");
}

/// Nothing happens until the scheduler runs; a burst of requests is one task and one
/// upstream request carrying their sum.
#[test]
fn respects_demand_and_coalesces_requests() {
    let scheduler = Counting::default();
    let (source, stats) = counted(weir::range(0u64..100));
    let probe = probe_of(source.subscribe_on(scheduler.clone()));
    assert!(!probe.is_subscribed(), "subscribe waits for the scheduler");
    assert_eq!(scheduler.tasks.load(Ordering::SeqCst), 1);
    scheduler.time.run_ready();
    assert!(probe.is_subscribed());
    probe.request(1);
    probe.request(2);
    probe.request(3);
    probe.assert_items(&[]);
    assert_eq!(stats.request_calls(), 0, "forwarded on the scheduler only");
    assert_eq!(
        scheduler.tasks.load(Ordering::SeqCst),
        2,
        "one task for the burst"
    );
    scheduler.time.run_ready();
    assert_eq!(stats.request_log(), vec![6]);
    probe.assert_items(&[0, 1, 2, 3, 4, 5]);
    probe.request(UNBOUNDED);
    scheduler.time.run_ready();
    assert_eq!(probe.received_count(), 100);
    probe.assert_completed();
    assert!(!stats.over_delivered());
}

#[test]
fn cancel_stops_upstream() {
    baseline::cancel_stops_upstream(|source| source.subscribe_on(Immediate), &[0, 1, 2], 3);
}

/// Cancel is forwarded at once, not on the scheduler, and requests still queued are
/// discarded.
#[test]
fn cancel_is_forwarded_directly() {
    let scheduler = Counting::default();
    let (generator, calls) = counting_generator(u64::MAX);
    let (source, stats) = counted(generator);
    let probe = probe_of(source.subscribe_on(scheduler.clone()));
    scheduler.time.run_ready();
    probe.request(5);
    probe.cancel();
    assert_eq!(stats.cancels(), 1, "before the scheduler ran");
    scheduler.time.run_ready();
    assert_eq!(stats.request_calls(), 0, "the queued request was discarded");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    probe.assert_items(&[]);
}

#[test]
fn error_propagates_once() {
    baseline::error_propagates_once(|source, _| source.subscribe_on(Immediate), 2, &[1, 2], 0);
}

#[test]
fn error_after_items_on_a_pool() {
    let boom = Error::msg("source failed");
    let probe = probe_of(fails_after(100, boom.clone()).subscribe_on(pool()));
    probe.request(1_000);
    let error = probe.await_error(PATIENCE).unwrap();
    assert!(Error::ptr_eq(&error, &boom));
    assert_eq!(probe.items(), (1..=100).collect::<Vec<u64>>());
}

#[test]
fn completes() {
    baseline::completes(
        weir::range(0u64..3),
        |source| source.subscribe_on(Immediate),
        5,
        &[0, 1, 2],
    );
}

/// `request(0)` is forwarded; upstream answers it with the rule 3.9 error.
#[test]
fn request_zero_reaches_upstream() {
    let probe = probe_of(weir::range(0u64..10).subscribe_on(pool()));
    probe.await_subscribed(PATIENCE).unwrap();
    probe.request(0);
    probe.await_error(PATIENCE).unwrap();
    probe.assert_error_rule("3.9");
}

/// A panic in downstream is upstream's to catch, as without the operator: the source
/// treats the subscriber as cancelled and the pool's worker survives.
#[test]
fn panic_in_downstream_is_caught_upstream() {
    let pool = pool();
    let got = Arc::new(Mutex::new(Vec::new()));
    let seen = got.clone();
    let error = weir::range(0u64..100)
        .subscribe_on(pool.clone())
        .for_each(move |x| {
            seen.lock().unwrap().push(x);
            assert!(x != 3, "boom");
        })
        .wait()
        .unwrap_err();
    assert_eq!(error.kind(), weir::ErrorKind::Panicked);
    assert_eq!(*got.lock().unwrap(), vec![0, 1, 2, 3]);
    let sum = weir::range(0u64..10)
        .subscribe_on(pool)
        .fold(0, |a, x| a + x);
    assert_eq!(sum.wait().unwrap(), 45);
}

/// A scheduler that can no longer run the subscribing task (a pool shut down) drops
/// it: downstream gets `on_subscribe` and an error of kind `SchedulerShutdown`, and
/// the source is never subscribed.
#[test]
fn a_subscribing_task_dropped_unrun_ends_downstream_with_scheduler_shutdown() {
    let pool = pool();
    pool.shutdown();
    let (source, stats) = counted(weir::range(0u64..10));
    let probe = probe_of(source.subscribe_on(pool));
    let error = probe.await_error(PATIENCE).unwrap();
    assert_eq!(error.kind(), weir::ErrorKind::SchedulerShutdown);
    assert!(
        matches!(probe.signals()[..], [Signal::Subscribe, Signal::Error(_)]),
        "on_subscribe once, then the error"
    );
    assert_eq!(stats.request_calls(), 0, "the source was never subscribed");
    assert_eq!(stats.delivered(), 0);
    probe.assert_no_violations();
}

/// A source that panics in `subscribe` (before or after its `on_subscribe`) ends
/// downstream with an error of kind `Panicked` carrying the panic's own message,
/// `on_subscribe` once, nothing else; the pool's worker lives on. (After
/// `on_subscribe`, downstream used to wait for ever.)
#[test]
fn a_source_that_panics_in_subscribe_ends_downstream_with_the_panics_message() {
    fn check<P: Publisher<Item = u32> + Send + 'static>(
        pool: &ThreadPool,
        source: impl Fn() -> P,
        message: &str,
    ) {
        let probe = probe_of(source().subscribe_on(pool.clone()));
        let error = probe.await_error(PATIENCE).unwrap();
        assert_eq!(error.kind(), weir::ErrorKind::Panicked, "{message}");
        assert_eq!(error.message(), message);
        probe
            .expect_signal_count(2, Duration::from_millis(20))
            .unwrap();
        assert!(
            matches!(probe.signals()[..], [Signal::Subscribe, Signal::Error(_)]),
            "{message}: on_subscribe once, then the error"
        );
        probe.assert_no_violations();
        let mut handle = source().subscribe_on(pool.clone()).fold(0, |a, x| a + x);
        match handle.wait_timeout(PATIENCE) {
            Some(Err(error)) => assert_eq!(error.message(), message),
            other => panic!("{message}: the fold ended with {other:?}"),
        }
    }
    let pool = pool();
    check(&pool, || PanicsOnSubscribe, "boom in subscribe");
    check(
        &pool,
        || PanicsAfterOnSubscribe("subscribe_on"),
        "boom after on_subscribe in subscribe_on",
    );
    let sum = weir::range(0u64..10)
        .subscribe_on(pool)
        .fold(0, |a, x| a + x);
    assert_eq!(sum.wait().unwrap(), 45, "the worker survived");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// The conformance kit's demand schedules against `range.subscribe_on(pool)`.
    #[test]
    fn obeys_any_demand_schedule(schedule in demand_schedule()) {
        let check = PublisherCheck::asynchronous(PATIENCE, Duration::from_millis(10));
        let pool = pool();
        check_publisher_with(|n| weir::range(0..n).subscribe_on(pool.clone()), 20, &schedule, check)?;
    }
}

/// The forwarding task lingers for demand it has not forwarded yet; demand that can
/// no longer be forwarded must not keep it (or a successor) running: after a cancel
/// with a request pending, and once everything (`UNBOUNDED`) went up, the scheduler
/// runs out of tasks.
#[test]
fn the_forwarding_task_leaves_once_nothing_is_left_to_forward() {
    let stepper = Stepper::default();
    let probe = probe_of(weir::never::<u64>().subscribe_on(stepper.clone()));
    stepper.run_until_idle(8);
    probe.request(5);
    probe.cancel();
    let ran = stepper.run_until_idle(8);
    assert!(ran <= 2, "{ran} tasks after a cancel");

    let probe = probe_of(weir::never::<u64>().subscribe_on(stepper.clone()));
    stepper.run_until_idle(8);
    probe.request(UNBOUNDED);
    stepper.run_until_idle(8);
    probe.request(3);
    let ran = stepper.run_until_idle(8);
    assert!(ran <= 2, "{ran} tasks after everything was forwarded");
    probe.assert_items(&[]);
}
