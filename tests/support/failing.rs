//! A well-behaved source that fails: it emits `1, 2, …, n` as demand allows, then
//! `on_error`.

use weir::source::{Generate, Step};
use weir::Error;

/// A `generate` source of `1..=items` that then fails with `error` (a clone of it, so
/// a test can check with [`Error::ptr_eq`] that the same error arrives).
pub fn fails_after(items: u64, error: Error) -> FailsAfter {
    weir::generate(
        Failing {
            sent: 0,
            items,
            error,
        },
        Failing::step,
    )
}

/// The source built by [`fails_after`], with a name a test harness can use.
pub type FailsAfter = Generate<Failing, fn(&mut Failing) -> Step<u64>>;

/// The state of a [`FailsAfter`].
#[derive(Clone, Debug)]
pub struct Failing {
    sent: u64,
    items: u64,
    error: Error,
}

impl Failing {
    fn step(&mut self) -> Step<u64> {
        self.sent += 1;
        if self.sent > self.items {
            Step::Error(self.error.clone())
        } else {
            Step::Next(self.sent)
        }
    }
}

/// A publisher whose `subscribe` panics (user code failing before any signal).
pub struct PanicsOnSubscribe;

impl weir::Publisher for PanicsOnSubscribe {
    type Item = u32;

    fn subscribe<S: weir::Subscriber<u32> + Send + 'static>(self, _subscriber: S) {
        panic!("boom in subscribe");
    }
}

/// A publisher whose `subscribe` calls `on_subscribe` (a subscription that ignores
/// every call) and then panics, with a `String` payload naming `self.0`.
pub struct PanicsAfterOnSubscribe(pub &'static str);

impl weir::Publisher for PanicsAfterOnSubscribe {
    type Item = u32;

    fn subscribe<S: weir::Subscriber<u32> + Send + 'static>(self, mut subscriber: S) {
        subscriber.on_subscribe(weir::Subscription::noop());
        panic!("boom after on_subscribe in {}", self.0);
    }
}

/// A publisher that breaks the end of the contract: on a thread of its own it calls
/// `on_subscribe` (a subscription that ignores every call), delivers `1..=items`
/// (a subscriber that requested at least that many), and then drops the subscriber
/// without a terminal signal, as a publisher whose thread panicked would.
pub struct Abandons {
    /// Items delivered before the subscriber is dropped.
    pub items: u32,
}

impl weir::Publisher for Abandons {
    type Item = u32;

    fn subscribe<S: weir::Subscriber<u32> + Send + 'static>(self, mut subscriber: S) {
        let items = self.items;
        std::thread::spawn(move || {
            subscriber.on_subscribe(weir::Subscription::noop());
            for item in 1..=items {
                subscriber.on_next(item);
            }
            drop(subscriber);
        });
    }
}
