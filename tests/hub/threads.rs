//! The hub under threads: a producer thread feeding it, subscribers consuming on
//! other threads, one of them stalled; subscribe and cancel storms.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use weir::hub::{Hub, Policy};
use weir::prelude::*;
use weir::runtime::ThreadPool;
use weir::source::channel::ChannelPolicy;

use super::{ended, iterate_on_threads, member, probe};

const N: u64 = 200_000;

/// A producer thread sending `0..n` (waiting for room) into a hub of `capacity`
/// that connects once `k` subscribers are there.
fn produced(n: u64, capacity: usize, k: usize) -> (Hub<u64>, thread::JoinHandle<()>) {
    let (tx, rx) = weir::channel::<u64>(1_024, ChannelPolicy::Backpressure);
    let producer = thread::spawn(move || {
        for i in 0..n {
            tx.send_blocking(i).expect("the hub reads");
        }
    });
    (Hub::builder(rx, capacity).connect_at(k).build(), producer)
}

#[test]
fn a_stalled_drop_oldest_subscriber_of_eight_holds_nobody_back() {
    let (hub, producer) = produced(N, 256, 8);
    let pool = ThreadPool::builder().name("hub-test").threads(2).build();
    let stalled = probe(hub.join(Policy::DropOldest).named("stalled"));
    let fast: Vec<_> = (0..7)
        .map(|_| {
            hub.clone()
                .publish_on(pool.clone(), 64)
                .fold(Vec::new(), |mut v, x| {
                    v.push(x);
                    v
                })
        })
        .collect();
    for handle in fast {
        let items = handle.wait().expect("completes");
        assert_eq!(items.len() as u64, N, "a fast subscriber got everything");
        assert!(items.iter().copied().eq(0..N), "in order");
    }
    producer.join().unwrap();
    // The stalled one never asked: it holds the last ring's worth, the rest skipped.
    let me = member(&hub, 0);
    assert_eq!(me.position + me.lag, N);
    assert_eq!(
        me.dropped, me.position,
        "it skipped exactly what it never read"
    );
    stalled.request(u64::MAX);
    let items = stalled.items();
    assert_eq!(
        items.len() as u64 + me.dropped,
        N,
        "delivered + dropped = published"
    );
    assert!(
        items.iter().copied().eq(N - items.len() as u64..N),
        "the newest items"
    );
    assert!(stalled.is_completed());
}

#[test]
fn a_stalled_backpressure_subscriber_stops_upstream_at_the_ring() {
    let (tx, rx) = weir::channel::<u64>(1 << 20, ChannelPolicy::Backpressure);
    let hub = Hub::builder(rx, 128).connect_at(2).build();
    let stalled = probe(hub.clone());
    let consumed = Arc::new(AtomicU64::new(0));
    let counter = consumed.clone();
    let pool = ThreadPool::builder().name("hub-test").threads(1).build();
    let fast = hub.clone().publish_on(pool, 16).for_each(move |_| {
        counter.fetch_add(1, Ordering::Relaxed);
    });
    let producer = thread::spawn(move || {
        for i in 0..10_000u64 {
            tx.try_send(i).expect("room upstream");
        }
        tx
    });
    let tx = producer.join().unwrap();
    // Wait (bounded) until the fast one has what the ring let through.
    for _ in 0..2_000 {
        if consumed.load(Ordering::Relaxed) == 128 {
            break;
        }
        thread::sleep(Duration::from_millis(1));
    }
    thread::sleep(Duration::from_millis(20));
    assert_eq!(
        consumed.load(Ordering::Relaxed),
        128,
        "no item beyond the ring"
    );
    let stats = hub.stats();
    assert_eq!((stats.occupancy, stats.upstream_outstanding), (128, 0));
    // The rest waits upstream: the channel handed over exactly what the ring let
    // through. (Counted out of the channel, not by its depth: a watching drain's
    // lane may hold up to one batch of the waiting items, which the depth counts
    // only once a drain takes them.)
    let channel = tx.monitor().snapshot();
    assert_eq!(channel.dequeued, 128, "the rest waits upstream");
    assert!(
        (10_000 - 128 - 256..=10_000 - 128).contains(&channel.depth),
        "the rest waits upstream: {} queued",
        channel.depth
    );
    stalled.request(u64::MAX);
    drop(tx);
    // The rest reaches it on whichever thread moves the hub (this one or the pool's).
    stalled
        .await_completion(Duration::from_secs(30))
        .expect("completes");
    assert!(stalled.items().into_iter().eq(0..10_000));
    fast.wait().unwrap();
    assert_eq!(consumed.load(Ordering::Relaxed), 10_000);
}

#[test]
fn subscribers_joining_and_leaving_on_many_threads_while_items_flow() {
    let (hub, producer) = produced(N, 64, 1);
    // One subscriber that takes everything keeps the hub connected throughout (it
    // subscribes first: were a churner first, its leaving would stop the hub).
    let anchor = hub.clone().fold(0u64, |n, _| n + 1);
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(4));
    let churners: Vec<_> = (0..3)
        .map(|t| {
            let (hub, stop, start) = (hub.clone(), stop.clone(), start.clone());
            thread::spawn(move || {
                start.wait();
                let mut rounds = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let policy = [Policy::Backpressure, Policy::DropOldest, Policy::Latest][t];
                    let p = probe(hub.join(policy));
                    p.request(1 + rounds % 7);
                    let items = p.items();
                    assert!(items.windows(2).all(|w| w[0] < w[1]));
                    if policy == Policy::Backpressure {
                        assert!(items.windows(2).all(|w| w[1] == w[0] + 1), "contiguous");
                    }
                    assert!(items.len() as u64 <= 1 + rounds % 7, "rule 1.1");
                    p.cancel();
                    rounds += 1;
                }
                rounds
            })
        })
        .collect();
    start.wait();
    assert_eq!(anchor.wait().unwrap(), N, "the anchor lost nothing");
    stop.store(true, Ordering::Relaxed);
    for churner in churners {
        assert!(churner.join().unwrap() > 0);
    }
    producer.join().unwrap();
    assert!(hub.stats().subscribers.is_empty(), "everyone left");
}

/// `0..n` sent into `tx` from `producers` threads, each its own residue class, the
/// odd threads with `try_send` (spinning on `Full`), the even ones with
/// `send_blocking`; the channel closes when the last sender goes.
fn senders(
    tx: weir::source::channel::Sender<u64>,
    n: u64,
    producers: u64,
) -> Vec<thread::JoinHandle<()>> {
    (0..producers)
        .map(|p| {
            let tx = tx.clone();
            thread::spawn(move || {
                for i in (p..n).step_by(producers as usize) {
                    if p % 2 == 1 {
                        let mut item = i;
                        while let Err(refused) = tx.try_send(item) {
                            item = refused.into_inner();
                            thread::yield_now();
                        }
                    } else {
                        tx.send_blocking(i).expect("the hub reads");
                    }
                }
            })
        })
        .collect()
}

/// Each producer's items, in the order `items` has them, are its residue class in
/// order, and every item is there once.
fn assert_every_item_once_in_each_producers_order(items: &[u64], n: u64, producers: u64) {
    assert_eq!(items.len() as u64, n, "every item once");
    let mut next: Vec<u64> = (0..producers).collect();
    for &item in items {
        let p = (item % producers) as usize;
        assert_eq!(item, next[p], "producer {p}'s items in its order");
        next[p] += producers;
    }
}

#[test]
fn subscribers_behind_boundaries_that_take_a_channels_items_themselves_lose_nothing() {
    // Subscribers behind `publish_on` watch the channel's lane through the hub and
    // run its drain loop on their own threads; the plain subscribers get the items
    // from whichever thread that is. Every subscriber gets every item once, in each
    // producer's order.
    const PRODUCERS: u64 = 3;
    let (tx, rx) = weir::channel::<u64>(1_024, ChannelPolicy::Backpressure);
    let hub = Hub::builder(rx, 256).connect_at(4).build();
    let pool = ThreadPool::builder().name("hub-pull").threads(2).build();
    let collect = |p: Hub<u64>| {
        p.fold(Vec::new(), |mut v, x| {
            v.push(x);
            v
        })
    };
    let handles = vec![
        collect(hub.clone()),
        hub.clone()
            .publish_on(pool.clone(), 256)
            .fold(Vec::new(), |mut v, x| {
                v.push(x);
                v
            }),
        hub.clone()
            .publish_on(pool.clone(), 16)
            .fold(Vec::new(), |mut v, x| {
                v.push(x);
                v
            }),
        collect(hub.clone()),
    ];
    let producers = senders(tx, N, PRODUCERS);
    for producer in producers {
        producer.join().unwrap();
    }
    for (i, mut handle) in handles.into_iter().enumerate() {
        let items = handle
            .wait_timeout(Duration::from_secs(120))
            .unwrap_or_else(|| panic!("subscriber {i} hung"))
            .expect("completes");
        assert_every_item_once_in_each_producers_order(&items, N, PRODUCERS);
    }
}

#[test]
fn a_boundary_subscriber_that_leaves_or_loses_its_pool_strands_nobody() {
    // A watcher that goes (it cancels, or its pool shuts down under it) takes its
    // mark on the channel's lane with it: senders go back to handing items over
    // themselves, and the subscribers left get every item.
    for shutdown in [false, true] {
        let (tx, rx) = weir::channel::<u64>(1_024, ChannelPolicy::Backpressure);
        let hub = Hub::builder(rx, 256).connect_at(3).build();
        let pool = ThreadPool::builder().name("hub-leave").threads(1).build();
        let leaving = hub
            .clone()
            .publish_on(pool.clone(), 256)
            .take(1_000)
            .fold(0u64, |n, _| n + 1);
        let mut stays = hub.clone().fold(Vec::new(), |mut v, x| {
            v.push(x);
            v
        });
        let watcher = hub.clone().publish_on(pool.clone(), 64).for_each(|_| {});
        let producers = senders(tx, N, 2);
        if shutdown {
            thread::sleep(Duration::from_millis(5));
            pool.shutdown();
        }
        for producer in producers {
            producer.join().unwrap();
        }
        let items = stays
            .wait_timeout(Duration::from_secs(120))
            .unwrap_or_else(|| panic!("the plain subscriber hung (shutdown {shutdown})"))
            .expect("completes");
        assert_every_item_once_in_each_producers_order(&items, N, 2);
        let left = leaving.wait();
        let watched = watcher.wait();
        if shutdown {
            // Each boundary ended, with everything or with the shutdown's error.
            for end in [left.map(|_| ()), watched] {
                if let Err(error) = end {
                    assert_eq!(error.kind(), weir::ErrorKind::SchedulerShutdown, "{error}");
                }
            }
        } else {
            assert_eq!(left.expect("took its 1,000"), 1_000);
            watched.expect("completes");
        }
    }
}

#[test]
fn an_iterator_that_holds_its_item_does_not_hold_back_a_sibling() {
    // A blocking iterator over a hub over a channel watches the channel only
    // inside `next`: one whose caller holds on to an item (and does not call `next`
    // again) leaves no mark behind, so the channel's senders hand items over
    // themselves and a plain sibling gets every item meanwhile. The items are sent
    // while the holder's first `next` polls (in some rounds it catches one there).
    const ITEMS: u64 = 200; // within the ring: the holder bounds nothing yet
    for round in 0..20 {
        let (tx, rx) = weir::channel::<u64>(1_024, ChannelPolicy::Backpressure);
        let hub = Hub::builder(rx, 256).connect_at(2).build();
        let seen = Arc::new(AtomicU64::new(0));
        let sibling = hub.clone().for_each({
            let seen = seen.clone();
            move |x| {
                // In order: each item is the count so far.
                assert_eq!(seen.fetch_add(1, Ordering::Relaxed), x, "in order");
            }
        });
        let (subscribed, polling) = std::sync::mpsc::channel();
        let release = Arc::new(Barrier::new(2));
        let holder = thread::spawn({
            let hub = hub.clone();
            let release = release.clone();
            move || {
                let mut iter = hub.blocking_iter(64);
                let _ = subscribed.send(());
                let first = iter.next().map(|item| item.expect("an item"));
                release.wait();
                (first, iter.filter(|item| item.is_ok()).count() as u64)
            }
        });
        polling
            .recv_timeout(Duration::from_secs(60))
            .expect("the holder subscribed");
        for i in 0..ITEMS {
            tx.send_blocking(i).expect("the hub reads");
        }
        // With the channel still open (closing it runs its drain loop, which would
        // deliver whatever waits), the sibling gets every item.
        for _ in 0..20_000 {
            if seen.load(Ordering::Relaxed) == ITEMS {
                break;
            }
            thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(
            seen.load(Ordering::Relaxed),
            ITEMS,
            "round {round}: the sibling got every item while the holder held its first"
        );
        drop(tx);
        sibling.wait().expect("completes");
        release.wait();
        let (first, rest) = holder.join().unwrap();
        assert_eq!(
            (first, rest),
            (Some(0), ITEMS - 1),
            "the holder got them all"
        );
    }
}

#[test]
fn iterators_over_a_hub_over_a_channel_get_every_item_once_in_each_producers_order() {
    // Each iterator watches the channel's lane through the hub while it polls, and
    // the one that finds items runs the fan-out on its own thread.
    const PRODUCERS: u64 = 2;
    let (tx, rx) = weir::channel::<u64>(1_024, ChannelPolicy::Backpressure);
    let hub = Hub::builder(rx, 256).connect_at(3).build();
    let iterators = iterate_on_threads(&hub, &[1, 16, 256]);
    let producers = senders(tx, N, PRODUCERS);
    for producer in producers {
        producer.join().unwrap();
    }
    for iterator in iterators {
        let items = iterator.join().unwrap().expect("completes");
        assert_every_item_once_in_each_producers_order(&items, N, PRODUCERS);
    }
}

#[test]
fn adopted_subscribers_end_alone_when_they_panic_cancel_or_lose_their_pool() {
    // Subscribers behind `publish_on` over a hub fed from another thread are run by
    // their own drains (the hub wakes the drain, which runs the subscriber's pass
    // there). One such subscriber panics, one cancels after 1,000 items, one loses
    // its pool mid-stream, one sits behind a `map`: each ends alone, and the plain
    // ones (a direct `collect` and another boundary) get every item, in order.
    let feeding = ThreadPool::builder().name("hub-feed").threads(1).build();
    let pool = ThreadPool::builder().name("hub-adopt").threads(2).build();
    let doomed = ThreadPool::builder().name("hub-doomed").threads(1).build();
    let source = weir::range(0..N).subscribe_on(feeding.clone());
    let hub = Hub::builder(source, 64).connect_at(6).build();
    let direct = hub.clone().collect();
    let boundary = hub.clone().publish_on(pool.clone(), 16).collect();
    let mapped = hub
        .clone()
        .map(|x| x + 1)
        .publish_on(pool.clone(), 8)
        .collect();
    let panics = hub.clone().publish_on(pool.clone(), 32).fold(0u64, |n, x| {
        assert!(x < 5_000, "the subscriber's own panic at {x}");
        n + 1
    });
    let cancels = hub
        .clone()
        .publish_on(pool.clone(), 64)
        .take(1_000)
        .fold(0u64, |n, _| n + 1);
    let loses_pool = hub.clone().publish_on(doomed.clone(), 16).for_each(|_| {});
    thread::sleep(Duration::from_millis(2));
    doomed.shutdown();
    for (name, handle) in [("direct", direct), ("boundary", boundary)] {
        let items = ended(handle, name).expect("completes");
        assert!(
            items.iter().copied().eq(0..N),
            "{name}: every item, in order"
        );
    }
    let items = ended(mapped, "mapped").expect("completes");
    assert!(
        items.iter().copied().eq(1..N + 1),
        "mapped: every item, in order"
    );
    let error = panics.wait().expect_err("the fold panicked");
    assert_eq!(error.kind(), weir::ErrorKind::Panicked, "{error}");
    assert_eq!(cancels.wait().expect("took its 1,000"), 1_000);
    match loses_pool.wait() {
        Ok(()) => {} // finished before the shutdown reached it
        Err(error) => assert_eq!(error.kind(), weir::ErrorKind::SchedulerShutdown, "{error}"),
    }
    // Everyone left: the hub let its upstream go.
    assert!(hub.stats().subscribers.is_empty(), "{:?}", hub.stats());
}
