//! The worker: the stage that moves frames from the channels' staging rings to the
//! transport.
//!
//! It is the signal core's stage behind [`Frames`], the publisher the transport
//! subscribes to; the transport's requests are its demand (one frame per unit), so
//! a full lane stops it without blocking anything. A pass asks the ledger for the
//! next send (the ready set, in deficit-round-robin order, credit taken under the
//! ledger's lock), pops that many items from the channel's staging ring, asks the
//! channel's upstream for more at the 75% mark, and adds the frame to a batch; until
//! the ledger has no ready channel or the lane no room. The batch goes to the
//! transport in one delivery when it holds [`FRAME_BATCH`] frames, before a second
//! frame of one channel joins it, and before the pass idles, yields or ends. A ledger change that makes a
//! channel ready while the worker waits for one (its last look found none) wakes it
//! through the core (a signal), so it never waits on one channel (I5); while it runs,
//! or once woken, queued channels wait for its next look without another signal. It
//! is never woken for a channel that cannot send.
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
enum Next<'a, T> {
    /// Send this turn of this channel.
    Send(super::ledger::Turn, Option<&'a Arc<Plumbing<T>>>),
    /// The transport asked for no more frames than the batch holds.
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
    /// Frames made and not yet handed to the transport (at most [`FRAME_BATCH`],
    /// and never more than it asked for).
    batch: Vec<ChannelFrame<T>>,
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
            if cx.stopped() {
                // The transport is gone: their credit comes back (the channels end
                // with the mux's error once nothing of theirs is buffered).
                for frame in owned.batch.drain(..) {
                    self.shared
                        .give_back(frame.channel, frame.items.len() as u64);
                }
                return Pass::Idle;
            }
            if frames >= PASS_FRAMES {
                flush(cx, transport, &mut owned.batch, &self.shared);
                return Pass::Yield;
            }
            let turn = {
                let mut state = self.shared.lock_polling();
                let room = cx.demand().get().saturating_sub(owned.batch.len() as u64);
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
                    match state.ledger.next_send_with(now, fold, park) {
                        Some(send) => {
                            let channel = send.channel;
                            let found = find(channel);
                            Next::Send(send, owned.known.sync_found(channel, found, plumbing))
                        }
                        None => Next::Nothing,
                    }
                }
            };
            let (send, plumbing) = match turn {
                Next::Send(send, plumbing) => (send, plumbing),
                Next::Finished => {
                    // No handle and no channel left: nothing will ever be sent.
                    flush(cx, transport, &mut owned.batch, &self.shared);
                    return cx.terminate(transport, Ok(()));
                }
                Next::Full | Next::Nothing => {
                    if owned.batch.is_empty() {
                        return Pass::Idle;
                    }
                    // Look again once the frames are out: the lane may have room,
                    // and a channel may have become ready meanwhile.
                    flush(cx, transport, &mut owned.batch, &self.shared);
                    continue;
                }
            };
            let Some(plumbing) = plumbing else {
                debug_assert!(false, "a ready channel has plumbing");
                continue;
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
                    continue;
                }
            }
            plumbing.took(items.len() as u64);
            owned.batch.push(ChannelFrame {
                channel: send.channel,
                items,
            });
            frames += 1;
            if owned.batch.len() >= FRAME_BATCH {
                flush(cx, transport, &mut owned.batch, &self.shared);
            }
        }
    }

    fn stop(&self, _owned: &mut Owned<T>) {
        self.shared
            .break_with(Error::msg("mux: the transport stopped carrying frames"));
    }
}
