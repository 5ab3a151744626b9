//! `buffer(n)`: exactly one `Vec` per emitted batch, nothing per item.

use weir::demand::UNBOUNDED;
use weir::prelude::*;

use crate::measure;

/// (allocations, batches, items) for `range(0..n).buffer(size)` into a fold.
fn run(n: u64, size: usize, prefetch: u64) -> (u64, u64, u64) {
    let (allocations, (batches, items)) = measure(|| {
        weir::range(0..n)
            .buffer(size as u64)
            .fold_with(prefetch, (0u64, 0u64), move |(b, i), batch| {
                assert!(batch.len() <= size && batch.capacity() == size);
                (b + 1, i + batch.len() as u64)
            })
            .wait()
            .expect("range does not fail")
    });
    (allocations, batches, items)
}

#[test]
fn buffer_allocates_one_vec_per_batch_and_nothing_per_item() {
    for prefetch in [UNBOUNDED, 64, 1] {
        let _ = run(10, 7, prefetch);
        // 1,000 items in 143 batches (the last holds 6); 1,000,000 in 142,858.
        let (small, small_batches, small_items) = run(1_000, 7, prefetch);
        let (large, large_batches, large_items) = run(1_000_000, 7, prefetch);
        assert_eq!((small_items, large_items), (1_000, 1_000_000));
        assert_eq!((small_batches, large_batches), (143, 142_858));
        assert_eq!(
            large - small,
            large_batches - small_batches,
            "prefetch {prefetch}: allocations grow by exactly one per batch"
        );
        // A stream that ends on a batch boundary allocates no empty remainder.
        let (exact, batches, _) = run(700, 7, prefetch);
        assert_eq!(batches, 100);
        assert_eq!(small - exact, 43, "prefetch {prefetch}");
    }
}
