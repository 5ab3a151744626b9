//! RSocket over TCP: Reactive Streams across a network connection, with per-stream
//! `REQUEST_N` credit (feature `rsocket`, on tokio).
//!
//! Many logical streams share one TCP connection, and TCP's flow control is per
//! connection: with one shared window, a consumer that stops reading stalls every
//! stream on the connection. RSocket gives each stream credit of its own: a stream's
//! sender sends a PAYLOAD only against units its receiver granted with `REQUEST_N`.
//! This module keeps that promise on both ends:
//!
//! * **Receiving** ([`PayloadStream`], the publisher a request returns): the
//!   subscriber's `request(n)` is the only source of credit. The stream grants the
//!   peer at most a window of items ahead of what was delivered
//!   ([`Config::window`]): the first grant travels in the request frame, later ones
//!   as `REQUEST_N` once three quarters of the window were consumed (or at once when
//!   the subscriber asked for fewer). So a stream's receive buffer never holds more
//!   than it granted, and the connection's reader never waits for a consumer: it
//!   hands each PAYLOAD to its stream's buffer and reads on. A peer that sends more
//!   than it was granted breaks rule 1.1 on the wire: the stream ends with an error
//!   (the peer gets CANCEL or ERROR), the connection lives on.
//! * **Sending** (a handler's publisher on the server, a channel's outgoing
//!   publisher): the peer's `REQUEST_N` is the only demand the local publisher sees.
//!   It is asked for at most [`Config::send_window`] items beyond what was written,
//!   so what waits at the sender is bounded too; credit totals saturate at 2^31 − 1,
//!   the protocol's "unbounded".
//! * **The writer** (one task per connection) sends control frames (`REQUEST_N`,
//!   `CANCEL`, `ERROR`, `KEEPALIVE`, requests) before data, and takes data from the
//!   streams that have some by deficit round robin ([`Config::quantum`] bytes a
//!   turn), so a busy stream cannot starve the others. A stream whose consumer
//!   stalled stops receiving credit, so its items stay in its sender's publisher,
//!   not on the connection.
//! * **Fragmentation**: payloads larger than [`Config::fragment_size`] travel as
//!   several frames and are reassembled, up to [`Config::max_payload`].
//! * **Connection life**: the client sends `KEEPALIVE` every
//!   [`Config::keepalive`]; either side that hears nothing from its peer for
//!   [`Config::max_lifetime`] closes the connection, and every open stream ends with
//!   an error. Dropping the last [`Client`] handle (or [`Client::close`]) closes the
//!   connection once its streams ended; at most [`Config::max_streams`] streams are
//!   open at a time (further requests are refused with `REJECTED`).
//!
//! # Example
//!
//! ```
//! use futures::StreamExt as _;
//! use weir::prelude::*;
//! use weir::rsocket::{Handler, Payload, Server};
//! use weir::BoxPublisher;
//!
//! struct Numbers;
//!
//! impl Handler for Numbers {
//!     fn request_stream(&self, request: Payload) -> BoxPublisher<Payload> {
//!         let n: u64 = std::str::from_utf8(&request.data).unwrap().parse().unwrap();
//!         weir::range(0..n).map(|i| Payload::data(i.to_string())).boxed()
//!     }
//! }
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() {
//! let server = Server::bind("127.0.0.1:0", Numbers).await.unwrap();
//! let client = weir::rsocket::connect(server.local_addr()).await.unwrap();
//! let mut stream = client
//!     .request_stream(Payload::data("5"))
//!     .map(|p| String::from_utf8(p.data.to_vec()).unwrap())
//!     .into_stream(16);
//! let mut items = Vec::new();
//! while let Some(item) = stream.next().await {
//!     items.push(item.unwrap());
//! }
//! assert_eq!(items, ["0", "1", "2", "3", "4"]);
//! # }
//! ```
//!
//! # What is not here
//!
//! Resumption and leases: a SETUP asking for either is refused
//! (`UNSUPPORTED_SETUP`). The client does not answer requests from the server (it
//! refuses them with `REJECTED`).

mod client;
mod conn;
mod fragment;
pub mod frame;
mod inbound;
mod outbound;
mod server;

use std::fmt;
use std::time::Duration;

pub use client::{connect, connect_with, Client};
pub use fragment::MIN_FRAGMENT;
pub use frame::{ErrorCode, Payload};
pub use inbound::PayloadStream;
pub use server::{Handler, Server};

/// An error the peer sent (an ERROR frame), or one this side sends: its code and
/// message. A handler's publisher that fails with an [`Error`](crate::Error) whose
/// source is a `RemoteError` sends that code; any other error is sent as
/// `APPLICATION_ERROR` with the error's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteError {
    /// The ERROR frame's code.
    pub code: ErrorCode,
    /// Its message.
    pub message: String,
}

impl RemoteError {
    /// An error with `code` and `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        RemoteError {
            code,
            message: message.into(),
        }
    }

    /// This error as a weir [`Error`](crate::Error) (kind `Upstream`, message the
    /// message, source `self`).
    pub fn into_error(self) -> crate::Error {
        crate::Error::upstream(self)
    }
}

impl fmt::Display for RemoteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for RemoteError {}

/// Settings of a connection (both ends have their own). Each setter panics, with the
/// valid range in the message, when given a value out of range.
#[derive(Clone, Debug)]
pub struct Config {
    window: u32,
    send_window: u32,
    fragment_size: usize,
    max_frame: usize,
    max_payload: usize,
    max_streams: usize,
    quantum: usize,
    keepalive: Duration,
    max_lifetime: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            window: 256,
            send_window: 256,
            fragment_size: frame::MAX_FRAME_LEN,
            max_frame: frame::MAX_FRAME_LEN,
            max_payload: 64 << 20,
            max_streams: 1024,
            quantum: 16 * 1024,
            keepalive: Duration::from_secs(20),
            max_lifetime: Duration::from_secs(90),
        }
    }
}

impl Config {
    /// Items a receiving stream grants its peer ahead of delivery (and so the most
    /// its buffer holds); `1..=2^31 − 1`, default 256.
    ///
    /// # Panics
    ///
    /// Out of range: "rsocket Config::window: 0 is out of range 1..=2^31 - 1".
    pub fn window(mut self, items: u32) -> Self {
        check_u31("window", items);
        self.window = items;
        self
    }

    /// Items a sending stream asks its local publisher for ahead of what was written
    /// (never more than the peer granted); `1..=2^31 − 1`, default 256.
    ///
    /// # Panics
    ///
    /// Out of range: "rsocket Config::send_window: 0 is out of range 1..=2^31 - 1".
    pub fn send_window(mut self, items: u32) -> Self {
        check_u31("send_window", items);
        self.send_window = items;
        self
    }

    /// The largest frame this side sends: larger payloads are fragmented;
    /// `MIN_FRAGMENT..=2^24 − 1` bytes, default 2^24 − 1 (fragment only what cannot be
    /// sent whole).
    ///
    /// # Panics
    ///
    /// Out of range: "rsocket Config::fragment_size: 0 is out of range 64..=2^24 - 1".
    pub fn fragment_size(mut self, bytes: usize) -> Self {
        check_frame_len("fragment_size", bytes);
        self.fragment_size = bytes;
        self
    }

    /// The largest frame this side accepts; a longer one closes the connection with
    /// a `CONNECTION_ERROR` (before it is read: no buffer grows past this);
    /// `MIN_FRAGMENT..=2^24 − 1` bytes, default 2^24 − 1.
    ///
    /// # Panics
    ///
    /// Out of range: "rsocket Config::max_frame: 0 is out of range 64..=2^24 - 1".
    pub fn max_frame(mut self, bytes: usize) -> Self {
        check_frame_len("max_frame", bytes);
        self.max_frame = bytes;
        self
    }

    /// The largest payload (metadata and data) reassembled from fragments; a larger
    /// one fails its stream; at least 1 byte, default 64 MiB.
    ///
    /// # Panics
    ///
    /// If `bytes` is 0: "rsocket Config::max_payload must be at least 1 byte (got 0)".
    pub fn max_payload(mut self, bytes: usize) -> Self {
        assert!(
            bytes >= 1,
            "rsocket Config::max_payload must be at least 1 byte (got 0)"
        );
        self.max_payload = bytes;
        self
    }

    /// Streams open at a time on one connection (both directions together); a
    /// request beyond it is refused with `REJECTED`; at least 1, default 1024.
    ///
    /// # Panics
    ///
    /// If `streams` is 0: "rsocket Config::max_streams must be at least 1 (got 0)".
    pub fn max_streams(mut self, streams: usize) -> Self {
        assert!(
            streams >= 1,
            "rsocket Config::max_streams must be at least 1 (got 0)"
        );
        self.max_streams = streams;
        self
    }

    /// Bytes of data a ready stream may send in one turn of the writer's round robin
    /// (a larger payload waits for the turns it needs); at least 1, default 16 KiB.
    ///
    /// # Panics
    ///
    /// If `bytes` is 0: "rsocket Config::quantum must be at least 1 byte (got 0)".
    pub fn quantum(mut self, bytes: usize) -> Self {
        assert!(
            bytes >= 1,
            "rsocket Config::quantum must be at least 1 byte (got 0)"
        );
        self.quantum = bytes;
        self
    }

    /// The client's KEEPALIVE interval (sent in SETUP); 1 ms ..= 2^31 − 1 ms, default
    /// 20 s.
    pub fn keepalive(mut self, every: Duration) -> Self {
        check_millis("keepalive", every);
        self.keepalive = every;
        self
    }

    /// Silence from the peer after which the connection is dead (the client sends it
    /// in SETUP, the server uses the client's); 1 ms ..= 2^31 − 1 ms, default 90 s.
    pub fn max_lifetime(mut self, silence: Duration) -> Self {
        check_millis("max_lifetime", silence);
        self.max_lifetime = silence;
        self
    }
}

fn check_u31(what: &str, items: u32) {
    assert!(
        (1..=frame::MAX_U31).contains(&items),
        "rsocket Config::{what}: {items} is out of range 1..=2^31 - 1"
    );
}

fn check_frame_len(what: &str, bytes: usize) {
    assert!(
        (MIN_FRAGMENT..=frame::MAX_FRAME_LEN).contains(&bytes),
        "rsocket Config::{what}: {bytes} is out of range {MIN_FRAGMENT}..=2^24 - 1"
    );
}

fn check_millis(what: &str, duration: Duration) {
    let ms = duration.as_millis();
    assert!(
        (1..=u128::from(frame::MAX_U31)).contains(&ms),
        "rsocket Config::{what}: {duration:?} is out of range 1 ms..=2^31 - 1 ms"
    );
}
