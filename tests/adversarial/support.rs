//! Small helpers shared by the adversarial modules: live-object counters (a `Drop`
//! counter for items and for subscribers), a watchdog that turns a hang into a failure,
//! and a bounded wait for a condition.
//!
//! Nothing here measures time: the watchdogs and waits only bound how long a test may
//! take before it reports that something that must happen did not.

use std::any::Any;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// Generous bound on a wait for something that must happen (never reached when it
/// does).
pub const PATIENCE: Duration = Duration::from_secs(10);

/// Bound on a whole pipeline run on a helper thread before it counts as hung. A hang
/// detector, never reached by a run that ends: the 200,000-item lossy-stage runs
/// take about 1.3 s alone, and took over 15 s on the 2-core CI machine with a
/// compiler running beside the tests.
pub const WATCHDOG: Duration = Duration::from_secs(60);

/// A counter of live objects: every [`Token`] made from it counts one until dropped.
/// Clones share the count.
#[derive(Clone, Debug, Default)]
pub struct Live(Arc<AtomicI64>);

impl Live {
    /// A counter at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// A new token (the count goes up by one until it is dropped).
    pub fn token(&self) -> Token {
        self.0.fetch_add(1, Ordering::SeqCst);
        Token(self.0.clone())
    }

    /// How many tokens are alive. Negative means a token was dropped twice.
    pub fn count(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }

    /// Wait (at most [`PATIENCE`]) until no token is alive; the final count.
    pub fn settle(&self) -> i64 {
        wait_until(PATIENCE, || self.count() <= 0);
        self.count()
    }
}

/// One live object of a [`Live`] counter; put it in an item or a subscriber.
#[derive(Debug)]
pub struct Token(Arc<AtomicI64>);

impl Drop for Token {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A stream item that counts itself alive: `value` plus a [`Token`].
#[derive(Debug)]
pub struct Tracked {
    /// The item's value.
    pub value: u64,
    _token: Token,
}

impl Tracked {
    /// Item `value`, counted by `live`.
    pub fn new(value: u64, live: &Live) -> Self {
        Tracked {
            value,
            _token: live.token(),
        }
    }
}

pub use crate::harness::watch::wait_until;

/// The message of a panic payload.
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".to_owned()
    }
}

/// A run on a helper thread, under a watchdog.
pub struct Watched<R> {
    what: String,
    started: Instant,
    timeout: Duration,
    result: mpsc::Receiver<Result<R, String>>,
}

/// Start `f` on a helper thread now; [`Watched::join`] waits for it at most `timeout`
/// (counted from the start). A panic in `f` is caught and reported with its message.
/// A hung helper thread is leaked; the test goes on and fails.
pub fn watch<R, F>(what: impl Into<String>, timeout: Duration, f: F) -> Watched<R>
where
    R: Send + 'static,
    F: FnOnce() -> R + Send + 'static,
{
    let (tx, rx) = mpsc::channel();
    let what = what.into();
    std::thread::Builder::new()
        .name(format!("adversarial: {what}"))
        .spawn(move || {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
                .map_err(|payload| format!("panicked: {}", panic_message(&*payload)));
            let _receiver_may_be_gone = tx.send(result);
        })
        .expect("spawn a helper thread");
    Watched {
        what,
        started: Instant::now(),
        timeout,
        result: rx,
    }
}

impl<R> Watched<R> {
    /// The helper's result; `Err` if it panicked or did not finish in time (a hang).
    pub fn join(self) -> Result<R, String> {
        let left = self.timeout.saturating_sub(self.started.elapsed());
        match self.result.recv_timeout(left) {
            Ok(result) => result,
            Err(_) => Err(format!(
                "hang caught by the watchdog: `{}` did not finish within {:?}",
                self.what, self.timeout
            )),
        }
    }
}

/// Run `f` on a helper thread and wait for it at most `timeout`; see [`watch`].
pub fn run_watched<R, F>(what: impl Into<String>, timeout: Duration, f: F) -> Result<R, String>
where
    R: Send + 'static,
    F: FnOnce() -> R + Send + 'static,
{
    watch(what, timeout, f).join()
}

/// Fail with every message in `failures` (one per line) unless it is empty.
#[track_caller]
pub fn assert_no_failures(what: &str, failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{what}: {} failing case(s):\n  {}",
        failures.len(),
        failures.join("\n  ")
    );
}
