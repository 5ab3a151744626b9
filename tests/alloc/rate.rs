//! The rate-decoupling operators: no allocation per item, dropped or delivered.

use weir::demand::UNBOUNDED;
use weir::metrics::{DropHook, Drops};
use weir::prelude::*;
use weir::Overflow;

use crate::assert_flat;

/// A sink that asks for `prefetch` at a time and counts what it got.
fn count<P: Publisher<Item = u64>>(p: P, prefetch: u64) -> u64 {
    p.fold_with(prefetch, 0u64, |n, _| n + 1)
        .wait()
        .expect("these pipelines do not fail")
}

#[test]
fn limit_rate_allocates_nothing_per_item() {
    for prefetch in [UNBOUNDED, 64] {
        assert_flat(
            &format!("limit_rate, prefetch {prefetch}"),
            8,
            |n| count(weir::range(0..n).limit_rate(256, 192), prefetch),
            |n| n,
        );
    }
}

#[test]
fn lossy_operators_allocate_nothing_per_item_delivered_or_dropped() {
    // With a synchronous consumer nothing is dropped; with a consumer that stops
    // asking (take) everything after it is dropped and reported through the hook.
    // Neither may allocate per item.
    let drops = Drops::new();
    let hook = DropHook::new(drops.clone());
    assert_flat(
        "on_backpressure_drop",
        8,
        |n| {
            count(
                weir::range(0..n)
                    .on_backpressure_drop()
                    .on_dropped(hook.clone()),
                64,
            )
        },
        |n| n,
    );
    assert_flat(
        "on_backpressure_buffer(DropOldest)",
        12,
        |n| {
            count(
                weir::range(0..n)
                    .on_backpressure_buffer(16, Overflow::DropOldest)
                    .on_dropped(hook.clone()),
                64,
            )
        },
        |n| n,
    );
    assert_flat(
        "on_backpressure_latest",
        12,
        |n| {
            count(
                weir::range(0..n)
                    .on_backpressure_latest()
                    .on_dropped(hook.clone()),
                64,
            )
        },
        |n| n,
    );
    assert_flat(
        "conflate",
        12,
        |n| {
            count(
                weir::range(0..n)
                    .conflate(|a, b| a.max(b))
                    .on_dropped(hook.clone()),
                64,
            )
        },
        |n| n,
    );
    // Drops: a consumer that takes 3 and cancels; the rest of the first batch is
    // dropped (and counted) without allocating per dropped item.
    assert_flat(
        "on_backpressure_drop, dropping",
        8,
        |n| {
            let before = drops.total();
            let kept = count(
                weir::range(0..n)
                    .on_backpressure_drop()
                    .on_dropped(hook.clone())
                    .take(3),
                3,
            );
            (kept, drops.total() > before || n <= 3)
        },
        |_| (3, true),
    );
}
