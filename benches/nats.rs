//! The log hop: small messages through a JetStream stream, published with publish
//! acks in flight and consumed with acks, weir against `async-nats` used directly, on
//! one local `nats-server` (started by the bench, installed on first use like the
//! tests').
//!
//! Each case publishes [`n()`] (1M) 16-byte messages into a fresh stream while a durable
//! pull consumer of that stream reads and acks them; the time runs from the first
//! publish until the consumer has received all of them. Cases:
//! * `async_nats`: a task publishing with 256 publish acks in flight (a
//!   `FuturesUnordered` of ack futures), and the consumer's `messages()` stream with
//!   default settings, each message acked (`ack()`);
//! * `weir_on_delivery`: `range → map(Outgoing) → nats::Sink` (256 acks in flight) and
//!   `nats::Source` (window 256, `AckMode::OnDelivery`) `→ take(n) → fold`;
//! * `weir_explicit_hop`: the same sink, and the source `→ publish_on(pool, 256) →
//!   take(n) → fold` acking each message with `ack_detached` on the pool's thread.
//!
//! Beside the time, every case reports the peak growth of the process's heap while
//! it runs (a counting global allocator, sampled every millisecond): what the client
//! holds ahead of its consumer.
//!
//! Criterion measures each case (10 samples); then a paired phase runs [`rounds`]
//! rounds of all three back to back and prints the median ratio of each weir case's
//! throughput to `async_nats`'s within a round, and the heap peaks. Run:
//! `cargo bench --bench nats --features nats`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream};
use bytes::Bytes;
use criterion::{Criterion, Throughput};
use futures::stream::{FuturesUnordered, StreamExt};
use weir::nats::{AckMode, Outgoing, Sink, Source};
use weir::prelude::*;
use weir::runtime::ThreadPool;

#[path = "../tests/support/nats_server.rs"]
mod nats_server;

#[path = "../tests/support/jetstream.rs"]
mod jetstream_support;

/// Messages per run (`WEIR_NATS_BENCH_N` overrides it, for quick looks).
fn n() -> u64 {
    std::env::var("WEIR_NATS_BENCH_N")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000)
}
/// Rounds of the paired phase (`WEIR_NATS_BENCH_ROUNDS` overrides it; the machine
/// is noisy, more rounds give a steadier median).
fn rounds() -> usize {
    std::env::var("WEIR_NATS_BENCH_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(5)
}
/// Publish acks in flight, for every case.
const IN_FLIGHT: usize = 256;

#[path = "../tests/support/live_heap.rs"]
mod live_heap;
use live_heap::LIVE_BYTES as LIVE;

/// Runs `f`, sampling the heap every millisecond; returns its result and the peak
/// growth in bytes.
fn peak_heap<R>(f: impl FnOnce() -> R) -> (R, i64) {
    let base = LIVE.load(Ordering::Relaxed);
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = std::thread::spawn({
        let stop = stop.clone();
        move || {
            let mut peak = 0;
            while !stop.load(Ordering::Relaxed) {
                peak = peak.max(LIVE.load(Ordering::Relaxed) - base);
                std::thread::sleep(Duration::from_millis(1));
            }
            peak
        }
    });
    let result = f();
    stop.store(true, Ordering::Relaxed);
    (result, sampler.join().expect("the sampler"))
}

struct Env {
    rt: tokio::runtime::Runtime,
    js: jetstream::Context,
    pool: ThreadPool,
    payload: Bytes,
    round: std::cell::Cell<u64>,
    _server: nats_server::Server,
}

impl Env {
    /// A fresh stream and its durable consumer.
    fn fresh(&self) -> (String, consumer::PullConsumer) {
        let k = self.round.get();
        self.round.set(k + 1);
        let name = format!("BENCH{k}");
        let consumer = self
            .rt
            .block_on(async {
                if k > 0 {
                    let _ = self.js.delete_stream(format!("BENCH{}", k - 1)).await;
                }
                jetstream_support::stream_and_consumer(
                    &self.js,
                    &name,
                    stream::StorageType::File,
                    "bench",
                )
                .await
            })
            .expect("a stream and a consumer");
        (format!("{name}.x"), consumer)
    }
}

fn async_nats_case(env: &Env) -> Duration {
    let (subject, consumer) = env.fresh();
    env.rt.block_on(async {
        let start = Instant::now();
        let js = env.js.clone();
        let payload = env.payload.clone();
        let producer = tokio::spawn(async move {
            let mut acks: FuturesUnordered<
                <jetstream::context::PublishAckFuture as std::future::IntoFuture>::IntoFuture,
            > = FuturesUnordered::new();
            for _ in 0..n() {
                if acks.len() >= IN_FLIGHT {
                    acks.next().await.expect("an ack").expect("acked");
                }
                let ack = js
                    .publish(subject.clone(), payload.clone())
                    .await
                    .expect("publish");
                acks.push(std::future::IntoFuture::into_future(ack));
            }
            while let Some(ack) = acks.next().await {
                ack.expect("acked");
            }
        });
        let mut messages = consumer.messages().await.expect("messages()");
        let mut received = 0;
        while received < n() {
            // The stream reports a missed heartbeat (the server was too busy to send
            // one in time) as an error and goes on: a user's loop does the same.
            match messages.next().await.expect("the stream goes on") {
                Ok(message) => {
                    message.ack().await.expect("ack");
                    received += 1;
                }
                Err(error) => eprintln!("async_nats messages(): {error}, going on"),
            }
        }
        producer.await.expect("the producer");
        start.elapsed()
    })
}

fn publish_with_weir(env: &Env, subject: String) -> weir::nats::SinkDone {
    let (sink, done) = Sink::builder(env.js.clone(), subject)
        .max_in_flight(IN_FLIGHT as u64)
        .runtime(env.rt.handle().clone())
        .build();
    let payload = env.payload.clone();
    weir::range(0..n())
        .map(move |_| Outgoing::new(payload.clone()))
        .subscribe(sink);
    done
}

/// Publishes with weir's sink while `consume` reads the source; the time until
/// the consumer has all of them.
fn weir_case(env: &Env, ack: AckMode, consume: impl FnOnce(Source) -> u64) -> Duration {
    let (subject, consumer) = env.fresh();
    let start = Instant::now();
    let done = publish_with_weir(env, subject);
    let source = Source::builder(consumer)
        .window(256)
        .ack(ack)
        .runtime(env.rt.handle().clone())
        .build();
    assert_eq!(consume(source), n());
    let elapsed = start.elapsed();
    done.wait(Duration::from_secs(60)).expect("published");
    elapsed
}

fn weir_on_delivery(env: &Env) -> Duration {
    weir_case(env, AckMode::OnDelivery, |source| {
        source
            .take(n())
            .fold(0u64, |n, _| n + 1)
            .wait()
            .expect("received")
    })
}

fn weir_explicit_hop(env: &Env) -> Duration {
    weir_case(env, AckMode::Explicit, |source| {
        source
            .publish_on(env.pool.clone(), 256)
            .take(n())
            .fold(0u64, |n, message| {
                message.ack_detached();
                n + 1
            })
            .wait()
            .expect("received")
    })
}

/// Publishes `count` messages into a fresh stream and returns its consumer.
fn filled(env: &Env, count: u64) -> consumer::PullConsumer {
    let (subject, consumer) = env.fresh();
    let done = {
        let (sink, done) = Sink::builder(env.js.clone(), subject)
            .max_in_flight(IN_FLIGHT as u64)
            .runtime(env.rt.handle().clone())
            .build();
        let payload = env.payload.clone();
        weir::range(0..count)
            .map(move |_| Outgoing::new(payload.clone()))
            .subscribe(sink);
        done
    };
    done.wait(Duration::from_secs(120)).expect("published");
    consumer
}

/// A consumer that takes one message and then stalls for two seconds, with
/// `count` messages waiting: the heap's growth meanwhile, `async_nats`'s
/// `messages()` (default settings) and weir's source (window 256).
fn stalled_heap(env: &Env, count: u64) -> (i64, i64) {
    let consumer = filled(env, count);
    let ((), raw) = peak_heap(|| {
        env.rt.block_on(async {
            let mut messages = consumer.messages().await.expect("messages()");
            let first = messages.next().await.expect("a message").expect("ok");
            first.ack().await.expect("ack");
            tokio::time::sleep(Duration::from_secs(2)).await;
            drop(messages);
        })
    });
    let consumer = filled(env, count);
    let ((), weir) = peak_heap(|| {
        let source = Source::builder(consumer)
            .window(256)
            .runtime(env.rt.handle().clone())
            .build();
        let mut items = source.blocking_iter(1);
        let first = items.next().expect("a message").expect("ok");
        first.ack_detached();
        std::thread::sleep(Duration::from_secs(2));
        drop(items);
    });
    (raw, weir)
}

type Case = (&'static str, fn(&Env) -> Duration);

const CASES: [Case; 3] = [
    ("async_nats", async_nats_case),
    ("weir_on_delivery", weir_on_delivery),
    ("weir_explicit_hop", weir_explicit_hop),
];

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let server = nats_server::Server::start();
    let js = rt
        .block_on(weir::nats::connect(server.url(), Duration::from_secs(5)))
        .expect("connect");
    let env = Env {
        rt,
        js,
        pool: ThreadPool::builder().name("nats-bench").threads(1).build(),
        payload: Bytes::from_static(b"0123456789abcdef"),
        round: std::cell::Cell::new(0),
        _server: server,
    };
    let mut c = Criterion::default().configure_from_args();
    {
        let mut group = c.benchmark_group("nats");
        group.throughput(Throughput::Elements(n()));
        group.sample_size(10);
        group.warm_up_time(Duration::from_secs(1));
        group.measurement_time(Duration::from_secs(30));
        for (name, case) in CASES {
            group.bench_function(name, |b| {
                b.iter_custom(|iters| (0..iters).map(|_| case(&env)).sum())
            });
        }
        group.finish();
    }

    let (n, rounds) = (n(), rounds());
    println!(
        "\npaired phase: {rounds} rounds of {n} messages; weir ÷ async_nats throughput per round \
         (cases in turn, the order reversed every other round)"
    );
    let mut ratios = vec![Vec::new(); CASES.len()];
    let mut peaks = vec![0i64; CASES.len()];
    for round in 0..rounds {
        let mut secs = [0.0f64; 3];
        let mut order: Vec<usize> = (0..CASES.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for slot in order {
            let (name, case) = CASES[slot];
            let (elapsed, peak) = peak_heap(|| case(&env));
            secs[slot] = elapsed.as_secs_f64();
            peaks[slot] = peaks[slot].max(peak);
            println!(
                "round {round} {name:>18}: {:>7.3} s ({:.0} k msg/s), heap peak +{:.1} MB",
                secs[slot],
                n as f64 / secs[slot] / 1e3,
                peak as f64 / 1e6
            );
        }
        for slot in 1..CASES.len() {
            ratios[slot].push(secs[0] / secs[slot]);
        }
    }
    for (slot, (name, _)) in CASES.iter().enumerate().skip(1) {
        let v = &mut ratios[slot];
        v.sort_by(f64::total_cmp);
        println!(
            "{name:>18} ÷ async_nats: median {:.3} ({:.3} … {:.3}); heap peak {:.1} MB against {:.1} MB",
            v[rounds / 2],
            v[0],
            v[rounds - 1],
            peaks[slot] as f64 / 1e6,
            peaks[0] as f64 / 1e6
        );
    }
    let waiting = 200_000;
    let (raw, weir) = stalled_heap(&env, waiting);
    println!(
        "a consumer stalled after one message, {waiting} waiting: heap grew {:.1} MB with async_nats's messages(), {:.1} MB with weir's source",
        raw as f64 / 1e6,
        weir as f64 / 1e6
    );
    c.final_summary();
}
