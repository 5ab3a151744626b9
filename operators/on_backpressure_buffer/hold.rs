//! The holding stage on the signal core: the held queue, the parked end, and the pass
//! that delivers them (see the parent module for the algorithm).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering as StdOrdering};
use std::time::Instant;

use crate::loom::{Mutex, MutexGuardOf};
use crate::metrics::{DropHook, DropReporter, Sweep};
use crate::queue::timed::TimedQueue;
use crate::stage::core::SharedUpstream;
use crate::stage::Core;
use crate::stage::{Cx, Pass, Stage};
use crate::{DropReason, Error, Subscriber};

#[cfg(weir_loom)]
use loom::sync::Condvar;
#[cfg(not(weir_loom))]
use std::sync::Condvar;

/// Largest run of held items taken out under one lock and delivered as one batch.
const RUN: usize = 256;

/// The held items, the parked end, and the producer's view of them.
pub(super) struct Held<T> {
    /// At most `capacity` items, oldest first, stamped at enqueue.
    pub(super) queue: TimedQueue<T>,
    /// Upstream's terminal signal (or the stage's own failure), delivered once the
    /// queue is empty.
    pub(super) end: Option<Result<(), Error>>,
    /// The stage is over: the producer drops what it brings instead of holding it.
    pub(super) closed: bool,
    /// Producers waiting for room (an item with demand found the queue full).
    waiting: usize,
}

/// The stage's shared part: what the producer, downstream's requests and the drain
/// owner share.
pub(super) struct Hold<T> {
    /// The held queue; locked briefly, never across a call into another stage.
    pub(super) held: Mutex<Held<T>>,
    /// Signalled when items leave the queue, demand is used up, or the stage closes.
    room: Condvar,
    /// Upstream, to cancel it.
    pub(super) upstream: SharedUpstream,
    /// The thread running the current pass (0: none), so a producer never waits for
    /// a pass that is further up its own stack.
    owner: AtomicUsize,
    /// The stage's name in reports.
    name: &'static str,
    /// Downstream's drop hook, for the items a sweep takes out.
    hook: Option<DropHook>,
    /// An error overtakes the held items (released, as on cancel) instead of waiting
    /// behind them.
    errors_first: bool,
}

/// What only the drain owner touches.
pub(super) struct Delivery<T> {
    /// The run of held items on its way downstream (capacity `min(capacity, RUN)`).
    run: VecDeque<T>,
    /// Items that waited too long in the queue (max age, CoDel), with the reason, on
    /// their way to the drop hook.
    expired: Vec<(DropReason, T)>,
    /// Reports expired items.
    reporter: DropReporter,
}

impl<T> Delivery<T> {
    pub(super) fn new(capacity: usize, reporter: DropReporter) -> Self {
        Delivery {
            run: VecDeque::with_capacity(capacity.min(RUN)),
            expired: Vec::new(),
            reporter,
        }
    }
}

pub(super) fn lock<X>(mutex: &Mutex<X>) -> MutexGuardOf<'_, X> {
    // No user code runs under these locks; recover from poisoning anyway.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// An address unique to the calling thread while it lives.
fn this_thread() -> usize {
    // loom runs a model's threads on one OS thread: its thread-locals tell them apart.
    #[cfg(weir_loom)]
    loom::thread_local!(static MARK: u8 = 0);
    #[cfg(not(weir_loom))]
    std::thread_local!(static MARK: u8 = const { 0 });
    MARK.with(|mark| mark as *const u8 as usize)
}

impl<T: Send + 'static> Hold<T> {
    pub(super) fn new(
        queue: TimedQueue<T>,
        upstream: SharedUpstream,
        name: &'static str,
        hook: Option<DropHook>,
        errors_first: bool,
    ) -> Self {
        Hold {
            held: Mutex::new(Held {
                queue,
                end: None,
                closed: false,
                waiting: 0,
            }),
            room: Condvar::new(),
            upstream,
            owner: AtomicUsize::new(0),
            name,
            hook,
            errors_first,
        }
    }

    /// The producer's hand-over while another thread owns the loop: wait until `item`
    /// can be held the way a synchronous pipeline would have held it. Returns the
    /// locked queue with room for `item`, or `Err` with the queue full and no demand
    /// outstanding (the caller applies its policy), or `Ok(None)` when the stage is
    /// over (the caller drops the item).
    ///
    /// With demand outstanding and the queue full, the owner is delivering (the
    /// producer's failed `enter` made sure it runs another pass), so room appears:
    /// wait for it rather than drop an item downstream asked for. The wait ends when
    /// the owner makes room, uses up the demand, or the stage closes.
    pub(super) fn room_for(
        &self,
        demand: &crate::demand::AtomicDemand,
    ) -> Result<Option<MutexGuardOf<'_, Held<T>>>, MutexGuardOf<'_, Held<T>>> {
        let mut held = lock(&self.held);
        loop {
            if held.closed {
                return Ok(None);
            }
            if !held.queue.is_full() {
                return Ok(Some(held));
            }
            // Relaxed: compared with our own thread's mark, which only this thread
            // writes; another thread's mark can never equal it.
            let reentrant = self.owner.load(StdOrdering::Relaxed) == this_thread();
            if demand.get() == 0 || reentrant {
                return Err(held);
            }
            held.waiting += 1;
            held = self
                .room
                .wait(held)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            held.waiting -= 1;
        }
    }

    /// The drop hook panicked on an expired item: the stage fails as it does when its
    /// producer fails (upstream cancelled, the error parked behind the held items).
    fn hook_failed(&self, error: Error) {
        {
            // Over upstream's completion, if it was parked already: the stream
            // fails (a first error stays).
            let mut held = lock(&self.held);
            if !matches!(held.end, Some(Err(_))) {
                held.end = Some(Err(error));
            }
        }
        self.upstream.cancel();
    }

    /// Items left the queue, demand ran out, or the stage closed: wake a waiting
    /// producer.
    fn made_room(&self, held: &Held<T>) {
        if held.waiting > 0 {
            self.room.notify_all();
        }
    }

    /// Deliver held items while downstream has demand (in queue order: oldest first,
    /// or newest first once adaptive LIFO applies), dropping expired ones on the way:
    /// a run of up to `RUN` items leaves the queue under one lock and goes out in one
    /// `on_next_batch`, demand settled once per run. Wakes a waiting producer whenever
    /// items leave the queue or the demand runs out.
    pub(super) fn deliver_held<S: Subscriber<T>>(
        &self,
        cx: &Cx<'_>,
        drain: &mut Delivery<T>,
        downstream: &mut S,
    ) {
        let mut now: Option<Instant> = None;
        loop {
            if cx.stopped() {
                // Drops of this pass before the stop are still counted (below).
                break;
            }
            let wanted = cx.demand().get();
            let budget = usize::try_from(wanted).unwrap_or(usize::MAX).min(RUN);
            let taken = {
                let mut held = lock(&self.held);
                if held.queue.is_empty() {
                    self.made_room(&held);
                    break;
                }
                if budget == 0 {
                    // No demand: a producer waiting for room must apply its policy.
                    self.made_room(&held);
                    break;
                }
                let at = *now.get_or_insert_with(|| held.queue.gauge().now());
                let taken = held
                    .queue
                    .pop_batch(at, budget, &mut drain.run, &mut drain.expired);
                held.queue.flush(at);
                self.made_room(&held);
                taken
            };
            for (reason, item) in drain.expired.drain(..) {
                drain.reporter.drop_item(reason, item);
            }
            if let Some(error) = drain.reporter.failure() {
                self.hook_failed(error);
            }
            if !drain.run.is_empty() {
                cx.deliver(downstream, drain.run.drain(..));
            }
            if taken < budget {
                break;
            }
        }
        drain.reporter.flush();
        // Demand may have run out with items still held: a waiting producer decides.
        self.made_room(&lock(&self.held));
    }

    /// The end parked behind the held items, once they are all delivered; or, with
    /// `errors_first`, a parked error at once (the stop that follows releases the
    /// held items).
    pub(super) fn due_end(&self) -> Option<Result<(), Error>> {
        let mut held = lock(&self.held);
        let overtakes = self.errors_first && matches!(held.end, Some(Err(_)));
        if held.queue.is_empty() || overtakes {
            held.end.take()
        } else {
            None
        }
    }

    /// Mark the calling thread as the pass owner for the duration of `f`.
    pub(super) fn owning<R>(&self, f: impl FnOnce() -> R) -> R {
        // Relaxed: read only by producers comparing with their own mark.
        self.owner.store(this_thread(), StdOrdering::Relaxed);
        let result = f();
        self.owner.store(0, StdOrdering::Relaxed);
        result
    }
}

impl<T: Send + 'static> Stage for Hold<T> {
    const NAME: &'static str = "on_backpressure_buffer";
    type Item = T;
    type Owned = Delivery<T>;
    type Padding = ();

    fn pass<S: Subscriber<T>>(
        &self,
        cx: &Cx<'_>,
        drain: &mut Delivery<T>,
        downstream: &mut S,
    ) -> Pass {
        self.owning(|| {
            if self.errors_first {
                // An error overtakes what is held, demand or not.
                if let Some(end) = self.due_end() {
                    return cx.terminate(downstream, end);
                }
            }
            self.deliver_held(cx, drain, downstream);
            match self.due_end() {
                Some(end) => cx.terminate(downstream, end),
                None => Pass::Idle,
            }
        })
    }

    /// Close the queue (a producer arriving later drops its items), release what it
    /// holds, and cancel upstream.
    fn stop(&self, drain: &mut Delivery<T>) {
        let released: Vec<T> = {
            let mut held = lock(&self.held);
            held.closed = true;
            held.end = None;
            self.room.notify_all();
            held.queue.take_all().collect()
        };
        self.upstream.cancel();
        // Each item under a guard of its own: two whose `Drop` panics in one
        // collection's drop would abort the process.
        let panicked =
            crate::guard::drop_each(drain.run.drain(..)) + crate::guard::drop_each(released);
        if panicked > 0 {
            tracing::error!(
                stage = self.name,
                panicked,
                "held items panicked in Drop; contained"
            );
        }
        tracing::trace!(stage = self.name, "holding stage stopped");
    }
}

/// Before the statistics are read, the held queue's counts waiting for their grain
/// are published, and items that died in it (past the maximum age) while nobody
/// reads leave: reported as `Expired`, room made for a waiting
/// producer, and the end parked behind them delivered if they were the last.
impl<T: Send + 'static, S: Subscriber<T> + Send + 'static> Sweep for Core<Hold<T>, S> {
    fn sweep(&self) {
        let hold = self.stage();
        let mut stale = Vec::new();
        let end_due = {
            // A snapshot taken under the lock (by a drop hook the producer runs while
            // holding it, say) skips the sweep rather than wait for itself.
            let Ok(mut held) = hold.held.try_lock() else {
                return;
            };
            held.queue.publish();
            let now = held.queue.gauge().now();
            if held.queue.expire_stale(now, &mut stale) == 0 {
                return;
            }
            held.queue.flush(now);
            hold.made_room(&held);
            held.queue.is_empty() && held.end.is_some()
        };
        let mut reporter = DropReporter::new(hold.name, hold.hook.clone());
        for (reason, item) in stale {
            reporter.drop_item(reason, item);
        }
        reporter.flush();
        if let Some(error) = reporter.failure() {
            hold.hook_failed(error);
            self.signal();
        }
        if end_due {
            self.signal();
        }
    }
}
