//! A stage that ends its stream itself has let go of what it held by the time its
//! terminal signal arrives: a subscriber woken by `on_error` (or `on_complete`) finds
//! none of the stage's queued items alive and its upstream cancelled.
//!
//! Every case is synchronous (no boundary), so nothing else releases items later on
//! another thread: the count read inside the terminal signal is the whole truth. The
//! stages hold items when the end comes (a `merge` or `zip` lane, a `flat_map`
//! inner's queue), because the subscriber asked for one item only.

use std::sync::{Arc, Mutex};

use weir::prelude::*;
use weir::{BoxPublisher, Error, Subscriber, Subscription};

use crate::harness::item::{Item, Ledger};
use crate::harness::watch::assert_no_failures;

/// What the subscriber saw when the terminal signal came: live items then (its own
/// were dropped on receipt), and whether it was an error.
#[derive(Clone, Copy, Debug)]
struct AtEnd {
    live: i64,
    errored: bool,
}

/// Asks for one item, drops what it gets, and reads the ledger inside the terminal
/// signal.
struct ReadAtEnd {
    ledger: Arc<Ledger>,
    seen: Arc<Mutex<Option<AtEnd>>>,
}

impl ReadAtEnd {
    fn record(&self, errored: bool) {
        let live = self.ledger.live();
        *self.seen.lock().unwrap() = Some(AtEnd { live, errored });
    }
}

impl Subscriber<Item> for ReadAtEnd {
    fn on_subscribe(&mut self, subscription: Subscription) {
        subscription.request(1);
    }
    fn on_next(&mut self, item: Item) {
        drop(item);
    }
    fn on_error(&mut self, _error: Error) {
        self.record(true);
    }
    fn on_complete(&mut self) {
        self.record(false);
    }
}

/// A source of `n` counted items, made only as they are asked for.
fn counted(ledger: &Arc<Ledger>, n: u64) -> BoxPublisher<Item> {
    let ledger = ledger.clone();
    weir::from_iter((0..n).map(move |v| ledger.produce(v))).boxed()
}

fn failing() -> BoxPublisher<Item> {
    weir::error::<Item>(Error::msg("the other source failed")).boxed()
}

type Case = (&'static str, fn(&Arc<Ledger>) -> BoxPublisher<Item>);

const CASES: &[Case] = &[
    ("merge(items, error)", |l| {
        counted(l, 100).merge(failing()).boxed()
    }),
    ("zip(items, error)", |l| {
        counted(l, 100).zip(failing(), |a, _b: Item| a).boxed()
    }),
    ("flat_map(4, 8) over an outer that fails", |l| {
        let ledger = l.clone();
        weir::from_iter(0..2u64)
            .concat(weir::error(Error::msg("the outer failed")))
            .flat_map(move |_| counted(&ledger, 100), 4, 8)
            .boxed()
    }),
    ("concat_map(8) over an outer that fails", |l| {
        let ledger = l.clone();
        // One outer item: concat_map asks the outer for the next only once the
        // inner is done, so the outer's error must come right behind the first.
        weir::from_iter(0..1u64)
            .concat(weir::error(Error::msg("the outer failed")))
            .concat_map(move |_| counted(&ledger, 100), 8)
            .boxed()
    }),
];

#[test]
fn a_stage_that_fails_its_stream_has_released_its_items_when_on_error_arrives() {
    let mut failures = Vec::new();
    for &(name, build) in CASES {
        let ledger = Ledger::new();
        let seen = Arc::new(Mutex::new(None));
        build(&ledger).subscribe(ReadAtEnd {
            ledger: ledger.clone(),
            seen: seen.clone(),
        });
        let at_end = *seen.lock().unwrap();
        match at_end {
            None => failures.push(format!("{name}: no terminal signal")),
            Some(AtEnd { errored: false, .. }) => {
                failures.push(format!("{name}: completed instead of failing"))
            }
            Some(AtEnd { live, .. }) if live != 0 => failures.push(format!(
                "{name}: {live} items still alive inside on_error (produced {})",
                ledger.produced()
            )),
            Some(_) => {}
        }
        if ledger.live() != 0 {
            failures.push(format!("{name}: {} items alive afterwards", ledger.live()));
        }
        if ledger.produced() < 2 {
            failures.push(format!(
                "{name}: only {} items produced, so the stage held nothing (the case checks nothing)",
                ledger.produced()
            ));
        }
    }
    assert_no_failures("released before the terminal", CASES.len(), &failures);
}
