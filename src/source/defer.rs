//! `defer`: build the publisher at subscribe time.

use crate::guard::catch_in;
use crate::{Publisher, Subscriber};

/// Publisher for [`defer`].
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct Defer<F> {
    factory: F,
}

/// A publisher that calls `factory` when it is subscribed and subscribes the
/// subscriber to what it returns. Clone it (with a `Clone` factory) for a fresh
/// publisher per subscription.
///
/// # Errors
///
/// A panic in `factory` becomes `on_subscribe` followed by `on_error` of kind
/// [`Panicked`](crate::ErrorKind::Panicked).
///
/// # Examples
///
/// ```
/// use weir::prelude::*;
///
/// let lazy = weir::defer(|| weir::range(0u8..3));
/// assert_eq!(lazy.collect().wait().unwrap(), vec![0, 1, 2]);
/// ```
pub fn defer<F, P>(factory: F) -> Defer<F>
where
    F: FnOnce() -> P,
    P: Publisher,
{
    Defer { factory }
}

impl<F, P> Publisher for Defer<F>
where
    F: FnOnce() -> P,
    P: Publisher,
{
    type Item = P::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<P::Item> + Send + 'static,
    {
        match catch_in("defer", self.factory) {
            Ok(publisher) => publisher.subscribe(subscriber),
            Err(error) => super::error(error).subscribe(subscriber),
        }
    }
}
