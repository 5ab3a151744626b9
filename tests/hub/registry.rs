//! Named hub subscribers in the registry: listed with their lag and skipped items
//! while subscribed, gone when they leave; linked into their named downstream's
//! pipeline.

use weir::hub::{Hub, MemberState, Policy};
use weir::metrics::Registry;
use weir::prelude::*;
use weir::source::channel::ChannelPolicy;

use crate::{member, probe};

#[test]
fn a_named_subscriber_is_listed_with_its_lag_and_skips_and_leaves_with_it() {
    let registry = Registry::new();
    let (tx, rx) = weir::channel::<u64>(1_024, ChannelPolicy::Backpressure);
    let hub = Hub::builder(rx, 16).build();
    // A lossless subscriber that takes everything keeps upstream flowing.
    let audit = hub.clone().fold(0u64, |n, _| n + 1);
    let stalled = probe(
        hub.join(Policy::DropOldest)
            .named("dashboard")
            .registry(&registry),
    );
    // An unnamed subscriber is not listed.
    let unnamed = probe(hub.join(Policy::DropOldest).registry(&registry));
    stalled.request(2);
    for i in 0..100 {
        tx.try_send(i).unwrap();
    }
    let snapshot = registry.snapshot();
    assert_eq!(snapshot.stages.len(), 1, "{snapshot}");
    let row = snapshot.stage("dashboard").unwrap();
    let listed = row.subscriber.clone().expect("a hub subscriber's figures");
    let own = member(&hub, listed.id);
    assert_eq!(
        (listed.lag, listed.dropped, listed.delivered),
        (own.lag, own.dropped, own.delivered)
    );
    // Asked for 2 of 100, a ring of 16: 16 wait, 82 were skipped.
    assert_eq!((listed.delivered, listed.lag, listed.dropped), (2, 16, 82));
    assert_eq!(listed.state, MemberState::Behind);
    assert!(row.queue.is_none());
    let table = snapshot.to_string();
    assert!(
        table.contains("dashboard") && table.contains("behind"),
        "{table}"
    );
    stalled.cancel();
    assert!(registry.is_empty(), "{}", registry.snapshot());
    unnamed.cancel();
    drop(tx);
    assert_eq!(audit.wait().unwrap(), 100);
}

#[test]
fn a_named_subscriber_links_to_its_named_downstream() {
    let registry = Registry::new();
    let hub = Hub::builder(weir::range(0u64..1_000), 16).build();
    let items = probe(
        hub.join(Policy::Backpressure)
            .named("member")
            .registry(&registry)
            .map(|x| x + 1)
            .name("after")
            .registry(&registry),
    );
    let snapshot = registry.snapshot();
    let id = |name: &str| snapshot.stage(name).unwrap().id;
    let pipelines = snapshot.pipelines();
    assert_eq!(pipelines.len(), 1, "{snapshot}");
    assert_eq!(pipelines[0].stages, vec![id("member"), id("after")]);
    items.cancel();
    assert!(registry.is_empty(), "{}", registry.snapshot());
}
