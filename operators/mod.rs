//! One operator per file. This module only declares and re-exports; every operator is
//! built by a method of [`PublisherExt`](crate::PublisherExt), where its user
//! documentation lives.

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
#[cfg(feature = "futures")]
mod map_async;
mod merge;
mod merge_all;
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

// ---- time operators ----
mod buffer_timeout;
mod debounce;
mod sample;
mod throttle;
mod timeout;

pub use buffer::Buffer;
pub use concat::Concat;
pub use concat_map::ConcatMap;
pub use conflate::{Conflate, MergeInto};
pub use filter::Filter;
pub use filter_map::FilterMap;
pub use flat_map::FlatMap;
pub use inspect::Inspect;
pub use inspect_cancel::InspectCancel;
pub use inspect_request::InspectRequest;
pub use limit_rate::LimitRate;
pub use map::Map;
#[cfg(feature = "futures")]
pub use map_async::MapAsync;
pub use merge::{Merge, MERGE_PREFETCH};
pub use merge_all::{merge, MergeAll};
pub use name::Named;
pub use on_backpressure_buffer::{Lost, OnBackpressureBuffer, OnFull};
pub use on_backpressure_drop::OnBackpressureDrop;
pub use on_backpressure_latest::{KeepLatest, OnBackpressureLatest};
pub use on_drop::OnDrop;
pub use on_dropped::OnDropped;
pub use publish_on::PublishOn;
pub use reduce::Reduce;
pub use scan::Scan;
pub use skip::Skip;
pub use skip_while::SkipWhile;
pub use subscribe_on::SubscribeOn;
pub use take::Take;
pub use take_while::TakeWhile;
pub use zip::{Zip, ZIP_PREFETCH};

// ---- time operators ----
pub use buffer_timeout::BufferTimeout;
pub use debounce::Debounce;
pub use sample::Sample;
pub use throttle::{Rate, Throttle, ThrottleMode};
pub use timeout::Timeout;
