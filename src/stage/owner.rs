//! The signal core's owner slot: a cell that only the thread owning a core's loop
//! reaches, handed from one owner to the next by the loop's `Wip` instead of a lock.
//! One of the crate's three unsafe modules (with the SPSC ring and the claim ring):
//! safe Rust cannot express "exclusive because of who holds the counter" without a
//! mutex, and the mutex cost two uncontended locked instructions on every pass.

use crate::loom::UnsafeCell;

/// The stage's owner-only state and the downstream subscriber, reached only by the
/// thread that owns the loop (the [`Wip`](crate::drain::Wip)): it needs no lock of its own. The `Wip`'s
/// read-modify-writes are `AcqRel`: the one that releases the loop (`leave` reaching
/// 0) is read by the one that takes it next (`enter` or `try_enter` from 0), so each
/// owner's accesses happen before the next owner's. A mutex here cost two locked
/// instructions per pass that nobody ever contended: on a source whose every send
/// runs a pass (a channel's direct hand-off), two of the five per item. In loom
/// builds the cell is loom's, which checks that no two owners' accesses race (it
/// records a pass's access when the pass takes the slot).
pub(crate) struct OwnerSlot<T>(UnsafeCell<Option<T>>);

// SAFETY: the contents move from one owner thread to the next, so `T: Send` is
// required; `as_ptr` is the only way in, and its callers own the loop, whose hand-over
// orders their accesses (see the type's docs). No `&T` is ever shared between
// threads at once.
unsafe impl<T: Send> Sync for OwnerSlot<T> {}

impl<T> OwnerSlot<T> {
    pub(crate) fn new() -> Self {
        OwnerSlot(UnsafeCell::new(None))
    }

    /// A pointer to the slot: the one way in. Loom records the access when the
    /// pointer is taken.
    ///
    /// Dereferencing it is the caller's `unsafe`, sound only while the caller owns
    /// the core's loop (its `Wip`) and holds no other reference to the slot (a pass
    /// never runs inside a pass of the same core: the `Wip` refuses a second
    /// owner). A pointer rather than a closure over the slot: the pass body is the
    /// hot loop of a fused pipeline, and inside such a closure one of them
    /// (`take_while`) compiled to a loop 1.2–1.9 × slower.
    #[inline(always)]
    pub(crate) fn as_ptr(&self) -> *mut Option<T> {
        self.0.with_mut(|slot| slot)
    }
}
