//! A message pulled from a JetStream consumer, with its acknowledgement handle.

use std::fmt;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use bytes::Bytes;
use tokio::runtime::Handle;

use std::sync::Arc;

use super::acker::Acker;
use super::error::{within, NatsError};
use super::ledger::Ledger;

/// What a message needs of its source to settle: the ledger, the ack queue, and
/// the runtime for detached nacks (one reference count per message).
pub(crate) struct Settle {
    pub(crate) ledger: Arc<Ledger>,
    pub(crate) acker: Acker,
    pub(crate) runtime: Handle,
}

/// How long an acknowledgement the server confirms ([`Message::ack_confirmed`]) may
/// take.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(5);

/// A message a [`Source`](super::Source) delivered: the payload and headers, how
/// many times the server delivered it, and the handle to acknowledge it.
///
/// Acknowledge each message once: [`ack`](Self::ack) (processed),
/// [`nack`](Self::nack) (redeliver, after a delay if given), [`term`](Self::term)
/// (never redeliver), or [`ack_detached`](Self::ack_detached) from synchronous code.
/// A message nobody acknowledges is delivered again once the consumer's `ack_wait`
/// passes (at-least-once), and counts against its `max_ack_pending` meanwhile. Once
/// a message is acked or terminated through any of these, the source that delivered
/// it does not deliver it again (within its horizon), even if the server does.
#[derive(Clone)]
pub struct Message {
    inner: jetstream::Message,
    delivery_count: u64,
    stream_sequence: u64,
    settle: Arc<Settle>,
}

impl fmt::Debug for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Message")
            .field("subject", &self.subject())
            .field("stream_sequence", &self.stream_sequence)
            .field("delivery_count", &self.delivery_count)
            .field("payload_len", &self.payload().len())
            .finish_non_exhaustive()
    }
}

impl Message {
    pub(crate) fn new(
        inner: jetstream::Message,
        delivery_count: u64,
        stream_sequence: u64,
        settle: Arc<Settle>,
    ) -> Self {
        Message {
            inner,
            delivery_count,
            stream_sequence,
            settle,
        }
    }

    /// The message is done with (acked or terminated): the source will not deliver
    /// it again, whatever the server does.
    fn mark_settled(&self) {
        self.settle.ledger.settle(self.stream_sequence);
    }

    /// The payload.
    pub fn payload(&self) -> &Bytes {
        &self.inner.message.payload
    }

    /// The subject it was published on.
    pub fn subject(&self) -> &str {
        self.inner.message.subject.as_str()
    }

    /// The headers it was published with, if any.
    pub fn headers(&self) -> Option<&async_nats::HeaderMap> {
        self.inner.message.headers.as_ref()
    }

    /// How many times it has been delivered (1 the first time; more after a nack, an
    /// expired `ack_wait`, or a restart of the server): the server's count, or the
    /// source's own when that is higher (a server killed hard forgets its last
    /// deliveries; see [`Source`](super::Source)).
    pub fn delivery_count(&self) -> u64 {
        self.delivery_count
    }

    /// True when the server delivered it before ([`delivery_count`](Self::delivery_count) > 1).
    pub fn is_redelivered(&self) -> bool {
        self.delivery_count > 1
    }

    /// Its sequence number in the stream (the same on every delivery).
    pub fn stream_sequence(&self) -> u64 {
        self.stream_sequence
    }

    /// Acknowledge it: processed, do not deliver again. Sent without waiting for the
    /// server's confirmation ([`ack_confirmed`](Self::ack_confirmed) waits).
    ///
    /// # Errors
    ///
    /// [`NatsError::Client`] when the client cannot send (its connection is closed).
    pub async fn ack(&self) -> Result<(), NatsError> {
        self.mark_settled();
        self.inner
            .ack()
            .await
            .map_err(|e| NatsError::client("ack", e))
    }

    /// Acknowledge it and wait (up to 5 s) until the server confirms: once this
    /// returns `Ok`, the server will not deliver the message again, even if it
    /// restarts.
    ///
    /// # Errors
    ///
    /// [`NatsError::Timeout`] when the server does not confirm in time (the message
    /// may then be delivered again), [`NatsError::Client`] when the client fails.
    pub async fn ack_confirmed(&self) -> Result<(), NatsError> {
        self.mark_settled();
        within("ack confirmation", CONFIRM_TIMEOUT, self.inner.double_ack())
            .await?
            .map_err(|e| NatsError::client("confirmed ack", e))
    }

    /// Negative acknowledgement: deliver it again, after `delay` if given (else at
    /// once). The server reads delays as 64-bit nanoseconds: a longer `delay` (up to
    /// `Duration::MAX`) is sent as the longest it reads, about 292 years, rather than
    /// as a number it would not read (it then redelivers at once).
    ///
    /// # Errors
    ///
    /// As [`ack`](Self::ack).
    pub async fn nack(&self, delay: Option<Duration>) -> Result<(), NatsError> {
        self.inner
            .ack_with(nak(delay))
            .await
            .map_err(|e| NatsError::client("nack", e))
    }

    /// Terminate it: never deliver it again, processed or not (a poison message).
    ///
    /// # Errors
    ///
    /// As [`ack`](Self::ack).
    pub async fn term(&self) -> Result<(), NatsError> {
        self.mark_settled();
        self.inner
            .ack_with(AckKind::Term)
            .await
            .map_err(|e| NatsError::client("term", e))
    }

    /// Tell the server it is still being worked on (resets its `ack_wait`).
    ///
    /// # Errors
    ///
    /// As [`ack`](Self::ack).
    pub async fn in_progress(&self) -> Result<(), NatsError> {
        self.inner
            .ack_with(AckKind::Progress)
            .await
            .map_err(|e| NatsError::client("in-progress ack", e))
    }

    /// Acknowledge it from synchronous code (a `map` or `inspect` of a later stage,
    /// once the item has passed it): the ack goes into the source's ack queue, whose
    /// task publishes the queued acks in runs (no task per ack). A failure to send is
    /// logged at `warn` (target `weir::nats`); the message is then delivered again
    /// after `ack_wait`.
    pub fn ack_detached(&self) {
        self.mark_settled();
        if let Some(reply) = &self.inner.message.reply {
            self.settle.acker.ack(reply.clone());
        }
    }

    /// [`nack`](Self::nack) from synchronous code (the same delays): sent by a task
    /// spawned on the source's runtime, a failure logged at `warn` (target
    /// `weir::nats`).
    pub fn nack_detached(&self, delay: Option<Duration>) {
        let inner = self.inner.clone();
        self.settle.runtime.spawn(async move {
            if let Err(error) = inner.ack_with(nak(delay)).await {
                tracing::warn!(target: "weir::nats", %error, "a detached nack was not sent");
            }
        });
    }

    /// [`term`](Self::term) from synchronous code: sent by a task spawned on the
    /// source's runtime, a failure logged at `warn` (target `weir::nats`).
    pub fn term_detached(&self) {
        self.mark_settled();
        let inner = self.inner.clone();
        self.settle.runtime.spawn(async move {
            if let Err(error) = inner.ack_with(AckKind::Term).await {
                tracing::warn!(target: "weir::nats", %error, "a detached term was not sent");
            }
        });
    }

    /// The client's message (subject, reply, headers, payload, ...).
    pub fn as_jetstream(&self) -> &jetstream::Message {
        &self.inner
    }

    /// The client's message, for what this type does not wrap.
    pub fn into_jetstream(self) -> jetstream::Message {
        self.inner
    }
}

/// The longest nack delay the server reads: its durations are 64-bit nanoseconds.
const MAX_NAK_DELAY: Duration = Duration::from_nanos(i64::MAX as u64);

/// A nack, its delay clamped to what the server reads ([`MAX_NAK_DELAY`]).
fn nak(delay: Option<Duration>) -> AckKind {
    AckKind::Nak(delay.map(|delay| delay.min(MAX_NAK_DELAY)))
}
