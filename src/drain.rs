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
use crate::{Error, Subscriber, Subscription};

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

    /// Take the loop only if nobody owns it: true when the caller now owns it (with
    /// one reason, as after [`enter`](Self::enter)); false, registering nothing, when
    /// someone else does. For a caller that has another way to get its work done
    /// and would rather not make a busy owner run one more pass for it.
    ///
    /// ```
    /// use weir::drain::Wip;
    ///
    /// let wip = Wip::new();
    /// assert!(wip.try_enter(), "idle: the caller owns the loop");
    /// assert!(!wip.try_enter(), "owned: refused");
    /// assert_eq!(wip.pending(), 1, "and nothing registered for the owner");
    /// assert!(!wip.enter(), "`enter` registers a reason instead");
    /// assert_eq!(wip.leave(1), 1, "so the owner runs one more pass");
    /// assert_eq!(wip.leave(1), 0, "released");
    /// assert!(wip.try_enter());
    /// ```
    #[inline]
    pub fn try_enter(&self) -> bool {
        // AcqRel on success: as `enter` (pairs with `leave`). Relaxed on failure:
        // nothing was registered, nothing is read.
        self.count
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// Account for `missed` reasons; returns how many arrived meanwhile (0: the loop is
    /// released).
    ///
    /// # Panics
    ///
    /// If `missed` is more than the reasons registered (a caller that does not own
    /// the loop, or leaves twice): "Wip::leave(3) with 1 reason registered: only the
    /// loop's owner leaves, with what it owes". The count is left as it was.
    #[inline]
    pub fn leave(&self, missed: usize) -> usize {
        // AcqRel: see the module docs (pairs with `enter`).
        let before = self.count.fetch_sub(missed, Ordering::AcqRel);
        match before.checked_sub(missed) {
            Some(left) => left,
            None => self.misused(missed, before),
        }
    }

    /// `leave` asked for more than was registered: undo it and panic.
    #[cold]
    #[inline(never)]
    fn misused(&self, missed: usize, before: usize) -> ! {
        // Relaxed: undoes this call's own subtraction; the panic publishes nothing.
        self.count.fetch_add(missed, Ordering::Relaxed);
        panic!(
            "Wip::leave({missed}) with {before} reason{} registered: only the loop's owner \
             leaves, with what it owes",
            if before == 1 { "" } else { "s" }
        );
    }

    /// How many reasons to run are registered and not yet accounted for (0: idle).
    /// The owner compares it with what it owes to see whether new work arrived.
    #[inline]
    pub fn pending(&self) -> usize {
        // Acquire: pairs with the Release half of `enter`, like `leave`.
        self.count.load(Ordering::Acquire)
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
    state: Mutex<SlotContents>,
}

impl Default for SubscriptionSlot {
    fn default() -> Self {
        SubscriptionSlot {
            state: Mutex::new(SlotContents::Empty),
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
enum SlotContents {
    Empty,
    Set(Subscription),
    Cancelled,
}

impl SubscriptionSlot {
    /// An empty slot.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> crate::loom::MutexGuardOf<'_, SlotContents> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Store `subscription`. Returns true when it was stored; false when the slot was
    /// already set (rule 2.5) or cancelled, in which case `subscription` has been cancelled.
    pub fn set(&self, subscription: Subscription) -> bool {
        let mut state = self.lock();
        match *state {
            SlotContents::Empty => {
                *state = SlotContents::Set(subscription);
                true
            }
            SlotContents::Set(_) | SlotContents::Cancelled => {
                drop(state);
                subscription.cancel();
                false
            }
        }
    }

    /// A clone of the stored subscription, if it is set and not cancelled.
    pub fn get(&self) -> Option<Subscription> {
        match &*self.lock() {
            SlotContents::Set(s) => Some(s.clone()),
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
        let previous = std::mem::replace(&mut *self.lock(), SlotContents::Cancelled);
        if let SlotContents::Set(s) = previous {
            s.cancel();
        }
    }

    /// True once [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        matches!(*self.lock(), SlotContents::Cancelled)
    }
}

/// Loom models: `RUSTFLAGS="--cfg weir_loom" cargo test --release --lib loom`.
#[cfg(all(test, weir_loom))]
mod loom_tests {
    use super::*;
    use crate::loom::AtomicU64;
    use crate::RawSubscription;
    use loom::sync::atomic::AtomicBool;
    use loom::sync::Arc;
    use loom::thread;

    /// Two threads each publish work and enter the drain. Passes never overlap (rule
    /// 1.3), and some pass runs after each piece of work was published, so no work is
    /// left unseen when both calls have returned.
    #[test]
    fn loom_wip_is_exclusive_and_misses_nothing() {
        loom::model(|| {
            let wip = Arc::new(Wip::new());
            let inside = Arc::new(AtomicBool::new(false));
            let work = Arc::new(AtomicU64::new(0));
            let seen = Arc::new(AtomicU64::new(0));
            let run = |wip: Arc<Wip>,
                       inside: Arc<AtomicBool>,
                       work: Arc<AtomicU64>,
                       seen: Arc<AtomicU64>| {
                work.fetch_add(1, Ordering::Relaxed);
                wip.drain(|| {
                    assert!(
                        !inside.swap(true, Ordering::Relaxed),
                        "two passes overlapped"
                    );
                    seen.store(work.load(Ordering::Relaxed), Ordering::Relaxed);
                    inside.store(false, Ordering::Relaxed);
                });
            };
            let other = {
                let (wip, inside, work, seen) =
                    (wip.clone(), inside.clone(), work.clone(), seen.clone());
                thread::spawn(move || run(wip, inside, work, seen))
            };
            run(wip.clone(), inside.clone(), work.clone(), seen.clone());
            other.join().unwrap();
            assert_eq!(
                seen.load(Ordering::Relaxed),
                2,
                "a published piece of work was never drained"
            );
        });
    }

    struct Counting(Arc<AtomicU64>);

    impl RawSubscription for Counting {
        fn request(&self, _n: u64) {}
        fn cancel(&self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `set` racing `cancel`: the subscription ends up cancelled whichever comes
    /// first, and the slot never hands it out afterwards.
    #[test]
    fn loom_slot_cancel_races_set() {
        loom::model(|| {
            let slot = Arc::new(SubscriptionSlot::new());
            let cancels = Arc::new(AtomicU64::new(0));
            let setter = {
                let (slot, cancels) = (slot.clone(), cancels.clone());
                thread::spawn(move || {
                    slot.set(Subscription::new(std::sync::Arc::new(Counting(cancels))));
                })
            };
            slot.cancel();
            setter.join().unwrap();
            assert_eq!(cancels.load(Ordering::Relaxed), 1);
            assert!(slot.get().is_none());
            assert!(slot.is_cancelled());
        });
    }

    /// Rule 2.5 under a race: of two concurrent `set`s exactly one wins and the
    /// other subscription is cancelled.
    #[test]
    fn loom_slot_second_set_is_cancelled() {
        loom::model(|| {
            let slot = Arc::new(SubscriptionSlot::new());
            let cancels = Arc::new(AtomicU64::new(0));
            let other = {
                let (slot, cancels) = (slot.clone(), cancels.clone());
                thread::spawn(move || {
                    slot.set(Subscription::new(std::sync::Arc::new(Counting(cancels))))
                })
            };
            let mine = slot.set(Subscription::new(std::sync::Arc::new(Counting(
                cancels.clone(),
            ))));
            let theirs = other.join().unwrap();
            assert!(mine ^ theirs, "exactly one set wins");
            assert_eq!(cancels.load(Ordering::Relaxed), 1);
        });
    }
}

/// The life cycle of a stage's upstream subscription: `Idle` (before `on_subscribe`)
/// → `Active` → `Done` (after a terminal signal, or after the stage failed or
/// finished early and cancelled upstream). Operators keep one of these instead of
/// re-deriving rules 2.5 and 1.7 each time.
#[derive(Debug, Default)]
pub(crate) enum Upstream {
    /// Waiting for `on_subscribe`.
    #[default]
    Idle,
    /// Subscribed; signals pass.
    Active(Subscription),
    /// Terminated: later signals are ignored (rules 1.7, 2.8).
    Done,
}

impl Upstream {
    /// Accept the first subscription; a later one is cancelled (rule 2.5). Returns
    /// true when `subscription` was accepted.
    pub(crate) fn accept(&mut self, subscription: &Subscription) -> bool {
        if matches!(self, Upstream::Idle) {
            *self = Upstream::Active(subscription.clone());
            true
        } else {
            subscription.cancel();
            false
        }
    }

    /// True while signals should pass.
    #[inline]
    pub(crate) fn is_active(&self) -> bool {
        matches!(self, Upstream::Active(_))
    }

    /// The subscription, while active.
    #[inline]
    pub(crate) fn get(&self) -> Option<&Subscription> {
        match self {
            Upstream::Active(s) => Some(s),
            _ => None,
        }
    }

    /// Upstream terminated: returns true for the first terminal signal (forward it).
    pub(crate) fn finish(&mut self) -> bool {
        !matches!(std::mem::replace(self, Upstream::Done), Upstream::Done)
    }

    /// The stage ends on its own (a panic, a limit reached): cancel upstream. Returns
    /// true if it was active (the stage must now signal downstream).
    pub(crate) fn cancel(&mut self) -> bool {
        match std::mem::replace(self, Upstream::Done) {
            Upstream::Active(s) => {
                s.cancel();
                true
            }
            _ => false,
        }
    }

    /// The stage failed on its own (a user closure panicked): cancel upstream and, if
    /// the stage was active, signal `error` downstream (rule 4.2's "immediately").
    pub(crate) fn fail<T, S: Subscriber<T>>(&mut self, downstream: &mut S, error: Error) {
        if self.cancel() {
            downstream.on_error(error);
        }
    }

    /// Upstream failed: pass the first terminal signal on; ignore any later one (1.7).
    pub(crate) fn forward_error<T, S: Subscriber<T>>(&mut self, downstream: &mut S, error: Error) {
        if self.finish() {
            downstream.on_error(error);
        }
    }

    /// Upstream completed: pass the first terminal signal on; ignore any later one.
    pub(crate) fn forward_complete<T, S: Subscriber<T>>(&mut self, downstream: &mut S) {
        if self.finish() {
            downstream.on_complete();
        }
    }
}
