//! Named stages: entering and leaving the registry is per subscription, never per
//! item.

use weir::metrics::Registry;
use weir::prelude::*;
use weir::source::channel::ChannelPolicy;
use weir::Overflow;

use crate::assert_flat;

fn add(acc: u64, x: u64) -> u64 {
    acc.wrapping_add(x)
}

/// `range(0..n)` → a buffer of 64 → `map`, each named, summed.
fn named_pipeline(registry: &Registry, n: u64, overflow: Overflow) -> u64 {
    weir::range(0..n)
        .name("source")
        .registry(registry)
        .on_backpressure_buffer(64, overflow)
        .name("buffer")
        .registry(registry)
        .map(|x| x * 3)
        .name("triple")
        .registry(registry)
        .fold(0u64, add)
        .wait()
        .unwrap()
}

#[test]
fn a_named_synchronous_pipeline_allocates_nothing_per_item() {
    let registry = Registry::new();
    assert_flat(
        "range, buffer, map, each named, into a fold",
        40,
        |n| named_pipeline(&registry, n, Overflow::Error),
        |n| (0..n).map(|x| x * 3).fold(0, add),
    );
    assert!(registry.is_empty());
}

#[test]
fn a_named_channel_fed_one_item_at_a_time_allocates_nothing_per_item() {
    let registry = Registry::new();
    assert_flat(
        "named channel, single sends, into a fold",
        40,
        |n| {
            let (tx, rx) = weir::channel::<u64>(1_024, ChannelPolicy::Backpressure);
            let sum = rx.name("ingest").registry(&registry).fold(0u64, add);
            for i in 0..n {
                tx.try_send(i).expect("the fold keeps up");
            }
            drop(tx);
            sum.wait().unwrap()
        },
        |n| (0..n).fold(0, add),
    );
    assert!(registry.is_empty());
}

#[test]
fn named_stages_with_tracing_listening_allocate_nothing_per_item() {
    // A subscriber at DEBUG on this thread: every event weir emits is formatted
    // (into a sink), so one emitted per item, or a span entered per item, would
    // show up here as allocations growing with the item count.
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(std::io::sink)
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        let registry = Registry::new();
        assert_flat(
            "range, buffer, map, each named, into a fold, traced at DEBUG",
            200,
            |n| named_pipeline(&registry, n, Overflow::DropOldest),
            |n| (0..n).map(|x| x * 3).fold(0, add),
        );
    });
}
