//! Four overload stories, each a deterministic simulation under virtual time, with
//! weir's tools and without them. The same code runs in the tests, which assert the
//! figures printed here (`tests/overload_stories.rs`, `tests/channel.rs`,
//! `tests/operators/map_async.rs`).
//!
//! ```text
//! cargo run --release --example overload_stories --features futures
//! ```
//!
//! 1. **Image service**: graded admission (reduce at 70 %, shed non-critical at 90 %).
//! 2. **Retry storm**: an unbounded FIFO with unlimited retries against deadlines,
//!    a short queue, CoDel and a 10 % retry budget.
//! 3. **Adaptive limit**: a fixed concurrency limit against the gradient limiter when
//!    a dependency's latency rises from 40 ms to 900 ms.
//! 4. **Lag for batch-polling consumers**: `lag()` against the true lag.

#[path = "overload_stories/adaptive_limit.rs"]
mod adaptive_limit;
#[path = "overload_stories/batch_lag.rs"]
mod batch_lag;
#[path = "overload_stories/consumer.rs"]
mod consumer;
#[path = "overload_stories/image_service.rs"]
mod image_service;
#[path = "overload_stories/retry_storm.rs"]
mod retry_storm;

use weir::limit::{Fixed, Gradient};

fn main() {
    println!("1. Image service: 600 jobs/s in (1 in 5 critical), 350/s served, 10,000 slots;");
    println!(
        "   reduce to 50 % at 7,000 (until 2,000), shed non-critical at 9,000 (until 8,500)\n"
    );
    for (cooperative, title) in [
        (false, "callers ignore the advice"),
        (true, "callers ease to the advised rate"),
    ] {
        let run = image_service::run(cooperative);
        println!("   {title}: peak depth {}", run.peak);
        println!(
            "   {:>5} {:>7} {:>24} {:>8} {:>6} {:>9}",
            "t", "depth", "state", "offered", "shed", "crit.ref"
        );
        for s in run
            .seconds
            .iter()
            .filter(|s| s.t % 10 == 0 || s.t == 28 || s.t == 36)
        {
            println!(
                "   {:>4}s {:>7} {:>24} {:>8} {:>6} {:>9}",
                s.t,
                s.depth,
                s.state.to_string(),
                s.offered,
                s.shed,
                s.critical_refused
            );
        }
        println!();
    }

    println!("2. Retry storm: 1,500 req/s against 2,500/s of capacity, which falls to 1,000/s");
    println!("   from 60 s to 180 s; clients time out at 1 s and retry up to 3 times\n");
    let bare = retry_storm::run(false);
    let guarded = retry_storm::run(true);
    println!(
        "   {:>5} | {:>8} {:>8} {:>9} | {:>8} {:>8} {:>9} {:>8}",
        "t", "offered", "goodput", "depth", "offered", "goodput", "depth", "refused"
    );
    println!(
        "   {:>5} | {:^27} | {:^36}",
        "", "unbounded FIFO, no budget", "deadlines, 100 ms queue, CoDel, budget"
    );
    for (b, g) in bare.iter().zip(&guarded) {
        if b.t % 10 == 0 || (181..=185).contains(&b.t) || (59..=64).contains(&b.t) {
            println!(
                "   {:>4}s | {:>8} {:>8} {:>9} | {:>8} {:>8} {:>9} {:>8}",
                b.t,
                b.offered,
                b.goodput,
                b.depth,
                g.offered,
                g.goodput,
                g.depth,
                g.refused_retries
            );
        }
    }
    println!();

    println!(
        "3. Adaptive limit: a dependency of 10 workers, 40 ms -> 900 ms at 20 s -> 40 ms at 50 s\n"
    );
    let fixed = adaptive_limit::story(Fixed::new(100));
    let gradient = adaptive_limit::story(Gradient::new(20, 1, 100));
    println!(
        "   {:>5} | {:>6} {:>10} {:>7} | {:>6} {:>10} {:>7}",
        "t", "limit", "queueing", "served", "limit", "queueing", "served"
    );
    println!(
        "   {:>5} | {:^26} | {:^26}",
        "", "fixed limit 100", "gradient limiter"
    );
    for (t, (f, g)) in fixed.iter().zip(&gradient).enumerate() {
        let t = t + 1;
        if t % 5 == 0 || (21..=25).contains(&t) {
            println!(
                "   {:>4}s | {:>6} {:>8}ms {:>7} | {:>6} {:>8}ms {:>7}",
                t,
                f.limit,
                f.delay.as_millis(),
                f.served,
                g.limit,
                g.delay.as_millis(),
                g.served
            );
        }
    }
    println!();

    println!(
        "4. Lag for batch-polling consumers: 2,000/s arriving, lag() against depth / 2,000/s\n"
    );
    for (batch, period) in [(500, 250), (2_000, 1_000)] {
        let run = batch_lag::run(batch, period);
        println!(
            "   {batch:>5} every {period:>4} ms: {} samples, worst relative error {:.2e}",
            run.samples, run.worst_error
        );
    }
}
