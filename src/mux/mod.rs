//! Credit multiplexing: many channels share one transport, and a channel whose
//! consumer stalls costs its siblings nothing.
//!
//! A [`Mux`] carries many logical channels over one transport: one worker that
//! moves frames of items, one bounded lane between the two sides. With a plain
//! bounded FIFO in that place, one consumer that stops reading fills the FIFO with its
//! items and every channel behind it stops as well. Here no item enters the transport
//! unless its channel holds a unit of credit for it, and credit stands for a slot in
//! the receiving side that the channel's subscriber asked to fill; so the transport
//! never holds an item nobody will take, and a stalled channel only stalls itself.
//!
//! # The pieces
//!
//! * On the **sending side** each channel is a [`ChannelSink`], a [`Subscriber`](crate::Subscriber): subscribe any
//!   publisher to it. It asks its upstream for at most a staging window of items
//!   ahead (the 75% rule), so what it holds is backlog the worker can see, and bounded.
//! * The **worker** (a task on the scheduler given to the builder) takes the next
//!   ready channel, moves up to `quantum × weight` of its staged items into one
//!   [`ChannelFrame`], takes one unit of credit per item, and hands the frame to the
//!   transport; then the channel goes to the back of the line if it is still ready.
//! * The **transport** carries frames to the receiving side's demultiplexer. The
//!   in-process one ([`Local`], used by [`MuxBuilder::build_local`]) is a bounded
//!   lane of frames into a task on a second scheduler, built on the same async
//!   boundary as [`publish_on`](crate::PublisherExt::publish_on). Any [`Transport`]
//!   can take its place: it receives the worker's frames as a publisher that honours
//!   demand, and delivers them to a [`Demux`].
//! * On the **receiving side** each channel is a [`ChannelSource`], a [`Publisher`](crate::Publisher) whose
//!   subscriber's `request(n)` is the only source of the channel's credit. Items
//!   delivered to it give their credit back: shared credit to the pool at once,
//!   exclusive credit to the sender at a low-water mark (see below). The
//!   demultiplexer wakes each channel once per batch of frames; on a receiving
//!   scheduler of one thread it runs the channel's pass in place, not in a task of
//!   its own (see [`current_thread_is_sole_worker`](crate::runtime::Scheduler::current_thread_is_sole_worker)).
//!
//! Control never waits behind data: a request, a cancel, a channel's end and credit
//! coming back are updates of the mux's ledger plus a wake-up of the side that acts
//! on them, never frames in the bounded lane.
//!
//! # Credit
//!
//! * **Exclusive** credit: `E` units per channel ([`exclusive`](MuxBuilder::exclusive)),
//!   reserved while the channel is open. Delivered items return it to the sender in
//!   batches of [`announce_at`](MuxBuilder::announce_at) (default `E / 2`), or at once
//!   when the sender has no credit left and items waiting.
//! * **Shared** credit: a pool of `S` units ([`shared`](MuxBuilder::shared)). A channel
//!   takes a shared unit only when it sends with no exclusive unit left, at most `C`
//!   at a time ([`borrow_cap`](MuxBuilder::borrow_cap)), spread over the channels that
//!   need it; the unit comes back when its item is delivered. A channel with no
//!   demand or no backlog never takes any, so nothing is ever held unused.
//! * A channel never sends more than its subscriber requested.
//!
//! So at every instant the items on the transport and in receive windows number at
//! most `Σ E + S` ([`MuxStats::buffered_total`], with its high-water mark), and after
//! every channel closed the pool is whole again.
//!
//! # Example
//!
//! ```
//! use weir::mux::Mux;
//! use weir::prelude::*;
//! use weir::runtime::ThreadPool;
//!
//! let pool = ThreadPool::builder().threads(2).build();
//! let mux = Mux::<u64>::builder()
//!     .exclusive(32)
//!     .shared(128)
//!     .borrow_cap(32)
//!     .build_local(pool.clone(), pool.clone())
//!     .unwrap();
//! let sums: Vec<_> = (0..4u64)
//!     .map(|channel| {
//!         weir::range(0..1_000)
//!             .via(&mux, channel)
//!             .unwrap()
//!             .fold(0u64, |sum, x| sum + x)
//!     })
//!     .collect();
//! for sum in sums {
//!     assert_eq!(sum.wait().unwrap(), 499_500);
//! }
//! let stats = mux.stats();
//! assert_eq!(stats.pool_free, 128, "every shared unit is back");
//! assert!(stats.high_water <= 4 * 32 + 128);
//! ```
//!
//! # Failures stay in their channel
//!
//! A receiving subscriber that cancels, panics or is dropped with its scheduler ends
//! only its channel: its buffered items are dropped (counted in
//! [`ChannelStats::dropped`]), its credit returns, its sender's upstream is
//! cancelled. A sending upstream that fails ends its channel with that error after the
//! items it sent. The other channels see nothing but the freed credit.
//!
//! # Events
//!
//! `tracing` events, target `weir::mux`, none per item or frame. Shared credit is
//! never granted ahead (see [`MuxBuilder::shared`]), so nothing is ever revoked from
//! a stalled channel; the events are at the changes that move credit: `debug` when a
//! channel's receiving side stops before the end (cancel, panic, a dropped task:
//! fields `channel`, `dropped`, `shared_returned` (units back in the pool),
//! `in_flight` (items still on the transport, whose credit comes back as they
//! arrive)) and when a channel closes (its final `delivered`, `dropped`, `frames`);
//! `info` when the transport stops while channels are open (they all end with its
//! error). Whether a channel is stalled now is in [`ChannelStats::stalled`].
//!
//! # What a subscriber must not do
//!
//! Every channel's subscriber runs on the receiving scheduler. One that blocks its
//! thread inside `on_next` holds a worker of that scheduler; give slow consumers a
//! scheduler of their own, or let them ask (`request`) only for what they can take,
//! which is what the mux is for.

mod ids;
mod ledger;
mod sink;
mod source;
mod stats;
mod transport;
mod worker;

#[cfg(all(test, weir_loom))]
mod loom_tests;

use std::fmt;
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use crate::loom::Mutex;
use crate::queue::MAX_CAPACITY;
use crate::runtime::Scheduler;
use crate::stage::window::ring_budget;
use crate::stage::CoreHandle;

pub use sink::ChannelSink;
pub use source::ChannelSource;
pub use stats::{jain_index, ChannelStats, MuxStats};
pub use transport::{ChannelFrame, Demux, Local, Transport};
pub use worker::Frames;

use ledger::{Ledger, MuxConfig};
use sink::Plumbing;

/// A channel's id: any `u64` the application picks, unique among the mux's open
/// channels (an id can be opened again once its channel closed).
pub type ChannelId = u64;

/// A mux's configuration was refused, or a channel could not be opened.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MuxError {
    /// A builder setting is out of range or would let the mux strand its credit.
    Config {
        /// The setting, as the builder method is named.
        parameter: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A channel with this id is open already.
    ChannelInUse(ChannelId),
    /// The mux has [`max_channels`](MuxBuilder::max_channels) open channels.
    TooManyChannels {
        /// The limit.
        max: usize,
    },
    /// The [`Transport`] panicked in [`receiver`](Transport::receiver) or
    /// [`connect`](Transport::connect) while [`build`](MuxBuilder::build) ran. Nothing
    /// of the mux is left running: frames the transport had already subscribed to end.
    Transport {
        /// The panic's message.
        reason: String,
    },
}

impl fmt::Display for MuxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MuxError::Config { parameter, reason } => write!(f, "mux: {parameter}: {reason}"),
            MuxError::ChannelInUse(id) => write!(f, "mux: channel {id} is open already"),
            MuxError::TooManyChannels { max } => {
                write!(f, "mux: {max} channels are open, the configured maximum")
            }
            MuxError::Transport { reason } => {
                write!(
                    f,
                    "mux: the transport panicked while the mux was built: {reason}"
                )
            }
        }
    }
}

impl std::error::Error for MuxError {}

fn refuse(parameter: &'static str, reason: String) -> MuxError {
    MuxError::Config { parameter, reason }
}

/// The error of a transport that panicked in `build` (logged: it is user code).
#[cold]
fn transport_panicked(panic: &crate::Error) -> MuxError {
    tracing::error!(target: "weir::mux", error = %panic, "mux: the transport panicked in build");
    MuxError::Transport {
        reason: panic.to_string(),
    }
}

/// Builds a [`Mux`]; see the [module docs](self) for what each setting means.
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until built"]
pub struct MuxBuilder<T> {
    exclusive: u64,
    shared: u64,
    borrow_cap: Option<u64>,
    quantum: u64,
    announce_at: Option<u64>,
    shared_return: u64,
    max_channels: usize,
    classes: u8,
    stall_after: Duration,
    fairness_window: Duration,
    staging: Option<u64>,
    lane: u64,
    _items: std::marker::PhantomData<fn(T) -> T>,
}

impl<T: Send + 'static> Default for MuxBuilder<T> {
    fn default() -> Self {
        MuxBuilder {
            exclusive: 32,
            shared: 128,
            borrow_cap: None,
            quantum: 16,
            announce_at: None,
            shared_return: 1,
            max_channels: 4096,
            classes: 1,
            stall_after: Duration::from_millis(10),
            fairness_window: Duration::from_secs(1),
            staging: None,
            lane: 256,
            _items: std::marker::PhantomData,
        }
    }
}

impl<T: Send + 'static> MuxBuilder<T> {
    /// Exclusive credit per channel, `E` (default 32). 0 is allowed with a shared
    /// pool: every item then travels on shared credit. Each channel's receiving side
    /// holds a ring of `E + C` slots, allocated when the channel opens, so the
    /// builder refuses `E + C` above 2^30, or a ring of more than 2^30 bytes
    /// (`(E + C)` × the item's size).
    pub fn exclusive(mut self, e: u64) -> Self {
        self.exclusive = e;
        self
    }

    /// The shared pool, `S` (default 128).
    pub fn shared(mut self, s: u64) -> Self {
        self.shared = s;
        self
    }

    /// Shared credit one channel may hold, `C` (default `S / 4`, at least 1 when
    /// `S > 0`); at most `S`.
    pub fn borrow_cap(mut self, c: u64) -> Self {
        self.borrow_cap = Some(c);
        self
    }

    /// Items a channel sends per turn, times its weight (default 16).
    pub fn quantum(mut self, items: u64) -> Self {
        self.quantum = items;
        self
    }

    /// Delivered items whose exclusive credit is announced to the sender in one
    /// batch: the low-water mark (default `E / 2`, at least 1); in `1..=E`.
    pub fn announce_at(mut self, items: u64) -> Self {
        self.announce_at = Some(items);
        self
    }

    /// Shared units a channel gives back to the pool at once (default 1: each as its
    /// item is delivered). Larger batches can strand the pool (every channel holding
    /// less than a batch, none able to send); the builder refuses a batch unless
    /// `max_channels × (batch − 1) < S`.
    pub fn shared_return(mut self, batch: u64) -> Self {
        self.shared_return = batch;
        self
    }

    /// Channels open at once, at most (default 4096).
    pub fn max_channels(mut self, n: usize) -> Self {
        self.max_channels = n;
        self
    }

    /// Strict priority classes (default 1; at most 8). A channel of class 0 is served
    /// before any of class 1, and so on: a busy class can starve the ones after it.
    pub fn classes(mut self, n: u8) -> Self {
        self.classes = n;
        self
    }

    /// A channel with buffered items and no delivery for this long is reported as
    /// stalled ([`ChannelStats::stalled`]); default 10 ms.
    pub fn stall_after(mut self, after: Duration) -> Self {
        self.stall_after = after;
        self
    }

    /// The window over which [`MuxStats::fairness`] is measured (default 1 s). Must
    /// be above zero; `Duration::MAX` means the index is never computed.
    pub fn fairness_window(mut self, window: Duration) -> Self {
        self.fairness_window = window;
        self
    }

    /// Items each sending channel asks its upstream for ahead of the worker
    /// (default `max(E + C, 2 × quantum)`), in `1..=2^30`: a ring of that many slots
    /// is allocated when the channel opens, so it must also take at most 2^30 bytes
    /// (`staging` × the item's size).
    pub fn staging(mut self, items: u64) -> Self {
        self.staging = Some(items);
        self
    }

    /// Frames the in-process transport's lane holds (default 256). Every item in a
    /// frame holds a unit of credit, so the lane adds no items beyond `Σ E + S`; its
    /// size only sets how many turns the worker may run ahead of the receiving side
    /// before it waits for the lane's drain. With many channels each able to send,
    /// a small lane makes both sides stop and restart every few frames (measured
    /// with 256 channels: a lane of 16 frames moved half the items of one of 256).
    /// In `1..=2^16`: the lane's ring of frames is allocated when the mux is built.
    pub fn lane(mut self, frames: u64) -> Self {
        self.lane = frames;
        self
    }

    fn validate(&self) -> Result<(MuxConfig, usize), MuxError> {
        let max = MAX_CAPACITY as u64;
        if self.exclusive > max {
            return Err(refuse(
                "exclusive",
                format!("{} is over 2^30", self.exclusive),
            ));
        }
        if self.shared > max {
            return Err(refuse("shared", format!("{} is over 2^30", self.shared)));
        }
        let borrow_cap = self.borrow_cap.unwrap_or(if self.shared > 0 {
            (self.shared / 4).max(1)
        } else {
            0
        });
        if borrow_cap > self.shared {
            return Err(refuse(
                "borrow_cap",
                format!(
                    "{borrow_cap} is more than the shared pool ({}); a channel cannot borrow \
                     more than exists",
                    self.shared
                ),
            ));
        }
        if self.exclusive + borrow_cap > max {
            return Err(refuse(
                "exclusive",
                format!(
                    "exclusive + borrow_cap = {} + {borrow_cap} is over 2^30: each channel's \
                     receiving ring holds that many items",
                    self.exclusive
                ),
            ));
        }
        if self.exclusive == 0 && borrow_cap == 0 {
            return Err(refuse(
                "exclusive",
                "0 needs a shared pool and a borrow_cap of at least 1, or no channel could \
                 ever send"
                    .into(),
            ));
        }
        if self.quantum == 0 || self.quantum > max {
            return Err(refuse(
                "quantum",
                format!("{} is not in 1..=2^30", self.quantum),
            ));
        }
        let announce_at = self.announce_at.unwrap_or((self.exclusive / 2).max(1));
        if announce_at == 0 || (self.exclusive > 0 && announce_at > self.exclusive) {
            return Err(refuse(
                "announce_at",
                format!(
                    "{announce_at} is not in 1..=exclusive ({}); credit above the window would \
                     never be announced",
                    self.exclusive
                ),
            ));
        }
        if self.shared_return == 0 {
            return Err(refuse("shared_return", "0 is not a batch size".into()));
        }
        if self.max_channels == 0 {
            return Err(refuse("max_channels", "0 channels".into()));
        }
        if self.shared_return > 1 {
            let stranded = (self.max_channels as u128) * u128::from(self.shared_return - 1);
            if stranded >= u128::from(self.shared) {
                return Err(refuse(
                    "shared_return",
                    format!(
                        "batches of {} can strand the pool: {} channels may each hold {} \
                         delivered units waiting for a batch, {stranded} in all, and the pool \
                         has {}; need max_channels × (batch − 1) < shared",
                        self.shared_return,
                        self.max_channels,
                        self.shared_return - 1,
                        self.shared
                    ),
                ));
            }
        }
        if self.classes == 0 || self.classes > 8 {
            return Err(refuse(
                "classes",
                format!("{} is not in 1..=8", self.classes),
            ));
        }
        if self.lane == 0 || self.lane > transport::MAX_LANE {
            return Err(refuse("lane", format!("{} is not in 1..=2^16", self.lane)));
        }
        let staging = match self.staging {
            Some(staging) if staging == 0 || staging > max => {
                return Err(refuse("staging", format!("{staging} is not in 1..=2^30")));
            }
            Some(staging) => staging,
            None => {
                let staging = (self.exclusive + borrow_cap).max(2 * self.quantum);
                if staging > max {
                    return Err(refuse(
                        "staging",
                        format!(
                            "the default max(E + C, 2 × quantum) = {staging} is over 2^30; \
                             set a smaller quantum, or staging itself"
                        ),
                    ));
                }
                staging
            }
        };
        // Each channel's two rings are allocated whole when it opens: held to the
        // byte budget of every such ring (a large item type could otherwise ask for
        // more than the machine maps, and the allocation aborts the process).
        for (setting, slots) in [
            ("exclusive", self.exclusive + borrow_cap),
            ("staging", staging),
        ] {
            if let Err(over) = ring_budget(slots, std::mem::size_of::<T>()) {
                return Err(refuse(setting, format!("each channel's ring {over}")));
            }
        }
        if self.fairness_window.is_zero() {
            return Err(refuse("fairness_window", "must be above zero".to_owned()));
        }
        let config = MuxConfig {
            exclusive: self.exclusive,
            shared: self.shared,
            borrow_cap,
            quantum: self.quantum,
            announce_at,
            shared_return: self.shared_return,
            stall_after: self.stall_after,
            fairness_window: self.fairness_window,
        };
        Ok((config, staging as usize))
    }

    /// A mux whose worker runs on `scheduler` and whose frames travel over
    /// `transport`. Refused, with the setting named, when the configuration is out of
    /// range or could strand credit ([`MuxError::Config`]); a transport that panics
    /// in [`receiver`](Transport::receiver) or [`connect`](Transport::connect) gives
    /// [`MuxError::Transport`], and whatever it had started of the mux winds down as
    /// it would once the last handle of a mux with no channel is gone.
    pub fn build<C, Tr>(self, scheduler: C, transport: Tr) -> Result<Mux<T>, MuxError>
    where
        C: Scheduler + Clone,
        Tr: Transport<T>,
    {
        let (config, staging) = self.validate()?;
        let clock: Arc<dyn Scheduler> = Arc::new(scheduler);
        let (transport, receiver) = match crate::guard::catch(move || {
            let receiver = transport.receiver();
            (transport, receiver)
        }) {
            Ok(both) => both,
            Err(panic) => return Err(transport_panicked(&panic)),
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(MuxState {
                ledger: Ledger::new(config, self.classes as usize),
                plumbing: ids::id_map(),
                released: false,
            }),
            worker: OnceLock::new(),
            clock: clock.clone(),
            receiver,
            broken: OnceLock::new(),
            staging,
            max_channels: self.max_channels,
            classes: self.classes,
        });
        let (returned, spares) = transport::spares();
        let frames = Frames::new(shared.clone(), clock, spares);
        let demux = Demux::new(shared.clone(), returned);
        // The owner first: if the transport panics, dropping it releases the mux
        // as the last handle's drop does (a worker the transport started ends it).
        let owner = Arc::new(MuxOwner { shared });
        match crate::guard::catch(move || transport.connect(frames, demux)) {
            Ok(()) => Ok(Mux { owner }),
            Err(panic) => {
                drop(owner);
                Err(transport_panicked(&panic))
            }
        }
    }

    /// A mux over the in-process transport: the worker on `scheduler`, the lane of
    /// [`lane`](Self::lane) frames into a demultiplexer on `receiver`, which is also
    /// where every channel's subscriber runs.
    pub fn build_local<C, R>(self, scheduler: C, receiver: R) -> Result<Mux<T>, MuxError>
    where
        C: Scheduler + Clone,
        R: Scheduler + Clone,
    {
        // Checked before the lane is made (`Local::new` panics on a bad size).
        self.validate()?;
        let lane = self.lane;
        self.build(scheduler, Local::new(receiver, lane))
    }
}

/// Many channels over one transport, each with credit of its own. See the
/// [module docs](self).
///
/// Cloning gives another handle to the same mux. Once every handle is gone and
/// every channel has closed, the worker ends the transport (it completes), and the
/// mux's worker, lane and demultiplexer are released; channels still open when the
/// last handle goes keep working until they close.
pub struct Mux<T> {
    owner: Arc<MuxOwner<T>>,
}

/// What the handles of one mux share: dropped with the last one.
struct MuxOwner<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Drop for MuxOwner<T> {
    fn drop(&mut self) {
        self.shared.release();
    }
}

impl<T> Clone for Mux<T> {
    fn clone(&self) -> Self {
        Mux {
            owner: self.owner.clone(),
        }
    }
}

impl<T> fmt::Debug for Mux<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mux").finish_non_exhaustive()
    }
}

impl<T: Send + 'static> Mux<T> {
    /// A builder with the defaults: `E` 32, `S` 128, `C` 32, quantum 16, one class.
    pub fn builder() -> MuxBuilder<T> {
        MuxBuilder::default()
    }

    /// Open channel `id` (weight 1, class 0 unless set on the returned options).
    pub fn channel(&self, id: ChannelId) -> ChannelOptions<T> {
        ChannelOptions {
            mux: self.clone(),
            id,
            weight: 1,
            class: 0,
        }
    }

    /// A snapshot of the mux's credit and of every open channel.
    pub fn stats(&self) -> MuxStats {
        let shared = &self.owner.shared;
        let now = shared.clock.now();
        let state = shared.lock();
        let mut stats = state.ledger.stats(now);
        // Backlog the sinks have not reported yet (see the ledger's docs).
        for (id, channel) in &mut stats.channels {
            if let Some(plumbing) = state.plumbing.get(id) {
                channel.backlog += plumbing.unreported();
            }
        }
        stats
    }
}

/// Opens one channel of a [`Mux`]: [`Mux::channel`].
#[derive(Debug)]
#[must_use = "channel options do nothing until opened"]
pub struct ChannelOptions<T> {
    mux: Mux<T>,
    id: ChannelId,
    weight: u64,
    class: u8,
}

impl<T: Send + 'static> ChannelOptions<T> {
    /// The channel's share of the worker's turns relative to its siblings (default 1;
    /// a channel of weight 2 sends twice the items per turn).
    pub fn weight(mut self, weight: u64) -> Self {
        self.weight = weight;
        self
    }

    /// The channel's priority class (default 0, served first); below the mux's
    /// [`classes`](MuxBuilder::classes).
    pub fn class(mut self, class: u8) -> Self {
        self.class = class;
        self
    }

    /// Open the channel: its sending end (subscribe a publisher to it) and its
    /// receiving end (subscribe the consumer to it).
    pub fn open(self) -> Result<(ChannelSink<T>, ChannelSource<T>), MuxError> {
        let shared = &self.mux.owner.shared;
        if self.weight == 0 || self.weight > MAX_CAPACITY as u64 {
            return Err(refuse(
                "weight",
                format!("{} is not in 1..=2^30", self.weight),
            ));
        }
        if self.class >= shared.classes {
            return Err(refuse(
                "class",
                format!(
                    "{} is not below the mux's {} classes",
                    self.class, shared.classes
                ),
            ));
        }
        let now = shared.clock.now();
        let mut state = shared.lock();
        if state.plumbing.contains_key(&self.id) {
            return Err(MuxError::ChannelInUse(self.id));
        }
        if state.plumbing.len() >= shared.max_channels {
            return Err(MuxError::TooManyChannels {
                max: shared.max_channels,
            });
        }
        let config = *state.ledger.config();
        let opened = state.ledger.open(self.id, self.weight, self.class, now);
        debug_assert!(opened, "the plumbing and the ledger agree on open ids");
        let window = (config.exclusive + config.borrow_cap) as usize;
        let (plumbing, sink, source) = Plumbing::open(self.id, shared, window);
        state.plumbing.insert(self.id, plumbing);
        Ok((sink, source))
    }
}

/// The event of a channel that closed (debug, target `weir::mux`): its final
/// figures. Once per channel, without the mux's lock.
fn log_closed(channel: ChannelId, stats: &ChannelStats) {
    tracing::debug!(
        target: "weir::mux",
        channel,
        delivered = stats.delivered,
        dropped = stats.dropped,
        frames = stats.frames,
        "mux channel closed; its credit is back"
    );
}

/// What every part of one mux shares.
pub(crate) struct Shared<T> {
    state: Mutex<MuxState<T>>,
    /// The worker's core, once the transport subscribed to its frames.
    worker: OnceLock<Weak<dyn CoreHandle>>,
    /// The worker's scheduler; also the mux's clock.
    clock: Arc<dyn Scheduler>,
    /// Where receiving channels run.
    receiver: Arc<dyn Scheduler>,
    /// Set once the transport stopped: every channel ends with this error.
    broken: OnceLock<crate::Error>,
    /// Items a sending channel asks its upstream for ahead.
    staging: usize,
    max_channels: usize,
    classes: u8,
}

/// The ledger and each open channel's plumbing, under one lock.
pub(crate) struct MuxState<T> {
    pub(crate) ledger: Ledger,
    pub(crate) plumbing: ids::IdMap<Arc<Plumbing<T>>>,
    /// Every [`Mux`] handle is gone: no channel can open any more.
    released: bool,
}

impl<T> MuxState<T> {
    /// Remove `channel` from the ledger and drop its plumbing. Returns whether the
    /// worker has something to do (freed credit may make another channel ready, or
    /// that was the last channel of a mux whose handles are gone: the worker then
    /// ends), and the channel's final statistics if it was open, for the caller to
    /// log ([`log_closed`]) once the lock is let go.
    pub(crate) fn close(
        &mut self,
        channel: ChannelId,
        now: Instant,
    ) -> (bool, Option<ChannelStats>) {
        if let Some(plumbing) = self.plumbing.remove(&channel) {
            // Its window refuses frames from now on: a demultiplexer that still knows
            // the plumbing learns that the channel closed (and looks the id up again).
            plumbing.close_window();
        }
        let closed = self.ledger.close(channel, now);
        let freed = closed.as_ref().is_some_and(|(_, wake)| *wake);
        (freed || self.is_finished(), closed.map(|(stats, _)| stats))
    }

    /// No handle is left and no channel is open: the worker ends the transport.
    pub(crate) fn is_finished(&self) -> bool {
        self.released && self.plumbing.is_empty()
    }
}

impl<T> Shared<T> {
    pub(crate) fn lock(&self) -> crate::loom::MutexGuardOf<'_, MuxState<T>> {
        // Nothing runs user code under this lock, so it is never poisoned; recover
        // anyway rather than propagate a panic.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// [`lock`](Self::lock) for the lock's two busiest holders, the worker's turns and
    /// the demultiplexer's settlement of a batch: poll the lock a moment (the crate's
    /// one bounded wait) before blocking on it. A settlement holds it for a whole
    /// batch of channels, longer than std's own short spin, and a worker that then
    /// slept in the kernel cost the receiver a futex wake-up at every unlock (with 256
    /// busy channels, a tenth of the receiving thread's samples went to waking the
    /// worker).
    pub(crate) fn lock_polling(&self) -> crate::loom::MutexGuardOf<'_, MuxState<T>> {
        let mut guard = None;
        crate::runtime::backoff::Backoff::wait(|| match self.state.try_lock() {
            Ok(state) => {
                guard = Some(state);
                true
            }
            Err(std::sync::TryLockError::Poisoned(p)) => {
                guard = Some(p.into_inner());
                true
            }
            Err(std::sync::TryLockError::WouldBlock) => false,
        });
        guard.unwrap_or_else(|| self.lock())
    }

    pub(crate) fn now(&self) -> Instant {
        self.clock.now()
    }

    pub(crate) fn receiver(&self) -> Arc<dyn Scheduler> {
        self.receiver.clone()
    }

    /// True on the receiving scheduler's only thread: channels' passes run there.
    pub(crate) fn on_sole_receiver(&self) -> bool {
        self.receiver.current_thread_is_sole_worker()
    }

    /// The error every channel ends with once the transport stopped.
    pub(crate) fn broken(&self) -> Option<crate::Error> {
        self.broken.get().cloned()
    }

    /// `n` items of `channel` that were sent (their credit taken) will never be
    /// delivered: give their credit back, and close a cancelled channel once nothing
    /// of it is left.
    pub(crate) fn give_back(&self, channel: ChannelId, n: u64) {
        let now = self.now();
        let (wake, closed) = {
            let mut state = self.lock();
            let mut wake = state.ledger.dropped(channel, n, now);
            let mut closed = None;
            if !state.ledger.is_open(channel) && state.ledger.buffered(channel) == Some(0) {
                let (freed, stats) = state.close(channel, now);
                wake |= freed;
                closed = stats;
            }
            (wake, closed)
        };
        if let Some(stats) = closed {
            log_closed(channel, &stats);
        }
        if wake {
            self.wake_worker();
        }
    }

    /// The transport stopped: end every channel with `error` and cancel every
    /// sending upstream.
    pub(crate) fn break_with(&self, error: crate::Error) {
        if self.broken.set(error).is_err() {
            return;
        }
        let channels: Vec<_> = self.lock().plumbing.values().cloned().collect();
        if channels.is_empty() {
            // The transport's normal end: the worker completed its frames once the
            // last handle and the last channel were gone.
            tracing::debug!(target: "weir::mux", "mux transport ended; no channel was open");
        } else {
            // Once per mux, and every open channel fails with it: info.
            tracing::info!(
                target: "weir::mux",
                error = self.broken.get().map(tracing::field::display),
                channels = channels.len(),
                "mux transport stopped; every open channel ends with its error"
            );
        }
        for plumbing in channels {
            plumbing.cancel_upstream();
            plumbing.wake_source();
        }
    }

    /// The last [`Mux`] handle is gone: once no channel is open, the worker ends.
    fn release(&self) {
        let finished = {
            let mut state = self.lock();
            state.released = true;
            state.is_finished()
        };
        if finished {
            self.wake_worker();
        }
    }

    /// Wake the worker (a ledger change made a channel ready).
    pub(crate) fn wake_worker(&self) {
        if let Some(worker) = self.worker.get().and_then(Weak::upgrade) {
            worker.signal();
        }
    }
}
