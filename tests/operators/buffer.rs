//! `buffer` (mirrors `operators/buffer.rs`): Full, scaled. A request for `k` batches
//! asks upstream for `k × size` items; completion flushes the partial batch.

use proptest::prelude::*;
use weir::demand::UNBOUNDED;
use weir::prelude::*;
use weir::tck::proptest::{check_publisher, demand_schedule};
use weir::tck::TestSubscriber;
use weir::Error;

use crate::support::counting::{counted, counting_generator};
use crate::support::model::{check_model, schedule, Completion};
use crate::support::shape;
use crate::support::unruly::Unruly;

#[test]
fn smoke() {
    let out = weir::range(0u32..7).buffer(3).collect().wait().unwrap();
    assert_eq!(out, vec![vec![0, 1, 2], vec![3, 4, 5], vec![6]]);
    let out = weir::range(0u32..6).buffer(3).collect().wait().unwrap();
    assert_eq!(
        out,
        vec![vec![0, 1, 2], vec![3, 4, 5]],
        "no empty batch at the end"
    );
    let out = weir::empty::<u32>().buffer(3).collect().wait().unwrap();
    assert!(out.is_empty());
}

#[test]
fn respects_demand() {
    let (source, stats) = counted(weir::range(0u64..1_000));
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source.buffer(4).subscribe(subscriber);
    assert_eq!(stats.request_calls(), 0);

    probe.request(1);
    probe.assert_items(&[vec![0, 1, 2, 3]]);
    assert_eq!(stats.request_log(), vec![4]);

    probe.request(2);
    assert_eq!(probe.received_count(), 3);
    assert_eq!(stats.request_log(), vec![4, 8]);
    assert!(!stats.over_delivered());

    // Saturation: unbounded batches ask for unbounded items.
    probe.request(u64::MAX / 2);
    assert_eq!(stats.request_log(), vec![4, 8, UNBOUNDED]);
    probe.assert_completed();
    assert_eq!(probe.received_count(), 250);
}

#[test]
fn cancel_stops_upstream() {
    let (generator, calls) = counting_generator(u64::MAX);
    let (source, stats) = counted(generator);
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source.buffer(2).subscribe(subscriber);
    probe.request(2);
    probe.assert_items(&[vec![0, 1], vec![2, 3]]);
    probe.cancel();
    assert_eq!(stats.cancels(), 1);
    probe.request(5);
    assert_eq!(probe.received_count(), 2);
    probe.assert_no_terminal();
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 4);
}

#[test]
fn error_propagates_once_and_discards_the_partial_batch() {
    let boom = Error::msg("source failed");
    let failure = boom.clone();
    let mut sent = 0u64;
    let source = weir::generate((), move |_| {
        sent += 1;
        if sent > 3 {
            weir::source::Step::Error(failure.clone())
        } else {
            weir::source::Step::Next(sent)
        }
    });
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source.buffer(2).subscribe(subscriber);
    probe.request(10);
    probe.assert_items(&[vec![1, 2]]);
    assert!(Error::ptr_eq(&probe.assert_error(), &boom));
    assert_eq!(shape(&probe), "SNE", "[3] is discarded");

    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    Unruly::new(boom.clone()).buffer(2).subscribe(subscriber);
    assert_eq!(shape(&probe), "SE");
    probe.assert_no_violations();
}

#[test]
fn completes_with_the_partial_batch() {
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::range(0u64..5).buffer(2).subscribe(subscriber);
    probe.request(3);
    probe.assert_items(&[vec![0, 1], vec![2, 3], vec![4]]);
    probe.assert_completed();
}

#[test]
fn in_flight_bound_is_the_batch_size() {
    assert_eq!(weir::range(0u64..3).buffer(16).in_flight_bound(), 16);
    assert_eq!(
        weir::range(0u64..3).buffer(16).buffer(2).in_flight_bound(),
        18
    );
}

#[test]
#[should_panic(expected = "buffer size must be in 1..=1073741824 (got 0)")]
fn size_zero_is_rejected() {
    let _ = weir::range(0u64..3).buffer(0);
}

#[test]
#[should_panic(expected = "buffer size must be in 1..=1073741824 (got 1073741825)")]
fn huge_size_is_rejected() {
    let _ = weir::range(0u64..3).buffer((1 << 30) + 1);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Output equals `input.chunks(size)`, in order, within demand, under any schedule;
    /// upstream is asked for exactly `size ×` what downstream asked for.
    #[test]
    fn matches_the_chunks_model(
        input in prop::collection::vec(any::<u16>(), 0..48),
        size in 1usize..6,
        schedule in schedule(),
    ) {
        let model: Vec<Vec<u16>> = input.chunks(size).map(<[u16]>::to_vec).collect();
        let run = check_model(input, |_| model, |s| s.buffer(size), &schedule, Completion::AtLength)?;
        prop_assert!(!run.stats.over_delivered());
        prop_assert_eq!(
            run.stats.requested(),
            run.probe.requested().saturating_mul(size as u64)
        );
    }

    /// The kit's random schedules (threads, huge requests, `request(0)`, cancels).
    #[test]
    fn obeys_any_demand_schedule(n in 0u64..30, schedule in demand_schedule()) {
        check_publisher(|n| weir::range(0..n * 3).buffer(3), n, &schedule)?;
    }
}
