//! TCP ingest with backpressure all the way to the sockets.
//!
//! ```text
//! cargo run --release --example tcp_ingest
//! ```
//!
//! The flow (details in `tcp_ingest/server.rs`):
//!
//! 1. A tokio TCP server listens on 127.0.0.1 (port 0) and starts its own 4 clients,
//!    each writing 20,000 lines as fast as TCP lets it.
//! 2. Per connection, a reader task reads one line at a time and offers it to one
//!    shared `weir::channel(1024, Backpressure)` with water marks 768/256, through
//!    `send_or_pause`: while the channel is `Paused` the reader stops reading its
//!    socket, the kernel buffers fill, TCP's window closes and the client's writes wait.
//! 3. A slow store (an `AsyncSubscriber`: batches of 64 lines, 1 ms per batch) consumes
//!    the channel, requesting the next line only when the previous `on_next` finished.
//! 4. Every 250 ms it prints the channel's depth, oldest-item age, lag in seconds and
//!    pause count, and each connection's lag (lines written by its client but not
//!    yet stored); at the end, per-connection figures, and it asserts that every one
//!    of the 4 × 20,000 lines was stored exactly once.
//!
//! The server code lives in `tcp_ingest/server.rs` so that `tests/tcp_ingest.rs` runs
//! the very same code (it imports that file with `#[path]`).

use std::time::Duration;

#[path = "tcp_ingest/server.rs"]
mod server;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut config = server::Config::new(4, 20_000);
    config.progress = Some(Duration::from_millis(250));
    let report = runtime.block_on(server::run(config));
    print!("{report}");
    report.assert_lossless();
    println!("ok: every line stored exactly once");
}
