//! `from_iter`, `just` and `empty`: publishers over an iterator.
//!
//! Demand contract: emits exactly what is requested, one `on_next_batch` per pass.
//! The iterator is peeked one item ahead so the stream completes as soon as it is
//! exhausted, without waiting for a request that would find nothing (rule 1.5).
//! User iterator code runs inside the panic guard: a panic becomes `on_error`.

use std::iter::Peekable;

use crate::guard::{blamed, catch_in};
use crate::spec::Sealed;
use crate::stage::emitter::{self, Emitted, Emitter};
use crate::stage::Cx;
use crate::{Error, Publisher, Subscriber};

/// Publisher for [`from_iter`], [`just`] and [`empty`].
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct FromIter<I> {
    iter: I,
}

/// A publisher of the items of `iter`, in order, then `on_complete`.
///
/// The iterator is created at `from_iter` time and consumed by the one subscriber;
/// clone the publisher (if the iterator is `Clone`) to subscribe again.
///
/// # Backpressure
///
/// Full: `next` is called only for requested items, plus one item of look-ahead so
/// that completion is signalled as soon as the iterator is exhausted.
///
/// # Errors
///
/// A panic inside the iterator's `next` becomes `on_error` of kind
/// [`Panicked`](crate::ErrorKind::Panicked).
///
/// # Examples
///
/// ```
/// use weir::prelude::*;
///
/// let words = weir::from_iter(vec!["a", "b"]).collect().wait().unwrap();
/// assert_eq!(words, vec!["a", "b"]);
/// ```
pub fn from_iter<I>(iter: I) -> FromIter<I::IntoIter>
where
    I: IntoIterator,
    I::IntoIter: Send + 'static,
    I::Item: Send + 'static,
{
    FromIter {
        iter: iter.into_iter(),
    }
}

/// A publisher of the single item `item`, then `on_complete`.
///
/// # Examples
///
/// ```
/// use weir::prelude::*;
///
/// assert_eq!(weir::just(7).collect().wait().unwrap(), vec![7]);
/// ```
pub fn just<T: Send + 'static>(item: T) -> FromIter<std::option::IntoIter<T>> {
    FromIter {
        iter: Some(item).into_iter(),
    }
}

/// A publisher that completes at once, without items and without needing demand.
///
/// # Examples
///
/// ```
/// use weir::prelude::*;
///
/// assert!(weir::empty::<u32>().collect().wait().unwrap().is_empty());
/// ```
pub fn empty<T: Send + 'static>() -> FromIter<std::option::IntoIter<T>> {
    FromIter {
        iter: None.into_iter(),
    }
}

/// The engine's view of an iterator: peekable, with panics caught.
pub(crate) struct IterSource<I: Iterator> {
    iter: Peekable<I>,
}

/// Yields the iterator's items, stopping (and parking the error) at a panic.
struct Catching<'a, I: Iterator> {
    iter: &'a mut Peekable<I>,
    left: u64,
    panic: &'a mut Option<Error>,
}

impl<I: Iterator> Iterator for Catching<'_, I> {
    type Item = I::Item;

    #[inline]
    fn next(&mut self) -> Option<I::Item> {
        if self.left == 0 || self.panic.is_some() {
            return None;
        }
        match catch_in("from_iter", || self.iter.next()) {
            Ok(Some(item)) => {
                self.left -= 1;
                Some(item)
            }
            Ok(None) => None,
            Err(e) => {
                *self.panic = Some(e);
                None
            }
        }
    }
}

impl<I> Emitter for IterSource<I>
where
    I: Iterator + Send + 'static,
    I::Item: Send + 'static,
{
    type Item = I::Item;

    fn emit<S: Subscriber<I::Item>>(
        &mut self,
        cx: &Cx<'_>,
        subscriber: &mut S,
        budget: u64,
    ) -> Emitted {
        let mut panic = None;
        let mut emitted = 0;
        let mut credit = 0;
        if budget > 0 {
            let mut batch = Catching {
                iter: &mut self.iter,
                left: budget,
                panic: &mut panic,
            };
            credit = cx.hand_over(subscriber, batch.by_ref().inspect(|_| emitted += 1));
        }
        let outcome = if let Some(error) = panic {
            Emitted::fail(emitted, error)
        } else {
            match catch_in("from_iter", || self.iter.peek().is_none()) {
                Ok(true) => Emitted::complete(emitted),
                Ok(false) => Emitted::more(emitted),
                Err(error) => Emitted::fail(emitted, error),
            }
        };
        outcome.with_credit(credit)
    }
}

impl<I> Publisher for FromIter<I>
where
    I: Iterator + Send + 'static,
    I::Item: Send + 'static,
{
    type Item = I::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<I::Item> + Send + 'static,
    {
        emitter::subscribe(
            IterSource {
                iter: self.iter.peekable(),
            },
            subscriber,
        )
    }

    /// Synchronous; its only user code is the iterator's: always fuses.
    fn fuses(&self, _sealed: Sealed) -> bool {
        true
    }

    /// The iterator's own `fold`; a panic in its `next` names `from_iter` (a panic
    /// in a closure downstream names that closure's stage first).
    #[inline]
    fn fold_fused<A, F>(self, init: A, f: F, _sealed: Sealed) -> Result<A, Error>
    where
        A: Send + 'static,
        F: FnMut(A, I::Item) -> A + Send + 'static,
    {
        Ok(blamed("from_iter", || self.iter.fold(init, f)))
    }
}
