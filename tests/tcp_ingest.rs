//! The `tcp_ingest` example's run, on loopback with a bounded runtime (two workers):
//! N clients × M lines through socket readers that stop reading while the channel is
//! paused, one `weir::channel(Backpressure)` with water marks, and a slow
//! `AsyncSubscriber` store. Every line must be stored exactly once (a count per
//! client and line id), and the server's memory must not grow with M: the channel's
//! peak depth (its `QueueMonitor`, sampled at every offer) stays within its
//! capacity and each reader's buffers within `READ_BUFFER + MAX_LINE`, for M = 2,000
//! and for M = 20,000 alike.
//!
//! The server code is the example's own: `examples/tcp_ingest/server.rs` is one
//! module file that the example (`examples/tcp_ingest.rs`) and this test both import
//! with `#[path]`, so what is tested is exactly what the example runs, with no copy.

#[path = "../examples/tcp_ingest/server.rs"]
mod server;

use server::{Config, Report, MAX_LINE, READ_BUFFER};

const CLIENTS: u32 = 4;

fn run(lines_per_client: u32) -> Report {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let report = runtime.block_on(server::run(Config::new(CLIENTS, lines_per_client)));
    println!("{report}");
    report
}

#[test]
fn every_line_is_stored_once_and_memory_does_not_grow_with_the_line_count() {
    let small = run(2_000);
    let large = run(20_000);
    for report in [&small, &large] {
        // Exactly once: the per-(client, line id) counts are all 1.
        report.assert_lossless();
        assert_eq!(
            report.stored_total,
            u64::from(CLIENTS) * u64::from(report.config.lines_per_client)
        );
        // Bounded by construction, whatever M is.
        assert!(report.peak_depth <= report.config.capacity);
        // The readers stop reading once paused: above the high mark there is at most
        // the one line each other reader already had in hand.
        assert!(
            report.peak_depth < report.config.high + CLIENTS as usize,
            "peak depth {} with high mark {} and {CLIENTS} readers",
            report.peak_depth,
            report.config.high
        );
        assert!(report.peak_read_buffer <= READ_BUFFER + MAX_LINE);
    }
    // Ten times the lines, the same bound: the peak depth is capped by the channel's
    // capacity, not by M (and the store was slow enough to fill it to the high mark).
    assert!(large.peak_depth <= small.config.capacity);
    // TCP pushed back: no client got far ahead of the store (its lines in flight are
    // bounded by the socket buffers, the read buffer, the channel and one batch, not
    // by M).
    for conn in &large.conns {
        assert!(
            conn.peak_lag_lines < u64::from(large.config.lines_per_client) / 2,
            "client {} wrote {} lines ahead of the store",
            conn.client,
            conn.peak_lag_lines
        );
    }
    assert!(
        large.queue.pauses > 0,
        "the slow store must have paused the readers"
    );
    println!(
        "peak depth: M = 2,000 → {}, M = 20,000 → {} (capacity {})",
        small.peak_depth, large.peak_depth, small.config.capacity
    );
}
