//! Sensor feed: a sensor that cannot be slowed, a consumer that is slower, and a stage
//! that keeps the newest reading instead of queueing stale ones.
//!
//! The sensor thread takes a reading every 50 µs (20,000/s) for half a second. The
//! consumer needs 2 ms per reading (500/s), 40× slower. The same feed runs through
//! two stages:
//!
//! * `on_backpressure_latest()`: while the consumer is busy, each new reading replaces
//!   the one waiting, which is dropped as `ReplacedByLatest`;
//! * `conflate(max)`: while the consumer is busy, readings are merged into one (the
//!   largest seen), so a short spike is never lost; merged readings count as `Merged`.
//!
//! Every reading is accounted for: produced = delivered + dropped, by reason.
//!
//! Run: `cargo run --release --example sensor_feed`

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use weir::demand::AtomicDemand;
use weir::metrics::{DropHook, Drops};
use weir::prelude::*;
use weir::{DropReason, RawSubscription};

/// One sensor reading.
#[derive(Clone, Copy, Debug)]
struct Reading {
    n: u64,
    value: i64,
}

/// A sensor that reads on its own thread at a fixed period. It honours demand (it
/// waits when there is none), but the stages here ask it for everything, because a
/// real sensor cannot wait.
struct Sensor {
    readings: u64,
    period: Duration,
    produced: Arc<AtomicU64>,
}

/// The sensor's subscription: demand, a cancelled flag, and a wake-up for the thread.
struct SensorSubscription {
    demand: AtomicDemand,
    cancelled: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
}

impl RawSubscription for SensorSubscription {
    fn request(&self, n: u64) {
        // weir's stages never send request(0); a general-purpose source would answer
        // it with the rule 3.9 error (see `weir::demand::validate`).
        self.demand.add(n);
        let _guard = self.lock.lock().unwrap();
        self.wake.notify_one();
    }

    fn cancel(&self) {
        self.cancelled.store(true, Ordering::Relaxed);
        let _guard = self.lock.lock().unwrap();
        self.wake.notify_one();
    }
}

impl Publisher for Sensor {
    type Item = Reading;

    fn subscribe<S: Subscriber<Reading> + Send + 'static>(self, mut subscriber: S) {
        let shared = Arc::new(SensorSubscription {
            demand: AtomicDemand::new(),
            cancelled: AtomicBool::new(false),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        subscriber.on_subscribe(weir::Subscription::new(shared.clone()));
        thread::spawn(move || {
            let start = Instant::now();
            for n in 0..self.readings {
                // Wait for demand: check, register under the lock, check again.
                let mut guard = shared.lock.lock().unwrap();
                while shared.demand.get() == 0 && !shared.cancelled.load(Ordering::Relaxed) {
                    guard = shared.wake.wait(guard).unwrap();
                }
                drop(guard);
                if shared.cancelled.load(Ordering::Relaxed) {
                    return;
                }
                let due = start + self.period * n as u32;
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    thread::sleep(wait);
                }
                // A sawtooth with one spike, at reading 5,000.
                let value = if n == 5_000 { 1_000 } else { (n % 100) as i64 };
                self.produced.fetch_add(1, Ordering::Relaxed);
                shared.demand.produced(1);
                subscriber.on_next(Reading { n, value });
            }
            subscriber.on_complete();
        });
    }
}

/// Feed `readings` through `stage` into a slow consumer on this thread; print the
/// account.
fn run<P: Publisher<Item = Reading>>(title: &str, stage: impl FnOnce(Sensor) -> P, drops: &Drops) {
    println!("{title}");
    let produced = Arc::new(AtomicU64::new(0));
    let sensor = Sensor {
        readings: 10_000,
        period: Duration::from_micros(50),
        produced: produced.clone(),
    };
    let start = Instant::now();
    let (mut delivered, mut largest) = (0u64, i64::MIN);
    // The slow consumer: one reading at a time, 2 ms each.
    for reading in stage(sensor).blocking_iter(1) {
        let reading = reading.expect("the sensor does not fail");
        delivered += 1;
        largest = largest.max(reading.value);
        thread::sleep(Duration::from_millis(2));
        if delivered % 50 == 0 {
            println!(
                "  {:>4.0} ms  delivered {delivered:>3}; this was reading #{:<5} (sensor has made {})",
                start.elapsed().as_secs_f64() * 1e3,
                reading.n,
                produced.load(Ordering::Relaxed)
            );
        }
    }
    let produced = produced.load(Ordering::Relaxed);
    println!("  produced {produced}, delivered {delivered}, largest value delivered {largest}");
    for reason in DropReason::ALL {
        let n = drops.count(reason);
        if n > 0 {
            println!("  dropped ({reason}): {n}");
        }
    }
    let accounted = delivered + drops.total() == produced;
    println!(
        "  produced = delivered + dropped: {produced} = {delivered} + {} ({})\n",
        drops.total(),
        if accounted {
            "every reading accounted for"
        } else {
            "MISMATCH"
        }
    );
    assert!(accounted, "a reading was lost without being counted");
}

fn main() {
    let drops = Drops::new();
    let hook = DropHook::new(drops.clone());
    run(
        "keep-latest (on_backpressure_latest):",
        |sensor| sensor.on_backpressure_latest().on_dropped(hook),
        &drops,
    );

    let drops = Drops::new();
    let hook = DropHook::new(drops.clone());
    run(
        "conflate, keeping the largest value (the spike of 1,000 survives):",
        |sensor| {
            sensor
                .conflate(|held: Reading, new: Reading| {
                    if new.value >= held.value {
                        new
                    } else {
                        Reading { n: new.n, ..held }
                    }
                })
                .on_dropped(hook)
        },
        &drops,
    );
}
