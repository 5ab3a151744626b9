//! Loom models of the hub: `RUSTFLAGS="--cfg weir_loom" cargo test --release --lib loom`.
//!
//! The ring and the cursors sit under one lock, so what can go wrong is around it:
//! a wake-up lost between an arrival and a subscriber that just found the ring
//! empty (its pass marks it hungry under the lock; the arrival turns the mark into a
//! wake-up under the same lock; the pump signals after letting go), credit lost
//! between a subscriber moving and the pump (the pump's `Wip` makes a move made
//! while it runs cost one more pass), or an item requested that the ring has no room
//! for. The model: a ring of 2, two subscribers on threads of their own each asking
//! for items in two requests, and upstream on a third thread sending each item only
//! once the hub asked for it. Upstream does not complete: the end wakes every
//! subscriber, which would hide a lost wake-up (checked: with arrivals waking only
//! the first subscriber, the model fails; with a completion, it passed).

use loom::thread;

use std::sync::Arc;

use crate::loom::model::{Credit, Recorder, Stash};
use crate::{Publisher, Subscriber};

use super::{Hub, Policy};

/// Items upstream sends.
const ITEMS: u32 = 2;

fn model(second: Policy) {
    loom::model(move || {
        let (publisher, stash, credit) = Stash::new();
        let hub = Hub::builder(publisher, 2).connect_at(2).build();
        let (a, b) = (Recorder::default(), Recorder::default());
        hub.join(Policy::Backpressure).subscribe(a.clone());
        hub.join(second).subscribe(b.clone());
        let mut upstream = stash.lock().unwrap().take().expect("connected at two");
        let producer = thread::spawn(move || {
            let credit: Arc<Credit> = credit;
            for item in 0..ITEMS {
                while credit.requested() <= u64::from(item) {
                    thread::yield_now();
                }
                // Never asked for more than the ring holds beyond what was sent.
                assert!(
                    credit.requested() <= u64::from(item) + 2,
                    "credit past the ring"
                );
                upstream.on_next(item);
            }
            // No completion: its wake-up would hide a lost one.
        });
        let readers: Vec<_> = [a.clone(), b.clone()]
            .into_iter()
            .map(|recorder| {
                thread::spawn(move || {
                    let subscription = recorder.subscription();
                    subscription.request(1);
                    subscription.request(ITEMS as u64);
                })
            })
            .collect();
        producer.join().unwrap();
        for reader in readers {
            reader.join().unwrap();
        }
        // Both asked for more than there is: the Backpressure one has every item;
        // a lossy one may have skipped some, but it has the newest.
        assert_eq!(
            a.items(),
            (0..ITEMS).collect::<Vec<_>>(),
            "Backpressure: every item, in order"
        );
        let items = b.items();
        assert!(items.windows(2).all(|w| w[0] < w[1]), "in order: {items:?}");
        assert_eq!(
            items.last(),
            Some(&(ITEMS - 1)),
            "the newest reached it: {items:?}"
        );
        if second == Policy::Backpressure {
            assert_eq!(items, (0..ITEMS).collect::<Vec<_>>());
        }
        a.subscription().cancel();
        b.subscription().cancel();
        assert!(hub.stats().subscribers.is_empty(), "both left");
    });
}

#[test]
fn loom_hub_two_backpressure_subscribers_ring_of_two() {
    model(Policy::Backpressure);
}

#[test]
fn loom_hub_a_drop_oldest_subscriber_beside_a_backpressure_one() {
    model(Policy::DropOldest);
}

/// A subscriber behind `publish_on` adopts its member: the hub's arrivals then
/// mark the member woken and signal the boundary's drain, whose pass pulls (runs
/// the member's pass on its thread). The model: a ring of 2, one such subscriber
/// (`Immediate`: the drain runs on whichever thread signals it), upstream on one
/// thread sending two items against credit, downstream requesting from another.
/// Both items arrive, in order, once both threads are done: a wake-up that found
/// the drain's loop owned elsewhere was not lost (that owner ran another pass, which
/// saw the mark).
#[test]
fn loom_hub_an_adopted_member_wakes_its_drain() {
    use crate::runtime::Immediate;
    use crate::PublisherExt;
    loom::model(|| {
        let (publisher, stash, credit) = Stash::new();
        let hub = Hub::builder(publisher, 2).build();
        let recorder = Recorder::default();
        hub.clone()
            .publish_on(Immediate, 2)
            .subscribe(recorder.clone());
        let mut upstream = stash.lock().unwrap().take().expect("connected at one");
        let producer = thread::spawn(move || {
            let credit: Arc<Credit> = credit;
            for item in 0..ITEMS {
                while credit.requested() <= u64::from(item) {
                    thread::yield_now();
                }
                upstream.on_next(item);
            }
            upstream
        });
        recorder.subscription().request(u64::from(ITEMS));
        let upstream = producer.join().unwrap();
        assert_eq!(
            recorder.items(),
            (0..ITEMS).collect::<Vec<_>>(),
            "every item once, in order"
        );
        recorder.subscription().cancel();
        drop(upstream);
    });
}
