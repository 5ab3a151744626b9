//! The time operators with unbounded demand: what each costs per item when items
//! arrive in batches faster than any timer fires, next to the `Iterator` loop doing
//! the same work, in one run.
//!
//! Each case pushes 1,000,000 `u64`s from `range` through one time operator (timers
//! of an hour, so none fires during the run; throttle with a rate and burst that
//! never run out) into a checksum with `fold_with(UNBOUNDED, ..)`. With 1M items,
//! 1 ms per iteration is 1 ns per item. Target: ≤ 10 ns per item for each.
//!
//! * `sample(1h)` / `debounce(1h)`: every item but the last replaces the one held
//!   (a counted drop); the last comes out at completion. Twin: `last()`.
//! * `timeout(1h)`: every item passes.
//! * `buffer_timeout(64, 1h)`: items in `Vec`s of 64.
//! * `throttle(Rate::per_second(10^12), 10^6, Shaping)` and `Enforcing`: tokens
//!   never run out.
//!
//! Run: `cargo bench --bench time_operators`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use weir::demand::UNBOUNDED;
use weir::operators::{Rate, ThrottleMode};
use weir::prelude::*;

#[path = "support/twins.rs"]
mod twins;
use twins::{bench_twins, mix, sum, Case};

const N: u64 = 1_000_000;
const HOUR: Duration = Duration::from_secs(3_600);

fn time_operators(c: &mut Criterion) {
    let mut group = c.benchmark_group("time_operators/1M");
    group.throughput(Throughput::Elements(N));
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(2));

    // Each case: (name, weir pipeline, Iterator twin). Both must agree.
    let last = || (0..black_box(N)).last().map_or(0, |x| mix(0, x));
    let cases: [Case; 6] = [
        (
            "sample",
            || sum(weir::range(0..black_box(N)).sample(HOUR)),
            last,
        ),
        (
            "debounce",
            || sum(weir::range(0..black_box(N)).debounce(HOUR)),
            last,
        ),
        (
            "timeout",
            || sum(weir::range(0..black_box(N)).timeout(HOUR)),
            || (0..black_box(N)).fold(0, mix),
        ),
        (
            "buffer_timeout_64",
            || {
                weir::range(0..black_box(N))
                    .buffer_timeout(64, HOUR)
                    .fold_with(UNBOUNDED, 0u64, |acc, batch| {
                        batch.into_iter().fold(acc, mix)
                    })
                    .wait()
                    .expect("no errors")
            },
            || (0..black_box(N)).fold(0, mix),
        ),
        (
            "throttle_shaping",
            || {
                sum(weir::range(0..black_box(N)).throttle(
                    Rate::per_second(1_000_000_000_000),
                    N,
                    ThrottleMode::Shaping,
                ))
            },
            || (0..black_box(N)).fold(0, mix),
        ),
        (
            "throttle_enforcing",
            || {
                sum(weir::range(0..black_box(N)).throttle(
                    Rate::per_second(1_000_000_000_000),
                    N,
                    ThrottleMode::Enforcing,
                ))
            },
            || (0..black_box(N)).fold(0, mix),
        ),
    ];
    bench_twins(&mut group, &cases);
    group.finish();
}

criterion_group!(benches, time_operators);
criterion_main!(benches);
