//! `map_async` against `futures::StreamExt::buffered(n)`, in one run.
//!
//! 1. `ready`: 1M items through a future that is ready at once, concurrency 64.
//!    weir in three formulations (`map_async` with `std::future::ready`, with an
//!    `async` block, and `map_async_unordered`), each summed by `fold(..).wait()` on
//!    the bench thread while the stage runs on the tokio runtime; the peer is
//!    `stream::iter(0..N).map(ready).buffered(64)` summed on a spawned task (and
//!    `buffer_unordered(64)`). Target: weir ≥ 1× `buffered`.
//! 2. `sleep_1ms`: 6,400 items whose future sleeps 1 ms, concurrency 64, weir and
//!    `buffered(64)` side by side, and the ceiling the timer allows (100 waves of 64
//!    sleeps joined at once). The ideal is 64,000 items/s; tokio's timer has a
//!    resolution of 1 ms and a 1 ms sleep ends at a later tick (about 2.2 ms here), so
//!    the ceiling shows what the timer allows. Target: within 5 % of the ceiling.
//!
//! The runtime has two worker threads. Run: `cargo bench --bench map_async --features
//! tokio` (about a minute).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use futures::StreamExt as _;
use weir::prelude::*;

const N: u64 = 1_000_000;
const SLEEPS: u64 = 6_400;
const CONCURRENCY: u64 = 64;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

fn weir_ready(rt: &tokio::runtime::Runtime) -> u64 {
    let _inside = rt.enter();
    weir::range(0..black_box(N))
        .map_async(CONCURRENCY, std::future::ready)
        .fold(0u64, |sum, x| sum.wrapping_add(x))
        .wait()
        .expect("no errors")
}

fn weir_async_block(rt: &tokio::runtime::Runtime) -> u64 {
    let _inside = rt.enter();
    weir::range(0..black_box(N))
        .map_async(CONCURRENCY, |x| async move { x })
        .fold(0u64, |sum, x| sum.wrapping_add(x))
        .wait()
        .expect("no errors")
}

fn weir_unordered(rt: &tokio::runtime::Runtime) -> u64 {
    let _inside = rt.enter();
    weir::range(0..black_box(N))
        .map_async_unordered(CONCURRENCY, std::future::ready)
        .fold(0u64, |sum, x| sum.wrapping_add(x))
        .wait()
        .expect("no errors")
}

fn futures_buffered(rt: &tokio::runtime::Runtime, ordered: bool) -> u64 {
    rt.block_on(async move {
        tokio::spawn(async move {
            let items = futures::stream::iter(0..black_box(N)).map(std::future::ready);
            let fold = |sum: u64, x: u64| std::future::ready(sum.wrapping_add(x));
            if ordered {
                items.buffered(CONCURRENCY as usize).fold(0u64, fold).await
            } else {
                items
                    .buffer_unordered(CONCURRENCY as usize)
                    .fold(0u64, fold)
                    .await
            }
        })
        .await
        .expect("the task")
    })
}

fn weir_sleeps(rt: &tokio::runtime::Runtime) -> u64 {
    let _inside = rt.enter();
    weir::range(0..black_box(SLEEPS))
        .map_async(CONCURRENCY, |x| async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            x
        })
        .fold(0u64, |sum, x| sum.wrapping_add(x))
        .wait()
        .expect("no errors")
}

fn futures_sleeps(rt: &tokio::runtime::Runtime) -> u64 {
    rt.block_on(async move {
        tokio::spawn(async move {
            futures::stream::iter(0..black_box(SLEEPS))
                .map(|x| async move {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    x
                })
                .buffered(CONCURRENCY as usize)
                .fold(0u64, |sum, x| std::future::ready(sum.wrapping_add(x)))
                .await
        })
        .await
        .expect("the task")
    })
}

/// The ceiling the timer allows: `SLEEPS / 64` waves of 64 sleeps joined at once
/// (nothing between the waves but the join).
fn joined_waves(rt: &tokio::runtime::Runtime) -> u64 {
    rt.block_on(async move {
        tokio::spawn(async move {
            let mut sum = 0u64;
            for wave in 0..black_box(SLEEPS) / CONCURRENCY {
                let calls = (0..CONCURRENCY).map(|i| async move {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    wave * CONCURRENCY + i
                });
                sum += futures::future::join_all(calls).await.iter().sum::<u64>();
            }
            sum
        })
        .await
        .expect("the task")
    })
}

fn ready(c: &mut Criterion) {
    let rt = runtime();
    let expected = (0..N).fold(0u64, |s, x| s.wrapping_add(x));
    assert_eq!(weir_ready(&rt), expected);
    assert_eq!(weir_async_block(&rt), expected);
    assert_eq!(weir_unordered(&rt), expected);
    assert_eq!(futures_buffered(&rt, true), expected);
    assert_eq!(futures_buffered(&rt, false), expected);
    let mut group = c.benchmark_group("map_async/ready_1M");
    group.throughput(Throughput::Elements(N));
    group.sample_size(10);
    group.bench_function("weir map_async(64, ready)", |b| b.iter(|| weir_ready(&rt)));
    group.bench_function("weir map_async(64, async block)", |b| {
        b.iter(|| weir_async_block(&rt))
    });
    group.bench_function("weir map_async_unordered(64, ready)", |b| {
        b.iter(|| weir_unordered(&rt))
    });
    group.bench_function("futures buffered(64)", |b| {
        b.iter(|| futures_buffered(&rt, true))
    });
    group.bench_function("futures buffer_unordered(64)", |b| {
        b.iter(|| futures_buffered(&rt, false))
    });
    group.finish();
}

fn sleep_1ms(c: &mut Criterion) {
    let rt = runtime();
    let expected = (0..SLEEPS).sum::<u64>();
    assert_eq!(weir_sleeps(&rt), expected);
    assert_eq!(futures_sleeps(&rt), expected);
    assert_eq!(joined_waves(&rt), expected);
    let mut group = c.benchmark_group("map_async/sleep_1ms_64");
    group.throughput(Throughput::Elements(SLEEPS));
    group.sample_size(10);
    group.bench_function("weir map_async(64, sleep 1 ms)", |b| {
        b.iter(|| weir_sleeps(&rt))
    });
    group.bench_function("futures buffered(64, sleep 1 ms)", |b| {
        b.iter(|| futures_sleeps(&rt))
    });
    group.bench_function("ceiling: join_all of 64 sleeps, 100 waves", |b| {
        b.iter(|| joined_waves(&rt))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    targets = ready, sleep_1ms
}
criterion_main!(benches);
