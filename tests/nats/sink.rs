//! `weir::nats::Sink` against a real server: demand is the free ack slots,
//! deduplication, refusals, the ingress that answers "slow".

use std::time::Duration;

use weir::nats::{NatsError, Outgoing, Sink};
use weir::prelude::*;
use weir::retry::{Backoff, RetryPolicy};

use crate::fixture::{Env, PATIENCE};

/// Messages the stream holds now.
fn stored(env: &Env, stream: &str) -> u64 {
    env.rt.block_on(async {
        let mut stream = env.js.get_stream(stream).await.expect("the stream");
        stream.info().await.expect("stream info").state.messages
    })
}

#[test]
fn everything_is_published_with_at_most_k_acks_in_flight() {
    let env = Env::new();
    env.stream("INGEST");
    let (sink, done) = Sink::builder(env.js.clone(), "INGEST.raw")
        .max_in_flight(32)
        .runtime(env.rt.handle().clone())
        .build();
    let requests = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    weir::range(0u64..5_000)
        .inspect_request({
            let requests = requests.clone();
            move |n| requests.lock().unwrap().push(n)
        })
        .map(|i| Outgoing::new(i.to_string()))
        .subscribe(sink);
    let report = done.wait(PATIENCE).expect("every publish confirmed");
    assert_eq!(report.received, 5_000);
    assert_eq!(report.confirmed, 5_000);
    assert_eq!(report.duplicates, 0);
    assert!(report.max_in_flight <= 32, "{report:?}");
    assert!(report.max_in_flight > 1, "acks were pipelined: {report:?}");
    assert_eq!(stored(&env, "INGEST"), 5_000);
    let requests = requests.lock().unwrap().clone();
    assert_eq!(requests[0], 32, "the first request is the free slots");
    assert!(
        requests.iter().all(|&n| (1..=32).contains(&n)),
        "never more than the slots: {requests:?}"
    );
    assert!(
        requests.len() < 5_000 / 2,
        "credit returned in batches, not per ack: {} requests",
        requests.len()
    );
}

/// A publisher that drops the sink without a terminal signal (after two items, as
/// one whose thread panicked would): the outcome is the upstream's failure, not a
/// success (it read as a stream that completed).
#[test]
fn a_publisher_that_abandons_the_sink_is_not_a_success() {
    struct Abandons;
    impl weir::Publisher for Abandons {
        type Item = Outgoing;
        fn subscribe<S: weir::Subscriber<Outgoing> + Send + 'static>(self, mut sink: S) {
            std::thread::spawn(move || {
                sink.on_subscribe(weir::Subscription::noop());
                sink.on_next(Outgoing::new("1"));
                sink.on_next(Outgoing::new("2"));
                drop(sink);
            });
        }
    }
    let env = Env::new();
    env.stream("ABANDONED");
    let (sink, done) = Sink::builder(env.js.clone(), "ABANDONED.x")
        .runtime(env.rt.handle().clone())
        .build();
    Abandons.subscribe(sink);
    match done.wait(PATIENCE) {
        Err(NatsError::Client { what, message }) => {
            assert_eq!(what, "upstream");
            assert!(message.contains("without a terminal signal"), "{message}");
        }
        other => panic!("expected the abandoned stream's error, got {other:?}"),
    }
    assert_eq!(done.report().confirmed, 2, "what came was published");
}

#[test]
fn cancel_stops_an_endless_upstream_and_ends_with_cancelled() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let env = Env::new();
    env.stream("ENDLESS");
    let (sink, done) = Sink::builder(env.js.clone(), "ENDLESS.x")
        .max_in_flight(8)
        .runtime(env.rt.handle().clone())
        .build();
    let upstream_cancelled = Arc::new(AtomicBool::new(false));
    weir::range(0u64..u64::MAX)
        .inspect_cancel({
            let flag = upstream_cancelled.clone();
            move || flag.store(true, Ordering::SeqCst)
        })
        .map(|i| Outgoing::new(i.to_string()))
        .subscribe(sink);
    let deadline = std::time::Instant::now() + PATIENCE;
    while done.report().confirmed < 100 {
        assert!(std::time::Instant::now() < deadline, "{:?}", done.report());
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(!done.is_finished());
    done.cancel();
    done.cancel();
    assert!(done.is_finished());
    assert!(
        upstream_cancelled.load(Ordering::SeqCst),
        "upstream cancelled"
    );
    let received = done.report().received;
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        done.report().received <= received + 8,
        "at most the slots already requested arrive after the cancel: {received} then {:?}",
        done.report()
    );
    let stored_now = stored(&env, "ENDLESS");
    assert!(stored_now >= 100, "{stored_now}");
    assert_eq!(done.wait(PATIENCE), Err(NatsError::Cancelled));
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        stored(&env, "ENDLESS") <= stored_now + 8,
        "nothing is published after the cancel beyond what was in flight"
    );
}

#[test]
fn several_tasks_await_the_outcome_while_another_cancels() {
    let env = Env::new();
    env.stream("WAITERS");
    let (sink, done) = Sink::builder(env.js.clone(), "WAITERS.x")
        .max_in_flight(4)
        .runtime(env.rt.handle().clone())
        .build();
    let done = std::sync::Arc::new(done);
    weir::range(0u64..u64::MAX)
        .map(|i| Outgoing::new(i.to_string()))
        .subscribe(sink);
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let done = done.clone();
            env.rt.spawn(async move { done.finished().await })
        })
        .collect();
    // A blocking waiter too, on a thread of its own.
    let blocking = {
        let done = done.clone();
        std::thread::spawn(move || done.wait(PATIENCE))
    };
    std::thread::sleep(Duration::from_millis(50));
    let canceller = {
        let done = done.clone();
        env.rt.spawn(async move {
            tokio::select! {
                outcome = done.finished() => panic!("ended by itself: {outcome:?}"),
                () = tokio::time::sleep(Duration::from_millis(20)) => done.cancel(),
            }
        })
    };
    env.rt.block_on(canceller).expect("the cancelling task");
    for waiter in waiters {
        let outcome = env.rt.block_on(waiter).expect("a waiting task");
        assert_eq!(outcome, Err(NatsError::Cancelled));
    }
    assert_eq!(blocking.join().unwrap(), Err(NatsError::Cancelled));
    assert_eq!(
        done.wait(Duration::ZERO),
        Err(NatsError::Cancelled),
        "read again"
    );
}

#[test]
fn cancel_after_the_end_keeps_the_outcome() {
    let env = Env::new();
    env.stream("DONE");
    let (sink, done) = Sink::builder(env.js.clone(), "DONE.x")
        .runtime(env.rt.handle().clone())
        .build();
    weir::range(0u64..10)
        .map(|i| Outgoing::new(i.to_string()))
        .subscribe(sink);
    let deadline = std::time::Instant::now() + PATIENCE;
    while !done.is_finished() {
        assert!(std::time::Instant::now() < deadline, "{:?}", done.report());
        std::thread::sleep(Duration::from_millis(5));
    }
    done.cancel();
    let report = done
        .wait(Duration::MAX)
        .expect("completed before the cancel");
    assert_eq!(report.confirmed, 10);
}

#[test]
fn a_replay_with_the_same_ids_is_stored_once_and_counted_as_duplicates() {
    let env = Env::new();
    env.stream("ONCE");
    for round in 0..2 {
        let (sink, done) = Sink::builder(env.js.clone(), "ONCE.x")
            .max_in_flight(16)
            .runtime(env.rt.handle().clone())
            .build();
        weir::range(0u64..300)
            .map(|i| Outgoing::new(i.to_string()).id(format!("msg-{i}")))
            .subscribe(sink);
        let report = done.wait(PATIENCE).expect("confirmed");
        assert_eq!(report.confirmed, 300);
        assert_eq!(report.duplicates, if round == 0 { 0 } else { 300 });
    }
    assert_eq!(stored(&env, "ONCE"), 300);
}

#[test]
fn a_subject_no_stream_listens_on_fails_with_a_typed_error_after_the_retries() {
    let env = Env::new();
    env.stream("REAL");
    let (sink, done) = Sink::builder(env.js.clone(), "WRONG.subject")
        .retry(RetryPolicy::new(
            3,
            Backoff::exponential(Duration::from_millis(10), Duration::from_millis(40)),
        ))
        .runtime(env.rt.handle().clone())
        .build();
    weir::range(0u64..10)
        .map(|i| Outgoing::new(i.to_string()))
        .subscribe(sink);
    let error = done.wait(PATIENCE).unwrap_err();
    assert_eq!(
        error,
        NatsError::NoStream {
            subject: "WRONG.subject".into()
        }
    );
}

#[test]
fn an_upstream_error_ends_the_sink_with_it_after_the_acks() {
    let env = Env::new();
    env.stream("PART");
    let (sink, done) = Sink::builder(env.js.clone(), "PART.x")
        .runtime(env.rt.handle().clone())
        .build();
    weir::range(0u64..5)
        .map(|i| Outgoing::new(i.to_string()))
        .concat(weir::source::error(weir::Error::msg("the reader broke")))
        .subscribe(sink);
    let error = done.wait(PATIENCE).unwrap_err();
    assert!(
        matches!(&error, NatsError::Client { message, .. } if message.contains("the reader broke")),
        "{error:?}"
    );
    assert_eq!(
        stored(&env, "PART"),
        5,
        "what came before the error was published"
    );
}

#[test]
fn the_ingress_answers_slow_instead_of_holding_the_caller_while_the_log_is_down() {
    let mut env = Env::new();
    env.stream("EDGE");
    let (ingress, done) = Sink::builder(env.js.clone(), "EDGE.x")
        .max_in_flight(4)
        .retry(RetryPolicy::new(
            u32::MAX,
            Backoff::exponential(Duration::from_millis(50), Duration::from_millis(500)),
        ))
        .runtime(env.rt.handle().clone())
        .ingress::<Outgoing>(8, Duration::from_millis(50));
    env.rt.block_on(async {
        for i in 0..20u64 {
            ingress
                .offer(Outgoing::new(i.to_string()).id(format!("e-{i}")))
                .await
                .expect("room while the server is up");
        }
    });
    env.server.kill();
    // The sink holds 4 unconfirmed publishes and the channel 8 items: after that,
    // every offer comes back within its deadline with the item and a hint.
    let (taken, slow) = env.rt.block_on(async {
        let mut taken = 0;
        let mut slow = Vec::new();
        for i in 20..60u64 {
            match ingress
                .offer(Outgoing::new(i.to_string()).id(format!("e-{i}")))
                .await
            {
                Ok(()) => taken += 1,
                Err(refused) => slow.push((refused.error, refused.item)),
            }
        }
        (taken, slow)
    });
    assert!(taken <= 12, "{taken} taken while the log was down");
    assert!(slow.len() >= 28, "{} answered slow", slow.len());
    for (error, item) in &slow {
        assert!(
            matches!(error, NatsError::Slow { retry_after } if *retry_after > Duration::ZERO),
            "{error:?}"
        );
        assert!(!item.payload().is_empty(), "the item came back");
    }
    // The log comes back: what was taken is published (once each: the ids).
    env.server.restart();
    ingress.close();
    let report = done
        .wait(Duration::from_secs(60))
        .expect("published after the restart");
    assert_eq!(report.received, 20 + taken);
    assert_eq!(report.confirmed, 20 + taken);
    assert_eq!(stored(&env, "EDGE"), 20 + taken);
}

#[test]
fn the_stream_holds_the_items_in_the_order_they_arrived() {
    let env = Env::new();
    env.stream("ORDER");
    let (sink, done) = Sink::builder(env.js.clone(), "ORDER.x")
        .max_in_flight(16)
        .runtime(env.rt.handle().clone())
        .build();
    let (tx, rx) = weir::channel::<u64>(8, weir::source::ChannelPolicy::Backpressure);
    let producer = std::thread::spawn(move || {
        for i in 0..20_000u64 {
            tx.send_blocking(i).unwrap();
        }
    });
    rx.map(|i| Outgoing::new(i.to_string())).subscribe(sink);
    producer.join().unwrap();
    done.wait(PATIENCE).expect("confirmed");
    let consumer = env.consumer("ORDER", "check", 30_000, Duration::from_secs(30));
    let numbers: Vec<u64> = env.rt.block_on(async {
        use futures::StreamExt;
        let mut messages = consumer
            .fetch()
            .max_messages(20_000)
            .messages()
            .await
            .unwrap();
        let mut out = Vec::new();
        while let Some(message) = messages.next().await {
            let message = message.unwrap();
            out.push(
                std::str::from_utf8(&message.payload)
                    .unwrap()
                    .parse()
                    .unwrap(),
            );
        }
        out
    });
    let first_out_of_order = numbers.windows(2).position(|w| w[1] != w[0] + 1);
    assert_eq!(
        first_out_of_order,
        None,
        "{:?}",
        first_out_of_order.map(|i| &numbers[i.saturating_sub(2)..i + 6])
    );
    assert_eq!(numbers.len(), 20_000);
}

/// Both stages running at once, each with 16 in flight: the sink hands messages to
/// the connection in upstream's order (none overtakes another while the runtime's
/// cooperative budget holds one back), and the source delivers them in the
/// consumer's order although the server shares them between its two open pulls.
/// Each message's value is its stream sequence minus one.
#[test]
fn order_holds_through_sink_stream_and_source_running_at_once() {
    use weir::nats::{AckMode, Source};
    let env = Env::new();
    env.stream("BOTH");
    let consumer = env.consumer("BOTH", "c", 1_000, Duration::from_secs(30));
    let source = Source::builder(consumer)
        .window(16)
        .ack(AckMode::OnDelivery)
        .runtime(env.rt.handle().clone())
        .build();
    let (sink, done) = Sink::builder(env.js.clone(), "BOTH.x")
        .max_in_flight(16)
        .runtime(env.rt.handle().clone())
        .build();
    weir::range(0..100_000u64)
        .map(|i| Outgoing::new(i.to_string()))
        .subscribe(sink);
    let got: Vec<(u64, u64)> = source
        .map(|m| (crate::fixture::number(&m), m.stream_sequence()))
        .take(100_000)
        .collect()
        .wait()
        .unwrap();
    done.wait(PATIENCE).expect("confirmed");
    let around = |i: usize| got[i.saturating_sub(2)..(i + 6).min(got.len())].to_vec();
    if let Some(i) = got.windows(2).position(|w| w[1].1 != w[0].1 + 1) {
        panic!(
            "delivered out of the stream's order: (value, sequence) {:?}",
            around(i)
        );
    }
    if let Some(i) = got.iter().position(|&(value, seq)| seq != value + 1) {
        panic!(
            "stored out of upstream's order: (value, sequence) {:?}",
            around(i)
        );
    }
    assert_eq!(got.len(), 100_000);
}
