//! PLANNED API: not declared in `main.rs` yet. Declare it (`mod channel_hook;`) once
//! `ChannelBuilder::drop_hook(self, DropHook) -> Self` exists and `Channel` is no
//! longer `Clone`.
//!
//! * A drop hook set on the channel itself sees every drop, including the drops made
//!   before any subscriber is attached (today those reach no hook), exactly: what it
//!   receives, its counters and the queue monitor agree, and every produced item is
//!   delivered or dropped.
//! * `Channel` serves one subscriber and is not `Clone`.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Arc, Barrier, Mutex};

use weir::metrics::{DropHook, Drops};
use weir::prelude::*;
use weir::source::channel::{Channel, ChannelBuilder, ChannelPolicy};
use weir::DropReason;

use crate::harness::item::{Fate, Item, Ledger};
use crate::harness::recorder::{Plan, Recorder};
use crate::harness::watch::{assert_no_failures, wait_until, PATIENCE};
use crate::stages::OFFSET;

/// The lossy policies and the one reason each drops with.
const LOSSY: [(ChannelPolicy, DropReason); 3] = [
    (ChannelPolicy::DropOldest, DropReason::OverflowOldest),
    (ChannelPolicy::DropNewest, DropReason::OverflowNewest),
    (ChannelPolicy::KeepLatest, DropReason::ReplacedByLatest),
];

const CAPACITY: usize = 4;

/// What a channel's hook received: each drop's reason, and the item's value when the
/// hook could take it.
type Received = Arc<Mutex<Vec<(DropReason, Option<u64>)>>>;

fn hook(drops: &Drops) -> (DropHook, Received) {
    let received: Received = Arc::default();
    let log = received.clone();
    let hook = DropHook::new(drops.clone()).inspect(move |dropped| {
        let reason = dropped.reason();
        let value = dropped.take::<Item>().map(|mut item| {
            item.mark(Fate::Hooked);
            item.value
        });
        log.lock().unwrap().push((reason, value));
    });
    (hook, received)
}

#[test]
fn drops_made_before_a_subscriber_reach_the_channels_drop_hook() {
    let mut failures = Vec::new();
    for (policy, reason) in LOSSY {
        let ledger = Ledger::new();
        let drops = Drops::new();
        let (hook, received) = hook(&drops);
        let (tx, rx) = ChannelBuilder::new(CAPACITY, policy)
            .drop_hook(hook)
            .build::<Item>();
        let monitor = rx.monitor();
        for value in 0..100 {
            if tx.try_send(ledger.produce(value)).is_err() {
                failures.push(format!("{policy:?}: item {value} refused"));
            }
        }
        drop(tx);
        let dropped = received.lock().unwrap().len() as u64;
        let expected = 100 - CAPACITY as u64;
        if dropped != expected
            || drops.count(reason) != expected
            || monitor.snapshot().dropped(reason) != expected
        {
            failures.push(format!(
                "{policy:?}: before any subscriber, the hook received {dropped} items and counted \
                 {} as {reason:?}, the monitor {}; expected {expected}",
                drops.count(reason),
                monitor.snapshot().dropped(reason)
            ));
        }
        let (recorder, record) = Recorder::new(
            Plan {
                initial: u64::MAX,
                ..Plan::default()
            },
            ledger.clone(),
            Vec::new(),
        );
        rx.subscribe(recorder);
        if !wait_until(PATIENCE, || record.completed()) {
            failures.push(format!(
                "{policy:?}: did not complete ({})",
                record.describe()
            ));
        }
        let delivered = record.values().len() as u64;
        if delivered + dropped != 100 || ledger.ended(Fate::Released) != 0 {
            failures.push(format!(
                "{policy:?}: delivered {delivered} + dropped {dropped} != 100 produced ({} released \
                 unreported)",
                ledger.ended(Fate::Released)
            ));
        }
        if !wait_until(PATIENCE, || ledger.live() == 0) {
            failures.push(format!("{policy:?}: {} items still alive", ledger.live()));
        }
    }
    assert_no_failures(
        "channel drop hook before subscription",
        LOSSY.len(),
        &failures,
    );
}

#[test]
fn the_channels_drop_hook_sees_every_drop_while_a_subscriber_arrives_late() {
    const PRODUCERS: u64 = 4;
    const EACH: u64 = 1_000;
    let mut failures = Vec::new();
    for (policy, reason) in LOSSY {
        let ledger = Ledger::new();
        let drops = Drops::new();
        let (hook, received) = hook(&drops);
        let (tx, rx) = ChannelBuilder::new(CAPACITY, policy)
            .drop_hook(hook)
            .build::<Item>();
        let monitor = rx.monitor();
        // Half of every producer's items go in before the subscriber is attached, the
        // other half after.
        let halfway = Arc::new(Barrier::new(PRODUCERS as usize + 1));
        let subscribed = Arc::new(Barrier::new(PRODUCERS as usize + 1));
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let (tx, ledger) = (tx.clone(), ledger.clone());
                let (halfway, subscribed) = (halfway.clone(), subscribed.clone());
                std::thread::spawn(move || {
                    for i in 0..EACH {
                        if i == EACH / 2 {
                            halfway.wait();
                            subscribed.wait();
                        }
                        if let Err(refused) = tx.try_send(ledger.produce(p * OFFSET + i)) {
                            refused.into_inner().mark(Fate::HandedBack);
                        }
                    }
                })
            })
            .collect();
        drop(tx);
        halfway.wait();
        let (recorder, record) = Recorder::new(
            Plan {
                initial: 1,
                per_item: 1,
                pause: Some((16, std::time::Duration::from_micros(50))),
                ..Plan::default()
            },
            ledger.clone(),
            Vec::new(),
        );
        rx.subscribe(recorder);
        subscribed.wait();
        for producer in producers {
            let _ = producer.join();
        }
        if !wait_until(PATIENCE, || record.completed() && ledger.live() == 0) {
            failures.push(format!(
                "{policy:?}: did not complete and release ({}; {} alive)",
                record.describe(),
                ledger.live()
            ));
        }
        let mut by_reason: HashMap<DropReason, u64> = HashMap::new();
        for (r, _) in received.lock().unwrap().iter() {
            *by_reason.entry(*r).or_default() += 1;
        }
        let stats = monitor.snapshot();
        for r in DropReason::ALL {
            let got = by_reason.get(&r).copied().unwrap_or(0);
            if got != drops.count(r) || got != stats.dropped(r) || (got > 0 && r != reason) {
                failures.push(format!(
                    "{policy:?}: {r:?}: the hook received {got}, counted {}, the monitor {}",
                    drops.count(r),
                    stats.dropped(r)
                ));
            }
        }
        let produced = ledger.produced();
        let accounted = ledger.ended(Fate::Delivered)
            + ledger.ended(Fate::Hooked)
            + ledger.ended(Fate::HandedBack);
        if accounted != produced || ledger.ended(Fate::Released) != 0 {
            failures.push(format!(
                "{policy:?}: produced {produced}, delivered {} + dropped to the hook {} + handed \
                 back {}; {} released unreported",
                ledger.ended(Fate::Delivered),
                ledger.ended(Fate::Hooked),
                ledger.ended(Fate::HandedBack),
                ledger.ended(Fate::Released)
            ));
        }
    }
    assert_no_failures(
        "channel drop hook with a late subscriber",
        LOSSY.len(),
        &failures,
    );
}

/// `IS_CLONE` is true exactly when `T: Clone` (an inherent constant with the bound
/// shadows the trait's default).
struct CloneProbe<T>(PhantomData<T>);

trait NotClone {
    const IS_CLONE: bool = false;
}

impl<T> NotClone for CloneProbe<T> {}

impl<T: Clone> CloneProbe<T> {
    const IS_CLONE: bool = true;
}

#[test]
fn a_channel_is_not_clone() {
    use std::hint::black_box;
    // The probe itself: a `Sender` is `Clone`, a std `Receiver` is not.
    assert!(black_box(
        CloneProbe::<weir::source::channel::Sender<Item>>::IS_CLONE
    ));
    assert!(!black_box(
        CloneProbe::<std::sync::mpsc::Receiver<Item>>::IS_CLONE
    ));
    assert!(
        !black_box(CloneProbe::<Channel<Item>>::IS_CLONE),
        "Channel serves one subscriber: it must not be Clone"
    );
}
