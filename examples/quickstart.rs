//! Quickstart: a fast producer, a slow consumer, and demand keeping them in step.
//!
//! The source can produce as fast as the CPU allows; the consumer needs 20 ms per
//! item. The consumer requests 8 items, then 6 more each time it has worked through
//! 6 (the 75% rule), so the producer is asked for exactly what the consumer can take:
//! nothing piles up in between, and the printout shows when each request went out
//! and when each item arrived.
//!
//! Run: `cargo run --release --example quickstart`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir::demand::Replenish;
use weir::prelude::*;
use weir::source::Step;
use weir::Error;

/// A consumer that needs `work` per item and requests in batches of `prefetch`.
struct SlowConsumer {
    start: Instant,
    work: Duration,
    replenish: Replenish,
    subscription: Option<Subscription>,
    requested: u64,
    delivered: u64,
    produced: Arc<AtomicU64>,
}

impl SlowConsumer {
    fn log(&self, what: &str) {
        println!(
            "{:>6.0} ms  {what:<34} requested {:>3}  delivered {:>3}  produced {:>3}",
            self.start.elapsed().as_secs_f64() * 1e3,
            self.requested,
            self.delivered,
            self.produced.load(Ordering::Relaxed),
        );
    }

    fn request(&mut self, n: u64) {
        self.requested += n;
        self.log(&format!("request({n})"));
        self.subscription.as_ref().expect("subscribed").request(n);
    }
}

impl Subscriber<u64> for SlowConsumer {
    fn on_subscribe(&mut self, subscription: Subscription) {
        self.subscription = Some(subscription);
        self.request(self.replenish.initial());
    }

    fn on_next(&mut self, reading: u64) {
        self.delivered += 1;
        self.log(&format!("got reading {reading}, working…"));
        std::thread::sleep(self.work);
        if let Some(n) = self.replenish.on_consumed(1) {
            self.request(n);
        }
    }

    fn on_error(&mut self, error: Error) {
        self.log(&format!("failed: {error}"));
    }

    fn on_complete(&mut self) {
        self.log("complete");
    }
}

fn main() {
    let produced = Arc::new(AtomicU64::new(0));
    let counter = produced.clone();

    // A sensor that could emit millions of readings per second: `generate` calls the
    // closure only for items that were requested.
    let sensor = weir::generate(0u64, move |n| {
        *n += 1;
        counter.fetch_add(1, Ordering::Relaxed);
        Step::Next(*n)
    });

    let consumer = SlowConsumer {
        start: Instant::now(),
        work: Duration::from_millis(20),
        replenish: Replenish::new(8),
        subscription: None,
        requested: 0,
        delivered: 0,
        produced: produced.clone(),
    };
    println!(
        "prefetch 8, replenish after {} items\n",
        consumer.replenish.limit()
    );

    // Only even readings, scaled; stop after 20.
    sensor
        .filter(|n| n % 2 == 0)
        .map(|n| n * 10)
        .take(20)
        .subscribe(consumer);

    let made = produced.load(Ordering::Relaxed);
    println!("\nThe sensor produced {made} readings for 20 delivered (the filter dropped every odd one).");
    println!("It never ran ahead of demand: nothing was buffered between producer and consumer.");

    // The same pipeline with a sink: sum a million items, requesting 256 at a time.
    let start = Instant::now();
    let total = weir::range(0u64..1_000_000)
        .map(|x| x * 3)
        .filter(|x| x % 2 == 0)
        .fold(0u64, |acc, x| acc + x)
        .wait()
        .expect("range does not fail");
    println!(
        "\nsum of 1,000,000 items through map → filter → fold: {total} in {:?}",
        start.elapsed()
    );
}
