//! Bad input and lost servers: typed errors, and never a hang.

use std::time::Duration;

use weir::nats::{NatsError, Outgoing, Sink, Source};
use weir::prelude::*;
use weir::retry::{Backoff, RetryPolicy};
use weir::tck::TestSubscriber;
use weir::ErrorKind;

use crate::fixture::{shared, Env, PATIENCE};

#[test]
fn a_server_that_is_down_at_start_is_unreachable_without_hanging() {
    let _turn = shared();
    let rt = tokio::runtime::Runtime::new().unwrap();
    // A port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let error = rt
        .block_on(weir::nats::connect(
            format!("nats://127.0.0.1:{port}"),
            Duration::from_secs(2),
        ))
        .unwrap_err();
    assert!(
        matches!(
            error,
            NatsError::Unreachable { .. } | NatsError::Timeout { .. }
        ),
        "{error:?}"
    );
    assert!(error.is_transient());
    assert!(
        error
            .to_string()
            .contains("no NATS server could be reached")
            || error.to_string().contains("timed out")
    );
}

#[test]
fn a_source_whose_server_is_gone_ends_with_an_upstream_error_after_its_patience() {
    let mut env = Env::new();
    env.stream("GONE");
    let consumer = env.consumer("GONE", "c", 100, Duration::from_secs(30));
    let source = Source::builder(consumer)
        .expires(Duration::from_millis(200))
        .give_up_after(Duration::from_millis(500))
        .runtime(env.rt.handle().clone())
        .build();
    let counters = source.clone();
    env.server.kill();
    let subscriber = TestSubscriber::<weir::nats::Message>::new();
    let probe = subscriber.probe();
    source.subscribe(subscriber);
    probe.request(10);
    let error = probe.await_error(PATIENCE).expect("an error, not a hang");
    assert_eq!(error.kind(), ErrorKind::Upstream);
    let cause = std::error::Error::source(&error)
        .and_then(|e| e.downcast_ref::<NatsError>())
        .expect("the NATS error is the source");
    assert!(cause.is_transient(), "{cause:?}");
    let stats = counters.stats();
    assert!(stats.pull_failures + stats.info_failures > 0, "{stats:?}");
    assert_eq!(probe.received_count(), 0);
}

#[test]
fn a_sink_whose_server_is_gone_fails_after_its_retries() {
    let mut env = Env::new();
    env.stream("LOST");
    env.server.kill();
    let (sink, done) = Sink::builder(env.js.clone(), "LOST.x")
        .ack_timeout(Duration::from_millis(300))
        .retry(RetryPolicy::new(
            3,
            Backoff::exponential(Duration::from_millis(10), Duration::from_millis(50)),
        ))
        .runtime(env.rt.handle().clone())
        .build();
    weir::range(0u64..10)
        .map(|i| Outgoing::new(i.to_string()))
        .subscribe(sink);
    let error = done.wait(PATIENCE).unwrap_err();
    assert!(error.is_transient(), "{error:?}");
    assert!(
        matches!(error, NatsError::Timeout { .. } | NatsError::Client { .. }),
        "{error:?}"
    );
}

#[test]
#[should_panic(expected = "nats sink max_in_flight must be in 1..=2^30 (got 0)")]
fn a_sink_with_no_slots_is_refused_at_construction() {
    let env = Env::new();
    let _ = Sink::builder(env.js.clone(), "X.y").max_in_flight(0);
}
