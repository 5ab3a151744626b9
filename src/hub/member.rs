// The hub's two kinds of party: a subscriber (`MemberStage`, a stage on the signal
// core) and the hub's own subscriber to upstream (`Inlet`).
//
// A member's pass takes a batch out of the ring under the hub's lock and hands it
// downstream without it; see the module docs of `hub` for the whole algorithm.

use std::collections::VecDeque;
use std::sync::Arc;

use super::ring::Lagged;
use super::{Shared, HUB_BATCH};
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

/// Subscribe `subscriber` as member `id` of the hub. `register` runs while the new
/// core owns its loop (after `on_subscribe`, before any pass), with the handle the
/// hub wakes it through.
pub(crate) fn attach<T, S>(
    shared: Arc<Shared<T>>,
    id: u64,
    subscriber: S,
    registration: Option<crate::metrics::Registration>,
    register: impl FnOnce(Arc<dyn CoreHandle>),
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
    let pull: Arc<dyn Pull> = Arc::new(MemberPull {
        shared: shared.clone(),
        mark: PullMark::default(),
    });
    let core = Core::new(MemberStage { shared, id });
    let subscription = Subscription::with_pull(core.clone(), pull);
    core.attach_as(subscription, batch, subscriber, |core| {
        let handle: Arc<dyn CoreHandle> = core.clone();
        register(handle);
    });
}

/// What a subscriber's boundary sees of the hub's upstream [`Pull`] (a channel's
/// lane): a drain behind the subscriber that watches it runs upstream's drain loop
/// on its own thread when items wait there, and the arrivals reach every
/// subscriber from that thread, in a batch, instead of one by one from the
/// sender's. Nothing until the hub has subscribed upstream (and nothing ever if
/// upstream has no lane); each subscriber's mark counts once upstream.
struct MemberPull<T> {
    shared: Arc<Shared<T>>,
    mark: PullMark,
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
        self.upstream().is_some_and(|pull| pull.ready())
    }

    fn ready_run(&self) -> bool {
        self.upstream().is_some_and(|pull| pull.ready_run())
    }

    fn taken(&self) -> usize {
        self.upstream().map_or(0, |pull| pull.taken())
    }

    fn claimed(&self) -> bool {
        self.upstream().is_some_and(|pull| pull.claimed())
    }

    fn pull(&self) {
        if let Some(pull) = self.upstream() {
            pull.pull();
        }
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
