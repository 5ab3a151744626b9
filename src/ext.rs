//! [`PublisherExt`]: one thin constructor per operator and sink. The user
//! documentation of every operator lives on its method here.

use crate::metrics::DropHook;
use crate::operators::{
    Buffer, Concat, ConcatMap, Conflate, Filter, FilterMap, FlatMap, Inspect, InspectCancel,
    InspectRequest, KeepLatest, LimitRate, Map, Merge, MergeInto, OnBackpressureBuffer,
    OnBackpressureDrop, OnBackpressureLatest, OnDropped, Reduce, Scan, Skip, SkipWhile, Take,
    TakeWhile, Zip,
};
use crate::sink::{self, BlockingIter, SinkHandle, DEFAULT_PREFETCH};
use crate::{BoxPublisher, Overflow, Publisher};

// time operators
use crate::operators::{BufferTimeout, Debounce, Rate, Sample, Throttle, ThrottleMode, Timeout};
use crate::operators::{PublishOn, SubscribeOn};
use crate::queue::TimeBounds;
use crate::runtime::{DefaultPool, Scheduler};
use std::time::Duration;

/// Identity function that checks, at zero cost, that `P` is a publisher of `T`.
#[inline(always)]
fn assert_publisher<T, P: Publisher<Item = T>>(publisher: P) -> P {
    publisher
}

/// The current tokio runtime as a scheduler, for the method `what`.
#[cfg(feature = "tokio")]
fn current_tokio(what: &str) -> crate::runtime::Tokio {
    match ::tokio::runtime::Handle::try_current() {
        Ok(handle) => crate::runtime::Tokio::new(handle),
        Err(_) => panic!(
            "{what} must be called inside a tokio runtime (or use map_async_on with an \
             explicit scheduler)"
        ),
    }
}

/// Operators and sinks for every [`Publisher`].
///
/// Operators consume the publisher and return a new one; nothing runs until a sink
/// (or your own [`Subscriber`](crate::Subscriber)) subscribes.
pub trait PublisherExt: Publisher + Sized {
    /// Transform each item with `f`.
    ///
    /// # Backpressure
    ///
    /// PassThrough: downstream's requests reach upstream unchanged; one item out per
    /// item in.
    ///
    /// # Timing
    ///
    /// ```text
    /// source : 1-2-3|
    /// output : a-b-c|      (a = f(1), …)
    /// ```
    ///
    /// # Errors
    ///
    /// Upstream errors pass through unchanged.
    ///
    /// # Cancellation
    ///
    /// Cancel goes straight upstream; nothing is buffered, so nothing is discarded.
    ///
    /// # Panics
    ///
    /// Never panics itself. If `f` panics, the panic is caught: upstream is cancelled
    /// and downstream receives `on_error` of kind
    /// [`Panicked`](crate::ErrorKind::Panicked) carrying the panic message.
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::prelude::*;
    ///
    /// let squares = weir::range(1u32..4).map(|x| x * x).collect().wait().unwrap();
    /// assert_eq!(squares, vec![1, 4, 9]);
    /// ```
    fn map<U, F>(self, f: F) -> Map<Self, F>
    where
        F: FnMut(Self::Item) -> U + Send + 'static,
        U: Send + 'static,
    {
        assert_publisher::<U, _>(Map::new(self, f))
    }

    /// Pass on only the items for which `predicate` returns true.
    ///
    /// # Backpressure
    ///
    /// PassThrough with replenishment: requests go upstream unchanged, and the items
    /// the predicate swallows are asked for again, so upstream's outstanding demand
    /// always equals downstream's. For a batch the stage receives, the swallowed count
    /// is added to the batch credit it returns from `on_next_batch` (demand, as if
    /// requested at the end of the batch): no call back into the publisher. An
    /// upstream that delivers item by item (a [`BoxPublisher`] stage, or your own
    /// publisher without `on_next_batch`) gets one `request(1)` per swallowed item.
    /// In-flight bound: 0.
    ///
    /// # Timing
    ///
    /// ```text
    /// source : 1-2-3-4|
    /// output : --2---4|    (predicate: even)
    /// ```
    ///
    /// # Errors
    ///
    /// Upstream errors pass through unchanged.
    ///
    /// # Cancellation
    ///
    /// Cancel goes straight upstream; nothing is buffered.
    ///
    /// # Panics
    ///
    /// If `predicate` panics, upstream is cancelled and downstream receives `on_error`
    /// of kind [`Panicked`](crate::ErrorKind::Panicked).
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::prelude::*;
    ///
    /// let evens = weir::range(0u32..10).filter(|x| x % 2 == 0).collect().wait().unwrap();
    /// assert_eq!(evens, vec![0, 2, 4, 6, 8]);
    /// ```
    fn filter<F>(self, predicate: F) -> Filter<Self, F>
    where
        F: FnMut(&Self::Item) -> bool + Send + 'static,
    {
        assert_publisher::<Self::Item, _>(Filter::new(self, predicate))
    }

    /// The first `n` items; then complete downstream and cancel upstream.
    ///
    /// # Backpressure
    ///
    /// Limiting: requests go upstream capped so that upstream is asked for at most `n`
    /// items in total, even when downstream requests unbounded.
    ///
    /// # Timing
    ///
    /// ```text
    /// source : 1-2-3-4-5…
    /// output : 1-2-(3|)      (take(3); upstream is cancelled at the `|`)
    /// ```
    ///
    /// # Errors
    ///
    /// An upstream error before the `n`th item passes through; after it, none can arrive.
    ///
    /// # Cancellation
    ///
    /// Cancel goes upstream. `take` cancels upstream itself after the `n`th item.
    /// `take(0)` cancels upstream at once and completes without items.
    ///
    /// # Panics
    ///
    /// Never.
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::prelude::*;
    ///
    /// let first = weir::range(0u64..u64::MAX).take(3).collect().wait().unwrap();
    /// assert_eq!(first, vec![0, 1, 2]);
    /// ```
    fn take(self, n: u64) -> Take<Self> {
        assert_publisher::<Self::Item, _>(Take::new(self, n))
    }

    // ---- transformation operators ----------------

    /// Transform each item with `f` and pass on the `Some` results; `None` swallows
    /// the item.
    ///
    /// # Backpressure
    ///
    /// PassThrough with replenishment, exactly like [`filter`](Self::filter):
    /// requests go upstream unchanged, and the items `f` swallows are asked for again
    /// (added to the batch credit returned for each batch; one `request(1)` per
    /// swallowed item from an upstream that delivers item by item), so upstream's
    /// outstanding demand always equals downstream's. In-flight bound: 0.
    ///
    /// # Timing
    ///
    /// ```text
    /// source : 1-2-3-4|
    /// output : --a---b|    (f: even x to Some(..), odd x to None)
    /// ```
    ///
    /// # Errors
    ///
    /// Upstream errors pass through unchanged.
    ///
    /// # Cancellation
    ///
    /// Cancel goes straight upstream; nothing is buffered.
    ///
    /// # Panics
    ///
    /// If `f` panics, upstream is cancelled and downstream receives `on_error` of kind
    /// [`Panicked`](crate::ErrorKind::Panicked).
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::prelude::*;
    ///
    /// let numbers = weir::from_iter(vec!["1", "x", "3"])
    ///     .filter_map(|s| s.parse::<u32>().ok())
    ///     .collect()
    ///     .wait()
    ///     .unwrap();
    /// assert_eq!(numbers, vec![1, 3]);
    /// ```
    fn filter_map<U, F>(self, f: F) -> FilterMap<Self, F>
    where
        F: FnMut(Self::Item) -> Option<U> + Send + 'static,
        U: Send + 'static,
    {
        assert_publisher::<U, _>(FilterMap::new(self, f))
    }

    /// Drop the first `n` items; pass on the rest.
    ///
    /// # Backpressure
    ///
    /// PassThrough plus the skipped items, asked for once: downstream's first
    /// `request(m)` goes upstream as `request(m + n)` (saturating at
    /// [`UNBOUNDED`](crate::demand::UNBOUNDED)), as in Reactor; later requests pass
    /// unchanged. The skipped items are never requested one at a time. In-flight
    /// bound: 0.
    ///
    /// # Timing
    ///
    /// ```text
    /// source : 1-2-3-4|
    /// output : ----3-4|    (skip(2))
    /// ```
    ///
    /// # Errors
    ///
    /// Upstream errors pass through unchanged, also while items are being skipped.
    ///
    /// # Cancellation
    ///
    /// Cancel goes straight upstream; nothing is buffered.
    ///
    /// # Panics
    ///
    /// Never.
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::prelude::*;
    ///
    /// let rest = weir::range(0u32..6).skip(4).collect().wait().unwrap();
    /// assert_eq!(rest, vec![4, 5]);
    /// ```
    fn skip(self, n: u64) -> Skip<Self> {
        assert_publisher::<Self::Item, _>(Skip::new(self, n))
    }

    /// Pass on items while `predicate` returns true; at the first item it rejects,
    /// complete and cancel upstream.
    ///
    /// # Backpressure
    ///
    /// PassThrough: requests go upstream unchanged. The rejected item is not passed on
    /// and nothing is requested for it: the stream ends with it. Within a batch,
    /// upstream is not pulled past the rejected item. In-flight bound: 0.
    ///
    /// # Timing
    ///
    /// ```text
    /// source : 1-2-7-3-…
    /// output : 1-2-|         (predicate: x < 5; upstream is cancelled at the `|`)
    /// ```
    ///
    /// # Errors
    ///
    /// Upstream errors before the first rejected item pass through unchanged.
    ///
    /// # Cancellation
    ///
    /// Cancel goes straight upstream. `take_while` cancels upstream itself at the first
    /// rejected item.
    ///
    /// # Panics
    ///
    /// If `predicate` panics, upstream is cancelled and downstream receives `on_error`
    /// of kind [`Panicked`](crate::ErrorKind::Panicked).
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::prelude::*;
    ///
    /// let small = weir::range(0u64..u64::MAX).take_while(|x| x * x < 20).collect().wait();
    /// assert_eq!(small.unwrap(), vec![0, 1, 2, 3, 4]);
    /// ```
    fn take_while<F>(self, predicate: F) -> TakeWhile<Self, F>
    where
        F: FnMut(&Self::Item) -> bool + Send + 'static,
    {
        assert_publisher::<Self::Item, _>(TakeWhile::new(self, predicate))
    }

    /// Drop items while `predicate` returns true; from the first item it rejects on,
    /// pass everything (the predicate is not called again).
    ///
    /// # Backpressure
    ///
    /// PassThrough with replenishment while skipping, exactly like
    /// [`filter`](Self::filter): requests go upstream unchanged, and the skipped items
    /// are asked for again (added to the batch credit returned for each batch; one
    /// `request(1)` per skipped item from an upstream that delivers item by item).
    /// Afterwards, plain PassThrough. In-flight bound: 0.
    ///
    /// # Timing
    ///
    /// ```text
    /// source : 1-2-7-3-8|
    /// output : ----7-3-8|    (predicate: x < 5)
    /// ```
    ///
    /// # Errors
    ///
    /// Upstream errors pass through unchanged.
    ///
    /// # Cancellation
    ///
    /// Cancel goes straight upstream; nothing is buffered.
    ///
    /// # Panics
    ///
    /// If `predicate` panics, upstream is cancelled and downstream receives `on_error`
    /// of kind [`Panicked`](crate::ErrorKind::Panicked).
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::prelude::*;
    ///
    /// let rest = weir::from_iter(vec![1, 2, 7, 3, 8]).skip_while(|x| *x < 5).collect();
    /// assert_eq!(rest.wait().unwrap(), vec![7, 3, 8]);
    /// ```
    fn skip_while<F>(self, predicate: F) -> SkipWhile<Self, F>
    where
        F: FnMut(&Self::Item) -> bool + Send + 'static,
    {
        assert_publisher::<Self::Item, _>(SkipWhile::new(self, predicate))
    }

    /// Fold each item into an accumulator that starts at `init`, and emit each new
    /// accumulator (`init` itself is not emitted).
    ///
    /// # Backpressure
    ///
    /// PassThrough: one state out per item in; requests go upstream unchanged.
    /// In-flight bound: 0 (each state is emitted as it is made; a clone is kept as
    /// the next step's accumulator).
    ///
    /// # Timing
    ///
    /// ```text
    /// source : 1-2-3|
    /// output : 1-3-6|      (scan(0, |acc, x| acc + x))
    /// ```
    ///
    /// # Errors
    ///
    /// Upstream errors pass through unchanged.
    ///
    /// # Cancellation
    ///
    /// Cancel goes straight upstream; nothing is buffered.
    ///
    /// # Panics
    ///
    /// If `f` panics, upstream is cancelled and downstream receives `on_error` of kind
    /// [`Panicked`](crate::ErrorKind::Panicked).
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::prelude::*;
    ///
    /// let running = weir::range(1u64..5).scan(0, |acc, x| acc + x).collect();
    /// assert_eq!(running.wait().unwrap(), vec![1, 3, 6, 10]);
    /// ```
    fn scan<A, F>(self, init: A, f: F) -> Scan<Self, A, F>
    where
        A: Clone + Send + 'static,
        F: FnMut(A, Self::Item) -> A + Send + 'static,
    {
        assert_publisher::<A, _>(Scan::new(self, init, f))
    }

    /// Combine all items with `f` (the first item is the starting value) and emit the
    /// result once, when upstream completes. An empty upstream completes without an
    /// item.
    ///
    /// # Backpressure
    ///
    /// Decoupled: upstream is consumed like a sink consumes it, in batches of
    /// [`DEFAULT_PREFETCH`] with the 75% replenish rule
    /// ([`Replenish`](crate::demand::Replenish)), starting at subscription: the result
    /// needs every item, whatever downstream asks for, and upstream is never asked for
    /// [`UNBOUNDED`](crate::demand::UNBOUNDED). Downstream's demand only releases the
    /// result: it is emitted once upstream completed and downstream has requested at
    /// least 1; until then it waits in the stage. In-flight bound: upstream's plus 1.
    ///
    /// # Timing
    ///
    /// ```text
    /// source : 1-2-3-4|
    /// output : -------(10|)   (reduce(|a, x| a + x))
    /// ```
    ///
    /// # Errors
    ///
    /// An upstream error is passed on at once, without demand; the partial result is
    /// dropped.
    ///
    /// # Cancellation
    ///
    /// Cancel goes upstream and drops the partial (or waiting) result.
    ///
    /// # Panics
    ///
    /// If `f` panics, upstream is cancelled and downstream receives `on_error` of kind
    /// [`Panicked`](crate::ErrorKind::Panicked).
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::prelude::*;
    ///
    /// let max = weir::from_iter(vec![3, 9, 4]).reduce(|a, b| a.max(b)).collect();
    /// assert_eq!(max.wait().unwrap(), vec![9]);
    /// let none = weir::empty::<u32>().reduce(|a, b| a + b).collect();
    /// assert_eq!(none.wait().unwrap(), Vec::<u32>::new());
    /// ```
    fn reduce<F>(self, f: F) -> Reduce<Self, F>
    where
        F: FnMut(Self::Item, Self::Item) -> Self::Item + Send + 'static,
    {
        assert_publisher::<Self::Item, _>(Reduce::new(self, f))
    }

    /// Call `f` with a reference to each item as it passes (the `on_next` tap).
    ///
    /// The three taps are three stages: `inspect` (items),
    /// [`inspect_request`](Self::inspect_request) (every request) and
    /// [`inspect_cancel`](Self::inspect_cancel) (the first cancel); chain the ones you
    /// need. Each sees the signals at its place in the chain.
    ///
    /// # Backpressure
    ///
    /// PassThrough: requests go upstream unchanged; one item out per item in.
    /// In-flight bound: 0.
    ///
    /// # Timing
    ///
    /// ```text
    /// source : 1-2-3|
    /// output : 1-2-3|      (f sees 1, 2, 3 just before downstream does)
    /// ```
    ///
    /// # Errors
    ///
    /// Upstream errors pass through unchanged; `f` does not see them.
    ///
    /// # Cancellation
    ///
    /// Cancel goes straight upstream; nothing is buffered.
    ///
    /// # Panics
    ///
    /// If `f` panics, the item is not passed on, upstream is cancelled and downstream
    /// receives `on_error` of kind [`Panicked`](crate::ErrorKind::Panicked).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use std::sync::Arc;
    /// use weir::prelude::*;
    ///
    /// let seen = Arc::new(AtomicU64::new(0));
    /// let counter = seen.clone();
    /// let evens = weir::range(0u64..10)
    ///     .inspect(move |_| {
    ///         counter.fetch_add(1, Ordering::Relaxed);
    ///     })
    ///     .filter(|x| x % 2 == 0)
    ///     .collect()
    ///     .wait()
    ///     .unwrap();
    /// assert_eq!(evens, vec![0, 2, 4, 6, 8]);
    /// assert_eq!(seen.load(Ordering::Relaxed), 10);
    /// ```
    fn inspect<F>(self, f: F) -> Inspect<Self, F>
    where
        F: FnMut(&Self::Item) + Send + 'static,
    {
        assert_publisher::<Self::Item, _>(Inspect::new(self, f))
    }

    /// Call `f` with every amount downstream requests, then forward the request (the
    /// `on_request` tap).
    ///
    /// `f` sees `request(n)` calls, including an illegal `request(0)`, and the batch
    /// credit downstream returns from `on_next_batch` (demand, exactly as if
    /// requested): the sum of what `f` sees is what upstream was asked for. It may run
    /// on any thread, concurrently, hence `Fn + Sync`.
    ///
    /// # Backpressure
    ///
    /// PassThrough: every request and all credit go upstream unchanged, after `f`.
    /// In-flight bound: 0.
    ///
    /// # Timing
    ///
    /// ```text
    /// demand : 2---1-----
    /// f      : 2---1-----
    /// source : 1-2-3|
    /// output : 1-2-3|
    /// ```
    ///
    /// # Errors
    ///
    /// Upstream errors pass through unchanged.
    ///
    /// # Cancellation
    ///
    /// Cancel goes straight upstream; `f` is not called for it.
    ///
    /// # Panics
    ///
    /// If `f` panics, that request is not forwarded, later requests are ignored, and
    /// downstream receives `on_error` of kind [`Panicked`](crate::ErrorKind::Panicked)
    /// from the thread that delivers the stream's signals: the stage asks upstream for
    /// `request(0)` and swaps upstream's rule 3.9 answer for the panic (upstream
    /// terminates with that answer, so nothing more is pulled; a completion that
    /// overtakes it is replaced by the panic too). On the batch-credit path the stage
    /// cancels upstream and fails downstream at once.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use weir::prelude::*;
    ///
    /// let log = Arc::new(Mutex::new(Vec::new()));
    /// let requests = log.clone();
    /// let items = weir::range(0u32..10)
    ///     .inspect_request(move |n| requests.lock().unwrap().push(n))
    ///     .collect_with(4)
    ///     .wait()
    ///     .unwrap();
    /// assert_eq!(items.len(), 10);
    /// // The sink asked for its window of 4, then (as batch credit) for what it had
    /// // consumed each time at least 3 of the window were used.
    /// assert_eq!(*log.lock().unwrap(), vec![4, 4, 4]);
    /// ```
    fn inspect_request<F>(self, f: F) -> InspectRequest<Self, F>
    where
        F: Fn(u64) + Send + Sync + 'static,
    {
        assert_publisher::<Self::Item, _>(InspectRequest::new(self, f))
    }

    /// Call `f` once when downstream cancels, then cancel upstream (the `on_cancel`
    /// tap).
    ///
    /// `f` runs at the first `cancel` made through this stage's subscription (cancel
    /// is idempotent), on the cancelling thread. The stream's own end does not run it,
    /// nor does a cancel made by another stage upstream; a `cancel` downstream makes
    /// after the stream ended still does.
    ///
    /// # Backpressure
    ///
    /// PassThrough: requests go upstream unchanged. In-flight bound: 0.
    ///
    /// # Timing
    ///
    /// ```text
    /// source : 1-2-3-4…
    /// demand : 2-----x
    /// output : 1-2---      (f runs at the `x`, then upstream is cancelled)
    /// ```
    ///
    /// # Errors
    ///
    /// Upstream errors pass through unchanged; `f` is not called for them.
    ///
    /// # Cancellation
    ///
    /// The first cancel runs `f`, then goes upstream; later cancels go upstream only.
    ///
    /// # Panics
    ///
    /// A panic in `f` is caught and logged (`tracing` error); upstream is cancelled
    /// regardless. Nothing is signalled: downstream has cancelled.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use std::sync::Arc;
    /// use weir::prelude::*;
    ///
    /// let cancelled = Arc::new(AtomicBool::new(false));
    /// let flag = cancelled.clone();
    /// let mut items = weir::range(0u64..u64::MAX)
    ///     .inspect_cancel(move || flag.store(true, Ordering::Relaxed))
    ///     .blocking_iter(4);
    /// assert_eq!(items.next().unwrap().unwrap(), 0);
    /// drop(items); // dropping the iterator cancels
    /// assert!(cancelled.load(Ordering::Relaxed));
    /// ```
    fn inspect_cancel<F>(self, f: F) -> InspectCancel<Self, F>
    where
        F: FnOnce() + Send + 'static,
    {
        assert_publisher::<Self::Item, _>(InspectCancel::new(self, f))
    }

    // ---- multi-source operators -----------------

    /// Merge this publisher with `other`: the items of both, interleaved as they
    /// arrive, each source's own order kept.
    ///
    /// # Backpressure
    ///
    /// Prefetching, per source: each side is asked for
    /// [`MERGE_PREFETCH`](crate::operators::MERGE_PREFETCH) items up front and
    /// replenished by the 75% rule (in batches of 3/4 of the window) as downstream
    /// takes its items. Downstream never gets more than it requested. In-flight bound:
    /// both sources' bounds plus `2 × MERGE_PREFETCH`. Several sources:
    /// [`weir::merge`](crate::merge).
    ///
    /// # Timing
    ///
    /// ```text
    /// self   : 1---2---3|
    /// other  : --x---y|
    /// output : 1-x-2-y-3|   (completes when both have)
    /// ```
    ///
    /// # Errors
    ///
    /// The first error of either side is signalled at once; the other side is
    /// cancelled and its queued items are released. A side that delivers more than it
    /// was asked for (rule 1.1) is cancelled, and the stream fails the same way with
    /// an error of kind [`SpecViolation`](crate::ErrorKind::SpecViolation) naming the
    /// rule.
    ///
    /// # Cancellation
    ///
    /// Cancels both sides; queued items (at most `MERGE_PREFETCH` per side) are released.
    ///
    /// # Fusion
    ///
    /// When both sides fuse (a synchronous source with only closure stages after it:
    /// see [`fold_with`](Self::fold_with)) and a fold ends the chain, no lane is made:
    /// the fold takes `self`'s items, then `other`'s, in the calling thread.
    ///
    /// # Panics
    ///
    /// Never.
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::prelude::*;
    ///
    /// let mut all = weir::range(0u32..3).merge(weir::range(10..12)).collect().wait().unwrap();
    /// all.sort();
    /// assert_eq!(all, vec![0, 1, 2, 10, 11]);
    /// ```
    fn merge<Q>(self, other: Q) -> Merge<Self, Q>
    where
        Q: Publisher<Item = Self::Item>,
    {
        assert_publisher::<Self::Item, _>(Merge::new(self, other))
    }

    /// All items of this publisher, then all items of `other`, which is subscribed
    /// only once this one has completed.
    ///
    /// # Backpressure
    ///
    /// PassThrough with carry-over: downstream's requests go to the live source; what
    /// downstream requested and the first source did not deliver is requested from
    /// `other` as soon as it is subscribed, exactly. In-flight bound: 0 (plus the
    /// sources' own bounds).
    ///
    /// # Timing
    ///
    /// ```text
    /// self   : 1-2|
    /// other  :     a-b|     (subscribed at the `|` of self)
    /// output : 1-2-a-b|
    /// ```
    ///
    /// # Errors
    ///
    /// An error of the first source ends the stream: `other` is never subscribed.
    /// An error of `other` passes through.
    ///
    /// # Cancellation
    ///
    /// Cancels the live source; after a cancel `other` is never subscribed. Nothing is
    /// buffered.
    ///
    /// # Panics
    ///
    /// Never. An `other` whose `subscribe` panics, before or after its
    /// `on_subscribe`, ends the stream with an error of kind
    /// [`Panicked`](crate::ErrorKind::Panicked) whose message is the panic's.
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::prelude::*;
    ///
    /// let all = weir::range(0u32..3).concat(weir::range(7..9)).collect().wait().unwrap();
    /// assert_eq!(all, vec![0, 1, 2, 7, 8]);
    /// ```
    fn concat<Q>(self, other: Q) -> Concat<Self, Q>
    where
        Q: Publisher<Item = Self::Item> + Send + 'static,
    {
        assert_publisher::<Self::Item, _>(Concat::new(self, other))
    }

    /// Map every item to a publisher with `f` and merge those inner publishers, at
    /// most `concurrency` at a time, each with a window of `prefetch` items.
    ///
    /// # Backpressure
    ///
    /// Prefetching, bounded twice. This publisher is asked for `concurrency` items up
    /// front and for 1 more each time an inner publisher has completed and all its
    /// items have gone downstream, so there are never more than `concurrency` inner
    /// subscriptions (an inner that completed but still holds undelivered items keeps
    /// its place). Each inner is asked for `prefetch`
    /// items up front and replenished by the 75% rule as downstream takes its items, so
    /// never more than `concurrency × prefetch` items are buffered. Downstream never
    /// gets more than it requested. In-flight bound: this publisher's bound plus
    /// `concurrency × prefetch`. With [`FlatMap::limit`] a
    /// [`Limiter`](crate::limit::Limiter) bounds the inners at its limit (at most
    /// `concurrency`), and this publisher is asked only for what fits: items over the
    /// limit wait here, as demand not given.
    ///
    /// # Timing
    ///
    /// ```text
    /// source : 1-------2|
    /// inner 1:  a--b|
    /// inner 2:          c-d|
    /// output : -a--b----c-d|   (inners may interleave; each keeps its order)
    /// ```
    ///
    /// # Errors
    ///
    /// The first error of the source or of any inner is signalled at once; everything
    /// else is cancelled and queued items are released. A panic in `f` becomes an error
    /// of kind [`Panicked`](crate::ErrorKind::Panicked) the same way, and a source or
    /// inner that delivers more than it was asked for (rule 1.1) an error of kind
    /// [`SpecViolation`](crate::ErrorKind::SpecViolation).
    ///
    /// # Cancellation
    ///
    /// Cancels the source and every live inner; queued items (at most
    /// `concurrency × prefetch`) are released.
    ///
    /// # Panics
    ///
    /// At construction, if `concurrency` is not in `1..=2^16` ("flat_map concurrency
    /// must be in 1..=2^16 (got 0)") or `prefetch` is not in `1..=2^30`
    /// ("flat_map prefetch must be in 1..=2^30 (got 0)").
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::prelude::*;
    ///
    /// let mut all = weir::range(1u32..4)
    ///     .flat_map(|n| weir::range(0..n), 2, 16)
    ///     .collect()
    ///     .wait()
    ///     .unwrap();
    /// all.sort();
    /// assert_eq!(all, vec![0, 0, 0, 1, 1, 2]);
    /// ```
    fn flat_map<Q, F>(self, f: F, concurrency: u64, prefetch: u64) -> FlatMap<Self, F>
    where
        F: FnMut(Self::Item) -> Q + Send + 'static,
        Q: Publisher,
    {
        assert_publisher::<Q::Item, _>(FlatMap::new(self, f, concurrency, prefetch))
    }

    /// Map every item to a publisher with `f` and emit those inner publishers one after
    /// another, in the order of the items, each with a window of `prefetch` items.
    ///
    /// # Backpressure
    ///
    /// Prefetching: [`flat_map`](Self::flat_map) with a concurrency of 1. This
    /// publisher is asked for 1 item, and for 1 more once the current inner has
    /// completed and all its items have gone downstream; the inner is asked for
    /// `prefetch` items and replenished by the 75% rule. In-flight bound: this
    /// publisher's bound plus `prefetch`.
    ///
    /// # Timing
    ///
    /// ```text
    /// source : 1-2------|
    /// inner 1:  a-b|
    /// inner 2:      c-d|   (subscribed after inner 1 completed)
    /// output : -a-b-c-d-|
    /// ```
    ///
    /// # Errors
    ///
    /// As [`flat_map`](Self::flat_map): the first error (or a panic in `f`) is
    /// signalled at once and everything else is cancelled.
    ///
    /// # Cancellation
    ///
    /// Cancels the source and the live inner; queued items (at most `prefetch`) are
    /// released.
    ///
    /// # Panics
    ///
    /// At construction, if `prefetch` is not in `1..=2^30` ("concat_map prefetch must
    /// be in 1..=2^30 (got 0)").
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::prelude::*;
    ///
    /// let all = weir::range(1u32..4)
    ///     .concat_map(|n| weir::range(0..n), 8)
    ///     .collect()
    ///     .wait()
    ///     .unwrap();
    /// assert_eq!(all, vec![0, 0, 1, 0, 1, 2]);
    /// ```
    fn concat_map<Q, F>(self, f: F, prefetch: u64) -> ConcatMap<Self, F>
    where
        F: FnMut(Self::Item) -> Q + Send + 'static,
        Q: Publisher,
    {
        assert_publisher::<Q::Item, _>(ConcatMap::new(self, f, prefetch))
    }

    /// Pair the items of this publisher and `other` in order and combine each pair
    /// with `f`.
    ///
    /// # Backpressure
    ///
    /// Prefetching, per side: each side is asked for
    /// [`ZIP_PREFETCH`](crate::operators::ZIP_PREFETCH) items up front and replenished
    /// by the 75% rule as pairs go out; downstream demand counts pairs. In-flight
    /// bound: both sources' bounds plus `2 × ZIP_PREFETCH`.
    ///
    /// # Timing
    ///
    /// ```text
    /// self   : 1---2---3---4|
    /// other  : --a---b|
    /// output : --x---y|      (x = f(1, a), y = f(2, b); other ended, lane empty)
    /// ```
    ///
    /// # Errors
    ///
    /// The first error of either side is signalled at once and the other side is
    /// cancelled. A panic in `f`, or in a side's `subscribe`, becomes an error of kind
    /// [`Panicked`](crate::ErrorKind::Panicked) and cancels both sides. A side that
    /// delivers more than it was asked for (rule 1.1) is cancelled, and the stream
    /// fails with an error of kind [`SpecViolation`](crate::ErrorKind::SpecViolation).
    ///
    /// # Cancellation
    ///
    /// Cancels both sides; queued items (at most `ZIP_PREFETCH` per side) are
    /// released. Completion cancels the side that is still running.
    ///
    /// # Panics
    ///
    /// Never.
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::prelude::*;
    ///
    /// let pairs = weir::range(1u32..10)
    ///     .zip(weir::from_iter(["a", "b"]), |n, s| format!("{s}{n}"))
    ///     .collect()
    ///     .wait()
    ///     .unwrap();
    /// assert_eq!(pairs, vec!["a1", "b2"]);
    /// ```
    fn zip<Q, F, U>(self, other: Q, f: F) -> Zip<Self, Q, F>
    where
        Q: Publisher,
        F: FnMut(Self::Item, Q::Item) -> U + Send + 'static,
        U: Send + 'static,
    {
        assert_publisher::<U, _>(Zip::new(self, other, f))
    }

    /// Share this publisher among many subscribers through a [`Hub`](crate::hub::Hub):
    /// one subscription upstream, one ring of `capacity` items, a cursor and a
    /// [`Policy`](crate::hub::Policy) per subscriber. Subscribing to the hub joins
    /// with `Backpressure`; [`Hub::join`](crate::hub::Hub::join) picks another policy.
    /// [`Hub::builder`](crate::hub::Hub::builder) sets when it connects, the replay
    /// for late subscribers and whether it stops when the last one leaves. See the
    /// [`hub`](crate::hub) module for the algorithm.
    ///
    /// # Backpressure
    ///
    /// Per subscriber, exactly its own demand (rule 1.1). Upstream is asked for what
    /// the ring has room for beside the items the slowest `Backpressure` subscriber
    /// has not read, in batches (the 75% rule over the ring); lossy subscribers
    /// (`DropOldest`, `Latest`, `Disconnect`) never hold it back. In-flight bound:
    /// upstream's, plus `capacity + 256`.
    ///
    /// # Timing
    ///
    /// ```text
    /// upstream  : 1-2-3-4-5-6-7|
    /// fast (BP) : 1-2-3-4-5-6-7|
    /// slow (Latest, ring of 2, requests late):
    ///             ---------------6-7|   (1..5 skipped, counted as dropped)
    /// ```
    ///
    /// # Errors
    ///
    /// Upstream's error reaches every subscriber after the items the ring still has
    /// for it. A `Disconnect` subscriber that falls too far behind gets an error of
    /// kind [`Lagged`](crate::ErrorKind::Lagged). An upstream that delivers more than
    /// it was asked for (rule 1.1) is cancelled and the hub fails with an error of
    /// kind [`SpecViolation`](crate::ErrorKind::SpecViolation). An upstream that drops
    /// the hub's subscriber without a terminal signal (its thread panicked, say) ends
    /// the hub with an error of kind [`Cancelled`](crate::ErrorKind::Cancelled) after
    /// the ring's items. A subscriber that arrives after the hub stopped gets an
    /// error of kind [`Cancelled`](crate::ErrorKind::Cancelled).
    ///
    /// # Cancellation
    ///
    /// A subscriber that cancels leaves the hub; the others go on. When the last one
    /// leaves, upstream is cancelled and the ring released (unless built with
    /// `keep_connected`).
    ///
    /// # Panics
    ///
    /// If `capacity` is not in `1..=2^30` ("share capacity must be in 1..=2^30 (got
    /// 0)"). A subscriber that panics is treated as cancelled; the others go on.
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::prelude::*;
    /// use weir::hub::Policy;
    ///
    /// let hub = weir::range(0u32..100).share(16);
    /// // The first subscriber connects the hub; this one takes everything.
    /// let all = hub.clone().collect().wait().unwrap();
    /// assert_eq!(all, (0..100).collect::<Vec<_>>());
    /// // Upstream completed: a late subscriber gets the end at once.
    /// assert!(hub.join(Policy::Latest).collect().wait().unwrap().is_empty());
    /// ```
    #[track_caller]
    fn share(self, capacity: usize) -> crate::hub::Hub<Self::Item>
    where
        Self: Send + 'static,
        Self::Item: Clone,
    {
        crate::hub::Hub::builder(self, capacity).build()
    }

    // ---- rate-decoupling operators ------------------------------------------------

    /// Request everything upstream; pass on what downstream has asked for and drop the
    /// rest, reporting every dropped item.
    ///
    /// # Backpressure
    ///
    /// UnboundedIn: upstream is asked for `UNBOUNDED` once. Downstream's demand is
    /// honoured exactly; items that arrive while it is zero are dropped with
    /// [`DropReason::OverflowNewest`](crate::DropReason::OverflowNewest), handed to the
    /// pipeline's [`DropHook`] (see [`on_dropped`](Self::on_dropped)) and counted.
    /// In-flight bound: 0 (nothing is held).
    ///
    /// # Timing
    ///
    /// ```text
    /// source : 1-2-3-4-5|
    /// demand : 1---2-----
    /// output : 1---4-5|      (2 and 3 dropped: no demand when they arrived)
    /// ```
    ///
    /// # Errors
    ///
    /// Upstream errors pass through.
    ///
    /// # Cancellation
    ///
    /// Cancel goes upstream; nothing is held, so nothing is discarded.
    ///
    /// # Panics
    ///
    /// Never.
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::metrics::{DropHook, Drops};
    /// use weir::prelude::*;
    /// use weir::DropReason;
    ///
    /// let drops = Drops::new();
    /// // A consumer with a window of 3 items, and a source that pushes 10 at once.
    /// let kept = weir::range(0u32..10)
    ///     .on_backpressure_drop()
    ///     .on_dropped(DropHook::new(drops.clone()))
    ///     .blocking_iter(3)
    ///     .collect::<Result<Vec<_>, _>>()
    ///     .unwrap();
    /// assert_eq!(kept, vec![0, 1, 2]);
    /// assert_eq!(drops.count(DropReason::OverflowNewest), 7);
    /// ```
    fn on_backpressure_drop(self) -> OnBackpressureDrop<Self>
    where
        Self::Item: 'static,
    {
        assert_publisher::<Self::Item, _>(OnBackpressureDrop::new(self))
    }

    /// Report what the lossy stages upstream drop to `hook`: every dropped item with
    /// its reason (the hook may take the item to release resources) and per-reason
    /// counters. The hook sees items type-erased, for metrics across a pipeline; to
    /// handle a stage's dropped items as their own type, use
    /// [`on_drop`](Self::on_drop).
    ///
    /// # Backpressure
    ///
    /// PassThrough: the stage changes no signal. Place it after the lossy stages it
    /// should hear from; they ask for the hook when they are subscribed. The nearest
    /// `on_dropped` below a lossy stage is the one it reports to.
    ///
    /// # Timing
    ///
    /// ```text
    /// source : 1-2-3|
    /// output : 1-2-3|      (unchanged)
    /// ```
    ///
    /// # Errors
    ///
    /// Upstream errors pass through.
    ///
    /// # Cancellation
    ///
    /// Cancel goes straight upstream.
    ///
    /// # Panics
    ///
    /// Never itself. A panic in the hook's `inspect` closure fails the lossy stage
    /// that reported the drop as a panic of its own closure would: upstream is
    /// cancelled and downstream receives `on_error` of kind
    /// [`Panicked`](crate::ErrorKind::Panicked) naming `on_dropped` (after the items
    /// the stage holds); the closure is not called again. Keep hooks simple.
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::metrics::{DropHook, Drops};
    /// use weir::prelude::*;
    /// use std::sync::{Arc, Mutex};
    ///
    /// let drops = Drops::new();
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let log = seen.clone();
    /// let hook = DropHook::new(drops.clone()).inspect(move |dropped| {
    ///     log.lock().unwrap().extend(dropped.take::<u32>());
    /// });
    /// let kept = weir::range(0u32..5)
    ///     .on_backpressure_drop()
    ///     .on_dropped(hook)
    ///     .blocking_iter(2) // a window of 2 items
    ///     .collect::<Result<Vec<_>, _>>()
    ///     .unwrap();
    /// assert_eq!(kept, vec![0, 1]);
    /// assert_eq!(*seen.lock().unwrap(), vec![2, 3, 4]);
    /// assert_eq!(drops.total(), 3);
    /// ```
    fn on_dropped(self, hook: DropHook) -> OnDropped<Self> {
        assert_publisher::<Self::Item, _>(OnDropped::new(self, hook))
    }

    /// Hand the items the lossy stages above drop to `f`, typed: each arrives as a
    /// [`DroppedItem<T>`](crate::metrics::DroppedItem) of this stage's item type,
    /// with its reason and the dropping stage's name, and the item is `f`'s to keep,
    /// reuse or drop. The typed twin of [`on_dropped`](Self::on_dropped), whose
    /// erased hook suits global metrics.
    ///
    /// Drops are counted into the hook below this one, if there is one, and that hook
    /// still sees every drop after `f` (with the item taken: its `take` gives `None`),
    /// so an `on_dropped` further down keeps its global metrics. A dropped item of
    /// another type (from a lossy stage above a `map` that changed the type) is not
    /// lost: it goes on to the hook below, item and all.
    ///
    /// # Backpressure
    ///
    /// PassThrough: the stage changes no signal. Place it right after the lossy stage
    /// it should hear from; the nearest hook below a lossy stage is the one it reports
    /// to.
    ///
    /// # Timing
    ///
    /// ```text
    /// source : 1-2-3|
    /// output : 1-2-3|      (unchanged)
    /// ```
    ///
    /// # Errors
    ///
    /// Upstream errors pass through.
    ///
    /// # Cancellation
    ///
    /// Cancel goes straight upstream. Items a lossy stage releases on cancel are not
    /// drops (nothing was lost to overflow) and are not reported.
    ///
    /// # Panics
    ///
    /// Never itself. A panic in `f` fails the lossy stage that reported the drop as a
    /// panic of its own closure would: upstream is cancelled and downstream receives
    /// `on_error` of kind [`Panicked`](crate::ErrorKind::Panicked) naming `on_drop`
    /// (after the items the stage holds); `f` is not called again. Keep `f` short.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use weir::prelude::*;
    /// use weir::DropReason;
    ///
    /// let lost = Arc::new(Mutex::new(Vec::new()));
    /// let log = lost.clone();
    /// let kept = weir::range(0u32..5)
    ///     .on_backpressure_drop()
    ///     .on_drop(move |dropped| {
    ///         assert_eq!(dropped.reason(), DropReason::OverflowNewest);
    ///         log.lock().unwrap().push(dropped.into_inner()); // a u32, no guessing
    ///     })
    ///     .blocking_iter(2) // a window of 2 items
    ///     .collect::<Result<Vec<_>, _>>()
    ///     .unwrap();
    /// assert_eq!(kept, vec![0, 1]);
    /// assert_eq!(*lost.lock().unwrap(), vec![2, 3, 4]);
    /// ```
    fn on_drop<F>(self, f: F) -> crate::operators::OnDrop<Self, F>
    where
        Self::Item: 'static,
        F: Fn(crate::metrics::DroppedItem<Self::Item>) + Send + Sync + 'static,
    {
        assert_publisher::<Self::Item, _>(crate::operators::OnDrop::new(self, f))
    }

    /// Name this stage: while it runs, it is listed in the
    /// [`Registry`](crate::metrics::Registry) ([`Registry::global`](crate::metrics::Registry::global)
    /// unless [`Named::registry`](crate::operators::Named::registry) picks another),
    /// with its in-flight bound and, for a stage that holds a queue (`publish_on`, a
    /// [`channel`](fn@crate::channel), `on_backpressure_buffer`), its queue's figures:
    /// depth, capacity, oldest age, lag, time to drain, drops by reason, blocked
    /// time, pauses. [`Registry::snapshot`](crate::metrics::Registry::snapshot)
    /// reads them all at once, and prints as a table.
    ///
    /// The stage enters the registry when it is subscribed (each subscription of a
    /// cloned publisher is an entry of its own) and leaves when its stream ends:
    /// completion, error, cancel, or a panic that ends it. A fused synchronous chain
    /// (`range(..).map(..).name(..).fold(..)`, one loop in the caller with no stage
    /// and no subscription) is not listed: naming leaves it compiled as it was.
    ///
    /// # Backpressure
    ///
    /// PassThrough: the stage changes no signal; it registers once per subscription
    /// and does nothing per item.
    ///
    /// # Timing
    ///
    /// ```text
    /// source : 1-2-3|
    /// output : 1-2-3|      (unchanged; listed from subscribe to the end)
    /// ```
    ///
    /// # Errors
    ///
    /// Upstream errors pass through (and end the registration).
    ///
    /// # Cancellation
    ///
    /// Cancel goes straight upstream; the entry leaves when the stage lets go of its
    /// subscriber.
    ///
    /// # Panics
    ///
    /// Never itself. A panic downstream that ends the stage ends its entry too.
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::metrics::Registry;
    /// use weir::prelude::*;
    /// use weir::runtime::ThreadPool;
    ///
    /// let registry = Registry::new();
    /// let pool = ThreadPool::builder().threads(1).build();
    /// let window = weir::range(0u32..1_000)
    ///     .publish_on(pool, 64)
    ///     .name("hop")
    ///     .registry(&registry)
    ///     .blocking_iter(1); // asks for one item at a time
    /// let snapshot = registry.snapshot();
    /// let hop = snapshot.stage("hop").expect("listed while it runs");
    /// assert_eq!(hop.queue.as_ref().map(|q| q.capacity), Some(64));
    /// println!("{snapshot}"); // an aligned table, one line per stage
    /// assert_eq!(window.count(), 1_000);
    /// assert!(registry.is_empty(), "it left when it completed");
    /// ```
    fn name(self, name: impl Into<String>) -> crate::operators::Named<Self> {
        let name: String = name.into();
        assert_publisher::<Self::Item, _>(crate::operators::Named::new(self, name.into()))
    }

    // ---- more rate-decoupling operators --------

    /// Gather items into `Vec`s of `size` items; the last one may be shorter.
    ///
    /// # Backpressure
    ///
    /// Full, scaled: a request for `k` batches asks upstream for `k × size` items
    /// (saturating at unbounded). In-flight bound: `size` (the batch being filled).
    /// Exactly one `Vec` is allocated per emitted batch, with capacity `size` (at most
    /// 1,024: a larger batch grows as it fills); nothing is allocated per item.
    ///
    /// # Timing
    ///
    /// ```text
    /// source : 1-2-3-4-5|
    /// demand : 3---------
    /// output : --a---b--(c|)   (buffer(2): a = [1, 2], b = [3, 4], c = [5])
    /// ```
    ///
    /// # Errors
    ///
    /// Upstream errors pass through; the partial batch is discarded.
    ///
    /// # Cancellation
    ///
    /// Cancel goes upstream; the partial batch is discarded.
    ///
    /// # Panics
    ///
    /// If `size` is not in `1..=2^30`: "buffer size must be in 1..=2^30 (got 0)".
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::prelude::*;
    ///
    /// let batches = weir::range(1u32..6).buffer(2).collect().wait().unwrap();
    /// assert_eq!(batches, vec![vec![1, 2], vec![3, 4], vec![5]]);
    /// ```
    fn buffer(self, size: u64) -> Buffer<Self> {
        assert_publisher::<Vec<Self::Item>, _>(Buffer::new(self, size))
    }

    /// Pass items through unchanged, but ask upstream in batches: `high` first, then
    /// `low` more each time `low` items were delivered.
    ///
    /// # Backpressure
    ///
    /// PassThrough items, batched requests: never more than `high` outstanding
    /// upstream, and never more than downstream has asked for (nothing is prefetched
    /// ahead of downstream's demand, so nothing is held; in-flight bound 0). A batch
    /// goes up whenever the room below `high` (`high` minus what is outstanding) is at
    /// least `low`, as large as that room and downstream's unforwarded demand allow:
    /// item by item, that is `low` more each time `low` were delivered, and when
    /// nothing is outstanding new demand goes up at once. `low == high` means the 75% rule (`high - high / 4`); `low == 0`
    /// means "always `high`": the next batch waits until the previous one was
    /// delivered in full. Under unbounded demand `limit_rate(256, 192)` asks for 256,
    /// then 192 (or a whole delivered batch) at a time.
    ///
    /// # Timing
    ///
    /// ```text
    /// demand   : *-----------
    /// upstream : 4-2-2-2-2---    (what limit_rate(4, 2) requests; items one by one)
    /// output   : -1234567890|
    /// ```
    ///
    /// # Errors
    ///
    /// Upstream errors pass through.
    ///
    /// # Cancellation
    ///
    /// Cancel goes upstream; nothing is held.
    ///
    /// # Panics
    ///
    /// At construction, if `high` is 0: "limit_rate high must be at least 1 (got 0)";
    /// if `low > high`: "limit_rate low must be in 0..=high (got low …, high …)".
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::prelude::*;
    ///
    /// let total = weir::range(0u64..10_000)
    ///     .limit_rate(256, 192)
    ///     .fold(0, |acc, x| acc + x)
    ///     .wait()
    ///     .unwrap();
    /// assert_eq!(total, 49_995_000);
    /// ```
    fn limit_rate(self, high: u64, low: u64) -> LimitRate<Self> {
        assert_publisher::<Self::Item, _>(LimitRate::new(self, high, low))
    }

    /// Request everything upstream and hold up to `capacity` items that downstream has
    /// not asked for yet; when full, apply `policy`.
    ///
    /// # Backpressure
    ///
    /// UnboundedIn: upstream is asked for `UNBOUNDED` once. Items pass straight
    /// through while downstream has demand and nothing is held; otherwise they wait in
    /// a queue of at most `capacity` items (room for up to 1,024 allocated at once,
    /// grown as items wait, never past `capacity`), and go out oldest first as
    /// downstream requests (from any thread). In-flight bound: `capacity`.
    /// **Nothing is dropped, merged or refused while downstream has demand
    /// outstanding**, whichever thread requests: when downstream requests from another
    /// thread and is busy delivering, an arriving item queues behind the held ones,
    /// and if the ring is full the producer waits for the items it owes to be
    /// delivered (the time a synchronous `on_next` would have taken) instead of losing
    /// one. The policy applies only to a full ring with no demand outstanding.
    /// When the ring is full, [`Overflow::DropOldest`]
    /// drops the oldest held item ([`DropReason::OverflowOldest`](crate::DropReason)),
    /// [`Overflow::DropNewest`] the arriving one
    /// (`OverflowNewest`); both are handed to the pipeline's [`DropHook`] and counted.
    /// Held items are stamped at enqueue: [`OnBackpressureBuffer::time_bounds`] drops
    /// items older than a maximum age at dequeue (`Expired`) and can serve a standing
    /// queue newest first; [`OnBackpressureBuffer::monitor`] reports depth, oldest age
    /// and lag. Size `capacity` from time with
    /// [`Capacity::for_wait`](crate::queue::Capacity::for_wait)`(rate, budget).get()`.
    ///
    /// # Timing
    ///
    /// ```text
    /// source : 1-2-3-4|
    /// demand : --------1-1
    /// output : --------3-(4|)   (capacity 2, DropOldest: 1 and 2 dropped)
    /// ```
    ///
    /// # Errors
    ///
    /// With [`Overflow::Error`], the item that does not fit is
    /// refused (reported as `OverflowNewest`), upstream is cancelled at once, and
    /// downstream receives `on_error` of kind [`Overflow`](crate::ErrorKind::Overflow)
    /// **after** the held items were delivered: nothing the buffer accepted is lost.
    /// Upstream errors, like completion, are delivered after the held items
    /// ([`errors_first`](crate::operators::OnBackpressureBuffer::errors_first): at
    /// once, releasing them).
    ///
    /// # Cancellation
    ///
    /// Cancel goes upstream; the held items are released (dropped, not reported: they
    /// were not lost for lack of room), and so is any item upstream still delivers
    /// after the cancel.
    ///
    /// # Panics
    ///
    /// If `capacity` is not in `1..=2^30`:
    /// "on_backpressure_buffer capacity must be in 1..=2^30 (got 0)".
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::metrics::{DropHook, Drops};
    /// use weir::prelude::*;
    /// use weir::{DropReason, Overflow};
    ///
    /// let drops = Drops::new();
    /// // The source pushes 10 items at once; the consumer has room for 2.
    /// let items = weir::range(0u32..10)
    ///     .on_backpressure_buffer(3, Overflow::DropOldest)
    ///     .on_dropped(DropHook::new(drops.clone()))
    ///     .blocking_iter(2)
    ///     .collect::<Result<Vec<_>, _>>()
    ///     .unwrap();
    /// assert_eq!(items, vec![0, 1, 7, 8, 9]);
    /// assert_eq!(drops.count(DropReason::OverflowOldest), 5);
    /// ```
    fn on_backpressure_buffer(self, capacity: u64, policy: Overflow) -> OnBackpressureBuffer<Self>
    where
        Self::Item: 'static,
    {
        assert_publisher::<Self::Item, _>(OnBackpressureBuffer::new(
            self,
            capacity,
            policy,
            "on_backpressure_buffer",
        ))
    }

    /// Request everything upstream and keep only the newest item downstream has not
    /// asked for yet.
    ///
    /// # Backpressure
    ///
    /// UnboundedIn: upstream is asked for `UNBOUNDED` once. An item passes straight
    /// through when downstream has demand; otherwise it waits in a slot of one, and a
    /// newer item replaces it: the replaced item is dropped with
    /// [`DropReason::ReplacedByLatest`](crate::DropReason::ReplacedByLatest), handed
    /// to the pipeline's [`DropHook`] and counted. In-flight bound: 1. Only an item
    /// without demand is ever replaced: while downstream has demand outstanding and
    /// is busy delivering on another thread, the producer waits for the held item to
    /// go out (see [`on_backpressure_buffer`](Self::on_backpressure_buffer)).
    ///
    /// # Timing
    ///
    /// ```text
    /// source : 1-2-3-4-5|
    /// demand : 1---1----1
    /// output : 1---3----(5|)   (2 and 4 replaced)
    /// ```
    ///
    /// # Errors
    ///
    /// Upstream errors are delivered after the held item, like completion
    /// ([`errors_first`](crate::operators::OnBackpressureBuffer::errors_first):
    /// at once, releasing it).
    ///
    /// # Cancellation
    ///
    /// Cancel goes upstream; the held item is released without a report, and so is
    /// any item upstream still delivers after the cancel.
    ///
    /// # Panics
    ///
    /// Never.
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::prelude::*;
    ///
    /// // The source pushes 10 items at once; the consumer has room for 1.
    /// let items = weir::range(0u32..10)
    ///     .on_backpressure_latest()
    ///     .blocking_iter(1)
    ///     .collect::<Result<Vec<_>, _>>()
    ///     .unwrap();
    /// assert_eq!(items, vec![0, 9]);
    /// ```
    fn on_backpressure_latest(self) -> OnBackpressureLatest<Self>
    where
        Self::Item: 'static,
    {
        assert_publisher::<Self::Item, _>(OnBackpressureBuffer::new(
            self,
            1,
            KeepLatest,
            "on_backpressure_latest",
        ))
    }

    /// While downstream has no demand, merge arriving items into the held one with
    /// `merge(held, new)`.
    ///
    /// # Backpressure
    ///
    /// UnboundedIn: upstream is asked for `UNBOUNDED` once. An item passes straight
    /// through when downstream has demand; otherwise it is held (one slot), and each
    /// later item is merged into it. Both inputs of a merge go into `merge`, so
    /// nothing can be handed to the [`DropHook`]; each merge is counted as one
    /// [`DropReason::Merged`](crate::DropReason::Merged). In-flight bound: 1. Only items
    /// without demand are ever merged: while downstream has demand outstanding and is
    /// busy delivering on another thread, the producer waits for the held item to go
    /// out (see [`on_backpressure_buffer`](Self::on_backpressure_buffer)).
    ///
    /// # Timing
    ///
    /// ```text
    /// source : 1-2-3-4-5|
    /// demand : 1---1----1
    /// output : 1---a----(b|)   (a = merge(2, 3), b = merge(4, 5))
    /// ```
    ///
    /// Completion waits until the held item has been delivered.
    ///
    /// # Errors
    ///
    /// Upstream errors are delivered after the held item, like completion
    /// ([`errors_first`](crate::operators::OnBackpressureBuffer::errors_first):
    /// at once, releasing it).
    ///
    /// # Cancellation
    ///
    /// Cancel goes upstream; the held item is released without a report, and so is
    /// any item upstream still delivers after the cancel.
    ///
    /// # Panics
    ///
    /// Never itself. If `merge` panics, upstream is cancelled and downstream receives
    /// `on_error` of kind [`Panicked`](crate::ErrorKind::Panicked).
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::metrics::{DropHook, Drops};
    /// use weir::prelude::*;
    /// use weir::DropReason;
    ///
    /// let drops = Drops::new();
    /// // The source pushes 5 items at once; the consumer has room for 1.
    /// let items = weir::range(1u32..6)
    ///     .conflate(|held, new| held + new)
    ///     .on_dropped(DropHook::new(drops.clone()))
    ///     .blocking_iter(1)
    ///     .collect::<Result<Vec<_>, _>>()
    ///     .unwrap();
    /// assert_eq!(items, vec![1, 2 + 3 + 4 + 5]);
    /// assert_eq!(drops.count(DropReason::Merged), 3);
    /// ```
    fn conflate<F>(self, merge: F) -> Conflate<Self, F>
    where
        Self::Item: 'static,
        F: FnMut(Self::Item, Self::Item) -> Self::Item + Send + 'static,
    {
        assert_publisher::<Self::Item, _>(OnBackpressureBuffer::new(
            self,
            1,
            MergeInto(merge),
            "conflate",
        ))
    }

    /// [`conflate`](Self::conflate) that keeps the newest item: the same as
    /// [`on_backpressure_latest`](Self::on_backpressure_latest) (replaced items are
    /// handed to the [`DropHook`] as
    /// [`ReplacedByLatest`](crate::DropReason::ReplacedByLatest)), reported under the
    /// stage name `conflate_latest`.
    ///
    /// # Backpressure
    ///
    /// UnboundedIn; in-flight bound 1.
    ///
    /// # Timing
    ///
    /// ```text
    /// source : 1-2-3-4-5|
    /// demand : 1---1----1
    /// output : 1---3----(5|)
    /// ```
    ///
    /// # Errors
    ///
    /// Upstream errors are delivered after the held item, like completion
    /// ([`errors_first`](crate::operators::OnBackpressureBuffer::errors_first):
    /// at once, releasing it).
    ///
    /// # Cancellation
    ///
    /// Cancel goes upstream; the held item is released without a report, and so is
    /// any item upstream still delivers after the cancel.
    ///
    /// # Panics
    ///
    /// Never.
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::prelude::*;
    ///
    /// let items = weir::range(0u32..10)
    ///     .conflate_latest()
    ///     .blocking_iter(1)
    ///     .collect::<Result<Vec<_>, _>>()
    ///     .unwrap();
    /// assert_eq!(items, vec![0, 9]);
    /// ```
    fn conflate_latest(self) -> OnBackpressureLatest<Self>
    where
        Self::Item: 'static,
    {
        assert_publisher::<Self::Item, _>(OnBackpressureBuffer::new(
            self,
            1,
            KeepLatest,
            "conflate_latest",
        ))
    }

    // ---- time operators ----------------------------------------

    /// Emit the most recent item once per `period`, on the shared [`DefaultPool`]:
    /// [`sample_on`](Self::sample_on) with the scheduler chosen for you.
    ///
    /// # Backpressure
    ///
    /// As [`sample_on`](Self::sample_on).
    ///
    /// # Timing
    ///
    /// As [`sample_on`](Self::sample_on), on the wall clock of the shared pool.
    ///
    /// # Errors
    ///
    /// As [`sample_on`](Self::sample_on).
    ///
    /// # Cancellation
    ///
    /// As [`sample_on`](Self::sample_on); the stage's timer is removed from the pool.
    ///
    /// # Panics
    ///
    /// As [`sample_on`](Self::sample_on) (invalid durations and sizes, with their values).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir::prelude::*;
    ///
    /// // Ticks every millisecond, sampled every 5 ms: roughly every fifth tick.
    /// let sampled = weir::interval(Duration::from_millis(1))
    ///     .sample(Duration::from_millis(5))
    ///     .take(3)
    ///     .collect()
    ///     .wait()
    ///     .unwrap();
    /// assert_eq!(sampled.len(), 3);
    /// assert!(sampled.windows(2).all(|w| w[0] < w[1]), "newest each period");
    /// ```
    fn sample(self, period: Duration) -> Sample<Self, DefaultPool> {
        self.sample_on(period, DefaultPool::get())
    }

    /// Emit the newest item once per `period`, only when downstream has demand;
    /// otherwise hold it.
    ///
    /// # Backpressure
    ///
    /// UnboundedIn: upstream is asked for `UNBOUNDED` once. The stage holds at most one
    /// item (in-flight bound 1): a newer item replaces the held one, and the replaced
    /// item is dropped with
    /// [`DropReason::ReplacedByLatest`](crate::DropReason::ReplacedByLatest), handed
    /// to the pipeline's [`DropHook`] and counted. At each period boundary (a grid
    /// from the subscription instant) the held item is *sampled*; a sampled item goes
    /// out at once if there is demand, and otherwise waits, still replaceable by newer
    /// items, until demand arrives. Never an overflow error, never an item beyond
    /// demand.
    ///
    /// # Timing
    ///
    /// ```text
    /// ticks  : -----|-----|-----|-----|
    /// source : -1-2----3-----------4-5|
    /// output : -----2-----3-----------(5|)
    /// ```
    ///
    /// With demand throughout: 1 is replaced by 2, and 4 by 5, which completion flushes
    /// without waiting for a tick. Without demand at a tick, the sampled item waits and
    /// goes out the moment demand arrives.
    ///
    /// # Errors
    ///
    /// Upstream completion or error: the held item (sampled or not) goes out as soon
    /// as demand allows, then `on_complete` or `on_error`. With
    /// [`Sample::errors_first`](crate::operators::Sample::errors_first) an error is
    /// delivered at once instead, and the held item is released without a drop
    /// report.
    ///
    /// # Cancellation
    ///
    /// Cancel goes upstream; the held item is released without a report, and the
    /// stage's timer does nothing when it fires.
    ///
    /// # Panics
    ///
    /// If `period` is zero: "sample period must be greater than zero (got 0ns)".
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir::metrics::{DropHook, Drops};
    /// use weir::prelude::*;
    /// use weir::runtime::VirtualTime;
    /// use weir::DropReason;
    ///
    /// let vt = VirtualTime::new();
    /// let drops = Drops::new();
    /// let ms = Duration::from_millis;
    /// // One item every 100 ms (0 at 100 ms, …, 9 at 1 s), sampled every 230 ms.
    /// let sampled = weir::interval_on(ms(100), vt.clone())
    ///     .take(10)
    ///     .sample_on(ms(230), vt.clone())
    ///     .on_dropped(DropHook::new(drops.clone()))
    ///     .collect();
    /// vt.advance(Duration::from_secs(2));
    /// assert_eq!(sampled.wait().unwrap(), vec![1, 3, 5, 8, 9]);
    /// assert_eq!(drops.count(DropReason::ReplacedByLatest), 5);
    /// ```
    fn sample_on<C>(self, period: Duration, scheduler: C) -> Sample<Self, C>
    where
        C: Scheduler + Clone,
    {
        assert_publisher::<Self::Item, _>(Sample::new(self, period, scheduler))
    }

    /// Collect items into batches of `size`, or fewer once `period` passed since a batch's
    /// first item, on the shared [`DefaultPool`]:
    /// [`buffer_timeout_on`](Self::buffer_timeout_on) with the scheduler chosen for you.
    ///
    /// # Backpressure
    ///
    /// As [`buffer_timeout_on`](Self::buffer_timeout_on).
    ///
    /// # Timing
    ///
    /// As [`buffer_timeout_on`](Self::buffer_timeout_on), on the wall clock of the shared pool.
    ///
    /// # Errors
    ///
    /// As [`buffer_timeout_on`](Self::buffer_timeout_on).
    ///
    /// # Cancellation
    ///
    /// As [`buffer_timeout_on`](Self::buffer_timeout_on); the stage's timer is removed from the pool.
    ///
    /// # Panics
    ///
    /// As [`buffer_timeout_on`](Self::buffer_timeout_on) (invalid durations and sizes, with their values).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir::prelude::*;
    ///
    /// let batches = weir::range(0u32..10)
    ///     .buffer_timeout(4, Duration::from_secs(60))
    ///     .collect()
    ///     .wait()
    ///     .unwrap();
    /// assert_eq!(batches, [vec![0, 1, 2, 3], vec![4, 5, 6, 7], vec![8, 9]]);
    /// ```
    fn buffer_timeout(self, size: u64, period: Duration) -> BufferTimeout<Self, DefaultPool> {
        self.buffer_timeout_on(size, period, DefaultPool::get())
    }

    /// Gather items into `Vec`s of `size`; a batch also goes out, shorter, once
    /// `period` has passed since its first item and downstream has demand.
    ///
    /// # Backpressure
    ///
    /// Bounded window: downstream requests count batches. The stage requests from
    /// upstream itself, at most `size` × downstream's outstanding batches and one
    /// batch's worth at a time (items owed by upstream plus items held never exceed
    /// `size`), so a batch that goes out early never leaves upstream owing more than
    /// the stage can hold. Without demand a due batch is held (it may go on filling
    /// up to `size`). Lossless. In-flight bound: `size`.
    ///
    /// # Timing
    ///
    /// ```text
    /// source : 1-2-3-4--------5-----------6|
    /// output : ----a-------b--------c------(d|)
    /// ```
    ///
    /// Size 3, period 6 dashes, demand throughout: a = `[1, 2, 3]` (full), b = `[4]` and
    /// c = `[5]` (the period passed since their first item), d = `[6]` (flushed at
    /// completion).
    ///
    /// # Errors
    ///
    /// Upstream completion or error: the partial batch goes out when demand allows,
    /// then `on_complete` or `on_error`. With
    /// [`BufferTimeout::errors_first`](crate::operators::BufferTimeout::errors_first)
    /// an error is delivered at once instead, and the partial batch is released. An
    /// upstream that delivers an item it was not asked for (rule 1.1) is cancelled,
    /// and the stream fails the same way with an error of kind
    /// [`SpecViolation`](crate::ErrorKind::SpecViolation) naming rule 1.1 (the batch
    /// never grows past `size`).
    ///
    /// # Cancellation
    ///
    /// Cancel goes upstream; the partial batch is released, and the stage's timer does
    /// nothing when it fires.
    ///
    /// # Panics
    ///
    /// If `size` is not in `1..=2^30`:
    /// "buffer_timeout size must be in 1..=2^30 (got 0)"; if `period` is zero:
    /// "buffer_timeout period must be greater than zero (got 0ns)".
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir::prelude::*;
    /// use weir::runtime::VirtualTime;
    ///
    /// let vt = VirtualTime::new();
    /// let ms = Duration::from_millis;
    /// // Items at 300, 600 and 900 ms; batches of up to 5, or whatever 500 ms gathered.
    /// let batches = weir::interval_on(ms(300), vt.clone())
    ///     .take(3)
    ///     .buffer_timeout_on(5, ms(500), vt.clone())
    ///     .collect();
    /// vt.advance(Duration::from_secs(2));
    /// assert_eq!(batches.wait().unwrap(), vec![vec![0, 1], vec![2]]);
    /// ```
    fn buffer_timeout_on<C>(
        self,
        size: u64,
        period: Duration,
        scheduler: C,
    ) -> BufferTimeout<Self, C>
    where
        C: Scheduler + Clone,
    {
        assert_publisher::<Vec<Self::Item>, _>(BufferTimeout::new(self, size, period, scheduler))
    }

    /// Fail with [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) if no item arrives
    /// within `duration` while demand is outstanding, timed on the shared [`DefaultPool`]:
    /// [`timeout_on`](Self::timeout_on) with the scheduler chosen for you.
    ///
    /// # Backpressure
    ///
    /// As [`timeout_on`](Self::timeout_on).
    ///
    /// # Timing
    ///
    /// As [`timeout_on`](Self::timeout_on), on the wall clock of the shared pool.
    ///
    /// # Errors
    ///
    /// As [`timeout_on`](Self::timeout_on).
    ///
    /// # Cancellation
    ///
    /// As [`timeout_on`](Self::timeout_on); the stage's timer is removed from the pool.
    ///
    /// # Panics
    ///
    /// As [`timeout_on`](Self::timeout_on) (invalid durations and sizes, with their values).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir::prelude::*;
    ///
    /// let silent = weir::never::<u32>().timeout(Duration::from_millis(10));
    /// let error = silent.collect().wait().unwrap_err();
    /// assert_eq!(error.kind(), weir::ErrorKind::Timeout);
    /// ```
    fn timeout(self, duration: Duration) -> Timeout<Self, DefaultPool> {
        self.timeout_on(duration, DefaultPool::get())
    }

    /// Fail with [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) if no item arrives
    /// within `duration` while downstream is waiting for one.
    ///
    /// # Backpressure
    ///
    /// PassThrough: requests go upstream unchanged. The clock only runs while
    /// downstream has outstanding demand: it starts when demand becomes outstanding,
    /// restarts at every item, and stops while downstream has asked for nothing, so a
    /// slow consumer never causes a timeout upstream. In-flight bound: 0 (an item
    /// meeting a firing timer waits in the drain loop for a moment, never beyond
    /// demand).
    ///
    /// # Timing
    ///
    /// ```text
    /// demand : 1-----------1------
    /// source : --a----------------
    /// output : --a---------------#
    /// ```
    ///
    /// Duration 6 dashes: the clock runs from the first request until `a`, stops while
    /// nothing is requested, restarts at the second request and runs out 6 later
    /// (`#` = `on_error` of kind `Timeout`).
    ///
    /// # Errors
    ///
    /// The timeout: upstream is cancelled and downstream receives `on_error` of kind
    /// `Timeout`. Upstream errors and completion pass through. An upstream that
    /// delivers an item it was not asked for (rule 1.1) is cancelled, and the stream
    /// fails with an error of kind [`SpecViolation`](crate::ErrorKind::SpecViolation)
    /// naming rule 1.1, after the items asked for.
    ///
    /// # Cancellation
    ///
    /// Cancel goes upstream; the stage's timer does nothing when it fires.
    ///
    /// # Panics
    ///
    /// If `duration` is zero: "timeout duration must be greater than zero (got 0ns)".
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir::prelude::*;
    /// use weir::runtime::VirtualTime;
    /// use weir::ErrorKind;
    ///
    /// let vt = VirtualTime::new();
    /// let result = weir::never::<u32>()
    ///     .timeout_on(Duration::from_secs(1), vt.clone())
    ///     .collect();
    /// vt.advance(Duration::from_secs(2));
    /// assert_eq!(result.wait().unwrap_err().kind(), ErrorKind::Timeout);
    /// ```
    fn timeout_on<C>(self, duration: Duration, scheduler: C) -> Timeout<Self, C>
    where
        C: Scheduler + Clone,
    {
        assert_publisher::<Self::Item, _>(Timeout::new(self, duration, scheduler))
    }

    /// Limit the rate to `rate` with bursts of up to `burst` items, timed on the shared
    /// [`DefaultPool`]: [`throttle_on`](Self::throttle_on) with the scheduler chosen for
    /// you.
    ///
    /// # Backpressure
    ///
    /// As [`throttle_on`](Self::throttle_on).
    ///
    /// # Timing
    ///
    /// As [`throttle_on`](Self::throttle_on), on the wall clock of the shared pool.
    ///
    /// # Errors
    ///
    /// As [`throttle_on`](Self::throttle_on).
    ///
    /// # Cancellation
    ///
    /// As [`throttle_on`](Self::throttle_on); the stage's timer is removed from the pool.
    ///
    /// # Panics
    ///
    /// As [`throttle_on`](Self::throttle_on) (invalid durations and sizes, with their values).
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::operators::{Rate, ThrottleMode};
    /// use weir::prelude::*;
    ///
    /// // A burst of 5 goes through at once; the rest are paced at 1,000/s.
    /// let paced = weir::range(0u32..8)
    ///     .throttle(Rate::per_second(1_000), 5, ThrottleMode::Shaping)
    ///     .collect()
    ///     .wait()
    ///     .unwrap();
    /// assert_eq!(paced, (0..8).collect::<Vec<_>>());
    /// ```
    fn throttle(self, rate: Rate, burst: u64, mode: ThrottleMode) -> Throttle<Self, DefaultPool> {
        self.throttle_on(rate, burst, mode, DefaultPool::get())
    }

    /// Limit the rate of items with a token bucket of `burst` tokens refilled at
    /// `rate`; [`ThrottleMode::Shaping`] delays items, [`ThrottleMode::Enforcing`]
    /// drops them.
    ///
    /// # Backpressure
    ///
    /// Shaping (lossless): upstream is asked for items only as tokens allow (at most
    /// the tokens available and downstream's outstanding demand); tokens reserved for
    /// requested items count against the bucket, so no window sees more than
    /// `burst + rate × window` items, and nothing is dropped. In-flight bound:
    /// `burst`.
    ///
    /// Enforcing (lossy): requests pass upstream unchanged; an item that finds no
    /// token is dropped with [`DropReason::Rejected`](crate::DropReason::Rejected),
    /// handed to the pipeline's [`DropHook`], counted, and asked for again (as batch
    /// credit after a batch, or `request(1)` from an upstream that delivers item by
    /// item) so that downstream's demand is still met. A batch's admitted items go
    /// downstream as one batch. In-flight bound: 0.
    ///
    /// # Timing
    ///
    /// ```text
    /// tokens    : 2----+----+----+
    /// shaping   : (12)-3----4----5|
    /// enforcing : (12)|
    /// ```
    ///
    /// Burst 2, one token back every 5 dashes (`+`), 5 items wanted at once. Shaping
    /// asks upstream for an item per token: paced, nothing lost. Enforcing, over an
    /// eager source, passes the burst and rejects 3, 4 and 5 at once.
    ///
    /// # Errors
    ///
    /// Upstream errors and completion pass through (after items in transit). Shaping:
    /// an upstream that delivers an item no token was reserved for (rule 1.1) is
    /// cancelled, and the stream fails with an error of kind
    /// [`SpecViolation`](crate::ErrorKind::SpecViolation) naming rule 1.1, after the
    /// items in transit.
    ///
    /// # Cancellation
    ///
    /// Cancel goes upstream; a shaping stage's timer does nothing when it fires.
    ///
    /// # Panics
    ///
    /// At construction: "throttle rate must add at least 1 token per period (got 0
    /// per 1s)", "throttle rate period must be greater than zero (got 5 per 0ns)",
    /// "throttle burst must be in 1..=2^30 (got 0)".
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir::metrics::{DropHook, Drops};
    /// use weir::operators::{Rate, ThrottleMode};
    /// use weir::prelude::*;
    /// use weir::runtime::VirtualTime;
    /// use weir::DropReason;
    ///
    /// let vt = VirtualTime::new();
    /// // Shaping: 2 items per second after a burst of 1; all 5 arrive, paced.
    /// let shaped = weir::range(0u32..5)
    ///     .throttle_on(Rate::per_second(2), 1, ThrottleMode::Shaping, vt.clone())
    ///     .collect();
    /// vt.advance(Duration::from_secs(1));
    /// assert!(!shaped.is_terminated()); // 0 at 0 s, 1 at 0.5 s, 2 at 1 s so far
    /// vt.advance(Duration::from_secs(1));
    /// assert_eq!(shaped.wait().unwrap(), vec![0, 1, 2, 3, 4]);
    ///
    /// // Enforcing: the burst passes, the rest is rejected and counted.
    /// let drops = Drops::new();
    /// let enforced = weir::range(0u32..10)
    ///     .throttle_on(Rate::per_second(1), 3, ThrottleMode::Enforcing, vt.clone())
    ///     .on_dropped(DropHook::new(drops.clone()))
    ///     .collect();
    /// assert_eq!(enforced.wait().unwrap(), vec![0, 1, 2]);
    /// assert_eq!(drops.count(DropReason::Rejected), 7);
    /// ```
    fn throttle_on<C>(
        self,
        rate: Rate,
        burst: u64,
        mode: ThrottleMode,
        scheduler: C,
    ) -> Throttle<Self, C>
    where
        C: Scheduler + Clone,
    {
        assert_publisher::<Self::Item, _>(Throttle::new(self, rate, burst, mode, scheduler))
    }

    /// Pass an item on only once `quiet` has passed with no newer item, timed on the shared
    /// [`DefaultPool`]: [`debounce_on`](Self::debounce_on) with the scheduler chosen for
    /// you.
    ///
    /// # Backpressure
    ///
    /// As [`debounce_on`](Self::debounce_on).
    ///
    /// # Timing
    ///
    /// As [`debounce_on`](Self::debounce_on), on the wall clock of the shared pool.
    ///
    /// # Errors
    ///
    /// As [`debounce_on`](Self::debounce_on).
    ///
    /// # Cancellation
    ///
    /// As [`debounce_on`](Self::debounce_on); the stage's timer is removed from the pool.
    ///
    /// # Panics
    ///
    /// As [`debounce_on`](Self::debounce_on) (invalid durations and sizes, with their values).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir::prelude::*;
    ///
    /// // A burst of keystrokes settles into its last one.
    /// let settled = weir::from_iter(["w", "we", "wei", "weir"])
    ///     .debounce(Duration::from_millis(20))
    ///     .collect()
    ///     .wait()
    ///     .unwrap();
    /// assert_eq!(settled, ["weir"]);
    /// ```
    fn debounce(self, quiet: Duration) -> Debounce<Self, DefaultPool> {
        self.debounce_on(quiet, DefaultPool::get())
    }

    /// Pass an item on only once `quiet` has passed with no newer item.
    ///
    /// # Backpressure
    ///
    /// UnboundedIn: upstream is asked for `UNBOUNDED` once. The stage holds at most
    /// one item (in-flight bound 1). A newer item supersedes the held one (even one
    /// whose quiet period had ended but that waits for demand) and restarts the
    /// quiet period; the superseded item is dropped with
    /// [`DropReason::ReplacedByLatest`](crate::DropReason::ReplacedByLatest), handed
    /// to the pipeline's [`DropHook`] and counted. An item whose quiet period ended
    /// without demand is held and goes out when demand arrives. The stage keeps at
    /// most one timer, never one per item.
    ///
    /// # Timing
    ///
    /// ```text
    /// source : -1-2-3-------4-------5|
    /// output : --------3-------4-----(5|)
    /// ```
    ///
    /// Quiet period 3 dashes: 1 and 2 are superseded; 3 and 4 go out once 3 dashes
    /// passed with nothing newer; 5 is flushed at completion.
    ///
    /// # Errors
    ///
    /// Upstream completion or error: the held item goes out at once (when demand
    /// allows, without waiting out its quiet period), then `on_complete` or
    /// `on_error`. With [`Debounce::errors_first`](crate::operators::Debounce::errors_first)
    /// an error is delivered at once instead, and the held item is released without
    /// a drop report.
    ///
    /// # Cancellation
    ///
    /// Cancel goes upstream; the held item is released without a report, and the
    /// stage's timer does nothing when it fires.
    ///
    /// # Panics
    ///
    /// If `quiet` is zero: "debounce quiet period must be greater than zero (got 0ns)".
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir::prelude::*;
    /// use weir::runtime::VirtualTime;
    ///
    /// let vt = VirtualTime::new();
    /// let ms = Duration::from_millis;
    /// // Items every 100 ms: a 50 ms quiet period passes between them, 150 ms never.
    /// let calm = weir::interval_on(ms(100), vt.clone()).take(5).debounce_on(ms(50), vt.clone());
    /// let busy = weir::interval_on(ms(100), vt.clone()).take(5).debounce_on(ms(150), vt.clone());
    /// let (calm, busy) = (calm.collect(), busy.collect());
    /// vt.advance(Duration::from_secs(1));
    /// assert_eq!(calm.wait().unwrap(), vec![0, 1, 2, 3, 4]);
    /// assert_eq!(busy.wait().unwrap(), vec![4]); // only the last, at completion
    /// ```
    fn debounce_on<C>(self, quiet: Duration, scheduler: C) -> Debounce<Self, C>
    where
        C: Scheduler + Clone,
    {
        assert_publisher::<Self::Item, _>(Debounce::new(self, quiet, scheduler))
    }

    // ---- credit multiplexing -------------------------------------------------------

    /// Send this publisher's items over channel `channel` of `mux`, and return the
    /// channel's receiving end: [`Mux::channel`](crate::mux::Mux::channel)`(channel)`
    /// opened, this publisher subscribed to its sink.
    ///
    /// # Backpressure
    ///
    /// Credit: the receiving subscriber's `request(n)` is the channel's only source of
    /// credit. This publisher is asked for a bounded staging window ahead (the 75%
    /// rule); the mux's worker sends a staged item only with a unit of the channel's
    /// credit (exclusive, or borrowed from the shared pool) and never more than the
    /// subscriber asked for, so a channel whose subscriber stops asking holds no more
    /// than its credit and stops nobody else. In-flight bound: the staging window
    /// plus the channel's credit.
    ///
    /// # Timing
    ///
    /// ```text
    /// this publisher   : 1-2-3-|
    /// receiving end    : --1-2-3-|   (same items, same order, on the mux's receiver)
    /// ```
    ///
    /// # Errors
    ///
    /// [`MuxError`](crate::mux::MuxError) when the id is open already or the mux has
    /// its maximum of channels. This publisher's error reaches the receiving end after
    /// the items staged before it. If the mux's transport stops, the receiving end
    /// fails after the items it holds.
    ///
    /// # Cancellation
    ///
    /// Cancelling the receiving end cancels this publisher, drops the channel's
    /// buffered items (counted as dropped) and returns its credit; other channels are
    /// not affected.
    ///
    /// # Panics
    ///
    /// Never at construction. A panic in the receiving subscriber (rule 2.13) ends
    /// that channel as a cancel does.
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::mux::Mux;
    /// use weir::prelude::*;
    /// use weir::runtime::ThreadPool;
    ///
    /// let pool = ThreadPool::new(2);
    /// let mux = Mux::<u32>::builder().build_local(pool.clone(), pool).unwrap();
    /// let items = weir::range(0u32..100).via(&mux, 7).unwrap().collect().wait().unwrap();
    /// assert_eq!(items, (0..100).collect::<Vec<_>>());
    /// ```
    fn via(
        self,
        mux: &crate::mux::Mux<Self::Item>,
        channel: crate::mux::ChannelId,
    ) -> Result<crate::mux::ChannelSource<Self::Item>, crate::mux::MuxError>
    where
        Self::Item: Send + 'static,
    {
        let (sink, source) = mux.channel(channel).open()?;
        let source = source.with_upstream_bound(self.in_flight_bound());
        self.subscribe(sink);
        Ok(source)
    }

    // ---- async boundaries --------------------------------------------------------

    /// Deliver downstream on `scheduler`: an async boundary with a window of `prefetch`
    /// items.
    ///
    /// # Backpressure
    ///
    /// Prefetch: upstream is asked for `prefetch` items at once, then for what was
    /// consumed each time `prefetch - prefetch / 4` items left the boundary (the 75%
    /// rule), so never more than `prefetch` are outstanding upstream. Items wait in a
    /// lock-free ring of exactly `prefetch` slots, allocated once; an upstream batch
    /// is published in runs of up to 64 items, one index store per run (with
    /// [`publish_on_with`](Self::publish_on_with), the whole batch at once, behind its
    /// time stamp). One drain loop per subscription, running as a task on `scheduler`,
    /// delivers them up to downstream's demand, a run at a time through
    /// `on_next_batch` (batch credit honoured). In-flight bound: upstream's plus
    /// `prefetch`. [`PublishOn::monitor`] reports the queue's statistics.
    ///
    /// # Timing
    ///
    /// ```text
    /// upstream (thread A) : 1-2-3-|
    /// downstream (on S)   : --1-2-3-|      (same items, same order, later, on S)
    /// ```
    ///
    /// # Errors
    ///
    /// Upstream's error, like completion, is delivered after the queued items
    /// ([`errors_first`](crate::operators::PublishOn::errors_first): at once, without
    /// demand, dropping them). An upstream that delivers more than it was asked for
    /// (a full ring: rule 1.1) is cancelled and the stream fails with a
    /// spec-violation error naming rule 1.1, after the queued items; the refused
    /// items are reported as `OverflowNewest`.
    /// `request(0)` fails the stream with the rule 3.9 error.
    ///
    /// # Cancellation
    ///
    /// Cancel goes upstream at once (from the cancelling thread); the drain stops,
    /// and the queued items are dropped (not reported: nothing was lost for lack of
    /// room).
    ///
    /// # Panics
    ///
    /// If `prefetch` is not in `1..=2^30`:
    /// "publish_on prefetch must be in 1..=2^30 (got 0)"; or if the ring, allocated
    /// whole when upstream subscribes, would take more than 2^30 bytes (1 GiB:
    /// `prefetch` × the item's size; 2^27 slots of `u64`): "publish_on prefetch of
    /// 1073741824 slots of 64 bytes needs 68719476736 bytes up front; at most 2^30
    /// bytes (1 GiB): 16777216 slots for this item type". A panic in downstream
    /// (rule 2.13) is caught: upstream is cancelled and the queued items dropped.
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::prelude::*;
    /// use weir::runtime::ThreadPool;
    ///
    /// let pool = ThreadPool::new(1);
    /// let sum = weir::range(0u64..10_000)
    ///     .publish_on(pool, 256)
    ///     .fold(0, |acc, x| acc + x)
    ///     .wait()
    ///     .unwrap();
    /// assert_eq!(sum, 49_995_000);
    /// ```
    #[track_caller]
    fn publish_on<S>(self, scheduler: S, prefetch: u64) -> PublishOn<Self, S>
    where
        S: Scheduler + Clone,
    {
        assert_publisher::<Self::Item, _>(PublishOn::new(self, scheduler, prefetch, None))
    }

    /// [`publish_on`](Self::publish_on) with time bounds on the boundary's queue: each
    /// batch is stamped when it arrives (one clock read per batch, from `scheduler`),
    /// so the monitor reports the oldest item's age, and with
    /// [`TimeBounds::max_age`] items that waited longer are dropped at dequeue.
    ///
    /// # Backpressure
    ///
    /// As [`publish_on`](Self::publish_on). Expired items free their slots, so they
    /// are replenished like delivered ones. Adaptive LIFO and CoDel do not apply: the
    /// ring is credit-bounded (it never holds more than was requested, so no standing
    /// queue can form behind it) and strictly FIFO.
    ///
    /// # Timing
    ///
    /// ```text
    /// upstream : 1-2----------3|
    /// demand   : ------------(1)-1-1
    /// output   : ------------3|       (max_age shorter than the wait: 1 and 2 expired)
    /// ```
    ///
    /// # Errors
    ///
    /// As [`publish_on`](Self::publish_on). Expired items are not errors: each is
    /// handed to the pipeline's [`DropHook`] with [`DropReason::Expired`](crate::DropReason)
    /// and counted (also in the monitor). A drop hook that panics there (or an
    /// expired item whose `Drop` panics) fails the stream with an error of kind
    /// [`Panicked`](crate::ErrorKind::Panicked) naming the hook's stage, after the
    /// boundary has cancelled upstream and dropped what it holds.
    ///
    /// # Cancellation
    ///
    /// As [`publish_on`](Self::publish_on).
    ///
    /// # Panics
    ///
    /// As [`publish_on`](Self::publish_on), each slot counted with the stamp it
    /// also holds (an index and an `Instant`); also if `bounds` asks for adaptive
    /// LIFO or CoDel: "publish_on_with: adaptive LIFO and CoDel do not apply to an
    /// async boundary ...".
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use std::time::Duration;
    /// use weir::metrics::{DropHook, Drops};
    /// use weir::prelude::*;
    /// use weir::queue::TimeBounds;
    /// use weir::runtime::VirtualTime;
    /// use weir::{DropReason, Error};
    ///
    /// /// Requests nothing until told to; keeps what arrives.
    /// #[derive(Clone, Default)]
    /// struct Late(Arc<Mutex<(Option<Subscription>, Vec<u32>)>>);
    /// impl Subscriber<u32> for Late {
    ///     fn on_subscribe(&mut self, s: Subscription) { self.0.lock().unwrap().0 = Some(s) }
    ///     fn on_next(&mut self, item: u32) { self.0.lock().unwrap().1.push(item) }
    ///     fn on_error(&mut self, _: Error) {}
    ///     fn on_complete(&mut self) {}
    /// }
    ///
    /// let time = VirtualTime::new();
    /// let drops = Drops::new();
    /// let bounds = TimeBounds::none().max_age(Duration::from_secs(1));
    /// let boundary = weir::range(0u32..4).publish_on_with(time.clone(), 4, bounds);
    /// let monitor = boundary.monitor();
    /// let late = Late::default();
    /// boundary.on_dropped(DropHook::new(drops.clone())).subscribe(late.clone());
    /// time.advance(Duration::from_secs(2)); // the four items wait 2 s for demand
    /// assert_eq!(monitor.snapshot().oldest_age, Some(Duration::from_secs(2)));
    /// let subscription = late.0.lock().unwrap().0.clone().unwrap();
    /// subscription.request(10);
    /// time.run_ready();
    /// assert!(late.0.lock().unwrap().1.is_empty());
    /// assert_eq!(drops.count(DropReason::Expired), 4);
    /// assert_eq!(monitor.snapshot().dropped(DropReason::Expired), 4);
    /// ```
    #[track_caller]
    fn publish_on_with<S>(
        self,
        scheduler: S,
        prefetch: u64,
        bounds: TimeBounds,
    ) -> PublishOn<Self, S>
    where
        S: Scheduler + Clone,
    {
        assert_publisher::<Self::Item, _>(PublishOn::new(self, scheduler, prefetch, Some(bounds)))
    }

    /// Subscribe to upstream, and forward downstream's requests to it, on `scheduler`.
    ///
    /// # Backpressure
    ///
    /// PassThrough: downstream's requests are summed and forwarded by one task at a
    /// time on `scheduler` (a burst of requests is one task and one upstream
    /// `request`); batch credit from inside a delivery goes straight back upstream.
    /// Nothing is buffered. In-flight bound: upstream's.
    ///
    /// # Timing
    ///
    /// ```text
    /// subscribe (caller) : S
    /// upstream (on S)    : -1-2-3|     (a synchronous source now emits on S)
    /// output             : -1-2-3|
    /// ```
    ///
    /// # Errors
    ///
    /// Upstream's errors pass through unchanged. `request(0)` is forwarded, so
    /// upstream answers it with the rule 3.9 error.
    ///
    /// # Cancellation
    ///
    /// Cancel is forwarded at once, from the cancelling thread; requests not yet
    /// forwarded are discarded.
    ///
    /// # Panics
    ///
    /// Never. Panics in downstream are upstream's to catch, as without the operator.
    /// An upstream whose `subscribe` panics (on the scheduler's thread), before or
    /// after its `on_subscribe`, ends the stream with an error of kind
    /// [`Panicked`](crate::ErrorKind::Panicked) whose message is the panic's.
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::prelude::*;
    /// use weir::runtime::ThreadPool;
    ///
    /// let pool = ThreadPool::builder().name("up").threads(1).build();
    /// let names = weir::range(0u32..3)
    ///     .map(|_| std::thread::current().name().unwrap_or("").to_owned())
    ///     .subscribe_on(pool)
    ///     .collect()
    ///     .wait()
    ///     .unwrap();
    /// assert!(names.iter().all(|name| name == "up-0"), "{names:?}");
    /// ```
    fn subscribe_on<S>(self, scheduler: S) -> SubscribeOn<Self, S>
    where
        Self: Send + 'static,
        S: Scheduler + Clone,
    {
        assert_publisher::<Self::Item, _>(SubscribeOn::new(self, scheduler))
    }

    // ---- sinks and type erasure ----------------------------------------------------

    /// Erase the publisher's type, for heterogeneous pipelines.
    ///
    /// Each boxed stage costs one virtual call per signal.
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::prelude::*;
    ///
    /// let sources: Vec<weir::BoxPublisher<u32>> =
    ///     vec![weir::range(0u32..2).boxed(), weir::range(5u32..7).map(|x| x * 10).boxed()];
    /// let mut all = Vec::new();
    /// for source in sources {
    ///     all.extend(source.collect().wait().unwrap());
    /// }
    /// assert_eq!(all, vec![0, 1, 50, 60]);
    /// ```
    fn boxed(self) -> BoxPublisher<Self::Item>
    where
        Self: Send + 'static,
    {
        BoxPublisher::new(self)
    }

    /// Subscribe a sink that folds every item into an accumulator, requesting
    /// [`DEFAULT_PREFETCH`] items at a time.
    ///
    /// The handle's [`wait`](SinkHandle::wait) returns the final accumulator, or the
    /// stream's error. A panic in `f` cancels upstream and becomes an error of kind
    /// [`Panicked`](crate::ErrorKind::Panicked).
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::prelude::*;
    ///
    /// let sum = weir::range(1u64..101).fold(0, |acc, x| acc + x).wait().unwrap();
    /// assert_eq!(sum, 5050);
    /// ```
    #[inline]
    fn fold<A, F>(self, init: A, f: F) -> SinkHandle<A>
    where
        A: Send + 'static,
        F: FnMut(A, Self::Item) -> A + Send + 'static,
    {
        self.fold_with(DEFAULT_PREFETCH, init, f)
    }

    /// [`fold`](Self::fold) with an explicit prefetch window
    /// ([`UNBOUNDED`](crate::demand::UNBOUNDED) requests everything at once).
    ///
    /// # Fusion
    ///
    /// When the chain is a synchronous source ([`range`](crate::range),
    /// [`from_iter`](crate::from_iter), [`just`](crate::just), [`empty`](crate::empty))
    /// followed only by [`map`](Self::map), [`filter`](Self::filter),
    /// [`filter_map`](Self::filter_map) and [`inspect`](Self::inspect), the fold (and
    /// [`for_each`](Self::for_each), [`collect`](Self::collect), which are folds) runs
    /// as one loop in the calling thread, compiled like the same `Iterator` chain, and
    /// returns a finished handle. No subscription is made and the window is not used:
    /// nothing in such a chain could observe demand, and the fold takes every item.
    /// Items, order, result and errors (a panic names its stage) are those of the
    /// subscribed path. A [`merge`](Self::merge) or [`weir::merge`](crate::merge) of
    /// such chains fuses too: its sources are folded one after another, each in its
    /// own order (a merge never orders the items of different sources; subscribed, it
    /// interleaves their windows).
    ///
    /// # Panics
    ///
    /// If `prefetch` is 0: "fold_with prefetch must be at least 1 (got 0)".
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::prelude::*;
    ///
    /// let sum = weir::range(0u64..1000).fold_with(64, 0, |acc, x| acc + x).wait().unwrap();
    /// assert_eq!(sum, 499_500);
    /// ```
    #[inline]
    fn fold_with<A, F>(self, prefetch: u64, init: A, f: F) -> SinkHandle<A>
    where
        A: Send + 'static,
        F: FnMut(A, Self::Item) -> A + Send + 'static,
    {
        sink_prefetch("fold_with", prefetch);
        sink::fold(self, "fold", prefetch, init, f)
    }

    /// Subscribe a sink that calls `f` for every item, requesting
    /// [`DEFAULT_PREFETCH`] items at a time.
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::prelude::*;
    ///
    /// weir::range(0u32..3).for_each(|x| println!("{x}")).wait().unwrap();
    /// ```
    #[inline]
    fn for_each<F>(self, f: F) -> SinkHandle<()>
    where
        F: FnMut(Self::Item) + Send + 'static,
    {
        self.for_each_with(DEFAULT_PREFETCH, f)
    }

    /// [`for_each`](Self::for_each) with an explicit prefetch window.
    ///
    /// # Panics
    ///
    /// If `prefetch` is 0: "for_each_with prefetch must be at least 1 (got 0)".
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::prelude::*;
    ///
    /// let mut seen = Vec::new();
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// weir::range(0u32..5).for_each_with(2, move |x| tx.send(x).unwrap()).wait().unwrap();
    /// seen.extend(rx.try_iter());
    /// assert_eq!(seen, vec![0, 1, 2, 3, 4]);
    /// ```
    #[inline]
    fn for_each_with<F>(self, prefetch: u64, mut f: F) -> SinkHandle<()>
    where
        F: FnMut(Self::Item) + Send + 'static,
    {
        sink_prefetch("for_each_with", prefetch);
        sink::fold(self, "for_each", prefetch, (), move |(), item| f(item))
    }

    /// Subscribe a sink that collects every item into a `Vec`, requesting
    /// [`DEFAULT_PREFETCH`] items at a time. The `Vec` grows with the stream: use it
    /// for finite streams.
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::prelude::*;
    ///
    /// assert_eq!(weir::range(0u8..3).collect().wait().unwrap(), vec![0, 1, 2]);
    /// ```
    #[inline]
    fn collect(self) -> SinkHandle<Vec<Self::Item>> {
        self.collect_with(DEFAULT_PREFETCH)
    }

    /// [`collect`](Self::collect) with an explicit prefetch window.
    ///
    /// # Panics
    ///
    /// If `prefetch` is 0: "collect_with prefetch must be at least 1 (got 0)".
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::prelude::*;
    ///
    /// assert_eq!(weir::range(0u8..4).collect_with(2).wait().unwrap(), vec![0, 1, 2, 3]);
    /// ```
    #[inline]
    fn collect_with(self, prefetch: u64) -> SinkHandle<Vec<Self::Item>> {
        sink_prefetch("collect_with", prefetch);
        self.fold_with(prefetch, Vec::new(), |mut v, item| {
            v.push(item);
            v
        })
    }

    /// Subscribe and return a blocking [`Iterator`] over the items, with a prefetch
    /// window of `prefetch` items.
    ///
    /// The iterator yields `Ok(item)` per item, then `Err(error)` once if the stream
    /// failed (an error of kind [`Cancelled`](crate::ErrorKind::Cancelled) if the
    /// publisher dropped its subscriber without a terminal signal, as one whose thread
    /// panicked would). It blocks while the window is empty and the stream has not ended;
    /// dropping it cancels upstream. Upstream requests arrive in batches of
    /// `prefetch - prefetch/4`; at most `prefetch` items are ever queued.
    ///
    /// Over a [`channel`](fn@crate::channel) (directly, through stages that pass its
    /// subscription on, or through a [`share`](Self::share) hub), `next` watches the
    /// channel for a moment before it blocks: senders then only claim a slot, and
    /// `next` runs the channel's drain loop on the iterating thread, so the stages
    /// between the channel and the iterator (and a hub's other subscribers) may run
    /// there too, as they may on any thread that delivers.
    ///
    /// # Panics
    ///
    /// If `prefetch` is 0 or above 2^30: "blocking_iter prefetch must be in 1..=2^30
    /// (got 0)".
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::prelude::*;
    ///
    /// let mut total = 0;
    /// for item in weir::range(0u64..10).blocking_iter(4) {
    ///     total += item.unwrap();
    /// }
    /// assert_eq!(total, 45);
    /// ```
    fn blocking_iter(self, prefetch: u64) -> BlockingIter<Self::Item> {
        let (subscriber, iter) = sink::blocking_iter(prefetch);
        self.subscribe(subscriber);
        iter
    }

    // ---- async stages (features `tokio`, `futures`) ---------------------------------

    /// Map each item through the future `f` returns, with at most `concurrency`
    /// futures running at a time; results go downstream in input order. The futures
    /// are polled on the current tokio runtime (so they may use its timers and
    /// sockets): the stage every call to a service goes through.
    ///
    /// # Backpressure
    ///
    /// Upstream demand is the free slots: the stage has `concurrency` slots, and an
    /// item holds one from its arrival until its result goes downstream. Upstream is
    /// asked for `concurrency` items up front, then for the slots delivery frees, by
    /// the 75% rule (a wave of calls that finish together is replaced with one
    /// request). A downstream that stops asking leaves finished results in their
    /// slots, so no new call starts: calls never run ahead of demand by more than
    /// `concurrency`. A result that finishes before the older ones waits for them
    /// (head-of-line: use [`map_async_unordered`](Self::map_async_unordered) when
    /// order does not matter). In-flight bound: `concurrency`.
    ///
    /// # Timing
    ///
    /// ```text
    /// upstream : 123--------4----
    /// calls    : 1===          (concurrency 3)
    ///            2=======
    ///            3==
    /// output   : ---1----23---4-  (3 finished first, waits for 2)
    /// ```
    ///
    /// # Errors
    ///
    /// Upstream's error goes downstream at once: the running calls are dropped (as on
    /// a cancel) and finished results not yet delivered are lost. A panic in `f` or in
    /// a future's `poll` fails the stage with a [`Panicked`](crate::ErrorKind::Panicked)
    /// error and cancels upstream. A call that can fail returns a `Result`: it is an
    /// item like any other. An upstream that delivers more than it was asked for
    /// fails the stage with a rule 1.1 error.
    ///
    /// # Cancellation
    ///
    /// Cancels upstream and drops the running futures (their `Drop` runs: an HTTP
    /// request in flight is aborted) and the finished results.
    ///
    /// # Panics
    ///
    /// At construction, outside a tokio runtime: "map_async must be called inside a
    /// tokio runtime (or use map_async_on with an explicit scheduler)"; and if
    /// `concurrency` is not in 1..=2^16: "map_async concurrency must be in 1..=2^16
    /// (got 0)" (the slots are allocated up front).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir::prelude::*;
    ///
    /// let runtime = tokio::runtime::Runtime::new().unwrap();
    /// let _inside = runtime.enter();
    /// // Four calls at a time; the slower early ones do not reorder the results.
    /// let results = weir::range(0u64..8)
    ///     .map_async(4, |x| async move {
    ///         tokio::time::sleep(Duration::from_millis(8 - x)).await;
    ///         x * 10
    ///     })
    ///     .collect()
    ///     .wait()
    ///     .unwrap();
    /// assert_eq!(results, [0, 10, 20, 30, 40, 50, 60, 70]);
    /// ```
    #[cfg(feature = "tokio")]
    fn map_async<F, Fut>(
        self,
        concurrency: u64,
        f: F,
    ) -> crate::operators::MapAsync<Self, F, crate::runtime::Tokio>
    where
        F: FnMut(Self::Item) -> Fut + Send + 'static,
        Fut: std::future::Future + Send + 'static,
        Fut::Output: Send + 'static,
    {
        let scheduler = current_tokio("map_async");
        crate::operators::MapAsync::new(self, scheduler, concurrency, f, true, "map_async")
    }

    /// [`map_async`](Self::map_async) with results in the order their futures finish:
    /// a slow call does not hold back the results of later ones.
    ///
    /// # Backpressure
    ///
    /// As [`map_async`](Self::map_async): upstream demand is the free slots, a slot is
    /// freed when its result goes downstream (here: in the order the calls finished),
    /// and at most `concurrency` items are in the stage. In-flight bound:
    /// `concurrency`.
    ///
    /// # Timing
    ///
    /// ```text
    /// upstream : 123--------4----
    /// calls    : 1===          (concurrency 3)
    ///            2=======
    ///            3==
    /// output   : --31----2----4-
    /// ```
    ///
    /// # Errors
    ///
    /// As [`map_async`](Self::map_async).
    ///
    /// # Cancellation
    ///
    /// As [`map_async`](Self::map_async).
    ///
    /// # Panics
    ///
    /// As [`map_async`](Self::map_async), naming `map_async_unordered`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir::prelude::*;
    ///
    /// let runtime = tokio::runtime::Runtime::new().unwrap();
    /// let _inside = runtime.enter();
    /// // Whatever order the calls finish in, each result arrives once.
    /// let total = weir::range(1u64..101)
    ///     .map_async_unordered(8, |x| async move {
    ///         tokio::time::sleep(Duration::from_micros(100 * (x % 3))).await;
    ///         x
    ///     })
    ///     .fold(0u64, |sum, x| sum + x)
    ///     .wait()
    ///     .unwrap();
    /// assert_eq!(total, 5_050);
    /// ```
    #[cfg(feature = "tokio")]
    fn map_async_unordered<F, Fut>(
        self,
        concurrency: u64,
        f: F,
    ) -> crate::operators::MapAsync<Self, F, crate::runtime::Tokio>
    where
        F: FnMut(Self::Item) -> Fut + Send + 'static,
        Fut: std::future::Future + Send + 'static,
        Fut::Output: Send + 'static,
    {
        let scheduler = current_tokio("map_async_unordered");
        crate::operators::MapAsync::new(
            self,
            scheduler,
            concurrency,
            f,
            false,
            "map_async_unordered",
        )
    }

    /// [`map_async`](Self::map_async) with its futures polled on `scheduler` (any
    /// [`Scheduler`]; for futures that need no runtime of
    /// their own, or a runtime that is not the current one). `ordered`: results in
    /// input order, else as the calls finish.
    ///
    /// # Backpressure
    ///
    /// As [`map_async`](Self::map_async).
    ///
    /// # Timing
    ///
    /// As [`map_async`](Self::map_async) (or
    /// [`map_async_unordered`](Self::map_async_unordered) when not `ordered`).
    ///
    /// # Errors
    ///
    /// As [`map_async`](Self::map_async). A future that needs a runtime `scheduler`
    /// is not (a tokio timer on a [`ThreadPool`](crate::runtime::ThreadPool)) panics
    /// in `poll`: the stage fails with a `Panicked` error.
    ///
    /// # Cancellation
    ///
    /// As [`map_async`](Self::map_async).
    ///
    /// # Panics
    ///
    /// If `concurrency` is not in 1..=2^16: "map_async_on concurrency must be in
    /// 1..=2^16 (got 0)".
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::prelude::*;
    /// use weir::runtime::ThreadPool;
    ///
    /// let pool = ThreadPool::new(2);
    /// let results = weir::range(0u64..4)
    ///     .map_async_on(pool, 2, true, |x| async move {
    ///         // A future that needs no runtime: answered from another thread.
    ///         let (tx, rx) = futures::channel::oneshot::channel();
    ///         std::thread::spawn(move || tx.send(x * 2));
    ///         rx.await.unwrap()
    ///     })
    ///     .collect()
    ///     .wait()
    ///     .unwrap();
    /// assert_eq!(results, [0, 2, 4, 6]);
    /// ```
    #[cfg(feature = "futures")]
    fn map_async_on<C, F, Fut>(
        self,
        scheduler: C,
        concurrency: u64,
        ordered: bool,
        f: F,
    ) -> crate::operators::MapAsync<Self, F, C>
    where
        C: crate::runtime::Scheduler + Clone,
        F: FnMut(Self::Item) -> Fut + Send + 'static,
        Fut: std::future::Future + Send + 'static,
        Fut::Output: Send + 'static,
    {
        crate::operators::MapAsync::new(self, scheduler, concurrency, f, ordered, "map_async_on")
    }

    // ---- bridges: futures::Stream and futures::Sink (feature `futures`) -------------

    /// Consume the publisher as a [`futures::Stream`] of `Result<Self::Item, Error>`,
    /// with a window of `prefetch` items.
    ///
    /// The stream yields `Ok(item)` per item, then `Err(error)` once if the publisher
    /// failed, then `None` for ever (it is a `FusedStream`). It is `Send` and `Unpin`,
    /// and lazy: nothing is subscribed until its first poll.
    ///
    /// # Backpressure
    ///
    /// Prefetching: the first poll subscribes and requests `prefetch`; then, each time
    /// the consumer has taken `prefetch - prefetch / 4` items out (48 of 64), it
    /// requests that many again ([`Replenish`](crate::demand::Replenish), the 75%
    /// rule). So upstream never has more than `prefetch` items requested and not yet
    /// consumed, and it **keeps producing into that window while the consumer is busy**
    /// awaiting something else (a slow loop body does not starve upstream, unlike
    /// `buffered` in futures-rs#2387). Items cross to the polling task through one
    /// queue of at most `prefetch` items (room for up to 1,024 allocated at once, grown
    /// as items arrive; a batch is pushed under one lock with one wake); an upstream that delivers beyond the window broke rule 1.1 and is
    /// reported, never buffered. In-flight bound: `prefetch` items.
    ///
    /// # Timing
    ///
    /// ```text
    /// poll     : P------P--P--P---
    /// request  : 4---------------3   (into_stream(4); 3 = 4 - 4/4, after 3 were taken)
    /// upstream : -1234-----------5
    /// stream   : -1------2--3--4--   (the window fills while the consumer is busy)
    /// ```
    ///
    /// # Errors
    ///
    /// An upstream error is yielded as `Some(Err(error))` after the items delivered
    /// before it, then the stream ends. An upstream that breaks rule 1.1 is cancelled
    /// and the stream ends with an error of kind
    /// [`SpecViolation`](crate::ErrorKind::SpecViolation) naming rule 1.1. A publisher
    /// that drops its subscriber without a terminal signal (its thread panicked, say)
    /// ends the stream with an error of kind [`Cancelled`](crate::ErrorKind::Cancelled)
    /// after the items it delivered, instead of leaving it pending for ever.
    ///
    /// # Cancellation
    ///
    /// Dropping the stream cancels upstream (a stream dropped before its first poll
    /// never subscribes). Items still queued are dropped with it.
    ///
    /// # Panics
    ///
    /// At construction, if `prefetch` is outside 1..=2^30: "into_stream prefetch must
    /// be in 1..=2^30 (got 0)".
    ///
    /// # Examples
    ///
    /// The stream is a `TryStream`: `try_next` (from `futures::TryStreamExt`) ends the
    /// loop at the end and hands the error to `?`.
    ///
    /// ```
    /// use futures::TryStreamExt as _;
    /// use weir::prelude::*;
    ///
    /// let mut stream = weir::range(0u32..5).into_stream(4);
    /// let mut items = Vec::new();
    /// futures::executor::block_on(async {
    ///     while let Some(item) = stream.try_next().await? {
    ///         items.push(item);
    ///     }
    ///     Ok::<_, weir::Error>(())
    /// })
    /// .unwrap();
    /// assert_eq!(items, vec![0, 1, 2, 3, 4]);
    /// ```
    #[cfg(feature = "futures")]
    fn into_stream(self, prefetch: u64) -> crate::bridge::IntoStream<Self::Item>
    where
        Self: Send + 'static,
    {
        crate::bridge::IntoStream::new(self, prefetch)
    }

    /// Send every item into the [`futures::Sink`] `sink`, using the sink's readiness
    /// as demand; the returned future resolves once upstream completed and the sink
    /// closed.
    ///
    /// The future is `Unpin` (and `Send` when the sink and the items are), and lazy:
    /// nothing is subscribed until its first poll. Await it or spawn it.
    ///
    /// # Backpressure
    ///
    /// One item per readiness: upstream is asked for one item (`request(1)`) only
    /// after `poll_ready` returned `Ready`, and that item goes to `start_send` (after
    /// a second `poll_ready`, which is ready at once). Outstanding demand is never
    /// more than 1; nothing is buffered besides the item in hand. When upstream has
    /// nothing yet, the sink is flushed (`poll_flush`); at completion it is closed
    /// (`poll_close`). For throughput across threads, put a prefetching stage (an
    /// async boundary) in front: `forward` itself never reads ahead of the sink.
    ///
    /// So the end, too, comes through demand when upstream learns of it only when
    /// asked for an item (`from_stream` and `from_receiver` poll their stream or
    /// channel only with demand): after the last item, such a `forward` resolves once
    /// the sink is ready for one more item, not before. Awaiting it while the sink
    /// stays full (its reader waits for the `forward` first) waits for ever; read the
    /// sink concurrently, or give it room for one more item than you send
    /// (`futures::StreamExt::forward` reads ahead one item, and resolves there).
    ///
    /// # Timing
    ///
    /// ```text
    /// poll_ready : R---R---R--R|
    /// request    : 1---1---1--1
    /// upstream   : -a---b---c--|
    /// start_send : -a---b---c--(close)
    /// ```
    ///
    /// # Errors
    ///
    /// A sink error (from `poll_ready`, `start_send`, `poll_flush` or `poll_close`)
    /// cancels upstream and resolves to it: a `weir::Error` unchanged, any other error
    /// as kind [`Upstream`](crate::ErrorKind::Upstream) with the sink's error as its
    /// source. An upstream error resolves to that error at once; the sink is then not
    /// closed (it is dropped with the future).
    ///
    /// # Cancellation
    ///
    /// Dropping the future before it resolved cancels upstream; the sink and the item
    /// in hand (if any) are dropped with it.
    ///
    /// # Panics
    ///
    /// A panic in the sink's methods unwinds through `poll` (the future is then
    /// dropped, which cancels upstream). Polling the future again after it returned
    /// its result panics ("forward: polled after it returned its result"), as the
    /// sinks' futures do: its result is not kept to be reported twice.
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::prelude::*;
    ///
    /// let (tx, rx) = futures::channel::mpsc::channel::<u32>(2);
    /// let forward = weir::range(0u32..5).forward(tx);
    /// let (sent, received) = futures::executor::block_on(futures::future::join(
    ///     forward,
    ///     futures::StreamExt::collect::<Vec<_>>(rx),
    /// ));
    /// sent.unwrap();
    /// assert_eq!(received, vec![0, 1, 2, 3, 4]);
    /// ```
    #[cfg(feature = "futures")]
    fn forward<K>(self, sink: K) -> crate::bridge::Forward<Self::Item, K>
    where
        Self: Send + 'static,
        K: futures::Sink<Self::Item>,
        K::Error: std::error::Error + Send + Sync + 'static,
    {
        crate::bridge::Forward::new(self, sink)
    }

    // ---- tokio bridge: async subscribers (feature `tokio`) ---------------------------

    /// Drive an [`AsyncSubscriber`](crate::bridge::AsyncSubscriber) (its `on_next` is
    /// an `async fn`) from a task spawned on the current tokio runtime; returns the
    /// task's [`AsyncHandle`](crate::bridge::AsyncHandle), which resolves to the
    /// terminal result. Same as [`weir::bridge::subscribe_async`](crate::bridge::subscribe_async).
    ///
    /// # Backpressure
    ///
    /// `request(1)` up front and `request(1)` each time an `on_next` future has
    /// *completed*: the next item is asked for only when the previous one is done.
    /// At most one item is in flight (the one being processed); items cross from the
    /// publisher's thread to the task through a hand-off of one slot. For a window,
    /// see [`subscribe_async_with`](Self::subscribe_async_with).
    ///
    /// # Timing
    ///
    /// ```text
    /// request : 1---1-----1--1|
    /// source  : -a---b-----c--|
    /// on_next : -[a-][b---][c]   (each request follows the previous future's end)
    /// result  : --------------Ok(())
    /// ```
    ///
    /// # Errors
    ///
    /// Upstream errors reach `on_error` after the items that came before them, then
    /// become the result. An `Err` returned by a hook cancels upstream and becomes
    /// the result (no further hook runs).
    ///
    /// # Cancellation
    ///
    /// [`AsyncHandle::abort`](crate::bridge::AsyncHandle::abort) cancels upstream at
    /// once and aborts the task (result: kind [`Cancelled`](crate::ErrorKind::Cancelled)).
    /// Dropping the handle detaches the task, which runs on. If the runtime drops the
    /// task unfinished (it shut down, also before the task first ran), upstream is
    /// cancelled and the result is an error of kind
    /// [`SchedulerShutdown`](crate::ErrorKind::SchedulerShutdown).
    ///
    /// # Panics
    ///
    /// If called outside a tokio runtime. A panic in a hook is caught: upstream is
    /// cancelled and the result is an error of kind [`Panicked`](crate::ErrorKind::Panicked).
    /// A publisher that panics in `subscribe` panics here, in the caller (as every
    /// sink's `subscribe` does); the task does not wait for ever: it runs `on_subscribe`
    /// and `on_error` with an error of kind [`Cancelled`](crate::ErrorKind::Cancelled)
    /// and ends, dropping the subscriber.
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::bridge::AsyncSubscriber;
    /// use weir::prelude::*;
    ///
    /// struct Sum(u64);
    ///
    /// #[async_trait::async_trait]
    /// impl AsyncSubscriber<u64> for Sum {
    ///     async fn on_next(&mut self, item: u64) -> Result<(), weir::Error> {
    ///         tokio::task::yield_now().await;
    ///         self.0 += item;
    ///         Ok(())
    ///     }
    ///     async fn on_complete(&mut self) -> Result<(), weir::Error> {
    ///         assert_eq!(self.0, 4_950);
    ///         Ok(())
    ///     }
    /// }
    ///
    /// # fn main() {
    /// let rt = tokio::runtime::Runtime::new().unwrap();
    /// rt.block_on(async { weir::range(0u64..100).subscribe_async(Sum(0)).await.unwrap() });
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    fn subscribe_async<A>(self, subscriber: A) -> crate::bridge::AsyncHandle
    where
        A: crate::bridge::AsyncSubscriber<Self::Item> + 'static,
    {
        crate::bridge::subscribe_async(self, subscriber)
    }

    /// Run the async closure `f` on every item, one item at a time, in a task on the
    /// current tokio runtime; await the returned handle for the end of the stream.
    /// The common case of [`subscribe_async`](Self::subscribe_async), without a type
    /// and an `#[async_trait]` impl.
    ///
    /// # Backpressure
    ///
    /// One item at a time: `request(1)`, and the next `request(1)` only when the
    /// future `f` returned for the item has completed. Use
    /// [`for_each_async_with`](Self::for_each_async_with) to keep a window of items
    /// requested ahead, and put [`map_async`](Self::map_async) before it to run
    /// several calls at once.
    ///
    /// # Timing
    ///
    /// ```text
    /// request : 1--------1--------1
    /// source  : a--------b--------c
    /// f       : [a......][b......][c......]
    /// ```
    ///
    /// # Errors
    ///
    /// The handle resolves to the upstream error after every earlier item was
    /// processed. A panic in `f` (or in its future) cancels upstream and ends with an
    /// error of kind [`Panicked`](crate::ErrorKind::Panicked). To stop on an error of
    /// your own, use [`subscribe_async`](Self::subscribe_async), whose `on_next`
    /// returns a `Result`.
    ///
    /// # Cancellation
    ///
    /// [`AsyncHandle::abort`](crate::bridge::AsyncHandle::abort) cancels upstream and
    /// drops the call in progress at its next `.await`. Dropping the handle detaches
    /// the task, which runs on (as a tokio `JoinHandle` does).
    ///
    /// # Panics
    ///
    /// If called outside a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use weir::prelude::*;
    ///
    /// # fn main() {
    /// let rt = tokio::runtime::Runtime::new().unwrap();
    /// let stored = Arc::new(Mutex::new(Vec::new()));
    /// let rows = stored.clone();
    /// rt.block_on(async move {
    ///     weir::range(0u32..5)
    ///         .for_each_async(move |row| {
    ///             let rows = rows.clone();
    ///             async move {
    ///                 tokio::task::yield_now().await; // an insert into a database, say
    ///                 rows.lock().unwrap().push(row);
    ///             }
    ///         })
    ///         .await
    ///         .unwrap();
    /// });
    /// assert_eq!(*stored.lock().unwrap(), [0, 1, 2, 3, 4]);
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    fn for_each_async<F, Fut>(self, f: F) -> crate::bridge::AsyncHandle
    where
        F: FnMut(Self::Item) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        self.for_each_async_with(1, f)
    }

    /// [`for_each_async`](Self::for_each_async) with a window: up to `window` items
    /// requested ahead of the one `f` is processing (they wait in a bounded buffer of
    /// that size). Calls still run one at a time, in order.
    ///
    /// # Backpressure
    ///
    /// `window` requested up front, then (the 75% rule of
    /// [`Replenish`](crate::demand::Replenish)) what was consumed each time
    /// `window - window/4` calls completed. Outstanding demand plus waiting items
    /// never exceed `window`.
    ///
    /// # Timing
    ///
    /// ```text
    /// window 4
    /// request : 4--------3-----------3
    /// source  : abcd-----efg---------h…
    /// f       : [a][b][c][d][e][f][g]…   (3 done → request 3)
    /// ```
    ///
    /// # Errors
    ///
    /// As [`for_each_async`](Self::for_each_async).
    ///
    /// # Cancellation
    ///
    /// As [`for_each_async`](Self::for_each_async); `abort` also drops the items
    /// waiting in the window.
    ///
    /// # Panics
    ///
    /// If `window` is 0 or above 2^30 ("for_each_async window must be in 1..=2^30
    /// (got 0)"), or if called outside a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use std::sync::Arc;
    /// use weir::prelude::*;
    ///
    /// # fn main() {
    /// let rt = tokio::runtime::Runtime::new().unwrap();
    /// let sum = Arc::new(AtomicU64::new(0));
    /// let total = sum.clone();
    /// rt.block_on(async move {
    ///     weir::range(0u64..1_000)
    ///         .for_each_async_with(64, move |x| {
    ///             let total = total.clone();
    ///             async move {
    ///                 total.fetch_add(x, Ordering::Relaxed);
    ///             }
    ///         })
    ///         .await
    ///         .unwrap();
    /// });
    /// assert_eq!(sum.load(Ordering::Relaxed), 499_500);
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    fn for_each_async_with<F, Fut>(self, window: u64, f: F) -> crate::bridge::AsyncHandle
    where
        F: FnMut(Self::Item) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        // Checked here too, so the panic names this sink.
        crate::stage::window::validate("for_each_async window", window);
        crate::bridge::SubscribeAsync::new()
            .window(window)
            .subscribe_as(
                "for_each_async",
                self,
                crate::bridge::async_subscriber::ForEachAsync { f },
            )
    }

    /// [`subscribe_async`](Self::subscribe_async) with options: a window of items
    /// requested ahead, and the runtime to spawn on.
    ///
    /// # Backpressure
    ///
    /// With `window(w)`: `w` requested up front, then (through
    /// [`Replenish`](crate::demand::Replenish)) what was consumed each time
    /// `w - w/4` `on_next` futures completed. Up to `w` items wait in a bounded
    /// buffer of that size while `on_next` runs; outstanding demand plus waiting
    /// items never exceed `w`.
    ///
    /// # Timing
    ///
    /// ```text
    /// window 4
    /// request : 4--------3-----------3
    /// source  : abcd-----efg---------h…
    /// on_next : [a][b][c][d][e][f][g]…   (3 done → request 3)
    /// ```
    ///
    /// # Errors
    ///
    /// As [`subscribe_async`](Self::subscribe_async).
    ///
    /// # Cancellation
    ///
    /// As [`subscribe_async`](Self::subscribe_async); `abort` also drops the items
    /// waiting in the window.
    ///
    /// # Panics
    ///
    /// If no runtime was configured and this thread is not inside a tokio runtime.
    /// (An invalid window panics in [`SubscribeAsync::window`](crate::bridge::SubscribeAsync::window).)
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::bridge::{AsyncSubscriber, SubscribeAsync};
    /// use weir::prelude::*;
    ///
    /// struct Count(u64);
    ///
    /// #[async_trait::async_trait]
    /// impl AsyncSubscriber<u32> for Count {
    ///     async fn on_next(&mut self, _item: u32) -> Result<(), weir::Error> {
    ///         self.0 += 1;
    ///         Ok(())
    ///     }
    /// }
    ///
    /// let rt = tokio::runtime::Runtime::new().unwrap();
    /// // Subscribed from a plain thread: the task runs on `rt`.
    /// let handle = weir::range(0u32..1_000)
    ///     .subscribe_async_with(SubscribeAsync::new().window(16).runtime(rt.handle().clone()), Count(0));
    /// assert!(rt.block_on(handle).is_ok());
    /// ```
    #[cfg(feature = "tokio")]
    fn subscribe_async_with<A>(
        self,
        options: crate::bridge::SubscribeAsync,
        subscriber: A,
    ) -> crate::bridge::AsyncHandle
    where
        A: crate::bridge::AsyncSubscriber<Self::Item> + 'static,
    {
        options.subscribe(self, subscriber)
    }
}

impl<P: Publisher> PublisherExt for P {}

/// Check a sink's prefetch at construction, naming the sink (`0` is refused; any other
/// value, [`UNBOUNDED`](crate::demand::UNBOUNDED) included, is a window).
fn sink_prefetch(sink: &str, prefetch: u64) {
    assert!(prefetch >= 1, "{sink} prefetch must be at least 1 (got 0)");
}
