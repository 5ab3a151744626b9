//! Publishers that break the rules on purpose. [`Unruly`]: right after `on_subscribe`
//! it signals `on_error` twice, then `on_complete`, then an item nobody requested; an
//! operator must pass on the first error and nothing after it. [`Greedy`]: it pushes
//! its items whatever was requested (rule 1.1); a stage that buffers must fail with the
//! rule's error instead of growing. [`PanicsOnRequest`]: a subscription whose nth
//! `request` panics (rule 3.16 broken), for the stages that call it.

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
