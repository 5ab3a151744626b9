//! What the probes share: their settings from the environment, and paired rounds
//! (each round one sample of each build, alternating which goes first, the ratio
//! taken inside the round).

use std::str::FromStr;

/// The environment variable `key` parsed, or `default` when it is unset or does not
/// parse.
pub fn env_or<T: FromStr>(key: &str, default: T) -> T {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The comma-separated list in `key`, or in `default` when it is unset.
///
/// # Panics
///
/// When an entry does not parse, naming the variable.
pub fn env_list<T: FromStr>(key: &str, default: &str) -> Vec<T> {
    std::env::var(key)
        .unwrap_or_else(|_| default.to_owned())
        .split(',')
        .map(|v| {
            v.trim()
                .parse()
                .unwrap_or_else(|_| panic!("{key}: comma-separated values"))
        })
        .collect()
}

/// `ONLY`: the indices of the cases to run (`None`: all).
pub fn only() -> Option<Vec<usize>> {
    std::env::var("ONLY").ok().map(|_| env_list("ONLY", ""))
}

/// The median of `values` (the upper one of an even count).
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The samples of paired rounds, and each round's ratio (current ÷ base).
pub struct Paired {
    current: Vec<f64>,
    base: Vec<f64>,
    ratios: Vec<f64>,
}

impl Paired {
    /// `rounds` rounds; each takes one sample (a rate) of each build, the base first
    /// in even rounds and the current build first in odd ones.
    pub fn run(rounds: usize, mut current: impl FnMut() -> f64, mut base: impl FnMut() -> f64) -> Self {
        let mut paired = Paired {
            current: Vec::with_capacity(rounds),
            base: Vec::with_capacity(rounds),
            ratios: Vec::with_capacity(rounds),
        };
        for round in 0..rounds {
            let (x, y) = if round % 2 == 0 {
                let y = base();
                (current(), y)
            } else {
                let x = current();
                (x, base())
            };
            paired.current.push(x);
            paired.base.push(y);
            paired.ratios.push(x / y);
        }
        paired
    }

    /// The table's columns after the case's own: current and base medians (with
    /// `decimals`), the median and the geometric mean of the rounds' ratios.
    pub fn columns(&self, decimals: usize) -> String {
        let ratios = &self.ratios;
        let geomean = (ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp();
        format!(
            "{:.decimals$} | {:.decimals$} | {:.3} | {:.3}",
            median(self.current.clone()),
            median(self.base.clone()),
            median(ratios.clone()),
            geomean
        )
    }
}
