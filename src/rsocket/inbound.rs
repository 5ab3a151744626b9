//! The receiving side of a stream: [`PayloadStream`], a publisher on the engine room's
//! signal core, and its [`Inbox`], which the connection's reader fills.
//!
//! # Credit
//!
//! The inbox counts what the peer may still send (`granted`) and what it holds
//! (`items`); together they are what this side let in ahead of delivery. On a request
//! of the subscriber, and after each batch delivered, the grant is brought up to
//! `min(demand, window)` once that count fell to a quarter of the window (or when the
//! subscriber wants fewer items than that): the first grant opens the stream (the
//! request frame carries it as `initial_n`), later ones are `REQUEST_N` frames. The
//! peer therefore never holds more than `window` units, the buffer never more than
//! it granted, and a PAYLOAD beyond the grant is the peer breaking rule 1.1: the
//! stream fails with that error and the peer gets CANCEL (ERROR on a channel this
//! side answers). A request-response grants one unit and no more. Items a pass took
//! count as held until the batch is delivered: downstream's demand counts them until
//! then, and a request made meanwhile (from inside `on_next`, or from another
//! thread that saw an item) must not be granted twice. Items a cancel left
//! undelivered stay counted (the demand still counts them), and a stopped stage
//! grants nothing.
//!
//! # Delivery
//!
//! Passes run on the connection's tokio runtime (a task per pass loop, never the
//! reader's task): a pass takes `min(demand, buffered)` items, delivers them as one
//! batch, grants again, and delivers the end once the buffer is empty.
//! Cancelling (or a panicking subscriber, or a runtime that shut down) drops the
//! buffer and sends CANCEL when the stream is still open.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use super::conn::{Conn, SendSide};
use super::fragment::Lead;
use super::frame::{Payload, MAX_U31};
use super::outbound::Outbound;
use crate::demand::AtomicDemand;
use crate::runtime::Scheduler;
use crate::stage::core::Drive;
use crate::stage::{Core, CoreHandle, Cx, Pass, Stage};
use crate::{BoxPublisher, Error, Publisher, Subscriber};

/// Items one pass delivers before it yields its task.
const PASS_BUDGET: usize = 4096;

/// How a stream this side requests is opened, at its subscriber's first request.
enum Opening {
    Response(Payload),
    Stream(Payload),
    /// The outgoing publisher; its first item travels in the REQUEST_CHANNEL frame.
    Channel(BoxPublisher<Payload>),
}

struct InboxState {
    /// The stream's id once it is open (0 before).
    stream: u32,
    /// How to open it, until it is open.
    opening: Option<Opening>,
    items: VecDeque<Payload>,
    /// Items taken by a pass and being delivered: downstream's demand counts them
    /// until the batch is settled, so grants count them as held.
    delivering: u64,
    /// How the stream ended, delivered after the items.
    end: Option<Result<(), Error>>,
    /// Units the peer may still send.
    granted: u64,
    /// Every grant so far, summed (saturating at 2^31 − 1: unbounded).
    granted_total: u64,
    /// One item, then the end (a response).
    single: bool,
    /// The peer's side ended (terminal received, or refused): no more grants.
    done: bool,
}

/// A stream's receive buffer and credit, shared by the reader and the subscriber's
/// stage.
pub(crate) struct Inbox {
    conn: Arc<Conn>,
    state: Mutex<InboxState>,
    /// The stage to signal when items arrive, while subscribed.
    target: Mutex<Option<Arc<dyn CoreHandle>>>,
}

impl Inbox {
    fn new(conn: Arc<Conn>, state: InboxState) -> Arc<Self> {
        Arc::new(Inbox {
            conn,
            state: Mutex::new(state),
            target: Mutex::new(None),
        })
    }

    fn lock(&self) -> MutexGuard<'_, InboxState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The receiving side of a channel the peer opened: `first` came with the
    /// request (it needs no credit).
    pub(crate) fn accepted(
        conn: Arc<Conn>,
        stream: u32,
        first: Payload,
        complete: bool,
    ) -> Arc<Self> {
        Inbox::new(
            conn,
            InboxState {
                stream,
                opening: None,
                items: VecDeque::from([first]),
                delivering: 0,
                end: complete.then_some(Ok(())),
                granted: 0,
                granted_total: 0,
                single: false,
                done: complete,
            },
        )
    }

    fn signal(&self) {
        let target = self
            .target
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(target) = target {
            target.signal();
        }
    }

    /// PAYLOAD frames from the peer, in order: `items` those with NEXT, `complete`
    /// when the last one ended the stream. Taken under one lock and signalled once.
    pub(crate) fn receive(&self, items: impl ExactSizeIterator<Item = Payload>, complete: bool) {
        let outcome = {
            let mut state = self.lock();
            if state.done {
                // Late frames after a cancel or a refusal.
                return;
            }
            let count = items.len() as u64;
            let over_sent = if state.single {
                // A response: its first item ends it; later ones are dropped as late
                // frames, however the reads grouped them.
                state.items.extend(items.take(1));
                false
            } else if state.granted_total >= u64::from(MAX_U31) {
                state.items.extend(items);
                false
            } else {
                let taken = count.min(state.granted);
                state.granted -= taken;
                state.items.extend(items.take(taken as usize));
                taken < count
            };
            let finished = !over_sent && (complete || state.single);
            if finished {
                state.done = true;
                state.end = Some(Ok(()));
            }
            (over_sent, finished, state.stream)
        };
        match outcome {
            (true, _, stream) => self.conn.refuse(
                stream,
                Error::spec_violation(
                    "1.1",
                    "rsocket: the peer sent more PAYLOAD frames than this side granted \
                     with REQUEST_N",
                ),
            ),
            (false, finished, stream) => {
                if finished {
                    self.conn.recv_done(stream);
                }
                self.signal();
            }
        }
    }

    /// The stream ends with `error` (the peer's ERROR, a refusal, the connection's
    /// end). `cancel`: tell the peer (this side gives up).
    pub(crate) fn fail(&self, error: Error, cancel: bool) {
        let stream = {
            let mut state = self.lock();
            if state.done {
                return;
            }
            state.done = true;
            state.end = Some(Err(error));
            state.stream
        };
        if cancel && stream != 0 {
            self.conn.cancel_recv(stream);
        } else if stream != 0 {
            self.conn.recv_done(stream);
        }
        self.signal();
    }

    /// The connection ended (or is closing) before this stream opened: fail it,
    /// unless it opened meanwhile (the opening happens under this lock, so a stream
    /// is either opened, and the connection fails it as one of its streams, or failed
    /// here) or has already ended. The request it would have sent is dropped after
    /// the lock (a channel's outgoing publisher is user code).
    pub(crate) fn fail_unopened(&self, error: Error) {
        let opening = {
            let mut state = self.lock();
            if state.done || state.opening.is_none() {
                return;
            }
            state.done = true;
            state.end = Some(Err(error));
            state.opening.take()
        };
        drop(opening);
        self.signal();
    }

    /// Bring the grant up to what `demand` and the window allow (see the module
    /// docs); opens the stream on the first grant.
    ///
    /// `demand` is read under the inbox's lock, never before it: a pass settles a
    /// batch (downstream's demand drops by it) and only then clears `delivering`
    /// under this lock, so a read made here sees the batch in both, or in
    /// `delivering` alone (an under-grant, which the pass's own grant after
    /// settling makes up), never in the demand alone. A value read before taking
    /// the lock could predate the settling while `delivering` no longer counted the
    /// batch: the batch was granted again, beyond what downstream asked for.
    fn grant(self: &Arc<Self>, demand: &AtomicDemand) {
        let mut channel = None;
        // A channel's outgoing publisher that could not be opened: dropped after the
        // lock (its `Drop` is user code, and may call this stream).
        let mut refused = None;
        let failed = {
            let mut state = self.lock();
            if state.done || (state.single && state.opening.is_none()) {
                return;
            }
            if state.granted_total >= u64::from(MAX_U31) {
                return;
            }
            let demand = demand.get();
            let window = u64::from(self.conn.config.window);
            let ahead = state.granted + state.items.len() as u64 + state.delivering;
            let unmet = demand.saturating_sub(ahead);
            let room = window.saturating_sub(ahead);
            let n = unmet.min(room);
            if n == 0 || (ahead > window / 4 && n < unmet) {
                return;
            }
            let n = if state.single { 1 } else { n };
            let n32 = u32::try_from(n).unwrap_or(MAX_U31).min(MAX_U31);
            let n = u64::from(n32);
            let result = match state.opening.take() {
                None => {
                    self.conn.grant(state.stream, n32);
                    Ok(())
                }
                Some(Opening::Response(payload)) => self
                    .conn
                    .open(Some(self.clone()), None, Lead::Response, payload)
                    .map(|id| state.stream = id),
                Some(Opening::Stream(payload)) => self
                    .conn
                    .open(
                        Some(self.clone()),
                        None,
                        Lead::Stream { initial_n: n32 },
                        payload,
                    )
                    .map(|id| state.stream = id),
                Some(Opening::Channel(outgoing)) => {
                    // The opening request goes out with the outgoing publisher's
                    // first item: one unit of credit for it, implied by the protocol.
                    let send = SendSide::new(
                        1,
                        false,
                        Some(Lead::Channel {
                            initial_n: n32,
                            complete: false,
                        }),
                    );
                    match self.conn.register(self.clone(), send) {
                        Ok(id) => {
                            state.stream = id;
                            channel = Some((outgoing, id));
                            Ok(())
                        }
                        Err(error) => {
                            refused = Some(outgoing);
                            Err(error)
                        }
                    }
                }
            };
            match result {
                Ok(()) => {
                    state.granted += n;
                    state.granted_total = (state.granted_total + n).min(u64::from(MAX_U31));
                    None
                }
                Err(error) => {
                    state.done = true;
                    state.end = Some(Err(error));
                    Some(())
                }
            }
        };
        drop(refused);
        if failed.is_some() {
            self.signal();
        }
        if let Some((outgoing, id)) = channel {
            outgoing.subscribe(Outbound::new(self.conn.clone(), id));
        }
    }
}

/// The items of a stream the peer sends: what a request returns
/// ([`Client::request_stream`](super::Client::request_stream) and the others), and
/// what a [`Handler`](super::Handler) answering a channel receives.
///
/// Its subscriber's `request(n)` is the only credit the peer gets (see the
/// [module docs](super)): at most [`Config::window`](super::Config::window) items
/// ahead of delivery, the first grant with the request frame (a stream this side
/// requests is opened at the subscriber's first `request`, not at `subscribe`; on a
/// connection that is already over or closing it fails at `subscribe`, and when the
/// connection ends or starts closing before that first `request`, it fails without
/// one), then `REQUEST_N` at the low-water mark. The subscriber runs on the
/// connection's tokio runtime. A peer's ERROR arrives as an error whose source is a
/// [`RemoteError`](super::RemoteError); the connection's end, as the error it ended
/// with. One subscription: `subscribe` consumes it. Dropped unsubscribed, it cancels
/// the stream.
#[must_use = "publishers do nothing until subscribed"]
pub struct PayloadStream {
    conn: Arc<Conn>,
    /// `Some` until subscribed.
    start: Option<Start>,
}

enum Start {
    /// A stream to open at the first request.
    Request(Opening),
    /// A stream the peer opened (a channel this side answers).
    Accepted(Arc<Inbox>),
}

impl std::fmt::Debug for PayloadStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PayloadStream").finish_non_exhaustive()
    }
}

impl PayloadStream {
    pub(crate) fn response(conn: Arc<Conn>, request: Payload) -> Self {
        Self::request(conn, Opening::Response(request))
    }

    pub(crate) fn stream(conn: Arc<Conn>, request: Payload) -> Self {
        Self::request(conn, Opening::Stream(request))
    }

    pub(crate) fn channel(conn: Arc<Conn>, outgoing: BoxPublisher<Payload>) -> Self {
        Self::request(conn, Opening::Channel(outgoing))
    }

    fn request(conn: Arc<Conn>, opening: Opening) -> Self {
        PayloadStream {
            conn,
            start: Some(Start::Request(opening)),
        }
    }

    pub(crate) fn accepted(inbox: Arc<Inbox>) -> Self {
        PayloadStream {
            conn: inbox.conn.clone(),
            start: Some(Start::Accepted(inbox)),
        }
    }
}

impl Drop for PayloadStream {
    fn drop(&mut self) {
        if let Some(Start::Accepted(inbox)) = self.start.take() {
            inbox.fail(Error::cancelled(), true);
        }
    }
}

impl Publisher for PayloadStream {
    type Item = Payload;

    fn subscribe<S>(mut self, subscriber: S)
    where
        S: Subscriber<Payload> + Send + 'static,
    {
        let inbox = match self
            .start
            .take()
            .expect("subscribed once: subscribe consumes")
        {
            Start::Accepted(inbox) => inbox,
            Start::Request(opening) => {
                let single = matches!(opening, Opening::Response(_));
                let inbox = Inbox::new(
                    self.conn.clone(),
                    InboxState {
                        stream: 0,
                        opening: Some(opening),
                        items: VecDeque::new(),
                        delivering: 0,
                        done: false,
                        end: None,
                        granted: 0,
                        granted_total: 0,
                        single,
                    },
                );
                // The connection's end reaches the stream before its first request
                // (rule 1.4: without waiting for a request that could not be sent);
                // on a connection that is over or closing it fails at once.
                if let Err(error) = self.conn.track_unopened(&inbox) {
                    inbox.fail_unopened(error);
                }
                inbox
            }
        };
        let core: Arc<Core<StreamReceive, S>> = Core::new(StreamReceive {
            inbox: inbox.clone(),
            scheduler: self.conn.scheduler.clone(),
        });
        // One pass even without a request: the stream may have ended already.
        core.attach_then(Vec::new(), subscriber, |core| {
            *inbox.target.lock().unwrap_or_else(|p| p.into_inner()) = Some(core.clone());
            core.signal();
        });
    }

    /// The window: what the peer may send ahead of delivery.
    fn in_flight_bound(&self) -> u64 {
        u64::from(self.conn.config.window)
    }
}

/// The receiving stage.
struct StreamReceive {
    inbox: Arc<Inbox>,
    scheduler: crate::runtime::Tokio,
}

impl Stage for StreamReceive {
    const NAME: &'static str = "rsocket stream";
    type Item = Payload;
    /// The batch being delivered (kept between passes for its allocation).
    type Owned = Vec<Payload>;
    type Padding = ();

    fn drive(&self) -> Drive<'_> {
        Drive::Scheduled {
            on: &self.scheduler as &dyn Scheduler,
            linger: false,
        }
    }

    fn pass<S: Subscriber<Payload>>(
        &self,
        cx: &Cx<'_>,
        batch: &mut Vec<Payload>,
        downstream: &mut S,
    ) -> Pass {
        let mut delivered = 0usize;
        loop {
            if cx.stopped() {
                return Pass::Idle;
            }
            if delivered >= PASS_BUDGET {
                return Pass::Yield;
            }
            let wanted = cx.demand().get();
            let end = {
                let mut state = self.inbox.lock();
                let n = usize::try_from(wanted)
                    .unwrap_or(usize::MAX)
                    .min(state.items.len())
                    .min(PASS_BUDGET);
                batch.extend(state.items.drain(..n));
                state.delivering = n as u64;
                if state.items.is_empty() {
                    state.end.take()
                } else {
                    None
                }
            };
            if let Some(end) = end {
                if !batch.is_empty() {
                    let _ = cx.deliver(downstream, batch.drain(..));
                }
                return cx.terminate(downstream, end);
            }
            if batch.is_empty() {
                return Pass::Idle;
            }
            let taken = batch.len() as u64;
            delivered += batch.len();
            // Items a cancelling subscriber leaves in the batch are dropped with it.
            let (sent, _) = cx.deliver(downstream, batch.drain(..));
            // Settled: downstream's demand no longer counts what went out. What a
            // cancel left undelivered (the whole batch when it landed between the take
            // and the delivery) the demand still counts: it stays counted as held, or
            // a grant would ask the peer for it again.
            self.inbox.lock().delivering = taken - sent;
            if cx.stopped() {
                // The core stops the stage next: no more credit for the peer.
                return Pass::Idle;
            }
            self.inbox.grant(cx.demand());
        }
    }

    fn on_request(&self, _n: u64, demand: &AtomicDemand) {
        self.inbox.grant(demand);
    }

    fn stop(&self, batch: &mut Vec<Payload>) {
        batch.clear();
        *self.inbox.target.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.inbox.fail(Error::cancelled(), true);
        // The buffer, and a channel's outgoing publisher when the stream never
        // opened (its source may hold items): dropped with the lock released, since
        // dropping them runs user code.
        let held = {
            let mut state = self.inbox.lock();
            (std::mem::take(&mut state.items), state.opening.take())
        };
        drop(held);
    }
}
