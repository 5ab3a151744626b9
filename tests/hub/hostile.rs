//! Hostile subscribers among well-behaved ones: one panics, one sends `request(0)`,
//! one is cancelled from many threads at once. The others must not notice.

use std::sync::{Arc, Barrier};
use std::thread;

use weir::hub::{Hub, Policy};
use weir::prelude::*;
use weir::{Error, Subscription};

use super::{ended, iterate_on_threads, probe};
use crate::unruly::Hostile;

/// A subscriber that requests everything and panics at its `at`-th item.
struct PanicsAt {
    at: u64,
    seen: u64,
}

impl Subscriber<u64> for PanicsAt {
    fn on_subscribe(&mut self, subscription: Subscription) {
        subscription.request(u64::MAX);
    }
    fn on_next(&mut self, _: u64) {
        self.seen += 1;
        if self.seen == self.at {
            panic!("a subscriber of the hub panics on purpose");
        }
    }
    fn on_error(&mut self, _: Error) {}
    fn on_complete(&mut self) {}
}

#[test]
fn a_subscriber_that_panics_leaves_and_the_others_get_everything() {
    let hub = Hub::builder(weir::range(0u64..10_000), 32)
        .connect_at(3)
        .build();
    let a = probe(hub.clone());
    let b = probe(hub.join(Policy::DropOldest));
    a.request(u64::MAX);
    b.request(u64::MAX);
    hub.join(Policy::Backpressure)
        .subscribe(PanicsAt { at: 3, seen: 0 });
    assert!(a.items().into_iter().eq(0..10_000));
    assert!(
        b.items().into_iter().eq(0..10_000),
        "b kept up: nothing skipped"
    );
    assert!(a.is_completed() && b.is_completed());
}

#[test]
fn a_subscriber_that_panics_in_on_subscribe_is_treated_as_cancelled() {
    struct PanicsAtOnce;
    impl Subscriber<u64> for PanicsAtOnce {
        fn on_subscribe(&mut self, _: Subscription) {
            panic!("on_subscribe panics on purpose");
        }
        fn on_next(&mut self, _: u64) {}
        fn on_error(&mut self, _: Error) {}
        fn on_complete(&mut self) {}
    }
    let hub = Hub::builder(weir::range(0u64..100), 8)
        .connect_at(2)
        .build();
    let a = probe(hub.clone());
    a.request(u64::MAX);
    hub.clone().subscribe(PanicsAtOnce);
    // It counted towards connect_at (it arrived), then left; `a` is served alone.
    assert!(a.items().into_iter().eq(0..100));
    assert!(a.is_completed());
}

/// An upstream that drops the hub's subscriber without a terminal signal (its
/// thread panicked, say): every subscriber gets the items and then `Cancelled`,
/// instead of waiting for ever.
#[test]
fn an_upstream_that_abandons_the_hub_ends_every_subscriber_with_cancelled() {
    let hub = Hub::builder(super::failing::Abandons { items: 3 }, 8)
        .connect_at(2)
        .build();
    let a = probe(hub.clone());
    let b = probe(hub.join(Policy::DropOldest));
    a.request(10);
    b.request(10);
    for p in [&a, &b] {
        let error = p
            .await_error(std::time::Duration::from_secs(10))
            .expect("the hub ended");
        assert_eq!(error.kind(), weir::ErrorKind::Cancelled);
        assert!(
            error.message().contains("without a terminal signal"),
            "{error}"
        );
        assert_eq!(p.items(), vec![1, 2, 3]);
    }
}

#[test]
fn request_zero_fails_only_that_subscriber() {
    let (tx, rx) = weir::channel::<u64>(1_024, weir::source::channel::ChannelPolicy::Backpressure);
    let hub = rx.share(8);
    let a = probe(hub.clone());
    let bad = probe(hub.join(Policy::Latest));
    a.request(u64::MAX);
    bad.request(0);
    let error = bad.error().expect("rule 3.9");
    assert_eq!(error.rule(), Some("3.9"));
    for i in 0..100 {
        tx.try_send(i).unwrap();
    }
    drop(tx);
    assert!(a.items().into_iter().eq(0..100));
    assert!(a.is_completed());
}

#[test]
fn a_cancel_storm_on_one_subscriber_leaves_the_others_whole() {
    for _ in 0..20 {
        let (tx, rx) =
            weir::channel::<u64>(1 << 16, weir::source::channel::ChannelPolicy::Backpressure);
        let hub = Hub::builder(rx, 16).connect_at(2).build();
        let a = probe(hub.clone());
        let victim = probe(hub.clone());
        a.request(u64::MAX);
        victim.request(u64::MAX);
        let start = Arc::new(Barrier::new(5));
        let cancellers: Vec<_> = (0..4)
            .map(|_| {
                let (victim, start) = (victim.clone(), start.clone());
                thread::spawn(move || {
                    start.wait();
                    victim.request(3);
                    victim.cancel();
                    victim.request(5);
                    victim.cancel();
                })
            })
            .collect();
        start.wait();
        for i in 0..2_000 {
            tx.try_send(i).unwrap();
        }
        for c in cancellers {
            c.join().unwrap();
        }
        drop(tx);
        assert!(a.items().into_iter().eq(0..2_000), "the other one is whole");
        let got = victim.items();
        assert!(
            got.iter().copied().eq(0..got.len() as u64),
            "a prefix, in order"
        );
        assert!(
            !victim.is_completed() && victim.error().is_none(),
            "no signal after cancel"
        );
        assert_eq!(
            hub.stats().subscribers.len(),
            0,
            "both gone: a completed, victim left"
        );
    }
}

#[test]
fn a_panic_in_the_fan_out_that_an_iterator_runs_stays_with_the_subscriber_that_panicked() {
    // Iterators over a hub over a channel run the channel's drain loop, and the
    // hub's fan-out, on their own threads: a hub subscriber that panics there ends
    // as documented, and so does (below) a `map` between a channel and its
    // iterator that panics; the panic never unwinds out of `next`.
    use weir::source::channel::ChannelPolicy;
    const N: u64 = 20_000;
    let (tx, rx) = weir::channel::<u64>(256, ChannelPolicy::Backpressure);
    let hub = Hub::builder(rx, 64).connect_at(3).build();
    let iterators = iterate_on_threads(&hub, &[16, 16]);
    hub.join(Policy::Backpressure)
        .subscribe(PanicsAt { at: 100, seen: 0 });
    let producer = thread::spawn(move || {
        for i in 0..N {
            tx.send_blocking(i).expect("the hub reads");
        }
    });
    producer.join().unwrap();
    for iterator in iterators {
        let got = iterator.join().expect("no panic out of next");
        assert_eq!(got.expect("completes").len() as u64, N);
    }

    // A stage between the channel and the iterator that panics: the iterator
    // gets `Panicked`, then `None`.
    let (tx, rx) = weir::channel::<u64>(256, ChannelPolicy::Backpressure);
    let mut iter = rx
        .map(|x| {
            assert!(x != 500, "map panics on purpose at 500");
            x
        })
        .blocking_iter(8);
    let producer = thread::spawn(move || {
        for i in 0..N {
            if tx.send_blocking(i).is_err() {
                return i;
            }
        }
        N
    });
    for expected in 0..500 {
        assert_eq!(iter.next().map(Result::unwrap), Some(expected));
    }
    let error = iter.next().expect("an error").expect_err("the panic");
    assert_eq!(error.kind(), weir::ErrorKind::Panicked, "{error}");
    assert!(iter.next().is_none());
    drop(iter);
    let stopped_at = producer.join().unwrap();
    assert!(
        stopped_at < N,
        "the channel was cancelled: sends refused from then on"
    );
}

/// A hand-written upstream whose batch iterator panics while the hub gathers it (on
/// the publisher's own thread, which the panic then ends, dropping the hub's inlet).
struct BatchPanics;

impl Publisher for BatchPanics {
    type Item = u64;

    fn subscribe<S: Subscriber<u64> + Send + 'static>(self, mut subscriber: S) {
        thread::spawn(move || {
            subscriber.on_subscribe(Subscription::noop());
            let batch =
                (0..4u64).inspect(|&x| assert!(x != 2, "a batch iterator panics on purpose"));
            let _ = subscriber.on_next_batch(batch);
        });
    }
}

/// The hub's upstream panics inside the batch it hands over: every subscriber still
/// ends (before the fix the arrival had taken the hub's pump before gathering the
/// batch, the panic left the pump taken, and nothing woke the subscribers again).
#[test]
fn an_upstream_batch_that_panics_while_gathered_ends_every_subscriber() {
    let hub = Hub::builder(BatchPanics, 8).connect_at(2).build();
    let a = probe(hub.clone());
    let b = probe(hub.join(Policy::DropOldest));
    a.request(10);
    b.request(10);
    for p in [&a, &b] {
        p.await_terminal(std::time::Duration::from_secs(10))
            .expect("the hub ended its subscribers");
    }
}

/// A scheduler that panics at its `at`-th `schedule` (a pool's otherwise).
#[derive(Clone)]
struct PanicsInSchedule {
    pool: weir::runtime::ThreadPool,
    calls: Arc<std::sync::atomic::AtomicU64>,
    at: u64,
}

impl weir::runtime::Scheduler for PanicsInSchedule {
    fn schedule(&self, task: weir::runtime::Task) {
        let n = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        assert!(
            n != self.at,
            "a scheduler that panics in schedule (call {n})"
        );
        self.pool.schedule(task);
    }

    fn schedule_after(&self, delay: std::time::Duration, task: weir::runtime::Task) {
        self.pool.schedule_after(delay, task);
    }

    fn now(&self) -> std::time::Instant {
        self.pool.now()
    }
}

#[test]
fn a_boundary_whose_scheduler_panics_ends_alone_and_the_hub_goes_on() {
    // The subscriber behind the boundary is woken through its drain, on the thread
    // that feeds the hub: the scheduler's panic there ends that subscriber only.
    // The plain subscriber beside it gets every item and the end. (The first call
    // comes from the boundary's subscribe, whose panic makes it a subscriber that
    // never joined: `connect_at(2)` then waits for another, as documented.)
    const N: u64 = 20_000;
    let feeding = weir::runtime::ThreadPool::builder()
        .name("hub-feed")
        .threads(1)
        .build();
    let pool = weir::runtime::ThreadPool::builder()
        .name("hub-flaky")
        .threads(1)
        .build();
    for at in 2..=6 {
        let source = weir::range(0..N).subscribe_on(feeding.clone());
        let hub = Hub::builder(source, 64).connect_at(2).build();
        let calls = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let flaky = PanicsInSchedule {
            pool: pool.clone(),
            calls: calls.clone(),
            at,
        };
        let boundary = hub.clone().publish_on(flaky, 16).fold(0u64, |n, _| n + 1);
        let plain = hub.clone().collect();
        let items =
            ended(plain, &format!("the plain subscriber (panic at call {at})")).expect("completes");
        assert!(
            items.iter().copied().eq(0..N),
            "every item, in order (call {at})"
        );
        let end = ended(boundary, &format!("the boundary's subscriber (call {at})"));
        // A drain that kept its task to the end scheduled fewer times: then it
        // got everything.
        if calls.load(std::sync::atomic::Ordering::SeqCst) >= at {
            assert!(
                end.is_err(),
                "the scheduler's panic ended it (call {at}): {end:?}"
            );
        } else {
            assert_eq!(end.expect("no panic reached it"), N, "call {at}");
        }
    }
}

/// An upstream whose `request` panics fails the hub: every subscriber ends with
/// `Panicked` and upstream is cancelled. The panic used to leave the hub's pump taken
/// and the credit counted as requested: the other subscribers waited for ever, and
/// the one whose pass made the call was dropped without a terminal signal.
#[test]
fn an_upstream_whose_request_panics_ends_every_subscriber() {
    for panic_at in 1..=3 {
        let (tx, rx) =
            weir::channel::<u64>(1_024, weir::source::channel::ChannelPolicy::Backpressure);
        let (rx, stats) = crate::counting::counted(rx);
        let hub = Hub::builder(
            Hostile {
                source: rx,
                request_panics_at: panic_at,
                cancel_panics: false,
            },
            4,
        )
        .connect_at(2)
        .build();
        let a = probe(hub.clone());
        let b = probe(hub.join(Policy::DropOldest));
        a.request(u64::MAX);
        b.request(u64::MAX);
        for i in 0..20 {
            if tx.try_send(i).is_err() {
                break;
            }
        }
        drop(tx);
        for (name, p) in [("a", &a), ("b", &b)] {
            let error = p
                .error()
                .unwrap_or_else(|| panic!("request {panic_at}: {name} did not end with an error"));
            assert_eq!(error.kind(), weir::ErrorKind::Panicked, "{name}: {error}");
        }
        assert_eq!(
            stats.cancels(),
            1,
            "upstream cancelled (request {panic_at})"
        );
    }
}

/// An item whose `Clone`, once armed, joins its own hub (as a new `DropOldest`
/// subscriber): a call the docs say ends only the subscriber it was cloned for.
#[derive(Debug, PartialEq)]
struct JoinsItsHub(u64);

static JOINED_HUB: std::sync::OnceLock<Hub<JoinsItsHub>> = std::sync::OnceLock::new();
static JOIN_ARMED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl Clone for JoinsItsHub {
    fn clone(&self) -> Self {
        if JOIN_ARMED.swap(false, std::sync::atomic::Ordering::SeqCst) {
            let late = weir::tck::TestSubscriber::<JoinsItsHub>::new();
            JOINED_HUB
                .get()
                .expect("set")
                .join(Policy::DropOldest)
                .subscribe(late);
        }
        JoinsItsHub(self.0)
    }
}

/// The member whose item's `Clone` joined the hub ends with `Panicked`; the other
/// goes on to the end. The refusal used to panic after the hub's pump was taken
/// (the `join` reached the pump first): it stayed taken, and the other subscriber
/// got nothing more.
#[test]
fn an_items_clone_that_joins_its_own_hub_ends_only_that_subscriber() {
    let (tx, rx) =
        weir::channel::<JoinsItsHub>(1_024, weir::source::channel::ChannelPolicy::Backpressure);
    let hub = Hub::builder(rx, 4).connect_at(2).build();
    assert!(JOINED_HUB.set(hub.clone()).is_ok(), "one test uses it");
    let a = probe(hub.clone());
    let b = probe(hub.clone());
    a.request(u64::MAX);
    tx.try_send(JoinsItsHub(0)).expect("room");
    JOIN_ARMED.store(true, std::sync::atomic::Ordering::SeqCst);
    // b's pass runs here, on this thread, and clones item 0.
    b.request(1);
    let error = b.error().expect("b ended");
    assert_eq!(error.kind(), weir::ErrorKind::Panicked, "{error}");
    for i in 1..20 {
        tx.try_send(JoinsItsHub(i)).expect("room");
    }
    drop(tx);
    assert_eq!(a.received_count(), 20, "a got everything");
    assert!(a.is_completed(), "and its end");
}
