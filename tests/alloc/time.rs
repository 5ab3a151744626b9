//! The time operators on their batch path (chunks of 256 under one lock): nothing per
//! item, delivered or dropped; `buffer_timeout` one `Vec` per emitted batch. Under
//! `VirtualTime`, so every timer and pass runs on the measuring thread and counts.

use std::time::Duration;

use weir::demand::UNBOUNDED;
use weir::metrics::{DropHook, Drops};
use weir::operators::{Rate, ThrottleMode};
use weir::prelude::*;
use weir::runtime::VirtualTime;

use crate::{assert_flat, measure};

const HOUR: Duration = Duration::from_secs(3_600);

/// Items counted by a sink with `prefetch` (timers of an hour never fire).
fn count<P: Publisher<Item = u64>>(p: P, prefetch: u64) -> u64 {
    p.fold_with(prefetch, 0u64, |n, _| n + 1)
        .wait()
        .expect("these pipelines do not fail")
}

#[test]
fn time_operators_allocate_nothing_per_item() {
    let hook = DropHook::new(Drops::new());
    for prefetch in [UNBOUNDED, 64] {
        assert_flat(
            &format!("timeout, prefetch {prefetch}"),
            24,
            |n| {
                count(
                    weir::range(0..n).timeout_on(HOUR, VirtualTime::new()),
                    prefetch,
                )
            },
            |n| n,
        );
        // Every item but the last replaces the held one (a counted drop).
        assert_flat(
            &format!("sample, prefetch {prefetch}"),
            24,
            |n| {
                count(
                    weir::range(0..n)
                        .sample_on(HOUR, VirtualTime::new())
                        .on_dropped(hook.clone()),
                    prefetch,
                )
            },
            |_| 1,
        );
        assert_flat(
            &format!("debounce, prefetch {prefetch}"),
            24,
            |n| {
                count(
                    weir::range(0..n)
                        .debounce_on(HOUR, VirtualTime::new())
                        .on_dropped(hook.clone()),
                    prefetch,
                )
            },
            |_| 1,
        );
        for mode in [ThrottleMode::Shaping, ThrottleMode::Enforcing] {
            assert_flat(
                &format!("throttle {mode:?}, prefetch {prefetch}"),
                24,
                |n| {
                    count(
                        // A burst larger than any run: no token runs out, no timer.
                        weir::range(0..n).throttle_on(
                            Rate::per_second(1_000),
                            4_000_000,
                            mode,
                            VirtualTime::new(),
                        ),
                        prefetch,
                    )
                },
                |n| n,
            );
        }
    }
}

#[test]
fn buffer_timeout_allocates_one_vec_per_batch_and_nothing_per_item() {
    let run = |n: u64| {
        measure(|| {
            weir::range(0..n)
                .buffer_timeout_on(64, HOUR, VirtualTime::new())
                .fold_with(UNBOUNDED, 0u64, |batches, _| batches + 1)
                .wait()
                .expect("range does not fail")
        })
    };
    let _ = run(10);
    // 1,024 items in 16 batches of 64; 1,048,576 in 16,384.
    let (small, small_batches) = run(1_024);
    let (large, large_batches) = run(1_048_576);
    assert_eq!((small_batches, large_batches), (16, 16_384));
    assert_eq!(
        large - small,
        large_batches - small_batches,
        "allocations grow by exactly one per batch"
    );
}
