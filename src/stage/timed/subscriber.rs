//! The upstream side of a time operator: [`TimedSubscriber`].

use std::collections::VecDeque;
use std::sync::Arc;

use super::{start, Machine, TimedCore, CHUNK};
use crate::drain::Upstream;
use crate::metrics::{DropHook, DropReporter};
use crate::runtime::Scheduler;
use crate::stage::window::gather;
use crate::{DropReason, Error, Subscriber, Subscription};

/// A time operator's subscriber to its upstream: builds the core at
/// `on_subscribe`, feeds it items and the end, and reports what the machine drops to
/// the pipeline's drop hook (downstream's, asked for once at subscribe time).
pub(crate) struct TimedSubscriber<M, S, C>
where
    M: Machine,
    S: Subscriber<M::Out> + Send + 'static,
    C: Scheduler + Clone,
{
    /// Downstream, the machine and the scheduler until `on_subscribe` builds the core.
    pending: Option<(S, M, C)>,
    /// The core, once subscribed.
    core: Option<Arc<TimedCore<M, C, S>>>,
    /// Downstream's drop hook.
    hook: Option<DropHook>,
    /// Reports drops (producer side only), counted once per item.
    drops: DropReporter,
    /// What the machine dropped during a chunk of a batch, reported after its lock
    /// is released: room for a chunk, reserved at the first drop; empty between
    /// chunks.
    dropped: Vec<(DropReason, M::In)>,
    /// The stage's name in drop reports.
    stage: &'static str,
    /// Life-cycle state (rules 2.5, 1.7).
    upstream: Upstream,
    /// A chunk of a batch, gathered before the machine's lock is taken (see
    /// [`gather`]); empty between batches.
    gathered: VecDeque<M::In>,
}

impl<M, S, C> TimedSubscriber<M, S, C>
where
    M: Machine,
    S: Subscriber<M::Out> + Send + 'static,
    C: Scheduler + Clone,
{
    pub(crate) fn new(stage: &'static str, downstream: S, machine: M, scheduler: C) -> Self {
        TimedSubscriber {
            pending: Some((downstream, machine, scheduler)),
            core: None,
            hook: None,
            drops: DropReporter::new(stage, None),
            dropped: Vec::new(),
            stage,
            upstream: Upstream::Idle,
            gathered: VecDeque::new(),
        }
    }
}

impl<M, S, C> Drop for TimedSubscriber<M, S, C>
where
    M: Machine,
    S: Subscriber<M::Out> + Send + 'static,
    C: Scheduler + Clone,
{
    /// Released by upstream without a terminal signal (a publisher that ended
    /// without telling, or whose thread panicked holding it): the stage ends with an
    /// error of kind [`Cancelled`](crate::ErrorKind::Cancelled) instead of waiting
    /// for ever. A no-op after the end or the stage's cancel; before `on_subscribe`,
    /// downstream is dropped with it.
    fn drop(&mut self) {
        // After the stage's own cancel, upstream let go as asked.
        if self
            .core
            .as_ref()
            .is_some_and(|core| core.stage().upstream_done())
        {
            return;
        }
        self.on_error(crate::guard::abandoned(self.stage));
    }
}

impl<M, S, C> Subscriber<M::In> for TimedSubscriber<M, S, C>
where
    M: Machine,
    S: Subscriber<M::Out> + Send + 'static,
    C: Scheduler + Clone,
{
    fn on_subscribe(&mut self, subscription: Subscription) {
        if !self.upstream.accept(&subscription) {
            return;
        }
        let Some((downstream, machine, scheduler)) = self.pending.take() else {
            return;
        };
        self.hook = downstream.drop_hook();
        self.drops = DropReporter::new(self.stage, self.hook.clone());
        self.core = Some(start(machine, scheduler, Some(subscription), downstream));
    }

    fn on_next(&mut self, item: M::In) {
        let _no_credit = self.on_next_batch(std::iter::once(item));
    }

    /// A chunk at a time (see the timed core's header): one lock, one clock read and
    /// one pass per chunk instead of per item.
    fn on_next_batch<I: Iterator<Item = M::In>>(&mut self, mut items: I) -> u64 {
        let (Some(core), true) = (&self.core, self.upstream.is_active()) else {
            return 0;
        };
        loop {
            // Up to a chunk, pulled out of the batch before the machine's lock is
            // taken (see `gather`); what the machine leaves of it stays for the next
            // round.
            let room = CHUNK - self.gathered.len();
            let exhausted = gather(&mut self.gathered, &mut items, room) < room;
            let gathered = &mut self.gathered;
            let mut chunk = std::iter::from_fn(|| gathered.pop_front());
            // `None`: the stage is over (the rest of the batch is released).
            let Some((taken, _)) = core.stage().items(&mut chunk, &mut self.dropped) else {
                self.gathered.clear();
                return 0;
            };
            let more = !(exhausted && self.gathered.is_empty());
            if taken > 0 {
                core.signal();
            }
            if !self.dropped.is_empty() {
                for (reason, item) in self.dropped.drain(..) {
                    self.drops.drop_item(reason, item);
                }
                self.drops.flush();
                if let Some(error) = self.drops.failure() {
                    // The drop hook (or a dropped item) panicked: the stage fails as
                    // if its own code had (upstream cancelled, the stream ends with
                    // the error).
                    self.upstream.cancel();
                    core.stage().end(Err(error));
                    core.signal();
                    self.gathered.clear();
                    return 0;
                }
            }
            if !more {
                return 0;
            }
        }
    }

    /// Consumes every batch it is handed, and stops early once the stage is over.
    fn stops_batches_itself(&self) -> bool {
        true
    }

    fn on_error(&mut self, error: Error) {
        if let (true, Some(core)) = (self.upstream.finish(), &self.core) {
            core.stage().end(Err(error));
            core.signal();
        }
    }

    fn on_complete(&mut self) {
        if let (true, Some(core)) = (self.upstream.finish(), &self.core) {
            core.stage().end(Ok(()));
            core.signal();
        }
    }

    fn drop_hook(&self) -> Option<DropHook> {
        match &self.pending {
            Some((downstream, _, _)) => downstream.drop_hook(),
            None => self.hook.clone(),
        }
    }
}
