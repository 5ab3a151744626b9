//! The std/loom shim: every atomic and lock that a loom model exercises is imported
//! from here, so `RUSTFLAGS="--cfg weir_loom"` swaps in loom's checked versions.
//!
//! `Arc<dyn Trait>` needs unsized coercion, which loom's `Arc` does not support, so
//! type-erased handles (`Subscription`) keep using `std::sync::Arc`.

#[cfg(weir_loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize};
#[cfg(weir_loom)]
pub(crate) use loom::sync::Mutex;

#[cfg(not(weir_loom))]
pub(crate) use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize};
#[cfg(not(weir_loom))]
pub(crate) use std::sync::Mutex;

pub(crate) use std::sync::atomic::Ordering;

/// The shared ownership of the SPSC ring: loom's `Arc` in models, so that the
/// synchronisation of the last handle's drop (which makes the other side's writes
/// visible to the ring's `Drop`) is modelled too.
#[cfg(weir_loom)]
pub(crate) use loom::sync::Arc;
#[cfg(not(weir_loom))]
pub(crate) use std::sync::Arc;

#[cfg(weir_loom)]
pub(crate) type MutexGuardOf<'a, T> = loom::sync::MutexGuard<'a, T>;
#[cfg(not(weir_loom))]
pub(crate) type MutexGuardOf<'a, T> = std::sync::MutexGuard<'a, T>;

/// A cell whose accesses loom checks for data races in `weir_loom` builds; in normal
/// builds a zero-cost wrapper around [`std::cell::UnsafeCell`] with loom's closure API
/// (`with` / `with_mut`), so the same code compiles both ways. Used only by the SPSC
/// ring (`queue::spsc`), the crate's one unsafe module.
#[cfg(weir_loom)]
pub(crate) use loom::cell::UnsafeCell;

/// See the `weir_loom` definition: std's cell behind loom's closure API.
#[cfg(not(weir_loom))]
#[derive(Debug)]
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
