//! The receiving end of a channel: a stage on the signal core, driven on the
//! receiving scheduler.
//!
//! The demultiplexer writes the channel's frames into the receive window (a
//! single-producer ring of `E + C` slots: credit guarantees the room) and signals the
//! core. A pass delivers `min(demand, queued)` items in one batch, gives their credit
//! back to the ledger (waking the worker when that made a channel ready; a pass the
//! demultiplexer runs in place leaves that to the demultiplexer, which settles its
//! whole batch of passes under one lock), and, once
//! the window is empty and every item the sender staged before its end was delivered,
//! signals that end. Downstream's `request(n)` goes to the ledger as the channel's
//! demand before the pass it triggers. When the subscription ends for any reason
//! (completion, cancel, a panicking subscriber, a scheduler that dropped the task),
//! `stop` drops what the window holds, gives the channel's credit back and cancels the
//! sending upstream, and the channel closes once nothing of it is left on the
//! transport.

use std::sync::Arc;

use crate::demand::AtomicDemand;
use crate::queue::spsc::Consumer;
use crate::runtime::Scheduler;
use crate::stage::core::Drive;
use crate::stage::{Core, Cx, Pass, Stage};
use crate::{Publisher, Subscriber};

use super::sink::Plumbing;
use super::stats::ChannelStats;
use super::{ChannelId, Shared};

/// Items one pass delivers before it yields its task.
const PASS_BUDGET: u64 = 16 * 1024;

/// The receiving end of one channel of a [`Mux`](super::Mux): a [`Publisher`] of the
/// items its [`ChannelSink`](super::ChannelSink) was given, in order.
///
/// Its subscriber's `request(n)` is the only source of the channel's credit: the
/// channel never sends more than was requested, and never more than its credit ahead
/// of delivery. It completes (or fails) after the last item the sending side staged
/// before it ended. It runs its subscriber on the mux's receiving scheduler. One
/// subscription: `subscribe` consumes it. Dropped without being subscribed, it lets
/// go of the channel as a cancel would: the sending publisher is cancelled, the
/// channel's credit returns, and its id can be opened again once the channel closed.
#[must_use = "publishers do nothing until subscribed"]
pub struct ChannelSource<T> {
    shared: Arc<Shared<T>>,
    plumbing: Arc<Plumbing<T>>,
    /// The receive window's reading end; `None` once subscribed (a source dropped
    /// with it lets go of the channel, as a cancel would).
    window: Option<Consumer<T>>,
    /// What the sending publisher may hold in flight, when known (`via`).
    upstream_bound: u64,
    /// Listed in a registry while subscribed under this name ([`named`](Self::named)).
    name: Option<Arc<str>>,
    /// Where (`None`: the global registry).
    registry: Option<crate::metrics::Registry>,
}

impl<T> std::fmt::Debug for ChannelSource<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelSource")
            .field("channel", &self.plumbing.id)
            .finish_non_exhaustive()
    }
}

impl<T: Send + 'static> ChannelSource<T> {
    pub(crate) fn new(
        shared: Arc<Shared<T>>,
        plumbing: Arc<Plumbing<T>>,
        window: Consumer<T>,
    ) -> Self {
        ChannelSource {
            shared,
            plumbing,
            window: Some(window),
            upstream_bound: 0,
            name: None,
            registry: None,
        }
    }

    /// List this channel's receiving end in the
    /// [`Registry`](crate::metrics::Registry) while it is subscribed (the global one
    /// unless [`registry`](Self::registry) picks another), with its figures: items
    /// waiting for it (staged at its sender, or sent and not yet delivered), its
    /// sender's time without credit, stalled or not
    /// (a [`StageSnapshot::channel`](crate::metrics::StageSnapshot::channel)).
    ///
    /// ```
    /// use weir::metrics::Registry;
    /// use weir::mux::Mux;
    /// use weir::prelude::*;
    /// use weir::runtime::Immediate;
    ///
    /// let registry = Registry::new();
    /// let mux = Mux::<u32>::builder().build_local(Immediate, Immediate).unwrap();
    /// let (sink, source) = mux.channel(1).open().unwrap();
    /// weir::range(0u32..10).subscribe(sink);
    /// let items = source.named("orders").registry(&registry).blocking_iter(4);
    /// let listed = registry.snapshot();
    /// assert!(listed.stage("orders").unwrap().channel.is_some(), "{listed}");
    /// assert_eq!(items.count(), 10);
    /// assert!(registry.is_empty());
    /// ```
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into().into());
        self
    }

    /// List a [named](Self::named) channel in `registry` instead of the global one.
    pub fn registry(mut self, registry: &crate::metrics::Registry) -> Self {
        self.registry = Some(registry.clone());
        self
    }

    /// The sending publisher's in-flight bound, added to this one's.
    pub(crate) fn with_upstream_bound(mut self, bound: u64) -> Self {
        self.upstream_bound = bound;
        self
    }

    /// The channel's id.
    pub fn channel(&self) -> ChannelId {
        self.plumbing.id
    }

    /// The channel's statistics now (`None` once it closed).
    pub fn stats(&self) -> Option<ChannelStats> {
        stats_of(&self.shared, &self.plumbing)
    }
}

/// A channel's statistics now (`None` once it closed).
fn stats_of<T: Send + 'static>(shared: &Shared<T>, plumbing: &Plumbing<T>) -> Option<ChannelStats> {
    let now = shared.now();
    let mut stats = shared.lock().ledger.channel_stats(plumbing.id, now)?;
    // Backlog the sink has not reported yet (see the ledger's docs).
    stats.backlog += plumbing.unreported();
    Some(stats)
}

impl<T: Send + 'static> Publisher for ChannelSource<T> {
    type Item = T;

    fn subscribe<S>(mut self, subscriber: S)
    where
        S: Subscriber<T> + Send + 'static,
    {
        let items = self.window.take().expect("a source is subscribed once");
        let registration = self.name.clone().map(|name| {
            let (shared, plumbing) = (Arc::downgrade(&self.shared), Arc::downgrade(&self.plumbing));
            let read: crate::metrics::ReadChannel = Arc::new(move || {
                let (shared, plumbing) = (shared.upgrade()?, plumbing.upgrade()?);
                stats_of(&shared, &plumbing)
            });
            self.registry
                .as_ref()
                .unwrap_or(crate::metrics::Registry::global())
                .enter_channel(name, self.in_flight_bound(), read)
        });
        let scheduler = self.shared.receiver();
        let plumbing = self.plumbing.clone();
        let core: Arc<Core<ChannelReceive<T>, S>> = Core::new(ChannelReceive {
            shared: self.shared.clone(),
            plumbing: self.plumbing.clone(),
            scheduler,
        });
        let window = WindowReader {
            items,
            delivered: 0,
            registration,
        };
        // One pass even without a request: the sending side may have ended already
        // (an empty or failed publisher), and the end needs no demand.
        core.attach_then(window, subscriber, |core| {
            plumbing.set_source(Some(core.clone()));
            core.signal()
        });
    }

    /// The sending publisher's bound (when subscribed through `via`), the staging
    /// window and the receive window.
    fn in_flight_bound(&self) -> u64 {
        self.upstream_bound
            .saturating_add(self.shared.staging as u64)
            .saturating_add(self.window.as_ref().map_or(0, |w| w.capacity() as u64))
    }
}

/// The receiving stage.
struct ChannelReceive<T> {
    shared: Arc<Shared<T>>,
    plumbing: Arc<Plumbing<T>>,
    scheduler: Arc<dyn Scheduler>,
}

/// The receive window's reading end, owned by the drain.
struct WindowReader<T> {
    items: Consumer<T>,
    /// Items taken from the window so far (delivered, or dropped by a cancel inside
    /// the batch).
    delivered: u64,
    /// Its place in a registry, for a named channel (let go when it ends).
    registration: Option<crate::metrics::Registration>,
}

impl<T: Send + 'static> Stage for ChannelReceive<T> {
    const NAME: &'static str = "mux channel";
    type Item = T;
    type Owned = WindowReader<T>;
    type Padding = ();

    fn drive(&self) -> Drive<'_> {
        Drive::Scheduled {
            on: &*self.scheduler,
            linger: false,
        }
    }

    fn pass<S: Subscriber<T>>(
        &self,
        cx: &Cx<'_>,
        window: &mut WindowReader<T>,
        downstream: &mut S,
    ) -> Pass {
        let id = self.plumbing.id;
        let mut delivered = 0u64;
        loop {
            if cx.stopped() {
                return Pass::Idle;
            }
            if delivered >= PASS_BUDGET {
                return Pass::Yield;
            }
            let available = window.items.available() as u64;
            if available == 0 {
                // The end is recorded after the count of items staged before it; once
                // that many left the window, nothing of the channel is left anywhere.
                // The core's `stop` gives the credit back before the end goes
                // downstream: whoever sees the end (a `fold`'s `wait`) finds the pool
                // whole.
                // A sending upstream that broke the contract wins over its end.
                if let Some(error) = self.plumbing.failure() {
                    return cx.terminate(downstream, Err(error));
                }
                if self.plumbing.end() == Some(window.delivered) {
                    return cx.terminate(downstream, self.plumbing.take_end());
                }
                if let Some(error) = self.shared.broken() {
                    return cx.terminate(downstream, Err(error));
                }
                return Pass::Idle;
            }
            let wanted = cx.demand().get();
            if wanted == 0 {
                return Pass::Idle;
            }
            let n = available.min(wanted) as usize;
            let _ = cx.deliver(downstream, window.items.pop_batch(n));
            window.delivered += n as u64;
            delivered += n as u64;
            if self.plumbing.settling() {
                // The demultiplexer settles the credit of its whole batch at once.
                self.plumbing.defer(n as u64);
                continue;
            }
            let now = self.shared.now();
            let wake = {
                let mut state = self.shared.lock();
                // Read under the lock: see `Ledger::demand`.
                let outstanding = cx.demand().get();
                state
                    .ledger
                    .delivered_with_demand(id, n as u64, outstanding, now)
            };
            if wake {
                self.shared.wake_worker();
            }
        }
    }

    fn on_request(&self, _n: u64, demand: &AtomicDemand) {
        let now = self.shared.now();
        let wake = {
            let mut state = self.shared.lock();
            // Read under the lock: see `Ledger::demand`.
            let outstanding = demand.get();
            state.ledger.demand(self.plumbing.id, outstanding, now)
        };
        if wake {
            self.shared.wake_worker();
        }
    }

    fn stop(&self, window: &mut WindowReader<T>) {
        self.release(window);
    }
}

impl<T> Drop for ChannelSource<T> {
    /// Dropped unsubscribed: nobody will read the channel, so it is let go of as a
    /// cancel from the receiving side would (its sending upstream cancelled, its
    /// credit returned, its id free again once its frames are back).
    fn drop(&mut self) {
        if let Some(items) = self.window.take() {
            let receive = ChannelReceive {
                shared: self.shared.clone(),
                plumbing: self.plumbing.clone(),
                scheduler: self.shared.receiver(),
            };
            receive.release(&mut WindowReader {
                items,
                delivered: 0,
                registration: None,
            });
        }
    }
}

impl<T> ChannelReceive<T> {
    /// Let go of the channel: its registration, its sending upstream (if still
    /// there), what the window holds, and its credit, settled in the ledger (and the
    /// channel closed there once nothing of it is in flight).
    fn release(&self, window: &mut WindowReader<T>) {
        window.registration = None;
        self.plumbing.cancel_upstream();
        // Closed first: after it, the demultiplexer drops this channel's frames, so
        // the clear below leaves nothing behind.
        self.plumbing.close_window();
        // Every item the sender staged before its end was delivered: the stream
        // ended, nothing was cut short.
        let ended = self.plumbing.end() == Some(window.delivered);
        let dropped = window.items.clear() as u64;
        // Nothing will be delivered: let go of the core (it held itself through the
        // plumbing) and of what the sender staged.
        self.plumbing.set_source(None);
        let now = self.shared.now();
        let id = self.plumbing.id;
        let (wake, returned, in_flight, closed) = {
            let mut state = self.shared.lock();
            let pool_before = state.ledger.pool_free();
            // Delivered items whose credit an in-place pass left to the
            // demultiplexer: settled here, so that the checks below count them.
            let unsettled = self.plumbing.take_unsettled();
            let mut wake = state.ledger.delivered(id, unsettled, now);
            wake |= state.ledger.cancel(id, now);
            self.plumbing.park_closed();
            if dropped > 0 {
                wake |= state.ledger.dropped(id, dropped, now);
            }
            // Frames still on the transport come back through the demultiplexer,
            // which closes the channel when the last one arrives.
            let buffered = state.ledger.buffered(id);
            let in_flight = buffered.unwrap_or(0);
            let mut closed = None;
            if buffered == Some(0) {
                let (freed, stats) = state.close(id, now);
                wake |= freed;
                closed = stats;
            }
            let returned = state.ledger.pool_free().saturating_sub(pool_before);
            (wake, returned, in_flight, closed)
        };
        // The closest the mux has to a revocation (shared credit is never granted
        // ahead, so a stalled channel holds none unused): the receiving side gave
        // up before the end, and the channel's credit goes back. Once per channel,
        // without the lock.
        if !ended && self.shared.broken.get().is_none() {
            tracing::debug!(
                target: "weir::mux",
                channel = id,
                dropped,
                shared_returned = returned,
                in_flight,
                "mux channel cancelled by its receiving side: sends stop, its credit returns"
            );
        }
        if let Some(stats) = closed {
            super::log_closed(id, &stats);
        }
        // After the ledger's cancel: a sink that stages later drops its items itself.
        self.plumbing.drop_staged();
        if wake {
            self.shared.wake_worker();
        }
    }
}
