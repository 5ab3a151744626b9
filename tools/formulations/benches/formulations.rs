//! weir's synchronous pipeline from a separate crate (a path dependency, the default
//! release profile of a user's crate), in several formulations, each next to the same
//! computation with `Iterator` and with rxRust (1.0.0-rc.6, `Local::from_iter`, which
//! enforces no demand). Run with `tools/formulations/run.sh`.
//!
//! Formulations of "triple, keep the even ones, add up" over `0..1_000_000`:
//!
//! * `mod`: closures, `x % 2 == 0`, `+` (the README's formulation);
//! * `and`: closures, `x & 1 == 0`, `wrapping_mul` and `wrapping_add`;
//! * `fn`: the `and` steps as `fn` items instead of closures;
//!
//! and for weir each of them ended by `fold_with(UNBOUNDED, ..)` and by `fold(..)`
//! (batched demand, the default), for `Iterator` by `fold` and by `sum`, and by `fold`
//! over `black_box(0)..black_box(N)`: with a constant start LLVM knows every item's
//! parity and folds four items into four adds. weir's fold fuses with `range`, `map`
//! and `filter` into one loop inlined here, so it gets the same closed form.
//!
//! `PAIRED=<rounds> tools/formulations/run.sh` runs paired rounds instead of criterion:
//! every case once per round (20 calls each, timed together), in a rotating order, and
//! prints each case's median per-round ratio to the `Iterator` fold and to rxRust of
//! its formulation (throughput ratios: above 1, faster).

use std::cell::Cell;
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rxrust::prelude::*;
use weir::demand::UNBOUNDED;
use weir::prelude::*;

const N: u64 = 1_000_000;

fn triple(x: u64) -> u64 {
    x.wrapping_mul(3)
}

fn even(x: &u64) -> bool {
    *x & 1 == 0
}

fn add(acc: u64, x: u64) -> u64 {
    acc.wrapping_add(x)
}

fn expected() -> u64 {
    (0..N).map(|x| x * 3).filter(|x| x % 2 == 0).sum()
}

/// Every case: `<formulation>/<implementation>` and the pipeline.
fn cases() -> Vec<(&'static str, Box<dyn Fn() -> u64>)> {
    vec![
        (
            "mod/iterator_fold",
            Box::new(|| {
                (0..black_box(N))
                    .map(|x| x * 3)
                    .filter(|x| x % 2 == 0)
                    .fold(0u64, |a, x| a + x)
            }),
        ),
        (
            "mod/iterator_sum",
            Box::new(|| {
                (0..black_box(N))
                    .map(|x| x * 3)
                    .filter(|x| x % 2 == 0)
                    .sum::<u64>()
            }),
        ),
        (
            "mod/iterator_fold_opaque_start",
            Box::new(|| {
                (black_box(0)..black_box(N))
                    .map(|x| x * 3)
                    .filter(|x| x % 2 == 0)
                    .fold(0u64, |a, x| a + x)
            }),
        ),
        (
            "mod/weir_fold_with_unbounded",
            Box::new(|| {
                weir::range(0..black_box(N))
                    .map(|x| x * 3)
                    .filter(|x| x % 2 == 0)
                    .fold_with(UNBOUNDED, 0u64, |a, x| a + x)
                    .wait()
                    .unwrap()
            }),
        ),
        (
            "mod/weir_fold",
            Box::new(|| {
                weir::range(0..black_box(N))
                    .map(|x| x * 3)
                    .filter(|x| x % 2 == 0)
                    .fold(0u64, |a, x| a + x)
                    .wait()
                    .unwrap()
            }),
        ),
        (
            "mod/rxrust",
            Box::new(|| {
                let total = Cell::new(0u64);
                Local::from_iter(0..black_box(N))
                    .map(|x| x * 3)
                    .filter(|x| x % 2 == 0)
                    .subscribe(|x| total.set(total.get() + x));
                total.get()
            }),
        ),
        (
            "and/iterator_fold",
            Box::new(|| {
                (0..black_box(N))
                    .map(|x| x.wrapping_mul(3))
                    .filter(|x| *x & 1 == 0)
                    .fold(0u64, |a, x| a.wrapping_add(x))
            }),
        ),
        (
            "and/iterator_fold_opaque_start",
            Box::new(|| {
                (black_box(0)..black_box(N))
                    .map(|x| x.wrapping_mul(3))
                    .filter(|x| *x & 1 == 0)
                    .fold(0u64, |a, x| a.wrapping_add(x))
            }),
        ),
        (
            "and/weir_fold_with_unbounded",
            Box::new(|| {
                weir::range(0..black_box(N))
                    .map(|x| x.wrapping_mul(3))
                    .filter(|x| *x & 1 == 0)
                    .fold_with(UNBOUNDED, 0u64, |a, x| a.wrapping_add(x))
                    .wait()
                    .unwrap()
            }),
        ),
        (
            "and/weir_fold",
            Box::new(|| {
                weir::range(0..black_box(N))
                    .map(|x| x.wrapping_mul(3))
                    .filter(|x| *x & 1 == 0)
                    .fold(0u64, |a, x| a.wrapping_add(x))
                    .wait()
                    .unwrap()
            }),
        ),
        (
            "and/rxrust",
            Box::new(|| {
                let total = Cell::new(0u64);
                Local::from_iter(0..black_box(N))
                    .map(|x| x.wrapping_mul(3))
                    .filter(|x| *x & 1 == 0)
                    .subscribe(|x| total.set(total.get().wrapping_add(x)));
                total.get()
            }),
        ),
        (
            "fn/iterator_fold",
            Box::new(|| (0..black_box(N)).map(triple).filter(even).fold(0u64, add)),
        ),
        (
            "fn/iterator_fold_opaque_start",
            Box::new(|| {
                (black_box(0)..black_box(N))
                    .map(triple)
                    .filter(even)
                    .fold(0u64, add)
            }),
        ),
        (
            "fn/weir_fold_with_unbounded",
            Box::new(|| {
                weir::range(0..black_box(N))
                    .map(triple)
                    .filter(even)
                    .fold_with(UNBOUNDED, 0u64, add)
                    .wait()
                    .unwrap()
            }),
        ),
        (
            "fn/weir_fold",
            Box::new(|| {
                weir::range(0..black_box(N))
                    .map(triple)
                    .filter(even)
                    .fold(0u64, add)
                    .wait()
                    .unwrap()
            }),
        ),
    ]
}

/// Paired rounds (see the module docs): per case, the median over rounds of
/// `time(peer) / time(case)` for the peers `<formulation>/iterator_fold` and
/// `<formulation>/rxrust`.
fn paired(rounds: usize) {
    const CALLS: usize = 20;
    let cases = cases();
    let mut times = vec![Vec::with_capacity(rounds); cases.len()];
    for round in 0..rounds {
        for k in 0..cases.len() {
            let i = (round + k) % cases.len();
            let start = std::time::Instant::now();
            for _ in 0..CALLS {
                black_box(cases[i].1());
            }
            times[i].push(start.elapsed().as_secs_f64());
        }
    }
    let index = |name: &str| cases.iter().position(|(n, _)| *n == name);
    let median = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    println!("paired rounds: {rounds} x {CALLS} calls of 1M items per case");
    for (i, (name, _)) in cases.iter().enumerate() {
        let formulation = name.split('/').next().unwrap_or_default();
        let mut line = format!("{name:40} {:6.2} G items/s", {
            let t = median(times[i].clone());
            (CALLS as f64 * N as f64) / t / 1e9
        });
        for peer in ["iterator_fold", "rxrust"] {
            if let Some(j) = index(&format!("{formulation}/{peer}")) {
                let ratios = (0..rounds).map(|r| times[j][r] / times[i][r]).collect();
                line += &format!("   vs {peer} {:.3}", median(ratios));
            }
        }
        println!("{line}");
    }
}

fn formulations(c: &mut Criterion) {
    if let Some(rounds) = std::env::var("PAIRED").ok().and_then(|r| r.parse().ok()) {
        return paired(rounds);
    }
    let cases = cases();
    let expected = expected();
    let mut group = c.benchmark_group("formulations");
    group.throughput(Throughput::Elements(N));
    for (name, case) in &cases {
        assert_eq!(case(), expected, "{name}");
        group.bench_function(*name, |b| b.iter(case));
    }
    group.finish();
}

criterion_group!(benches, formulations);
criterion_main!(benches);
