//! A source caught mid-delivery by a cancel: the test holds its subscriber and hands
//! it items whenever it likes, also after the cancel reached the source (a source that
//! read its demand before the cancel may still deliver, rule 2.8). Each delivery stays
//! within what was requested. An operator must not keep such an item in a queue
//! nobody drains any more: once the source lets go of its subscriber, the item is gone,
//! even while downstream still holds its subscription.
//!
//! [`Live`] items count how many of them exist, so a test can see one kept.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use weir::{Publisher, RawSubscription, Subscriber, Subscription};

/// An item that counts the live instances of its kind.
#[derive(Debug)]
pub struct Live(Arc<AtomicUsize>);

impl Live {
    /// One more live item counted in `alive`.
    pub fn new(alive: &Arc<AtomicUsize>) -> Self {
        alive.fetch_add(1, Ordering::SeqCst);
        Live(alive.clone())
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

type Deliver<T> = Box<dyn FnMut(T) + Send>;

/// What the source's subscription was told.
#[derive(Default)]
struct Told {
    requested: AtomicU64,
    cancelled: AtomicBool,
}

impl RawSubscription for Told {
    fn request(&self, n: u64) {
        self.requested.fetch_add(n, Ordering::SeqCst);
    }
    fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
    }
}

/// The publisher side of [`late`].
pub struct Late<T> {
    slot: Arc<Mutex<Option<Deliver<T>>>>,
    told: Arc<Told>,
}

/// The test's side of [`late`]: delivers into the subscriber it keeps.
pub struct LateHandle<T> {
    slot: Arc<Mutex<Option<Deliver<T>>>>,
    told: Arc<Told>,
}

/// A source whose deliveries the test makes, cancel or not.
pub fn late<T>() -> (Late<T>, LateHandle<T>) {
    let (slot, told) = (Arc::new(Mutex::new(None)), Arc::new(Told::default()));
    let handle = LateHandle {
        slot: slot.clone(),
        told: told.clone(),
    };
    (Late { slot, told }, handle)
}

impl<T: Send + 'static> Publisher for Late<T> {
    type Item = T;

    fn subscribe<S>(self, mut subscriber: S)
    where
        S: Subscriber<T> + Send + 'static,
    {
        subscriber.on_subscribe(Subscription::new(self.told));
        *self.slot.lock().unwrap() = Some(Box::new(move |item| subscriber.on_next(item)));
    }
}

impl<T> LateHandle<T> {
    /// True once the operator cancelled this source.
    pub fn cancelled(&self) -> bool {
        self.told.cancelled.load(Ordering::SeqCst)
    }

    /// The source lets go of its subscriber, as a source must, eventually, after a
    /// cancel (rule 3.13).
    pub fn let_go(&self) {
        let deliver = self.slot.lock().unwrap().take();
        drop(deliver);
    }

    /// Deliver `item`, cancelled or not; the subscriber stays with the source.
    ///
    /// # Panics
    ///
    /// If nothing subscribed, or nothing was requested (the delivery would break rule
    /// 1.1 rather than race a cancel).
    pub fn deliver(&self, item: T) {
        let requested = self.told.requested.fetch_sub(1, Ordering::SeqCst);
        assert!(
            requested > 0,
            "the late source has no demand to deliver into"
        );
        let mut slot = self.slot.lock().unwrap();
        let deliver = slot.as_mut().expect("the late source was never subscribed");
        deliver(item);
    }
}
