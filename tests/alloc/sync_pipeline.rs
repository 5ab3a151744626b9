//! The benchmark pipeline of `benches/sync_pipeline.rs`: `range → map → filter → fold`.

use weir::demand::UNBOUNDED;
use weir::prelude::*;

use crate::assert_flat;

#[test]
fn sync_pipeline_allocates_nothing_per_item() {
    for prefetch in [UNBOUNDED, 64, 1] {
        assert_flat(
            &format!("range/map/filter/fold, prefetch {prefetch}"),
            8,
            |n| {
                weir::range(0..n)
                    .map(|x| x * 3)
                    .filter(|x| x % 2 == 0)
                    .fold_with(prefetch, 0u64, |acc, x| acc + x)
                    .wait()
                    .expect("range does not fail")
            },
            |n| (0..n).map(|x| x * 3).filter(|x| x % 2 == 0).sum(),
        );
    }
}
