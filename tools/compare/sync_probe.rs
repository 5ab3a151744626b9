//! Same-process comparison of this checkout's synchronous paths (the `sync_pipeline`
//! and `operators` benches' pipelines) with an earlier revision's, built by
//! `PROBE=sync_probe tools/compare/run.sh [REVISION]` (which names the earlier crate
//! `weir_base`).
//!
//! Each round runs every case once on each build, alternating which goes first; a
//! sample is `REPS` runs of the pipeline over `N` items. The ratio (current ÷ base:
//! above 1 is faster now) is taken inside the round; the table reports the median and
//! the geometric mean of the rounds' ratios. Both builds must agree on every checksum.
//!
//! Environment: `ROUNDS` (default 30), `N` (default 1,000,000), `REPS` (default 5),
//! `ONLY` (cases to run, by index, comma-separated; default all).

use std::time::Instant;

mod common;
use common::{env_or, only, Paired};

/// The cases, written once for each build.
macro_rules! cases {
    ($module:ident, $krate:ident) => {
        mod $module {
            use std::hint::black_box;
            use $krate::demand::UNBOUNDED;
            use $krate::prelude::*;
            use $krate::Overflow;

            /// The operators bench's checksum step.
            #[inline(always)]
            fn mix(acc: u64, x: u64) -> u64 {
                acc ^ x.wrapping_mul(0x9E37_79B9_7F4A_7C15)
            }

            fn sum<P: Publisher<Item = u64>>(publisher: P) -> u64 {
                publisher.fold_with(UNBOUNDED, 0u64, mix).wait().expect("no failure")
            }

            fn pipeline(n: u64, prefetch: u64) -> u64 {
                $krate::range(0..black_box(n))
                    .map(|x| x * 3)
                    .filter(|x| x % 2 == 0)
                    .fold_with(prefetch, 0u64, |acc, x| acc + x)
                    .wait()
                    .expect("no failure")
            }

            /// Runs case `which` over `n` items.
            pub fn run(which: usize, n: u64) -> u64 {
                let n = black_box(n);
                match which {
                    0 => pipeline(n, UNBOUNDED),
                    1 => pipeline(n, 64),
                    2 => sum($krate::range(0..n).map(|x| x ^ 0x5a)),
                    3 => sum($krate::range(0..n).filter(|x| x % 3 != 0)),
                    4 => sum($krate::range(0..u64::MAX).take(n)),
                    5 => sum($krate::range(0..n).on_backpressure_drop()),
                    6 => sum($krate::range(0..n).filter_map(|x| (x % 3 != 0).then_some(x ^ 1))),
                    7 => sum($krate::range(0..n + 100).skip(100)),
                    8 => sum($krate::range(0..n * 2).take_while(move |x| *x < n)),
                    9 => sum($krate::range(0..n + 100).skip_while(|x| *x < 100)),
                    10 => sum($krate::range(0..n).scan(0u64, |acc, x| acc ^ x)),
                    11 => sum($krate::range(0..n).inspect(|x| assert!(*x < u64::MAX))),
                    12 => sum(
                        $krate::range(0..n)
                            .buffer(64)
                            .map(|b| b.iter().fold(0u64, |a, &x| mix(a, x))),
                    ),
                    13 => sum($krate::range(0..n).limit_rate(256, 192)),
                    14 => sum($krate::range(0..n).on_backpressure_buffer(256, Overflow::DropOldest)),
                    15 => sum($krate::range(0..n).on_backpressure_latest()),
                    16 => sum($krate::range(0..n).conflate(|a, b| a.max(b))),
                    17 => sum(
                        $krate::range(0..n)
                            .map(|x| x.wrapping_mul(0x9E37_79B9_7F4A_7C15))
                            .reduce(|a, b| a ^ b),
                    ),
                    18 => sum($krate::range(0..n / 2).merge($krate::range(n / 2..n))),
                    19 => sum($krate::range(0..n / 2).concat($krate::range(n / 2..n))),
                    20 => sum($krate::range(0..n / 1000).flat_map(
                        |i| $krate::range(i * 1000..(i + 1) * 1000),
                        4,
                        256,
                    )),
                    21 => sum($krate::range(0..n).zip($krate::range(0..n), |a, b| a ^ (b << 1))),
                    _ => sum($krate::merge(
                        (0..4)
                            .map(|i| $krate::range(i * n / 4..(i + 1) * n / 4).boxed())
                            .collect::<Vec<_>>(),
                    )),
                }
            }
        }
    };
}

cases!(current, weir);
cases!(base, weir_base);

const NAMES: [&str; 23] = [
    "sync_pipeline: unbounded",
    "sync_pipeline: batches of 64",
    "map",
    "filter",
    "take",
    "on_backpressure_drop",
    "filter_map",
    "skip",
    "take_while",
    "skip_while",
    "scan",
    "inspect",
    "buffer(64)",
    "limit_rate(256,192)",
    "on_backpressure_buffer(256)",
    "on_backpressure_latest",
    "conflate",
    "reduce",
    "merge",
    "concat",
    "flat_map",
    "zip",
    "weir::merge of 4",
];

/// `reps` runs of `f`, each checked against `expected`; million items/s over them.
fn sample(reps: u32, n: u64, expected: u64, name: &str, f: impl Fn() -> u64) -> f64 {
    let start = Instant::now();
    for _ in 0..reps {
        assert_eq!(f(), expected, "{name}: the builds disagree");
    }
    n as f64 * f64::from(reps) / start.elapsed().as_secs_f64() / 1e6
}

fn main() {
    let rounds: usize = env_or("ROUNDS", 30);
    let n: u64 = env_or("N", 1_000_000);
    let reps: u32 = env_or("REPS", 5);
    let only = only();
    println!("{rounds} rounds of {reps} × {n} items; ratio = current ÷ base (same round)");
    println!("| case | current M/s | base M/s | ratio median | ratio geomean |");
    println!("|---|---|---|---|---|");
    let started = Instant::now();
    for (which, name) in NAMES.iter().enumerate() {
        if only.as_ref().is_some_and(|only| !only.contains(&which)) {
            continue;
        }
        let expected = base::run(which, n);
        let paired = Paired::run(
            rounds,
            || sample(reps, n, expected, name, || current::run(which, n)),
            || sample(reps, n, expected, name, || base::run(which, n)),
        );
        println!("| {name} | {} |", paired.columns(0));
    }
    eprintln!("took {:.0} s", started.elapsed().as_secs_f64());
}
