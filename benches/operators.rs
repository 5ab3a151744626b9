//! Each operator's throughput next to the equivalent `Iterator` code, in one run.
//!
//! Every case pushes 1,000,000 `u64`s from `range` through one operator into a
//! checksum (`fold_with(UNBOUNDED, ..)` with [`mix`], which the compiler cannot turn
//! into a closed form), and the `Iterator` twin does the same work, so the
//! ratio `weir / iterator` is the cost of the operator's demand machinery. `map`,
//! `filter`, `filter_map` and `inspect` after `range` fuse into one loop with the fold
//! (no demand machinery at all), and so does a `merge` of two `range`s; their
//! `*_subscribed` rows put the range behind a publisher that does not fuse, to measure
//! them subscribed as well. Target:
//! report the ratio (the README keeps the latest table); no stage may allocate per
//! item (checked by the tests in `tests/alloc/`, not here).
//!
//! Run: `cargo bench --bench operators`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use weir::prelude::*;
use weir::Overflow;

#[path = "support/twins.rs"]
mod twins;
use twins::{bench_twins, mix, sum, Case};

#[path = "../tests/support/unfused.rs"]
mod unfused;
use unfused::unfused;

const N: u64 = 1_000_000;

fn operators(c: &mut Criterion) {
    let mut group = c.benchmark_group("operators/1M");
    group.throughput(Throughput::Elements(N));

    // Each case: (name, weir pipeline, Iterator twin). Both must agree.
    let cases: [Case; 26] = [
        (
            "map",
            || sum(weir::range(0..black_box(N)).map(|x| x ^ 0x5a)),
            || (0..black_box(N)).map(|x| x ^ 0x5a).fold(0u64, mix),
        ),
        (
            "filter",
            || sum(weir::range(0..black_box(N)).filter(|x| x % 3 != 0)),
            || (0..black_box(N)).filter(|x| x % 3 != 0).fold(0u64, mix),
        ),
        (
            "take",
            || sum(weir::range(0..u64::MAX).take(black_box(N))),
            || (0..u64::MAX).take(black_box(N) as usize).fold(0u64, mix),
        ),
        (
            "on_backpressure_drop",
            || sum(weir::range(0..black_box(N)).on_backpressure_drop()),
            || (0..black_box(N)).fold(0u64, mix),
        ),
        (
            "filter_map",
            || sum(weir::range(0..black_box(N)).filter_map(|x| (x % 3 != 0).then_some(x ^ 1))),
            || {
                (0..black_box(N))
                    .filter_map(|x| (x % 3 != 0).then_some(x ^ 1))
                    .fold(0u64, mix)
            },
        ),
        (
            "skip",
            || sum(weir::range(0..black_box(N) + 100).skip(100)),
            || (0..black_box(N) + 100).skip(100).fold(0u64, mix),
        ),
        (
            "take_while",
            || sum(weir::range(0..black_box(N) * 2).take_while(|x| *x < N)),
            || (0..black_box(N) * 2).take_while(|x| *x < N).fold(0u64, mix),
        ),
        (
            // The same with a start the compiler cannot see (as a source's position
            // is at run time): the twin's loop is then not unrolled either.
            "take_while_runtime_start",
            || sum(weir::range(black_box(0)..black_box(N) * 2).take_while(|x| *x < N)),
            || {
                (black_box(0)..black_box(N) * 2)
                    .take_while(|x| *x < N)
                    .fold(0u64, mix)
            },
        ),
        (
            "skip_while",
            || sum(weir::range(0..black_box(N) + 100).skip_while(|x| *x < 100)),
            || {
                (0..black_box(N) + 100)
                    .skip_while(|x| *x < 100)
                    .fold(0u64, mix)
            },
        ),
        (
            "scan",
            || sum(weir::range(0..black_box(N)).scan(0u64, |acc, x| acc ^ x)),
            || {
                (0..black_box(N))
                    .scan(0u64, |acc, x| {
                        *acc ^= x;
                        Some(*acc)
                    })
                    .fold(0u64, mix)
            },
        ),
        (
            "inspect",
            || sum(weir::range(0..black_box(N)).inspect(|x| assert!(*x < u64::MAX))),
            || {
                (0..black_box(N))
                    .inspect(|x| assert!(*x < u64::MAX))
                    .fold(0u64, mix)
            },
        ),
        (
            "buffer(64)",
            || {
                sum(weir::range(0..black_box(N))
                    .buffer(64)
                    .map(|b| b.iter().fold(0u64, |a, &x| mix(a, x))))
            },
            || {
                let items: Vec<u64> = (0..black_box(N)).collect();
                items
                    .chunks(64)
                    .map(|b| b.iter().fold(0u64, |a, &x| mix(a, x)))
                    .fold(0u64, mix)
            },
        ),
        (
            "limit_rate(256,192)",
            || sum(weir::range(0..black_box(N)).limit_rate(256, 192)),
            || (0..black_box(N)).fold(0u64, mix),
        ),
        (
            "on_backpressure_buffer(256)",
            || sum(weir::range(0..black_box(N)).on_backpressure_buffer(256, Overflow::DropOldest)),
            || (0..black_box(N)).fold(0u64, mix),
        ),
        (
            "on_backpressure_latest",
            || sum(weir::range(0..black_box(N)).on_backpressure_latest()),
            || (0..black_box(N)).fold(0u64, mix),
        ),
        (
            "conflate",
            || sum(weir::range(0..black_box(N)).conflate(|a, b| a.max(b))),
            || (0..black_box(N)).fold(0u64, mix),
        ),
        (
            "reduce",
            || {
                sum(weir::range(0..black_box(N))
                    .map(|x| x.wrapping_mul(0x9E37_79B9_7F4A_7C15))
                    .reduce(|a, b| a ^ b))
            },
            || {
                let reduced = (0..black_box(N))
                    .map(|x| x.wrapping_mul(0x9E37_79B9_7F4A_7C15))
                    .reduce(|a, b| a ^ b);
                mix(0, reduced.unwrap_or(0))
            },
        ),
        (
            "merge",
            || sum(weir::range(0..black_box(N) / 2).merge(weir::range(N / 2..N))),
            || (0..black_box(N) / 2).chain(N / 2..N).fold(0u64, mix),
        ),
        (
            "merge_subscribed",
            || sum(unfused(weir::range(0..black_box(N) / 2)).merge(unfused(weir::range(N / 2..N)))),
            || (0..black_box(N) / 2).chain(N / 2..N).fold(0u64, mix),
        ),
        (
            "concat",
            || sum(weir::range(0..black_box(N) / 2).concat(weir::range(N / 2..N))),
            || (0..black_box(N) / 2).chain(N / 2..N).fold(0u64, mix),
        ),
        (
            "flat_map",
            || {
                sum(weir::range(0..black_box(N) / 1000).flat_map(
                    |i| weir::range(i * 1000..(i + 1) * 1000),
                    4,
                    256,
                ))
            },
            || {
                (0..black_box(N) / 1000)
                    .flat_map(|i| i * 1000..(i + 1) * 1000)
                    .fold(0u64, mix)
            },
        ),
        (
            "zip",
            || sum(weir::range(0..black_box(N)).zip(weir::range(0..N), |a, b| a ^ (b << 1))),
            || {
                (0..black_box(N))
                    .zip(0..N)
                    .map(|(a, b)| a ^ (b << 1))
                    .fold(0u64, mix)
            },
        ),
        (
            "map_subscribed",
            || sum(unfused(weir::range(0..black_box(N))).map(|x| x ^ 0x5a)),
            || (0..black_box(N)).map(|x| x ^ 0x5a).fold(0u64, mix),
        ),
        (
            "filter_subscribed",
            || sum(unfused(weir::range(0..black_box(N))).filter(|x| x % 3 != 0)),
            || (0..black_box(N)).filter(|x| x % 3 != 0).fold(0u64, mix),
        ),
        (
            "filter_map_subscribed",
            || {
                sum(unfused(weir::range(0..black_box(N)))
                    .filter_map(|x| (x % 3 != 0).then_some(x ^ 1)))
            },
            || {
                (0..black_box(N))
                    .filter_map(|x| (x % 3 != 0).then_some(x ^ 1))
                    .fold(0u64, mix)
            },
        ),
        (
            "inspect_subscribed",
            || sum(unfused(weir::range(0..black_box(N))).inspect(|x| assert!(*x < u64::MAX))),
            || {
                (0..black_box(N))
                    .inspect(|x| assert!(*x < u64::MAX))
                    .fold(0u64, mix)
            },
        ),
    ];
    bench_twins(&mut group, &cases);
    group.finish();
}

criterion_group!(benches, operators);
criterion_main!(benches);
