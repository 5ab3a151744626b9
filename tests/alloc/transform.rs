//! The transformation operators, all in one chain.

use weir::demand::UNBOUNDED;
use weir::prelude::*;

use crate::assert_flat;

#[test]
fn transformation_operators_allocate_nothing_per_item() {
    for prefetch in [UNBOUNDED, 64, 1] {
        assert_flat(
            &format!("transformation chain, prefetch {prefetch}"),
            16,
            |n| {
                weir::range(0..n)
                    .filter_map(|x| (x % 3 != 0).then_some(x * 2))
                    .skip(5)
                    .skip_while(|x| *x < 40)
                    .take_while(|x| *x < u64::MAX / 4)
                    .scan(0u64, |acc, x| acc.wrapping_add(x))
                    .inspect(|x| assert!(*x != u64::MAX))
                    .inspect_request(|n| assert!(n > 0))
                    .inspect_cancel(|| {})
                    .reduce(|a, b| a ^ b)
                    .fold_with(prefetch, 0u64, |acc, x| acc + x)
                    .wait()
                    .expect("range does not fail")
            },
            |n| {
                (0..n)
                    .filter_map(|x| (x % 3 != 0).then_some(x * 2))
                    .skip(5)
                    .skip_while(|x| *x < 40)
                    .take_while(|x| *x < u64::MAX / 4)
                    .scan(0u64, |acc, x| {
                        *acc = acc.wrapping_add(x);
                        Some(*acc)
                    })
                    .reduce(|a, b| a ^ b)
                    .unwrap_or(0)
            },
        );
    }
}
