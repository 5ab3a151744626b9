//! Watchdogs, not timers: every wait in the suite is "poll until the condition holds,
//! give up after a generous deadline", so a correct implementation never comes near
//! the deadline and a broken one fails instead of hanging the suite. Risky pipelines
//! run on threads of their own ([`on_thread`]), answered through `recv_timeout`.
//!
//! Also: the panic hook that keeps the suite's deliberate panics out of the output,
//! the failure list every table check reports at the end, and a runner that spreads
//! the rows of a table over a few threads.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Once};
use std::time::{Duration, Instant};

/// How long a watchdog waits for something that must happen. Generous: a correct
/// implementation needs microseconds to milliseconds.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// How often a watchdog polls.
const POLL: Duration = Duration::from_millis(1);

/// The prefix of every panic the suite makes on purpose.
pub const DELIBERATE: &str = "adversarial: deliberate";

/// Poll `condition` every millisecond until it holds (true) or `timeout` passed (false).
pub fn wait_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return condition();
        }
        std::thread::sleep(POLL);
    }
}

/// Run `f` on a new thread named `name`; its result, or a description of why there
/// is none: it panicked (with the message) or did not return within `timeout` (the
/// thread is left behind).
pub fn on_thread<T, F>(name: &str, timeout: Duration, f: F) -> Result<T, String>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            let _ = tx.send(result);
        })
        .expect("spawn a test thread");
    match rx.recv_timeout(timeout) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(payload)) => Err(format!("panicked: {}", panic_message(&*payload))),
        Err(_) => Err(format!("did not return within {timeout:?} (hung)")),
    }
}

/// The message of a panic payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&'static str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_owned()
    }
}

thread_local! {
    /// Set while [`expect_panic`] runs: the panic it catches is the point of the check.
    static EXPECTING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Keep the suite's deliberate panics (messages starting with [`DELIBERATE`]) and the
/// panics [`expect_panic`] catches out of the test output; every other panic is
/// reported by the default hook as usual.
pub fn silence_deliberate_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let expected = EXPECTING.with(std::cell::Cell::get);
            if expected || panic_message(info.payload()).starts_with(DELIBERATE) {
                return;
            }
            default(info);
        }));
    });
}

/// Run `f`, which is expected to panic (a constructor refusing its arguments):
/// `Err(message)` if it did, quietly.
pub fn expect_panic<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    silence_deliberate_panics();
    EXPECTING.with(|expecting| expecting.set(true));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    EXPECTING.with(|expecting| expecting.set(false));
    result.map_err(|payload| panic_message(&*payload))
}

/// Fail the test with every collected failure, one per line, if there are any.
pub fn assert_no_failures(check: &str, total: usize, failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{check}: {} failures in {total} cases:\n  - {}",
        failures.len(),
        failures.join("\n  - ")
    );
}

/// Run `check` on every row, `parallel` rows at a time, and gather the failures in
/// table order. Each call of `check` must bound its own waits (watchdogs), so this
/// never hangs.
pub fn run_rows<R, F>(rows: &[R], parallel: usize, check: F) -> Vec<String>
where
    R: Sync,
    F: Fn(&R) -> Vec<String> + Sync,
{
    let next = AtomicUsize::new(0);
    let mut results: Vec<(usize, Vec<String>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..parallel.max(1))
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let index = next.fetch_add(1, Ordering::SeqCst);
                        let Some(row) = rows.get(index) else {
                            return done;
                        };
                        done.push((index, check(row)));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|worker| worker.join().expect("a row runner panicked"))
            .collect()
    });
    results.sort_by_key(|(index, _)| *index);
    results.into_iter().flat_map(|(_, f)| f).collect()
}

/// Build something whose construction may be refused: `refusal` is the documented
/// panic message when it must be (`None`: it must be built). `Ok(Some(built))` to go
/// on with, `Ok(None)` when it was refused as documented (the case passed), `Err`
/// with the failure otherwise.
pub fn construct<T, R: AsRef<str>>(
    refusal: Option<R>,
    build: impl FnOnce() -> T,
) -> Result<Option<T>, String> {
    match (expect_panic(build), refusal) {
        (Ok(built), None) => Ok(Some(built)),
        (Err(got), Some(expected)) if got == expected.as_ref() => Ok(None),
        (Err(got), Some(expected)) => Err(format!(
            "refused with {got:?}, documented: {:?}",
            expected.as_ref()
        )),
        (Ok(_), Some(expected)) => Err(format!(
            "accepted at construction; documented: a panic {:?}",
            expected.as_ref()
        )),
        (Err(got), None) => Err(format!("construction panicked: {got}")),
    }
}

/// [`construct`], returning from the case (a `fn() -> Vec<String>` of failures) when
/// there is nothing to run.
macro_rules! built {
    // A bare `None` names no message type: any will do.
    (None, $build:expr) => {
        $crate::harness::watch::built!(None::<&str>, $build)
    };
    ($refusal:expr, $build:expr) => {
        match $crate::harness::watch::construct($refusal, || $build) {
            Ok(Some(built)) => built,
            Ok(None) => return Vec::new(),
            Err(failure) => return vec![failure],
        }
    };
}
pub(crate) use built;
