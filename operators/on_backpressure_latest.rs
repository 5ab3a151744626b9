//! `on_backpressure_latest` (and `conflate_latest`): keep only the newest undelivered
//! item.
//!
//! # Algorithm
//!
//! The holding stage of [`on_backpressure_buffer`](super::OnBackpressureBuffer) with
//! capacity 1 and the policy [`KeepLatest`]: when the one slot is full and downstream
//! has no demand outstanding, the arriving item replaces the held one, which goes to
//! the drop hook as [`DropReason::ReplacedByLatest`] (the queue's stamp is refreshed).

use std::collections::VecDeque;

use super::on_backpressure_buffer::{Lost, OnFull};
use super::OnBackpressureBuffer;
use crate::DropReason;

/// The policy "the newest item replaces the held one" (capacity 1).
#[derive(Clone, Copy, Debug, Default)]
pub struct KeepLatest;

impl<T: Send + 'static> OnFull<T> for KeepLatest {
    fn on_full(&mut self, held: &mut VecDeque<T>, item: T) -> Lost<T> {
        let replaced = held.pop_front().expect("a full slot holds an item");
        held.push_back(item);
        Lost::Item(DropReason::ReplacedByLatest, replaced)
    }
}

/// Publisher for the [`on_backpressure_latest`](crate::PublisherExt::on_backpressure_latest)
/// and [`conflate_latest`](crate::PublisherExt::conflate_latest) methods.
pub type OnBackpressureLatest<P> = OnBackpressureBuffer<P, KeepLatest>;
