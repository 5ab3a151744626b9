//! `range`: the integers of a half-open range, in order.
//!
//! Demand contract: emits exactly what is requested, one `on_next_batch` per pass;
//! completes as soon as the range is exhausted, with or without demand.

use std::ops::Range as StdRange;

use crate::spec::Sealed;
use crate::stage::emitter::{self, Emitted, Emitter};
use crate::stage::Cx;
use crate::{Error, Publisher, Subscriber};

/// The integer types [`range`] can count in.
pub trait RangeInt: Copy + PartialOrd + Send + 'static + sealed::Sealed {
    #[doc(hidden)]
    fn distance(start: Self, end: Self) -> u64;
    #[doc(hidden)]
    fn forward(start: Self, n: u64) -> Self;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! range_int {
    ($($t:ty => $u:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl RangeInt for $t {
            #[inline]
            fn distance(start: Self, end: Self) -> u64 {
                // Two's complement: the unsigned difference is exact when start < end.
                if start >= end { 0 } else { (end as $u).wrapping_sub(start as $u) as u64 }
            }
            #[inline]
            fn forward(start: Self, n: u64) -> Self {
                // Callers pass n <= distance(start, end), so the sum is in range.
                (start as $u).wrapping_add(n as $u) as $t
            }
        }
    )*};
}
range_int!(u8 => u8, u16 => u16, u32 => u32, u64 => u64, usize => usize, i8 => u8, i16 => u16, i32 => u32, i64 => u64, isize => usize);

/// Publisher for [`range`]. Cloning it gives an independent publisher of the same range.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct Range<T> {
    range: StdRange<T>,
}

/// A publisher of the integers in `range`, in order, then `on_complete`.
///
/// # Backpressure
///
/// Full: emits exactly what is requested; the items of one pass reach the subscriber
/// as one `on_next_batch`, so a fused chain settles demand once per batch.
///
/// # Timing
///
/// ```text
/// demand : 2---*
/// output : 01--234|      (range(0..5))
/// ```
///
/// # Examples
///
/// ```
/// use weir::prelude::*;
///
/// let total = weir::range(0u64..5).fold(0, |acc, x| acc + x).wait().unwrap();
/// assert_eq!(total, 10);
/// ```
pub fn range<T: RangeInt>(range: StdRange<T>) -> Range<T> {
    Range { range }
}

impl<T: RangeInt> Emitter for StdRange<T>
where
    StdRange<T>: Iterator<Item = T>,
{
    type Item = T;

    #[inline]
    fn emit<S: Subscriber<T>>(&mut self, cx: &Cx<'_>, subscriber: &mut S, budget: u64) -> Emitted {
        let available = T::distance(self.start, self.end);
        let n = budget.min(available);
        let mut credit = 0;
        if n > 0 {
            let end = T::forward(self.start, n);
            credit = cx.hand_over(subscriber, self.start..end);
            self.start = end;
        }
        let emitted = if self.start >= self.end {
            Emitted::complete(n)
        } else {
            Emitted::more(n)
        };
        emitted.with_credit(credit)
    }
}

impl<T: RangeInt> Publisher for Range<T>
where
    StdRange<T>: Iterator<Item = T>,
{
    type Item = T;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<T> + Send + 'static,
    {
        emitter::subscribe(self.range, subscriber)
    }

    /// Synchronous, with no user code: always fuses.
    fn fuses(&self, _sealed: Sealed) -> bool {
        true
    }

    #[inline]
    fn fold_fused<A, F>(self, init: A, f: F, _sealed: Sealed) -> Result<A, Error>
    where
        A: Send + 'static,
        F: FnMut(A, T) -> A + Send + 'static,
    {
        Ok(self.range.fold(init, f))
    }
}
