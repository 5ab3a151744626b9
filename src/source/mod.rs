//! Sources: publishers that start a pipeline.
//!
//! All synchronous sources run on the same engine (`engine.rs`): demand is read and
//! settled once per batch, `request` is re-entrant with recursion depth 1, and cancel
//! drops the subscriber at the next pass.

pub(crate) mod engine;
mod range;

pub use range::{range, Range, RangeInt};
