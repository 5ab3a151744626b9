//! The hub (`share`): allocations per subscriber, never per item, for a batching
//! source and for single sends, with lossless and skipping subscribers.

use weir::hub::{Hub, Policy};
use weir::prelude::*;
use weir::source::channel::ChannelPolicy;

use crate::assert_flat;

fn add(acc: u64, x: u64) -> u64 {
    acc.wrapping_add(x)
}

#[test]
fn a_batching_source_shared_by_four_allocates_nothing_per_item() {
    assert_flat(
        "range shared by four folds",
        80,
        |n| {
            let hub = Hub::builder(weir::range(0..n), 64).connect_at(4).build();
            let folds: Vec<_> = (0..4).map(|_| hub.clone().fold(0u64, add)).collect();
            folds.into_iter().map(|f| f.wait().unwrap()).fold(0, add)
        },
        |n| (0..n).fold(0, add).wrapping_mul(4),
    );
}

#[test]
fn single_sends_to_a_hub_allocate_nothing_per_item() {
    assert_flat(
        "channel, single sends, shared by a fold and a skipping subscriber",
        80,
        |n| {
            let (tx, rx) = weir::channel::<u64>(1_024, ChannelPolicy::Backpressure);
            let hub = Hub::builder(rx, 64).connect_at(2).build();
            let all = hub.clone().fold(0u64, add);
            // Asks for 8 and never again: it falls behind and skips the rest.
            let skipped = weir::metrics::Drops::new();
            hub.join(Policy::DropOldest)
                .on_dropped(weir::metrics::DropHook::new(skipped.clone()))
                .subscribe(AsksOnce(8));
            for i in 0..n {
                tx.try_send(i).expect("the hub keeps up");
            }
            drop(tx);
            let sum = all.wait().unwrap();
            // Past its 8 and a ring of 64, every item was skipped (and reported).
            assert_eq!(skipped.total(), n.saturating_sub(8 + 64));
            sum
        },
        |n| (0..n).fold(0, add),
    );
}

/// Requests its count of items once, at subscription, and never again.
struct AsksOnce(u64);

impl Subscriber<u64> for AsksOnce {
    fn on_subscribe(&mut self, subscription: weir::Subscription) {
        subscription.request(self.0);
    }
    fn on_next(&mut self, _: u64) {}
    fn on_error(&mut self, _: weir::Error) {}
    fn on_complete(&mut self) {}
}
