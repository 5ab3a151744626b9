//! The `Processor` trait.

use super::{Publisher, Subscriber};

/// A stage that is both a subscriber (of `T`) and a publisher (rule 4.1).
///
/// A processor that does not recover from `on_error` must pass it downstream
/// immediately (4.2), and should cancel upstream when its downstream cancels.
pub trait Processor<T>: Subscriber<T> + Publisher {}
