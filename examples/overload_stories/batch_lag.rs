//! Lag for a batch-polling consumer: 2,000 items/s arrive at a channel whose consumer
//! takes them in batches (500 every 250 ms, or 2,000 every second). After the first
//! window (12 s, the 10 s rate window plus a margin), the channel's `lag()` is
//! compared with the true lag, depth / 2,000/s, every 10 ms. Virtual time.

use std::time::Duration;

use weir::queue::Capacity;
use weir::runtime::VirtualTime;
use weir::source::channel::{ChannelBuilder, ChannelPolicy};
use weir::Publisher;

use super::consumer::{share, Consumer};

/// What a run saw.
#[derive(Clone, Copy, Debug)]
pub struct LagRun {
    /// Samples compared (one per 10 ms after the first 12 s, queue non-empty or not).
    pub samples: u64,
    /// The largest relative error of `lag()` against the true lag.
    pub worst_error: f64,
    /// Samples taken just after a poll (empty queue) whose lag was not zero.
    pub wrong_when_empty: u64,
    /// Samples of a non-empty queue where `time_to_drain()` claimed the steady queue
    /// shrinks.
    pub false_drain_estimates: u64,
}

/// One minute of `batch` items every `period_ms`.
pub fn run(batch: u64, period_ms: u64) -> LagRun {
    let clock = VirtualTime::new();
    let (tx, rx) = ChannelBuilder::new(Capacity::items(10_000), ChannelPolicy::Backpressure)
        .clock(clock.clone())
        .build::<u64>();
    let monitor = tx.monitor();
    let (consumer, tap) = Consumer::new();
    rx.subscribe(consumer);
    let mut seen = LagRun {
        samples: 0,
        worst_error: 0.0,
        wrong_when_empty: 0,
        false_drain_estimates: 0,
    };
    for step in 1..=6_000u64 {
        clock.advance(Duration::from_millis(10));
        for i in 0..share(2_000, step, 10) {
            tx.try_send(step * 20 + i).expect("room for everything");
        }
        if (step * 10) % period_ms == 0 {
            tap.serve(batch);
            tap.take();
        }
        if step * 10 > 12_000 {
            let stats = monitor.snapshot();
            seen.samples += 1;
            if stats.depth == 0 {
                if stats.lag() != Some(Duration::ZERO) {
                    seen.wrong_when_empty += 1;
                }
                continue;
            }
            if stats.time_to_drain().is_some() {
                seen.false_drain_estimates += 1;
            }
            let truth = stats.depth as f64 / 2_000.0;
            let lag = stats.lag().map_or(f64::INFINITY, |lag| lag.as_secs_f64());
            seen.worst_error = seen.worst_error.max((lag - truth).abs() / truth);
        }
    }
    seen
}
