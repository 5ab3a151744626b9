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
    // Drops: a consumer that requests 3 items once and never again; everything after
    // them is dropped (and counted) without allocating per dropped item.
    assert_flat(
        "on_backpressure_drop, dropping",
        8,
        |n| {
            let before = drops.total();
            let (kept, completed) = take_three(
                weir::range(0..n)
                    .on_backpressure_drop()
                    .on_dropped(hook.clone()),
            );
            (kept, completed, drops.total() - before)
        },
        |n| (3, true, n - 3),
    );
}

/// Subscribe a consumer that requests 3 items in `on_subscribe` and never again;
/// returns how many items it got and whether the stream completed (synchronous
/// publishers finish inside `subscribe`).
fn take_three<P: Publisher<Item = u64>>(p: P) -> (u64, bool) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    use weir::{Error, Subscriber, Subscription};

    struct Three(Arc<(AtomicU64, AtomicBool)>);
    impl Subscriber<u64> for Three {
        fn on_subscribe(&mut self, subscription: Subscription) {
            subscription.request(3);
        }
        fn on_next(&mut self, _item: u64) {
            self.0 .0.fetch_add(1, Ordering::Relaxed);
        }
        fn on_error(&mut self, error: Error) {
            panic!("unexpected {error}");
        }
        fn on_complete(&mut self) {
            self.0 .1.store(true, Ordering::Relaxed);
        }
    }
    let seen = Arc::new((AtomicU64::new(0), AtomicBool::new(false)));
    p.subscribe(Three(seen.clone()));
    (
        seen.0.load(Ordering::Relaxed),
        seen.1.load(Ordering::Relaxed),
    )
}
