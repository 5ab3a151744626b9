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

#[cfg(weir_loom)]
pub(crate) type MutexGuardOf<'a, T> = loom::sync::MutexGuard<'a, T>;
#[cfg(not(weir_loom))]
pub(crate) type MutexGuardOf<'a, T> = std::sync::MutexGuard<'a, T>;
