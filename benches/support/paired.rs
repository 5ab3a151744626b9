//! The `main` of a bench with a *paired* phase after its criterion cases (the host
//! drifts between speed modes within seconds, so the figures that compare weir with
//! a peer are also taken inside rounds that run both back to back).
//!
//! `cargo bench --bench <name>` runs both; `-- <filter>` the criterion cases only;
//! `-- paired` the paired phase only.

use criterion::Criterion;

/// Run the criterion cases (`benches`, from `criterion_group!`) and then `paired`,
/// as the command line asks (see the module docs).
pub fn main_with_paired(benches: fn(), paired: impl FnOnce()) {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    if filters.iter().all(|f| f != "paired") {
        benches();
        Criterion::default().configure_from_args().final_summary();
    }
    if filters.is_empty() || filters.iter().any(|f| f == "paired") {
        paired();
    }
}
