//! The `Subscription` handle.

use std::fmt;
use std::sync::Arc;

/// What a publisher implements to receive `request` and `cancel` from its subscriber.
///
/// Implementations must be thread-safe and re-entrant: `request` may be called from
/// any thread, including from inside `on_next` (3.2), must bound recursion (3.3), and
/// must turn `request(0)` into `on_error` naming rule 3.9 (use
/// [`demand::validate`](crate::demand::validate)). After cancellation both methods are
/// no-ops (3.6, 3.7).
pub trait RawSubscription: Send + Sync {
    /// Add `n` to the outstanding demand (saturating at [`UNBOUNDED`](crate::demand::UNBOUNDED)).
    fn request(&self, n: u64);
    /// Ask the publisher to stop and to drop the subscriber.
    fn cancel(&self);
}

/// A cheap, cloneable, `Send + Sync` handle to one subscription.
///
/// `request(n)` and `cancel()` may be called from any thread, including re-entrantly
/// from inside `on_next`. Dropping a handle does not cancel.
#[derive(Clone)]
pub struct Subscription {
    inner: Arc<dyn RawSubscription>,
}

impl Subscription {
    /// Wrap a publisher's subscription state.
    pub fn new<R: RawSubscription + 'static>(inner: Arc<R>) -> Self {
        Subscription { inner }
    }

    /// A subscription that ignores every call: for publishers that have already
    /// terminated when they call `on_subscribe`.
    pub fn noop() -> Self {
        struct Noop;
        impl RawSubscription for Noop {
            fn request(&self, _n: u64) {}
            fn cancel(&self) {}
        }
        Subscription::new(Arc::new(Noop))
    }

    /// Request `n` more items. `n == 0` is a spec violation answered with `on_error`
    /// (rule 3.9); totals saturate at `u64::MAX`, which means unbounded (3.17).
    #[inline]
    pub fn request(&self, n: u64) {
        self.inner.request(n)
    }

    /// Cancel: the publisher eventually stops signalling and drops the subscriber.
    /// Idempotent.
    #[inline]
    pub fn cancel(&self) {
        self.inner.cancel()
    }

    /// True when both handles refer to the same subscription.
    pub fn ptr_eq(a: &Subscription, b: &Subscription) -> bool {
        std::ptr::addr_eq(Arc::as_ptr(&a.inner), Arc::as_ptr(&b.inner))
    }
}

impl fmt::Debug for Subscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Subscription")
    }
}
