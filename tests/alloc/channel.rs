//! The push source: one allocation per `try_send_all` call (its step buffer), none
//! per item, and none per item for single sends either, each delivered on the
//! sender's thread to waiting demand.

use weir::prelude::*;
use weir::source::channel::{ChannelPolicy, Sender};

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

/// One item at a time, with demand waiting and nothing queued: each send hands its
/// item straight to the subscriber in a pass of the sender's own (the direct hand-off
/// of `try_send`, `send_blocking`, `send().await`'s first poll; every 64 items a
/// flush under the lock stamps their counts), allocating nothing per item.
#[test]
fn single_sends_allocate_nothing_per_item() {
    type Send = fn(&Sender<u64>, u64);
    let sends: [(&str, Send); 3] = [
        ("channel try_send", |tx, x| tx.try_send(x).unwrap()),
        ("channel send_blocking", |tx, x| {
            tx.send_blocking(x).unwrap()
        }),
        ("channel send().await", |tx, x| {
            futures::executor::block_on(tx.send(x)).unwrap()
        }),
    ];
    for (label, send) in sends {
        assert_flat(
            label,
            16,
            |n| {
                let (tx, rx) = weir::channel::<u64>(1_024, ChannelPolicy::Backpressure);
                let sum = rx.fold(0u64, |sum, x| sum.wrapping_add(x));
                for x in 0..n {
                    send(&tx, x);
                }
                drop(tx);
                sum.wait().expect("the channel completes")
            },
            |n| (0..n).fold(0u64, |sum, x| sum.wrapping_add(x)),
        );
    }
}
