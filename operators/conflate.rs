//! `conflate`: while downstream has no demand, merge arriving items into the held one.
//!
//! Demand contract: UnboundedIn, on the holding core of
//! [`on_backpressure_buffer`](super::OnBackpressureBuffer) with capacity 1 and the
//! policy [`MergeInto`]: an item that arrives while one is held is merged into it with the
//! user's function, `merge(held, new)`. Both inputs are consumed by the function, so
//! nothing can be handed to the drop hook; each merge is counted as one
//! [`DropReason::Merged`](crate::DropReason::Merged). In-flight bound: 1.
//!
//! A panic in the function is caught: upstream is cancelled and downstream receives
//! `on_error(Panicked)` (the held item went into the function and is gone).

use std::collections::VecDeque;
use std::fmt;

use super::on_backpressure_buffer::{Lost, OnFull};
use super::OnBackpressureBuffer;
use crate::guard::catch;

/// The policy "merge the arriving item into the held one" (capacity 1).
#[derive(Clone)]
pub struct MergeInto<F>(pub(crate) F);

impl<F> fmt::Debug for MergeInto<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MergeInto").finish_non_exhaustive()
    }
}

impl<T, F> OnFull<T> for MergeInto<F>
where
    T: Send + 'static,
    F: FnMut(T, T) -> T + Send + 'static,
{
    fn on_full(&mut self, held: &mut VecDeque<T>, item: T) -> Lost<T> {
        let old = held.pop_back().expect("a full slot holds an item");
        match catch(|| (self.0)(old, item)) {
            Ok(merged) => {
                held.push_back(merged);
                Lost::Merged
            }
            Err(error) => Lost::Failed(error),
        }
    }
}

/// Publisher for the [`conflate`](crate::PublisherExt::conflate) method.
pub type Conflate<P, F> = OnBackpressureBuffer<P, MergeInto<F>>;
