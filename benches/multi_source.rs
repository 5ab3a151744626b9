//! The multi-source operators against the `futures` stream combinators and the
//! `Iterator` chain, in one run.
//!
//! All cases sum 1,000,000 `u64`s with an xor-multiply checksum that the compiler
//! cannot turn into a closed form; every source is synchronous (`range`,
//! `stream::iter`), so what is measured is the operator's hand-over, not a producer.
//!
//! * `zip`: two sources of 1M, combined with `a ^ (b << 1)`. weir's `zip` summed two
//!   ways (`fold_with(UNBOUNDED, ..)`, and `fold(..)` with its default batched
//!   demand), against `futures::stream::StreamExt::zip` + `map` + `fold` driven by
//!   `block_on`, and `Iterator::zip`.
//! * `flat_map`: 1,000 inners of 1,000: weir's `flat_map(f, 4, 256)` and
//!   `concat_map(f, 256)` against `futures`' `flat_map` (sequential, like `flatten`)
//!   and `flatten_unordered(4)`, and `Iterator::flat_map`.
//! * `merge`: four sources of 250,000: `weir::merge` (summed three ways: unbounded,
//!   `fold`'s default, and `fold_with(64, ..)`), which fuses (the sources are
//!   `range`s: the fold takes them in turn), and the same three with each `range`
//!   behind a publisher that does not fuse, as a user's own publisher would be (the
//!   merging stage's lanes; `fold_with(64, ..)` takes parts of their windows),
//!   against `futures`' `select_all`, and the chained `Iterator`.
//!
//! Run: `cargo bench --bench multi_source` (about two minutes).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use futures::executor::block_on;
use futures::stream::{self, StreamExt as _};
use weir::demand::UNBOUNDED;
use weir::prelude::*;

#[path = "../tests/support/unfused.rs"]
mod unfused;
use unfused::unfused;

const N: u64 = 1_000_000;
const INNERS: u64 = 1_000;
const SOURCES: u64 = 4;

/// The checksum step: an xor of scrambled items.
#[inline(always)]
fn mix(acc: u64, x: u64) -> u64 {
    acc ^ x.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

#[inline(always)]
fn pair(a: u64, b: u64) -> u64 {
    a ^ (b << 1)
}

/// Sum a weir publisher with unbounded demand.
fn sum_unbounded<P: Publisher<Item = u64>>(publisher: P) -> u64 {
    publisher
        .fold_with(UNBOUNDED, 0u64, mix)
        .wait()
        .expect("no errors")
}

/// Sum a weir publisher with `fold`'s default (batched) demand.
fn sum_default<P: Publisher<Item = u64>>(publisher: P) -> u64 {
    publisher.fold(0u64, mix).wait().expect("no errors")
}

/// Sum a `futures` stream on the calling thread.
fn sum_stream(stream: impl futures::Stream<Item = u64>) -> u64 {
    block_on(stream.fold(0u64, |acc, x| async move { mix(acc, x) }))
}

fn inner(i: u64) -> std::ops::Range<u64> {
    i * (N / INNERS)..(i + 1) * (N / INNERS)
}

fn quarter(i: u64) -> std::ops::Range<u64> {
    i * (N / SOURCES)..(i + 1) * (N / SOURCES)
}

fn group<'a>(
    c: &'a mut Criterion,
    name: &str,
) -> BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Elements(N));
    group.sample_size(20);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(2));
    group
}

fn zip(c: &mut Criterion) {
    let weir_unbounded =
        || sum_unbounded(weir::range(0..black_box(N)).zip(weir::range(0..N), pair));
    let weir_default = || sum_default(weir::range(0..black_box(N)).zip(weir::range(0..N), pair));
    let futures_zip = || {
        sum_stream(
            stream::iter(0..black_box(N))
                .zip(stream::iter(0..N))
                .map(|(a, b)| pair(a, b)),
        )
    };
    let iterator = || {
        (0..black_box(N))
            .zip(0..N)
            .map(|(a, b)| pair(a, b))
            .fold(0, mix)
    };
    let expected = iterator();
    assert_eq!(weir_unbounded(), expected);
    assert_eq!(weir_default(), expected);
    assert_eq!(futures_zip(), expected);

    let mut group = group(c, "multi_source/zip/1M");
    group.bench_function("weir_fold_with_unbounded", |b| b.iter(weir_unbounded));
    group.bench_function("weir_fold_default", |b| b.iter(weir_default));
    group.bench_function("futures_zip", |b| b.iter(futures_zip));
    group.bench_function("iterator_zip", |b| b.iter(iterator));
    group.finish();
}

fn flat_map(c: &mut Criterion) {
    let weir_flat_map = || {
        sum_unbounded(weir::range(0..black_box(INNERS)).flat_map(|i| weir::range(inner(i)), 4, 256))
    };
    let weir_flat_map_default = || {
        sum_default(weir::range(0..black_box(INNERS)).flat_map(|i| weir::range(inner(i)), 4, 256))
    };
    let weir_concat_map = || {
        sum_unbounded(weir::range(0..black_box(INNERS)).concat_map(|i| weir::range(inner(i)), 256))
    };
    let futures_flatten =
        || sum_stream(stream::iter(0..black_box(INNERS)).flat_map(|i| stream::iter(inner(i))));
    let futures_unordered = || {
        sum_stream(
            stream::iter(0..black_box(INNERS))
                .map(|i| stream::iter(inner(i)))
                .flatten_unordered(4),
        )
    };
    let iterator = || (0..black_box(INNERS)).flat_map(inner).fold(0, mix);
    let expected = iterator();
    assert_eq!(weir_flat_map(), expected);
    assert_eq!(weir_flat_map_default(), expected);
    assert_eq!(weir_concat_map(), expected);
    assert_eq!(futures_flatten(), expected);
    assert_eq!(futures_unordered(), expected);

    let mut group = group(c, "multi_source/flat_map/1000x1000");
    group.bench_function("weir_flat_map_4_256", |b| b.iter(weir_flat_map));
    group.bench_function("weir_flat_map_4_256_fold_default", |b| {
        b.iter(weir_flat_map_default)
    });
    group.bench_function("weir_concat_map_256", |b| b.iter(weir_concat_map));
    group.bench_function("futures_flatten", |b| b.iter(futures_flatten));
    group.bench_function("futures_flatten_unordered_4", |b| b.iter(futures_unordered));
    group.bench_function("iterator_flat_map", |b| b.iter(iterator));
    group.finish();
}

fn merge(c: &mut Criterion) {
    let weir_merge = || {
        sum_unbounded(weir::merge(
            (0..SOURCES).map(|i| weir::range(quarter(black_box(i)))),
        ))
    };
    let weir_merge_default = || {
        sum_default(weir::merge(
            (0..SOURCES).map(|i| weir::range(quarter(black_box(i)))),
        ))
    };
    let weir_merge_64 = || {
        weir::merge((0..SOURCES).map(|i| weir::range(quarter(black_box(i)))))
            .fold_with(64, 0u64, mix)
            .wait()
            .expect("no errors")
    };
    // Subscribed: sources that do not fuse deliver into the merging stage's lanes.
    let subscribed = || (0..SOURCES).map(|i| unfused(weir::range(quarter(black_box(i)))));
    let weir_subscribed = || sum_unbounded(weir::merge(subscribed()));
    let weir_subscribed_default = || sum_default(weir::merge(subscribed()));
    // A downstream asking 64 at a time (48 per replenish): the lanes hand over
    // parts of their windows.
    let weir_subscribed_64 = || {
        weir::merge(subscribed())
            .fold_with(64, 0u64, mix)
            .wait()
            .expect("no errors")
    };
    let futures_select_all = || {
        sum_stream(stream::select_all(
            (0..SOURCES).map(|i| stream::iter(quarter(black_box(i)))),
        ))
    };
    let iterator = || {
        (0..SOURCES)
            .flat_map(|i| quarter(black_box(i)))
            .fold(0, mix)
    };
    let expected = iterator();
    assert_eq!(weir_merge(), expected);
    assert_eq!(weir_merge_default(), expected);
    assert_eq!(weir_merge_64(), expected);
    assert_eq!(weir_subscribed(), expected);
    assert_eq!(weir_subscribed_default(), expected);
    assert_eq!(weir_subscribed_64(), expected);
    assert_eq!(futures_select_all(), expected);

    let mut group = group(c, "multi_source/merge/4x250k");
    group.bench_function("weir_merge", |b| b.iter(weir_merge));
    group.bench_function("weir_merge_fold_default", |b| b.iter(weir_merge_default));
    group.bench_function("weir_merge_fold_64", |b| b.iter(weir_merge_64));
    group.bench_function("weir_merge_subscribed", |b| b.iter(weir_subscribed));
    group.bench_function("weir_merge_subscribed_fold_default", |b| {
        b.iter(weir_subscribed_default)
    });
    group.bench_function("weir_merge_subscribed_fold_64", |b| {
        b.iter(weir_subscribed_64)
    });
    group.bench_function("futures_select_all", |b| b.iter(futures_select_all));
    group.bench_function("iterator_chain", |b| b.iter(iterator));
    group.finish();
}

criterion_group!(benches, zip, flat_map, merge);
criterion_main!(benches);
