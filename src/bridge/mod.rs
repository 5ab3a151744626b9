//! Bridges to `futures` and tokio, with demand preserved in both directions.
//!
//! Most Rust code that would use weir already speaks `futures::Stream` / `Sink` and
//! runs on tokio. Every bridge here keeps what weir is for: demand crosses the bridge
//! (a stream is polled only while there is demand; a publisher feeding a stream is
//! asked for items in batches of the stream's prefetch), and no bridge hides an
//! unbounded buffer.

// ---- futures: Stream and Sink (feature `futures`) ----

// ---- tokio: receivers and async subscribers (feature `tokio`) ----

// Async subscribers (`subscribe_async`) and readiness for I/O producers (`send_or_pause`).
#[cfg(feature = "tokio")]
mod async_subscriber;
#[cfg(feature = "tokio")]
mod readiness;
#[cfg(feature = "tokio")]
pub use async_subscriber::{
    subscribe_async, AsyncHandle, AsyncSubscriber, SubscribeAsync, MAX_WINDOW,
};
#[cfg(feature = "tokio")]
pub use readiness::{AfterSend, SendOrPause, SenderReadiness};
