//! weir: an in-process Reactive Streams runtime.
//!
//! A weir is a low dam that regulates a river's flow. A [`Publisher`] never sends more
//! items than its [`Subscriber`] has requested through its [`Subscription`]; every
//! buffer is bounded; every drop is counted.
//!
//! ```
//! use weir::prelude::*;
//!
//! let total = weir::range(0u64..1_000)
//!     .map(|x| x * 3)
//!     .filter(|x| x % 2 == 0)
//!     .fold(0, |acc, x| acc + x)
//!     .wait()
//!     .unwrap();
//! assert_eq!(total, (0..1_000u64).map(|x| x * 3).filter(|x| x % 2 == 0).sum::<u64>());
//! ```
//!
//! Start with [`PublisherExt`] (every operator and sink), the [`source`] functions,
//! and the contract in [`spec`]. To write a source of your own, read
//! [`guide::writing_a_publisher`]. Threads and time live in [`runtime`] (schedulers;
//! `publish_on` / `subscribe_on` are the async boundaries), producers you cannot slow
//! down push through [`channel()`](fn@channel), and [`queue`] and [`metrics`] size
//! queues from time and report their depth, age and lag. The bridges to `futures`
//! and tokio are `weir::bridge` (features `futures`, `tokio`). The conformance kit is
//! `weir::tck` (feature `tck`).

// `deny`, not `forbid`: four modules may use `unsafe`, each allowed at its
// declaration with the reason: `queue::spsc` (the async boundary's ring),
// `queue::claim` (the channel's lane), `stage::owner` (the signal core's owner slot)
// and `stage::core` (its two accesses to that slot, made by the loop's owner).
#![deny(unsafe_code)]
// On docs.rs (nightly, `--cfg docsrs`): label each feature-gated item with its feature.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_debug_implementations, unreachable_pub)]

#[cfg(feature = "futures")]
pub mod bridge;
pub mod deadline;
pub mod demand;
pub mod drain;
mod error;
mod ext;
mod guard;
pub mod hub;
pub mod limit;
pub(crate) mod loom;
pub mod metrics;
pub mod mux;
#[cfg(feature = "nats")]
pub mod nats;
#[path = "../operators/mod.rs"]
pub mod operators;
pub mod queue;
pub mod retry;
#[cfg(feature = "rsocket")]
pub mod rsocket;
pub mod runtime;
pub mod sink;
pub mod source;
pub mod spec;
mod stage;
#[cfg(feature = "tck")]
pub mod tck;

pub use error::{DropReason, Error, ErrorKind, Overflow};
pub use ext::PublisherExt;
pub use operators::merge;
pub use source::channel;
pub use source::{
    create, defer, empty, error, from_fn, from_iter, generate, just, never, range, unfold,
};
pub use source::{interval, interval_on, timer, timer_on};
// bridges to futures::Stream / Sink and tokio receivers
#[cfg(feature = "tokio")]
pub use bridge::{from_receiver, from_stream, try_from_stream};
#[cfg(feature = "futures")]
pub use bridge::{from_stream_on, try_from_stream_on};
pub use spec::{BoxPublisher, Processor, Publisher, RawSubscription, Subscriber, Subscription};

// The README's examples are doc tests too (with every feature on, as the README's
// test command runs them).
#[cfg(all(doctest, feature = "tokio", feature = "tck"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// Guides that span several modules (their examples are compiled and run as tests).
pub mod guide {
    #[doc = include_str!("../docs/writing_a_publisher.md")]
    pub mod writing_a_publisher {}
}

/// The traits a pipeline needs: `use weir::prelude::*;`.
pub mod prelude {
    pub use crate::{Publisher, PublisherExt, Subscriber, Subscription};
}
