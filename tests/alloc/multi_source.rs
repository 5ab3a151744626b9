//! The multi-source operators: allocations per source or inner subscription, never
//! per item.

use weir::prelude::*;

use crate::assert_flat;

#[path = "../support/unfused.rs"]
mod unfused;
use unfused::unfused;

fn sum<P: Publisher<Item = u64>>(p: P) -> u64 {
    p.fold_with(64, 0u64, |acc, x| acc.wrapping_add(x))
        .wait()
        .expect("these pipelines do not fail")
}

/// With unbounded demand a lane is emptied whole: the drain trades buffers with it.
fn sum_unbounded<P: Publisher<Item = u64>>(p: P) -> u64 {
    p.fold_with(weir::demand::UNBOUNDED, 0u64, |acc, x| acc.wrapping_add(x))
        .wait()
        .expect("these pipelines do not fail")
}

#[test]
fn lanes_emptied_whole_trade_buffers_without_allocating() {
    assert_flat(
        "merge, unbounded demand",
        24,
        |n| {
            // Sources that do not fuse: the merging stage's lanes.
            sum_unbounded(weir::merge(
                (0..4).map(move |i| unfused(weir::range(i * n / 4..(i + 1) * n / 4))),
            ))
        },
        |n| (0..n / 4 * 4).sum(),
    );
    assert_flat(
        "zip, unbounded demand",
        24,
        |n| sum_unbounded(weir::range(0..n).zip(weir::range(0..n), |a, b| a ^ b)),
        |_| 0,
    );
    // Uneven sources: one lane is emptied whole, the other in part, alternately.
    assert_flat(
        "zip of a range and a filtered range, unbounded demand",
        24,
        |n| {
            sum_unbounded(
                weir::range(0..n).zip(weir::range(0..2 * n).filter(|x| x % 2 == 0), |a, b| {
                    b - 2 * a
                }),
            )
        },
        |_| 0,
    );
    assert_flat(
        "flat_map, unbounded demand",
        200,
        |n| {
            sum_unbounded(weir::range(0..10u64).flat_map(
                move |i| weir::range(i * (n / 10)..(i + 1) * (n / 10)),
                3,
                32,
            ))
        },
        |n| (0..n / 10 * 10).sum(),
    );
}

#[test]
fn merge_concat_and_zip_allocate_nothing_per_item() {
    assert_flat(
        "merge",
        24,
        |n| sum(unfused(weir::range(0..n / 2)).merge(unfused(weir::range(n / 2..n)))),
        |n| (0..n).sum(),
    );
    assert_flat(
        "merge, fused (sources folded in turn)",
        1, // the finished handle
        |n| sum(weir::range(0..n / 2).merge(weir::range(n / 2..n))),
        |n| (0..n).sum(),
    );
    assert_flat(
        "concat",
        24,
        |n| sum(weir::range(0..n / 2).concat(weir::range(n / 2..n))),
        |n| (0..n).sum(),
    );
    assert_flat(
        "zip",
        24,
        |n| sum(weir::range(0..n).zip(weir::range(0..n), |a, b| a ^ b)),
        |_| 0,
    );
}

#[test]
fn flat_map_allocates_per_inner_not_per_item() {
    // Ten inner sources whatever `n` is: items per inner grow, allocations must not.
    assert_flat(
        "flat_map",
        200,
        |n| {
            sum(weir::range(0..10u64).flat_map(
                move |i| weir::range(i * (n / 10)..(i + 1) * (n / 10)),
                3,
                32,
            ))
        },
        |n| (0..n / 10 * 10).sum(),
    );
}
