//! One operator per file. This module only declares and re-exports; every operator is
//! built by a method of [`PublisherExt`](crate::PublisherExt), where its user
//! documentation lives.

mod buffer;
mod conflate;
mod filter;
mod limit_rate;
mod map;
mod on_backpressure_buffer;
mod on_backpressure_drop;
mod on_backpressure_latest;
mod on_dropped;
mod take;

pub use buffer::Buffer;
pub use conflate::{Conflate, Merge};
pub use filter::Filter;
pub use limit_rate::LimitRate;
pub use map::Map;
pub use on_backpressure_buffer::{Lost, OnBackpressureBuffer, OnFull};
pub use on_backpressure_drop::OnBackpressureDrop;
pub use on_backpressure_latest::{KeepLatest, OnBackpressureLatest};
pub use on_dropped::OnDropped;
pub use take::Take;
