//! Named mux channels in the registry: listed with what was sent to them and not
//! yet delivered while subscribed, gone when they close.

use weir::metrics::Registry;
use weir::mux::Mux;
use weir::prelude::*;
use weir::runtime::Immediate;
use weir::tck::TestSubscriber;

#[test]
fn a_named_channel_is_listed_with_its_buffered_items_and_leaves_when_it_closes() {
    let registry = Registry::new();
    let mux = Mux::<u64>::builder()
        .build_local(Immediate, Immediate)
        .unwrap();
    let (sink, source) = mux.channel(3).open().unwrap();
    let (quiet_sink, quiet) = mux.channel(4).open().unwrap();
    let subscriber = TestSubscriber::<u64>::new();
    let probe = subscriber.probe();
    source
        .named("orders")
        .registry(&registry)
        .subscribe(subscriber);
    // An unnamed channel is not listed.
    let other = TestSubscriber::<u64>::new();
    let other_probe = other.probe();
    quiet.registry(&registry).subscribe(other);
    weir::range(0u64..1_000).subscribe(sink);
    weir::range(0u64..10).subscribe(quiet_sink);
    probe.request(5);
    let snapshot = registry.snapshot();
    assert_eq!(snapshot.stages.len(), 1, "{snapshot}");
    let listed = snapshot.stage("orders").unwrap();
    let channel = listed.channel.clone().expect("a mux channel's figures");
    let own = mux
        .stats()
        .channels
        .into_iter()
        .find(|(id, _)| *id == 3)
        .map(|(_, stats)| stats)
        .unwrap();
    assert_eq!(
        (
            channel.sent,
            channel.delivered,
            channel.buffered,
            channel.backlog
        ),
        (own.sent, own.delivered, own.buffered, own.backlog)
    );
    // Asked for 5: 5 sent and delivered; the rest waits at the sender (staged up to
    // its window), none in flight.
    assert_eq!(
        (channel.sent, channel.delivered, channel.buffered),
        (5, 5, 0)
    );
    assert!(channel.backlog > 0, "{channel:?}");
    // The table's depth is what waits for the channel anywhere in the mux.
    let depth = (channel.backlog + channel.buffered).to_string();
    let row = snapshot.to_string();
    let line = row.lines().find(|l| l.starts_with("orders")).unwrap();
    assert_eq!(
        line.split_whitespace().nth(1),
        Some(depth.as_str()),
        "{row}"
    );
    assert!(listed.queue.is_none() && listed.subscriber.is_none());
    let table = snapshot.to_string();
    assert!(table.contains("orders"), "{table}");
    probe.cancel();
    assert!(registry.is_empty(), "{}", registry.snapshot());
    other_probe.cancel();
}
