//! The one drain loop ([`Wip`]) and the set-once subscription holder
//! ([`SubscriptionSlot`]).
//!
//! # The work-in-progress trampoline
//!
//! Every emitter in weir (sources, and later every async boundary) runs its signals
//! inside [`Wip::drain`]. The counter `wip` counts "reasons to run another pass":
//!
//! 1. Whoever moves `wip` from 0 to 1 owns the loop; everyone else only increments
//!    and returns at once. There is never more than one owner, so signals are serial
//!    (rule 1.3).
//! 2. The owner runs a pass, then subtracts the increments it has accounted for
//!    (`missed`). If others arrived meanwhile the result is non-zero and it runs again;
//!    at zero it leaves, and the next increment makes a new owner.
//!
//! This is also weir's rule 3.3 guarantee: a `request` made from inside `on_next`
//! finds the loop owned, increments, and returns, so the nested `on_next` never
//! happens on the stack of the first. Recursion depth is 1, however many times a
//! subscriber re-requests.
//!
//! Orderings: `enter` and `leave` are `AcqRel`. The Release half of an `enter` that
//! loses publishes the caller's writes (new demand, the cancelled flag) to the owner;
//! the Acquire half of the owner's `leave` that sees the increment makes them visible
//! to its next pass. A pass that starts after `leave` returned 0 is owned by whoever
//! enters next, which Acquires the previous owner's Release in `leave`.

use crate::loom::{AtomicUsize, Mutex, Ordering};
use crate::Subscription;

/// The work-in-progress counter of a queue-drain loop. See the module docs.
#[derive(Debug, Default)]
pub struct Wip {
    count: AtomicUsize,
}

impl Wip {
    /// A counter with no work in progress.
    pub fn new() -> Self {
        Self::default()
    }

    /// Register a reason to run. Returns true when the caller now owns the loop and
    /// must call [`run`](Self::run).
    #[inline]
    pub fn enter(&self) -> bool {
        // AcqRel: see the module docs (pairs with `leave`).
        self.count.fetch_add(1, Ordering::AcqRel) == 0
    }

    /// Account for `missed` reasons; returns how many arrived meanwhile (0: the loop is
    /// released).
    #[inline]
    pub fn leave(&self, missed: usize) -> usize {
        // AcqRel: see the module docs (pairs with `enter`).
        self.count.fetch_sub(missed, Ordering::AcqRel) - missed
    }

    /// Run `pass` until no reason to run is left. Call only after [`enter`](Self::enter)
    /// returned true.
    #[inline]
    pub fn run(&self, mut pass: impl FnMut()) {
        let mut missed = 1;
        loop {
            pass();
            missed = self.leave(missed);
            if missed == 0 {
                break;
            }
        }
    }

    /// Enter and, if this call owns the loop, run `pass` until it is released.
    #[inline]
    pub fn drain(&self, pass: impl FnMut()) {
        if self.enter() {
            self.run(pass);
        }
    }
}

/// Where a subscriber keeps its upstream [`Subscription`]: set once, cancellable
/// before it is set.
///
/// * A second [`set`](Self::set) is refused and the new subscription is cancelled
///   (rule 2.5).
/// * [`cancel`](Self::cancel) before `set` leaves a sentinel; the subscription that
///   arrives later is cancelled at once.
///
/// Not on a per-item path: it locks a small mutex, and never calls a subscription while
/// holding it.
pub struct SubscriptionSlot {
    state: Mutex<Slot>,
}

impl Default for SubscriptionSlot {
    fn default() -> Self {
        SubscriptionSlot {
            state: Mutex::new(Slot::Empty),
        }
    }
}

impl std::fmt::Debug for SubscriptionSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SubscriptionSlot")
            .field(&*self.lock())
            .finish()
    }
}

#[derive(Debug)]
enum Slot {
    Empty,
    Set(Subscription),
    Cancelled,
}

impl SubscriptionSlot {
    /// An empty slot.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> crate::loom::MutexGuardOf<'_, Slot> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Store `subscription`. Returns true when it was stored; false when the slot was
    /// already set (rule 2.5) or cancelled, in which case `subscription` has been cancelled.
    pub fn set(&self, subscription: Subscription) -> bool {
        let mut state = self.lock();
        match *state {
            Slot::Empty => {
                *state = Slot::Set(subscription);
                true
            }
            Slot::Set(_) | Slot::Cancelled => {
                drop(state);
                subscription.cancel();
                false
            }
        }
    }

    /// A clone of the stored subscription, if it is set and not cancelled.
    pub fn get(&self) -> Option<Subscription> {
        match &*self.lock() {
            Slot::Set(s) => Some(s.clone()),
            _ => None,
        }
    }

    /// Forward `request(n)` to the stored subscription, if any.
    pub fn request(&self, n: u64) {
        if let Some(s) = self.get() {
            s.request(n);
        }
    }

    /// Cancel the stored subscription (or the one that arrives later). Idempotent.
    pub fn cancel(&self) {
        let previous = std::mem::replace(&mut *self.lock(), Slot::Cancelled);
        if let Slot::Set(s) = previous {
            s.cancel();
        }
    }

    /// True once [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        matches!(*self.lock(), Slot::Cancelled)
    }
}
