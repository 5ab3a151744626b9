//! The typed errors of `weir::nats`.

use std::fmt;
use std::time::Duration;

/// What went wrong talking to NATS. Every wait in `weir::nats` has a timeout, so a
/// server that is down or silent ends in [`NatsError::Timeout`] (or the client's own
/// error), never in a hang.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NatsError {
    /// No stream of that name on the server.
    StreamNotFound {
        /// The stream asked for.
        stream: String,
    },
    /// The stream has no consumer of that name.
    ConsumerNotFound {
        /// The stream.
        stream: String,
        /// The consumer asked for.
        consumer: String,
    },
    /// No stream listens on the subject published to (the server answered "no
    /// responders"): a wrong subject, or the stream was deleted.
    NoStream {
        /// The subject published to.
        subject: String,
    },
    /// The stream refused the message (full under `discard: new`, a limit, a wrong
    /// expected sequence, ...), with the server's reason.
    Refused {
        /// The subject published to.
        subject: String,
        /// The server's reason.
        reason: String,
    },
    /// An operation did not finish in time.
    Timeout {
        /// What was waited for.
        what: &'static str,
        /// How long.
        after: Duration,
    },
    /// The sink is full and the caller's deadline passed: try again after
    /// `retry_after` (an estimate from the rate of publish acks).
    Slow {
        /// When a retry is likely to find room.
        retry_after: Duration,
    },
    /// No server could be reached at start ([`connect`](super::connect)).
    Unreachable {
        /// The client's message.
        message: String,
    },
    /// The sink or source has ended (completed, failed or cancelled), or its
    /// runtime shut down.
    Closed,
    /// The sink was stopped by [`SinkDone::cancel`](super::SinkDone::cancel).
    Cancelled,
    /// User code that a NATS stage runs for the user panicked (the classifier or a
    /// hook of the sink's [`RetryPolicy`](crate::retry::RetryPolicy)); the stage
    /// ended and cancelled upstream.
    Panicked {
        /// The panic's message.
        message: String,
    },
    /// Any other failure of the client or the server, with its message.
    Client {
        /// What was being done.
        what: &'static str,
        /// The client's or server's message.
        message: String,
    },
}

impl NatsError {
    /// A failure of `what`, from the client's error.
    pub(crate) fn client(what: &'static str, error: impl fmt::Display) -> Self {
        NatsError::Client {
            what,
            message: error.to_string(),
        }
    }

    /// True for errors a retry may cure (timeouts, a slow sink, client failures
    /// such as a lost connection); false for a missing stream or consumer, a refusal
    /// or a closed sink.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            NatsError::Timeout { .. }
                | NatsError::Slow { .. }
                | NatsError::Client { .. }
                | NatsError::Unreachable { .. }
        )
    }
}

impl fmt::Display for NatsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NatsError::StreamNotFound { stream } => write!(f, "no JetStream stream {stream:?}"),
            NatsError::ConsumerNotFound { stream, consumer } => {
                write!(f, "stream {stream:?} has no consumer {consumer:?}")
            }
            NatsError::NoStream { subject } => {
                write!(f, "no JetStream stream listens on subject {subject:?}")
            }
            NatsError::Refused { subject, reason } => {
                write!(f, "the stream refused a message on {subject:?}: {reason}")
            }
            NatsError::Timeout { what, after } => write!(f, "{what} timed out after {after:?}"),
            NatsError::Slow { retry_after } => {
                write!(f, "the sink is full; retry after {retry_after:?}")
            }
            NatsError::Unreachable { message } => {
                write!(f, "no NATS server could be reached: {message}")
            }
            NatsError::Closed => f.write_str("the NATS stage has ended"),
            NatsError::Cancelled => f.write_str("the NATS sink was cancelled"),
            NatsError::Panicked { message } => {
                write!(f, "user code run by the NATS stage panicked: {message}")
            }
            NatsError::Client { what, message } => write!(f, "{what} failed: {message}"),
        }
    }
}

impl std::error::Error for NatsError {}

/// Runs `future` with a timeout, mapping the elapsed case to [`NatsError::Timeout`].
pub(crate) async fn within<F: std::future::Future>(
    what: &'static str,
    after: Duration,
    future: F,
) -> Result<F::Output, NatsError> {
    tokio::time::timeout(after, future)
        .await
        .map_err(|_| NatsError::Timeout { what, after })
}
