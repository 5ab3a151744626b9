//! `on_backpressure_latest` (and `conflate_latest`): keep only the newest undelivered
//! item.
//!
//! Demand contract: UnboundedIn, on the holding core of
//! [`on_backpressure_buffer`](super::OnBackpressureBuffer) with capacity 1 and the
//! policy [`KeepLatest`]: an item that arrives while one is held replaces it, and the
//! replaced item is reported as [`DropReason::ReplacedByLatest`]. In-flight bound: 1.

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
