//! The worker: the stage that moves frames from the channels' staging rings to the
//! transport.
//!
//! It is the signal core's stage behind [`Frames`], the publisher the transport
//! subscribes to; the transport's requests are its demand (one frame per unit), so a
//! full lane stops it without blocking anything. A pass takes turns from the ledger
//! (the ready set, in deficit-round-robin order, credit taken), several under one lock
//! of it (a plan): up to the lane's room and [`FRAME_BATCH`], stopping before a
//! channel's second turn and after a turn shorter than the quantum. A channel's backlog
//! grows only once its frame is made (the frame asks its upstream for more), so a
//! second turn in one plan would be short; and a short turn says the channels are
//! outrunning their credit, where one lock per turn lets deliveries return credit
//! between turns (planning on regardless made 10-item frames out of 16-item turns with
//! 16 channels). For each planned turn the pass pops that many items from the channel's
//! staging ring, asks the channel's upstream for more at the 75% mark, and adds the
//! frame to a batch, which goes to the transport in one delivery once the plan's frames
//! are made (before, too, if a second frame of one channel would join it). Then it
//! plans again, until the ledger has no ready channel or the lane no room. A ledger
//! change that makes a channel ready while the worker waits for one (its last look
//! found none) wakes it through the core (a signal), so it never waits on one channel
//! (I5); while it runs, or once woken, queued channels wait for its next look without
//! another signal. It is never woken for a channel that cannot send.
//!
//! Once every `Mux` handle is gone and every channel closed, the pass completes the
//! frames (so the transport ends, and with it the cycle of subscriptions between the
//! worker and the lane). If the transport stops (it cancels, or the worker's
//! scheduler shut down), the mux is broken: every receiving channel ends with an
//! error once it delivered what it had, and every sending upstream is cancelled.

use std::cell::Cell;
use std::sync::{Arc, Weak};

use crate::queue::spsc::Consumer;
use crate::runtime::Scheduler;
use crate::stage::core::Drive;
use crate::stage::{Core, CoreHandle, Cx, Pass, Stage};
use crate::{Error, Publisher, Subscriber};

use super::ids::Known;
use super::ledger::Turn;
use super::sink::Plumbing;
use super::{ChannelFrame, Shared};

/// Frames one pass sends before it yields its task.
const PASS_FRAMES: u32 = 256;

/// The worker's frames: a [`Publisher`] that emits one [`ChannelFrame`] per unit of demand,
/// in the mux's scheduling order, each item backed by a unit of its channel's credit.
/// A [`Transport`](super::Transport) subscribes to it once.
#[must_use = "publishers do nothing until subscribed"]
pub struct Frames<T> {
    shared: Arc<Shared<T>>,
    scheduler: Arc<dyn Scheduler>,
    /// Frame buffers the demultiplexer emptied, to fill again.
    spares: Consumer<Vec<T>>,
}

impl<T> std::fmt::Debug for Frames<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Frames").finish_non_exhaustive()
    }
}

impl<T: Send + 'static> Frames<T> {
    pub(crate) fn new(
        shared: Arc<Shared<T>>,
        scheduler: Arc<dyn Scheduler>,
        spares: Consumer<Vec<T>>,
    ) -> Self {
        Frames {
            shared,
            scheduler,
            spares,
        }
    }
}

impl<T: Send + 'static> Publisher for Frames<T> {
    type Item = ChannelFrame<T>;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<ChannelFrame<T>> + Send + 'static,
    {
        let core: Arc<Core<Worker<T>, S>> = Core::new(Worker {
            shared: self.shared,
            scheduler: self.scheduler,
        });
        let owned = Owned {
            spares: self.spares,
            known: Known::new(),
            batch: Vec::with_capacity(FRAME_BATCH),
            plan: Vec::with_capacity(FRAME_BATCH),
        };
        core.attach(owned, subscriber);
    }

    fn in_flight_bound(&self) -> u64 {
        crate::demand::UNBOUNDED
    }
}

/// Frames the worker hands the transport in one batch: one delivery (one publish of
/// the lane, one signal of its drain) per batch instead of per frame.
const FRAME_BATCH: usize = 8;

/// What a pass does next, decided under the mux's lock and done outside it.
enum Next {
    /// Send the planned turns.
    Send,
    /// The transport asks for no frames now.
    Full,
    /// No channel is ready.
    Nothing,
    /// No handle and no channel left.
    Finished,
}

/// Hand the batch's frames to the transport; the credit of frames it stopped taking
/// (it cancelled inside the batch) comes back.
fn flush<T, S: Subscriber<ChannelFrame<T>>>(
    cx: &Cx<'_>,
    transport: &mut S,
    batch: &mut Vec<ChannelFrame<T>>,
    shared: &Shared<T>,
) {
    if batch.is_empty() {
        return;
    }
    let (_, refused) = cx.deliver(transport, batch.drain(..));
    for frame in refused.into_iter().flatten() {
        shared.give_back(frame.channel, frame.items.len() as u64);
    }
}

/// The worker stage.
struct Worker<T> {
    shared: Arc<Shared<T>>,
    scheduler: Arc<dyn Scheduler>,
}

/// What only the worker's passes use.
struct Owned<T> {
    /// Frame buffers to fill again.
    spares: Consumer<Vec<T>>,
    /// The channels it has sent for: their plumbing without a clone per turn.
    known: Known<Plumbing<T>>,
    /// The plan's frames made and not yet handed to the transport (at most
    /// [`FRAME_BATCH`], never more than it asked for); empty between plans.
    batch: Vec<ChannelFrame<T>>,
    /// Turns taken under one lock of the ledger, their frames not made yet (at most
    /// the batch's room).
    plan: Vec<Turn>,
}

impl<T: Send + 'static> Stage for Worker<T> {
    const NAME: &'static str = "mux worker";
    type Item = ChannelFrame<T>;
    type Owned = Owned<T>;
    type Padding = crate::loom::Block;

    fn drive(&self) -> Drive<'_> {
        Drive::Scheduled {
            on: &*self.scheduler,
            linger: false,
        }
    }

    fn bind(&self, me: Weak<dyn CoreHandle>) {
        let _ = self.shared.worker.set(me);
    }

    fn pass<S: Subscriber<ChannelFrame<T>>>(
        &self,
        cx: &Cx<'_>,
        owned: &mut Owned<T>,
        transport: &mut S,
    ) -> Pass {
        let now = self.shared.now();
        let mut frames = 0u32;
        loop {
            // Each plan's batch went out with it (`flush` gives back the credit of
            // frames a stopped transport refused).
            debug_assert!(owned.batch.is_empty(), "a batch outlived its plan");
            if cx.stopped() {
                // The transport is gone (the channels end with the mux's error once
                // nothing of theirs is buffered).
                return Pass::Idle;
            }
            if frames >= PASS_FRAMES {
                return Pass::Yield;
            }
            let next = {
                let mut state = self.shared.lock_polling();
                let room = cx.demand().get();
                if state.is_finished() {
                    Next::Finished
                } else if room == 0 {
                    Next::Full
                } else {
                    let state = &mut *state;
                    let plumbing = &state.plumbing;
                    // The last channel folded is the one whose turn it is (the ledger
                    // folds a channel as it takes it from the ready set): its lookup
                    // serves `park` and the sync below.
                    let last = Cell::new(None);
                    let find = |id| match last.get() {
                        Some((seen, found)) if seen == id => found,
                        _ => {
                            let found = plumbing.get(&id);
                            last.set(Some((id, found)));
                            found
                        }
                    };
                    let fold = |id| find(id).map_or(0, |p| p.fold());
                    let park = |id| find(id).map_or(0, |p| p.park());
                    // Up to the lane's room in turns under this one lock, stopping
                    // before a channel's second turn: its backlog grows only once
                    // its first frame is made (the frame asks its upstream for
                    // more), so the second would be short.
                    let most = room
                        .min(FRAME_BATCH as u64)
                        .min(u64::from(PASS_FRAMES - frames));
                    let quantum = state.ledger.config().quantum;
                    let seen = |plan: &[Turn], channel| plan.iter().any(|t| t.channel == channel);
                    while (owned.plan.len() as u64) < most {
                        if let Some(head) = state.ledger.next_in_line() {
                            if seen(&owned.plan, head) {
                                break;
                            }
                        }
                        let Some(send) = state.ledger.next_send_with(now, fold, park) else {
                            break;
                        };
                        let channel = send.channel;
                        // The head stopped being ready and a later channel went
                        // instead: it may have a frame here already.
                        let again = seen(&owned.plan, channel);
                        let short = send.items < quantum;
                        // Synced under the lock: the frame below reads it without.
                        let _ = owned.known.sync_found(channel, find(channel), plumbing);
                        owned.plan.push(send);
                        if short || again {
                            break;
                        }
                    }
                    if owned.plan.is_empty() {
                        Next::Nothing
                    } else {
                        Next::Send
                    }
                }
            };
            match next {
                Next::Send => {}
                Next::Finished => {
                    // No handle and no channel left: nothing will ever be sent.
                    return cx.terminate(transport, Ok(()));
                }
                // The transport's next request, or a channel becoming ready (the
                // ledger noted that the worker waits), wakes the worker.
                Next::Full | Next::Nothing => return Pass::Idle,
            }
            let mut plan = std::mem::take(&mut owned.plan);
            for send in plan.drain(..) {
                frames += self.frame(cx, owned, transport, send);
            }
            owned.plan = plan;
            // One batch per plan: the plan's channels are distinct, and the next
            // plan begins with the head of the ready set, most likely the first
            // channel of this one again.
            flush(cx, transport, &mut owned.batch, &self.shared);
        }
    }

    fn stop(&self, _owned: &mut Owned<T>) {
        self.shared
            .break_with(Error::msg("mux: the transport stopped carrying frames"));
    }
}

impl<T: Send + 'static> Worker<T> {
    /// Make the frame of one planned turn (its credit taken) and add it to the
    /// batch; flush the batch first if it holds a frame of the channel already (a
    /// plan's last turn may be a channel's second, when the head had stopped being
    /// ready). Returns the frames made (0 when the channel's staged items were
    /// dropped by a cancel since the turn).
    fn frame<S: Subscriber<ChannelFrame<T>>>(
        &self,
        cx: &Cx<'_>,
        owned: &mut Owned<T>,
        transport: &mut S,
        send: Turn,
    ) -> u32 {
        // Synced under the lock when the turn was taken.
        let Some(plumbing) = owned.known.get(send.channel) else {
            debug_assert!(false, "a ready channel has plumbing");
            self.shared.give_back(send.channel, send.items);
            return 0;
        };
        if owned
            .batch
            .iter()
            .any(|frame| frame.channel == send.channel)
        {
            // A second frame of one channel: with few channels a batch would
            // hold back a channel's own credit (its first frame's delivery).
            flush(cx, transport, &mut owned.batch, &self.shared);
        }
        let mut items = owned.spares.pop().unwrap_or_default();
        plumbing.pop_staged(send.items as usize, &mut items);
        let short = send.items - items.len() as u64;
        if short > 0 {
            // The channel was cancelled after the turn took its credit, and the
            // cancel's clean-up dropped the staged items first: their credit
            // comes back here (nobody else saw them).
            debug_assert!(
                !self.shared.lock().ledger.is_open(send.channel),
                "staged items went missing from an open channel"
            );
            self.shared.give_back(send.channel, short);
            if items.is_empty() {
                return 0;
            }
        }
        plumbing.took(items.len() as u64);
        owned.batch.push(ChannelFrame {
            channel: send.channel,
            items,
        });
        1
    }
}
