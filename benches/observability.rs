//! What watching costs: the pipelines of `sync_pipeline` and `async_boundary` run
//! plain (no stage named, tracing off) and observed (every stage named into a
//! registry, a tracing subscriber listening at `DEBUG`), in one process, paired.
//!
//! Tracing is switched per run through a reload layer on one global subscriber
//! (`tracing_subscriber::reload`, `OFF` ↔ `DEBUG`, written to `io::sink`), so the
//! pool threads of the async rows see the same setting as the caller. Naming and
//! tracing cost per subscription and per state change, never per item: the issue's
//! target is the observed rows within 5 % of the plain ones (ratio ≥ 0.95).
//!
//! Cases (each plain and observed):
//! * `sync_fused`: `range(0..1M).map(x*3).filter(even).fold` (a fused loop);
//! * `sync_subscribed`: the same behind a wrapper that does not fuse, batches of 64;
//! * `hop_16`, `hop_256`: `range(0..10M).subscribe_on(pool A).publish_on(pool B,
//!   p).fold` (two busy threads).
//!
//! Criterion measures each row; then a paired phase runs [`ROUNDS`] rounds, each
//! running every case plain then observed back to back, and prints the median ratio
//! observed ÷ plain (throughput) per case. Run: `cargo bench --bench observability`.

use std::hint::black_box;
use std::time::Instant;

use criterion::{Criterion, Throughput};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::prelude::*;
use tracing_subscriber::reload;
use weir::demand::UNBOUNDED;
use weir::metrics::Registry;
use weir::prelude::*;
use weir::runtime::ThreadPool;

#[path = "../tests/support/unfused.rs"]
mod unfused;
use unfused::unfused;

const SYNC_N: u64 = 1_000_000;
const HOP_N: u64 = 10_000_000;
/// Rounds of the paired phase.
const ROUNDS: usize = 7;

/// Turns tracing on (`DEBUG`) or off for the whole process.
struct Switch(reload::Handle<LevelFilter, tracing_subscriber::Registry>);

impl Switch {
    fn install() -> Switch {
        let (filter, handle) = reload::Layer::new(LevelFilter::OFF);
        tracing_subscriber::registry()
            .with(filter)
            .with(tracing_subscriber::fmt::layer().with_writer(std::io::sink))
            .init();
        Switch(handle)
    }

    fn set(&self, on: bool) {
        let level = if on {
            LevelFilter::DEBUG
        } else {
            LevelFilter::OFF
        };
        self.0.reload(level).expect("the subscriber is installed");
    }
}

/// The pools of the async rows, and the registry of the observed ones.
struct Env {
    a: ThreadPool,
    b: ThreadPool,
    registry: Registry,
}

fn sync_fused(env: &Env, observed: bool) -> u64 {
    let sum = if observed {
        let r = &env.registry;
        weir::range(0..black_box(SYNC_N))
            .name("source")
            .registry(r)
            .map(|x| x * 3)
            .name("triple")
            .registry(r)
            .filter(|x| x % 2 == 0)
            .name("even")
            .registry(r)
            .fold_with(UNBOUNDED, 0u64, |acc, x| acc + x)
            .wait()
    } else {
        weir::range(0..black_box(SYNC_N))
            .map(|x| x * 3)
            .filter(|x| x % 2 == 0)
            .fold_with(UNBOUNDED, 0u64, |acc, x| acc + x)
            .wait()
    };
    sum.expect("range does not fail")
}

fn sync_subscribed(env: &Env, observed: bool) -> u64 {
    let sum = if observed {
        let r = &env.registry;
        unfused(weir::range(0..black_box(SYNC_N)))
            .name("source")
            .registry(r)
            .map(|x| x * 3)
            .name("triple")
            .registry(r)
            .filter(|x| x % 2 == 0)
            .name("even")
            .registry(r)
            .fold_with(64, 0u64, |acc, x| acc + x)
            .wait()
    } else {
        unfused(weir::range(0..black_box(SYNC_N)))
            .map(|x| x * 3)
            .filter(|x| x % 2 == 0)
            .fold_with(64, 0u64, |acc, x| acc + x)
            .wait()
    };
    sum.expect("range does not fail")
}

fn hop(env: &Env, prefetch: u64, observed: bool) -> u64 {
    let sum = if observed {
        let r = &env.registry;
        weir::range(0..black_box(HOP_N))
            .name("source")
            .registry(r)
            .subscribe_on(env.a.clone())
            .publish_on(env.b.clone(), prefetch)
            .name("hop")
            .registry(r)
            .fold(0u64, |acc, x| acc.wrapping_add(x))
            .wait()
    } else {
        weir::range(0..black_box(HOP_N))
            .subscribe_on(env.a.clone())
            .publish_on(env.b.clone(), prefetch)
            .fold(0u64, |acc, x| acc.wrapping_add(x))
            .wait()
    };
    sum.expect("range does not fail")
}

type Case = (&'static str, u64, fn(&Env, bool) -> u64);

const CASES: [Case; 4] = [
    ("sync_fused", SYNC_N, sync_fused),
    ("sync_subscribed", SYNC_N, sync_subscribed),
    ("hop_16", HOP_N, |env, observed| hop(env, 16, observed)),
    ("hop_256", HOP_N, |env, observed| hop(env, 256, observed)),
];

fn expected(n: u64, case: &str) -> u64 {
    if case.starts_with("sync") {
        (0..n).map(|x| x * 3).filter(|x| x % 2 == 0).sum()
    } else {
        n * (n - 1) / 2
    }
}

fn main() {
    let switch = Switch::install();
    let env = Env {
        a: ThreadPool::builder().name("obs-a").threads(1).build(),
        b: ThreadPool::builder().name("obs-b").threads(1).build(),
        registry: Registry::new(),
    };
    let mut c = Criterion::default().configure_from_args();
    for (name, n, run) in CASES {
        let want = expected(n, name);
        let mut group = c.benchmark_group(format!("observability/{name}"));
        group.throughput(Throughput::Elements(n));
        group.sample_size(if n == HOP_N { 10 } else { 50 });
        for observed in [false, true] {
            switch.set(observed);
            let row = if observed { "observed" } else { "plain" };
            group.bench_function(row, |b| b.iter(|| assert_eq!(run(&env, observed), want)));
        }
        group.finish();
    }
    switch.set(false);
    assert!(
        env.registry.is_empty(),
        "every named stage left the registry"
    );

    // Paired: each round runs every case plain then observed, back to back.
    println!("\npaired phase: {ROUNDS} rounds, median of observed ÷ plain throughput per round");
    for (name, n, run) in CASES {
        let want = expected(n, name);
        let mut ratios = Vec::with_capacity(ROUNDS);
        for _ in 0..ROUNDS {
            let mut secs = [0.0f64; 2];
            for (slot, observed) in [(0, false), (1, true)] {
                switch.set(observed);
                let start = Instant::now();
                assert_eq!(run(&env, observed), want);
                secs[slot] = start.elapsed().as_secs_f64();
            }
            ratios.push(secs[0] / secs[1]);
        }
        switch.set(false);
        ratios.sort_by(f64::total_cmp);
        println!(
            "{name:>16}: observed ÷ plain = {:.3} (rounds {:.3} … {:.3})",
            ratios[ROUNDS / 2],
            ratios[0],
            ratios[ROUNDS - 1]
        );
    }
    c.final_summary();
}
