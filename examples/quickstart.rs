//! Quickstart: a fast producer, a slow consumer on another thread, and demand keeping
//! them in step.
//!
//! The sensor can produce as fast as the CPU allows, on a thread of its own; the
//! consumer needs 20 ms per item, on another thread. Between them an async boundary
//! (`publish_on`) hands items across with a window of 8: it asks the sensor side for
//! 8 items, then for 6 more each time 6 were taken (the 75 % rule). The consumer
//! requests 8 items, then 6 more each time it has worked through 6. So the sensor is
//! asked for what the consumer can take plus at most one window: the printout shows
//! each request, each item, which thread did what, and how far the sensor was ever
//! ahead.
//!
//! Run: `cargo run --release --example quickstart`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use weir::demand::Replenish;
use weir::prelude::*;
use weir::runtime::ThreadPool;
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
    /// Readings the sensor produced (it counts them on its own thread).
    produced: Arc<AtomicU64>,
    /// The most readings that passed the filter but were not yet delivered.
    most_ahead: u64,
    done: mpsc::Sender<()>,
}

impl SlowConsumer {
    fn log(&self, what: &str) {
        let thread = std::thread::current();
        println!(
            "{:>6.0} ms  {:<11} {what:<30} requested {:>3}  delivered {:>3}  produced {:>3}",
            self.start.elapsed().as_secs_f64() * 1e3,
            thread.name().unwrap_or("main"),
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
        // Every other reading passes the filter: those produced and not yet delivered
        // wait in the boundary's window.
        let passed = self.produced.load(Ordering::Relaxed) / 2;
        self.most_ahead = self.most_ahead.max(passed.saturating_sub(self.delivered));
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
        println!(
            "\nAt most {} filtered readings were ever ahead of the consumer (the window is 8).",
            self.most_ahead
        );
        let _ = self.done.send(());
    }
}

fn main() {
    let produced = Arc::new(AtomicU64::new(0));
    let counter = produced.clone();
    let sensor_thread = ThreadPool::builder().name("sensor").threads(1).build();
    let consumer_thread = ThreadPool::builder().name("consumer").threads(1).build();

    // A sensor that could emit millions of readings per second: `generate` calls the
    // closure only for items that were requested.
    let sensor = weir::generate(0u64, move |n| {
        *n += 1;
        counter.fetch_add(1, Ordering::Relaxed);
        Step::Next(*n)
    });

    let (done, finished) = mpsc::channel();
    let consumer = SlowConsumer {
        start: Instant::now(),
        work: Duration::from_millis(20),
        replenish: Replenish::new(8),
        subscription: None,
        requested: 0,
        delivered: 0,
        produced: produced.clone(),
        most_ahead: 0,
        done,
    };
    println!(
        "the consumer: prefetch 8, asks again after {} items; the boundary: a window of 8\n",
        consumer.replenish.limit()
    );

    // Only even readings, scaled, produced on the sensor's thread; handed across to
    // the consumer's thread; stop after 20.
    sensor
        .filter(|n| n % 2 == 0)
        .map(|n| n * 10)
        .subscribe_on(sensor_thread.clone())
        .publish_on(consumer_thread.clone(), 8)
        .take(20)
        .subscribe(consumer);
    finished.recv().expect("the stream completes");

    let made = produced.load(Ordering::Relaxed);
    println!(
        "The consumer asked for 26 items (8, then 6 after every 6) and got 20: take(20) \
         completed the stream and cancelled the rest. Its first request is made in \
         on_subscribe, which subscribe_on runs on the sensor's thread; every item is \
         handled on the consumer's thread."
    );
    println!(
        "The sensor produced {made} readings: two per item that passed the filter (it asks \
         again for every odd one it drops), for the 20 delivered plus what the boundary had \
         prefetched, at most a window of 8, when the stream ended."
    );
    sensor_thread.shutdown();
    consumer_thread.shutdown();

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
