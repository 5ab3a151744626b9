//! `scan` (mirrors `operators/scan.rs`): PassThrough, one accumulated state out per
//! item in (the initial state is not emitted); a panic in the closure becomes
//! `on_error(Panicked)` and cancels upstream.

use std::sync::atomic::Ordering;

use proptest::prelude::*;
use weir::prelude::*;
use weir::source::Step;
use weir::tck::proptest::{check_publisher, demand_schedule};
use weir::tck::TestSubscriber;
use weir::{Error, ErrorKind};

use crate::support::counting::{counted, counted_with, counting_generator, Delivery};
use crate::support::model::{check_model, schedule, Completion};
use crate::support::shape;
use crate::support::unruly::Unruly;

#[test]
fn smoke() {
    let out = weir::range(1u64..6)
        .scan(0, |acc, x| acc + x)
        .collect()
        .wait()
        .unwrap();
    assert_eq!(out, vec![1, 3, 6, 10, 15]);

    // A non-`Copy` state: each emitted state is a snapshot.
    let out = weir::from_iter(vec!['a', 'b', 'c'])
        .scan(String::new(), |mut s, c| {
            s.push(c);
            s
        })
        .collect()
        .wait()
        .unwrap();
    assert_eq!(out, vec!["a", "ab", "abc"]);

    let none = weir::empty::<u8>().scan(7u8, |a, _| a).collect().wait();
    assert!(none.unwrap().is_empty(), "the initial state is not emitted");
}

#[test]
fn respects_demand() {
    let (source, stats) = counted(weir::range(1u64..100));
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source.scan(0, |a, x| a + x).subscribe(subscriber);
    probe.assert_items(&[]);
    probe.request(1);
    probe.assert_items(&[1]);
    probe.request(2);
    probe.assert_items(&[1, 3, 6]);
    assert_eq!(
        stats.request_log(),
        vec![1, 2],
        "requests pass through unchanged"
    );
    assert_eq!(stats.delivered(), 3);
    probe.assert_no_terminal();
}

#[test]
fn cancel_stops_upstream() {
    let (generator, calls) = counting_generator(u64::MAX);
    let (source, stats) = counted(generator);
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source.scan(0, |a, x| a + x).subscribe(subscriber);
    probe.request(3);
    probe.assert_items(&[0, 1, 3]);
    probe.cancel();
    assert_eq!(stats.cancels(), 1);
    probe.request(10);
    probe.assert_items(&[0, 1, 3]);
    probe.assert_no_terminal();
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[test]
fn error_propagates_once() {
    let boom = Error::msg("source failed");
    let failure = boom.clone();
    let mut sent = 0u64;
    let source = weir::generate((), move |_| {
        sent += 1;
        if sent > 2 {
            Step::Error(failure.clone())
        } else {
            Step::Next(sent)
        }
    });
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source.scan(10, |a, x| a + x).subscribe(subscriber);
    probe.request(10);
    probe.assert_items(&[11, 13]);
    assert!(Error::ptr_eq(&probe.assert_error(), &boom));
    assert_eq!(shape(&probe), "SNNE");

    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    Unruly::new(boom.clone())
        .scan(0, |a, x| a + x)
        .subscribe(subscriber);
    assert_eq!(shape(&probe), "SE");
    assert!(Error::ptr_eq(&probe.assert_error(), &boom));
    probe.assert_no_violations();
}

#[test]
fn completes() {
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::range(0u64..3)
        .scan(0, |a, x| a + x)
        .subscribe(subscriber);
    probe.request(3);
    probe.assert_items(&[0, 1, 3]);
    probe.assert_completed();
}

#[test]
fn panic_becomes_panicked_error_and_cancels_upstream() {
    for delivery in [Delivery::Batches, Delivery::OneByOne] {
        let (generator, _) = counting_generator(u64::MAX);
        let (source, stats) = counted_with(generator, delivery);
        let subscriber = TestSubscriber::new();
        let probe = subscriber.probe();
        source
            .scan(0u64, |a, x| {
                assert!(x != 3, "scan boom at {x}");
                a + x
            })
            .subscribe(subscriber);
        probe.request(10);
        probe.assert_items(&[0, 1, 3]);
        let error = probe.assert_error();
        assert_eq!(error.kind(), ErrorKind::Panicked, "{delivery:?}");
        assert_eq!(error.message(), "scan boom at 3", "{delivery:?}");
        assert_eq!(stats.cancels(), 1, "{delivery:?}");
        probe.request(10);
        assert_eq!(shape(&probe), "SNNNE", "{delivery:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Output equals `Iterator::scan` emitting every state, under any schedule;
    /// requests pass through unchanged.
    #[test]
    fn matches_the_iterator_model(
        input in prop::collection::vec(any::<u16>(), 0..48),
        init in any::<u32>(),
        schedule in schedule(),
    ) {
        let f = |acc: u32, x: u16| acc.wrapping_mul(31).wrapping_add(u32::from(x));
        let model: Vec<u32> = input
            .iter()
            .scan(init, |state, x| {
                *state = f(*state, *x);
                Some(*state)
            })
            .collect();
        let run = check_model(input, |_| model, |s| s.scan(init, f), &schedule, Completion::AtLength)?;
        let (stats, probe) = (&run.stats, &run.probe);
        prop_assert!(!stats.over_delivered());
        prop_assert_eq!(stats.requested(), probe.requested());
        prop_assert_eq!(stats.cancels(), schedule.cancels());
    }

    /// The kit's random schedules (1-3 threads, huge requests, `request(0)`, cancels).
    #[test]
    fn obeys_any_demand_schedule(n in 0u64..40, schedule in demand_schedule()) {
        check_publisher(|n| weir::range(0..n).scan(0u64, |a, x| a + x), n, &schedule)?;
    }
}
