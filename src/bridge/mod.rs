//! Bridges to `futures` and tokio, with demand preserved in both directions.
//!
//! Most Rust code that would use weir already speaks `futures::Stream` / `Sink` and
//! runs on tokio. Every bridge here keeps what weir is for: demand crosses the bridge
//! (a stream is polled only while there is demand; a publisher feeding a stream is
//! asked for items in batches of the stream's prefetch), and no bridge hides an
//! unbounded buffer.
//!
//! | bridge | direction | demand | buffer |
//! |---|---|---|---|
//! | `PublisherExt::into_stream(prefetch)` | publisher → `Stream<Item = Result<T, Error>>` | `prefetch` up front, then the 75% rule (`Replenish`) as the consumer takes items | one queue of exactly `prefetch` slots |
//! | `from_stream_on(stream, scheduler)`, `try_from_stream_on` | `Stream` → publisher | the stream is polled only while there is demand, one poll task at a time | none |
//! | `from_stream(stream)`, `try_from_stream` (feature `tokio`) | the same on the current tokio runtime | | none |
//! | `from_receiver(rx)` (feature `tokio`) | tokio `mpsc::Receiver` → publisher | `poll_recv` only while there is demand | the channel's own capacity |
//! | `PublisherExt::forward(sink)` | publisher → `Sink` | one item requested per `poll_ready` → `Ready` | the one item in hand |
//! | `subscribe_async(publisher, subscriber)` (feature `tokio`) | publisher → `AsyncSubscriber` on a tokio task | the next item is requested when the previous `on_next` future completes (or a window, 75% rule) | the window, allocated once |
//! | `SenderReadiness::send_or_pause` (feature `tokio`) | socket reader → push channel | the reader stops reading while the channel is `Paused` | the channel's capacity |

// ---- futures: Stream and Sink (feature `futures`) ----
mod forward;
mod from_stream;
pub(crate) mod handoff;
mod into_stream;

pub use forward::Forward;
#[cfg(feature = "tokio")]
pub use from_stream::{from_stream, try_from_stream};
pub use from_stream::{
    from_stream_on, try_from_stream_on, Fallible, FromStream, Plain, StreamSource,
};
pub use into_stream::IntoStream;
#[cfg(feature = "tokio")]
mod from_receiver;
#[cfg(feature = "tokio")]
pub use from_receiver::{from_receiver, from_receiver_on, FromReceiver};

// ---- tokio: receivers and async subscribers (feature `tokio`) ----

// Async subscribers (`subscribe_async`) and readiness for I/O producers (`send_or_pause`).
#[cfg(feature = "tokio")]
pub(crate) mod async_subscriber;
#[cfg(feature = "tokio")]
mod readiness;
#[cfg(feature = "tokio")]
pub use async_subscriber::{subscribe_async, AsyncHandle, AsyncSubscriber, SubscribeAsync};
/// The attribute an [`AsyncSubscriber`] impl needs (`#[async_trait]`), re-exported so
/// that your crate does not need to depend on `async-trait` itself.
#[cfg(feature = "tokio")]
pub use async_trait::async_trait;
#[cfg(feature = "tokio")]
pub use readiness::{AfterSend, SendOrPause, SenderReadiness};
