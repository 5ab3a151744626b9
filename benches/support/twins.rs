//! Cases measured next to their `Iterator` twins: the shared checksum and loop of the
//! `operators` and `time_operators` benches.

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId};
use weir::demand::UNBOUNDED;
use weir::prelude::*;

/// The checksum step: an xor of scrambled items (no closed form, still vectorisable).
#[inline(always)]
pub fn mix(acc: u64, x: u64) -> u64 {
    acc ^ x.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// `publisher` folded with [`mix`] under unbounded demand.
pub fn sum<P: Publisher<Item = u64>>(publisher: P) -> u64 {
    publisher
        .fold_with(UNBOUNDED, 0u64, mix)
        .wait()
        .expect("the pipelines here do not fail")
}

/// A case: its name, the weir pipeline and its `Iterator` twin (both return the same
/// checksum).
pub type Case = (&'static str, fn() -> u64, fn() -> u64);

/// Check that each case agrees with its twin, then bench both under `weir/<name>`
/// and `iterator/<name>`.
pub fn bench_twins(group: &mut BenchmarkGroup<'_, WallTime>, cases: &[Case]) {
    for &(name, weir_case, iterator_case) in cases {
        assert_eq!(
            weir_case(),
            iterator_case(),
            "{name}: weir and the Iterator twin disagree"
        );
        group.bench_function(BenchmarkId::new("weir", name), |b| b.iter(weir_case));
        group.bench_function(BenchmarkId::new("iterator", name), |b| {
            b.iter(iterator_case)
        });
    }
}
