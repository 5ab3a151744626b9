//! One operator per file. This module only declares and re-exports; every operator is
//! built by a method of [`PublisherExt`](crate::PublisherExt), where its user
//! documentation lives.

mod concat;
mod concat_map;
mod filter;
mod flat_map;
mod inner;
mod map;
mod merge;
mod merge_all;
mod on_backpressure_drop;
mod on_dropped;
mod take;
mod zip;

pub use concat::Concat;
pub use concat_map::ConcatMap;
pub use filter::Filter;
pub use flat_map::FlatMap;
pub use map::Map;
pub use merge::{Merge, MERGE_PREFETCH};
pub use merge_all::{merge, MergeAll};
pub use on_backpressure_drop::OnBackpressureDrop;
pub use on_dropped::OnDropped;
pub use take::Take;
pub use zip::{Zip, ZIP_PREFETCH};
