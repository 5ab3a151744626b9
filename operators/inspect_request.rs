//! `inspect_request`: implementation notes. The user contract is on
//! [`PublisherExt::inspect_request`](crate::PublisherExt::inspect_request).
//!
//! Downstream holds a thin [`RequestTap`] that calls the tap, then forwards the
//! request unchanged (an illegal `request(0)` included: upstream answers with the rule
//! 3.9 error). The batch credit downstream returns is demand too, so `on_next_batch`
//! runs the tap on it before returning it.
//!
//! State: [`Upstream`] (`Idle` → `Active` → `Done`).
//!
//! Races and panics: the tap runs on whatever thread requests, possibly several at
//! once (hence `Fn + Sync`). A tap that panics inside `request` is on a thread that
//! may not own the stream's signals, so it cannot signal downstream itself: it parks
//! the panic in a `OnceLock`, ignores every later request, and asks upstream for
//! `request(0)`. Upstream's rule 3.9 error comes back through this stage, on the
//! thread that owns the signals, and is replaced by the parked panic (a completion
//! that overtakes that answer is replaced too). A panic on the batch-credit path
//! happens on that thread already: upstream is cancelled and downstream fails at once.

use std::sync::{Arc, OnceLock};

use crate::drain::Upstream;
use crate::guard::catch_in;
use crate::metrics::DropHook;
use crate::{Error, Publisher, RawSubscription, Subscriber, Subscription};

/// Publisher for the [`inspect_request`](crate::PublisherExt::inspect_request) method.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct InspectRequest<P, F> {
    source: P,
    f: F,
}

impl<P, F> InspectRequest<P, F> {
    pub(crate) fn new(source: P, f: F) -> Self {
        InspectRequest { source, f }
    }
}

impl<P, F> Publisher for InspectRequest<P, F>
where
    P: Publisher,
    F: Fn(u64) + Send + Sync + 'static,
{
    type Item = P::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<P::Item> + Send + 'static,
    {
        self.source.subscribe(InspectRequestSubscriber {
            downstream: subscriber,
            f: Some(self.f),
            tap: None,
            upstream: Upstream::Idle,
        })
    }

    fn in_flight_bound(&self) -> u64 {
        self.source.in_flight_bound()
    }
}

/// Downstream's subscription: the tap, then upstream.
struct RequestTap<F> {
    /// The user's tap.
    f: F,
    /// The upstream subscription.
    upstream: Subscription,
    /// The tap's first panic on the `request` path, waiting for upstream's answer.
    panicked: OnceLock<Error>,
}

impl<F: Fn(u64) + Send + Sync> RawSubscription for RequestTap<F> {
    fn request(&self, n: u64) {
        if self.panicked.get().is_some() {
            return;
        }
        match catch_in("inspect_request", || (self.f)(n)) {
            Ok(()) => self.upstream.request(n),
            Err(error) => {
                let _ = self.panicked.set(error);
                // See the module docs: the rule 3.9 answer carries the panic down.
                self.upstream.request(0);
            }
        }
    }

    fn cancel(&self) {
        self.upstream.cancel();
    }
}

struct InspectRequestSubscriber<S, F> {
    /// The next stage.
    downstream: S,
    /// The tap, until `on_subscribe` moves it into `tap`.
    f: Option<F>,
    /// Downstream's subscription, shared for the batch-credit path.
    tap: Option<Arc<RequestTap<F>>>,
    /// Life-cycle state.
    upstream: Upstream,
}

impl<T, S, F> Subscriber<T> for InspectRequestSubscriber<S, F>
where
    S: Subscriber<T>,
    F: Fn(u64) + Send + Sync + 'static,
{
    fn on_subscribe(&mut self, subscription: Subscription) {
        if !self.upstream.accept(&subscription) {
            return;
        }
        let Some(f) = self.f.take() else { return };
        let tap = Arc::new(RequestTap {
            f,
            upstream: subscription,
            panicked: OnceLock::new(),
        });
        self.tap = Some(tap.clone());
        self.downstream.on_subscribe(Subscription::new(tap));
    }

    #[inline]
    fn on_next(&mut self, item: T) {
        if self.upstream.is_active() {
            self.downstream.on_next(item);
        }
    }

    #[inline]
    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        if !self.upstream.is_active() {
            return 0;
        }
        let credit = self.downstream.on_next_batch(items);
        let Some(tap) = self.tap.as_ref().filter(|_| credit > 0) else {
            return credit;
        };
        match catch_in("inspect_request", || (tap.f)(credit)) {
            Ok(()) => credit,
            Err(error) => {
                let _ = tap.panicked.set(error.clone());
                if self.upstream.cancel() {
                    self.downstream.on_error(error);
                }
                0
            }
        }
    }

    fn drop_hook(&self) -> Option<DropHook> {
        self.downstream.drop_hook()
    }

    fn stops_batches_itself(&self) -> bool {
        self.downstream.stops_batches_itself()
    }

    fn on_error(&mut self, error: Error) {
        if !self.upstream.finish() {
            return;
        }
        // Upstream's answer to the `request(0)` a panicking tap made: the panic.
        let panicked = self.tap.as_ref().and_then(|tap| tap.panicked.get());
        match panicked {
            Some(panic) if error.rule() == Some("3.9") => self.downstream.on_error(panic.clone()),
            _ => self.downstream.on_error(error),
        }
    }

    fn on_complete(&mut self) {
        if !self.upstream.finish() {
            return;
        }
        // Upstream may complete before it saw the `request(0)` of a panicked tap: the
        // stage failed all the same.
        match self.tap.as_ref().and_then(|tap| tap.panicked.get()) {
            Some(panic) => self.downstream.on_error(panic.clone()),
            None => self.downstream.on_complete(),
        }
    }
}
