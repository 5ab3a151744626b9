//! Same-process comparison of this checkout's async boundary with an earlier revision's
//! (built by `run.sh`, which names the earlier crate `weir_base`).
//!
//! Why one process: the machines we measure on drift between speed modes over seconds
//! (a neighbour on the host), so two binaries run one after the other compare modes,
//! not code. Here each round runs every formulation once on each build, alternating
//! which goes first, each sample a few tens of milliseconds; the ratio is taken inside
//! the round, and the table reports the median and the geometric mean of the rounds'
//! ratios (current ÷ base: above 1 is faster now).
//!
//! Environment: `ROUNDS` (default 40), `N` items per sample (default 2,000,000),
//! `PREFETCH` (comma-separated, default `16,64,256,1024`), `ONLY` (formulations to run,
//! by index, comma-separated; default all), `SIDE` (`current` or `base`: run only that
//! build, for a profiler; no ratios then).

use std::time::Instant;

mod common;
use common::{env_list, env_or, median, only, Paired};

/// The formulations, written once for each build.
macro_rules! formulations {
    ($module:ident, $krate:ident) => {
        mod $module {
            use std::time::Instant;
            use $krate::prelude::*;
            use $krate::runtime::ThreadPool;

            /// A build's two single-thread pools (the producer's and the consumer's).
            pub struct Pools {
                a: ThreadPool,
                b: ThreadPool,
            }

            impl Pools {
                pub fn new() -> Self {
                    Pools {
                        a: ThreadPool::builder().name("a").threads(1).build(),
                        b: ThreadPool::builder().name("b").threads(1).build(),
                    }
                }
            }

            /// Runs formulation `which` over `n` items; returns million items/s.
            pub fn run(which: usize, n: u64, prefetch: u64, pools: &Pools) -> f64 {
                let start = Instant::now();
                let sum = match which {
                    // The bench's pipeline: producer on pool a, consumer on pool b.
                    0 => $krate::range(0..n)
                        .subscribe_on(pools.a.clone())
                        .publish_on(pools.b.clone(), prefetch)
                        .fold(0u64, |acc, x| acc.wrapping_add(x))
                        .wait(),
                    // Operators on both sides of the boundary.
                    1 => $krate::range(0..n)
                        .subscribe_on(pools.a.clone())
                        .map(|x| x ^ 1)
                        .publish_on(pools.b.clone(), prefetch)
                        .filter(|x| x % 7 != 3)
                        .fold(0u64, |acc, x| acc.wrapping_add(x ^ 1))
                        .wait(),
                    // No subscribe_on: the range emits inside the drain's replenish.
                    _ => $krate::range(0..n)
                        .publish_on(pools.b.clone(), prefetch)
                        .fold(0u64, |acc, x| acc.wrapping_add(x))
                        .wait(),
                };
                let expected = (0..n)
                    .filter(|x| which != 1 || (x ^ 1) % 7 != 3)
                    .fold(0u64, |acc, x| acc.wrapping_add(x));
                assert_eq!(sum.expect("the pipeline completes"), expected);
                n as f64 / start.elapsed().as_secs_f64() / 1e6
            }
        }
    };
}

formulations!(current, weir);
formulations!(base, weir_base);

const NAMES: [&str; 3] = [
    "range → subscribe_on → publish_on → fold",
    "range → subscribe_on → map → publish_on → filter → fold",
    "range → publish_on → fold",
];

fn main() {
    let rounds: usize = env_or("ROUNDS", 40);
    let n: u64 = env_or("N", 2_000_000);
    let prefetches: Vec<u64> = env_list("PREFETCH", "16,64,256,1024");
    let only = only();
    let side = std::env::var("SIDE").ok();
    if let Some(side) = side.as_deref() {
        profile(side, rounds, n, &prefetches, only.as_deref());
        return;
    }
    let (now, then) = (current::Pools::new(), base::Pools::new());
    println!("{rounds} rounds of {n} items; ratio = current ÷ base (same round)");
    println!("| formulation | prefetch | current M/s | base M/s | ratio median | ratio geomean |");
    println!("|---|---|---|---|---|---|");
    let started = Instant::now();
    for (which, name) in NAMES.iter().enumerate() {
        if only.as_ref().is_some_and(|only| !only.contains(&which)) {
            continue;
        }
        for &prefetch in &prefetches {
            let paired = Paired::run(
                rounds,
                || current::run(which, n, prefetch, &now),
                || base::run(which, n, prefetch, &then),
            );
            println!("| {name} | {prefetch} | {} |", paired.columns(1));
        }
    }
    eprintln!("took {:.0} s", started.elapsed().as_secs_f64());
}

/// `SIDE=current|base`: run one build only (for a profiler attached to the process);
/// prints each formulation's median throughput.
fn profile(side: &str, rounds: usize, n: u64, prefetches: &[u64], only: Option<&[usize]>) {
    let (now, then) = (current::Pools::new(), base::Pools::new());
    for which in 0..NAMES.len() {
        if only.is_some_and(|only| !only.contains(&which)) {
            continue;
        }
        for &prefetch in prefetches {
            let samples = (0..rounds)
                .map(|_| match side {
                    "current" => current::run(which, n, prefetch, &now),
                    "base" => base::run(which, n, prefetch, &then),
                    other => panic!("SIDE: `current` or `base`, not `{other}`"),
                })
                .collect();
            println!(
                "{side} | {} | {prefetch} | {:.1} M/s",
                NAMES[which],
                median(samples)
            );
        }
    }
}
