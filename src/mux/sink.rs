//! The sending end of a channel, and the plumbing a channel's two ends and the
//! worker share.
//!
//! [`ChannelSink`] is the subscriber a user's publisher feeds. It asks its upstream
//! for the staging window once, writes what arrives into a single-producer ring (the
//! worker is the one consumer), and counts it as unreported backlog; while the
//! channel is parked (no backlog in the ledger) it reports under the ledger's lock
//! instead, waking the worker when that made the channel ready (see the ledger's
//! "Backlog reported late"). The worker asks upstream for more as
//! it takes items (the 75% rule), so upstream never has more than the window
//! outstanding and the ring cannot overflow unless upstream breaks rule 1.1 (then the
//! channel fails with an error naming the rule, after the items it staged).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use crate::demand::Replenish;
use crate::drain::Upstream;
use crate::loom::{Mutex, Padded};
use crate::queue::spsc::{self, Consumer, Producer};
use crate::stage::{window, CoreHandle};
use crate::{Error, Subscriber, Subscription};

use super::source::ChannelSource;
use super::{ChannelId, Shared};

/// What one channel's sink, source, worker and demultiplexer share.
///
/// The fields sit in two blocks of their own ([`Padded`]), by the thread that works
/// on them for every frame: the sending side's (the sink and the worker) and the
/// receiving side's (the demultiplexer and the channel's pass). With the fields
/// mixed, each frame moved the same cache lines back and forth between the two
/// threads (measured with 256 channels: the worker's hottest instructions were its
/// first touches of a channel's plumbing).
pub(crate) struct Plumbing<T> {
    pub(crate) id: ChannelId,
    /// The sending side's fields.
    send: Padded<SendSide<T>>,
    /// The receiving side's fields.
    receive: Padded<ReceiveSide<T>>,
}

/// What the sink and the worker touch for every batch.
struct SendSide<T> {
    /// The staging ring's reading end (the worker).
    staging: Mutex<Consumer<T>>,
    /// The sink's upstream and its credit.
    sender: Mutex<SendUpstream>,
    /// Items the worker took since its last report to `sender`'s replenish: the
    /// worker adds a frame's items here without the lock, and takes the lock only
    /// once they reach `ask_at`. Only the worker reads or writes it, and whatever
    /// hands the worker's pass from one thread to the next orders its accesses.
    taken: AtomicU64,
    /// The low-water mark of `sender`'s replenish (the 75% rule's limit): below it
    /// a report could never ask for more.
    ask_at: u64,
    /// Items staged and not yet counted as the ledger's backlog, and the [`PARKED`]
    /// mark: set while the ledger's backlog for the channel is zero (or the channel
    /// is closed), when the sink must report under the ledger's lock. See the
    /// ledger's module docs, "Backlog reported late".
    unreported: crate::loom::AtomicU64,
}

/// What the demultiplexer and the receiving pass touch for every batch.
struct ReceiveSide<T> {
    /// The receive window's writing end (the demultiplexer).
    window: Mutex<WindowWriter<T>>,
    /// How the sending upstream ended, and after how many items: written once by
    /// the sink, taken by the receiving pass that delivers the last of them.
    end: Mutex<Option<(u64, Result<(), Error>)>>,
    /// The count of `end`, or [`NO_END`]: read by every receiving pass that empties
    /// the window, without `end`'s lock (a lock per frame with many channels).
    end_after: crate::loom::AtomicU64,
    /// The receiving core, for wake-ups. Held strongly (what feeds a subscription
    /// keeps it alive, as for every stage) until the subscription ends.
    source: Mutex<Option<Arc<dyn CoreHandle>>>,
    /// The sending upstream broke the contract (its `request` panicked): the
    /// receiving side fails with this once its window is empty. Set once.
    failed: OnceLock<Error>,
    /// The same core, held weakly and set once: what the demultiplexer's in-place
    /// runs use, without `source`'s lock (a lock per frame with many channels). After
    /// the subscription ended it may still reach the core, whose passes then do
    /// nothing.
    source_ref: OnceLock<Weak<dyn CoreHandle>>,
    /// The demultiplexer owes the receiving side a wake-up at the end of its batch.
    /// Only the demultiplexer reads or writes it, and whatever hands the
    /// demultiplexer from one thread to the next orders its accesses.
    wake_owed: AtomicBool,
    /// Set while the demultiplexer runs the receiving pass in place: the pass leaves
    /// the credit of what it delivered in `unsettled`, and the demultiplexer settles
    /// the whole batch's channels under one lock (see [`Demux`](super::Demux)). Only
    /// the receiving scheduler's one thread sets it, around passes it runs itself;
    /// every pass of the channel runs on that thread, so Relaxed suffices.
    settling: AtomicBool,
    /// Items delivered whose credit the ledger has not been told of yet (see
    /// `settling`). Taken with a swap, by the demultiplexer or by the stage's stop,
    /// whichever comes first.
    unsettled: AtomicU64,
}

/// The name the errors of a channel's sending side carry.
const STAGE: &str = "mux channel";

/// The mark of [`Plumbing::unreported`]: the sink reports its next items under the
/// ledger's lock.
const PARKED: u64 = 1 << 63;

/// [`ReceiveSide::end_after`] before the sending upstream ended (a channel never
/// stages `u64::MAX` items).
const NO_END: u64 = u64::MAX;

/// The receive window's writing end.
struct WindowWriter<T> {
    items: Producer<T>,
    /// The receiving side stopped: frames that arrive now are dropped, not queued.
    closed: bool,
}

/// The sending side's upstream.
struct SendUpstream {
    upstream: Option<Subscription>,
    /// The receiving side cancelled: cancel upstream (now, or when it subscribes).
    cancelled: bool,
    /// Upstream terminated: never cancel it.
    finished: bool,
    replenish: Replenish,
}

impl<T: Send + 'static> Plumbing<T> {
    /// A channel's plumbing with a receive window of `window` items, and its two ends.
    pub(crate) fn open(
        id: ChannelId,
        shared: &Arc<Shared<T>>,
        window: usize,
    ) -> (Arc<Self>, ChannelSink<T>, ChannelSource<T>) {
        let staging = shared.staging;
        let (stage_in, stage_out) = spsc::ring(staging);
        let replenish = Replenish::new(staging as u64);
        let ask_at = replenish.limit();
        // A window of at least one slot: the ring needs one; credit bounds its use.
        let (window_in, window_out) = spsc::ring(window.max(1));
        let plumbing = Arc::new(Plumbing {
            id,
            send: Padded::new(SendSide {
                staging: Mutex::new(stage_out),
                sender: Mutex::new(SendUpstream {
                    upstream: None,
                    cancelled: false,
                    finished: false,
                    replenish,
                }),
                taken: AtomicU64::new(0),
                ask_at,
                // A new channel's backlog is zero.
                unreported: crate::loom::AtomicU64::new(PARKED),
            }),
            receive: Padded::new(ReceiveSide {
                window: Mutex::new(WindowWriter {
                    items: window_in,
                    closed: false,
                }),
                end: Mutex::new(None),
                end_after: crate::loom::AtomicU64::new(NO_END),
                source: Mutex::new(None),
                failed: OnceLock::new(),
                source_ref: OnceLock::new(),
                wake_owed: AtomicBool::new(false),
                settling: AtomicBool::new(false),
                unsettled: AtomicU64::new(0),
            }),
        });
        let sink = ChannelSink {
            shared: shared.clone(),
            plumbing: plumbing.clone(),
            staging: stage_in,
            staged: 0,
            upstream: Upstream::Idle,
        };
        let source = ChannelSource::new(shared.clone(), plumbing.clone(), window_out);
        (plumbing, sink, source)
    }
}

impl<T> Plumbing<T> {
    fn sender(&self) -> crate::loom::MutexGuardOf<'_, SendUpstream> {
        // Only upstream's `request`/`cancel` run while it is not held; never poisoned.
        self.send.sender.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The worker's turn: move up to `n` staged items into `items`.
    pub(crate) fn pop_staged(&self, n: usize, items: &mut Vec<T>) {
        let mut staging = self.send.staging.lock().unwrap_or_else(|p| p.into_inner());
        // Refresh the cached tail: the sink published these before it counted them
        // as backlog.
        let _staged = staging.available();
        staging.pop_into(n, items);
    }

    /// The worker took `n` staged items: ask upstream for more at the 75% mark.
    ///
    /// Most frames stay below the mark: their count is added to `taken` without the
    /// sender's lock (one lock per frame was a measurable part of a turn with many
    /// channels), and the lock is taken when `taken` reaches it.
    pub(crate) fn took(&self, n: u64) {
        // Relaxed, and a load and a store rather than a read-modify-write: only the
        // worker touches `taken` (see the field).
        let taken = self.send.taken.load(Ordering::Relaxed) + n;
        if taken < self.send.ask_at {
            self.send.taken.store(taken, Ordering::Relaxed);
            return;
        }
        self.send.taken.store(0, Ordering::Relaxed);
        let ask = {
            let mut sender = self.sender();
            match sender.replenish.on_consumed(taken) {
                Some(more) if !sender.cancelled && !sender.finished => {
                    sender.upstream.clone().map(|up| (up, more))
                }
                _ => None,
            }
        };
        if let Some((upstream, more)) = ask {
            self.request_or_fail(&upstream, more);
        }
    }

    /// Ask the sending upstream for `n` more. One whose `request` panics (rule 3.16
    /// broken) ends only this channel: its receiving side fails with a `Panicked`
    /// error naming the channel once its window is empty, and upstream is cancelled.
    /// The caller (the worker's pass, or the sink's `on_subscribe`) goes on.
    fn request_or_fail(&self, upstream: &Subscription, n: u64) {
        if let Err(error) = crate::guard::catch_in(STAGE, || upstream.request(n)) {
            let _ = self.receive.failed.set(error);
            self.cancel_upstream();
            self.wake_source();
        }
    }

    /// Why the channel failed on the sending side, if it did (see `request_or_fail`).
    pub(crate) fn failure(&self) -> Option<Error> {
        self.receive.failed.get().cloned()
    }

    /// The sink staged `n` more items: true when the channel was parked, and the
    /// sink must report them (and whatever else is unreported) under the ledger's
    /// lock with [`take_report`](Self::take_report).
    fn stage(&self, n: u64) -> bool {
        // Release: publishes the items written to the staging ring before this to the
        // Acquire of the worker's `fold` and of a cancel's `park_closed`. Seeing the
        // mark needs no Acquire: the sink then takes the ledger's lock, which orders
        // it after the worker's `park`.
        self.send.unreported.fetch_add(n, Ordering::Release) & PARKED != 0
    }

    /// Under the ledger's lock, for a sink that found its channel parked: every
    /// unreported item, and the mark cleared (the caller adds them to the ledger's
    /// backlog, or parks the channel again if it is closed).
    fn take_report(&self) -> u64 {
        // Relaxed: the sink's own `stage` is before this on its thread, and the
        // ledger's lock orders this against the worker's `fold` and `park`.
        self.send.unreported.swap(0, Ordering::Relaxed) & !PARKED
    }

    /// Under the ledger's lock, on the worker's turn for this open channel: the items
    /// staged since the last fold (not parked: a parked channel is never ready).
    pub(crate) fn fold(&self) -> u64 {
        // Acquire: pairs with the sink's Release in `stage`, so the folded items are
        // in the staging ring when the worker pops them.
        let taken = self.send.unreported.swap(0, Ordering::Acquire);
        debug_assert_eq!(taken & PARKED, 0, "a parked channel had a turn");
        taken & !PARKED
    }

    /// Under the ledger's lock, after a turn left the channel's backlog at zero: park
    /// it (0), or return the items staged meanwhile (they are its backlog now).
    pub(crate) fn park(&self) -> u64 {
        // Relaxed: a sink that sees the mark takes the ledger's lock, which this
        // holds; the failure path reads the count again with `fold`'s Acquire.
        match self
            .send
            .unreported
            .compare_exchange(0, PARKED, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => 0,
            Err(_) => self.fold(),
        }
    }

    /// Under the ledger's lock, once the channel is cancelled: every later batch of the
    /// sink goes to the lock, finds the channel closed and drops its items.
    pub(crate) fn park_closed(&self) {
        // Acquire: pairs with the sink's Release in `stage`, so the clean-up's
        // `drop_staged` after this sees every item of a batch staged before the mark.
        self.send.unreported.fetch_or(PARKED, Ordering::Acquire);
    }

    /// Items staged and not yet in the ledger's backlog (for statistics; the count
    /// may move at once).
    pub(crate) fn unreported(&self) -> u64 {
        self.send.unreported.load(Ordering::Relaxed) & !PARKED
    }

    /// The receiving side is gone: cancel the sending upstream (once).
    pub(crate) fn cancel_upstream(&self) {
        let upstream = {
            let mut sender = self.sender();
            if sender.cancelled {
                return;
            }
            sender.cancelled = true;
            if sender.finished {
                None
            } else {
                sender.upstream.take()
            }
        };
        if let Some(upstream) = upstream {
            crate::guard::cancel_contained(STAGE, &upstream);
        }
    }

    /// The sending upstream's end, once it ended: after how many staged items.
    pub(crate) fn end(&self) -> Option<u64> {
        // Acquire: pairs with the Release in `set_end`, so a pass that sees the count
        // finds the end in `end` when it takes it.
        let after = self.receive.end_after.load(Ordering::Acquire);
        (after != NO_END).then_some(after)
    }

    /// Take the sending upstream's end (the receiving side signals it).
    pub(crate) fn take_end(&self) -> Result<(), Error> {
        self.receive
            .end
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .map_or(Ok(()), |(_, end)| end)
    }

    fn set_end(&self, after: u64, end: Result<(), Error>) {
        let mut slot = self.receive.end.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some((after, end));
            // Release: pairs with the Acquire in `end` (see there).
            self.receive.end_after.store(after, Ordering::Release);
        }
    }

    /// Move a frame's items into the receive window, leaving `items` empty (its
    /// buffer is kept, for the worker to fill again). `Err` leaves them in `items`
    /// when the receiving side stopped (or, never expected, when they do not fit).
    pub(crate) fn receive(&self, items: &mut Vec<T>) -> Result<(), ()> {
        let mut inlet = self
            .receive
            .window
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if inlet.closed {
            return Err(());
        }
        if !inlet.items.has_room_for(items.len()) {
            debug_assert!(false, "credit reserved a slot for every item");
            return Err(());
        }
        let written = inlet.items.push_from(items);
        debug_assert_eq!(items.len(), 0, "{written} written, all fit");
        Ok(())
    }

    /// The receiving side stopped: no frame is queued after this returns, so what the
    /// window holds now is all it will ever hold.
    pub(crate) fn close_window(&self) {
        self.receive
            .window
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .closed = true;
    }

    /// The receiving core started (`Some`) or its subscription ended (`None`).
    pub(crate) fn set_source(&self, source: Option<Arc<dyn CoreHandle>>) {
        if let Some(core) = &source {
            // One subscription per channel: set once.
            let _ = self.receive.source_ref.set(Arc::downgrade(core));
        }
        *self
            .receive
            .source
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = source;
    }

    /// Drop every staged item (the receiving side stopped; the worker never sends
    /// for a channel that is not open).
    pub(crate) fn drop_staged(&self) {
        self.send
            .staging
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// Ask the receiving side for a pass.
    pub(crate) fn wake_source(&self) {
        if let Some(source) = self.source() {
            source.signal();
        }
    }

    /// Run the receiving side's pass here, now: the caller is the receiving
    /// scheduler's only thread. The pass leaves its credit unsettled, for the
    /// demultiplexer to settle after its batch. Returns the receiving core (its
    /// demand is read when settling).
    pub(crate) fn run_source_in_place(&self) -> Option<Arc<dyn CoreHandle>> {
        let source = self.receive.source_ref.get()?.upgrade()?;
        // Relaxed: set, read and cleared on this thread only (see the field).
        self.receive.settling.store(true, Ordering::Relaxed);
        source.signal_in_place();
        self.receive.settling.store(false, Ordering::Relaxed);
        Some(source)
    }

    /// True while the demultiplexer runs this channel's pass in place: the pass
    /// leaves the credit of what it delivers to [`defer`](Self::defer).
    pub(crate) fn settling(&self) -> bool {
        // Relaxed: see the field.
        self.receive.settling.load(Ordering::Relaxed)
    }

    /// `n` items were delivered during an in-place pass; their credit is settled later.
    pub(crate) fn defer(&self, n: u64) {
        // Relaxed: the count is only changed by read-modify-writes, which never lose
        // one another's updates; whichever swap comes after this add (the
        // demultiplexer's, or a stop's on any thread) settles it, exactly once.
        self.receive.unsettled.fetch_add(n, Ordering::Relaxed);
    }

    /// The delivered items whose credit was deferred and not yet settled; zero after.
    pub(crate) fn take_unsettled(&self) -> u64 {
        // Relaxed: see `defer`.
        self.receive.unsettled.swap(0, Ordering::Relaxed)
    }

    /// The demultiplexer owes this channel a wake-up: true the first time until its
    /// [`wake_paid`](Self::wake_paid) (the demultiplexer then lists the channel).
    pub(crate) fn owe_wake(&self) -> bool {
        // Relaxed, and a load and a store rather than a swap (a locked instruction):
        // only the demultiplexer touches the flag (see the field).
        let owed = self.receive.wake_owed.load(Ordering::Relaxed);
        if !owed {
            self.receive.wake_owed.store(true, Ordering::Relaxed);
        }
        !owed
    }

    /// The demultiplexer is about to wake this channel.
    /// False when no wake-up was owed: the channel's id was listed twice in one batch
    /// (its channel closed and the id opened again meanwhile), and this one is paid.
    pub(crate) fn wake_paid(&self) -> bool {
        // Relaxed, a load and a store: as in `owe_wake`.
        let owed = self.receive.wake_owed.load(Ordering::Relaxed);
        if owed {
            self.receive.wake_owed.store(false, Ordering::Relaxed);
        }
        owed
    }

    fn source(&self) -> Option<Arc<dyn CoreHandle>> {
        self.receive
            .source
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// The sending end of one channel of a [`Mux`](super::Mux): a [`Subscriber`] to
/// subscribe any publisher to.
///
/// It asks its upstream for a bounded staging window of items and hands them to the
/// mux's worker, which sends them as the channel's credit allows; the window is asked
/// for again as the worker takes items. When upstream completes or fails, the
/// channel's receiving end signals the same after the items sent before it. If the
/// receiving end cancels, upstream is cancelled. Subscribe it to one publisher only;
/// a second subscription is cancelled at once (rule 2.5). Dropped without being
/// subscribed, it completes the channel (nothing will be sent); dropped by its
/// publisher without a terminal signal, the receiving end fails with an error of
/// kind [`Cancelled`](crate::ErrorKind::Cancelled) after the items sent before.
pub struct ChannelSink<T> {
    shared: Arc<Shared<T>>,
    plumbing: Arc<Plumbing<T>>,
    /// The staging ring's writing end.
    staging: Producer<T>,
    /// Items staged so far.
    staged: u64,
    upstream: Upstream,
}

impl<T> std::fmt::Debug for ChannelSink<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelSink")
            .field("channel", &self.plumbing.id)
            .field("staged", &self.staged)
            .finish_non_exhaustive()
    }
}

impl<T: Send + 'static> ChannelSink<T> {
    /// The channel's id.
    pub fn channel(&self) -> ChannelId {
        self.plumbing.id
    }

    /// The channel was parked: report what is staged under the ledger's lock.
    fn report(&self) {
        let now = self.shared.now();
        let (open, wake) = {
            let mut state = self.shared.lock();
            let n = self.plumbing.take_report();
            // The id may have been opened again since this channel closed: the
            // channel is open only if the mux's plumbing for the id is this one.
            let id = self.plumbing.id;
            let open = state.ledger.is_open(id)
                && state
                    .plumbing
                    .get(&id)
                    .is_some_and(|p| Arc::ptr_eq(p, &self.plumbing));
            if open {
                (true, state.ledger.staged(id, n, now))
            } else {
                self.plumbing.park_closed();
                (false, false)
            }
        };
        if wake {
            self.shared.wake_worker();
        }
        if !open {
            // The receiving side stopped before these were counted: its clean-up
            // (after the ledger's cancel) may not see them, so drop them here.
            self.plumbing.drop_staged();
        }
    }
}

impl<T> ChannelSink<T> {
    fn finish(&mut self, end: Result<(), Error>) {
        if !self.upstream.finish() {
            return;
        }
        {
            let mut sender = self.plumbing.sender();
            sender.finished = true;
            // Never asked or cancelled again: let go of it (a worker's handle to this
            // plumbing may outlive the channel a while).
            sender.upstream = None;
        }
        self.plumbing.set_end(self.staged, end);
        self.plumbing.wake_source();
    }
}

impl<T> Drop for ChannelSink<T> {
    /// Dropped unsubscribed: nothing will ever be sent, so the channel completes
    /// (as a `weir::channel` whose senders are all dropped does). Dropped by its
    /// publisher without a terminal signal: the channel fails with an error of kind
    /// [`Cancelled`](crate::ErrorKind::Cancelled) after the items staged. A no-op
    /// after the terminal signal or a cancel.
    fn drop(&mut self) {
        // After the receiving side's cancel, upstream let go as asked.
        if self.plumbing.sender().cancelled {
            return;
        }
        let end = if matches!(self.upstream, Upstream::Idle) {
            Ok(())
        } else {
            Err(Error::cancelled())
        };
        self.finish(end);
    }
}

impl<T: Send + 'static> Subscriber<T> for ChannelSink<T> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        if !self.upstream.accept(&subscription) {
            return;
        }
        let cancelled = {
            let mut sender = self.plumbing.sender();
            if !sender.cancelled {
                sender.upstream = Some(subscription.clone());
            }
            sender.cancelled
        };
        if cancelled {
            self.upstream.cancel();
            crate::guard::cancel_contained(STAGE, &subscription);
        } else {
            self.plumbing
                .request_or_fail(&subscription, self.staging.capacity() as u64);
        }
    }

    fn on_next(&mut self, item: T) {
        let _no_credit = self.on_next_batch(std::iter::once(item));
    }

    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        if !self.upstream.is_active() {
            return 0;
        }
        let mut items = items;
        let written = self.staging.write(&mut items);
        self.staging.publish();
        if written > 0 {
            self.staged += written as u64;
            // Unparked: the ledger has backlog for the channel already, and the
            // worker folds these in on the channel's turn (no lock, no clock here).
            if self.plumbing.stage(written as u64) {
                self.report();
            }
        }
        if items.next().is_some() {
            // Upstream delivered past the window it was asked for.
            drop(items);
            if let Some(upstream) = self.upstream.get().cloned() {
                crate::guard::cancel_contained(STAGE, &upstream);
            }
            self.finish(Err(window::over_delivered("mux channel sink")));
        }
        0
    }

    fn stops_batches_itself(&self) -> bool {
        true
    }

    fn on_error(&mut self, error: Error) {
        self.finish(Err(error));
    }

    fn on_complete(&mut self) {
        self.finish(Ok(()));
    }
}
