//! What watching costs: the pipelines of `sync_pipeline` and `async_boundary` run
//! plain (no stage named, tracing off) and observed (every stage named into a
//! registry, a tracing subscriber listening at `INFO`, the production setting, or at
//! `DEBUG`, every event formatted), in one process, paired.
//!
//! Tracing is switched per run through a reload layer on one global subscriber
//! (`tracing_subscriber::reload`, `OFF` / `INFO` / `DEBUG`, written to `io::sink`),
//! so the pool threads of the async rows see the same setting as the caller. Naming
//! and tracing cost per subscription and per state change, never per item: the
//! issue's target is the observed rows within 5 % of the plain ones (ratio ≥ 0.95).
//!
//! Cases (each plain, observed at INFO, observed at DEBUG):
//! * `sync_fused`: `range(0..1M).map(x*3).filter(even).fold` (a fused loop; the
//!   range's start is a constant the compiler can see through the plain chain);
//! * `sync_fused_opaque_start`: the same with `range(black_box(0)..N)`;
//! * `sync_subscribed`: the same behind a wrapper that does not fuse, batches of 64;
//! * `hop_16`, `hop_256`: `range(0..10M).subscribe_on(pool A).publish_on(pool B,
//!   p).fold` (two busy threads).
//!
//! Criterion measures each row; then a paired phase runs [`ROUNDS`] rounds, each
//! running every case plain, at INFO and at DEBUG back to back, and prints the median
//! ratio observed ÷ plain (throughput) per case. Run: `cargo bench --bench
//! observability`.

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

/// Sets tracing's level for the whole process.
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

    fn set(&self, mode: Mode) {
        let level = match mode {
            Mode::Plain => LevelFilter::OFF,
            Mode::Info => LevelFilter::INFO,
            Mode::Debug => LevelFilter::DEBUG,
        };
        self.0.reload(level).expect("the subscriber is installed");
    }
}

/// How a run is watched.
#[derive(Clone, Copy)]
enum Mode {
    /// Nothing named, tracing off.
    Plain,
    /// Every stage named, tracing at INFO.
    Info,
    /// Every stage named, tracing at DEBUG.
    Debug,
}

impl Mode {
    const ALL: [Mode; 3] = [Mode::Plain, Mode::Info, Mode::Debug];

    fn row(self) -> &'static str {
        match self {
            Mode::Plain => "plain",
            Mode::Info => "observed_info",
            Mode::Debug => "observed_debug",
        }
    }

    fn named(self) -> bool {
        !matches!(self, Mode::Plain)
    }
}

/// The pools of the async rows, and the registry of the observed ones.
struct Env {
    a: ThreadPool,
    b: ThreadPool,
    registry: Registry,
}

fn sync_fused(env: &Env, observed: bool) -> u64 {
    fused(env, 0, observed)
}

fn sync_fused_opaque_start(env: &Env, observed: bool) -> u64 {
    fused(env, black_box(0), observed)
}

fn fused(env: &Env, start: u64, observed: bool) -> u64 {
    let sum = if observed {
        let r = &env.registry;
        weir::range(start..black_box(SYNC_N))
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
        weir::range(start..black_box(SYNC_N))
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

const CASES: [Case; 5] = [
    ("sync_fused", SYNC_N, sync_fused),
    ("sync_fused_opaque_start", SYNC_N, sync_fused_opaque_start),
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
        for mode in Mode::ALL {
            switch.set(mode);
            group.bench_function(mode.row(), |b| {
                b.iter(|| assert_eq!(run(&env, mode.named()), want))
            });
        }
        group.finish();
    }
    switch.set(Mode::Plain);
    assert!(
        env.registry.is_empty(),
        "every named stage left the registry"
    );

    // Paired: each round runs every case plain, at INFO and at DEBUG, back to back.
    println!("\npaired phase: {ROUNDS} rounds, median of observed ÷ plain throughput per round");
    for (name, n, run) in CASES {
        let want = expected(n, name);
        let (mut info, mut debug) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let mut secs = [0.0f64; 3];
            for (slot, mode) in Mode::ALL.into_iter().enumerate() {
                switch.set(mode);
                let start = Instant::now();
                assert_eq!(run(&env, mode.named()), want);
                secs[slot] = start.elapsed().as_secs_f64();
            }
            info.push(secs[0] / secs[1]);
            debug.push(secs[0] / secs[2]);
        }
        switch.set(Mode::Plain);
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            format!("{:.3} ({:.3} … {:.3})", v[ROUNDS / 2], v[0], v[ROUNDS - 1])
        };
        println!(
            "{name:>24}: named + INFO {}   named + DEBUG {}",
            median(&mut info),
            median(&mut debug)
        );
    }
    c.final_summary();
}
