//! Every public API that takes a size (a capacity, prefetch, window, batch, count,
//! concurrency, ring, replay, lag, rate, thread count or limit) × zero, one, half the
//! type's largest value and its largest value, and, where an API documents a smaller
//! largest accepted size, that size too (the window or ring that must not be
//! allocated up front).
//!
//! Each case builds the API the way its docs show it used, in a small pipeline of a
//! few counted items, and runs it. It passes when either
//!
//! * the construction panics with the message its `# Panics` section documents
//!   (checked with `catch_unwind` around the construction alone), or returns the
//!   documented error (the mux's `MuxError::Config` naming the setting); or
//! * the pipeline does what the docs promise for that size: every item delivered
//!   once and in order (or each once, where inners interleave), the batches, drops
//!   or refusals promised, requests upstream within the window;
//!
//! and never with an overflow panic later in the stream, a capacity-overflow panic or
//! an abort at allocation, a hang, or something left alive. Each case runs on a thread
//! of its own under a watchdog, so a hang fails its case and the others still run;
//! every test reports all its failing cases at the end. No case asserts on timing.
//!
//! Rings the docs promise to allocate whole, up front (`publish_on`'s "lock-free
//! ring of exactly `prefetch` slots, allocated once", the mux's per-channel rings of
//! `exclusive + borrow_cap` and `staging` slots, allocated when a channel opens) are
//! held to 2^30 slots and 2^30 bytes: 2^30 slots of these items are refused by the
//! byte budget where the stage or mux is built (2^30 slots of 64-byte items used to
//! abort the process at subscribe), and the largest accepted ring runs (1 GiB of
//! address space, touched only as the ten items pass). Thread pools are not started with
//! 1,024 threads. Allocation sizes themselves are not measured here (that needs a
//! counting allocator, a binary of its own: `tests/alloc/sizes.rs` checks that the
//! stages run here at their largest accepted size allocate nothing large); here those
//! sizes are shown to run.
//!
//! Found while writing this sweep, and fixed with it: a mux whose `exclusive + borrow_cap` was
//! over 2^30 was built, then panicked in `open` with the message of an internal ring
//! ("spsc ring capacity must be in 1..=2^30 (got 1073741856)"); a mux lane of 2^30
//! frames was accepted and aborted the process allocating its ring (32 GiB);
//! `ThreadPool::new(usize::MAX)` was accepted, and `build` would have started
//! threads until the system refused one (read from the code; not run); `buffer`, `buffer_timeout`, `flat_map`, `concat_map`, `share`/`Hub`,
//! `blocking_iter`, `into_stream` and the async subscribers allocated room for their
//! whole size (2^30 slots) up front.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use weir::demand::Replenish;
use weir::hub::{Hub, Policy};
use weir::limit::{Aimd, Fixed, Gradient};
use weir::mux::{Local, Mux, MuxBuilder, MuxError};
use weir::operators::{Rate, ThrottleMode};
use weir::prelude::*;
use weir::queue::{Capacity, TimeBounds};
use weir::retry::{Backoff, BreakerState, CircuitBreaker, RetryError, RetryPolicy, Rng};
use weir::runtime::{ThreadPool, VirtualTime};
use weir::source::channel::{ChannelBuilder, ChannelPolicy, WaterMarks};
use weir::tck::TestSubscriber;
use weir::{BoxPublisher, DropReason, ErrorKind, Overflow};

use crate::harness::watch::{
    assert_no_failures, built, construct, on_thread, run_rows, silence_deliberate_panics,
    wait_until, PATIENCE,
};
use crate::support::{Live, Tracked};

/// How long one case may run before it counts as hung: a watchdog, never reached by
/// a case that ends (each runs a few pipelines of ten items).
const CASE: Duration = Duration::from_secs(60);

/// 2^30: the largest window, ring, capacity or batch weir accepts.
const MAX_CAPACITY: u64 = 1 << 30;

/// 2^16: the largest concurrency (`flat_map`, `map_async`) and mux lane.
const MAX_CONCURRENCY: u64 = 1 << 16;

/// The integer type an API takes its size in (`usize` is 64 bits on every target
/// the suite runs on: [`us`] checks).
#[derive(Clone, Copy, Debug)]
enum Width {
    U32,
    U64,
}

impl Width {
    fn max(self) -> u64 {
        match self {
            Width::U32 => u64::from(u32::MAX),
            Width::U64 => u64::MAX,
        }
    }
}

/// A case: the API at one size; its failures (empty: it passed).
type Check = fn(u64) -> Vec<String>;

/// One API: its name, the type of its size, the sizes tried beside 0, 1 and half and
/// all of the type's largest value (the largest size it documents as accepted, when
/// below the type's largest value, and the first ones it refuses), and the check.
#[derive(Clone, Copy)]
struct Api {
    name: &'static str,
    width: Width,
    extra: &'static [u64],
    check: Check,
}

const fn api(name: &'static str, width: Width, extra: &'static [u64], check: Check) -> Api {
    Api {
        name,
        width,
        extra,
        check,
    }
}

/// A `u64` size as the `usize` an API takes.
fn us(n: u64) -> usize {
    usize::try_from(n).expect("the suite runs on 64-bit targets")
}

/// A `u64` size as the `u32` an API takes (the sweep gives `u32` APIs `u32` sizes).
fn u32_of(n: u64) -> u32 {
    u32::try_from(n).expect("a u32 API is swept with u32 sizes")
}

/// Run every API of `apis` at every size, each case on its own thread under the
/// watchdog, two at a time; fail once with every failing case.
fn sweep(what: &str, apis: &[Api]) {
    silence_deliberate_panics();
    let mut cases: Vec<(Api, u64)> = Vec::new();
    for &api in apis {
        let max = api.width.max();
        let mut sizes = vec![0, 1, max / 2, max];
        for &extra in api.extra {
            if !sizes.contains(&extra) {
                sizes.push(extra);
            }
        }
        cases.extend(sizes.into_iter().map(|n| (api, n)));
    }
    let failures = run_rows(&cases, 2, |&(api, n)| {
        let name = format!("{} with {n}", api.name);
        let check = api.check;
        match on_thread(&name, CASE, move || check(n)) {
            Ok(failures) => failures
                .into_iter()
                .map(|f| format!("{name}: {f}"))
                .collect(),
            Err(why) => vec![format!("{name}: {why}")],
        }
    });
    assert_no_failures(what, cases.len(), &failures);
}

/// The documented refusal `message` unless `accepted`.
fn unless(accepted: bool, message: impl FnOnce() -> String) -> Option<String> {
    (!accepted).then(message)
}

/// The refusal of a size that must be in `1..=2^30`, in the crate's one wording.
fn window_refusal(what: &str, n: u64) -> Option<String> {
    unless((1..=MAX_CAPACITY).contains(&n), || {
        format!("{what} must be in 1..=2^30 (got {n})")
    })
}

/// `check` failed: add `what` to `failures`.
fn expect(failures: &mut Vec<String>, check: bool, what: impl FnOnce() -> String) {
    if !check {
        failures.push(what());
    }
}

/// Every counted item was dropped (watchdog: a stage may release on another thread).
fn expect_released(failures: &mut Vec<String>, live: &Live) {
    let left = live.settle();
    expect(failures, left == 0, || {
        format!("{left} items still alive at the end")
    });
}

/// Ten counted items, 0..10, made as they are requested.
fn ten(live: &Live) -> impl Publisher<Item = Tracked> {
    counted(live, 0..10)
}

/// Counted items with the values of `values`, made as they are requested.
fn counted(live: &Live, values: std::ops::Range<u64>) -> impl Publisher<Item = Tracked> {
    let live = live.clone();
    weir::range(values).map(move |i| Tracked::new(i, &live))
}

/// The values of counted items.
fn values(items: Vec<Tracked>) -> Vec<u64> {
    items.into_iter().map(|item| item.value).collect()
}

fn zero_to(n: u64) -> Vec<u64> {
    (0..n).collect()
}

/// A sink's result, in values: `documented` in order, or the failure.
fn expect_items(
    failures: &mut Vec<String>,
    got: Option<Result<Vec<Tracked>, weir::Error>>,
    documented: &[u64],
) {
    match got {
        Some(Ok(items)) => {
            let got = values(items);
            expect(failures, got == documented, || {
                format!("delivered {got:?}; documented {documented:?}")
            });
        }
        other => failures.push(format!(
            "ended with {:?}; documented Ok({documented:?})",
            other.map(|r| r.map(values))
        )),
    }
}

/// The requests a stage made upstream, recorded by `inspect_request`.
#[derive(Clone, Default)]
struct Requests(Arc<Mutex<Vec<u64>>>);

impl Requests {
    fn recorder(&self) -> impl Fn(u64) + Send + Sync + 'static {
        let log = self.0.clone();
        move |n| log.lock().unwrap().push(n)
    }

    fn all(&self) -> Vec<u64> {
        self.0.lock().unwrap().clone()
    }

    /// No request above `window`, at least one made.
    fn expect_within(&self, failures: &mut Vec<String>, window: u64) {
        let all = self.all();
        expect(
            failures,
            !all.is_empty() && all.iter().all(|&r| r <= window),
            || format!("requested {all:?} upstream; documented: none above {window}"),
        );
    }
}

fn pool(name: &str) -> ThreadPool {
    ThreadPool::builder().name(name).threads(1).build()
}

// ---- counts and batches: take, skip, buffer, limit_rate, range ---------------------

/// `take(n)`: the first `n` items ("`take(0)` cancels upstream at once and completes
/// without items"); a count past the stream takes it all.
fn take(n: u64) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    let stage = built!(None, ten(&live).take(n));
    expect_items(
        &mut failures,
        stage.collect().wait_timeout(PATIENCE),
        &zero_to(n.min(10)),
    );
    expect_released(&mut failures, &live);
    failures
}

/// `skip(n)`: everything after the first `n` items (none when `n` covers the stream).
fn skip(n: u64) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    let stage = built!(None, ten(&live).skip(n));
    let documented: Vec<u64> = (n.min(10)..10).collect();
    expect_items(
        &mut failures,
        stage.collect().wait_timeout(PATIENCE),
        &documented,
    );
    expect_released(&mut failures, &live);
    failures
}

/// `buffer(size)`: `size` in `1..=2^30`; batches of `size`, the last one partial.
fn buffer(n: u64) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    let stage = built!(window_refusal("buffer size", n), ten(&live).buffer(n));
    let got = stage.map(values).collect().wait_timeout(PATIENCE);
    let documented: Vec<Vec<u64>> = zero_to(10).chunks(us(n)).map(<[u64]>::to_vec).collect();
    expect(
        &mut failures,
        matches!(&got, Some(Ok(batches)) if *batches == documented),
        || format!("batches {got:?}; documented Ok({documented:?})"),
    );
    expect_released(&mut failures, &live);
    failures
}

/// `buffer_timeout_on(size, 1 h, pool)`: as `buffer` (the period never passes); the
/// partial batch goes out at completion and no timer is left on the pool.
fn buffer_timeout(n: u64) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    let sched = pool("sizes-buffer-timeout");
    let stage = built!(
        window_refusal("buffer_timeout size", n),
        ten(&live).buffer_timeout_on(n, Duration::from_secs(3_600), sched.clone())
    );
    let got = stage.map(values).collect().wait_timeout(PATIENCE);
    let documented: Vec<Vec<u64>> = zero_to(10).chunks(us(n)).map(<[u64]>::to_vec).collect();
    expect(
        &mut failures,
        matches!(&got, Some(Ok(batches)) if *batches == documented),
        || format!("batches {got:?}; documented Ok({documented:?})"),
    );
    expect(
        &mut failures,
        wait_until(PATIENCE, || sched.pending_timers() == 0),
        || format!("{} timers left on the pool", sched.pending_timers()),
    );
    sched.shutdown();
    expect_released(&mut failures, &live);
    failures
}

/// `limit_rate(high, low)` with `low` given by `low_of(high)` (or `high` given by
/// `high_of(low)`): "`high` is 0" and "`low > high`" are refused with the values;
/// otherwise every item arrives in order and no request upstream exceeds `high`.
fn limit_rate(high: u64, low: u64) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    let refusal = if high == 0 {
        Some("limit_rate high must be at least 1 (got 0)".to_owned())
    } else {
        unless(low <= high, || {
            format!("limit_rate low must be in 0..=high (got low {low}, high {high})")
        })
    };
    let requests = Requests::default();
    let stage = built!(
        refusal,
        ten(&live)
            .inspect_request(requests.recorder())
            .limit_rate(high, low)
    );
    expect_items(
        &mut failures,
        stage.collect().wait_timeout(PATIENCE),
        &zero_to(10),
    );
    requests.expect_within(&mut failures, high);
    expect_released(&mut failures, &live);
    failures
}

fn limit_rate_high_and_low(n: u64) -> Vec<String> {
    limit_rate(n, n)
}

fn limit_rate_high_low_zero(n: u64) -> Vec<String> {
    limit_rate(n, 0)
}

fn limit_rate_low_under_max(n: u64) -> Vec<String> {
    limit_rate(u64::MAX, n)
}

/// `weir::range(MAX − n..MAX).take(3)`: a range that ends at the type's last value
/// counts its `n` items without overflow; the first three (or fewer) arrive.
fn range_at_the_end(n: u64) -> Vec<String> {
    let mut failures = Vec::new();
    let start = u64::MAX - n;
    let got = weir::range(start..u64::MAX)
        .take(3)
        .collect()
        .wait_timeout(PATIENCE);
    let documented: Vec<u64> = (start..u64::MAX).take(3).collect();
    expect(
        &mut failures,
        matches!(&got, Some(Ok(v)) if *v == documented),
        || format!("delivered {got:?}; documented Ok({documented:?})"),
    );
    failures
}

#[test]
fn counts_and_batches_with_extreme_sizes() {
    use Width::U64;
    sweep(
        "counts and batches × sizes",
        &[
            api("take", U64, &[], take),
            api("skip", U64, &[], skip),
            api("buffer", U64, &[MAX_CAPACITY], buffer),
            api(
                "buffer_timeout_on(size, 1h)",
                U64,
                &[MAX_CAPACITY],
                buffer_timeout,
            ),
            api("limit_rate(n, n)", U64, &[], limit_rate_high_and_low),
            api("limit_rate(n, 0)", U64, &[], limit_rate_high_low_zero),
            api(
                "limit_rate(u64::MAX, n)",
                U64,
                &[],
                limit_rate_low_under_max,
            ),
            api("range(u64::MAX - n..u64::MAX)", U64, &[], range_at_the_end),
        ],
    );
}

// ---- queues and boundaries: on_backpressure_buffer, publish_on, throttle ---------------

/// `on_backpressure_buffer(capacity, DropOldest)`: `capacity` in `1..=2^30`. A
/// subscriber that asks for nothing while the ten items arrive, then for all: the
/// newest `capacity` items, in order, and the rest counted as `OverflowOldest`.
fn on_backpressure_buffer(n: u64) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    let stage = built!(
        window_refusal("on_backpressure_buffer capacity", n),
        ten(&live).on_backpressure_buffer(n, Overflow::DropOldest)
    );
    let monitor = stage.monitor();
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    stage.map(|item| item.value).subscribe(subscriber);
    probe.request(100);
    let ended = probe.await_completion(PATIENCE);
    let kept = n.min(10);
    let documented: Vec<u64> = (10 - kept..10).collect();
    let got = probe.items();
    expect(&mut failures, ended.is_ok() && got == documented, || {
        format!("delivered {got:?} ({ended:?}); documented {documented:?} and completion")
    });
    let dropped = monitor.snapshot().dropped(DropReason::OverflowOldest);
    expect(&mut failures, dropped == 10 - kept, || {
        format!("{dropped} OverflowOldest drops; documented {}", 10 - kept)
    });
    drop(probe);
    expect_released(&mut failures, &live);
    failures
}

/// The bytes of a slot of `publish_on`'s ring of [`Tracked`] items: the item, and
/// with `publish_on_with` the stamp beside it (an index and an `Instant`).
const fn publish_on_slot(with_bounds: bool) -> usize {
    std::mem::size_of::<Tracked>()
        + if with_bounds {
            std::mem::size_of::<(usize, std::time::Instant)>()
        } else {
            0
        }
}

/// The largest `publish_on` ring of [`Tracked`] items: 2^30 bytes of slots.
const PUBLISH_ON_LARGEST: u64 = (1 << 30) / publish_on_slot(false) as u64;
const PUBLISH_ON_WITH_LARGEST: u64 = (1 << 30) / publish_on_slot(true) as u64;

/// `publish_on(pool, prefetch)` (and `publish_on_with`): `prefetch` in `1..=2^30`,
/// and the ring, allocated whole, at most 2^30 bytes; every item in order, never
/// more than `prefetch` requested upstream at once.
fn publish_on(n: u64, with_bounds: bool) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    let sched = pool("sizes-publish-on");
    let requests = Requests::default();
    let source = ten(&live).inspect_request(requests.recorder());
    let slot = publish_on_slot(with_bounds);
    let refusal = window_refusal("publish_on prefetch", n).or_else(|| {
        unless(n.saturating_mul(slot as u64) <= 1 << 30, || {
            format!(
                "publish_on prefetch of {n} slots of {slot} bytes needs {} bytes up front; \
                 at most 2^30 bytes (1 GiB): {} slots for this item type",
                n * slot as u64,
                (1 << 30) / slot
            )
        })
    });
    let got = if with_bounds {
        let stage = built!(
            refusal,
            source.publish_on_with(sched.clone(), n, TimeBounds::none())
        );
        stage.collect().wait_timeout(PATIENCE)
    } else {
        let stage = built!(refusal, source.publish_on(sched.clone(), n));
        stage.collect().wait_timeout(PATIENCE)
    };
    expect_items(&mut failures, got, &zero_to(10));
    requests.expect_within(&mut failures, n);
    sched.shutdown();
    expect_released(&mut failures, &live);
    failures
}

fn publish_on_prefetch(n: u64) -> Vec<String> {
    publish_on(n, false)
}

fn publish_on_with_prefetch(n: u64) -> Vec<String> {
    publish_on(n, true)
}

/// Throttle ten items on a virtual clock, moved a second at a time until they are
/// through (at most 30 s): the items, in order.
fn throttled(
    failures: &mut Vec<String>,
    live: &Live,
    rate: Rate,
    burst: u64,
    refusal: Option<String>,
) {
    let clock = VirtualTime::new();
    let stage = match construct(refusal, || {
        ten(live).throttle_on(rate, burst, ThrottleMode::Shaping, clock.clone())
    }) {
        Ok(Some(stage)) => stage,
        Ok(None) => return,
        Err(failure) => return failures.push(failure),
    };
    let mut handle = stage.collect();
    let mut got = handle.wait_timeout(Duration::ZERO);
    for _ in 0..30 {
        if got.is_some() {
            break;
        }
        clock.advance(Duration::from_secs(1));
        got = handle.wait_timeout(Duration::from_millis(1));
    }
    if got.is_none() {
        got = handle.wait_timeout(PATIENCE);
    }
    expect_items(failures, got, &zero_to(10));
    expect(failures, clock.pending() == 0, || {
        format!("{} tasks left on the clock", clock.pending())
    });
}

/// `throttle_on(Rate::per_second(n), burst 1, Shaping)`: "throttle rate must add at
/// least 1 token per period (got 0 per 1s)"; any other rate lets every item through
/// in order (one a second at 1/s, at once at `u64::MAX`/s: no overflow in the
/// bucket's arithmetic).
fn throttle_rate(n: u64) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    let refusal = unless(n >= 1, || {
        "throttle rate must add at least 1 token per period (got 0 per 1s)".to_owned()
    });
    throttled(&mut failures, &live, Rate::per_second(n), 1, refusal);
    expect_released(&mut failures, &live);
    failures
}

/// `Rate::new(n, Duration::MAX)`: the largest period, with every token count: refused
/// at 0, otherwise the burst of ten lets the ten items through at once.
fn throttle_rate_per_max(n: u64) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    let refusal = unless(n >= 1, || {
        format!(
            "throttle rate must add at least 1 token per period (got 0 per {:?})",
            Duration::MAX
        )
    });
    throttled(
        &mut failures,
        &live,
        Rate::new(n, Duration::MAX),
        10,
        refusal,
    );
    expect_released(&mut failures, &live);
    failures
}

/// `throttle_on(1/s, burst, Shaping)`: `burst` in `1..=2^30`; every item arrives in
/// order.
fn throttle_burst(n: u64) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    throttled(
        &mut failures,
        &live,
        Rate::per_second(1),
        n,
        window_refusal("throttle burst", n),
    );
    expect_released(&mut failures, &live);
    failures
}

#[test]
fn queues_and_boundaries_with_extreme_sizes() {
    use Width::U64;
    sweep(
        "queues and boundaries × sizes",
        &[
            api(
                "on_backpressure_buffer(capacity, DropOldest)",
                U64,
                &[MAX_CAPACITY],
                on_backpressure_buffer,
            ),
            // The ring is allocated whole: 2^30 slots are refused by its byte budget,
            // and its largest accepted size (1 GiB of address space) runs.
            api(
                "publish_on(pool, prefetch)",
                U64,
                &[MAX_CAPACITY, PUBLISH_ON_LARGEST, PUBLISH_ON_LARGEST + 1],
                publish_on_prefetch,
            ),
            api(
                "publish_on_with(pool, prefetch, none)",
                U64,
                &[
                    MAX_CAPACITY,
                    PUBLISH_ON_WITH_LARGEST,
                    PUBLISH_ON_WITH_LARGEST + 1,
                ],
                publish_on_with_prefetch,
            ),
            api(
                "throttle_on(Rate::per_second(n), 1)",
                U64,
                &[],
                throttle_rate,
            ),
            api(
                "throttle_on(Rate::new(n, Duration::MAX), 10)",
                U64,
                &[],
                throttle_rate_per_max,
            ),
            api(
                "throttle_on(1/s, burst)",
                U64,
                &[MAX_CAPACITY],
                throttle_burst,
            ),
        ],
    );
}

// ---- inner publishers and calls: flat_map, concat_map, map_async, limiters ---------------

/// `flat_map(f, concurrency, 16)` over ten items, each mapped to itself alone:
/// `concurrency` in `1..=2^16`; each item once (in order at concurrency 1: inners run
/// one after another), never more than `concurrency` outer items asked for.
fn flat_map_concurrency(n: u64) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    let requests = Requests::default();
    let refusal = unless((1..=MAX_CONCURRENCY).contains(&n), || {
        format!("flat_map concurrency must be in 1..=2^16 (got {n})")
    });
    let stage = built!(
        refusal,
        ten(&live)
            .inspect_request(requests.recorder())
            .flat_map(weir::just, n, 16)
    );
    match stage.collect().wait_timeout(PATIENCE) {
        Some(Ok(items)) => {
            let mut got = values(items);
            let in_order = got == zero_to(10);
            got.sort_unstable();
            expect(
                &mut failures,
                got == zero_to(10) && (n > 1 || in_order),
                || {
                    format!(
                        "delivered {got:?} (in order: {in_order}); documented each of 0..10 once"
                    )
                },
            );
        }
        other => failures.push(format!("ended with {:?}", other.map(|r| r.map(values)))),
    }
    requests.expect_within(&mut failures, n);
    expect_released(&mut failures, &live);
    failures
}

/// Item `i` mapped to an inner publisher of two counted items (values `2i`,
/// `2i + 1`), the inners' requests recorded.
fn pairs(
    live: &Live,
    inner_requests: &Requests,
) -> impl FnMut(u64) -> BoxPublisher<Tracked> + Send + 'static {
    let (live, inner_requests) = (live.clone(), inner_requests.clone());
    move |i| {
        counted(&live, 2 * i..2 * i + 2)
            .inspect_request(inner_requests.recorder())
            .boxed()
    }
}

/// `flat_map(f, 4, prefetch)`: `prefetch` in `1..=2^30`; each of the twenty items of
/// the inners once, each inner's in order, never more than `prefetch` asked of an
/// inner at once.
fn flat_map_prefetch(n: u64) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    let inner = Requests::default();
    let stage = built!(
        window_refusal("flat_map prefetch", n),
        weir::range(0..10u64).flat_map(pairs(&live, &inner), 4, n)
    );
    match stage.collect().wait_timeout(PATIENCE) {
        Some(Ok(items)) => {
            let got = values(items);
            let pairs_in_order = (0..10u64).all(|i| {
                let first = got.iter().position(|&v| v == 2 * i);
                let second = got.iter().position(|&v| v == 2 * i + 1);
                matches!((first, second), (Some(a), Some(b)) if a < b)
            });
            let mut sorted = got.clone();
            sorted.sort_unstable();
            expect(
                &mut failures,
                sorted == zero_to(20) && pairs_in_order,
                || format!("delivered {got:?}; documented each of 0..20 once, each inner in order"),
            );
        }
        other => failures.push(format!("ended with {:?}", other.map(|r| r.map(values)))),
    }
    inner.expect_within(&mut failures, n);
    expect_released(&mut failures, &live);
    failures
}

/// `concat_map(f, prefetch)`: `prefetch` in `1..=2^30`; the twenty items in order.
fn concat_map_prefetch(n: u64) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    let inner = Requests::default();
    let stage = built!(
        window_refusal("concat_map prefetch", n),
        weir::range(0..10u64).concat_map(pairs(&live, &inner), n)
    );
    expect_items(
        &mut failures,
        stage.collect().wait_timeout(PATIENCE),
        &zero_to(20),
    );
    inner.expect_within(&mut failures, n);
    expect_released(&mut failures, &live);
    failures
}

/// `flat_map(just, 4, 16).limit(limiter)` with the limiter `make` builds (refused
/// with `refusal`): each item once, never more than `min(4, limit)` outer items asked
/// for at once (the limit a huge `initial` or `max` gives is clamped to the
/// concurrency).
fn limited_flat_map<L: weir::limit::Limiter + Clone + Sync>(
    refusal: Option<String>,
    make: impl FnOnce() -> L,
    at_most: u64,
) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    let limiter = built!(refusal, make());
    let requests = Requests::default();
    let stage = ten(&live)
        .inspect_request(requests.recorder())
        .flat_map(weir::just, 4, 16)
        .limit(limiter);
    match stage.collect().wait_timeout(PATIENCE) {
        Some(Ok(items)) => {
            let mut got = values(items);
            got.sort_unstable();
            expect(&mut failures, got == zero_to(10), || {
                format!("delivered {got:?}; documented each of 0..10 once")
            });
        }
        other => failures.push(format!("ended with {:?}", other.map(|r| r.map(values)))),
    }
    requests.expect_within(&mut failures, at_most);
    expect_released(&mut failures, &live);
    failures
}

/// `Fixed::new(limit)`: "Fixed limit must be at least 1 (got 0)".
fn fixed_limit(n: u64) -> Vec<String> {
    let refusal = unless(n >= 1, || {
        "Fixed limit must be at least 1 (got 0)".to_owned()
    });
    limited_flat_map(refusal, || Fixed::new(us(n)), n.min(4))
}

fn aimd_refusal(min: u64, initial: u64, max: u64) -> Option<String> {
    unless(min >= 1 && (min..=max).contains(&initial), || {
        format!(
            "Aimd limits must satisfy 1 <= min <= initial <= max (got min {min}, initial \
             {initial}, max {max})"
        )
    })
}

/// `Aimd::new(initial = n, min = n, max = usize::MAX, 1 s, 0.9)`.
fn aimd_initial(n: u64) -> Vec<String> {
    let max = u64::MAX;
    limited_flat_map(
        aimd_refusal(n, n, max),
        || Aimd::new(us(n), us(n), us(max), Duration::from_secs(1), 0.9),
        n.min(4),
    )
}

/// `Aimd::new(initial = 1, min = 1, max = n, 1 s, 0.9)`.
fn aimd_max(n: u64) -> Vec<String> {
    limited_flat_map(
        aimd_refusal(1, 1, n),
        || Aimd::new(1, 1, us(n), Duration::from_secs(1), 0.9),
        4,
    )
}

fn gradient_refusal(min: u64, initial: u64, max: u64) -> Option<String> {
    unless(min >= 1 && (min..=max).contains(&initial), || {
        format!(
            "Gradient limits must satisfy 1 <= min <= initial <= max (got min {min}, \
             initial {initial}, max {max})"
        )
    })
}

/// `Gradient::new(initial = n, min = n, max = usize::MAX)` on `map_async_on`.
fn gradient_initial(n: u64) -> Vec<String> {
    limited_map_async(
        gradient_refusal(n, n, u64::MAX),
        || Gradient::new(us(n), us(n), usize::MAX),
        n.min(4),
    )
}

/// `Gradient::new(1, 1, max = n)` on `map_async_on`.
fn gradient_max(n: u64) -> Vec<String> {
    limited_map_async(gradient_refusal(1, 1, n), || Gradient::new(1, 1, us(n)), 4)
}

/// `Gradient::new(2, 1, 8).probe_every(samples)`: "Gradient probe_every must be at
/// least 1 (got 0)".
fn gradient_probe_every(n: u64) -> Vec<String> {
    let refusal = unless(n >= 1, || {
        "Gradient probe_every must be at least 1 (got 0)".to_owned()
    });
    limited_map_async(refusal, || Gradient::new(2, 1, 8).probe_every(n), 4)
}

/// `map_async_on(pool, 4, true, f).limit(limiter)`: the items in order, never more
/// than `min(4, limit)` asked for upstream at once.
fn limited_map_async<L: weir::limit::Limiter + Clone + Sync>(
    refusal: Option<String>,
    make: impl FnOnce() -> L,
    at_most: u64,
) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    let limiter = built!(refusal, make());
    let sched = pool("sizes-limit");
    let requests = Requests::default();
    let stage = ten(&live)
        .inspect_request(requests.recorder())
        .map_async_on(sched.clone(), 4, true, |item: Tracked| async move { item })
        .limit(limiter);
    expect_items(
        &mut failures,
        stage.collect().wait_timeout(PATIENCE),
        &zero_to(10),
    );
    requests.expect_within(&mut failures, at_most);
    sched.shutdown();
    expect_released(&mut failures, &live);
    failures
}

/// `map_async_on(pool, concurrency, ordered, f)`: `concurrency` in `1..=2^16`
/// (the slots are allocated up front); the items (in order when ordered), never more
/// than `concurrency` asked for upstream at once.
fn map_async_on(n: u64, ordered: bool) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    let sched = pool("sizes-map-async");
    let requests = Requests::default();
    let refusal = unless((1..=MAX_CONCURRENCY).contains(&n), || {
        format!("map_async_on concurrency must be in 1..=2^16 (got {n})")
    });
    let stage = built!(
        refusal,
        ten(&live)
            .inspect_request(requests.recorder())
            .map_async_on(
                sched.clone(),
                n,
                ordered,
                |item: Tracked| async move { item }
            )
    );
    match stage.collect().wait_timeout(PATIENCE) {
        Some(Ok(items)) => {
            let mut got = values(items);
            let in_order = got == zero_to(10);
            got.sort_unstable();
            expect(
                &mut failures,
                got == zero_to(10) && (in_order || !ordered),
                || format!("delivered {got:?} (in order: {in_order}); documented 0..10"),
            );
        }
        other => failures.push(format!("ended with {:?}", other.map(|r| r.map(values)))),
    }
    requests.expect_within(&mut failures, n);
    sched.shutdown();
    expect_released(&mut failures, &live);
    failures
}

fn map_async_on_ordered(n: u64) -> Vec<String> {
    map_async_on(n, true)
}

fn map_async_on_unordered(n: u64) -> Vec<String> {
    map_async_on(n, false)
}

/// `map_async(concurrency, f)` / `map_async_unordered` inside a tokio runtime: as
/// `map_async_on`, the message naming the method.
fn map_async_tokio(n: u64, ordered: bool) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    let runtime = crate::harness::run::tokio_runtime("sizes-map-async");
    let _inside = runtime.enter();
    let method = if ordered {
        "map_async"
    } else {
        "map_async_unordered"
    };
    let refusal = unless((1..=MAX_CONCURRENCY).contains(&n), || {
        format!("{method} concurrency must be in 1..=2^16 (got {n})")
    });
    let f = |item: Tracked| async move { item };
    let handle = if ordered {
        built!(refusal, ten(&live).map_async(n, f)).collect()
    } else {
        built!(refusal, ten(&live).map_async_unordered(n, f)).collect()
    };
    let mut handle = handle;
    match handle.wait_timeout(PATIENCE) {
        Some(Ok(items)) => {
            let mut got = values(items);
            let in_order = got == zero_to(10);
            got.sort_unstable();
            expect(
                &mut failures,
                got == zero_to(10) && (in_order || !ordered),
                || format!("delivered {got:?} (in order: {in_order}); documented 0..10"),
            );
        }
        other => failures.push(format!("ended with {:?}", other.map(|r| r.map(values)))),
    }
    expect_released(&mut failures, &live);
    failures
}

fn map_async_ordered(n: u64) -> Vec<String> {
    map_async_tokio(n, true)
}

fn map_async_unordered(n: u64) -> Vec<String> {
    map_async_tokio(n, false)
}

#[test]
fn inners_calls_and_limiters_with_extreme_sizes() {
    use Width::U64;
    sweep(
        "inners, calls and limiters × sizes",
        &[
            api(
                "flat_map(just, concurrency, 16)",
                U64,
                &[MAX_CONCURRENCY],
                flat_map_concurrency,
            ),
            api(
                "flat_map(pairs, 4, prefetch)",
                U64,
                &[MAX_CAPACITY],
                flat_map_prefetch,
            ),
            api(
                "concat_map(pairs, prefetch)",
                U64,
                &[MAX_CAPACITY],
                concat_map_prefetch,
            ),
            api("flat_map(..).limit(Fixed::new(n))", U64, &[], fixed_limit),
            api(
                "flat_map(..).limit(Aimd::new(n, n, MAX, ..))",
                U64,
                &[],
                aimd_initial,
            ),
            api(
                "flat_map(..).limit(Aimd::new(1, 1, n, ..))",
                U64,
                &[],
                aimd_max,
            ),
            api(
                "map_async_on(..).limit(Gradient::new(n, n, MAX))",
                U64,
                &[],
                gradient_initial,
            ),
            api(
                "map_async_on(..).limit(Gradient::new(1, 1, n))",
                U64,
                &[],
                gradient_max,
            ),
            api(
                "map_async_on(..).limit(Gradient::probe_every(n))",
                U64,
                &[],
                gradient_probe_every,
            ),
            api(
                "map_async_on(pool, concurrency, ordered)",
                U64,
                &[MAX_CONCURRENCY],
                map_async_on_ordered,
            ),
            api(
                "map_async_on(pool, concurrency, unordered)",
                U64,
                &[MAX_CONCURRENCY],
                map_async_on_unordered,
            ),
            api(
                "map_async(concurrency)",
                U64,
                &[MAX_CONCURRENCY],
                map_async_ordered,
            ),
            api(
                "map_async_unordered(concurrency)",
                U64,
                &[MAX_CONCURRENCY],
                map_async_unordered,
            ),
        ],
    );
}

// ---- the hub: share, connect_at, replay, disconnect_after_items ------------------------

/// Ten counted items as `Arc`s (a hub's items are cloned to each subscriber).
fn shared_ten(live: &Live) -> impl Publisher<Item = Arc<Tracked>> + Send + 'static {
    counted(live, 0..10).map(Arc::new)
}

fn arc_values(items: Vec<Arc<Tracked>>) -> Vec<u64> {
    items.into_iter().map(|item| item.value).collect()
}

/// `share(capacity)` and `Hub::builder(upstream, capacity)` (which documents the same
/// panic): `capacity` in `1..=2^30`. The shared publisher's subscriber gets every
/// item in order, and so do both subscribers of a hub built to connect at two.
fn share(n: u64) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    let shared = built!(
        window_refusal("share capacity", n),
        shared_ten(&live).share(us(n))
    );
    let got = shared.collect().wait_timeout(PATIENCE);
    let got = got.map(|r| r.map(arc_values));
    expect(
        &mut failures,
        matches!(&got, Some(Ok(v)) if *v == zero_to(10)),
        || format!("share's subscriber got {got:?}; documented Ok(0..10)"),
    );
    let hub = built!(
        window_refusal("share capacity", n),
        Hub::builder(shared_ten(&live), us(n)).connect_at(2)
    )
    .build();
    let (mut first, mut second) = (hub.clone().collect(), hub.collect());
    for (who, handle) in [("first", &mut first), ("second", &mut second)] {
        let got = handle.wait_timeout(PATIENCE).map(|r| r.map(arc_values));
        expect(
            &mut failures,
            matches!(&got, Some(Ok(v)) if *v == zero_to(10)),
            || format!("the {who} subscriber got {got:?}; documented Ok(0..10)"),
        );
    }
    expect_released(&mut failures, &live);
    failures
}

/// `HubBuilder::connect_at(k)`: "hub: connect_at(k) needs k >= 1". At 1 the first
/// subscriber connects the hub and gets every item; with more than one needed, one
/// subscriber waits without upstream ever being asked, and its cancel leaves nothing.
fn connect_at(n: u64) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    let asked = Arc::new(AtomicBool::new(false));
    let flag = asked.clone();
    let source = shared_ten(&live).inspect_request(move |_| flag.store(true, Ordering::SeqCst));
    let refusal = unless(n >= 1, || "hub: connect_at(k) needs k >= 1".to_owned());
    let hub = built!(refusal, Hub::builder(source, 16).connect_at(us(n))).build();
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    hub.map(|item| item.value).subscribe(subscriber);
    probe.request(100);
    if n == 1 {
        let ended = probe.await_completion(PATIENCE);
        expect(
            &mut failures,
            ended.is_ok() && probe.items() == zero_to(10),
            || format!("got {:?} ({ended:?}); documented 0..10", probe.items()),
        );
    } else {
        let quiet = probe.expect_no_signals(Duration::from_millis(20));
        expect(
            &mut failures,
            quiet.is_ok() && !asked.load(Ordering::SeqCst),
            || {
                format!(
                    "one subscriber of {n} needed: {quiet:?}, upstream asked: {}",
                    asked.load(Ordering::SeqCst)
                )
            },
        );
        probe.cancel();
    }
    drop(probe);
    expect_released(&mut failures, &live);
    failures
}

/// `HubBuilder::replay(r)` on a ring of 16 (of `r` when `r` is above 16 and within
/// 2^30): "hub: replay(r) needs r <= capacity (got r = …, capacity 16)". A subscriber
/// takes the ten items; one that joins after the end gets the last `min(r, 10)` of
/// them, then the completion.
fn replay(n: u64) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    let capacity = if (16..=MAX_CAPACITY).contains(&n) {
        n
    } else {
        16
    };
    let refusal = unless(n <= capacity, || {
        format!("hub: replay(r) needs r <= capacity (got r = {n}, capacity {capacity})")
    });
    let hub = built!(
        refusal,
        Hub::builder(shared_ten(&live), us(capacity)).replay(us(n))
    )
    .build();
    let first = hub.clone().collect().wait_timeout(PATIENCE);
    let first = first.map(|r| r.map(arc_values));
    expect(
        &mut failures,
        matches!(&first, Some(Ok(v)) if *v == zero_to(10)),
        || format!("the first subscriber got {first:?}"),
    );
    let late = hub.clone().collect().wait_timeout(PATIENCE);
    let late = late.map(|r| r.map(arc_values));
    let documented: Vec<u64> = (10 - n.min(10)..10).collect();
    expect(
        &mut failures,
        matches!(&late, Some(Ok(v)) if *v == documented),
        || format!("a late subscriber got {late:?}; documented Ok({documented:?})"),
    );
    drop(hub);
    expect_released(&mut failures, &live);
    failures
}

/// `Policy::disconnect_after_items(max_lag)`: "hub: a Disconnect lag limit must be at
/// least 1 item". Beside a subscriber that takes the ten items (the hub connects at
/// two), one that asks for nothing: a lag limit below ten cuts it off with `Lagged`;
/// a larger one never does, and it then reads the ten items and the completion.
fn disconnect_after_items(n: u64) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    let refusal = unless(n >= 1, || {
        "hub: a Disconnect lag limit must be at least 1 item".to_owned()
    });
    let policy = built!(refusal, Policy::disconnect_after_items(n));
    let hub = Hub::builder(shared_ten(&live), 1_024).connect_at(2).build();
    let lazy = TestSubscriber::<Arc<Tracked>>::new();
    let lazy_probe = lazy.probe();
    hub.join(policy).subscribe(lazy);
    let got = hub.clone().collect().wait_timeout(PATIENCE);
    let got = got.map(|r| r.map(arc_values));
    expect(
        &mut failures,
        matches!(&got, Some(Ok(v)) if *v == zero_to(10)),
        || format!("the Backpressure subscriber got {got:?}"),
    );
    if n < 10 {
        let error = lazy_probe.await_error(PATIENCE);
        expect(
            &mut failures,
            matches!(&error, Ok(e) if e.kind() == ErrorKind::Lagged),
            || format!("the subscriber past its limit of {n} ended with {error:?}"),
        );
    } else {
        lazy_probe.request(u64::MAX);
        let ended = lazy_probe.await_completion(PATIENCE);
        expect(
            &mut failures,
            ended.is_ok() && lazy_probe.received_count() == 10,
            || {
                format!(
                    "asking for everything: {} items, {ended:?}",
                    lazy_probe.received_count()
                )
            },
        );
    }
    drop((hub, lazy_probe));
    expect_released(&mut failures, &live);
    failures
}

#[test]
fn hub_settings_with_extreme_sizes() {
    use Width::U64;
    sweep(
        "hub settings × sizes",
        &[
            api(
                "share(capacity) / Hub::builder",
                U64,
                &[MAX_CAPACITY],
                share,
            ),
            api("HubBuilder::connect_at", U64, &[], connect_at),
            api("HubBuilder::replay", U64, &[MAX_CAPACITY], replay),
            api(
                "Policy::disconnect_after_items",
                U64,
                &[],
                disconnect_after_items,
            ),
        ],
    );
}

// ---- sinks and bridges: fold_with, for_each_with, collect_with, blocking_iter, ----
// ---- into_stream, for_each_async_with, SubscribeAsync::window ---------------------------

/// A sink's refusal of a zero prefetch (any other is a window, `u64::MAX` unbounded).
fn sink_refusal(sink: &str, n: u64) -> Option<String> {
    unless(n >= 1, || {
        format!("{sink} prefetch must be at least 1 (got 0)")
    })
}

/// `fold_with(prefetch, ..)`: the sum of the values, never more than `prefetch`
/// requested at once.
fn fold_with(n: u64) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    let requests = Requests::default();
    let source = ten(&live).inspect_request(requests.recorder());
    let mut handle = built!(
        sink_refusal("fold_with", n),
        source.fold_with(n, 0u64, |sum, item| sum + item.value)
    );
    let got = handle.wait_timeout(PATIENCE);
    expect(&mut failures, matches!(got, Some(Ok(45))), || {
        format!("folded {got:?}; documented Ok(45)")
    });
    requests.expect_within(&mut failures, n);
    expect_released(&mut failures, &live);
    failures
}

/// `for_each_with(prefetch, f)`: every item in order.
fn for_each_with(n: u64) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let requests = Requests::default();
    let source = ten(&live).inspect_request(requests.recorder());
    let mut handle = built!(
        sink_refusal("for_each_with", n),
        source.for_each_with(n, move |item| log.lock().unwrap().push(item.value))
    );
    let got = handle.wait_timeout(PATIENCE);
    let seen = seen.lock().unwrap().clone();
    expect(
        &mut failures,
        matches!(got, Some(Ok(()))) && seen == zero_to(10),
        || format!("ended {got:?} having seen {seen:?}; documented Ok after 0..10"),
    );
    requests.expect_within(&mut failures, n);
    expect_released(&mut failures, &live);
    failures
}

/// `collect_with(prefetch)`: every item in order.
fn collect_with(n: u64) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    let requests = Requests::default();
    let source = ten(&live).inspect_request(requests.recorder());
    let mut handle = built!(sink_refusal("collect_with", n), source.collect_with(n));
    expect_items(&mut failures, handle.wait_timeout(PATIENCE), &zero_to(10));
    requests.expect_within(&mut failures, n);
    expect_released(&mut failures, &live);
    failures
}

/// `blocking_iter(prefetch)`: `prefetch` in `1..=2^30`; every item in order.
fn blocking_iter(n: u64) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    let requests = Requests::default();
    let source = ten(&live).inspect_request(requests.recorder());
    let iter = built!(
        window_refusal("blocking_iter prefetch", n),
        source.blocking_iter(n)
    );
    let got: Result<Vec<Tracked>, weir::Error> = iter.collect();
    expect_items(&mut failures, Some(got), &zero_to(10));
    requests.expect_within(&mut failures, n);
    expect_released(&mut failures, &live);
    failures
}

/// `into_stream(prefetch)`: `prefetch` in `1..=2^30`; every item in order.
fn into_stream(n: u64) -> Vec<String> {
    use futures::StreamExt as _;

    let mut failures = Vec::new();
    let live = Live::new();
    let requests = Requests::default();
    let source = ten(&live).inspect_request(requests.recorder());
    let stream = built!(
        window_refusal("into_stream prefetch", n),
        source.into_stream(n)
    );
    let got: Vec<Result<Tracked, weir::Error>> = futures::executor::block_on(stream.collect());
    let got: Result<Vec<Tracked>, weir::Error> = got.into_iter().collect();
    expect_items(&mut failures, Some(got), &zero_to(10));
    requests.expect_within(&mut failures, n);
    expect_released(&mut failures, &live);
    failures
}

/// `for_each_async_with(window, f)` inside a tokio runtime: `window` in `1..=2^30`;
/// every item in order.
fn for_each_async_with(n: u64) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    let runtime = crate::harness::run::tokio_runtime("sizes-for-each-async");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let requests = Requests::default();
    let source = ten(&live).inspect_request(requests.recorder());
    let handle = {
        let _inside = runtime.enter();
        built!(
            window_refusal("for_each_async window", n),
            source.for_each_async_with(n, move |item: Tracked| {
                let log = log.clone();
                async move {
                    log.lock().unwrap().push(item.value);
                }
            })
        )
    };
    let got = runtime.block_on(async { tokio::time::timeout(PATIENCE, handle).await });
    let seen = seen.lock().unwrap().clone();
    expect(
        &mut failures,
        matches!(got, Ok(Ok(()))) && seen == zero_to(10),
        || format!("ended {got:?} having seen {seen:?}; documented Ok after 0..10"),
    );
    requests.expect_within(&mut failures, n);
    drop(runtime);
    expect_released(&mut failures, &live);
    failures
}

/// Collects the values an async subscriber receives.
struct Collect(Arc<Mutex<Vec<u64>>>);

#[async_trait::async_trait]
impl weir::bridge::AsyncSubscriber<Tracked> for Collect {
    async fn on_next(&mut self, item: Tracked) -> Result<(), weir::Error> {
        self.0.lock().unwrap().push(item.value);
        Ok(())
    }
}

/// `SubscribeAsync::window(window)`: `window` in `1..=2^30`; every item in order.
fn subscribe_async_window(n: u64) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    let runtime = crate::harness::run::tokio_runtime("sizes-subscribe-async");
    let options = built!(
        window_refusal("subscribe_async window", n),
        weir::bridge::SubscribeAsync::new().window(n)
    );
    let seen = Arc::new(Mutex::new(Vec::new()));
    let requests = Requests::default();
    let handle = ten(&live)
        .inspect_request(requests.recorder())
        .subscribe_async_with(
            options.runtime(runtime.handle().clone()),
            Collect(seen.clone()),
        );
    let got = runtime.block_on(async { tokio::time::timeout(PATIENCE, handle).await });
    let seen = seen.lock().unwrap().clone();
    expect(
        &mut failures,
        matches!(got, Ok(Ok(()))) && seen == zero_to(10),
        || format!("ended {got:?} having seen {seen:?}; documented Ok after 0..10"),
    );
    requests.expect_within(&mut failures, n);
    drop(runtime);
    expect_released(&mut failures, &live);
    failures
}

#[test]
fn sinks_and_bridges_with_extreme_sizes() {
    use Width::U64;
    sweep(
        "sinks and bridges × sizes",
        &[
            api("fold_with", U64, &[], fold_with),
            api("for_each_with", U64, &[], for_each_with),
            api("collect_with", U64, &[], collect_with),
            api("blocking_iter", U64, &[MAX_CAPACITY], blocking_iter),
            api("into_stream", U64, &[MAX_CAPACITY], into_stream),
            api(
                "for_each_async_with",
                U64,
                &[MAX_CAPACITY],
                for_each_async_with,
            ),
            api(
                "SubscribeAsync::window",
                U64,
                &[MAX_CAPACITY],
                subscribe_async_window,
            ),
        ],
    );
}

// ---- channels: capacity, Capacity::items, water marks ----------------------------------

/// Ten counted items sent with `send_blocking` from a thread of their own into
/// `tx` while the consumer reads `rx`: every item in order.
fn through_channel(
    failures: &mut Vec<String>,
    live: &Live,
    tx: weir::source::channel::Sender<Tracked>,
    rx: weir::source::channel::Channel<Tracked>,
) {
    let made = live.clone();
    let producer = std::thread::spawn(move || {
        for i in 0..10 {
            if let Err(e) = tx.send_blocking(Tracked::new(i, &made)) {
                return Err(format!("send_blocking({i}) refused: {e:?}"));
            }
        }
        Ok(())
    });
    expect_items(failures, rx.collect().wait_timeout(PATIENCE), &zero_to(10));
    match producer.join() {
        Ok(Ok(())) => {}
        Ok(Err(why)) => failures.push(why),
        Err(_) => failures.push("the producer panicked".to_owned()),
    }
}

/// `weir::channel(capacity, Backpressure)` with a `usize` capacity: in `1..=2^30`;
/// `capacity()` reads it, every item arrives in order.
fn channel_usize(n: u64) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    let (tx, rx) = built!(
        window_refusal("channel capacity", n),
        weir::channel::<Tracked>(us(n), ChannelPolicy::Backpressure)
    );
    expect(&mut failures, tx.capacity() == us(n), || {
        format!("capacity() reads {}", tx.capacity())
    });
    through_channel(&mut failures, &live, tx, rx);
    expect_released(&mut failures, &live);
    failures
}

/// `ChannelBuilder::new(capacity, Backpressure)` with a `u32` capacity.
fn channel_u32(n: u64) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    let (tx, rx) = built!(
        window_refusal("channel capacity", n),
        ChannelBuilder::new(u32_of(n), ChannelPolicy::Backpressure).build::<Tracked>()
    );
    through_channel(&mut failures, &live, tx, rx);
    expect_released(&mut failures, &live);
    failures
}

/// `Capacity::items(n)`, given to a channel.
fn capacity_items(n: u64) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    let capacity = built!(window_refusal("Capacity::items", n), Capacity::items(us(n)));
    let (tx, rx) = ChannelBuilder::new(capacity, ChannelPolicy::Backpressure).build();
    through_channel(&mut failures, &live, tx, rx);
    expect_released(&mut failures, &live);
    failures
}

/// Water marks on a channel of 16: refused by `WaterMarks` itself (`refusal`), or at
/// `build` when the high mark is above the capacity; otherwise every item arrives.
fn marked_channel(refusal: Option<String>, marks: impl FnOnce() -> WaterMarks) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    let marks = built!(refusal, marks());
    let high = marks.high();
    let over = unless(high <= 16, || {
        format!("channel water mark high must be in 1..=capacity (got high {high}, capacity 16)")
    });
    let (tx, rx) = built!(
        over,
        ChannelBuilder::new(16, ChannelPolicy::Backpressure)
            .water_marks(marks)
            .build::<Tracked>()
    );
    through_channel(&mut failures, &live, tx, rx);
    expect_released(&mut failures, &live);
    failures
}

/// `WaterMarks::new(high = n, low = 0)`.
fn water_marks_high(n: u64) -> Vec<String> {
    let refusal = unless(n >= 1, || {
        "WaterMarks high must be at least 1 (got 0)".to_owned()
    });
    marked_channel(refusal, || WaterMarks::new(us(n), 0))
}

/// `WaterMarks::new(high = 16, low = n)`.
fn water_marks_low(n: u64) -> Vec<String> {
    let refusal = unless(n < 16, || {
        format!("WaterMarks low must be in 0..high (got low {n}, high 16)")
    });
    marked_channel(refusal, || WaterMarks::new(16, us(n)))
}

/// `WaterMarks::single(mark)`.
fn water_marks_single(n: u64) -> Vec<String> {
    let refusal = unless(n >= 1, || {
        "WaterMarks::single mark must be at least 1 (got 0)".to_owned()
    });
    marked_channel(refusal, || WaterMarks::single(us(n)))
}

#[test]
fn channels_with_extreme_sizes() {
    use Width::{U32, U64};
    sweep(
        "channels × sizes",
        &[
            api(
                "weir::channel(capacity: usize)",
                U64,
                &[MAX_CAPACITY],
                channel_usize,
            ),
            api(
                "ChannelBuilder::new(capacity: u32)",
                U32,
                &[MAX_CAPACITY],
                channel_u32,
            ),
            api("Capacity::items", U64, &[MAX_CAPACITY], capacity_items),
            api("WaterMarks::new(n, 0)", U64, &[], water_marks_high),
            api("WaterMarks::new(16, n)", U64, &[], water_marks_low),
            api("WaterMarks::single", U64, &[], water_marks_single),
        ],
    );
}

// ---- the mux: every builder setting, channel weights, the local lane ----------------------

/// The documented refusal of a mux setting: the parameter `build_local` names.
type Refused = Option<&'static str>;

/// A mux `configure`d from the defaults (`exclusive` 32, `shared` 128, `borrow_cap`
/// 32, `quantum` 16, `announce_at` 16, `shared_return` 1, `max_channels` 4096,
/// `lane` 256), refused naming `refused`, or carrying ten counted items over a
/// channel of weight `weight`: every item in order, the shared pool whole again.
fn through_mux(
    configure: impl FnOnce(MuxBuilder<Tracked>) -> MuxBuilder<Tracked>,
    refused: Refused,
    weight: u64,
) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    let (sending, receiving) = (pool("sizes-mux"), pool("sizes-mux-rx"));
    let built =
        configure(Mux::<Tracked>::builder()).build_local(sending.clone(), receiving.clone());
    let mux = match (built, refused) {
        (Err(MuxError::Config { parameter, .. }), Some(documented)) if parameter == documented => {
            None
        }
        (Err(e), documented) => {
            failures.push(format!(
                "build_local: {e}; documented refusal: {documented:?}"
            ));
            None
        }
        (Ok(_), Some(documented)) => {
            failures.push(format!("built; documented: refused naming {documented:?}"));
            None
        }
        (Ok(mux), None) => Some(mux),
    };
    if let Some(mux) = mux {
        run_mux_channel(&mut failures, &mux, &live, weight);
        let whole = wait_until(PATIENCE, || {
            let stats = mux.stats();
            stats.pool_free == stats.shared
        });
        let stats = mux.stats();
        expect(&mut failures, whole, || {
            format!("{} of {} shared units back", stats.pool_free, stats.shared)
        });
    }
    sending.shutdown();
    receiving.shutdown();
    expect_released(&mut failures, &live);
    failures
}

/// Ten counted items over channel 1 of `mux` with `weight` (refused by `open` unless
/// in `1..=2^30`, naming it).
fn run_mux_channel(failures: &mut Vec<String>, mux: &Mux<Tracked>, live: &Live, weight: u64) {
    match mux.channel(1).weight(weight).open() {
        Ok((sink, source)) => {
            expect(failures, (1..=MAX_CAPACITY).contains(&weight), || {
                format!("weight {weight} accepted; documented: refused")
            });
            ten(live).subscribe(sink);
            expect_items(
                failures,
                source.collect().wait_timeout(PATIENCE),
                &zero_to(10),
            );
        }
        Err(MuxError::Config {
            parameter: "weight",
            ..
        }) if !(1..=MAX_CAPACITY).contains(&weight) => {}
        Err(e) => failures.push(format!("open: {e}")),
    }
}

fn over(n: u64, max: u64) -> bool {
    n == 0 || n > max
}

/// The most slots a mux ring of [`Tracked`] items may have: 2^30 bytes of them.
const MUX_RING_LARGEST: u64 = (1 << 30) / std::mem::size_of::<Tracked>() as u64;

/// Whether a mux ring of `slots` [`Tracked`] items takes more than the 2^30 bytes a
/// ring allocated whole may take.
fn mux_ring_over(slots: u64) -> bool {
    slots.saturating_mul(std::mem::size_of::<Tracked>() as u64) > 1 << 30
}

/// `exclusive(E)` (with a staging of 16, so that no default is derived from it):
/// over 2^30, or with the default `C` of 32 an `E + C` over 2^30 slots or 2^30
/// bytes (each channel's receiving ring), is refused naming `exclusive`; 0 is
/// allowed with the shared pool.
fn mux_exclusive(n: u64) -> Vec<String> {
    let slots = n.saturating_add(32);
    let refused = (slots > MAX_CAPACITY || mux_ring_over(slots)).then_some("exclusive");
    through_mux(|b| b.exclusive(n).staging(16), refused, 1)
}

/// `shared(S)`: over 2^30 is refused (0: no pool, the default `C` is 0 too).
fn mux_shared(n: u64) -> Vec<String> {
    let refused = (n > MAX_CAPACITY).then_some("shared");
    through_mux(|b| b.shared(n), refused, 1)
}

/// `borrow_cap(C)`: above the shared pool of 128 is refused.
fn mux_borrow_cap(n: u64) -> Vec<String> {
    let refused = (n > 128).then_some("borrow_cap");
    through_mux(|b| b.borrow_cap(n), refused, 1)
}

/// `borrow_cap(C)` with a shared pool of 2^30 and a staging of 16: `E + C` over 2^30
/// (each channel's receiving ring) is refused, naming `exclusive`, and `C` above
/// the pool naming `borrow_cap`.
fn mux_borrow_cap_of_a_large_pool(n: u64) -> Vec<String> {
    let refused = if n > MAX_CAPACITY {
        Some("borrow_cap")
    } else {
        (n + 32 > MAX_CAPACITY || mux_ring_over(n + 32)).then_some("exclusive")
    };
    through_mux(
        |b| b.shared(MAX_CAPACITY).borrow_cap(n).staging(16),
        refused,
        1,
    )
}

/// `quantum(items)`: in `1..=2^30`; above 2^29 the default staging `2 × quantum` is
/// over 2^30 and refused, naming `staging`.
fn mux_quantum(n: u64) -> Vec<String> {
    let refused = if over(n, MAX_CAPACITY) {
        Some("quantum")
    } else {
        (2 * n > MAX_CAPACITY || mux_ring_over(2 * n)).then_some("staging")
    };
    through_mux(|b| b.quantum(n), refused, 1)
}

/// `announce_at(items)`: in `1..=E` (32).
fn mux_announce_at(n: u64) -> Vec<String> {
    through_mux(
        |b| b.announce_at(n),
        over(n, 32).then_some("announce_at"),
        1,
    )
}

/// `shared_return(batch)`: 0 is refused, and so is any batch that could strand the
/// pool (`max_channels × (batch − 1) ≥ S`: every batch above 1 with the defaults).
fn mux_shared_return(n: u64) -> Vec<String> {
    through_mux(
        |b| b.shared_return(n),
        (n != 1).then_some("shared_return"),
        1,
    )
}

/// `max_channels(n)`: 0 is refused; any other count opens the one channel.
fn mux_max_channels(n: u64) -> Vec<String> {
    through_mux(
        |b| b.max_channels(us(n)),
        (n == 0).then_some("max_channels"),
        1,
    )
}

/// `staging(items)`: in `1..=2^30` and at most 2^30 bytes (a ring of that many
/// slots per sending channel, allocated when it opens).
fn mux_staging(n: u64) -> Vec<String> {
    through_mux(
        |b| b.staging(n),
        (over(n, MAX_CAPACITY) || mux_ring_over(n)).then_some("staging"),
        1,
    )
}

/// `lane(frames)`: in `1..=2^16` (the lane's ring is allocated at build).
fn mux_lane(n: u64) -> Vec<String> {
    through_mux(|b| b.lane(n), over(n, MAX_CONCURRENCY).then_some("lane"), 1)
}

/// `ChannelOptions::weight(n)`: `open` refuses 0 and above 2^30, naming `weight`.
fn mux_weight(n: u64) -> Vec<String> {
    through_mux(|b| b, None, n)
}

/// `Local::new(scheduler, lane)`: "mux lane must be in 1..=2^16 (got …)"; a mux over
/// it carries every item.
fn mux_local_lane(n: u64) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    let (sending, receiving) = (pool("sizes-local"), pool("sizes-local-rx"));
    let refusal = unless(!over(n, MAX_CONCURRENCY), || {
        format!("mux lane must be in 1..=2^16 (got {n})")
    });
    let transport = built!(refusal, Local::new(receiving.clone(), n));
    match Mux::<Tracked>::builder().build(sending.clone(), transport) {
        Ok(mux) => run_mux_channel(&mut failures, &mux, &live, 1),
        Err(e) => failures.push(format!("build: {e}")),
    }
    sending.shutdown();
    receiving.shutdown();
    expect_released(&mut failures, &live);
    failures
}

#[test]
fn mux_settings_with_extreme_sizes() {
    use Width::U64;
    sweep(
        "mux settings × sizes",
        &[
            // Each channel's receiving ring of E + C slots is allocated when it opens:
            // the largest accepted sizes are not run.
            api("MuxBuilder::exclusive", U64, &[MAX_CAPACITY], mux_exclusive),
            api("MuxBuilder::shared", U64, &[], mux_shared),
            api("MuxBuilder::borrow_cap", U64, &[], mux_borrow_cap),
            api(
                "MuxBuilder::shared(2^30).borrow_cap",
                U64,
                &[MAX_CAPACITY],
                mux_borrow_cap_of_a_large_pool,
            ),
            api("MuxBuilder::quantum", U64, &[MAX_CAPACITY], mux_quantum),
            api("MuxBuilder::announce_at", U64, &[], mux_announce_at),
            api("MuxBuilder::shared_return", U64, &[], mux_shared_return),
            api("MuxBuilder::max_channels", U64, &[], mux_max_channels),
            api(
                "MuxBuilder::staging",
                U64,
                &[MAX_CAPACITY, MUX_RING_LARGEST, MUX_RING_LARGEST + 1],
                mux_staging,
            ),
            api(
                "MuxBuilder::lane",
                U64,
                &[MAX_CONCURRENCY, MAX_CAPACITY],
                mux_lane,
            ),
            api("ChannelOptions::weight", U64, &[MAX_CAPACITY], mux_weight),
            api(
                "Local::new(scheduler, lane)",
                U64,
                &[MAX_CONCURRENCY, MAX_CAPACITY],
                mux_local_lane,
            ),
        ],
    );
}

// ---- runtime and overload: thread pools, retries, breakers, backoff, Replenish -----------

/// `ThreadPool::new(threads)` and `ThreadPool::builder().threads(threads)`: 0 and
/// more than 1,024 are refused with the count; one thread runs a pipeline.
fn thread_pool_threads(n: u64) -> Vec<String> {
    let mut failures = Vec::new();
    let live = Live::new();
    let refusal = || {
        if n == 0 {
            Some("ThreadPool threads must be at least 1 (got 0)".to_owned())
        } else {
            unless(n <= 1_024, || {
                format!("ThreadPool threads must be at most 1024 (got {n})")
            })
        }
    };
    let by_builder = construct(refusal(), || {
        ThreadPool::builder().name("sizes-threads").threads(us(n))
    });
    if let Err(failure) = by_builder {
        failures.push(format!("builder().threads: {failure}"));
    }
    let sched = built!(refusal(), ThreadPool::new(us(n)));
    expect(&mut failures, n == 1, || {
        format!("a pool of {n} threads was started")
    });
    expect_items(
        &mut failures,
        ten(&live)
            .publish_on(sched.clone(), 4)
            .collect()
            .wait_timeout(PATIENCE),
        &zero_to(10),
    );
    sched.shutdown();
    expect_released(&mut failures, &live);
    failures
}

type Call = Result<u64, RetryError<String>>;

/// Each item's call fails its first three attempts, then returns the item.
fn fails_three_times(
) -> impl Fn(u64) -> std::future::Ready<Result<u64, String>> + Send + Sync + 'static {
    let attempts = Arc::new(Mutex::new(HashMap::<u64, u32>::new()));
    move |item| {
        let mut attempts = attempts.lock().unwrap();
        let made = attempts.entry(item).or_insert(0);
        *made += 1;
        std::future::ready(if *made <= 3 {
            Err("down".to_owned())
        } else {
            Ok(item)
        })
    }
}

/// `policy` wrapping `op`, applied to items `0..n` one after another on `sched`.
fn retried<C, F>(policy: &RetryPolicy<String>, sched: C, op: F, n: u64) -> Result<Vec<Call>, String>
where
    C: weir::runtime::Scheduler + Clone,
    F: Fn(u64) -> std::future::Ready<Result<u64, String>> + Send + Sync + 'static,
{
    let call = policy.wrap(sched.clone(), op);
    let mut handle = weir::range(0..n)
        .map_async_on(sched, 1, true, call)
        .collect();
    match handle.wait_timeout(PATIENCE) {
        Some(Ok(results)) => Ok(results),
        Some(Err(e)) => Err(format!("the stage failed: {e}")),
        None => {
            handle.cancel();
            Err(format!("the calls did not end within {PATIENCE:?}"))
        }
    }
}

/// `RetryPolicy::new(max_attempts, 1 ns backoff)`: "RetryPolicy max_attempts must be
/// at least 1". Calls that succeed at their fourth attempt: exhausted after
/// `max_attempts` when that is fewer, their item otherwise (no overflow counting
/// toward `u32::MAX`).
fn retry_max_attempts(n: u64) -> Vec<String> {
    let mut failures = Vec::new();
    let max_attempts = u32_of(n);
    let backoff = Backoff::exponential(Duration::from_nanos(1), Duration::from_nanos(1));
    let refusal = unless(n >= 1, || {
        "RetryPolicy max_attempts must be at least 1".to_owned()
    });
    let policy = built!(refusal, RetryPolicy::new(max_attempts, backoff));
    let sched = pool("sizes-retry");
    let documented: Vec<Call> = (0..3)
        .map(|item| {
            if max_attempts >= 4 {
                Ok(item)
            } else {
                Err(RetryError::Exhausted {
                    attempts: max_attempts,
                    last: "down".to_owned(),
                })
            }
        })
        .collect();
    match retried(&policy, sched.clone(), fails_three_times(), 3) {
        Ok(results) => expect(&mut failures, results == documented, || {
            format!("results {results:?}; documented {documented:?}")
        }),
        Err(why) => failures.push(why),
    }
    sched.shutdown();
    failures
}

/// Always fails.
fn always_fails() -> impl Fn(u64) -> std::future::Ready<Result<u64, String>> + Send + Sync + 'static
{
    |_| std::future::ready(Err("down".to_owned()))
}

/// `CircuitBreaker::new(0.5, min_calls, 10 s, 1 s, clock)`: "CircuitBreaker
/// min_calls must be at least 1". Ten failing calls, one attempt each: the breaker
/// opens once `min_calls` finished (the later calls are refused `CircuitOpen`), never
/// when `min_calls` is more than ten.
fn breaker_min_calls(n: u64) -> Vec<String> {
    let mut failures = Vec::new();
    let clock = VirtualTime::new();
    let refusal = unless(n >= 1, || {
        "CircuitBreaker min_calls must be at least 1".to_owned()
    });
    let open_for = Duration::from_secs(1);
    let breaker = built!(
        refusal,
        CircuitBreaker::new(
            0.5,
            u32_of(n),
            Duration::from_secs(10),
            open_for,
            clock.clone()
        )
    );
    let backoff = Backoff::exponential(Duration::from_nanos(1), Duration::from_nanos(1));
    let policy = RetryPolicy::new(1, backoff).breaker(breaker);
    let sched = pool("sizes-breaker");
    let documented: Vec<Call> = (0..10u64)
        .map(|i| {
            if i < n {
                Err(RetryError::Exhausted {
                    attempts: 1,
                    last: "down".to_owned(),
                })
            } else {
                Err(RetryError::CircuitOpen {
                    retry_after: open_for,
                })
            }
        })
        .collect();
    match retried(&policy, sched.clone(), always_fails(), 10) {
        Ok(results) => expect(&mut failures, results == documented, || {
            format!("results {results:?}; documented {documented:?}")
        }),
        Err(why) => failures.push(why),
    }
    sched.shutdown();
    failures
}

/// `CircuitBreaker::half_open_probes(probes)`: "CircuitBreaker half_open_probes must
/// be at least 1". One failing call opens a breaker of `min_calls` 1; once its second
/// is up, five calls that succeed all pass (as probes, or closed after the probes
/// succeeded): it is closed after them when `probes` is at most five, still half-open
/// otherwise ("all must succeed to close").
fn breaker_half_open_probes(n: u64) -> Vec<String> {
    let mut failures = Vec::new();
    let clock = VirtualTime::new();
    let breaker = CircuitBreaker::new(
        0.5,
        1,
        Duration::from_secs(10),
        Duration::from_secs(1),
        clock.clone(),
    );
    let refusal = unless(n >= 1, || {
        "CircuitBreaker half_open_probes must be at least 1".to_owned()
    });
    let breaker = built!(refusal, breaker.half_open_probes(u32_of(n)));
    let backoff = Backoff::exponential(Duration::from_nanos(1), Duration::from_nanos(1));
    let policy = RetryPolicy::new(1, backoff).breaker(breaker.clone());
    let sched = pool("sizes-probes");
    let failing = Arc::new(AtomicBool::new(true));
    let fail = failing.clone();
    let calls = Arc::new(AtomicU64::new(0));
    let made = calls.clone();
    let op = move |item: u64| {
        made.fetch_add(1, Ordering::SeqCst);
        std::future::ready(if fail.load(Ordering::SeqCst) {
            Err("down".to_owned())
        } else {
            Ok(item)
        })
    };
    let call = policy.wrap(sched.clone(), op);
    let run = |n: u64| {
        let mut handle = weir::range(0..n)
            .map_async_on(sched.clone(), 1, true, call.clone())
            .collect();
        handle.wait_timeout(PATIENCE)
    };
    let first = run(1);
    expect(
        &mut failures,
        matches!(&first, Some(Ok(r)) if matches!(r[..], [Err(RetryError::Exhausted { .. })]))
            && breaker.state() == BreakerState::Open,
        || format!("the failing call: {first:?}, breaker {:?}", breaker.state()),
    );
    failing.store(false, Ordering::SeqCst);
    clock.advance(Duration::from_secs(1));
    let then = run(5);
    expect(
        &mut failures,
        matches!(&then, Some(Ok(r)) if *r == zero_to(5).into_iter().map(Ok).collect::<Vec<Call>>()),
        || format!("five succeeding calls once half-open: {then:?}; documented all Ok"),
    );
    let state = breaker.state();
    let documented = if n <= 5 {
        BreakerState::Closed
    } else {
        BreakerState::HalfOpen
    };
    expect(&mut failures, state == documented, || {
        format!("the breaker is {state:?} after five successes; documented {documented:?}")
    });
    expect(&mut failures, calls.load(Ordering::SeqCst) == 6, || {
        format!("{} attempts; documented 6", calls.load(Ordering::SeqCst))
    });
    sched.shutdown();
    failures
}

/// `Backoff::ceiling(retry)` and `Backoff::delay(retry, rng)` for a 1 ms base and a
/// 1 s max: the base for retries 0 and 1, the max (never more) for the largest ones,
/// a delay within `[1 ns, ceiling]`; no overflow of `multiplier^(retry − 1)`.
fn backoff_retry(n: u64) -> Vec<String> {
    let mut failures = Vec::new();
    let retry = u32_of(n);
    let (base, max) = (Duration::from_millis(1), Duration::from_secs(1));
    let backoff = Backoff::exponential(base, max);
    let ceiling = built!(None, backoff.ceiling(retry));
    let documented = if retry <= 1 { base } else { max };
    expect(&mut failures, ceiling == documented, || {
        format!("ceiling({retry}) = {ceiling:?}; documented {documented:?}")
    });
    let mut rng = Rng::new(n);
    for _ in 0..100 {
        let delay = backoff.delay(retry, &mut rng);
        if !(Duration::from_nanos(1)..=ceiling).contains(&delay) {
            failures.push(format!(
                "delay({retry}) = {delay:?}; documented in (0, {ceiling:?}]"
            ));
            break;
        }
    }
    failures
}

/// `weir::demand::Replenish::new(prefetch)`: "Replenish prefetch must be at least 1
/// (got 0)"; the window is requested first, `prefetch − prefetch / 4` consumed items
/// trigger a request of what was consumed, and `UNBOUNDED` never replenishes.
fn replenish(n: u64) -> Vec<String> {
    let mut failures = Vec::new();
    let refusal = unless(n >= 1, || {
        "Replenish prefetch must be at least 1 (got 0)".to_owned()
    });
    let mut window = built!(refusal, Replenish::new(n));
    let limit = if n == u64::MAX { u64::MAX } else { n - n / 4 };
    expect(
        &mut failures,
        window.initial() == n && window.limit() == limit,
        || {
            format!(
                "initial {} limit {}; documented {n} and {limit}",
                window.initial(),
                window.limit()
            )
        },
    );
    let below = window.on_consumed(limit - 1);
    let at = window.on_consumed(1);
    let documented = (n != u64::MAX).then_some(limit);
    expect(
        &mut failures,
        (limit == 1 || below.is_none()) && at == documented,
        || format!("consuming {limit}: {below:?} then {at:?}; documented None then {documented:?}"),
    );
    // A count past what fits: the window asks for everything, it does not overflow.
    let _ = window.on_consumed(1);
    let huge = window.on_consumed(u64::MAX);
    let documented = (n != u64::MAX).then_some(u64::MAX);
    expect(&mut failures, huge == documented, || {
        format!("consuming 1 then u64::MAX: {huge:?}; documented {documented:?}")
    });
    failures
}

/// Counters and the drain loop's counter at their ceilings: drop counts stop at
/// `u64::MAX` (a wrap would read as almost nothing dropped), and a `Wip` left more
/// than it was entered panics with its documented message and keeps its count.
#[test]
fn counters_at_their_ceiling() {
    let drops = weir::metrics::Drops::new();
    drops.add(DropReason::Expired, u64::MAX);
    drops.add(DropReason::Expired, 1);
    drops.add(DropReason::Rejected, u64::MAX);
    assert_eq!(drops.count(DropReason::Expired), u64::MAX);
    assert_eq!(drops.total(), u64::MAX);

    let wip = weir::drain::Wip::new();
    let misuse = std::panic::catch_unwind(|| wip.leave(1)).expect_err("leave(1) on an idle loop");
    let message = misuse
        .downcast_ref::<String>()
        .map(String::as_str)
        .unwrap_or_default();
    assert_eq!(
        message,
        "Wip::leave(1) with 0 reasons registered: only the loop's owner leaves, with what it owes"
    );
    assert_eq!(wip.pending(), 0, "the count is left as it was");
    assert!(wip.enter(), "and the loop can still be taken");
    assert_eq!(wip.leave(1), 0);
}

#[test]
fn runtime_and_overload_with_extreme_sizes() {
    use Width::{U32, U64};
    sweep(
        "runtime and overload × sizes",
        &[
            api(
                "ThreadPool::new / builder().threads",
                U64,
                &[],
                thread_pool_threads,
            ),
            api(
                "RetryPolicy::new(max_attempts)",
                U32,
                &[],
                retry_max_attempts,
            ),
            api(
                "CircuitBreaker::new(min_calls)",
                U32,
                &[],
                breaker_min_calls,
            ),
            api(
                "CircuitBreaker::half_open_probes",
                U32,
                &[],
                breaker_half_open_probes,
            ),
            api("Backoff::ceiling / delay(retry)", U32, &[], backoff_retry),
            api("demand::Replenish::new", U64, &[], replenish),
        ],
    );
}

// ---- weir::merge: the number of sources ---------------------------------------------------

/// `weir::merge(sources)` of no source ("completes at once"), one, and a thousand:
/// each item once, each source's in order.
#[test]
fn merge_of_many_or_no_sources() {
    silence_deliberate_panics();
    let mut failures = Vec::new();
    for sources in [0u64, 1, 1_000] {
        let run = on_thread(&format!("merge of {sources} sources"), CASE, move || {
            let mut failures = Vec::new();
            let live = Live::new();
            let all = (0..sources).map(|s| counted(&live, 2 * s..2 * s + 2));
            let got = weir::merge(all.collect::<Vec<_>>())
                .collect()
                .wait_timeout(PATIENCE);
            match got {
                Some(Ok(items)) => {
                    let got = values(items);
                    let mut sorted = got.clone();
                    sorted.sort_unstable();
                    let in_order = (0..sources).all(|s| {
                        let a = got.iter().position(|&v| v == 2 * s);
                        let b = got.iter().position(|&v| v == 2 * s + 1);
                        matches!((a, b), (Some(a), Some(b)) if a < b)
                    });
                    expect(
                        &mut failures,
                        sorted == zero_to(2 * sources) && in_order,
                        || format!("{sources} sources: delivered {got:?}"),
                    );
                }
                other => failures.push(format!(
                    "{sources} sources: ended with {:?}",
                    other.map(|r| r.map(values))
                )),
            }
            expect_released(&mut failures, &live);
            failures
        });
        match run {
            Ok(found) => failures.extend(found),
            Err(why) => failures.push(format!("{sources} sources: {why}")),
        }
    }
    assert_no_failures("weir::merge × number of sources", 3, &failures);
}

// ---- RSocket: the connection's sizes ----------------------------------------------------

/// Serves ten payloads (the values 0..10, 8 bytes each) on every request-stream.
#[cfg(feature = "rsocket")]
struct Ten;

#[cfg(feature = "rsocket")]
impl weir::rsocket::Handler for Ten {
    fn request_stream(
        &self,
        _request: weir::rsocket::Payload,
    ) -> BoxPublisher<weir::rsocket::Payload> {
        weir::range(0..10u64)
            .map(|i| weir::rsocket::Payload::data(bytes::Bytes::copy_from_slice(&i.to_be_bytes())))
            .boxed()
    }
}

/// A `Config` made by `configure` (refused with `refusal`), given to both a loopback
/// server and its client: a request-stream delivers the ten values in order.
#[cfg(feature = "rsocket")]
fn over_rsocket(
    refusal: Option<String>,
    configure: impl FnOnce(weir::rsocket::Config) -> weir::rsocket::Config,
) -> Vec<String> {
    use weir::rsocket::{Config, Payload, Server};

    let mut failures = Vec::new();
    let config = built!(refusal, configure(Config::default()));
    let runtime = crate::harness::run::tokio_runtime("sizes-rsocket");
    let connected = runtime.block_on(async {
        let server = Server::bind_with("127.0.0.1:0", Ten, config.clone()).await?;
        let client = weir::rsocket::connect_with(server.local_addr(), config).await?;
        Ok::<_, std::io::Error>((server, client))
    });
    let (server, client) = match connected {
        Ok(both) => both,
        Err(e) => return vec![format!("loopback connection: {e}")],
    };
    let got = client
        .request_stream(Payload::data("sizes"))
        .map(|payload| {
            payload
                .data
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .map_or(u64::MAX, u64::from_be_bytes)
        })
        .collect()
        .wait_timeout(PATIENCE);
    expect(
        &mut failures,
        matches!(&got, Some(Ok(v)) if *v == zero_to(10)),
        || format!("the stream delivered {got:?}; documented Ok(0..10)"),
    );
    drop(client);
    server.shutdown();
    drop(runtime);
    failures
}

#[cfg(feature = "rsocket")]
fn u31_refusal(setting: &str, n: u64) -> Option<String> {
    unless((1..=(1 << 31) - 1).contains(&n), || {
        format!("rsocket Config::{setting}: {n} is out of range 1..=2^31 - 1")
    })
}

#[cfg(feature = "rsocket")]
fn frame_refusal(setting: &str, n: u64) -> Option<String> {
    unless((64..=(1 << 24) - 1).contains(&n), || {
        format!("rsocket Config::{setting}: {n} is out of range 64..=2^24 - 1")
    })
}

#[cfg(feature = "rsocket")]
fn rsocket_window(n: u64) -> Vec<String> {
    over_rsocket(u31_refusal("window", n), |c| c.window(u32_of(n)))
}

#[cfg(feature = "rsocket")]
fn rsocket_send_window(n: u64) -> Vec<String> {
    over_rsocket(u31_refusal("send_window", n), |c| c.send_window(u32_of(n)))
}

#[cfg(feature = "rsocket")]
fn rsocket_fragment_size(n: u64) -> Vec<String> {
    over_rsocket(frame_refusal("fragment_size", n), |c| {
        c.fragment_size(us(n))
    })
}

#[cfg(feature = "rsocket")]
fn rsocket_max_frame(n: u64) -> Vec<String> {
    over_rsocket(frame_refusal("max_frame", n), |c| c.max_frame(us(n)))
}

#[cfg(feature = "rsocket")]
fn rsocket_max_payload(n: u64) -> Vec<String> {
    let refusal = unless(n >= 1, || {
        "rsocket Config::max_payload must be at least 1 byte (got 0)".to_owned()
    });
    over_rsocket(refusal, |c| c.max_payload(us(n)))
}

#[cfg(feature = "rsocket")]
fn rsocket_max_streams(n: u64) -> Vec<String> {
    let refusal = unless(n >= 1, || {
        "rsocket Config::max_streams must be at least 1 (got 0)".to_owned()
    });
    over_rsocket(refusal, |c| c.max_streams(us(n)))
}

#[cfg(feature = "rsocket")]
fn rsocket_quantum(n: u64) -> Vec<String> {
    let refusal = unless(n >= 1, || {
        "rsocket Config::quantum must be at least 1 byte (got 0)".to_owned()
    });
    over_rsocket(refusal, |c| c.quantum(us(n)))
}

#[cfg(feature = "rsocket")]
#[test]
fn rsocket_config_with_extreme_sizes() {
    use Width::{U32, U64};
    const MAX_U31: u64 = (1 << 31) - 1;
    const MAX_FRAME: u64 = (1 << 24) - 1;
    sweep(
        "rsocket Config × sizes",
        &[
            api("Config::window", U32, &[MAX_U31], rsocket_window),
            api("Config::send_window", U32, &[MAX_U31], rsocket_send_window),
            api(
                "Config::fragment_size",
                U64,
                &[MAX_FRAME],
                rsocket_fragment_size,
            ),
            api("Config::max_frame", U64, &[MAX_FRAME], rsocket_max_frame),
            api("Config::max_payload", U64, &[], rsocket_max_payload),
            api("Config::max_streams", U64, &[], rsocket_max_streams),
            api("Config::quantum", U64, &[], rsocket_quantum),
        ],
    );
}
