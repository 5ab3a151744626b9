//! Tests of `weir::nats` against a real `nats-server` with JetStream, installed on
//! first use and started by the tests themselves on loopback (see `server.rs`).
//!
//! The binary counts the bytes its heap holds (a counting global allocator) so that
//! the slow-consumer test can show the client's memory stays bounded; that test runs
//! alone (it takes [`fixture::exclusive`], the others [`fixture::shared`]).

mod bad_input;
mod cluster;
mod faults;
mod fixture;
mod hostile;
mod server;
mod sink;
mod slow;
mod source;

#[path = "../support/live_heap.rs"]
mod live_heap;
pub use live_heap::LIVE_BYTES;
