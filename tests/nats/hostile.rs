//! The NATS stages used the way a hostile user would: request storms from several
//! threads, a subscriber that panics, the runtime shut down mid-stream, and the
//! extreme settings (window 1, one ack in flight, a horizon of 1, `Duration::MAX`).

use std::sync::Arc;
use std::time::Duration;

use weir::nats::{NatsError, Outgoing, Sink, Source};
use weir::prelude::*;
use weir::tck::TestSubscriber;
use weir::ErrorKind;

use crate::fixture::{number, Env, PATIENCE};

#[test]
fn request_storms_from_four_threads_get_every_message_once_in_order_and_never_more() {
    let env = Env::new();
    env.stream("STORM");
    let consumer = env.consumer("STORM", "c", 1_000, Duration::from_secs(30));
    env.publish("STORM.x", 0..1_000);
    let source = Source::builder(consumer)
        .window(8)
        .runtime(env.rt.handle().clone())
        .build();
    let subscriber = TestSubscriber::new();
    let probe = Arc::new(subscriber.probe());
    source.subscribe(subscriber);
    probe.await_subscribed(PATIENCE).unwrap();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let probe = probe.clone();
            std::thread::spawn(move || {
                for _ in 0..250 {
                    probe.request(1);
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    probe.await_items(1_000, PATIENCE).unwrap();
    // Nothing beyond the 1,000 requested, even with more on the way.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(probe.received_count(), 1_000);
    probe.assert_no_violations();
    let numbers: Vec<u64> = probe.items().iter().map(number).collect();
    assert_eq!(numbers, (0..1_000).collect::<Vec<u64>>());
    probe.cancel();
}

#[test]
fn a_subscriber_that_panics_stops_the_source_and_its_messages_stay_on_the_server() {
    let env = Env::new();
    env.stream("PANIC");
    let consumer = env.consumer("PANIC", "c", 1_000, Duration::from_secs(30));
    env.publish("PANIC.x", 0..100);
    let source = Source::builder(consumer.clone())
        .window(4)
        .runtime(env.rt.handle().clone())
        .build();
    let counters = source.clone();
    let seen = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let result = {
        let seen = seen.clone();
        source
            .map(move |message| {
                if seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed) == 2 {
                    panic!("the third message breaks the subscriber");
                }
                message
            })
            .fold(0u64, |n, _| n + 1)
            .wait()
    };
    let error = result.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Panicked);
    // The source stopped pulling: nothing more is delivered, the rest stays there.
    std::thread::sleep(Duration::from_millis(300));
    let stats = counters.stats();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        counters.stats().pulls,
        stats.pulls,
        "pulls went on after the panic"
    );
    assert!(stats.delivered <= 3 + 4, "{stats:?}");
    let info = env.info(&consumer);
    assert!(info.num_pending >= 100 - 3 - 4, "{info:?}");
}

#[test]
fn a_runtime_shut_down_mid_stream_fails_the_source_and_the_sink_instead_of_completing() {
    let _turn = crate::fixture::shared();
    let server = crate::server::Server::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let js = rt
        .block_on(weir::nats::connect(server.url(), Duration::from_secs(5)))
        .unwrap();
    let consumer = rt
        .block_on(async {
            let stream = js
                .create_stream(async_nats::jetstream::stream::Config {
                    name: "DOWN".into(),
                    subjects: vec!["DOWN.>".into()],
                    ..Default::default()
                })
                .await?;
            stream
                .create_consumer(async_nats::jetstream::consumer::pull::Config {
                    durable_name: Some("c".into()),
                    ack_policy: async_nats::jetstream::consumer::AckPolicy::Explicit,
                    ..Default::default()
                })
                .await
                .map_err(async_nats::Error::from)
        })
        .unwrap();
    let source = Source::builder(consumer)
        .runtime(rt.handle().clone())
        .build();
    let subscriber = TestSubscriber::<weir::nats::Message>::new();
    let probe = subscriber.probe();
    source.subscribe(subscriber);
    probe.request(10);
    // A sink whose upstream never ends.
    let (sink, done) = Sink::builder(js.clone(), "DOWN.x")
        .runtime(rt.handle().clone())
        .build();
    let cancelled = Arc::new(std::sync::atomic::AtomicBool::new(false));
    weir::range(0u64..u64::MAX)
        .map(|i| Outgoing::new(i.to_string()))
        .inspect_cancel({
            let cancelled = cancelled.clone();
            move || cancelled.store(true, std::sync::atomic::Ordering::Relaxed)
        })
        .publish_on(weir::runtime::ThreadPool::new(1), 16)
        .subscribe(sink);
    std::thread::sleep(Duration::from_millis(300));
    rt.shutdown_timeout(Duration::from_secs(5));
    let error = probe
        .await_error(PATIENCE)
        .expect("an error, not a completion");
    assert_eq!(error.kind(), ErrorKind::SchedulerShutdown, "{error}");
    assert_eq!(done.wait(PATIENCE).unwrap_err(), NatsError::Closed);
    // The sink's upstream is told to stop once an item finds the task gone.
    let deadline = std::time::Instant::now() + PATIENCE;
    while !cancelled.load(std::sync::atomic::Ordering::Relaxed) {
        assert!(
            std::time::Instant::now() < deadline,
            "upstream never cancelled"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn window_one_one_ack_in_flight_a_horizon_of_one_and_duration_max_work() {
    let env = Env::new();
    env.stream("TINY");
    let consumer = env.consumer("TINY", "c", 1_000, Duration::from_secs(30));
    let (sink, done) = Sink::builder(env.js.clone(), "TINY.x")
        .max_in_flight(1)
        .ack_timeout(Duration::MAX)
        .runtime(env.rt.handle().clone())
        .build();
    weir::range(0u64..200)
        .map(|i| Outgoing::new(i.to_string()))
        .subscribe(sink);
    let report = done.wait(Duration::MAX).expect("published");
    assert_eq!(report.confirmed, 200);
    assert_eq!(report.max_in_flight, 1);
    let source = Source::builder(consumer)
        .window(1)
        .dedup_horizon(1)
        .give_up_after(Duration::MAX)
        .ack(weir::nats::AckMode::OnDelivery)
        .runtime(env.rt.handle().clone())
        .build();
    let counters = source.clone();
    let numbers = source
        .take(200)
        .map(|m| number(&m))
        .collect()
        .wait()
        .unwrap();
    assert_eq!(numbers, (0..200).collect::<Vec<u64>>());
    assert!(counters.stats().pulled <= 201);
}

/// An ingress whose deadline is `Duration::MAX` waits for room as long as it takes
/// (the deadline cannot be added to the clock): every offer is taken, none panics.
#[test]
fn an_ingress_with_a_deadline_of_duration_max_waits_for_room() {
    let env = Env::new();
    env.stream("FOREVER");
    let (ingress, done) = Sink::builder(env.js.clone(), "FOREVER.x")
        .max_in_flight(1)
        .runtime(env.rt.handle().clone())
        .ingress::<Outgoing>(1, Duration::MAX);
    env.rt.block_on(async {
        for i in 0..100u64 {
            if let Err(refused) = ingress.offer(Outgoing::new(i.to_string())).await {
                panic!("offer {i} refused: {:?}", refused.error);
            }
        }
    });
    ingress.close();
    let report = done.wait(PATIENCE).expect("published");
    assert_eq!(report.confirmed, 100);
}

/// A nack delayed by `Duration::MAX` keeps the message away (as long as the server
/// can count: its delays are 64-bit nanoseconds); it is not redelivered at once, as
/// a delay the server cannot read would make it.
#[test]
fn a_nack_delayed_by_duration_max_is_not_redelivered_at_once() {
    let env = Env::new();
    for (detached, stream) in [(false, "LATER"), (true, "LATER_DETACHED")] {
        // One message per stream: the only thing that can arrive is its redelivery.
        env.stream(stream);
        env.publish(&format!("{stream}.x"), 0..1);
        let consumer = env.consumer(stream, "c", 16, Duration::from_secs(30));
        let source = Source::builder(consumer.clone())
            .window(1)
            .runtime(env.rt.handle().clone())
            .build();
        let subscriber = TestSubscriber::new();
        let probe = subscriber.probe();
        source.subscribe(subscriber);
        probe.request(1);
        probe.await_items(1, PATIENCE).unwrap();
        let message = probe.items().remove(0);
        assert_eq!(number(&message), 0);
        if detached {
            message.nack_detached(Some(Duration::MAX));
        } else {
            env.rt
                .block_on(message.nack(Some(Duration::MAX)))
                .expect("nack sent");
        }
        // Asked for more: a message nacked without a delay would be back at once.
        probe.request(1);
        probe
            .expect_no_signals(Duration::from_millis(1_500))
            .expect("not redelivered");
        assert_eq!(probe.received_count(), 1);
        probe.cancel();
        let info = env.info(&consumer);
        assert_eq!(info.num_ack_pending, 1, "held back by the delay");
    }
}

/// A retry classifier that panics ends the sink with `Panicked` and the panic's
/// message (not the `Closed` of a task that went away), and cancels upstream.
#[test]
fn a_retry_classifier_that_panics_ends_the_sink_with_its_message() {
    let env = Env::new();
    let (sink, done) = Sink::builder(env.js.clone(), "NOWHERE.x")
        .retry(
            weir::retry::RetryPolicy::new(
                3,
                weir::retry::Backoff::exponential(
                    Duration::from_millis(10),
                    Duration::from_millis(40),
                ),
            )
            .classify(|error: &NatsError| panic!("classifier refused {error}")),
        )
        .runtime(env.rt.handle().clone())
        .build();
    let cancelled = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = cancelled.clone();
    weir::range(0u64..1_000)
        .map(|i| Outgoing::new(i.to_string()))
        .inspect_cancel(move || flag.store(true, std::sync::atomic::Ordering::SeqCst))
        .subscribe(sink);
    match done.wait(PATIENCE) {
        Err(NatsError::Panicked { message }) => {
            assert!(message.contains("classifier refused"), "{message}")
        }
        other => panic!("expected Panicked, got {other:?}"),
    }
    assert!(
        cancelled.load(std::sync::atomic::Ordering::SeqCst),
        "upstream cancelled"
    );
}
