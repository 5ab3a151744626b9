//! A publisher that breaks the rules on purpose: right after `on_subscribe` it signals
//! `on_error` twice, then `on_complete`, then an item nobody requested. An operator
//! must pass on the first error and nothing after it.

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
