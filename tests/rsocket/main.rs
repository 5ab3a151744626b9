//! Tests of `weir::rsocket`, mirroring its modules, and interop tests against real
//! peers (rsocket-py, rsocket-js), installed on first use.

#[path = "../support/unruly.rs"]
pub mod unruly;

mod conn;
mod frame;
mod hostile;
mod interop;
mod isolation;
mod misbehaving;
mod peers;
mod service;
mod tck;
mod wire;
