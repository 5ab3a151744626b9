//! `zip`: pair the items of two publishers in order and combine each pair with a
//! closure.
//!
//! # Algorithm
//!
//! Each side delivers into its own lane (`stage::lanes`: a bounded window of
//! `ZIP_PREFETCH` items, requested up front and replenished by the 75% rule as pairs
//! go out). The zipping stage, on the signal core, takes `n = min(demand, both lanes'
//! lengths)` items from each lane under one lock each, pairs them through the closure
//! (under a panic guard) and delivers the pairs in one `on_next_batch`, demand
//! settled once. Only the pass takes items, so a pair is taken only when both lanes
//! hold an item. The stream completes as soon as one side has completed and its lane
//! is empty (no pair can follow); the first failure of either side, or a panic of the
//! closure, is signalled at once; when the stage ends, both sides are cancelled and
//! their lanes released.

use std::sync::Arc;

use crate::guard::{BatchOutcome, Guarded};
use crate::stage::lanes::{subscribe_into, Lane, LaneStatus};
use crate::stage::{Core, Cx, Pass, Stage};
use crate::{Error, Publisher, Subscriber};

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
        let prefetch = ZIP_PREFETCH as usize;
        let first = Lane::new("zip", prefetch, hook.clone());
        let second = Lane::new("zip", prefetch, hook);
        let core = Core::new(Zipping::<_, _, F, U> {
            first: first.clone(),
            second: second.clone(),
            _closure: std::marker::PhantomData,
        });
        let pairing = Pairing {
            f: self.f,
            scratch: (Vec::with_capacity(prefetch), Vec::with_capacity(prefetch)),
        };
        let (a, b) = (self.first, self.second);
        core.attach_then(pairing, subscriber, move |core| {
            // A subscriber that cancelled in `on_subscribe` (or panicked there, rule
            // 2.13) gets no source subscribed. A side whose `subscribe` panics fails
            // its lane, and the pass the stage.
            if !core.is_stopping() {
                subscribe_into(&first, a, core);
                subscribe_into(&second, b, core);
            }
        });
    }

    fn in_flight_bound(&self) -> u64 {
        self.first
            .in_flight_bound()
            .saturating_add(self.second.in_flight_bound())
            .saturating_add(2 * ZIP_PREFETCH)
    }
}

/// The zipping stage: both lanes. (The closure `F`, which makes `U`s, lives in the
/// pass's own state.)
struct Zipping<A, B, F, U> {
    /// The first source's lane.
    first: Arc<Lane<A>>,
    /// The second source's lane.
    second: Arc<Lane<B>>,
    _closure: std::marker::PhantomData<fn() -> (F, U)>,
}

/// What only the pass touches: the closure and the pairs on their way downstream.
struct Pairing<A, B, F> {
    /// The user's combining closure.
    f: F,
    /// Items taken out of each lane under one lock, paired from here as one batch.
    /// Room for `ZIP_PREFETCH` each, allocated once; a lane emptied whole trades
    /// buffers with its scratch (see `Lane::pop_into`) instead of copying. They hold
    /// items the lanes already counted in their windows (moved, not added) and are
    /// empty between deliveries.
    scratch: (Vec<A>, Vec<B>),
}

impl<A, B, F, U> Zipping<A, B, F, U>
where
    A: Send + 'static,
    B: Send + 'static,
    F: FnMut(A, B) -> U + Send + 'static,
    U: Send + 'static,
{
    /// Emit up to `n` pairs (both lanes hold at least `n` items; only the pass takes
    /// them); returns how many went out and where the lanes stand after the take, or
    /// the closure's panic.
    fn deliver<S: Subscriber<U>>(
        &self,
        cx: &Cx<'_>,
        pairing: &mut Pairing<A, B, F>,
        downstream: &mut S,
        n: usize,
    ) -> Result<(u64, [LaneStatus; 2]), Error> {
        let first = self.first.take(&mut pairing.scratch.0, n);
        let second = self.second.take(&mut pairing.scratch.1, n);
        let pairs = pairing.scratch.0.drain(..).zip(pairing.scratch.1.drain(..));
        let mut outcome = BatchOutcome::of("zip");
        let f = &mut pairing.f;
        let combined = Guarded::new(pairs, |(a, b)| Some(f(a, b)), &mut outcome);
        let (count, rest) = cx.deliver(downstream, combined);
        drop(rest);
        if let Some(panic) = outcome.panic {
            return Err(panic);
        }
        // The lanes gave up their items, whatever downstream took of them.
        self.first.replenish(first.refill)?;
        self.second.replenish(second.refill)?;
        Ok((count, [first.status, second.status]))
    }
}

/// The first lane's error, if either failed.
fn failure(statuses: &[LaneStatus; 2]) -> Option<Error> {
    statuses.iter().find_map(|status| match status {
        LaneStatus::Failed(e) => Some(e.clone()),
        _ => None,
    })
}

impl<A, B, F, U> Stage for Zipping<A, B, F, U>
where
    A: Send + 'static,
    B: Send + 'static,
    F: FnMut(A, B) -> U + Send + 'static,
    U: Send + 'static,
{
    const NAME: &'static str = "zip";
    type Item = U;
    type Owned = Pairing<A, B, F>;
    type Padding = ();

    fn pass<S: Subscriber<U>>(
        &self,
        cx: &Cx<'_>,
        pairing: &mut Self::Owned,
        downstream: &mut S,
    ) -> Pass {
        loop {
            let ((first_len, first), (second_len, second)) =
                (self.first.peek(), self.second.peek());
            let mut statuses = [first, second];
            if let Some(error) = failure(&statuses) {
                return cx.terminate(downstream, Err(error));
            }
            let budget = usize::try_from(cx.demand().get()).unwrap_or(usize::MAX);
            let room = pairing
                .scratch
                .0
                .capacity()
                .min(pairing.scratch.1.capacity());
            let n = budget.min(room).min(first_len).min(second_len);
            let mut count = 0;
            if n > 0 {
                match self.deliver(cx, pairing, downstream, n) {
                    Ok((delivered, after)) => (count, statuses) = (delivered, after),
                    Err(panic) => return cx.terminate(downstream, Err(panic)),
                }
                if cx.stopped() {
                    return Pass::Idle;
                }
                if let Some(error) = failure(&statuses) {
                    return cx.terminate(downstream, Err(error));
                }
            }
            // No pair can follow once one side completed and its lane is empty.
            if statuses.iter().any(|s| matches!(s, LaneStatus::Finished)) {
                return cx.terminate(downstream, Ok(()));
            }
            if count == 0 || cx.demand().get() == 0 {
                return Pass::Idle;
            }
        }
    }

    /// Cancel both sides and release what their lanes hold.
    fn stop(&self, _pairing: &mut Self::Owned) {
        self.first.cancel();
        self.second.cancel();
    }
}
