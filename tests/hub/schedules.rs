//! Random schedules of sends, subscriptions with mixed policies, requests and
//! cancels against a hub fed item by item (one thread: every step is settled when
//! it returns). Items are their own sequence numbers, so a subscriber's items say
//! exactly what it got. After every step, for every subscriber: its items rise
//! strictly, never outnumber its requests (rule 1.1), start no earlier than where it
//! joined; a `Backpressure` subscriber's items are contiguous; for every subscriber
//! still in the hub, delivered + dropped accounts for every item from where it
//! joined to its position; and the ring plus what upstream still owes never exceeds
//! the capacity for a `Backpressure` subscriber's unread items. Some hubs replay
//! (`replay(r)`): late subscribers join up to `r` items back.

use proptest::prelude::*;
use weir::hub::{Hub, Policy};
use weir::source::channel::{ChannelPolicy, Sender};
use weir::tck::TestProbe;

use super::probe;

#[derive(Clone, Debug)]
enum Step {
    Send(u64),
    Join(Policy),
    Request(usize, u64),
    Cancel(usize),
}

fn policy() -> impl Strategy<Value = Policy> {
    prop_oneof![
        Just(Policy::Backpressure),
        Just(Policy::DropOldest),
        Just(Policy::Latest),
        (1u64..12).prop_map(Policy::disconnect_after_items),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (1u64..20).prop_map(Step::Send),
        1 => policy().prop_map(Step::Join),
        3 => (0usize..6, prop_oneof![1u64..8, Just(u64::MAX)]).prop_map(|(m, n)| Step::Request(m, n)),
        1 => (0usize..6).prop_map(Step::Cancel),
    ]
}

/// One subscriber as the test sees it.
struct Seen {
    id: u64,
    policy: Policy,
    probe: TestProbe<u64>,
    /// Where it joined (the first sequence number it may get).
    start: u64,
    requested: u64,
    cancelled: bool,
}

fn check(hub: &Hub<u64>, capacity: usize, seen: &[Seen]) -> Result<(), TestCaseError> {
    let stats = hub.stats();
    prop_assert!(stats.occupancy <= capacity);
    for s in seen {
        let items = s.probe.items();
        prop_assert!(
            items.windows(2).all(|w| w[0] < w[1]),
            "{:?}: {items:?}",
            s.policy
        );
        prop_assert!(
            items.len() as u64 <= s.requested,
            "rule 1.1: {} > {}",
            items.len(),
            s.requested
        );
        prop_assert!(items.first().map_or(true, |&first| first >= s.start));
        if s.policy == Policy::Backpressure {
            let expected: Vec<u64> = (s.start..s.start + items.len() as u64).collect();
            prop_assert_eq!(&items, &expected, "Backpressure loses nothing");
        }
        if let Some(member) = stats.subscribers.iter().find(|m| m.id == s.id) {
            prop_assert_eq!(member.delivered, items.len() as u64);
            prop_assert_eq!(
                member.delivered + member.dropped,
                member.position - s.start,
                "delivered + dropped = every item since it joined ({:?})",
                s.policy
            );
            if member.policy == Policy::Backpressure {
                prop_assert!(member.lag + stats.upstream_outstanding <= capacity as u64);
            }
        }
    }
    Ok(())
}

fn run(capacity: usize, replay: usize, steps: Vec<Step>) -> Result<(), TestCaseError> {
    let (tx, rx): (Sender<u64>, _) = weir::channel(1 << 16, ChannelPolicy::Backpressure);
    // Keep upstream subscribed when everyone left, so the schedule goes on.
    let hub = Hub::builder(rx, capacity)
        .keep_connected()
        .replay(replay.min(capacity))
        .build();
    let mut seen: Vec<Seen> = Vec::new();
    let mut sent = 0u64;
    for step in steps {
        match step {
            Step::Send(k) => {
                for _ in 0..k {
                    tx.try_send(sent).expect("room upstream");
                    sent += 1;
                }
            }
            Step::Join(policy) => {
                let probe = probe(hub.join(policy));
                let me = hub
                    .stats()
                    .subscribers
                    .into_iter()
                    .max_by_key(|m| m.id)
                    .expect("just joined");
                // Where it joined: its position, less what it skipped since (the
                // join may connect the hub, and items may arrive at once).
                prop_assert_eq!(me.delivered, 0);
                seen.push(Seen {
                    id: me.id,
                    policy,
                    probe,
                    start: me.position - me.dropped,
                    requested: 0,
                    cancelled: false,
                });
            }
            Step::Request(m, n) => {
                if let Some(s) = seen.get_mut(m) {
                    s.requested = s.requested.saturating_add(n);
                    s.probe.request(n);
                }
            }
            Step::Cancel(m) => {
                if let Some(s) = seen.get_mut(m) {
                    s.cancelled = true;
                    s.probe.cancel();
                }
            }
        }
        check(&hub, capacity, &seen)?;
    }
    // The end: everyone still there asks for everything; the stream completes.
    for s in seen.iter_mut().filter(|s| !s.cancelled) {
        s.requested = u64::MAX;
        s.probe.request(u64::MAX);
    }
    drop(tx);
    check(&hub, capacity, &seen)?;
    for s in seen.iter().filter(|s| !s.cancelled) {
        let ended = s.probe.is_completed() || s.probe.error().is_some();
        prop_assert!(ended, "{:?} ended", s.policy);
        if s.policy == Policy::Backpressure {
            prop_assert!(s.probe.is_completed());
            let expected: Vec<u64> = (s.start..sent).collect();
            prop_assert_eq!(s.probe.items(), expected, "every item since it joined");
        }
        if s.probe.error().is_some() {
            prop_assert!(
                matches!(s.policy, Policy::Disconnect(_)),
                "only Disconnect fails"
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_subscriber_gets_its_due_under_random_schedules(
        capacity in prop_oneof![Just(1usize), Just(2), 3usize..17],
        replay in prop_oneof![3 => Just(0usize), 1 => 1usize..17],
        steps in proptest::collection::vec(step(), 1..60),
    ) {
        run(capacity, replay, steps)?;
    }
}
