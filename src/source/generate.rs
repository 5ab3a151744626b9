//! `generate`: a stateful generator called once per requested item.
//!
//! Demand contract: the closure runs exactly once per item delivered, only against
//! outstanding demand, never ahead of it (unlike `from_iter`, there is no look-ahead).

use crate::guard::catch;
use crate::stage::emitter::{self, Emitted, Emitter};
use crate::stage::Cx;
use crate::{Error, Publisher, Subscriber};

/// What a [`generate`] closure produces each time it is called.
#[derive(Debug)]
pub enum Step<T> {
    /// Emit this item.
    Next(T),
    /// End the stream successfully.
    Complete,
    /// End the stream with this error.
    Error(Error),
}

/// Publisher for [`generate`]. Clone it (with a `Clone` state and closure) to
/// subscribe again from the initial state.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct Generate<St, F> {
    state: St,
    f: F,
}

/// A publisher driven by a generator: `f(&mut state)` is called once for each item
/// requested and returns the next [`Step`].
///
/// # Backpressure
///
/// Full: `f` is only called while there is outstanding demand, once per item.
///
/// # Errors
///
/// [`Step::Error`] ends the stream with that error. A panic in `f` becomes `on_error`
/// of kind [`Panicked`](crate::ErrorKind::Panicked).
///
/// # Examples
///
/// ```
/// use weir::prelude::*;
/// use weir::source::Step;
///
/// // Fibonacci numbers below 50.
/// let fib = weir::generate((0u64, 1u64), |(a, b)| {
///     if *a >= 50 {
///         return Step::Complete;
///     }
///     let out = *a;
///     (*a, *b) = (*b, *a + *b);
///     Step::Next(out)
/// });
/// assert_eq!(fib.collect().wait().unwrap(), vec![0, 1, 1, 2, 3, 5, 8, 13, 21, 34]);
/// ```
pub fn generate<St, T, F>(state: St, f: F) -> Generate<St, F>
where
    St: Send + 'static,
    T: Send + 'static,
    F: FnMut(&mut St) -> Step<T> + Send + 'static,
{
    Generate { state, f }
}

struct GenerateSource<St, F> {
    state: St,
    f: F,
}

/// Calls the generator up to `left` times, parking the end of the stream.
struct Steps<'a, St, F> {
    source: &'a mut GenerateSource<St, F>,
    left: u64,
    end: &'a mut Option<Result<(), Error>>,
}

impl<St, T, F> Iterator for Steps<'_, St, F>
where
    F: FnMut(&mut St) -> Step<T>,
{
    type Item = T;

    #[inline]
    fn next(&mut self) -> Option<T> {
        if self.left == 0 || self.end.is_some() {
            return None;
        }
        let source = &mut *self.source;
        match catch(|| (source.f)(&mut source.state)) {
            Ok(Step::Next(item)) => {
                self.left -= 1;
                Some(item)
            }
            Ok(Step::Complete) => {
                *self.end = Some(Ok(()));
                None
            }
            Ok(Step::Error(error)) | Err(error) => {
                *self.end = Some(Err(error));
                None
            }
        }
    }
}

impl<St, T, F> Emitter for GenerateSource<St, F>
where
    St: Send + 'static,
    T: Send + 'static,
    F: FnMut(&mut St) -> Step<T> + Send + 'static,
{
    type Item = T;

    fn emit<S: Subscriber<T>>(&mut self, cx: &Cx<'_>, subscriber: &mut S, budget: u64) -> Emitted {
        let mut end = None;
        let mut emitted = 0;
        let mut credit = 0;
        if budget > 0 {
            let mut steps = Steps {
                source: self,
                left: budget,
                end: &mut end,
            };
            credit = cx.hand_over(subscriber, steps.by_ref().inspect(|_| emitted += 1));
        }
        Emitted {
            count: emitted,
            credit,
            end,
        }
    }
}

impl<St, T, F> Publisher for Generate<St, F>
where
    St: Send + 'static,
    T: Send + 'static,
    F: FnMut(&mut St) -> Step<T> + Send + 'static,
{
    type Item = T;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<T> + Send + 'static,
    {
        emitter::subscribe(
            GenerateSource {
                state: self.state,
                f: self.f,
            },
            subscriber,
        )
    }
}
