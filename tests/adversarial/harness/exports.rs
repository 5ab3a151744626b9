//! [`ExportCounter`]: a `metrics` recorder that counts the exports of a
//! `weir::metrics::export::Exporter` (each records the `weir_stages` gauge of every
//! name), and panics at a chosen one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::watch::DELIBERATE;

/// Counts registrations of the `weir_stages` gauge; panics at the `panic_at`-th.
#[derive(Default)]
pub struct ExportCounter {
    /// Registrations so far (one per export of a registry with one name).
    pub exports: Arc<AtomicU64>,
    panic_at: Option<u64>,
}

impl ExportCounter {
    /// A counter that panics (deliberately) at its `n`-th registration.
    pub fn panicking_at(n: u64) -> Self {
        ExportCounter {
            panic_at: Some(n),
            ..ExportCounter::default()
        }
    }
}

impl metrics::Recorder for ExportCounter {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }

    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }

    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }

    fn register_counter(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        metrics::Counter::noop()
    }

    fn register_gauge(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        if key.name() == "weir_stages" {
            let n = self.exports.fetch_add(1, Ordering::SeqCst) + 1;
            assert!(
                Some(n) != self.panic_at,
                "{DELIBERATE}: a metrics recorder panics at export {n}"
            );
        }
        metrics::Gauge::noop()
    }

    fn register_histogram(
        &self,
        _: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}
