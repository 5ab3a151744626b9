//! The scenarios on real threads: two small pools, figures checked as counts and
//! orders (never as times), every wait under a generous watchdog.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir::mux::Mux;
use weir::prelude::*;
use weir::runtime::ThreadPool;
use weir::tck::TestSubscriber;

const WATCHDOG: Duration = Duration::from_secs(60);

fn pools() -> (ThreadPool, ThreadPool) {
    (
        ThreadPool::builder().name("mux-send").threads(1).build(),
        ThreadPool::builder().name("mux-recv").threads(2).build(),
    )
}

/// A1 on threads: seven channels carry 200,000 items each to the end while channel 0's
/// consumer took 10 and stopped; it holds at most E + C, and the others never wait
/// for credit because of it.
#[test]
fn a1_threads_one_stalled_consumer_does_not_slow_the_others() {
    let (send, recv) = pools();
    let mux = Mux::<u64>::builder()
        .exclusive(32)
        .shared(128)
        .borrow_cap(32)
        .build_local(send, recv)
        .unwrap();
    let stalled = TestSubscriber::new().request_on_subscribe(10);
    let stalled_probe = stalled.probe();
    weir::range(0..u64::MAX)
        .via(&mux, 0)
        .unwrap()
        .subscribe(stalled);
    let n = 200_000u64;
    let sums: Vec<_> = (1..8)
        .map(|id| {
            weir::range(0..n)
                .via(&mux, id)
                .unwrap()
                .fold(0u64, |a, x| a + x)
        })
        .collect();
    for mut sum in sums {
        assert_eq!(
            sum.wait_timeout(WATCHDOG).expect("hang").unwrap(),
            n * (n - 1) / 2
        );
    }
    stalled_probe.await_items(10, WATCHDOG).unwrap();
    let stats = mux.stats();
    let chan = stats.channel(0).unwrap();
    assert!(
        chan.buffered <= 32 + 32,
        "stalled channel buffered {}",
        chan.buffered
    );
    assert_eq!(stalled_probe.received_count(), 10);
    assert!(stats.high_water <= 8 * 32 + 128);
    stalled_probe.cancel();
    let deadline = Instant::now() + WATCHDOG;
    while mux.stats().pool_free != 128 {
        assert!(
            Instant::now() < deadline,
            "credit not back: {:?}",
            mux.stats()
        );
        std::thread::yield_now();
    }
}

/// A11: bidirectional echo over lanes of one frame: eight channels each send 1 MiB
/// of bytes to the far side, which sends them back over a second mux.
#[test]
fn a11_bidirectional_echo_over_a_one_frame_lane_completes() {
    let (send, recv) = pools();
    let there = Mux::<u8>::builder()
        .exclusive(16)
        .shared(64)
        .lane(1)
        .build_local(send.clone(), recv.clone())
        .unwrap();
    let back = Mux::<u8>::builder()
        .exclusive(16)
        .shared(64)
        .lane(1)
        .build_local(recv, send)
        .unwrap();
    let started = Instant::now();
    let mib = 1u64 << 20;
    let echoes: Vec<_> = (0..8u64)
        .map(|id| {
            weir::range(0..mib)
                .map(|x| x as u8)
                .via(&there, id)
                .unwrap()
                .via(&back, id)
                .unwrap()
                .fold((0u64, true), move |(n, ordered), b| {
                    (n + 1, ordered && b == n as u8)
                })
        })
        .collect();
    for mut echo in echoes {
        assert_eq!(
            echo.wait_timeout(WATCHDOG).expect("hang").unwrap(),
            (mib, true)
        );
    }
    eprintln!("a11: 8 MiB echoed in {:?}", started.elapsed());
}

/// A13: one channel's consumer panics: only that channel ends; the others deliver
/// everything, in order, and its credit comes back.
#[test]
fn a13_a_panicking_consumer_ends_only_its_channel() {
    let (send, recv) = pools();
    let mux = Mux::<u64>::builder().build_local(send, recv).unwrap();
    let cancelled = Arc::new(AtomicU64::new(0));
    let flag = cancelled.clone();
    let panicking = weir::range(0..u64::MAX)
        .inspect_cancel(move || {
            flag.fetch_add(1, Ordering::Relaxed);
        })
        .via(&mux, 0)
        .unwrap()
        .for_each(|x| {
            if x == 500 {
                panic!("consumer fails on purpose");
            }
        });
    let n = 100_000u64;
    let others: Vec<_> = (1..8)
        .map(|id| weir::range(0..n).via(&mux, id).unwrap().collect())
        .collect();
    for mut items in others {
        let items = items.wait_timeout(WATCHDOG).expect("hang").unwrap();
        assert_eq!(items, (0..n).collect::<Vec<_>>());
    }
    let mut panicking = panicking;
    let ended = panicking
        .wait_timeout(WATCHDOG)
        .expect("the panicking channel ended");
    assert!(ended.is_err(), "a panic is an error of the sink");
    let deadline = Instant::now() + WATCHDOG;
    while mux.stats().pool_free != 128 || cancelled.load(Ordering::Relaxed) == 0 {
        assert!(Instant::now() < deadline, "not released: {:?}", mux.stats());
        std::thread::yield_now();
    }
    assert_eq!(
        cancelled.load(Ordering::Relaxed),
        1,
        "its upstream cancelled once"
    );
}

/// A subscriber that requests once and drops its `Subscription` is still served to
/// the end: what feeds a channel keeps its receiving end alive.
#[test]
fn a_subscriber_that_drops_its_subscription_is_served_to_the_end() {
    struct Forgetful(std::sync::mpsc::Sender<Option<u64>>);
    impl Subscriber<u64> for Forgetful {
        fn on_subscribe(&mut self, subscription: weir::Subscription) {
            subscription.request(1_000);
        }
        fn on_next(&mut self, item: u64) {
            let _ = self.0.send(Some(item));
        }
        fn on_error(&mut self, _error: weir::Error) {}
        fn on_complete(&mut self) {
            let _ = self.0.send(None);
        }
    }
    let (send, recv) = pools();
    let mux = Mux::<u64>::builder().build_local(send, recv).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    weir::range(0..1_000)
        .via(&mux, 1)
        .unwrap()
        .subscribe(Forgetful(tx));
    let mut items = Vec::new();
    while let Some(item) = rx.recv_timeout(WATCHDOG).expect("hang") {
        items.push(item);
    }
    assert_eq!(items, (0..1_000).collect::<Vec<_>>());
    let deadline = Instant::now() + WATCHDOG;
    while mux.stats().pool_free != 128 || !mux.stats().channels.is_empty() {
        assert!(Instant::now() < deadline, "not closed: {:?}", mux.stats());
        std::thread::yield_now();
    }
}
