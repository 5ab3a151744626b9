//! `throttle` (mirrors `operators/throttle/`): a token bucket. Shaping paces upstream
//! and loses nothing; Enforcing passes demand through and rejects (reports, counts and
//! re-requests) what finds no token. Marble-style, under `VirtualTime`.

use std::sync::Arc;

use proptest::prelude::*;
use weir::demand::UNBOUNDED;
use weir::metrics::{DropHook, Drops};
use weir::operators::{Rate, ThrottleMode};
use weir::prelude::*;
use weir::runtime::VirtualTime;
use weir::tck::{TestProbe, TestSubscriber};
use weir::{DropReason, Error};

use crate::baseline;
use crate::support::counting::{counted, Stats};
use crate::support::timed_events::{run_timed, steps};
use crate::support::valve::valve;
use crate::support::virtual_clock::ms;

/// `counted(range(0..len)).throttle_on(2 per second, burst, mode)`; nothing requested yet.
fn throttled(
    len: u64,
    burst: u64,
    mode: ThrottleMode,
) -> (VirtualTime, TestProbe<u64>, Arc<Stats>, Drops) {
    let vt = VirtualTime::new();
    let (source, stats) = counted(weir::range(0..len));
    let drops = Drops::new();
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source
        .throttle_on(Rate::per_second(2), burst, mode, vt.clone())
        .on_dropped(DropHook::new(drops.clone()))
        .subscribe(subscriber);
    (vt, probe, stats, drops)
}

#[test]
fn smoke() {
    for mode in [ThrottleMode::Shaping, ThrottleMode::Enforcing] {
        baseline::smoke(
            weir::range(0u64..50).throttle_on(Rate::per_second(1), 100, mode, VirtualTime::new()),
            &(0..50).collect::<Vec<_>>(),
        );
    }
}

#[test]
fn shaping_paces_upstream_and_loses_nothing() {
    // burst 2, 2 tokens per second (one per 500 ms)
    // output : (0,1)@0 2@500 3@1000 4@1500 |
    let (vt, probe, stats, drops) = throttled(5, 2, ThrottleMode::Shaping);
    probe.request(10);
    probe.assert_items(&[0, 1]);
    assert_eq!(
        stats.requested(),
        2,
        "upstream asked only for what tokens allow"
    );
    vt.advance_to(ms(499));
    probe.assert_items(&[0, 1]);
    vt.advance_to(ms(500));
    probe.assert_items(&[0, 1, 2]);
    vt.advance_to(ms(1_000));
    probe.assert_items(&[0, 1, 2, 3]);
    vt.advance_to(ms(1_500));
    probe.assert_items(&[0, 1, 2, 3, 4]);
    probe.assert_completed();
    assert_eq!(drops.total(), 0);
    assert!(
        stats.request_log().iter().all(|&n| n <= 2),
        "{:?}",
        stats.request_log()
    );
    probe.assert_no_violations();
}

#[test]
fn shaping_without_demand_when_a_token_arrives_holds_nothing_back() {
    // Tokens accumulate only up to the burst while nobody asks; no timer runs.
    let (vt, probe, stats, _) = throttled(10, 3, ThrottleMode::Shaping);
    probe.request(1);
    probe.assert_items(&[0]);
    vt.advance_to(ms(10_000));
    assert_eq!(vt.pending(), 0, "no timer without demand");
    assert_eq!(stats.requested(), 1);
    probe.request(10);
    probe.assert_items(&[0, 1, 2, 3]); // a full bucket: burst 3
    vt.advance_to(ms(10_500));
    probe.assert_items(&[0, 1, 2, 3, 4]);
    probe.assert_no_violations();
}

#[test]
fn shaping_never_exceeds_burst_plus_rate_even_with_a_late_upstream() {
    // Upstream delivers late: tokens reserved for requested items count against the
    // bucket, so the late delivery plus fresh tokens never exceed the burst.
    let vt = VirtualTime::new();
    let (source, handle) = valve(100);
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source
        .throttle_on(Rate::per_second(2), 3, ThrottleMode::Shaping, vt.clone())
        .subscribe(subscriber);
    probe.request(UNBOUNDED);
    vt.advance_to(ms(60_000)); // 3 requested at 0 and owed ever since
    handle.release(100);
    assert_eq!(probe.received_count(), 3, "burst only, not burst + refill");
    vt.advance_to(ms(60_500));
    assert_eq!(probe.received_count(), 4);
}

#[test]
fn enforcing_rejects_what_finds_no_token_and_requests_it_again() {
    // An eager source and a bucket of 2: 0 and 1 take the tokens; every later item
    // finds none, is rejected and is requested again, until the source runs dry.
    let (vt, probe, stats, drops) = throttled(100, 2, ThrottleMode::Enforcing);
    probe.request(3);
    probe.assert_items(&[0, 1]);
    assert_eq!(drops.count(DropReason::Rejected), 98);
    assert_eq!(stats.delivered(), 100);
    probe.assert_completed();
    assert_eq!(vt.pending(), 0, "enforcing uses no timer");
    probe.assert_no_violations();
}

#[test]
fn enforcing_refills_over_time() {
    let vt = VirtualTime::new();
    let (source, handle) = valve(100);
    let drops = Drops::new();
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source
        .throttle_on(
            Rate::new(1, ms(100)),
            2,
            ThrottleMode::Enforcing,
            vt.clone(),
        )
        .on_dropped(DropHook::new(drops.clone()).inspect(|d| {
            assert_eq!((d.stage(), d.reason()), ("throttle", DropReason::Rejected));
        }))
        .subscribe(subscriber);
    probe.request(UNBOUNDED);
    // source : (0,1,2)@0  3@100  (4,5)@150  6@350
    // output : (0,1)@0    3@100  -          6@350   (2, 4, 5 rejected)
    handle.release(3);
    probe.assert_items(&[0, 1]);
    vt.advance_to(ms(100));
    handle.release(1);
    probe.assert_items(&[0, 1, 3]);
    vt.advance_to(ms(150));
    handle.release(2);
    vt.advance_to(ms(350));
    handle.release(1);
    probe.assert_items(&[0, 1, 3, 6]);
    assert_eq!(drops.count(DropReason::Rejected), 3);
}

#[test]
fn errors_pass_through() {
    for mode in [ThrottleMode::Shaping, ThrottleMode::Enforcing] {
        let vt = VirtualTime::new();
        let failure = Error::msg("boom");
        let subscriber = TestSubscriber::<u32>::new();
        let probe = subscriber.probe();
        weir::just(7u32)
            .concat(weir::error(failure.clone()))
            .throttle_on(Rate::per_second(1), 5, mode, vt.clone())
            .subscribe(subscriber);
        probe.request(5);
        probe.assert_items(&[7]);
        assert!(Error::ptr_eq(&probe.error().unwrap(), &failure));
        probe.assert_no_violations();
    }
}

#[test]
fn cancel_stops_upstream_and_the_timer() {
    let (vt, probe, stats, _) = throttled(100, 1, ThrottleMode::Shaping);
    probe.request(5);
    assert_eq!(vt.pending(), 1, "waiting for a token");
    probe.cancel();
    assert_eq!(stats.cancels(), 1);
    vt.advance(ms(10_000));
    probe.assert_items(&[0]);
    probe.assert_no_terminal();
    assert_eq!(vt.pending(), 0);

    let (_vt, probe, stats, _) = throttled(100, 1, ThrottleMode::Enforcing);
    probe.request(1);
    probe.cancel();
    assert_eq!(stats.cancels(), 1);
}

#[test]
#[should_panic(expected = "throttle rate must add at least 1 token per period (got 0 per 1s)")]
fn zero_rate_panics() {
    let _ = weir::range(0u64..1).throttle_on(
        Rate::per_second(0),
        1,
        ThrottleMode::Shaping,
        VirtualTime::new(),
    );
}

#[test]
#[should_panic(expected = "throttle rate period must be greater than zero (got 5 per 0ns)")]
fn zero_rate_period_panics() {
    let _ = weir::range(0u64..1).throttle_on(
        Rate::new(5, ms(0)),
        1,
        ThrottleMode::Enforcing,
        VirtualTime::new(),
    );
}

#[test]
#[should_panic(expected = "throttle burst must be in 1..=2^30 (got 0)")]
fn zero_burst_panics() {
    let _ = weir::range(0u64..1).throttle_on(
        Rate::per_second(1),
        0,
        ThrottleMode::Shaping,
        VirtualTime::new(),
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Shaping is lossless: the output is the input, in order, under any demand and
    /// timing; and no window sees more than burst + rate × window items.
    #[test]
    fn shaping_is_lossless_under_random_demand_and_time(steps in steps()) {
        let len = 30;
        let run = run_timed(len, &steps, |source, vt| {
            source.throttle_on(Rate::new(1, ms(50)), 3, ThrottleMode::Shaping, vt)
        })?;
        prop_assert_eq!(run.delivered, (0..len).collect::<Vec<_>>());
        prop_assert_eq!(run.drops.total(), 0);
    }

    /// Enforcing: delivered + rejected == produced, in order.
    #[test]
    fn enforcing_books_balance_under_random_demand_and_time(steps in steps()) {
        let len = 30;
        let run = run_timed(len, &steps, |source, vt| {
            source.throttle_on(Rate::new(1, ms(50)), 3, ThrottleMode::Enforcing, vt)
        })?;
        prop_assert_eq!(run.delivered.len() as u64 + run.drops.total(), len);
        prop_assert_eq!(run.drops.count(DropReason::Rejected), run.drops.total());
        let mut all: Vec<u64> = run.delivered.iter().chain(&run.dropped).copied().collect();
        all.sort_unstable();
        prop_assert_eq!(all, (0..len).collect::<Vec<_>>());
        prop_assert!(run.delivered.windows(2).all(|w| w[0] < w[1]));
    }
}

#[test]
fn the_drop_hook_is_forwarded_upstream_through_shaping() {
    let drops = Drops::new();
    let probe = crate::support::probe_of(
        weir::range(0u64..10)
            .on_backpressure_drop()
            .throttle_on(
                Rate::per_second(1),
                5,
                ThrottleMode::Shaping,
                VirtualTime::new(),
            )
            .on_dropped(DropHook::new(drops.clone())),
    );
    // The eager source meets no demand at subscribe time: all ten are dropped, and
    // the lossy stage found the hook through this one.
    assert_eq!(drops.count(DropReason::OverflowNewest), 10);
    probe.request(1);
    probe.assert_completed();
}

/// Large batches through both modes (chunks of 256, one clock reading each): a burst
/// of 1,000 tokens lets exactly 1,000 of 5,000 eager items through at one instant;
/// shaping holds the rest back (asking for nothing more), enforcing rejects and counts
/// them, and each mode refills exactly with virtual time.
#[test]
fn large_batches_spend_exactly_the_burst_then_the_rate() {
    // Shaping: 1,000 at once, then 1,000 per second.
    let vt = VirtualTime::new();
    let (source, stats) = counted(weir::range(0u64..5_000));
    let probe = crate::support::probe_of(source.throttle_on(
        Rate::per_second(1_000),
        1_000,
        ThrottleMode::Shaping,
        vt.clone(),
    ));
    probe.request(UNBOUNDED);
    assert_eq!(probe.items(), (0..1_000).collect::<Vec<_>>());
    assert_eq!(stats.requested(), 1_000, "no token, no request");
    vt.advance_to(ms(1_000));
    assert_eq!(probe.items(), (0..2_000).collect::<Vec<_>>());
    vt.advance_to(ms(3_999));
    assert_eq!(probe.items(), (0..4_999).collect::<Vec<_>>());
    vt.advance_to(ms(4_000));
    probe.assert_completed();
    assert_eq!(probe.items(), (0..5_000).collect::<Vec<_>>());
    probe.assert_no_violations();

    // Enforcing: the same bucket against an eager source of 5,000.
    let vt = VirtualTime::new();
    let drops = Drops::new();
    let probe = crate::support::probe_of(
        weir::range(0u64..5_000)
            .throttle_on(
                Rate::per_second(1_000),
                1_000,
                ThrottleMode::Enforcing,
                vt.clone(),
            )
            .on_dropped(DropHook::new(drops.clone())),
    );
    probe.request(UNBOUNDED);
    probe.assert_completed();
    assert_eq!(probe.items(), (0..1_000).collect::<Vec<_>>());
    assert_eq!(drops.count(DropReason::Rejected), 4_000);
    probe.assert_no_violations();
}

/// Shaping: an upstream that pushes items no token was reserved for (rule 1.1) fails
/// the stage with the rule's error after the items it asked for, instead of queueing
/// them (all ten went out at once, past the bucket).
#[test]
fn shaping_fails_an_upstream_that_over_delivers_with_rule_1_1() {
    use crate::support::unruly::Greedy;
    let subscriber = TestSubscriber::new().request_on_subscribe(u64::MAX);
    let probe = subscriber.probe();
    Greedy(10)
        .throttle_on(
            Rate::per_second(1),
            1,
            ThrottleMode::Shaping,
            VirtualTime::new(),
        )
        .subscribe(subscriber);
    assert_eq!(crate::support::shape(&probe), "SNE");
    probe.assert_items(&[0]);
    assert_eq!(probe.assert_error().rule(), Some("1.1"));
}

/// A scheduler whose clock panics at its `at`th reading.
#[derive(Clone)]
struct ClockPanicsAt {
    inner: VirtualTime,
    readings: Arc<std::sync::atomic::AtomicU64>,
    at: u64,
}

impl weir::runtime::Scheduler for ClockPanicsAt {
    fn schedule(&self, task: weir::runtime::Task) {
        self.inner.schedule(task);
    }
    fn schedule_after(&self, delay: std::time::Duration, task: weir::runtime::Task) {
        self.inner.schedule_after(delay, task);
    }
    fn now(&self) -> std::time::Instant {
        let n = self
            .readings
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            + 1;
        assert!(n != self.at, "deliberate: the clock broke");
        self.inner.now()
    }
}

/// Enforcing reads the user's clock in `on_subscribe`, per item and per batch: a
/// panic there is the stage's `Panicked` error after `on_subscribe` (rule 1.9),
/// upstream is cancelled, and the error names `throttle`. The clock's panic used
/// to unwind into the source's `subscribe` (the subscriber was dropped unsignalled)
/// or through the batch into the sink, which took it for its own.
#[test]
fn enforcing_fails_with_the_clocks_panic_wherever_it_reads_it() {
    for at in 1..=3 {
        for batched in [true, false] {
            let (source, stats) = counted(weir::range(0u64..100));
            let clock = ClockPanicsAt {
                inner: VirtualTime::new(),
                readings: Arc::default(),
                at,
            };
            let throttled =
                source.throttle_on(Rate::per_second(1_000), 10, ThrottleMode::Enforcing, clock);
            let probe = if batched {
                crate::support::probe_of(throttled)
            } else {
                // One item per request: upstream hands them over one at a time.
                crate::support::probe_of(throttled.limit_rate(1, 1))
            };
            probe.request(UNBOUNDED);
            let error = probe.error().unwrap_or_else(|| {
                panic!(
                    "reading {at} (batched {batched}): no error; got {:?}",
                    probe.items()
                )
            });
            assert_eq!(error.kind(), weir::ErrorKind::Panicked, "reading {at}");
            assert_eq!(error.stage(), Some("throttle"), "reading {at}: {error}");
            assert!(probe.is_subscribed(), "on_subscribe came first");
            assert_eq!(stats.cancels(), 1, "upstream cancelled (reading {at})");
        }
    }
}
