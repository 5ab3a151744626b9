//! Bridges to `futures` and tokio, with demand preserved in both directions.
//!
//! Most Rust code that would use weir already speaks `futures::Stream` / `Sink` and
//! runs on tokio. Every bridge here keeps what weir is for: demand crosses the bridge
//! (a stream is polled only while there is demand; a publisher feeding a stream is
//! asked for items in batches of the stream's prefetch), and no bridge hides an
//! unbounded buffer.

// ---- futures: Stream and Sink (feature `futures`) ----

// ---- tokio: receivers and async subscribers (feature `tokio`) ----
