//! The push source, `weir::channel`, plain and with an admission ladder, against
//! `crossbeam_channel::bounded` in one run: what graded admission costs per item.
//!
//! A producer thread offers 1M `u64`s into a queue of 1,024; the bench thread sums
//! them. Formulations:
//!
//! * `weir_plain`: `channel(1024, Backpressure)`, `send_blocking` per item, summed by
//!   `fold(..).wait()`.
//! * `weir_ladder`: the same with `build_with(Admission)`: a reduce rung (768/256), a
//!   shed rung (960/512) whose classifier admits every item, and deadlines kept
//!   (`deadlines_by`, none set), so every item is assessed and every rung moves.
//! * `weir_ladder_try`: the ladder, offered with `try_send` (spinning on `Full` with a
//!   yield), the producer a socket reader would be.
//! * `crossbeam`: `crossbeam_channel::bounded(1024)`, `send`/`recv` per item.
//!
//! A second group, `channel_try`, measures what a producer that must never block
//! pays (a socket reader): queues of 4,096, the producer spinning on `Full` with a
//! yield, the bench thread summing.
//!
//! * `crossbeam_try_send`: `crossbeam_channel::bounded(4096)`, `try_send` per item,
//!   `recv` per item.
//! * `weir_try_send`: `channel(4096, Backpressure)`, `try_send` per item, summed by
//!   `fold` (unbounded demand: with nothing queued, each item is handed straight to
//!   the fold on the producer's thread).
//! * `weir_try_send_fold_with_64`: the same, summed by `fold_with(64, ..)`: demand
//!   of 64, replenished in batches of 48 from inside the fold.
//! * `weir_try_send_publish_on`: the same, the sum taken on another thread, as
//!   crossbeam's is: `publish_on(pool of 1, 256)` in front of the fold;
//!   `weir_try_send_publish_on_16` with a window of 16 (a window of one published
//!   run: its drain does not watch the ring, the producer signals every item);
//!   `weir_send_blocking_publish_on` with `send_blocking` instead of `try_send`.
//! * `weir_try_send_all_64` / `_1024`: the same channel, `try_send_all` over ranges of
//!   64 or 1,024 items, resuming after the refused item on `Full`.
//! * `weir_try_send_all_vec_64`: `try_send_all` of 64-item `Vec`s (items moved out of
//!   a buffer the producer fills, as a frame decoder would).
//!
//! The host drifts between speed modes within seconds, so after criterion's cases a
//! *paired* phase runs [`ROUNDS`] rounds, each timing `crossbeam_try_send` and then
//! the per-item weir formulations once, and reports the median of the per-round
//! ratios (crossbeam's time ÷ weir's). Each round also times `two_rmw_floor`: two
//! uncontended read-modify-writes per item and the sum, the least an inline
//! hand-off (the sender taking and leaving the drain loop) can cost.
//!
//! Run: `cargo bench --bench channel` (about three minutes); `-- paired` runs the
//! paired phase only.

#[path = "support/paired.rs"]
mod paired;

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, Criterion, Throughput};
use weir::prelude::*;
use weir::runtime::ThreadPool;
use weir::source::channel::{Admission, ChannelBuilder, ChannelPolicy, Sender, WaterMarks};

const N: u64 = 1_000_000;
const CAPACITY: usize = 1_024;
const TRY_CAPACITY: usize = 4_096;

fn ladder() -> Admission<u64> {
    Admission::new()
        .reduce_at(WaterMarks::new(768, 256), 0.5)
        .shed_below(WaterMarks::new(960, 512), 0u8, |_: &u64| 1u8)
        .deadlines_by(Duration::from_millis(1), |_: &u64| None)
}

/// A producer thread running `produce` into the channel `(tx, rx)`, while `consume`
/// takes the sum of `rx` here.
fn consumed_through(
    (tx, rx): (Sender<u64>, weir::source::Channel<u64>),
    produce: impl FnOnce(Sender<u64>) + Send + 'static,
    consume: impl FnOnce(weir::source::Channel<u64>) -> u64,
) -> u64 {
    let producer = std::thread::spawn(move || produce(tx));
    let sum = consume(rx);
    producer.join().expect("the producer ran");
    sum
}

fn add(sum: u64, x: u64) -> u64 {
    sum.wrapping_add(x)
}

/// A producer thread running `produce` into the channel `(tx, rx)`, summed here by
/// `fold`.
fn sum_through(
    channel: (Sender<u64>, weir::source::Channel<u64>),
    produce: impl FnOnce(Sender<u64>) + Send + 'static,
) -> u64 {
    consumed_through(channel, produce, |rx| {
        rx.fold(0u64, add).wait().expect("no errors")
    })
}

/// Every item of `0..N`, one `offer` each.
fn each(offer: fn(&Sender<u64>, u64)) -> impl FnOnce(Sender<u64>) + Send + 'static {
    move |tx| {
        for i in 0..black_box(N) {
            offer(&tx, i);
        }
    }
}

fn blocking(tx: &Sender<u64>, item: u64) {
    tx.send_blocking(item).expect("open");
}

fn spinning(tx: &Sender<u64>, mut item: u64) {
    loop {
        match tx.try_send(item) {
            Ok(()) => return,
            Err(full) if full.is_full() => {
                item = full.into_inner();
                std::thread::yield_now();
            }
            Err(_) => panic!("closed"),
        }
    }
}

/// A producer thread running `produce` into the channel `(tx, rx)`, summed by
/// `fold_with(64, ..)` here.
fn sum_through_64(
    channel: (Sender<u64>, weir::source::Channel<u64>),
    produce: impl FnOnce(Sender<u64>) + Send + 'static,
) -> u64 {
    consumed_through(channel, produce, |rx| {
        rx.fold_with(64, 0u64, add).wait().expect("no errors")
    })
}

/// A producer thread running `produce` into the channel `(tx, rx)`, summed on `pool`'s
/// thread behind `publish_on(pool, prefetch)`.
fn sum_across(
    channel: (Sender<u64>, weir::source::Channel<u64>),
    pool: &ThreadPool,
    prefetch: u64,
    produce: impl FnOnce(Sender<u64>) + Send + 'static,
) -> u64 {
    consumed_through(channel, produce, |rx| {
        rx.publish_on(pool.clone(), prefetch)
            .fold(0u64, add)
            .wait()
            .expect("no errors")
    })
}

/// `try_send_all` over ranges of `BATCH` items, resuming after the refused one.
fn ranges<const BATCH: u64>(tx: Sender<u64>) {
    let mut next = 0;
    while next < N {
        let end = (next + BATCH).min(N);
        match tx.try_send_all(next..end) {
            Ok(_) => next = end,
            Err(refused) if refused.error.is_full() => {
                next += refused.sent as u64;
                std::thread::yield_now();
            }
            Err(_) => panic!("closed"),
        }
    }
}

/// `try_send_all` of 64-item `Vec`s filled by the producer.
fn vecs(tx: Sender<u64>) {
    let mut pending: Vec<u64> = Vec::with_capacity(64);
    let mut next = 0;
    while next < N || !pending.is_empty() {
        while pending.len() < 64 && next < N {
            pending.push(next);
            next += 1;
        }
        let back = match tx.try_send_all(pending.drain(..)) {
            Ok(_) => continue,
            Err(refused) if refused.error.is_full() => {
                let mut back = vec![refused.error.into_inner()];
                back.extend(refused.unsent);
                back
            }
            Err(_) => panic!("closed"),
        };
        pending = back;
        std::thread::yield_now();
    }
}

/// A fresh `channel(4096, Backpressure)`.
fn try_channel() -> (Sender<u64>, weir::source::Channel<u64>) {
    ChannelBuilder::new(TRY_CAPACITY, ChannelPolicy::Backpressure).build()
}

/// A producer thread offering `0..N` with `offer` into `crossbeam_channel::bounded(capacity)`,
/// summed here.
fn crossbeam(capacity: usize, offer: fn(&crossbeam_channel::Sender<u64>, u64)) -> u64 {
    let (tx, rx) = crossbeam_channel::bounded::<u64>(capacity);
    let producer = std::thread::spawn(move || {
        for i in 0..black_box(N) {
            offer(&tx, i);
        }
    });
    let sum = rx.iter().fold(0u64, add);
    producer.join().expect("the producer ran");
    sum
}

fn crossbeam_send(tx: &crossbeam_channel::Sender<u64>, item: u64) {
    tx.send(item).expect("open");
}

/// `try_send`, spinning on `Full` with a yield.
fn crossbeam_spin(tx: &crossbeam_channel::Sender<u64>, mut item: u64) {
    loop {
        match tx.try_send(item) {
            Ok(()) => return,
            Err(crossbeam_channel::TrySendError::Full(back)) => {
                item = back;
                std::thread::yield_now();
            }
            Err(_) => panic!("closed"),
        }
    }
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("channel");
    group.throughput(Throughput::Elements(N));
    group.sample_size(10);
    let expected = (0..N).fold(0u64, add);
    group.bench_function("weir_plain", |b| {
        b.iter(|| {
            let pair = ChannelBuilder::new(CAPACITY, ChannelPolicy::Backpressure).build();
            assert_eq!(sum_through(pair, each(blocking)), expected);
        })
    });
    group.bench_function("weir_ladder", |b| {
        b.iter(|| {
            let pair =
                ChannelBuilder::new(CAPACITY, ChannelPolicy::Backpressure).build_with(ladder());
            assert_eq!(sum_through(pair, each(blocking)), expected);
        })
    });
    group.bench_function("weir_ladder_try", |b| {
        b.iter(|| {
            let pair =
                ChannelBuilder::new(CAPACITY, ChannelPolicy::Backpressure).build_with(ladder());
            assert_eq!(sum_through(pair, each(spinning)), expected);
        })
    });
    group.bench_function("crossbeam", |b| {
        b.iter(|| assert_eq!(crossbeam(CAPACITY, crossbeam_send), expected))
    });
    group.finish();

    let mut group = c.benchmark_group("channel_try");
    group.throughput(Throughput::Elements(N));
    group.sample_size(10);
    group.bench_function("crossbeam_try_send", |b| {
        b.iter(|| assert_eq!(crossbeam(TRY_CAPACITY, crossbeam_spin), expected))
    });
    group.bench_function("weir_try_send", |b| {
        b.iter(|| assert_eq!(sum_through(try_channel(), each(spinning)), expected))
    });
    group.bench_function("weir_try_send_fold_with_64", |b| {
        b.iter(|| assert_eq!(sum_through_64(try_channel(), each(spinning)), expected))
    });
    let pool = ThreadPool::builder().name("bench-sum").threads(1).build();
    for (name, prefetch, offer) in [
        (
            "weir_try_send_publish_on",
            256,
            spinning as fn(&Sender<u64>, u64),
        ),
        ("weir_try_send_publish_on_16", 16, spinning),
        ("weir_send_blocking_publish_on", 256, blocking),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| {
                let sum = sum_across(try_channel(), &pool, prefetch, each(offer));
                assert_eq!(sum, expected)
            })
        });
    }
    group.bench_function("weir_try_send_all_64", |b| {
        b.iter(|| assert_eq!(sum_through(try_channel(), ranges::<64>), expected))
    });
    group.bench_function("weir_try_send_all_1024", |b| {
        b.iter(|| assert_eq!(sum_through(try_channel(), ranges::<1024>), expected))
    });
    group.bench_function("weir_try_send_all_vec_64", |b| {
        b.iter(|| assert_eq!(sum_through(try_channel(), vecs), expected))
    });
    group.finish();
}

/// The floor of any inline hand-off: what a sender that runs the subscriber on its
/// own thread cannot avoid per item, whatever else it skips. Serial signalling
/// (rule 1.3) needs the sender to take the drain loop and to let it go, each a
/// read-modify-write other threads can see (another sender, or a `request` from
/// the subscriber's thread, may want the loop at any moment). Two uncontended
/// RMWs per item plus the sum, nothing else: the channel's inline rows cannot go
/// below this, crossbeam's two-thread channel can.
fn two_rmw_floor() -> u64 {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let owner = AtomicUsize::new(0);
    let mut sum = 0u64;
    for i in 0..black_box(N) {
        // AcqRel / Release like a drain loop's enter and leave (nothing pairs here:
        // one thread; the point is the instructions' cost).
        let _ = owner.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed);
        sum = add(sum, black_box(i));
        owner.fetch_sub(1, Ordering::Release);
    }
    sum
}

/// Rounds of the paired phase.
const ROUNDS: usize = 31;

/// The paired phase: see the module docs.
fn paired() {
    let pool = ThreadPool::builder().name("bench-sum").threads(1).build();
    let expected = (0..N).fold(0u64, add);
    let timed = |run: &dyn Fn() -> u64| paired::secs(|| assert_eq!(run(), expected, "wrong sum"));
    let cases: [(&str, &dyn Fn() -> u64); 4] = [
        ("weir_try_send", &|| {
            sum_through(try_channel(), each(spinning))
        }),
        ("weir_try_send_publish_on", &|| {
            sum_across(try_channel(), &pool, 256, each(spinning))
        }),
        ("weir_try_send_publish_on_16", &|| {
            sum_across(try_channel(), &pool, 16, each(spinning))
        }),
        ("weir_send_blocking_publish_on", &|| {
            sum_across(try_channel(), &pool, 256, each(blocking))
        }),
    ];
    let mut ratios = vec![Vec::new(); cases.len()];
    let mut times = vec![Vec::new(); cases.len()];
    let mut peers = Vec::new();
    let mut floors = Vec::new();
    for _ in 0..ROUNDS {
        let peer = timed(&|| crossbeam(TRY_CAPACITY, crossbeam_spin));
        peers.push(peer);
        floors.push(timed(&two_rmw_floor));
        for (i, (_, case)) in cases.iter().enumerate() {
            let time = timed(*case);
            times[i].push(time);
            ratios[i].push(peer / time);
        }
    }
    let peer = paired::spread(&mut peers);
    let floor = paired::spread(&mut floors);
    println!();
    println!(
        "paired rounds ({ROUNDS}): crossbeam_try_send's time ÷ each case's, same round \
         (above 1: weir is faster); median (min-max)"
    );
    println!(
        "  {:30} median {:6.1} ms",
        "crossbeam_try_send",
        peer.median * 1e3
    );
    println!(
        "  {:30} median {:6.1} ms (min {:.1}, max {:.1}): two uncontended RMWs per item, \
         the floor of an inline hand-off",
        "two_rmw_floor",
        floor.median * 1e3,
        floor.min * 1e3,
        floor.max * 1e3
    );
    for (((name, _), mut v), mut t) in cases.iter().zip(ratios).zip(times) {
        let ratio = paired::spread(&mut v);
        println!(
            "  {name:30} median {:6.1} ms, ratio {:.2} ({:.2}-{:.2})",
            paired::spread(&mut t).median * 1e3,
            ratio.median,
            ratio.min,
            ratio.max
        );
    }
}

criterion_group!(benches, bench);

fn main() {
    paired::main_with_paired(benches, paired);
}
