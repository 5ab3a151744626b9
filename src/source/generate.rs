//! `generate`, `from_fn`, `unfold`: pull-style sources whose closure is called once
//! per requested item.
//!
//! Demand contract: the closure runs exactly once per item delivered, only against
//! outstanding demand, never ahead of it (unlike `from_iter`, there is no look-ahead).
//! `from_fn` and `unfold` are `generate` with the shapes `std::iter::from_fn` and
//! `futures::stream::unfold` users know; all three run on the emitter stage.

use crate::guard::catch_in;
use crate::stage::emitter::{self, Emitted, Emitter};
use crate::stage::Cx;
use crate::{Error, Publisher, Subscriber};

/// What a [`generate`] closure produces each time it is called.
#[derive(Debug)]
pub enum Step<T> {
    /// Emit this item.
    Next(T),
    /// Emit this item, then end the stream successfully (one call instead of a
    /// `Next` followed by a `Complete`: the generator is not called again, so it
    /// need not remember that it has finished).
    Last(T),
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
/// [`Step::Last`] emits an item and completes in the same call:
///
/// ```
/// use weir::prelude::*;
/// use weir::source::Step;
///
/// let countdown = weir::generate(3u32, |n| {
///     *n -= 1;
///     if *n == 0 { Step::Last("lift-off") } else { Step::Next("tick") }
/// });
/// assert_eq!(countdown.collect().wait().unwrap(), ["tick", "tick", "lift-off"]);
/// ```
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
    /// The public function the user called (`generate`, `from_fn`, `unfold`): named
    /// in the error of a panic in `f`.
    stage: &'static str,
}

/// Subscribe `subscriber` to the generator `f` over `state`, as `stage`.
fn subscribe_as<St, T, F, S>(stage: &'static str, state: St, f: F, subscriber: S)
where
    St: Send + 'static,
    T: Send + 'static,
    F: FnMut(&mut St) -> Step<T> + Send + 'static,
    S: Subscriber<T> + Send + 'static,
{
    emitter::subscribe(GenerateSource { state, f, stage }, subscriber)
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
        match catch_in(source.stage, || (source.f)(&mut source.state)) {
            Ok(Step::Next(item)) => {
                self.left -= 1;
                Some(item)
            }
            Ok(Step::Last(item)) => {
                self.left -= 1;
                *self.end = Some(Ok(()));
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
        subscribe_as("generate", self.state, self.f, subscriber)
    }
}

/// Publisher for [`from_fn`]. Clone it (with a `Clone` closure) to subscribe again.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct FromFn<F> {
    f: F,
}

/// A publisher that calls `f` once per requested item: `Some(item)` emits it, `None`
/// completes the stream (`f` is not called again). The pull-style twin of
/// [`std::iter::from_fn`], without its look-ahead: `f` runs only against demand.
///
/// # Backpressure
///
/// Full: `f` is only called while there is outstanding demand, once per item.
///
/// # Errors
///
/// None of its own; a panic in `f` becomes `on_error` of kind
/// [`Panicked`](crate::ErrorKind::Panicked). Use [`generate`] to end with an error.
///
/// # Examples
///
/// ```
/// use weir::prelude::*;
///
/// let mut lines = "alpha\nbeta\ngamma".lines();
/// let words = weir::from_fn(move || lines.next().map(str::to_uppercase));
/// assert_eq!(words.collect().wait().unwrap(), ["ALPHA", "BETA", "GAMMA"]);
/// ```
pub fn from_fn<T, F>(f: F) -> FromFn<F>
where
    T: Send + 'static,
    F: FnMut() -> Option<T> + Send + 'static,
{
    FromFn { f }
}

impl<T, F> Publisher for FromFn<F>
where
    T: Send + 'static,
    F: FnMut() -> Option<T> + Send + 'static,
{
    type Item = T;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<T> + Send + 'static,
    {
        let step = |f: &mut F| match f() {
            Some(item) => Step::Next(item),
            None => Step::Complete,
        };
        subscribe_as("from_fn", self.f, step, subscriber)
    }
}

/// Publisher for [`unfold`]. Clone it (with a `Clone` state and closure) to subscribe
/// again from the initial state.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct Unfold<St, F> {
    state: St,
    f: F,
}

/// A publisher that threads a state through `f`, once per requested item:
/// `f(state)` returns `Some((item, next_state))` to emit `item`, or `None` to complete.
/// The synchronous shape of `futures::stream::unfold`.
///
/// # Backpressure
///
/// Full: `f` is only called while there is outstanding demand, once per item.
///
/// # Errors
///
/// None of its own; a panic in `f` becomes `on_error` of kind
/// [`Panicked`](crate::ErrorKind::Panicked) (the state is dropped). Use [`generate`] to
/// end with an error.
///
/// # Examples
///
/// ```
/// use weir::prelude::*;
///
/// // Powers of two up to 100.
/// let powers = weir::unfold(1u32, |n| (n <= 100).then(|| (n, n * 2)));
/// assert_eq!(powers.collect().wait().unwrap(), [1, 2, 4, 8, 16, 32, 64]);
/// ```
pub fn unfold<St, T, F>(state: St, f: F) -> Unfold<St, F>
where
    St: Send + 'static,
    T: Send + 'static,
    F: FnMut(St) -> Option<(T, St)> + Send + 'static,
{
    Unfold { state, f }
}

impl<St, T, F> Publisher for Unfold<St, F>
where
    St: Send + 'static,
    T: Send + 'static,
    F: FnMut(St) -> Option<(T, St)> + Send + 'static,
{
    type Item = T;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<T> + Send + 'static,
    {
        let mut f = self.f;
        // The state is `None` only after `f` returned `None` (the stream then ended:
        // the generator is not called again) or panicked.
        let step = move |state: &mut Option<St>| match state.take().and_then(&mut f) {
            Some((item, next)) => {
                *state = Some(next);
                Step::Next(item)
            }
            None => Step::Complete,
        };
        subscribe_as("unfold", Some(self.state), step, subscriber)
    }
}
