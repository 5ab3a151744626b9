//! All demand arithmetic in weir lives here (principle 1: demand is law).
//!
//! * [`UNBOUNDED`] and [`validate`]: rules 3.17 and 3.9.
//! * [`AtomicDemand`]: outstanding demand shared between the requesting thread and the
//!   emitting thread; saturating add, batched settle.
//! * [`RateLimit`]: `limit_rate(high, low)`'s request batching.
//! * [`in_items`]: demand counted in batches, converted to items (`buffer`).
//! * [`Replenish`]: the 75% rule for anything that holds a prefetch window (sinks,
//!   async boundaries, bridges, mux credit).
//!
//! Batch credit (demand returned from `Subscriber::on_next_batch`) is added by the
//! emitter to its pass-local demand with plain arithmetic; it needs no atomic because
//! only the drain owner sees it.
//!
//! # Memory ordering (decided once, here)
//!
//! The requester writes nothing the emitter must see except the demand itself, but an
//! emitter that observes demand must also observe everything the requester did before
//! `request` (rule 1.1 says a request happens-before the `on_next` that fulfils it).
//! So `add` is a `Release` read-modify-write (`AcqRel` inside the CAS), and the
//! emitter's `get` is `Acquire`, pairing with it. `produced` is `AcqRel` so that a
//! concurrent `add` racing with the settle is never lost: both are RMWs on one
//! location, which are totally ordered, and the CAS retries on interference.
//! Nothing here needs `SeqCst`.

use std::collections::VecDeque;

use crate::loom::{AtomicU64, Ordering};
use crate::spec::Sealed;
use crate::Error;

/// Demand at or above this total means "unbounded" (rule 3.17). Totals saturate here.
pub const UNBOUNDED: u64 = u64::MAX;

/// Numerator of the replenish fraction: after this share of a prefetch window was
/// consumed, it is requested again (Reactor and RxJava use 3/4).
pub const REPLENISH_NUMERATOR: u64 = 3;
/// Denominator of the replenish fraction.
pub const REPLENISH_DENOMINATOR: u64 = 4;

// The replenish fraction must be a proper fraction, checked at compile time.
const _: () = assert!(REPLENISH_NUMERATOR > 0 && REPLENISH_NUMERATOR < REPLENISH_DENOMINATOR);

/// Rule 3.9: `request(0)` is illegal. Returns `n` when it is a legal request, and the
/// error the publisher must signal through `on_error` otherwise.
#[inline]
pub fn validate(n: u64) -> Result<u64, Error> {
    if n == 0 {
        Err(non_positive_request())
    } else {
        Ok(n)
    }
}

/// Add two amounts of demand, saturating at [`UNBOUNDED`] (rule 3.17): for a stage
/// that asks upstream for more than downstream did (items it will swallow or skip).
#[inline]
pub fn sum(a: u64, b: u64) -> u64 {
    a.saturating_add(b)
}

/// Demand for `batches` batches of `size` items each, in items: the product,
/// saturating at [`UNBOUNDED`]. Used by stages that emit one item per `size` inputs
/// (`buffer`). A product that saturates asks for more than 2^64 items, which no
/// source will deliver before the batch count is reached.
#[inline]
pub fn in_items(batches: u64, size: u64) -> u64 {
    batches.saturating_mul(size)
}

#[cold]
fn non_positive_request() -> Error {
    Error::spec_violation(
        "3.9",
        "non-positive subscription request: request(0) is illegal",
    )
}

/// Outstanding demand, shared between a subscription's `request` (any thread) and the
/// one emitter that owns the drain loop.
#[derive(Debug)]
pub struct AtomicDemand {
    value: AtomicU64,
}

impl Default for AtomicDemand {
    fn default() -> Self {
        Self::new()
    }
}

impl AtomicDemand {
    /// No demand yet.
    pub fn new() -> Self {
        AtomicDemand {
            value: AtomicU64::new(0),
        }
    }

    /// Add `n` (saturating at [`UNBOUNDED`]) and return the *previous* value.
    /// A previous value of 0 means the emitter may be idle and the caller should
    /// start (or enter) the drain.
    #[inline]
    pub fn add(&self, n: u64) -> u64 {
        let mut current = self.value.load(Ordering::Relaxed);
        loop {
            if current == UNBOUNDED {
                return UNBOUNDED;
            }
            let next = current.saturating_add(n);
            // AcqRel: the Release half pairs with the Acquire in `get`/`take` on the
            // emitter, publishing this request; the Acquire half orders us after
            // earlier settles.
            match self.value.compare_exchange_weak(
                current,
                next,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return current,
                Err(actual) => current = actual,
            }
        }
    }

    /// The outstanding demand. Acquire: pairs with the Release in [`add`](Self::add).
    #[inline]
    pub fn get(&self) -> u64 {
        self.value.load(Ordering::Acquire)
    }

    /// `emitted` items went out and their batch returned `credit`: one atomic step
    /// for both, and none when they cancel out (a consumer that hands back, as batch
    /// credit, exactly what it took). Demand changes by `credit - emitted`; unbounded
    /// demand stays unbounded. The caller guarantees `emitted` did not exceed the
    /// demand (rule 1.1), which this cannot check once credit is netted in.
    #[inline]
    pub(crate) fn settle(&self, emitted: u64, credit: u64) {
        if credit > emitted {
            self.add(credit - emitted);
        } else if emitted > credit {
            self.produced(emitted - credit);
        }
    }

    /// Record that `emitted` items went out against this demand and return what is left.
    /// Unbounded demand stays unbounded.
    ///
    /// Emitting more than was requested is a bug in the emitter (rule 1.1): debug builds
    /// panic, release builds clamp at zero.
    #[inline]
    pub fn produced(&self, emitted: u64) -> u64 {
        let mut current = self.value.load(Ordering::Relaxed);
        loop {
            if current == UNBOUNDED || emitted == 0 {
                return current;
            }
            debug_assert!(
                emitted <= current,
                "rule 1.1 violated: emitted {emitted} items against a demand of {current}"
            );
            let next = current.saturating_sub(emitted);
            // AcqRel: an RMW on the same location as `add`, so a racing request is
            // either seen here (and kept) or makes this CAS fail and retry.
            match self.value.compare_exchange_weak(
                current,
                next,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return next,
                Err(actual) => current = actual,
            }
        }
    }

    /// Spend one unit of demand if there is any: `false` when there is none.
    /// Unbounded demand stays unbounded. Used where producers reserve demand before
    /// they hand an item over ([`create`](crate::create)'s emitter).
    #[inline]
    pub(crate) fn try_spend_one(&self) -> bool {
        let mut current = self.value.load(Ordering::Relaxed);
        loop {
            if current == UNBOUNDED {
                return true;
            }
            if current == 0 {
                return false;
            }
            // AcqRel: an RMW on the same location as `add` (see `produced`).
            match self.value.compare_exchange_weak(
                current,
                current - 1,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(actual) => current = actual,
            }
        }
    }

    /// Take all outstanding demand, leaving zero (unbounded stays unbounded and is
    /// returned as [`UNBOUNDED`]). Used where requests are forwarded as credit.
    #[inline]
    pub fn take(&self) -> u64 {
        let mut current = self.value.load(Ordering::Relaxed);
        loop {
            if current == UNBOUNDED || current == 0 {
                return current;
            }
            // AcqRel: Acquire pairs with the Release in `add`.
            match self
                .value
                .compare_exchange_weak(current, 0, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return current,
                Err(actual) => current = actual,
            }
        }
    }
}

/// Demand a pass has taken out of an [`AtomicDemand`] and not yet used, plus the batch
/// credit the subscriber returned: plain arithmetic, no atomic per batch. An emitter
/// takes the shared demand once, spends it batch by batch (adding the credit each
/// batch returns), and gives back what is left when it has nothing more to emit.
#[derive(Debug, Default)]
pub(crate) struct LocalDemand(u64);

impl LocalDemand {
    /// What is left to spend ([`UNBOUNDED`] stays unbounded).
    #[inline]
    pub(crate) fn get(&self) -> u64 {
        self.0
    }

    /// Move all outstanding demand from `shared` here.
    #[inline]
    pub(crate) fn take(&mut self, shared: &AtomicDemand) {
        if self.0 != UNBOUNDED {
            self.0 = self.0.saturating_add(shared.take());
        }
    }

    /// `count` items went out (never more than is here) and the batch returned
    /// `credit`.
    #[inline]
    pub(crate) fn spent(&mut self, count: u64, credit: u64) {
        if self.0 != UNBOUNDED {
            debug_assert!(
                count <= self.0,
                "rule 1.1 violated: emitted {count} against {}",
                self.0
            );
            self.0 = (self.0 - count).saturating_add(credit);
        }
    }

    /// Hand what is left back to `shared`, for the next pass.
    #[inline]
    pub(crate) fn give_back(&mut self, shared: &AtomicDemand) {
        if self.0 > 0 {
            shared.add(std::mem::take(&mut self.0));
        }
    }
}

/// Deliver items from `items` to `downstream` against `demand`, the way a stage that
/// owns its downstream's demand does it: demand is read once per batch, the batch goes
/// out with one `on_next_batch`, and it is settled once with
/// [`produced`](AtomicDemand::produced) (downstream's batch credit added).
///
/// When the whole of `items` fits the demand (its `size_hint` says so), it is handed
/// over by value: a batching subscriber then folds it in one loop, whatever `items`
/// is. Otherwise runs of items go out while a run used all the demand there was
/// (downstream may have requested more from inside it) and `stop()` is false.
/// Returns how many items went out, and what is left (`None` when `items` was handed
/// over whole: what downstream did not take, it dropped); what is left arrived without
/// demand.
pub(crate) fn deliver<T, S, I>(
    demand: &AtomicDemand,
    downstream: &mut S,
    mut items: I,
    stop: impl Fn() -> bool,
) -> (u64, Option<I>)
where
    S: crate::Subscriber<T>,
    I: Iterator<Item = T>,
{
    let mut total = 0u64;
    loop {
        let wanted = demand.get();
        if wanted == 0 || stop() {
            return (total, Some(items));
        }
        if items
            .size_hint()
            .1
            .is_some_and(|upper| upper as u64 <= wanted)
        {
            return (total + settled_batch(demand, downstream, items), None);
        }
        let limit = usize::try_from(wanted).unwrap_or(usize::MAX);
        let passed = settled_batch(demand, downstream, items.by_ref().take(limit));
        debug_assert!(
            passed <= wanted,
            "rule 1.1: {passed} items against {wanted}"
        );
        total += passed;
        if passed < limit as u64 {
            return (total, Some(items));
        }
    }
}

/// [`deliver`] of every item of `queue` (emptied): when they all fit the demand, as
/// one [`on_next_queue`](crate::Subscriber::on_next_queue) settled once (a type-erased
/// subscriber takes the whole queue in one virtual call); otherwise item runs as
/// `deliver` makes them, the items without demand dropped. Returns how many went out.
#[inline]
pub(crate) fn deliver_queue<T, S>(
    demand: &AtomicDemand,
    downstream: &mut S,
    queue: &mut VecDeque<T>,
    stop: impl Fn() -> bool,
) -> u64
where
    S: crate::Subscriber<T>,
{
    if !queue.is_empty() && !stop() && queue.len() as u64 <= demand.get() {
        let (taken, credit) = downstream.on_next_queue(queue, Sealed::NEW);
        queue.clear();
        demand.settle(taken, credit);
        return taken;
    }
    deliver(demand, downstream, queue.drain(..), stop).0
}

/// Hand `items` (never more than the demand: the caller checked) to `downstream` with
/// one `on_next_batch` and [`settle`](AtomicDemand::settle) it. Returns how many items
/// went out.
#[inline]
fn settled_batch<T, S, I>(demand: &AtomicDemand, downstream: &mut S, items: I) -> u64
where
    S: crate::Subscriber<T>,
    I: Iterator<Item = T>,
{
    let mut passed = 0u64;
    let credit = downstream.on_next_batch(items.inspect(|_| passed += 1));
    demand.settle(passed, credit);
    passed
}

/// The 75% rule: a consumer that holds a window of `prefetch` items requests
/// `prefetch` up front and then, each time at least `limit = prefetch - prefetch / 4`
/// items were consumed, requests exactly what was consumed. Outstanding demand
/// therefore never exceeds `prefetch`, and upstream sees one request per `limit` items.
#[derive(Clone, Debug)]
pub struct Replenish {
    prefetch: u64,
    limit: u64,
    consumed: u64,
}

impl Replenish {
    /// A window of `prefetch` items. `prefetch == UNBOUNDED` requests once and never
    /// replenishes.
    ///
    /// # Panics
    ///
    /// If `prefetch` is 0: "Replenish prefetch must be at least 1 (got 0)".
    pub fn new(prefetch: u64) -> Self {
        assert!(
            prefetch >= 1,
            "Replenish prefetch must be at least 1 (got 0)"
        );
        let limit = if prefetch == UNBOUNDED {
            UNBOUNDED
        } else {
            prefetch
                - prefetch * (REPLENISH_DENOMINATOR - REPLENISH_NUMERATOR) / REPLENISH_DENOMINATOR
        };
        Replenish {
            prefetch,
            limit,
            consumed: 0,
        }
    }

    /// The first request: the whole window.
    pub fn initial(&self) -> u64 {
        self.prefetch
    }

    /// The window size.
    pub fn prefetch(&self) -> u64 {
        self.prefetch
    }

    /// The low-water mark: how many consumed items trigger a replenish.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// What the window still expects from upstream: the prefetch less what was
    /// consumed since the last replenish (never negative for a consumer that is
    /// handed no more than it asked for).
    pub(crate) fn outstanding(&self) -> u64 {
        self.prefetch.saturating_sub(self.consumed)
    }

    /// Record `n` consumed items; returns how many to request now, if any.
    #[inline]
    pub fn on_consumed(&mut self, n: u64) -> Option<u64> {
        if self.limit == UNBOUNDED {
            return None;
        }
        self.consumed = self.consumed.saturating_add(n);
        if self.consumed >= self.limit {
            let batch = self.consumed;
            self.consumed = 0;
            Some(batch)
        } else {
            None
        }
    }
}

/// The request batching of `limit_rate(high, low)`: downstream's demand goes upstream
/// in batches, never more than `high` outstanding upstream and never more than
/// downstream asked for.
///
/// The first batch is up to `high`; after that a batch goes up each time at least
/// `low` of the outstanding items were delivered (the *room*, `high - outstanding`,
/// reached `low`), and it is as large as the room (or downstream's remaining demand,
/// if smaller). Item by item that is "`low` more each time `low` were consumed";
/// when a whole batch arrives at once it is requested again in one go. When nothing
/// is outstanding the room is `high`, so new demand always goes up at once.
///
/// `low == high` means the 75% rule ([`Replenish`]'s limit of `high`); `low == 0`
/// means "always `high`": the next batch goes up only when all of the previous one
/// was delivered. `low > high` is a configuration error (a low-water mark above the
/// high one) and panics.
#[derive(Clone, Debug)]
pub struct RateLimit {
    high: u64,
    low: u64,
    /// Downstream demand not yet forwarded (saturating; `UNBOUNDED` stays).
    wanted: u64,
    /// Forwarded upstream and not yet delivered; never above `high`.
    outstanding: u64,
}

impl RateLimit {
    /// Batches of `high`, replenished at `low` (see the type docs for `low == high`
    /// and `low == 0`).
    ///
    /// # Panics
    ///
    /// If `high` is 0: "limit_rate high must be at least 1 (got 0)"; if `low > high`:
    /// "limit_rate low must be in 0..=high (got low 300, high 256)".
    pub fn new(high: u64, low: u64) -> Self {
        assert!(high >= 1, "limit_rate high must be at least 1 (got 0)");
        assert!(
            low <= high,
            "limit_rate low must be in 0..=high (got low {low}, high {high})"
        );
        let low = if low == high {
            Replenish::new(high).limit()
        } else if low == 0 {
            high
        } else {
            low
        };
        RateLimit {
            high,
            low,
            wanted: 0,
            outstanding: 0,
        }
    }

    /// The most that is ever outstanding upstream.
    pub fn high(&self) -> u64 {
        self.high
    }

    /// The replenish mark after the `low >= high` and `low == 0` rules.
    pub fn low(&self) -> u64 {
        self.low
    }

    /// Downstream requested `n` more; returns what to request upstream now (0: none).
    #[inline]
    pub fn on_request(&mut self, n: u64) -> u64 {
        self.wanted = self.wanted.saturating_add(n);
        self.forward()
    }

    /// Upstream delivered `n` items; returns what to request upstream now (0: none).
    ///
    /// # Panics
    ///
    /// In debug builds, if `n` is more than upstream still owes (upstream broke
    /// rule 1.1): "rule 1.1 violated: 5 items delivered against 4 outstanding". A
    /// release build counts what was owed as delivered.
    #[inline]
    pub fn on_delivered(&mut self, n: u64) -> u64 {
        debug_assert!(
            n <= self.outstanding,
            "rule 1.1 violated: {n} items delivered against {} outstanding",
            self.outstanding
        );
        self.outstanding = self.outstanding.saturating_sub(n);
        self.forward()
    }

    fn forward(&mut self) -> u64 {
        let room = self.high - self.outstanding;
        if room < self.low || self.wanted == 0 {
            return 0;
        }
        let batch = room.min(self.wanted);
        if self.wanted != UNBOUNDED {
            self.wanted -= batch;
        }
        self.outstanding += batch;
        batch
    }
}

#[cfg(all(test, not(weir_loom)))]
mod tests {
    use super::*;

    #[test]
    fn replenish_constants_are_a_proper_fraction() {
        let r = Replenish::new(64);
        assert_eq!((r.initial(), r.limit()), (64, 48));
        assert_eq!(Replenish::new(1).limit(), 1);
        assert_eq!(Replenish::new(3).limit(), 3);
    }

    #[test]
    fn replenish_batches_at_the_limit() {
        let mut r = Replenish::new(4);
        assert_eq!(r.on_consumed(1), None);
        assert_eq!(r.on_consumed(1), None);
        assert_eq!(r.on_consumed(1), Some(3));
        assert_eq!(r.on_consumed(5), Some(5));
    }

    #[test]
    #[should_panic(expected = "Replenish prefetch must be at least 1 (got 0)")]
    fn replenish_rejects_zero() {
        let _ = Replenish::new(0);
    }

    #[test]
    fn rate_limit_batches_at_low() {
        let mut r = RateLimit::new(4, 2);
        assert_eq!(r.on_request(UNBOUNDED), 4);
        assert_eq!(r.on_delivered(1), 0);
        assert_eq!(r.on_delivered(1), 2);
        assert_eq!(r.on_delivered(4), 4);
        // Bounded downstream demand is never exceeded.
        let mut r = RateLimit::new(8, 6);
        assert_eq!(r.on_request(3), 3);
        assert_eq!(r.on_request(2), 0, "room 5 is below the mark 6");
        assert_eq!(r.on_delivered(3), 2, "nothing outstanding: room 8");
        assert_eq!(r.on_delivered(2), 0, "nothing wanted");
    }

    #[test]
    fn rate_limit_low_rules() {
        assert_eq!(RateLimit::new(256, 192).low(), 192);
        assert_eq!(RateLimit::new(256, 256).low(), 192, "low == high: 75%");
        assert_eq!(RateLimit::new(256, 0).low(), 256, "low == 0: always high");
        let mut r = RateLimit::new(3, 0);
        assert_eq!(r.on_request(10), 3);
        assert_eq!(r.on_delivered(2), 0);
        assert_eq!(r.on_delivered(1), 3);
    }

    #[test]
    #[should_panic(expected = "limit_rate high must be at least 1 (got 0)")]
    fn rate_limit_rejects_zero() {
        let _ = RateLimit::new(0, 0);
    }

    #[test]
    #[should_panic(expected = "limit_rate low must be in 0..=high (got low 999, high 256)")]
    fn rate_limit_rejects_low_above_high() {
        let _ = RateLimit::new(256, 999);
    }

    #[test]
    fn demand_saturates_and_settles() {
        let d = AtomicDemand::new();
        assert_eq!(d.add(5), 0);
        assert_eq!(d.produced(3), 2);
        assert_eq!(d.add(u64::MAX - 1), 2);
        assert_eq!(d.get(), UNBOUNDED);
        assert_eq!(d.produced(1_000), UNBOUNDED);
        assert_eq!(d.take(), UNBOUNDED);
    }

    #[test]
    fn settling_nets_items_against_batch_credit() {
        let d = AtomicDemand::new();
        d.add(10);
        d.settle(4, 0);
        assert_eq!(d.get(), 6, "items without credit use demand");
        d.settle(3, 3);
        assert_eq!(
            d.get(),
            6,
            "credit for exactly what went out leaves it as it was"
        );
        d.settle(2, 5);
        assert_eq!(d.get(), 9, "more credit than items adds the difference");
        d.settle(9, 0);
        assert_eq!(d.get(), 0);
        d.add(UNBOUNDED);
        d.settle(1_000, 0);
        d.settle(0, 7);
        assert_eq!(d.get(), UNBOUNDED, "unbounded stays unbounded");
    }

    #[test]
    fn validate_names_rule_3_9() {
        let e = validate(0).unwrap_err();
        assert_eq!(e.rule(), Some("3.9"));
        // The rule is named once.
        assert_eq!(
            e.to_string(),
            "reactive streams rule 3.9 violated: non-positive subscription request: \
             request(0) is illegal"
        );
        assert_eq!(validate(7).unwrap(), 7);
    }
}

/// Loom models: `RUSTFLAGS="--cfg weir_loom" cargo test --release --lib loom`.
#[cfg(all(test, weir_loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// Concurrent requests and a concurrent settle lose nothing: the final demand is
    /// exactly requested − produced.
    #[test]
    fn loom_add_and_produced_conserve_demand() {
        loom::model(|| {
            let demand = Arc::new(AtomicDemand::new());
            demand.add(2);
            let a = {
                let demand = demand.clone();
                thread::spawn(move || {
                    demand.add(3);
                })
            };
            let b = {
                let demand = demand.clone();
                thread::spawn(move || {
                    demand.add(5);
                })
            };
            let left = demand.produced(2);
            assert!(left <= 8);
            a.join().unwrap();
            b.join().unwrap();
            assert_eq!(demand.get(), 8);
        });
    }

    /// Saturation is sticky under races: once unbounded, always unbounded.
    #[test]
    fn loom_saturation_is_sticky() {
        loom::model(|| {
            let demand = Arc::new(AtomicDemand::new());
            let a = {
                let demand = demand.clone();
                thread::spawn(move || {
                    demand.add(UNBOUNDED - 1);
                })
            };
            demand.add(7);
            demand.produced(0);
            a.join().unwrap();
            assert_eq!(demand.get(), UNBOUNDED);
            assert_eq!(demand.produced(100), UNBOUNDED);
            assert_eq!(demand.take(), UNBOUNDED);
        });
    }

    /// `take` and `add` race: every unit of demand is either taken or still there.
    #[test]
    fn loom_take_races_add() {
        loom::model(|| {
            let demand = Arc::new(AtomicDemand::new());
            let adder = {
                let demand = demand.clone();
                thread::spawn(move || {
                    demand.add(4);
                })
            };
            let taken = demand.take();
            adder.join().unwrap();
            assert_eq!(taken + demand.get(), 4);
        });
    }
}
