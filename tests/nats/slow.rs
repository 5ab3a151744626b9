//! A consumer ten times slower than the producer: the backlog grows on the server,
//! not in the client, and the source's lag is pending ÷ consume rate.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use weir::nats::Source;
use weir::prelude::*;
use weir::runtime::ThreadPool;

use crate::fixture::{exclusive, Env};
use crate::LIVE_BYTES;

/// Payload bytes per message.
const SIZE: usize = 512;

#[test]
fn a_slow_consumer_leaves_the_backlog_on_the_server_and_its_lag_is_pending_over_rate() {
    let _alone = exclusive();
    let env = Env::alone();
    env.stream("SENSORS");
    let consumer = env.consumer("SENSORS", "slow", 64, Duration::from_secs(30));
    let source = Source::builder(consumer.clone())
        .window(64)
        .runtime(env.rt.handle().clone())
        .build();
    let monitor = source.queue_monitor().expect("a monitor");
    let processed = Arc::new(AtomicU64::new(0));
    // About 1,000 messages a second: one millisecond of work each.
    let reader = std::thread::spawn({
        let processed = processed.clone();
        move || {
            source
                .publish_on(ThreadPool::new(1), 16)
                .fold((), move |(), message| {
                    std::thread::sleep(Duration::from_millis(1));
                    message.ack_detached();
                    processed.fetch_add(1, Ordering::Relaxed);
                })
                .wait()
        }
    });
    // The producer: ten times faster, for three seconds.
    let payload = Bytes::from(vec![b'x'; SIZE]);
    let mut baseline = None;
    let mut peak = 0i64;
    let published = env.rt.block_on(async {
        let started = tokio::time::Instant::now();
        let mut sent = 0u64;
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        while started.elapsed() < Duration::from_secs(3) {
            tick.tick().await;
            let mut acks = Vec::with_capacity(100);
            for _ in 0..100 {
                acks.push(
                    env.js
                        .publish("SENSORS.t", payload.clone())
                        .await
                        .expect("publish"),
                );
            }
            for ack in acks {
                ack.await.expect("publish ack");
            }
            sent += 100;
            // The client's heap once the consumer runs, and its peak after.
            let live = LIVE_BYTES.load(Ordering::Relaxed);
            if started.elapsed() > Duration::from_millis(500) {
                let base = *baseline.get_or_insert(live);
                peak = peak.max(live - base);
            }
        }
        sent
    });
    let info = env.info(&consumer);
    let done = processed.load(Ordering::Relaxed);
    eprintln!(
        "published {published}, processed {done}, pending on the server {}, heap growth peak {peak} bytes",
        info.num_pending
    );
    // The backlog is on the server...
    assert!(
        info.num_pending >= published / 2,
        "pending {} of {published}",
        info.num_pending
    );
    // ...not in the client: its heap grew by less than the backlog's payload alone
    // would take a tenth of (the window is 64 messages of 512 bytes).
    let backlog_bytes = info.num_pending as i64 * SIZE as i64;
    assert!(
        peak < backlog_bytes / 10,
        "the heap grew by {peak} bytes with {backlog_bytes} bytes waiting on the server"
    );
    // The producer stopped: the backlog only drains now. Measure the consume rate
    // over four seconds and compare the source's lag with pending ÷ that rate.
    let window = Duration::from_secs(4);
    let start = (Instant::now(), processed.load(Ordering::Relaxed));
    std::thread::sleep(window);
    let end = (Instant::now(), processed.load(Ordering::Relaxed));
    let rate = (end.1 - start.1) as f64 / (end.0 - start.0).as_secs_f64();
    let stats = monitor.snapshot_over(window);
    let pending = env.info(&consumer).num_pending as f64;
    let lag = stats.lag().expect("a lag").as_secs_f64();
    let expected = pending / rate;
    eprintln!(
        "consume rate {rate:.0}/s (monitor {:.0}/s), pending {pending} (monitor {}), lag {lag:.2} s, pending/rate {expected:.2} s",
        stats.drain_rate, stats.depth
    );
    assert!(
        (lag - expected).abs() <= expected * 0.05,
        "lag {lag:.3} s against pending / rate {expected:.3} s"
    );
    drop(reader);
}
