//! weir's `tracing` events, printed by `tracing-subscriber`'s `fmt` layer.
//!
//! A small story in four acts, each a state change an operator wants to see:
//!
//! 1. A producer outruns a channel with water marks (pause at 800, resume at 200):
//!    every pause and every resume is one `info` event (`weir::channel`), never one
//!    per item.
//! 2. A hub feeds a `Backpressure` audit and a `Disconnect` dashboard that stalls:
//!    the dashboard is cut off (`Lagged`), one `info` event (`weir::hub`) with its
//!    id, name and lag; joins, leaves and the hub's upstream at `debug`.
//! 3. A lossy stage (`on_backpressure_drop`) in front of a consumer with a window of
//!    16 drops 99,984 of 100,000 items: a `debug` summary (`weir::drops`) at each
//!    power of two of its running total and one at its end, about `log2(n)` events.
//! 4. A mux channel whose consumer takes 100 items and cancels: a `debug` event
//!    (`weir::mux`) with what its receive window dropped and the credit that went
//!    back, and one when the channel closes, with its final figures.
//!
//! At `info` only the pauses, the resumes and the cut-off show: steady state is quiet.
//! At `debug` the rest shows too (stage ends, cancels, drop summaries, hub and mux
//! bookkeeping).
//!
//! Run: `cargo run --example tracing` (level `info`), or
//! `cargo run --example tracing -- debug`.

use std::thread;
use std::time::Duration;

use weir::hub::{Hub, Policy};
use weir::metrics::{DropHook, Drops};
use weir::mux::Mux;
use weir::prelude::*;
use weir::runtime::ThreadPool;
use weir::source::channel::{ChannelBuilder, ChannelPolicy, WaterMarks};
use weir::{DropReason, Error, Subscription};

fn main() {
    let level = match std::env::args().nth(1).as_deref() {
        Some("debug") => tracing::Level::DEBUG,
        Some("trace") => tracing::Level::TRACE,
        _ => tracing::Level::INFO,
    };
    // No env-filter feature: the level comes from the command line.
    tracing_subscriber::fmt()
        .with_max_level(level)
        .without_time()
        .init();

    println!("-- 1. a producer outruns a channel with water marks (800 / 200)");
    let pauses = water_marks();
    println!("   the producer paused {pauses} times");

    println!("-- 2. a hub: a Backpressure audit and a Disconnect dashboard that stalls");
    let audited = hub_with_a_stalled_subscriber();
    println!("   the audit got {audited} items");

    println!("-- 3. a lossy stage in front of a consumer with a window of 16");
    let (kept, dropped) = lossy_stage();
    println!("   kept {kept}, dropped {dropped}");

    println!("-- 4. a mux channel whose consumer takes 100 items and cancels");
    let taken = mux_channel_cancelled();
    println!("   the consumer took {taken} items");
}

/// Act 1: 3,000 items into a channel of 1,000 drained at about 64 items a
/// millisecond. The producer waits for the resume whenever the channel pauses.
fn water_marks() -> u32 {
    let (tx, rx) = ChannelBuilder::new(1_000, ChannelPolicy::Backpressure)
        .water_marks(WaterMarks::new(800, 200))
        .build::<u64>();
    let consumer = thread::spawn(move || {
        let mut n = 0u64;
        for item in rx.blocking_iter(64) {
            item.expect("the channel completes");
            n += 1;
            if n % 64 == 0 {
                thread::sleep(Duration::from_millis(1));
            }
        }
        n
    });
    let mut pauses = 0;
    for i in 0..3_000 {
        if tx.state().is_paused() {
            pauses += 1;
            tx.wait_resumed().expect("the consumer keeps reading");
        }
        tx.send_blocking(i).expect("the consumer keeps reading");
    }
    drop(tx);
    assert_eq!(consumer.join().expect("the consumer ran"), 3_000);
    pauses
}

/// A hub subscriber that asks for ten items and then stops reading.
struct Stalls;

impl Subscriber<u64> for Stalls {
    fn on_subscribe(&mut self, subscription: Subscription) {
        subscription.request(10);
    }

    fn on_next(&mut self, _: u64) {}

    fn on_error(&mut self, error: Error) {
        println!("   the dashboard got: {error}");
    }

    fn on_complete(&mut self) {}
}

/// Act 2: 5,000 items through a hub of 256; the dashboard may lag 100 items.
fn hub_with_a_stalled_subscriber() -> u64 {
    let hub = Hub::builder(weir::range(0u64..5_000), 256)
        .connect_at(2)
        .build();
    hub.join(Policy::disconnect_after_items(100))
        .named("dashboard")
        .subscribe(Stalls);
    hub.fold(0u64, |n, _| n + 1)
        .wait()
        .expect("the audit gets everything")
}

/// Act 3: 100,000 items pushed at once at a consumer that holds a window of 16.
fn lossy_stage() -> (usize, u64) {
    let drops = Drops::new();
    let kept = weir::range(0u64..100_000)
        .on_backpressure_drop()
        .on_dropped(DropHook::new(drops.clone()))
        .blocking_iter(16)
        .count();
    (kept, drops.count(DropReason::OverflowNewest))
}

/// Act 4: a channel of a mux over a pool of two threads; its consumer cancels after
/// 100 items of a million.
fn mux_channel_cancelled() -> u64 {
    let pool = ThreadPool::builder().threads(2).build();
    let mux = Mux::<u64>::builder()
        .build_local(pool.clone(), pool.clone())
        .expect("a valid configuration");
    let taken = weir::range(0u64..1_000_000)
        .via(&mux, 1)
        .expect("channel 1 is free")
        .take(100)
        .fold(0u64, |n, _| n + 1)
        .wait()
        .expect("take completes");
    drop(mux);
    // The channel closes once its last frames come back (on the pool's threads).
    thread::sleep(Duration::from_millis(50));
    taken
}
