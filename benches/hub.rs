//! Fan-out: one producer, four subscribers, 10M `u64`s, weir's hub against
//! `tokio::sync::broadcast` and against four `crossbeam_channel::bounded` channels
//! fed by one producer, in one run.
//!
//! * `tokio_broadcast`: `broadcast::channel(1024)`; a producer thread `send`s each
//!   item once; four receiver tasks on a two-worker runtime sum what they get.
//!   broadcast never waits for a receiver: a receiver that falls 1,024 behind loses
//!   items (`Lagged`), so its figure is for at most 4 × 10M deliveries (the bench
//!   prints how many it lost).
//! * `crossbeam_4`: a producer thread sends each item into four `bounded(1024)`
//!   channels; four consumer threads sum. Lossless.
//! * `weir_sync`: `range(0..N)` shared through a hub of 1,024 that connects at four
//!   subscribers, each a `fold`: everything on the thread that subscribes the
//!   fourth (the hub hands each subscriber batches of up to 256). Lossless
//!   (`Backpressure`).
//! * `weir_threads`: `range(0..N).subscribe_on(pool of 1)` (the producer thread)
//!   shared through the same hub, each subscriber behind `publish_on(pool of 2,
//!   256)` and a `fold`. Lossless.
//! * `weir_channel`: a producer thread `send_blocking`s each item into a
//!   `weir::channel(1024)` shared the same way, each subscriber behind
//!   `publish_on(pool of 2, 256)` (the push source a socket reader would use).
//! * `weir_channel_iter`: the same channel and hub, each subscriber a thread of its
//!   own iterating `blocking_iter(256)` (crossbeam_4's shape).
//! * `weir_channel_inline`: the same, the four folds subscribed directly: the hub's
//!   whole fan-out runs on the producer's thread, one item at a time.
//! * `weir_channel_hop`: the channel behind `publish_on(pool of 1, 256)` before the
//!   hub, so the hub receives batches on that thread.
//! * `weir_channel_hop_inline`: the same hop, the four folds subscribed directly:
//!   the hub and its subscribers run on the hop's thread, the producer thread only
//!   sends.
//!
//! A second group, `hub_isolation`, runs `range(0..2M).subscribe_on(pool of 1)`
//! through a hub of 1,024 to eight subscribers behind `publish_on(pool of 2, 256)`
//! (`eight_fast`), and to seven such subscribers beside one `DropOldest` subscriber
//! that never requests (`seven_fast_one_stalled`): the stalled one must not slow the
//! others (the target: ≥ 0.95 × the all-fast throughput). The host drifts
//! between speed modes within seconds, so after criterion's cases a *paired* phase
//! times the two back to back in each of [`ROUNDS`] rounds and reports the median of
//! the per-round ratios. The same phase first runs [`FAN_OUT_ROUNDS`] rounds of the
//! first group (broadcast, crossbeam, then every weir case, each once per round)
//! and reports each case's median ratio to both peers within a round.
//!
//! Run: `cargo bench --bench hub` (about eleven minutes: the per-item formulations
//! take seconds per 10M); `-- paired` runs the paired phases only (about three).

#[path = "support/paired.rs"]
mod paired;

use std::hint::black_box;

use criterion::{criterion_group, Criterion, Throughput};
use weir::hub::Hub;
use weir::prelude::*;
use weir::runtime::ThreadPool;
use weir::source::channel::ChannelPolicy;

const N: u64 = 10_000_000;
const CAPACITY: usize = 1_024;
const SUBSCRIBERS: usize = 4;

fn add(sum: u64, x: u64) -> u64 {
    sum.wrapping_add(x)
}

/// Four `fold`s of `hub`, waited for; returns the four sums.
fn fold_all<P>(hub: &Hub<u64>, boundary: impl Fn(Hub<u64>) -> P) -> Vec<u64>
where
    P: Publisher<Item = u64>,
{
    let handles: Vec<_> = (0..SUBSCRIBERS)
        .map(|_| boundary(hub.clone()).fold(0u64, add))
        .collect();
    handles
        .into_iter()
        .map(|h| h.wait().expect("completes"))
        .collect()
}

/// `0..N`, one `send_blocking` at a time, then the channel closes.
fn send_all(tx: weir::source::channel::Sender<u64>) {
    for i in 0..black_box(N) {
        tx.send_blocking(i).expect("the hub reads");
    }
}

/// A producer thread sending `0..N` one by one into `weir::channel(1024)`, which
/// `front` turns into the hub's upstream; four `fold`s behind `boundary`.
fn fed_one_by_one<P>(
    front: impl FnOnce(weir::source::Channel<u64>) -> weir::BoxPublisher<u64>,
    boundary: impl Fn(Hub<u64>) -> P,
) -> Vec<u64>
where
    P: Publisher<Item = u64>,
{
    let (tx, rx) = weir::channel::<u64>(CAPACITY, ChannelPolicy::Backpressure);
    let hub = Hub::builder(front(rx), CAPACITY)
        .connect_at(SUBSCRIBERS)
        .build();
    let producer = std::thread::spawn(move || send_all(tx));
    let sums = fold_all(&hub, boundary);
    producer.join().unwrap();
    sums
}

fn tokio_broadcast(rt: &tokio::runtime::Runtime) -> (u64, u64) {
    let (tx, _) = tokio::sync::broadcast::channel::<u64>(CAPACITY);
    let receivers: Vec<_> = (0..SUBSCRIBERS)
        .map(|_| {
            let mut rx = tx.subscribe();
            rt.spawn(async move {
                let (mut sum, mut lost) = (0u64, 0u64);
                loop {
                    match rx.recv().await {
                        Ok(x) => sum = add(sum, x),
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => lost += n,
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                    }
                }
                (sum, lost)
            })
        })
        .collect();
    let producer = std::thread::spawn(move || {
        for i in 0..black_box(N) {
            tx.send(i).expect("receivers are there");
        }
    });
    producer.join().unwrap();
    rt.block_on(async {
        let mut total = (0, 0);
        for r in receivers {
            let (sum, lost) = r.await.unwrap();
            total = (add(total.0, sum), total.1 + lost);
        }
        total
    })
}

fn crossbeam_4() -> u64 {
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..SUBSCRIBERS)
        .map(|_| crossbeam_channel::bounded::<u64>(CAPACITY))
        .unzip();
    let consumers: Vec<_> = rxs
        .into_iter()
        .map(|rx| std::thread::spawn(move || rx.iter().fold(0u64, add)))
        .collect();
    for i in 0..black_box(N) {
        for tx in &txs {
            tx.send(i).expect("consumers are there");
        }
    }
    drop(txs);
    consumers
        .into_iter()
        .map(|c| c.join().unwrap())
        .fold(0, add)
}

/// The pools and the runtime every case runs on.
struct Fixture {
    rt: tokio::runtime::Runtime,
    producer: ThreadPool,
    consumers: ThreadPool,
}

impl Fixture {
    fn new() -> Self {
        Fixture {
            rt: tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .build()
                .unwrap(),
            producer: ThreadPool::builder()
                .name("bench-producer")
                .threads(1)
                .build(),
            consumers: ThreadPool::builder()
                .name("bench-consumers")
                .threads(2)
                .build(),
        }
    }
}

/// One run of a weir case (it checks its own sums).
type Case<'a> = Box<dyn Fn() + 'a>;

/// weir's cases, by name (see the module docs).
fn weir_cases(fx: &Fixture) -> Vec<(&'static str, Case<'_>)> {
    let expected = (0..N).fold(0u64, add);
    let (producer, consumers) = (&fx.producer, &fx.consumers);
    vec![
        (
            "weir_sync",
            Box::new(move || {
                let hub = Hub::builder(weir::range(0..N), CAPACITY)
                    .connect_at(SUBSCRIBERS)
                    .build();
                let sums = fold_all(&hub, |h| h);
                assert!(sums.iter().all(|&s| s == expected));
            }),
        ),
        (
            "weir_threads",
            Box::new(move || {
                let source = weir::range(0..N).subscribe_on(producer.clone());
                let hub = Hub::builder(source, CAPACITY)
                    .connect_at(SUBSCRIBERS)
                    .build();
                let sums = fold_all(&hub, |h| h.publish_on(consumers.clone(), 256));
                assert!(sums.iter().all(|&s| s == expected));
            }),
        ),
        (
            "weir_channel",
            Box::new(move || {
                let sums =
                    fed_one_by_one(|rx| rx.boxed(), |h| h.publish_on(consumers.clone(), 256));
                assert!(sums.iter().all(|&s| s == expected));
            }),
        ),
        (
            "weir_channel_iter",
            Box::new(move || {
                let (tx, rx) = weir::channel::<u64>(CAPACITY, ChannelPolicy::Backpressure);
                let hub = Hub::builder(rx, CAPACITY).connect_at(SUBSCRIBERS).build();
                let threads: Vec<_> = (0..SUBSCRIBERS)
                    .map(|_| {
                        let items = hub.clone().blocking_iter(256);
                        std::thread::spawn(move || items.map(|x| x.unwrap()).fold(0u64, add))
                    })
                    .collect();
                send_all(tx);
                assert!(threads.into_iter().all(|c| c.join().unwrap() == expected));
            }),
        ),
        (
            "weir_channel_inline",
            Box::new(move || {
                let sums = fed_one_by_one(|rx| rx.boxed(), |h| h);
                assert!(sums.iter().all(|&s| s == expected));
            }),
        ),
        (
            "weir_channel_hop_inline",
            Box::new(move || {
                let sums = fed_one_by_one(|rx| rx.publish_on(producer.clone(), 256).boxed(), |h| h);
                assert!(sums.iter().all(|&s| s == expected));
            }),
        ),
        (
            "weir_channel_hop",
            Box::new(move || {
                let sums = fed_one_by_one(
                    |rx| rx.publish_on(producer.clone(), 256).boxed(),
                    |h| h.publish_on(consumers.clone(), 256),
                );
                assert!(sums.iter().all(|&s| s == expected));
            }),
        ),
    ]
}

/// Four times the sum of `0..N`: what `crossbeam_4` returns.
fn crossbeam_expected() -> u64 {
    let expected = (0..N).fold(0u64, add);
    add(add(expected, expected), add(expected, expected))
}

fn bench(c: &mut Criterion) {
    let fx = Fixture::new();
    let mut group = c.benchmark_group("hub");
    group.throughput(Throughput::Elements(N));
    group.sample_size(10);
    let (mut lost, mut runs) = (0u64, 0u64);
    group.bench_function("tokio_broadcast", |b| {
        b.iter(|| {
            let (_, l) = tokio_broadcast(&fx.rt);
            lost += l;
            runs += 1;
        })
    });
    let deliveries = runs * N * SUBSCRIBERS as u64;
    println!(
        "tokio_broadcast lost {lost} of {deliveries} deliveries (Lagged) over its {runs} runs: {:.1} %",
        100.0 * lost as f64 / deliveries.max(1) as f64
    );
    group.bench_function("crossbeam_4", |b| {
        b.iter(|| assert_eq!(crossbeam_4(), crossbeam_expected()))
    });
    for (name, case) in weir_cases(&fx) {
        group.bench_function(name, |b| b.iter(&case));
    }
    group.finish();

    // Isolation: eight subscribers, all fast, against seven fast ones beside one
    // DropOldest subscriber that never asks for anything (it skips everything).
    let mut group = c.benchmark_group("hub_isolation");
    group.throughput(Throughput::Elements(ISOLATION_N));
    group.sample_size(10);
    for stalled in [false, true] {
        let name = if stalled {
            "seven_fast_one_stalled"
        } else {
            "eight_fast"
        };
        group.bench_function(name, |b| {
            b.iter(|| isolation(stalled, &fx.producer, &fx.consumers))
        });
    }
    group.finish();
}

/// Items per run of the isolation group.
const ISOLATION_N: u64 = 2_000_000;

/// One run of the isolation group: `range(0..ISOLATION_N).subscribe_on(producer)`
/// through a hub of 1,024 to eight subscribers behind `publish_on(consumers, 256)`,
/// or (`stalled`) to seven such beside one `DropOldest` subscriber that never asks.
fn isolation(stalled: bool, producer: &ThreadPool, consumers: &ThreadPool) {
    let source = weir::range(0..ISOLATION_N).subscribe_on(producer.clone());
    let hub = Hub::builder(source, CAPACITY).connect_at(8).build();
    if stalled {
        hub.join(weir::hub::Policy::DropOldest).subscribe(Stalled);
    }
    let fast = if stalled { 7 } else { 8 };
    let handles: Vec<_> = (0..fast)
        .map(|_| {
            hub.clone()
                .publish_on(consumers.clone(), 256)
                .fold(0u64, add)
        })
        .collect();
    let expected = (0..ISOLATION_N).fold(0u64, add);
    for handle in handles {
        assert_eq!(handle.wait().unwrap(), expected);
    }
}

/// Rounds of the paired fan-out phase.
const FAN_OUT_ROUNDS: usize = 5;

/// The paired fan-out phase: each round runs `tokio_broadcast`, `crossbeam_4` and
/// every weir case once, in that order, and takes broadcast's time ÷ each case's
/// (and crossbeam's ÷ each case's) inside the round. Prints the medians with their
/// ranges, and how much broadcast lost.
fn paired_fan_out() {
    let fx = Fixture::new();
    let cases = weir_cases(&fx);
    let lost = std::cell::Cell::new(0u64);
    let (mut broadcast, mut crossbeam) = (Vec::new(), Vec::new());
    let mut times = vec![Vec::new(); cases.len()];
    let mut over_broadcast = vec![Vec::new(); cases.len()];
    let mut over_crossbeam = vec![Vec::new(); cases.len()];
    for _ in 0..FAN_OUT_ROUNDS {
        let b = paired::secs(|| lost.set(lost.get() + tokio_broadcast(&fx.rt).1));
        let x = paired::secs(|| assert_eq!(crossbeam_4(), crossbeam_expected()));
        broadcast.push(b);
        crossbeam.push(x);
        for (i, (_, case)) in cases.iter().enumerate() {
            let t = paired::secs(case);
            times[i].push(t);
            over_broadcast[i].push(b / t);
            over_crossbeam[i].push(x / t);
        }
    }
    let deliveries = FAN_OUT_ROUNDS as u64 * N * SUBSCRIBERS as u64;
    println!();
    println!(
        "paired fan-out ({FAN_OUT_ROUNDS} rounds of {N} items; ratio = the peer's time ÷ \
         weir's in the same round, median (min-max)):"
    );
    let b = paired::spread(&mut broadcast).median;
    let x = paired::spread(&mut crossbeam).median;
    println!(
        "  {:24} median {:7.1} ms (lost {:.1} % of its deliveries, Lagged)",
        "tokio_broadcast",
        b * 1e3,
        100.0 * lost.get() as f64 / deliveries as f64
    );
    println!("  {:24} median {:7.1} ms", "crossbeam_4", x * 1e3);
    for (i, (name, _)) in cases.iter().enumerate() {
        let t = paired::spread(&mut times[i]).median;
        let b = paired::spread(&mut over_broadcast[i]);
        let x = paired::spread(&mut over_crossbeam[i]);
        println!(
            "  {name:24} median {:7.1} ms, ÷ broadcast {:.3} ({:.3}-{:.3}), \
             ÷ crossbeam {:.3} ({:.3}-{:.3})",
            t * 1e3,
            b.median,
            b.min,
            b.max,
            x.median,
            x.min,
            x.max
        );
    }
}

/// Rounds of the paired isolation phase.
const ROUNDS: usize = 15;

/// The paired isolation phase: each round times `eight_fast` and
/// `seven_fast_one_stalled` back to back (which goes first alternates) and takes
/// the ratio inside the round, so the host's drift between speed modes, which moves
/// criterion's two separate measurements by ±30 %, cancels out. Prints the median
/// of the per-round ratios (all-fast time ÷ with-a-stalled-one time: the seven
/// keep at least 0.95 × the all-fast throughput when it is ≥ 0.95).
fn paired_isolation() {
    let fx = Fixture::new();
    let timed = |stalled: bool| paired::secs(|| isolation(stalled, &fx.producer, &fx.consumers));
    let mut ratios = Vec::new();
    let (mut fast, mut slow) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let (all_fast, with_stalled) = if round % 2 == 0 {
            let a = timed(false);
            (a, timed(true))
        } else {
            let b = timed(true);
            (timed(false), b)
        };
        fast.push(all_fast);
        slow.push(with_stalled);
        ratios.push(all_fast / with_stalled);
    }
    let ratio = paired::spread(&mut ratios);
    println!();
    println!(
        "paired isolation ({ROUNDS} rounds of {ISOLATION_N} items): eight_fast median {:.1} ms, \
         seven_fast_one_stalled median {:.1} ms; all-fast time ÷ with-a-stalled-one time, \
         same round: median {:.3} (min {:.3}, max {:.3})",
        paired::spread(&mut fast).median * 1e3,
        paired::spread(&mut slow).median * 1e3,
        ratio.median,
        ratio.min,
        ratio.max
    );
}

/// A subscriber that never requests (stalled for good).
struct Stalled;

impl weir::Subscriber<u64> for Stalled {
    fn on_subscribe(&mut self, _: weir::Subscription) {}
    fn on_next(&mut self, _: u64) {
        unreachable!("it never asked")
    }
    fn on_error(&mut self, _: weir::Error) {}
    fn on_complete(&mut self) {}
}

criterion_group!(benches, bench);

fn main() {
    paired::main_with_paired(benches, || {
        paired_fan_out();
        paired_isolation();
    });
}
