//! One RSocket connection: its streams, its reader task and its writer task.
//!
//! # State
//!
//! [`Conn`] holds, under one mutex, the open streams (by id), the queue of control
//! frames, the round-robin list of streams with data to send, and how the connection
//! ended. A stream's entry has a sending side ([`SendSide`]: the outbox that the local
//! publisher fills against the peer's credit) and a receiving side ([`Inbox`]: the
//! buffer the reader fills against the credit this side granted), either or both
//! (a channel has both). The entry goes once both sides are done.
//!
//! Lock order: an [`Inbox`]'s lock may be held while the connection's is taken,
//! never the other way round (the reader looks a stream up, lets the connection's
//! lock go, then locks the inbox). No lock is held while user code runs (a
//! publisher's `subscribe` or `request`, a handler, the operators that produce a
//! batch of items: [`Outbound`] collects a batch before it takes the lock).
//!
//! # Reader
//!
//! Reads length-prefixed frames (tokio-util's codec, limited to
//! [`Config::max_frame`]; after each frame the codec returns, the whole frames
//! already in its buffer are taken directly as one chunk, up to a batch of
//! [`READ_BATCH`]), decodes them, reassembles fragments and dispatches them in order
//! (a PAYLOAD that carries an item whole skips the decoder: its data is a slice of
//! the chunk, see [`Conn::read_chunk`]): consecutive
//! PAYLOADs of one stream go to its inbox together ([`Run`]), and any other frame
//! takes effect after the payloads before it. A
//! PAYLOAD to its stream's inbox (never waiting for a consumer: the credit this side
//! granted reserved the room), `REQUEST_N` to the sending side's credit, `CANCEL` and
//! `ERROR` to the stream, requests to the handler. A malformed frame closes the
//! connection with a `CONNECTION_ERROR`. It also keeps the connection alive: the
//! client sends `KEEPALIVE` each interval, and silence longer than the lifetime
//! closes the connection.
//!
//! # Writer
//!
//! Takes, under the lock, every control frame and then rounds of the ready streams
//! (deficit round robin, a quantum of bytes each), up to a budget of bytes; with the
//! lock released, asks the local publishers whose outbox fell to its low-water mark
//! for more (within the peer's credit) and encodes what it took (an item that
//! travels whole straight from its payload, see [`Out`]). A publisher that
//! answers inside `request` (a synchronous source) has put its items in the outbox
//! already: the writer takes them into the same write, up to the budget, unless what
//! it took holds a control frame (a grant or a cancel waits for no more than one
//! refill). Then it writes, and waits for the next wake-up when there is nothing to
//! send.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use futures::StreamExt as _;
use tokio::io::AsyncWriteExt as _;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio_util::codec::{FramedRead, LengthDelimitedCodec};

use super::fragment::{self, Assembly, AssemblyError, Lead};
use super::frame::{self, plain_next, Body, ErrorCode, Frame, Payload, HEADER_LEN, MAX_U31};
use super::inbound::{Inbox, PayloadStream};
use super::outbound::Outbound;
use super::server::Handler;
use super::{Config, RemoteError};
use crate::guard::{cancel_contained, catch, catch_in, subscribe_guarded};
use crate::runtime::Tokio;
use crate::{BoxPublisher, Error, Publisher, Subscription};

/// The name errors of this module carry.
const STAGE: &str = "rsocket";

/// Bytes of frames the writer takes in one turn of the lock.
const WRITE_BUDGET: usize = 64 * 1024;

/// A frame's length prefix on TCP.
const LENGTH_PREFIX: usize = 3;

/// The sending side of a stream.
pub(crate) struct SendSide {
    /// Items (and the end) waiting for the writer.
    outbox: VecDeque<Outgoing>,
    /// Credit the peer granted that no local request took yet.
    credit: u64,
    /// Every `REQUEST_N` so far, summed (saturating at 2^31 − 1).
    granted: u64,
    /// Asked of the local publisher, not delivered yet.
    requested: u64,
    /// The local publisher's subscription, once it subscribed.
    subscription: Option<Subscription>,
    /// In the writer's ready list.
    queued: bool,
    /// Bytes this stream may still send in the current round.
    deficit: usize,
    /// The first frame's kind when it is not a PAYLOAD (a channel's opening request).
    lead: Option<Lead>,
    /// One item, then complete (a response).
    single: bool,
    /// The local publisher ended (or was cancelled): no more items.
    ended: bool,
}

/// What the writer sends for a stream.
pub(crate) enum Outgoing {
    Item(Payload),
    Complete,
    Error(Error),
}

impl Outgoing {
    fn size(&self) -> usize {
        match self {
            Outgoing::Item(p) => p.data.len() + p.metadata.as_ref().map_or(0, |m| m.len() + 3) + 6,
            Outgoing::Complete | Outgoing::Error(_) => 6,
        }
    }
}

/// What the writer took to encode: an item travelling whole in one PAYLOAD frame
/// (the common case, encoded straight from its payload), or any other frame.
pub(crate) enum Out {
    /// A PAYLOAD with NEXT carrying `payload` whole on `stream`.
    Item {
        stream: u32,
        complete: bool,
        payload: Payload,
    },
    Frame(Frame),
}

impl Out {
    /// A frame other than a PAYLOAD (a grant, a cancel, a keepalive, an error, a
    /// request): it goes out without waiting for more refills.
    fn is_control(&self) -> bool {
        match self {
            Out::Item { .. } => false,
            Out::Frame(frame) => !matches!(frame.body, Body::Payload { .. }),
        }
    }

    /// Append it to `buf` with its length prefix.
    fn put(&self, buf: &mut BytesMut) -> Result<(), super::frame::FrameError> {
        match self {
            Out::Item {
                stream,
                complete,
                payload,
            } => {
                frame::put_next(buf, LENGTH_PREFIX, *stream, *complete, payload);
                Ok(())
            }
            Out::Frame(frame) => put_frame(buf, frame),
        }
    }
}

impl SendSide {
    /// A sending side holding `credit` from the start (a request's initial credit).
    pub(crate) fn new(credit: u32, single: bool, lead: Option<Lead>) -> Self {
        SendSide {
            outbox: VecDeque::new(),
            credit: u64::from(credit),
            granted: u64::from(credit),
            requested: 0,
            subscription: None,
            queued: false,
            deficit: 0,
            lead,
            single,
            ended: false,
        }
    }

    fn unbounded(&self) -> bool {
        self.granted >= u64::from(MAX_U31)
    }

    /// How many more items to ask of the local publisher now (taken from the
    /// credit): none while more than a quarter of the window is asked or waiting.
    fn refill(&mut self, window: u64) -> u64 {
        if self.ended || self.subscription.is_none() {
            return 0;
        }
        let held = self.requested + self.outbox.len() as u64;
        if held > window / 4 {
            return 0;
        }
        let room = window - held.min(window);
        let n = if self.unbounded() {
            room
        } else {
            room.min(self.credit)
        };
        if !self.unbounded() {
            self.credit -= n;
        }
        self.requested += n;
        n
    }

    fn grant(&mut self, n: u32) {
        self.granted = (self.granted + u64::from(n)).min(u64::from(MAX_U31));
        self.credit = self.credit.saturating_add(u64::from(n));
    }
}

/// A stream's two sides.
#[derive(Default)]
struct Entry {
    send: Option<SendSide>,
    recv: Option<Arc<Inbox>>,
}

struct ConnState {
    streams: HashMap<u32, Entry>,
    /// The id this side gives its next request.
    next_id: u32,
    control: VecDeque<Frame>,
    ready: VecDeque<u32>,
    /// How the connection ended (then every stream is gone).
    over: Option<Error>,
    /// No new requests; close once the last stream ended.
    closing: bool,
    /// Streams subscribed before their first request (not yet among `streams`), so
    /// that the connection's end reaches them without demand (rule 1.4). Weak: a
    /// stream dropped unrequested needs nothing; dead entries are pruned as the list
    /// doubles, and opened ones are skipped when it is used.
    unopened: Vec<Weak<Inbox>>,
    /// The length at which `unopened` is pruned next.
    prune_at: usize,
}

/// `ConnState::unopened` is pruned of dropped streams when it reaches this length
/// (then twice its length after the pruning).
const PRUNE_FLOOR: usize = 64;

/// Why no stream opens on a closing connection.
fn closing_error() -> Error {
    Error::msg("rsocket: the connection is closing")
}

/// Fail, with `error`, the streams of `unopened` that are alive and still unopened
/// (called without the connection's lock: an inbox's lock comes first).
fn fail_unopened(unopened: Vec<Weak<Inbox>>, error: &Error) {
    for inbox in unopened.iter().filter_map(Weak::upgrade) {
        inbox.fail_unopened(error.clone());
    }
}

/// What the reader, the writer, the streams and the handles share.
pub(crate) struct Conn {
    pub(crate) config: Config,
    state: Mutex<ConnState>,
    /// Wakes the writer (a permit is kept when it is not waiting).
    writer: Notify,
    /// Wakes the reader to stop.
    reader: Notify,
    /// Wakes whoever waits for the connection's end.
    ended: Notify,
    pub(crate) scheduler: Tokio,
    handler: Option<Arc<dyn Handler>>,
    /// Silence from the peer that ends the connection.
    lifetime: Duration,
    /// Send KEEPALIVE this often (the client).
    keepalive: Option<Duration>,
}

impl Conn {
    /// A connection's shared state. `client`: ids are odd and KEEPALIVE is sent.
    fn new(
        config: Config,
        handler: Option<Arc<dyn Handler>>,
        client: bool,
        lifetime: Duration,
        scheduler: Tokio,
    ) -> Arc<Self> {
        let keepalive = client.then_some(config.keepalive);
        Arc::new(Conn {
            config,
            state: Mutex::new(ConnState {
                streams: HashMap::new(),
                next_id: if client { 1 } else { 2 },
                control: VecDeque::new(),
                ready: VecDeque::new(),
                over: None,
                closing: false,
                unopened: Vec::new(),
                prune_at: PRUNE_FLOOR,
            }),
            writer: Notify::new(),
            reader: Notify::new(),
            ended: Notify::new(),
            scheduler,
            handler,
            lifetime,
            keepalive,
        })
    }

    fn lock(&self) -> MutexGuard<'_, ConnState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Start a connection on a socket's two halves: its reader and writer tasks on
    /// the current tokio runtime. `first` is sent before anything else (SETUP).
    pub(crate) fn start(
        (read, write): (Reader, OwnedWriteHalf),
        config: Config,
        handler: Option<Arc<dyn Handler>>,
        client: bool,
        lifetime: Duration,
        first: Option<Frame>,
    ) -> Arc<Conn> {
        let conn = Conn::new(config, handler, client, lifetime, Tokio::current());
        conn.lock().control.extend(first);
        tokio::spawn(write_loop(conn.clone(), write));
        tokio::spawn(read_loop(conn.clone(), read));
        conn
    }

    // ---- requests made by this side -------------------------------------------

    /// Open a stream this side requests: a fresh id, `recv` as its receiving side,
    /// `send` as its sending side (a channel), and the request (`lead`, `payload`)
    /// queued. Called with `recv`'s lock held (the lock order allows it).
    pub(crate) fn open(
        &self,
        recv: Option<Arc<Inbox>>,
        send: Option<SendSide>,
        lead: Lead,
        payload: Payload,
    ) -> Result<u32, Error> {
        self.open_with(recv, send, Some((lead, payload)))
    }

    /// Register a channel this side requests: its request goes out with the first
    /// item of `send` (whose `lead` is the REQUEST_CHANNEL).
    pub(crate) fn register(&self, recv: Arc<Inbox>, send: SendSide) -> Result<u32, Error> {
        self.open_with(Some(recv), Some(send), None)
    }

    fn open_with(
        &self,
        recv: Option<Arc<Inbox>>,
        send: Option<SendSide>,
        request: Option<(Lead, Payload)>,
    ) -> Result<u32, Error> {
        let mut state = self.lock();
        if let Some(error) = &state.over {
            return Err(error.clone());
        }
        if state.closing {
            return Err(closing_error());
        }
        if state.streams.len() >= self.config.max_streams {
            return Err(RemoteError::new(
                ErrorCode::REJECTED,
                format!(
                    "rsocket: {} streams are open on this connection (Config::max_streams)",
                    state.streams.len()
                ),
            )
            .into_error());
        }
        let id = state.next_id;
        if id > MAX_U31 {
            return Err(Error::msg(
                "rsocket: this connection used up its stream ids",
            ));
        }
        state.next_id += 2;
        if recv.is_some() || send.is_some() {
            state.streams.insert(id, Entry { send, recv });
        }
        if let Some((lead, payload)) = request {
            let fragment = self.config.fragment_size;
            let control = &mut state.control;
            fragment::split(id, lead, payload, fragment, |f| control.push_back(f));
            drop(state);
            self.writer.notify_one();
        }
        Ok(id)
    }

    /// Grant the peer `n` more items on `stream`: a REQUEST_N, or more initial
    /// credit when the stream's request (a channel's, waiting for its first item)
    /// has not gone out yet. Nothing once the stream's receiving side is done.
    pub(crate) fn grant(&self, stream: u32, n: u32) {
        let mut state = self.lock();
        if state.over.is_some() {
            return;
        }
        // A stream whose receiving side is done (ended, cancelled) takes no more.
        let Some(entry) = state.streams.get_mut(&stream).filter(|e| e.recv.is_some()) else {
            return;
        };
        let lead = entry.send.as_mut().and_then(|s| s.lead.as_mut());
        if let Some(Lead::Channel { initial_n, .. }) = lead {
            *initial_n = initial_n.saturating_add(n).min(MAX_U31);
            return;
        }
        state.control.push_back(Frame {
            stream,
            body: Body::RequestN(n),
        });
        drop(state);
        self.writer.notify_one();
    }

    /// Queue a control frame (REQUEST_N, CANCEL, ERROR, KEEPALIVE, METADATA_PUSH).
    pub(crate) fn control(&self, stream: u32, body: Body) {
        let mut state = self.lock();
        if state.over.is_some() {
            return;
        }
        state.control.push_back(Frame { stream, body });
        drop(state);
        self.writer.notify_one();
    }

    /// This side gives up receiving `stream`: the peer gets CANCEL. A stream that
    /// never reached the wire (a channel whose REQUEST_CHANNEL still waits for its
    /// outgoing publisher's first item) ends here instead: its outgoing publisher is
    /// cancelled and the peer hears nothing of it, so it never serves a request that
    /// nobody reads.
    pub(crate) fn cancel_recv(&self, stream: u32) {
        let unsent = {
            let mut state = self.lock();
            let unsent = state
                .streams
                .get_mut(&stream)
                .and_then(|e| e.send.as_mut())
                .filter(|side| side.lead.is_some())
                .map(|side| side.subscription.take());
            if unsent.is_some() {
                self.remove(&mut state, stream);
            }
            unsent
        };
        match unsent {
            Some(subscription) => {
                if let Some(subscription) = subscription {
                    cancel_contained(STAGE, &subscription);
                }
            }
            None => {
                self.control(stream, Body::Cancel);
                self.recv_done(stream);
            }
        }
    }

    /// The receiving side of `stream` is done (terminal received, or cancelled).
    pub(crate) fn recv_done(&self, stream: u32) {
        let mut state = self.lock();
        let remove = match state.streams.get_mut(&stream) {
            Some(entry) => {
                entry.recv = None;
                entry.send.is_none()
            }
            None => false,
        };
        if remove {
            self.remove(&mut state, stream);
        }
    }

    /// Forget a stream; close a closing connection with no stream left.
    fn remove(&self, state: &mut ConnState, stream: u32) {
        state.streams.remove(&stream);
        self.close_if_idle(state);
    }

    /// A closing connection with no stream left is over: the writer flushes and
    /// shuts the socket down, the reader stops.
    fn close_if_idle(&self, state: &mut ConnState) {
        if state.closing && state.streams.is_empty() && state.over.is_none() {
            state.over = Some(Error::msg("rsocket: the connection was closed"));
            self.wake_all();
        }
    }

    /// The connection ended: wake the writer, the reader and whoever waits.
    fn wake_all(&self) {
        self.writer.notify_one();
        self.reader.notify_one();
        self.ended.notify_waiters();
    }

    // ---- the sending side -------------------------------------------------------

    /// The local publisher of `stream` subscribed: store its subscription and
    /// return the first request, or `None` when the stream is gone (cancel it).
    pub(crate) fn subscribed(&self, stream: u32, subscription: &Subscription) -> Option<u64> {
        let mut state = self.lock();
        let side = state
            .streams
            .get_mut(&stream)
            .and_then(|e| e.send.as_mut())
            .filter(|s| !s.ended && s.subscription.is_none())?;
        side.subscription = Some(subscription.clone());
        let window = self.window_of(side);
        Some(side.refill(window))
    }

    fn window_of(&self, side: &SendSide) -> u64 {
        if side.single {
            1
        } else {
            u64::from(self.config.send_window)
        }
    }

    /// Items from the local publisher of `stream`. Returns a subscription to cancel
    /// (a response got its item; a publisher sent more than asked, which ends the
    /// stream as [`Conn::end`] does with a rule 1.1 error).
    pub(crate) fn items(
        &self,
        stream: u32,
        items: impl Iterator<Item = Payload>,
    ) -> Option<Subscription> {
        let (cancel, failed_inbox) = {
            let mut state = self.lock();
            let state = &mut *state;
            let side = state
                .streams
                .get_mut(&stream)
                .and_then(|e| e.send.as_mut())
                .filter(|s| !s.ended)?;
            let mut cancel = None;
            let mut over_sent = false;
            for item in items {
                if side.requested == 0 {
                    over_sent = true;
                    break;
                }
                side.requested -= 1;
                side.outbox.push_back(Outgoing::Item(item));
                if side.single {
                    side.outbox.push_back(Outgoing::Complete);
                    side.ended = true;
                    cancel = side.subscription.take();
                    break;
                }
            }
            if over_sent {
                let error = Error::spec_violation(
                    "1.1",
                    "rsocket: the stream's publisher sent more items than requested",
                );
                self.end_send(state, stream, Err(error))
            } else {
                if !side.queued && !side.outbox.is_empty() {
                    side.queued = true;
                    state.ready.push_back(stream);
                    self.writer.notify_one();
                }
                (cancel, None)
            }
        };
        // The inbox's lock is never taken under the connection's.
        if let Some((inbox, error)) = failed_inbox {
            inbox.fail(error, false);
        }
        cancel
    }

    /// The local publisher of `stream` ended. A failure is an ERROR frame, which ends
    /// the stream both ways: a channel's receiving side fails here with the same
    /// error. A channel that has not reached the wire yet (its REQUEST_CHANNEL waits
    /// for the first item) ends here only: the peer hears nothing of it.
    pub(crate) fn end(&self, stream: u32, end: Result<(), Error>) {
        let (_, failed_inbox) = self.end_send(&mut self.lock(), stream, end);
        // The inbox's lock is never taken under the connection's.
        if let Some((inbox, error)) = failed_inbox {
            inbox.fail(error, false);
        }
    }

    /// End the sending side of `stream` (see [`Conn::end`]), under the connection's
    /// lock. Returns the local publisher's subscription, and the receiving side to
    /// fail (after the lock is let go) with the error.
    fn end_send(
        &self,
        state: &mut ConnState,
        stream: u32,
        end: Result<(), Error>,
    ) -> (Option<Subscription>, Option<(Arc<Inbox>, Error)>) {
        let Some(entry) = state.streams.get_mut(&stream) else {
            return (None, None);
        };
        let Some(side) = entry.send.as_mut().filter(|s| !s.ended) else {
            return (None, None);
        };
        side.ended = true;
        let subscription = side.subscription.take();
        let unsent = side.lead.is_some();
        let failed_inbox = match &end {
            Err(error) => entry.recv.take().map(|inbox| (inbox, error.clone())),
            Ok(()) => None,
        };
        if unsent && end.is_err() {
            self.remove(state, stream);
        } else {
            side.outbox.push_back(match end {
                Ok(()) => Outgoing::Complete,
                Err(error) => Outgoing::Error(error),
            });
            if !side.queued {
                side.queued = true;
                state.ready.push_back(stream);
            }
            self.writer.notify_one();
        }
        (subscription, failed_inbox)
    }

    /// Take what the writer sends next, about `budget` bytes of it: control frames,
    /// then a round of the ready streams. Fills `frames`, and `refills` with the
    /// requests to make of local publishers. False once the connection is over and
    /// nothing is left to write.
    fn take(&self, frames: &mut Vec<Out>, refills: &mut Vec<Refill>, budget: usize) -> bool {
        let mut state = self.lock();
        let state = &mut *state;
        let mut bytes = 0usize;
        while let Some(frame) = state.control.pop_front() {
            bytes += frame.encoded_len();
            frames.push(Out::Frame(frame));
            if bytes >= budget {
                return true;
            }
        }
        if state.over.is_some() {
            return !frames.is_empty();
        }
        let mut finished = Vec::new();
        // Rounds until something is sent: a payload larger than the quantum waits
        // for the rounds that add up to its size (deficit round robin).
        while frames.is_empty() && !state.ready.is_empty() {
            self.round(state, (&mut bytes, budget), frames, refills, &mut finished);
        }
        for id in finished {
            let remove = match state.streams.get_mut(&id) {
                Some(entry) => {
                    entry.send = None;
                    entry.recv.is_none()
                }
                None => false,
            };
            if remove {
                self.remove(state, id);
            }
        }
        true
    }

    /// One round of the ready streams (each once, in order), until `bytes` reaches
    /// `budget`.
    fn round(
        &self,
        state: &mut ConnState,
        (bytes, budget): (&mut usize, usize),
        frames: &mut Vec<Out>,
        refills: &mut Vec<Refill>,
        finished: &mut Vec<u32>,
    ) {
        let fragment = self.config.fragment_size;
        let quantum = self.config.quantum;
        let turns = state.ready.len();
        for _ in 0..turns {
            if *bytes >= budget {
                break;
            }
            let Some(id) = state.ready.pop_front() else {
                break;
            };
            let Some(side) = state.streams.get_mut(&id).and_then(|e| e.send.as_mut()) else {
                continue;
            };
            side.queued = false;
            side.deficit = side.deficit.saturating_add(quantum);
            let mut done = false;
            while let Some(front) = side.outbox.front() {
                let size = front.size();
                if size > side.deficit {
                    break;
                }
                side.deficit -= size;
                *bytes += size;
                let out = side.outbox.pop_front().expect("front exists");
                done = emit(id, side, out, fragment, frames);
                if done {
                    break;
                }
            }
            if done {
                finished.push(id);
                continue;
            }
            if side.outbox.is_empty() {
                side.deficit = 0;
            } else {
                side.queued = true;
                state.ready.push_back(id);
            }
            let n = side.refill(self.window_of(side));
            if n > 0 {
                if let Some(s) = &side.subscription {
                    refills.push((id, s.clone(), n));
                }
            }
        }
    }

    // ---- the peer's frames -----------------------------------------------------

    /// The peer granted `n` more items on `stream`.
    fn peer_grant(&self, stream: u32, n: u32) {
        let refill = {
            let mut state = self.lock();
            let window = u64::from(self.config.send_window);
            let Some(side) = state.streams.get_mut(&stream).and_then(|e| e.send.as_mut()) else {
                return;
            };
            if side.single {
                return;
            }
            side.grant(n);
            let n = side.refill(window);
            side.subscription.clone().filter(|_| n > 0).map(|s| (s, n))
        };
        if let Some((subscription, n)) = refill {
            self.request_local(stream, &subscription, n);
        }
    }

    /// Ask the local publisher of `stream` for `n` more. One whose `request`
    /// panics (rule 3.16 broken) fails its stream as a publisher that failed would
    /// (the peer gets an APPLICATION_ERROR with the panic's message, a channel's
    /// receiving side here the same error) and is cancelled; the connection, and the task making the call
    /// (the reader or the writer), go on.
    fn request_local(&self, stream: u32, subscription: &Subscription, n: u64) {
        if let Err(error) = catch_in(STAGE, || subscription.request(n)) {
            tracing::error!(
                stream,
                "rsocket: a local publisher panicked in request; the stream fails"
            );
            // Ended first: the cancel may drop the stream's subscriber, which
            // would otherwise end it as dropped without a terminal signal.
            self.end(stream, Err(error));
            cancel_contained(STAGE, subscription);
        }
    }

    /// The peer cancelled `stream` (its sending side here). An ERROR this side
    /// queued still goes out (its items before it do not): it ends the stream both
    /// ways, and a channel's peer still sends until it hears it.
    fn cancelled(&self, stream: u32) {
        let subscription = {
            let mut state = self.lock();
            let Some(entry) = state.streams.get_mut(&stream) else {
                return;
            };
            let failing = entry
                .send
                .as_mut()
                .filter(|side| matches!(side.outbox.back(), Some(Outgoing::Error(_))));
            if let Some(side) = failing {
                side.outbox.retain(|out| matches!(out, Outgoing::Error(_)));
                return;
            }
            let subscription = entry.send.take().and_then(|s| s.subscription);
            if entry.recv.is_none() {
                self.remove(&mut state, stream);
            }
            subscription
        };
        if let Some(subscription) = subscription {
            cancel_contained(STAGE, &subscription);
        }
    }

    /// The peer ended `stream` with an error: both sides end.
    fn stream_error(&self, stream: u32, error: Error) {
        let (inbox, subscription) = {
            let mut state = self.lock();
            let Some(entry) = state.streams.remove(&stream) else {
                return;
            };
            self.remove(&mut state, stream);
            (entry.recv, entry.send.and_then(|s| s.subscription))
        };
        if let Some(subscription) = subscription {
            cancel_contained(STAGE, &subscription);
        }
        if let Some(inbox) = inbox {
            inbox.fail(error, false);
        }
    }

    /// The receiving side of `stream`, if it has one.
    fn inbox(&self, stream: u32) -> Option<Arc<Inbox>> {
        self.lock()
            .streams
            .get(&stream)
            .and_then(|e| e.recv.clone())
    }

    /// A request from the peer on `stream`.
    fn accept(self: &Arc<Self>, stream: u32, body: Body) -> Result<(), Error> {
        // Only a client sends keepalives; the peer's requests use its own parity
        // (odd from a client).
        let peer_is_client = self.keepalive.is_none();
        if (stream % 2 == 1) != peer_is_client {
            return Err(Error::msg(format!(
                "rsocket: the peer opened stream {stream}, an id of this side's parity"
            )));
        }
        let Some(handler) = self.handler.clone() else {
            if !matches!(body, Body::RequestFnf { .. }) {
                self.control(
                    stream,
                    error_body(ErrorCode::REJECTED, "this side answers no requests"),
                );
            }
            return Ok(());
        };
        if let Body::RequestFnf { payload, .. } = body {
            if catch(|| handler.fire_and_forget(payload)).is_err() {
                tracing::error!("rsocket: a handler's fire_and_forget panicked; contained");
            }
            return Ok(());
        }
        let (send, recv, first) = {
            let mut state = self.lock();
            if state.over.is_some() {
                return Ok(());
            }
            if state.streams.contains_key(&stream) {
                return Err(Error::msg(format!(
                    "rsocket: the peer opened stream {stream}, which is open already"
                )));
            }
            if state.streams.len() >= self.config.max_streams || state.closing {
                state.control.push_back(Frame {
                    stream,
                    body: error_body(
                        ErrorCode::REJECTED,
                        "too many concurrent streams on this connection",
                    ),
                });
                drop(state);
                self.writer.notify_one();
                return Ok(());
            }
            let (send, recv, first) = match &body {
                Body::RequestResponse { .. } => (SendSide::new(1, true, None), None, None),
                Body::RequestStream { initial_n, .. } => {
                    (SendSide::new(*initial_n, false, None), None, None)
                }
                Body::RequestChannel {
                    initial_n,
                    complete,
                    payload,
                    ..
                } => {
                    let inbox = Inbox::accepted(self.clone(), stream, payload.clone(), *complete);
                    (
                        SendSide::new(*initial_n, false, None),
                        Some(inbox),
                        Some(payload.clone()),
                    )
                }
                _ => return Ok(()),
            };
            // A channel opened with COMPLETE has received all it will: its inbox
            // (done already) goes to the handler only, so the entry goes once the
            // answer ends.
            let open_recv = recv
                .clone()
                .filter(|_| !matches!(body, Body::RequestChannel { complete: true, .. }));
            state.streams.insert(
                stream,
                Entry {
                    send: Some(send),
                    recv: open_recv,
                },
            );
            (Outbound::new(self.clone(), stream), recv, first)
        };
        let answer = catch(|| -> BoxPublisher<Payload> {
            match (body, recv, first) {
                (Body::RequestResponse { payload, .. }, _, _) => handler.request_response(payload),
                (Body::RequestStream { payload, .. }, _, _) => handler.request_stream(payload),
                (_, Some(inbox), Some(first)) => {
                    handler.request_channel(&first, PayloadStream::accepted(inbox))
                }
                _ => unreachable!("the arms above cover what was inserted"),
            }
        });
        match answer {
            Ok(publisher) => {
                if catch(move || subscribe_guarded(|| publisher.subscribe(send))).is_err() {
                    self.local_failure(stream, "the handler's publisher panicked in subscribe");
                }
            }
            Err(_) => self.local_failure(stream, "the handler panicked"),
        }
        Ok(())
    }

    /// This side's answer to `stream` failed before it started: the peer gets an
    /// APPLICATION_ERROR and the stream ends.
    fn local_failure(&self, stream: u32, what: &str) {
        tracing::error!("rsocket: {what} (stream {stream}); the stream fails");
        let inbox = {
            let mut state = self.lock();
            let entry = state.streams.remove(&stream);
            self.remove(&mut state, stream);
            state.control.push_back(Frame {
                stream,
                body: error_body(ErrorCode::APPLICATION_ERROR, what),
            });
            entry.and_then(|e| e.recv)
        };
        self.writer.notify_one();
        if let Some(inbox) = inbox {
            inbox.fail(Error::msg(format!("rsocket: {what}")), false);
        }
    }

    /// Handle one whole frame from the peer. An error closes the connection.
    fn dispatch(self: &Arc<Self>, frame: Frame, run: &mut Run) -> Result<(), Error> {
        let Frame { stream, body } = frame;
        if !matches!(body, Body::Payload { .. }) {
            // Any other frame takes effect after the payloads read before it.
            run.flush();
        }
        match body {
            Body::Payload {
                complete,
                next,
                payload,
                ..
            } => {
                run.push(self, stream, next.then_some(payload), complete);
                Ok(())
            }
            Body::Setup(_) => Err(Error::msg("rsocket: a second SETUP")),
            Body::Lease { .. } | Body::Ignored { .. } => Ok(()),
            Body::Keepalive { respond, data, .. } => {
                if respond {
                    self.control(
                        0,
                        Body::Keepalive {
                            respond: false,
                            last_position: 0,
                            data,
                        },
                    );
                }
                Ok(())
            }
            Body::MetadataPush(metadata) => {
                if let Some(handler) = &self.handler {
                    if catch(|| handler.metadata_push(metadata)).is_err() {
                        tracing::error!("rsocket: a handler's metadata_push panicked; contained");
                    }
                }
                Ok(())
            }
            Body::Error { code, data } if stream == 0 => Err(RemoteError::new(
                code,
                String::from_utf8_lossy(&data).into_owned(),
            )
            .into_error()),
            Body::Error { code, data } => {
                let error = RemoteError::new(code, String::from_utf8_lossy(&data).into_owned());
                self.stream_error(stream, error.into_error());
                Ok(())
            }
            Body::RequestN(n) => {
                self.peer_grant(stream, n);
                Ok(())
            }
            Body::Cancel => {
                self.cancelled(stream);
                Ok(())
            }
            request @ (Body::RequestResponse { .. }
            | Body::RequestFnf { .. }
            | Body::RequestStream { .. }
            | Body::RequestChannel { .. }) => self.accept(stream, request),
        }
    }

    // ---- the connection's end ---------------------------------------------------

    /// End the connection with `error` (sending `frame` first when given): every
    /// stream ends with the error, every local publisher is cancelled.
    pub(crate) fn close(&self, error: Error, frame: Option<Frame>) {
        let (streams, unopened) = {
            let mut state = self.lock();
            if state.over.is_some() {
                return;
            }
            state.over = Some(error.clone());
            state.control.clear();
            state.ready.clear();
            state.control.extend(frame);
            (
                std::mem::take(&mut state.streams),
                std::mem::take(&mut state.unopened),
            )
        };
        self.wake_all();
        for (_, entry) in streams {
            if let Some(subscription) = entry.send.and_then(|s| s.subscription) {
                cancel_contained(STAGE, &subscription);
            }
            if let Some(inbox) = entry.recv {
                inbox.fail(error.clone(), false);
            }
        }
        fail_unopened(unopened, &error);
    }

    /// No new requests; the connection closes once its last stream ended. Streams
    /// subscribed but not yet requested fail now: they could not open any more.
    pub(crate) fn close_when_idle(&self) {
        let unopened = {
            let mut state = self.lock();
            if state.over.is_some() {
                return;
            }
            state.closing = true;
            self.close_if_idle(&mut state);
            std::mem::take(&mut state.unopened)
        };
        fail_unopened(unopened, &closing_error());
    }

    /// Track `inbox`, a stream subscribed before its first request, so that the
    /// connection's end reaches it; `Err` with the reason when no stream can open
    /// any more (the connection is over or closing).
    pub(crate) fn track_unopened(&self, inbox: &Arc<Inbox>) -> Result<(), Error> {
        let mut state = self.lock();
        if let Some(error) = &state.over {
            return Err(error.clone());
        }
        if state.closing {
            return Err(closing_error());
        }
        if state.unopened.len() >= state.prune_at {
            state.unopened.retain(|inbox| inbox.strong_count() > 0);
            state.prune_at = (2 * state.unopened.len()).max(PRUNE_FLOOR);
        }
        state.unopened.push(Arc::downgrade(inbox));
        Ok(())
    }

    /// How the connection ended, once it did.
    pub(crate) fn over(&self) -> Option<Error> {
        self.lock().over.clone()
    }

    /// Wait until the connection ended.
    pub(crate) async fn closed(&self) {
        loop {
            let notified = self.ended.notified();
            if self.over().is_some() {
                return;
            }
            notified.await;
        }
    }

    /// Streams open now.
    pub(crate) fn open_streams(&self) -> usize {
        self.lock().streams.len()
    }
}

/// An ERROR frame's body.
pub(crate) fn error_body(code: ErrorCode, message: &str) -> Body {
    Body::Error {
        code,
        data: Bytes::copy_from_slice(message.as_bytes()),
    }
}

/// The frames for one item of a sending side; true when it was the stream's last.
fn emit(
    id: u32,
    side: &mut SendSide,
    out: Outgoing,
    fragment: usize,
    frames: &mut Vec<Out>,
) -> bool {
    let completes = matches!(side.outbox.front(), Some(Outgoing::Complete));
    match out {
        Outgoing::Item(payload) => {
            if completes {
                side.outbox.pop_front();
            }
            let lead = match side.lead.take() {
                Some(Lead::Channel { initial_n, .. }) => Lead::Channel {
                    initial_n,
                    complete: completes,
                },
                _ if fragment::fits(&payload, fragment) => {
                    frames.push(Out::Item {
                        stream: id,
                        complete: completes,
                        payload,
                    });
                    return completes;
                }
                _ => Lead::Next {
                    complete: completes,
                },
            };
            fragment::split(id, lead, payload, fragment, |f| frames.push(Out::Frame(f)));
            completes
        }
        Outgoing::Complete => {
            let body = match side.lead.take() {
                Some(Lead::Channel { initial_n, .. }) => Body::RequestChannel {
                    follows: false,
                    complete: true,
                    initial_n,
                    payload: Payload::default(),
                },
                _ => Body::Payload {
                    follows: false,
                    complete: true,
                    next: false,
                    payload: Payload::default(),
                },
            };
            frames.push(Out::Frame(Frame { stream: id, body }));
            true
        }
        Outgoing::Error(error) => {
            let remote = std::error::Error::source(&error)
                .and_then(|source| source.downcast_ref::<RemoteError>());
            let (code, message) = match remote {
                Some(remote) => (remote.code, remote.message.clone()),
                None => (ErrorCode::APPLICATION_ERROR, error.message().to_owned()),
            };
            frames.push(Out::Frame(Frame {
                stream: id,
                body: error_body(code, &message),
            }));
            true
        }
    }
}

/// A socket's reading half, framed.
pub(crate) type Reader = FramedRead<OwnedReadHalf, LengthDelimitedCodec>;

/// Split `socket` (no Nagle delay: frames are written in batches already) and frame
/// its reading half by 24-bit length prefixes up to `config.max_frame`.
pub(crate) fn split(socket: TcpStream, config: &Config) -> (Reader, OwnedWriteHalf) {
    let _ = socket.set_nodelay(true);
    let (read, write) = socket.into_split();
    let codec = LengthDelimitedCodec::builder()
        .length_field_length(LENGTH_PREFIX)
        .max_frame_length(config.max_frame)
        .new_codec();
    (FramedRead::new(read, codec), write)
}

/// Append `frame` to `buf` with its length prefix.
pub(crate) fn put_frame(buf: &mut BytesMut, frame: &Frame) -> Result<(), super::frame::FrameError> {
    let len = frame.encoded_len();
    buf.reserve(LENGTH_PREFIX + len);
    buf.put_uint(len as u64, LENGTH_PREFIX);
    frame.encode(buf)
}

/// Held by the connection's reader and writer tasks: a task dropped before it ended
/// (its runtime shut down) closes the connection, so its streams end and its local
/// publishers are cancelled instead of waiting for frames that never come. A task
/// that ended has closed it already (or the writer leaves that to the reader).
struct CloseOnDrop(Arc<Conn>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        if self.0.over().is_none() && !std::thread::panicking() {
            self.0.close(Error::scheduler_shutdown("rsocket"), None);
        }
    }
}

async fn write_loop(conn: Arc<Conn>, mut write: OwnedWriteHalf) {
    let _closes = CloseOnDrop(conn.clone());
    let mut frames = Vec::new();
    let mut refills = Vec::new();
    let mut buf = BytesMut::with_capacity(WRITE_BUDGET + 1024);
    loop {
        let notified = conn.writer.notified();
        let mut open = conn.take(&mut frames, &mut refills, WRITE_BUDGET);
        if frames.is_empty() {
            request(&conn, &mut refills);
            if !open {
                break;
            }
            notified.await;
            continue;
        }
        // Encode what was taken; and while the refills just asked of local publishers
        // came back at once (a synchronous publisher puts its items in the outbox
        // inside `request`), take those into the same write, up to the budget: one
        // write (one syscall, one wake-up of the peer's reader) per budget instead of
        // one per send window.
        loop {
            let asked = !refills.is_empty();
            // Control frames (grants, cancels, keepalives) go out now, not after
            // more refills.
            let control = frames.iter().any(Out::is_control);
            request(&conn, &mut refills);
            for out in frames.drain(..) {
                if let Err(error) = out.put(&mut buf) {
                    // Our own frames are valid by construction; a bug, not the peer's
                    // fault.
                    tracing::error!("rsocket: a frame could not be encoded ({error}); dropped");
                }
            }
            if !asked || control || !open || buf.len() >= WRITE_BUDGET {
                break;
            }
            open = conn.take(&mut frames, &mut refills, WRITE_BUDGET - buf.len());
            if frames.is_empty() {
                request(&conn, &mut refills);
                break;
            }
        }
        if let Err(error) = write.write_all(&buf).await {
            conn.close(Error::upstream(error), None);
            break;
        }
        buf.clear();
    }
    let _ = write.shutdown().await;
}

/// A request the writer makes of a local publisher: its stream, its subscription, how
/// many.
type Refill = (u32, Subscription, u64);

/// Make the requests the writer collected of local publishers.
fn request(conn: &Conn, refills: &mut Vec<Refill>) {
    for (stream, subscription, n) in refills.drain(..) {
        conn.request_local(stream, &subscription, n);
    }
}

/// Frames the reader handles in one go before it polls the socket, the keepalive
/// tick and a stop again (a frame is taken from the buffer only when it will be
/// handled in this batch).
const READ_BATCH: usize = 1024;

async fn read_loop(conn: Arc<Conn>, mut read: Reader) {
    let _closes = CloseOnDrop(conn.clone());
    let mut assembly = Assembly::new(conn.config.max_payload);
    let tick = conn.keepalive.unwrap_or(conn.lifetime).min(conn.lifetime);
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + tick, tick);
    let mut heard = Instant::now();
    let mut run = Run::default();
    let end = loop {
        let stop = conn.reader.notified();
        tokio::select! {
            next = read.next() => match next {
                Some(Ok(bytes)) => {
                    heard = Instant::now();
                    // This frame, then the whole frames the read left in the buffer,
                    // up to a batch, taken as one chunk.
                    let mut result = conn.read_frame(bytes.freeze(), &mut assembly, &mut run);
                    if result.is_ok() {
                        if let Some(chunk) = buffered_frames(&mut read, conn.config.max_frame) {
                            result = conn.read_chunk(&chunk, &mut assembly, &mut run);
                        }
                    }
                    run.flush();
                    if let Err(error) = result {
                        let frame = connection_error(error.message());
                        break (error, Some(frame));
                    }
                }
                Some(Err(error)) => {
                    let frame = connection_error(&error.to_string());
                    break (Error::upstream(error), Some(frame));
                }
                None => break (Error::msg("rsocket: the peer closed the connection"), None),
            },
            _ = ticks.tick() => {
                if heard.elapsed() > conn.lifetime {
                    let message = format!(
                        "rsocket: nothing heard from the peer for {:?} (max lifetime)",
                        conn.lifetime
                    );
                    break (Error::timeout(message.clone()), Some(connection_error(&message)));
                }
                if conn.keepalive.is_some() {
                    conn.control(0, Body::Keepalive { respond: true, last_position: 0, data: Bytes::new() });
                }
            }
            _ = stop => {
                if conn.over().is_some() {
                    return;
                }
            }
        }
    };
    conn.close(end.0, end.1);
}

/// The whole frames the read buffer holds after the one the codec returned, up to
/// [`READ_BATCH`] − 1 of them, taken as one chunk (length prefixes included) without
/// polling the socket; `None` when there is none. The codec's state stays
/// consistent: it just returned a frame, so it expects a length prefix next, and
/// only whole frames are taken. A length over `max_frame` (or a partial frame) ends
/// the chunk and is left for the codec, which reports it.
fn buffered_frames(read: &mut Reader, max_frame: usize) -> Option<Bytes> {
    let buf = read.read_buffer_mut();
    let mut extent = 0;
    for _ in 1..READ_BATCH {
        let Some(len) = length_at(buf, extent) else {
            break;
        };
        if len > max_frame || buf.len() - extent - LENGTH_PREFIX < len {
            break;
        }
        extent += LENGTH_PREFIX + len;
    }
    (extent > 0).then(|| buf.split_to(extent).freeze())
}

/// The length prefix at `at` in `buf`, when all of it is there.
fn length_at(buf: &[u8], at: usize) -> Option<usize> {
    let prefix = buf.get(at..at + LENGTH_PREFIX)?;
    Some(
        prefix
            .iter()
            .fold(0usize, |len, &b| (len << 8) | usize::from(b)),
    )
}

/// Consecutive PAYLOAD frames of one stream, handed to its inbox together: one
/// lookup, one lock and one wake-up for the lot.
#[derive(Default)]
struct Run {
    /// The stream's inbox (`None`: the stream is unknown, its frames are dropped).
    inbox: Option<Arc<Inbox>>,
    /// The stream (0: no run).
    stream: u32,
    /// The items of the run's PAYLOADs with NEXT, in order.
    items: Vec<Payload>,
    /// The run's last PAYLOAD completed the stream.
    complete: bool,
}

impl Run {
    /// Add a PAYLOAD of `stream` (flushing the run first when it is another
    /// stream's); a completing one ends the run.
    fn push(&mut self, conn: &Conn, stream: u32, item: Option<Payload>, complete: bool) {
        if stream != self.stream || self.stream == 0 {
            self.flush();
            self.stream = stream;
            self.inbox = conn.inbox(stream);
        }
        if let Some(item) = item {
            self.items.push(item);
        }
        if complete {
            self.complete = true;
            self.flush();
        }
    }

    /// Hand the run to its inbox.
    fn flush(&mut self) {
        if let Some(inbox) = self.inbox.take() {
            inbox.receive(self.items.drain(..), self.complete);
        }
        self.items.clear();
        self.stream = 0;
        self.complete = false;
    }
}

/// A connection-level ERROR frame.
fn connection_error(message: &str) -> Frame {
    Frame {
        stream: 0,
        body: error_body(ErrorCode::CONNECTION_ERROR, message),
    }
}

impl Conn {
    /// Decode, reassemble and dispatch one frame's bytes. `Err` ends the connection
    /// with the error (the peer gets a CONNECTION_ERROR with its message).
    fn read_frame(
        self: &Arc<Self>,
        bytes: Bytes,
        assembly: &mut Assembly,
        run: &mut Run,
    ) -> Result<(), Error> {
        let frame = match Frame::decode(bytes) {
            Ok(frame) => frame,
            Err(error) => return Err(Error::msg(format!("rsocket: malformed frame: {error}"))),
        };
        let stream = frame.stream;
        let frame = match assembly.feed(frame) {
            Ok(Some(frame)) => frame,
            Ok(None) => return Ok(()),
            Err(error) => {
                let message = match error {
                    AssemblyError::TooLarge(n) => format!(
                        "rsocket: a fragmented payload grew to {n} bytes, over the limit of {} \
                         (Config::max_payload)",
                        self.config.max_payload
                    ),
                    AssemblyError::Interrupted => {
                        "rsocket: a fragmented payload was interrupted by another frame".to_owned()
                    }
                };
                run.flush();
                self.refuse(stream, Error::msg(message));
                return Ok(());
            }
        };
        if matches!(
            frame.body,
            Body::Payload { complete: true, .. } | Body::Error { .. } | Body::Cancel
        ) {
            assembly.forget(stream);
        }
        self.dispatch(frame, run)
    }

    /// The whole frames of `chunk` (each behind its length prefix), in order. A
    /// PAYLOAD carrying an item whole goes straight to the run (its data a slice of
    /// the chunk, no `Frame` built) unless a fragmented payload is being put
    /// together; every other frame is decoded and dispatched by
    /// [`read_frame`](Self::read_frame).
    fn read_chunk(
        self: &Arc<Self>,
        chunk: &Bytes,
        assembly: &mut Assembly,
        run: &mut Run,
    ) -> Result<(), Error> {
        let mut at = 0;
        while let Some(len) = length_at(chunk, at) {
            let start = at + LENGTH_PREFIX;
            let end = start + len;
            at = end;
            match plain_next(&chunk[start..end]) {
                Some((stream, complete)) if assembly.idle() => {
                    let payload = Payload {
                        metadata: None,
                        data: chunk.slice(start + HEADER_LEN..end),
                    };
                    run.push(self, stream, Some(payload), complete);
                }
                _ => self.read_frame(chunk.slice(start..end), assembly, run)?,
            }
        }
        Ok(())
    }

    /// A stream the peer broke (over-sent, an oversized payload): it ends with an
    /// error here, the peer gets CANCEL (this side receives) or ERROR (it sends).
    pub(crate) fn refuse(&self, stream: u32, error: Error) {
        let (inbox, subscription) = {
            let mut state = self.lock();
            let entry = state.streams.remove(&stream);
            self.remove(&mut state, stream);
            let (inbox, send) = entry.map_or((None, None), |e| (e.recv, e.send));
            let body = if send.is_some() || inbox.is_none() {
                error_body(ErrorCode::INVALID, error.message())
            } else {
                Body::Cancel
            };
            state.control.push_back(Frame { stream, body });
            (inbox, send.and_then(|s| s.subscription))
        };
        self.writer.notify_one();
        if let Some(subscription) = subscription {
            cancel_contained(STAGE, &subscription);
        }
        if let Some(inbox) = inbox {
            inbox.fail(error, false);
        }
    }
}
