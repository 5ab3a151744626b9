//! One operator per file. This module only declares and re-exports; every operator is
//! built by a method of [`PublisherExt`](crate::PublisherExt), where its user
//! documentation lives.

mod filter;
mod filter_map;
mod inspect;
mod inspect_cancel;
mod inspect_request;
mod map;
mod on_backpressure_drop;
mod on_dropped;
mod reduce;
mod scan;
mod skip;
mod skip_while;
mod take;
mod take_while;

pub use filter::Filter;
pub use filter_map::FilterMap;
pub use inspect::Inspect;
pub use inspect_cancel::InspectCancel;
pub use inspect_request::InspectRequest;
pub use map::Map;
pub use on_backpressure_drop::OnBackpressureDrop;
pub use on_dropped::OnDropped;
pub use reduce::Reduce;
pub use scan::Scan;
pub use skip::Skip;
pub use skip_while::SkipWhile;
pub use take::Take;
pub use take_while::TakeWhile;
