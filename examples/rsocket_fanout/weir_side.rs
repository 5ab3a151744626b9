//! The scenario (see `scenario.rs`) through `weir::rsocket`.
//!
//! The server's handler answers each request-stream with an endless `weir::range`
//! mapped to items; the peer's `REQUEST_N` is the only demand it sees, so it produces
//! only what the client granted. Each consumer turns its `PayloadStream` into a
//! `futures::Stream` with a prefetch of one window ([`PREFETCH`]): what the stream
//! holds ahead of the consumer, in the bridge, in the receive buffer, on the wire
//! and at the sender together, is bounded by that prefetch. A stalled consumer stops
//! polling; its bridge stops requesting, no credit goes out for that stream, and the
//! server's publisher for it is simply not asked for more. The connection's reader
//! never waits for it, so the other streams go on.

use std::sync::Arc;

use futures::StreamExt as _;
use weir::prelude::*;
use weir::rsocket::{Handler, Payload, Server};
use weir::BoxPublisher;

use super::scenario::{item, Meter, Outcome, Scenario};

/// Items each consumer's bridge requests ahead: the connection's default window.
pub const PREFETCH: u64 = 256;

/// Serves endless streams of numbered items, counting what it produces.
struct Endless {
    meter: Arc<Meter>,
    size: usize,
}

impl Handler for Endless {
    fn request_stream(&self, request: Payload) -> BoxPublisher<Payload> {
        let stream = std::str::from_utf8(&request.data)
            .ok()
            .and_then(|s| s.parse::<usize>().ok());
        let Some(stream) = stream else {
            return weir::error(weir::Error::msg("the request's data is not a stream index"))
                .boxed();
        };
        let (meter, size) = (self.meter.clone(), self.size);
        weir::range(0..u64::MAX)
            .map(move |_| Payload::data(item(meter.sent(stream), size)))
            .boxed()
    }
}

/// Runs `scenario` through weir: a server on a free loopback port, one client
/// connection, `scenario.streams` request-streams; counts into `meter`; returns once
/// `scenario.run_for` has passed since `meter.start()` and the connection closed.
pub async fn run(scenario: Scenario, meter: Arc<Meter>) -> Outcome {
    let handler = Endless {
        meter: meter.clone(),
        size: scenario.item_size,
    };
    let server = Server::bind("127.0.0.1:0", handler).await?;
    let client = weir::rsocket::connect(server.local_addr()).await?;
    let deadline = tokio::time::Instant::from_std(meter.start() + scenario.run_for);
    let consumers: Vec<_> = (0..scenario.streams)
        .map(|stream| {
            let mut items = client
                .request_stream(Payload::data(stream.to_string()))
                .into_stream(PREFETCH);
            let meter = meter.clone();
            tokio::spawn(async move {
                loop {
                    let wait = scenario.stall_left(stream, meter.elapsed());
                    if !wait.is_zero() {
                        tokio::time::sleep(wait).await;
                    }
                    match tokio::time::timeout_at(deadline, items.next()).await {
                        Ok(Some(Ok(payload))) => meter.received(stream, &payload.data),
                        Ok(Some(Err(error))) => return Err(error),
                        Ok(None) => return Err(weir::Error::msg("an endless stream ended")),
                        // The run is over: dropping `items` cancels the stream.
                        Err(_) => return Ok(()),
                    }
                }
            })
        })
        .collect();
    for consumer in consumers {
        consumer.await??;
    }
    client.close().await;
    server.shutdown();
    Ok(())
}
