//! Tests of `weir::rsocket`, mirroring its modules.

mod frame;
