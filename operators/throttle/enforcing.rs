//! Enforcing: pass demand through and reject what finds no token (see the parent
//! module).

use std::time::Instant;

use super::Bucket;
use crate::drain::Upstream;
use crate::guard::catch_in;
use crate::metrics::{DropHook, DropReporter};
use crate::runtime::Scheduler;
use crate::{DropReason, Error, Subscriber, Subscription};

/// The enforcing stage: a pass-through subscriber with a token bucket.
pub(super) struct Enforcer<S, C> {
    /// The next stage.
    pub(super) downstream: S,
    /// The token bucket.
    pub(super) bucket: Bucket,
    /// Where timers run and what time it is.
    pub(super) scheduler: C,
    /// Reports rejected items, counted once per batch.
    pub(super) drops: DropReporter,
    /// Downstream's drop hook, asked for at subscribe time.
    pub(super) hook: Option<DropHook>,
    /// Life-cycle state.
    pub(super) upstream: Upstream,
}

/// The scheduler's clock; a panic in it (user code: the `Scheduler` trait is public)
/// is the stage's `Panicked` error.
fn now<C: Scheduler>(scheduler: &C) -> Result<Instant, Error> {
    catch_in("throttle", || scheduler.now())
}

impl<S, C: Scheduler> Enforcer<S, C> {
    /// Spend a token if there is one.
    fn admit(&mut self) -> Result<bool, Error> {
        if self.bucket.refill(now(&self.scheduler)?, 0) > 0 {
            self.bucket.spend(1);
            Ok(true)
        } else {
            Ok(false)
        }
    }
}

impl<T, S, C> Subscriber<T> for Enforcer<S, C>
where
    T: Send + 'static,
    S: Subscriber<T>,
    C: Scheduler,
{
    fn on_subscribe(&mut self, subscription: Subscription) {
        if self.upstream.accept(&subscription) {
            self.hook = self.downstream.drop_hook();
            self.drops = DropReporter::new("throttle", self.hook.clone());
            let started = now(&self.scheduler).map(|now| self.bucket.refill(now, 0));
            // Rule 1.9: `on_subscribe` first, also when the clock failed.
            self.downstream.on_subscribe(subscription);
            if let Err(error) = started {
                self.upstream.fail(&mut self.downstream, error);
            }
        }
    }

    fn on_next(&mut self, item: T) {
        if !self.upstream.is_active() {
            return;
        }
        let admitted = match self.admit() {
            Ok(admitted) => admitted,
            Err(error) => {
                drop(item);
                self.upstream.fail(&mut self.downstream, error);
                return;
            }
        };
        if admitted {
            self.downstream.on_next(item);
        } else {
            self.drops.drop_item(DropReason::Rejected, item);
            self.drops.flush();
            if let Some(error) = self.drops.failure() {
                // The drop hook panicked: the stage fails as if its own code had.
                self.upstream.fail(&mut self.downstream, error);
            } else if let Some(upstream) = self.upstream.get() {
                upstream.request(1);
            }
        }
    }

    /// One batch downstream: the admitted items, as one `on_next_batch`. The clock is
    /// read when the tokens known to be there run out, not per item: the items of a
    /// batch arrive within nanoseconds of each other, and a token that accrues
    /// meanwhile is counted at the next read, so no window sees more than the bucket
    /// allows.
    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        if !self.upstream.is_active() {
            return 0;
        }
        let Enforcer {
            downstream,
            bucket,
            scheduler,
            drops,
            upstream,
            ..
        } = self;
        // Tokens available since the last clock read, not yet spent.
        let mut tokens = 0u64;
        let mut rejected = 0u64;
        // A panic of the clock: the rest of the batch is let go, the stage fails.
        let mut clock_failed = None;
        let admitted = items.filter_map(|item| {
            if clock_failed.is_some() {
                return None;
            }
            if tokens == 0 {
                match now(scheduler) {
                    Ok(now) => tokens = bucket.refill(now, 0),
                    Err(error) => {
                        clock_failed = Some(error);
                        return None;
                    }
                }
            }
            if tokens > 0 {
                tokens -= 1;
                bucket.spend(1);
                Some(item)
            } else {
                drops.drop_item(DropReason::Rejected, item);
                rejected += 1;
                None
            }
        });
        let credit = downstream.on_next_batch(admitted);
        drops.flush();
        if let Some(error) = clock_failed.or_else(|| drops.failure()) {
            // The clock or the drop hook panicked: the stage fails as if its own code
            // had.
            upstream.fail(downstream, error);
            return 0;
        }
        // The rejected items are asked for again, as if requested after the batch.
        credit.saturating_add(rejected)
    }

    fn on_error(&mut self, error: Error) {
        self.upstream.forward_error(&mut self.downstream, error);
    }

    fn on_complete(&mut self) {
        self.upstream.forward_complete(&mut self.downstream);
    }

    fn drop_hook(&self) -> Option<DropHook> {
        self.hook.clone().or_else(|| self.downstream.drop_hook())
    }

    fn stops_batches_itself(&self) -> bool {
        self.downstream.stops_batches_itself()
    }
}
