//! A `tracing` layer that calls back into weir.
//!
//! A layer is user code: it runs inside every `tracing` event weir emits. An
//! application that ships its logs through weir (a layer that `try_send`s each
//! record into a `weir::channel`), or one that adds a stage's figures to what it
//! logs (a channel's `monitor`, a breaker's `state`), calls back into the stage
//! that is logging. An event emitted while that stage holds its lock makes the
//! call wait for the lock its own thread holds, for ever. So weir emits no event
//! under a lock of its own: here a layer calls back into the emitter on each of
//! its events (the channel's flow-state changes, its rate-limited "full" notice
//! and its close, the circuit breaker's transitions), under a watchdog; the call
//! must return, and it must have been made (the event fired).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

use weir::prelude::*;
use weir::retry::{BreakerState, CircuitBreaker};
use weir::runtime::VirtualTime;
use weir::source::channel::{ChannelBuilder, ChannelPolicy, FlowState, Sender, WaterMarks};

use crate::support::{assert_no_failures, run_watched};

/// How long a scenario may take before the check calls it a hang.
const WATCHDOG: Duration = Duration::from_secs(20);

thread_local! {
    /// The layer is inside its own call back (whose events it lets pass).
    static CALLING: Cell<bool> = const { Cell::new(false) };
}

/// What the layer calls back: set by the scenario, on the watched thread, so that
/// everything a hung scenario holds stays on that thread (the test's own thread
/// must not wait for a lock the hung one holds when it drops a handle).
type Back = Arc<OnceLock<Box<dyn Fn() + Send + Sync>>>;

/// On every event whose target starts with `target`, calls `back` (once set; not
/// for the events `back` itself causes), and counts the events and the calls.
struct CallBack {
    target: &'static str,
    back: Back,
    events: Arc<AtomicU64>,
    calls: Arc<AtomicU64>,
}

impl<S: tracing::Subscriber> Layer<S> for CallBack {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if !event.metadata().target().starts_with(self.target) {
            return;
        }
        self.events.fetch_add(1, Ordering::Relaxed);
        if CALLING.get() {
            return;
        }
        let Some(back) = self.back.get() else {
            return;
        };
        CALLING.set(true);
        back();
        CALLING.set(false);
        self.calls.fetch_add(1, Ordering::Relaxed);
    }
}

/// Run `scenario` on a watched thread with a layer that calls back what the
/// scenario sets on each event of `target`; returns how many events it saw, or the
/// failure (also when it never called back).
fn with_call_back(
    what: &str,
    target: &'static str,
    scenario: impl FnOnce(&Back) + Send + 'static,
) -> Result<u64, String> {
    let (events, calls) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let back = Back::default();
    let layer = CallBack {
        target,
        back: back.clone(),
        events: events.clone(),
        calls: calls.clone(),
    };
    run_watched(what, WATCHDOG, move || {
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || scenario(&back));
    })?;
    match calls.load(Ordering::Relaxed) {
        0 => Err(format!("{what}: the layer never called back")),
        _ => Ok(events.load(Ordering::Relaxed)),
    }
}

/// What a logging layer does with a channel of its own records: send one more,
/// read the figures and the flow state.
fn log_into(back: &Back, tx: &Sender<u64>) {
    let tx = tx.clone();
    let set = back.set(Box::new(move || {
        let _full_or_not = tx.try_send(u64::MAX);
        let _ = tx.monitor().snapshot();
        let _ = tx.state();
    }));
    assert!(set.is_ok(), "one call back per scenario");
}

#[test]
fn a_layer_that_sends_into_the_channel_it_hears_from_does_not_wait_for_itself() {
    let mut failures = Vec::new();

    // Pause and resume (info): the depth reaches the high mark, then the low.
    let result = with_call_back("channel flow changes", "weir::channel", |back| {
        let (tx, rx) = ChannelBuilder::new(8, ChannelPolicy::Backpressure)
            .water_marks(WaterMarks::new(4, 1))
            .build::<u64>();
        log_into(back, &tx);
        for i in 0..6 {
            let _ = tx.try_send(i);
        }
        assert_eq!(tx.state(), FlowState::Paused);
        // Draining resumes the flow: the resume event comes from the drain's pass.
        let got = rx.take(6).collect().wait().expect("completes");
        assert_eq!(&got[..4], &[0, 1, 2, 3], "got {got:?}");
    });
    failures.extend(result.err());

    // "Full: handed back" (debug, at powers of two of refusals).
    let result = with_call_back("channel refusals", "weir::channel", |back| {
        let (tx, _rx) = weir::channel::<u64>(1, ChannelPolicy::Backpressure);
        log_into(back, &tx);
        tx.try_send(0).expect("room for one");
        for i in 1..10 {
            assert!(tx.try_send(i).is_err(), "the channel holds one");
        }
    });
    failures.extend(result.err());

    // Closed while paused (debug: the flow state is reset).
    let result = with_call_back("channel closed while paused", "weir::channel", |back| {
        let (tx, rx) = ChannelBuilder::new(4, ChannelPolicy::Backpressure)
            .water_marks(WaterMarks::new(2, 1))
            .build::<u64>();
        log_into(back, &tx);
        tx.try_send(0).expect("room");
        tx.try_send(1).expect("room");
        // Subscribed and cancelled at once: the channel shuts with items queued.
        rx.collect().cancel();
    });
    failures.extend(result.err());

    assert_no_failures("a tracing layer calling back into a channel", &failures);
}

#[test]
fn a_layer_that_reads_the_breaker_it_hears_from_does_not_wait_for_itself() {
    let result = with_call_back("breaker transitions", "weir", |back| {
        let vt = VirtualTime::new();
        let open_for = Duration::from_secs(5);
        let breaker = CircuitBreaker::new(0.5, 2, Duration::from_secs(10), open_for, vt.clone());
        let reader = breaker.clone();
        let set = back.set(Box::new(move || {
            let _ = reader.state();
            let _ = reader.stats();
        }));
        assert!(set.is_ok(), "one call back");
        // Opens (two failures of two), half-opens at the first look once its time
        // is up, closes after its probe succeeds. (The layer's own looks change
        // nothing: an event inside a layer would not reach it.)
        breaker.on_failure();
        breaker.on_failure();
        assert_eq!(breaker.state(), BreakerState::Open);
        vt.advance(open_for);
        assert_eq!(breaker.state(), BreakerState::HalfOpen);
        breaker.try_acquire().expect("the probe");
        breaker.on_success();
        assert_eq!(breaker.state(), BreakerState::Closed);
        let stats = breaker.stats();
        assert_eq!((stats.opened, stats.half_opened, stats.closed), (1, 1, 1));
    });
    match result {
        // One event per transition: opened, half-open, closed.
        Ok(events) => assert_eq!(events, 3, "one event per transition"),
        Err(e) => panic!("{e}"),
    }
}
