// The hub's two kinds of party: a subscriber (`MemberStage`, a stage on the signal
// core) and the hub's own subscriber to upstream (`Inlet`).
//
// A member's pass takes a batch out of the ring under the hub's lock and hands it
// downstream without it; see the module docs of `hub` for the whole algorithm.

use std::collections::VecDeque;
use std::sync::{Arc, OnceLock, Weak};

use super::ring::Lagged;
use super::{Shared, HUB_BATCH};
use crate::loom::{AtomicBool, Ordering};
use crate::metrics::DropReporter;
use crate::spec::{Pull, PullMark};
use crate::stage::{Core, CoreHandle, Cx, Pass, Stage};
use crate::{Error, Subscriber, Subscription};

/// One subscriber of the hub: the shared part of its stage.
pub(crate) struct MemberStage<T> {
    shared: Arc<Shared<T>>,
    id: u64,
}

/// What only the member's pass touches.
pub(crate) struct Batch<T> {
    /// Items cloned out of the ring, on their way downstream; room for a batch,
    /// allocated once.
    items: Vec<T>,
    /// Its downstream's drop hook, for what its policy skips.
    drops: DropReporter,
    /// Its place in a registry, for a named subscriber (let go when it ends).
    registration: Option<crate::metrics::Registration>,
}

/// How the hub wakes a member that has items (or its end) waiting: by running the
/// member's pass on the waking thread, or, once a scheduled drain right behind the
/// member has *adopted* it (a `publish_on` whose upstream is this member), by
/// waking that drain, which runs the member's pass on its own thread when it pulls
/// (see the module docs of `hub`).
pub(crate) struct MemberWake {
    /// The member's core.
    core: Arc<dyn CoreHandle>,
    /// The drain that adopted the member, if one did.
    drain: OnceLock<Weak<dyn CoreHandle>>,
    /// The hub woke the member since its drain last pulled.
    pending: AtomicBool,
}

impl MemberWake {
    /// Items or the end wait for the member: run its pass, or have its drain run it.
    pub(crate) fn wake(&self) {
        if PULLING.get() {
            // A member's drain brought the arrival about (it pulls upstream's
            // lane, or a member's pass here asked for credit): this thread is one
            // of the members' already, and runs the woken passes here.
            self.core.signal();
            return;
        }
        match self.drain.get().and_then(Weak::upgrade) {
            Some(drain) => {
                // Release: pairs with the Acquire swap in `MemberPull::pull`; the
                // drain's signal below orders this store before the pass it asks
                // for (or the extra pass a running owner then owes).
                self.pending.store(true, Ordering::Release);
                // Signalling may run the drain's scheduler (user code). Its panic
                // must not unwind through the hub's pump (which would stay taken,
                // and every other subscriber wait for ever): the task it dropped
                // ended the drain, and the member's own pass, run here as without
                // adoption, meets the same scheduler and ends the member.
                if crate::guard::catch(|| drain.signal()).is_err() {
                    self.core.signal();
                }
            }
            None => self.core.signal(),
        }
    }
}

/// Subscribe `subscriber` as member `id` of the hub (`adoptable`: a drain right
/// behind it may adopt it, see [`MemberWake`]). `register` runs while the new core
/// owns its loop (after `on_subscribe`, before any pass), with the handle the hub
/// wakes it through.
pub(crate) fn attach<T, S>(
    shared: Arc<Shared<T>>,
    id: u64,
    adoptable: bool,
    subscriber: S,
    registration: Option<crate::metrics::Registration>,
    register: impl FnOnce(Arc<MemberWake>),
) where
    T: Clone + Send + 'static,
    S: Subscriber<T> + Send + 'static,
{
    let hook = subscriber.drop_hook();
    let batch = Batch {
        items: Vec::with_capacity(HUB_BATCH.min(shared.capacity)),
        drops: DropReporter::new("share", hook),
        registration,
    };
    let core = Core::new(MemberStage {
        shared: shared.clone(),
        id,
    });
    let wake = Arc::new(MemberWake {
        core: core.clone(),
        drain: OnceLock::new(),
        pending: AtomicBool::new(false),
    });
    let pull: Arc<dyn Pull> = Arc::new(MemberPull {
        shared,
        mark: PullMark::default(),
        wake: wake.clone(),
        adoptable,
    });
    let subscription = Subscription::with_pull(core.clone(), pull);
    core.attach_as(subscription, batch, subscriber, |_| register(wake));
}

/// What a subscriber's boundary sees of the hub's upstream [`Pull`] (a channel's
/// lane): a drain behind the subscriber that watches it runs upstream's drain loop
/// on its own thread when items wait there, and the arrivals reach every
/// subscriber from that thread, in a batch, instead of one by one from the
/// sender's. Nothing until the hub has subscribed upstream (and nothing ever if
/// upstream has no lane); each subscriber's mark counts once upstream.
///
/// A drain that [adopts](Pull::adopt) the member also pulls the member itself: the
/// hub's wake-ups then go to the drain, and the member's pass runs in the drain's
/// pull, on the drain's thread.
struct MemberPull<T> {
    shared: Arc<Shared<T>>,
    mark: PullMark,
    wake: Arc<MemberWake>,
    /// A `Backpressure` member: a drain may adopt it. A lossy member keeps taking
    /// its items at the arrival (into the drain's own ring, as far as its demand
    /// goes), so that a drain slow to run does not make it skip more than it did.
    adoptable: bool,
}

impl<T> MemberPull<T> {
    fn upstream(&self) -> Option<&dyn Pull> {
        self.shared.pull.get().map(|pull| &**pull)
    }
}

impl<T: Send + 'static> Pull for MemberPull<T> {
    fn watch(&self, on: bool) {
        // A mark set before upstream had a pull was never counted, and is not
        // taken back either.
        if let Some(pull) = self.upstream() {
            self.mark.set(pull, on);
        }
    }

    fn ready(&self) -> bool {
        self.woken() || self.upstream().is_some_and(|pull| pull.ready())
    }

    fn ready_run(&self) -> bool {
        self.woken() || self.upstream().is_some_and(|pull| pull.ready_run())
    }

    fn taken(&self) -> usize {
        self.upstream().map_or(0, |pull| pull.taken())
    }

    fn claimed(&self) -> bool {
        self.woken() || self.upstream().is_some_and(|pull| pull.claimed())
    }

    /// Upstream's drain loop first (its arrivals wake this member again), then the
    /// member's pass if the hub woke it.
    fn pull(&self) {
        if let Some(pull) = self.upstream() {
            let _pulling = Pulling::enter();
            pull.pull();
        }
        // Acquire: pairs with the Release store in `MemberWake::wake`.
        if self.wake.pending.swap(false, Ordering::Acquire) {
            self.wake.core.signal();
        }
    }

    fn adopt(&self, drain: Weak<dyn CoreHandle>) {
        if self.adoptable {
            // The first adopter stays (a subscription has one subscriber).
            let _ = self.wake.drain.set(drain);
        }
    }
}

thread_local! {
    /// This thread runs a member's pass, or upstream's drain loop for a member's
    /// drain (`MemberPull::pull`): the hub's wake-ups here run passes in place.
    static PULLING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks this thread [`PULLING`] for its life (restored on unwind too).
struct Pulling(bool);

impl Pulling {
    fn enter() -> Self {
        Pulling(PULLING.replace(true))
    }
}

impl Drop for Pulling {
    fn drop(&mut self) {
        PULLING.set(self.0);
    }
}

impl<T> MemberPull<T> {
    /// The hub woke the member for its adopting drain, which has not pulled since.
    fn woken(&self) -> bool {
        // Relaxed: a hint for polling; `pull` reads it with Acquire.
        self.wake.pending.load(Ordering::Relaxed)
    }
}

/// The subscription (and so the watcher) went: its mark, if counted, goes too.
impl<T> Drop for MemberPull<T> {
    fn drop(&mut self) {
        if let Some(pull) = self.upstream() {
            self.mark.release(pull);
        }
    }
}

impl<T: Clone + Send + 'static> Stage for MemberStage<T> {
    const NAME: &'static str = "share";
    type Item = T;
    type Owned = Batch<T>;
    type Padding = ();

    fn pass<S: Subscriber<T>>(
        &self,
        cx: &Cx<'_>,
        batch: &mut Batch<T>,
        downstream: &mut S,
    ) -> Pass {
        let _pulling = Pulling::enter();
        loop {
            if cx.stopped() {
                return Pass::Idle;
            }
            let demand = cx.demand().get();
            let room = batch.items.capacity();
            let want = usize::try_from(demand).unwrap_or(usize::MAX).min(room);
            // The items' `Clone` is user code, run under the hub's lock: a panic
            // there ends this subscriber with `Panicked` (the ring is as it was: the
            // cursor moves only once the clones are made; the lock recovers), not as
            // if the subscriber had panicked.
            let took = crate::guard::catch_in(Self::NAME, || {
                self.shared.take(self.id, demand, want, &mut batch.items)
            });
            let (taken, credit) = match took {
                Ok(took) => took,
                Err(error) => return cx.terminate(downstream, Err(error)),
            };
            if let Some((reason, n)) = taken.dropped {
                batch.drops.count(reason, n);
                batch.drops.flush();
            }
            // Request before delivering: the credit is reserved, and a subscriber
            // that panics in this delivery must not take it with it (the hub would
            // wait for items it never asked for).
            if credit > 0 {
                self.shared.request(credit);
            }
            if taken.count > 0 {
                if taken.count == 1 {
                    downstream.handed_one(crate::spec::Sealed::NEW);
                }
                let (_, rest) = cx.deliver(downstream, batch.items.drain(..));
                drop(rest);
            }
            if let Some(end) = taken.end {
                if let (Some(lagged), Err(error)) = (&taken.lagged, &end) {
                    log_cut_off(self.id, lagged, error);
                }
                return cx.terminate(downstream, end);
            }
            // Hungry: it read everything and the next arrival wakes it.
            if taken.hungry || taken.count == 0 || cx.demand().get() == 0 {
                return Pass::Idle;
            }
        }
    }

    fn stop(&self, batch: &mut Batch<T>) {
        batch.items.clear();
        batch.registration = None;
        self.shared.leave(self.id);
    }
}

/// The event of a `Disconnect` member cut off (info, target `weir::hub`): once per
/// member, from its last pass, outside the hub's lock; out of the pass's way.
#[cold]
#[inline(never)]
fn log_cut_off(id: u64, lagged: &Lagged, error: &Error) {
    tracing::info!(
        target: "weir::hub",
        subscriber = id,
        name = lagged.name.as_deref(),
        lag = lagged.lag,
        %error,
        "hub: a Disconnect subscriber fell behind its limit and is cut off (Lagged)"
    );
}

/// The hub's subscriber to upstream.
pub(crate) struct Inlet<T> {
    shared: Arc<Shared<T>>,
    /// The same hub, to end it from `Drop` (which cannot name `T`'s bounds).
    ending: Arc<dyn Ending>,
    /// A terminal signal arrived, or the hub refused an item: ignore what follows.
    done: bool,
    /// A delivery, [`gather`](crate::stage::window::gather)ed before the hub's lock
    /// is taken, and the items the ring evicted for it, dropped after the lock:
    /// empty between deliveries.
    gathered: VecDeque<T>,
    evicted: VecDeque<T>,
}

impl<T: Clone + Send + 'static> Inlet<T> {
    pub(crate) fn new(shared: Arc<Shared<T>>) -> Self {
        Inlet {
            ending: shared.clone(),
            shared,
            done: false,
            gathered: VecDeque::new(),
            evicted: VecDeque::new(),
        }
    }

    /// Hand `items` to the hub: gathered first (a lazy batch runs user code, which
    /// may call this hub), then taken under the hub's lock; what is left (after a
    /// refusal) and what the ring evicted is dropped here, without the lock.
    fn deliver(&mut self, items: impl Iterator<Item = T>) {
        if self.done {
            return;
        }
        if self
            .shared
            .arrive(items, &mut self.gathered, &mut self.evicted)
            .is_err()
        {
            self.done = true;
        }
        self.gathered.clear();
        self.evicted.clear();
    }
}

/// Ends the hub when upstream abandoned it, whatever its item type.
trait Ending: Send + Sync {
    fn abandoned(&self, error: Error);
}

impl<T: Clone + Send + 'static> Ending for Shared<T> {
    fn abandoned(&self, error: Error) {
        // After the hub's own cancel, upstream let go as asked.
        if !self.upstream.is_cancelled() {
            self.finish(Err(error));
        }
    }
}

impl<T> Drop for Inlet<T> {
    /// Released by upstream without a terminal signal (a publisher that ended
    /// without telling, or whose thread panicked holding it): the subscribers must
    /// not wait for ever, so the hub ends with an error of kind
    /// [`Cancelled`](crate::ErrorKind::Cancelled) after the ring's items. A no-op
    /// after a terminal signal, a refused item, or the hub's own cancel (then
    /// nobody reads: it stopped).
    fn drop(&mut self) {
        // During a panic out of the hub's guarded `subscribe`, the hub ends with the
        // panic instead.
        if !std::mem::replace(&mut self.done, true) && crate::guard::dropped_unterminated() {
            self.ending.abandoned(Error::cancelled_with(
                "hub: its upstream dropped the hub's subscriber without a terminal signal",
            ));
        }
    }
}

impl<T: Clone + Send + 'static> Subscriber<T> for Inlet<T> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        self.shared.subscribed(subscription);
    }

    fn on_next(&mut self, item: T) {
        self.deliver(std::iter::once(item));
    }

    fn on_error(&mut self, error: Error) {
        if !std::mem::replace(&mut self.done, true) {
            self.shared.finish(Err(error));
        }
    }

    fn on_complete(&mut self) {
        if !std::mem::replace(&mut self.done, true) {
            self.shared.finish(Ok(()));
        }
    }

    fn on_next_batch<I>(&mut self, items: I) -> u64
    where
        I: Iterator<Item = T>,
    {
        self.deliver(items);
        0
    }
}
