//! `subscribe_on`: subscribe to upstream, and forward downstream's requests to it, on
//! a [`Scheduler`].
//!
//! # Algorithm
//!
//! `subscribe` schedules one task that subscribes [`Passing`] to upstream. Items and
//! terminal signals pass through `Passing` unchanged, on whatever thread upstream
//! emits them (for a synchronous source that is the scheduler's thread, because that
//! is where its `subscribe` and `request` run); batch credit returned from inside a
//! delivery goes straight back to upstream as `Passing`'s own batch credit, since it
//! arises on the emitting thread.
//!
//! Downstream's subscription is a signal core whose stage ([`Forwarding`]) forwards
//! demand: a `request(n)` is added to the core's demand and a pass runs on the
//! scheduler, taking everything accumulated so far upstream with one `request` (a
//! burst of requests costs one task and one upstream call; `UNBOUNDED` is sent once).
//! The forwarding task lingers a few microseconds for the next request before it
//! leaves (a synchronous source emits a whole batch inside the forwarded `request`,
//! and the next request usually follows within that window). `request(0)` is
//! forwarded as it is, so upstream answers it with the rule 3.9 error; `cancel` is
//! forwarded at once, from the caller's thread.
//!
//! The core has no downstream of its own to signal (downstream belongs to
//! `Passing`, on upstream's thread): its subscriber is a [`Relay`] that cancels
//! upstream when the core ends and keeps the error it would have signalled. If the
//! scheduler drops a forwarding task (it shut down), the relay keeps a
//! `SchedulerShutdown` error and cancels upstream; upstream then drops `Passing`,
//! which signals that error downstream, after upstream's last signal. If the
//! scheduler drops the subscribing task itself, downstream gets `on_subscribe` and
//! the same error from the task's drop.
//!
//! A source whose `subscribe` panics (before or after its `on_subscribe`) drops
//! `Passing` while the panic unwinds. The subscribing task runs `subscribe` under
//! `catch_unwind`, and `Passing`'s `Drop` hands downstream back to it (a
//! [`HandBack`]) instead of signalling there, where the panic's payload is out of
//! reach: the task then signals `on_error` of kind `Panicked` with the panic's own
//! message (after `on_subscribe` if downstream has not had it).
//!
//! Demand contract: PassThrough. In-flight bound: upstream's.

use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use crate::demand::{AtomicDemand, UNBOUNDED};
use crate::drain::Upstream;
use crate::guard::{end_with, HandBack};
use crate::metrics::DropHook;
use crate::runtime::Scheduler;
use crate::stage::core::{Drive, SharedUpstream};
use crate::stage::{Core, Cx, Pass, Stage};
use crate::{Error, Publisher, Subscriber, Subscription};

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
        let task = Subscribing {
            parts: Some((source, subscriber, scheduler)),
        };
        on.schedule(Box::new(move || task.run()));
    }

    fn in_flight_bound(&self) -> u64 {
        self.source.in_flight_bound()
    }
}

/// The subscribing task. Dropped unrun (its scheduler shut down), it tells
/// downstream: `on_subscribe` with a no-op subscription, then a `SchedulerShutdown`
/// error.
struct Subscribing<P: Publisher, D: Subscriber<P::Item>, S> {
    parts: Option<(P, D, S)>,
}

impl<P, D, S> Subscribing<P, D, S>
where
    P: Publisher,
    D: Subscriber<P::Item> + Send + 'static,
    S: Scheduler + Clone,
{
    fn run(mut self) {
        let Some((source, downstream, scheduler)) = self.parts.take() else {
            return;
        };
        let hand_back = Arc::new(HandBack::default());
        let passing = Passing {
            downstream: Some(downstream),
            scheduler: Some(scheduler),
            relay: Relay::default(),
            forwarding: None,
            upstream: Upstream::Idle,
            hand_back: hand_back.clone(),
            _items: PhantomData,
        };
        // AssertUnwindSafe: after a panic, only downstream (handed back whole, or
        // never) is touched again.
        let subscribed =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| source.subscribe(passing)));
        match (hand_back.close(), subscribed) {
            (Some((downstream, had_subscribe)), outcome) => {
                let error = match outcome {
                    Err(payload) => Error::panicked(payload),
                    // Dropped by a panic on another thread while `subscribe` ran here.
                    Ok(()) => Error::panicked(Box::new(SOURCE_PANICKED)),
                };
                end_with(downstream, had_subscribe, error);
            }
            // Passing outlived the panic (kept elsewhere, or already terminated):
            // the panic goes on, as it would without the operator.
            (None, Err(payload)) => std::panic::resume_unwind(payload),
            (None, Ok(())) => {}
        }
    }
}

impl<P: Publisher, D: Subscriber<P::Item>, S> Drop for Subscribing<P, D, S> {
    fn drop(&mut self) {
        if let Some((_source, downstream, _)) = self.parts.take() {
            end_with(downstream, false, Error::scheduler_shutdown("subscribe_on"));
        }
    }
}

/// What downstream hears when the source panicked in `subscribe` where the panic's
/// payload is out of reach.
const SOURCE_PANICKED: &str = "the source panicked in subscribe";

/// The upstream-facing subscriber: signals pass through.
struct Passing<T, D: Subscriber<T>, S> {
    /// `None` only once handed back ([`HandBack`]), in `Drop`.
    downstream: Option<D>,
    /// Moved into the forwarding stage at `on_subscribe`.
    scheduler: Option<S>,
    /// The forwarding core's report.
    relay: Relay,
    /// The forwarding core, kept while upstream keeps us: downstream may drop its
    /// handles (dropping a handle does not cancel), and the core, dropped before it
    /// ended, would drop its relay, which cancels upstream.
    forwarding: Option<Subscription>,
    upstream: Upstream,
    hand_back: Arc<HandBack<D>>,
    _items: PhantomData<fn(T)>,
}

/// The forwarding core's "downstream": cancels upstream when the core ends, and
/// keeps the error the core would have signalled (a scheduler that shut down) for
/// `Passing` to signal after upstream's last signal.
#[derive(Clone, Default)]
struct Relay {
    /// The error to signal downstream, once the core ended with one.
    error: Arc<Mutex<Option<Error>>>,
    /// Upstream, once subscribed.
    upstream: Option<Arc<SharedUpstream>>,
}

impl<T> Subscriber<T> for Relay {
    fn on_subscribe(&mut self, _subscription: Subscription) {}
    fn on_next(&mut self, _item: T) {}
    fn on_error(&mut self, error: Error) {
        // Kept before upstream is cancelled: `Passing` reads it when upstream drops it.
        *self.error.lock().unwrap_or_else(|p| p.into_inner()) = Some(error);
        if let Some(upstream) = &self.upstream {
            upstream.cancel();
        }
    }
    fn on_complete(&mut self) {}
}

impl Drop for Relay {
    fn drop(&mut self) {
        // The core ended (cancelled, or its subscriber slot was released): upstream
        // has nothing more to do for downstream.
        if let Some(upstream) = &self.upstream {
            upstream.cancel();
        }
    }
}

/// The forwarding stage: downstream's demand goes upstream from a task on the
/// scheduler.
struct Forwarding<T, S> {
    upstream: Arc<SharedUpstream>,
    scheduler: S,
    /// `UNBOUNDED` was forwarded; nothing more needs to go up.
    all_sent: std::sync::atomic::AtomicBool,
    _items: PhantomData<fn() -> T>,
}

impl<T: Send + 'static, S: Scheduler> Stage for Forwarding<T, S> {
    const NAME: &'static str = "subscribe_on";
    type Item = T;
    type Owned = ();
    type Padding = crate::loom::Block;

    fn drive(&self) -> Drive<'_> {
        Drive::Scheduled {
            on: &self.scheduler,
            linger: true,
        }
    }

    fn pass<D: Subscriber<T>>(&self, cx: &Cx<'_>, _owned: &mut (), _relay: &mut D) -> Pass {
        // Relaxed: only the loop's owner reads and writes it.
        if self.all_sent.load(std::sync::atomic::Ordering::Relaxed) {
            return Pass::Idle;
        }
        let n = cx.demand().take();
        if n == UNBOUNDED {
            // `take` leaves unbounded demand in place: remember it went up.
            self.all_sent
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        if n > 0 {
            self.upstream.request(n);
        }
        Pass::Idle
    }

    /// Demand not yet forwarded (a lingering forwarder polls the demand itself, not
    /// only the requests' signals).
    fn has_work(&self, demand: &AtomicDemand) -> bool {
        // Relaxed: only the loop's owner writes it, and the owner asks.
        demand.get() > 0 && !self.all_sent.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The relay cancels upstream (after keeping the error, if there is one).
    fn stop(&self, _owned: &mut ()) {}

    fn on_cancel(&self) {
        self.upstream.cancel();
    }

    fn on_bad_request(&self) -> bool {
        // Upstream answers it with the rule 3.9 error, through `Passing`.
        self.upstream.request(0);
        true
    }
}

impl<T, D, S> Subscriber<T> for Passing<T, D, S>
where
    T: Send + 'static,
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
        let upstream = Arc::new(SharedUpstream::new(subscription));
        self.relay.upstream = Some(upstream.clone());
        let core = Core::new(Forwarding::<T, S> {
            upstream,
            scheduler,
            all_sent: std::sync::atomic::AtomicBool::new(false),
            _items: PhantomData,
        });
        // The core's own subscriber is the relay; downstream gets the core's
        // subscription once the core is attached.
        core.attach((), self.relay.clone());
        let handle = Subscription::new(core.clone());
        self.forwarding = Some(handle.clone());
        let Some(downstream) = &mut self.downstream else {
            return;
        };
        if !crate::guard::on_subscribe(downstream, handle.clone()) {
            // Treated as cancelled (rule 2.13).
            handle.cancel();
        }
    }

    #[inline]
    fn on_next(&mut self, item: T) {
        if let (true, Some(downstream)) = (self.upstream.is_active(), &mut self.downstream) {
            downstream.on_next(item);
        }
    }

    #[inline]
    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        match (self.upstream.is_active(), &mut self.downstream) {
            (true, Some(downstream)) => downstream.on_next_batch(items),
            _ => 0,
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

    fn on_error(&mut self, error: Error) {
        if let Some(downstream) = &mut self.downstream {
            self.upstream.forward_error(downstream, error);
        }
    }

    fn on_complete(&mut self) {
        if let Some(downstream) = &mut self.downstream {
            self.upstream.forward_complete(downstream);
        }
    }
}

impl<T, D: Subscriber<T>, S> Drop for Passing<T, D, S> {
    fn drop(&mut self) {
        let Some(downstream) = self.downstream.take() else {
            return;
        };
        let idle = matches!(self.upstream, Upstream::Idle);
        let panicking = std::thread::panicking();
        let downstream = if panicking && !matches!(self.upstream, Upstream::Done) {
            // The source panicked with us unterminated: the subscribing task, if it
            // is still catching, signals the panic's own message (module docs).
            match self.hand_back.give(downstream, !idle) {
                Ok(()) => return,
                Err(downstream) => downstream,
            }
        } else {
            downstream
        };
        if idle {
            // Released without `on_subscribe`: the source's `subscribe` panicked
            // elsewhere (or broke rule 1.9). Downstream must still end.
            let error = if panicking {
                Error::panicked(Box::new(SOURCE_PANICKED))
            } else {
                Error::spec_violation("1.9", "the source released its subscriber unsubscribed")
            };
            end_with(downstream, false, error);
            return;
        }
        let mut downstream = downstream;
        // Upstream let go of us after the forwarding core ended with an error (its
        // scheduler shut down): signal it now, after upstream's last signal.
        let error = self
            .relay
            .error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(error) = error {
            if self.upstream.finish() {
                downstream.on_error(error);
            }
        }
    }
}
