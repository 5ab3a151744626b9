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
    /// A publisher whose items a downstream task may take on its own thread (a
    /// channel's claim ring): see [`Pull`].
    pull: Option<Arc<dyn Pull>>,
}

/// A publisher that holds items for its subscriber in a lock-free ring its senders
/// fill, and lets a downstream drain that lingers on another thread take them there
/// itself: the drain marks itself *watching* (senders then skip their signal), looks
/// for items while it lingers, and runs the publisher's drain loop on its own thread
/// when it finds some. Carried by the [`Subscription`] (crate-internal); stages
/// that hand their upstream's subscription on unchanged keep it, and a hub hands
/// its upstream's to each of its subscribers (several drains then watch one ring).
pub(crate) trait Pull: Send + Sync {
    /// Count (`on`) or uncount a watching drain: senders skip their signal while
    /// any drain watches. Each watcher's `watch(true)` is matched by one
    /// `watch(false)` ([`PullMark`] keeps a watcher's calls paired). The caller
    /// fences (`SeqCst`) after uncounting itself and then asks
    /// [`claimed`](Self::claimed).
    fn watch(&self, on: bool);
    /// Items are written and waiting (cheap: reads the ring's next slot, not a line
    /// the senders write per item): for polling.
    fn ready(&self) -> bool;
    /// A run of items is written and waiting (see each publisher; at least
    /// [`ready`](Self::ready)'s one): what a watcher polls for first, so that it
    /// takes items a run at a time while a fast sender fills the ring.
    fn ready_run(&self) -> bool {
        self.ready()
    }
    /// Where the drain's reading of the ring stands (any measure that moves when
    /// a pull takes items): a watcher compares it around a pull to see whether the
    /// pull moved anything.
    fn taken(&self) -> usize;
    /// Items are claimed, written or not: the look after the watcher's fence, which
    /// sees every claim ordered before it.
    fn claimed(&self) -> bool;
    /// Run the publisher's drain loop on this thread (or, if another thread owns it,
    /// make that owner run another pass).
    fn pull(&self);
    /// A scheduled drain right behind the publisher (a `publish_on` whose upstream
    /// this is) offers to run the publisher's own deliveries on its thread: the
    /// publisher may then wake `drain` instead of delivering on the thread that
    /// produced, and make [`ready`](Self::ready) true until the drain pulls. By
    /// default nothing changes.
    fn adopt(&self, _drain: std::sync::Weak<dyn crate::stage::CoreHandle>) {}
}

/// One watcher's mark on a [`Pull`]: passes on only its changes (a drain may mark
/// itself again without clearing first: a task that hands its loop on keeps it),
/// so that each watcher counts once, and the owner takes it back when it goes
/// ([`release`](Self::release)).
#[derive(Debug, Default)]
pub(crate) struct PullMark {
    /// Whether this watcher is counted.
    on: std::sync::atomic::AtomicBool,
}

impl PullMark {
    /// Mark (or clear the mark of) this watcher on `pull`.
    pub(crate) fn set(&self, pull: &dyn Pull, on: bool) {
        // Relaxed: only the watcher's own drain loop (one owner at a time, handed
        // on through the loop's synchronisation) writes it; the ordering that
        // matters is the caller's fence after clearing.
        if self.on.swap(on, std::sync::atomic::Ordering::Relaxed) != on {
            pull.watch(on);
        }
    }

    /// The watcher goes: uncount it if it is still counted (a task dropped unrun
    /// keeps the mark its predecessor left).
    pub(crate) fn release(&self, pull: &dyn Pull) {
        self.set(pull, false);
    }

    /// A watcher on a thread of its own (a blocking iterator, a waiting sink
    /// handle) stops watching: clear the mark, fence, and pull what was claimed.
    ///
    /// After the mark is cleared and the fence, every sender's claim is either
    /// seen here (and pulled, once written: a sender writes its slot right after
    /// claiming it), or made by a sender that sees the mark gone (or another
    /// watcher's) and so hands its item over itself. A pull that finds no demand
    /// upstream leaves the items for the request that brings it (a request runs
    /// upstream's drain loop).
    pub(crate) fn unwatch(&self, pull: &dyn Pull) {
        self.set(pull, false);
        // SeqCst: pairs with a sender's read of the mark after its claim.
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        if pull.claimed() {
            // Claimed, perhaps not yet written: wait (a moment; longer only if the
            // sender lost its CPU in between) for the write.
            while pull.claimed() && !pull.ready() {
                std::thread::yield_now();
            }
            pull.pull();
        }
    }
}

impl Subscription {
    /// Wrap a publisher's subscription state.
    pub fn new<R: RawSubscription + 'static>(inner: Arc<R>) -> Self {
        Subscription { inner, pull: None }
    }

    /// Wrap a publisher's subscription state that downstream may also [`Pull`].
    pub(crate) fn with_pull<R: RawSubscription + 'static>(
        inner: Arc<R>,
        pull: Arc<dyn Pull>,
    ) -> Self {
        Subscription {
            inner,
            pull: Some(pull),
        }
    }

    /// The publisher's [`Pull`], if it has one.
    pub(crate) fn pull(&self) -> Option<&Arc<dyn Pull>> {
        self.pull.as_ref()
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
