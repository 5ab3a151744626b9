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

/// `blocking_iter` over a range and over a channel (which the iterator watches and
/// drains on its own thread while it polls): it takes a batch of items per lock,
/// the window's buffer and its own trading places, so nothing is allocated per item.
#[test]
fn blocking_iter_allocates_nothing_per_item() {
    assert_flat(
        "range blocking_iter(64)",
        16,
        |n| {
            weir::range(0..n)
                .blocking_iter(64)
                .map(Result::unwrap)
                .fold(0u64, u64::wrapping_add)
        },
        |n| (0..n).fold(0u64, u64::wrapping_add),
    );
    assert_flat(
        "channel blocking_iter(64)",
        // The channel's queue, lane and pass buffers, the iterator's window and
        // buffer, the subscription: all once.
        24,
        |n| {
            let (tx, rx) = weir::channel::<u64>(1_024, ChannelPolicy::Backpressure);
            let iter = rx.blocking_iter(64);
            // Sends in batches the iterator's window covers (no thread: the sends
            // run the channel's drain loop here, and the iterator takes what it
            // queued), then the rest as it reads.
            let mut next = 0u64;
            let mut sum = 0u64;
            let mut iter = iter;
            while next < n {
                let end = (next + 48).min(n);
                for x in next..end {
                    tx.try_send(x).unwrap();
                }
                for _ in next..end {
                    sum = sum.wrapping_add(iter.next().unwrap().unwrap());
                }
                next = end;
            }
            drop(tx);
            assert!(iter.next().is_none());
            sum
        },
        |n| (0..n).fold(0u64, u64::wrapping_add),
    );
}
