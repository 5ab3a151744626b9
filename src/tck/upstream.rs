//! The fake upstream of the subscriber and processor tests (Java's `ManualPublisher`).
//!
//! An [`UnderTest`] owns the subscriber under test. Creating it calls `on_subscribe`
//! synchronously with a [`ManualSubscription`], which records every `request(n)` in a
//! queue and `cancel` in a flag, so the test can [`expect_request`] and
//! [`expect_cancel`] with a timeout. The test pushes signals itself with
//! [`send_next`], [`send_complete`] and [`send_error`], on the test thread. Like Java's
//! ManualPublisher, it does not enforce demand: each test sends exactly the
//! sequence the TCK sends.
//!
//! # Rule 2.3 without stack traces
//!
//! Java finds a marker method on the stack to detect a subscription called from
//! inside `onComplete`/`onError`. Here the upstream sets a thread-local flag around its
//! calls to `on_complete`/`on_error`, and every `ManualSubscription` checks it: a
//! `request` or `cancel` made while the flag is set is recorded as a rule 2.3 failure.
//! Like Java, this sees only calls made synchronously on the same thread.
//!
//! Every call into the subscriber is wrapped in `catch_unwind`: a panic is a rule 2.13
//! failure ("signal methods must return normally").
//!
//! [`expect_request`]: ManualSubscription::expect_request
//! [`expect_cancel`]: ManualSubscription::expect_cancel
//! [`send_next`]: UnderTest::send_next
//! [`send_complete`]: UnderTest::send_complete
//! [`send_error`]: UnderTest::send_error

use std::cell::Cell;
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::env::{lock, wait_for};
use super::harness::panic_message;
use super::TestEnv;
use crate::{Error, RawSubscription, Subscriber, Subscription};

thread_local! {
    /// The terminal signal the upstream is delivering on this thread, if any.
    static IN_TERMINAL: Cell<Option<&'static str>> = const { Cell::new(None) };
}

/// Run `f` with the rule 2.3 flag set to `signal`.
fn in_terminal<R>(signal: &'static str, f: impl FnOnce() -> R) -> R {
    let previous = IN_TERMINAL.with(|flag| flag.replace(Some(signal)));
    let result = f();
    IN_TERMINAL.with(|flag| flag.set(previous));
    result
}

/// The fake subscription the upstream hands to the subscriber under test.
pub(crate) struct ManualSubscription {
    env: TestEnv,
    /// `Some(rule)`: any `request` is a failure of that rule (the second subscription
    /// of the black-box 2.5 test).
    forbid_request: Option<&'static str>,
    state: Mutex<ManualState>,
    changed: Condvar,
}

#[derive(Default)]
struct ManualState {
    requests: VecDeque<u64>,
    total: u64,
    cancelled: bool,
}

impl ManualSubscription {
    pub(crate) fn new(env: &TestEnv) -> Arc<Self> {
        Arc::new(ManualSubscription {
            env: env.clone(),
            forbid_request: None,
            state: Mutex::default(),
            changed: Condvar::new(),
        })
    }

    /// A subscription on which any `request` is a failure of `rule`.
    pub(crate) fn forbidding_requests(env: &TestEnv, rule: &'static str) -> Arc<Self> {
        Arc::new(ManualSubscription {
            env: env.clone(),
            forbid_request: Some(rule),
            state: Mutex::default(),
            changed: Condvar::new(),
        })
    }

    fn check_terminal(&self, call: &str) {
        if let Some(signal) = IN_TERMINAL.with(Cell::get) {
            self.env.flop(format!(
                "rule 2.3: the subscriber called {call} from inside {signal}"
            ));
        }
    }

    /// The next `request(n)` not yet expected, within `timeout`.
    pub(crate) fn expect_request(&self, timeout: Duration) -> Result<u64, String> {
        let mut state = wait_for(&self.state, &self.changed, timeout, |s| {
            !s.requests.is_empty()
        });
        match state.requests.pop_front() {
            Some(0) => Err("rule 3.9: the subscriber requested 0".into()),
            Some(n) => Ok(n),
            None => Err(format!("the subscriber did not request within {timeout:?}")),
        }
    }

    /// `Ok` once `cancel` was called, within `timeout`.
    pub(crate) fn expect_cancel(&self, timeout: Duration) -> Result<(), String> {
        if wait_for(&self.state, &self.changed, timeout, |s| s.cancelled).cancelled {
            Ok(())
        } else {
            Err(format!("the subscriber did not cancel within {timeout:?}"))
        }
    }

    /// True once `cancel` was called.
    pub(crate) fn is_cancelled(&self) -> bool {
        lock(&self.state).cancelled
    }
}

impl RawSubscription for ManualSubscription {
    fn request(&self, n: u64) {
        self.check_terminal(&format!("request({n})"));
        if let Some(rule) = self.forbid_request {
            self.env.flop(format!(
                "rule {rule}: the subscriber called request({n}) on a subscription it must cancel"
            ));
        }
        let mut state = lock(&self.state);
        state.requests.push_back(n);
        state.total = state.total.saturating_add(n);
        drop(state);
        self.changed.notify_all();
    }

    fn cancel(&self) {
        self.check_terminal("cancel()");
        lock(&self.state).cancelled = true;
        self.changed.notify_all();
    }
}

/// Call `f` on the subscriber, turning a panic into a rule 2.13 failure.
pub(crate) fn call<R>(signal: &str, f: impl FnOnce() -> R) -> Result<R, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|panic| {
        format!(
            "rule 2.13: the subscriber panicked in {signal}: {}",
            panic_message(&*panic)
        )
    })
}

/// The TCK as upstream of one subscriber under test.
pub(crate) struct UnderTest<T, S> {
    pub(crate) subscriber: S,
    pub(crate) subscription: Arc<ManualSubscription>,
    element: Arc<dyn Fn(u64) -> T + Send + Sync>,
    sent: u64,
}

impl<T, S: Subscriber<T>> UnderTest<T, S> {
    /// Subscribe `subscriber` to a fresh fake upstream (`on_subscribe` runs now).
    pub(crate) fn new(
        env: &TestEnv,
        mut subscriber: S,
        element: Arc<dyn Fn(u64) -> T + Send + Sync>,
    ) -> Result<Self, String> {
        let subscription = ManualSubscription::new(env);
        let handle = Subscription::new(subscription.clone());
        call("on_subscribe", || subscriber.on_subscribe(handle))?;
        Ok(UnderTest {
            subscriber,
            subscription,
            element,
            sent: 0,
        })
    }

    /// Send the next element (`element(0)`, `element(1)`, …) and return a clone of it.
    pub(crate) fn send_next(&mut self) -> Result<T, String>
    where
        T: Clone,
    {
        let item = (self.element)(self.sent);
        self.sent += 1;
        self.send(item.clone())?;
        Ok(item)
    }

    /// Send `item`.
    pub(crate) fn send(&mut self, item: T) -> Result<(), String> {
        call("on_next", || self.subscriber.on_next(item))
    }

    /// Send `on_complete`, with the rule 2.3 flag set.
    pub(crate) fn send_complete(&mut self) -> Result<(), String> {
        in_terminal("on_complete", || {
            call("on_complete", || self.subscriber.on_complete())
        })
    }

    /// Send `on_error(error)`, with the rule 2.3 flag set.
    pub(crate) fn send_error(&mut self, error: Error) -> Result<(), String> {
        in_terminal("on_error", || {
            call("on_error", || self.subscriber.on_error(error))
        })
    }

    /// Send another `on_subscribe(subscription)`.
    pub(crate) fn send_subscribe(&mut self, subscription: Subscription) -> Result<(), String> {
        call("on_subscribe", || {
            self.subscriber.on_subscribe(subscription)
        })
    }
}

/// The error the upstream signals: a fresh instance, compared by identity.
pub(crate) fn test_error() -> Error {
    Error::msg("test error signalled by the conformance kit")
}
