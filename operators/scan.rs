//! `scan`: fold each item into an accumulator and emit every new accumulator.
//!
//! Demand contract: PassThrough, 1:1 (one state out per item in; the initial state
//! is not emitted). Downstream holds the upstream subscription itself, so requests
//! and batch credit cost nothing extra; a batch stays a batch. In-flight bound: 0
//! (the accumulator is state, not a held item: each one is emitted as it is made).
//!
//! States ([`Upstream`]): `Idle` → `Active` → `Done` (terminal, or the closure
//! panicked: upstream cancelled, downstream `on_error(Panicked)`). The accumulator
//! is `None` only after a panic, when the stage is `Done`.

use crate::drain::Upstream;
use crate::guard::{catch, BatchOutcome, Guarded};
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
        match catch(|| step(&mut self.acc, &mut self.f, item)) {
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
        let mut outcome = BatchOutcome::default();
        let (acc, f) = (&mut self.acc, &mut self.f);
        let batch = Guarded::new(items, |x| step(acc, f, x), &mut outcome);
        // Downstream holds our upstream's subscription, so its credit passes as is.
        let credit = self.downstream.on_next_batch(batch);
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

    fn on_error(&mut self, error: Error) {
        self.upstream.forward_error(&mut self.downstream, error);
    }

    fn on_complete(&mut self) {
        self.upstream.forward_complete(&mut self.downstream);
    }
}
