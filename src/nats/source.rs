//! The source: a `Publisher` over a JetStream pull consumer, fetching only what
//! downstream asked for.
//!
//! # The algorithm
//!
//! Subscribing starts one task on the source's tokio runtime, which talks to the
//! server through pull requests ("send me up to `n` messages, waiting at most
//! `expires`"), and hands what arrives to a [`create`] emitter, whose
//! credit is exactly what downstream requested and has not received.
//!
//! * **Sizing.** `outstanding` is what the open pull requests may still bring. The
//!   task asks for more only up to `target = min(credit, window)`: a new pull of
//!   `target - outstanding` messages, sent once `outstanding` has fallen to a
//!   quarter of `target` (the 75% rule: pulls of at least three quarters of the
//!   target, one round trip of prefetch), with at most two pulls open. So
//!   `outstanding <= credit` always: every message that arrives has a unit of
//!   demand waiting for it, and nothing is fetched without demand.
//! * **Order.** Each pull has its own inbox subscription, and the server shares new
//!   messages among the waiting pulls in turn, so two open pulls interleave. The
//!   task keeps the next message of each pull and delivers the one with the lowest
//!   consumer sequence (the server's delivery order), after looking again at the
//!   other inbox: one connection fills both in the order the server sent, so what
//!   was sent before a message is in its inbox by the time that message is seen.
//!   Messages are thus delivered in the consumer's order.
//! * **Waiting.** Between messages the task sleeps until a message arrives, a request
//!   adds demand (the emitter's request hook wakes it), downstream cancels, or the
//!   next look at the consumer's info is due (once a second, for the lag figures).
//!   A pull that expires empty simply ends; the next one is sent at once if demand
//!   is still there (a long poll).
//! * **Failures.** A pull that cannot be sent (connection lost, server restarting)
//!   is retried after a backoff (100 ms, doubling to 2 s). The task also asks for
//!   the consumer's info once a second; a failure clock starts with a failed pull
//!   or info request and stops at any sign of life (a message, an answered info
//!   request). After [`SourceBuilder::give_up_after`] on that clock the stream ends
//!   with `on_error` (kind `Upstream`, source [`NatsError`]). A consumer deleted
//!   under the source ends it at once.
//!
//! # Acknowledgements
//!
//! [`AckMode::Explicit`] (the default) leaves acks to the user, per [`Message`];
//! [`AckMode::OnDelivery`] acks each message right after the subscriber's `on_next`
//! returned (at-most-once past that point). A message that is never acked is
//! delivered again after the consumer's `ack_wait`; [`Message::delivery_count`] says
//! how often, and [`SourceStats::redelivered`] counts them.
//!
//! # Exactly once for what was acked
//!
//! A JetStream server writes a consumer's state to its store at most ten times a
//! second, so a server killed hard forgets its last acks and, once restarted,
//! delivers those messages again as if new. The source remembers the last
//! [`dedup_horizon`](SourceBuilder::dedup_horizon) stream sequences (one byte each):
//! a message acked or terminated through its [`Message`] is acked again and not
//! delivered if the server sends it again ([`SourceStats::suppressed`]); a message
//! it delivered before counts as a redelivery even when the server's count started
//! over.
//!
//! # Lag
//!
//! [`Publisher::queue_monitor`] describes the consumer's backlog on the server as a
//! queue: depth = messages pending for the consumer (from each delivered message and
//! from the consumer's info, refreshed every second), drain rate = messages delivered
//! per second, so [`QueueStats::lag`](crate::metrics::QueueStats::lag) = pending ÷
//! consume rate, and `oldest_age` is how long the last delivered message waited in
//! the stream.
//!
//! # Demand contract
//!
//! Never more `on_next` than requested (the emitter refuses the rest). In-flight
//! bound: the window (pulled and not yet delivered), on top of which the server
//! holds the consumer's backlog, durably.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use async_nats::jetstream::consumer::{pull, Consumer};
use async_nats::jetstream::{self, consumer::PullConsumer};
use futures::StreamExt;
use smallvec::SmallVec;
use tokio::runtime::Handle;
use tokio::sync::Notify;

use super::acker::Acker;
use super::error::{within, NatsError};
use super::ledger::{Arrival, Ledger};
use super::message::{Message, Settle};
use crate::metrics::{QueueGauge, QueueMonitor};
use crate::retry::Backoff;
use crate::runtime::Immediate;
use crate::source::{create, Emitter};
use crate::{Error, Publisher, Subscriber};

/// Pull requests open at once: the one being read and the next one.
const MAX_PULLS: usize = 2;

/// How often the task reads the consumer's info for the lag figures.
const INFO_EVERY: Duration = Duration::from_secs(1);

/// The longest a pull may wait for messages on the server (`expires`).
const MAX_EXPIRES: Duration = Duration::from_secs(3600);

/// The shortest (the server refuses shorter ones).
const MIN_EXPIRES: Duration = Duration::from_millis(10);

/// When each message is acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum AckMode {
    /// By the user, through the [`Message`] (`ack`, `nack`, `term`), or
    /// automatically once it has passed a chosen stage: put
    /// `.inspect(Message::ack_detached)` right after that stage.
    #[default]
    Explicit,
    /// By the source, right after the subscriber's `on_next` for it returned.
    OnDelivery,
}

/// Counters of a [`Source`] (all its subscriptions).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SourceStats {
    /// Messages delivered downstream.
    pub delivered: u64,
    /// Of those, redeliveries: delivery count above 1 (the server's, or this
    /// source's own when higher).
    pub redelivered: u64,
    /// Messages the server sent again after they were acked or terminated through
    /// this source: acked again, not delivered.
    pub suppressed: u64,
    /// Pull requests sent.
    pub pulls: u64,
    /// Messages asked for by those pulls, in all.
    pub pulled: u64,
    /// Pull requests that could not be sent or failed.
    pub pull_failures: u64,
    /// Requests for the consumer's info (once a second) that failed.
    pub info_failures: u64,
    /// Messages pending for the consumer on the server, as last seen.
    pub pending: u64,
}

#[derive(Default)]
struct Counters {
    delivered: AtomicU64,
    redelivered: AtomicU64,
    suppressed: AtomicU64,
    pulls: AtomicU64,
    pulled: AtomicU64,
    pull_failures: AtomicU64,
    info_failures: AtomicU64,
    pending: AtomicU64,
}

impl Counters {
    fn add(counter: &AtomicU64, n: u64) {
        // Relaxed: statistics, nothing is published through them.
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// Builds a [`Source`]: window, ack mode, pull expiry, runtime.
pub struct SourceBuilder {
    consumer: PullConsumer,
    window: u64,
    ack: AckMode,
    expires: Duration,
    give_up_after: Duration,
    dedup_horizon: usize,
    runtime: Option<Handle>,
}

impl fmt::Debug for SourceBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SourceBuilder")
            .field("consumer", &self.consumer.cached_info().name)
            .field("window", &self.window)
            .field("ack", &self.ack)
            .field("expires", &self.expires)
            .field("give_up_after", &self.give_up_after)
            .finish_non_exhaustive()
    }
}

impl SourceBuilder {
    /// At most `window` messages pulled ahead of delivery (default 256). Clamped to
    /// the consumer's `max_ack_pending` when that is smaller (the server would not
    /// send more before acks anyway).
    ///
    /// # Panics
    ///
    /// If `window` is 0 or above 2^30: "nats source window must be in 1..=2^30 (got 0)".
    pub fn window(mut self, window: u64) -> Self {
        crate::stage::window::validate("nats source window", window);
        self.window = window;
        self
    }

    /// When messages are acknowledged (default [`AckMode::Explicit`]).
    pub fn ack(mut self, mode: AckMode) -> Self {
        self.ack = mode;
        self
    }

    /// How long one pull request waits on the server for messages (default 5 s; a
    /// pull that expires is replaced at once while demand lasts).
    ///
    /// # Panics
    ///
    /// If `expires` is outside 10 ms..=1 h: "nats source expires must be in 10ms..=1h
    /// (got ...)".
    pub fn expires(mut self, expires: Duration) -> Self {
        assert!(
            (MIN_EXPIRES..=MAX_EXPIRES).contains(&expires),
            "nats source expires must be in 10ms..=1h (got {expires:?})"
        );
        self.expires = expires;
        self
    }

    /// End the stream with an error after this long with nothing but failed pulls
    /// (default 60 s; `Duration::MAX`: never give up).
    pub fn give_up_after(mut self, patience: Duration) -> Self {
        self.give_up_after = patience;
        self
    }

    /// Remember the last `sequences` stream sequences (one byte each; default
    /// 65,536) to suppress messages the server sends again after they were acked,
    /// and to count redeliveries the server forgot (see the module docs).
    ///
    /// # Panics
    ///
    /// If `sequences` is 0 or above 2^30: "nats source dedup_horizon must be in
    /// 1..=2^30 (got 0)".
    pub fn dedup_horizon(mut self, sequences: usize) -> Self {
        self.dedup_horizon =
            crate::stage::window::validate("nats source dedup_horizon", sequences as u64);
        self
    }

    /// Run the source's task on the runtime behind `handle` (default: the runtime
    /// current when [`build`](Self::build) is called).
    pub fn runtime(mut self, handle: Handle) -> Self {
        self.runtime = Some(handle);
        self
    }

    /// The source.
    ///
    /// # Panics
    ///
    /// If no runtime was given and this thread is not inside a tokio runtime:
    /// "nats::Source needs a tokio runtime: build it inside one or give one with
    /// SourceBuilder::runtime".
    pub fn build(self) -> Source {
        let runtime = self.runtime.unwrap_or_else(|| {
            Handle::try_current().unwrap_or_else(|_| {
                panic!(
                    "nats::Source needs a tokio runtime: build it inside one or give one \
                     with SourceBuilder::runtime"
                )
            })
        });
        let max_ack_pending = self.consumer.cached_info().config.max_ack_pending;
        let window = match u64::try_from(max_ack_pending) {
            Ok(limit) if limit > 0 => self.window.min(limit),
            _ => self.window,
        };
        let capacity = usize::try_from(window).unwrap_or(usize::MAX);
        Source {
            consumer: self.consumer,
            window,
            ack: self.ack,
            expires: self.expires,
            give_up_after: self.give_up_after,
            runtime,
            gauge: QueueGauge::new(capacity, Arc::new(Immediate)),
            counters: Arc::new(Counters::default()),
            ledger: Arc::new(Ledger::new(self.dedup_horizon)),
            settle: Arc::new(OnceLock::new()),
        }
    }
}

/// A `Publisher` of the messages of a JetStream pull consumer, fetched as downstream
/// demand allows (see the module docs). Clone it to subscribe again (the clones share
/// the consumer, the counters and the monitor); two subscriptions at once share the
/// consumer's messages between them (a consumer group).
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use weir::prelude::*;
/// use weir::nats::{AckMode, Source};
///
/// let client = async_nats::connect("127.0.0.1:4222").await?;
/// let js = async_nats::jetstream::new(client);
/// let source = Source::bind(&js, "ORDERS", "billing").await?.window(64).build();
/// let handle = tokio::runtime::Handle::current();
/// let total = tokio::task::spawn_blocking(move || {
///     source
///         .take(100)
///         .publish_on(weir::runtime::ThreadPool::new(1), 16)
///         .fold(0usize, |n, message| {
///             message.ack_detached();
///             n + message.payload().len()
///         })
///         .wait()
/// })
/// .await??;
/// # let _ = (total, handle, AckMode::Explicit);
/// # Ok(())
/// # }
/// ```
#[must_use = "publishers do nothing until subscribed"]
#[derive(Clone)]
pub struct Source {
    consumer: PullConsumer,
    window: u64,
    ack: AckMode,
    expires: Duration,
    give_up_after: Duration,
    runtime: Handle,
    gauge: Arc<QueueGauge>,
    counters: Arc<Counters>,
    ledger: Arc<Ledger>,
    /// What messages settle through (the ledger, the queue of acks sent for
    /// synchronous code), made with the first message: the ack queue needs the
    /// client, which the consumer does not hand out.
    settle: Arc<OnceLock<Arc<Settle>>>,
}

impl fmt::Debug for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Source")
            .field("consumer", &self.consumer.cached_info().name)
            .field("window", &self.window)
            .field("ack", &self.ack)
            .finish_non_exhaustive()
    }
}

impl Source {
    /// A builder over `consumer` (a pull consumer, e.g. from
    /// `stream.get_consumer(..)`), with window 256, explicit acks, pulls that expire
    /// after 5 s.
    pub fn builder(consumer: PullConsumer) -> SourceBuilder {
        SourceBuilder {
            consumer,
            window: 256,
            ack: AckMode::Explicit,
            expires: Duration::from_secs(5),
            give_up_after: Duration::from_secs(60),
            dedup_horizon: 65_536,
            runtime: None,
        }
    }

    /// Looks up `stream` and its pull consumer `consumer` (each within `timeout`
    /// of 5 s) and returns a builder over it.
    ///
    /// # Errors
    ///
    /// [`NatsError::StreamNotFound`], [`NatsError::ConsumerNotFound`],
    /// [`NatsError::Timeout`] (a server that does not answer), or
    /// [`NatsError::Client`].
    pub async fn bind(
        js: &jetstream::Context,
        stream: &str,
        consumer: &str,
    ) -> Result<SourceBuilder, NatsError> {
        let patience = Duration::from_secs(5);
        let found = within("looking up the stream", patience, js.get_stream(stream))
            .await?
            .map_err(|e| match e.kind() {
                jetstream::context::GetStreamErrorKind::JetStream(inner)
                    if inner.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND =>
                {
                    NatsError::StreamNotFound {
                        stream: stream.to_owned(),
                    }
                }
                _ => NatsError::client("looking up the stream", e),
            })?;
        within(
            "looking up the consumer",
            patience,
            found.consumer_info(consumer),
        )
        .await?
        .map_err(|e| match e.kind() {
            jetstream::context::ConsumerInfoErrorKind::NotFound => NatsError::ConsumerNotFound {
                stream: stream.to_owned(),
                consumer: consumer.to_owned(),
            },
            jetstream::context::ConsumerInfoErrorKind::StreamNotFound => {
                NatsError::StreamNotFound {
                    stream: stream.to_owned(),
                }
            }
            _ => NatsError::client("looking up the consumer", e),
        })?;
        let pull: Consumer<pull::Config> = within(
            "binding the consumer",
            patience,
            found.get_consumer(consumer),
        )
        .await?
        .map_err(|e| NatsError::client("binding the consumer", e))?;
        Ok(Source::builder(pull))
    }

    /// The counters so far.
    pub fn stats(&self) -> SourceStats {
        let c = &*self.counters;
        SourceStats {
            delivered: c.delivered.load(Ordering::Relaxed),
            redelivered: c.redelivered.load(Ordering::Relaxed),
            suppressed: c.suppressed.load(Ordering::Relaxed),
            pulls: c.pulls.load(Ordering::Relaxed),
            pulled: c.pulled.load(Ordering::Relaxed),
            pull_failures: c.pull_failures.load(Ordering::Relaxed),
            info_failures: c.info_failures.load(Ordering::Relaxed),
            pending: c.pending.load(Ordering::Relaxed),
        }
    }

    /// The window in force (after clamping to `max_ack_pending`).
    pub fn window_size(&self) -> u64 {
        self.window
    }
}

impl Publisher for Source {
    type Item = Message;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<Message> + Send + 'static,
    {
        create(move |emitter: Emitter<Message>| {
            let wake = Arc::new(Notify::new());
            emitter.on_request({
                let wake = wake.clone();
                move |_| wake.notify_one()
            });
            emitter.on_cancel({
                let wake = wake.clone();
                move || wake.notify_one()
            });
            let runtime = self.runtime.clone();
            runtime.spawn(
                Puller {
                    source: self,
                    emitter,
                    wake,
                }
                .run(),
            );
        })
        .subscribe(subscriber);
    }

    fn in_flight_bound(&self) -> u64 {
        self.window
    }

    fn queue_monitor(&self) -> Option<QueueMonitor> {
        Some(QueueMonitor::new(self.gauge.clone()))
    }
}

/// How long the server has failed to answer, and how long to wait before the next
/// try: the failure clock starts with a failed pull or info request and stops with
/// any sign of life (a message, an answered info request).
struct Health {
    patience: Duration,
    failing_since: Option<Instant>,
    /// Failures since the last sign of life: the crate's backoff's retry number.
    failures: u32,
    /// 100 ms, doubling to 2 s, no jitter (one task, nobody to spread out from).
    backoff: Backoff,
}

impl Health {
    fn new(patience: Duration) -> Self {
        Health {
            patience,
            failing_since: None,
            failures: 0,
            backoff: Backoff::exponential(Duration::from_millis(100), Duration::from_secs(2))
                .jitter(0.0),
        }
    }

    fn alive(&mut self) {
        self.failing_since = None;
        self.failures = 0;
    }

    /// Something failed: the wait before the next try, or `None` once the server
    /// has failed for longer than the patience.
    fn failed(&mut self) -> Option<Duration> {
        let since = *self.failing_since.get_or_insert_with(Instant::now);
        if since.elapsed() >= self.patience {
            return None;
        }
        self.failures = self.failures.saturating_add(1);
        Some(self.backoff.ceiling(self.failures))
    }
}

/// One open pull request: its messages, how many it may still bring, and the next
/// of them taken from its inbox but not delivered yet.
struct Pull {
    batch: pull::Batch,
    left: u64,
    /// A message taken from the inbox, with its metadata.
    head: Option<Arrived>,
    /// The inbox ended (filled, expired, or given up by the client).
    ended: bool,
}

/// Messages taken in one burst at most.
const BURST: usize = 256;

/// A message and its metadata, read once from its reply subject.
struct Arrived {
    message: jetstream::Message,
    /// The server's delivery count.
    server_count: u64,
    stream_sequence: u64,
    /// The server's delivery order (every delivery, redeliveries too).
    consumer_sequence: u64,
    /// Messages left for the consumer after this one.
    pending: u64,
    published: Option<std::time::SystemTime>,
}

impl Arrived {
    /// Reads the metadata (a message whose reply subject cannot be read counts as
    /// a first delivery of sequence 0, delivered at once).
    fn new(message: jetstream::Message) -> Arrived {
        let (server_count, stream_sequence, consumer_sequence, pending, published) =
            match message.info() {
                Ok(info) => (
                    u64::try_from(info.delivered).unwrap_or(1),
                    info.stream_sequence,
                    info.consumer_sequence,
                    info.pending,
                    Some(std::time::SystemTime::from(info.published)),
                ),
                Err(_) => (1, 0, 0, 0, None),
            };
        Arrived {
            message,
            server_count,
            stream_sequence,
            consumer_sequence,
            pending,
            published,
        }
    }
}

impl Pull {
    fn new(batch: pull::Batch, left: u64) -> Pull {
        Pull {
            batch,
            left,
            head: None,
            ended: false,
        }
    }

    /// Takes what this pull's inbox already holds into `head` (when it is empty).
    fn peek(&mut self) -> Result<(), String> {
        use futures::FutureExt;
        if self.head.is_some() || self.ended {
            return Ok(());
        }
        match self.batch.next().now_or_never() {
            Some(Some(Ok(message))) => self.hold(message),
            Some(Some(Err(error))) => {
                self.ended = true;
                return Err(error.to_string());
            }
            Some(None) => self.ended = true,
            None => {}
        }
        Ok(())
    }

    /// Keeps `message` as the head.
    fn hold(&mut self, message: jetstream::Message) {
        self.head = Some(Arrived::new(message));
        self.left = self.left.saturating_sub(1);
    }

    /// Moves the messages the open pulls already hold (no waiting) into `ready`, in
    /// the consumer's order, up to [`BURST`].
    ///
    /// The server shares messages among the waiting pulls in turn, so two open
    /// pulls interleave: each pull's messages are in order, and their consumer
    /// sequences give the order across them. Every inbox is filled by the one
    /// connection, in the order the server sent, so once a message was taken from
    /// one inbox, every message the server sent before it is already in its inbox:
    /// after taking a head, the other inboxes are looked at again before the
    /// lowest head goes. Returns the error a pull ended with, if one did (the
    /// messages before it are moved all the same).
    fn take_ready(pulls: &mut VecDeque<Pull>, ready: &mut Vec<Arrived>) -> Option<String> {
        let mut failed = None;
        while ready.len() < BURST {
            for pull in pulls.iter_mut() {
                if let Err(error) = pull.peek() {
                    failed = Some(error);
                }
            }
            let lowest = pulls
                .iter()
                .enumerate()
                .filter_map(|(i, pull)| pull.head.as_ref().map(|head| (head.consumer_sequence, i)))
                .min();
            let Some((_, i)) = lowest else { break };
            ready.push(pulls[i].head.take().expect("the lowest head"));
        }
        Pull::retire(pulls);
        failed
    }

    /// Removes the pulls that will bring nothing more: ended (or failed, or
    /// brought all they asked for) with no head left to deliver.
    fn retire(pulls: &mut VecDeque<Pull>) {
        pulls.retain(|pull| pull.head.is_some() || !(pull.ended || pull.left == 0));
    }

    /// Waits until any open pull's inbox has something (a message, its end, or an
    /// error), and takes it: a message becomes that pull's head. Returns at once
    /// when a head is waiting already (a burst was cut at [`BURST`]).
    async fn wait_any(pulls: &mut VecDeque<Pull>) -> Result<(), String> {
        if pulls.iter().any(|pull| pull.head.is_some()) {
            return Ok(());
        }
        if pulls.is_empty() {
            return std::future::pending().await;
        }
        let (next, i, _) = {
            let waiting = pulls
                .iter_mut()
                .map(|pull| pull.batch.next())
                .collect::<SmallVec<[_; MAX_PULLS]>>();
            futures::future::select_all(waiting).await
        };
        let pull = &mut pulls[i];
        match next {
            Some(Ok(message)) => pull.hold(message),
            Some(Err(error)) => {
                pull.ended = true;
                return Err(error.to_string());
            }
            None => pull.ended = true,
        }
        Ok(())
    }
}

/// The task of one subscription.
struct Puller {
    source: Source,
    emitter: Emitter<Message>,
    wake: Arc<Notify>,
}

/// The task ends by returning (downstream cancelled, or the stream failed: the
/// error below is then refused) or by being dropped unfinished, when its runtime
/// shuts down: the stream must not look complete then (a log has no end), so it
/// fails with `SchedulerShutdown`.
impl Drop for Puller {
    fn drop(&mut self) {
        self.emitter.error(Error::scheduler_shutdown("nats source"));
    }
}

impl Puller {
    async fn run(mut self) {
        let mut pulls: VecDeque<Pull> = VecDeque::with_capacity(MAX_PULLS);
        let mut info = tokio::time::interval(INFO_EVERY);
        info.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut health = Health::new(self.source.give_up_after);
        loop {
            if self.emitter.is_cancelled() {
                return;
            }
            let credit = self.emitter.requested();
            let outstanding: u64 = pulls.iter().map(|p| p.left).sum();
            let target = credit.min(self.source.window);
            if pulls.len() < MAX_PULLS && target > outstanding && outstanding <= target / 4 {
                let n = target - outstanding;
                match self.pull(n).await {
                    // Sent (perhaps only into the client's buffer while it reconnects:
                    // the server's answers, or the info ticks, tell it is alive).
                    Ok(batch) => pulls.push_back(Pull::new(batch, n)),
                    Err(error) => {
                        tracing::debug!(target: "weir::nats", %error, "a pull failed; retrying");
                        let Some(backoff) = health.failed() else {
                            self.emitter.error(Error::upstream(error));
                            return;
                        };
                        self.pause(backoff).await;
                    }
                }
                continue;
            }
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = info.tick() => match self.refresh_info().await {
                    Ok(()) => health.alive(),
                    Err(error) => {
                        Counters::add(&self.source.counters.info_failures, 1);
                        tracing::debug!(target: "weir::nats", %error, "the consumer's info did not come");
                        if health.failed().is_none() {
                            self.emitter.error(Error::upstream(error));
                            return;
                        }
                    }
                },
                next = Pull::wait_any(&mut pulls) => {
                    let mut failed = next.err();
                    let mut ready = Vec::new();
                    if let Some(error) = Pull::take_ready(&mut pulls, &mut ready) {
                        failed = failed.or(Some(error));
                    }
                    if !ready.is_empty() {
                        health.alive();
                        // All that has arrived goes in one batch: one signal
                        // downstream, so a boundary behind is woken once per burst.
                        if !self.deliver(&mut ready).await {
                            return;
                        }
                    }
                    if let Some(text) = failed {
                        if !self.pull_failed(&text, &mut health).await {
                            return;
                        }
                    }
                },
            }
        }
    }

    /// A pull ended with an error (a leader change, too many waiting pulls, ...):
    /// counted, and waited out with the backoff, so that an error the server answers
    /// at once does not turn the task into a busy loop. False (and the stream failed)
    /// when the consumer is gone, or the failures outlasted the patience.
    async fn pull_failed(&self, text: &str, health: &mut Health) -> bool {
        Counters::add(&self.source.counters.pull_failures, 1);
        let failed = || Error::upstream(NatsError::client("pulling messages", text));
        if text.contains("Consumer Deleted") || text.contains("consumer deleted") {
            self.emitter.error(failed());
            return false;
        }
        tracing::debug!(target: "weir::nats", error = %text, "a pull ended with an error");
        let Some(backoff) = health.failed() else {
            self.emitter.error(failed());
            return false;
        };
        self.pause(backoff).await;
        true
    }

    /// Waits out a backoff; only a cancel cuts it short (new demand does not: a
    /// request storm must not turn the retries into a busy loop).
    async fn pause(&self, backoff: Duration) {
        let until = tokio::time::Instant::now() + backoff;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(until) => return,
                _ = self.wake.notified() => {
                    if self.emitter.is_cancelled() {
                        return;
                    }
                }
            }
        }
    }

    /// Sends one pull request for `n` messages.
    async fn pull(&self, n: u64) -> Result<pull::Batch, NatsError> {
        let counters = &self.source.counters;
        let request = self
            .source
            .consumer
            .batch()
            .max_messages(usize::try_from(n).unwrap_or(usize::MAX))
            .expires(self.source.expires)
            .messages();
        let sent = within("sending a pull request", self.source.expires, request).await;
        match sent {
            Ok(Ok(batch)) => {
                Counters::add(&counters.pulls, 1);
                Counters::add(&counters.pulled, n);
                Ok(batch)
            }
            Ok(Err(error)) => {
                Counters::add(&counters.pull_failures, 1);
                Err(NatsError::client("sending a pull request", error))
            }
            Err(timeout) => {
                Counters::add(&counters.pull_failures, 1);
                Err(timeout)
            }
        }
    }

    /// Hands `ready` downstream as one batch (acking each after, in `OnDelivery`
    /// mode); false once downstream is gone. Messages acked here before are acked
    /// again and left out (see the ledger).
    async fn deliver(&self, ready: &mut Vec<Arrived>) -> bool {
        let mut batch = Vec::with_capacity(ready.len());
        let mut acks = Vec::new();
        let mut last = None;
        for message in ready.drain(..) {
            match self.prepare(message).await {
                Some((wrapped, reply, published)) => {
                    if let Some(reply) = reply {
                        acks.push((wrapped.stream_sequence(), reply));
                    }
                    last = published;
                    batch.push(wrapped);
                }
                None => continue,
            }
        }
        if batch.is_empty() {
            return true;
        }
        let count = batch.len() as u64;
        let counters = &self.source.counters;
        Counters::add(&counters.delivered, count);
        let gauge = &self.source.gauge;
        let now = gauge.now();
        gauge.moved(count, count, count, now);
        let depth = usize::try_from(counters.pending.load(Ordering::Relaxed)).unwrap_or(usize::MAX);
        // How long the batch's last message waited in the stream (one clock
        // reading per batch).
        let waited = last.map(|published| {
            std::time::SystemTime::now()
                .duration_since(published)
                .unwrap_or(Duration::ZERO)
        });
        let oldest = waited.and_then(|w| now.checked_sub(w));
        gauge.level(depth, if depth > 0 { oldest } else { None });
        match self.emitter.emit_all(&mut batch) {
            Ok(_) => {
                // (Whatever demand did not cover, which pulls sized by the credit
                // rule out, is dropped here and comes back after its ack_wait.)
                if let Some(settle) = self.source.settle.get() {
                    for (seq, reply) in acks {
                        settle.ledger.settle(seq);
                        settle.acker.ack(reply);
                    }
                }
                true
            }
            // Cancelled (or ended): the messages go back to the server after their
            // ack_wait.
            Err(_) => false,
        }
    }

    /// Reads one message's metadata, accounts for it, and wraps it: `None` for a
    /// message settled here before (acked again, not delivered); else the message,
    /// its reply subject when the source acks on delivery, and how long it waited
    /// in the stream (when it was published).
    async fn prepare(
        &self,
        arrived: Arrived,
    ) -> Option<(
        Message,
        Option<async_nats::Subject>,
        Option<std::time::SystemTime>,
    )> {
        let Arrived {
            message,
            server_count,
            stream_sequence,
            pending,
            published,
            ..
        } = arrived;
        let counters = &self.source.counters;
        counters.pending.store(pending, Ordering::Relaxed);
        let delivery_count = match self.source.ledger.arrive(stream_sequence) {
            Arrival::Deliver { count } => server_count.max(count),
            Arrival::Settled => {
                // Acked (or terminated) here before; the server forgot. Ack it
                // again (the settled outcome was an ack unless it was a term,
                // and a term is final either way) and move on.
                Counters::add(&counters.suppressed, 1);
                if let Err(error) = message.ack().await {
                    tracing::debug!(target: "weir::nats", %error, "a suppressed duplicate's ack was not sent");
                }
                return None;
            }
        };
        if delivery_count > 1 {
            Counters::add(&counters.redelivered, 1);
        }
        let settle = self
            .source
            .settle
            .get_or_init(|| {
                Arc::new(Settle {
                    ledger: self.source.ledger.clone(),
                    acker: Acker::start(message.context.client(), &self.source.runtime),
                    runtime: self.source.runtime.clone(),
                })
            })
            .clone();
        let reply = (self.source.ack == AckMode::OnDelivery)
            .then(|| message.message.reply.clone())
            .flatten();
        let wrapped = Message::new(message, delivery_count, stream_sequence, settle);
        Some((wrapped, reply, published))
    }

    /// Reads the consumer's pending count for the lag figures (and, failing,
    /// tells that the server does not answer).
    async fn refresh_info(&mut self) -> Result<(), NatsError> {
        let patience = self.source.expires.min(Duration::from_secs(5));
        let info = within(
            "reading the consumer's info",
            patience,
            self.source.consumer.get_info(),
        )
        .await?
        .map_err(|e| NatsError::client("reading the consumer's info", e))?;
        {
            self.source
                .counters
                .pending
                .store(info.num_pending, Ordering::Relaxed);
            let depth = usize::try_from(info.num_pending).unwrap_or(usize::MAX);
            if depth == 0 {
                self.source.gauge.level(0, None);
            } else {
                self.source.gauge.depth(depth);
            }
        }
        Ok(())
    }
}
