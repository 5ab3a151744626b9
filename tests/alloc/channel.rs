//! The push source's batch offer: one allocation per `try_send_all` call (its step
//! buffer), none per item, delivered on the sender's thread to waiting demand.

use weir::prelude::*;
use weir::source::channel::ChannelPolicy;

use crate::assert_flat;

#[test]
fn try_send_all_allocates_nothing_per_item() {
    assert_flat(
        "channel try_send_all",
        16,
        |n| {
            let (tx, rx) = weir::channel::<u64>(1_024, ChannelPolicy::Backpressure);
            let sum = rx.fold(0u64, |sum, x| sum.wrapping_add(x));
            assert_eq!(tx.try_send_all(0..n).unwrap(), n as usize);
            drop(tx);
            sum.wait().expect("the channel completes")
        },
        |n| (0..n).fold(0u64, |sum, x| sum.wrapping_add(x)),
    );
}
