//! `on_backpressure_drop`: implementation notes. The user contract is on
//! [`PublisherExt::on_backpressure_drop`](crate::PublisherExt::on_backpressure_drop).
//!
//! `on_subscribe` hands downstream a [`Gate`] subscription and then requests
//! `UNBOUNDED` upstream. Downstream's requests only add to the `Gate`'s
//! [`AtomicDemand`] (any thread); `request(0)` is forwarded for upstream to answer
//! with the rule 3.9 error, and `cancel` goes straight upstream.
//!
//! Delivery: every upstream delivery (`on_next` is a batch of one) runs
//! [`demand::deliver`]: read the demand, hand downstream up to that many items in one
//! `on_next_batch`, settle with `produced`, add the batch credit it returned, and
//! repeat while items and demand remain, so demand requested from inside a batch lets
//! later items of the same upstream batch pass. The rest of the batch is dropped with
//! [`DropReason::OverflowNewest`] through the [`DropReporter`] (the pipeline's drop
//! hook, asked for in `on_subscribe`), flushed once per batch. No credit goes
//! upstream: it was asked for everything.
//!
//! State: [`Upstream`] (`Idle` → `Active` → `Done`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::demand::{self, AtomicDemand, UNBOUNDED};
use crate::drain::Upstream;
use crate::metrics::{DropHook, DropReporter};
use crate::{DropReason, Error, Publisher, RawSubscription, Subscriber, Subscription};

const STAGE: &str = "on_backpressure_drop";

/// Publisher for the [`on_backpressure_drop`](crate::PublisherExt::on_backpressure_drop) method.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct OnBackpressureDrop<P> {
    source: P,
}

impl<P> OnBackpressureDrop<P> {
    pub(crate) fn new(source: P) -> Self {
        OnBackpressureDrop { source }
    }
}

impl<P: Publisher> Publisher for OnBackpressureDrop<P>
where
    P::Item: 'static,
{
    type Item = P::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<P::Item> + Send + 'static,
    {
        self.source.subscribe(DropSubscriber {
            downstream: subscriber,
            upstream: Upstream::Idle,
            credit: None,
            drops: DropReporter::new(STAGE, None),
        })
    }

    fn in_flight_bound(&self) -> u64 {
        self.source.in_flight_bound()
    }
}

/// Downstream's subscription: its requests become demand here, not upstream.
struct Gate {
    /// Downstream's outstanding demand.
    demand: AtomicDemand,
    /// Upstream, for cancel and for `request(0)` (the source reports rule 3.9).
    upstream: Subscription,
    /// Downstream cancelled: the rest of a batch is released unread, not dropped.
    cancelled: AtomicBool,
}

impl RawSubscription for Gate {
    fn request(&self, n: u64) {
        if n == 0 {
            self.upstream.request(0);
        } else {
            self.demand.add(n);
        }
    }

    fn cancel(&self) {
        // Relaxed: read by the delivering thread to stop reading its batch; a cancel
        // from another thread that it misses only lets it report a few drops of
        // items that had no demand anyway.
        self.cancelled.store(true, Ordering::Relaxed);
        self.upstream.cancel();
    }
}

struct DropSubscriber<S> {
    /// The next stage.
    downstream: S,
    /// Life-cycle state.
    upstream: Upstream,
    /// Shared with downstream's subscription handle, once subscribed.
    credit: Option<Arc<Gate>>,
    /// Reports what is dropped.
    drops: DropReporter,
}

impl<T: 'static, S: Subscriber<T>> Subscriber<T> for DropSubscriber<S> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        if !self.upstream.accept(&subscription) {
            return;
        }
        let credit = Arc::new(Gate {
            demand: AtomicDemand::new(),
            upstream: subscription.clone(),
            cancelled: AtomicBool::new(false),
        });
        self.credit = Some(credit.clone());
        self.drops = DropReporter::new(STAGE, self.downstream.drop_hook());
        self.downstream.on_subscribe(Subscription::new(credit));
        subscription.request(UNBOUNDED);
    }

    fn on_next(&mut self, item: T) {
        let _credit_is_ours = self.on_next_batch(std::iter::once(item));
    }

    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        let (Some(credit), true) = (&self.credit, self.upstream.is_active()) else {
            return 0;
        };
        let credit = credit.clone();
        let cancelled = || credit.cancelled.load(Ordering::Relaxed);
        let (_, mut rest) = demand::deliver(&credit.demand, &mut self.downstream, items, cancelled);
        while let Some(mut items) = rest.take() {
            // After a cancel inside the batch, the rest is released unread (rule 3.6).
            if cancelled() {
                break;
            }
            // Items without demand are dropped one by one, the demand read as each
            // arrives: a request from another thread may come in the middle of a
            // batch (even while upstream makes an item), and from then on the rest
            // goes out against it.
            while let Some(item) = items.next() {
                if credit.demand.get() == 0 {
                    self.drops.drop_item(DropReason::OverflowNewest, item);
                    continue;
                }
                let once = std::iter::once(item);
                let _ = demand::deliver(&credit.demand, &mut self.downstream, once, cancelled);
                rest = demand::deliver(&credit.demand, &mut self.downstream, items, cancelled).1;
                break;
            }
        }
        self.drops.flush();
        if let Some(error) = self.drops.failure() {
            // The drop hook panicked: the stage fails as if its own code had.
            self.upstream.fail(&mut self.downstream, error);
        }
        // Upstream was asked for everything: no credit goes up.
        0
    }

    fn drop_hook(&self) -> Option<DropHook> {
        self.downstream.drop_hook()
    }

    fn stops_batches_itself(&self) -> bool {
        self.downstream.stops_batches_itself()
    }

    fn on_error(&mut self, error: Error) {
        self.upstream.forward_error(&mut self.downstream, error);
    }

    fn on_complete(&mut self) {
        self.upstream.forward_complete(&mut self.downstream);
    }
}
