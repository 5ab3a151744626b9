//! `throttle(rate, burst, mode)`: implementation notes. The user contract is on
//! [`PublisherExt::throttle`](crate::PublisherExt::throttle).
//!
//! One token bucket ([`Bucket`], `bucket.rs`) of `burst` tokens, starting full. It is
//! kept exactly, in integer units (one token = `rate.per` in nanoseconds; every
//! elapsed nanosecond adds `rate.tokens` units), and refilled from the scheduler's
//! clock, so no rounding accumulates and `VirtualTime` tests are exact. `subscribe`
//! picks the stage by mode.
//!
//! # Shaping (`shaping.rs`)
//!
//! A `Machine` on the timed core (`src/stage/timed/`). It spends tokens when it
//! *requests*: `poll` asks upstream for `min(tokens, demand − reserved)`, where
//! `reserved` is `owed` (requested, not yet received) plus `transit` (received, not
//! yet delivered). Reserved tokens count against the bucket, which refills only up to
//! `burst − reserved`, so however late upstream delivers, no window of time sees more
//! than `burst + rate × window` items. Items wait in `transit` and go out against
//! demand. When downstream wants more and no token is free, one timer is armed for
//! the moment the next token is due (none while every token is reserved: only an
//! arriving item can free one).
//!
//! # Enforcing (`enforcing.rs`)
//!
//! A plain subscriber: no timer, no buffer, no drain loop; signals only come from
//! upstream. Downstream receives upstream's subscription itself. Each item spends a
//! token if there is one; a batch's admitted items go downstream as one
//! `on_next_batch` (a single item with `on_next`); an item that finds no token is
//! dropped as `Rejected` through the [`DropReporter`], flushed once per batch. The
//! rejected count is returned as the batch's credit, added to whatever credit
//! downstream returns for the admitted items (item by item: `request(1)`), so
//! upstream's outstanding demand keeps matching downstream's.

use std::collections::VecDeque;
use std::time::Duration;

use crate::drain::Upstream;
use crate::metrics::DropReporter;
use crate::runtime::Scheduler;
use crate::stage::timed::TimedSubscriber;
use crate::stage::window;
use crate::{Publisher, Subscriber};

use bucket::Bucket;
use enforcing::Enforcer;
use shaping::Shaper;

mod bucket;
mod enforcing;
mod shaping;

/// A refill rate: `tokens` per `per`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rate {
    /// Tokens added per period.
    tokens: u64,
    /// The refill period.
    per: Duration,
}

impl Rate {
    /// `tokens` every `per` (validated by [`throttle`](crate::PublisherExt::throttle)).
    pub const fn new(tokens: u64, per: Duration) -> Self {
        Rate { tokens, per }
    }

    /// `tokens` per second.
    pub const fn per_second(tokens: u64) -> Self {
        Rate::new(tokens, Duration::from_secs(1))
    }

    /// Tokens added per period.
    pub fn tokens(&self) -> u64 {
        self.tokens
    }

    /// The period.
    pub fn per(&self) -> Duration {
        self.per
    }
}

/// What [`throttle`](crate::PublisherExt::throttle) does with an item the bucket has no
/// token for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ThrottleMode {
    /// Delay it: upstream is only asked for items as tokens allow (lossless).
    Shaping,
    /// Drop it, reported as [`DropReason::Rejected`](crate::DropReason::Rejected) (lossy).
    Enforcing,
}

/// Publisher for the [`throttle`](crate::PublisherExt::throttle) method.
#[derive(Clone, Debug)]
#[must_use = "publishers do nothing until subscribed"]
pub struct Throttle<P, C> {
    /// The upstream publisher.
    source: P,
    /// The refill rate.
    rate: Rate,
    /// The bucket's capacity in tokens.
    burst: u64,
    /// Shaping or Enforcing.
    mode: ThrottleMode,
    /// Where timers run and what time it is.
    scheduler: C,
}

impl<P, C> Throttle<P, C> {
    pub(crate) fn new(source: P, rate: Rate, burst: u64, mode: ThrottleMode, scheduler: C) -> Self {
        assert!(
            rate.tokens >= 1,
            "throttle rate must add at least 1 token per period (got {} per {:?})",
            rate.tokens,
            rate.per
        );
        assert!(
            !rate.per.is_zero(),
            "throttle rate period must be greater than zero (got {} per 0ns)",
            rate.tokens
        );
        window::validate("throttle burst", burst);
        Throttle {
            source,
            rate,
            burst,
            mode,
            scheduler,
        }
    }
}

impl<P: Publisher, C: Scheduler + Clone> Publisher for Throttle<P, C> {
    type Item = P::Item;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<P::Item> + Send + 'static,
    {
        match self.mode {
            ThrottleMode::Shaping => {
                let machine = Shaper {
                    bucket: Bucket::new(self.rate, self.burst),
                    transit: VecDeque::new(),
                    owed: 0,
                    armed: false,
                    end: None,
                };
                self.source.subscribe(TimedSubscriber::new(
                    "throttle",
                    subscriber,
                    machine,
                    self.scheduler,
                ));
            }
            ThrottleMode::Enforcing => self.source.subscribe(Enforcer {
                downstream: subscriber,
                bucket: Bucket::new(self.rate, self.burst),
                scheduler: self.scheduler,
                drops: DropReporter::new("throttle", None),
                hook: None,
                upstream: Upstream::Idle,
            }),
        }
    }

    fn in_flight_bound(&self) -> u64 {
        let own = match self.mode {
            ThrottleMode::Shaping => self.burst,
            ThrottleMode::Enforcing => 0,
        };
        self.source.in_flight_bound().saturating_add(own)
    }
}
