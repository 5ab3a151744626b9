//! Shared fixtures for the behaviour tests (`tests/operators`, `tests/sources.rs`,
//! `tests/sinks.rs`), pulled in with `#[path]`.

pub mod counting;
pub mod error_order;
pub mod failing;
pub mod late;
pub mod lossy;
pub mod model;
pub mod stepper;
pub mod threaded;
pub mod unfused;
pub mod unruly;
pub mod valve;
pub mod wakers;
// fixtures of the time operators
pub mod timed_events;
pub mod virtual_clock;

use std::time::Duration;

use weir::tck::{Signal, TestProbe, TestSubscriber};
use weir::Publisher;

/// Generous bound for waits on things that must happen (never reached when they do).
pub const PATIENCE: Duration = Duration::from_secs(10);

/// The signals a test subscriber received, one letter each: `S` on_subscribe, `N`
/// on_next, `E` on_error, `C` on_complete. `"SNNE"` is two items and an error.
pub fn shape<T: Clone>(probe: &TestProbe<T>) -> String {
    probe
        .signals()
        .iter()
        .map(|signal| match signal {
            Signal::Subscribe => 'S',
            Signal::Next(_) => 'N',
            Signal::Error(_) => 'E',
            Signal::Complete => 'C',
        })
        .collect()
}

/// Subscribe a test subscriber with no initial demand to `publisher`; return its probe.
pub fn probe_of<P: Publisher>(publisher: P) -> TestProbe<P::Item> {
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    publisher.subscribe(subscriber);
    probe
}
