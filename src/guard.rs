//! Catching panics in user closures (principle 6).
//!
//! Every closure a user hands to weir runs inside [`catch`]. A panic becomes an
//! [`Error`] of kind `Panicked`; the stage that caught it cancels upstream and signals
//! `on_error` downstream, so the caller's thread never unwinds through weir's state.
//! On the path that does not panic, `catch_unwind` costs nothing measurable and a
//! closure that cannot panic compiles to the same loop as without it.

use std::ops::ControlFlow;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::drain::Upstream;
use crate::Error;

/// Run `f`, turning a panic into an `Error` of kind `Panicked`.
#[inline(always)]
pub(crate) fn catch<R>(f: impl FnOnce() -> R) -> Result<R, Error> {
    // AssertUnwindSafe: after a panic the closure's stage is terminated and never
    // touches the closure's captured state again, so no broken invariant is observed.
    catch_unwind(AssertUnwindSafe(f)).map_err(Error::panicked)
}

std::thread_local! {
    /// Set while [`subscribe_guarded`] runs a `subscribe` whose panic its caller
    /// answers itself.
    static GUARDED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `subscribe` (a user's publisher's `subscribe`, inside the caller's
/// `catch_unwind`, which ends the stage with the panic's own message): a subscriber
/// that the panic's unwind drops leaves its stage to the caller
/// ([`dropped_unterminated`] says so).
pub(crate) fn subscribe_guarded<R>(subscribe: impl FnOnce() -> R) -> R {
    /// Puts the flag back however `subscribe` ends: dropped after everything the
    /// unwind drops inside it.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            GUARDED.set(self.0);
        }
    }
    let _restore = Restore(GUARDED.replace(true));
    subscribe()
}

/// For a subscriber's `Drop` that finds no terminal signal: whether it should end
/// its stage now. Its publisher released it without one (ended without telling, or
/// its thread panicked holding it), and nobody else will: true, unless the drop
/// is part of a panic unwinding out of a [`subscribe_guarded`] `subscribe`, whose
/// caller ends the stage with the panic's message.
pub(crate) fn dropped_unterminated() -> bool {
    !(std::thread::panicking() && GUARDED.get())
}

/// The error a stage ends with when its upstream released its subscriber without a
/// terminal signal.
pub(crate) fn abandoned(stage: &str) -> Error {
    Error::cancelled_with(format!(
        "{stage}: its upstream dropped its subscriber without a terminal signal"
    ))
}

/// Where a subscriber a stage hands to a user's publisher leaves its downstream when
/// the publisher's `subscribe` panics with it unterminated, for the stage that
/// called `subscribe` under `catch_unwind`: there the panic's payload is at hand (in
/// the subscriber's `Drop`, during the unwind, it is not), and it ends downstream
/// with it. `subscribe_on` and `concat`'s second leg use it.
pub(crate) struct HandBack<D> {
    state: std::sync::Mutex<Handed<D>>,
}

enum Handed<D> {
    /// The caller is inside `subscribe`, catching.
    Open,
    /// Downstream, and whether it had `on_subscribe`.
    Back(D, bool),
    /// The caller has moved on: nobody takes a hand-back.
    Closed,
}

impl<D> Default for HandBack<D> {
    fn default() -> Self {
        HandBack {
            state: std::sync::Mutex::new(Handed::Open),
        }
    }
}

impl<D> HandBack<D> {
    /// Leave `downstream` for the caller of `subscribe`; `Err` (with it) once the
    /// caller has moved on (the subscriber's `Drop` then ends downstream itself).
    pub(crate) fn give(&self, downstream: D, had_subscribe: bool) -> Result<(), D> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match *state {
            Handed::Open => {
                *state = Handed::Back(downstream, had_subscribe);
                Ok(())
            }
            _ => Err(downstream),
        }
    }

    /// The caller of `subscribe` moves on: take what was handed back, and refuse
    /// later gives.
    pub(crate) fn close(&self) -> Option<(D, bool)> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match std::mem::replace(&mut *state, Handed::Closed) {
            Handed::Back(downstream, had_subscribe) => Some((downstream, had_subscribe)),
            _ => None,
        }
    }
}

/// End `downstream` with `error` outside any stage (a subscriber handed back, a task
/// dropped unrun), giving it `on_subscribe` (a subscription that ignores every call)
/// first unless it `had_subscribe`; a panic in its `on_error` is logged (rule 2.13).
pub(crate) fn end_with<T, D: crate::Subscriber<T>>(
    mut downstream: D,
    had_subscribe: bool,
    error: Error,
) {
    if (had_subscribe || on_subscribe(&mut downstream, crate::Subscription::noop()))
        && catch(|| downstream.on_error(error)).is_err()
    {
        tracing::error!("subscriber panicked in on_error (rule 2.13)");
    }
}

/// Run `f`, turning a panic into an `Error` of kind `Panicked` that names `stage`.
#[inline(always)]
pub(crate) fn catch_in<R>(stage: &'static str, f: impl FnOnce() -> R) -> Result<R, Error> {
    catch(f).map_err(|error| error.in_stage(stage))
}

/// Cancel an upstream `subscription` on behalf of `stage`. One whose `cancel`
/// panics (rule 3.15 broken) must not stop the caller halfway through letting go
/// (the rest of its clean-up, the other upstreams it cancels next, the task it runs
/// on): contained and logged.
pub(crate) fn cancel_contained(stage: &'static str, subscription: &crate::Subscription) {
    if catch(|| subscription.cancel()).is_err() {
        tracing::error!(stage, "an upstream panicked in cancel; contained");
    }
}

/// Drop `items` one by one, each under a guard of its own; returns how many
/// panicked (the caller logs them). An item's `Drop` is user code, and where two of
/// a collection's items panic in one `drop` of the collection, the second panics
/// while the first unwinds, which aborts the process.
pub(crate) fn drop_each<T>(items: impl IntoIterator<Item = T>) -> usize {
    if !std::mem::needs_drop::<T>() {
        return 0;
    }
    let mut panicked = 0;
    for item in items {
        if catch_unwind(AssertUnwindSafe(move || drop(item))).is_err() {
            panicked += 1;
        }
    }
    panicked
}

/// Wake `wakers`, each under a guard of its own. A task's waker is an executor's
/// code: one that panics in `wake` must neither keep the tasks after it asleep (they
/// were taken out of their waiting list: nothing would wake them again) nor unwind
/// into whoever hands them out (a drain pass, a `request`, a cancel). Contained and
/// logged.
pub(crate) fn wake_all(wakers: impl IntoIterator<Item = std::task::Waker>) {
    for waker in wakers {
        if catch_unwind(AssertUnwindSafe(|| waker.wake())).is_err() {
            tracing::error!("a task's waker panicked in wake; contained");
        }
    }
}

/// What a [`Guarded`] batch reports back to its stage.
#[derive(Default)]
pub(crate) struct BatchOutcome {
    /// The first panic of the user closure, if any (naming `stage`).
    pub(crate) panic: Option<Error>,
    /// Items for which the closure returned `None`.
    pub(crate) swallowed: u64,
    /// The stage whose closure the batch runs, named in a panic's error.
    stage: &'static str,
}

impl BatchOutcome {
    /// The outcome of a batch of `stage`'s closure.
    pub(crate) fn of(stage: &'static str) -> Self {
        BatchOutcome {
            stage,
            ..BatchOutcome::default()
        }
    }
}

/// An iterator adaptor that applies a user closure `f: T -> Option<U>` to each item
/// (`None` means "swallowed", counted in the outcome) and parks the first panic in
/// the outcome; after a panic it yields nothing more.
///
/// The counting happens here, outside the closure that runs under the panic guard:
/// a counter captured by that closure would escape into `catch_unwind` and be kept in
/// memory, which costs a store per item.
///
/// `fold` is overridden to fold the inner iterator (with `try_fold`), so a chain of
/// guarded stages compiles to one loop (and vectorises where the closures allow),
/// and stops at a panic: nothing more is pulled from the inner iterator (a source's
/// generator or queue is not drained for items nobody will see); the stage that
/// owns `panic` cancels upstream right after the batch.
pub(crate) struct Guarded<'a, I, F, const COUNT: bool = true> {
    items: I,
    f: F,
    outcome: &'a mut BatchOutcome,
}

impl<'a, I, F> Guarded<'a, I, F, true> {
    /// Items mapped by `f`; what `f` swallows is counted in `outcome.swallowed`.
    pub(crate) fn new(items: I, f: F, outcome: &'a mut BatchOutcome) -> Self {
        Guarded { items, f, outcome }
    }
}

impl<'a, I, F> Guarded<'a, I, F, false> {
    /// As [`new`](Guarded::new), without counting what `f` swallows (nobody needs the
    /// count: downstream's demand is unbounded): the loop then carries no counter.
    pub(crate) fn uncounted(items: I, f: F, outcome: &'a mut BatchOutcome) -> Self {
        Guarded { items, f, outcome }
    }
}

/// One batch of a swallowing stage (`filter`, `filter_map`: `f` returns `None` for an
/// item it swallows), the one place such a stage handles a batch: the kept items go
/// to `downstream.on_next_batch` under a panic guard, and the credit to return is
/// downstream's plus the swallowed items, which are owed to downstream again. They
/// are counted only when someone is owed credit for them: not under unbounded demand,
/// and not when the batch is exactly `exact` items and downstream returns the credit
/// for all of them ([`credits_by_count`]); then the loop carries no counter. A panic
/// in `f` fails the stage (upstream cancelled, `on_error` downstream) and returns 0.
///
/// [`credits_by_count`]: crate::Subscriber::credits_by_count
pub(crate) fn swallowing_batch<T, U, S, I, F>(
    stage: &'static str,
    upstream: &mut Upstream,
    downstream: &mut S,
    items: I,
    exact: Option<u64>,
    f: F,
) -> u64
where
    S: crate::Subscriber<U>,
    I: Iterator<Item = T>,
    F: FnMut(T) -> Option<U>,
{
    if !upstream.is_active() {
        return 0;
    }
    let mut outcome = BatchOutcome::of(stage);
    let sealed = crate::spec::Sealed::NEW;
    let credit = match exact {
        Some(n) if downstream.credits_by_count(sealed) => {
            downstream.on_next_batch_of(Guarded::uncounted(items, f, &mut outcome), n, sealed)
        }
        _ if downstream.demand_is_unbounded(sealed) => {
            downstream.on_next_batch(Guarded::uncounted(items, f, &mut outcome))
        }
        _ => downstream.on_next_batch(Guarded::new(items, f, &mut outcome)),
    };
    match outcome.panic {
        Some(error) => {
            upstream.fail(downstream, error);
            0
        }
        // Downstream holds our upstream's subscription: its credit passes as is, plus
        // the swallowed items (none counted when downstream credited the whole batch).
        None => crate::demand::sum(credit, outcome.swallowed),
    }
}

impl<I, F, U, const COUNT: bool> Iterator for Guarded<'_, I, F, COUNT>
where
    I: Iterator,
    F: FnMut(I::Item) -> Option<U>,
{
    type Item = U;

    #[inline]
    fn next(&mut self) -> Option<U> {
        if self.outcome.panic.is_some() {
            return None;
        }
        loop {
            let item = self.items.next()?;
            match catch(|| (self.f)(item)) {
                Ok(Some(out)) => return Some(out),
                Ok(None) => self.outcome.swallowed += u64::from(COUNT),
                Err(e) => {
                    self.outcome.panic = Some(e.in_stage(self.outcome.stage));
                    return None;
                }
            }
        }
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, self.items.size_hint().1)
    }

    #[inline]
    fn fold<B, G>(self, init: B, mut g: G) -> B
    where
        G: FnMut(B, U) -> B,
    {
        let Guarded {
            mut items,
            mut f,
            outcome,
        } = self;
        if outcome.panic.is_some() {
            return init;
        }
        let folded = items.try_fold((init, 0u64), |(acc, swallowed), item| {
            match catch(|| f(item)) {
                Ok(Some(out)) => ControlFlow::Continue((g(acc, out), swallowed)),
                Ok(None) => ControlFlow::Continue((acc, swallowed + u64::from(COUNT))),
                Err(e) => {
                    outcome.panic = Some(e.in_stage(outcome.stage));
                    ControlFlow::Break((acc, swallowed))
                }
            }
        });
        let (ControlFlow::Continue((acc, swallowed)) | ControlFlow::Break((acc, swallowed))) =
            folded;
        outcome.swallowed += swallowed;
        acc
    }
}

/// Call `subscriber.on_subscribe(subscription)`, catching a panic (rule 2.13). On a
/// panic it is logged and `false` comes back: the caller treats the subscriber as
/// having cancelled.
pub(crate) fn on_subscribe<T, S>(subscriber: &mut S, subscription: crate::Subscription) -> bool
where
    S: crate::Subscriber<T> + ?Sized,
{
    if catch(|| subscriber.on_subscribe(subscription)).is_ok() {
        return true;
    }
    tracing::error!("subscriber panicked in on_subscribe (rule 2.13); treated as cancelled");
    false
}

// ---- fused folds ---------------------------------------------------------------------
//
// A fused fold (see `sink::fold::fold`) runs a synchronous chain's closures nested in
// one loop in the caller, under one `catch_unwind` at the top. Which stage's closure
// panicked is recorded on the way out: each closure runs inside `blamed`, whose guard
// is forgotten when the closure returns (no cost on that path, and none at all for a
// closure that cannot unwind) and, when the closure unwinds, names its stage in a
// thread-local slot unless a closure further in named one first.

std::thread_local! {
    /// The stage whose closure a fused fold's panic came from, innermost first.
    static BLAME: std::cell::Cell<Option<&'static str>> = const { std::cell::Cell::new(None) };
}

/// Names its stage in [`BLAME`] when dropped, which only happens while unwinding.
struct Blame(&'static str);

impl Drop for Blame {
    fn drop(&mut self) {
        // The innermost guard drops first: it names the stage, the outer ones keep it.
        // `try_with`: a thread being torn down has no slot left, and loses only the name.
        let _ = BLAME.try_with(|blame| {
            if blame.get().is_none() {
                blame.set(Some(self.0));
            }
        });
    }
}

/// Run `f`, one of `stage`'s closures inside a fused fold: if it unwinds, the fold's
/// error names `stage` (unless a closure it called named its own first).
#[inline(always)]
pub(crate) fn blamed<R>(stage: &'static str, f: impl FnOnce() -> R) -> R {
    let guard = Blame(stage);
    let result = f();
    std::mem::forget(guard);
    result
}

/// Run a fused fold, turning a panic into an `Error` of kind `Panicked` that names the
/// stage whose closure panicked (see [`blamed`]).
#[inline]
pub(crate) fn fused<A>(run: impl FnOnce() -> Result<A, Error>) -> Result<A, Error> {
    // A fold run from inside another one's closure keeps the outer one's slot intact.
    let outer = BLAME.with(|blame| blame.take());
    // AssertUnwindSafe: after a panic the fold's closures and accumulator are dropped
    // during the unwind; nothing of them is observed again.
    let result = catch_unwind(AssertUnwindSafe(run));
    let stage = BLAME.with(|blame| blame.replace(outer));
    result.unwrap_or_else(|payload| {
        let error = Error::panicked(payload);
        Err(match stage {
            Some(stage) => error.in_stage(stage),
            None => error,
        })
    })
}
