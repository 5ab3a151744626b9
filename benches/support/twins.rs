//! Cases measured next to their `Iterator` twins: the shared loop of the `operators`
//! and `time_operators` benches.

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId};

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
