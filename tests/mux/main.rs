//! `weir::mux`: the acceptance scenarios of credit multiplexing (named after their
//! A-numbers), deterministic under `VirtualTime` and again on real threads, and the
//! conformance kit on a channel's two ends.

mod conformance;
mod threads;
mod virtual_time;
