//! `subscribe_on`: subscribe to upstream, and forward downstream's requests to it, on
//! a [`Scheduler`].
//!
//! Demand contract: PassThrough. Items and terminal signals pass through unchanged on
//! whatever thread upstream emits them (for a synchronous source that is the
//! scheduler's thread, because that is where its `subscribe` and `request` run).
//! Downstream's `request(n)` is added to an [`AtomicDemand`] and forwarded by a task on
//! the scheduler; at most one forwarding task is queued or running at a time (a
//! [`Wip`]), and it forwards everything accumulated so far with one `request`, so a
//! burst of requests costs one task and one upstream call. Batch credit returned from
//! inside a delivery goes straight back to upstream as our own batch credit: it
//! arises on the emitting thread, so there is no hop to make. `cancel` is forwarded at
//! once, from the caller's thread, and stops further forwarding. In-flight bound:
//! upstream's.
//!
//! Like the boundary's drain, the forwarding task waits a few microseconds for the
//! next request before it leaves (a synchronous source emits a whole batch inside the
//! forwarded `request`, and the next request usually follows within that window).
//!
//! `request(0)` is forwarded like any other request, so upstream answers it with the
//! rule 3.9 error. States ([`Upstream`]): `Idle` → `Active` → `Done`.

use std::sync::Arc;

use crate::demand::{AtomicDemand, UNBOUNDED};
use crate::drain::{Upstream, Wip};
use crate::loom::{AtomicU8, Ordering};
use crate::metrics::DropHook;
use crate::runtime::Scheduler;
use crate::{Error, Publisher, RawSubscription, Subscriber, Subscription};

/// Flag: downstream cancelled.
const CANCELLED: u8 = 1;
/// Flag: downstream called `request(0)`.
const BAD_REQUEST: u8 = 2;
/// Flag: `UNBOUNDED` was forwarded; nothing more needs to go up.
const ALL_SENT: u8 = 4;

/// Publisher for the [`subscribe_on`](crate::PublisherExt::subscribe_on) method.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct SubscribeOn<P, S> {
    source: P,
    scheduler: S,
}

impl<P, S> SubscribeOn<P, S> {
    pub(crate) fn new(source: P, scheduler: S) -> Self {
        SubscribeOn { source, scheduler }
    }
}

impl<P, S> Publisher for SubscribeOn<P, S>
where
    P: Publisher + Send + 'static,
    S: Scheduler + Clone,
{
    type Item = P::Item;

    fn subscribe<D>(self, subscriber: D)
    where
        D: Subscriber<P::Item> + Send + 'static,
    {
        let SubscribeOn { source, scheduler } = self;
        let on = scheduler.clone();
        on.schedule(Box::new(move || {
            source.subscribe(Passing {
                downstream: subscriber,
                scheduler: Some(scheduler),
                upstream: Upstream::Idle,
            })
        }));
    }

    fn in_flight_bound(&self) -> u64 {
        self.source.in_flight_bound()
    }
}

/// The upstream-facing subscriber: signals pass through.
struct Passing<D, S> {
    downstream: D,
    /// Moved into the forwarder at `on_subscribe`.
    scheduler: Option<S>,
    upstream: Upstream,
}

/// Downstream's subscription: accumulates demand and forwards it on the scheduler.
struct Forwarder<S> {
    demand: AtomicDemand,
    wip: Wip,
    /// `CANCELLED | BAD_REQUEST`.
    flags: AtomicU8,
    upstream: Subscription,
    scheduler: S,
}

/// `Subscription` needs an `Arc<impl RawSubscription>`; the forwarding task needs an
/// `Arc<Forwarder>` of its own.
struct Handle<S>(Arc<Forwarder<S>>);

impl<S: Scheduler + Clone> RawSubscription for Handle<S> {
    fn request(&self, n: u64) {
        if n == 0 {
            // Release: pairs with the forwarding task's Acquire load.
            self.0.flags.fetch_or(BAD_REQUEST, Ordering::Release);
        } else {
            self.0.demand.add(n);
        }
        if self.0.wip.enter() {
            let forwarder = self.0.clone();
            self.0.scheduler.schedule(Box::new(move || forwarder.run()));
        }
    }

    fn cancel(&self) {
        // Release: pairs with the forwarding task's Acquire load.
        if self.0.flags.fetch_or(CANCELLED, Ordering::Release) & CANCELLED == 0 {
            self.0.upstream.cancel();
        }
    }
}

impl<S> Forwarder<S> {
    /// The forwarding task: forward what accumulated until no reason is left.
    fn run(&self) {
        let mut missed = 1;
        loop {
            loop {
                self.forward();
                if !self.spin() {
                    break;
                }
            }
            missed = self.wip.leave(missed);
            if missed == 0 {
                return;
            }
        }
    }

    fn forward(&self) {
        // Acquire: pairs with the Release in `Handle::request/cancel`.
        let flags = self.flags.load(Ordering::Acquire);
        if flags & (CANCELLED | ALL_SENT) != 0 {
            return;
        }
        if flags & BAD_REQUEST != 0 {
            // Upstream answers with the rule 3.9 error.
            self.flags.fetch_and(!BAD_REQUEST, Ordering::Relaxed);
            self.upstream.request(0);
            return;
        }
        let n = self.demand.take();
        if n == UNBOUNDED {
            // `take` leaves unbounded demand in place: remember it went up.
            self.flags.fetch_or(ALL_SENT, Ordering::Relaxed);
        }
        if n > 0 {
            self.upstream.request(n);
        }
    }

    /// Wait briefly for the next request; true when one arrived.
    #[cfg(not(weir_loom))]
    fn spin(&self) -> bool {
        super::publish_on::wait_briefly(|| {
            // Acquire: pairs with the Release in `Handle::request/cancel`. Any flag
            // (cancelled, request(0), everything sent) ends the wait.
            self.flags.load(Ordering::Acquire) != 0 || self.demand.get() > 0
        }) && self.flags.load(Ordering::Relaxed) & (CANCELLED | ALL_SENT) == 0
    }

    /// Loom models do not spin.
    #[cfg(weir_loom)]
    fn spin(&self) -> bool {
        false
    }
}

impl<T, D, S> Subscriber<T> for Passing<D, S>
where
    D: Subscriber<T>,
    S: Scheduler + Clone,
{
    fn on_subscribe(&mut self, subscription: Subscription) {
        if !self.upstream.accept(&subscription) {
            return;
        }
        let Some(scheduler) = self.scheduler.take() else {
            return;
        };
        let forwarder = Arc::new(Forwarder {
            demand: AtomicDemand::new(),
            wip: Wip::new(),
            flags: AtomicU8::new(0),
            upstream: subscription,
            scheduler,
        });
        self.downstream
            .on_subscribe(Subscription::new(Arc::new(Handle(forwarder))));
    }

    #[inline]
    fn on_next(&mut self, item: T) {
        if self.upstream.is_active() {
            self.downstream.on_next(item);
        }
    }

    #[inline]
    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        if self.upstream.is_active() {
            self.downstream.on_next_batch(items)
        } else {
            0
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
