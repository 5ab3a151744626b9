//! `async/hop_u64`: 10,000,000 `u64`s from one thread to another, summed on the
//! second, for prefetch (channel capacity) 16, 64, 256 and 1024, side by side in one
//! run. Run with `cargo bench --bench async_boundary`.
//!
//! Cases, each with exactly two busy threads:
//!
//! * `weir`: `range(0..N).subscribe_on(pool_a).publish_on(pool_b, prefetch).fold(sum)`.
//!   `subscribe_on` puts the range (the producer) on pool A's one worker: it emits
//!   inside the forwarded requests. `publish_on` runs its drain, and with it the fold
//!   (the consumer), on pool B's one worker. The bench thread only waits on the
//!   result (parked). Upstream credit goes back from B to A through `subscribe_on`'s
//!   forwarding task, so both directions of the boundary cross threads.
//! * `crossbeam_item`: `crossbeam_channel::bounded(prefetch)`, one `send`/`recv` per item.
//! * `crossbeam_vec64`: the same channel type carrying 64-item `Vec`s, capacity
//!   `max(1, prefetch / 64)` (so about `prefetch` items in flight); a fresh `Vec` per
//!   chunk (one allocation per 64 items, as a naive batching user would write it).
//! * `tokio_mpsc`: `tokio::sync::mpsc::channel(prefetch)` on a two-worker multi-thread
//!   runtime, producer task `send().await` per item, consumer task
//!   `recv_many(&mut buf, prefetch)` (about 1.6× faster on this machine than one
//!   `recv` per item, so tokio gets its best case).
//! * `rtrb_chunks`: an `rtrb` ring of `prefetch` slots; the producer writes chunks of
//!   whatever is free, the consumer reads whatever is available (the batched-SPSC
//!   ceiling; both sides spin, yielding when stuck).
//!
//! Producer threads of the peers are spawned per iteration (tens of microseconds
//! against 10 M items). Every iteration checks the sum. After criterion's own output,
//! a table prints the median items/s of each case over criterion's iterations, p10–p90,
//! and weir's ratios to each peer.
//!
//! The machine this runs on is shared and its load drifts within a run (±30 % seen
//! between runs of the same case; with other builds running, 10× swings), and criterion measures one case
//! after another. So a second, *paired* phase follows: [`ROUNDS`] rounds, each running
//! every case once back to back for one prefetch, and the table gives the median over
//! rounds of weir's ratio to each peer *within the same round*. Those are the ratios
//! to compare with the targets (at prefetch 256: ≥ 3× crossbeam item by item, ≥ 10×
//! tokio mpsc, ≥ 0.25× rtrb; at 16: ≥ 1× crossbeam item by item).

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};
use weir::prelude::*;
use weir::runtime::ThreadPool;

const N: u64 = 10_000_000;
const EXPECTED: u64 = N * (N - 1) / 2;
const PREFETCHES: [u64; 4] = [16, 64, 256, 1024];
/// Rounds of the paired phase.
const ROUNDS: usize = 5;
/// The peers, in the order the tables list them.
const PEERS: [&str; 4] = [
    "crossbeam_item",
    "crossbeam_vec64",
    "tokio_mpsc",
    "rtrb_chunks",
];

/// Items per second of every timed iteration, by (case, prefetch).
static RATES: Mutex<BTreeMap<(String, u64), Vec<f64>>> = Mutex::new(BTreeMap::new());

fn record(case: &str, prefetch: u64, elapsed: Duration) {
    let rate = N as f64 / elapsed.as_secs_f64();
    RATES
        .lock()
        .unwrap()
        .entry((case.to_owned(), prefetch))
        .or_default()
        .push(rate);
}

/// Time `iters` runs of `run`, recording each.
fn timed(case: &str, prefetch: u64, iters: u64, mut run: impl FnMut() -> u64) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let start = Instant::now();
        let sum = run();
        let elapsed = start.elapsed();
        assert_eq!(sum, EXPECTED, "{case} prefetch {prefetch}: wrong sum");
        record(case, prefetch, elapsed);
        total += elapsed;
    }
    total
}

fn weir(pool_a: &ThreadPool, pool_b: &ThreadPool, prefetch: u64) -> u64 {
    weir::range(0..N)
        .subscribe_on(pool_a.clone())
        .publish_on(pool_b.clone(), prefetch)
        .fold(0u64, |acc, x| acc.wrapping_add(x))
        .wait()
        .unwrap()
}

fn crossbeam_item(prefetch: u64) -> u64 {
    let (tx, rx) = crossbeam_channel::bounded::<u64>(prefetch as usize);
    std::thread::scope(|scope| {
        scope.spawn(move || {
            for x in 0..N {
                tx.send(x).unwrap();
            }
        });
        let mut sum = 0u64;
        for x in rx.iter() {
            sum = sum.wrapping_add(x);
        }
        sum
    })
}

fn crossbeam_vec64(prefetch: u64) -> u64 {
    let capacity = (prefetch as usize / 64).max(1);
    let (tx, rx) = crossbeam_channel::bounded::<Vec<u64>>(capacity);
    std::thread::scope(|scope| {
        scope.spawn(move || {
            let mut next = 0;
            while next < N {
                let end = (next + 64).min(N);
                tx.send((next..end).collect()).unwrap();
                next = end;
            }
        });
        let mut sum = 0u64;
        for chunk in rx.iter() {
            for x in chunk {
                sum = sum.wrapping_add(x);
            }
        }
        sum
    })
}

fn tokio_mpsc(runtime: &tokio::runtime::Runtime, prefetch: u64) -> u64 {
    runtime.block_on(async move {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<u64>(prefetch as usize);
        let producer = tokio::spawn(async move {
            for x in 0..N {
                tx.send(x).await.unwrap();
            }
        });
        let consumer = tokio::spawn(async move {
            let mut buf = Vec::with_capacity(prefetch as usize);
            let mut sum = 0u64;
            while rx.recv_many(&mut buf, prefetch as usize).await > 0 {
                for x in buf.drain(..) {
                    sum = sum.wrapping_add(x);
                }
            }
            sum
        });
        producer.await.unwrap();
        consumer.await.unwrap()
    })
}

fn rtrb_chunks(prefetch: u64) -> u64 {
    let (mut tx, mut rx) = rtrb::RingBuffer::<u64>::new(prefetch as usize);
    std::thread::scope(|scope| {
        scope.spawn(move || {
            let mut next = 0u64;
            while next < N {
                let free = tx.slots();
                if free == 0 {
                    std::hint::spin_loop();
                    continue;
                }
                let n = (free as u64).min(N - next) as usize;
                let chunk = tx.write_chunk_uninit(n).unwrap();
                let written = chunk.fill_from_iter(next..);
                next += written as u64;
            }
        });
        let mut sum = 0u64;
        let mut seen = 0u64;
        while seen < N {
            let n = rx.slots();
            if n == 0 {
                std::hint::spin_loop();
                continue;
            }
            let chunk = rx.read_chunk(n).unwrap();
            for x in chunk {
                sum = sum.wrapping_add(x);
            }
            seen += n as u64;
        }
        sum
    })
}

fn bench(c: &mut Criterion) {
    let pool_a = ThreadPool::builder().name("bench-up").threads(1).build();
    let pool_b = ThreadPool::builder().name("bench-down").threads(1).build();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let mut group = c.benchmark_group("async/hop_u64");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .throughput(Throughput::Elements(N));
    for prefetch in PREFETCHES {
        group.bench_with_input(BenchmarkId::new("weir", prefetch), &prefetch, |b, &p| {
            b.iter_custom(|iters| timed("weir", p, iters, || weir(&pool_a, &pool_b, p)))
        });
        group.bench_with_input(
            BenchmarkId::new("crossbeam_item", prefetch),
            &prefetch,
            |b, &p| b.iter_custom(|iters| timed("crossbeam_item", p, iters, || crossbeam_item(p))),
        );
        group.bench_with_input(
            BenchmarkId::new("crossbeam_vec64", prefetch),
            &prefetch,
            |b, &p| {
                b.iter_custom(|iters| timed("crossbeam_vec64", p, iters, || crossbeam_vec64(p)))
            },
        );
        group.bench_with_input(
            BenchmarkId::new("tokio_mpsc", prefetch),
            &prefetch,
            |b, &p| {
                b.iter_custom(|iters| timed("tokio_mpsc", p, iters, || tokio_mpsc(&runtime, p)))
            },
        );
        group.bench_with_input(
            BenchmarkId::new("rtrb_chunks", prefetch),
            &prefetch,
            |b, &p| {
                b.iter_custom(|iters| timed("rtrb_chunks", p, iters, || black_box(rtrb_chunks(p))))
            },
        );
    }
    group.finish();
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    let index = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[index]
}

/// The median items/s of each case, its p10–p90 spread, and weir's ratios.
fn report() {
    let rates = RATES.lock().unwrap();
    let median = |case: &str, p: u64| -> Option<f64> {
        let mut v = rates.get(&(case.to_owned(), p))?.clone();
        v.sort_by(f64::total_cmp);
        Some(percentile(&v, 0.5))
    };
    println!();
    println!("async/hop_u64, {N} items: median M items/s (p10-p90)");
    for ((case, p), v) in rates.iter() {
        let mut v = v.clone();
        v.sort_by(f64::total_cmp);
        println!(
            "  {case:16} prefetch {p:5}: {:8.1} ({:.1}-{:.1}), {} runs",
            percentile(&v, 0.5) / 1e6,
            percentile(&v, 0.1) / 1e6,
            percentile(&v, 0.9) / 1e6,
            v.len()
        );
    }
    println!("ratios of weir's median to each peer's:");
    for p in PREFETCHES {
        let Some(w) = median("weir", p) else { continue };
        let ratio = |case: &str| median(case, p).map_or(f64::NAN, |m| w / m);
        println!(
            "  prefetch {p:5}: x crossbeam_item {:5.2}  x crossbeam_vec64 {:5.2}  x tokio_mpsc {:6.2}  x rtrb_chunks {:4.2}",
            ratio("crossbeam_item"),
            ratio("crossbeam_vec64"),
            ratio("tokio_mpsc"),
            ratio("rtrb_chunks"),
        );
    }
}

/// Items per second of one run of `run`, checking its sum.
fn rate(run: impl FnOnce() -> u64) -> f64 {
    let start = Instant::now();
    let sum = run();
    let elapsed = start.elapsed();
    assert_eq!(sum, EXPECTED, "wrong sum");
    N as f64 / elapsed.as_secs_f64()
}

/// The paired phase: see the module docs.
fn paired() {
    let pool_a = ThreadPool::builder().name("paired-up").threads(1).build();
    let pool_b = ThreadPool::builder().name("paired-down").threads(1).build();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    println!();
    println!("paired rounds ({ROUNDS} per prefetch): median of weir's ratio to each peer in the same round");
    for p in PREFETCHES {
        let mut ratios: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        let mut weir_rates = Vec::new();
        for _ in 0..ROUNDS {
            let w = rate(|| weir(&pool_a, &pool_b, p));
            weir_rates.push(w);
            let peers = [
                rate(|| crossbeam_item(p)),
                rate(|| crossbeam_vec64(p)),
                rate(|| tokio_mpsc(&runtime, p)),
                rate(|| black_box(rtrb_chunks(p))),
            ];
            for (peer, r) in PEERS.iter().zip(peers) {
                ratios.entry(peer).or_default().push(w / r);
            }
        }
        weir_rates.sort_by(f64::total_cmp);
        let mut line = format!(
            "  prefetch {p:5}: weir {:7.1} M/s;",
            percentile(&weir_rates, 0.5) / 1e6
        );
        for peer in PEERS {
            let mut v = ratios.remove(peer).unwrap_or_default();
            v.sort_by(f64::total_cmp);
            line += &format!(
                "  x {peer} {:.2} ({:.2}-{:.2})",
                percentile(&v, 0.5),
                v[0],
                v[v.len() - 1]
            );
        }
        println!("{line}");
    }
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    bench(&mut criterion);
    criterion.final_summary();
    report();
    // `cargo bench -- <filter>` runs the criterion cases only.
    if std::env::args().skip(1).all(|arg| arg.starts_with('-')) {
        paired();
    }
}
