//! Fan-out without the slowest subscriber deciding for everyone.
//!
//! One feed of 50,000 readings a second goes through a `Hub` to five subscribers,
//! each with its own policy:
//!
//! * `audit` (`Backpressure`): must get everything; it may slow the feed (it does
//!   not need to here: it keeps up).
//! * `dashboard` (`Latest`): shows the newest reading ten times a second and skips
//!   the rest.
//! * `ws-1`, `ws-2`, `ws-3` (`Disconnect` after 2 s of lag): websocket-like clients;
//!   `ws-3` stalls after one second and is cut off once its next reading is 2 s old,
//!   instead of holding anyone back.
//!
//! Every second the hub's table is printed: position, lag in items and seconds,
//! delivered, dropped, state.
//!
//! Run: `cargo run --release --example fanout` (about six seconds).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use weir::hub::{Hub, Policy};
use weir::metrics::{DropHook, Drops};
use weir::prelude::*;
use weir::source::channel::ChannelPolicy;
use weir::DropReason;

/// How the story runs (the test runs a shorter one).
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Readings per second.
    pub rate: u64,
    /// How long the feed runs.
    pub run_for: Duration,
    /// The websocket clients' lag limit.
    pub lag_limit: Duration,
    /// When `ws-3` stops reading.
    pub stall_after: Duration,
    /// Print the table every second.
    pub print: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            rate: 50_000,
            run_for: Duration::from_secs(6),
            lag_limit: Duration::from_secs(2),
            stall_after: Duration::from_secs(1),
            print: true,
        }
    }
}

/// What each subscriber ended with.
#[derive(Debug)]
pub struct Report {
    /// Readings the feed produced.
    pub sent: u64,
    /// What `audit` received, in order.
    pub audit: Vec<u64>,
    /// What the dashboard showed, and how many readings it skipped (counted by its
    /// drop hook).
    pub dashboard: (Vec<u64>, u64),
    /// Readings each healthy client received.
    pub clients: [u64; 2],
    /// What ws-3 received before it stalled, and the error it got.
    pub stalled: (u64, Option<weir::Error>),
}

/// Run the story.
pub fn run(config: Config) -> Report {
    let (tx, feed) = weir::channel::<u64>(4_096, ChannelPolicy::Backpressure);
    // A ring that holds the lag limit's worth of readings, so that the clients' limit
    // is the age, not the ring.
    let capacity = (config.rate * config.lag_limit.as_millis() as u64 / 1_000 * 2)
        .next_power_of_two() as usize;
    let hub = Hub::builder(feed, capacity).connect_at(5).build();

    let audit = {
        let hub = hub.clone();
        thread::spawn(move || {
            hub.join(Policy::Backpressure)
                .named("audit")
                .blocking_iter(256)
                .map(|r| r.expect("audit loses nothing"))
                .collect::<Vec<_>>()
        })
    };
    let fed = Arc::new(AtomicBool::new(false));
    let skipped = Drops::new();
    let dashboard = {
        let (hub, fed) = (hub.clone(), fed.clone());
        let hook = DropHook::new(skipped.clone());
        thread::spawn(move || {
            let mut shown = Vec::new();
            let latest = hub.join(Policy::Latest).named("dashboard").on_dropped(hook);
            // Reads one reading at a time; leaves (cancels) once the feed ended.
            for reading in latest.blocking_iter(1) {
                shown.push(reading.expect("the dashboard is lossy, never failed"));
                if fed.load(Ordering::Relaxed) {
                    break;
                }
                thread::sleep(Duration::from_millis(100));
            }
            shown
        })
    };
    let stall = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (1..=3)
        .map(|i| {
            let (hub, stall) = (hub.clone(), stall.clone());
            thread::spawn(move || {
                let policy = Policy::disconnect_after(config.lag_limit);
                let mut received = 0u64;
                for reading in hub.join(policy).named(format!("ws-{i}")).blocking_iter(256) {
                    match reading {
                        Ok(_) => received += 1,
                        Err(error) => return (received, Some(error)),
                    }
                    while i == 3 && stall.load(Ordering::Relaxed) {
                        thread::sleep(Duration::from_millis(10));
                    }
                }
                (received, None)
            })
        })
        .collect();

    // The feed: `rate` readings a second, in steps of 10 ms.
    let start = Instant::now();
    let mut sent = 0u64;
    let mut next_print = Duration::from_secs(1);
    while start.elapsed() < config.run_for {
        let due = (start.elapsed().as_secs_f64() * config.rate as f64) as u64;
        while sent < due {
            tx.send_blocking(sent).expect("the hub reads");
            sent += 1;
        }
        if start.elapsed() >= config.stall_after {
            stall.store(true, Ordering::Relaxed);
        }
        if config.print && start.elapsed() >= next_print {
            println!("t = {:.0} s\n{}", next_print.as_secs_f64(), hub.stats());
            next_print += Duration::from_secs(1);
        }
        thread::sleep(Duration::from_millis(10));
    }
    drop(tx);
    fed.store(true, Ordering::Relaxed);
    if config.print {
        println!("the feed ended after {sent} readings\n{}", hub.stats());
    }
    let audit = audit.join().expect("audit");
    let shown = dashboard.join().expect("dashboard");
    let skipped = skipped.count(DropReason::ReplacedByLatest);
    // ws-3 was cut off: let it go (a real client would reconnect).
    stall.store(false, Ordering::Relaxed);
    let mut results: Vec<_> = clients
        .into_iter()
        .map(|c| c.join().expect("client"))
        .collect();
    let stalled = results.pop().expect("ws-3");
    Report {
        sent,
        audit,
        dashboard: (shown, skipped),
        clients: [results[0].0, results[1].0],
        stalled,
    }
}

/// The story with its defaults, printed.
pub fn main() {
    let report = run(Config::default());
    println!(
        "audit: {} of {} readings, in order: {}",
        report.audit.len(),
        report.sent,
        report.audit.iter().copied().eq(0..report.sent)
    );
    println!(
        "dashboard: showed {} readings, skipped {} (Latest)",
        report.dashboard.0.len(),
        report.dashboard.1
    );
    println!(
        "ws-1, ws-2: {} and {} readings",
        report.clients[0], report.clients[1]
    );
    match &report.stalled {
        (received, Some(error)) => {
            println!("ws-3: {received} readings, then cut off: {error}")
        }
        (received, None) => println!("ws-3: {received} readings, never cut off"),
    }
}
