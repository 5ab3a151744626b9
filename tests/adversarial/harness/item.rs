//! The item every pipeline of the suite carries: a [`Item`] counted by a [`Ledger`]
//! (one more live item at creation, one less at `Drop`), so a test can tell, without
//! any timing, whether a stage still holds items it should have released.
//!
//! The ledger also counts what the *source* produced (items derived inside the
//! pipeline, by `map` or `scan`, are live but not produced), the highest number of
//! live items at any moment (for the memory checks) and where each item ended up
//! ([`Fate`]): delivered to the subscriber, handed back to a sender, taken by a drop
//! hook, or released (dropped by nobody in particular).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

/// Where an item ended up, set by whoever last held it before its `Drop`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Dropped without being marked: released by a stage (or leaked, if never dropped).
    Released = 0,
    /// The subscriber received it.
    Delivered = 1,
    /// A sender got it back in an `Err`.
    HandedBack = 2,
    /// A drop hook took it.
    Hooked = 3,
}

/// Counters shared by every item of one run.
#[derive(Debug, Default)]
pub struct Ledger {
    live: AtomicI64,
    peak: AtomicI64,
    produced: AtomicU64,
    fates: [AtomicU64; 4],
}

impl Ledger {
    /// A ledger with nothing counted.
    pub fn new() -> Arc<Ledger> {
        Arc::new(Ledger::default())
    }

    /// A new item made by the source: counted as produced and live.
    pub fn produce(self: &Arc<Self>, value: u64) -> Item {
        self.produced.fetch_add(1, Ordering::SeqCst);
        self.make(value, Vec::new())
    }

    /// A new item made inside the pipeline (by a `map`, `scan`, `zip` …): live, not
    /// produced.
    pub fn derived(self: &Arc<Self>, value: u64) -> Item {
        self.make(value, Vec::new())
    }

    fn make(self: &Arc<Self>, value: u64, tail: Vec<u64>) -> Item {
        let live = self.live.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(live, Ordering::SeqCst);
        Item {
            value,
            tail,
            fate: Fate::Released,
            ledger: self.clone(),
        }
    }

    /// Items alive now.
    pub fn live(&self) -> i64 {
        self.live.load(Ordering::SeqCst)
    }

    /// The most items alive at any one moment so far.
    pub fn peak(&self) -> i64 {
        self.peak.load(Ordering::SeqCst)
    }

    /// Items the source produced.
    pub fn produced(&self) -> u64 {
        self.produced.load(Ordering::SeqCst)
    }

    /// Items dropped with `fate`.
    pub fn ended(&self, fate: Fate) -> u64 {
        self.fates[fate as usize].load(Ordering::SeqCst)
    }
}

/// A value that counts itself: `value` first, then `tail` (the rest of a batch that
/// `buffer` gathered into one item; empty otherwise).
#[derive(Debug)]
pub struct Item {
    /// The first (usually the only) value.
    pub value: u64,
    /// Further values, for items that stand for a batch.
    pub tail: Vec<u64>,
    fate: Fate,
    ledger: Arc<Ledger>,
}

/// The value `gather` gives a batch that came out empty (no stage may emit one).
pub const EMPTY_BATCH: u64 = u64::MAX;

impl Item {
    /// A new item with `value` on the same ledger (derived, not produced).
    pub fn derive(&self, value: u64) -> Item {
        self.ledger.derived(value)
    }

    /// One item standing for a whole batch, its values in order. The batch's items
    /// are dropped (released). An empty batch becomes an item of value
    /// [`EMPTY_BATCH`], which no expected output contains.
    pub fn gather(batch: Vec<Item>, ledger: &Arc<Ledger>) -> Item {
        let mut values = batch.iter().flat_map(Item::values);
        match values.next() {
            Some(first) => {
                let tail = values.collect();
                ledger.make(first, tail)
            }
            None => ledger.derived(EMPTY_BATCH),
        }
    }

    /// Every value this item stands for, in order.
    pub fn values(&self) -> impl Iterator<Item = u64> + '_ {
        std::iter::once(self.value).chain(self.tail.iter().copied())
    }

    /// Say where this item ended up (counted at its `Drop`).
    pub fn mark(&mut self, fate: Fate) {
        self.fate = fate;
    }
}

impl Drop for Item {
    fn drop(&mut self) {
        self.ledger.fates[self.fate as usize].fetch_add(1, Ordering::SeqCst);
        self.ledger.live.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Items have no deadline: a stage that honours deadlines keeps them all (its
/// bookkeeping still runs).
impl weir::deadline::Deadline for Item {
    fn deadline(&self) -> Option<std::time::Instant> {
        None
    }
}
