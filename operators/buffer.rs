//! `buffer`: implementation notes. The user contract is on
//! [`PublisherExt::buffer`](crate::PublisherExt::buffer).
//!
//! Downstream holds a [`Scaled`] subscription: a request for `k` batches goes
//! upstream as `demand::in_items(k, size)` items (saturating), and `on_next_batch`
//! scales downstream's batch credit the same way. Upstream never delivers more than
//! `k × size`, so at most `k` full batches form, plus the partial one that completion
//! flushes.
//!
//! Batching: `on_next_batch` hands downstream a [`Batches`] iterator that fills the
//! current `Vec` (its first item, then one `extend` for the rest of the room) and
//! yields it when it reaches `size`; the remainder stays in `batch` for the next
//! delivery. Batches are filled only as downstream takes them. A `Vec` is allocated with capacity `size`
//! (at most `PREALLOCATED`: a larger batch grows as it fills, so `buffer(2^30)`
//! over ten items does not take 2^30 slots) when a batch's first item arrives (a
//! stream that ends on a batch boundary allocates none for the empty remainder);
//! nothing is allocated per item.
//!
//! State: [`Upstream`] (`Idle` → `Active` → `Done`) plus `batch`. On completion the
//! partial batch is emitted before `on_complete` (its demand is covered: upstream
//! delivered fewer than `k × size` items, so fewer than `k` batches went out); on
//! error it is dropped.

use std::sync::Arc;

use crate::demand;
use crate::drain::Upstream;
use crate::metrics::DropHook;
use crate::stage::window::{self, PREALLOCATED};
use crate::{Error, Publisher, RawSubscription, Subscriber, Subscription};

/// Publisher for the [`buffer`](crate::PublisherExt::buffer) method.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct Buffer<P> {
    source: P,
    size: usize,
}

impl<P> Buffer<P> {
    pub(crate) fn new(source: P, size: u64) -> Self {
        let size = window::validate("buffer size", size);
        Buffer { source, size }
    }
}

impl<P: Publisher> Publisher for Buffer<P> {
    type Item = Vec<P::Item>;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<Vec<P::Item>> + Send + 'static,
    {
        self.source.subscribe(BufferSubscriber {
            downstream: subscriber,
            size: self.size,
            batch: Vec::new(),
            upstream: Upstream::Idle,
        })
    }

    fn in_flight_bound(&self) -> u64 {
        self.source
            .in_flight_bound()
            .saturating_add(self.size as u64)
    }
}

/// Downstream's subscription: requests count batches; upstream counts items.
struct Scaled {
    /// The upstream subscription.
    upstream: Subscription,
    /// Items per batch.
    size: u64,
}

impl RawSubscription for Scaled {
    fn request(&self, n: u64) {
        // `request(0)` goes up unchanged: the source reports rule 3.9.
        self.upstream.request(demand::in_items(n, self.size));
    }

    fn cancel(&self) {
        self.upstream.cancel();
    }
}

struct BufferSubscriber<S, T> {
    /// The next stage.
    downstream: S,
    /// Items per batch.
    size: usize,
    /// The batch being filled; capacity 0 until its first item arrives.
    batch: Vec<T>,
    /// Life-cycle state.
    upstream: Upstream,
}

/// Add `item` to `batch`; returns the batch once it is full.
#[inline]
fn fill<T>(batch: &mut Vec<T>, size: usize, item: T) -> Option<Vec<T>> {
    if batch.capacity() == 0 {
        *batch = Vec::with_capacity(size.min(PREALLOCATED));
    }
    batch.push(item);
    (batch.len() == size).then(|| std::mem::take(batch))
}

/// The full batches formed from a run of items (the remainder stays in `batch`).
struct Batches<'a, I: Iterator> {
    items: I,
    batch: &'a mut Vec<I::Item>,
    size: usize,
}

impl<I: Iterator> Iterator for Batches<'_, I> {
    type Item = Vec<I::Item>;

    #[inline]
    fn next(&mut self) -> Option<Vec<I::Item>> {
        // The first item decides whether a batch is started (and allocated) at all;
        // the rest of the batch is one `extend`, a loop of its own.
        let first = self.items.next()?;
        if let Some(full) = fill(self.batch, self.size, first) {
            return Some(full);
        }
        let room = self.size - self.batch.len();
        self.batch.extend(self.items.by_ref().take(room));
        (self.batch.len() == self.size).then(|| std::mem::take(self.batch))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let upper = self.items.size_hint().1;
        // No upper bound when the count does not fit (a source may announce up to
        // `usize::MAX` items).
        let batches = upper
            .and_then(|u| self.batch.len().checked_add(u))
            .map(|n| n / self.size);
        (0, batches)
    }
}

impl<T, S: Subscriber<Vec<T>>> Subscriber<T> for BufferSubscriber<S, T> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        if self.upstream.accept(&subscription) {
            self.downstream
                .on_subscribe(Subscription::new(Arc::new(Scaled {
                    upstream: subscription,
                    size: self.size as u64,
                })));
        }
    }

    fn on_next(&mut self, item: T) {
        if !self.upstream.is_active() {
            return;
        }
        if let Some(full) = fill(&mut self.batch, self.size, item) {
            self.downstream.on_next(full);
        }
    }

    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        if !self.upstream.is_active() {
            return 0;
        }
        let credit = self.downstream.on_next_batch(Batches {
            items,
            batch: &mut self.batch,
            size: self.size,
        });
        demand::in_items(credit, self.size as u64)
    }

    fn drop_hook(&self) -> Option<DropHook> {
        self.downstream.drop_hook()
    }

    /// The batches are filled lazily as downstream takes them, so downstream's
    /// answer holds for the items too.
    fn stops_batches_itself(&self) -> bool {
        self.downstream.stops_batches_itself()
    }

    fn on_error(&mut self, error: Error) {
        if self.upstream.finish() {
            self.batch = Vec::new();
            self.downstream.on_error(error);
        }
    }

    fn on_complete(&mut self) {
        if self.upstream.finish() {
            if !self.batch.is_empty() {
                self.downstream.on_next(std::mem::take(&mut self.batch));
            }
            self.downstream.on_complete();
        }
    }
}

#[cfg(all(test, not(weir_loom)))]
mod tests {
    use super::*;

    /// A run announcing up to `usize::MAX` items behind a partial batch: the count
    /// of full batches does not fit, so there is no upper bound (not an overflow).
    #[test]
    fn batches_of_a_run_too_long_to_count_have_no_upper_bound() {
        let mut batch = vec![1u64, 2];
        let batches = Batches {
            items: 0..u64::MAX,
            batch: &mut batch,
            size: 3,
        };
        assert_eq!(batches.size_hint(), (0, None));
        let mut batch = vec![1u64, 2];
        let batches = Batches {
            items: 0..7u64,
            batch: &mut batch,
            size: 3,
        };
        assert_eq!(batches.size_hint(), (0, Some(3)));
    }
}
