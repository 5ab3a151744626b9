//! [`Tap`]: a transparent adaptor put right below a source, so a test sees what the
//! source was asked for and what it did: requests, items emitted, cancels, its
//! terminal signal, and whether it has *released* its subscriber (the tap's own
//! subscriber object is dropped: the source is done with the subscription, rules 1.6
//! and 3.13). "Upstream cancelled" in the suite means: the source stopped without
//! completing and released its subscriber.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use weir::metrics::DropHook;
use weir::{Error, Publisher, RawSubscription, Subscriber, Subscription};

/// What one source did, shared between its [`Tap`] and the test.
#[derive(Debug, Default)]
pub struct SourceProbe {
    name: String,
    requested: AtomicU64,
    emitted: AtomicU64,
    /// `emitted` when the first cancel reached the source (`u64::MAX`: none yet).
    emitted_at_cancel: AtomicU64,
    cancels: AtomicU64,
    subscribed: AtomicBool,
    completed: AtomicBool,
    errored: AtomicBool,
    released: AtomicBool,
    /// The source's own subscription while it holds its subscriber, so a test can stop
    /// a source that a broken stage left running (cleanup, after the checks).
    upstream: Mutex<Option<Subscription>>,
}

impl SourceProbe {
    /// A probe for the source called `name` (used in failure messages).
    pub fn new(name: impl Into<String>) -> Arc<SourceProbe> {
        Arc::new(SourceProbe {
            name: name.into(),
            emitted_at_cancel: AtomicU64::new(u64::MAX),
            ..SourceProbe::default()
        })
    }

    /// The source's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Items the source emitted.
    pub fn emitted(&self) -> u64 {
        self.emitted.load(Ordering::SeqCst)
    }

    /// Items the source emitted after the first cancel reached it; `None` before one did.
    pub fn emitted_after_cancel(&self) -> Option<u64> {
        match self.emitted_at_cancel.load(Ordering::SeqCst) {
            u64::MAX => None,
            at => Some(self.emitted().saturating_sub(at)),
        }
    }

    /// `cancel` calls that reached the source.
    pub fn cancels(&self) -> u64 {
        self.cancels.load(Ordering::SeqCst)
    }

    /// Total requested from the source (saturating).
    pub fn requested(&self) -> u64 {
        self.requested.load(Ordering::SeqCst)
    }

    /// The source called `on_subscribe`.
    pub fn subscribed(&self) -> bool {
        self.subscribed.load(Ordering::SeqCst)
    }

    /// The source completed or failed.
    pub fn terminated(&self) -> bool {
        self.completed.load(Ordering::SeqCst) || self.errored.load(Ordering::SeqCst)
    }

    /// The source completed.
    pub fn completed(&self) -> bool {
        self.completed.load(Ordering::SeqCst)
    }

    /// The source dropped its subscriber.
    pub fn released(&self) -> bool {
        self.released.load(Ordering::SeqCst)
    }

    /// Subscribed and not yet released: the source still holds the subscription.
    pub fn holding(&self) -> bool {
        self.subscribed() && !self.released()
    }

    /// Cancel the source directly if it still holds its subscriber: cleanup after a
    /// failed check, so a source a stage forgot to cancel stops running.
    pub fn stop(&self) {
        let upstream = self.upstream.lock().unwrap().take();
        if let Some(upstream) = upstream {
            upstream.cancel();
        }
    }

    /// One line for failure messages.
    pub fn describe(&self) -> String {
        format!(
            "source `{}`: subscribed {}, requested {}, emitted {}, cancels {}, completed {}, \
             errored {}, released {}",
            self.name,
            self.subscribed(),
            self.requested(),
            self.emitted(),
            self.cancels(),
            self.completed(),
            self.errored.load(Ordering::SeqCst),
            self.released()
        )
    }
}

/// A source wrapped so that its [`SourceProbe`] sees everything.
#[derive(Debug)]
pub struct Tap<P> {
    source: P,
    probe: Arc<SourceProbe>,
}

impl<P> Tap<P> {
    /// Wrap `source`, reporting to `probe`.
    pub fn new(source: P, probe: Arc<SourceProbe>) -> Self {
        Tap { source, probe }
    }
}

impl<P: Publisher> Publisher for Tap<P> {
    type Item = P::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<P::Item> + Send + 'static,
    {
        self.source.subscribe(TapSubscriber {
            down: subscriber,
            probe: self.probe,
        })
    }

    fn in_flight_bound(&self) -> u64 {
        self.source.in_flight_bound()
    }
}

struct TapSubscriber<S> {
    down: S,
    probe: Arc<SourceProbe>,
}

impl<S> Drop for TapSubscriber<S> {
    fn drop(&mut self) {
        self.probe.upstream.lock().unwrap().take();
        self.probe.released.store(true, Ordering::SeqCst);
    }
}

struct TapSubscription {
    upstream: Subscription,
    probe: Arc<SourceProbe>,
}

fn add(counter: &AtomicU64, n: u64) {
    let _ = counter.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |r| {
        Some(r.saturating_add(n))
    });
}

impl RawSubscription for TapSubscription {
    fn request(&self, n: u64) {
        add(&self.probe.requested, n);
        self.upstream.request(n);
    }

    fn cancel(&self) {
        if self.probe.cancels.fetch_add(1, Ordering::SeqCst) == 0 {
            let emitted = self.probe.emitted();
            self.probe
                .emitted_at_cancel
                .store(emitted, Ordering::SeqCst);
        }
        self.upstream.cancel();
    }
}

impl<T, S: Subscriber<T>> Subscriber<T> for TapSubscriber<S> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        self.probe.subscribed.store(true, Ordering::SeqCst);
        *self.probe.upstream.lock().unwrap() = Some(subscription.clone());
        self.down
            .on_subscribe(Subscription::new(Arc::new(TapSubscription {
                upstream: subscription,
                probe: self.probe.clone(),
            })));
    }

    fn on_next(&mut self, item: T) {
        self.probe.emitted.fetch_add(1, Ordering::SeqCst);
        self.down.on_next(item);
    }

    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        let probe = self.probe.clone();
        let counted = items.inspect(move |_| {
            probe.emitted.fetch_add(1, Ordering::SeqCst);
        });
        let credit = self.down.on_next_batch(counted);
        // Batch credit is a request made at the end of the batch.
        add(&self.probe.requested, credit);
        credit
    }

    fn on_error(&mut self, error: Error) {
        self.probe.errored.store(true, Ordering::SeqCst);
        self.down.on_error(error);
    }

    fn on_complete(&mut self) {
        self.probe.completed.store(true, Ordering::SeqCst);
        self.down.on_complete();
    }

    fn drop_hook(&self) -> Option<DropHook> {
        self.down.drop_hook()
    }
}
