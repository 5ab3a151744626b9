//! `conflate`: while downstream has no demand, merge arriving items into the held one.
//!
//! # Algorithm
//!
//! The holding stage of [`on_backpressure_buffer`](super::OnBackpressureBuffer) with
//! capacity 1 and the policy [`MergeInto`]: when the one slot is full and downstream
//! has no demand outstanding, the arriving item is merged into the held one with the
//! user's function, `merge(held, new)`, under a panic guard. Both inputs are consumed
//! by the function, so nothing can be handed to the drop hook; each merge is counted
//! as one [`DropReason::Merged`](crate::DropReason::Merged). A panic fails the stage
//! (`Lost::Failed`): upstream is cancelled and the error parked behind the queue.

use std::collections::VecDeque;
use std::fmt;

use super::on_backpressure_buffer::{Lost, OnFull};
use super::OnBackpressureBuffer;
use crate::guard::catch_in;

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
        match catch_in("conflate", || (self.0)(old, item)) {
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
