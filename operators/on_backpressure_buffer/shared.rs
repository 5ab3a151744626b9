//! The drain side of the holding core: the ring, the parked end, downstream, and the
//! one `Wip` pass that delivers them (see the parent module for who runs what).

use crate::demand::{self, AtomicDemand};
use crate::drain::Wip;
use crate::loom::{AtomicU8, Mutex, MutexGuardOf, Ordering};
use crate::metrics::DropReporter;
use crate::queue::timed::{Popped, TimedQueue};
use crate::{DropReason, Error, RawSubscription, Subscriber, Subscription};

/// Flag: downstream cancelled.
const CANCELLED: u8 = 1;
/// Flag: downstream called `request(0)` (rule 3.9).
const BAD_REQUEST: u8 = 2;

/// The held items and the parked end of the stream.
pub(super) struct Held<T> {
    /// At most `capacity` items, oldest first, stamped at enqueue; grows to at most
    /// `capacity`.
    pub(super) queue: TimedQueue<T>,
    /// Upstream's terminal signal (or the stage's own failure), delivered once `items`
    /// is empty.
    pub(super) end: Option<Result<(), Error>>,
}

/// State shared by the producer, downstream's subscription handle and the drain owner.
pub(super) struct Shared<T, S> {
    /// Downstream's outstanding demand.
    pub(super) demand: AtomicDemand,
    /// The one drain loop.
    pub(super) wip: Wip,
    /// `CANCELLED | BAD_REQUEST`.
    pub(super) flags: AtomicU8,
    /// The ring; locked briefly, never across a call into another stage.
    pub(super) held: Mutex<Held<T>>,
    /// Downstream; locked only by the `Wip` owner. `None` once terminated.
    pub(super) downstream: Mutex<Option<S>>,
    /// Upstream, to cancel it.
    pub(super) upstream: Subscription,
    /// Reports items that expired in the queue; locked only by the `Wip` owner.
    pub(super) expired: Mutex<DropReporter>,
}

pub(super) fn lock<X>(mutex: &Mutex<X>) -> MutexGuardOf<'_, X> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl<T: 'static, S: Subscriber<T>> Shared<T, S> {
    /// One drain pass; `arrive` handles the producer's batch (after the held items).
    pub(super) fn pass_with(&self, arrive: impl FnOnce(&mut S)) {
        let mut slot = lock(&self.downstream);
        let Some(downstream) = slot.as_mut() else {
            return;
        };
        if self.stopped(downstream) {
            *slot = None;
            return;
        }
        self.deliver_held(downstream);
        arrive(downstream);
        let end = {
            let mut held = lock(&self.held);
            if held.queue.is_empty() {
                held.end.take()
            } else {
                None
            }
        };
        match end {
            Some(Ok(())) => downstream.on_complete(),
            Some(Err(error)) => downstream.on_error(error),
            None => {
                if !self.stopped(downstream) {
                    return;
                }
            }
        }
        *slot = None;
    }

    pub(super) fn pass(&self) {
        self.pass_with(|_| {});
    }

    /// Handle a cancel or `request(0)`: true when the stage is over (the held items
    /// are released).
    fn stopped(&self, downstream: &mut S) -> bool {
        // Relaxed: set before the setter's `Wip::enter` (Release), which this owner
        // Acquired before the pass (see `drain`).
        let flags = self.flags.load(Ordering::Relaxed);
        if flags == 0 {
            return false;
        }
        self.upstream.cancel();
        if flags & CANCELLED == 0 {
            downstream.on_error(demand::validate(0).unwrap_err());
        }
        let mut held = lock(&self.held);
        held.queue.take_all().for_each(drop);
        held.end = None;
        true
    }

    /// Deliver held items while downstream has demand (oldest first, or newest first
    /// once adaptive LIFO applies), dropping expired ones on the way. Demand is read
    /// and settled once per run of items; the loop goes round again only if the run
    /// used all of it (downstream may have requested more from inside `on_next`). The
    /// clock is read once per call, and not at all while nothing is held.
    fn deliver_held(&self, downstream: &mut S) {
        let now = {
            let held = lock(&self.held);
            if held.queue.is_empty() {
                return;
            }
            held.queue.gauge().now()
        };
        let mut expired = lock(&self.expired);
        loop {
            let budget = self.demand.get();
            let mut sent = 0u64;
            while sent < budget && self.flags.load(Ordering::Relaxed) == 0 {
                let popped = lock(&self.held).queue.pop_or_expired(now);
                match popped {
                    Some(Popped::Item(item)) => {
                        downstream.on_next(item);
                        sent += 1;
                    }
                    Some(Popped::Expired(item)) => expired.drop_item(DropReason::Expired, item),
                    None => break,
                }
            }
            self.demand.produced(sent);
            if sent == 0 || sent < budget {
                break;
            }
        }
        expired.flush();
        lock(&self.held).queue.flush(now);
    }

    /// Pass arriving items straight through while nothing is held and downstream has
    /// demand; the items that must be held (if any) are left in `items`. Only the
    /// producer holds items, so the ring stays empty while this runs.
    pub(super) fn pass_through<I: Iterator<Item = T>>(&self, downstream: &mut S, items: &mut I) {
        if lock(&self.held).queue.is_empty() {
            demand::deliver(&self.demand, downstream, items, || {
                self.flags.load(Ordering::Relaxed) != 0
            });
        }
    }
}

impl<T: Send + 'static, S: Subscriber<T> + Send> RawSubscription for Shared<T, S> {
    fn request(&self, n: u64) {
        if demand::validate(n).is_ok() {
            self.demand.add(n);
        } else {
            self.flags.fetch_or(BAD_REQUEST, Ordering::Relaxed);
        }
        self.wip.drain(|| self.pass());
    }

    fn cancel(&self) {
        self.flags.fetch_or(CANCELLED, Ordering::Relaxed);
        self.wip.drain(|| self.pass());
    }
}
