//! When the hub subscribes upstream, when it stops, replay.

use std::time::Duration;
use weir::hub::{Hub, Policy};

use weir::prelude::*;
use weir::source::channel::ChannelPolicy;
use weir::ErrorKind;

use super::probe;

#[test]
fn connect_at_k_waits_for_the_kth_subscriber() {
    let hub = Hub::builder(weir::range(0u64..10), 4).connect_at(2).build();
    let a = probe(hub.clone());
    a.request(100);
    assert_eq!(a.received_count(), 0, "not connected with one subscriber");
    assert!(!hub.stats().connected);
    let b = probe(hub.clone());
    b.request(100);
    assert_eq!(a.items(), (0..10).collect::<Vec<_>>());
    assert_eq!(b.items(), (0..10).collect::<Vec<_>>());
    assert!(a.is_completed() && b.is_completed());
}

#[test]
fn the_last_subscriber_leaving_cancels_upstream_and_later_ones_are_refused() {
    let cancelled = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = cancelled.clone();
    let hub = weir::range(0u64..u64::MAX)
        .inspect_cancel(move || flag.store(true, std::sync::atomic::Ordering::SeqCst))
        .share(4);
    let a = probe(hub.clone());
    a.request(3);
    assert_eq!(a.items(), vec![0, 1, 2]);
    a.cancel();
    assert!(cancelled.load(std::sync::atomic::Ordering::SeqCst));
    let late = probe(hub.clone());
    let error = late.error().expect("refused at once");
    assert_eq!(error.kind(), ErrorKind::Cancelled);
    assert!(
        error.message().contains("keep_connected"),
        "{}",
        error.message()
    );
}

#[test]
fn keep_connected_keeps_upstream_subscribed_with_nobody_there() {
    let (tx, rx) = weir::channel::<u64>(1_024, weir::source::channel::ChannelPolicy::Backpressure);
    let hub = Hub::builder(rx, 4).keep_connected().build();
    let a = probe(hub.clone());
    a.request(2);
    for i in 0..2 {
        tx.try_send(i).unwrap();
    }
    a.cancel();
    for i in 2..10 {
        tx.try_send(i).unwrap();
    }
    // The hub had asked for a ring's worth (4) while a was there: 2 and 3 reached
    // the ring with nobody there; nobody wanted 4..10, so they stayed upstream.
    let stats = hub.stats();
    assert_eq!((stats.occupancy, stats.upstream_outstanding), (4, 0));
    assert!(stats.subscribers.is_empty());
    // b joins at the live position (after 3) and is the first to ask for 4..
    let b = probe(hub.join(Policy::Backpressure));
    b.request(100);
    tx.try_send(10).unwrap();
    assert_eq!(b.items(), (4..11).collect::<Vec<_>>());
}

#[test]
fn replay_gives_a_late_subscriber_the_last_items() {
    let hub = Hub::builder(weir::range(0u64..20), 8).replay(3).build();
    let all = hub.clone().collect().wait().unwrap();
    assert_eq!(all.len(), 20);
    let late = probe(hub.clone());
    late.request(100);
    assert_eq!(late.items(), vec![17, 18, 19]);
    assert!(late.is_completed());
}

/// A `Backpressure` subscriber that joins while upstream owes items replays only
/// what the ring can keep beside them: replaying the whole ring promised more than
/// the ring holds, and the next arrivals evicted items it had not read (a `Panicked`
/// error in release, the hub's invariant check failing in debug).
#[test]
fn replay_to_a_backpressure_subscriber_keeps_room_for_what_upstream_owes() {
    let (tx, rx) = weir::channel::<u64>(64, weir::source::channel::ChannelPolicy::Backpressure);
    let hub = Hub::builder(rx, 4).replay(4).build();
    let a = probe(hub.clone());
    a.request(u64::MAX);
    for i in 0..4 {
        tx.try_send(i).unwrap();
    }
    assert_eq!(a.items(), vec![0, 1, 2, 3]);
    let owed = hub.stats().upstream_outstanding;
    assert_eq!(owed, 3, "the 75% rule asked for 3 more once a read 3");
    let b = probe(hub.clone());
    for i in 4..8 {
        tx.try_send(i).unwrap();
    }
    b.request(100);
    drop(tx);
    // The ring of 4 keeps room for the 3 owed: b replays 4 - 3 = 1 item.
    assert_eq!(b.items(), (3..8).collect::<Vec<_>>());
    assert!(b.is_completed(), "{:?}", b.error());
    assert_eq!(a.items(), (0..8).collect::<Vec<_>>());
    assert!(a.is_completed());
}

/// A `Disconnect` subscriber with a lag limit of `n` items replays at most `n`: more
/// would have it join already cut off.
#[test]
fn replay_to_a_disconnect_subscriber_stays_within_its_lag_limit() {
    let hub = Hub::builder(weir::range(0u64..20), 8).replay(6).build();
    let all = hub.clone().collect().wait().unwrap();
    assert_eq!(all.len(), 20);
    let late = probe(hub.join(Policy::disconnect_after_items(2)));
    late.request(100);
    assert_eq!(late.items(), vec![18, 19]);
    assert!(late.is_completed(), "{:?}", late.error());
}

/// A `Disconnect` subscriber with a lag limit in time replays only items that have
/// not waited longer than it (blocks of 64 items carry one arrival time): the older
/// block would have it join already cut off.
#[test]
fn replay_to_a_disconnect_subscriber_skips_items_older_than_its_age_limit() {
    let (tx, rx) = weir::channel::<u64>(256, ChannelPolicy::Backpressure);
    let hub = Hub::builder(rx, 256).replay(256).build();
    let reader = probe(hub.clone());
    reader.request(u64::MAX);
    for i in 0..64 {
        tx.try_send(i).unwrap();
    }
    // The first block ages well past the limit; the second is fresh when `late` joins.
    std::thread::sleep(Duration::from_millis(1_500));
    for i in 64..128 {
        tx.try_send(i).unwrap();
    }
    assert_eq!(reader.received_count(), 128);
    let late = probe(hub.join(Policy::disconnect_after(Duration::from_secs(1))));
    late.request(u64::MAX);
    drop(tx);
    assert_eq!(late.items(), (64..128).collect::<Vec<_>>());
    assert!(late.is_completed(), "{:?}", late.error());
}

#[test]
#[should_panic(expected = "share capacity must be in 1..=2^30 (got 0)")]
fn a_zero_capacity_is_refused_at_construction() {
    let _ = weir::range(0u64..1).share(0);
}

#[test]
#[should_panic(expected = "hub: replay(r) needs r <= capacity (got r = 9, capacity 8)")]
fn a_replay_beyond_the_ring_is_refused_at_construction() {
    let _ = Hub::builder(weir::range(0u64..1), 8).replay(9);
}

#[test]
#[should_panic(expected = "hub: connect_at(k) needs k >= 1")]
fn connect_at_zero_is_refused() {
    let _ = Hub::builder(weir::range(0u64..1), 8).connect_at(0);
}

#[test]
#[should_panic(expected = "hub: a Disconnect lag limit must be at least 1 item")]
fn a_zero_lag_limit_is_refused() {
    let _ = Policy::disconnect_after_items(0);
}

/// A hub that lingers, on a virtual clock, and whether upstream was cancelled.
fn lingering(
    grace: std::time::Duration,
) -> (
    Hub<u64>,
    weir::runtime::VirtualTime,
    std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    let clock = weir::runtime::VirtualTime::new();
    let cancelled = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = cancelled.clone();
    let source = weir::range(0u64..u64::MAX)
        .inspect_cancel(move || flag.store(true, std::sync::atomic::Ordering::SeqCst));
    let hub = Hub::builder(source, 4).linger(grace, clock.clone()).build();
    (hub, clock, cancelled)
}

#[test]
fn linger_keeps_upstream_for_the_grace_period_and_a_returning_subscriber_finds_it_running() {
    use std::sync::atomic::Ordering::SeqCst;
    use std::time::Duration;
    let (hub, clock, cancelled) = lingering(Duration::from_secs(5));
    let a = probe(hub.clone());
    a.request(3);
    a.cancel();
    clock.advance(Duration::from_secs(4));
    assert!(!cancelled.load(SeqCst), "within the grace period");
    let b = probe(hub.clone());
    b.request(2);
    assert_eq!(b.received_count(), 2, "it found the hub running");
    clock.advance(Duration::from_secs(10));
    assert!(
        !cancelled.load(SeqCst),
        "the timer armed before b joined stops nothing"
    );
    b.cancel();
    clock.advance(Duration::from_secs(4));
    assert!(!cancelled.load(SeqCst));
    clock.advance(Duration::from_secs(1));
    assert!(cancelled.load(SeqCst), "5 s after the last one left");
    assert_eq!(
        probe(hub.clone()).error().map(|e| e.kind()),
        Some(ErrorKind::Cancelled)
    );
}

#[test]
fn a_linger_of_duration_max_never_stops_and_a_dropped_timer_stops_the_hub() {
    use std::sync::atomic::Ordering::SeqCst;
    use std::time::Duration;
    let (hub, clock, cancelled) = lingering(Duration::MAX);
    let a = probe(hub.clone());
    a.request(1);
    a.cancel();
    clock.advance(Duration::from_secs(1_000_000));
    assert!(!cancelled.load(SeqCst), "Duration::MAX: never");

    // A scheduler that drops every timer unrun (shut down): the hub stops at once.
    let pool = weir::runtime::ThreadPool::builder().threads(1).build();
    pool.shutdown();
    let cancelled = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = cancelled.clone();
    let source = weir::range(0u64..u64::MAX).inspect_cancel(move || flag.store(true, SeqCst));
    let hub = Hub::builder(source, 4)
        .linger(Duration::from_secs(60), pool)
        .build();
    let a = probe(hub.clone());
    a.request(1);
    a.cancel();
    assert!(cancelled.load(SeqCst), "the dropped timer stopped the hub");
}

/// An item that panics once in `Drop` while `armed` is set.
#[derive(Clone)]
struct Bomb {
    armed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for Bomb {
    fn drop(&mut self) {
        if self.armed.swap(false, std::sync::atomic::Ordering::SeqCst) {
            panic!("deliberate panic in an item's Drop");
        }
    }
}

/// The linger runs out while the ring still holds items for its replay, and one of
/// them panics in `Drop` as the ring lets them go: the panic is contained and
/// upstream is still cancelled (before the fix the panic left the expiry before
/// its cancel, and upstream stayed subscribed).
#[test]
fn a_linger_that_runs_out_cancels_upstream_even_if_an_item_panics_in_drop() {
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    use std::sync::Arc;
    use std::time::Duration;
    let clock = weir::runtime::VirtualTime::new();
    let (cancelled, armed) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let flag = cancelled.clone();
    let bombs = armed.clone();
    let source = weir::range(0u64..u64::MAX)
        .map(move |_| Bomb {
            armed: bombs.clone(),
        })
        .inspect_cancel(move || flag.store(true, SeqCst));
    let hub = Hub::builder(source, 4)
        .replay(4)
        .linger(Duration::from_secs(5), clock.clone())
        .build();
    let a = probe(hub.clone());
    a.request(3);
    a.cancel();
    armed.store(true, SeqCst);
    clock.advance(Duration::from_secs(6));
    assert!(
        !armed.load(SeqCst),
        "no item was let go (the case checks nothing)"
    );
    assert!(cancelled.load(SeqCst), "upstream still subscribed");
    drop((a, hub));
}

/// A virtual clock that, once armed, reads the stats of its hub (a logging clock,
/// say) or panics.
#[derive(Clone)]
struct MeddlingClock {
    inner: weir::runtime::VirtualTime,
    panics: bool,
    armed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    hub: std::sync::Arc<std::sync::OnceLock<Hub<u64>>>,
}

impl weir::runtime::Scheduler for MeddlingClock {
    fn schedule(&self, task: weir::runtime::Task) {
        self.inner.schedule(task);
    }
    fn schedule_after(&self, delay: Duration, task: weir::runtime::Task) {
        self.inner.schedule_after(delay, task);
    }
    fn schedule_timer(
        &self,
        delay: Duration,
        task: weir::runtime::Task,
    ) -> weir::runtime::TimerHandle {
        self.inner.schedule_timer(delay, task)
    }
    fn now(&self) -> std::time::Instant {
        if self.armed.load(std::sync::atomic::Ordering::SeqCst) {
            assert!(!self.panics, "deliberate: the linger's clock panics");
            let stats = self.hub.get().expect("set").stats();
            assert!(stats.subscribers.len() <= 1);
        }
        self.inner.now()
    }
}

/// The linger's clock is read outside the hub's lock: one that reads the hub's own
/// stats does not deadlock the last subscriber's cancel, and one that panics stops
/// the hub at once instead of keeping upstream for good (it used to be read under
/// the lock: the cancel hung, or the panic left upstream running, "connected" with
/// nobody subscribed).
#[test]
fn the_lingers_clock_may_call_the_hub_or_panic() {
    use std::sync::atomic::Ordering::SeqCst;
    for panics in [false, true] {
        let inner = weir::runtime::VirtualTime::new();
        let clock = MeddlingClock {
            inner: inner.clone(),
            panics,
            armed: Default::default(),
            hub: Default::default(),
        };
        let cancelled = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = cancelled.clone();
        let source = weir::range(0u64..u64::MAX).inspect_cancel(move || flag.store(true, SeqCst));
        let hub = Hub::builder(source, 4)
            .linger(Duration::from_secs(5), clock.clone())
            .build();
        assert!(clock.hub.set(hub.clone()).is_ok());
        let a = probe(hub.clone());
        a.request(3);
        clock.armed.store(true, SeqCst);
        // On a thread, so that a deadlock fails the test instead of hanging it.
        let (done, cancelled_in_time) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            a.cancel();
            let _ = done.send(());
        });
        assert!(
            cancelled_in_time
                .recv_timeout(Duration::from_secs(20))
                .is_ok(),
            "the last subscriber's cancel deadlocked (clock panics: {panics})"
        );
        clock.armed.store(false, SeqCst);
        if panics {
            assert!(cancelled.load(SeqCst), "no deadline: stopped at once");
            assert!(!hub.stats().connected);
        } else {
            assert!(!cancelled.load(SeqCst), "within the grace period");
            inner.advance(Duration::from_secs(5));
            assert!(cancelled.load(SeqCst), "5 s after the last one left");
        }
    }
}
