//! [`TestSubscriber`]: a recording, demand-checking subscriber for your own tests, and
//! the probing subscriber the publisher verification is built on.
//!
//! # Design
//!
//! `subscribe` takes the subscriber by value, so the test cannot keep it. The
//! subscriber and its [`TestProbe`] share one `Arc<Recording>`: a `Mutex` around the
//! recorded [`Signal`]s plus a `Condvar` that wakes blocking waiters
//! ([`TestProbe::await_items`], [`TestProbe::await_terminal`]). The probe is `Clone +
//! Send + Sync`; any thread may request, cancel, wait or assert through it.
//!
//! The subscriber starts with **zero demand** (Reactor's `AssertSubscriber.create(0)`):
//! nothing arrives until the test calls [`TestProbe::request`], unless the scripted
//! knobs [`request_on_subscribe`](TestSubscriber::request_on_subscribe) and
//! [`request_on_next`](TestSubscriber::request_on_next) are set.
//!
//! Every request is added to the subscriber's requested total *before* it is passed
//! to the subscription (a request happens-before the `on_next` that fulfils it), and
//! the lock is never held while calling the subscription, so a publisher that delivers
//! synchronously from inside `request` finds the state free.
//!
//! # Protocol checks
//!
//! The subscriber flags every violation it can see as a [`Violation`] naming the rule:
//!
//! | seen | rule |
//! |---|---|
//! | more `on_next` than requested in total | 1.1 |
//! | two signals overlapping in time | 1.3 |
//! | any signal after `on_complete`/`on_error` | 1.7 |
//! | `on_next`/`on_error`/`on_complete` before `on_subscribe` | 1.9 |
//! | a second `on_subscribe` (the new subscription is cancelled, as 2.5 asks) | 2.5 |
//!
//! Every `assert_*` method of the probe fails first if a violation was recorded; when
//! the subscriber was built with [`reporting_to`](TestSubscriber::reporting_to), each
//! violation is also flopped into that [`TestEnv`].
//!
//! ```
//! use std::time::Duration;
//! use weir::tck::TestSubscriber;
//! use weir::Publisher;
//!
//! let subscriber = TestSubscriber::new();
//! let probe = subscriber.probe();
//! weir::range(0u32..5).subscribe(subscriber);
//! probe.assert_items(&[]); // zero demand: nothing yet
//! probe.request(2);
//! probe.assert_items(&[0, 1]);
//! probe.request(10);
//! probe.await_terminal(Duration::from_secs(1)).unwrap();
//! probe.assert_items(&[0, 1, 2, 3, 4]);
//! probe.assert_completed();
//! ```

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use super::env::{lock, TestEnv};

mod test_probe;
use crate::{Error, Subscriber, Subscription};

/// One signal received by a [`TestSubscriber`], in arrival order.
#[derive(Clone, Debug)]
pub enum Signal<T> {
    /// `on_subscribe` (the subscription itself is available from [`TestProbe::subscription`]).
    Subscribe,
    /// `on_next(item)`.
    Next(T),
    /// `on_error(error)`.
    Error(Error),
    /// `on_complete`.
    Complete,
}

/// A protocol violation seen by a [`TestSubscriber`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The Reactive Streams rule that was broken, for example `"1.1"`.
    pub rule: &'static str,
    /// What happened.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rule {}: {}", self.rule, self.message)
    }
}

/// Called after an `on_next` was recorded, with the probe and the received count.
type NextHook<T> = Box<dyn FnMut(&TestProbe<T>, u64) + Send>;
/// Called after `on_subscribe` was recorded and the scripted request issued.
type SubscribeHook<T> = Box<dyn FnMut(&TestProbe<T>) + Send>;

/// A subscriber that records every signal, checks the protocol, and starts with zero
/// demand. See the module docs; keep a [`TestProbe`] before subscribing it.
pub struct TestSubscriber<T> {
    shared: Arc<Recording<T>>,
    request_on_subscribe: u64,
    request_on_next: u64,
    on_subscribe_hook: Option<SubscribeHook<T>>,
    on_next_hook: Option<NextHook<T>>,
}

/// The test's handle on a [`TestSubscriber`]: request, cancel, wait and assert.
/// Cloneable and usable from any thread.
pub struct TestProbe<T> {
    shared: Arc<Recording<T>>,
}

impl<T> Clone for TestProbe<T> {
    fn clone(&self) -> Self {
        TestProbe {
            shared: self.shared.clone(),
        }
    }
}

impl<T> fmt::Debug for TestSubscriber<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestSubscriber")
            .field("request_on_subscribe", &self.request_on_subscribe)
            .field("request_on_next", &self.request_on_next)
            .finish_non_exhaustive()
    }
}

impl<T> fmt::Debug for TestProbe<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = lock(&self.shared.state);
        f.debug_struct("TestProbe")
            .field("requested", &state.requested)
            .field("received", &state.received)
            .field("terminated", &state.terminal.is_some())
            .field("violations", &state.violations)
            .finish()
    }
}

/// What a [`TestSubscriber`] records, shared with its [`TestProbe`]s.
struct Recording<T> {
    state: Mutex<RecordingState<T>>,
    changed: Condvar,
    /// Set while a signal method runs; finding it set on entry is a rule 1.3 violation.
    busy: AtomicBool,
    env: Option<TestEnv>,
}

struct RecordingState<T> {
    signals: Vec<Signal<T>>,
    record_items: bool,
    subscription: Option<Subscription>,
    subscribed: bool,
    /// Requests made before `on_subscribe` arrived (already counted in `requested`),
    /// issued when it does.
    pending_request: u64,
    /// A `request(0)` made before `on_subscribe`, issued after the pending requests.
    pending_zero: bool,
    pending_cancel: bool,
    cancelled: bool,
    requested: u64,
    received: u64,
    /// How many items the publisher under test was made to emit (`u64::MAX`: unknown).
    expected_len: u64,
    terminal: Option<Terminal>,
    violations: Vec<Violation>,
}

/// How a stream ended, as seen by a [`TestSubscriber`].
#[derive(Clone, Debug)]
pub enum Terminal {
    /// `on_complete`.
    Complete,
    /// `on_error`.
    Error(Error),
}

impl<T> Default for TestSubscriber<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> TestSubscriber<T> {
    /// A subscriber with zero initial demand.
    pub fn new() -> Self {
        TestSubscriber {
            shared: Arc::new(Recording {
                state: Mutex::new(RecordingState {
                    signals: Vec::new(),
                    record_items: true,
                    subscription: None,
                    subscribed: false,
                    pending_request: 0,
                    pending_zero: false,
                    pending_cancel: false,
                    cancelled: false,
                    requested: 0,
                    received: 0,
                    expected_len: u64::MAX,
                    terminal: None,
                    violations: Vec::new(),
                }),
                changed: Condvar::new(),
                busy: AtomicBool::new(false),
                env: None,
            }),
            request_on_subscribe: 0,
            request_on_next: 0,
            on_subscribe_hook: None,
            on_next_hook: None,
        }
    }

    /// Request `n` from inside `on_subscribe` (0, the default, requests nothing).
    pub fn request_on_subscribe(mut self, n: u64) -> Self {
        self.request_on_subscribe = n;
        self
    }

    /// Request `m` from inside every `on_next` (0, the default, requests nothing).
    pub fn request_on_next(mut self, m: u64) -> Self {
        self.request_on_next = m;
        self
    }

    /// The publisher under test was made to emit `n` items: an item beyond the `n`th
    /// is reported as a rule 1.5 violation (a finite publisher must complete after its
    /// last item), not as a rule 1.1 one, even if it also exceeds the demand.
    pub fn expected_len(self, n: u64) -> Self {
        lock(&self.shared.state).expected_len = n;
        self
    }

    /// Also flop every violation into `env` as it is seen. Call before [`probe`](Self::probe)
    /// is shared with other threads.
    pub fn reporting_to(mut self, env: &TestEnv) -> Self {
        let shared = Arc::get_mut(&mut self.shared)
            .expect("reporting_to must be called before the probe is taken");
        shared.env = Some(env.clone());
        self
    }

    /// Count items without keeping them (for long or infinite streams).
    pub(crate) fn discard_items(self) -> Self {
        lock(&self.shared.state).record_items = false;
        self
    }

    pub(crate) fn on_subscribe_hook(
        mut self,
        hook: impl FnMut(&TestProbe<T>) + Send + 'static,
    ) -> Self {
        self.on_subscribe_hook = Some(Box::new(hook));
        self
    }

    pub(crate) fn on_next_hook(
        mut self,
        hook: impl FnMut(&TestProbe<T>, u64) + Send + 'static,
    ) -> Self {
        self.on_next_hook = Some(Box::new(hook));
        self
    }

    /// The handle the test keeps.
    pub fn probe(&self) -> TestProbe<T> {
        TestProbe {
            shared: self.shared.clone(),
        }
    }

    fn enter(&self) {
        // AcqRel: the Acquire half pairs with the Release store in `leave`, so a signal
        // that follows another one (on any thread) sees what that one recorded.
        if self.shared.busy.swap(true, Ordering::AcqRel) {
            self.shared.violate(
                &mut lock(&self.shared.state),
                "1.3",
                "a signal overlapped another signal".into(),
            );
        }
    }

    fn leave(&self) {
        // Release: pairs with the AcqRel swap in `enter`.
        self.shared.busy.store(false, Ordering::Release);
        self.shared.changed.notify_all();
    }
}

impl<T> Recording<T> {
    fn violate(&self, state: &mut RecordingState<T>, rule: &'static str, message: String) {
        let violation = Violation { rule, message };
        if let Some(env) = &self.env {
            env.flop(violation.to_string());
        }
        state.violations.push(violation);
    }

    /// Checks common to every signal after `on_subscribe`.
    fn check_order(&self, state: &mut RecordingState<T>, signal: &str) {
        if !state.subscribed {
            self.violate(
                state,
                "1.9",
                format!("{signal} arrived before on_subscribe"),
            );
        }
        if let Some(terminal) = &state.terminal {
            let message = format!("{signal} arrived after {}", terminal_name(terminal));
            self.violate(state, "1.7", message);
        }
    }
}

fn terminal_name(terminal: &Terminal) -> String {
    match terminal {
        Terminal::Complete => "on_complete".into(),
        Terminal::Error(e) => format!("on_error({e})"),
    }
}

impl<T> TestSubscriber<T> {
    /// Record one item; request `request_on_next` now unless it goes back as batch
    /// credit (`by_credit`).
    fn deliver(&mut self, item: T, by_credit: bool) {
        self.enter();
        let mut state = lock(&self.shared.state);
        self.shared.check_order(&mut state, "on_next");
        state.received += 1;
        if state.received > state.expected_len && state.terminal.is_none() {
            let message = format!(
                "on_next #{} arrived from a publisher of {} items: it must complete after \
                 its last item and send nothing more",
                state.received, state.expected_len
            );
            self.shared.violate(&mut state, "1.5", message);
        } else if state.received > state.requested {
            let message = format!(
                "on_next #{} arrived but only {} were requested in total",
                state.received, state.requested
            );
            self.shared.violate(&mut state, "1.1", message);
        }
        if state.record_items {
            state.signals.push(Signal::Next(item));
        }
        let received = state.received;
        let request = self.request_on_next;
        let subscription = if request > 0 && !by_credit {
            state.requested = state.requested.saturating_add(request);
            state.subscription.clone()
        } else {
            None
        };
        drop(state);
        self.shared.changed.notify_all();
        if let Some(subscription) = subscription {
            subscription.request(request);
        }
        if let Some(hook) = &mut self.on_next_hook {
            hook(
                &TestProbe {
                    shared: self.shared.clone(),
                },
                received,
            );
        }
        self.leave();
    }
}

impl<T> Subscriber<T> for TestSubscriber<T> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        self.enter();
        let mut state = lock(&self.shared.state);
        if state.subscribed {
            self.shared.violate(
                &mut state,
                "2.5",
                "a second on_subscribe arrived; it was cancelled".into(),
            );
            drop(state);
            subscription.cancel();
            self.leave();
            return;
        }
        if let Some(terminal) = &state.terminal {
            let message = format!("on_subscribe arrived after {}", terminal_name(terminal));
            self.shared.violate(&mut state, "1.9", message);
        }
        state.subscribed = true;
        state.signals.push(Signal::Subscribe);
        state.subscription = Some(subscription.clone());
        let cancel = state.pending_cancel;
        let zero = std::mem::take(&mut state.pending_zero);
        state.requested = state.requested.saturating_add(self.request_on_subscribe);
        let request =
            std::mem::take(&mut state.pending_request).saturating_add(self.request_on_subscribe);
        drop(state);
        self.shared.changed.notify_all();
        if request > 0 {
            subscription.request(request);
        }
        if zero {
            subscription.request(0);
        }
        if cancel {
            subscription.cancel();
        }
        if let Some(hook) = &mut self.on_subscribe_hook {
            hook(&TestProbe {
                shared: self.shared.clone(),
            });
        }
        self.leave();
    }

    fn on_next(&mut self, item: T) {
        self.deliver(item, false);
    }

    /// Items of a batch are checked one by one; the scripted `request_on_next` is
    /// returned as batch credit for the whole batch (counted as requested only when
    /// the batch ends), so publishers that drop batch credit fail the checks.
    fn on_next_batch<I: Iterator<Item = T>>(&mut self, items: I) -> u64 {
        let mut credit = 0u64;
        for item in items {
            self.deliver(item, true);
            credit = credit.saturating_add(self.request_on_next);
        }
        if credit > 0 {
            let mut state = lock(&self.shared.state);
            state.requested = state.requested.saturating_add(credit);
        }
        credit
    }

    fn on_error(&mut self, error: Error) {
        self.enter();
        let mut state = lock(&self.shared.state);
        self.shared.check_order(&mut state, "on_error");
        state.signals.push(Signal::Error(error.clone()));
        if state.terminal.is_none() {
            state.terminal = Some(Terminal::Error(error));
        }
        drop(state);
        self.leave();
    }

    fn on_complete(&mut self) {
        self.enter();
        let mut state = lock(&self.shared.state);
        self.shared.check_order(&mut state, "on_complete");
        state.signals.push(Signal::Complete);
        if state.terminal.is_none() {
            state.terminal = Some(Terminal::Complete);
        }
        drop(state);
        self.leave();
    }
}

impl<T> RecordingState<T> {
    fn signal_count(&self) -> usize {
        if self.record_items {
            self.signals.len()
        } else {
            self.signals.len() + usize::try_from(self.received).unwrap_or(usize::MAX)
        }
    }
}
