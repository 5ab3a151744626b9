//! At-least-once through faults: the server killed with SIGKILL mid-run and started
//! again on the same store.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir::nats::Source;
use weir::prelude::*;
use weir::runtime::ThreadPool;

use crate::fixture::{number, Env};

const MESSAGES: u64 = 100_000;

/// Per message: deliveries seen, the delivery count the server gave the last one,
/// and whether an ack of it was confirmed.
struct Ledger {
    seen: Vec<AtomicU8>,
    confirmed: Vec<AtomicBool>,
    /// Deliveries of a message whose ack the server had confirmed before.
    after_confirm: AtomicU64,
    /// Deliveries marked as redeliveries (delivery count > 1).
    marked: AtomicU64,
    /// Of those, deliveries of a message seen here for the first time (its
    /// earlier delivery was lost with the server).
    first_seen_marked: AtomicU64,
    /// Deliveries beyond the first seen here.
    duplicates: AtomicU64,
    /// Of those, deliveries whose count was not above the one seen before (a
    /// duplicate the server did not report as a redelivery).
    unmarked: AtomicU64,
    /// The delivery count of the last delivery seen, per message.
    count: Vec<AtomicU64>,
    processed: AtomicU64,
}

#[test]
fn a_server_killed_mid_run_loses_nothing_and_every_duplicate_is_a_counted_redelivery() {
    let mut env = Env::new();
    env.stream("DURABLE");
    let consumer = env.consumer("DURABLE", "workers", 1_024, Duration::from_secs(3));
    env.publish("DURABLE.x", 0..MESSAGES);
    let ledger = Arc::new(Ledger {
        seen: (0..MESSAGES).map(|_| AtomicU8::new(0)).collect(),
        confirmed: (0..MESSAGES).map(|_| AtomicBool::new(false)).collect(),
        after_confirm: AtomicU64::new(0),
        marked: AtomicU64::new(0),
        first_seen_marked: AtomicU64::new(0),
        duplicates: AtomicU64::new(0),
        unmarked: AtomicU64::new(0),
        count: (0..MESSAGES).map(|_| AtomicU64::new(0)).collect(),
        processed: AtomicU64::new(0),
    });
    let source = Source::builder(consumer.clone())
        .window(256)
        .expires(Duration::from_millis(500))
        .give_up_after(Duration::MAX)
        .dedup_horizon(1 << 17)
        .runtime(env.rt.handle().clone())
        .build();
    let counters = source.clone();
    let runtime = env.rt.handle().clone();
    let pool = ThreadPool::new(1);
    let done = std::thread::spawn({
        let ledger = ledger.clone();
        move || {
            source
                .publish_on(pool, 256)
                .fold((), move |(), message| {
                    let n = usize::try_from(number(&message)).unwrap();
                    let first = ledger.seen[n].fetch_add(1, Ordering::Relaxed) == 0;
                    if !first {
                        ledger.duplicates.fetch_add(1, Ordering::Relaxed);
                    } else if message.is_redelivered() {
                        ledger.first_seen_marked.fetch_add(1, Ordering::Relaxed);
                    }
                    let before = ledger.count[n].swap(message.delivery_count(), Ordering::Relaxed);
                    if before > 0 && message.delivery_count() <= before {
                        ledger.unmarked.fetch_add(1, Ordering::Relaxed);
                    }
                    if message.is_redelivered() {
                        ledger.marked.fetch_add(1, Ordering::Relaxed);
                    }
                    if ledger.confirmed[n].load(Ordering::Relaxed) {
                        ledger.after_confirm.fetch_add(1, Ordering::Relaxed);
                    }
                    if ledger.seen[n].load(Ordering::Relaxed) == 1 {
                        ledger.processed.fetch_add(1, Ordering::Relaxed);
                    }
                    // Every 50th message fails its first processing (not acked): the
                    // server delivers it again after ack_wait, a redelivery to count.
                    if n % 50 == 0 && first {
                        return;
                    }
                    let ledger = ledger.clone();
                    runtime.spawn(async move {
                        if message.ack_confirmed().await.is_ok() {
                            ledger.confirmed[n].store(true, Ordering::Relaxed);
                        }
                    });
                })
                .wait()
        }
    });
    // Kill the server once a third is processed, start it again a second later.
    let started = Instant::now();
    while ledger.processed.load(Ordering::Relaxed) < MESSAGES / 3 {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "stuck before the kill"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    env.server.kill();
    std::thread::sleep(Duration::from_secs(1));
    env.server.restart();
    while ledger.processed.load(Ordering::Relaxed) < MESSAGES {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "processed {} of {MESSAGES}",
            ledger.processed.load(Ordering::Relaxed)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Everything processed; let the last acks land.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let info = env.info(&consumer);
        if info.num_ack_pending == 0 && info.num_pending == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "still pending: {info:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let stats = counters.stats();
    let duplicates = ledger.duplicates.load(Ordering::Relaxed);
    let marked = ledger.marked.load(Ordering::Relaxed);
    let first_seen_marked = ledger.first_seen_marked.load(Ordering::Relaxed);
    eprintln!(
        "delivered {} duplicates {duplicates} unmarked {} marked {marked} (first seen {first_seen_marked}) \
         suppressed {} pulls {} pull failures {}",
        stats.delivered,
        ledger.unmarked.load(Ordering::Relaxed),
        stats.suppressed,
        stats.pulls,
        stats.pull_failures
    );
    // At least once: every message processed.
    assert!(ledger.seen.iter().all(|n| n.load(Ordering::Relaxed) >= 1));
    // Exactly once for what was acked: nothing confirmed came back downstream.
    assert_eq!(ledger.after_confirm.load(Ordering::Relaxed), 0);
    // Every duplicate is a counted redelivery, and every counted redelivery is a
    // duplicate or the first sight of a message whose earlier delivery was lost.
    assert_eq!(ledger.unmarked.load(Ordering::Relaxed), 0);
    assert!(
        duplicates >= MESSAGES / 50,
        "the withheld acks came back: {duplicates} duplicates"
    );
    assert_eq!(stats.delivered, MESSAGES + duplicates);
    assert_eq!(stats.redelivered, marked);
    assert_eq!(marked, duplicates + first_seen_marked);
    drop(done);
}
