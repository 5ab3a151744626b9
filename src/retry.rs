//! Retries for fallible async calls: at most `k` attempts per item, exponential
//! backoff with jitter, a server's retry-after hint, a retry budget that keeps
//! retries from amplifying an overload, and an optional circuit breaker.
//!
//! A [`RetryPolicy`] wraps a call `f: Fn(T) -> Fut`, `Fut: Future<Output =
//! Result<U, E>>`, into a closure ([`RetryPolicy::wrap`]) whose futures
//! ([`RetryFuture`]) call `f` again, with a clone of the item, when an attempt fails.
//! The wrapped closure is what [`map_async`] and [`map_async_on`] take: each item of
//! the stage becomes one call, retried inside its slot, and its result
//! (`Result<U, RetryError<E>>`) is an item like any other. Every time is read from a
//! [`Scheduler`]'s clock ([`Scheduler::now`]) and every wait is a timer of that
//! scheduler, so under [`VirtualTime`](crate::runtime::VirtualTime) a test decides
//! when each retry happens.
//!
//! # One call
//!
//! ```text
//!  +-> breaker admits the attempt? -- no --> CircuitOpen { retry_after }
//!  |        | yes
//!  |   f(item) (the first attempt is counted by the budget)
//!  |        |
//!  |   Ok(u) ------------------------------> breaker.on_success, Ok(u)
//!  |   Err(e): classify(&e)
//!  |        Fail ----------------------------> breaker.on_success, Failed(e)
//!  |        Retry / RetryAfter(hint): breaker.on_failure, then
//!  |          attempts == max_attempts ------> Exhausted { attempts, last: e }
//!  |          the budget refuses a retry ----> BudgetExhausted(e)
//!  +------- sleep max(backoff(attempts), hint) on the scheduler's timer
//!           (a retry the breaker then refuses is given back to the budget)
//! ```
//!
//! An error classified [`Verdict::Fail`] is taken as the caller's problem (a bad
//! request): the dependency answered, so the breaker counts it as a success. Only
//! retryable errors count as failures.
//!
//! # Backoff
//!
//! [`Backoff`]: the ceiling of retry `n` (1 for the first retry) is
//! `min(max, base × multiplier^(n-1))`, computed in floating point on nanoseconds and
//! saturating at `max` (no overflow at any `n` or with `Duration::MAX`). The delay is
//! `ceiling × (1 − jitter × u)` with `u` uniform in `[0, 1)`: with the default full
//! jitter (1.0) anywhere in `(0, ceiling]`, with jitter 0 exactly the ceiling. `u`
//! comes from SplitMix64 ([`Rng`]); a policy draws from one shared sequence (an
//! atomic counter, one step per retry), seeded at random unless
//! [`RetryPolicy::seed`] fixes it, so a test can reproduce the delays.
//!
//! # The retry budget
//!
//! [`RetryBudget`]: a retry is allowed while `retries + 1 ≤ ratio × first attempts +
//! min_retries_per_sec × window` over the sliding window. The window is ten buckets of
//! `window / 10` each, indexed by the time since the budget was made; an event lands
//! in the bucket of its time, a bucket whose index is older than the current one by
//! ten or more is reset when reused and left out of the sums. So the counts cover the
//! current bucket and the nine before it (between 0.9 and 1 × `window` of the past),
//! each operation costs a lock and ten additions, and the memory is fixed. The
//! comparison allows for the rounding of `ratio × first attempts` (one part in
//! 10^12), so a ratio of 0.1 over 1,000 first attempts grants exactly 100 retries.
//!
//! A [`RetryFuture`] asks the budget when an attempt failed, before it waits out the
//! backoff (so a refused retry ends the call at once instead of after the wait). A
//! retry granted then and not made after all (the breaker refuses the attempt when
//! the wait is over, or the call is dropped while it waits) is given back: uncounted
//! from its bucket, if that bucket is still in the window, and from
//! [`BudgetStats::retries`]. Retries that never reach the dependency do not use up
//! the budget of those that would.
//!
//! # The circuit breaker
//!
//! [`CircuitBreaker`], a state machine under one lock:
//!
//! * **Closed**: every call passes; finished calls and failures are counted in a
//!   window of ten buckets (as the budget's). After a report, if the window holds at
//!   least `min_calls` calls and `failures / calls ≥ failure_ratio`, it opens.
//! * **Open** until `open_for` has passed since it opened: every call is refused with
//!   the time left ([`BreakerOpen::retry_after`]). The move to half-open is lazy: the
//!   next [`state`](CircuitBreaker::state) or
//!   [`try_acquire`](CircuitBreaker::try_acquire) that sees the time passed makes it.
//! * **HalfOpen**: `half_open_probes` calls pass (the probes), the others are refused
//!   with a `retry_after` of zero (the state changes when the probes finish). All
//!   probes succeed: closed, with an empty window. One fails: open again.
//!
//! Outcomes are not matched to permits: a report counts for the state the breaker is
//! in when it comes. In half-open only as many reports count as probes were let
//! through and not yet reported, so late reports of calls started before the breaker
//! opened are ignored once the probes are accounted for. A call that ends without an
//! outcome (its future dropped) gives its probe back with
//! [`on_cancel`](CircuitBreaker::on_cancel); [`RetryFuture`] does so when dropped, and
//! only for a probe it holds: a call let through while closed, or in an earlier
//! half-open period, gives nothing back.
//!
//! # The future
//!
//! [`RetryFuture`] is a state machine: `Start` (counts the call) → `Attempt` (asks
//! the breaker, calls `f`) → `Calling` (polls the attempt's future, pinned in one
//! allocation made with the call and reused by every attempt) → `Sleeping` (a timer)
//! → `Attempt` … → `Done`. The item is cloned for every attempt but the last one,
//! which takes it.
//!
//! The sleep arms [`Scheduler::schedule_timer`]; its task sets a `fired` flag and
//! takes the waker, both under the sleep's lock, and wakes outside it. `poll` checks
//! the flag and stores its waker under the same lock, so the timer either ran before
//! (seen) or finds the waker (no lost wake-up). Dropping the future mid-sleep cancels
//! the timer; a scheduler that drops the timer's task unrun (shut down) ends the
//! sleep early: the next attempt starts at once.
//!
//! No lock is held while user code runs (`f`, the classifier, the attempt's `poll`,
//! a waker). A panic in any of them propagates to whoever polls the [`RetryFuture`]
//! (`map_async` turns it into a [`Panicked`](crate::ErrorKind::Panicked) error of
//! the stage); the call is over (polling again panics with "RetryFuture polled after
//! it finished"), the attempt is reported to the breaker as neither success nor
//! failure, and dropping the future gives its probe back (if it holds one).
//!
//! [`map_async`]: crate::PublisherExt::map_async
//! [`map_async_on`]: crate::PublisherExt::map_async_on

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::runtime::{Scheduler, TimerHandle};

/// Lock a mutex of this module. No user code runs under these locks (not even a
/// `tracing` event: see [`Locked`]); recover from poisoning anyway rather than
/// propagate a panic.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

// ---- randomness ---------------------------------------------------------------------

/// SplitMix64's increment (2^64 / the golden ratio).
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output function.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The top 53 bits of `x` as a float in `[0, 1)`.
fn unit(x: u64) -> f64 {
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// A seed that differs between policies and processes (the standard library's
/// random hash keys), so that clients do not jitter in step.
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

/// A small deterministic pseudo-random generator (SplitMix64) for
/// [`Backoff::delay`]: the same seed gives the same sequence.
///
/// A [`RetryPolicy`] seeded with `s` ([`RetryPolicy::seed`]) draws its jitter from
/// the sequence of `Rng::new(s)`, one number per retry, in the order the retries
/// are decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Rng { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GAMMA);
        mix(self.state)
    }

    /// The next number, uniform in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        unit(self.next_u64())
    }
}

// ---- backoff ------------------------------------------------------------------------

/// Nanoseconds in a second.
const NANOS_PER_SEC: u128 = 1_000_000_000;

/// `nanos` (finite, not negative) rounded to a `Duration`, saturating at
/// `Duration::MAX`.
fn duration_from_nanos(nanos: f64) -> Duration {
    if nanos.is_nan() || nanos <= 0.0 {
        return Duration::ZERO;
    }
    if nanos >= Duration::MAX.as_nanos() as f64 {
        return Duration::MAX;
    }
    // `as` saturates; below the bound above the seconds fit a u64.
    let n = nanos.round() as u128;
    match u64::try_from(n / NANOS_PER_SEC) {
        Ok(secs) => Duration::new(secs, (n % NANOS_PER_SEC) as u32),
        Err(_) => Duration::MAX,
    }
}

/// Exponential backoff with jitter (see the [module docs](self#backoff)).
///
/// ```
/// use std::time::Duration;
/// use weir::retry::{Backoff, Rng};
///
/// let backoff = Backoff::exponential(Duration::from_millis(100), Duration::from_secs(1));
/// assert_eq!(backoff.ceiling(1), Duration::from_millis(100));
/// assert_eq!(backoff.ceiling(3), Duration::from_millis(400));
/// assert_eq!(backoff.ceiling(100), Duration::from_secs(1));
/// // Full jitter (the default): anywhere in (0, ceiling].
/// let delay = backoff.delay(3, &mut Rng::new(7));
/// assert!(delay <= Duration::from_millis(400));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    multiplier: f64,
    jitter: f64,
}

impl Backoff {
    /// Retry `n` waits up to `base × 2^(n-1)`, at most `max`, with full jitter.
    ///
    /// # Panics
    ///
    /// If `base` is zero: "Backoff base must be greater than zero (got 0ns)"; if `max` is below
    /// `base`: "Backoff max must be at least base (got base 100ms, max 10ms)".
    pub fn exponential(base: Duration, max: Duration) -> Self {
        assert!(
            !base.is_zero(),
            "Backoff base must be greater than zero (got 0ns)"
        );
        assert!(
            max >= base,
            "Backoff max must be at least base (got base {base:?}, max {max:?})"
        );
        Backoff {
            base,
            max,
            multiplier: 2.0,
            jitter: 1.0,
        }
    }

    /// Each retry's ceiling is `multiplier ×` the one before (default 2; 1 gives a
    /// constant ceiling).
    ///
    /// # Panics
    ///
    /// If `multiplier` is not finite or below 1: "Backoff multiplier must be finite
    /// and at least 1 (got 0.5)".
    pub fn multiplier(mut self, multiplier: f64) -> Self {
        assert!(
            multiplier.is_finite() && multiplier >= 1.0,
            "Backoff multiplier must be finite and at least 1 (got {multiplier})"
        );
        self.multiplier = multiplier;
        self
    }

    /// The delay is uniform in `[(1 − jitter) × ceiling, ceiling]`: 1 (the default)
    /// is full jitter, 0 none.
    ///
    /// # Panics
    ///
    /// If `jitter` is not in `0..=1`: "Backoff jitter must be in 0..=1 (got 1.5)".
    pub fn jitter(mut self, jitter: f64) -> Self {
        assert!(
            (0.0..=1.0).contains(&jitter),
            "Backoff jitter must be in 0..=1 (got {jitter})"
        );
        self.jitter = jitter;
        self
    }

    /// The longest wait before retry `retry` (1 for the first retry; 0 counts as 1):
    /// `min(max, base × multiplier^(retry-1))`.
    pub fn ceiling(&self, retry: u32) -> Duration {
        let exponent = retry.saturating_sub(1);
        if exponent == 0 {
            return self.base;
        }
        let factor = self
            .multiplier
            .powi(i32::try_from(exponent).unwrap_or(i32::MAX));
        // base > 0 and factor >= 1 (or +inf): the product is never NaN.
        let nanos = self.base.as_nanos() as f64 * factor;
        if nanos >= self.max.as_nanos() as f64 {
            self.max
        } else {
            duration_from_nanos(nanos).min(self.max)
        }
    }

    /// The wait before retry `retry` (1 for the first retry): the
    /// [`ceiling`](Self::ceiling) less a random part of it, drawn from `rng`.
    pub fn delay(&self, retry: u32, rng: &mut Rng) -> Duration {
        self.jittered(retry, rng.next_f64())
    }

    /// The delay of retry `retry` for the random number `u` in `[0, 1)`.
    fn jittered(&self, retry: u32, u: f64) -> Duration {
        let ceiling = self.ceiling(retry);
        if self.jitter == 0.0 {
            return ceiling;
        }
        let nanos = ceiling.as_nanos() as f64;
        // Never zero (full jitter promises `(0, ceiling]`): at least 1 ns.
        let least = Duration::from_nanos(1).min(ceiling);
        let floor = duration_from_nanos(nanos * (1.0 - self.jitter))
            .min(ceiling)
            .max(least);
        duration_from_nanos(nanos * (1.0 - self.jitter * u)).clamp(floor, ceiling)
    }
}

// ---- the sliding window -------------------------------------------------------------

/// Buckets per window.
const BUCKETS: usize = 10;

/// Two counts over a sliding window of [`BUCKETS`] buckets (see the
/// [module docs](self#the-retry-budget)).
#[derive(Debug)]
struct Window {
    /// Time zero of the bucket indices.
    origin: Instant,
    /// A bucket's width in nanoseconds (at least 1).
    width: u128,
    /// The highest bucket index seen: clocks read before the lock was taken may
    /// arrive slightly out of order, and time never goes back here.
    latest: u128,
    buckets: [Bucket; BUCKETS],
}

/// One bucket: its index and its two counts.
#[derive(Clone, Copy, Debug, Default)]
struct Bucket {
    index: u128,
    a: u64,
    b: u64,
}

impl Window {
    fn new(origin: Instant, window: Duration) -> Self {
        Window {
            origin,
            width: (window.as_nanos() / BUCKETS as u128).max(1),
            latest: 0,
            buckets: [Bucket::default(); BUCKETS],
        }
    }

    /// The current bucket index at `now`.
    fn index(&mut self, now: Instant) -> u128 {
        let index = now.saturating_duration_since(self.origin).as_nanos() / self.width;
        self.latest = self.latest.max(index);
        self.latest
    }

    /// The bucket of `now`, reset if it held an older index.
    fn bucket(&mut self, now: Instant) -> &mut Bucket {
        let index = self.index(now);
        let bucket = &mut self.buckets[(index % BUCKETS as u128) as usize];
        if bucket.index != index {
            *bucket = Bucket { index, a: 0, b: 0 };
        }
        bucket
    }

    /// The two counts over the window ending at `now`.
    fn sums(&mut self, now: Instant) -> (u64, u64) {
        let index = self.index(now);
        self.buckets
            .iter()
            .filter(|bucket| bucket.index + BUCKETS as u128 > index)
            .fold((0, 0), |(a, b), bucket| {
                (a.saturating_add(bucket.a), b.saturating_add(bucket.b))
            })
    }

    /// Forget every count.
    fn clear(&mut self) {
        for bucket in &mut self.buckets {
            bucket.a = 0;
            bucket.b = 0;
        }
    }
}

// ---- the retry budget ---------------------------------------------------------------

/// Retries allowed as a fraction of first attempts over a sliding window, so that
/// retries cannot amplify an overload (see the [module docs](self#the-retry-budget)).
///
/// Clones share one budget: give one to every policy whose calls go to the same
/// dependency. The methods are synchronous and usable on their own.
///
/// ```
/// use std::time::Duration;
/// use weir::retry::RetryBudget;
/// use weir::runtime::VirtualTime;
///
/// let budget = RetryBudget::new(0.1, Duration::from_secs(10), VirtualTime::new());
/// for _ in 0..20 {
///     budget.first_attempt();
/// }
/// assert!(budget.try_retry());
/// assert!(budget.try_retry());
/// assert!(!budget.try_retry()); // 10% of 20
/// assert_eq!(budget.stats().refused, 1);
/// ```
#[derive(Clone)]
pub struct RetryBudget {
    inner: Arc<BudgetInner>,
}

struct BudgetInner {
    clock: Arc<dyn Scheduler>,
    window: Duration,
    state: Mutex<BudgetState>,
}

struct BudgetState {
    ratio: f64,
    /// Retries the window allows with no first attempts
    /// (`min_retries_per_sec × window`).
    reserve: f64,
    /// `a`: first attempts, `b`: retries.
    counts: Window,
    stats: BudgetStats,
}

/// The figures of a [`RetryBudget`], since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BudgetStats {
    /// First attempts recorded.
    pub first_attempts: u64,
    /// Retries granted (less those a [`RetryFuture`] gave back because the retry was
    /// not made: see the [module docs](self#the-retry-budget)).
    pub retries: u64,
    /// Retries refused.
    pub refused: u64,
}

impl fmt::Debug for RetryBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = lock(&self.inner.state);
        f.debug_struct("RetryBudget")
            .field("ratio", &state.ratio)
            .field("window", &self.inner.window)
            .field("reserve", &state.reserve)
            .field("stats", &state.stats)
            .finish()
    }
}

impl RetryBudget {
    /// Allow at most `ratio` retries per first attempt over the sliding `window`
    /// (0.1: one retry per ten calls), reading time from `clock`. There is no floor:
    /// with no first attempts in the window no retry is allowed (see
    /// [`min_retries_per_sec`](Self::min_retries_per_sec)).
    ///
    /// # Panics
    ///
    /// If `ratio` is not finite or is negative: "RetryBudget ratio must be finite and
    /// at least 0 (got NaN)"; if `window` is zero: "RetryBudget window must be
    /// greater than zero".
    pub fn new(ratio: f64, window: Duration, clock: impl Scheduler) -> Self {
        assert!(
            ratio.is_finite() && ratio >= 0.0,
            "RetryBudget ratio must be finite and at least 0 (got {ratio})"
        );
        assert!(
            !window.is_zero(),
            "RetryBudget window must be greater than zero"
        );
        let origin = clock.now();
        RetryBudget {
            inner: Arc::new(BudgetInner {
                clock: Arc::new(clock),
                window,
                state: Mutex::new(BudgetState {
                    ratio,
                    reserve: 0.0,
                    counts: Window::new(origin, window),
                    stats: BudgetStats::default(),
                }),
            }),
        }
    }

    /// A floor: `rate × window` retries are allowed over the window on top of the
    /// ratio, so a dependency called rarely can still be retried (default 0). Applies
    /// to every clone of this budget.
    ///
    /// # Panics
    ///
    /// If `rate` is not finite or is negative: "RetryBudget min_retries_per_sec must
    /// be finite and at least 0 (got -1)".
    pub fn min_retries_per_sec(self, rate: f64) -> Self {
        assert!(
            rate.is_finite() && rate >= 0.0,
            "RetryBudget min_retries_per_sec must be finite and at least 0 (got {rate})"
        );
        lock(&self.inner.state).reserve = rate * self.inner.window.as_secs_f64();
        self
    }

    /// Record a first attempt (it earns `ratio` of a retry).
    pub fn first_attempt(&self) {
        let now = self.inner.clock.now();
        let mut state = lock(&self.inner.state);
        let bucket = state.counts.bucket(now);
        bucket.a = bucket.a.saturating_add(1);
        state.stats.first_attempts += 1;
    }

    /// Take a retry from the budget: true if the window allows one more (it is
    /// counted), false if not (the refusal is counted).
    pub fn try_retry(&self) -> bool {
        self.take_retry().is_some()
    }

    /// [`try_retry`](Self::try_retry), returning the index of the bucket the retry
    /// was counted in: the receipt [`give_back`](Self::give_back) takes.
    fn take_retry(&self) -> Option<u128> {
        let now = self.inner.clock.now();
        let mut state = lock(&self.inner.state);
        let (first, retries) = state.counts.sums(now);
        if retries.saturating_add(1) as f64 <= state.allowance(first) {
            let bucket = state.counts.bucket(now);
            bucket.b = bucket.b.saturating_add(1);
            let receipt = bucket.index;
            state.stats.retries += 1;
            Some(receipt)
        } else {
            state.stats.refused += 1;
            None
        }
    }

    /// A retry taken with receipt `receipt` was not made after all (its call was
    /// refused by the breaker, or dropped while it waited): uncount it, unless its
    /// bucket has already left the window.
    fn give_back(&self, receipt: u128) {
        let mut state = lock(&self.inner.state);
        let bucket = &mut state.counts.buckets[(receipt % BUCKETS as u128) as usize];
        if bucket.index == receipt && bucket.b > 0 {
            bucket.b -= 1;
        }
        state.stats.retries = state.stats.retries.saturating_sub(1);
    }

    /// How many retries the window allows now.
    pub fn available(&self) -> u64 {
        let now = self.inner.clock.now();
        let mut state = lock(&self.inner.state);
        let (first, retries) = state.counts.sums(now);
        (state.allowance(first).floor() as u64).saturating_sub(retries)
    }

    /// The counts since the budget was made.
    pub fn stats(&self) -> BudgetStats {
        lock(&self.inner.state).stats
    }
}

impl BudgetState {
    /// The retries allowed over a window with `first` first attempts, rounded up by
    /// one part in 10^12 so that `0.1 × 1000` allows 100.
    fn allowance(&self, first: u64) -> f64 {
        (self.ratio * first as f64 + self.reserve) * (1.0 + 1e-12)
    }
}

// ---- the circuit breaker ------------------------------------------------------------

/// The state of a [`CircuitBreaker`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BreakerState {
    /// Calls pass; outcomes are counted.
    Closed,
    /// Calls are refused until `open_for` has passed.
    Open,
    /// A few probe calls pass; their outcomes close or reopen the breaker.
    HalfOpen,
}

/// A call refused by an open (or half-open and busy) [`CircuitBreaker`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerOpen {
    retry_after: Duration,
}

impl BreakerOpen {
    /// The time left until the breaker half-opens (zero when it is half-open and
    /// its probes are out; `Duration::MAX` when it never half-opens).
    pub fn retry_after(&self) -> Duration {
        self.retry_after
    }
}

impl fmt::Display for BreakerOpen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "circuit breaker open (retry after {:?})",
            self.retry_after
        )
    }
}

impl std::error::Error for BreakerOpen {}

/// The figures of a [`CircuitBreaker`], since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BreakerStats {
    /// Moves to open (from closed or half-open).
    pub opened: u64,
    /// Moves from open to half-open.
    pub half_opened: u64,
    /// Moves from half-open to closed.
    pub closed: u64,
    /// Calls refused (while open, or half-open with its probes out).
    pub rejected: u64,
}

/// A circuit breaker: closed, open, half-open (see the
/// [module docs](self#the-circuit-breaker)).
///
/// Clones share one breaker. The methods are synchronous and usable on their own:
/// ask [`try_acquire`](Self::try_acquire) before a call, report its outcome with
/// [`on_success`](Self::on_success) or [`on_failure`](Self::on_failure).
///
/// ```
/// use std::time::Duration;
/// use weir::retry::{BreakerState, CircuitBreaker};
/// use weir::runtime::VirtualTime;
///
/// let vt = VirtualTime::new();
/// let secs = Duration::from_secs;
/// let breaker = CircuitBreaker::new(0.5, 4, secs(10), secs(5), vt.clone());
/// for _ in 0..4 {
///     breaker.on_failure();
/// }
/// assert_eq!(breaker.state(), BreakerState::Open);
/// assert_eq!(breaker.try_acquire().unwrap_err().retry_after(), secs(5));
/// vt.advance(secs(5));
/// assert!(breaker.try_acquire().is_ok()); // the probe
/// breaker.on_success();
/// assert_eq!(breaker.state(), BreakerState::Closed);
/// ```
#[derive(Clone)]
pub struct CircuitBreaker {
    inner: Arc<BreakerInner>,
}

struct BreakerInner {
    clock: Arc<dyn Scheduler>,
    state: Mutex<Breaker>,
}

impl BreakerInner {
    /// The breaker, locked, for a step that may change its state.
    fn lock(&self) -> Locked<'_> {
        let guard = lock(&self.state);
        let before = guard.stats;
        Locked {
            guard: Some(guard),
            before,
        }
    }
}

/// The breaker locked by [`BreakerInner::lock`]. Its transitions are logged (debug)
/// once the lock is let go, as the counts in its stats show them: a `tracing` layer
/// is user code, and may ask this breaker for its state.
struct Locked<'a> {
    guard: Option<MutexGuard<'a, Breaker>>,
    before: BreakerStats,
}

impl std::ops::Deref for Locked<'_> {
    type Target = Breaker;
    fn deref(&self) -> &Breaker {
        self.guard.as_ref().expect("held until dropped")
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut Breaker {
        self.guard.as_mut().expect("held until dropped")
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        let Some(guard) = self.guard.take() else {
            return;
        };
        let (after, open_for) = (guard.stats, guard.open_for);
        drop(guard);
        // In the order a step makes them: an open breaker whose time is up
        // half-opens first; then the call's outcome closes or opens it.
        if after.half_opened > self.before.half_opened {
            tracing::debug!("weir: circuit breaker half-open");
        }
        if after.closed > self.before.closed {
            tracing::debug!("weir: circuit breaker closed");
        }
        if after.opened > self.before.opened {
            tracing::debug!(?open_for, "weir: circuit breaker opened");
        }
    }
}

struct Breaker {
    failure_ratio: f64,
    min_calls: u32,
    open_for: Duration,
    probes: u32,
    phase: Phase,
    /// While closed, `a`: calls finished, `b`: failures.
    counts: Window,
    stats: BreakerStats,
}

enum Phase {
    Closed,
    /// Until `until` (`None`: an instant past the clock's range, never).
    Open {
        until: Option<Instant>,
    },
    HalfOpen {
        /// Probes let through.
        admitted: u32,
        /// Probes let through and not yet reported.
        in_flight: u32,
        /// Probes that succeeded.
        succeeded: u32,
    },
}

impl fmt::Debug for CircuitBreaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let breaker = lock(&self.inner.state);
        f.debug_struct("CircuitBreaker")
            .field("state", &breaker.state())
            .field("failure_ratio", &breaker.failure_ratio)
            .field("min_calls", &breaker.min_calls)
            .field("open_for", &breaker.open_for)
            .field("probes", &breaker.probes)
            .field("stats", &breaker.stats)
            .finish()
    }
}

impl CircuitBreaker {
    /// A closed breaker that opens when, over the sliding `window`, at least
    /// `min_calls` calls finished and `failures / calls ≥ failure_ratio`; it stays
    /// open for `open_for` (zero: it half-opens at the next call), then lets one
    /// probe through ([`half_open_probes`](Self::half_open_probes)). Time is read
    /// from `clock`.
    ///
    /// # Panics
    ///
    /// If `failure_ratio` is not in `(0, 1]`: "CircuitBreaker failure_ratio must be
    /// in (0, 1] (got 0)"; if `min_calls` is 0: "CircuitBreaker min_calls must be at
    /// least 1"; if `window` is zero: "CircuitBreaker window must be greater than
    /// zero".
    pub fn new(
        failure_ratio: f64,
        min_calls: u32,
        window: Duration,
        open_for: Duration,
        clock: impl Scheduler,
    ) -> Self {
        assert!(
            failure_ratio > 0.0 && failure_ratio <= 1.0,
            "CircuitBreaker failure_ratio must be in (0, 1] (got {failure_ratio})"
        );
        assert!(
            min_calls >= 1,
            "CircuitBreaker min_calls must be at least 1"
        );
        assert!(
            !window.is_zero(),
            "CircuitBreaker window must be greater than zero"
        );
        let origin = clock.now();
        CircuitBreaker {
            inner: Arc::new(BreakerInner {
                clock: Arc::new(clock),
                state: Mutex::new(Breaker {
                    failure_ratio,
                    min_calls,
                    open_for,
                    probes: 1,
                    phase: Phase::Closed,
                    counts: Window::new(origin, window),
                    stats: BreakerStats::default(),
                }),
            }),
        }
    }

    /// How many calls pass while half-open (default 1); all must succeed to close.
    /// Applies to every clone of this breaker.
    ///
    /// # Panics
    ///
    /// If `probes` is 0: "CircuitBreaker half_open_probes must be at least 1".
    pub fn half_open_probes(self, probes: u32) -> Self {
        assert!(
            probes >= 1,
            "CircuitBreaker half_open_probes must be at least 1"
        );
        lock(&self.inner.state).probes = probes;
        self
    }

    /// The state now (an open breaker whose time is up half-opens here).
    pub fn state(&self) -> BreakerState {
        let now = self.inner.clock.now();
        let mut breaker = self.inner.lock();
        breaker.half_open_if_due(now);
        breaker.state()
    }

    /// Ask to make a call: `Ok` when closed, or half-open with a probe left (the
    /// call is a probe: report its outcome); `Err` otherwise (counted as rejected).
    pub fn try_acquire(&self) -> Result<(), BreakerOpen> {
        self.acquire().map(|_probe| ())
    }

    /// [`try_acquire`](Self::try_acquire), saying which half-open period a probe
    /// belongs to (`Some(period)`; `None` for a call let through while closed), so
    /// that a cancelled call gives back only a probe it holds ([`cancel`](Self::cancel)).
    pub(crate) fn acquire(&self) -> Result<Option<u64>, BreakerOpen> {
        let now = self.inner.clock.now();
        let mut breaker = self.inner.lock();
        breaker.half_open_if_due(now);
        let probes = breaker.probes;
        let period = breaker.stats.half_opened;
        let refused = match &mut breaker.phase {
            Phase::Closed => return Ok(None),
            Phase::Open { until } => {
                until.map_or(Duration::MAX, |until| until.saturating_duration_since(now))
            }
            Phase::HalfOpen {
                admitted,
                in_flight,
                ..
            } => {
                if *admitted < probes {
                    *admitted += 1;
                    *in_flight += 1;
                    return Ok(Some(period));
                }
                Duration::ZERO
            }
        };
        breaker.stats.rejected += 1;
        Err(BreakerOpen {
            retry_after: refused,
        })
    }

    /// A call succeeded.
    pub fn on_success(&self) {
        let now = self.inner.clock.now();
        let mut breaker = self.inner.lock();
        breaker.half_open_if_due(now);
        let probes = breaker.probes;
        match &mut breaker.phase {
            Phase::Closed => {
                let bucket = breaker.counts.bucket(now);
                bucket.a = bucket.a.saturating_add(1);
                breaker.open_if_failing(now);
            }
            Phase::Open { .. } => {}
            Phase::HalfOpen {
                in_flight,
                succeeded,
                ..
            } => {
                if *in_flight > 0 {
                    *in_flight -= 1;
                    *succeeded += 1;
                    if *succeeded >= probes {
                        breaker.phase = Phase::Closed;
                        breaker.counts.clear();
                        breaker.stats.closed += 1;
                    }
                }
            }
        }
    }

    /// A call failed.
    pub fn on_failure(&self) {
        let now = self.inner.clock.now();
        let mut breaker = self.inner.lock();
        breaker.half_open_if_due(now);
        match &breaker.phase {
            Phase::Closed => {
                let bucket = breaker.counts.bucket(now);
                bucket.a = bucket.a.saturating_add(1);
                bucket.b = bucket.b.saturating_add(1);
                breaker.open_if_failing(now);
            }
            Phase::Open { .. } => {}
            Phase::HalfOpen { in_flight, .. } => {
                if *in_flight > 0 {
                    breaker.open(now);
                }
            }
        }
    }

    /// A call let through ended without an outcome (it was cancelled): a half-open
    /// breaker gets its probe back. Nothing is counted.
    pub fn on_cancel(&self) {
        let mut breaker = lock(&self.inner.state);
        if let Phase::HalfOpen {
            admitted,
            in_flight,
            ..
        } = &mut breaker.phase
        {
            if *in_flight > 0 {
                *in_flight -= 1;
                *admitted -= 1;
            }
        }
    }

    /// A call let through as a probe of half-open period `period` ended without an
    /// outcome: give the probe back if that period is still on (a call let through
    /// while closed, or in an earlier period, holds no probe of this one).
    pub(crate) fn cancel(&self, period: u64) {
        let mut breaker = lock(&self.inner.state);
        if breaker.stats.half_opened != period {
            return;
        }
        if let Phase::HalfOpen {
            admitted,
            in_flight,
            ..
        } = &mut breaker.phase
        {
            if *in_flight > 0 {
                *in_flight -= 1;
                *admitted -= 1;
            }
        }
    }

    /// The transition counts and rejections since the breaker was made.
    pub fn stats(&self) -> BreakerStats {
        lock(&self.inner.state).stats
    }
}

impl Breaker {
    fn state(&self) -> BreakerState {
        match self.phase {
            Phase::Closed => BreakerState::Closed,
            Phase::Open { .. } => BreakerState::Open,
            Phase::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    fn half_open_if_due(&mut self, now: Instant) {
        if let Phase::Open { until: Some(until) } = self.phase {
            if now >= until {
                self.phase = Phase::HalfOpen {
                    admitted: 0,
                    in_flight: 0,
                    succeeded: 0,
                };
                self.stats.half_opened += 1;
            }
        }
    }

    fn open_if_failing(&mut self, now: Instant) {
        let (calls, failures) = self.counts.sums(now);
        if calls >= u64::from(self.min_calls)
            && failures as f64 / calls as f64 >= self.failure_ratio
        {
            self.open(now);
        }
    }

    fn open(&mut self, now: Instant) {
        self.phase = Phase::Open {
            until: now.checked_add(self.open_for),
        };
        self.stats.opened += 1;
    }
}

// ---- the policy ---------------------------------------------------------------------

/// What to do with an error (the policy's [classifier](RetryPolicy::classify)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Do not retry: the call ends with [`RetryError::Failed`].
    Fail,
    /// Retry after the backoff.
    Retry,
    /// Retry after at least this long (the server's hint), or the backoff if longer.
    /// The hint is honoured even beyond the backoff's `max`; a classifier that wants
    /// a cap returns `RetryAfter(hint.min(cap))`, or `Fail`.
    RetryAfter(Duration),
}

/// How a retried call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RetryError<E> {
    /// The classifier said [`Verdict::Fail`]: not retried.
    Failed(E),
    /// Every attempt the policy allows failed; `last` is the last one's error.
    Exhausted {
        /// Attempts made (the policy's `max_attempts`).
        attempts: u32,
        /// The last attempt's error.
        last: E,
    },
    /// The retry budget refused a retry; the error of the attempt before.
    BudgetExhausted(E),
    /// The circuit breaker refused an attempt (the first one: `f` was not called;
    /// or a retry: the error before it is dropped).
    CircuitOpen {
        /// The time left until the breaker half-opens
        /// ([`BreakerOpen::retry_after`]).
        retry_after: Duration,
    },
}

impl<E> RetryError<E> {
    /// The call's error, if it has one (all but `CircuitOpen`).
    pub fn into_inner(self) -> Option<E> {
        match self {
            RetryError::Failed(e) | RetryError::BudgetExhausted(e) => Some(e),
            RetryError::Exhausted { last, .. } => Some(last),
            RetryError::CircuitOpen { .. } => None,
        }
    }
}

impl<E: fmt::Display> fmt::Display for RetryError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RetryError::Failed(e) => write!(f, "call failed (not retryable): {e}"),
            RetryError::Exhausted { attempts, last } => {
                write!(f, "call failed after {attempts} attempts: {last}")
            }
            RetryError::BudgetExhausted(e) => {
                write!(f, "call failed, retry refused by the retry budget: {e}")
            }
            RetryError::CircuitOpen { retry_after } => {
                write!(f, "circuit breaker open (retry after {retry_after:?})")
            }
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for RetryError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RetryError::Failed(e) | RetryError::BudgetExhausted(e) => Some(e),
            RetryError::Exhausted { last, .. } => Some(last),
            RetryError::CircuitOpen { .. } => None,
        }
    }
}

/// One reading of a [`RetryMonitor`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetryStats {
    /// Calls started (futures polled at least once).
    pub calls: u64,
    /// Attempts made (calls of `f`).
    pub attempts: u64,
    /// Attempts after the first of their call.
    pub retries: u64,
    /// Calls that ended because the budget refused a retry.
    pub refused_by_budget: u64,
    /// Calls that ended after `max_attempts` failed attempts.
    pub exhausted: u64,
    /// Calls that ended with an error classified [`Verdict::Fail`].
    pub failed: u64,
    /// Calls that ended because the breaker refused an attempt.
    pub rejected_by_breaker: u64,
}

/// The figures of a [`RetryPolicy`], shared by its clones and by every closure it
/// wrapped, readable from any thread.
#[derive(Clone, Debug, Default)]
pub struct RetryMonitor(Arc<Counters>);

#[derive(Debug, Default)]
struct Counters {
    calls: AtomicU64,
    attempts: AtomicU64,
    retries: AtomicU64,
    refused_by_budget: AtomicU64,
    exhausted: AtomicU64,
    failed: AtomicU64,
    rejected_by_breaker: AtomicU64,
}

impl RetryMonitor {
    /// The figures now.
    pub fn snapshot(&self) -> RetryStats {
        // Relaxed throughout: statistics, no other memory is published through them.
        let c = &self.0;
        let read = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RetryStats {
            calls: read(&c.calls),
            attempts: read(&c.attempts),
            retries: read(&c.retries),
            refused_by_budget: read(&c.refused_by_budget),
            exhausted: read(&c.exhausted),
            failed: read(&c.failed),
            rejected_by_breaker: read(&c.rejected_by_breaker),
        }
    }

    fn add(counter: &AtomicU64) {
        // Relaxed: a statistic (see `snapshot`).
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// The error classifier.
type Classify<E> = Arc<dyn Fn(&E) -> Verdict + Send + Sync>;

/// How to retry a fallible async call: at most `max_attempts` attempts, a
/// [`Backoff`] between them, an error classifier, and optionally a [`RetryBudget`]
/// and a [`CircuitBreaker`] (see the [module docs](self)).
///
/// Clones share the [monitor](Self::monitor) and the jitter sequence.
///
/// ```
/// use std::time::Duration;
/// use weir::retry::{Backoff, CircuitBreaker, RetryBudget, RetryPolicy, Verdict};
/// use weir::runtime::VirtualTime;
///
/// #[derive(Debug)]
/// enum HttpError {
///     Status(u16),
///     TooManyRequests { retry_after: Duration },
/// }
///
/// let clock = VirtualTime::new();
/// let secs = Duration::from_secs;
/// let policy = RetryPolicy::new(
///     4,
///     Backoff::exponential(Duration::from_millis(50), secs(2)),
/// )
/// .budget(RetryBudget::new(0.1, secs(10), clock.clone()))
/// .breaker(CircuitBreaker::new(0.5, 20, secs(10), secs(5), clock.clone()))
/// .classify(|e: &HttpError| match e {
///     HttpError::Status(s) if *s >= 500 => Verdict::Retry,
///     HttpError::Status(_) => Verdict::Fail,
///     HttpError::TooManyRequests { retry_after } => Verdict::RetryAfter(*retry_after),
/// })
/// .seed(42);
/// assert_eq!(policy.stats().calls, 0);
/// ```
pub struct RetryPolicy<E> {
    max_attempts: u32,
    backoff: Backoff,
    budget: Option<RetryBudget>,
    breaker: Option<CircuitBreaker>,
    /// `None`: every error is retryable.
    classify: Option<Classify<E>>,
    /// The SplitMix64 state of the jitter sequence (see [`Rng`]).
    jitter: Arc<AtomicU64>,
    monitor: RetryMonitor,
}

impl<E> Clone for RetryPolicy<E> {
    fn clone(&self) -> Self {
        RetryPolicy {
            max_attempts: self.max_attempts,
            backoff: self.backoff,
            budget: self.budget.clone(),
            breaker: self.breaker.clone(),
            classify: self.classify.clone(),
            jitter: self.jitter.clone(),
            monitor: self.monitor.clone(),
        }
    }
}

impl<E> fmt::Debug for RetryPolicy<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryPolicy")
            .field("max_attempts", &self.max_attempts)
            .field("backoff", &self.backoff)
            .field("budget", &self.budget)
            .field("breaker", &self.breaker)
            .field("classified", &self.classify.is_some())
            .field("stats", &self.monitor.snapshot())
            .finish()
    }
}

impl<E> RetryPolicy<E> {
    /// At most `max_attempts` attempts per call (1: no retry), waiting `backoff`
    /// between them; every error is retryable until [`classify`](Self::classify)
    /// says otherwise. No budget, no breaker; the jitter is seeded at random.
    ///
    /// # Panics
    ///
    /// If `max_attempts` is 0: "RetryPolicy max_attempts must be at least 1".
    pub fn new(max_attempts: u32, backoff: Backoff) -> Self {
        assert!(
            max_attempts >= 1,
            "RetryPolicy max_attempts must be at least 1"
        );
        RetryPolicy {
            max_attempts,
            backoff,
            budget: None,
            breaker: None,
            classify: None,
            jitter: Arc::new(AtomicU64::new(random_seed())),
            monitor: RetryMonitor::default(),
        }
    }

    /// Ask `budget` before every retry; a refusal ends the call with
    /// [`RetryError::BudgetExhausted`]. First attempts are recorded in it.
    pub fn budget(mut self, budget: RetryBudget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Ask `breaker` before every attempt and report each attempt's outcome to it;
    /// a refusal ends the call with [`RetryError::CircuitOpen`].
    pub fn breaker(mut self, breaker: CircuitBreaker) -> Self {
        self.breaker = Some(breaker);
        self
    }

    /// Decide per error whether to retry (default: every error is
    /// [`Verdict::Retry`]). It runs on the thread polling the call, under no lock;
    /// a panic in it propagates to the poller.
    pub fn classify(mut self, classify: impl Fn(&E) -> Verdict + Send + Sync + 'static) -> Self {
        self.classify = Some(Arc::new(classify));
        self
    }

    /// Seed the jitter: the delays are those of [`Backoff::delay`] with
    /// `Rng::new(seed)`, in the order the retries are decided (reproducible tests).
    /// Gives this policy a jitter sequence of its own (clones made before keep the
    /// old one).
    pub fn seed(mut self, seed: u64) -> Self {
        self.jitter = Arc::new(AtomicU64::new(seed));
        self
    }

    /// The figures, shared by every closure this policy (or a clone) wrapped.
    pub fn monitor(&self) -> RetryMonitor {
        self.monitor.clone()
    }

    /// The figures now (`self.monitor().snapshot()`).
    pub fn stats(&self) -> RetryStats {
        self.monitor.snapshot()
    }

    /// The next number of the jitter sequence, in `[0, 1)`.
    fn next_unit(&self) -> f64 {
        // Relaxed: the read-modify-write gives every caller its own step of the
        // sequence; nothing else is published through it.
        let state = self
            .jitter
            .fetch_add(GAMMA, Ordering::Relaxed)
            .wrapping_add(GAMMA);
        unit(mix(state))
    }

    /// Wrap the call `f` so that each call of the result retries by this policy,
    /// with timers armed on `scheduler` (use the clock the budget and breaker read).
    /// The result is a closure for [`map_async`](crate::PublisherExt::map_async) and
    /// its forms: `Clone` (the clones share `f`), `Send` and `Sync`. `f` gets a clone
    /// of the item for every attempt but the last, which gets the item itself.
    ///
    /// # Panics
    ///
    /// Never here. A panic in `f`, in an attempt's `poll` or in the classifier
    /// propagates to whoever polls the [`RetryFuture`] (`map_async` fails its stage
    /// with a [`Panicked`](crate::ErrorKind::Panicked) error); the call is over.
    ///
    /// # Examples
    ///
    /// Polled by hand under [`VirtualTime`](crate::runtime::VirtualTime): the call
    /// fails twice, waits 100 ms then 200 ms (no jitter), and succeeds.
    ///
    /// ```
    /// use std::future::Future;
    /// use std::pin::Pin;
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::sync::Arc;
    /// use std::task::{Context, Poll};
    /// use std::time::Duration;
    /// use weir::retry::{Backoff, RetryPolicy, Verdict};
    /// use weir::runtime::VirtualTime;
    ///
    /// let vt = VirtualTime::new();
    /// let ms = Duration::from_millis;
    /// let policy = RetryPolicy::new(3, Backoff::exponential(ms(100), ms(1_000)).jitter(0.0))
    ///     .classify(|e: &String| if e == "busy" { Verdict::Retry } else { Verdict::Fail });
    /// let tries = Arc::new(AtomicU32::new(0));
    /// let counted = tries.clone();
    /// let call = policy.wrap(vt.clone(), move |x: u32| {
    ///     let attempt = counted.fetch_add(1, Ordering::SeqCst);
    ///     async move {
    ///         if attempt < 2 {
    ///             Err("busy".to_string())
    ///         } else {
    ///             Ok(x * 2)
    ///         }
    ///     }
    /// });
    ///
    /// let mut answer = call(21);
    /// let waker = futures::task::noop_waker();
    /// let mut cx = Context::from_waker(&waker);
    /// assert!(Pin::new(&mut answer).poll(&mut cx).is_pending()); // failed, waits 100 ms
    /// vt.advance(ms(100));
    /// assert!(Pin::new(&mut answer).poll(&mut cx).is_pending()); // failed, waits 200 ms
    /// vt.advance(ms(199));
    /// assert!(Pin::new(&mut answer).poll(&mut cx).is_pending());
    /// vt.advance(ms(1));
    /// assert_eq!(Pin::new(&mut answer).poll(&mut cx), Poll::Ready(Ok(42)));
    /// let stats = policy.stats();
    /// assert_eq!((stats.calls, stats.attempts, stats.retries), (1, 3, 2));
    /// ```
    pub fn wrap<S, T, U, F, Fut>(
        &self,
        scheduler: S,
        f: F,
    ) -> impl Fn(T) -> RetryFuture<T, Fut, E> + Clone + Send + Sync + 'static
    where
        S: Scheduler,
        T: Clone + Send + 'static,
        F: Fn(T) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<U, E>> + Send + 'static,
        E: 'static,
    {
        let wrapped = Arc::new(Wrapped {
            f: Box::new(f),
            scheduler: Arc::new(scheduler),
            policy: self.clone(),
        });
        move |item| RetryFuture::new(wrapped.clone(), item)
    }
}

// ---- the future ---------------------------------------------------------------------

/// What the closures of one [`RetryPolicy::wrap`] share.
struct Wrapped<T, Fut, E> {
    f: Box<dyn Fn(T) -> Fut + Send + Sync>,
    scheduler: Arc<dyn Scheduler>,
    policy: RetryPolicy<E>,
}

/// Where a [`RetryFuture`] is (see the [module docs](self#the-future)).
enum Step {
    /// Not polled yet.
    Start,
    /// The next attempt is due.
    Attempt,
    /// An attempt runs.
    Calling,
    /// Waiting for the next attempt.
    Sleeping(Sleep),
    /// Finished (or a panic ended it).
    Done,
}

/// One call, retried by its [`RetryPolicy`]: the future of a closure made by
/// [`RetryPolicy::wrap`]. Resolves to the first success, or to the
/// [`RetryError`] that ended the call.
///
/// Dropping it drops the running attempt, cancels a pending timer and gives a
/// half-open breaker's probe back.
#[must_use = "futures do nothing unless polled"]
pub struct RetryFuture<T, Fut, E> {
    wrapped: Arc<Wrapped<T, Fut, E>>,
    /// The item, until the last attempt takes it.
    item: Option<T>,
    /// The running attempt, pinned in one allocation for the call's life.
    attempt: Pin<Box<Option<Fut>>>,
    /// Attempts started.
    attempts: u32,
    step: Step,
    /// The running attempt is a half-open probe of this period (see
    /// `CircuitBreaker::acquire`) whose outcome the breaker has not had.
    probe: Option<u64>,
    /// The budget's receipt for the retry this call waits to make: given back if the
    /// retry is not made (the breaker refuses it, or the call is dropped first).
    reserved: Option<u128>,
}

// The future never pins `T` (the item is only cloned and moved) and keeps the
// attempt in a `Pin<Box<_>>`, so it can move freely whatever `T` is.
impl<T, Fut, E> Unpin for RetryFuture<T, Fut, E> {}

impl<T, Fut, E> fmt::Debug for RetryFuture<T, Fut, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let step = match self.step {
            Step::Start => "start",
            Step::Attempt => "attempt",
            Step::Calling => "calling",
            Step::Sleeping(_) => "sleeping",
            Step::Done => "done",
        };
        f.debug_struct("RetryFuture")
            .field("attempts", &self.attempts)
            .field("step", &step)
            .finish_non_exhaustive()
    }
}

impl<T, Fut, E> RetryFuture<T, Fut, E> {
    fn new(wrapped: Arc<Wrapped<T, Fut, E>>, item: T) -> Self {
        RetryFuture {
            wrapped,
            item: Some(item),
            attempt: Box::pin(None),
            attempts: 0,
            step: Step::Start,
            probe: None,
            reserved: None,
        }
    }

    fn counters(&self) -> &Counters {
        &self.wrapped.policy.monitor.0
    }

    /// The call ended on an error that the policy may retry: `None` when the next
    /// attempt is on its way, else how the call ended.
    fn after_error(&mut self, error: E, hint: Duration) -> Option<RetryError<E>> {
        let policy = &self.wrapped.policy;
        if self.attempts >= policy.max_attempts {
            RetryMonitor::add(&self.counters().exhausted);
            return Some(RetryError::Exhausted {
                attempts: self.attempts,
                last: error,
            });
        }
        if let Some(budget) = &policy.budget {
            let Some(receipt) = budget.take_retry() else {
                RetryMonitor::add(&self.counters().refused_by_budget);
                return Some(RetryError::BudgetExhausted(error));
            };
            self.reserved = Some(receipt);
        }
        let delay = policy
            .backoff
            .jittered(self.attempts, policy.next_unit())
            .max(hint);
        self.step = if delay.is_zero() {
            Step::Attempt
        } else {
            Step::Sleeping(Sleep::new(&*self.wrapped.scheduler, delay))
        };
        None
    }

    /// The retry this call reserved is not made: give it back to the budget.
    fn unreserve(&mut self) {
        if let (Some(receipt), Some(budget)) = (self.reserved.take(), &self.wrapped.policy.budget) {
            budget.give_back(receipt);
        }
    }

    /// Report the running attempt's outcome to the breaker.
    fn report(&mut self, success: bool) {
        self.probe = None;
        if let Some(breaker) = &self.wrapped.policy.breaker {
            if success {
                breaker.on_success();
            } else {
                breaker.on_failure();
            }
        }
    }
}

impl<T, U, E, Fut> Future for RetryFuture<T, Fut, E>
where
    T: Clone,
    Fut: Future<Output = Result<U, E>>,
{
    type Output = Result<U, RetryError<E>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        loop {
            // `Done` while user code runs: a panic leaves the call finished.
            match std::mem::replace(&mut this.step, Step::Done) {
                Step::Start => {
                    RetryMonitor::add(&this.counters().calls);
                    this.step = Step::Attempt;
                }
                Step::Attempt => {
                    let wrapped = this.wrapped.clone();
                    let policy = &wrapped.policy;
                    if let Some(breaker) = &policy.breaker {
                        match breaker.acquire() {
                            Ok(probe) => this.probe = probe,
                            Err(open) => {
                                this.unreserve();
                                RetryMonitor::add(&this.counters().rejected_by_breaker);
                                return Poll::Ready(Err(RetryError::CircuitOpen {
                                    retry_after: open.retry_after(),
                                }));
                            }
                        }
                    }
                    // The reserved retry (if any) is made now.
                    this.reserved = None;
                    let item = if this.attempts + 1 >= policy.max_attempts {
                        this.item.take()
                    } else {
                        this.item.clone()
                    }
                    .expect("the item is kept until the last attempt");
                    if this.attempts == 0 {
                        if let Some(budget) = &policy.budget {
                            budget.first_attempt();
                        }
                    } else {
                        RetryMonitor::add(&this.counters().retries);
                    }
                    this.attempts += 1;
                    RetryMonitor::add(&this.counters().attempts);
                    let attempt = (wrapped.f)(item);
                    this.attempt.set(Some(attempt));
                    this.step = Step::Calling;
                }
                Step::Calling => {
                    let attempt = this
                        .attempt
                        .as_mut()
                        .as_pin_mut()
                        .expect("an attempt runs while calling");
                    let Poll::Ready(result) = attempt.poll(cx) else {
                        this.step = Step::Calling;
                        return Poll::Pending;
                    };
                    this.attempt.set(None);
                    let error = match result {
                        Ok(value) => {
                            this.report(true);
                            return Poll::Ready(Ok(value));
                        }
                        Err(error) => error,
                    };
                    let verdict = match &this.wrapped.policy.classify {
                        Some(classify) => classify(&error),
                        None => Verdict::Retry,
                    };
                    let hint = match verdict {
                        Verdict::Fail => {
                            // The dependency answered: not its failure.
                            this.report(true);
                            RetryMonitor::add(&this.counters().failed);
                            return Poll::Ready(Err(RetryError::Failed(error)));
                        }
                        Verdict::Retry => Duration::ZERO,
                        Verdict::RetryAfter(hint) => hint,
                    };
                    this.report(false);
                    if let Some(end) = this.after_error(error, hint) {
                        return Poll::Ready(Err(end));
                    }
                }
                Step::Sleeping(mut sleep) => {
                    if sleep.poll(cx).is_pending() {
                        this.step = Step::Sleeping(sleep);
                        return Poll::Pending;
                    }
                    this.step = Step::Attempt;
                }
                Step::Done => panic!("RetryFuture polled after it finished"),
            }
        }
    }
}

impl<T, Fut, E> Drop for RetryFuture<T, Fut, E> {
    fn drop(&mut self) {
        self.unreserve();
        if let (Some(period), Some(breaker)) = (self.probe, &self.wrapped.policy.breaker) {
            breaker.cancel(period);
        }
    }
}

// ---- the sleep ----------------------------------------------------------------------

/// A wait on a scheduler's timer (see the [module docs](self#the-future)).
struct Sleep {
    state: Arc<Mutex<SleepState>>,
    /// Until the timer is seen to have fired.
    timer: Option<TimerHandle>,
}

#[derive(Default)]
struct SleepState {
    /// The timer ran, or the scheduler dropped it unrun.
    fired: bool,
    /// The sleep was dropped: nobody to wake.
    cancelled: bool,
    waker: Option<Waker>,
}

/// The timer's task: sets `fired` when it runs, and also when it is dropped unrun
/// (a scheduler that shut down), so that the sleep never hangs.
struct Fire(Arc<Mutex<SleepState>>);

impl Fire {
    fn fire(&self) {
        let waker = {
            let mut state = lock(&self.0);
            state.fired = true;
            if state.cancelled {
                None
            } else {
                state.waker.take()
            }
        };
        // Outside the lock: waking may run the poller's code.
        crate::guard::wake_all(waker);
    }
}

impl Drop for Fire {
    fn drop(&mut self) {
        let fired = lock(&self.0).fired;
        if !fired {
            self.fire();
        }
    }
}

impl Sleep {
    fn new(scheduler: &dyn Scheduler, delay: Duration) -> Self {
        let state = Arc::new(Mutex::new(SleepState::default()));
        // A delay past the end of the scheduler's clock never comes: nothing is
        // armed and the sleep never ends, on every scheduler alike (some drop such a
        // task unrun, and a dropped `Fire` fires).
        let timer = crate::runtime::deadline(scheduler.now(), delay).map(|_| {
            let fire = Fire(state.clone());
            scheduler.schedule_timer(delay, Box::new(move || fire.fire()))
        });
        Sleep { state, timer }
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = lock(&self.state);
        if state.fired {
            // It ran (or was dropped): nothing left to cancel.
            self.timer = None;
            return Poll::Ready(());
        }
        // Stored under the lock the timer takes to set `fired`: it either ran before
        // (seen above) or finds this waker.
        match &mut state.waker {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            slot => *slot = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        let Some(timer) = self.timer.take() else {
            return;
        };
        let waker = {
            let mut state = lock(&self.state);
            state.cancelled = true;
            state.waker.take()
        };
        // Outside the lock: dropping a waker may run the poller's code.
        drop(waker);
        // Removes the task (the scheduler drops it: `Fire::drop` wakes nobody).
        timer.cancel();
    }
}

#[cfg(all(test, not(weir_loom)))]
mod tests {
    use super::*;
    use crate::runtime::VirtualTime;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn message(f: impl FnOnce() + std::panic::UnwindSafe) -> String {
        let payload = std::panic::catch_unwind(f).unwrap_err();
        crate::Error::panicked(payload).message().to_owned()
    }

    #[test]
    fn rng_is_splitmix64() {
        // The first outputs of SplitMix64 seeded with 0 (the reference sequence).
        let mut rng = Rng::new(0);
        assert_eq!(rng.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(rng.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        let u = Rng::new(1).next_f64();
        assert!((0.0..1.0).contains(&u), "{u}");
    }

    #[test]
    fn ceiling_grows_exponentially_to_max_without_overflow() {
        let backoff = Backoff::exponential(ms(10), ms(1_000));
        let ceilings: Vec<_> = (0..=9).map(|n| backoff.ceiling(n)).collect();
        assert_eq!(
            ceilings,
            [10, 10, 20, 40, 80, 160, 320, 640, 1_000, 1_000].map(ms)
        );
        assert_eq!(backoff.ceiling(u32::MAX), ms(1_000));
        let tripled = backoff.multiplier(3.0);
        assert_eq!(tripled.ceiling(3), ms(90));
        let huge = Backoff::exponential(Duration::from_nanos(1), Duration::MAX);
        assert_eq!(huge.ceiling(1_000), Duration::MAX);
        assert_eq!(huge.ceiling(11), Duration::from_nanos(1_024));
        let top = Backoff::exponential(Duration::MAX, Duration::MAX);
        assert_eq!(top.ceiling(1_000), Duration::MAX);
        let delay = top.delay(u32::MAX, &mut Rng::new(3));
        assert!(delay <= Duration::MAX);
        assert_eq!(top.jitter(0.0).delay(5, &mut Rng::new(3)), Duration::MAX);
    }

    #[test]
    fn jitter_stays_in_its_band() {
        let backoff = Backoff::exponential(ms(100), ms(100)).jitter(0.25);
        let mut rng = Rng::new(9);
        for _ in 0..1_000 {
            let delay = backoff.delay(1, &mut rng);
            assert!((ms(75)..=ms(100)).contains(&delay), "{delay:?}");
        }
        assert_eq!(backoff.jittered(1, 0.0), ms(100));
        let full = Backoff::exponential(ms(100), ms(100));
        assert!(full.jittered(1, 0.999_999_9) < Duration::from_micros(1));
    }

    #[test]
    fn the_window_drops_whole_buckets() {
        let origin = Instant::now();
        let mut window = Window::new(origin, Duration::from_secs(10));
        window.bucket(origin).a += 5;
        window.bucket(origin + ms(9_999)).b += 1;
        assert_eq!(window.sums(origin + ms(9_999)), (5, 1));
        assert_eq!(window.sums(origin + ms(10_000)), (0, 1));
        // A clock read out of order counts in the latest bucket.
        window.bucket(origin).a += 1;
        assert_eq!(window.sums(origin + ms(10_000)), (1, 1));
        assert_eq!(window.sums(origin + ms(30_000)), (0, 0));
        window.bucket(origin + ms(30_000)).a += 2;
        window.clear();
        assert_eq!(window.sums(origin + ms(30_000)), (0, 0));
        // A window shorter than its bucket count still has 1 ns buckets.
        assert_eq!(Window::new(origin, Duration::from_nanos(3)).width, 1);
    }

    #[test]
    fn budget_floor_allows_retries_without_traffic() {
        let vt = VirtualTime::new();
        let budget = RetryBudget::new(0.0, Duration::from_secs(10), vt).min_retries_per_sec(0.5);
        assert_eq!(budget.available(), 5);
        let granted = (0..10).filter(|_| budget.try_retry()).count();
        assert_eq!(granted, 5);
        assert_eq!(
            budget.stats(),
            BudgetStats {
                first_attempts: 0,
                retries: 5,
                refused: 5
            }
        );
    }

    #[test]
    fn a_half_open_breaker_ignores_late_reports_and_takes_cancelled_probes_back() {
        let vt = VirtualTime::new();
        let breaker = CircuitBreaker::new(1.0, 1, ms(1_000), ms(100), vt.clone());
        breaker.on_failure();
        vt.advance(ms(100));
        assert_eq!(breaker.state(), BreakerState::HalfOpen);
        // Late outcomes of calls started before: no probe is out, ignored.
        breaker.on_success();
        breaker.on_failure();
        assert_eq!(breaker.state(), BreakerState::HalfOpen);
        breaker.try_acquire().unwrap();
        assert_eq!(
            breaker.try_acquire().unwrap_err().retry_after(),
            Duration::ZERO
        );
        breaker.on_cancel();
        breaker.try_acquire().unwrap();
        breaker.on_success();
        assert_eq!(breaker.state(), BreakerState::Closed);
        assert_eq!(
            breaker.stats(),
            BreakerStats {
                opened: 1,
                half_opened: 1,
                closed: 1,
                rejected: 1
            }
        );
        // Open for longer than the clock can show: never half-opens.
        let never = CircuitBreaker::new(1.0, 1, ms(1_000), Duration::MAX, vt.clone());
        never.on_failure();
        vt.advance(Duration::from_secs(1_000_000));
        assert_eq!(
            never.try_acquire().unwrap_err().retry_after(),
            Duration::MAX
        );
    }

    #[test]
    fn settings_are_checked_with_their_values() {
        assert_eq!(
            message(|| {
                Backoff::exponential(Duration::ZERO, ms(1));
            }),
            "Backoff base must be greater than zero (got 0ns)"
        );
        assert_eq!(
            message(|| {
                Backoff::exponential(ms(100), ms(10));
            }),
            "Backoff max must be at least base (got base 100ms, max 10ms)"
        );
        assert_eq!(
            message(|| {
                Backoff::exponential(ms(1), ms(1)).multiplier(0.5);
            }),
            "Backoff multiplier must be finite and at least 1 (got 0.5)"
        );
        assert_eq!(
            message(|| {
                Backoff::exponential(ms(1), ms(1)).multiplier(f64::INFINITY);
            }),
            "Backoff multiplier must be finite and at least 1 (got inf)"
        );
        assert_eq!(
            message(|| {
                Backoff::exponential(ms(1), ms(1)).jitter(1.5);
            }),
            "Backoff jitter must be in 0..=1 (got 1.5)"
        );
        assert_eq!(
            message(|| {
                RetryBudget::new(f64::NAN, ms(1), VirtualTime::new());
            }),
            "RetryBudget ratio must be finite and at least 0 (got NaN)"
        );
        assert_eq!(
            message(|| {
                RetryBudget::new(0.1, Duration::ZERO, VirtualTime::new());
            }),
            "RetryBudget window must be greater than zero"
        );
        assert_eq!(
            message(|| {
                RetryBudget::new(0.1, ms(1), VirtualTime::new()).min_retries_per_sec(-1.0);
            }),
            "RetryBudget min_retries_per_sec must be finite and at least 0 (got -1)"
        );
        assert_eq!(
            message(|| {
                CircuitBreaker::new(0.0, 1, ms(1), ms(1), VirtualTime::new());
            }),
            "CircuitBreaker failure_ratio must be in (0, 1] (got 0)"
        );
        assert_eq!(
            message(|| {
                CircuitBreaker::new(0.5, 0, ms(1), ms(1), VirtualTime::new());
            }),
            "CircuitBreaker min_calls must be at least 1"
        );
        assert_eq!(
            message(|| {
                CircuitBreaker::new(0.5, 1, Duration::ZERO, ms(1), VirtualTime::new());
            }),
            "CircuitBreaker window must be greater than zero"
        );
        assert_eq!(
            message(|| {
                CircuitBreaker::new(0.5, 1, ms(1), ms(1), VirtualTime::new()).half_open_probes(0);
            }),
            "CircuitBreaker half_open_probes must be at least 1"
        );
        assert_eq!(
            message(|| {
                RetryPolicy::<()>::new(0, Backoff::exponential(ms(1), ms(1)));
            }),
            "RetryPolicy max_attempts must be at least 1"
        );
    }

    #[test]
    fn errors_display_and_give_their_inner_error() {
        let exhausted: RetryError<std::io::Error> = RetryError::Exhausted {
            attempts: 3,
            last: std::io::Error::other("down"),
        };
        assert_eq!(exhausted.to_string(), "call failed after 3 attempts: down");
        assert!(std::error::Error::source(&exhausted).is_some());
        assert_eq!(exhausted.into_inner().unwrap().to_string(), "down");
        let open = RetryError::<std::io::Error>::CircuitOpen { retry_after: ms(5) };
        assert_eq!(open.to_string(), "circuit breaker open (retry after 5ms)");
        assert!(open.into_inner().is_none());
        assert_eq!(
            RetryError::Failed("bad").to_string(),
            "call failed (not retryable): bad"
        );
        assert_eq!(
            RetryError::BudgetExhausted("busy").into_inner(),
            Some("busy")
        );
    }
}
