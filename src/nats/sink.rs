//! The sink: a `Subscriber` that publishes to a JetStream stream with at most `k`
//! publish acks in flight.
//!
//! # The algorithm
//!
//! The sink's demand is its free ack slots. It requests `k` when subscribed; each
//! item it receives is published at once (its ack awaited by the sink's task on the
//! tokio runtime) and holds a slot until the server's publish ack (or the item's
//! final failure) arrives. Freed slots are requested again in batches: once a
//! quarter of `k` is free. That never stalls: while fewer are free, the rest are
//! either still requested from upstream or in flight, and their acks free more.
//! Items therefore never wait in the sink: what it holds is
//! exactly what the server has not confirmed yet, `k` at most.
//!
//! A publish that fails is retried by the sink's [`RetryPolicy`] (none by default:
//! one attempt), with the item's deduplication id when it has one
//! ([`Outgoing::id`]), so that a retry of a publish the server did store is
//! recognised as a duplicate (counted in [`SinkReport::duplicates`]) instead of stored
//! twice. An item that fails for good fails the sink: upstream is cancelled and
//! [`SinkDone`] returns the error. The stream holds the items in upstream's order;
//! only retries may reorder them (a retried item lands after items published
//! meanwhile).
//!
//! # Pausing at the edge
//!
//! A producer that serves users should not hold them while the log is slow.
//! [`SinkBuilder::ingress`] puts a bounded weir channel in front of the sink and
//! hands out an [`Ingress`]: its [`offer`](Ingress::offer) waits at most the given
//! deadline for room and otherwise gives the item back with
//! [`NatsError::Slow`] and a `retry_after` estimated from the drain rate.

use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::{self};
use async_nats::HeaderMap;
use bytes::Bytes;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::runtime::Handle;
use tokio::sync::{mpsc, Notify};

use super::error::{within, NatsError};
use crate::retry::{Backoff, RetryError, RetryPolicy, Verdict};
use crate::runtime::Tokio;
use crate::sink::handle::SinkState;
use crate::source::channel::{ChannelPolicy, Sender, TrySendError};
use crate::{Error, Publisher, Subscriber, Subscription};

/// One message to publish: payload, and optionally its subject (else the sink's),
/// deduplication id and headers.
#[derive(Clone, Debug)]
pub struct Outgoing {
    payload: Bytes,
    subject: Option<String>,
    id: Option<String>,
    headers: Option<HeaderMap>,
}

impl Outgoing {
    /// A message with `payload`, for the sink's subject.
    pub fn new(payload: impl Into<Bytes>) -> Self {
        Outgoing {
            payload: payload.into(),
            subject: None,
            id: None,
            headers: None,
        }
    }

    /// Publish on `subject` instead of the sink's.
    pub fn subject(mut self, subject: impl Into<String>) -> Self {
        self.subject = Some(subject.into());
        self
    }

    /// The deduplication id (`Nats-Msg-Id`): the stream stores a message with an id
    /// it has seen within its duplicate window only once, so retries are idempotent.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Headers to publish with.
    pub fn headers(mut self, headers: HeaderMap) -> Self {
        self.headers = Some(headers);
        self
    }

    /// The payload.
    pub fn payload(&self) -> &Bytes {
        &self.payload
    }
}

impl From<Bytes> for Outgoing {
    fn from(payload: Bytes) -> Self {
        Outgoing::new(payload)
    }
}

impl From<Vec<u8>> for Outgoing {
    fn from(payload: Vec<u8>) -> Self {
        Outgoing::new(payload)
    }
}

impl From<String> for Outgoing {
    fn from(payload: String) -> Self {
        Outgoing::new(payload)
    }
}

impl From<&'static str> for Outgoing {
    fn from(payload: &'static str) -> Self {
        Outgoing::new(payload)
    }
}

/// What a sink did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SinkReport {
    /// Items received from upstream.
    pub received: u64,
    /// Items the stream confirmed (stored, or recognised as duplicates).
    pub confirmed: u64,
    /// Of those, items the stream said it already had (same deduplication id).
    pub duplicates: u64,
    /// Publish attempts beyond the first, over all items.
    pub retries: u64,
    /// The most publish acks that were in flight at once.
    pub max_in_flight: u64,
}

/// The sink's counts. Only the sink's task writes them (a load and a store, no
/// read-modify-write per item); [`SinkDone::report`] reads them from anywhere.
#[derive(Default, Debug)]
struct Counters {
    received: AtomicU64,
    confirmed: AtomicU64,
    duplicates: AtomicU64,
    attempts: AtomicU64,
    max_in_flight: AtomicU64,
}

/// One more on a counter that only one task writes.
fn bump(counter: &AtomicU64) {
    counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

impl Counters {
    fn report(&self) -> SinkReport {
        let received = self.received.load(Ordering::Relaxed);
        let attempts = self.attempts.load(Ordering::Relaxed);
        SinkReport {
            received,
            confirmed: self.confirmed.load(Ordering::Relaxed),
            duplicates: self.duplicates.load(Ordering::Relaxed),
            retries: attempts.saturating_sub(received),
            max_in_flight: self.max_in_flight.load(Ordering::Relaxed),
        }
    }
}

/// Builds a [`Sink`].
pub struct SinkBuilder {
    js: jetstream::Context,
    subject: String,
    max_in_flight: u64,
    retry: RetryPolicy<NatsError>,
    ack_timeout: Option<Duration>,
    runtime: Option<Handle>,
}

impl fmt::Debug for SinkBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SinkBuilder")
            .field("subject", &self.subject)
            .field("max_in_flight", &self.max_in_flight)
            .finish_non_exhaustive()
    }
}

/// The default verdict on a failed publish: retry what may pass later (timeouts, a
/// lost connection, no stream answering, which is also what a stream in a leader
/// election looks like), fail the rest.
fn transient(error: &NatsError) -> Verdict {
    if error.is_transient() || matches!(error, NatsError::NoStream { .. }) {
        Verdict::Retry
    } else {
        Verdict::Fail
    }
}

impl SinkBuilder {
    /// At most `k` publish acks in flight (default 256): the sink's demand.
    ///
    /// # Panics
    ///
    /// If `k` is 0 or above 2^30: "nats sink max_in_flight must be in 1..=2^30 (got 0)".
    pub fn max_in_flight(mut self, k: u64) -> Self {
        crate::stage::window::validate("nats sink max_in_flight", k);
        self.max_in_flight = k;
        self
    }

    /// Retry failed publishes with `policy` (its attempts, backoff, budget and
    /// breaker). Unless the policy classifies errors itself, timeouts, client
    /// failures and "no stream" answers are retried and refusals are not. Default:
    /// one attempt, no retry.
    pub fn retry(mut self, policy: RetryPolicy<NatsError>) -> Self {
        self.retry = policy;
        self
    }

    /// How long one publish may wait for the stream's ack before it counts as
    /// failed with [`NatsError::Timeout`]. By default the JetStream context's own
    /// timeout applies (5 s unless the context was built with another), with no
    /// timer of the sink's per publish; set this for a shorter bound.
    ///
    /// # Panics
    ///
    /// If `timeout` is zero: "nats sink ack_timeout must be above zero".
    pub fn ack_timeout(mut self, timeout: Duration) -> Self {
        assert!(
            !timeout.is_zero(),
            "nats sink ack_timeout must be above zero"
        );
        self.ack_timeout = Some(timeout);
        self
    }

    /// Run the sink's task on the runtime behind `handle` (default: the runtime
    /// current when [`build`](Self::build) is called).
    pub fn runtime(mut self, handle: Handle) -> Self {
        self.runtime = Some(handle);
        self
    }

    fn handle(&self) -> Handle {
        self.runtime.clone().unwrap_or_else(|| {
            Handle::try_current().unwrap_or_else(|_| {
                panic!(
                    "nats::Sink needs a tokio runtime: build it inside one or give one \
                     with SinkBuilder::runtime"
                )
            })
        })
    }

    /// The sink (subscribe it to a publisher) and the handle that tells when it
    /// is done.
    ///
    /// # Panics
    ///
    /// If no runtime was given and this thread is not inside a tokio runtime:
    /// "nats::Sink needs a tokio runtime: build it inside one or give one with
    /// SinkBuilder::runtime".
    pub fn build<T>(self) -> (Sink<T>, SinkDone)
    where
        T: Into<Outgoing> + Send + 'static,
    {
        let runtime = self.handle();
        let capacity = usize::try_from(self.max_in_flight).unwrap_or(usize::MAX);
        // Items and the end: at most `k` items are ever outstanding, plus the end.
        let (tx, rx) = mpsc::channel(capacity + 1);
        let state = SinkState::new();
        let counters = Arc::new(Counters::default());
        let cancelled = Arc::new(Notify::new());
        let task = Task {
            js: self.js,
            subject: self.subject,
            k: self.max_in_flight,
            ack_timeout: self.ack_timeout,
            retry: self.retry,
            scheduler: Tokio::new(runtime.clone()),
            counters: counters.clone(),
            state: state.clone(),
        };
        let end = SetOnDrop(state.clone());
        let cancel = cancelled.clone();
        runtime.spawn(async move {
            // A panic in user code the task runs (the retry policy's classifier, its
            // breaker's or budget's hooks) ends the sink with that panic's message,
            // not with the `Closed` of a task that went away.
            let outcome = match AssertUnwindSafe(task.run(rx, cancel)).catch_unwind().await {
                Ok(outcome) => outcome,
                Err(payload) => Err(NatsError::Panicked {
                    message: crate::Error::panicked(payload).message().to_owned(),
                }),
            };
            end.finish(outcome);
        });
        (
            Sink {
                tx,
                state: state.clone(),
                counters: counters.clone(),
            },
            SinkDone {
                state,
                counters,
                cancelled,
            },
        )
    }

    /// A bounded channel of `capacity` items in front of the sink, subscribed to
    /// it, and the [`Ingress`] that offers into it waiting at most `deadline` for
    /// room. The channel's backlog is visible through
    /// [`Ingress::monitor`].
    ///
    /// # Panics
    ///
    /// As [`build`](Self::build), and if `capacity` is 0 or above 2^30.
    pub fn ingress<T>(self, capacity: usize, deadline: Duration) -> (Ingress<T>, SinkDone)
    where
        T: Into<Outgoing> + Send + 'static,
    {
        let (sender, channel) = crate::channel::<T>(capacity, ChannelPolicy::Backpressure);
        let (sink, done) = self.build();
        channel.subscribe(sink);
        (Ingress { sender, deadline }, done)
    }
}

/// A `Subscriber` that publishes every item to a JetStream stream, requesting only
/// as many items as it has free publish-ack slots (see the module docs). Made by
/// [`Sink::builder`].
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use weir::prelude::*;
/// use weir::nats::{Outgoing, Sink};
///
/// let js = async_nats::jetstream::new(async_nats::connect("127.0.0.1:4222").await?);
/// let (sink, done) = Sink::builder(js, "ORDERS.new").max_in_flight(128).build();
/// weir::range(0u64..10_000)
///     .map(|i| Outgoing::new(i.to_string()).id(format!("order-{i}")))
///     .subscribe(sink);
/// let report = done.finished().await?;
/// assert_eq!(report.confirmed, 10_000);
/// # Ok(())
/// # }
/// ```
pub struct Sink<T> {
    tx: mpsc::Sender<Signal<T>>,
    state: Arc<State>,
    counters: Arc<Counters>,
}

/// The upstream subscription and the sink's outcome, shared by the [`Sink`], its
/// task and its [`SinkDone`].
type State = SinkState<SinkReport, NatsError>;

impl<T> fmt::Debug for Sink<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sink")
            .field("report", &self.counters.report())
            .finish_non_exhaustive()
    }
}

impl Sink<Outgoing> {
    /// A builder for a sink publishing to `subject` through `js`: 256 acks in
    /// flight, no retries.
    pub fn builder(js: jetstream::Context, subject: impl Into<String>) -> SinkBuilder {
        SinkBuilder {
            js,
            subject: subject.into(),
            max_in_flight: 256,
            ack_timeout: None,
            retry: RetryPolicy::new(
                1,
                Backoff::exponential(Duration::from_millis(100), Duration::from_secs(2)),
            )
            .classify(transient),
            runtime: None,
        }
    }
}

/// What the subscriber side hands the task.
enum Signal<T> {
    Item(T),
    End(Result<(), Error>),
}

impl<T: Into<Outgoing> + Send + 'static> Subscriber<T> for Sink<T> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        // Refused (and cancelled) when it is a second one (rule 2.5) or the sink has
        // already ended.
        if self.state.slot.set(subscription.clone()) {
            subscription.request(self.tx.max_capacity() as u64 - 1);
        }
    }

    fn on_next(&mut self, item: T) {
        // A closed channel (the task has ended) drops the item: nobody publishes it.
        if let Err(mpsc::error::TrySendError::Full(_)) = self.tx.try_send(Signal::Item(item)) {
            // More items than free slots were requested: upstream broke rule 1.1.
            let _ = self
                .tx
                .try_send(Signal::End(Err(crate::stage::window::over_delivered(
                    "nats sink",
                ))));
        }
    }

    fn on_error(&mut self, error: Error) {
        let _ = self.tx.try_send(Signal::End(Err(error)));
    }

    fn on_complete(&mut self) {
        let _ = self.tx.try_send(Signal::End(Ok(())));
    }
}

/// The task's end, run however the task ends: cancels upstream if it is still
/// there (nobody will publish its items; after a completion the cancel is a no-op),
/// then sets the outcome, so whoever reads the outcome finds upstream cancelled.
/// Dropped without one (by a runtime shutting down), it sets [`NatsError::Closed`].
struct SetOnDrop(Arc<State>);

impl SetOnDrop {
    fn finish(&self, outcome: Result<SinkReport, NatsError>) {
        self.0.slot.cancel();
        self.0.finish(outcome);
    }
}

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        // A no-op after `finish`: the first outcome stays.
        self.finish(Err(NatsError::Closed));
    }
}

/// Tells when a [`Sink`] is done and what it did, and cancels it.
pub struct SinkDone {
    state: Arc<State>,
    counters: Arc<Counters>,
    cancelled: Arc<Notify>,
}

impl fmt::Debug for SinkDone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SinkDone")
            .field("finished", &self.is_finished())
            .field("report", &self.report())
            .finish()
    }
}

impl SinkDone {
    /// The counts so far.
    pub fn report(&self) -> SinkReport {
        self.counters.report()
    }

    /// Stop the sink: upstream is cancelled, nothing more is published, and the
    /// outcome becomes [`NatsError::Cancelled`] unless the sink had already ended.
    /// Publishes in flight are abandoned: the stream may or may not have stored them
    /// (a retry with the same [`Outgoing::id`] is recognised as a duplicate).
    /// Idempotent.
    pub fn cancel(&self) {
        self.state.slot.cancel();
        self.state.finish(Err(NatsError::Cancelled));
        self.cancelled.notify_one();
    }

    /// True once the sink has ended (completed, failed or cancelled).
    pub fn is_finished(&self) -> bool {
        self.state.is_terminated()
    }

    /// Waits until upstream completed and every publish was confirmed (or the sink
    /// failed or was cancelled). Any number of callers may wait, also while another
    /// [cancels](Self::cancel):
    ///
    /// ```no_run
    /// # async fn run(done: weir::nats::SinkDone, shutdown: tokio::sync::oneshot::Receiver<()>) {
    /// tokio::select! {
    ///     outcome = done.finished() => println!("sink ended: {outcome:?}"),
    ///     _ = shutdown => done.cancel(),
    /// }
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// The error of an item that failed for good (after the retry policy), or
    /// [`NatsError::Client`] when upstream failed (its message; also when upstream
    /// dropped the sink without a terminal signal: the stream did not complete),
    /// [`NatsError::Cancelled`] after [`cancel`](Self::cancel), or
    /// [`NatsError::Closed`] if the sink's task is gone (its runtime shut down).
    pub async fn finished(&self) -> Result<SinkReport, NatsError> {
        std::future::poll_fn(|cx| self.state.poll_cloned(cx)).await
    }

    /// [`finished`](Self::finished), blocking this thread up to `timeout` (call it
    /// outside the runtime's worker threads). A timeout that does not fit the clock
    /// (`Duration::MAX`) waits as long as it takes.
    ///
    /// # Errors
    ///
    /// As [`finished`](Self::finished), and [`NatsError::Timeout`] when it is not
    /// done in time.
    pub fn wait(&self, timeout: Duration) -> Result<SinkReport, NatsError> {
        let deadline = crate::runtime::deadline(Instant::now(), timeout);
        self.state
            .wait_cloned(deadline)
            .unwrap_or(Err(NatsError::Timeout {
                what: "the sink's end",
                after: timeout,
            }))
    }
}

/// The sink's task: publishes, awaits acks, requests freed slots.
struct Task {
    js: jetstream::Context,
    subject: String,
    k: u64,
    ack_timeout: Option<Duration>,
    retry: RetryPolicy<NatsError>,
    scheduler: Tokio,
    counters: Arc<Counters>,
    state: Arc<State>,
}

impl Task {
    /// Publishes until upstream ends (and every publish is confirmed), a publish
    /// fails for good, or the sink is cancelled; returns the outcome.
    async fn run<T: Into<Outgoing> + Send + 'static>(
        self,
        mut rx: mpsc::Receiver<Signal<T>>,
        cancelled: Arc<Notify>,
    ) -> Result<SinkReport, NatsError> {
        let publish = {
            // Shared by every publish: one reference count each, instead of a clone
            // of the context (its client's handles) and of the subject's string.
            let js = Arc::new(self.js);
            let subject = async_nats::Subject::from(self.subject.as_str());
            let counters = self.counters.clone();
            let timeout = self.ack_timeout;
            self.retry
                .wrap(self.scheduler.clone(), move |out: Outgoing| {
                    bump(&counters.attempts);
                    publish_one(js.clone(), subject.clone(), out, timeout)
                })
        };
        let mut in_flight = FuturesUnordered::new();
        let mut freed = 0u64;
        let mut end: Option<Result<(), Error>> = None;
        let batch = (self.k / 4).max(1);
        loop {
            if end.is_some() && in_flight.is_empty() {
                break match end.take().expect("checked") {
                    Ok(()) => Ok(self.counters.report()),
                    Err(error) => Err(NatsError::client("upstream", error)),
                };
            }
            tokio::select! {
                // `SinkDone::cancel` has cancelled upstream and set the outcome.
                () = cancelled.notified() => break Err(NatsError::Cancelled),
                signal = rx.recv(), if end.is_none() => match signal {
                    Some(Signal::Item(item)) => {
                        bump(&self.counters.received);
                        // A publish hands its message to the connection when first
                        // polled, and `FuturesUnordered` polls new futures in the
                        // order they came, so messages go out in upstream's order;
                        // unless tokio's cooperative budget, spent, made one send
                        // wait: it would be polled again after the next ones.
                        // Unconstrained, the send only waits for a full connection
                        // buffer, whose waiters are served in turn.
                        in_flight.push(tokio::task::unconstrained(publish(item.into())));
                        let now = in_flight.len() as u64;
                        if now > self.counters.max_in_flight.load(Ordering::Relaxed) {
                            self.counters.max_in_flight.store(now, Ordering::Relaxed);
                        }
                    }
                    Some(Signal::End(result)) => end = Some(result),
                    // The sink was dropped without a signal: never subscribed
                    // (nothing to publish), or released by its publisher without a
                    // terminal signal (the stream did not end: not a success).
                    None => {
                        end = Some(match self.state.slot.get() {
                            None => Ok(()),
                            Some(_) => Err(crate::guard::abandoned("nats sink")),
                        })
                    }
                },
                Some(result) = in_flight.next(), if !in_flight.is_empty() => match result {
                    Ok(ack) => {
                        bump(&self.counters.confirmed);
                        if ack.duplicate {
                            bump(&self.counters.duplicates);
                        }
                        freed += 1;
                        if end.is_none() && freed >= batch {
                            self.state.slot.request(freed);
                            freed = 0;
                        }
                    }
                    Err(error) => {
                        break Err(match error {
                            RetryError::Failed(e) | RetryError::BudgetExhausted(e) => e,
                            RetryError::Exhausted { last, .. } => last,
                            RetryError::CircuitOpen { retry_after } => NatsError::Slow { retry_after },
                        });
                    }
                },
            }
        }
    }
}

/// The JetStream context's default timeout (async-nats), reported when its timeout
/// fired and the sink set none of its own.
const DEFAULT_ACK_TIMEOUT: Duration = Duration::from_secs(5);

/// One publish and its ack.
async fn publish_one(
    js: Arc<jetstream::Context>,
    subject: async_nats::Subject,
    out: Outgoing,
    timeout: Option<Duration>,
) -> Result<async_nats::jetstream::publish::PublishAck, NatsError> {
    let subject = out.subject.map_or(subject, async_nats::Subject::from);
    let mut message = PublishMessage::build().payload(out.payload);
    if let Some(headers) = out.headers {
        message = message.headers(headers);
    }
    if let Some(id) = out.id {
        message = message.message_id(id);
    }
    let failed = |e: PublishError| publish_error(&subject, e, timeout);
    let publishing = async {
        // The client's send future is large (kilobytes) and lives only until the
        // message is handed to the connection; boxed, it does not size the state
        // that each of the `k` publishes in flight keeps while it waits for its ack.
        let ack = Box::pin(js.send_publish(subject.clone(), message))
            .await
            .map_err(failed)?;
        ack.await.map_err(failed)
    };
    match timeout {
        Some(timeout) => within("a publish ack", timeout, publishing).await?,
        None => publishing.await,
    }
}

fn publish_error(subject: &str, error: PublishError, timeout: Option<Duration>) -> NatsError {
    match error.kind() {
        PublishErrorKind::StreamNotFound => NatsError::NoStream {
            subject: subject.to_owned(),
        },
        PublishErrorKind::TimedOut => NatsError::Timeout {
            what: "a publish ack (the JetStream context's timeout)",
            after: timeout.unwrap_or(DEFAULT_ACK_TIMEOUT),
        },
        PublishErrorKind::BrokenPipe => NatsError::client("publishing", error),
        _ => NatsError::Refused {
            subject: subject.to_owned(),
            reason: error.to_string(),
        },
    }
}

/// Offers items to a [`Sink`] through a bounded channel, never holding the caller
/// longer than its deadline (see [`SinkBuilder::ingress`]).
pub struct Ingress<T: Send + 'static> {
    sender: Sender<T>,
    deadline: Duration,
}

impl<T: Send + 'static> fmt::Debug for Ingress<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ingress")
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

impl<T: Send + 'static> Clone for Ingress<T> {
    fn clone(&self) -> Self {
        Ingress {
            sender: self.sender.clone(),
            deadline: self.deadline,
        }
    }
}

/// An item an [`Ingress`] did not take, and why.
#[derive(Debug)]
pub struct NotTaken<T> {
    /// Why: [`NatsError::Slow`] (no room before the deadline) or
    /// [`NatsError::Closed`].
    pub error: NatsError,
    /// The item, back to the caller.
    pub item: T,
}

impl<T: Send + 'static> Ingress<T> {
    /// Offer `item`, waiting at most the deadline for room (with a deadline of
    /// `Duration::MAX`, as long as it takes).
    ///
    /// # Errors
    ///
    /// [`NotTaken`] with [`NatsError::Slow`] (and a `retry_after`: the time the
    /// channel's backlog takes to drain at its current rate, or the deadline when
    /// nothing drains) when there was no room in time, or [`NatsError::Closed`]
    /// once the sink ended. The item is given back either way.
    pub async fn offer(&self, item: T) -> Result<(), NotTaken<T>> {
        // `None`: a deadline past the clock's range (`Duration::MAX`), no bound.
        let give_up = tokio::time::Instant::now().checked_add(self.deadline);
        let mut item = item;
        loop {
            match self.sender.try_send(item) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Full(back)) => item = back,
                Err(refused) => {
                    return Err(NotTaken {
                        error: NatsError::Closed,
                        item: refused.into_inner(),
                    })
                }
            }
            // Wait for room (a resumed channel), up to the deadline.
            let in_time = match give_up {
                Some(give_up) => tokio::time::timeout_at(give_up, self.room()).await.is_ok(),
                None => {
                    self.room().await;
                    true
                }
            };
            if !in_time {
                let retry_after = self
                    .sender
                    .monitor()
                    .snapshot()
                    .lag()
                    .unwrap_or(self.deadline)
                    .max(Duration::from_millis(1));
                return Err(NotTaken {
                    error: NatsError::Slow { retry_after },
                    item,
                });
            }
        }
    }

    /// Resolves when the channel may have room again.
    async fn room(&self) {
        let _ = self.sender.resumed().await;
        // A resumed channel can be full again at once; do not spin on it.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }

    /// The channel in front of the sink: its depth, lag and rates.
    pub fn monitor(&self) -> crate::metrics::QueueMonitor {
        self.sender.monitor()
    }

    /// Close the channel: the sink completes once it published what the channel
    /// holds.
    pub fn close(&self) {
        self.sender.close();
    }
}
