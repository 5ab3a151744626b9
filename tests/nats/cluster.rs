//! A three-node JetStream cluster on loopback, a stream with three replicas, and
//! the stream's leader killed mid-run.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream};
use weir::nats::{Outgoing, Sink, Source};
use weir::prelude::*;
use weir::retry::{Backoff, RetryPolicy};
use weir::runtime::ThreadPool;

use crate::fixture::number;
use crate::server::Cluster;

const MESSAGES: u64 = 20_000;

#[test]
fn a_node_killed_mid_run_loses_no_acknowledged_publish_and_the_consumer_carries_on() {
    let _turn = crate::fixture::shared();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut cluster = Cluster::start(3);
    let urls = cluster.urls();
    let js = rt.block_on(async {
        jetstream::new(
            async_nats::connect(urls)
                .await
                .expect("connect to the cluster"),
        )
    });
    // The cluster elects its JetStream meta leader first: retry the stream's
    // creation until it answers.
    let started = Instant::now();
    let stream_config = stream::Config {
        name: "REPLICATED".into(),
        subjects: vec!["REPLICATED.>".into()],
        num_replicas: 3,
        ..Default::default()
    };
    loop {
        match rt.block_on(js.create_stream(stream_config.clone())) {
            Ok(_) => break,
            Err(error) => {
                assert!(
                    started.elapsed() < Duration::from_secs(60),
                    "the cluster did not take the stream: {error}"
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
    let consumer = rt
        .block_on(async {
            js.get_stream("REPLICATED")
                .await?
                .create_consumer(consumer::pull::Config {
                    durable_name: Some("readers".into()),
                    ack_policy: consumer::AckPolicy::Explicit,
                    ack_wait: Duration::from_secs(3),
                    max_ack_pending: 1_024,
                    ..Default::default()
                })
                .await
                .map_err(async_nats::Error::from)
        })
        .expect("the consumer");

    // The producer: every item with an id, retried through the leader change.
    let (sink, published) = Sink::builder(js.clone(), "REPLICATED.in")
        .max_in_flight(64)
        .retry(RetryPolicy::new(
            200,
            Backoff::exponential(Duration::from_millis(50), Duration::from_secs(1)),
        ))
        .runtime(rt.handle().clone())
        .build();
    let sent = Arc::new(AtomicU64::new(0));
    weir::range(0..MESSAGES)
        .inspect({
            let sent = sent.clone();
            move |_| {
                sent.fetch_add(1, Ordering::Relaxed);
            }
        })
        .map(|i| Outgoing::new(i.to_string()).id(format!("r-{i}")))
        .publish_on(ThreadPool::new(1), 64)
        .subscribe(sink);

    // The consumer: records what it saw, acks each message.
    let seen: Arc<Vec<AtomicBool>> =
        Arc::new((0..MESSAGES).map(|_| AtomicBool::new(false)).collect());
    let distinct = Arc::new(AtomicU64::new(0));
    let source = Source::builder(consumer)
        .window(256)
        .expires(Duration::from_millis(500))
        .give_up_after(Duration::MAX)
        .runtime(rt.handle().clone())
        .build();
    let counters = source.clone();
    let reader = std::thread::spawn({
        let seen = seen.clone();
        let distinct = distinct.clone();
        move || {
            source
                .publish_on(ThreadPool::new(1), 256)
                .fold((), move |(), message| {
                    let n = usize::try_from(number(&message)).unwrap();
                    if !seen[n].swap(true, Ordering::Relaxed) {
                        distinct.fetch_add(1, Ordering::Relaxed);
                    }
                    message.ack_detached();
                })
                .wait()
        }
    });

    // Mid-run: kill the node that leads the stream.
    while distinct.load(Ordering::Relaxed) < MESSAGES / 3 {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "stuck before the kill"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let leader = rt
        .block_on(async {
            js.get_stream("REPLICATED")
                .await?
                .info()
                .await
                .cloned()
                .map_err(async_nats::Error::from)
        })
        .expect("stream info")
        .cluster
        .and_then(|c| c.leader)
        .expect("the stream has a leader");
    cluster.node(&leader).kill();

    let report = published
        .wait(Duration::from_secs(180))
        .expect("every publish confirmed despite the lost node");
    assert_eq!(report.confirmed, MESSAGES);
    while distinct.load(Ordering::Relaxed) < MESSAGES {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "the consumer stopped at {} of {MESSAGES} after the leader change",
            distinct.load(Ordering::Relaxed)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let stats = counters.stats();
    eprintln!(
        "leader {leader} killed; sink {report:?}; source delivered {} redelivered {} \
         suppressed {} pull failures {}",
        stats.delivered, stats.redelivered, stats.suppressed, stats.pull_failures
    );
    // No acknowledged publish lost: every confirmed item is in the stream once.
    let stored = rt
        .block_on(async {
            js.get_stream("REPLICATED")
                .await?
                .info()
                .await
                .map(|i| i.state.messages)
                .map_err(async_nats::Error::from)
        })
        .expect("stream info");
    assert_eq!(stored, MESSAGES, "the ids kept retries from storing twice");
    assert!(seen.iter().all(|s| s.load(Ordering::Relaxed)));
    drop(reader);
}
