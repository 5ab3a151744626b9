//! Drops, counted and reported (principle 3: every drop is counted, with a reason).
//!
//! A lossy stage (`on_backpressure_drop`, `on_backpressure_latest`, `conflate`, a
//! drop-oldest buffer, …) never discards an item silently. At subscribe time it asks
//! its downstream for a [`DropHook`] ([`Subscriber::drop_hook`]); pass-through stages
//! forward the question, and [`PublisherExt::on_dropped`] answers it. Each discarded
//! item is then handed to the hook as a [`Dropped`] (its reason, the stage's name,
//! and the item itself, which the hook may take to release resources), and counted in
//! the hook's [`Drops`]. Without a hook the stage still drops the item (that is its
//! policy).
//!
//! Logging: hook or not, each lossy stage emits a rate-limited summary of its drops,
//! a `tracing` event at debug level (target `weir::drops`, fields `stage`, `reason`,
//! `total`, `at_end`): when its running total for a reason reaches a power of two
//! (checked once per batch, so about `log2(n)` events for `n` drops, never one per
//! item), and once more when the stage ends, with its final total.
//!
//! Counting: a stage counts drops locally while it handles a batch and adds them to
//! the shared atomic counters once per batch ([`Drops::add`]), not per item.
//!
//! Bounded queues also expose [`QueueStats`] (depth, oldest-item age, rates, lag in
//! seconds) through a [`QueueMonitor`]; see [`queue_stats`'s docs](QueueStats).
//!
//! [`Subscriber::drop_hook`]: crate::Subscriber::drop_hook
//! [`PublisherExt::on_dropped`]: crate::PublisherExt::on_dropped

#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod export;
mod queue_stats;
mod rate;
mod registry;

pub(crate) use queue_stats::{QueueGauge, Sweep};
pub use queue_stats::{QueueMonitor, QueueStats};
pub use rate::{MAX_RATE_WINDOW, RATE_WINDOW};
pub use registry::{Pipeline, Registry, RegistrySnapshot, StageSnapshot};
pub(crate) use registry::{ReadChannel, ReadSubscriber, Registration};

use std::any::Any;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::{DropReason, Error};

/// Counters of dropped items by [`DropReason`]; clones share the counters.
#[derive(Clone, Default)]
pub struct Drops {
    counters: Arc<[AtomicU64; DropReason::COUNT]>,
}

impl fmt::Debug for Drops {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut map = f.debug_map();
        for reason in DropReason::ALL {
            map.entry(&reason, &self.count(reason));
        }
        map.finish()
    }
}

impl Drops {
    /// New counters, all zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add `n` drops for `reason` (the count stops at `u64::MAX`).
    #[inline]
    pub fn add(&self, reason: DropReason, n: u64) {
        if n > 0 {
            add_saturating(&self.counters[reason as usize], n);
        }
    }

    /// Drops counted for `reason`.
    pub fn count(&self, reason: DropReason) -> u64 {
        self.counters[reason as usize].load(Ordering::Relaxed)
    }

    /// Drops counted for every reason together.
    pub fn total(&self) -> u64 {
        DropReason::ALL
            .iter()
            .fold(0, |total, &r| total.saturating_add(self.count(r)))
    }
}

/// Add `n` to a statistics counter that stops at `u64::MAX` instead of wrapping.
#[inline]
pub(crate) fn add_saturating(counter: &AtomicU64, n: u64) {
    // Relaxed: counters are statistics; no other memory is published with them.
    let before = counter.fetch_add(n, Ordering::Relaxed);
    if before.checked_add(n).is_none() {
        // Wrapped: back to the ceiling (an add racing this one wraps and lands here
        // too).
        counter.store(u64::MAX, Ordering::Relaxed);
    }
}

/// One dropped item, as a [`DropHook`] sees it.
pub struct Dropped<'a> {
    reason: DropReason,
    stage: &'static str,
    /// Always an `Option<T>` holding the item, so [`take`](Dropped::take) can move it out.
    item: &'a mut dyn Any,
}

impl fmt::Debug for Dropped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dropped")
            .field("reason", &self.reason)
            .field("stage", &self.stage)
            .finish_non_exhaustive()
    }
}

impl<'a> Dropped<'a> {
    /// Why the item was dropped.
    pub fn reason(&self) -> DropReason {
        self.reason
    }

    /// The name of the stage that dropped it (e.g. `"on_backpressure_latest"`).
    pub fn stage(&self) -> &'static str {
        self.stage
    }

    /// Take the item out, if it is a `T` (and was not taken yet). Items the hook does
    /// not take are dropped by the stage right after the hook returns. A wrong `T`
    /// gives `None`: to receive one stage's items with their type checked by the
    /// compiler, use [`PublisherExt::on_drop`](crate::PublisherExt::on_drop).
    pub fn take<T: 'static>(&mut self) -> Option<T> {
        self.item.downcast_mut::<Option<T>>().and_then(Option::take)
    }

    /// Look at the item, if it is a `T`.
    pub fn peek<T: 'static>(&self) -> Option<&T> {
        self.item
            .downcast_ref::<Option<T>>()
            .and_then(Option::as_ref)
    }
}

/// One dropped item of a known type, as the typed hook of
/// [`PublisherExt::on_drop`](crate::PublisherExt::on_drop) receives it: the item
/// itself (yours to keep, reuse or drop), why, and which stage dropped it.
pub struct DroppedItem<T> {
    reason: DropReason,
    stage: &'static str,
    item: T,
}

impl<T> fmt::Debug for DroppedItem<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DroppedItem")
            .field("reason", &self.reason)
            .field("stage", &self.stage)
            .finish_non_exhaustive()
    }
}

impl<T> DroppedItem<T> {
    /// Why the item was dropped.
    pub fn reason(&self) -> DropReason {
        self.reason
    }

    /// The name of the stage that dropped it (e.g. `"on_backpressure_latest"`).
    pub fn stage(&self) -> &'static str {
        self.stage
    }

    /// The item.
    pub fn item(&self) -> &T {
        &self.item
    }

    /// The item, by value.
    pub fn into_inner(self) -> T {
        self.item
    }
}

/// Where a pipeline's lossy stages report what they drop: counters, and optionally a
/// closure that sees every dropped item. Cheap to clone (two `Arc`s).
///
/// # Examples
///
/// ```
/// use weir::metrics::{DropHook, Drops};
/// use weir::DropReason;
///
/// let drops = Drops::new();
/// let hook = DropHook::new(drops.clone()).inspect(|dropped| {
///     if let Some(buffer) = dropped.take::<Vec<u8>>() {
///         drop(buffer); // or hand it back to a pool
///     }
/// });
/// hook.report("example", DropReason::OverflowNewest, vec![1u8, 2, 3]);
/// assert_eq!(drops.count(DropReason::OverflowNewest), 1);
/// ```
#[derive(Clone)]
pub struct DropHook {
    drops: Drops,
    inspect: Option<InspectFn>,
    /// The stage that installed the hook (`on_dropped`, `on_drop`): named in the
    /// error of a lossy stage whose report to the hook panicked.
    stage: &'static str,
}

/// The closure a [`DropHook`] calls for each dropped item.
type InspectFn = Arc<dyn Fn(&mut Dropped<'_>) + Send + Sync>;

impl fmt::Debug for DropHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DropHook")
            .field("drops", &self.drops)
            .field("inspect", &self.inspect.is_some())
            .finish()
    }
}

impl DropHook {
    /// A hook that counts into `drops`.
    pub fn new(drops: Drops) -> Self {
        DropHook {
            drops,
            inspect: None,
            stage: "",
        }
    }

    /// The same hook, installed by `stage` (named in the error of a panic in it).
    pub(crate) fn installed_by(mut self, stage: &'static str) -> Self {
        self.stage = stage;
        self
    }

    /// Also call `f` for every dropped item (after counting it).
    pub fn inspect(mut self, f: impl Fn(&mut Dropped<'_>) + Send + Sync + 'static) -> Self {
        self.inspect = Some(Arc::new(f));
        self
    }

    /// The counters this hook adds to.
    pub fn drops(&self) -> &Drops {
        &self.drops
    }

    /// Report one dropped `item`: hand it to the closure, if any; it is dropped after.
    /// Counting is separate ([`Drops::add`]) so stages can count once per batch.
    pub fn hand_over<T: 'static>(&self, stage: &'static str, reason: DropReason, item: T) {
        if let Some(inspect) = &self.inspect {
            let mut slot = Some(item);
            inspect(&mut Dropped {
                reason,
                stage,
                item: &mut slot,
            });
        }
    }

    /// A hook that hands every dropped `T` to `f` and counts into `drops`; then the
    /// drop goes on to `next` (if any): with the item taken when it was a `T` (the
    /// hook below still sees the drop, its `take` gives `None`), with the item when
    /// it was not, so nothing is lost to a wrong type. What
    /// [`PublisherExt::on_drop`](crate::PublisherExt::on_drop) installs.
    pub(crate) fn typed<T, F>(drops: Drops, next: Option<DropHook>, f: F) -> Self
    where
        T: 'static,
        F: Fn(DroppedItem<T>) + Send + Sync + 'static,
    {
        let hook = DropHook::new(drops).inspect(move |dropped| {
            if let Some(item) = dropped.take::<T>() {
                f(DroppedItem {
                    reason: dropped.reason(),
                    stage: dropped.stage(),
                    item,
                });
            }
            if let Some(inspect) = next.as_ref().and_then(|next| next.inspect.as_ref()) {
                inspect(dropped);
            }
        });
        hook.installed_by("on_drop")
    }

    /// Count and hand over one dropped item.
    pub fn report<T: 'static>(&self, stage: &'static str, reason: DropReason, item: T) {
        self.drops.add(reason, 1);
        self.hand_over(stage, reason, item);
    }
}

/// What a lossy stage holds: the hook found downstream (if any), the drops of the
/// current batch, not yet added to the shared counters, and the running totals its
/// rate-limited summary reports ([`drop_summary`]).
#[derive(Debug, Default)]
pub(crate) struct DropReporter {
    hook: Option<DropHook>,
    stage: &'static str,
    /// The hook (or a dropped item's `Drop`) panicked: the stage fails with this
    /// error once it takes it ([`failure`](Self::failure)).
    failed: Option<Error>,
    /// The hook panicked: it is not called again.
    hook_panicked: bool,
    pending: [u64; DropReason::COUNT],
    /// Drops flushed so far, by reason (what the hook's counters received from this
    /// stage, or would have with a hook).
    totals: [u64; DropReason::COUNT],
    /// The totals as the last summary reported them: what is left to report when the
    /// stage ends.
    reported: [u64; DropReason::COUNT],
}

impl DropReporter {
    pub(crate) fn new(stage: &'static str, hook: Option<DropHook>) -> Self {
        DropReporter {
            hook,
            stage,
            failed: None,
            hook_panicked: false,
            pending: [0; DropReason::COUNT],
            totals: [0; DropReason::COUNT],
            reported: [0; DropReason::COUNT],
        }
    }

    /// One item dropped: handed to the hook now, counted at the next [`flush`](Self::flush).
    ///
    /// The hook and the item's `Drop` are user code: a panic in them is caught here
    /// (the stage may be holding a lock, and the panic must not unwind into its
    /// upstream as if the stage's subscriber had panicked). A hook that panicked is
    /// not called again, and the stage fails with the first panic's error (naming the
    /// stage that installed the hook) once it takes it with [`failure`](Self::failure).
    pub(crate) fn drop_item<T: 'static>(&mut self, reason: DropReason, item: T) {
        self.pending[reason as usize] += 1;
        let stage = self.stage;
        let handed = match self.hook.as_ref().filter(|_| !self.hook_panicked) {
            Some(hook) => {
                crate::guard::catch(|| hook.hand_over(stage, reason, item)).map_err(|error| {
                    self.hook_panicked = true;
                    error.in_stage(hook.stage)
                })
            }
            None => crate::guard::catch(move || drop(item)),
        };
        if let Err(error) = handed {
            tracing::error!(
                stage,
                "a drop hook or a dropped item panicked; the stage fails"
            );
            self.failed.get_or_insert(error);
        }
    }

    /// The error of the hook's panic, once: the stage must fail with it (cancel
    /// upstream, signal it downstream).
    pub(crate) fn failure(&mut self) -> Option<Error> {
        self.failed.take()
    }

    /// `n` items dropped that cannot be handed over (a `conflate` function consumed
    /// them): counted at the next [`flush`](Self::flush).
    pub(crate) fn count(&mut self, reason: DropReason, n: u64) {
        self.pending[reason as usize] += n;
    }

    /// Add this batch's drops to the shared counters; a reason whose running total
    /// crossed a power of two gets a summary event (once per batch at most, never
    /// per item).
    pub(crate) fn flush(&mut self) {
        for reason in DropReason::ALL {
            let at = reason as usize;
            let n = std::mem::take(&mut self.pending[at]);
            if n == 0 {
                continue;
            }
            if let Some(hook) = &self.hook {
                hook.drops.add(reason, n);
            }
            let before = self.totals[at];
            self.totals[at] = before + n;
            if crossed_power_of_two(before, before + n) {
                self.reported[at] = before + n;
                drop_summary(self.stage, reason, before + n, self.hook.is_some(), false);
            }
        }
    }
}

impl Drop for DropReporter {
    /// The stage ended: count what is still pending (drops handed to the hook in a
    /// pass that unwound before its flush: a subscriber that panicked), then report
    /// what came after the last summary, so the last event of each reason carries
    /// the stage's whole total.
    fn drop(&mut self) {
        self.flush();
        for reason in DropReason::ALL {
            let at = reason as usize;
            if self.totals[at] > self.reported[at] {
                drop_summary(
                    self.stage,
                    reason,
                    self.totals[at],
                    self.hook.is_some(),
                    true,
                );
            }
        }
    }
}

/// True when a running total that went from `before` to `after` reached a power of
/// two on the way (`before < 2^k <= after`): its bit length grew. One comparison.
#[inline]
pub(crate) fn crossed_power_of_two(before: u64, after: u64) -> bool {
    before.leading_zeros() > after.leading_zeros()
}

/// The rate-limited summary of one stage's drops (target `weir::drops`, level
/// debug): its running `total` for `reason`, emitted when the total reaches a power
/// of two (so about `log2(n)` events for `n` drops, never one per item) and once more
/// when the stage ends (`at_end`) if drops came after the last one. Kept out of line:
/// the callers' paths stay as they were.
#[cold]
#[inline(never)]
pub(crate) fn drop_summary(
    stage: &'static str,
    reason: DropReason,
    total: u64,
    hooked: bool,
    at_end: bool,
) {
    if hooked {
        tracing::debug!(
            target: "weir::drops",
            stage,
            ?reason,
            total,
            at_end,
            "items dropped (summary: at each power of two and at the stage's end)"
        );
    } else {
        tracing::debug!(
            target: "weir::drops",
            stage,
            ?reason,
            total,
            at_end,
            "items dropped without a drop hook (add PublisherExt::on_dropped to see them)"
        );
    }
}
