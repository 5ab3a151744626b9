//! `reduce`: implementation notes. The user contract is on
//! [`PublisherExt::reduce`](crate::PublisherExt::reduce).
//!
//! Upstream side: the stage consumes upstream like a sink, through a [`Replenish`]
//! window of the sinks' [`DEFAULT_PREFETCH`]: `prefetch` requested in `on_subscribe`
//! (after downstream's `on_subscribe`, unless downstream cancelled inside it), then
//! what was consumed each time 75% of the window was used: as `request` from
//! `on_next`, as batch credit from `on_next_batch`. Downstream's requests never reach
//! upstream, except `request(0)` while upstream runs (upstream answers with the rule
//! 3.9 error). A batch is folded inside one `guard::catch`, so the accumulator stays a
//! plain value and the chain compiles to one loop.
//!
//! Downstream side: downstream's subscription is an [`Outlet`], whose [`Deferred`]
//! state is `Waiting` (upstream running; records whether downstream has requested,
//! or sent `request(0)`) → `Parked` (upstream completed before downstream asked: the
//! downstream subscriber and the result wait in the outlet) → `Done` (result emitted,
//! stream ended, or cancelled). An empty upstream completes downstream without an
//! item; an upstream error needs no demand.
//!
//! Races: upstream's completion and downstream's first request (any thread) meet in
//! the outlet's mutex; whichever comes second emits, so the result goes out exactly
//! once, and never while the other party still signals. The lock is taken at
//! subscription, per request and at the end, never per item, and never held while
//! calling downstream.

use std::sync::Arc;

use crate::demand::{self, Replenish};
use crate::drain::Upstream;
use crate::guard::catch_in;
use crate::loom::{Mutex, MutexGuardOf};
use crate::metrics::DropHook;
use crate::sink::DEFAULT_PREFETCH;
use crate::{Error, Publisher, RawSubscription, Subscriber, Subscription};

/// Publisher for the [`reduce`](crate::PublisherExt::reduce) method.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct Reduce<P, F> {
    source: P,
    f: F,
}

impl<P, F> Reduce<P, F> {
    pub(crate) fn new(source: P, f: F) -> Self {
        Reduce { source, f }
    }
}

impl<P, F> Publisher for Reduce<P, F>
where
    P: Publisher,
    F: FnMut(P::Item, P::Item) -> P::Item + Send + 'static,
{
    type Item = P::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<P::Item> + Send + 'static,
    {
        self.source.subscribe(ReduceSubscriber {
            downstream: Some(subscriber),
            f: self.f,
            acc: None,
            replenish: Replenish::new(DEFAULT_PREFETCH),
            outlet: None,
            upstream: Upstream::Idle,
        })
    }

    fn in_flight_bound(&self) -> u64 {
        demand::sum(self.source.in_flight_bound(), 1)
    }
}

/// Where the result stands, as downstream's subscription sees it.
enum Deferred<S, T> {
    /// Upstream is running. `requested`: downstream asked for at least 1;
    /// `zero`: downstream called `request(0)` (rule 3.9).
    Waiting { requested: bool, zero: bool },
    /// Upstream completed first: the result waits here for downstream's request.
    Parked(S, T),
    /// Over: emitted, terminated or cancelled.
    Done,
}

/// Downstream's subscription: releases the result on request.
struct Outlet<S, T> {
    /// Upstream, for cancel and for `request(0)` while it runs.
    upstream: Subscription,
    /// See [`Deferred`].
    state: Mutex<Deferred<S, T>>,
}

impl<S: Subscriber<T>, T> Outlet<S, T> {
    fn lock(&self) -> MutexGuardOf<'_, Deferred<S, T>> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Upstream completed with `value`: emit it now if downstream asked, else park it
    /// with `downstream` until it does.
    fn deliver(&self, mut downstream: S, value: T) {
        let mut state = self.lock();
        match *state {
            Deferred::Waiting { zero: true, .. } => {
                *state = Deferred::Done;
                drop(state);
                downstream.on_error(bad_request());
            }
            Deferred::Waiting {
                requested: true, ..
            } => {
                *state = Deferred::Done;
                drop(state);
                emit(downstream, value);
            }
            Deferred::Waiting { .. } => *state = Deferred::Parked(downstream, value),
            Deferred::Parked(..) | Deferred::Done => {}
        }
    }

    /// The stream ends without a result (empty, failed): true if downstream must
    /// still be told (it has not cancelled).
    fn end(&self) -> bool {
        let mut state = self.lock();
        let waiting = matches!(*state, Deferred::Waiting { .. });
        *state = Deferred::Done;
        waiting
    }
}

fn emit<T, S: Subscriber<T>>(mut downstream: S, value: T) {
    downstream.on_next(value);
    downstream.on_complete();
}

fn bad_request() -> Error {
    demand::validate(0).expect_err("0 is not a legal request")
}

impl<S, T> RawSubscription for Outlet<S, T>
where
    S: Subscriber<T> + Send,
    T: Send,
{
    fn request(&self, n: u64) {
        let mut state = self.lock();
        match std::mem::replace(&mut *state, Deferred::Done) {
            Deferred::Waiting { requested, .. } if n == 0 => {
                *state = Deferred::Waiting {
                    requested,
                    zero: true,
                };
                drop(state);
                // While upstream runs, it answers with the rule 3.9 error.
                self.upstream.request(0);
            }
            Deferred::Waiting { zero, .. } => {
                *state = Deferred::Waiting {
                    requested: true,
                    zero,
                }
            }
            Deferred::Parked(mut downstream, value) => {
                drop(state);
                if n == 0 {
                    downstream.on_error(bad_request());
                } else {
                    emit(downstream, value);
                }
            }
            Deferred::Done => {}
        }
    }

    fn cancel(&self) {
        // Drop a parked subscriber and result outside the lock.
        let previous = std::mem::replace(&mut *self.lock(), Deferred::Done);
        drop(previous);
        self.upstream.cancel();
    }
}

struct ReduceSubscriber<S, T, F> {
    /// The next stage; handed to the outlet (or signalled) when upstream ends.
    downstream: Option<S>,
    /// The user's closure.
    f: F,
    /// The result so far; `None` until the first item.
    acc: Option<T>,
    /// Upstream credit: when to request again.
    replenish: Replenish,
    /// Downstream's subscription, once subscribed.
    outlet: Option<Arc<Outlet<S, T>>>,
    /// Life-cycle state.
    upstream: Upstream,
}

impl<S: Subscriber<T>, T, F> ReduceSubscriber<S, T, F> {
    /// Upstream ended without a result to emit: complete or fail downstream unless it
    /// cancelled.
    fn end(&mut self, error: Option<Error>) {
        self.acc = None;
        let (Some(mut downstream), Some(outlet)) = (self.downstream.take(), &self.outlet) else {
            return;
        };
        if outlet.end() {
            match error {
                Some(error) => downstream.on_error(error),
                None => downstream.on_complete(),
            }
        }
    }

    fn fail(&mut self, error: Error) {
        if self.upstream.cancel() {
            self.end(Some(error));
        }
    }
}

impl<T, S, F> Subscriber<T> for ReduceSubscriber<S, T, F>
where
    S: Subscriber<T> + Send + 'static,
    T: Send + 'static,
    F: FnMut(T, T) -> T,
{
    fn on_subscribe(&mut self, subscription: Subscription) {
        if !self.upstream.accept(&subscription) {
            return;
        }
        let outlet = Arc::new(Outlet {
            upstream: subscription.clone(),
            state: Mutex::new(Deferred::Waiting {
                requested: false,
                zero: false,
            }),
        });
        self.outlet = Some(outlet.clone());
        if let Some(downstream) = self.downstream.as_mut() {
            downstream.on_subscribe(Subscription::new(outlet.clone()));
        }
        // Unless downstream cancelled in `on_subscribe`, start consuming upstream.
        if !matches!(*outlet.lock(), Deferred::Done) {
            subscription.request(self.replenish.initial());
        }
    }

    #[inline]
    fn on_next(&mut self, item: T) {
        if !self.upstream.is_active() {
            return;
        }
        let (acc, f) = (self.acc.take(), &mut self.f);
        match catch_in("reduce", || match acc {
            Some(acc) => f(acc, item),
            None => item,
        }) {
            Ok(acc) => {
                self.acc = Some(acc);
                if let (Some(more), Some(upstream)) =
                    (self.replenish.on_consumed(1), self.upstream.get())
                {
                    upstream.request(more);
                }
            }
            Err(error) => self.fail(error),
        }
    }

    #[inline]
    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        if !self.upstream.is_active() {
            return 0;
        }
        let (acc, f) = (self.acc.take(), &mut self.f);
        let mut count = 0u64;
        // One guard around the whole batch, as in the fold sink: the accumulator stays
        // a plain value and the chain compiles to one loop.
        let folded = catch_in("reduce", || {
            items.fold(acc, |acc, item| {
                count += 1;
                Some(match acc {
                    Some(acc) => f(acc, item),
                    None => item,
                })
            })
        });
        match folded {
            Ok(acc) => {
                self.acc = acc;
                // Replenish as batch credit: no call back into the publisher.
                self.replenish.on_consumed(count).unwrap_or(0)
            }
            Err(error) => {
                self.fail(error);
                0
            }
        }
    }

    fn drop_hook(&self) -> Option<DropHook> {
        self.downstream.as_ref().and_then(|d| d.drop_hook())
    }

    /// Folds every batch it is handed into one value (it never cancels from inside
    /// one).
    fn stops_batches_itself(&self) -> bool {
        true
    }

    fn on_error(&mut self, error: Error) {
        if self.upstream.finish() {
            self.end(Some(error));
        }
    }

    fn on_complete(&mut self) {
        if !self.upstream.finish() {
            return;
        }
        match (self.acc.take(), self.downstream.take(), &self.outlet) {
            (Some(value), Some(downstream), Some(outlet)) => outlet.deliver(downstream, value),
            (None, downstream, _) => {
                self.downstream = downstream;
                self.end(None);
            }
            _ => {}
        }
    }
}
