//! Behaviour tests of the operators, one module per file of `operators/`.
//!
//! Each module starts with the baseline set (`smoke`, `respects_demand`,
//! `cancel_stops_upstream`, `error_propagates_once`, `completes`, and a proptest model
//! check against `Iterator`), then adds what is specific to its operator. The shared
//! fixtures (the counting adaptor, the model harness, a rule-breaking publisher) are in
//! `tests/support`.

#[path = "../support/mod.rs"]
pub mod support;

mod buffer;
mod conflate;
mod filter;
mod limit_rate;
mod map;
mod on_backpressure_buffer;
mod on_backpressure_drop;
mod on_backpressure_latest;
mod take;
