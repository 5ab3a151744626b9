//! `weir::merge`: a source that merges every publisher of a list.
//!
//! # Algorithm
//!
//! The merging stage of [`Merge`](super::Merge) with `n` lane slots instead of two:
//! the list is collected once, at construction, and its length fixes the slots; each
//! source is connected to its lane while the stage's core owns its loop. With no
//! sources the lane set is finished from the start, so the stream completes at once.
//! Fusion as for `Merge`: when every source fuses, a fold at the end folds the sources
//! in the list's order, one after another.

use super::merge::{connect, fold_in_turn, start, MERGE_PREFETCH};
use crate::spec::Sealed;
use crate::{Error, Publisher, Subscriber};

/// Publisher for the [`merge`] source: every publisher of a list.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct MergeAll<P> {
    sources: Vec<P>,
}

impl<P> MergeAll<P> {
    pub(crate) fn new(sources: impl IntoIterator<Item = P>) -> Self {
        MergeAll {
            sources: sources.into_iter().collect(),
        }
    }
}

impl<P: Publisher> Publisher for MergeAll<P> {
    type Item = P::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<P::Item> + Send + 'static,
    {
        let sources = self.sources;
        // No outer source: with no publishers the stream is complete at once.
        start(
            "merge",
            subscriber,
            sources.len(),
            MERGE_PREFETCH as usize,
            false,
            move |set, core| {
                for source in sources {
                    connect(set, source, core);
                }
            },
        );
    }

    fn in_flight_bound(&self) -> u64 {
        self.sources.iter().fold(0u64, |sum, p| {
            sum.saturating_add(p.in_flight_bound())
                .saturating_add(MERGE_PREFETCH)
        })
    }

    fn fuses(&self, sealed: Sealed) -> bool {
        self.sources.iter().all(|source| source.fuses(sealed))
    }

    #[inline]
    fn fold_fused<A, F>(self, init: A, f: F, sealed: Sealed) -> Result<A, Error>
    where
        A: Send + 'static,
        F: FnMut(A, P::Item) -> A + Send + 'static,
    {
        let mut state = (init, f);
        for source in self.sources {
            state = fold_in_turn(source, state, sealed)?;
        }
        Ok(state.0)
    }
}

/// Merge every publisher of `sources` (all of one type; use
/// [`boxed`](crate::PublisherExt::boxed) for mixed ones): their items interleaved as
/// they arrive, each source's own order kept.
///
/// # Backpressure
///
/// Prefetching, per source: each source is asked for [`MERGE_PREFETCH`] items up
/// front and replenished by the 75% rule as downstream takes its items; downstream
/// never gets more than it requested. In-flight bound: the sources' bounds plus
/// `MERGE_PREFETCH` per source.
///
/// # Timing
///
/// ```text
/// a      : 1---2---3|
/// b      : --x---y|
/// output : 1-x-2-y-3|   (completes when every source has)
/// ```
///
/// # Errors
///
/// The first error of any source is signalled at once; the other sources are
/// cancelled and their queued items released.
///
/// # Cancellation
///
/// Cancels every source; queued items (at most `MERGE_PREFETCH` per source) are
/// released.
///
/// # Fusion
///
/// When every source fuses (a synchronous source with only closure stages after it:
/// see [`fold_with`](crate::PublisherExt::fold_with)) and a fold ends the chain, no
/// lane is made: the fold takes the sources' items one source after another, in the
/// list's order, in the calling thread.
///
/// # Panics
///
/// Never. With no sources, the stream completes at once.
///
/// # Examples
///
/// ```
/// use weir::prelude::*;
///
/// let mut all = weir::merge(vec![weir::range(0u32..3), weir::range(10..12)])
///     .collect()
///     .wait()
///     .unwrap();
/// all.sort();
/// assert_eq!(all, vec![0, 1, 2, 10, 11]);
/// ```
pub fn merge<I>(sources: I) -> MergeAll<I::Item>
where
    I: IntoIterator,
    I::Item: Publisher,
{
    MergeAll::new(sources)
}
