//! The bounded hand-off window, and the one validator of window sizes.
//!
//! Every stage that asks its upstream for a fixed amount of credit and keeps what
//! arrives until a consumer takes it (the lanes of `merge`/`zip`/`flat_map`, the
//! bridges `into_stream` and `forward`, `subscribe_async`, `blocking_iter`) keeps it
//! in a [`Window`]: a queue with room for the whole credit, plus the count of items
//! delivered and not yet given back. The consumer gives items back
//! ([`release`](Window::release)) only when it requests that many again, so
//! "delivered and not released" plus the outstanding demand never exceeds the
//! window. An item that arrives when the window is full was therefore never
//! requested: the upstream broke rule 1.1, and the stage fails with
//! [`over_delivered`] instead of growing the queue past the credit.
//!
//! Room is allocated up front only up to [`PREALLOCATED`] items: a window of 2^30
//! items that only ever sees ten would otherwise take 2^30 slots (8 GiB of `u64`s)
//! at subscribe. A larger window grows as items arrive, never past its size.
//!
//! Window sizes (prefetch, window, capacity of such a queue) are checked once, at
//! construction, by [`validate`]: `1..=`[`MAX_CAPACITY`], the one limit of every
//! queue weir sizes. The other sizes a user gives (the holding stages'
//! capacities, `buffer`'s batch, `throttle`'s burst, `queue::Capacity`, the SPSC
//! ring) are checked by the same function, with the same message.

use std::collections::VecDeque;

use crate::queue::MAX_CAPACITY;
use crate::Error;

/// The most items a queue or batch sized by the user allocates room for before any
/// item arrived (windows, `buffer`'s batches, the hub's ring); a larger one grows as
/// items arrive, up to its size.
pub(crate) const PREALLOCATED: usize = 1024;

/// Check a size given by the user: a window or prefetch, or any other count weir
/// allocates room for (a queue's capacity, a batch) or keeps as a bound (a token
/// bucket's burst).
///
/// # Panics
///
/// With "`{what}` must be in 1..=2^30 (got {size})" when it is out of range.
#[track_caller]
pub(crate) fn validate(what: impl std::fmt::Display, size: u64) -> usize {
    assert!(
        (1..=MAX_CAPACITY as u64).contains(&size),
        "{what} must be in 1..=2^30 (got {size})"
    );
    size as usize
}

/// The most bytes a ring that must be allocated whole, up front (a lock-free ring
/// of exactly its size: `publish_on`'s), may take: 2^30 bytes (1 GiB). Within
/// `1..=2^30` slots, a large item type could otherwise ask for more than the machine
/// can map (2^30 slots of 64 bytes: 64 GiB), and the allocation aborts the process.
pub(crate) const MAX_RING_BYTES: usize = 1 << 30;

/// [`validate`] a ring of `size` slots of `slot_bytes` each that is allocated up
/// front, then check that it takes at most [`MAX_RING_BYTES`].
///
/// # Panics
///
/// As [`validate`]; and with "`{what}` of {size} slots of {slot_bytes} bytes needs
/// {total} bytes up front; at most 2^30 bytes (1 GiB): {max} slots for this item
/// type" when it takes more.
#[track_caller]
pub(crate) fn validate_ring(what: impl std::fmt::Display, size: u64, slot_bytes: usize) -> usize {
    let size = validate(&what, size);
    if let Err(over) = ring_budget(size as u64, slot_bytes) {
        panic!("{what} {over}");
    }
    size
}

/// Whether a ring of `slots` slots of `slot_bytes` each, allocated whole, fits
/// [`MAX_RING_BYTES`]; if not, why, worded to follow the ring's name: "of {slots}
/// slots of {slot_bytes} bytes needs {total} bytes up front; at most 2^30 bytes
/// (1 GiB): {max} slots for this item type".
pub(crate) fn ring_budget(slots: u64, slot_bytes: usize) -> Result<(), String> {
    let total = slots.saturating_mul(slot_bytes as u64);
    if total <= MAX_RING_BYTES as u64 {
        return Ok(());
    }
    Err(format!(
        "of {slots} slots of {slot_bytes} bytes needs {total} bytes up front; at most 2^30 \
         bytes (1 GiB): {} slots for this item type",
        MAX_RING_BYTES / slot_bytes.max(1)
    ))
}

/// The error of a stage whose upstream delivered past its window (rule 1.1).
#[cold]
pub(crate) fn over_delivered(stage: &str) -> Error {
    Error::spec_violation(
        "1.1",
        format!("{stage}: upstream delivered more items than were requested (rule 1.1)"),
    )
}

/// Pull up to `max` items of a delivered batch into `into`, before the caller takes
/// its lock; returns how many it pulled.
///
/// A batch may be lazy: behind a fused `map`, `filter`, `filter_map` or `inspect`,
/// iterating it runs the user's closure (and the `Drop` of an item a filter lets
/// go), and that code may call back into the very stage it is delivered to (its
/// subscriber's `request` or `cancel`, which can run the stage's pass on this
/// thread; a hub's `stats`), which takes the same lock: iterated under the lock, the
/// thread would wait for itself for ever. So every stage that queues a delivery
/// under a lock gathers it first, into a buffer of its own that it keeps (no
/// allocation per batch).
pub(crate) fn gather<T>(
    into: &mut VecDeque<T>,
    items: impl Iterator<Item = T>,
    max: usize,
) -> usize {
    let before = into.len();
    // The usual case: the batch says it fits (its size hint), and `extend` runs its
    // own loop (with `take`, the count per item keeps it from the fast one).
    if items.size_hint().1.is_some_and(|upper| upper <= max) {
        into.extend(items);
    } else {
        into.extend(items.take(max));
    }
    into.len() - before
}

/// A queue of at most `size` items, allocated once. See the module docs.
pub(crate) struct Window<T> {
    /// Delivered, not yet taken; never more than `size` (room for up to
    /// [`PREALLOCATED`] allocated at once, grown beyond that as items arrive).
    items: VecDeque<T>,
    /// The credit the window stands for.
    size: usize,
    /// Delivered and not yet released (queued, or taken and still held by the
    /// consumer).
    held: usize,
}

impl<T> std::fmt::Debug for Window<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Window")
            .field("queued", &self.items.len())
            .field("held", &self.held)
            .field("size", &self.size)
            .finish()
    }
}

impl<T> Window<T> {
    /// An empty window of `size` items (already [`validate`]d).
    pub(crate) fn new(size: usize) -> Self {
        Window {
            items: VecDeque::with_capacity(size.min(PREALLOCATED)),
            size,
            held: 0,
        }
    }

    /// The oldest queued item, still counted as held until [`release`](Self::release).
    #[cfg(all(test, not(weir_loom)))]
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<T> {
        self.items.pop_front()
    }

    /// The oldest queued item, released at once (for consumers that replenish as they
    /// take items out).
    #[cfg(any(all(test, not(weir_loom)), feature = "futures"))]
    #[inline]
    pub(crate) fn pop_released(&mut self) -> Option<T> {
        let item = self.items.pop_front()?;
        self.held -= 1;
        Some(item)
    }

    /// Queue the items [`gather`]ed into `batch` (the delivery, pulled out of its
    /// iterator before the caller took its lock), leaving `batch` empty. Into an
    /// empty queue the two buffers trade places (no copy; `batch` must have been
    /// allocated like the queue, see [`Window::spare`], so that neither shrinks).
    /// `Err` when they do not all fit: the upstream broke rule 1.1; what fits is
    /// queued and the rest stays in `batch`, for the caller to drop outside its
    /// lock. Returns how many were queued.
    pub(crate) fn push_gathered(&mut self, batch: &mut VecDeque<T>) -> Result<usize, ()> {
        let (n, room) = (batch.len(), self.size - self.held);
        if n > room {
            self.items.extend(batch.drain(..room));
            self.held += room;
            return Err(());
        }
        if self.items.is_empty() && batch.capacity() >= self.items.capacity() {
            std::mem::swap(&mut self.items, batch);
        } else {
            // `append` moves the items as two slices; `extend` from a drain
            // moved them one by one.
            self.items.append(batch);
        }
        self.held += n;
        Ok(n)
    }

    /// An empty buffer allocated as this window's queue is: the one a subscriber
    /// [`gather`]s its deliveries into.
    pub(crate) fn spare(&self) -> VecDeque<T> {
        VecDeque::with_capacity(self.size.min(PREALLOCATED))
    }

    /// The window's size (its credit).
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// Move up to `max` of the oldest queued items to the empty `out`, each still
    /// counted as held until [`release`](Self::release) (the consumer releases what
    /// it requests again); returns how many moved.
    ///
    /// Taking everything queued (the usual case of a drain that keeps up) costs no
    /// copy: the queue and `out` trade buffers, so `out` needs room for the whole
    /// window (the caller allocates it once with the window's size, and the buffers
    /// only ever change places). Taking an eighth or more trades too, and the rest
    /// moves back in one bulk move (at most seven items per item taken: measured
    /// several times cheaper per item than moving the part out one by one). Less,
    /// or anything into an `out` with less room (a window above [`PREALLOCATED`]
    /// items), is moved item by item. (Moving every part item by item out of a
    /// drain, and queueing behind held items the same way, made a `merge` whose
    /// downstream asked for 255 at a time five times slower than one asking for 256.)
    pub(crate) fn pop_into(&mut self, out: &mut Vec<T>, max: usize) -> usize {
        debug_assert!(out.is_empty(), "pop_into: the spare buffer must be empty");
        let n = max.min(self.items.len());
        if n.saturating_mul(8) >= self.items.len() && out.capacity() >= self.size {
            // O(1) both ways (`Vec::from` moves the items to the buffer's front when
            // the ring wrapped, in place); neither conversion allocates.
            let spare = VecDeque::from(std::mem::take(out));
            *out = Vec::from(std::mem::replace(&mut self.items, spare));
            // An eighth or more was asked for: the rest goes back in one bulk move.
            self.items.extend(out.drain(n..));
        } else {
            out.extend((0..n).map_while(|_| self.items.pop_front()));
        }
        n
    }

    /// Move every queued item to `out`, each still counted as held until
    /// [`release`](Self::release); returns how many moved.
    ///
    /// Into an empty `out` the two buffers trade places (no copy; once both have
    /// grown to their working size, no allocation either).
    pub(crate) fn take_queued(&mut self, out: &mut VecDeque<T>) -> usize {
        let n = self.items.len();
        if out.is_empty() {
            std::mem::swap(&mut self.items, out);
        } else {
            out.extend(self.items.drain(..));
        }
        n
    }

    /// The consumer is done with `n` items taken with
    /// [`take_queued`](Self::take_queued) (or `pop`): upstream may
    /// deliver `n` more. Call before requesting them.
    pub(crate) fn release(&mut self, n: usize) {
        debug_assert!(n <= self.held, "released more than was delivered");
        self.held -= n.min(self.held);
    }

    /// How many items are queued.
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// True when nothing is queued.
    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Take every queued item out (to drop outside the caller's lock); they stay
    /// counted as held (the window is over).
    pub(crate) fn take_all(&mut self) -> VecDeque<T> {
        std::mem::take(&mut self.items)
    }
}

#[cfg(all(test, not(weir_loom)))]
mod tests {
    use super::*;

    /// Gather `items` and queue them; `Err` with the first item that did not fit.
    fn push<T>(window: &mut Window<T>, items: impl Iterator<Item = T>) -> Result<usize, T> {
        let mut batch = window.spare();
        gather(&mut batch, items, window.size() + 1);
        match window.push_gathered(&mut batch) {
            Ok(n) => Ok(n),
            Err(()) => Err(batch.pop_front().expect("what did not fit")),
        }
    }

    #[test]
    fn push_gathered_into_an_empty_window_trades_buffers() {
        let mut window = Window::new(4);
        let mut batch = window.spare();
        assert_eq!(gather(&mut batch, 0..10, 3), 3, "at most `max` gathered");
        let gathered = batch.as_slices().0.as_ptr();
        assert_eq!(window.push_gathered(&mut batch), Ok(3));
        assert!(
            batch.is_empty() && batch.capacity() >= 3,
            "the window's buffer came back"
        );
        let mut out = Vec::with_capacity(4);
        assert_eq!(window.pop_into(&mut out, usize::MAX), 3);
        assert_eq!(out, [0, 1, 2]);
        assert_eq!(
            out.as_ptr(),
            gathered,
            "the gathered buffer was queued whole"
        );
        // Into a window that holds items, they are moved behind them.
        out.clear();
        window.release(3);
        assert_eq!(push(&mut window, 3..4), Ok(1));
        assert_eq!(push(&mut window, 4..7), Ok(3), "behind the queued item");
        assert_eq!(push(&mut window, 7..8), Err(7), "full");
        assert_eq!(window.pop_into(&mut out, usize::MAX), 4);
        assert_eq!(out, [3, 4, 5, 6]);
    }

    #[test]
    fn holds_the_credit_and_refuses_more() {
        let mut window = Window::new(3);
        assert_eq!(
            push(&mut window, 0..5),
            Err(3),
            "the first item that did not fit"
        );
        assert_eq!(window.pop(), Some(0));
        assert_eq!(
            push(&mut window, 10..11),
            Err(10),
            "popped but not released"
        );
        window.release(1);
        assert_eq!(push(&mut window, 10..11), Ok(1));
        assert_eq!(window.pop_released(), Some(1));
        let mut out = Vec::new();
        assert_eq!(window.pop_into(&mut out, 5), 2);
        assert_eq!(out, [2, 10]);
        assert!(window.is_empty());
        window.release(window.held);
        assert_eq!(push(&mut window, 0..3), Ok(3));
    }

    #[test]
    fn pop_into_trades_buffers_when_taking_everything_and_keeps_the_order() {
        let mut window = Window::new(4);
        assert_eq!(push(&mut window, 0..4), Ok(4));
        assert_eq!(window.pop_released(), Some(0));
        assert_eq!(window.pop_released(), Some(1));
        // The ring wraps: 4 and 5 go to the front of the buffer.
        assert_eq!(push(&mut window, 4..6), Ok(2));
        let mut out = Vec::with_capacity(4);
        let spare = out.as_ptr();
        assert_eq!(window.pop_into(&mut out, usize::MAX), 4);
        assert_eq!(out, [2, 3, 4, 5]);
        assert_ne!(out.as_ptr(), spare, "the window's buffer came out whole");
        assert!(out.capacity() >= 4);
        assert!(window.is_empty());
        // Taken, still held until released: nothing fits.
        assert_eq!(push(&mut window, 6..7), Err(6));
        window.release(4);
        // The spare went in: the window takes a whole window again.
        assert_eq!(push(&mut window, 6..11), Err(10));
        out.clear();
        // A part is moved, the rest stays queued in order.
        assert_eq!(window.pop_into(&mut out, 3), 3);
        assert_eq!(out, [6, 7, 8]);
        out.clear();
        assert_eq!(window.pop_into(&mut out, 3), 1);
        assert_eq!(out, [9]);
    }

    proptest::proptest! {
        /// Any sequence of gathered pushes and takes of any size (whole, an eighth
        /// or more, less) gives the items of a plain queue, in order, with
        /// the same counts; neither buffer grows past its first allocation.
        #[test]
        fn pop_into_and_push_gathered_match_a_plain_queue(
            size in 1usize..300,
            steps in proptest::collection::vec((proptest::bool::ANY, 0usize..320), 1..60),
        ) {
            let mut window = Window::new(size);
            let mut model = VecDeque::new();
            let mut out = Vec::with_capacity(size.min(PREALLOCATED));
            let (mut next, mut held) = (0u64, 0usize);
            for (is_push, n) in steps {
                if is_push {
                    let fits = n.min(size - held);
                    proptest::prop_assert_eq!(push(&mut window, next..next + fits as u64), Ok(fits));
                    model.extend(next..next + fits as u64);
                    next += fits as u64;
                    held += fits;
                } else {
                    let taken = window.pop_into(&mut out, n);
                    let expected: Vec<u64> = model.drain(..n.min(model.len())).collect();
                    proptest::prop_assert_eq!(taken, expected.len());
                    proptest::prop_assert_eq!(&out, &expected);
                    // Taken items stay held until released (here: at once).
                    window.release(taken);
                    held -= taken;
                    out.clear();
                }
                proptest::prop_assert_eq!(window.len(), model.len());
                proptest::prop_assert!(out.capacity() <= size.max(PREALLOCATED).max(4));
            }
        }
    }

    #[test]
    fn take_queued_trades_buffers_and_keeps_the_items_held_until_released() {
        let mut window = Window::new(4);
        assert_eq!(push(&mut window, 0..3), Ok(3));
        let mut out = VecDeque::new();
        assert_eq!(window.take_queued(&mut out), 3);
        assert_eq!(out, [0, 1, 2]);
        assert!(window.is_empty());
        // Taken but held: one more fits, not two.
        assert_eq!(push(&mut window, 3..5), Err(4));
        window.release(3);
        assert_eq!(push(&mut window, 5..8), Ok(3));
        // Into a non-empty `out`: appended in order.
        assert_eq!(window.take_queued(&mut out), 4);
        assert!(out.iter().copied().eq([0, 1, 2, 3, 5, 6, 7]));
    }

    #[test]
    fn a_large_window_grows_as_items_arrive_and_still_refuses_past_its_size() {
        let size = PREALLOCATED + 10;
        let mut window = Window::new(size);
        assert!(
            window.items.capacity() < size,
            "allocated up to PREALLOCATED"
        );
        assert_eq!(push(&mut window, 0..size), Ok(size));
        assert_eq!(
            push(&mut window, size..size + 1),
            Err(size),
            "the credit is the bound"
        );
        // A spare smaller than the window: moved item by item, in order.
        let mut out = Vec::with_capacity(PREALLOCATED);
        assert_eq!(window.pop_into(&mut out, PREALLOCATED), PREALLOCATED);
        assert!(out.iter().copied().eq(0..PREALLOCATED));
        out.clear();
        assert_eq!(window.pop_into(&mut out, PREALLOCATED), 10);
        assert!(out.iter().copied().eq(PREALLOCATED..size));
        assert!(window.is_empty());
    }

    #[test]
    #[should_panic(expected = "into_stream prefetch must be in 1..=2^30 (got 0)")]
    fn refuses_zero() {
        validate("into_stream prefetch", 0);
    }

    #[test]
    fn the_rule_1_1_error_names_the_stage_and_the_rule() {
        let error = over_delivered("zip");
        assert_eq!(error.rule(), Some("1.1"));
        assert!(error.message().starts_with("zip: "), "{error}");
    }
}
