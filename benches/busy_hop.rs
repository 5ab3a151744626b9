//! `busy_hop`: the async hop while other threads compete for the cores. 200,000 `u64`s
//! from one thread to another, summed on the second, at prefetch (channel capacity)
//! 16 and 256, while `N` threads of the same process spin (`N` = 0, 2, 8; the machine
//! has two cores). Run with `cargo bench --bench busy_hop` (a few minutes).
//!
//! Cases, each run with the same spinners in the background:
//!
//! * `weir`: `range(0..ITEMS).subscribe_on(pool_a).publish_on(pool_b, prefetch)
//!   .fold(sum)`, pools of one worker each (producer on A, drain and fold on B).
//! * `crossbeam`: `crossbeam_channel::bounded(prefetch)`, a producer thread `send`ing
//!   item by item, the bench thread `recv`ing.
//!
//! A hand-off that spins while the other side is not running, or that waits for a
//! scheduler time slice per batch, collapses here (before the boundary's wait stopped
//! yielding, `N = 8, prefetch 16` took 52.8 s for these 200,000 items).
//!
//! Criterion's order (one case after the other) meets a load that is anything but
//! steady, so the bench then runs *paired rounds*: for each `N` and prefetch, [`ROUNDS`]
//! rounds of weir then crossbeam back to back, and prints the median over rounds of
//! weir's rate ÷ crossbeam's rate within the round (above 1: weir faster), with the
//! range. A round at `N = 8` meets anything from a quiet moment to a scheduler
//! storm (one run of seven rounds spread 0.17–28 around its median), so there are
//! [`ROUNDS`] of them.
//!
//! `-- paired` runs the paired phase alone; `-- <filter>` the criterion cases alone.

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput};
use weir::prelude::*;
use weir::runtime::ThreadPool;

const ITEMS: u64 = 200_000;
const EXPECTED: u64 = ITEMS * (ITEMS - 1) / 2;
const PREFETCHES: [u64; 2] = [16, 256];
const SPINNERS: [usize; 3] = [0, 2, 8];
const ROUNDS: usize = 21;

#[path = "support/paired.rs"]
mod paired;

#[path = "../tests/adversarial/harness/spinners.rs"]
mod spinners;

use spinners::Spinners;

fn weir(pool_a: &ThreadPool, pool_b: &ThreadPool, prefetch: u64) -> u64 {
    weir::range(0..ITEMS)
        .subscribe_on(pool_a.clone())
        .publish_on(pool_b.clone(), prefetch)
        .fold(0u64, |acc, x| acc.wrapping_add(x))
        .wait()
        .unwrap()
}

fn crossbeam(prefetch: u64) -> u64 {
    let (tx, rx) = crossbeam_channel::bounded::<u64>(prefetch as usize);
    std::thread::scope(|scope| {
        scope.spawn(move || {
            for x in 0..ITEMS {
                tx.send(x).unwrap();
            }
        });
        rx.iter().fold(0u64, u64::wrapping_add)
    })
}

fn pools() -> (ThreadPool, ThreadPool) {
    (
        ThreadPool::builder().name("busy-up").threads(1).build(),
        ThreadPool::builder().name("busy-down").threads(1).build(),
    )
}

fn bench(c: &mut Criterion) {
    let (pool_a, pool_b) = pools();
    for n in SPINNERS {
        let _spinners = Spinners::start(n);
        let mut group = c.benchmark_group(format!("busy_hop/spinners_{n}"));
        group.throughput(Throughput::Elements(ITEMS));
        group.sample_size(10);
        group.warm_up_time(Duration::from_millis(500));
        group.measurement_time(Duration::from_secs(3));
        for p in PREFETCHES {
            group.bench_with_input(BenchmarkId::new("weir", p), &p, |b, &p| {
                b.iter(|| assert_eq!(weir(&pool_a, &pool_b, p), EXPECTED))
            });
            group.bench_with_input(BenchmarkId::new("crossbeam", p), &p, |b, &p| {
                b.iter(|| assert_eq!(crossbeam(p), EXPECTED))
            });
        }
        group.finish();
    }
}

/// Items per second of one run of `run`, checking its sum.
fn rate(run: impl FnOnce() -> u64) -> f64 {
    ITEMS as f64 / paired::secs(|| assert_eq!(run(), EXPECTED, "wrong sum"))
}

/// The paired phase: see the module docs.
fn paired() {
    let (pool_a, pool_b) = pools();
    println!();
    println!("paired rounds ({ROUNDS} each): weir M items/s, crossbeam M items/s, median of weir ÷ crossbeam in the same round (range)");
    for n in SPINNERS {
        let _spinners = Spinners::start(n);
        for p in PREFETCHES {
            let mut ratios = Vec::new();
            let (mut ours, mut theirs) = (Vec::new(), Vec::new());
            for _ in 0..ROUNDS {
                let w = rate(|| weir(&pool_a, &pool_b, p));
                let x = rate(|| crossbeam(p));
                ours.push(w);
                theirs.push(x);
                ratios.push(w / x);
            }
            let ratio = paired::spread(&mut ratios);
            println!(
                "  spinners {n}, prefetch {p:3}: weir {:8.2}, crossbeam {:8.2}, ratio {:.2} ({:.2}-{:.2})",
                paired::spread(&mut ours).median / 1e6,
                paired::spread(&mut theirs).median / 1e6,
                ratio.median,
                ratio.min,
                ratio.max
            );
        }
    }
}

criterion::criterion_group!(benches, bench);

fn main() {
    paired::main_with_paired(benches, paired);
}
