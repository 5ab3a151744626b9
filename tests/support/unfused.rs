//! [`Unfused`]: a publisher that forwards `subscribe` and nothing else, so a fold at
//! the end of its chain runs through subscriptions and demand rather than fused into
//! one loop (tests of the credit paths of `map`, `filter`, `filter_map` and the sinks;
//! the benches' rows of the subscribed path).

use weir::{Publisher, Subscriber};

/// `publisher`, seen through a wrapper that never fuses.
pub struct Unfused<P>(P);

/// Wrap `publisher`: its subscribers get its own signals, unchanged.
pub fn unfused<P: Publisher>(publisher: P) -> Unfused<P> {
    Unfused(publisher)
}

impl<P: Publisher> Publisher for Unfused<P> {
    type Item = P::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<P::Item> + Send + 'static,
    {
        self.0.subscribe(subscriber)
    }
}
