//! Oversubscription: 64 pipelines at once across small thread pools on two cores, with
//! random prefetch (1, 2, 3 or 256) and random consumer delays, under one hang
//! watchdog for the lot. Every pipeline must deliver exactly its items, in order, and
//! nothing may stay alive afterwards.
//!
//! Boundaries crossed (one pipeline kind each, round-robin):
//! `range → subscribe_on(pool A) → publish_on(pool B, prefetch) → fold`,
//! `channel(prefetch) fed by a thread → publish_on(pool B, prefetch) → fold`,
//! `range → publish_on(pool A, prefetch) → into_stream(prefetch)` drained on a thread,
//! `from_stream_on(pool A) → publish_on(pool B, prefetch) → fold`,
//! `channel(prefetch) fed by a thread → share(prefetch) → publish_on(pool B, prefetch) → fold`.
//!
//! The pools have one or two workers each, so with the producers and consumers there
//! are many more runnable threads than cores: a boundary that spins instead of parking
//! (or misses a wake-up) shows up as a pipeline that does not finish.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use weir::prelude::*;
use weir::runtime::ThreadPool;
use weir::source::channel::ChannelPolicy;
use weir::BoxPublisher;

use crate::harness::item::{Fate, Item, Ledger};
use crate::harness::rng::{seed, Rng};
use crate::harness::spinners::Spinners;
use crate::harness::watch::{assert_no_failures, wait_until, PATIENCE};

/// Pipelines run at once.
const PIPELINES: u64 = 64;
/// Items per pipeline.
const ITEMS: u64 = 2_000;
/// The hang watchdog for all of them together.
const WATCHDOG: Duration = Duration::from_secs(120);

/// How a pipeline's consumer dawdles.
#[derive(Clone, Copy, Debug)]
enum Delay {
    None,
    /// Sleep this long after every `n`th item.
    Every(u64, Duration),
}

/// Which boundaries a pipeline crosses.
#[derive(Clone, Copy, Debug)]
enum Boundaries {
    SubscribeOnPublishOn,
    ChannelPublishOn,
    PublishOnIntoStream,
    FromStreamPublishOn,
    ChannelSharePublishOn,
}

/// The consumer's bookkeeping: items seen, and the first out-of-order one.
struct Progress {
    seen: AtomicU64,
    delay: Delay,
}

impl Progress {
    /// Take one item; `Err` at the first one out of order.
    fn take(&self, mut item: Item) -> Result<(), String> {
        item.mark(Fate::Delivered);
        let n = self.seen.fetch_add(1, Ordering::SeqCst);
        if let Delay::Every(every, pause) = self.delay {
            if n % every == every - 1 {
                std::thread::sleep(pause);
            }
        }
        if item.value == n {
            Ok(())
        } else {
            Err(format!("item #{n} was {}", item.value))
        }
    }
}

#[test]
fn sixty_four_pipelines_across_small_pools_on_two_cores() {
    let ledger = Ledger::new();
    let pools_a = [pool("over-a0", 1), pool("over-a1", 2)];
    let pools_b = [pool("over-b0", 1), pool("over-b1", 2)];
    let (done_tx, done_rx) = mpsc::channel();
    let mut pipelines = Vec::new();
    let start = Instant::now();
    for index in 0..PIPELINES {
        let mut rng = Rng::new(1_000 + index);
        let prefetch = rng.pick(&[1u64, 2, 3, 256]);
        let delay = rng.pick(&[
            Delay::None,
            Delay::Every(8, Duration::from_micros(20)),
            Delay::Every(64, Duration::from_micros(200)),
        ]);
        let kind = [
            Boundaries::SubscribeOnPublishOn,
            Boundaries::ChannelPublishOn,
            Boundaries::PublishOnIntoStream,
            Boundaries::FromStreamPublishOn,
            Boundaries::ChannelSharePublishOn,
        ][(index % 5) as usize];
        let a = rng.pick(&pools_a);
        let b = rng.pick(&pools_b);
        let progress = Arc::new(Progress {
            seen: AtomicU64::new(0),
            delay,
        });
        pipelines.push((kind, prefetch, delay, progress.clone()));
        let done = done_tx.clone();
        let ledger = ledger.clone();
        std::thread::Builder::new()
            .name(format!("over-{index}"))
            .spawn(move || {
                let result = run(kind, prefetch, a, b, &ledger, &progress);
                let _ = done.send((index, result));
            })
            .expect("spawn a pipeline thread");
    }
    drop(done_tx);
    let mut results = vec![None; PIPELINES as usize];
    let deadline = start + WATCHDOG;
    for _ in 0..PIPELINES {
        let left = deadline.saturating_duration_since(Instant::now());
        match done_rx.recv_timeout(left) {
            Ok((index, result)) => results[index as usize] = Some(result),
            Err(_) => break,
        }
    }
    let elapsed = start.elapsed();
    eprintln!(
        "oversubscription: {PIPELINES} pipelines of {ITEMS} items in {elapsed:?} (seed {})",
        seed()
    );
    let mut failures = Vec::new();
    for (index, ((kind, prefetch, delay, progress), result)) in
        pipelines.iter().zip(&results).enumerate()
    {
        let name = format!("pipeline #{index} ({kind:?}, prefetch {prefetch}, delay {delay:?})");
        match result {
            None => failures.push(format!(
                "{name}: not finished after {WATCHDOG:?}: {} of {ITEMS} items delivered",
                progress.seen.load(Ordering::SeqCst)
            )),
            Some(Err(why)) => failures.push(format!("{name}: {why}")),
            Some(Ok(())) => {}
        }
    }
    if failures.is_empty() && !wait_until(PATIENCE, || ledger.live() == 0) {
        failures.push(format!(
            "{} items still alive after every pipeline finished",
            ledger.live()
        ));
    }
    assert_no_failures("oversubscription", PIPELINES as usize, &failures);
}

fn pool(name: &str, threads: usize) -> ThreadPool {
    ThreadPool::builder().name(name).threads(threads).build()
}

/// Run one pipeline to its end: `Ok` if it delivered exactly `0..ITEMS` in order.
fn run(
    kind: Boundaries,
    prefetch: u64,
    a: ThreadPool,
    b: ThreadPool,
    ledger: &Arc<Ledger>,
    progress: &Arc<Progress>,
) -> Result<(), String> {
    let produce = {
        let ledger = ledger.clone();
        move |value| ledger.produce(value)
    };
    let fold = |publisher: BoxPublisher<Item>| {
        let progress = progress.clone();
        publisher
            .fold_with(
                prefetch,
                Ok(()),
                move |verdict: Result<(), String>, item| {
                    let taken = progress.take(item);
                    verdict.and(taken)
                },
            )
            .wait()
            .map_err(|e| format!("failed: {e}"))
            .and_then(|verdict| verdict)
    };
    let verdict = match kind {
        Boundaries::SubscribeOnPublishOn => fold(
            weir::range(0..ITEMS)
                .map(produce)
                .subscribe_on(a)
                .publish_on(b, prefetch)
                .boxed(),
        ),
        Boundaries::ChannelPublishOn => {
            let (tx, rx) = weir::channel::<Item>(prefetch as usize, ChannelPolicy::Backpressure);
            let producer = std::thread::spawn(move || {
                for value in 0..ITEMS {
                    if let Err(refused) = tx.send_blocking(produce(value)) {
                        refused.into_inner().mark(Fate::HandedBack);
                        return;
                    }
                }
            });
            let verdict = fold(rx.publish_on(b, prefetch).boxed());
            let _ = producer.join();
            verdict
        }
        Boundaries::PublishOnIntoStream => {
            let mut stream = weir::range(0..ITEMS)
                .map(produce)
                .publish_on(a, prefetch)
                .into_stream(prefetch);
            futures::executor::block_on(async {
                let mut verdict = Ok(());
                while let Some(item) = stream.next().await {
                    match item {
                        Ok(item) => verdict = verdict.and(progress.take(item)),
                        Err(e) => return Err(format!("failed: {e}")),
                    }
                }
                verdict
            })
        }
        Boundaries::FromStreamPublishOn => {
            let stream = futures::stream::iter((0..ITEMS).map(produce));
            fold(
                weir::from_stream_on(stream, a)
                    .publish_on(b, prefetch)
                    .boxed(),
            )
        }
        Boundaries::ChannelSharePublishOn => {
            let (tx, rx) =
                weir::channel::<Arc<Item>>(prefetch as usize, ChannelPolicy::Backpressure);
            let producer = std::thread::spawn(move || {
                for value in 0..ITEMS {
                    if let Err(refused) = tx.send_blocking(Arc::new(produce(value))) {
                        if let Ok(mut item) = Arc::try_unwrap(refused.into_inner()) {
                            item.mark(Fate::HandedBack);
                        }
                        return;
                    }
                }
            });
            // The hub clones its items for each subscriber: they go in shared (`Arc`)
            // and come out as new items of the same values.
            let verdict = fold(
                rx.share(prefetch as usize)
                    .publish_on(b, prefetch)
                    .map(|shared: Arc<Item>| shared.derive(shared.value))
                    .boxed(),
            );
            let _ = producer.join();
            verdict
        }
    };
    verdict?;
    let seen = progress.seen.load(Ordering::SeqCst);
    if seen == ITEMS {
        Ok(())
    } else {
        Err(format!("completed after {seen} of {ITEMS} items"))
    }
}

/// Every boundary on a busy machine: eight threads spin on the two cores while one
/// pipeline of 200,000 items crosses the boundary with a small window (prefetch 16:
/// a replenish every 12 items, so a boundary that waits for the other side by
/// yielding its time slice, or parks late, needs thousands of scheduler turns).
/// Each must deliver every item before a generous hang watchdog; the elapsed time is
/// printed (the figures belong to the benchmarks, not to this assertion). Measured on
/// the 2-core CI machine: about 0.4 s for `subscribe_on → publish_on(16)` (the
/// pre-engine-room code needed 7.0 s here).
#[test]
fn every_boundary_finishes_on_a_busy_machine() {
    const N: u64 = 200_000;
    const BUSY_WATCHDOG: Duration = Duration::from_secs(60);
    type Build = fn(ThreadPool, ThreadPool) -> BoxPublisher<u64>;
    let rows: [(&str, Build); 6] = [
        ("range → subscribe_on → publish_on(16)", |a, b| {
            weir::range(0..N).subscribe_on(a).publish_on(b, 16).boxed()
        }),
        // A large window: a replenish every 192 items, each of which must not cost a
        // scheduler time slice (the pre-engine-room code: 3.3 s here).
        ("range → subscribe_on → publish_on(256)", |a, b| {
            weir::range(0..N).subscribe_on(a).publish_on(b, 256).boxed()
        }),
        ("range → publish_on(16)", |_, b| {
            weir::range(0..N).publish_on(b, 16).boxed()
        }),
        ("from_stream_on → publish_on(16)", |a, b| {
            weir::bridge::from_stream_on(futures::stream::iter(0..N), a)
                .publish_on(b, 16)
                .boxed()
        }),
        ("channel(16) fed by a thread → publish_on(16)", |_, b| {
            let (tx, rx) = weir::channel(16, ChannelPolicy::Backpressure);
            std::thread::spawn(move || {
                for i in 0..N {
                    if tx.send_blocking(i).is_err() {
                        return;
                    }
                }
            });
            rx.publish_on(b, 16).boxed()
        }),
        // A hub subscriber behind its own boundary, fed one item at a time.
        (
            "channel(16) fed by a thread → share(16) → publish_on(16)",
            |_, b| {
                let (tx, rx) = weir::channel(16, ChannelPolicy::Backpressure);
                std::thread::spawn(move || {
                    for i in 0..N {
                        if tx.send_blocking(i).is_err() {
                            return;
                        }
                    }
                });
                rx.share(16).publish_on(b, 16).boxed()
            },
        ),
    ];
    let _busy = Spinners::start(8);
    let mut failures = Vec::new();
    for (name, build) in rows {
        let result = crate::harness::watch::on_thread(name, BUSY_WATCHDOG, move || {
            let start = Instant::now();
            let (a, b) = (ThreadPool::new(1), ThreadPool::new(1));
            let sum = build(a.clone(), b.clone())
                .fold((0u64, 0u64), |(n, sum), x| (n + 1, sum + x))
                .wait();
            a.shutdown();
            b.shutdown();
            (sum, start.elapsed())
        });
        match result {
            Ok((Ok((n, sum)), elapsed)) => {
                eprintln!("busy machine: {name}: {n} items in {elapsed:?}");
                if (n, sum) != (N, N * (N - 1) / 2) {
                    failures.push(format!("{name}: {n} items (sum {sum}), expected {N}"));
                }
            }
            Ok((Err(error), _)) => failures.push(format!("{name}: failed: {error}")),
            Err(hang) => failures.push(hang),
        }
    }
    assert_no_failures("every boundary on a busy machine", 6, &failures);
}
