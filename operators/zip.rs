//! `zip`: pair the items of two publishers in order and combine each pair with a
//! closure.
//!
//! Demand contract: Prefetching, per side. Each side gets a bounded lane of
//! `ZIP_PREFETCH` items ([`super::inner`]): requested up front, replenished by the 75%
//! rule as pairs go out. Downstream demand counts pairs and is settled once per
//! batch. In-flight bound: both sources' bounds plus `2 × ZIP_PREFETCH`.
//!
//! States: the hub holds `Some(ZipDrain)` until the terminal signal. The stream
//! completes as soon as one side has completed and its lane is empty (no pair can
//! follow), cancelling the other side; the first failure of either side, or a panic
//! of the closure, cancels both and is signalled at once.
//!
//! Races: both sides deliver on any thread into their own lane and only wake the
//! `Wip` drain; only the drain pops, so a pair is taken only when both lanes hold an
//! item, and every downstream signal comes from the drain owner.

use std::collections::VecDeque;
use std::sync::Arc;

use super::inner::{Ctx, Drain, Hub, Lane, LaneStatus, LaneSubscriber, Progress};
use crate::guard::{BatchOutcome, Guarded};
use crate::{Error, Publisher, Subscriber, Subscription};

/// Per-side prefetch of [`zip`](crate::PublisherExt::zip).
pub const ZIP_PREFETCH: u64 = crate::sink::DEFAULT_PREFETCH;

/// Publisher for the [`zip`](crate::PublisherExt::zip) method.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct Zip<P, Q, F> {
    first: P,
    second: Q,
    f: F,
}

impl<P, Q, F> Zip<P, Q, F> {
    pub(crate) fn new(first: P, second: Q, f: F) -> Self {
        Zip { first, second, f }
    }
}

impl<P, Q, F, U> Publisher for Zip<P, Q, F>
where
    P: Publisher,
    Q: Publisher,
    F: FnMut(P::Item, Q::Item) -> U + Send + 'static,
    U: Send + 'static,
{
    type Item = U;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<U> + Send + 'static,
    {
        let hook = subscriber.drop_hook();
        let first = Lane::new(ZIP_PREFETCH, hook.clone());
        let second = Lane::new(ZIP_PREFETCH, hook);
        let drain = ZipDrain {
            downstream: subscriber,
            first: first.clone(),
            second: second.clone(),
            f: self.f,
            scratch: (
                VecDeque::with_capacity(ZIP_PREFETCH as usize),
                VecDeque::with_capacity(ZIP_PREFETCH as usize),
            ),
        };
        let (a, b) = (self.first, self.second);
        Hub::start(drain, move |hub| {
            a.subscribe(LaneSubscriber::new(first, hub.clone()));
            b.subscribe(LaneSubscriber::new(second, hub.clone()));
        });
    }

    fn in_flight_bound(&self) -> u64 {
        self.first
            .in_flight_bound()
            .saturating_add(self.second.in_flight_bound())
            .saturating_add(2 * ZIP_PREFETCH)
    }
}

/// The zip drain: pairs while both lanes hold an item and downstream wants one.
struct ZipDrain<S, A, B, F> {
    /// The next stage.
    downstream: S,
    /// The first source's lane.
    first: Arc<Lane<A>>,
    /// The second source's lane.
    second: Arc<Lane<B>>,
    /// The user's combining closure.
    f: F,
    /// Items taken out of each lane under one lock, paired from here as one batch.
    /// Capacity `ZIP_PREFETCH` each, allocated once; they hold items the lanes already
    /// counted in their windows (moved, not added) and are empty between deliveries.
    scratch: (VecDeque<A>, VecDeque<B>),
}

impl<S, A, B, F, U> ZipDrain<S, A, B, F>
where
    S: Subscriber<U>,
    F: FnMut(A, B) -> U,
{
    /// Emit pairs up to the demand; returns how many went out, or the closure's panic.
    fn deliver(&mut self, ctx: &Ctx<'_>) -> Result<u64, Error> {
        let budget = usize::try_from(ctx.demand.get()).unwrap_or(usize::MAX);
        // Only the drain takes items, so both lanes still hold `n` after measuring.
        let room = self.scratch.0.capacity().min(self.scratch.1.capacity());
        let n = budget
            .min(room)
            .min(self.first.len())
            .min(self.second.len());
        if n == 0 {
            return Ok(0);
        }
        self.first.pop_into(&mut self.scratch.0, n);
        self.second.pop_into(&mut self.scratch.1, n);
        let pairs = self.scratch.0.drain(..).zip(self.scratch.1.drain(..));
        let mut outcome = BatchOutcome::default();
        let mut count = 0u64;
        let f = &mut self.f;
        let credit = self.downstream.on_next_batch(
            Guarded::new(pairs, |(a, b)| Some(f(a, b)), &mut outcome).inspect(|_| count += 1),
        );
        if let Some(panic) = outcome.panic {
            return Err(panic);
        }
        ctx.demand.produced(count);
        if credit > 0 {
            ctx.demand.add(credit);
        }
        // The lanes gave up `n` items each, whatever downstream took of them.
        self.first.consumed(n as u64);
        self.second.consumed(n as u64);
        Ok(count)
    }
}

impl<S, A, B, F, U> Drain for ZipDrain<S, A, B, F>
where
    S: Subscriber<U> + Send + 'static,
    A: Send + 'static,
    B: Send + 'static,
    F: FnMut(A, B) -> U + Send + 'static,
{
    fn on_subscribe(&mut self, subscription: Subscription) {
        self.downstream.on_subscribe(subscription);
    }

    fn pass(&mut self, ctx: &Ctx<'_>) -> Progress {
        loop {
            let failure = [self.first.status(), self.second.status()]
                .into_iter()
                .find_map(|status| match status {
                    LaneStatus::Failed(e) => Some(e),
                    _ => None,
                });
            if let Some(e) = failure {
                self.terminate(Some(e));
                return Progress::Over;
            }
            let mut count = 0;
            if ctx.demand.get() > 0 {
                match self.deliver(ctx) {
                    Ok(n) => count = n,
                    Err(panic) => {
                        self.terminate(Some(panic));
                        return Progress::Over;
                    }
                }
                if ctx.stopped() {
                    return Progress::Idle;
                }
            }
            let ended = matches!(self.first.status(), LaneStatus::Finished)
                || matches!(self.second.status(), LaneStatus::Finished);
            if ended {
                self.terminate(None);
                self.downstream.on_complete();
                return Progress::Over;
            }
            if count == 0 || ctx.demand.get() == 0 {
                return Progress::Idle;
            }
        }
    }

    fn terminate(&mut self, error: Option<Error>) {
        self.first.cancel();
        self.second.cancel();
        if let Some(error) = error {
            self.downstream.on_error(error);
        }
    }
}
