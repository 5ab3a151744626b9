//! `examples/custom_publisher.rs`, checked: its three publishers (an emitter, a
//! generator, and one written by hand) pass the conformance kit, and the example's
//! `main` runs.

#[path = "../examples/custom_publisher.rs"]
mod example;

use std::time::Duration;

use weir::prelude::*;
use weir::tck::{PublisherVerification, TestEnv};

/// The kit, with a short window for signals that must not come (these publishers
/// answer at once or not at all) and the failed publisher given.
fn verify<P, F>(factory: F) -> PublisherVerification<P>
where
    P: Publisher<Item = u64> + 'static,
    F: Fn(u64) -> P + Send + Sync + 'static,
{
    PublisherVerification::new(factory)
        .with_failed_publisher(|| weir::error::<u64>(weir::Error::msg("failed on purpose")))
        .env(
            TestEnv::builder()
                .no_signals_timeout(Duration::from_millis(50))
                .build(),
        )
}

weir::publisher_tck!(emitter, verify(example::readings));
weir::publisher_tck!(generator, verify(example::counter));
weir::publisher_tck!(by_hand, verify(|count| example::Numbers { count }));

#[test]
fn the_example_runs() {
    example::main();
}

#[test]
fn the_hand_written_publisher_never_runs_ahead_of_demand() {
    let subscriber = weir::tck::TestSubscriber::<u64>::new();
    let probe = subscriber.probe();
    example::Numbers { count: 10 }.subscribe(subscriber);
    probe.request(3);
    probe.assert_items(&[0, 1, 2]);
    probe.request(u64::MAX);
    probe.assert_completed();
    assert_eq!(probe.received_count(), 10);
    probe.assert_no_violations();
}
