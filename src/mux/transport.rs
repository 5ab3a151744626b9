//! The seam between the mux and what carries its frames.
//!
//! A transport connects two things: the worker's [`Frames`], a publisher that emits a
//! frame per unit of demand (so the transport's lane bounds it: request frames as the
//! lane has room), and the receiving side's [`Demux`], a subscriber that never
//! blocks (credit reserved a slot for every item of every frame) and asks for frames
//! without bound. The in-process transport, [`Local`], joins them with an async
//! boundary: a ring of `lane` frames, read by a task on the receiving scheduler. A
//! transport over a byte stream encodes each [`ChannelFrame`] on one side and decodes it for
//! the [`Demux`] on the other; credit, scheduling and isolation stay in the mux.

use std::sync::Arc;

use crate::drain::Upstream;
use crate::runtime::Scheduler;
use crate::stage::CoreHandle;
use crate::{Error, Publisher, PublisherExt, Subscriber, Subscription};

use super::ids::Known;
use super::sink::Plumbing;
use super::{ChannelId, Frames, Shared};
use crate::queue::spsc::{self, Consumer, Producer};

/// Frame buffers that wait to be filled again.
///
/// The worker fills a `Vec` for every frame and the demultiplexer empties it, on
/// another thread. Allocated on one thread and freed on the other, each buffer went
/// back to its allocator's arena through that arena's lock, which the worker was
/// taking at the same time for the next buffer: on glibc that contention cost a
/// futex call every two frames or so (≈ 80,000 in a run of 3 × 2^20 items over two
/// channels). So the demultiplexer hands each emptied buffer back over this ring,
/// and the worker takes one before it allocates.
pub(crate) const SPARES: usize = 256;

/// The two ends of a mux's ring of spare frame buffers.
pub(crate) fn spares<T>() -> (Producer<Vec<T>>, Consumer<Vec<T>>) {
    spsc::ring(SPARES)
}

/// Items of one channel, sent as one unit over the transport. Every item is backed
/// by a unit of its channel's credit, taken before the frame was made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelFrame<T> {
    /// The channel the items belong to.
    pub channel: ChannelId,
    /// The items, in the channel's order.
    pub items: Vec<T>,
}

/// What carries a mux's frames from its worker to its receiving side. See the
/// [`mux` module docs](crate::mux).
pub trait Transport<T: Send + 'static>: Send + 'static {
    /// The scheduler the receiving side runs on: every channel's subscriber.
    fn receiver(&self) -> Arc<dyn Scheduler>;

    /// Carry every frame of `frames` to `demux`, in order. Called once, when the mux
    /// is built. Ending `frames`' subscription (cancel) breaks the mux: every channel
    /// ends with an error. A panic here (or in [`receiver`](Self::receiver)) makes
    /// [`MuxBuilder::build`](super::MuxBuilder::build) return
    /// [`MuxError::Transport`](super::MuxError::Transport).
    fn connect(self, frames: Frames<T>, demux: Demux<T>);
}

/// The in-process transport: a lane of `lane` frames into a task on the receiving
/// scheduler (an async boundary like
/// [`publish_on`](crate::PublisherExt::publish_on), whose ring it is).
#[derive(Clone, Debug)]
pub struct Local<S> {
    scheduler: S,
    lane: u64,
}

/// The most frames a [`Local`] lane holds: its ring is allocated up front (a lane of
/// 2^30 frames of `u64`s asked for 32 GiB and aborted the process), and more than
/// 2^16 frames ahead of the receiving side buys nothing.
pub(crate) const MAX_LANE: u64 = 1 << 16;

impl<S: Scheduler + Clone> Local<S> {
    /// A lane of `lane` frames (in `1..=2^16`: its ring is allocated when the mux is
    /// built) into `scheduler`.
    ///
    /// # Panics
    ///
    /// When `lane` is out of range: "mux lane must be in 1..=2^16 (got 0)".
    pub fn new(scheduler: S, lane: u64) -> Self {
        assert!(
            (1..=MAX_LANE).contains(&lane),
            "mux lane must be in 1..=2^16 (got {lane})"
        );
        Local { scheduler, lane }
    }
}

impl<T: Send + 'static, S: Scheduler + Clone> Transport<T> for Local<S> {
    fn receiver(&self) -> Arc<dyn Scheduler> {
        Arc::new(self.scheduler.clone())
    }

    fn connect(self, frames: Frames<T>, demux: Demux<T>) {
        frames
            .publish_on(self.scheduler, self.lane)
            .subscribe(demux);
    }
}

/// The receiving side's entry: writes each frame's items into its channel's receive
/// window and wakes the channel. Subscribe it to the transport's incoming frames.
///
/// It finds a frame's channel in a map of its own, not under the mux's lock: that
/// lock is the one the worker takes for every turn, and taking it for every frame as
/// well made the two threads queue behind each other (measured on two channels of
/// 16-item frames: the private map moves 1.14× the items). An entry is trusted only
/// while its channel takes the items: a channel that closed refuses them (its window
/// is closed before its plumbing leaves the mux), and then the mux's own map, under
/// the lock, says whether the id was opened again.
pub struct Demux<T> {
    shared: Arc<Shared<T>>,
    upstream: Upstream,
    /// Emptied frame buffers, back to the worker to fill again (see [`SPARES`]).
    spares: Producer<Vec<T>>,
    /// Channels this demultiplexer has delivered to.
    known: Known<Plumbing<T>>,
    /// Channels given items in the current batch of frames, each once: woken when
    /// the batch is in (see [`Demux::wake_owed`]).
    owed: Vec<ChannelId>,
    /// Channels whose pass ran in place in the current batch, with their receiving
    /// cores: their credit is settled under one lock (see [`Demux::wake_owed`]).
    ran: Vec<(ChannelId, Arc<dyn CoreHandle>)>,
}

impl<T> std::fmt::Debug for Demux<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Demux").finish_non_exhaustive()
    }
}

impl<T: Send + 'static> Demux<T> {
    pub(crate) fn new(shared: Arc<Shared<T>>, spares: Producer<Vec<T>>) -> Self {
        Demux {
            shared,
            upstream: Upstream::Idle,
            spares,
            known: Known::new(),
            owed: Vec::new(),
            ran: Vec::new(),
        }
    }

    fn frame(&mut self, frame: ChannelFrame<T>) {
        let ChannelFrame { channel, mut items } = frame;
        let known = self.known.get(channel);
        if let Some(plumbing) = known.filter(|p| p.receive(&mut items).is_ok()) {
            if plumbing.owe_wake() {
                self.owed.push(channel);
            }
        } else {
            // Not known yet, or the known channel closed (its id may be open again):
            // ask the mux's map, under its lock.
            let state = self.shared.lock();
            let plumbing = self.known.sync(channel, &state.plumbing);
            drop(state);
            match plumbing {
                Some(plumbing) if plumbing.receive(&mut items).is_ok() => {
                    if plumbing.owe_wake() {
                        self.owed.push(channel);
                    }
                }
                // The channel stopped receiving, or closed while the frame travelled.
                _ => {
                    self.known.remove(channel);
                    let refused = items.len() as u64;
                    items.clear();
                    self.shared.give_back(channel, refused);
                }
            }
        }
        if items.capacity() > 0 {
            // A full return ring (or a worker gone): the buffer is freed here.
            let _ = self.spares.push(items);
        }
    }

    /// Wake every channel given items since the last call, once each. On the
    /// receiving scheduler's only thread (the local lane's task on a pool of one)
    /// each channel's pass runs here and now: a task per frame cost about a fifth of
    /// the receiving side's time with 256 busy channels. Waking once per batch rather
    /// than per frame lets a pass deliver every frame its channel got in the batch.
    ///
    /// A pass run here leaves the credit of what it delivered unsettled, and this
    /// settles the batch's channels under one lock of the ledger, with one reading of
    /// the clock: per channel, that lock (which the worker takes for every turn) and
    /// the clock were most of what a pass cost besides the delivery itself. Each
    /// channel's demand is read under the lock, as [`Ledger::demand`] asks.
    ///
    /// [`Ledger::demand`]: super::ledger::Ledger::demand
    fn wake_owed(&mut self) {
        let in_place = self.shared.on_sole_receiver();
        for channel in self.owed.drain(..) {
            // Gone only if the channel closed since (it needs no wake-up then).
            let Some(plumbing) = self.known.get(channel) else {
                continue;
            };
            if !plumbing.wake_paid() {
                // Listed twice: the id's channel closed and opened again in this
                // batch (a flag left set stays on the closed one, whose window
                // refuses everything).
                continue;
            }
            if !in_place {
                plumbing.wake_source();
            } else if let Some(source) = plumbing.run_source_in_place() {
                self.ran.push((channel, source));
            }
        }
        if self.ran.is_empty() {
            return;
        }
        let now = self.shared.now();
        let wake = {
            let mut state = self.shared.lock_polling();
            let mut wake = false;
            for (channel, source) in &self.ran {
                let Some(plumbing) = self.known.get(*channel) else {
                    continue;
                };
                let n = plumbing.take_unsettled();
                if n == 0 {
                    continue;
                }
                // A stop takes what is unsettled under this lock before it cancels,
                // and no pass (so no deferral) follows a stop: credit left to settle
                // means the channel is still open, and the stop will close it.
                debug_assert!(state.ledger.is_open(*channel), "settling a stopped channel");
                wake |= state
                    .ledger
                    .delivered_with_demand(*channel, n, source.outstanding(), now);
            }
            wake
        };
        // Outside the lock: the last reference to a core may go here, and with it
        // the user's subscriber.
        self.ran.clear();
        if wake {
            self.shared.wake_worker();
        }
    }
}

impl<T: Send + 'static> Subscriber<ChannelFrame<T>> for Demux<T> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        if self.upstream.accept(&subscription) {
            subscription.request(crate::demand::UNBOUNDED);
        }
    }

    fn on_next(&mut self, frame: ChannelFrame<T>) {
        if self.upstream.is_active() {
            self.frame(frame);
            self.wake_owed();
        }
    }

    fn on_next_batch<I: Iterator<Item = ChannelFrame<T>>>(&mut self, frames: I) -> u64 {
        if self.upstream.is_active() {
            for frame in frames {
                self.frame(frame);
            }
            self.wake_owed();
        }
        // Demand is unbounded already.
        0
    }

    fn on_error(&mut self, error: Error) {
        if self.upstream.finish() {
            self.shared.break_with(error);
        }
    }

    fn on_complete(&mut self) {
        if self.upstream.finish() {
            self.shared.break_with(Error::msg(
                "mux: the transport completed while channels were open",
            ));
        }
    }
}
