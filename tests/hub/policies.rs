//! Each policy against a hub over a channel the test feeds item by item, so that
//! every arrival, request and skip happens at a known point.

use weir::hub::{Hub, MemberState, Policy};
use weir::prelude::*;
use weir::source::channel::{ChannelPolicy, Sender};
use weir::{DropReason, ErrorKind};

use super::{member, probe};

/// A hub of `capacity` over a channel the test sends into (the channel holds
/// everything the hub has not asked for yet).
fn fed(capacity: usize) -> (Sender<u64>, Hub<u64>) {
    let (tx, rx) = weir::channel::<u64>(1 << 16, ChannelPolicy::Backpressure);
    (tx, rx.share(capacity))
}

fn send(tx: &Sender<u64>, items: std::ops::Range<u64>) {
    for i in items {
        tx.try_send(i).expect("the channel has room");
    }
}

#[test]
fn a_backpressure_subscriber_gets_everything_in_order_and_only_what_it_asked_for() {
    let (tx, hub) = fed(8);
    let p = probe(hub.clone());
    send(&tx, 0..100);
    assert_eq!(p.received_count(), 0, "nothing before a request (rule 1.1)");
    p.request(3);
    assert_eq!(p.items(), vec![0, 1, 2]);
    p.request(97);
    assert_eq!(p.items(), (0..100).collect::<Vec<_>>());
    drop(tx);
    assert!(p.is_completed());
}

#[test]
fn a_stalled_backpressure_subscriber_holds_upstream_at_the_ring() {
    let (tx, hub) = fed(8);
    let stalled = probe(hub.clone());
    let fast = probe(hub.clone());
    fast.request(u64::MAX);
    send(&tx, 0..100);
    // The hub asked for 8 (the ring) and nothing more: the fast one has those 8.
    assert_eq!(fast.received_count(), 8);
    let stats = hub.stats();
    assert_eq!(stats.occupancy, 8);
    assert_eq!(
        stats.upstream_outstanding, 0,
        "no item beyond the ring requested"
    );
    assert_eq!(stats.bounded_by, Some(0), "subscriber 0 holds it back");
    assert_eq!(tx.monitor().snapshot().depth, 92, "the rest waits upstream");
    stalled.request(u64::MAX);
    assert_eq!(stalled.received_count(), 100);
    assert_eq!(fast.received_count(), 100);
}

#[test]
fn a_stalled_drop_oldest_subscriber_skips_and_counts_exactly_what_it_missed() {
    let (tx, hub) = fed(8);
    let fast = probe(hub.clone());
    let lossy = probe(hub.join(Policy::DropOldest));
    fast.request(u64::MAX);
    send(&tx, 0..100);
    assert_eq!(
        fast.received_count(),
        100,
        "the stalled lossy one holds nobody back"
    );
    let me = member(&hub, 1);
    assert_eq!((me.dropped, me.lag, me.position), (92, 8, 92));
    lossy.request(u64::MAX);
    assert_eq!(
        lossy.items(),
        (92..100).collect::<Vec<_>>(),
        "the newest ring's worth"
    );
    send(&tx, 100..110);
    assert_eq!(lossy.items().last(), Some(&109));
    assert_eq!(
        lossy.received_count() + 92,
        110,
        "delivered + dropped = published"
    );
}

#[test]
fn a_latest_subscriber_skips_to_the_newest_item() {
    let (tx, hub) = fed(4);
    let fast = probe(hub.clone());
    fast.request(u64::MAX);
    let latest = probe(hub.join(Policy::Latest));
    send(&tx, 0..5);
    // 0..4 filled the ring; 4 evicted 0, which latest had not read: it jumps to 4.
    let me = member(&hub, 1);
    assert_eq!((me.position, me.dropped), (4, 4));
    latest.request(10);
    assert_eq!(latest.items(), vec![4]);
}

#[test]
fn a_latest_subscriber_asking_for_one_gets_the_newest() {
    let (tx, hub) = fed(8);
    let fast = probe(hub.clone());
    fast.request(u64::MAX);
    let latest = probe(hub.join(Policy::Latest));
    send(&tx, 0..3);
    latest.request(1);
    assert_eq!(latest.items(), vec![2], "0 and 1 waited beyond its demand");
    send(&tx, 3..6);
    latest.request(2);
    assert_eq!(latest.items(), vec![2, 4, 5]);
    let me = member(&hub, 1);
    assert_eq!((me.delivered, me.dropped, me.position), (3, 3, 6));
}

#[test]
fn drops_reach_the_subscribers_drop_hook_with_their_reason() {
    let (tx, hub) = fed(4);
    let fast = probe(hub.clone());
    fast.request(u64::MAX);
    let drops = weir::metrics::Drops::new();
    let lossy = probe(
        hub.join(Policy::DropOldest)
            .on_dropped(weir::metrics::DropHook::new(drops.clone())),
    );
    send(&tx, 0..10);
    lossy.request(1);
    assert_eq!(lossy.items(), vec![6]);
    assert_eq!(drops.count(DropReason::OverflowOldest), 6);
}

#[test]
fn a_disconnect_subscriber_past_its_item_limit_gets_a_lagged_error_and_leaves() {
    let (tx, hub) = fed(16);
    let fast = probe(hub.clone());
    fast.request(u64::MAX);
    let client = probe(hub.join(Policy::disconnect_after_items(5)).named("ws-1"));
    client.request(2);
    send(&tx, 0..7);
    assert_eq!(client.items(), vec![0, 1]);
    assert!(client.error().is_none(), "5 behind is allowed");
    send(&tx, 7..8);
    let error = client.error().expect("6 behind: cut off");
    assert_eq!(error.kind(), ErrorKind::Lagged);
    assert!(error.message().contains("ws-1"), "{}", error.message());
    assert_eq!(hub.stats().subscribers.len(), 1, "it left the hub");
    send(&tx, 8..20);
    assert_eq!(fast.received_count(), 20, "the others go on");
}

/// The limit holds on every arrival, also while no subscriber waits for items (an
/// arrival then wakes nobody, and the hub skips its per-subscriber work except the
/// limits).
#[test]
fn a_disconnect_subscriber_is_cut_off_at_its_item_limit_while_nobody_waits_for_items() {
    let (tx, hub) = fed(16);
    let holder = probe(hub.clone());
    holder.request(1);
    let client = probe(hub.join(Policy::disconnect_after_items(5)));
    send(&tx, 0..5);
    assert_eq!(
        holder.items(),
        vec![0],
        "the holder has items waiting: not hungry"
    );
    assert!(client.error().is_none(), "5 behind is allowed");
    send(&tx, 5..6);
    let error = client.error().expect("6 behind: cut off");
    assert_eq!(error.kind(), ErrorKind::Lagged);
    assert!(
        error.message().contains("fell 6 items behind"),
        "{}",
        error.message()
    );
    holder.request(u64::MAX);
    send(&tx, 6..10);
    assert_eq!(
        holder.items(),
        (0..10).collect::<Vec<_>>(),
        "the holder goes on"
    );
}

/// A subscriber that keeps up is not cut off by the size of upstream's batches: the
/// hub asks upstream for no more at a time than the smallest item limit, so one
/// arrival cannot put a subscriber that has read everything past its limit (a
/// synchronous source hands over all it is asked for in one batch).
#[test]
fn a_disconnect_subscriber_that_keeps_up_is_not_cut_off_by_a_batch() {
    for (capacity, limit) in [(64, 10), (256, 100), (16, 15), (1_024, 255), (8, 1)] {
        let hub = Hub::builder(weir::range(0u64..1_000), capacity).build();
        let alone = hub
            .join(Policy::disconnect_after_items(limit))
            .fold(0u64, |n, _| n + 1)
            .wait();
        assert_eq!(
            alone.ok(),
            Some(1_000),
            "capacity {capacity}, limit {limit}"
        );

        // Beside a Backpressure subscriber, which lets the hub ask for the ring.
        let hub = Hub::builder(weir::range(0u64..1_000), capacity)
            .connect_at(2)
            .build();
        let audit = hub.join(Policy::Backpressure).fold(0u64, |n, _| n + 1);
        let client = hub
            .join(Policy::disconnect_after_items(limit))
            .fold(0u64, |n, _| n + 1);
        assert_eq!(audit.wait().ok(), Some(1_000));
        assert_eq!(
            client.wait().ok(),
            Some(1_000),
            "capacity {capacity}, limit {limit}"
        );
    }
}

#[test]
fn a_disconnect_subscriber_a_whole_ring_behind_is_cut_off() {
    let (tx, hub) = fed(4);
    let fast = probe(hub.clone());
    fast.request(u64::MAX);
    let client = probe(hub.join(Policy::disconnect_after_items(1_000)));
    send(&tx, 0..5);
    assert_eq!(client.error().map(|e| e.kind()), Some(ErrorKind::Lagged));
}

#[test]
fn a_disconnect_subscriber_whose_next_item_is_too_old_is_cut_off() {
    let (tx, hub) = fed(1_024);
    let fast = probe(hub.clone());
    fast.request(u64::MAX);
    let client = probe(
        hub.join(Policy::disconnect_after(std::time::Duration::from_millis(
            20,
        ))),
    );
    send(&tx, 0..64);
    std::thread::sleep(std::time::Duration::from_millis(40));
    assert!(
        client.error().is_none(),
        "checked when a block of 64 starts"
    );
    send(&tx, 64..65);
    assert_eq!(client.error().map(|e| e.kind()), Some(ErrorKind::Lagged));
}

#[test]
fn stats_show_lag_in_items_and_state() {
    let (tx, hub) = fed(8);
    let a = probe(hub.join(Policy::DropOldest).named("a"));
    let b = probe(hub.clone());
    b.request(u64::MAX);
    send(&tx, 0..3);
    let stats = hub.stats();
    let a_stats = stats
        .subscribers
        .iter()
        .find(|s| s.name.as_deref() == Some("a"))
        .unwrap();
    assert_eq!((a_stats.lag, a_stats.state), (3, MemberState::Behind));
    let b_stats = stats.subscribers.iter().find(|s| s.id == 1).unwrap();
    assert_eq!(
        (b_stats.lag, b_stats.delivered, b_stats.state),
        (0, 3, MemberState::Waiting)
    );
    let table = stats.to_string();
    assert!(
        table.contains("DropOldest") && table.contains("Waiting"),
        "{table}"
    );
    a.cancel();
}

#[test]
fn upstream_errors_reach_every_subscriber_after_their_items() {
    let (tx, hub) = fed(8);
    let a = probe(hub.clone());
    let b = probe(hub.join(Policy::Latest));
    send(&tx, 0..3);
    tx.fail(weir::Error::msg("feed broke"));
    a.request(10);
    assert_eq!(a.items(), vec![0, 1, 2]);
    assert_eq!(
        a.error().map(|e| e.message().to_owned()),
        Some("feed broke".into())
    );
    assert!(b.error().is_none(), "b has items to read first");
    b.request(1);
    assert_eq!(b.items(), vec![2], "Latest: the newest its demand covers");
    assert!(b.error().is_some(), "then the error");
}
