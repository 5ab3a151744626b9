//! `concat` (mirrors `operators/concat.rs`): the second source is subscribed only
//! after the first completed, and asked for exactly the demand the first did not
//! serve; nothing is buffered.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use weir::metrics::{DropHook, Drops};
use weir::prelude::*;
use weir::tck::proptest::{check_publisher, check_publisher_with, demand_schedule, PublisherCheck};
use weir::tck::TestSubscriber;
use weir::{DropReason, Error};

use crate::baseline;
use crate::support::counting::counted;
use crate::support::model::{check_model, schedule, Completion};
use crate::support::threaded::ThreadedRange;
use crate::support::{shape, PATIENCE};

/// A source of `items` that records whether it was subscribed, and the record.
fn watched(items: std::ops::Range<u64>) -> (impl Publisher<Item = u64>, Arc<AtomicBool>) {
    let subscribed = Arc::new(AtomicBool::new(false));
    let flag = subscribed.clone();
    let source = weir::defer(move || {
        flag.store(true, Ordering::SeqCst);
        weir::range(items)
    });
    (source, subscribed)
}

#[test]
fn smoke() {
    baseline::smoke(
        weir::range(0u32..3).concat(weir::range(10..12)),
        &[0, 1, 2, 10, 11],
    );
}

#[test]
fn respects_demand_and_carries_it_over_exactly() {
    let (first, first_stats) = counted(weir::range(0u64..3));
    let (second, second_stats) = counted(weir::range(10u64..100));
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    first.concat(second).subscribe(subscriber);
    assert_eq!(first_stats.request_calls(), 0);

    probe.request(2);
    probe.assert_items(&[0, 1]);
    assert_eq!(first_stats.request_log(), vec![2]);
    assert_eq!(second_stats.request_calls(), 0, "second not subscribed yet");

    // 5 requested: 1 from the first, the other 4 carried over to the second.
    probe.request(5);
    probe.assert_items(&[0, 1, 2, 10, 11, 12, 13]);
    assert_eq!(first_stats.request_log(), vec![2, 5]);
    assert_eq!(second_stats.request_log(), vec![4]);
    probe.request(1);
    assert_eq!(second_stats.request_log(), vec![4, 1]);
    probe.assert_no_violations();
    assert_eq!(
        weir::range(0u8..1)
            .concat(weir::range(0..1))
            .in_flight_bound(),
        0
    );
}

#[test]
fn subscribes_the_second_only_after_the_first_completed() {
    let (second, subscribed) = watched(5u64..7);
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::range(0u64..2).concat(second).subscribe(subscriber);
    probe.request(1);
    assert!(!subscribed.load(Ordering::SeqCst));
    probe.request(1);
    // range looks ahead: it completes with its last item, so the switch happens here.
    probe.assert_items(&[0, 1]);
    assert!(subscribed.load(Ordering::SeqCst));
    probe.request(10);
    probe.assert_items(&[0, 1, 5, 6]);
    probe.assert_completed();
}

#[test]
fn cancel_stops_upstream() {
    let (first, first_stats) = counted(weir::range(0u64..u64::MAX));
    let (second, subscribed) = watched(0u64..3);
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    first.concat(second).subscribe(subscriber);
    probe.request(3);
    probe.cancel();
    assert_eq!(first_stats.cancels(), 1);
    probe.request(3);
    assert_eq!(probe.received_count(), 3);
    assert!(
        !subscribed.load(Ordering::SeqCst),
        "never subscribed after a cancel"
    );

    // Cancel while the second is live.
    let (second, second_stats) = counted(weir::range(0u64..u64::MAX));
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::empty().concat(second).subscribe(subscriber);
    probe.request(2);
    probe.cancel();
    assert_eq!(second_stats.cancels(), 1);
    probe.assert_no_terminal();
}

#[test]
fn error_propagates_once() {
    let boom = Error::msg("first failed");
    let (second, subscribed) = watched(0u64..3);
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::error::<u64>(boom.clone())
        .concat(second)
        .subscribe(subscriber);
    assert_eq!(shape(&probe), "SE");
    assert!(Error::ptr_eq(&probe.assert_error(), &boom));
    assert!(!subscribed.load(Ordering::SeqCst));

    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::range(0u64..1)
        .concat(weir::error(boom.clone()))
        .subscribe(subscriber);
    probe.request(5);
    assert_eq!(shape(&probe), "SNE");
}

#[test]
fn completes() {
    baseline::completes(
        weir::empty::<u8>(),
        |source| source.concat(weir::empty()),
        0,
        &[],
    );
}

#[test]
fn threaded_sources_in_order() {
    for _ in 0..20 {
        let out = ThreadedRange::new(300)
            .concat(ThreadedRange::new(300).map(|x| x + 1_000))
            .collect_with(7)
            .wait()
            .unwrap();
        let model: Vec<u64> = (0..300).chain(1_000..1_300).collect();
        assert_eq!(out, model);
    }
}

#[test]
fn forwards_the_drop_hook_to_both_sources() {
    // A subscriber that never requests: both eager sources drop everything, and both
    // lossy stages must have found the hook through `concat`.
    let drops = Drops::new();
    let subscriber = TestSubscriber::<u64>::new();
    let probe = subscriber.probe();
    weir::range(0u64..1_000)
        .on_backpressure_drop()
        .concat(weir::range(0u64..1_000).on_backpressure_drop())
        .on_dropped(DropHook::new(drops.clone()))
        .subscribe(subscriber);
    probe.assert_completed();
    assert_eq!(probe.received_count(), 0);
    assert_eq!(drops.count(DropReason::OverflowNewest), 2_000);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Output equals `a.chain(b)`, in order, within demand, under any schedule.
    #[test]
    fn matches_the_iterator_model(
        a in prop::collection::vec(any::<u16>(), 0..40),
        b in prop::collection::vec(any::<u16>(), 0..40),
        schedule in schedule(),
    ) {
        let model: Vec<u16> = a.iter().chain(&b).copied().collect();
        let run = check_model(a, |_| model, |s| s.concat(weir::from_iter(b)), &schedule, Completion::AtLength)?;
        prop_assert!(!run.stats.over_delivered());
    }

    /// The kit's random schedules (1-3 threads, huge requests, `request(0)`, cancels).
    #[test]
    fn obeys_any_demand_schedule(n in 0u64..40, schedule in demand_schedule()) {
        check_publisher(|n| weir::range(0..n / 2).concat(weir::range(n / 2..n)), n, &schedule)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// The kit's random schedules over sources that emit from threads of their own.
    #[test]
    fn obeys_any_demand_schedule_with_threaded_sources(n in 0u64..24, schedule in demand_schedule()) {
        let check = PublisherCheck::asynchronous(PATIENCE, Duration::from_millis(10));
        check_publisher_with(|n| ThreadedRange::new(n / 2).concat(ThreadedRange::new(n - n / 2)), n, &schedule, check)?;
    }
}

#[test]
fn a_second_publisher_that_panics_in_subscribe_fails_the_stream() {
    let (items, result) = {
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        let result = weir::range(0u32..3)
            .concat(crate::support::failing::PanicsOnSubscribe)
            .inspect(move |x| log.lock().unwrap().push(*x))
            .collect()
            .wait();
        let items = seen.lock().unwrap().clone();
        (items, result)
    };
    assert_eq!(items, [0, 1, 2], "the first publisher's items");
    let error = result.unwrap_err();
    assert_eq!(error.kind(), weir::ErrorKind::Panicked);
    assert_eq!(
        error.message(),
        "boom in subscribe",
        "the panic's own message"
    );
}

/// The same after the second publisher's `on_subscribe`: downstream used to wait for
/// ever (the leg was dropped subscribed, unterminated).
#[test]
fn a_second_publisher_that_panics_after_its_on_subscribe_fails_the_stream() {
    let mut handle = weir::range(0u32..3)
        .concat(crate::support::failing::PanicsAfterOnSubscribe("concat"))
        .collect();
    match handle.wait_timeout(PATIENCE) {
        Some(Err(error)) => {
            assert_eq!(error.kind(), weir::ErrorKind::Panicked);
            assert_eq!(error.message(), "boom after on_subscribe in concat");
        }
        other => panic!("ended with {other:?}, expected the panic"),
    }
}

/// A subscriber of the second source that runs another pipeline with a `concat` and
/// waits for it, on the same thread (from inside the switch to that second source):
/// the inner switch must run where it happens. (A thread-local trampoline tried for
/// long chains queued it behind the outer switch, which was waiting for it: a hang.)
#[test]
fn a_pipeline_waited_for_inside_the_second_source_completes() {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let inner: Vec<Vec<u64>> = weir::just(1u64)
            .concat(weir::just(2u64))
            .fold(Vec::new(), |mut all, x| {
                all.push(
                    weir::just(x)
                        .concat(weir::just(x + 10))
                        .collect()
                        .wait()
                        .expect("inner completes"),
                );
                all
            })
            .wait()
            .expect("outer completes");
        done.send(inner).unwrap();
    });
    let inner = finished
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("no hang");
    assert_eq!(inner, vec![vec![1, 11], vec![2, 12]]);
}
