//! [`capture_subscriber`]: get hold of the subscriber a sink builds, without changing
//! the sink.
//!
//! weir's sinks (`fold_with`, `for_each_with`, `collect_with`, …) are methods that
//! build their subscriber and subscribe it to `self` in one go; the subscriber type is
//! private. Subscriber verification needs the subscriber as a value. So the sink is
//! attached to a [`Capture`] publisher, whose `subscribe` only stores the subscriber
//! (boxed); [`capture_subscriber`] returns it together with whatever the sink method
//! returned (its [`SinkHandle`](crate::sink::SinkHandle)).
//!
//! ```
//! use weir::prelude::*;
//! use weir::tck::capture_subscriber;
//!
//! let (subscriber, handle) = capture_subscriber::<u64, _>(|p| p.collect_with(8));
//! weir::range(0u64..3).subscribe(subscriber);
//! assert_eq!(handle.wait().unwrap(), vec![0, 1, 2]);
//! ```

use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use super::env::lock;
use crate::{Publisher, Subscriber};

/// A subscriber taken out of a sink by [`capture_subscriber`].
pub type CapturedSubscriber<T> = Box<dyn Subscriber<T> + Send>;

type Captured<T> = Arc<Mutex<Option<CapturedSubscriber<T>>>>;

/// A publisher that never signals: its `subscribe` stores the subscriber for
/// [`capture_subscriber`].
pub struct Capture<T> {
    slot: Captured<T>,
    _items: PhantomData<fn() -> T>,
}

impl<T> fmt::Debug for Capture<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Capture")
    }
}

impl<T: Send + 'static> Publisher for Capture<T> {
    type Item = T;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<T> + Send + 'static,
    {
        *lock(&self.slot) = Some(Box::new(subscriber));
    }
}

/// Call `attach` with a [`Capture`] publisher (typically `|p| p.fold_with(…)`) and
/// return the subscriber it subscribed, with `attach`'s result.
///
/// # Panics
///
/// If `attach` did not subscribe exactly once to the capture publisher.
pub fn capture_subscriber<T, R>(attach: impl FnOnce(Capture<T>) -> R) -> (CapturedSubscriber<T>, R)
where
    T: Send + 'static,
{
    let slot: Captured<T> = Arc::default();
    let result = attach(Capture {
        slot: slot.clone(),
        _items: PhantomData,
    });
    let subscriber = lock(&slot)
        .take()
        .expect("capture_subscriber: the closure must subscribe to the Capture publisher");
    (subscriber, result)
}
