//! The engine room: the machinery every stage is built on, written once.
//!
//! * [`core`]: the signal core. One subscription that serves a downstream: demand,
//!   the drain loop, the cancelled / bad-request / shut-down flags, the guarded
//!   attach, the one pass-result type, and the driving of the loop inline or on a
//!   scheduler. A stage supplies only its pass body ([`Stage`]).
//!
//! Every stage that owns a subscription serving a downstream is a [`Stage`] on a
//! [`Core`]: the sources' emitter, the push channel, the time stages, the stream
//! bridge, the holding stages (`on_backpressure_*`, `conflate*`), the multi-source
//! stages (`merge`, `zip`, `flat_map`, `concat_map`), and the async boundaries
//! (`publish_on`, `subscribe_on`).

// Unsafe: two calls into the owner slot, each made by the loop's owner.
#[allow(unsafe_code)]
pub(crate) mod core;
pub(crate) mod emitter;
pub(crate) mod lanes;
// Unsafe: the core's owner slot, handed over by the loop's `Wip` (see its docs).
#[allow(unsafe_code)]
pub(crate) mod owner;
pub(crate) mod timed;
pub(crate) mod window;

pub(crate) use self::core::{Core, CoreHandle, Cx, Pass, Stage};
