//! Sinks: subscribers that end a pipeline and hand back a [`SinkHandle`].
//!
//! Every sink requests in batches through [`Replenish`](crate::demand::Replenish):
//! `prefetch` up front, then what it consumed each time 75% of the window was used.
//! [`DEFAULT_PREFETCH`] is used unless you pass one (`fold_with` and friends);
//! [`UNBOUNDED`](crate::demand::UNBOUNDED) requests everything at once.

mod blocking_iter;
mod fold;
pub(crate) mod handle;

pub(crate) use blocking_iter::blocking_iter;
pub use blocking_iter::BlockingIter;
pub(crate) use fold::{fold, fold_subscriber};
pub use handle::{SinkFuture, SinkHandle};

/// The prefetch window sinks use unless told otherwise.
pub const DEFAULT_PREFETCH: u64 = 256;
