//! The `futures` bridges: `into_stream`, `from_stream` / `from_receiver`,
//! `forward`, and a round trip through all of them. Everything runs on tokio
//! multi-thread runtimes and asserts counts (polls, requests, items outstanding),
//! never timings.

#[path = "support/failing.rs"]
pub mod failing;
#[path = "bridge_streams/support.rs"]
mod support;

#[path = "bridge_streams/forward.rs"]
mod forward;
#[path = "bridge_streams/from_stream.rs"]
mod from_stream;
#[path = "bridge_streams/into_stream.rs"]
mod into_stream;
#[path = "bridge_streams/round_trip.rs"]
mod round_trip;
