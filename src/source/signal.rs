//! `error` and `never`: publishers that only signal a terminal state, or nothing.

use crate::stage::emitter::{self, Emitted, Emitter};
use crate::stage::Cx;
use crate::{Error, Publisher, Subscriber};

/// Publisher for [`error`]: `on_subscribe`, then `on_error` at once.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct Fail<T> {
    error: Error,
    _item: std::marker::PhantomData<fn() -> T>,
}

/// A publisher that fails at once with `error`, without needing demand (rule 1.4).
/// Every subscriber of a clone receives a clone of the same error.
///
/// # Examples
///
/// ```
/// use weir::prelude::*;
///
/// let result = weir::error::<u32>(weir::Error::msg("disk on fire")).collect().wait();
/// assert_eq!(result.unwrap_err().message(), "disk on fire");
/// ```
pub fn error<T: Send + 'static>(error: Error) -> Fail<T> {
    Fail {
        error,
        _item: std::marker::PhantomData,
    }
}

struct FailSource<T> {
    error: Option<Error>,
    _item: std::marker::PhantomData<fn() -> T>,
}

impl<T: Send + 'static> Emitter for FailSource<T> {
    type Item = T;

    fn emit<S: Subscriber<T>>(
        &mut self,
        _cx: &Cx<'_>,
        _subscriber: &mut S,
        _budget: u64,
    ) -> Emitted {
        match self.error.take() {
            Some(error) => Emitted::fail(0, error),
            None => Emitted::more(0),
        }
    }
}

impl<T: Send + 'static> Publisher for Fail<T> {
    type Item = T;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<T> + Send + 'static,
    {
        emitter::subscribe(
            FailSource {
                error: Some(self.error),
                _item: self._item,
            },
            subscriber,
        )
    }
}

/// Publisher for [`never()`].
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct Never<T> {
    _item: std::marker::PhantomData<fn() -> T>,
}

/// A publisher that calls `on_subscribe` and then nothing, ever. Cancelling drops the
/// subscriber. Useful in tests and as a placeholder.
///
/// # Examples
///
/// ```
/// use weir::prelude::*;
/// use std::time::Duration;
///
/// let mut handle = weir::never::<u32>().collect();
/// assert!(handle.wait_timeout(Duration::from_millis(10)).is_none());
/// handle.cancel();
/// ```
pub fn never<T: Send + 'static>() -> Never<T> {
    Never {
        _item: std::marker::PhantomData,
    }
}

struct NeverSource<T>(std::marker::PhantomData<fn() -> T>);

impl<T: Send + 'static> Emitter for NeverSource<T> {
    type Item = T;

    fn emit<S: Subscriber<T>>(
        &mut self,
        _cx: &Cx<'_>,
        _subscriber: &mut S,
        _budget: u64,
    ) -> Emitted {
        Emitted::more(0)
    }
}

impl<T: Send + 'static> Publisher for Never<T> {
    type Item = T;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<T> + Send + 'static,
    {
        emitter::subscribe(NeverSource(self._item), subscriber)
    }
}
