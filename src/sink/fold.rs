//! `fold`: combine every item into an accumulator; `for_each` and `collect` are folds.
//!
//! Demand contract: requests `prefetch` up front, then what it consumed each time
//! `prefetch - prefetch/4` items arrived ([`Replenish`]), once per batch (as the
//! batch credit `on_next_batch` returns, or a `request` on the item-by-item path);
//! `prefetch == UNBOUNDED` requests once. The accumulator lives in the subscriber
//! and is handed to the [`SinkHandle`] on completion.
//!
//! Fusion: when the publisher [`fuses`](Publisher::fuses) (a synchronous source and
//! only closure stages after it), [`fold`] subscribes nothing. It calls
//! [`Publisher::fold_fused`], which nests each stage's closure into the source's own
//! loop, the way an `Iterator` chain's `fold` does, and runs it in the caller under
//! one `catch_unwind` (`guard::fused`; each closure runs in `guard::blamed`, so a
//! panic's error still names its stage). The handle comes back finished. Nothing
//! between the source and the fold could observe a subscription or its requests, and
//! the fold takes every item, so the result, the order and the errors are those of
//! the subscribed path (a fused `merge` folds its sources in turn: each source's
//! order is kept, as subscribed); the generic chain inlines into the caller, where
//! the compiler can see the source's bounds as constants.

use std::sync::Arc;

use super::handle::{SinkHandle, SinkState};
use crate::demand::{Replenish, UNBOUNDED};
use crate::guard::{self, catch_in};
use crate::spec::Sealed;
use crate::{Error, Publisher, Subscriber, Subscription};

/// Fold `publisher` into `init` with `f` (the sink named `stage`): fused into one loop
/// in the caller when the publisher fuses, else through a subscriber requesting
/// `prefetch` at a time (`prefetch` already checked by the caller).
#[inline]
pub(crate) fn fold<P, A, F>(
    publisher: P,
    stage: &'static str,
    prefetch: u64,
    init: A,
    mut f: F,
) -> SinkHandle<A>
where
    P: Publisher,
    A: Send + 'static,
    F: FnMut(A, P::Item) -> A + Send + 'static,
{
    if publisher.fuses(Sealed::NEW) {
        let folded = guard::fused(|| {
            publisher.fold_fused(
                init,
                move |acc, item| guard::blamed(stage, || f(acc, item)),
                Sealed::NEW,
            )
        });
        return SinkHandle::ended(folded);
    }
    let (subscriber, handle) = fold_subscriber(stage, prefetch, init, f);
    publisher.subscribe(subscriber);
    handle
}

/// The subscriber behind `fold`, `for_each` and `collect`.
pub(crate) struct FoldSubscriber<A, F> {
    /// The accumulator; `None` only after termination.
    acc: Option<A>,
    /// The user's combining closure.
    f: F,
    /// Credit: when to request again.
    replenish: Replenish,
    /// Upstream, once subscribed and until terminated.
    upstream: Option<Subscription>,
    /// Shared with the handle.
    shared: Arc<SinkState<A>>,
    /// The sink's name (`fold`, `for_each`), in a panic's error.
    stage: &'static str,
}

/// Build a fold subscriber and its handle.
pub(crate) fn fold_subscriber<A, F>(
    stage: &'static str,
    prefetch: u64,
    init: A,
    f: F,
) -> (FoldSubscriber<A, F>, SinkHandle<A>) {
    let shared = SinkState::new();
    let subscriber = FoldSubscriber {
        acc: Some(init),
        f,
        replenish: Replenish::new(prefetch),
        upstream: None,
        shared: shared.clone(),
        stage,
    };
    (subscriber, SinkHandle::new(shared))
}

impl<A, F> FoldSubscriber<A, F> {
    /// Asked for everything at once (`prefetch == UNBOUNDED`): never replenishes.
    fn unbounded(&self) -> bool {
        self.replenish.prefetch() == UNBOUNDED
    }

    /// Record `n` consumed items; returns the demand to add now (0: none).
    fn consumed(&mut self, n: u64) -> u64 {
        match (self.replenish.on_consumed(n), &self.upstream) {
            (Some(batch), Some(_)) => batch,
            _ => 0,
        }
    }

    fn fail(&mut self, error: Error) {
        if let Some(upstream) = self.upstream.take() {
            upstream.cancel();
        }
        self.acc = None;
        self.shared.finish(Err(error));
    }
}

impl<T, A, F> Subscriber<T> for FoldSubscriber<A, F>
where
    F: FnMut(A, T) -> A,
{
    fn on_subscribe(&mut self, subscription: Subscription) {
        // Rule 2.5 (and cancel-before-subscribe): the slot cancels what it refuses.
        if self.upstream.is_some() || self.acc.is_none() {
            subscription.cancel();
            return;
        }
        self.shared.watch_from(&subscription);
        if self.shared.slot.set(subscription.clone()) {
            subscription.request(self.replenish.initial());
            self.upstream = Some(subscription);
        }
    }

    #[inline]
    fn on_next(&mut self, item: T) {
        // Items handed over one at a time on the senders' threads: a waiter that
        // sleeps would rather take them (see `SinkHandle::wait`).
        self.shared.took_one();
        let Some(acc) = self.acc.take() else { return };
        match catch_in(self.stage, || (self.f)(acc, item)) {
            Ok(acc) => {
                self.acc = Some(acc);
                let more = self.consumed(1);
                if let (Some(upstream), 1..) = (&self.upstream, more) {
                    upstream.request(more);
                }
            }
            Err(error) => self.fail(error),
        }
    }

    #[inline]
    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        if self.unbounded() {
            // Nothing to replenish: no count, so the chain's loop carries none.
            return self.on_next_batch_of(items, 0, Sealed::NEW);
        }
        let Some(acc) = self.acc.take() else { return 0 };
        let f = &mut self.f;
        let mut count = 0u64;
        // One guard around the whole batch: the accumulator stays a plain value, so
        // the chain compiles to one loop. A panic in `f` unwinds only through the
        // iterator adaptors of this batch (they hold nothing but local counters) and
        // stops here.
        let folded = catch_in(self.stage, || {
            items.fold(acc, |acc, item| {
                count += 1;
                f(acc, item)
            })
        });
        match folded {
            Ok(acc) => {
                self.acc = Some(acc);
                // Replenish as batch credit: no call back into the publisher.
                self.consumed(count)
            }
            Err(error) => {
                self.fail(error);
                0
            }
        }
    }

    /// A batch of exactly `n` items (some of them maybe swallowed on the way): folded
    /// without a count, credited as `n` consumed.
    #[inline]
    fn on_next_batch_of<I: Iterator<Item = T>>(&mut self, items: I, n: u64, _: Sealed) -> u64 {
        let Some(acc) = self.acc.take() else { return 0 };
        let f = &mut self.f;
        match catch_in(self.stage, || items.fold(acc, f)) {
            Ok(acc) => {
                self.acc = Some(acc);
                // Replenish as batch credit: no call back into the publisher (none
                // under unbounded demand).
                if self.unbounded() {
                    0
                } else {
                    // Swallowed items count as consumed, so upstream's outstanding
                    // demand is the window's: a batch beyond it broke rule 1.1.
                    debug_assert!(
                        n <= self.replenish.outstanding(),
                        "rule 1.1: a batch of {n} against {} outstanding",
                        self.replenish.outstanding()
                    );
                    self.consumed(n)
                }
            }
            Err(error) => {
                self.fail(error);
                0
            }
        }
    }

    /// It consumes every item of every batch (or fails), and its credit depends only
    /// on how many items a batch held.
    fn credits_by_count(&self, _: Sealed) -> bool {
        true
    }

    /// Consumes every batch it is handed (it never cancels from inside one).
    fn stops_batches_itself(&self) -> bool {
        true
    }

    /// A single item handed over on its own: counted for a sleeping waiter (see
    /// `SinkHandle::wait`). Here rather than in the batch's path: a look at the
    /// batch's size there cost the fold of batches of 64 a tenth of its time.
    fn handed_one(&mut self, _: Sealed) {
        self.shared.took_one();
    }

    /// `fold_with(UNBOUNDED, ..)` asks once for everything.
    fn demand_is_unbounded(&self, _sealed: crate::spec::Sealed) -> bool {
        self.unbounded()
    }

    fn on_error(&mut self, error: Error) {
        self.upstream = None;
        if self.acc.take().is_some() {
            self.shared.finish(Err(error));
        }
    }

    fn on_complete(&mut self) {
        self.upstream = None;
        if let Some(acc) = self.acc.take() {
            self.shared.finish(Ok(acc));
        }
    }
}

impl<A, F> Drop for FoldSubscriber<A, F> {
    /// Released by its publisher without a terminal signal (after a cancel, or by a
    /// publisher that ended on its own without telling): the handle must not wait for
    /// ever, so the result becomes an error of kind
    /// [`Cancelled`](crate::ErrorKind::Cancelled) (a no-op when it already has one).
    fn drop(&mut self) {
        if self.acc.take().is_some() {
            self.shared.finish(Err(Error::cancelled()));
        }
    }
}
