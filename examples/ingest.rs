//! Ingest: a producer you cannot slow down, a sink that cannot keep up, and a queue
//! that says so in seconds.
//!
//! ```text
//! producer thread ──try_send──▶ channel(4,000, Backpressure) ──▶ publish_on(pool, 256) ──▶ slow "database"
//!   ~20,000/s offered             water marks 3,000 / 1,000        one worker thread         ~2,000/s stored
//! ```
//!
//! The queue is sized from time (`Capacity::for_wait`: 2,000/s × 2 s = 4,000 slots) and
//! its water marks from the system (`WaterMarks::derive`: the producer reacts within
//! 50 ms, so the high mark leaves room for 20,000/s × 50 ms = 1,000 late arrivals; the
//! low mark is what the sink drains in 0.5 s). While the channel says `Paused`, the
//! producer stops offering — as a socket reader would stop reading — and resumes when
//! the depth falls to the low mark. Every quarter second the example prints what the
//! channel's monitor reports: depth, oldest item's age, lag in seconds.
//!
//! Run: `cargo run --release --example ingest`

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir::prelude::*;
use weir::queue::Capacity;
use weir::runtime::ThreadPool;
use weir::source::channel::{ChannelBuilder, ChannelPolicy, FlowState, WaterMarks};

/// Items the producer offers in all.
const ITEMS: u64 = 12_000;
/// How fast the producer would go if nobody stopped it.
const ARRIVAL_PER_SEC: f64 = 20_000.0;
/// How fast the sink stores items.
const DRAIN_PER_SEC: f64 = 2_000.0;

fn main() {
    let capacity = Capacity::for_wait(DRAIN_PER_SEC, Duration::from_secs(2)).expect("sizing");
    let marks = WaterMarks::derive(
        capacity,
        ARRIVAL_PER_SEC,
        Duration::from_millis(50),
        DRAIN_PER_SEC,
        Duration::from_millis(500),
    )
    .expect("water marks");
    println!(
        "capacity {} (2,000/s × 2 s), water marks high {} / low {}",
        capacity.get(),
        marks.high(),
        marks.low()
    );

    let (sender, channel) = ChannelBuilder::new(capacity, ChannelPolicy::Backpressure)
        .water_marks(marks)
        .build::<u64>();
    let monitor = channel.monitor();
    let watcher = sender.clone();
    let pool = ThreadPool::builder().name("ingest").threads(1).build();
    let boundary = channel.publish_on(pool, 256);
    let boundary_monitor = boundary.monitor();

    // The slow sink: about 500 µs of work per record.
    let stored = Arc::new(AtomicU64::new(0));
    let counter = stored.clone();
    let per_item = Duration::from_secs_f64(1.0 / DRAIN_PER_SEC);
    let sink = boundary.for_each(move |_record| {
        let until = Instant::now() + per_item;
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        counter.fetch_add(1, Ordering::Relaxed);
    });

    // The producer: offers as fast as it is allowed, stops while paused.
    let paused_for = Arc::new(AtomicU64::new(0));
    let paused_total = paused_for.clone();
    let producing = Arc::new(AtomicBool::new(true));
    let still_producing = producing.clone();
    let producer = std::thread::spawn(move || {
        let gap = Duration::from_secs_f64(1.0 / ARRIVAL_PER_SEC);
        let start = Instant::now();
        for i in 0..ITEMS {
            if sender.state() == FlowState::Paused {
                let waited = Instant::now();
                sender
                    .wait_resumed()
                    .expect("the pipeline outlives the producer");
                paused_total.fetch_add(waited.elapsed().as_micros() as u64, Ordering::Relaxed);
            }
            // Pace to the arrival rate (a fast device, not a tight loop).
            let due = start + gap.mul_f64(i as f64);
            while Instant::now() < due {
                std::hint::spin_loop();
            }
            sender
                .send_blocking(i)
                .expect("the pipeline outlives the producer");
        }
        sender.close();
        still_producing.store(false, Ordering::Relaxed);
    });

    let start = Instant::now();
    println!(
        "{:>6}  {:>8}  {:>12}  {:>10}  {:>9}  {:>7}  {:>6}",
        "t", "state", "depth", "oldest", "lag", "stored", "pauses"
    );
    while !sink.is_terminated() {
        std::thread::sleep(Duration::from_millis(250));
        let stats = monitor.snapshot();
        let state = match (producing.load(Ordering::Relaxed), watcher.state()) {
            (false, _) => "done".to_owned(),
            (true, state) => state.to_string(),
        };
        println!(
            "{:>5.2}s  {:>8}  {:>5}/{:<6}  {:>9.3}s  {:>8}  {:>7}  {:>6}",
            start.elapsed().as_secs_f64(),
            state,
            stats.depth,
            stats.capacity,
            stats.oldest_age.unwrap_or_default().as_secs_f64(),
            stats.lag().map_or_else(
                || "∞".to_owned(),
                |lag| format!("{:.3}s", lag.as_secs_f64())
            ),
            stored.load(Ordering::Relaxed),
            stats.pauses,
        );
    }
    producer.join().expect("producer thread");
    sink.wait().expect("the pipeline completes");

    let stats = monitor.snapshot();
    println!();
    println!("channel : {stats}");
    println!("boundary: {}", boundary_monitor.snapshot());
    println!(
        "offered {ITEMS}, stored {}, dropped {}; the producer was paused {} times for {:.2} s in all",
        stored.load(Ordering::Relaxed),
        stats.dropped_total(),
        stats.pauses,
        paused_for.load(Ordering::Relaxed) as f64 / 1e6,
    );
    assert_eq!(stored.load(Ordering::Relaxed), ITEMS, "nothing lost");
}
