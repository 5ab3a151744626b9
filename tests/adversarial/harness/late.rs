//! A source caught mid-delivery by a cancel ([`Feed::Late`](crate::stages::Feed)): it
//! delivers nothing by itself; the check holds its subscriber and delivers into it
//! after the cancel reached the source (a source that read its demand before the
//! cancel may still deliver, rule 2.8), then lets go of it (rule 3.13).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use weir::{Publisher, RawSubscription, Subscriber, Subscription};

use super::item::Item;

type Deliver = Box<dyn FnMut(Item) + Send>;

/// What the source was told, and its subscriber once it has one.
#[derive(Default)]
pub struct LateSource {
    subscriber: Mutex<Option<Deliver>>,
    requested: AtomicU64,
    cancelled: AtomicBool,
    /// The check is done with it: from now on it behaves as a source should and
    /// lets go of its subscriber on cancel.
    done: AtomicBool,
}

/// The subscription [`LateSource`] hands out: it records, and stops nothing.
struct Told(Arc<LateSource>);

impl RawSubscription for Told {
    fn request(&self, n: u64) {
        let _ = self
            .0
            .requested
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |r| {
                Some(r.saturating_add(n))
            });
    }
    fn cancel(&self) {
        self.0.cancelled.store(true, Ordering::SeqCst);
        if self.0.done.load(Ordering::SeqCst) {
            self.0.let_go();
        }
    }
}

impl LateSource {
    /// A source nobody subscribed yet.
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// A subscriber arrived.
    pub fn subscribed(&self) -> bool {
        self.subscriber.lock().unwrap().is_some()
    }

    /// The source was asked for at least one item.
    pub fn asked(&self) -> bool {
        self.requested.load(Ordering::SeqCst) > 0
    }

    /// The cancel reached the source.
    pub fn cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// Deliver `item` if the source holds a subscriber and was asked for an item
    /// (cancelled or not); `Err(item)` otherwise.
    pub fn deliver(&self, item: Item) -> Result<(), Item> {
        let mut slot = self.subscriber.lock().unwrap();
        let Some(deliver) = slot.as_mut() else {
            return Err(item);
        };
        let asked = self
            .requested
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |r| r.checked_sub(1));
        if asked.is_err() {
            return Err(item);
        }
        deliver(item);
        Ok(())
    }

    /// Drop the subscriber, as a cancelled source must eventually; from now on the
    /// source lets go of a later subscriber on its cancel (a stage that subscribes
    /// after the check is done with its sources).
    pub fn let_go(&self) {
        let subscriber = {
            let mut slot = self.subscriber.lock().unwrap();
            self.done.store(true, Ordering::SeqCst);
            slot.take()
        };
        drop(subscriber);
    }
}

/// The publisher of a [`LateSource`].
pub struct Late(pub Arc<LateSource>);

impl Publisher for Late {
    type Item = Item;

    fn subscribe<S>(self, mut subscriber: S)
    where
        S: Subscriber<Item> + Send + 'static,
    {
        subscriber.on_subscribe(Subscription::new(Arc::new(Told(self.0.clone()))));
        let mut slot = self.0.subscriber.lock().unwrap();
        if self.0.done.load(Ordering::SeqCst) && self.0.cancelled() {
            drop(slot);
            drop(subscriber);
            return;
        }
        *slot = Some(Box::new(move |item| subscriber.on_next(item)));
    }
}
