//! Synchronous pipeline: `range(0..1_000_000).map(x * 3).filter(even)` into a sum.
//!
//! Peers in the same run: the same `Iterator` chain (the ceiling), the same chain
//! with its start hidden from the compiler too (`black_box(0)..black_box(N)`), and
//! `futures::stream::iter` under `block_on`.
//!
//! Why two `Iterator` rows: with the start a constant at the call site, LLVM knows
//! the parity of every item of `0..N` and turns "triple, keep the even ones, add up"
//! into four adds per four items. weir's range keeps its start in the stage's state
//! (the pass runs out of line, after `subscribe`), so its loop is the one LLVM emits
//! for an unknown start: the same loop as the second row's, instruction for
//! instruction. The second row is what the hand-over itself costs against.
//!
//! Fusion: a fold at the end of `range` and closure stages subscribes nothing; the
//! chain runs as one loop nested like the `Iterator` chain's, in the caller, so the
//! compiler sees the range's start again (rows `weir_unbounded`, `weir_batch64`).
//! The `weir_subscribed_*` rows put the range behind a wrapper publisher that only
//! forwards `subscribe` (as a user's own publisher would): that chain runs through
//! subscriptions, demand and batch hand-over, the path of every chain that does not
//! fuse.
//!
//! Targets: weir ≥ 0.8× the `Iterator` chain; subscribed with unbounded demand ≥ 0.5×
//! it; subscribed batches of 64 ≥ 0.8× subscribed unbounded; weir ≥ 3×
//! `futures::stream`. Run: `cargo bench --bench sync_pipeline`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use weir::demand::UNBOUNDED;
use weir::prelude::*;

#[path = "../tests/support/unfused.rs"]
mod unfused;
use unfused::unfused;

const N: u64 = 1_000_000;

fn weir_sum(prefetch: u64) -> u64 {
    weir::range(0..black_box(N))
        .map(|x| x * 3)
        .filter(|x| x % 2 == 0)
        .fold_with(prefetch, 0u64, |acc, x| acc + x)
        .wait()
        .expect("range does not fail")
}

fn weir_subscribed_sum(prefetch: u64) -> u64 {
    unfused(weir::range(0..black_box(N)))
        .map(|x| x * 3)
        .filter(|x| x % 2 == 0)
        .fold_with(prefetch, 0u64, |acc, x| acc + x)
        .wait()
        .expect("range does not fail")
}

fn iterator_sum() -> u64 {
    (0..black_box(N))
        .map(|x| x * 3)
        .filter(|x| x % 2 == 0)
        .sum()
}

fn iterator_opaque_start_sum() -> u64 {
    (black_box(0)..black_box(N))
        .map(|x| x * 3)
        .filter(|x| x % 2 == 0)
        .sum()
}

fn futures_sum() -> u64 {
    use futures::stream::{self, StreamExt};
    futures::executor::block_on(
        stream::iter(0..black_box(N))
            .map(|x| x * 3)
            .filter(|x| futures::future::ready(x % 2 == 0))
            .fold(0u64, |acc, x| futures::future::ready(acc + x)),
    )
}

fn sync_pipeline(c: &mut Criterion) {
    let expected = iterator_sum();
    assert_eq!(weir_sum(UNBOUNDED), expected);
    assert_eq!(weir_subscribed_sum(64), expected);
    assert_eq!(weir_sum(64), expected);
    assert_eq!(iterator_opaque_start_sum(), expected);
    assert_eq!(futures_sum(), expected);

    let mut group = c.benchmark_group("sync/map_filter_sum/1M");
    group.throughput(Throughput::Elements(N));
    group.bench_function("iterator", |b| b.iter(iterator_sum));
    group.bench_function("iterator_opaque_start", |b| {
        b.iter(iterator_opaque_start_sum)
    });
    group.bench_function("weir_unbounded", |b| b.iter(|| weir_sum(UNBOUNDED)));
    group.bench_function("weir_batch64", |b| b.iter(|| weir_sum(64)));
    group.bench_function("weir_subscribed_unbounded", |b| {
        b.iter(|| weir_subscribed_sum(UNBOUNDED))
    });
    group.bench_function("weir_subscribed_batch64", |b| {
        b.iter(|| weir_subscribed_sum(64))
    });
    group.bench_function("futures_stream", |b| b.iter(futures_sum));
    group.finish();
}

criterion_group!(benches, sync_pipeline);
criterion_main!(benches);
