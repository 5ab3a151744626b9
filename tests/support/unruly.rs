//! Publishers that break the rules on purpose. [`Unruly`]: right after `on_subscribe`
//! it signals `on_error` twice, then `on_complete`, then an item nobody requested; an
//! operator must pass on the first error and nothing after it. [`Greedy`]: it pushes
//! its items whatever was requested (rule 1.1); a stage that buffers must fail with the
//! rule's error instead of growing.

use weir::{Error, Publisher, Subscriber, Subscription};

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
