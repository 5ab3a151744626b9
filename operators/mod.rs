//! One operator per file. This module only declares and re-exports; every operator is
//! built by a method of [`PublisherExt`](crate::PublisherExt), where its user
//! documentation lives.

mod buffer;
mod filter;
mod limit_rate;
mod map;
mod on_backpressure_drop;
mod on_dropped;
mod take;

pub use buffer::Buffer;
pub use filter::Filter;
pub use limit_rate::LimitRate;
pub use map::Map;
pub use on_backpressure_drop::OnBackpressureDrop;
pub use on_dropped::OnDropped;
pub use take::Take;
