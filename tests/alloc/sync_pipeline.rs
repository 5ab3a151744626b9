//! The benchmark pipeline of `benches/sync_pipeline.rs`: `range → map → filter → fold`,
//! fused into one loop (a plain `range`) and subscribed (the range behind a
//! `BoxPublisher`, which does not fuse).

use weir::demand::UNBOUNDED;
use weir::prelude::*;
use weir::BoxPublisher;

use crate::assert_flat;

/// `source → map → filter → fold_with(prefetch)`.
fn pipeline<P: Publisher<Item = u64>>(source: P, prefetch: u64) -> u64 {
    source
        .map(|x| x * 3)
        .filter(|x| x % 2 == 0)
        .fold_with(prefetch, 0u64, |acc, x| acc + x)
        .wait()
        .expect("range does not fail")
}

#[test]
fn sync_pipeline_allocates_nothing_per_item() {
    for prefetch in [UNBOUNDED, 64, 1] {
        let model = |n: u64| (0..n).map(|x| x * 3).filter(|x| x % 2 == 0).sum();
        assert_flat(
            &format!("range/map/filter/fold, prefetch {prefetch}"),
            8,
            |n| pipeline(weir::range(0..n), prefetch),
            model,
        );
        assert_flat(
            &format!("boxed range/map/filter/fold, prefetch {prefetch}"),
            8,
            |n| pipeline(BoxPublisher::new(weir::range(0..n)), prefetch),
            model,
        );
    }
}
