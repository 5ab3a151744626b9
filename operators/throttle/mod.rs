//! `throttle(rate, burst, mode)`: a token bucket (`bucket.rs`) of `burst` tokens, refilled at `rate`.
//! Each item that passes spends one token. The bucket starts full.
//!
//! The bucket is kept exactly, in integer units (one token = `rate.per` in
//! nanoseconds, refilled by `rate.tokens` units per elapsed nanosecond), read from the
//! scheduler's clock, so no rounding accumulates and `VirtualTime` tests are exact.
//!
//! # Shaping (lossless, `shaping.rs`)
//!
//! Demand contract: Paced. The stage asks upstream for items only as tokens allow: it
//! requests `min(tokens, downstream's outstanding demand − items already owed)` and
//! spends the tokens at request time. Tokens reserved for requested items count
//! against the bucket's capacity (the bucket refills only up to `burst − reserved`), so
//! however late upstream delivers, no window of time sees more than
//! `burst + rate × window` items. Upstream is paced; nothing is dropped. When
//! downstream wants more and the bucket is empty, one timer is armed for the moment
//! the next token is due. Items in transit never exceed `burst` (in-flight bound).
//!
//! # Enforcing (lossy, `enforcing.rs`)
//!
//! Demand contract: PassThrough with replenishment. Requests go upstream unchanged; an
//! item that finds a token passes, one that finds none is dropped
//! ([`DropReason::Rejected`], handed to the drop hook and counted) and requested again
//! (once per batch, as batch credit; item by item, as `request(1)`), so upstream's
//! outstanding demand keeps matching downstream's. No timer, no buffer, no drain
//! loop: signals only come from upstream. In-flight bound: 0.

use std::collections::VecDeque;
use std::time::Duration;

use crate::drain::Upstream;
use crate::metrics::DropReporter;
use crate::runtime::Scheduler;
use crate::stage::timed::TimedSubscriber;
use crate::{Publisher, Subscriber};

use bucket::Bucket;
use enforcing::Enforcer;
use shaping::Shaper;

mod bucket;
mod enforcing;
mod shaping;

/// The largest bucket.
const MAX_BURST: u64 = 1 << 30;

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
        assert!(
            (1..=MAX_BURST).contains(&burst),
            "throttle burst must be in 1..=1073741824 (got {burst})"
        );
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
