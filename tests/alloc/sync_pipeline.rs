//! The benchmark pipeline of `benches/sync_pipeline.rs`: `range → map → filter → fold`,
//! fused into one loop (a plain `range`) and subscribed (the range behind a
//! `BoxPublisher`, which does not fuse).

use weir::demand::UNBOUNDED;
use weir::prelude::*;
use weir::BoxPublisher;

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
        assert_flat(
            &format!("boxed range/map/filter/fold, prefetch {prefetch}"),
            8,
            |n| {
                BoxPublisher::new(weir::range(0..n))
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
