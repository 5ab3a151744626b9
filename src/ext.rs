//! [`PublisherExt`]: one thin constructor per operator and sink. The user
//! documentation of every operator lives on its method here.

use crate::metrics::DropHook;
use crate::operators::{
    Buffer, Conflate, Filter, KeepLatest, LimitRate, Map, Merge, OnBackpressureBuffer,
    OnBackpressureDrop, OnBackpressureLatest, OnDropped, Take,
};
use crate::sink::{self, BlockingIter, SinkHandle, DEFAULT_PREFETCH};
use crate::{BoxPublisher, Overflow, Publisher};

/// Identity function that checks, at zero cost, that `P` is a publisher of `T`.
#[inline(always)]
fn assert_publisher<T, P: Publisher<Item = T>>(publisher: P) -> P {
    publisher
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
    /// the predicate swallows are requested again, once per batch the stage receives
    /// (one `request` for all the batch's swallowed items), so upstream's outstanding
    /// demand always equals downstream's. An upstream that delivers item by item (a
    /// [`BoxPublisher`] stage, or your own publisher without `on_next_batch`) gets
    /// one `request(1)` per swallowed item. Inside a synchronous chain the re-request
    /// is a thread-local update, not a call.
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

    // ---- transformation operators (issue 3) go here, in this section ----------------

    // ---- multi-source operators (issue 3) go here, in this section -----------------

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
    /// // A consumer that wants 3 items of a source that pushes 10 at once.
    /// let kept = weir::range(0u32..10)
    ///     .on_backpressure_drop()
    ///     .on_dropped(DropHook::new(drops.clone()))
    ///     .take(3)
    ///     .collect_with(3)
    ///     .wait()
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
    /// counters.
    ///
    /// # Backpressure
    ///
    /// PassThrough: the stage changes no signal. Place it after the lossy stages it
    /// should hear from; they ask for the hook when they are subscribed.
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
    ///     .take(2)
    ///     .collect_with(2)
    ///     .wait()
    ///     .unwrap();
    /// assert_eq!(kept, vec![0, 1]);
    /// assert_eq!(*seen.lock().unwrap(), vec![2, 3, 4]);
    /// assert_eq!(drops.total(), 3);
    /// ```
    fn on_dropped(self, hook: DropHook) -> OnDropped<Self> {
        assert_publisher::<Self::Item, _>(OnDropped::new(self, hook))
    }

    // ---- more rate-decoupling operators (issue 3) go here, in this section --------

    /// Gather items into `Vec`s of `size` items; the last one may be shorter.
    ///
    /// # Backpressure
    ///
    /// Full, scaled: a request for `k` batches asks upstream for `k × size` items
    /// (saturating at unbounded). In-flight bound: `size` (the batch being filled).
    /// Exactly one `Vec` is allocated per emitted batch, with capacity `size`; nothing
    /// is allocated per item.
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
    /// If `size` is not in `1..=2^30`: "buffer size must be in 1..=1073741824 (got 0)".
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::prelude::*;
    ///
    /// let batches = weir::range(1u32..6).buffer(2).collect().wait().unwrap();
    /// assert_eq!(batches, vec![vec![1, 2], vec![3, 4], vec![5]]);
    /// ```
    fn buffer(self, size: usize) -> Buffer<Self> {
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
    /// goes up whenever at least `low` of the outstanding items were delivered, as
    /// large as the room below `high` allows; when nothing is outstanding, new demand
    /// goes up at once. `low >= high` means the 75% rule (`high - high / 4`); `low == 0`
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
    /// If `high` is 0: "limit_rate high must be at least 1 (got 0)". Every `low` is
    /// valid (see above).
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
    /// a ring of `capacity` slots, allocated once and never grown, and go out oldest
    /// first as downstream requests (from any thread). In-flight bound: `capacity`.
    /// When the ring is full, [`Overflow::DropOldest`](crate::Overflow::DropOldest)
    /// drops the oldest held item ([`DropReason::OverflowOldest`](crate::DropReason)),
    /// [`Overflow::DropNewest`](crate::Overflow::DropNewest) the arriving one
    /// (`OverflowNewest`); both are handed to the pipeline's [`DropHook`] and counted.
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
    /// With [`Overflow::Error`](crate::Overflow::Error), the item that does not fit is
    /// refused (reported as `OverflowNewest`), upstream is cancelled at once, and
    /// downstream receives `on_error` of kind [`Overflow`](crate::ErrorKind::Overflow)
    /// **after** the held items were delivered: nothing the buffer accepted is lost.
    /// (Reactor signals the error at once and discards the buffer.) Upstream errors,
    /// like completion, are delivered after the held items.
    ///
    /// # Cancellation
    ///
    /// Cancel goes upstream; the held items are released (dropped, not reported: they
    /// were not lost for lack of room).
    ///
    /// # Panics
    ///
    /// If `capacity` is not in `1..=2^30`:
    /// "on_backpressure_buffer capacity must be in 1..=1073741824 (got 0)".
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
    fn on_backpressure_buffer(self, capacity: usize, policy: Overflow) -> OnBackpressureBuffer<Self>
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
    /// to the pipeline's [`DropHook`] and counted. In-flight bound: 1.
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
    /// Upstream errors are delivered after the held item, like completion.
    ///
    /// # Cancellation
    ///
    /// Cancel goes upstream; the held item is released without a report.
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
    /// [`DropReason::Merged`](crate::DropReason::Merged). In-flight bound: 1.
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
    /// Upstream errors are delivered after the held item, like completion.
    ///
    /// # Cancellation
    ///
    /// Cancel goes upstream; the held item is released without a report.
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
            Merge(merge),
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
    /// Upstream errors are delivered after the held item, like completion.
    ///
    /// # Cancellation
    ///
    /// Cancel goes upstream; the held item is released without a report.
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
    /// # Panics
    ///
    /// If `prefetch` is 0.
    ///
    /// # Examples
    ///
    /// ```
    /// use weir::prelude::*;
    ///
    /// let sum = weir::range(0u64..1000).fold_with(64, 0, |acc, x| acc + x).wait().unwrap();
    /// assert_eq!(sum, 499_500);
    /// ```
    fn fold_with<A, F>(self, prefetch: u64, init: A, f: F) -> SinkHandle<A>
    where
        A: Send + 'static,
        F: FnMut(A, Self::Item) -> A + Send + 'static,
    {
        let (subscriber, handle) = sink::fold(prefetch, init, f);
        self.subscribe(subscriber);
        handle
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
    /// If `prefetch` is 0.
    fn for_each_with<F>(self, prefetch: u64, mut f: F) -> SinkHandle<()>
    where
        F: FnMut(Self::Item) + Send + 'static,
    {
        self.fold_with(prefetch, (), move |(), item| f(item))
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
    fn collect(self) -> SinkHandle<Vec<Self::Item>> {
        self.collect_with(DEFAULT_PREFETCH)
    }

    /// [`collect`](Self::collect) with an explicit prefetch window.
    ///
    /// # Panics
    ///
    /// If `prefetch` is 0.
    fn collect_with(self, prefetch: u64) -> SinkHandle<Vec<Self::Item>> {
        self.fold_with(prefetch, Vec::new(), |mut v, item| {
            v.push(item);
            v
        })
    }

    /// Subscribe and return a blocking [`Iterator`] over the items, with a prefetch
    /// window of `prefetch` items.
    ///
    /// The iterator yields `Ok(item)` per item, then `Err(error)` once if the stream
    /// failed. It blocks while the window is empty and the stream has not ended;
    /// dropping it cancels upstream. Upstream requests arrive in batches of
    /// `prefetch - prefetch/4`; at most `prefetch` items are ever queued.
    ///
    /// # Panics
    ///
    /// If `prefetch` is 0 or above 2^30.
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
}

impl<P: Publisher> PublisherExt for P {}
