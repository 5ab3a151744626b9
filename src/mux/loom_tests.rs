//! Loom models of the mux: `RUSTFLAGS="--cfg weir_loom" cargo test --release --lib loom`.
//!
//! The credit is not a lock-free word here: it is the ledger, one mutex taken by every
//! side (the sink staging a batch while its channel is parked, the worker taking a
//! turn, the receiver's request and delivery, a cancel). The one lock-free word is a
//! channel's count of staged items not yet reported and its parked mark (see the
//! ledger's "Backlog reported late"): the two-channel model fails when the worker's
//! park overwrites items staged meanwhile (a plain store of the mark instead of the
//! compare-exchange: checked, it loses an item). The cancel model found, on its first
//! interleaving, a unit of credit held for good: the worker took a turn's credit, the
//! cancel's clean-up then dropped the staged items, and the worker found none to
//! send; the worker now gives back the credit of items it finds missing. What can go wrong is around it: an update made under the lock
//! whose wake-up is lost (the worker never learns a channel became ready, or never
//! hears the credit that came back), an item sent without credit, or credit left
//! behind after the channels ended. The models run the whole mux (sinks, ledger,
//! worker, the local lane, the demultiplexer and the receiving stages) on
//! [`Immediate`] schedulers, so every task runs on the thread that caused it: loom then
//! explores every order in which the sending threads, the receiving thread and the
//! hand-offs between them can interleave, with `E = 1`, `S = 1`, `C = 1` and a quantum
//! of one item.

use loom::thread;

use std::sync::Arc;

use crate::loom::model::{Boxed, Credit, Recorder, Stash};
use crate::runtime::Immediate;
use crate::Publisher;

use super::Mux;

/// A mux with `E = 1`, `S = 1`, `C = 1` and a quantum of one item, every task on the
/// thread that caused it.
fn smallest_mux() -> Mux<u32> {
    Mux::<u32>::builder()
        .exclusive(1)
        .shared(1)
        .borrow_cap(1)
        .quantum(1)
        .build_local(Immediate, Immediate)
        .expect("a valid configuration")
}

/// Open `channel`: the sink's upstream to drive by hand, what the sink requested of
/// it, and the recorder subscribed to the receiving end.
fn open(mux: &Mux<u32>, channel: u32) -> (Boxed, Arc<Credit>, Recorder) {
    let (sink, source) = mux.channel(u64::from(channel)).open().expect("opens");
    let (publisher, stash, credit) = Stash::new();
    publisher.subscribe(sink);
    let upstream = stash.lock().unwrap().take().expect("subscribed");
    let recorder = Recorder::default();
    source.subscribe(recorder.clone());
    (upstream, credit, recorder)
}

/// `channels` channels over one mux with `E = 1`, `S = 1`, `C = 1`, quantum 1. Each
/// channel's upstream runs on a thread of its own and sends `items` items, each
/// only once its sink asked for it, then completes; the model's main thread asks for
/// every item on every channel. Checked afterwards: every channel received its items
/// once, in order, and then its completion, with no signal after the threads ended
/// (no lost wake-up anywhere: staging → worker, delivery → announcement → worker,
/// request → receiving stage); the mux never buffered more than `Σ E + S`; and every
/// unit of credit came back (the pool is whole, nothing is buffered, no channel
/// holds a borrowed unit).
fn credit_and_hand_off(channels: u32, items: u32) {
    // The senders wait for credit in a yield loop, and loom counts every turn of it:
    // an interleaving that holds a channel's credit back for long makes a long
    // execution, not an endless one (both sizes pass at 3,000; loom's default of
    // 1,000 was crossed once the boundary's drain began watching its ring).
    let mut model = loom::model::Builder::new();
    model.max_branches = 5_000;
    model.check(move || {
        let mux = smallest_mux();
        let mut senders = Vec::new();
        let mut recorders = Vec::new();
        for channel in 0..channels {
            let (mut upstream, credit, recorder) = open(&mux, channel);
            recorders.push(recorder);
            senders.push(thread::spawn(move || {
                let mut sent = 0u32;
                while sent < items {
                    if credit.requested() > u64::from(sent) {
                        upstream.on_next(sent);
                        sent += 1;
                    } else {
                        thread::yield_now();
                    }
                }
                upstream.on_complete();
            }));
        }
        for recorder in &recorders {
            recorder.subscription().request(u64::from(items));
        }
        for sender in senders {
            sender.join().unwrap();
        }
        for (channel, recorder) in recorders.iter().enumerate() {
            let state = recorder.0.lock().unwrap();
            assert_eq!(
                state.1,
                (0..items).collect::<Vec<_>>(),
                "channel {channel}: every item once, in order"
            );
            assert!(state.2, "channel {channel}: completion after its items");
        }
        let stats = mux.stats();
        assert!(
            stats.high_water <= u64::from(channels) + 1,
            "buffered {} above Σ E + S",
            stats.high_water
        );
        assert_eq!(stats.buffered_total, 0, "nothing left buffered");
        assert_eq!(stats.pool_free, 1, "the shared unit came back");
    });
}

/// Two channels of two items: each channel's second item needs its exclusive unit
/// back (an announcement) or the shared unit, which the other channel may hold.
#[test]
fn loom_mux_credit_and_hand_off_two_channels() {
    credit_and_hand_off(2, 2);
}

/// Three channels of one item: three senders' staging races the worker and the
/// receiver's requests.
#[test]
fn loom_mux_credit_and_hand_off_three_channels() {
    credit_and_hand_off(3, 1);
}

/// One channel whose receiving side cancels while its sender keeps staging (rule 2.8:
/// the sender's upstream need not have seen the cancel): a batch staged before the
/// cancel parks the channel is dropped by the cancel's clean-up, one staged after
/// finds the channel closed under the lock and drops itself. Either way the channel
/// closes and every unit of credit comes back; items delivered before the cancel
/// are a prefix of the sent ones.
#[test]
fn loom_mux_cancel_racing_a_staging_sender() {
    loom::model(|| {
        let mux = smallest_mux();
        let (mut upstream, credit, recorder) = open(&mux, 0);
        let subscription = recorder.subscription();
        subscription.request(2);
        let sender = thread::spawn(move || {
            // What the sink asked for when it subscribed (its staging window): no
            // waiting for more, which a cancelled channel never asks for.
            for item in 0..2 {
                if credit.requested() > u64::from(item) {
                    upstream.on_next(item);
                }
            }
        });
        subscription.cancel();
        sender.join().unwrap();
        let items = recorder.items();
        assert!(
            items == [] || items == [0] || items == [0, 1],
            "a prefix: {items:?}"
        );
        let stats = mux.stats();
        assert!(
            stats.channels.is_empty(),
            "the channel closed (items {items:?}): {stats:?}"
        );
        assert_eq!(stats.buffered_total, 0, "nothing left buffered");
        assert_eq!(stats.pool_free, 1, "the shared unit came back");
    });
}
