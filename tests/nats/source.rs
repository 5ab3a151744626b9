//! `weir::nats::Source` against a real server: demand decides what is pulled, order,
//! acks and redeliveries, lag, bad input.

use std::time::Duration;

use weir::nats::{AckMode, NatsError, Source};
use weir::prelude::*;
use weir::tck::TestSubscriber;

use crate::fixture::{number, Env, PATIENCE};

#[test]
fn every_message_arrives_once_in_order_and_on_delivery_acks_leave_nothing_pending() {
    let env = Env::new();
    env.stream("ORDERS");
    let consumer = env.consumer("ORDERS", "all", 1_000, Duration::from_secs(30));
    env.publish("ORDERS.new", 0..2_000);
    let source = Source::builder(consumer.clone())
        .window(64)
        .ack(AckMode::OnDelivery)
        .runtime(env.rt.handle().clone())
        .build();
    let counters = source.clone();
    let numbers = source
        .take(2_000)
        .map(|message| number(&message))
        .collect()
        .wait()
        .expect("2,000 messages");
    assert_eq!(numbers, (0..2_000).collect::<Vec<u64>>());
    let stats = counters.stats();
    assert_eq!(stats.delivered, 2_000);
    assert_eq!(stats.redelivered, 0);
    assert!(
        stats.pulled <= 2_000 + 64,
        "pulled {} for 2,000 delivered with a window of 64",
        stats.pulled
    );
    // The acks were sent; the server saw them all (no ack pending, nothing left).
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let info = env.info(&consumer);
        if info.num_ack_pending == 0 {
            assert_eq!(info.num_pending, 0);
            assert_eq!(info.delivered.stream_sequence, 2_000);
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "acks still pending: {}",
            info.num_ack_pending
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn nothing_is_pulled_without_demand_and_ten_at_a_time_keeps_ack_pending_within_the_window() {
    let env = Env::new();
    env.stream("EVENTS");
    let window = 16;
    let consumer = env.consumer("EVENTS", "tens", window, Duration::from_secs(30));
    env.publish("EVENTS.x", 0..500);
    let source = Source::builder(consumer.clone())
        .window(u64::try_from(window).unwrap())
        .runtime(env.rt.handle().clone())
        .build();
    let counters = source.clone();
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source.map(|message| message).subscribe(subscriber);
    probe.await_subscribed(PATIENCE).unwrap();
    // No demand: nothing is pulled, the server delivered nothing.
    std::thread::sleep(Duration::from_millis(300));
    let info = env.info(&consumer);
    assert_eq!(
        info.delivered.consumer_sequence, 0,
        "delivered without demand"
    );
    assert_eq!(counters.stats().pulls, 0);
    let mut seen = 0u64;
    let mut max_ack_pending = 0;
    while seen < 500 {
        probe.request(10);
        probe.await_items(seen + 10, PATIENCE).unwrap();
        let info = env.info(&consumer);
        max_ack_pending = max_ack_pending.max(info.num_ack_pending);
        assert!(
            info.num_ack_pending <= usize::try_from(window).unwrap(),
            "ack pending {} above the window {window}",
            info.num_ack_pending
        );
        let items = probe.items();
        env.rt.block_on(async {
            for message in &items[seen as usize..] {
                message.ack_confirmed().await.expect("confirmed ack");
            }
        });
        seen += 10;
        // Never more pulled than asked for: what the server sent is at most what
        // was requested.
        let stats = counters.stats();
        assert!(
            stats.pulled <= seen,
            "pulled {} with {seen} requested",
            stats.pulled
        );
    }
    let numbers: Vec<u64> = probe.items().iter().map(number).collect();
    assert_eq!(numbers, (0..500).collect::<Vec<u64>>());
    assert!(max_ack_pending > 0, "the ack pending figure was read");
    probe.cancel();
}

#[test]
fn unacked_messages_come_again_counted_and_nack_and_term_are_honoured() {
    let env = Env::new();
    env.stream("JOBS");
    let consumer = env.consumer("JOBS", "workers", 100, Duration::from_secs(2));
    env.publish("JOBS.run", 0..3);
    let source = Source::builder(consumer)
        .window(8)
        .expires(Duration::from_millis(500))
        .runtime(env.rt.handle().clone())
        .build();
    let counters = source.clone();
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source.subscribe(subscriber);
    probe.request(3);
    probe.await_items(3, PATIENCE).unwrap();
    let first = probe.items();
    assert!(first.iter().all(|m| m.delivery_count() == 1));
    // 0: not acked (comes back after ack_wait); 1: nacked (comes back at once);
    // 2: terminated (never again).
    env.rt.block_on(async {
        first[1].nack(None).await.unwrap();
        first[2].term().await.unwrap();
    });
    probe.request(10);
    // The nacked one comes back at once; the unacked one once its ack_wait passed.
    probe.await_items(4, PATIENCE).unwrap();
    let nacked = probe.items().remove(3);
    assert_eq!((number(&nacked), nacked.delivery_count()), (1, 2));
    assert!(nacked.is_redelivered());
    env.rt.block_on(nacked.ack_confirmed()).unwrap();
    probe.await_items(5, PATIENCE).unwrap();
    let unacked = probe.items().remove(4);
    assert_eq!((number(&unacked), unacked.delivery_count()), (0, 2));
    env.rt.block_on(unacked.ack_confirmed()).unwrap();
    // The terminated one never comes back.
    std::thread::sleep(Duration::from_millis(2_500));
    let all: Vec<(u64, u64)> = probe
        .items()
        .iter()
        .map(|m| (number(m), m.delivery_count()))
        .collect();
    assert_eq!(probe.received_count(), 5, "{all:?}");
    assert_eq!(counters.stats().redelivered, 2);
    probe.cancel();
}

#[test]
fn the_monitor_shows_the_backlog_on_the_server_and_its_lag() {
    let env = Env::new();
    env.stream("FEED");
    let consumer = env.consumer("FEED", "slow", 1_000, Duration::from_secs(30));
    env.publish("FEED.t", 0..1_000);
    let source = Source::builder(consumer)
        .window(32)
        .ack(AckMode::OnDelivery)
        .runtime(env.rt.handle().clone())
        .build();
    let monitor = source.queue_monitor().expect("a monitor");
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source.subscribe(subscriber);
    probe.request(100);
    probe.await_items(100, PATIENCE).unwrap();
    let stats = monitor.snapshot();
    // Every delivered message says how many wait behind it; the last one of 100.
    assert_eq!(stats.depth, 900, "{stats}");
    assert_eq!(stats.dequeued, 100);
    assert!(stats.drain_rate > 0.0);
    let lag = stats
        .lag()
        .expect("a lag with messages waiting and a drain rate");
    let expected = 900.0 / stats.drain_rate;
    assert!(
        (lag.as_secs_f64() - expected).abs() <= expected * 1e-6,
        "lag {lag:?} is pending / consume rate ({expected} s)"
    );
    probe.cancel();
}

#[test]
fn a_missing_stream_or_consumer_is_a_typed_error() {
    let env = Env::new();
    env.stream("REAL");
    env.consumer("REAL", "there", 10, Duration::from_secs(30));
    let missing_stream = env
        .rt
        .block_on(Source::bind(&env.js, "NOPE", "there"))
        .unwrap_err();
    assert_eq!(
        missing_stream,
        NatsError::StreamNotFound {
            stream: "NOPE".into()
        }
    );
    let missing_consumer = env
        .rt
        .block_on(Source::bind(&env.js, "REAL", "nobody"))
        .unwrap_err();
    assert_eq!(
        missing_consumer,
        NatsError::ConsumerNotFound {
            stream: "REAL".into(),
            consumer: "nobody".into()
        }
    );
    assert!(!missing_consumer.is_transient());
    let bound = env.rt.block_on(Source::bind(&env.js, "REAL", "there"));
    assert!(bound.is_ok());
}

#[test]
#[should_panic(expected = "nats source window must be in 1..=2^30 (got 0)")]
fn a_window_of_zero_is_refused_at_construction() {
    let env = Env::new();
    env.stream("W");
    let consumer = env.consumer("W", "c", 10, Duration::from_secs(30));
    let _ = Source::builder(consumer).window(0);
}

#[test]
#[should_panic(expected = "nats source expires must be in 10ms..=1h")]
fn an_expiry_of_duration_max_is_refused_at_construction() {
    let env = Env::new();
    env.stream("E");
    let consumer = env.consumer("E", "c", 10, Duration::from_secs(30));
    let _ = Source::builder(consumer).expires(Duration::MAX);
}

#[test]
fn messages_are_acked_automatically_once_they_passed_a_chosen_stage() {
    let env = Env::new();
    env.stream("STAGED");
    let consumer = env.consumer("STAGED", "c", 1_000, Duration::from_secs(30));
    env.publish("STAGED.x", 0..300);
    let source = Source::builder(consumer.clone())
        .window(32)
        .runtime(env.rt.handle().clone())
        .build();
    // Acked once past the filter (the stage that "processes" them); the odd ones
    // are terminated there instead.
    let even: Vec<u64> = source
        .take(300)
        .filter(|message| {
            if number(message) % 2 == 1 {
                message.term_detached();
                return false;
            }
            true
        })
        .inspect(weir::nats::Message::ack_detached)
        .map(|message| number(&message))
        .collect()
        .wait()
        .unwrap();
    assert_eq!(even, (0..300).step_by(2).collect::<Vec<u64>>());
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let info = env.info(&consumer);
        if info.num_ack_pending == 0 {
            assert_eq!(info.num_pending, 0);
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{info:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_named_source_lists_the_backlog_on_the_server_in_the_registry() {
    let env = Env::new();
    env.stream("LISTED");
    let consumer = env.consumer("LISTED", "c", 1_000, Duration::from_secs(30));
    env.publish("LISTED.x", 0..500);
    let registry = weir::metrics::Registry::new();
    let source = Source::builder(consumer)
        .window(16)
        .ack(AckMode::OnDelivery)
        .runtime(env.rt.handle().clone())
        .build();
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source
        .name("orders")
        .registry(&registry)
        .subscribe(subscriber);
    probe.request(100);
    probe.await_items(100, PATIENCE).unwrap();
    let snapshot = registry.snapshot();
    let stage = snapshot
        .stages
        .iter()
        .find(|stage| stage.name == "orders")
        .expect("the named source is listed");
    assert_eq!(stage.in_flight_bound, 16);
    let queue = stage.queue.as_ref().expect("its backlog");
    assert_eq!(queue.depth, 400, "what waits on the server: {queue}");
    assert_eq!(queue.dequeued, 100);
    probe.cancel();
    // It leaves the registry with its stream.
    let deadline = std::time::Instant::now() + PATIENCE;
    while !registry.is_empty() {
        assert!(std::time::Instant::now() < deadline, "still listed");
        std::thread::sleep(Duration::from_millis(10));
    }
}
