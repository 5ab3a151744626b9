// The signal core: the one implementation of a subscription that serves a downstream.
//
// # What it owns
//
// * `demand`: downstream's outstanding demand (an `AtomicDemand`).
// * `wip`: the one drain loop (`drain::Wip`): whoever moves it from 0 owns the loop
//   and runs passes; everyone else only records a reason to run and returns (rule 1.3
//   for signal order, rule 3.3 for recursion).
// * `flags`: what downstream (or the scheduler) asked for: `CANCELLED`, `BAD_REQUEST`
//   (a `request(0)`), `SHUTDOWN` (the scheduler dropped one of our tasks), and `OVER`
//   once the subscription ended.
// * `slot`: the stage's owner-only state and the downstream subscriber, which only
//   the loop's owner reaches (`stage::owner::OwnerSlot`: the `Wip`'s hand-over orders
//   one owner's accesses before the next's, so no lock is taken). `None` once over.
// * `stage`: the part of the stage that producers, timers and requesters share.
//
// # A pass
//
// The owner takes the slot and reads the flags. A stopping flag ends the
// subscription at once; otherwise the stage's pass body runs inside one panic guard
// (one `catch_unwind` per pass, not per item: the emission loop's state stays in
// registers). The pass ends `Idle` (nothing to do until the next reason), `Yield` (a
// scheduled stage used its task's budget: the loop continues in a new task) or `Over`
// (the body ended the stream: `Cx::terminate` keeps the terminal for the core). When
// a subscription ends, for whatever reason, the core (1) takes the state out of the
// slot and marks itself `OVER`, (2) lets the stage release what it holds and cancel
// upstream (`Stage::stop`), (3) signals downstream where that is due (the stream's
// own end that the body kept; `request(0)`: the rule 3.9 error; a dropped task: a
// `SchedulerShutdown` error; a cancel or a panicking subscriber: nothing), and (4)
// drops the state and the subscriber. Steps 2 to 4 each run under a panic guard of
// their own, because they run user code (an item's `Drop`, `on_error`). Releasing
// before the terminal signal is what lets a subscriber woken by `on_complete` or
// `on_error` find the stage's items, calls and upstream already let go.
//
// # Driving the loop
//
// An inline stage runs its passes on whichever thread gained ownership (the
// subscriber's, a producer's, a requester's). A scheduled stage hands ownership to a
// task on its scheduler: the task carries the count of reasons it owes the `Wip`, runs
// passes until the count drops to zero, optionally lingers a moment (the crate's one
// `Backoff`) for the next reason instead of leaving (or for work the stage can see
// arrived without a signal, `Stage::has_work`: a pass then runs on the reasons the
// task already owes), and re-schedules itself after a
// budget of passes or when the body yields, so one busy stage never holds a worker for
// ever. A cancel found by the thread that gains ownership is handled on that thread at
// once (it only releases). If the scheduler drops the task instead of running it, the
// task's drop sets `SHUTDOWN` and runs the final pass on the dropping thread, so the
// pipeline ends with an error instead of hanging, and the `Wip` is released.
//
// A helper that runs on the stage's scheduler itself may ask for a pass *in place*
// (`signal_in_place`): when the calling thread is the scheduler's only thread, a task
// could not start before the caller's own task ends anyway, so the loop runs there
// and then (as a task would: yielding and rescheduling after its budget, never
// lingering) and the task hand-off is saved. The mux's demultiplexer does this once
// per batch of frames for every channel the batch gave items. The caller must hold
// no lock a pass could take.
//
// # Watched stages
//
// A boundary's producer that signals after every batch pays a locked increment of the
// `Wip` per batch, on a line the owner writes at every pass; when batches are single
// items (a producer sending one at a time) that line travels between the two cores
// twice per item, and it was most of the producer's time. A stage that can see
// unsignalled work itself (`Stage::has_work`) says `WATCHED`, and its producers call
// `notify` instead of `signal`. A lingering task marks itself *watching* while it
// owns the loop (it already looks for such work between passes); `notify` signals
// only when the mark is clear. The mark is cleared when the task releases the loop,
// and that is the race to close: a producer that read the mark just before it was
// cleared did not signal, and the task may have looked for the last time before the
// work was published. So both sides fence (`SeqCst`) between their write and their
// read: the producer between publishing its work and reading the mark, the task
// between clearing the mark and looking for work once more (`unwatch`). Of two
// `SeqCst` fences one comes first: either the producer's read follows the clear and
// it signals, or the task's look follows the publication and it sees the work (and
// takes the loop again, or leaves it to the thread that took it meanwhile, which
// then owes a pass for the reason `unwatch` registered). A task that hands the loop
// to a new task (budget, yield) stays marked: the new task runs a pass first. A
// stage may watch only some of the time (`Stage::watches`, asked when a task
// starts), because looking costs a drain whose producer sends large batches (it
// reads the lines the producer is writing); a task that does not watch clears a mark
// it inherited with the same fence before its first pass, which then sees what was
// published unsignalled.
//
// # Layout
//
// On a boundary two threads use one core: the producer reads the flags and enters the
// `Wip` once per batch, while the owner reaches the slot and settles the demand for
// every delivery. A stage whose core is used that way says `type Padding = Block`:
// the demand, the slot and the `Wip` then each sit on a 128-byte block of their own
// (the `Wip` since the producer reads the flags beside it once per item when items
// come one at a time, while the owner writes it every pass), so
// the owner's writes there do not take the `Wip`'s line from the producer and the
// producer's signal does not take theirs from the owner. Measured on
// `range → subscribe_on → publish_on(16) → fold`: the demand's settle was a third of
// the drain's samples (`perf`), and padding both lifted the boundary by about 30 %.
// Every other stage says `()` (no padding): a fused chain gains nothing from it
// and would pay 256 bytes a subscription, and its hot loop would move in the binary
// (a loop's speed on this kind of CPU depends on where it lands: the same
// instructions of `range → map → filter → fold` ran at 2.3 or 3.4 G items/s in two
// builds that differed only in the core's alignment).
//
// # Orderings
//
// Flags are written `Relaxed` before the writer's `Wip::enter` (`AcqRel`), and read by
// the owner after its own `enter`/`leave` (`AcqRel`), which acquired that write: the
// `Wip` is the happens-before edge, exactly as for the demand (see `demand.rs`). A
// flag set from inside a pass (a cancel from `on_next`) is the owner's own write. The
// early-exit reads in `request`/`cancel` are hints: a stale read costs one more pass
// that finds the slot empty.

use std::collections::VecDeque;
use std::sync::{Arc, OnceLock, Weak};
use std::task::{Wake, Waker};

use super::owner::OwnerSlot;
use crate::demand::{self, AtomicDemand};
use crate::drain::Wip;
use crate::guard::catch;
use crate::loom::{fence, Aligned, AtomicBool, AtomicU8, AtomicUsize, Ordering};
use crate::runtime::backoff::Backoff;
use crate::runtime::{Lane, Recurring, Scheduler};
use crate::spec::Sealed;
use crate::{Error, RawSubscription, Subscriber, Subscription};

/// Flag: downstream cancelled.
const CANCELLED: u8 = 1;
/// Flag: downstream called `request(0)` (rule 3.9).
const BAD_REQUEST: u8 = 2;
/// Flag: the scheduler dropped one of the stage's tasks without running it.
const SHUTDOWN: u8 = 4;
/// Flag: the subscription ended; later requests and cancels are no-ops (3.6, 3.7).
const OVER: u8 = 8;
/// Flag: user code the stage runs outside a pass (its start, a timer's firing: a
/// user scheduler's clock, say) panicked; the error is in [`Core::failure`].
const FAILED: u8 = 16;
/// The flags that end the subscription at the next pass.
const STOPPING: u8 = CANCELLED | BAD_REQUEST | SHUTDOWN | FAILED;

/// Passes one scheduled task runs before it hands the loop to a new task (fairness
/// to the scheduler's other tasks).
const TASK_PASSES: u32 = 32;

/// How a pass ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pass {
    /// Nothing more to do until the next reason to run (a request, an item, a wake).
    Idle,
    /// A scheduled stage used its task's budget with work left: continue in a new
    /// task. (Inline stages never yield.)
    Yield,
    /// The body ended the stream ([`Cx::terminate`]): the subscription is over, and
    /// the core signals the kept terminal once the stage has released what it holds.
    Over,
}

/// Where a stage's passes run.
pub(crate) enum Drive<'a> {
    /// On whichever thread gains ownership of the loop.
    Inline,
    /// On tasks of `on`. With `linger`, a task waits a moment (the crate's one
    /// backoff) for the next reason to run before it leaves the loop.
    Scheduled {
        /// The scheduler.
        on: &'a dyn Scheduler,
        /// Wait briefly for more work before leaving.
        linger: bool,
    },
}

/// One stage: what it shares with producers and requesters (`Self`), what only the
/// loop's owner touches (`Owned`), and its pass body.
pub(crate) trait Stage: Send + Sync + Sized + 'static {
    /// The stage's name in errors and logs.
    const NAME: &'static str;
    /// What downstream receives.
    type Item: Send + 'static;
    /// State only the drain owner touches, kept with downstream under the core's lock.
    type Owned: Send + 'static;
    /// How the core pads its demand and slot: `()` (no padding) unless producers on
    /// other threads signal the core once per batch while its owner delivers
    /// ([`Block`](crate::loom::Block): each on a block of its own; see the file
    /// header's *Layout*).
    type Padding: Default + Send + Sync + 'static;
    /// True for a stage whose pass polls futures with [`Cx::waker`]. A pass run in
    /// place ([`CoreHandle::signal_in_place`]) makes a waker only for such a stage
    /// (it costs an increment and a decrement of the core's reference count per
    /// pass); any other stage's `Cx` has none there, so a stage that uses one without
    /// saying so panics, never hangs.
    const USES_WAKER: bool = false;

    /// Where passes run. The default is inline.
    fn drive(&self) -> Drive<'_> {
        Drive::Inline
    }

    /// One pass: signal downstream what demand and the stage's state allow. Runs only
    /// on the loop's owner, inside the core's panic guard.
    fn pass<S: Subscriber<Self::Item>>(
        &self,
        cx: &Cx<'_>,
        owned: &mut Self::Owned,
        downstream: &mut S,
    ) -> Pass;

    /// The subscription ended (any reason): release what the stage holds (including
    /// what producers may still hand it) and cancel upstream. Runs once, on the owner.
    fn stop(&self, owned: &mut Self::Owned);

    /// The core was built around this stage: `me` reaches it from timers and other
    /// helpers that must not keep it alive. The default ignores it.
    fn bind(&self, _me: Weak<dyn CoreHandle>) {}

    /// Downstream requested `n > 0`, already added to `demand` (any thread, before
    /// the pass it triggers).
    fn on_request(&self, _n: u64, _demand: &AtomicDemand) {}

    /// Downstream cancelled (the first time; any thread, before the pass that stops
    /// the stage). Stages that must stop upstream at once (boundaries) do it here.
    fn on_cancel(&self) {}

    /// Downstream called `request(0)` (on its thread). Return true when the stage
    /// handled it (`subscribe_on` forwards it to an upstream that answers it);
    /// otherwise the core fails downstream with the rule 3.9 error.
    fn on_bad_request(&self) -> bool {
        false
    }

    /// Asked while the loop's task lingers (`Drive::Scheduled { linger: true }`), and
    /// only while the subscription runs: true when a pass would find work although
    /// nothing signalled, such as items a producer published without a signal.
    /// `demand` is downstream's. A cheap hint: a wrong `true` costs one pass, but it
    /// must turn false once a pass has taken the work (else the task never leaves).
    /// The default is false.
    fn has_work(&self, _demand: &AtomicDemand) -> bool {
        false
    }

    /// What the lingering task polls for before it settles for
    /// [`has_work`](Self::has_work) (asked once, when the polls are over): a run
    /// of work worth a pass. A stage whose producers write items one by one into a
    /// ring the drain reads answers whether a run of them is written, so that the
    /// drain does not take each item as soon as it is written, reading the line
    /// the producer is still filling. The default is `has_work`.
    fn has_work_run(&self, demand: &AtomicDemand) -> bool {
        self.has_work(demand)
    }

    /// True for a stage whose producers publish work that [`has_work`](Self::has_work)
    /// sees and then call [`Core::notify`] instead of [`Core::signal`]: while a
    /// lingering task owns the loop it is marked *watching*, and a producer that sees
    /// the mark skips the signal (see the file header's *Watched stages*).
    const WATCHED: bool = false;

    /// For a [`WATCHED`](Self::WATCHED) stage: whether a lingering task that starts
    /// now watches (marks itself and looks for unsignalled work with
    /// [`has_work_run`](Self::has_work_run) and [`has_work`](Self::has_work));
    /// otherwise it waits for signals only, and `notify` signals. Looking costs a
    /// drain whose producer sends large batches (it reads lines the producer is
    /// writing), so a stage may watch only while batches are small. The default is
    /// true.
    fn watches(&self) -> bool {
        true
    }

    /// A lingering task started (`true`) or stopped (`false`) watching: a stage that
    /// also watches its upstream ([`Pull`](crate::spec::Pull)) passes
    /// the mark on. Called after the core's own mark is set, and before the fence
    /// when it is cleared.
    fn watched(&self, _on: bool) {}

    /// [`has_work`](Self::has_work) for the look of a task that stopped watching,
    /// after its fence: it must see every piece of work a producer published without
    /// a signal. The default is `has_work`.
    fn has_work_after_fence(&self, demand: &AtomicDemand) -> bool {
        self.has_work(demand)
    }

    /// One of the stage's timers fired (any thread); the core runs a pass after it.
    fn on_timer(&self) {}
}

/// What the core hands helpers (lanes, timers, wakers): a way to ask for a pass.
pub(crate) trait CoreHandle: Send + Sync + 'static {
    /// A reason to run another pass (items arrived in a lane, say).
    fn signal(&self);
    /// A reason to run another pass, from a thread of the stage's scheduler: when it
    /// is the scheduler's only thread, the pass runs here, now, instead of in a new
    /// task (see the module header). The caller holds no lock a pass could take.
    fn signal_in_place(&self);
    /// Downstream's outstanding demand now (requested and not yet delivered).
    fn outstanding(&self) -> u64;
    /// A timer armed for the stage fired.
    fn fire(&self);
    /// The scheduler dropped one of the stage's tasks without running it.
    fn lost(&self);
    /// User code the stage ran outside its pass (a user scheduler's clock, say)
    /// panicked with `error`: the next pass ends the stream with it.
    fn fail(&self, error: Error);
}

/// What a pass body gets from the core.
pub(crate) struct Cx<'a> {
    demand: &'a AtomicDemand,
    flags: &'a AtomicU8,
    /// The stage's name ([`Stage::NAME`]), for the event of a terminal error.
    stage: &'static str,
    /// The terminal [`terminate`](Self::terminate) kept for the core's `end`.
    end: std::cell::Cell<Option<Result<(), Error>>>,
    #[cfg(feature = "futures")]
    waker: Option<&'a Waker>,
}

impl<'a> Cx<'a> {
    /// The context of one pass; `waker` is the pass's task's (scheduled stages).
    #[inline]
    fn new(
        demand: &'a AtomicDemand,
        flags: &'a AtomicU8,
        stage: &'static str,
        waker: Option<&'a Waker>,
    ) -> Self {
        // Only the stream bridge (feature `futures`) polls a future with the waker.
        #[cfg(not(feature = "futures"))]
        let _ = waker;
        Cx {
            demand,
            flags,
            stage,
            end: std::cell::Cell::new(None),
            #[cfg(feature = "futures")]
            waker,
        }
    }

    /// Downstream's outstanding demand.
    #[inline]
    pub(crate) fn demand(&self) -> &'a AtomicDemand {
        self.demand
    }

    /// True once downstream cancelled, sent `request(0)`, or the scheduler dropped a
    /// task: end the pass (the core then stops the stage).
    #[inline]
    pub(crate) fn stopped(&self) -> bool {
        // Relaxed: see the file header (published through the `Wip`).
        self.flags.load(Ordering::Relaxed) & STOPPING != 0
    }

    /// End the stream (`Ok`: `on_complete`, `Err`: `on_error`) and return
    /// [`Pass::Over`]: the core signals `end` to `downstream` right after the stage's
    /// [`stop`](Stage::stop) released what it holds and cancelled upstream (see the
    /// file header). Unless the stage was stopped meanwhile (a cancel while the last
    /// batch was delivered, say): then nothing is signalled, because the subscriber
    /// did not take everything, and the pass ends [`Pass::Idle`] so the core stops
    /// the stage. An error is also a debug event (target `weir::stage`): the
    /// subscriber gets it anyway, so it is no warning.
    #[inline]
    pub(crate) fn terminate<T, S: Subscriber<T>>(
        &self,
        _downstream: &mut S,
        end: Result<(), Error>,
    ) -> Pass {
        if self.stopped() {
            return Pass::Idle;
        }
        if let Err(error) = &end {
            log_failed(self.stage, error);
        }
        self.end.set(Some(end));
        Pass::Over
    }

    /// A waker that schedules the next pass (scheduled stages only).
    ///
    /// # Panics
    ///
    /// On an inline stage, which has no task to wake, and in a pass run in place for a
    /// stage that does not declare [`Stage::USES_WAKER`].
    #[cfg(feature = "futures")]
    pub(crate) fn waker(&self) -> &'a Waker {
        self.waker.expect(
            "only scheduled stages have a waker (and in-place passes only with Stage::USES_WAKER)",
        )
    }

    /// Hand `items` to `downstream` as one batch (`on_next_batch`) and return the
    /// batch credit. Unless `downstream` stops batches itself
    /// ([`Subscriber::stops_batches_itself`]), the batch's `next` returns `None` once
    /// the stage has been cancelled, so a subscriber that cancels inside `on_next` gets
    /// nothing more ([`UntilCancelled`]); a subscriber that stops batches itself (the
    /// fused path of a synchronous chain) gets `items` untouched. The choice is a
    /// constant for a given subscriber type, so only one branch is compiled in.
    #[inline]
    pub(crate) fn hand_over<T, S, I>(&self, downstream: &mut S, items: I) -> u64
    where
        S: Subscriber<T>,
        I: Iterator<Item = T>,
    {
        if downstream.stops_batches_itself() {
            match items.size_hint() {
                // An exact batch to a chain that credits by count: no per-item count.
                (n, Some(upper)) if n == upper && downstream.credits_by_count(Sealed::NEW) => {
                    batch_of(downstream, items, n as u64)
                }
                _ => batch(downstream, items),
            }
        } else {
            batch(
                downstream,
                UntilCancelled {
                    items,
                    flags: self.flags,
                },
            )
        }
    }

    /// Deliver from `items` against the demand with [`demand::deliver`] (by value when
    /// it all fits the demand, else in runs, settled once each), checked as in
    /// [`hand_over`](Self::hand_over); stops once the stage stops. Returns how many went
    /// out and what is left (which had no demand), if anything.
    #[inline]
    pub(crate) fn deliver<T, S, I>(&self, downstream: &mut S, items: I) -> (u64, Option<I>)
    where
        S: Subscriber<T>,
        I: Iterator<Item = T>,
    {
        if downstream.stops_batches_itself() {
            return demand::deliver(self.demand, downstream, items, || self.stopped());
        }
        let items = UntilCancelled {
            items,
            flags: self.flags,
        };
        let (count, rest) = demand::deliver(self.demand, downstream, items, || self.stopped());
        (count, rest.map(|rest| rest.items))
    }

    /// [`deliver`](Self::deliver) of every item of `queue` (emptied), for a subscriber
    /// that stops batches itself through [`demand::deliver_queue`] (when they all fit
    /// the demand: one [`on_next_queue`](Subscriber::on_next_queue), one virtual call
    /// per batch through a type-erased subscriber instead of one per item); items
    /// without demand are dropped. Returns how many went out.
    #[inline]
    pub(crate) fn deliver_queue<T, S>(&self, downstream: &mut S, queue: &mut VecDeque<T>) -> u64
    where
        S: Subscriber<T>,
    {
        if downstream.stops_batches_itself() {
            return demand::deliver_queue(self.demand, downstream, queue, || self.stopped());
        }
        self.deliver(downstream, queue.drain(..)).0
    }
}

/// `downstream.on_next_batch(items)`, kept out of line: the batch's loop (the whole
/// fused chain below the stage) then gets a function, and so the registers, of its
/// own instead of sharing them with the stage's pass. Inlined, the loop of
/// `range → filter → fold` reloaded its constants every iteration (`benches/operators.rs`:
/// `filter` 0.75 × its `Iterator` twin inlined, 0.88–0.91 × out of line). One call per
/// batch.
#[inline(never)]
fn batch<T, S: Subscriber<T>, I: Iterator<Item = T>>(downstream: &mut S, items: I) -> u64 {
    downstream.on_next_batch(items)
}

/// [`batch`] of exactly `n` items, to a chain that credits by count
/// ([`Subscriber::credits_by_count`]); out of line for the same reason.
#[inline(never)]
fn batch_of<T, S: Subscriber<T>, I: Iterator<Item = T>>(
    downstream: &mut S,
    items: I,
    n: u64,
) -> u64 {
    downstream.on_next_batch_of(items, n, Sealed::NEW)
}

/// A batch that ends once its stage is cancelled (see [`Cx::hand_over`]): `next`
/// checks the cancelled flag, `fold` (which a consumer that cancels inside the batch
/// never uses) runs the inner iterator untouched.
pub(crate) struct UntilCancelled<'a, I> {
    items: I,
    /// The stage's flags.
    flags: &'a AtomicU8,
}

impl<I: Iterator> Iterator for UntilCancelled<'_, I> {
    type Item = I::Item;

    #[inline]
    fn next(&mut self) -> Option<I::Item> {
        // Relaxed: a cancel from inside `on_next` is this thread's own write.
        if self.flags.load(Ordering::Relaxed) & CANCELLED != 0 {
            return None;
        }
        self.items.next()
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, self.items.size_hint().1)
    }

    #[inline]
    fn fold<B, F: FnMut(B, I::Item) -> B>(self, init: B, f: F) -> B {
        self.items.fold(init, f)
    }
}

/// The owner-only state and downstream (see [`OwnerSlot`]).
type Owned<G, S> = OwnerSlot<(<G as Stage>::Owned, S)>;

/// A field of the core, padded as its stage says.
type Cell<G, T> = Aligned<<G as Stage>::Padding, T>;

/// The signal core: one subscription. See the file header.
pub(crate) struct Core<G: Stage, S> {
    demand: Cell<G, AtomicDemand>,
    wip: Cell<G, Wip>,
    flags: AtomicU8,
    /// The owner-only state and downstream; `None` before `attach` and once over.
    slot: Cell<G, Owned<G, S>>,
    stage: G,
    /// Ourselves, for tasks and wakers (`request` only has `&self`).
    me: Weak<Self>,
    /// Where a scheduled stage queues its task (the core itself, see
    /// [`Recurring`]): asked of the scheduler when the first task is queued.
    lane: OnceLock<Box<dyn Lane>>,
    /// The reasons the queued task owes the `Wip` (meaningful while one is queued).
    owed: AtomicUsize,
    /// A lingering task owns the loop and looks for work itself ([`Stage::WATCHED`]
    /// stages only; see the file header).
    watching: AtomicBool,
    /// The first panic of user code run outside a pass ([`FAILED`]), for downstream.
    failure: OnceLock<Error>,
}

impl<G: Stage, S> std::fmt::Debug for Core<G, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("demand", &self.demand.get())
            .field("flags", &self.flags.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl<G, S> Core<G, S>
where
    G: Stage,
    S: Subscriber<G::Item> + Send + 'static,
{
    /// A core around `stage`, not yet attached to a downstream.
    pub(crate) fn new(stage: G) -> Arc<Self> {
        let core = Arc::new_cyclic(|me| Core {
            demand: Aligned::new(AtomicDemand::new()),
            wip: Aligned::new(Wip::new()),
            flags: AtomicU8::new(0),
            slot: Aligned::new(OwnerSlot::new()),
            stage,
            me: me.clone(),
            lane: OnceLock::new(),
            owed: AtomicUsize::new(0),
            watching: AtomicBool::new(false),
            failure: OnceLock::new(),
        });
        let me: Weak<dyn CoreHandle> = core.me.clone();
        core.stage.bind(me);
        core
    }

    /// The shared part of the stage.
    #[inline]
    pub(crate) fn stage(&self) -> &G {
        &self.stage
    }

    /// Downstream's outstanding demand.
    #[inline]
    pub(crate) fn demand(&self) -> &AtomicDemand {
        &self.demand
    }

    /// True once the subscription ended.
    #[inline]
    pub(crate) fn is_over(&self) -> bool {
        // Relaxed: a hint (see the file header).
        self.flags.load(Ordering::Relaxed) & OVER != 0
    }

    /// True once downstream cancelled, sent `request(0)`, or the subscription ended.
    #[inline]
    pub(crate) fn is_stopping(&self) -> bool {
        // Relaxed: a hint (see the file header).
        self.flags.load(Ordering::Relaxed) & (STOPPING | OVER) != 0
    }

    /// Attach `downstream` (see [`attach_then`](Self::attach_then)).
    pub(crate) fn attach(self: &Arc<Self>, owned: G::Owned, downstream: S) {
        self.attach_then(owned, downstream, |_| {});
    }

    /// Attach `downstream`: call its `on_subscribe` under a panic guard while this
    /// call owns the loop (so the subscription is its first signal, rule 1.9, and its
    /// requests only count), then run `started` (still owning the loop: connect
    /// sources, start clocks), then drive the loop for what they caused. A subscriber
    /// that panics in `on_subscribe` is treated as cancelled (rule 2.13).
    pub(crate) fn attach_then(
        self: &Arc<Self>,
        owned: G::Owned,
        downstream: S,
        started: impl FnOnce(&Arc<Self>),
    ) {
        self.attach_as(Subscription::new(self.clone()), owned, downstream, started);
    }

    /// [`attach_then`](Self::attach_then) with the subscription to hand downstream
    /// (one made from this core, which may carry a [`Pull`](crate::spec::Pull)).
    pub(crate) fn attach_as(
        self: &Arc<Self>,
        subscription: Subscription,
        owned: G::Owned,
        mut downstream: S,
        started: impl FnOnce(&Arc<Self>),
    ) {
        let entered = self.wip.enter();
        debug_assert!(
            entered,
            "a core is attached once, before anyone else enters"
        );
        if !crate::guard::on_subscribe(&mut downstream, subscription) {
            // Relaxed: this thread owns the loop and reads it below.
            self.flags.fetch_or(CANCELLED, Ordering::Relaxed);
        }
        // SAFETY: this thread owns the loop (the `enter` above).
        unsafe { *self.slot.as_ptr() = Some((owned, downstream)) };
        if let Err(error) = catch(|| started(self)) {
            // The stage's start runs user code (a scheduler's clock, the outer
            // publisher's `subscribe`): its panic ends the stream at the pass below.
            self.failed(error);
        }
        // Relaxed: this thread owns the loop (a cancel from on_subscribe is its own
        // write, or was published by the canceller's `Wip::enter`).
        let ending = self.flags.load(Ordering::Relaxed) & (CANCELLED | FAILED) != 0;
        match self.stage.drive() {
            Drive::Scheduled { .. } if !ending => {
                // Hand what on_subscribe and `started` caused to a task (or handle a
                // cancel here).
                let missed = self.wip.leave(1);
                if missed > 0 {
                    self.own(missed);
                }
            }
            _ => self.run_loop(1, None),
        }
    }

    /// User code the stage ran outside a pass panicked with `error`: the next pass
    /// ends the stream with it (upstream cancelled, downstream told). The caller
    /// then signals, or owns the loop, which publishes the flag to its owner.
    #[cold]
    fn failed(&self, error: Error) {
        let _first_kept = self.failure.set(error.in_stage(G::NAME));
        // Relaxed: published to the owner by the caller's `Wip::enter` (or read by
        // this thread, which owns the loop).
        self.flags.fetch_or(FAILED, Ordering::Relaxed);
    }

    /// A reason to run a pass: enter the loop, and drive it if this call owns it.
    #[inline]
    pub(crate) fn signal(&self) {
        if self.wip.enter() {
            self.own(1);
        }
    }

    /// A producer of a [`Stage::WATCHED`] stage published work that
    /// [`Stage::has_work`] sees: signal, unless a task watches (see the file header).
    #[inline]
    pub(crate) fn notify(&self) {
        debug_assert!(G::WATCHED, "notify is for watched stages");
        // SeqCst: pairs with the fence in `unwatch`. Either this load sees the task
        // still watching, and then the task's look after its fence sees the work
        // published before this one; or it sees the mark cleared (or never set) and
        // signals.
        fence(Ordering::SeqCst);
        // Relaxed: ordered by the fences.
        if !self.watching.load(Ordering::Relaxed) {
            self.signal();
        }
    }

    /// A watching task released the loop: stop watching, then look once more for
    /// work published by a producer that saw the mark (and so did not signal).
    /// Returns true when there is some and this thread owns the loop again (watching
    /// again); false when there is none, or when another thread owns the loop now
    /// (the reason this call registered makes that owner run another pass, which
    /// finds the work).
    fn unwatch(&self) -> bool {
        self.clear_mark();
        if self.is_stopping() || !self.stage.has_work_after_fence(&self.demand) || !self.wip.enter()
        {
            return false;
        }
        // Relaxed: a producer that misses it signals (one more pass, nothing lost).
        self.watching.store(true, Ordering::Relaxed);
        self.stage.watched(true);
        true
    }

    /// Clear the watching mark, then fence: whatever a producer published without a
    /// signal (it saw the mark) is visible to this thread's reads after it.
    fn clear_mark(&self) {
        // Relaxed: ordered by the fence.
        self.watching.store(false, Ordering::Relaxed);
        self.stage.watched(false);
        // SeqCst: pairs with the fence in `notify` (see there), and with a pulled
        // upstream's senders' read of its mark after their claim.
        fence(Ordering::SeqCst);
    }

    /// `signal`, running the loop on this thread when it is the only thread of the
    /// stage's scheduler (see the module header).
    fn signal_in_place(&self) {
        if !self.wip.enter() {
            return;
        }
        if let Drive::Scheduled { on, .. } = self.stage.drive() {
            if on.current_thread_is_sole_worker() {
                if !G::USES_WAKER {
                    // `&self` keeps the core alive through the run.
                    self.run_loop(1, Some((false, None)));
                    return;
                }
                if let Some(core) = self.me.upgrade() {
                    let waker = Waker::from(core);
                    self.run_loop(1, Some((false, Some(&waker))));
                    return;
                }
            }
        }
        self.own(1);
    }

    /// This call owns the loop with `missed` reasons to account for.
    fn own(&self, missed: usize) {
        match self.stage.drive() {
            Drive::Inline => self.run_loop(missed, None),
            Drive::Scheduled { on, .. } => {
                // Relaxed: our own `Wip::enter` ordered us after the write.
                if self.flags.load(Ordering::Relaxed) & CANCELLED != 0 {
                    // A cancel only releases: do it here, now.
                    self.run_loop(missed, None);
                } else {
                    self.schedule(on, missed);
                }
            }
        }
    }

    /// Give our ownership (with `missed` reasons) to a new task on `on`: queue
    /// ourselves on our lane (see [`Recurring`]).
    fn schedule(&self, on: &dyn Scheduler, missed: usize) {
        let Some(core) = self.me.upgrade() else {
            // The last handle is going away: nobody is left to serve.
            let _ = self.wip.leave(missed);
            return;
        };
        // Relaxed: the lane's hand-off orders this write before the run that reads it
        // (the lane contract), as a boxed task's captures would be.
        self.owed.store(missed, Ordering::Relaxed);
        // A scheduler's `lane` and a lane's `queue` are the user's code when the
        // scheduler is: one that panics has not queued the task (the contract says
        // a lane runs a queued task or abandons it), so it is abandoned here, as a
        // task the scheduler drops unrun: the stream ends with the scheduler's
        // error instead of its loop staying owned for ever.
        let queued = catch(|| {
            let lane = self.lane.get_or_init(|| on.lane());
            lane.queue(on, core);
        });
        if queued.is_err() {
            tracing::error!(
                stage = G::NAME,
                "a scheduler panicked taking a task; the stream ends"
            );
            // Relaxed: this thread owns the loop (the task was never handed over).
            self.flags.fetch_or(SHUTDOWN, Ordering::Relaxed);
            self.run_loop(missed, None);
        }
    }

    /// The owner's loop: passes until no reason is left. `task` is `Some((linger,
    /// waker))` on a scheduled task (the waker `None` on a pass run in place for a
    /// stage that does not use one: see [`Stage::USES_WAKER`]).
    fn run_loop(&self, mut missed: usize, task: Option<(bool, Option<&Waker>)>) {
        let mut passes = 0u32;
        let watch = G::WATCHED && matches!(task, Some((true, _))) && self.stage.watches();
        if watch {
            // Relaxed: a producer that misses it signals (one more pass, nothing
            // lost); one that sees it is covered by `unwatch`.
            self.watching.store(true, Ordering::Relaxed);
            self.stage.watched(true);
        } else if G::WATCHED && self.watching.load(Ordering::Relaxed) {
            // The mark of a task that handed the loop on (budget, yield) to this one,
            // which does not watch: clear it before the first pass, which then sees
            // whatever a producer published without a signal (see `unwatch`).
            self.clear_mark();
        }
        loop {
            let pass = self.pass(task.and_then(|(_, waker)| waker));
            if let (Pass::Yield, Some(_)) = (pass, task) {
                self.reschedule(missed);
                return;
            }
            let mut unsignalled = false;
            let mut crowded = false;
            if let (Pass::Idle, Some((true, _))) = (pass, task) {
                // Keep the loop a moment for the next reason (a batch, a request): it
                // saves a task hand-off per batch on a busy boundary. Work can also
                // arrive without a signal (a producer signals once per batch however
                // many runs it publishes), so the stage is asked too: then the next
                // pass runs on the reasons already held. Not while other tasks wait
                // for this thread: they may be the very ones we would wait for.
                // The polls look for a run of work; the last look, for any.
                let looks = watch || !G::WATCHED;
                Backoff::wait_settling(|settle| {
                    if self.wip.pending() != missed {
                        return true;
                    }
                    unsignalled = looks
                        && !self.is_stopping()
                        && if settle {
                            self.stage.has_work(&self.demand)
                        } else {
                            self.stage.has_work_run(&self.demand)
                        };
                    if !unsignalled {
                        crowded = self.crowded();
                    }
                    unsignalled || crowded
                });
            }
            if !unsignalled {
                missed = self.wip.leave(missed);
                if missed == 0 {
                    if !(watch && self.unwatch()) {
                        return;
                    }
                    missed = 1;
                }
            }
            passes += 1;
            if task.is_some() && (crowded || passes >= TASK_PASSES) {
                self.reschedule(missed);
                return;
            }
        }
    }

    /// True when other tasks wait for our scheduler's threads (a hint).
    fn crowded(&self) -> bool {
        match self.stage.drive() {
            // A hint, the user's code when the scheduler is: one that panics
            // counts as crowded (the loop is handed on, and the next task's
            // scheduling decides).
            Drive::Scheduled { on, .. } => catch(|| on.has_waiting_tasks()).unwrap_or(true),
            Drive::Inline => false,
        }
    }

    /// Continue the loop in a new task (keeping ownership and the owed reasons).
    fn reschedule(&self, missed: usize) {
        match self.stage.drive() {
            Drive::Scheduled { on, .. } => self.schedule(on, missed),
            Drive::Inline => self.run_loop(missed, None),
        }
    }

    /// Try to own the loop and run `first` as the body of its first pass (a stage's
    /// producer delivering its own batch), then the usual passes for whatever arrived
    /// meanwhile. Returns false, without running `first`, when another thread owns the
    /// loop: this call has then registered a reason to run, so the owner runs another
    /// pass after its current one. `first` does not run either when the stage is
    /// stopping (it ends instead).
    pub(crate) fn try_pass(
        &self,
        first: impl FnOnce(&Cx<'_>, &mut G::Owned, &mut S) -> Pass,
    ) -> bool {
        if !self.wip.enter() {
            return false;
        }
        self.first_pass(first);
        true
    }

    /// [`try_pass`](Self::try_pass) only when nobody owns the loop. When another
    /// thread owns it, waits a moment (the crate's one backoff) for it to let go, and
    /// returns false without registering a reason to run if it does not (the caller
    /// then gets its work done another way, and signals if it must). For a producer
    /// that would hand its item over itself: the loop is typically busy only briefly
    /// (a requester's pass on another thread), and the alternative, queueing the item
    /// and signalling that owner, keeps it serving one item per pass for as long as
    /// the producer keeps sending one at a time (see the channel's direct hand-off).
    pub(crate) fn try_pass_if_idle(
        &self,
        first: impl FnOnce(&Cx<'_>, &mut G::Owned, &mut S) -> Pass,
    ) -> bool {
        let owned = self.wip.try_enter()
            || (Backoff::wait(|| self.wip.pending() == 0) && self.wip.try_enter());
        if !owned {
            return false;
        }
        self.first_pass(first);
        true
    }

    /// Run `first` as the owner's first pass, then drive the loop for what arrived
    /// meanwhile.
    #[inline(always)]
    fn first_pass(&self, first: impl FnOnce(&Cx<'_>, &mut G::Owned, &mut S) -> Pass) {
        let _ = self.pass_with(None, first);
        let missed = self.wip.leave(1);
        if missed > 0 {
            self.own(missed);
        }
    }

    /// One pass (owner only) with the stage's body. Kept out of line: the pass body
    /// is the hot loop of a fused pipeline, and compiled on its own (not inlined into
    /// the loop's driver) its state stays in registers.
    #[inline(never)]
    fn pass(&self, waker: Option<&Waker>) -> Pass {
        self.pass_with(waker, |cx, owned, downstream| {
            self.stage.pass(cx, owned, downstream)
        })
    }

    /// One pass (owner only) with `body`. Ends the subscription when a flag or the
    /// body says so. Inlined into its two callers, so the stage's pass body is
    /// compiled into [`pass`](Self::pass) as if written there.
    #[inline(always)]
    fn pass_with(
        &self,
        waker: Option<&Waker>,
        body: impl FnOnce(&Cx<'_>, &mut G::Owned, &mut S) -> Pass,
    ) -> Pass {
        // SAFETY: only the loop's owner runs a pass (both callers own it), and the
        // body cannot run another pass of this core (the `Wip` refuses it).
        let slot = unsafe { &mut *self.slot.as_ptr() };
        let Some((owned, downstream)) = slot.as_mut() else {
            return Pass::Idle;
        };
        // Relaxed: see the file header.
        let flags = self.flags.load(Ordering::Relaxed);
        let ending = if flags & STOPPING != 0 {
            Ending::Flags(flags)
        } else {
            let cx = Cx::new(&self.demand, &self.flags, G::NAME, waker);
            match catch(|| body(&cx, owned, downstream)) {
                Ok(Pass::Over) => Ending::Terminated(
                    cx.end
                        .take()
                        .expect("a pass ends Over only through Cx::terminate"),
                ),
                Ok(pass) => return pass,
                Err(_) => Ending::Panicked,
            }
        };
        let (mut owned, downstream) = slot.take().expect("checked above");
        // Relaxed: read as a hint by `request`/`cancel`; the slot is empty anyway.
        self.flags.fetch_or(OVER, Ordering::Relaxed);
        self.end(ending, &mut owned, downstream);
        if catch(move || drop(owned)).is_err() {
            tracing::error!("a stage's state panicked while being dropped; contained");
        }
        Pass::Over
    }

    /// Steps 2 to 4 of ending a subscription (see the file header).
    fn end(&self, ending: Ending, owned: &mut G::Owned, mut downstream: S) {
        match ending {
            Ending::Panicked => {
                tracing::error!("subscriber panicked (rule 2.13); treated as cancelled");
            }
            // Before the stage releases what it holds: its own events follow.
            Ending::Flags(flags) if flags & CANCELLED != 0 => log_cancelled(G::NAME),
            _ => {}
        }
        if catch(|| self.stage.stop(owned)).is_err() {
            tracing::error!("releasing a stage's items panicked (an item's Drop); contained");
        }
        // The body's own end was logged by `Cx::terminate` already.
        let (signal, log) = match ending {
            Ending::Flags(flags) if flags & CANCELLED != 0 => (None, false),
            Ending::Flags(flags) if flags & BAD_REQUEST != 0 => {
                (demand::validate(0).err().map(Err), true)
            }
            Ending::Flags(flags) if flags & FAILED != 0 => {
                let error = self.failure.get().cloned();
                (error.map(Err), true)
            }
            Ending::Flags(_) => (Some(Err(Error::scheduler_shutdown(G::NAME))), true),
            Ending::Terminated(end) => (Some(end), false),
            Ending::Panicked => (None, false),
        };
        match signal {
            // The guard delivers `on_complete`; the next arm is the call that returned.
            Some(Ok(())) if catch(|| downstream.on_complete()).is_err() => {
                tracing::error!("subscriber panicked in on_complete (rule 2.13)");
            }
            Some(Ok(())) | None => {}
            Some(Err(error)) => {
                if log {
                    log_failed(G::NAME, &error);
                }
                if catch(|| downstream.on_error(error)).is_err() {
                    tracing::error!("subscriber panicked in on_error (rule 2.13)");
                }
            }
        }
        if catch(move || drop(downstream)).is_err() {
            tracing::error!("a subscriber panicked while being dropped; contained");
        }
    }
}

/// The event of a stage that ends its subscriber's stream with `error` (debug,
/// target `weir::stage`). Once per subscription, out of the pass's way.
#[cold]
#[inline(never)]
fn log_failed(stage: &'static str, error: &Error) {
    tracing::debug!(
        target: "weir::stage",
        stage,
        kind = ?error.kind(),
        %error,
        "stage ended its stream with an error"
    );
}

/// The event of a stage whose subscriber cancelled (debug, target `weir::stage`).
/// Once per subscription; one call site for every stage type.
#[cold]
#[inline(never)]
fn log_cancelled(stage: &'static str) {
    tracing::debug!(
        target: "weir::stage",
        stage,
        "stage cancelled by its subscriber"
    );
}

/// Why a subscription ended.
enum Ending {
    /// A stopping flag.
    Flags(u8),
    /// The pass body ended the stream with this terminal ([`Cx::terminate`]).
    Terminated(Result<(), Error>),
    /// Downstream panicked inside the pass.
    Panicked,
}

/// A scheduled stage's task: the core itself, queued on its lane while it owns the
/// loop (with `owed` reasons). Abandoned (its scheduler shut down), it ends the
/// subscription with a `SchedulerShutdown` error on the abandoning thread, so the
/// pipeline ends instead of hanging and the `Wip` is released.
impl<G, S> Recurring for Core<G, S>
where
    G: Stage,
    S: Subscriber<G::Item> + Send + 'static,
{
    fn run(self: Arc<Self>) {
        // Relaxed: see `schedule`.
        let missed = self.owed.load(Ordering::Relaxed);
        let linger = matches!(self.stage.drive(), Drive::Scheduled { linger: true, .. });
        let waker = Waker::from(self.clone());
        self.run_loop(missed, Some((linger, Some(&waker))));
    }

    fn abandon(self: Arc<Self>) {
        // Relaxed: this thread owns the loop (the task carried the ownership).
        self.flags.fetch_or(SHUTDOWN, Ordering::Relaxed);
        // Relaxed: see `schedule`.
        let missed = self.owed.load(Ordering::Relaxed);
        self.run_loop(missed, None);
    }

    fn lost(self: Arc<Self>) {
        // As a timer task dropped unrun: the next pass ends the stream.
        CoreHandle::lost(&*self);
    }
}

impl<G, S> CoreHandle for Core<G, S>
where
    G: Stage,
    S: Subscriber<G::Item> + Send + 'static,
{
    fn signal(&self) {
        Core::signal(self);
    }

    fn signal_in_place(&self) {
        Core::signal_in_place(self);
    }

    fn outstanding(&self) -> u64 {
        self.demand.get()
    }

    fn fire(&self) {
        if self.is_over() {
            return;
        }
        if let Err(error) = catch(|| self.stage.on_timer()) {
            // A user scheduler's clock, say: without this the panic went to the
            // scheduler's thread and the stage lost its timer for good.
            self.failed(error);
        }
        self.signal();
    }

    fn lost(&self) {
        if self.is_over() {
            return;
        }
        // Relaxed: published to the owner by the `Wip::enter` in `signal`.
        self.flags.fetch_or(SHUTDOWN, Ordering::Relaxed);
        self.signal();
    }

    fn fail(&self, error: Error) {
        if self.is_over() {
            return;
        }
        self.failed(error);
        self.signal();
    }
}

impl<G, S> Wake for Core<G, S>
where
    G: Stage,
    S: Subscriber<G::Item> + Send + 'static,
{
    fn wake(self: Arc<Self>) {
        self.signal();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.signal();
    }
}

impl<G, S> RawSubscription for Core<G, S>
where
    G: Stage,
    S: Subscriber<G::Item> + Send + 'static,
{
    fn request(&self, n: u64) {
        // Relaxed: a hint; a stale read costs one pass that finds the slot empty.
        if self.flags.load(Ordering::Relaxed) & (CANCELLED | OVER) != 0 {
            return;
        }
        if n == 0 {
            if self.stage.on_bad_request() {
                return;
            }
            // Relaxed: published to the owner by the `Wip::enter` in `signal`.
            self.flags.fetch_or(BAD_REQUEST, Ordering::Relaxed);
        } else {
            self.demand.add(n);
            self.stage.on_request(n, &self.demand);
        }
        self.signal();
    }

    fn cancel(&self) {
        // Relaxed: published to the owner by the `Wip::enter` in `signal`.
        let before = self.flags.fetch_or(CANCELLED, Ordering::Relaxed);
        if before & (CANCELLED | OVER) != 0 {
            return;
        }
        self.stage.on_cancel();
        self.signal();
    }
}

/// A stage's upstream subscription as the stage's shared part keeps it: cancelled at
/// most once, and not at all once upstream terminated on its own (its cancel would be
/// a no-op, rules 3.6 and 3.7, but a stage should not make it).
pub(crate) struct SharedUpstream {
    subscription: Subscription,
    /// Cancelled, or upstream terminated.
    done: std::sync::atomic::AtomicBool,
}

impl SharedUpstream {
    /// Keep `subscription`.
    pub(crate) fn new(subscription: Subscription) -> Self {
        SharedUpstream {
            subscription,
            done: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Request `n` more (unless done).
    #[inline]
    pub(crate) fn request(&self, n: u64) {
        // Relaxed: a hint; a request racing a cancel is a no-op upstream anyway.
        if !self.done.load(std::sync::atomic::Ordering::Relaxed) {
            self.subscription.request(n);
        }
    }

    /// Upstream's [`Pull`](crate::spec::Pull), if it has one.
    pub(crate) fn pull(&self) -> Option<&Arc<dyn crate::spec::Pull>> {
        self.subscription.pull()
    }

    /// Cancel, the first time (and not after upstream terminated).
    pub(crate) fn cancel(&self) {
        // Relaxed: the swap makes exactly one caller cancel; nothing else is published.
        if !self.done.swap(true, std::sync::atomic::Ordering::Relaxed) {
            self.subscription.cancel();
        }
    }

    /// Cancelled, or upstream terminated: a subscriber its upstream drops now was let
    /// go of as a cancel asks (rule 3.13), not abandoned.
    pub(crate) fn is_done(&self) -> bool {
        // Relaxed: the cancel's store is sequenced before `subscription.cancel()`,
        // which upstream observes (with its own synchronisation) before it drops the
        // subscriber that asks here.
        self.done.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Upstream terminated on its own: later cancels are not sent.
    pub(crate) fn finished(&self) {
        // Relaxed: see `cancel`.
        self.done.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}
