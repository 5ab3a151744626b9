//! Sources: publishers that start a pipeline.
//!
//! All synchronous sources run on one emitter stage (the engine room's
//! `stage::emitter`): demand is read and settled once per batch, `request` is re-entrant with recursion depth 1, `request(0)`
//! is answered with the rule 3.9 error, and cancel drops the subscriber at the next
//! pass.
//!
//! | source | emits |
//! |---|---|
//! | [`range`](range()) | the integers of a half-open range |
//! | [`from_iter`] | the items of an iterator |
//! | [`just`] | one item |
//! | [`empty`] | nothing; completes at once |
//! | [`error()`] | nothing; fails at once |
//! | [`never()`] | nothing, ever |
//! | [`generate`](generate()) | what a stateful closure returns, once per requested item |
//! | [`from_fn`](from_fn()) | what a closure returns (`Some`), once per requested item, until `None` |
//! | [`unfold`](unfold()) | what a closure returns from a state it threads through, until `None` |
//! | [`create`](create()) | what your code pushes through an [`Emitter`], refused beyond demand |
//! | [`defer`](defer()) | whatever publisher a factory builds at subscribe time |
//! | [`channel()`](fn@channel) | what producers push through a [`Sender`] (sockets, callbacks, other threads) |
//! | [`interval`](interval()) / [`interval_on`] | 0, 1, 2, … one per period (on the shared pool, or a scheduler of yours); ticks without demand are held as a count |
//! | [`timer`](timer()) / [`timer_on`] | one `0u64` after a delay (on the shared pool, or a scheduler of yours), held until there is demand |
//!
//! The time sources, like the time operators, run on the engine room's timed stage: one
//! drain loop for upstream, downstream and timer signals, at most one timer per stage.

pub mod channel;
mod create;
mod defer;
mod generate;
mod iter;
mod range;
mod signal;

pub use channel::{channel, Channel, ChannelBuilder, ChannelPolicy, Sender, TrySendError};
pub use create::{create, Create, EmitError, Emitter, EmitterClosed, Ready};
pub use defer::{defer, Defer};
pub use generate::{from_fn, generate, unfold, FromFn, Generate, Step, Unfold};
pub use iter::{empty, from_iter, just, FromIter};
pub use range::{range, Range, RangeInt};
pub use signal::{error, never, Fail, Never};

mod interval;
mod timer;
pub use interval::{interval, interval_on, Interval};
pub use timer::{timer, timer_on, Timer};
