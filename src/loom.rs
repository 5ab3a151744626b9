//! The std/loom shim: every atomic and lock that a loom model exercises is imported
//! from here, so `RUSTFLAGS="--cfg weir_loom"` swaps in loom's checked versions.
//!
//! `Arc<dyn Trait>` needs unsized coercion, which loom's `Arc` does not support, so
//! type-erased handles (`Subscription`) keep using `std::sync::Arc`.

#[cfg(weir_loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicU8, AtomicUsize};
#[cfg(weir_loom)]
pub(crate) use loom::sync::Mutex;

#[cfg(not(weir_loom))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicU8, AtomicUsize};
#[cfg(not(weir_loom))]
pub(crate) use std::sync::Mutex;

pub(crate) use std::sync::atomic::Ordering;

/// A busy-wait's pause: `std::hint::spin_loop`, or in models a yield, which loom
/// needs to let the thread being waited for run (else a spin is endless branches).
#[inline(always)]
pub(crate) fn spin_hint() {
    #[cfg(weir_loom)]
    loom::thread::yield_now();
    #[cfg(not(weir_loom))]
    std::hint::spin_loop();
}

/// The shared ownership of the SPSC ring: loom's `Arc` in models, so that the
/// synchronisation of the last handle's drop (which makes the other side's writes
/// visible to the ring's `Drop`) is modelled too.
#[cfg(weir_loom)]
pub(crate) use loom::sync::Arc;
#[cfg(not(weir_loom))]
pub(crate) use std::sync::Arc;

/// A zero-sized marker aligned to 128 bytes (two cache lines: the adjacent-line
/// prefetcher of x86 moves lines in pairs). A struct with one as a field is aligned,
/// and so sized, to a multiple of 128 bytes: its value then sits on a block of its
/// own, and writes to it do not take the lines of its neighbours from the threads
/// that read them, nor the reverse.
///
/// Used where two threads hammer different fields of one struct: the SPSC ring's two
/// indices ([`Padded`]) and, on a boundary, the signal core's demand and owner slot
/// (a stage's `Padding`).
#[repr(align(128))]
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Block;

/// A value next to a zero-sized marker `A` whose alignment it takes: `()` leaves the
/// value as it is, [`Block`] puts it on a block of its own.
#[derive(Debug)]
pub(crate) struct Aligned<A, T> {
    _align: A,
    value: T,
}

/// A value on a 128-byte block of its own (see [`Block`]).
pub(crate) type Padded<T> = Aligned<Block, T>;

impl<A: Default, T> Aligned<A, T> {
    /// Keep `value` aligned as `A` says.
    #[inline(always)]
    pub(crate) fn new(value: T) -> Self {
        Aligned {
            _align: A::default(),
            value,
        }
    }
}

impl<A, T> std::ops::Deref for Aligned<A, T> {
    type Target = T;

    #[inline(always)]
    fn deref(&self) -> &T {
        &self.value
    }
}

#[cfg(weir_loom)]
pub(crate) type MutexGuardOf<'a, T> = loom::sync::MutexGuard<'a, T>;
#[cfg(not(weir_loom))]
pub(crate) type MutexGuardOf<'a, T> = std::sync::MutexGuard<'a, T>;

/// A cell whose accesses loom checks for data races in `weir_loom` builds; in normal
/// builds a zero-cost wrapper around [`std::cell::UnsafeCell`] with loom's closure API
/// (`with` / `with_mut`), so the same code compiles both ways. The wrapper is
/// `repr(transparent)`, as std's cell is: a slice of them is laid out as a slice of
/// their contents (the ring moves runs of slots with one copy). Used only by the SPSC
/// ring (`queue::spsc`) and the claim ring (`queue::claim`), the crate's two unsafe
/// modules.
#[cfg(weir_loom)]
pub(crate) use loom::cell::UnsafeCell;

/// See the `weir_loom` definition: std's cell behind loom's closure API.
#[cfg(not(weir_loom))]
#[derive(Debug)]
#[repr(transparent)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(weir_loom))]
impl<T> UnsafeCell<T> {
    /// Wrap `value`.
    #[inline(always)]
    pub(crate) fn new(value: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(value))
    }

    /// Call `f` with a shared pointer to the contents.
    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    /// Call `f` with a unique pointer to the contents.
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// What the loom models of a stage share: an upstream to drive by hand and a
/// downstream that records.
#[cfg(all(test, weir_loom))]
pub(crate) mod model {
    use std::sync::{Arc, Mutex};

    use super::{AtomicU64, Ordering};
    use crate::{Error, Publisher, RawSubscription, Subscriber, Subscription};

    /// Upstream's side of a model: what was requested.
    #[derive(Default)]
    pub(crate) struct Credit {
        pub(crate) requested: AtomicU64,
    }

    impl RawSubscription for Credit {
        fn request(&self, n: u64) {
            // Release: pairs with the producing thread's Acquire load.
            self.requested.fetch_add(n, Ordering::Release);
        }
        fn cancel(&self) {}
    }

    impl Credit {
        /// What was requested so far.
        pub(crate) fn requested(&self) -> u64 {
            // Acquire: pairs with the Release in `request`.
            self.requested.load(Ordering::Acquire)
        }
    }

    /// A boxed subscriber of the model's items.
    pub(crate) type Boxed = Box<dyn Subscriber<u32> + Send>;

    /// A publisher that only subscribes; the model's producing thread then drives
    /// the subscriber it stashed, against the credit it was given.
    pub(crate) struct Stash(pub(crate) Arc<Mutex<Option<Boxed>>>, pub(crate) Arc<Credit>);

    impl Stash {
        /// A stash and the credit its subscriber's requests go to.
        pub(crate) fn new() -> (Self, Arc<Mutex<Option<Boxed>>>, Arc<Credit>) {
            let slot = Arc::new(Mutex::new(None));
            let credit = Arc::new(Credit::default());
            (Stash(slot.clone(), credit.clone()), slot, credit)
        }
    }

    impl Publisher for Stash {
        type Item = u32;
        fn subscribe<S: Subscriber<u32> + Send + 'static>(self, subscriber: S) {
            let mut subscriber: Boxed = Box::new(subscriber);
            subscriber.on_subscribe(Subscription::new(self.1.clone()));
            *self.0.lock().unwrap() = Some(subscriber);
        }
    }

    /// Downstream: records its subscription, the items and the completion; requests
    /// only when the model says. An error fails the model.
    #[derive(Clone, Default)]
    pub(crate) struct Recorder(pub(crate) Arc<Mutex<(Option<Subscription>, Vec<u32>, bool)>>);

    impl Recorder {
        /// The subscription it was given.
        pub(crate) fn subscription(&self) -> Subscription {
            self.0.lock().unwrap().0.clone().expect("subscribed")
        }

        /// The items received so far.
        pub(crate) fn items(&self) -> Vec<u32> {
            self.0.lock().unwrap().1.clone()
        }

        /// True once `on_complete` arrived.
        pub(crate) fn completed(&self) -> bool {
            self.0.lock().unwrap().2
        }
    }

    impl Subscriber<u32> for Recorder {
        fn on_subscribe(&mut self, subscription: Subscription) {
            self.0.lock().unwrap().0 = Some(subscription);
        }
        fn on_next(&mut self, item: u32) {
            let mut seen = self.0.lock().unwrap();
            assert!(!seen.2, "rule 1.7: on_next({item}) after on_complete");
            seen.1.push(item);
        }
        fn on_error(&mut self, error: Error) {
            panic!("unexpected error {error}");
        }
        fn on_complete(&mut self) {
            self.0.lock().unwrap().2 = true;
        }
    }
}
