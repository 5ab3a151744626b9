// The emitter stage: every source that produces items on demand (range, from_iter,
// generate, error, never, and the stream bridge) is an `Emitter` run by this stage.
//
// An emitter knows one thing: "deliver at most `budget` items to this subscriber,
// and tell me whether you ended". The stage owns the rest, on the signal core:
//
// 1. A pass takes the outstanding demand into a pass-local count (`demand::LocalDemand`),
//    asks the emitter for up to `min(local, CHUNK)` items in one `emit` call (usually
//    one `on_next_batch`), and subtracts what went out, adding the batch credit the
//    subscriber returned: plain arithmetic, no atomic per batch. A synchronous chain
//    that replenishes with batch credit never calls back into the source.
// 2. It repeats while demand is left and the emitter delivered a full batch. An
//    emitter that delivers fewer items without ending has nothing *now* ("pending"):
//    a synchronous source that is waiting for nothing (`never`), or a stream that
//    answered `Pending` and will wake the core through its waker. The unused demand
//    goes back to the shared counter and the pass ends idle.
// 3. An end (`Ok` completes, `Err` fails) is signalled at once, with or without
//    demand (rule 1.2); the first pass asks with a budget of 0 so an empty source
//    completes before anything is requested.
// 4. Cancellation is seen between batches (the core's flags) and, inside a batch,
//    by the `until_cancelled` wrapper the emitter hands out, so a subscriber that
//    cancels inside `on_next` gets no further item.
//
// On a scheduler (the stream bridge) a pass also stops after `TASK_BUDGET` items and
// yields, so an always-ready source under unbounded demand does not hold a worker for
// ever.

use std::marker::PhantomData;

use super::core::{Core, Cx, Drive, Pass, Stage};
use crate::demand::LocalDemand;
#[cfg(feature = "futures")]
use crate::runtime::Scheduler;
use crate::{Error, Subscriber};

/// Largest batch handed to the subscriber in one `emit` call; cancellation is
/// observed between batches.
pub(crate) const CHUNK: u64 = 1024;

/// Items one scheduled pass may emit before it yields its task.
#[cfg(feature = "futures")]
const TASK_BUDGET: u64 = 16 * CHUNK;

/// What one `emit` call did.
pub(crate) struct Emitted {
    /// Items delivered (never more than the budget).
    pub(crate) count: u64,
    /// Batch credit the subscriber returned: demand added at the end of the batch.
    pub(crate) credit: u64,
    /// `Some` when the source has ended: `Ok` to complete, `Err` to fail.
    pub(crate) end: Option<Result<(), Error>>,
}

impl Emitted {
    /// `count` items, and more may follow.
    pub(crate) fn more(count: u64) -> Self {
        Emitted {
            count,
            credit: 0,
            end: None,
        }
    }
    /// `count` items, then the source completed.
    pub(crate) fn complete(count: u64) -> Self {
        Emitted {
            count,
            credit: 0,
            end: Some(Ok(())),
        }
    }
    /// `count` items, then the source failed with `error`.
    pub(crate) fn fail(count: u64, error: Error) -> Self {
        Emitted {
            count,
            credit: 0,
            end: Some(Err(error)),
        }
    }
    /// Record the batch credit the subscriber returned.
    pub(crate) fn with_credit(mut self, credit: u64) -> Self {
        self.credit = credit;
        self
    }
}

/// A source of items, driven by the emitter stage.
pub(crate) trait Emitter: Send + 'static {
    /// What it emits.
    type Item: Send + 'static;
    /// It polls futures with `cx.waker()` (see [`Stage::USES_WAKER`]).
    const USES_WAKER: bool = false;

    /// Deliver at most `budget` items to `subscriber` (usually one `on_next_batch` of
    /// `cx.until_cancelled(..)`). With `budget == 0`, only report whether the source
    /// has already ended. Return fewer than `budget` items without an end only when
    /// the source has nothing to give now.
    fn emit<S: Subscriber<Self::Item>>(
        &mut self,
        cx: &Cx<'_>,
        subscriber: &mut S,
        budget: u64,
    ) -> Emitted;
}

/// Subscribe `subscriber` to `emitter`, emitting on the caller's and requesters'
/// threads.
pub(crate) fn subscribe<E, S>(emitter: E, subscriber: S)
where
    E: Emitter,
    S: Subscriber<E::Item> + Send + 'static,
{
    Core::new(Emitting::<E, Inline> {
        driver: Inline,
        _emitter: PhantomData,
    })
    .attach(emitter, subscriber);
}

/// Subscribe `subscriber` to `emitter`, emitting on tasks of `scheduler` (the
/// stream bridge's emitter polls a future, so this needs the `futures` feature).
#[cfg(feature = "futures")]
pub(crate) fn subscribe_on<E, S, C>(emitter: E, scheduler: C, subscriber: S)
where
    E: Emitter,
    S: Subscriber<E::Item> + Send + 'static,
    C: Scheduler + Clone,
{
    Core::new(Emitting::<E, On<C>> {
        driver: On(scheduler),
        _emitter: PhantomData,
    })
    .attach(emitter, subscriber);
}

/// Emit on whichever thread owns the loop.
pub(crate) struct Inline;

/// Emit on tasks of a scheduler.
#[cfg(feature = "futures")]
pub(crate) struct On<C>(C);

/// Where an emitter's passes run, and how many items one pass may emit.
pub(crate) trait Driver: Send + Sync + 'static {
    /// Items one pass may emit before it yields.
    const BUDGET: u64;
    /// Where passes run.
    fn drive(&self) -> Drive<'_>;
}

impl Driver for Inline {
    const BUDGET: u64 = u64::MAX;
    fn drive(&self) -> Drive<'_> {
        Drive::Inline
    }
}

#[cfg(feature = "futures")]
impl<C: Scheduler> Driver for On<C> {
    const BUDGET: u64 = TASK_BUDGET;
    fn drive(&self) -> Drive<'_> {
        Drive::Scheduled {
            on: &self.0,
            linger: false,
        }
    }
}

/// The emitter stage (shared part: only where it runs).
struct Emitting<E, D> {
    driver: D,
    _emitter: PhantomData<fn() -> E>,
}

impl<E: Emitter, D: Driver> Stage for Emitting<E, D> {
    const NAME: &'static str = "source";
    type Item = E::Item;
    type Owned = E;
    type Padding = ();
    const USES_WAKER: bool = E::USES_WAKER;

    fn drive(&self) -> Drive<'_> {
        self.driver.drive()
    }

    #[inline]
    fn pass<S: Subscriber<E::Item>>(
        &self,
        cx: &Cx<'_>,
        emitter: &mut E,
        subscriber: &mut S,
    ) -> Pass {
        let demand = cx.demand();
        let mut local = LocalDemand::default();
        // Only a scheduled emitter counts its budget (a constant condition: the inline
        // loop compiles without it).
        let mut budget_left = D::BUDGET;
        loop {
            if cx.stopped() {
                // The core stops the stage at the next pass (the flag's setter
                // registered a reason to run). A cancel in the middle of a batch lands
                // here too: no end is signalled after it.
                return Pass::Idle;
            }
            local.take(demand);
            let mut budget = local.get().min(CHUNK);
            if D::BUDGET != u64::MAX {
                budget = budget.min(budget_left);
            }
            let emitted = emitter.emit(cx, subscriber, budget);
            debug_assert!(emitted.count <= budget, "source emitted beyond its budget");
            local.spent(emitted.count, emitted.credit);
            if let Some(end) = emitted.end {
                return cx.terminate(subscriber, end);
            }
            if emitted.count < budget || budget == 0 {
                // Nothing now: keep the unused demand for the next pass.
                local.give_back(demand);
                return Pass::Idle;
            }
            if D::BUDGET != u64::MAX {
                budget_left -= emitted.count;
                if budget_left == 0 {
                    local.give_back(demand);
                    return Pass::Yield;
                }
            }
            if local.get() == 0 && demand.get() == 0 {
                return Pass::Idle;
            }
        }
    }

    fn stop(&self, _emitter: &mut E) {
        // A source holds no items; the core drops the emitter and the subscriber.
    }
}
