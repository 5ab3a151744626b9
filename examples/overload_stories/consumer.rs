//! A consumer the stories drive by hand: it asks for a number of items per tick and
//! hands back what arrived, so a simulation serves exactly its capacity share.

use std::sync::{Arc, Mutex};

use weir::{Error, Subscriber, Subscription};

/// The receiving end of a [`Consumer`]: what arrived, and the subscription.
pub struct Tap<T> {
    arrived: Arc<Mutex<Vec<T>>>,
    subscription: Arc<Mutex<Option<Subscription>>>,
    /// Items asked for and items received, for [`serve`](Self::serve).
    counts: Arc<Mutex<(u64, u64)>>,
}

impl<T> Clone for Tap<T> {
    fn clone(&self) -> Self {
        Tap {
            arrived: self.arrived.clone(),
            subscription: self.subscription.clone(),
            counts: self.counts.clone(),
        }
    }
}

impl<T> Tap<T> {
    /// Serve up to `n` items in this tick: top the outstanding demand up to `n`, so a
    /// server's idle capacity is not banked as demand for later ticks.
    pub fn serve(&self, n: u64) {
        let (asked, got) = *self.counts.lock().unwrap();
        self.request(n.saturating_sub(asked - got));
    }

    /// Ask for `n` more items (delivered at once if the queue holds them).
    pub fn request(&self, n: u64) {
        if n == 0 {
            return;
        }
        self.counts.lock().unwrap().0 += n;
        let subscription = self.subscription.lock().unwrap().clone();
        if let Some(subscription) = subscription {
            subscription.request(n);
        }
    }

    /// The items that arrived since the last call.
    pub fn take(&self) -> Vec<T> {
        std::mem::take(&mut *self.arrived.lock().unwrap())
    }
}

/// A subscriber that keeps what it receives for its [`Tap`].
pub struct Consumer<T>(Tap<T>);

impl<T> Consumer<T> {
    /// A consumer and its tap.
    pub fn new() -> (Self, Tap<T>) {
        let tap = Tap {
            arrived: Arc::default(),
            subscription: Arc::default(),
            counts: Arc::default(),
        };
        (Consumer(tap.clone()), tap)
    }
}

impl<T> Subscriber<T> for Consumer<T> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        *self.0.subscription.lock().unwrap() = Some(subscription);
    }

    fn on_next(&mut self, item: T) {
        self.0.counts.lock().unwrap().1 += 1;
        self.0.arrived.lock().unwrap().push(item);
    }

    fn on_error(&mut self, error: Error) {
        panic!("the story's queue failed: {error}");
    }

    fn on_complete(&mut self) {}
}

/// Integer shares of a rate: how many of `per_second` are due in tick `k` (1-based)
/// of `tick_ms`, so that after `k` ticks exactly `per_second × k × tick` were due.
pub fn share(per_second: u64, k: u64, tick_ms: u64) -> u64 {
    per_second * k * tick_ms / 1_000 - per_second * (k - 1) * tick_ms / 1_000
}
