//! A bounded, lock-free, single-producer/single-consumer ring: the hand-off of an async
//! boundary (`publish_on`).
//!
//! # Algorithm
//!
//! `capacity` slots and two monotonically increasing positions (wrapping `usize`):
//! `tail`, the next position the producer writes, and `head`, the next position the
//! consumer reads. The ring holds `tail - head` items, never more than `capacity`, in
//! consecutive slots (wrapping at the end of the slots). Each handle keeps the *slot*
//! of its position beside the position, advanced with it: the slot is not derived as
//! `position % capacity`, which would go wrong where the positions wrap at
//! `usize::MAX` (a capacity that is not a power of two does not divide 2^64, nor 2^32
//! on a 32-bit target, where a busy ring gets there). Each position is written by one
//! side only, and each side keeps its own position in its handle plus a *cached* copy
//! of the other side's:
//!
//! * The producer writes a run of slots, then publishes the new `tail` with one
//!   `Release` store. It reloads `head` (`Acquire`) only when its cached copy says the
//!   ring is full.
//! * The consumer reloads `tail` (`Acquire`) when it looks for work, reads a run of
//!   slots, then publishes the new `head` with one `Release` store.
//!
//! So a batch of `n` items costs one store of each index and, in the common case, no
//! access to a cache line the other side writes, except the slots themselves. The
//! two indices sit on separate 128-byte-aligned lines (two lines: adjacent-line
//! prefetchers pull pairs) so the sides never false-share.
//!
//! # Why this is the crate's one unsafe module
//!
//! Publishing a batch with one index store means the slots between the old and the
//! new `tail` are written *before* the consumer may read them and without a lock or a
//! per-slot flag: the only thing that hands a slot from one thread to the other is
//! the index. Safe Rust cannot express "this slot belongs to the producer until the
//! tail passes it" (a `Mutex` or an atomic per slot would reintroduce the per-item
//! synchronisation this ring exists to avoid), so the slots are `UnsafeCell`s of
//! `MaybeUninit<T>` and the index protocol above is the proof obligation, stated at
//! every `unsafe` block.
//!
//! Neither loop stores its position per item. The consumer moves its `head` past a
//! whole batch when it takes the batch, and the producer counts in a local that a
//! guard adds to its `tail` when the write ends, also when the item iterator panics
//! (a store per item would stay in the loop: the compiler must assume the slot
//! accesses, or an iterator that may unwind, observe it).
//!
//! Items left in the ring when both handles are gone are dropped exactly once by the
//! ring's `Drop`; items a consumer batch skips (its iterator dropped early) are
//! dropped by the batch. A batch leaked with `mem::forget` leaks its unread items:
//! they are behind the consumer's `head`, which the consumer's `Drop` publishes, so
//! the ring never reads them again.
//!
//! # Loom
//!
//! Atomics and cells come from `crate::loom`, so `RUSTFLAGS="--cfg weir_loom"` checks
//! the protocol; the models are at the end of this file.

use std::mem::MaybeUninit;

use crate::loom::{Arc, AtomicUsize, Ordering, Padded, UnsafeCell};

/// The shared part: two indices and the slots.
struct Ring<T> {
    /// Next position the consumer reads; written by the consumer only.
    head: Padded<AtomicUsize>,
    /// Next position the producer writes; written by the producer only.
    tail: Padded<AtomicUsize>,
    /// `capacity` slots: the `tail - head` items from the consumer's head slot on.
    slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
    /// The consumer's head slot, stored by its `Drop` for the ring's own (positions
    /// alone do not give slots: see the module docs).
    final_head_slot: AtomicUsize,
}

// SAFETY: the ring moves `T`s from the producer's thread to the consumer's, which needs
// `T: Send`. Shared access to a slot never happens: the index protocol (module docs)
// gives each slot to exactly one side at a time, and the Release/Acquire pairs on
// `head`/`tail` order the hand-over, so `&Ring<T>` may be used from both threads.
unsafe impl<T: Send> Send for Ring<T> {}
// SAFETY: as for `Send`: all cross-thread access to slots is ordered by the indices.
unsafe impl<T: Send> Sync for Ring<T> {}

impl<T> Ring<T> {
    #[inline(always)]
    fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// The first slot's contents, as a pointer valid for all `capacity` slots: both
    /// cells and `MaybeUninit` are `repr(transparent)`, so the slots are laid out as
    /// `[T]`, and the pointer comes from the whole slice (it may reach every slot).
    /// Writing through it is allowed because every byte is inside a cell. What may be
    /// read or written, and when, is the index protocol's to say (module docs).
    #[cfg(not(weir_loom))]
    #[inline(always)]
    fn slots_ptr(&self) -> *mut T {
        self.slots.as_ptr().cast::<T>().cast_mut()
    }

    /// In debug builds, panic unless `index` is a slot (`put` and `take` do not
    /// check it otherwise).
    #[inline(always)]
    fn debug_check(&self, index: usize) {
        debug_assert!(
            index < self.capacity(),
            "slot {index} of {}",
            self.capacity()
        );
    }

    /// Write `item` into slot `index` without a bounds check (a loom build checks).
    ///
    /// # Safety
    ///
    /// `index < capacity`, and the index protocol gives the slot to the producer: the
    /// consumer has moved out of it and will not read it before a tail past it is
    /// published. The old contents (moved out) are not dropped.
    #[inline(always)]
    unsafe fn put(&self, index: usize, item: T) {
        self.debug_check(index);
        #[cfg(not(weir_loom))]
        // SAFETY: `index` is a slot (the caller's promise), so the pointer is in the
        // slice `slots_ptr` reaches; the slot is the producer's to write.
        unsafe {
            self.slots_ptr().add(index).write(item);
        }
        #[cfg(weir_loom)]
        self.slots[index].with_mut(|slot| {
            // SAFETY: the slot is the producer's to write (the caller's promise).
            unsafe { (*slot).write(item) };
        });
    }

    /// Move the item out of slot `index` without a bounds check (a loom build checks).
    ///
    /// # Safety
    ///
    /// `index < capacity`, the slot holds an initialised item whose publication the
    /// consumer has Acquired, and the consumer's head moves past it before anything
    /// reads the slot again (so it is moved out once).
    #[inline(always)]
    unsafe fn take(&self, index: usize) -> T {
        self.debug_check(index);
        #[cfg(not(weir_loom))]
        // SAFETY: `index` is a slot (the caller's promise), so the pointer is in the
        // slice `slots_ptr` reaches; the item is initialised, visible and read once.
        unsafe {
            self.slots_ptr().add(index).read()
        }
        #[cfg(weir_loom)]
        self.slots[index].with(|slot| {
            // SAFETY: the item is initialised, visible and read once (the caller's
            // promise).
            unsafe { (*slot).assume_init_read() }
        })
    }
}

/// The length of the first of the one or two runs of contiguous slots that `n`
/// consecutive items from slot `from` occupy in a ring of `capacity` slots; the
/// second run, `n` less the first's length, starts at slot 0.
#[inline(always)]
fn first_run(from: usize, n: usize, capacity: usize) -> usize {
    n.min(capacity - from)
}

/// The slot `n <= capacity` slots after slot `from` (no division).
#[inline(always)]
fn slot_after(from: usize, n: usize, capacity: usize) -> usize {
    debug_assert!(from < capacity && n <= capacity);
    let slot = from + n;
    if slot >= capacity {
        slot - capacity
    } else {
        slot
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        // Acquire (both): pairs with the last Release store of each side, so every
        // item written is visible and every item read is known to be gone. (Both
        // handles are gone by now; the Arc's own synchronisation orders this too.)
        let mut position = self.head.load(Ordering::Acquire);
        let tail = self.tail.load(Ordering::Acquire);
        // Relaxed: stored before the consumer's Release of `head`, Acquired above.
        let mut index = self.final_head_slot.load(Ordering::Relaxed);
        let capacity = self.capacity();
        while position != tail {
            let item = self.slots[index].with_mut(|slot| {
                // SAFETY: `head <= position < tail`: the slot holds an initialised item
                // that no consumer read (the consumer's `Drop` published its own head,
                // which is past every item it took, also those of a leaked batch);
                // `&mut self` means nobody else can touch it, and
                // it is moved out once because `position` moves on right after.
                unsafe { (*slot).assume_init_read() }
            });
            position = position.wrapping_add(1);
            index = slot_after(index, 1, capacity);
            drop_contained(item);
        }
    }
}

/// Drop `item`, containing a panic in its `Drop` (logged): the ring's clean-up must
/// finish, whatever an item does, or its positions would no longer say which slots
/// hold items.
pub(super) fn drop_contained<T>(item: T) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(item))).is_err() {
        tracing::error!("an item's Drop panicked while a queue released it; contained");
    }
}

/// Create a ring of `capacity` slots; returns its two ends.
///
/// # Panics
///
/// If `capacity` is not in `1..=MAX_CAPACITY`.
pub(crate) fn ring<T>(capacity: usize) -> (Producer<T>, Consumer<T>) {
    crate::stage::window::validate("spsc ring capacity", capacity as u64);
    let slots = (0..capacity)
        .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
        .collect::<Vec<_>>()
        .into_boxed_slice();
    let ring = Arc::new(Ring {
        head: Padded::new(AtomicUsize::new(0)),
        tail: Padded::new(AtomicUsize::new(0)),
        slots,
        final_head_slot: AtomicUsize::new(0),
    });
    (
        Producer {
            ring: ring.clone(),
            tail: 0,
            tail_slot: 0,
            published: 0,
            cached_head: 0,
        },
        Consumer {
            ring,
            head: 0,
            head_slot: 0,
            cached_tail: 0,
        },
    )
}

/// The writing end. Not `Clone`: there is one producer.
pub(crate) struct Producer<T> {
    ring: Arc<Ring<T>>,
    /// Next position to write (ahead of `published` while a batch is being written).
    tail: usize,
    /// The slot of `tail`.
    tail_slot: usize,
    /// The tail the consumer can see.
    published: usize,
    /// The consumer's head as last read; never ahead of the real one.
    cached_head: usize,
}

impl<T> std::fmt::Debug for Producer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("capacity", &self.ring.capacity())
            .field("tail", &self.tail)
            .finish_non_exhaustive()
    }
}

impl<T> Producer<T> {
    /// The number of slots.
    pub(crate) fn capacity(&self) -> usize {
        self.ring.capacity()
    }

    /// Free slots, as far as the producer knows (re-reads the consumer's head only
    /// when the cached view says the ring is full).
    pub(crate) fn free(&mut self) -> usize {
        let capacity = self.capacity();
        let mut free = capacity - self.tail.wrapping_sub(self.cached_head);
        if free == 0 {
            // Acquire: pairs with the consumer's Release store of `head`, so the slots
            // it freed have been read (moved out) before we overwrite them.
            self.cached_head = self.ring.head.load(Ordering::Acquire);
            free = capacity - self.tail.wrapping_sub(self.cached_head);
        }
        free
    }

    /// True when `n` items fit now (re-reads the consumer's head when the cached view
    /// says they do not).
    pub(crate) fn has_room_for(&mut self, n: usize) -> bool {
        let capacity = self.capacity();
        if capacity - self.tail.wrapping_sub(self.cached_head) >= n {
            return true;
        }
        // Acquire: as in `free`.
        self.cached_head = self.ring.head.load(Ordering::Acquire);
        capacity - self.tail.wrapping_sub(self.cached_head) >= n
    }

    /// Write items from `items` while there is room, without publishing them; returns
    /// how many were written. Items that do not fit stay in `items` (the iterator is
    /// not advanced past the last item written). Call [`publish`](Self::publish) to
    /// hand the run to the consumer.
    #[inline]
    pub(crate) fn write<I: Iterator<Item = T>>(&mut self, items: &mut I) -> usize {
        let capacity = self.capacity();
        let mut free = self.free();
        let mut index = self.tail_slot;
        // The loop counts in a local that `Advance` adds to `tail` when it goes out of
        // scope, also when `items` panics: `tail` stays exact (the items written so far
        // are published by `publish` or `Drop`) without a store per item, which the
        // compiler would have to keep because the iterator's code may unwind.
        let mut advance = Advance {
            tail: &mut self.tail,
            tail_slot: &mut self.tail_slot,
            capacity,
            written: 0,
        };
        'runs: loop {
            if free == 0 {
                // Acquire: as in `free`.
                self.cached_head = self.ring.head.load(Ordering::Acquire);
                let tail = advance.tail.wrapping_add(advance.written);
                free = capacity - tail.wrapping_sub(self.cached_head);
                if free == 0 {
                    break;
                }
            }
            // The free slots from `index` on, up to the wrap: the loop below checks
            // nothing else per item (no bounds check, no wrap check).
            let run = free.min(capacity - index);
            for _ in 0..run {
                let Some(item) = items.next() else {
                    break 'runs;
                };
                // SAFETY: position `tail + written` is in `[head + capacity - free,
                // head + capacity)` for the head we last read: the consumer has
                // finished with (moved out of) this slot, Acquire-ordered in `free`,
                // and will not read it until we publish a tail past it. `index` is a
                // slot: the run stops at the last one.
                unsafe { self.ring.put(index, item) };
                advance.written += 1;
                index += 1;
            }
            free -= run;
            if index == capacity {
                index = 0;
            }
        }
        advance.written
    }

    /// How many items the producer has written since the ring was made (wrapping):
    /// the position one past the last written item.
    #[inline]
    pub(crate) fn position(&self) -> usize {
        self.tail
    }

    /// Move `tail` and its slot past `n <= capacity` items just written (not published).
    #[inline(always)]
    fn advance_tail(&mut self, n: usize) {
        self.tail = self.tail.wrapping_add(n);
        self.tail_slot = slot_after(self.tail_slot, n, self.capacity());
    }

    /// Make every written item visible to the consumer: one `Release` store.
    #[inline]
    pub(crate) fn publish(&mut self) {
        if self.published != self.tail {
            // Release: pairs with the consumer's Acquire load of `tail`; the slot
            // writes before this store are visible to it.
            self.ring.tail.store(self.tail, Ordering::Release);
            self.published = self.tail;
        }
    }

    /// Write and publish as many items from `items` as fit; returns how many. (The
    /// crate writes with `write` + `publish`, or moves a `Vec`'s items with
    /// `push_from`; the tests and loom builds use this form.)
    #[cfg(any(test, weir_loom))]
    #[inline]
    pub(crate) fn push_iter<I: Iterator<Item = T>>(&mut self, items: &mut I) -> usize {
        let n = self.write(items);
        self.publish();
        n
    }

    /// Move as many items from the front of `items` into the ring as fit and publish
    /// them; returns how many (the rest stay in `items`, in order). The same as
    /// `push_iter(&mut items.drain(..n))`, with one copy per run of slots instead of
    /// a loop per item.
    #[inline]
    pub(crate) fn push_from(&mut self, items: &mut Vec<T>) -> usize {
        let n = self.free().min(items.len());
        if n == 0 {
            return 0;
        }
        #[cfg(weir_loom)]
        {
            let pushed = self.push_iter(&mut items.drain(..n));
            debug_assert_eq!(pushed, n, "free slots take the items");
        }
        #[cfg(not(weir_loom))]
        {
            let index = self.tail_slot;
            let first = first_run(index, n, self.capacity());
            let slots = self.ring.slots_ptr();
            let rest = items.len() - n;
            let source = items.as_mut_ptr();
            // SAFETY: positions `tail .. tail + n` are free slots (`n <= free()`, whose
            // head was Acquired): the consumer has moved out of them and will not read
            // them before the Release in `publish` below, so we may overwrite them
            // (the old contents were moved out; nothing is dropped). The two runs lie
            // inside the slots (`first_run`), and `source` is another allocation holding
            // `items.len() >= n` initialised items. The first `n` are moved out
            // bitwise and forgotten by `items` (its length is set to the `rest` moved
            // down to the front), so each item is owned exactly once; nothing between
            // the copies and `set_len` can panic.
            unsafe {
                std::ptr::copy_nonoverlapping(source, slots.add(index), first);
                std::ptr::copy_nonoverlapping(source.add(first), slots, n - first);
                std::ptr::copy(source.add(n), source, rest);
                items.set_len(rest);
            }
            self.advance_tail(n);
            self.publish();
        }
        n
    }

    /// Push one item, or hand it back when the ring is full.
    pub(crate) fn push(&mut self, item: T) -> Result<(), T> {
        if self.free() == 0 {
            return Err(item);
        }
        // SAFETY: `free() > 0`, whose head was Acquired: the slot of position `tail`
        // is free (the consumer moved out of it and will not read it before the
        // Release in `publish` below), and `tail_slot` is its slot.
        unsafe { self.ring.put(self.tail_slot, item) };
        self.advance_tail(1);
        self.publish();
        Ok(())
    }
}

/// Adds what [`Producer::write`] wrote to the producer's `tail` (and its slot) when
/// dropped (Rust's `Vec` does the same for its length while it extends).
struct Advance<'a> {
    tail: &'a mut usize,
    tail_slot: &'a mut usize,
    capacity: usize,
    written: usize,
}

impl Drop for Advance<'_> {
    #[inline]
    fn drop(&mut self) {
        *self.tail = self.tail.wrapping_add(self.written);
        *self.tail_slot = slot_after(*self.tail_slot, self.written, self.capacity);
    }
}

impl<T> Drop for Producer<T> {
    fn drop(&mut self) {
        // Written items become the consumer's (or the ring's, to drop).
        self.publish();
    }
}

/// The reading end. Not `Clone`: there is one consumer.
pub(crate) struct Consumer<T> {
    ring: Arc<Ring<T>>,
    /// Next position to read.
    head: usize,
    /// The slot of `head`.
    head_slot: usize,
    /// The producer's tail as last read; never ahead of the real one.
    cached_tail: usize,
}

impl<T> std::fmt::Debug for Consumer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("capacity", &self.ring.capacity())
            .field("head", &self.head)
            .finish_non_exhaustive()
    }
}

impl<T> Drop for Consumer<T> {
    fn drop(&mut self) {
        // A batch leaked with `mem::forget` moved `head` past its items but never
        // published it; publish it now, or the ring's own clean-up would read those
        // positions again. Release: pairs with the Acquire load in `Ring::drop` (and
        // with the producer's in `free`, as in `PopBatch::drop`). The head's slot goes
        // first (Relaxed: this Release publishes it too).
        self.ring
            .final_head_slot
            .store(self.head_slot, Ordering::Relaxed);
        self.ring.head.store(self.head, Ordering::Release);
    }
}

impl<T> Consumer<T> {
    /// The number of slots.
    pub(crate) fn capacity(&self) -> usize {
        self.ring.capacity()
    }

    /// Move `head` and its slot past `n <= capacity` items taken (not published).
    #[inline(always)]
    fn advance_head(&mut self, n: usize) {
        self.head = self.head.wrapping_add(n);
        self.head_slot = slot_after(self.head_slot, n, self.capacity());
    }

    /// Re-read the producer's tail and return how many items are readable.
    #[inline]
    pub(crate) fn available(&mut self) -> usize {
        // Acquire: pairs with the producer's Release store in `publish`; the items
        // of every position below the tail we read are visible.
        self.cached_tail = self.ring.tail.load(Ordering::Acquire);
        self.cached_tail.wrapping_sub(self.head)
    }

    /// Readable items as of the last [`available`](Self::available) (no shared access).
    #[inline]
    pub(crate) fn cached(&self) -> usize {
        self.cached_tail.wrapping_sub(self.head)
    }

    /// How many items the consumer has read since the ring was made (wrapping).
    #[inline]
    pub(crate) fn position(&self) -> usize {
        self.head
    }

    /// How many items the producer had published at the last
    /// [`available`](Self::available) (wrapping).
    #[inline]
    pub(crate) fn seen_tail(&self) -> usize {
        self.cached_tail
    }

    /// Take up to `max` of the items found by the last [`available`](Self::available),
    /// oldest first, as an iterator. The new head is published once, when the batch
    /// is dropped; items of the batch that were not iterated are dropped then.
    #[inline]
    pub(crate) fn pop_batch(&mut self, max: usize) -> PopBatch<'_, T> {
        let remaining = self.cached().min(max);
        let index = self.head_slot;
        // The head moves past the whole batch now, not item by item as it is read: the
        // loop then writes no memory of its own (a store per item that the compiler
        // must keep, because the slot reads may alias it), and a batch that is leaked
        // instead of dropped leaks its unread items rather than leaving them to be
        // read a second time.
        self.advance_head(remaining);
        let run = first_run(index, remaining, self.capacity());
        PopBatch {
            consumer: self,
            index,
            run,
            after: remaining - run,
        }
    }

    /// Move up to `max` of the items found by the last [`available`](Self::available)
    /// to the end of `out`, oldest first, and publish the new head; returns how many.
    /// The same as `out.extend(self.pop_batch(n))`, with one copy per run of slots
    /// instead of a loop per item.
    #[inline]
    pub(crate) fn pop_into(&mut self, max: usize, out: &mut Vec<T>) -> usize {
        let n = self.cached().min(max);
        if n == 0 {
            return 0;
        }
        #[cfg(weir_loom)]
        out.extend(self.pop_batch(n));
        #[cfg(not(weir_loom))]
        {
            out.reserve(n);
            let index = self.head_slot;
            let first = first_run(index, n, self.capacity());
            let slots = self.ring.slots_ptr();
            let len = out.len();
            // SAFETY: positions `head .. head + n` are below `cached_tail`, a tail
            // Acquired in `available`: their items are initialised and visible, and
            // the producer will not write those slots before the Release of a head
            // past them below. The two runs lie inside the slots (`first_run`); `out` has
            // room for `n` more (reserved) in another allocation. The items are moved
            // out bitwise, and the head moves past them before anything reads the
            // ring again, so each is owned exactly once (by `out`); nothing between
            // the copies and `set_len` can panic.
            unsafe {
                let target = out.as_mut_ptr().add(len);
                std::ptr::copy_nonoverlapping(slots.add(index), target, first);
                std::ptr::copy_nonoverlapping(slots, target.add(first), n - first);
                out.set_len(len + n);
            }
            self.advance_head(n);
            // Release: pairs with the producer's Acquire load of `head` in `free`; our
            // reads of the slots happen before it may overwrite them.
            self.ring.head.store(self.head, Ordering::Release);
        }
        n
    }

    /// A copy of the oldest item, if any, without taking it (re-reads the tail when the
    /// cached view is empty).
    pub(crate) fn peek(&mut self) -> Option<T>
    where
        T: Copy,
    {
        if self.cached() == 0 && self.available() == 0 {
            return None;
        }
        let index = self.head_slot;
        let item = self.ring.slots[index].with(|slot| {
            // SAFETY: `head < cached_tail` (checked above), a tail Acquired in
            // `available`: the item is initialised, visible, and the producer will not
            // write the slot before we publish a head past it. `T: Copy`, so reading
            // it without advancing `head` duplicates nothing that needs dropping.
            unsafe { (*slot).assume_init_read() }
        });
        Some(item)
    }

    /// Take the oldest item, if any (re-reads the tail when the cached view is empty).
    pub(crate) fn pop(&mut self) -> Option<T> {
        if self.cached() == 0 && self.available() == 0 {
            return None;
        }
        self.pop_batch(1).next()
    }

    /// A [`Watch`] on this ring.
    pub(crate) fn watch(&self) -> Watch<T> {
        Watch {
            ring: self.ring.clone(),
        }
    }

    /// Drop every readable item; returns how many.
    pub(crate) fn clear(&mut self) -> usize {
        let n = self.available();
        drop(self.pop_batch(n));
        n
    }
}

/// A read-only view of a ring's fill, for whoever decides whether the consumer has
/// work (a drain lingering for its next batch) without owning the reading end.
pub(crate) struct Watch<T> {
    ring: Arc<Ring<T>>,
}

impl<T> Watch<T> {
    /// True when the producer has published items the consumer has not taken. A hint:
    /// the consumer re-reads the tail (`Acquire`) before it reads any slot.
    #[inline]
    pub(crate) fn has_items(&self) -> bool {
        // Relaxed: a hint that only decides whether to run a pass; the pass itself
        // reads the tail with `Acquire` in `Consumer::available`.
        self.ring.tail.load(Ordering::Relaxed) != self.ring.head.load(Ordering::Relaxed)
    }

    /// Items published and not yet taken, now (a statistic, at most the capacity).
    pub(crate) fn len(&self) -> usize {
        // Acquire: pairs with the consumer's Release store of `head`, after which
        // it had read a tail at least this far; so the tail read next is too, and
        // the difference does not wrap.
        let head = self.ring.head.load(Ordering::Acquire);
        // Relaxed: any value from there on will do for a statistic.
        let tail = self.ring.tail.load(Ordering::Relaxed);
        tail.wrapping_sub(head).min(self.ring.capacity())
    }
}

/// A run of items taken by [`Consumer::pop_batch`]; see there.
pub(crate) struct PopBatch<'a, T> {
    consumer: &'a mut Consumer<T>,
    /// Slot of the next item (`capacity` after a run that ended at the last slot,
    /// until `next` moves on to slot 0).
    index: usize,
    /// Unread items in contiguous slots from `index` on. The loop counts these down
    /// and checks nothing else per item: no bounds check, no wrap check.
    run: usize,
    /// Unread items after the run, from slot 0 (the batch wrapped).
    after: usize,
}

impl<T> std::fmt::Debug for PopBatch<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PopBatch")
            .field("remaining", &(self.run + self.after))
            .finish_non_exhaustive()
    }
}

impl<T> Iterator for PopBatch<'_, T> {
    type Item = T;

    #[inline]
    fn next(&mut self) -> Option<T> {
        if self.run == 0 {
            if self.after == 0 {
                return None;
            }
            self.index = 0;
            self.run = std::mem::take(&mut self.after);
        }
        // SAFETY: the unread items are the `run + after` positions before
        // `consumer.head`, which is at most `cached_tail`, a tail Acquired in
        // `available`: the item is initialised and visible, and the producer will not
        // write the slot until our Release of a head past it. `index + run` never
        // passes the last slot (`pop_batch` split the batch at the wrap), so `index`
        // is a slot. Moving the item out once is sound because `pop_batch` already
        // moved `head` past the batch and `run` counts down, so no position is read
        // twice.
        let item = unsafe { self.consumer.ring.take(self.index) };
        self.run -= 1;
        self.index += 1;
        Some(item)
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let remaining = self.run + self.after;
        (remaining, Some(remaining))
    }
}

impl<T> ExactSizeIterator for PopBatch<'_, T> {}

impl<T> Drop for PopBatch<'_, T> {
    fn drop(&mut self) {
        // Items the caller left behind are dropped, as `on_next_batch`'s contract says;
        // each one's `Drop` is contained, so the head below is always published (a
        // panic escaping here would leave it stale, and the ring's own clean-up would
        // drop the items read since a second time).
        for item in self.by_ref() {
            drop_contained(item);
        }
        // Release: pairs with the producer's Acquire load of `head` in `free`; our
        // reads of the slots happen before it may overwrite them.
        self.consumer
            .ring
            .head
            .store(self.consumer.head, Ordering::Release);
    }
}

/// A test item that counts its drops in a counter the test (or the model's threads)
/// share.
#[cfg(test)]
struct Tracked(u32, std::sync::Arc<std::sync::atomic::AtomicUsize>);

#[cfg(test)]
impl Drop for Tracked {
    fn drop(&mut self) {
        self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(all(test, not(weir_loom)))]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;

    #[test]
    fn batches_wrap_around_and_keep_order() {
        let (mut tx, mut rx) = ring::<u32>(5);
        let mut next = 0u32;
        let mut seen = Vec::new();
        for round in 0..50 {
            let want = (round % 7) as u32;
            let mut items = next..next + want;
            let pushed = tx.push_iter(&mut items) as u32;
            next += pushed;
            assert_eq!(items.next(), (pushed < want).then_some(next));
            let n = rx.available();
            seen.extend(rx.pop_batch(n.min(round % 4 + 1)));
        }
        while let Some(item) = rx.pop() {
            seen.push(item);
        }
        assert_eq!(seen, (0..next).collect::<Vec<_>>());
    }

    #[test]
    fn runs_of_slots_move_in_order_across_the_wrap() {
        // Every split of a run by the wrap, every partial fit, in a ring of 5.
        let (mut tx, mut rx) = ring::<u32>(5);
        let mut next = 0u32;
        let mut pending: Vec<u32> = Vec::new();
        let mut seen = Vec::new();
        for round in 0..200usize {
            pending.extend(next..next + (round % 7) as u32);
            next += (round % 7) as u32;
            let before = pending.len();
            let free = tx.free();
            let pushed = tx.push_from(&mut pending);
            assert_eq!(pushed, free.min(before), "as many as fit");
            assert_eq!(pending.len(), before - pushed, "the rest stay");
            let n = rx.available();
            let max = round % 4 + 1;
            let popped = rx.pop_into(max, &mut seen);
            assert_eq!(popped, n.min(max));
        }
        while !pending.is_empty() || rx.available() > 0 {
            tx.push_from(&mut pending);
            rx.available();
            rx.pop_into(usize::MAX, &mut seen);
        }
        assert!(pending.is_empty());
        assert_eq!(seen, (0..next).collect::<Vec<_>>(), "each once, in order");
    }

    /// A ring whose positions start at `start` (slots from 0), as if `start` items
    /// had passed through it.
    fn ring_at<T>(capacity: usize, start: usize) -> (Producer<T>, Consumer<T>) {
        let (mut tx, mut rx) = ring(capacity);
        tx.ring.tail.store(start, Ordering::Relaxed);
        tx.ring.head.store(start, Ordering::Relaxed);
        (tx.tail, tx.published, tx.cached_head) = (start, start, start);
        (rx.head, rx.cached_tail) = (start, start);
        (tx, rx)
    }

    #[test]
    fn positions_wrapping_at_usize_max_keep_every_item_once() {
        // 5 does not divide 2^64: slots derived as `position % 5` would jump where the
        // positions wrap. Every way of crossing it: one write, moved runs, single pushes.
        for start in [usize::MAX - 1, usize::MAX - 3, usize::MAX] {
            let (mut tx, mut rx) = ring_at::<u32>(5, start);
            assert_eq!(tx.push_iter(&mut (10..14)), 4);
            assert_eq!(rx.available(), 4);
            let mut seen: Vec<u32> = (0..4).filter_map(|_| rx.pop()).collect();
            let mut more = vec![14, 15, 16];
            assert!(tx.has_room_for(4), "re-reads the head");
            assert_eq!(tx.push_from(&mut more), 3);
            assert_eq!(tx.push(17), Ok(()));
            assert_eq!(rx.available(), 4);
            rx.pop_into(2, &mut seen);
            seen.extend(rx.pop_batch(2));
            assert_eq!(seen, (10..18).collect::<Vec<_>>(), "start {start}");
        }
    }

    #[test]
    fn items_left_across_the_wrap_are_dropped_once() {
        /// Notes its id when dropped.
        struct Noted(u32, Arc<std::sync::Mutex<Vec<u32>>>);
        impl Drop for Noted {
            fn drop(&mut self) {
                self.1.lock().unwrap().push(self.0);
            }
        }
        let dropped = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (mut tx, mut rx) = ring_at::<Noted>(5, usize::MAX - 1);
        let mut items = (0..4).map(|i| Noted(i, dropped.clone()));
        assert_eq!(tx.push_iter(&mut items), 4);
        assert_eq!(rx.available(), 4);
        drop(rx.pop());
        drop((tx, rx));
        let mut dropped = dropped.lock().unwrap().clone();
        dropped.sort_unstable();
        assert_eq!(dropped, vec![0, 1, 2, 3], "each item dropped once");
    }

    #[test]
    fn moved_runs_are_owned_once() {
        let drops = Arc::new(AtomicUsize::new(0));
        let (mut tx, mut rx) = ring::<Tracked>(4);
        let mut items: Vec<Tracked> = (0..6).map(|i| Tracked(i, drops.clone())).collect();
        assert_eq!(tx.push_from(&mut items), 4);
        assert_eq!(items.iter().map(|t| t.0).collect::<Vec<_>>(), vec![4, 5]);
        assert_eq!(drops.load(Ordering::Relaxed), 0, "moved, not dropped");
        let mut out = Vec::new();
        assert_eq!(rx.available(), 4);
        assert_eq!(rx.pop_into(3, &mut out), 3);
        assert_eq!(tx.push_from(&mut items), 2, "wraps into the freed slots");
        assert!(items.is_empty());
        assert_eq!(rx.available(), 3);
        assert_eq!(rx.pop_into(2, &mut out), 2);
        assert_eq!(
            out.iter().map(|t| t.0).collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 4]
        );
        drop(out);
        assert_eq!(drops.load(Ordering::Relaxed), 5);
        drop((tx, rx));
        assert_eq!(drops.load(Ordering::Relaxed), 6, "the one left in the ring");
    }

    #[test]
    fn a_watch_sees_published_items_until_they_are_taken() {
        let (mut tx, mut rx) = ring::<u32>(4);
        let watch = rx.watch();
        assert!(!watch.has_items(), "a new ring is empty");
        assert_eq!(tx.push(1), Ok(()));
        assert!(watch.has_items(), "a pushed item is published");
        assert_eq!(rx.pop(), Some(1));
        assert!(!watch.has_items(), "the consumer took it");
        assert_eq!(tx.write(&mut [2, 3].into_iter()), 2);
        assert!(!watch.has_items(), "written but not yet published");
        tx.publish();
        assert!(watch.has_items());
        assert_eq!(rx.clear(), 2);
        assert!(!watch.has_items());
    }

    #[test]
    fn full_ring_refuses_and_frees_after_pop() {
        let (mut tx, mut rx) = ring::<u32>(2);
        assert_eq!(tx.push(1), Ok(()));
        assert_eq!(tx.push(2), Ok(()));
        assert_eq!(tx.push(3), Err(3));
        assert_eq!(tx.free(), 0);
        assert_eq!(rx.pop(), Some(1));
        assert_eq!(tx.free(), 1);
        assert_eq!(tx.push(3), Ok(()));
        assert_eq!(rx.available(), 2);
        assert_eq!(rx.pop_batch(10).collect::<Vec<_>>(), vec![2, 3]);
        assert_eq!(rx.pop(), None);
    }

    #[test]
    fn room_is_re_read_when_the_cached_view_is_short() {
        let (mut tx, mut rx) = ring(4);
        assert_eq!(tx.push_iter(&mut (0..4)), 4);
        assert!(!tx.has_room_for(1), "full");
        assert_eq!(rx.available(), 4);
        drop(rx.pop_batch(3));
        // The producer's cached head still says full; the check re-reads it.
        assert!(tx.has_room_for(3));
        assert!(!tx.has_room_for(4), "one item is still queued");
        assert!(tx.has_room_for(0));
    }

    #[test]
    fn unconsumed_items_are_dropped_exactly_once() {
        let drops = Arc::new(AtomicUsize::new(0));
        let (mut tx, mut rx) = ring::<Tracked>(4);
        let mut items = (0..4).map(|i| Tracked(i, drops.clone()));
        assert_eq!(tx.push_iter(&mut items), 4);
        rx.available();
        // Take two, iterate one: the other is dropped with the batch.
        let first = rx.pop_batch(2).next().unwrap();
        assert_eq!(first.0, 0);
        drop(first);
        assert_eq!(drops.load(Ordering::Relaxed), 2);
        // Written but unpublished items are published by the producer's drop.
        let mut more = (4..5).map(|i| Tracked(i, drops.clone()));
        assert_eq!(tx.write(&mut more), 1);
        drop(tx);
        assert_eq!(rx.available(), 3);
        drop(rx);
        assert_eq!(drops.load(Ordering::Relaxed), 5);
    }

    /// A full ring of four items (0–3) whose consumer took a batch of three, read
    /// item 0 (dropped) and leaked the batch with `mem::forget`.
    fn one_read_of_a_leaked_batch() -> (Arc<AtomicUsize>, Producer<Tracked>, Consumer<Tracked>) {
        let drops = Arc::new(AtomicUsize::new(0));
        let (mut tx, mut rx) = ring::<Tracked>(4);
        let mut items = (0..4).map(|i| Tracked(i, drops.clone()));
        assert_eq!(tx.push_iter(&mut items), 4);
        assert_eq!(rx.available(), 4);
        let mut batch = rx.pop_batch(3);
        assert_eq!(batch.next().map(|t| t.0), Some(0));
        std::mem::forget(batch);
        (drops, tx, rx)
    }

    #[test]
    fn a_leaked_batch_leaks_its_items_and_is_never_read_again() {
        let (drops, mut tx, mut rx) = one_read_of_a_leaked_batch();
        // Safe code may forget the iterator it was handed: the two unread items leak.
        assert_eq!(drops.load(Ordering::Relaxed), 1);
        let rest: Vec<u32> = rx.pop_batch(4).map(|t| t.0).collect();
        assert_eq!(rest, vec![3], "no position is read twice");
        assert_eq!(drops.load(Ordering::Relaxed), 2);
        // The head the leaked batch did not publish is published by the next batch.
        assert_eq!(tx.free(), 4);
    }

    #[test]
    fn a_leaked_batch_is_not_dropped_again_by_the_ring() {
        let (drops, tx, rx) = one_read_of_a_leaked_batch();
        // No batch publishes the head after the leak: the consumer's drop does, and
        // the ring drops only the item nobody took.
        drop(rx);
        drop(tx);
        assert_eq!(
            drops.load(Ordering::Relaxed),
            2,
            "item 0 and item 3, once each"
        );
    }

    #[test]
    fn a_panicking_iterator_leaves_the_written_items_counted() {
        let (mut tx, mut rx) = ring::<u32>(4);
        let mut items = (0..4).map(|i| if i == 2 { panic!("the third item") } else { i });
        let caught =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| tx.write(&mut items)));
        assert!(caught.is_err());
        assert_eq!(tx.position(), 2, "two items were written before the panic");
        tx.publish();
        assert_eq!(rx.available(), 2);
        assert_eq!(rx.pop_batch(4).collect::<Vec<_>>(), vec![0, 1]);
        assert!(tx.has_room_for(4), "both slots came back");
    }

    #[test]
    fn items_cross_threads_in_order() {
        const N: u64 = 200_000;
        let (mut tx, mut rx) = ring::<u64>(64);
        let producer = std::thread::spawn(move || {
            let mut items = 0..N;
            while items.start < N {
                let mut chunk = items.start..(items.start + 37).min(N);
                let n = tx.push_iter(&mut chunk);
                items.start += n as u64;
                if n == 0 {
                    std::thread::yield_now();
                }
            }
        });
        let mut expected = 0;
        while expected < N {
            let n = rx.available();
            if n == 0 {
                std::thread::yield_now();
                continue;
            }
            for item in rx.pop_batch(n) {
                assert_eq!(item, expected);
                expected += 1;
            }
        }
        producer.join().unwrap();
    }

    #[test]
    #[should_panic(expected = "spsc ring capacity must be in 1..=2^30 (got 0)")]
    fn zero_capacity_is_refused() {
        let _ = ring::<u8>(0);
    }
}

/// Loom models: `RUSTFLAGS="--cfg weir_loom" cargo test --release --lib loom`.
#[cfg(all(test, weir_loom))]
mod loom_tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use loom::thread;

    use super::*;

    /// A producer pushes three items through a ring of two (a batch of two, then one
    /// when there is room) while a consumer takes them in batches: each arrives once,
    /// in order, and each is dropped once.
    #[test]
    fn loom_spsc_items_arrive_once_in_order() {
        loom::model(|| {
            let drops = Arc::new(AtomicUsize::new(0));
            let (mut tx, mut rx) = ring::<Tracked>(2);
            let producer = {
                let drops = drops.clone();
                thread::spawn(move || {
                    let mut items = (0..3).map(|i| Tracked(i, drops.clone())).peekable();
                    while items.peek().is_some() {
                        if tx.push_iter(&mut items) == 0 {
                            thread::yield_now();
                        }
                    }
                })
            };
            let mut next = 0;
            while next < 3 {
                let n = rx.available();
                if n == 0 {
                    thread::yield_now();
                    continue;
                }
                for item in rx.pop_batch(n) {
                    assert_eq!(item.0, next, "out of order");
                    next += 1;
                }
            }
            producer.join().unwrap();
            assert_eq!(drops.load(Ordering::Relaxed), 3, "each item dropped once");
            drop(rx);
            assert_eq!(drops.load(Ordering::Relaxed), 3, "no item dropped twice");
        });
    }

    /// Items still in the ring when the consumer gives up are dropped once, by the
    /// ring, whichever side goes last.
    #[test]
    fn loom_spsc_leftovers_dropped_once() {
        loom::model(|| {
            let drops = Arc::new(AtomicUsize::new(0));
            let (mut tx, mut rx) = ring::<Tracked>(2);
            let producer = {
                let drops = drops.clone();
                thread::spawn(move || {
                    let mut items = (0..2).map(|i| Tracked(i, drops.clone()));
                    tx.push_iter(&mut items);
                    drop(tx);
                })
            };
            if let Some(item) = rx.pop() {
                assert_eq!(item.0, 0);
            }
            drop(rx);
            producer.join().unwrap();
            assert_eq!(drops.load(Ordering::Relaxed), 2);
        });
    }
}
