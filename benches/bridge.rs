//! The futures bridges against their tokio/futures peers, in one run.
//!
//! 1. `into_stream(256)` consumed on a spawned tokio task, side by side with
//!    `tokio::sync::mpsc::channel(256)` + `ReceiverStream` (a producer task sending,
//!    a consumer task summing). Two weir upstreams: `range` (a synchronous publisher:
//!    it produces inside the consumer's replenishing `request`, so this measures the
//!    bridge itself) and `from_stream_on(stream::iter, Tokio)` (upstream polled by
//!    weir's poll tasks on the pool while the consumer task runs: items cross
//!    threads, like the mpsc peer's). Target: ≥ 2× tokio mpsc.
//! 2. `from_stream` overhead: `stream::iter(0..N)` summed by polling it directly
//!    (`block_on`), against `from_stream_on(stream::iter(0..N), Tokio).fold(..)`.
//!    Target: ≤ 1.5× the raw stream's time.
//!
//! Measured on the 2-core dev box (1M u64 items, medians of two runs; the box's
//! speed varied by ~2× between them, the ratios did not): `range → into_stream(256)`
//! 16.2 / 31.8 ms, `from_stream → into_stream(256)` 30.5 / 54.6 ms, tokio mpsc(256)
//! with `ReceiverStream` 107.6 / 209 ms (6.6× and 3.5–3.8×); raw `stream::iter` sum
//! 0.738 / 1.109 ms, `from_stream(..).fold` 0.575 / 1.125 ms (0.78–1.01×).
//!
//! The runtime has two worker threads and the bench thread only waits, so at most
//! two threads are busy. Run: `cargo bench --bench bridge --features tokio`
//! (about a minute: 10 samples, short measurement).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use futures::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;
use weir::prelude::*;
use weir::runtime::Tokio;

const N: u64 = 1_000_000;
const PREFETCH: u64 = 256;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// Sum a stream of `Result<u64, Error>` on a spawned task.
async fn sum_on_task(mut stream: weir::bridge::IntoStream<u64>) -> u64 {
    tokio::spawn(async move {
        let mut sum = 0u64;
        while let Some(item) = stream.next().await {
            sum += item.expect("no errors");
        }
        sum
    })
    .await
    .expect("the consumer task")
}

fn into_stream_range(rt: &tokio::runtime::Runtime) -> u64 {
    rt.block_on(sum_on_task(
        weir::range(0..black_box(N)).into_stream(PREFETCH),
    ))
}

fn into_stream_from_stream(rt: &tokio::runtime::Runtime) -> u64 {
    let scheduler = Tokio::new(rt.handle().clone());
    rt.block_on(sum_on_task(
        weir::from_stream_on(futures::stream::iter(0..black_box(N)), scheduler)
            .into_stream(PREFETCH),
    ))
}

fn tokio_mpsc(rt: &tokio::runtime::Runtime) -> u64 {
    rt.block_on(async {
        let (tx, rx) = tokio::sync::mpsc::channel::<u64>(PREFETCH as usize);
        let producer = tokio::spawn(async move {
            for i in 0..black_box(N) {
                tx.send(i).await.expect("the consumer lives");
            }
        });
        let consumer = tokio::spawn(async move {
            let mut stream = ReceiverStream::new(rx);
            let mut sum = 0u64;
            while let Some(item) = stream.next().await {
                sum += item;
            }
            sum
        });
        producer.await.expect("the producer task");
        consumer.await.expect("the consumer task")
    })
}

fn raw_stream() -> u64 {
    futures::executor::block_on(async {
        let mut stream = futures::stream::iter(0..black_box(N));
        let mut sum = 0u64;
        while let Some(item) = stream.next().await {
            sum += black_box(item);
        }
        sum
    })
}

fn from_stream_fold(rt: &tokio::runtime::Runtime) -> u64 {
    let scheduler = Tokio::new(rt.handle().clone());
    weir::from_stream_on(futures::stream::iter(0..black_box(N)), scheduler)
        .fold(0u64, |acc, x| acc + black_box(x))
        .wait()
        .expect("no errors")
}

fn bridge(c: &mut Criterion) {
    let rt = runtime();
    let expected = (0..N).sum::<u64>();
    assert_eq!(into_stream_range(&rt), expected);
    assert_eq!(into_stream_from_stream(&rt), expected);
    assert_eq!(tokio_mpsc(&rt), expected);
    assert_eq!(raw_stream(), expected);
    assert_eq!(from_stream_fold(&rt), expected);

    let mut group = c.benchmark_group("bridge/into_stream_vs_mpsc/1M");
    group.throughput(Throughput::Elements(N));
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(3));
    group.bench_function("weir_range_into_stream_256", |b| {
        b.iter(|| into_stream_range(&rt))
    });
    group.bench_function("weir_from_stream_into_stream_256", |b| {
        b.iter(|| into_stream_from_stream(&rt))
    });
    group.bench_function("tokio_mpsc_256_receiver_stream", |b| {
        b.iter(|| tokio_mpsc(&rt))
    });
    group.finish();

    let mut group = c.benchmark_group("bridge/from_stream_overhead/1M");
    group.throughput(Throughput::Elements(N));
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(3));
    group.bench_function("raw_stream_iter_sum", |b| b.iter(raw_stream));
    group.bench_function("weir_from_stream_fold", |b| {
        b.iter(|| from_stream_fold(&rt))
    });
    group.finish();
}

criterion_group!(benches, bridge);
criterion_main!(benches);
