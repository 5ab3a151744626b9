//! `scan`: implementation notes. The user contract is on
//! [`PublisherExt::scan`](crate::PublisherExt::scan).
//!
//! Downstream's `on_subscribe` receives upstream's subscription itself; requests,
//! cancels and batch credit pass unchanged. Each step folds the item into the
//! accumulator, keeps a clone as the next accumulator and emits the new state, so one
//! state goes out per item in and a batch stays a batch (`guard::Guarded` applies the
//! step lazily inside `on_next_batch`). The accumulator is state, not a held item.
//!
//! State: [`Upstream`] (`Idle` → `Active` → `Done`) plus `acc`, which is `None` only
//! after the closure panicked (the stage is then `Done`: upstream cancelled,
//! downstream `on_error(Panicked)`).

use crate::drain::Upstream;
use crate::guard::{catch_in, BatchOutcome, Guarded};
use crate::metrics::DropHook;
use crate::{Error, Publisher, Subscriber, Subscription};

/// Publisher for the [`scan`](crate::PublisherExt::scan) method.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct Scan<P, A, F> {
    source: P,
    init: A,
    f: F,
}

impl<P, A, F> Scan<P, A, F> {
    pub(crate) fn new(source: P, init: A, f: F) -> Self {
        Scan { source, init, f }
    }
}

impl<P, A, F> Publisher for Scan<P, A, F>
where
    P: Publisher,
    A: Clone + Send + 'static,
    F: FnMut(A, P::Item) -> A + Send + 'static,
{
    type Item = A;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<A> + Send + 'static,
    {
        self.source.subscribe(ScanSubscriber {
            downstream: subscriber,
            acc: Some(self.init),
            f: self.f,
            upstream: Upstream::Idle,
        })
    }

    fn in_flight_bound(&self) -> u64 {
        self.source.in_flight_bound()
    }
}

struct ScanSubscriber<S, A, F> {
    /// The next stage.
    downstream: S,
    /// The current accumulator; `None` only after the closure panicked.
    acc: Option<A>,
    /// The user's closure.
    f: F,
    /// Life-cycle state; holds upstream to cancel it if the closure panics.
    upstream: Upstream,
}

impl<S, A, F> ScanSubscriber<S, A, F> {}

/// Fold `item` into `acc` and return the new state (also kept in `acc`). `None` only
/// if an earlier call panicked, after which the stage never calls this again.
#[inline]
fn step<T, A: Clone, F: FnMut(A, T) -> A>(acc: &mut Option<A>, f: &mut F, item: T) -> Option<A> {
    let next = f(acc.take()?, item);
    *acc = Some(next.clone());
    Some(next)
}

impl<T, S, A, F> Subscriber<T> for ScanSubscriber<S, A, F>
where
    S: Subscriber<A>,
    A: Clone,
    F: FnMut(A, T) -> A,
{
    fn on_subscribe(&mut self, subscription: Subscription) {
        if self.upstream.accept(&subscription) {
            self.downstream.on_subscribe(subscription);
        }
    }

    #[inline]
    fn on_next(&mut self, item: T) {
        if !self.upstream.is_active() {
            return;
        }
        match catch_in("scan", || step(&mut self.acc, &mut self.f, item)) {
            Ok(Some(state)) => self.downstream.on_next(state),
            Ok(None) => {}
            Err(error) => self.upstream.fail(&mut self.downstream, error),
        }
    }

    #[inline]
    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        if !self.upstream.is_active() {
            return 0;
        }
        let mut outcome = BatchOutcome::of("scan");
        // The state lives in a local for the batch (a local the compiler can keep in a
        // register through the fused loop, where a field behind `&mut self` is stored
        // back on every item), and goes back to the stage after it.
        let mut acc = self.acc.take();
        let f = &mut self.f;
        let batch = Guarded::new(items, |x| step(&mut acc, f, x), &mut outcome);
        // Downstream holds our upstream's subscription, so its credit passes as is.
        let credit = self.downstream.on_next_batch(batch);
        self.acc = acc;
        match outcome.panic {
            Some(error) => {
                self.upstream.fail(&mut self.downstream, error);
                0
            }
            None => credit,
        }
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
