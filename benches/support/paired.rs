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

/// Seconds `run` took.
pub fn secs(run: impl FnOnce()) -> f64 {
    let start = std::time::Instant::now();
    run();
    start.elapsed().as_secs_f64()
}

/// The median of a paired phase's per-round figures, and their range.
#[derive(Clone, Copy, Debug)]
pub struct Spread {
    /// The middle figure (of an even count, the upper of the two middle ones).
    pub median: f64,
    /// The smallest figure.
    pub min: f64,
    /// The largest figure.
    pub max: f64,
}

/// Sort `figures` (one per round, at least one) and take their [`Spread`].
pub fn spread(figures: &mut [f64]) -> Spread {
    figures.sort_by(f64::total_cmp);
    Spread {
        median: figures[figures.len() / 2],
        min: figures[0],
        max: figures[figures.len() - 1],
    }
}
