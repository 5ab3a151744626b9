//! Behaviour tests of the operators, one module per file of `operators/`.
//!
//! Each module starts with the baseline set (`smoke`, `respects_demand`,
//! `cancel_stops_upstream`, `error_propagates_once`, `completes`, and a proptest model
//! check against `Iterator`), then adds what is specific to its operator. The baseline
//! checks are written once, in `baseline`; each module calls them with its operator
//! and its expectations. The shared fixtures (the counting adaptor, the model harness,
//! failing and rule-breaking publishers) are in `tests/support`.

#[path = "../support/mod.rs"]
pub mod support;

/// The adaptive-limit story of `examples/overload_stories.rs`, asserted in `map_async`.
#[path = "../../examples/overload_stories/adaptive_limit.rs"]
mod adaptive_limit;

mod baseline;
mod buffer;
mod concat;
mod concat_map;
mod conflate;
mod filter;
mod filter_map;
mod flat_map;
mod inspect;
mod inspect_cancel;
mod inspect_request;
mod limit_rate;
mod map;
#[cfg(feature = "tokio")]
mod map_async;
mod merge;
mod name;
mod on_backpressure_buffer;
mod on_backpressure_drop;
mod on_backpressure_latest;
mod on_drop;
mod on_dropped;
mod publish_on;
mod reduce;
mod scan;
mod skip;
mod skip_while;
mod subscribe_on;
mod take;
mod take_while;
mod zip;

// time operators
mod buffer_timeout;
mod debounce;
mod sample;
mod throttle;
mod timeout;
