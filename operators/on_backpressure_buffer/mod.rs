//! `on_backpressure_buffer`: request everything upstream, hold up to `capacity` items
//! that downstream has no demand for yet, and apply a policy when full. The same core
//! runs `on_backpressure_latest`, `conflate` and `conflate_latest` (capacity 1, with
//! the policies [`KeepLatest`](super::KeepLatest) and [`MergeInto`](super::MergeInto)).
//!
//! Demand contract: UnboundedIn. Upstream is asked for `UNBOUNDED` once; downstream's
//! demand is an [`AtomicDemand`]. In-flight bound: `capacity`, in a ring allocated
//! once at subscribe time (`VecDeque::with_capacity`) and never grown.
//!
//! # Who runs what
//!
//! Downstream demand arrives on any thread, so delivery runs in the one drain loop,
//! [`Wip`]. The downstream subscriber lives in a mutex only the `Wip` owner locks
//! (the engine's pattern, `source/engine.rs`). The ring has its own mutex, shared by
//! the producer (upstream's `on_next`, serial by rule 1.3) and the owner; nobody calls
//! another stage while holding it, so a slow consumer never blocks the producer. The
//! price: a held item leaves the ring under one short lock of its own (an uncontended
//! lock when producer and consumer share a thread). Items that pass straight through
//! touch neither the ring nor its lock, and demand is settled once per run of items.
//!
//! * Upstream delivers a batch: the producer enters the `Wip`. As owner it first
//!   delivers held items (oldest first), then passes arriving items straight through
//!   while downstream has demand and nothing is held (no ring traffic on that path),
//!   then holds the rest, applying the policy when full. If another thread owns the
//!   loop, the producer holds the whole batch and enters again, so the owner's next
//!   pass sees it (the first increment may already have been consumed).
//! * Downstream requests or cancels: it updates the demand or the flags and enters.
//! * Upstream terminates: the end is parked next to the ring and delivered once the
//!   ring is empty ("completion waits for the held items").
//!
//! Drops happen only on the producer's path and go through its [`DropReporter`],
//! counted once per batch. On cancel the held items are released without a report
//! (nothing was dropped for lack of room). States ([`Upstream`]): `Idle` → `Active`
//! → `Done`; a refused item (`Overflow::Error`) or a panicking merge cancels upstream.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::demand::{AtomicDemand, UNBOUNDED};
use crate::drain::{Upstream, Wip};
use crate::loom::{AtomicU8, Mutex};
use crate::metrics::{DropHook, DropReporter};
use crate::{DropReason, Error, Overflow, Publisher, Subscriber, Subscription};

use shared::{lock, Held, Shared};

#[cfg(all(test, weir_loom))]
mod loom_tests;
mod shared;

/// The largest capacity: the ring is allocated up front.
const MAX_CAPACITY: usize = 1 << 30;

/// What a holding stage does with an item that arrives while it is full. Implemented
/// by [`Overflow`], [`KeepLatest`](super::KeepLatest) and [`MergeInto`](super::MergeInto); the
/// stage reports what is lost.
pub trait OnFull<T>: Send + 'static {
    /// `held` holds `capacity` items (oldest first) and `item` arrived.
    fn on_full(&mut self, held: &mut VecDeque<T>, item: T) -> Lost<T>;
}

/// What making room cost; returned by [`OnFull::on_full`].
#[derive(Debug)]
#[non_exhaustive]
pub enum Lost<T> {
    /// This item was dropped, for this reason (handed to the drop hook).
    Item(DropReason, T),
    /// Two items became one inside a user function (counted as `Merged`).
    Merged,
    /// The item was refused: the stage fails with an overflow error.
    Refused(T),
    /// A user function panicked: the stage fails with this error.
    Failed(Error),
}

impl<T: Send + 'static> OnFull<T> for Overflow {
    fn on_full(&mut self, held: &mut VecDeque<T>, item: T) -> Lost<T> {
        match self {
            Overflow::Error => Lost::Refused(item),
            Overflow::DropNewest => Lost::Item(DropReason::OverflowNewest, item),
            Overflow::DropOldest => {
                let oldest = held.pop_front().expect("a full ring has an oldest item");
                held.push_back(item);
                Lost::Item(DropReason::OverflowOldest, oldest)
            }
        }
    }
}

/// Publisher for the [`on_backpressure_buffer`](crate::PublisherExt::on_backpressure_buffer)
/// method (and, with other policies, `on_backpressure_latest`, `conflate` and
/// `conflate_latest`).
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct OnBackpressureBuffer<P, O = Overflow> {
    source: P,
    capacity: usize,
    policy: O,
    stage: &'static str,
}

impl<P, O> OnBackpressureBuffer<P, O> {
    pub(crate) fn new(source: P, capacity: usize, policy: O, stage: &'static str) -> Self {
        assert!(
            (1..=MAX_CAPACITY).contains(&capacity),
            "{stage} capacity must be in 1..=1073741824 (got {capacity})"
        );
        OnBackpressureBuffer {
            source,
            capacity,
            policy,
            stage,
        }
    }
}

impl<P: Publisher, O: OnFull<P::Item>> Publisher for OnBackpressureBuffer<P, O> {
    type Item = P::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<P::Item> + Send + 'static,
    {
        self.source.subscribe(HoldSubscriber {
            pending: Some(subscriber),
            shared: None,
            hook: None,
            policy: self.policy,
            drops: DropReporter::new(self.stage, None),
            stage: self.stage,
            capacity: self.capacity,
            upstream: Upstream::Idle,
        })
    }

    fn in_flight_bound(&self) -> u64 {
        self.source
            .in_flight_bound()
            .saturating_add(self.capacity as u64)
    }
}

struct HoldSubscriber<T, S, O> {
    /// Downstream until `on_subscribe` moves it into `shared`.
    pending: Option<S>,
    /// Shared with downstream's subscription, once subscribed.
    shared: Option<Arc<Shared<T, S>>>,
    /// Downstream's drop hook, asked for once at subscribe time.
    hook: Option<DropHook>,
    /// What to do when full.
    policy: O,
    /// Reports what is dropped (producer side only).
    drops: DropReporter,
    /// The stage's name in drop reports.
    stage: &'static str,
    /// The most items held.
    capacity: usize,
    /// Life-cycle state.
    upstream: Upstream,
}

impl<T: Send + 'static, S: Subscriber<T>, O: OnFull<T>> HoldSubscriber<T, S, O> {
    /// Hold `items`, applying the policy when full. A refusal or a failed merge
    /// cancels upstream and parks the error behind the held items.
    fn hold(&mut self, shared: &Shared<T, S>, items: impl Iterator<Item = T>) {
        let mut held = lock(&shared.held);
        for item in items {
            if held.items.len() < self.capacity {
                held.items.push_back(item);
                continue;
            }
            let error = match self.policy.on_full(&mut held.items, item) {
                Lost::Item(reason, lost) => {
                    self.drops.drop_item(reason, lost);
                    continue;
                }
                Lost::Merged => {
                    self.drops.count(DropReason::Merged, 1);
                    continue;
                }
                Lost::Refused(refused) => {
                    self.drops.drop_item(DropReason::OverflowNewest, refused);
                    Error::overflow(format!(
                        "buffer of {} items full and its policy is Overflow::Error",
                        self.capacity
                    ))
                }
                Lost::Failed(error) => error,
            };
            held.end = Some(Err(error));
            drop(held);
            self.upstream.cancel();
            return;
        }
    }

    fn terminate(&mut self, end: Result<(), Error>) {
        if let (true, Some(shared)) = (self.upstream.finish(), &self.shared) {
            lock(&shared.held).end = Some(end);
            shared.wip.drain(|| shared.pass());
        }
    }
}

impl<T, S, O> Subscriber<T> for HoldSubscriber<T, S, O>
where
    T: Send + 'static,
    S: Subscriber<T> + Send + 'static,
    O: OnFull<T>,
{
    fn on_subscribe(&mut self, subscription: Subscription) {
        if !self.upstream.accept(&subscription) {
            return;
        }
        let Some(mut downstream) = self.pending.take() else {
            return;
        };
        self.hook = downstream.drop_hook();
        self.drops = DropReporter::new(self.stage, self.hook.clone());
        let shared = Arc::new(Shared {
            demand: AtomicDemand::new(),
            wip: Wip::new(),
            flags: AtomicU8::new(0),
            held: Mutex::new(Held {
                items: VecDeque::with_capacity(self.capacity),
                end: None,
            }),
            downstream: Mutex::new(None),
            upstream: subscription.clone(),
        });
        self.shared = Some(shared.clone());
        // Own the loop while downstream's on_subscribe runs: its requests only count.
        let entered = shared.wip.enter();
        debug_assert!(entered, "a new loop has no other owner");
        downstream.on_subscribe(Subscription::new(shared.clone()));
        *lock(&shared.downstream) = Some(downstream);
        shared.wip.run(|| shared.pass());
        subscription.request(UNBOUNDED);
    }

    fn on_next(&mut self, item: T) {
        let _credit_is_ours = self.on_next_batch(std::iter::once(item));
    }

    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        let (Some(shared), true) = (self.shared.clone(), self.upstream.is_active()) else {
            return 0;
        };
        if shared.wip.enter() {
            let mut incoming = Some(items);
            shared.wip.run(|| {
                shared.pass_with(|downstream| {
                    if let Some(mut items) = incoming.take() {
                        shared.pass_through(downstream, &mut items);
                        self.hold(&shared, items);
                    }
                })
            });
        } else {
            self.hold(&shared, items);
            shared.wip.drain(|| shared.pass());
        }
        self.drops.flush();
        // Upstream was asked for everything: no credit goes up.
        0
    }

    fn drop_hook(&self) -> Option<DropHook> {
        match &self.pending {
            Some(downstream) => downstream.drop_hook(),
            None => self.hook.clone(),
        }
    }

    fn on_error(&mut self, error: Error) {
        self.terminate(Err(error));
    }

    fn on_complete(&mut self) {
        self.terminate(Ok(()));
    }
}
