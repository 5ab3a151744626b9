//! Publishers that break the rules on purpose. [`Unruly`]: right after `on_subscribe`
//! it signals `on_error` twice, then `on_complete`, then an item nobody requested; an
//! operator must pass on the first error and nothing after it. [`Greedy`]: it pushes
//! its items whatever was requested (rule 1.1); a stage that buffers must fail with the
//! rule's error instead of growing. [`PanicsOnRequest`]: a subscription whose nth
//! `request` panics (rule 3.16 broken), for the stages that call it; [`Hostile`]
//! puts one (whose `cancel` may panic too, rule 3.15) in front of any publisher.

use std::sync::atomic::{AtomicU64, Ordering};

use weir::{Error, Publisher, RawSubscription, Subscriber, Subscription};

/// The rule-breaking publisher; `first` is the error it signals first.
#[derive(Clone, Debug)]
pub struct Unruly {
    first: Error,
}

impl Unruly {
    /// Signal `first`, then a second error, a completion and an item.
    pub fn new(first: Error) -> Self {
        Unruly { first }
    }
}

impl Publisher for Unruly {
    type Item = u64;

    fn subscribe<S>(self, mut subscriber: S)
    where
        S: Subscriber<u64> + Send + 'static,
    {
        subscriber.on_subscribe(Subscription::noop());
        subscriber.on_error(self.first);
        subscriber.on_error(Error::msg("second error"));
        subscriber.on_complete();
        subscriber.on_next(7);
    }
}

/// Pushes `0..n` right after `on_subscribe`, whatever was requested, then completes.
#[derive(Clone, Copy, Debug)]
pub struct Greedy(pub u64);

impl Publisher for Greedy {
    type Item = u64;

    fn subscribe<S>(self, mut subscriber: S)
    where
        S: Subscriber<u64> + Send + 'static,
    {
        subscriber.on_subscribe(Subscription::noop());
        for i in 0..self.0 {
            subscriber.on_next(i);
        }
        subscriber.on_complete();
    }
}

/// A subscription whose `panic_at`th call of `request` panics (0: none); every other
/// call goes to `on_request`, and `cancel` to `on_cancel`.
pub struct PanicsOnRequest<R, C> {
    on_request: R,
    on_cancel: C,
    calls: AtomicU64,
    panic_at: u64,
}

impl<R, C> PanicsOnRequest<R, C>
where
    R: Fn(u64) + Send + Sync + 'static,
    C: Fn() + Send + Sync + 'static,
{
    /// The subscription, ready to hand to a subscriber's `on_subscribe`.
    pub fn subscription(panic_at: u64, on_request: R, on_cancel: C) -> Subscription {
        Subscription::new(std::sync::Arc::new(PanicsOnRequest {
            on_request,
            on_cancel,
            calls: AtomicU64::new(0),
            panic_at,
        }))
    }
}

impl<R, C> RawSubscription for PanicsOnRequest<R, C>
where
    R: Fn(u64) + Send + Sync + 'static,
    C: Fn() + Send + Sync + 'static,
{
    fn request(&self, n: u64) {
        let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        assert!(call != self.panic_at, "deliberate: this request panics");
        (self.on_request)(n);
    }

    fn cancel(&self) {
        (self.on_cancel)();
    }
}

/// `source`, its subscription replaced by one whose `request_panics_at`th `request`
/// panics (0: none) and, with `cancel_panics`, whose `cancel` panics after
/// cancelling `source`.
pub struct Hostile<P> {
    /// The publisher behind the broken subscription.
    pub source: P,
    /// The call of `request` that panics (0: none).
    pub request_panics_at: u64,
    /// Whether `cancel` panics (after it cancelled `source`).
    pub cancel_panics: bool,
}

struct HostileSubscriber<S> {
    downstream: S,
    request_panics_at: u64,
    cancel_panics: bool,
}

impl<P: Publisher> Publisher for Hostile<P> {
    type Item = P::Item;

    fn subscribe<S: Subscriber<P::Item> + Send + 'static>(self, subscriber: S) {
        self.source.subscribe(HostileSubscriber {
            downstream: subscriber,
            request_panics_at: self.request_panics_at,
            cancel_panics: self.cancel_panics,
        });
    }
}

impl<T, S: Subscriber<T>> Subscriber<T> for HostileSubscriber<S> {
    fn on_subscribe(&mut self, upstream: Subscription) {
        let cancel_panics = self.cancel_panics;
        self.downstream.on_subscribe(PanicsOnRequest::subscription(
            self.request_panics_at,
            {
                let upstream = upstream.clone();
                move |n| upstream.request(n)
            },
            move || {
                upstream.cancel();
                assert!(!cancel_panics, "deliberate: this cancel panics");
            },
        ));
    }

    fn on_next(&mut self, item: T) {
        self.downstream.on_next(item);
    }

    fn on_error(&mut self, error: Error) {
        self.downstream.on_error(error);
    }

    fn on_complete(&mut self) {
        self.downstream.on_complete();
    }
}
