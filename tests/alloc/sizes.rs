//! The stages that take a window, batch, ring or capacity, given their largest
//! accepted size (2^30) and ten items: none allocates room for the whole size up
//! front. Before the fix, each of `buffer`, `flat_map`, `concat_map`, `share`,
//! `Hub::builder(..).replay(..)`, `blocking_iter` and `into_stream` made one
//! allocation of 2^30 slots (8 GiB of `u64`s) to carry ten items; a window now
//! allocates room for at most 1,024 items at once and grows as items arrive.
//! (`publish_on`'s ring is documented as allocated up front, and is not here.)

use weir::hub::Hub;
use weir::prelude::*;
use weir::source::channel::ChannelPolicy;
use weir::Overflow;

use crate::largest_allocation;

/// The largest accepted window, batch, ring or capacity.
const LARGEST: u64 = 1 << 30;

/// More than any stage needs for ten items (a window of 1,024 `u64`s is 8 KiB), far
/// less than a window of 2^30.
const SMALL: usize = 1 << 20;

/// Run `run` (which returns the values 0..10); a failure if it did not, or if it
/// made an allocation above [`SMALL`].
fn small(failures: &mut Vec<String>, label: &str, run: impl FnOnce() -> Vec<u64>) {
    let (largest, got) = largest_allocation(run);
    if got != (0..10).collect::<Vec<_>>() {
        failures.push(format!("{label}: delivered {got:?}"));
    }
    if largest > SMALL {
        failures.push(format!(
            "{label}: one allocation of {largest} bytes for ten items"
        ));
    }
}

#[test]
fn the_largest_accepted_sizes_allocate_nothing_large_up_front() {
    let ten = || weir::range(0..10u64);
    let mut failures = Vec::new();
    let failures = &mut failures;
    small(failures, "buffer(2^30)", || {
        let batches = ten().buffer(LARGEST).collect().wait().unwrap();
        batches.into_iter().flatten().collect()
    });
    small(failures, "flat_map(just, 1, 2^30)", || {
        ten()
            .flat_map(weir::just, 1, LARGEST)
            .collect()
            .wait()
            .unwrap()
    });
    small(failures, "concat_map(just, 2^30)", || {
        ten()
            .concat_map(weir::just, LARGEST)
            .collect()
            .wait()
            .unwrap()
    });
    small(failures, "share(2^30)", || {
        ten().share(1 << 30).collect().wait().unwrap()
    });
    small(failures, "Hub::builder(2^30).replay(2^30)", || {
        let hub = Hub::builder(ten(), 1 << 30).replay(1 << 30).build();
        let first = hub.clone().collect().wait().unwrap();
        assert_eq!(hub.collect().wait().unwrap(), first, "the replay");
        first
    });
    small(failures, "blocking_iter(2^30)", || {
        ten().blocking_iter(LARGEST).map(Result::unwrap).collect()
    });
    #[cfg(feature = "futures")]
    small(failures, "into_stream(2^30)", || {
        use futures::StreamExt as _;
        let stream = ten().into_stream(LARGEST);
        let items: Vec<_> = futures::executor::block_on(stream.collect());
        items.into_iter().map(Result::unwrap).collect()
    });
    small(failures, "on_backpressure_buffer(2^30)", || {
        ten()
            .on_backpressure_buffer(LARGEST, Overflow::DropOldest)
            .collect()
            .wait()
            .unwrap()
    });
    small(failures, "channel(2^30)", || {
        let (tx, rx) = weir::channel::<u64>(1usize << 30, ChannelPolicy::Backpressure);
        for i in 0..10 {
            tx.try_send(i).unwrap();
        }
        drop(tx);
        rx.collect().wait().unwrap()
    });
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
