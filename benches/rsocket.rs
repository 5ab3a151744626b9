//! `weir::rsocket` over loopback TCP against its ceiling, in one run.
//!
//! 1. **One stream, 1M small payloads** (16 bytes of data each): a weir server's
//!    request-stream consumed by a weir client, in two formulations: the
//!    `PayloadStream` bridged with `into_stream(256)` and pulled on a spawned task,
//!    and `fold_with(256, ..)` waited on the bench thread. The ceiling: a plain
//!    tokio `TcpStream` with `LengthDelimitedCodec` (3-byte lengths, as RSocket over
//!    TCP) carrying the very same frame bytes, written with `feed` and one `flush`,
//!    read by a `FramedRead` that counts. Target: weir ≥ 0.7× the ceiling's
//!    items per second. Both formulations run with the default window (256, the
//!    consumers requesting as much) and with windows of 2048 and 16384
//!    (`Config::window`): one stream moves at most a window per credit round trip.
//! 2. **16 streams aggregate vs 1 stream**: 16 request-streams of N/16 items each on
//!    one connection, all consumed at once (same two formulations), against one
//!    stream of N. Target: ≥ 0.9× the one stream's items per second. Before this
//!    group, `rsocket/round_trip`: one request-response on the same connection, the
//!    time a credit grant takes to come back as items (one stream moves at most a
//!    window per round trip).
//! 3. **Isolation**: 8 streams of N/8 items each (all fast), against 7 such streams
//!    while an eighth, endless stream's consumer pulls nothing (it holds its credit
//!    and never asks for more). Each iteration ends when the 7 (or 8) streams
//!    completed. The healthy streams' per-stream throughput while one stalls,
//!    against all-fast: `time(all fast) / time(one stalled)`, since each healthy
//!    stream moves N/8 items in both. Target: ≥ 0.9.
//!
//! The runtime has two worker threads (the machine's two cores); the bench thread
//! only waits. One server and one client connection serve every weir iteration; the
//! ceiling opens a connection per iteration (a few hundred microseconds against tens
//! of milliseconds). Run: `cargo bench --bench rsocket --features rsocket`.

use std::hint::black_box;
use std::time::Duration;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use futures::{SinkExt, StreamExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::{FramedRead, FramedWrite, LengthDelimitedCodec};
use weir::prelude::*;
use weir::rsocket::frame::{Body, Frame};
use weir::rsocket::{Client, Handler, Payload, Server};
use weir::BoxPublisher;

const N: u64 = 1_000_000;
/// The default window (`Config::window`), and larger ones (bulk transfer).
const WINDOW: u32 = 256;
const LARGE_WINDOWS: [u32; 2] = [2048, 16384];
const DATA: &[u8] = b"0123456789abcdef";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// Request data `"<n>"`: n items; `"endless"`: as many as requested.
struct Numbers;

impl Handler for Numbers {
    /// The request, back.
    fn request_response(&self, request: Payload) -> BoxPublisher<Payload> {
        weir::just(request).boxed()
    }

    fn request_stream(&self, request: Payload) -> BoxPublisher<Payload> {
        let n = match &request.data[..] {
            b"endless" => u64::MAX,
            text => std::str::from_utf8(text)
                .ok()
                .and_then(|t| t.parse().ok())
                .expect("a count"),
        };
        weir::range(0..n)
            .map(|_| Payload::data(Bytes::from_static(DATA)))
            .boxed()
    }
}

struct Weir {
    _server: Server,
    client: Client,
    /// What each consumer requests ahead: the client's window.
    prefetch: u64,
}

impl Weir {
    /// A server and a client whose streams grant `window` items ahead (consumers
    /// request as much).
    fn start(rt: &tokio::runtime::Runtime, window: u32) -> Self {
        rt.block_on(async {
            let server = Server::bind("127.0.0.1:0", Numbers).await.expect("bind");
            let config = weir::rsocket::Config::default().window(window);
            let client = weir::rsocket::connect_with(server.local_addr(), config)
                .await
                .expect("connect");
            Weir {
                _server: server,
                client,
                prefetch: u64::from(window),
            }
        })
    }

    fn stream(&self, n: u64) -> weir::rsocket::PayloadStream {
        self.client.request_stream(Payload::data(n.to_string()))
    }
}

/// Items pulled from `streams` request-streams of `each` items, each bridged with
/// `into_stream` and pulled on its own task.
fn pull_tasks(rt: &tokio::runtime::Runtime, weir: &Weir, streams: u64, each: u64) -> u64 {
    rt.block_on(async {
        let tasks: Vec<_> = (0..streams)
            .map(|_| {
                let mut items = weir.stream(each).into_stream(weir.prefetch);
                tokio::spawn(async move {
                    let mut count = 0u64;
                    while let Some(item) = items.next().await {
                        count += black_box(item.expect("no errors").data.len() as u64) / 16;
                    }
                    count
                })
            })
            .collect();
        let mut total = 0;
        for task in tasks {
            total += task.await.expect("the consumer task");
        }
        total
    })
}

/// Items folded from `streams` request-streams of `each` items, all subscribed at
/// once, waited on this thread.
fn fold_sinks(weir: &Weir, streams: u64, each: u64) -> u64 {
    let sinks: Vec<_> = (0..streams)
        .map(|_| {
            weir.stream(each).fold_with(weir.prefetch, 0u64, |n, item| {
                n + black_box(item.data.len() as u64) / 16
            })
        })
        .collect();
    sinks
        .into_iter()
        .map(|sink| sink.wait().expect("no errors"))
        .sum()
}

/// The ceiling: `n` PAYLOAD frames of the same bytes through a plain tokio TCP
/// connection with `LengthDelimitedCodec`.
fn ceiling(rt: &tokio::runtime::Runtime, frame: &Bytes, n: u64) -> u64 {
    let frame = frame.clone();
    rt.block_on(async move {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("an address");
        let reader = tokio::spawn(async move {
            let (socket, _) = listener.accept().await.expect("accept");
            let mut frames = FramedRead::new(socket, codec());
            let mut count = 0u64;
            while let Some(frame) = frames.next().await {
                count += black_box(frame.expect("a frame").len() as u64) / 22;
            }
            count
        });
        let socket = TcpStream::connect(addr).await.expect("connect");
        socket.set_nodelay(true).expect("nodelay");
        let mut sink = FramedWrite::new(socket, codec());
        for _ in 0..n {
            sink.feed(frame.clone()).await.expect("write");
        }
        SinkExt::<Bytes>::close(&mut sink)
            .await
            .expect("flush and close");
        reader.await.expect("the reader")
    })
}

fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .length_field_length(3)
        .new_codec()
}

/// With an endless stream held stalled (its bridge requested one window and is
/// never polled), pull `streams` streams of `each` items.
fn with_one_stalled(rt: &tokio::runtime::Runtime, weir: &Weir, streams: u64, each: u64) -> u64 {
    let stalled = rt.block_on(async {
        let mut stalled = weir
            .client
            .request_stream(Payload::data("endless"))
            .into_stream(weir.prefetch);
        // One item pulled: the stream is open and its window granted.
        stalled.next().await.expect("an item").expect("no error");
        stalled
    });
    let moved = pull_tasks(rt, weir, streams, each);
    drop(stalled);
    moved
}

/// A group of 10 samples of about 5 s, counting `items` per iteration.
fn new_group<'c>(
    c: &'c mut Criterion,
    name: &str,
    items: u64,
) -> criterion::BenchmarkGroup<'c, criterion::measurement::WallTime> {
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Elements(items));
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(5));
    group
}

fn rsocket(c: &mut Criterion) {
    let rt = runtime();
    let weir = Weir::start(&rt, WINDOW);
    let large: Vec<Weir> = LARGE_WINDOWS
        .iter()
        .map(|&window| Weir::start(&rt, window))
        .collect();
    let frame = Frame {
        stream: 1,
        body: Body::Payload {
            follows: false,
            complete: false,
            next: true,
            payload: Payload::data(Bytes::from_static(DATA)),
        },
    }
    .to_bytes()
    .expect("a frame");
    assert_eq!(frame.len(), 22);
    assert_eq!(ceiling(&rt, &frame, N), N);
    assert_eq!(pull_tasks(&rt, &weir, 1, N), N);
    assert_eq!(fold_sinks(&weir, 1, N), N);
    for weir in &large {
        assert_eq!(fold_sinks(weir, 1, N), N);
    }
    assert_eq!(pull_tasks(&rt, &weir, 16, N / 16), N);
    assert_eq!(fold_sinks(&weir, 16, N / 16), N);
    assert_eq!(with_one_stalled(&rt, &weir, 7, N / 8), 7 * (N / 8));

    let mut group = new_group(c, "rsocket/one_stream/1M", N);
    group.bench_function("tokio_length_delimited", |b| {
        b.iter(|| ceiling(&rt, &frame, N))
    });
    group.bench_function("weir_into_stream_256", |b| {
        b.iter(|| pull_tasks(&rt, &weir, 1, N))
    });
    group.bench_function("weir_fold_256", |b| b.iter(|| fold_sinks(&weir, 1, N)));
    for weir in &large {
        let window = weir.prefetch;
        group.bench_function(format!("weir_into_stream_{window}"), |b| {
            b.iter(|| pull_tasks(&rt, weir, 1, N))
        });
        group.bench_function(format!("weir_fold_{window}"), |b| {
            b.iter(|| fold_sinks(weir, 1, N))
        });
    }
    group.finish();

    // What one credit round trip costs: a request-response on the same connection
    // (the request out, the server's answer back, both tasks woken on the way).
    // One stream moves at most a window per round trip.
    let mut group = c.benchmark_group("rsocket/round_trip");
    group.sample_size(20);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(3));
    group.bench_function("request_response", |b| {
        b.iter_custom(|iters| {
            // Timed on a task of the runtime, as the streams' own round trips are.
            let client = weir.client.clone();
            rt.block_on(async move {
                tokio::spawn(async move {
                    let start = std::time::Instant::now();
                    for _ in 0..iters {
                        let answer = client.request_response(Payload::data("x"));
                        let mut answer = answer.into_stream(1);
                        black_box(answer.next().await.expect("an answer").expect("no error"));
                    }
                    start.elapsed()
                })
                .await
                .expect("the timing task")
            })
        })
    });
    group.finish();

    let mut group = new_group(c, "rsocket/streams/1M", N);
    for streams in [1, 16] {
        group.bench_function(format!("weir_into_stream_256/{streams}"), |b| {
            b.iter(|| pull_tasks(&rt, &weir, streams, N / streams))
        });
        group.bench_function(format!("weir_fold_256/{streams}"), |b| {
            b.iter(|| fold_sinks(&weir, streams, N / streams))
        });
    }
    group.finish();

    let mut group = new_group(c, "rsocket/isolation/125k_per_stream", N / 8);
    group.bench_function("8_fast", |b| b.iter(|| pull_tasks(&rt, &weir, 8, N / 8)));
    group.bench_function("7_fast_1_stalled", |b| {
        b.iter(|| with_one_stalled(&rt, &weir, 7, N / 8))
    });
    group.finish();
}

criterion_group!(benches, rsocket);
criterion_main!(benches);
