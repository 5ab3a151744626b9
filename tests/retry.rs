//! `weir::retry`: the backoff, the retry budget, the circuit breaker and the retrying
//! future, all on `VirtualTime` (no assertion reads the wall clock).

use std::collections::HashMap;
use std::future::{ready, Future, Ready};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use weir::retry::{
    Backoff, BreakerState, BreakerStats, BudgetStats, CircuitBreaker, RetryBudget, RetryError,
    RetryPolicy, RetryStats, Rng, Verdict,
};
use weir::runtime::VirtualTime;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Poll once with a waker that does nothing.
fn poll<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    let waker = futures::task::noop_waker();
    Pin::new(future).poll(&mut Context::from_waker(&waker))
}

/// Poll, jumping the clock to the next timer, until the future is ready.
fn drive<F: Future + Unpin>(vt: &VirtualTime, future: &mut F) -> F::Output {
    loop {
        if let Poll::Ready(output) = poll(future) {
            return output;
        }
        let due = vt.next_due().expect("a pending call waits for a timer");
        vt.advance_to(due);
    }
}

/// When (virtual time) each attempt started.
type Starts = Arc<Mutex<Vec<Duration>>>;

/// A call whose attempt `n` (0-based, over all calls) answers `answer(n, item)`,
/// logging its start time.
fn scripted<E>(
    vt: &VirtualTime,
    answer: impl Fn(u32, u32) -> Result<u32, E> + Send + Sync + 'static,
) -> (
    Starts,
    impl Fn(u32) -> Ready<Result<u32, E>> + Send + Sync + 'static,
) {
    let starts = Starts::default();
    let log = starts.clone();
    let clock = vt.clone();
    let attempts = AtomicU32::new(0);
    let call = move |item: u32| {
        log.lock().unwrap().push(clock.elapsed());
        ready(answer(attempts.fetch_add(1, Ordering::SeqCst), item))
    };
    (starts, call)
}

fn starts(log: &Starts) -> Vec<Duration> {
    log.lock().unwrap().clone()
}

fn no_jitter(base: Duration, max: Duration) -> Backoff {
    Backoff::exponential(base, max).jitter(0.0)
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}

// ---- backoff ------------------------------------------------------------------------

/// Without jitter the ceilings double from `base` and stop at `max`; with jitter
/// `j` every delay is in `[(1 - j) × ceiling, ceiling]`.
#[test]
fn backoff_grows_exponentially_up_to_max_within_the_jitter_band() {
    let backoff = no_jitter(ms(100), secs(3));
    let mut rng = Rng::new(1);
    let delays: Vec<_> = (1..=8).map(|n| backoff.delay(n, &mut rng)).collect();
    assert_eq!(
        delays,
        [100, 200, 400, 800, 1_600, 3_000, 3_000, 3_000].map(ms)
    );
    assert_eq!(
        Backoff::exponential(ms(100), secs(3))
            .multiplier(1.5)
            .ceiling(3),
        ms(225)
    );

    let half = Backoff::exponential(ms(100), secs(3)).jitter(0.5);
    let mut rng = Rng::new(2);
    for retry in 1..=10 {
        let ceiling = half.ceiling(retry);
        for _ in 0..200 {
            let delay = half.delay(retry, &mut rng);
            assert!(
                delay >= ceiling / 2 && delay <= ceiling,
                "retry {retry}: {delay:?}"
            );
        }
    }
    // Full jitter spreads over the whole band: some delays below a tenth of it.
    let full = Backoff::exponential(secs(1), secs(1));
    let mut rng = Rng::new(3);
    let low = (0..1_000)
        .filter(|_| full.delay(1, &mut rng) < ms(100))
        .count();
    assert!((50..=150).contains(&low), "{low} of 1000 below 10%");
}

/// The same seed gives the same delays; retry counts and durations at their
/// limits saturate instead of overflowing.
#[test]
fn backoff_is_deterministic_with_a_seed_and_never_overflows() {
    let backoff = Backoff::exponential(ms(10), secs(60));
    let run = |seed| {
        let mut rng = Rng::new(seed);
        (1..=30)
            .map(|n| backoff.delay(n, &mut rng))
            .collect::<Vec<_>>()
    };
    assert_eq!(run(42), run(42));
    assert_ne!(run(42), run(43));

    let unbounded = Backoff::exponential(ms(1), Duration::MAX);
    assert_eq!(unbounded.ceiling(1_000), Duration::MAX);
    assert_eq!(unbounded.ceiling(u32::MAX), Duration::MAX);
    let mut rng = Rng::new(5);
    assert!(unbounded.delay(1_000, &mut rng) <= Duration::MAX);
    let top = Backoff::exponential(Duration::MAX, Duration::MAX).multiplier(1e300);
    assert_eq!(top.jitter(0.0).delay(1_000, &mut rng), Duration::MAX);
    assert!(top.delay(u32::MAX, &mut rng) <= Duration::MAX);
}

// ---- the retry budget ---------------------------------------------------------------

/// A ratio of 0.1 over 1,000 first attempts grants exactly 100 retries; the other
/// 900 are refused and counted.
#[test]
fn budget_grants_a_tenth_of_first_attempts_and_counts_refusals() {
    let budget = RetryBudget::new(0.1, secs(10), VirtualTime::new());
    for _ in 0..1_000 {
        budget.first_attempt();
    }
    assert_eq!(budget.available(), 100);
    let granted = (0..1_000).filter(|_| budget.try_retry()).count();
    assert_eq!(granted, 100);
    assert_eq!(budget.available(), 0);
    assert_eq!(
        budget.stats(),
        BudgetStats {
            first_attempts: 1_000,
            retries: 100,
            refused: 900
        }
    );
    // Clones share the budget.
    assert!(!budget.clone().try_retry());
    assert_eq!(budget.stats().refused, 901);
}

/// Attempts older than the window stop counting, in whole buckets of a tenth of
/// it; retries granted leave the window the same way.
#[test]
fn budget_window_slides() {
    let vt = VirtualTime::new();
    let budget = RetryBudget::new(0.1, secs(10), vt.clone());
    for _ in 0..100 {
        budget.first_attempt();
    }
    assert_eq!((0..20).filter(|_| budget.try_retry()).count(), 10);
    vt.advance(secs(5));
    for _ in 0..50 {
        budget.first_attempt();
    }
    // 150 first attempts, 10 retries in the window.
    assert_eq!((0..20).filter(|_| budget.try_retry()).count(), 5);
    vt.advance(ms(4_999));
    assert!(!budget.try_retry(), "t = 9.999 s: all of it still counts");
    vt.advance(ms(1));
    // t = 10 s: the first bucket (100 first attempts, 10 retries) left.
    assert_eq!(budget.available(), 0, "50 first attempts, 5 retries");
    for _ in 0..10 {
        budget.first_attempt();
    }
    assert!(budget.try_retry());
    vt.advance(secs(10));
    assert_eq!(budget.available(), 0, "t = 20 s: the window is empty");
    assert!(!budget.try_retry());
    assert_eq!(
        budget.stats(),
        BudgetStats {
            first_attempts: 160,
            retries: 16,
            refused: 27
        }
    );
}

// ---- the circuit breaker ------------------------------------------------------------

/// The ratio is checked only once the window holds `min_calls` calls, and a ratio
/// equal to the threshold opens; failures older than the window do not count.
#[test]
fn breaker_opens_at_the_ratio_only_after_min_calls() {
    let vt = VirtualTime::new();
    let breaker = CircuitBreaker::new(0.5, 4, secs(10), secs(5), vt.clone());
    breaker.on_failure();
    breaker.on_failure();
    breaker.on_failure();
    assert_eq!(breaker.state(), BreakerState::Closed, "3 calls < min_calls");
    vt.advance(secs(10));
    breaker.on_success();
    breaker.on_success();
    breaker.on_success();
    breaker.on_failure();
    assert_eq!(
        breaker.state(),
        BreakerState::Closed,
        "old failures left: 1 of 4"
    );
    breaker.on_failure();
    assert_eq!(
        breaker.state(),
        BreakerState::Closed,
        "2 of 5 failed is below a half"
    );
    breaker.on_failure();
    assert_eq!(breaker.state(), BreakerState::Open, "3 of 6: the threshold");
    assert_eq!(breaker.stats().opened, 1);
}

/// Closed → open → (rejections with the time left) → half-open after `open_for` →
/// closed when every probe succeeds (with an empty window) → open → half-open →
/// open again when a probe fails; every transition and rejection is counted.
#[test]
fn breaker_life_cycle_counts_every_transition() {
    let vt = VirtualTime::new();
    let breaker = CircuitBreaker::new(0.5, 4, secs(10), secs(5), vt.clone()).half_open_probes(2);
    for _ in 0..3 {
        breaker.on_failure();
    }
    breaker.on_success();
    assert_eq!(breaker.state(), BreakerState::Open, "3 of 4 failed");
    assert_eq!(breaker.try_acquire().unwrap_err().retry_after(), secs(5));
    vt.advance(secs(2));
    assert_eq!(breaker.try_acquire().unwrap_err().retry_after(), secs(3));
    vt.advance(ms(2_999));
    assert_eq!(breaker.state(), BreakerState::Open);
    vt.advance(ms(1));
    assert_eq!(breaker.state(), BreakerState::HalfOpen);

    // Two probes pass, a third call is refused until they report.
    breaker.try_acquire().unwrap();
    breaker.try_acquire().unwrap();
    assert_eq!(
        breaker.try_acquire().unwrap_err().retry_after(),
        Duration::ZERO
    );
    breaker.on_success();
    assert_eq!(breaker.state(), BreakerState::HalfOpen, "one probe to go");
    breaker.on_success();
    assert_eq!(breaker.state(), BreakerState::Closed);

    // The window was reset: three failures do not reach min_calls.
    for _ in 0..3 {
        breaker.on_failure();
    }
    assert_eq!(breaker.state(), BreakerState::Closed);
    breaker.on_failure();
    assert_eq!(breaker.state(), BreakerState::Open);
    vt.advance(secs(5));
    breaker.try_acquire().unwrap();
    breaker.on_failure();
    assert_eq!(breaker.state(), BreakerState::Open, "a probe failed");
    assert_eq!(breaker.try_acquire().unwrap_err().retry_after(), secs(5));
    assert_eq!(
        breaker.stats(),
        BreakerStats {
            opened: 3,
            half_opened: 2,
            closed: 1,
            rejected: 4
        }
    );
}

// ---- the retrying future ------------------------------------------------------------

/// A call that fails twice then succeeds: three attempts, at 0, 100 ms and
/// 300 ms (backoff 100 ms, 200 ms), and the result.
#[test]
fn a_call_failing_twice_then_succeeding_takes_three_attempts() {
    let vt = VirtualTime::new();
    let policy = RetryPolicy::new(5, no_jitter(ms(100), secs(10)));
    let (log, f) = scripted(&vt, |n, item| {
        if n < 2 {
            Err(format!("fail {n}"))
        } else {
            Ok(item * 2)
        }
    });
    let call = policy.wrap(vt.clone(), f);
    let mut answer = call(21);
    assert_eq!(drive(&vt, &mut answer), Ok(42));
    assert_eq!(starts(&log), [0, 100, 300].map(ms));
    assert_eq!(
        policy.stats(),
        RetryStats {
            calls: 1,
            attempts: 3,
            retries: 2,
            ..RetryStats::default()
        }
    );
}

/// `Verdict::Fail` ends the call at its first error, with no timer armed.
#[test]
fn verdict_fail_stops_at_once() {
    let vt = VirtualTime::new();
    let policy = RetryPolicy::new(5, no_jitter(ms(100), secs(10))).classify(|e: &String| {
        if e == "bad request" {
            Verdict::Fail
        } else {
            Verdict::Retry
        }
    });
    let (log, f) = scripted(&vt, |_, _| Err::<u32, _>("bad request".to_string()));
    let mut answer = policy.wrap(vt.clone(), f)(1);
    assert_eq!(
        poll(&mut answer),
        Poll::Ready(Err(RetryError::Failed("bad request".to_string())))
    );
    assert_eq!(starts(&log).len(), 1);
    assert_eq!(vt.pending(), 0);
    let stats = policy.stats();
    assert_eq!((stats.attempts, stats.failed, stats.retries), (1, 1, 0));
}

/// `RetryAfter(hint)` waits max(hint, backoff): a 2 s hint over a 10 ms backoff
/// delays the second attempt to 2 s; a 1 ms hint under a 100 ms backoff does not
/// shorten it.
#[test]
fn a_retry_after_hint_is_honoured() {
    let vt = VirtualTime::new();
    let policy = RetryPolicy::new(2, no_jitter(ms(10), ms(100)))
        .classify(|hint: &Duration| Verdict::RetryAfter(*hint));
    let (log, f) = scripted(&vt, |n, item| if n == 0 { Err(secs(2)) } else { Ok(item) });
    let mut answer = policy.wrap(vt.clone(), f)(7);
    assert!(poll(&mut answer).is_pending());
    vt.advance(ms(1_999));
    assert!(poll(&mut answer).is_pending());
    assert_eq!(starts(&log).len(), 1, "no attempt before the hint");
    vt.advance(ms(1));
    assert_eq!(poll(&mut answer), Poll::Ready(Ok(7)));
    assert_eq!(starts(&log), [ms(0), secs(2)]);

    let policy = RetryPolicy::new(2, no_jitter(ms(100), ms(100)))
        .classify(|hint: &Duration| Verdict::RetryAfter(*hint));
    let (log, f) = scripted(&vt, |n, item| if n == 0 { Err(ms(1)) } else { Ok(item) });
    let mut answer = policy.wrap(vt.clone(), f)(7);
    assert_eq!(drive(&vt, &mut answer), Ok(7));
    let log = starts(&log);
    assert_eq!(
        log[1] - log[0],
        ms(100),
        "the backoff is longer than the hint"
    );
}

/// A call that always fails ends with `Exhausted` after exactly `max_attempts`
/// attempts, carrying the last error.
#[test]
fn max_attempts_reached_gives_exhausted() {
    let vt = VirtualTime::new();
    let policy = RetryPolicy::new(4, no_jitter(ms(10), secs(1)));
    let (log, f) = scripted(&vt, |n, _| Err::<u32, _>(n));
    let mut answer = policy.wrap(vt.clone(), f)(1);
    assert_eq!(
        drive(&vt, &mut answer),
        Err(RetryError::Exhausted {
            attempts: 4,
            last: 3
        })
    );
    assert_eq!(starts(&log), [0, 10, 30, 70].map(ms));
    let stats = policy.stats();
    assert_eq!((stats.attempts, stats.retries, stats.exhausted), (4, 3, 1));
    assert_eq!(vt.pending(), 0);
}

/// 1,000 calls whose first attempt fails, under a 10% budget: 100 are retried (and
/// succeed), 900 end with `BudgetExhausted`. Attempts stay within 1.1 × calls.
#[test]
fn the_budget_keeps_retries_from_amplifying_an_overload() {
    let vt = VirtualTime::new();
    let budget = RetryBudget::new(0.1, secs(10), vt.clone());
    let policy = RetryPolicy::new(3, no_jitter(ms(10), secs(1))).budget(budget.clone());
    let seen = Mutex::new(std::collections::HashSet::new());
    let call = policy.wrap(vt.clone(), move |item: u32| {
        let first = seen.lock().unwrap().insert(item);
        ready(if first { Err("overloaded") } else { Ok(item) })
    });
    let mut answers: Vec<_> = (0..1_000).map(&call).collect();
    let mut results = vec![None; answers.len()];
    for (answer, result) in answers.iter_mut().zip(&mut results) {
        if let Poll::Ready(r) = poll(answer) {
            *result = Some(r);
        }
    }
    vt.advance(ms(10));
    for (answer, result) in answers.iter_mut().zip(&mut results) {
        if result.is_none() {
            *result = Some(drive(&vt, answer));
        }
    }
    let ok = results.iter().filter(|r| matches!(r, Some(Ok(_)))).count();
    let refused = results
        .iter()
        .filter(|r| matches!(r, Some(Err(RetryError::BudgetExhausted("overloaded")))))
        .count();
    assert_eq!((ok, refused), (100, 900));
    assert_eq!(
        policy.stats(),
        RetryStats {
            calls: 1_000,
            attempts: 1_100,
            retries: 100,
            refused_by_budget: 900,
            ..RetryStats::default()
        }
    );
    assert_eq!(
        budget.stats(),
        BudgetStats {
            first_attempts: 1_000,
            retries: 100,
            refused: 900
        }
    );
}

/// A retry is taken from the budget when the attempt fails, before the backoff; if
/// the breaker then refuses the attempt, the retry was not made and goes back to the
/// budget, so refusals by an open breaker do not use up the retries of other calls.
#[test]
fn a_retry_the_breaker_refuses_is_given_back_to_the_budget() {
    let vt = VirtualTime::new();
    // One retry per window, whatever the traffic.
    let budget = RetryBudget::new(0.0, secs(10), vt.clone()).min_retries_per_sec(0.1);
    // Opens at the first failure.
    let breaker = CircuitBreaker::new(1.0, 1, secs(10), secs(30), vt.clone());
    let policy = RetryPolicy::new(3, no_jitter(ms(100), secs(1)))
        .budget(budget.clone())
        .breaker(breaker.clone());
    let (log, f) = scripted(&vt, |_, _| Err::<u32, _>("down"));
    let mut answer = policy.wrap(vt.clone(), f)(1);
    assert!(poll(&mut answer).is_pending(), "waiting for its retry");
    assert_eq!(breaker.state(), BreakerState::Open);
    assert_eq!(budget.available(), 0, "the retry is taken while it waits");
    assert_eq!(
        drive(&vt, &mut answer),
        Err(RetryError::CircuitOpen {
            retry_after: secs(30) - ms(100)
        })
    );
    assert_eq!(starts(&log).len(), 1, "the retry was not made");
    assert_eq!(budget.available(), 1, "and the budget has it back");
    assert_eq!(
        budget.stats(),
        BudgetStats {
            first_attempts: 1,
            retries: 0,
            refused: 0
        }
    );
}

/// A call dropped while it waits for its retry gives the retry back to the budget.
#[test]
fn a_call_dropped_while_it_waits_gives_its_retry_back() {
    let vt = VirtualTime::new();
    let budget = RetryBudget::new(0.0, secs(10), vt.clone()).min_retries_per_sec(0.1);
    let policy = RetryPolicy::new(3, no_jitter(ms(100), secs(1))).budget(budget.clone());
    let (log, f) = scripted(&vt, |_, _| Err::<u32, _>("down"));
    let call = policy.wrap(vt.clone(), f);
    let mut answer = call(1);
    assert!(poll(&mut answer).is_pending());
    assert_eq!(budget.available(), 0);
    drop(answer);
    assert_eq!(budget.available(), 1);
    assert_eq!(budget.stats().retries, 0);
    // A retry that is made stays counted.
    let mut answer = call(2);
    assert_eq!(
        drive(&vt, &mut answer),
        Err(RetryError::BudgetExhausted("down")),
        "one retry made, the second refused"
    );
    assert_eq!(starts(&log).len(), 3);
    assert_eq!(
        budget.stats(),
        BudgetStats {
            first_attempts: 2,
            retries: 1,
            refused: 1
        }
    );
}

/// Failures reported by the wrapper open the breaker; then a call is refused with
/// `CircuitOpen` and the time left, without calling `f`.
#[test]
fn an_open_breaker_rejects_calls_without_calling_f() {
    let vt = VirtualTime::new();
    let breaker = CircuitBreaker::new(0.5, 4, secs(10), secs(30), vt.clone());
    let policy = RetryPolicy::new(2, no_jitter(ms(100), secs(1))).breaker(breaker.clone());
    let (log, f) = scripted(&vt, |_, _| Err::<u32, _>("down"));
    let call = policy.wrap(vt.clone(), f);
    for item in 0..2 {
        let mut answer = call(item);
        assert!(matches!(
            drive(&vt, &mut answer),
            Err(RetryError::Exhausted { attempts: 2, .. })
        ));
    }
    assert_eq!(
        breaker.state(),
        BreakerState::Open,
        "4 of 4 attempts failed"
    );
    vt.advance(secs(10));
    let mut answer = call(9);
    assert_eq!(
        poll(&mut answer),
        Poll::Ready(Err(RetryError::CircuitOpen {
            retry_after: secs(20)
        }))
    );
    assert_eq!(starts(&log).len(), 4, "f was not called");
    let stats = policy.stats();
    assert_eq!((stats.calls, stats.rejected_by_breaker), (3, 1));
    assert_eq!(breaker.stats().rejected, 1);
}

/// A panic in `f` propagates to the poller; the call is over (polling again
/// panics), and dropping it gives the half-open breaker's probe back.
#[test]
fn a_panicking_f_propagates_and_its_probe_is_given_back_on_drop() {
    let vt = VirtualTime::new();
    let breaker = CircuitBreaker::new(1.0, 1, secs(10), secs(1), vt.clone());
    breaker.on_failure();
    vt.advance(secs(1));
    let policy = RetryPolicy::<String>::new(3, no_jitter(ms(10), secs(1))).breaker(breaker.clone());
    let call = policy.wrap(vt.clone(), |item: u32| -> Ready<Result<u32, String>> {
        panic!("f panicked on {item}")
    });
    let mut answer = call(5);
    let payload = catch_unwind(AssertUnwindSafe(|| poll(&mut answer))).unwrap_err();
    assert_eq!(panic_message(payload), "f panicked on 5");
    assert!(breaker.try_acquire().is_err(), "the probe is still out");
    let payload = catch_unwind(AssertUnwindSafe(|| poll(&mut answer))).unwrap_err();
    assert_eq!(
        panic_message(payload),
        "RetryFuture polled after it finished"
    );
    drop(answer);
    assert!(breaker.try_acquire().is_ok(), "the probe came back");
    assert_eq!(breaker.state(), BreakerState::HalfOpen);
}

/// A call let through while the breaker was closed holds no probe: dropping it once
/// the breaker has half-opened gives nothing back, so the probe limit holds.
#[test]
fn a_call_from_before_the_half_open_gives_back_no_probe() {
    let vt = VirtualTime::new();
    let breaker = CircuitBreaker::new(1.0, 1, secs(10), secs(1), vt.clone());
    let policy = RetryPolicy::<String>::new(1, no_jitter(ms(10), secs(1))).breaker(breaker.clone());
    let call = policy.wrap(vt.clone(), |_item: u32| {
        std::future::pending::<Result<u32, String>>()
    });
    let mut early = call(1);
    assert!(poll(&mut early).is_pending(), "let through while closed");
    breaker.on_failure(); // another call failed: open
    vt.advance(secs(1));
    assert_eq!(breaker.state(), BreakerState::HalfOpen);
    let mut probe = call(2);
    assert!(poll(&mut probe).is_pending(), "the one probe");
    drop(early);
    assert!(
        breaker.try_acquire().is_err(),
        "still one probe out, none given back"
    );
    drop(probe);
    assert!(
        breaker.try_acquire().is_ok(),
        "the probe's own drop gives it back"
    );
}

/// A panic in the classifier propagates to the poller too.
#[test]
fn a_panicking_classifier_propagates() {
    let vt = VirtualTime::new();
    let policy = RetryPolicy::new(3, no_jitter(ms(10), secs(1)))
        .classify(|_: &&str| -> Verdict { panic!("classifier panicked") });
    let (log, f) = scripted(&vt, |_, _| Err::<u32, _>("x"));
    let mut answer = policy.wrap(vt.clone(), f)(1);
    let payload = catch_unwind(AssertUnwindSafe(|| poll(&mut answer))).unwrap_err();
    assert_eq!(panic_message(payload), "classifier panicked");
    assert_eq!(starts(&log).len(), 1);
    assert_eq!(vt.pending(), 0);
}

/// Dropping a call while it waits for its next attempt cancels its timer: the
/// scheduler holds nothing, and no further attempt is made.
#[test]
fn dropping_a_call_mid_sleep_cancels_its_timer() {
    let vt = VirtualTime::new();
    let policy = RetryPolicy::new(5, no_jitter(ms(100), secs(1)));
    let (log, f) = scripted(&vt, |_, _| Err::<u32, _>("down"));
    let mut answer = policy.wrap(vt.clone(), f)(1);
    assert!(poll(&mut answer).is_pending());
    assert_eq!(vt.pending(), 1, "the backoff timer");
    drop(answer);
    assert_eq!(vt.pending(), 0);
    vt.advance(secs(10));
    assert_eq!(starts(&log).len(), 1);
}

/// The timer wakes the waker the call was last polled with, when it falls due.
#[test]
fn the_timer_wakes_the_poller() {
    struct Flag(AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let vt = VirtualTime::new();
    let policy = RetryPolicy::new(2, no_jitter(ms(100), secs(1)));
    let (_, f) = scripted(&vt, |n, item| if n == 0 { Err(()) } else { Ok(item) });
    let mut answer = policy.wrap(vt.clone(), f)(3);
    let flag = Arc::new(Flag(AtomicBool::new(false)));
    let waker = Waker::from(flag.clone());
    let mut cx = Context::from_waker(&waker);
    assert!(Pin::new(&mut answer).poll(&mut cx).is_pending());
    vt.advance(ms(99));
    assert!(!flag.0.load(Ordering::SeqCst));
    vt.advance(ms(1));
    assert!(flag.0.load(Ordering::SeqCst));
    assert_eq!(Pin::new(&mut answer).poll(&mut cx), Poll::Ready(Ok(3)));
}

/// With a seed, the retry times are reproducible: those of `Backoff::delay` with
/// `Rng::new(seed)`.
#[test]
fn seeded_policies_retry_at_the_same_times() {
    let backoff = Backoff::exponential(ms(100), secs(10));
    let run = |seed| {
        let vt = VirtualTime::new();
        let policy = RetryPolicy::new(6, backoff).seed(seed);
        let (log, f) = scripted(&vt, |_, _| Err::<u32, _>(()));
        let mut answer = policy.wrap(vt.clone(), f)(0);
        assert!(drive(&vt, &mut answer).is_err());
        starts(&log)
    };
    let mut rng = Rng::new(7);
    let mut at = Duration::ZERO;
    let mut expected = vec![at];
    for retry in 1..=5 {
        at += backoff.delay(retry, &mut rng);
        expected.push(at);
    }
    assert_eq!(run(7), expected);
    assert_eq!(run(7), run(7));
    assert_ne!(run(7), run(8));
}

/// The wrapped closure in a `map_async_on` stage on `VirtualTime`: item `x` fails
/// `x % 4` times; with 3 attempts, items 3 and 7 end `Exhausted`, the others
/// succeed, in input order. A panic in `f` fails the stage with `Panicked`.
#[cfg(feature = "futures")]
#[test]
fn items_are_retried_through_a_map_async_stage() {
    use weir::prelude::*;
    use weir::ErrorKind;

    let vt = VirtualTime::new();
    let policy = RetryPolicy::new(3, no_jitter(ms(100), secs(1)));
    let tries = Mutex::new(HashMap::<u32, u32>::new());
    let call = policy.wrap(vt.clone(), move |x: u32| {
        let mut tries = tries.lock().unwrap();
        let n = tries.entry(x).or_insert(0);
        *n += 1;
        ready(if *n <= x % 4 {
            Err(format!("{x}"))
        } else {
            Ok(x * 10)
        })
    });
    let results = weir::range(0u32..8)
        .map_async_on(vt.clone(), 4, true, call)
        .collect();
    vt.advance(secs(5));
    assert!(results.is_terminated());
    let exhausted = |x: u32| {
        Err(RetryError::Exhausted {
            attempts: 3,
            last: format!("{x}"),
        })
    };
    assert_eq!(
        results.wait().unwrap(),
        [
            Ok(0),
            Ok(10),
            Ok(20),
            exhausted(3),
            Ok(40),
            Ok(50),
            Ok(60),
            exhausted(7)
        ]
    );
    assert_eq!(
        policy.stats(),
        RetryStats {
            calls: 8,
            attempts: 18,
            retries: 10,
            exhausted: 2,
            ..RetryStats::default()
        }
    );

    let panicking =
        RetryPolicy::<String>::new(3, no_jitter(ms(100), secs(1))).wrap(vt.clone(), |x: u32| {
            assert!(x != 1, "f panicked");
            ready(Ok(x))
        });
    let failed = weir::range(0u32..3)
        .map_async_on(vt.clone(), 2, true, panicking)
        .collect();
    vt.advance(secs(1));
    assert_eq!(failed.wait().unwrap_err().kind(), ErrorKind::Panicked);
}
