//! `throttle(rate, burst, mode)`: a token bucket of `burst` tokens, refilled at `rate`.
//! Each item that passes spends one token. The bucket starts full.
//!
//! The bucket is kept exactly, in integer units (one token = `rate.per` in
//! nanoseconds, refilled by `rate.tokens` units per elapsed nanosecond), read from the
//! scheduler's clock, so no rounding accumulates and `VirtualTime` tests are exact.
//!
//! # Shaping (lossless)
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
//! # Enforcing (lossy)
//!
//! Demand contract: PassThrough with replenishment. Requests go upstream unchanged; an
//! item that finds a token passes, one that finds none is dropped
//! ([`DropReason::Rejected`], handed to the drop hook and counted) and requested again
//! (once per batch, as batch credit; item by item, as `request(1)`), so upstream's
//! outstanding demand keeps matching downstream's. No timer, no buffer, no drain
//! loop: signals only come from upstream. In-flight bound: 0.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::drain::Upstream;
use crate::metrics::{DropHook, DropReporter};
use crate::runtime::Scheduler;
use crate::source::timed::{from_nanos, Emit, Fx, Machine, TimedSubscriber};
use crate::{DropReason, Error, Publisher, Subscriber, Subscription};

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
    /// Drop it, reported as [`DropReason::Rejected`] (lossy).
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

/// The token bucket, in units of `1 / rate.tokens` nanoseconds-of-period: a token is
/// `per` units, and every elapsed nanosecond adds `tokens` units.
#[derive(Debug)]
struct Bucket {
    /// Units per token (`per` in nanoseconds).
    unit: u128,
    /// Units added per elapsed nanosecond (`tokens`).
    refill: u128,
    /// Capacity in tokens.
    burst: u64,
    /// Current level in units; starts full.
    level: u128,
    /// The last refill; `None` until first used.
    last: Option<Instant>,
}

impl Bucket {
    fn new(rate: Rate, burst: u64) -> Self {
        let unit = rate.per.as_nanos().max(1);
        Bucket {
            unit,
            refill: u128::from(rate.tokens),
            burst,
            level: unit * u128::from(burst),
            last: None,
        }
    }

    /// Refill up to `burst − reserved` tokens; return the whole tokens available.
    fn refill(&mut self, now: Instant, reserved: u64) -> u64 {
        let last = *self.last.get_or_insert(now);
        let elapsed = now.saturating_duration_since(last).as_nanos();
        let cap = self.unit * u128::from(self.burst.saturating_sub(reserved));
        self.level = self
            .level
            .saturating_add(elapsed.saturating_mul(self.refill))
            .min(cap);
        self.last = Some(now.max(last));
        u64::try_from(self.level / self.unit).unwrap_or(u64::MAX)
    }

    /// Spend `n` whole tokens (available per the last `refill`).
    fn spend(&mut self, n: u64) {
        self.level -= self.unit * u128::from(n);
    }

    /// How long until the next whole token, from the last refill.
    fn until_next(&self) -> Duration {
        let missing = self.unit - self.level % self.unit;
        from_nanos(missing.div_ceil(self.refill))
    }
}

// ---- Shaping ------------------------------------------------------------------------

/// The shaping stage's state (behind the timed core's lock).
struct Shaper<T> {
    /// The token bucket.
    bucket: Bucket,
    /// Items received and not yet delivered (they were requested against demand).
    transit: VecDeque<T>,
    /// Items requested upstream and not yet received (their tokens are spent).
    owed: u64,
    /// The one timer is outstanding.
    armed: bool,
    /// Upstream's terminal signal.
    end: Option<Result<(), Error>>,
}

impl<T: Send + 'static> Machine for Shaper<T> {
    type In = T;
    type Out = T;

    fn on_start(&mut self, fx: &mut Fx<'_, T>) {
        self.bucket.refill(fx.now(), 0);
    }

    fn on_item(&mut self, item: T, _fx: &mut Fx<'_, T>) {
        self.owed = self.owed.saturating_sub(1);
        self.transit.push_back(item);
    }

    fn on_end(&mut self, end: Result<(), Error>, _fx: &mut Fx<'_, T>) {
        self.end = Some(end);
    }

    fn on_timer(&mut self, _token: u64, _fx: &mut Fx<'_, T>) {
        self.armed = false;
    }

    fn poll(&mut self, demand: u64, fx: &mut Fx<'_, T>) -> Option<Emit<T>> {
        // Account for the time since the last refill under the reservations that held
        // during it, before any of them ends: a slot freed now fills from now on.
        let tokens = self
            .bucket
            .refill(fx.now(), self.owed + self.transit.len() as u64);
        if demand > 0 {
            if let Some(item) = self.transit.pop_front() {
                return Some(Emit::Item(item));
            }
        }
        if self.transit.is_empty() {
            if let Some(end) = self.end.take() {
                return Some(Emit::End(end));
            }
        }
        if self.end.is_some() {
            return None;
        }
        let reserved = self.owed + self.transit.len() as u64;
        let wanted = demand.saturating_sub(reserved);
        if wanted == 0 {
            return None;
        }
        let n = wanted.min(tokens);
        if n > 0 {
            self.bucket.spend(n);
            self.owed += n;
            fx.request = n;
        } else if !self.armed && reserved < self.bucket.burst {
            // (With every token reserved, only an arriving item can free one.)
            fx.arm = Some((self.bucket.until_next(), 0));
            self.armed = true;
        }
        None
    }
}

// ---- Enforcing ----------------------------------------------------------------------

/// The enforcing stage: a pass-through subscriber with a token bucket.
struct Enforcer<S, C> {
    /// The next stage.
    downstream: S,
    /// The token bucket.
    bucket: Bucket,
    /// Where timers run and what time it is.
    scheduler: C,
    /// Reports rejected items, counted once per batch.
    drops: DropReporter,
    /// Downstream's drop hook, asked for at subscribe time.
    hook: Option<DropHook>,
    /// Life-cycle state.
    upstream: Upstream,
}

impl<S, C: Scheduler> Enforcer<S, C> {
    /// Spend a token if there is one.
    fn admit(&mut self) -> bool {
        if self.bucket.refill(self.scheduler.now(), 0) > 0 {
            self.bucket.spend(1);
            true
        } else {
            false
        }
    }
}

impl<T, S, C> Subscriber<T> for Enforcer<S, C>
where
    T: Send + 'static,
    S: Subscriber<T>,
    C: Scheduler,
{
    fn on_subscribe(&mut self, subscription: Subscription) {
        if self.upstream.accept(&subscription) {
            self.hook = self.downstream.drop_hook();
            self.drops = DropReporter::new("throttle", self.hook.clone());
            self.bucket.refill(self.scheduler.now(), 0);
            self.downstream.on_subscribe(subscription);
        }
    }

    fn on_next(&mut self, item: T) {
        if !self.upstream.is_active() {
            return;
        }
        if self.admit() {
            self.downstream.on_next(item);
        } else {
            self.drops.drop_item(DropReason::Rejected, item);
            self.drops.flush();
            if let Some(upstream) = self.upstream.get() {
                upstream.request(1);
            }
        }
    }

    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        if !self.upstream.is_active() {
            return 0;
        }
        let mut rejected = 0u64;
        for item in items {
            if !self.upstream.is_active() {
                break;
            }
            if self.admit() {
                self.downstream.on_next(item);
            } else {
                self.drops.drop_item(DropReason::Rejected, item);
                rejected += 1;
            }
        }
        self.drops.flush();
        // The rejected items are asked for again, as if requested after the batch.
        rejected
    }

    fn on_error(&mut self, error: Error) {
        self.upstream.forward_error(&mut self.downstream, error);
    }

    fn on_complete(&mut self) {
        self.upstream.forward_complete(&mut self.downstream);
    }

    fn drop_hook(&self) -> Option<DropHook> {
        self.hook.clone().or_else(|| self.downstream.drop_hook())
    }
}
