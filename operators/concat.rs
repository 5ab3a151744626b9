//! `concat`: implementation notes. The user contract is on
//! [`PublisherExt::concat`](crate::PublisherExt::concat).
//!
//! Downstream holds one subscription for the whole stream, the [`Arbiter`]: it
//! forwards each request to whichever source is current, and counts in an
//! [`AtomicDemand`] what downstream requested and has not been delivered yet (each
//! leg settles it per item or once per batch, and adds the batch credit downstream
//! returns). The second source is subscribed from the first's `on_complete`; in
//! `on_subscribe` the arbiter makes it current and asks it for exactly that carried
//! demand (or forwards a `request(0)` made between the two, or cancels it if
//! downstream cancelled meanwhile). Nothing is held.
//!
//! States: the first [`Leg`] (holding downstream and the second source) → the second
//! `Leg` (downstream moved over at the switch) → done. A cancel before the switch
//! means the second source is never subscribed.
//!
//! Races: only one source is ever live, so downstream signals are serial without a
//! drain loop (the second is subscribed from the first's last signal). A `request` or
//! `cancel` from another thread may race the switch: both take the arbiter's lock, so
//! a request either reaches the old source *and* is counted in the carried-over
//! demand, or reaches the new source directly, never both.

use std::marker::PhantomData;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::demand::AtomicDemand;
use crate::drain::Upstream;
use crate::guard::{catch, end_with, HandBack};
use crate::metrics::DropHook;
use crate::{Error, Publisher, RawSubscription, Subscriber, Subscription};

/// Publisher for the [`concat`](crate::PublisherExt::concat) method.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct Concat<P, Q> {
    first: P,
    second: Q,
}

impl<P, Q> Concat<P, Q> {
    pub(crate) fn new(first: P, second: Q) -> Self {
        Concat { first, second }
    }
}

impl<P, Q> Publisher for Concat<P, Q>
where
    P: Publisher,
    Q: Publisher<Item = P::Item> + Send + 'static,
{
    type Item = P::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<P::Item> + Send + 'static,
    {
        self.first.subscribe(Leg {
            downstream: Some(subscriber),
            next: Some(self.second),
            arbiter: Arc::new(Arbiter::default()),
            upstream: Upstream::Idle,
            hand_back: None,
            _items: PhantomData,
        })
    }

    fn in_flight_bound(&self) -> u64 {
        self.first
            .in_flight_bound()
            .saturating_add(self.second.in_flight_bound())
    }
}

/// Downstream's subscription: forwards to the current source, counts carry-over.
#[derive(Default)]
struct Arbiter {
    /// Locked for every request, cancel and switch (never per item).
    state: Mutex<ArbiterState>,
    /// Requested by downstream and not yet delivered by either source.
    outstanding: AtomicDemand,
}

#[derive(Default)]
struct ArbiterState {
    /// The live source's subscription (`None` between the two).
    current: Option<Subscription>,
    /// Downstream cancelled.
    cancelled: bool,
    /// Downstream called `request(0)` between the sources: the next source reports it.
    bad_request: bool,
}

impl Arbiter {
    fn lock(&self) -> MutexGuard<'_, ArbiterState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Make `subscription` current and ask it for the carried-over demand.
    fn switch(&self, subscription: &Subscription) {
        let (carried, bad, cancelled) = {
            let mut state = self.lock();
            state.current = Some(subscription.clone());
            (self.outstanding.get(), state.bad_request, state.cancelled)
        };
        if cancelled {
            subscription.cancel();
        } else if bad {
            subscription.request(0);
        } else if carried > 0 {
            subscription.request(carried);
        }
    }

    /// The current source completed; true unless downstream has cancelled.
    fn release(&self) -> bool {
        let mut state = self.lock();
        state.current = None;
        !state.cancelled
    }
}

impl RawSubscription for Arbiter {
    fn request(&self, n: u64) {
        let current = {
            let mut state = self.lock();
            if n == 0 {
                state.bad_request = true;
            } else {
                self.outstanding.add(n);
            }
            state.current.clone()
        };
        // `request(0)` goes on as is: the source reports rule 3.9.
        if let Some(current) = current {
            current.request(n);
        }
    }

    fn cancel(&self) {
        let current = {
            let mut state = self.lock();
            state.cancelled = true;
            state.current.take()
        };
        if let Some(current) = current {
            current.cancel();
        }
    }
}

/// The subscriber to one source; the first leg carries the second source.
struct Leg<T, S: Subscriber<T>, Q> {
    /// The next stage; moves to the second leg at the switch.
    downstream: Option<S>,
    /// The source to subscribe after this one completes (`None` on the second leg).
    next: Option<Q>,
    /// Shared with downstream's subscription handle.
    arbiter: Arc<Arbiter>,
    /// This leg's life cycle.
    upstream: Upstream,
    /// The second leg's: where its `Drop` leaves downstream when its publisher
    /// panics in `subscribe` (the first leg's `on_complete` catches it).
    hand_back: Option<Arc<HandBack<S>>>,
    _items: PhantomData<fn(T)>,
}

impl<T: 'static, S, Q> Subscriber<T> for Leg<T, S, Q>
where
    S: Subscriber<T> + Send + 'static,
    Q: Publisher<Item = T> + Send + 'static,
{
    fn on_subscribe(&mut self, subscription: Subscription) {
        if !self.upstream.accept(&subscription) {
            return;
        }
        self.arbiter.switch(&subscription);
        if self.next.is_some() {
            // First leg: downstream's one and only on_subscribe.
            if let Some(downstream) = self.downstream.as_mut() {
                downstream.on_subscribe(Subscription::new(self.arbiter.clone()));
            }
        }
    }

    fn on_next(&mut self, item: T) {
        if let (true, Some(downstream)) = (self.upstream.is_active(), self.downstream.as_mut()) {
            self.arbiter.outstanding.produced(1);
            downstream.on_next(item);
        }
    }

    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        let (true, Some(downstream)) = (self.upstream.is_active(), self.downstream.as_mut()) else {
            return 0;
        };
        let mut count = 0u64;
        let credit = downstream.on_next_batch(items.inspect(|_| count += 1));
        // Downstream's credit is a request to the current source: it counts too.
        self.arbiter.outstanding.settle(count, credit);
        credit
    }

    fn on_error(&mut self, error: Error) {
        if self.upstream.finish() {
            if let Some(mut downstream) = self.downstream.take() {
                downstream.on_error(error);
            }
        }
    }

    fn on_complete(&mut self) {
        if !self.upstream.finish() {
            return;
        }
        let Some(mut downstream) = self.downstream.take() else {
            return;
        };
        let live = self.arbiter.release();
        match self.next.take() {
            Some(next) if live => {
                let hand_back = Arc::new(HandBack::default());
                let leg = Leg::<T, S, Q> {
                    downstream: Some(downstream),
                    next: None,
                    arbiter: self.arbiter.clone(),
                    upstream: Upstream::Idle,
                    hand_back: Some(hand_back.clone()),
                    _items: PhantomData,
                };
                // A panicking `subscribe` drops the leg, which hands downstream back
                // here unless it ended (see its `Drop`); the panic stops here.
                let subscribed = catch(move || next.subscribe(leg));
                match (hand_back.close(), subscribed) {
                    (Some((downstream, had_subscribe)), subscribed) => {
                        let error = subscribed
                            .err()
                            .unwrap_or_else(|| Error::panicked(Box::new(SECOND_PANICKED)))
                            .in_stage("concat");
                        end_with(downstream, had_subscribe, error);
                    }
                    (None, Err(_)) => {
                        tracing::error!("concat: the second publisher panicked in subscribe");
                    }
                    (None, Ok(())) => {}
                }
            }
            Some(_) => {}
            None => downstream.on_complete(),
        }
    }

    fn drop_hook(&self) -> Option<DropHook> {
        self.downstream.as_ref().and_then(Subscriber::drop_hook)
    }

    fn stops_batches_itself(&self) -> bool {
        self.downstream
            .as_ref()
            .is_some_and(Subscriber::stops_batches_itself)
    }
}

/// What downstream hears when the second publisher panicked in `subscribe` where
/// the panic's payload is out of reach.
const SECOND_PANICKED: &str = "the second publisher panicked in subscribe";

impl<T, S: Subscriber<T>, Q> Drop for Leg<T, S, Q> {
    /// The second leg dropped by its publisher unterminated while its `subscribe`
    /// panics: downstream goes back to the first leg's `on_complete`, which ends it
    /// with the panic. Dropped without ever being subscribed otherwise (a panic on
    /// another thread, or rule 1.9 broken): downstream must still end.
    fn drop(&mut self) {
        if self.next.is_some() || matches!(self.upstream, Upstream::Done) {
            return;
        }
        if std::thread::panicking() {
            if let (Some(hand_back), Some(downstream)) = (&self.hand_back, self.downstream.take()) {
                if let Err(downstream) = hand_back.give(downstream, true) {
                    self.downstream = Some(downstream);
                }
            }
        }
        if !matches!(self.upstream, Upstream::Idle) {
            return;
        }
        if let Some(downstream) = self.downstream.as_mut() {
            let error = if std::thread::panicking() {
                Error::panicked(Box::new(SECOND_PANICKED)).in_stage("concat")
            } else {
                Error::spec_violation(
                    "1.9",
                    "concat: the second publisher dropped its subscriber without on_subscribe",
                )
            };
            downstream.on_error(error);
        }
    }
}
