//! Tests of `weir::nats` against a real `nats-server` with JetStream, installed on
//! first use and started by the tests themselves on loopback (see `server.rs`).

mod cluster;
mod faults;
mod fixture;
mod server;
mod sink;
mod source;
