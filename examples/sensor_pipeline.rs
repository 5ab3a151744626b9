//! A sensor pipeline: readings that arrive faster than anyone can use them, turned
//! into what each consumer needs, with every reading accounted for.
//!
//! Two sensors push 2,000 readings a second each, from threads of their own, into
//! channels that never block them (`DropOldest`: when a channel is full, the oldest
//! reading goes, and is counted).
//!
//! * **Dashboard** (temperature): `map` converts raw counts to °C, `buffer(20)` makes
//!   windows of 20 readings, `map` averages each window, and `sample(100 ms)` shows
//!   the newest average ten times a second.
//! * **Alarm** (pressure): `map` to bar, `conflate(max)` while the slow alarm handler
//!   (5 ms per call, on a thread of its own behind `publish_on`) is busy, so a short
//!   spike is merged into the reading it sees, never lost.
//!
//! Run: `cargo run --release --example sensor_pipeline`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use weir::prelude::*;
use weir::runtime::ThreadPool;
use weir::source::channel::{ChannelPolicy, Sender};

/// How long each sensor runs.
const RUN: Duration = Duration::from_millis(600);
/// Readings per second per sensor.
const RATE: u64 = 2_000;

/// A sensor: pushes `raw(i)` every 1/RATE seconds for RUN, then hangs up (the
/// channel then completes). Returns how many readings it produced.
fn sensor(tx: Sender<u32>, raw: impl Fn(u64) -> u32 + Send + 'static) -> thread::JoinHandle<u64> {
    thread::spawn(move || {
        let start = Instant::now();
        let mut produced = 0;
        while start.elapsed() < RUN {
            // DropOldest never refuses: a full channel drops its oldest reading.
            tx.try_send(raw(produced)).expect("the channel is open");
            produced += 1;
            let next = start + Duration::from_micros(produced * 1_000_000 / RATE);
            thread::sleep(next.saturating_duration_since(Instant::now()));
        }
        produced
    })
}

/// What the example measured, for the test that runs it.
#[derive(Debug)]
pub struct Report {
    /// Temperature readings produced, delivered to the dashboard chain, dropped.
    pub temperature: (u64, u64, u64),
    /// Averages the dashboard showed.
    pub shown: Vec<f64>,
    /// Pressure readings produced, alarm calls made, readings merged into them.
    pub pressure: (u64, u64, u64),
    /// The highest pressure the alarm handler saw, and the highest the sensor sent.
    pub peak_seen: f64,
    /// The highest pressure the sensor sent.
    pub peak_sent: f64,
}

/// Runs both pipelines; returns what they did.
pub fn run() -> Report {
    // ---- dashboard: map → buffer → map → sample ----
    let (tx, rx) = weir::channel::<u32>(256, ChannelPolicy::DropOldest);
    let monitor = rx.monitor();
    // Raw counts: 20.00 °C rising by 0.01 °C every 10 readings, back down every 1,000.
    let temperature = sensor(tx, |i| 2_000 + ((i / 10) % 100) as u32);
    let delivered = Arc::new(AtomicU64::new(0));
    let count = delivered.clone();
    let shown = rx
        .inspect(move |_| {
            count.fetch_add(1, Ordering::Relaxed);
        })
        .map(|raw| f64::from(raw) / 100.0) // °C
        .buffer(20)
        .map(|window| window.iter().sum::<f64>() / window.len() as f64)
        .sample(Duration::from_millis(100))
        .collect()
        .wait()
        .expect("the dashboard chain completes");
    let produced = temperature.join().unwrap();
    let stats = monitor.snapshot();
    let dropped: u64 = stats.dropped_total();

    // ---- alarm: map → conflate(max), consumed slowly ----
    let (tx, rx) = weir::channel::<u32>(64, ChannelPolicy::DropOldest);
    // A 50 ms spike to 9.5 bar in the middle of a flat 1.0 bar.
    let pressure = sensor(tx, |i| if (600..700).contains(&i) { 950 } else { 100 });
    let merged = Arc::new(AtomicU64::new(0));
    let merges = merged.clone();
    // The handler runs on a thread of its own: delivered on the sensor's thread, a
    // slow handler would slow the sensor itself (a channel's sender delivers when
    // there is demand). `publish_on(pool, 1)` asks for one reading at a time, so
    // `conflate` merges everything that arrives while the handler is busy.
    let alarm = ThreadPool::builder().name("alarm").threads(1).build();
    let peak_seen = rx
        .map(|raw| f64::from(raw) / 100.0) // bar
        .conflate(move |held: f64, new: f64| {
            merges.fetch_add(1, Ordering::Relaxed);
            held.max(new)
        })
        .publish_on(alarm, 1)
        .fold((0u64, 0.0f64), |(calls, peak), bar| {
            thread::sleep(Duration::from_millis(5)); // the alarm handler is slow
            (calls + 1, peak.max(bar))
        })
        .wait()
        .expect("the alarm chain completes");
    let pressure_produced = pressure.join().unwrap();

    Report {
        temperature: (produced, delivered.load(Ordering::Relaxed), dropped),
        shown,
        pressure: (
            pressure_produced,
            peak_seen.0,
            merged.load(Ordering::Relaxed),
        ),
        peak_seen: peak_seen.1,
        peak_sent: 9.5,
    }
}

/// Runs the example and prints what happened.
pub fn main() {
    let report = run();
    let (produced, delivered, dropped) = report.temperature;
    println!("dashboard: {produced} readings produced, {delivered} delivered, {dropped} dropped (oldest first)");
    println!(
        "           {} averages shown (one per 100 ms):",
        report.shown.len()
    );
    for average in &report.shown {
        println!("             {average:.2} °C");
    }
    let (readings, calls, merged) = report.pressure;
    println!(
        "alarm:     {readings} readings, {calls} alarm calls, {merged} readings merged; \
         peak seen {:.1} bar (sent {:.1})",
        report.peak_seen, report.peak_sent
    );
    // Every reading is accounted for, and the spike was not lost.
    assert_eq!(delivered + dropped, produced);
    assert_eq!(report.peak_seen, report.peak_sent);
}
