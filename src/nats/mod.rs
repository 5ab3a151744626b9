//! Demand that ends at a durable log: a NATS JetStream source (and, to come, sink).
//!
//! In-process demand stops at the process boundary. With a JetStream stream between
//! processes, a slow consumer becomes lag on the server (counted, durable, shared
//! by several consumers) instead of pressure on the producer. This module keeps
//! the hop demand-correct:
//!
//! * [`Source`]: a `Publisher` over a JetStream *pull consumer*. Downstream's
//!   `request(n)` decides how many messages are pulled (never more; a prefetch
//!   window with the 75% rule); items are [`Message`]s carrying their ack handle and
//!   delivery count; the consumer's backlog is visible as a queue
//!   ([`Publisher::queue_monitor`](crate::Publisher::queue_monitor): depth = pending
//!   on the server, lag = pending ÷ consume rate).
//!
//! Everything runs on a tokio runtime through the official client
//! ([`async_nats`]); every wait has a timeout, and failures are typed
//! ([`NatsError`]).
//!
//! # Example
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use weir::prelude::*;
//! use weir::nats::{AckMode, Source};
//!
//! let js = async_nats::jetstream::new(async_nats::connect("127.0.0.1:4222").await?);
//! // The consumer `workers` of stream `EVENTS`, 64 messages pulled ahead at most,
//! // each acked once the subscriber's `on_next` returned.
//! let source = Source::bind(&js, "EVENTS", "workers")
//!     .await?
//!     .window(64)
//!     .ack(AckMode::OnDelivery)
//!     .build();
//! let monitor = source.queue_monitor().expect("the source describes its backlog");
//! let processed = tokio::task::spawn_blocking(move || {
//!     source
//!         .take(1_000)
//!         .publish_on(weir::runtime::ThreadPool::new(1), 64)
//!         .fold(0u64, |n, _message| n + 1)
//!         .wait()
//! })
//! .await??;
//! println!("{processed} processed; backlog drains in {:?}", monitor.snapshot().lag());
//! # Ok(())
//! # }
//! ```

mod acker;
mod error;
mod ledger;
mod message;
mod sink;
mod source;

pub use self::error::NatsError;
pub use self::message::Message;
pub use self::sink::{Ingress, NotTaken, Outgoing, Sink, SinkBuilder, SinkDone, SinkReport};
pub use self::source::{AckMode, Source, SourceBuilder, SourceStats};

use std::time::Duration;

/// Connects to a NATS server (any of `urls`, e.g. `"nats://127.0.0.1:4222"`, or a
/// list for a cluster) within `timeout` and returns its JetStream context. Once
/// connected, the client reconnects by itself after losing the server.
///
/// # Errors
///
/// [`NatsError::Unreachable`] when no server answers (down, wrong address,
/// refused), [`NatsError::Timeout`] when connecting takes longer than `timeout`.
pub async fn connect(
    urls: impl async_nats::ToServerAddrs,
    timeout: Duration,
) -> Result<async_nats::jetstream::Context, NatsError> {
    let connecting = async_nats::ConnectOptions::new()
        .connection_timeout(timeout)
        .connect(urls);
    let client = error::within("connecting", timeout, connecting)
        .await?
        .map_err(|e| NatsError::Unreachable {
            message: e.to_string(),
        })?;
    Ok(async_nats::jetstream::new(client))
}
