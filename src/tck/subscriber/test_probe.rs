//! [`TestProbe`]: requesting, cancelling, waiting and asserting on a
//! [`TestSubscriber`](super::TestSubscriber) from the test's side.

use std::fmt;
use std::time::Duration;

use super::{terminal_name, RecordingState, Signal, Terminal, TestProbe, Violation};
use crate::tck::env::{lock, wait_for};
use crate::{Error, Subscription};

impl<T> TestProbe<T> {
    fn state(&self) -> std::sync::MutexGuard<'_, RecordingState<T>> {
        lock(&self.shared.state)
    }

    /// Request `n` more items. Before `on_subscribe` the request is kept and issued when
    /// it arrives. After a terminal signal it still reaches the publisher's
    /// subscription, if the test kept one (that is how rule 1.7 is probed).
    pub fn request(&self, n: u64) {
        let mut state = self.state();
        if n > 0 {
            state.requested = state.requested.saturating_add(n);
        }
        let Some(subscription) = state.subscription.clone() else {
            if n == 0 {
                state.pending_zero = true;
            }
            state.pending_request = state.pending_request.saturating_add(n);
            return;
        };
        drop(state);
        subscription.request(n);
    }

    /// Cancel the subscription (or the one that arrives later). Idempotent on the
    /// probe's side; every call reaches the publisher (rule 3.7 is probed that way).
    pub fn cancel(&self) {
        let mut state = self.state();
        state.cancelled = true;
        let Some(subscription) = state.subscription.clone() else {
            state.pending_cancel = true;
            return;
        };
        drop(state);
        subscription.cancel();
    }

    /// The subscription received in `on_subscribe` (kept after a terminal signal).
    pub fn subscription(&self) -> Option<Subscription> {
        self.state().subscription.clone()
    }

    /// True once `on_subscribe` arrived.
    pub fn is_subscribed(&self) -> bool {
        self.state().subscribed
    }

    /// True once the probe cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.state().cancelled
    }

    /// Total requested so far (saturating at `u64::MAX`).
    pub fn requested(&self) -> u64 {
        self.state().requested
    }

    /// Number of `on_next` signals received.
    pub fn received_count(&self) -> u64 {
        self.state().received
    }

    /// Number of signals of any kind received.
    pub fn signal_count(&self) -> usize {
        self.state().signal_count()
    }

    /// The items received so far, in order.
    pub fn items(&self) -> Vec<T>
    where
        T: Clone,
    {
        self.state()
            .signals
            .iter()
            .filter_map(|s| match s {
                Signal::Next(item) => Some(item.clone()),
                _ => None,
            })
            .collect()
    }

    /// Every signal received so far, in order.
    pub fn signals(&self) -> Vec<Signal<T>>
    where
        T: Clone,
    {
        self.state().signals.clone()
    }

    /// The first terminal signal, if one arrived.
    pub fn terminal(&self) -> Option<Terminal> {
        self.state().terminal.clone()
    }

    /// True once `on_complete` or `on_error` arrived.
    pub fn is_terminated(&self) -> bool {
        self.state().terminal.is_some()
    }

    /// True when the stream completed.
    pub fn is_completed(&self) -> bool {
        matches!(self.state().terminal, Some(Terminal::Complete))
    }

    /// The error, when the stream failed.
    pub fn error(&self) -> Option<Error> {
        match &self.state().terminal {
            Some(Terminal::Error(e)) => Some(e.clone()),
            _ => None,
        }
    }

    /// The protocol violations seen so far.
    pub fn violations(&self) -> Vec<Violation> {
        self.state().violations.clone()
    }

    /// `Err` listing the violations, if any.
    pub fn check_violations(&self) -> Result<(), String> {
        let violations = self.violations();
        if violations.is_empty() {
            Ok(())
        } else {
            Err(violations
                .iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join("; "))
        }
    }

    /// Block until `done(state)` holds or `timeout` passes; `Err(what)` on timeout.
    fn wait_until(
        &self,
        timeout: Duration,
        what: impl Fn(&RecordingState<T>) -> String,
        done: impl Fn(&RecordingState<T>) -> bool,
    ) -> Result<(), String> {
        let state = wait_for(&self.shared.state, &self.shared.changed, timeout, &done);
        if done(&state) {
            Ok(())
        } else {
            Err(format!(
                "timed out after {timeout:?} waiting for {}",
                what(&state)
            ))
        }
    }

    /// Wait until `on_subscribe` arrived.
    pub fn await_subscribed(&self, timeout: Duration) -> Result<(), String> {
        self.wait_until(timeout, |_| "on_subscribe".into(), |s| s.subscribed)
    }

    /// Wait until at least `n` items arrived in total. Fails early when the stream
    /// terminates with fewer.
    pub fn await_items(&self, n: u64, timeout: Duration) -> Result<(), String> {
        self.wait_until(
            timeout,
            |s| format!("{n} items in total (received {})", s.received),
            |s| s.received >= n || s.terminal.is_some(),
        )?;
        let state = self.state();
        if state.received >= n {
            Ok(())
        } else {
            let terminal = state
                .terminal
                .as_ref()
                .map(terminal_name)
                .unwrap_or_default();
            Err(format!(
                "expected {n} items in total but the stream ended with {terminal} after {}",
                state.received
            ))
        }
    }

    /// Wait until `on_complete` or `on_error` arrived.
    pub fn await_terminal(&self, timeout: Duration) -> Result<(), String> {
        self.wait_until(
            timeout,
            |s| format!("on_complete or on_error (received {} items)", s.received),
            |s| s.terminal.is_some(),
        )
    }

    /// Wait until the stream completed; `Err` on timeout or if it failed instead.
    pub fn await_completion(&self, timeout: Duration) -> Result<(), String> {
        self.await_terminal(timeout)?;
        match self.terminal() {
            Some(Terminal::Complete) => Ok(()),
            Some(Terminal::Error(e)) => Err(format!("expected on_complete, got on_error({e})")),
            None => unreachable!("await_terminal returned Ok"),
        }
    }

    /// Wait until the stream failed and return the error; `Err` on timeout or if it
    /// completed instead.
    pub fn await_error(&self, timeout: Duration) -> Result<Error, String> {
        self.await_terminal(timeout)?;
        match self.terminal() {
            Some(Terminal::Error(e)) => Ok(e),
            Some(Terminal::Complete) => Err("expected on_error, got on_complete".into()),
            None => unreachable!("await_terminal returned Ok"),
        }
    }

    /// Watch for `window`: `Err` if any signal arrives meanwhile.
    pub fn expect_no_signals(&self, window: Duration) -> Result<(), String> {
        let before = self.signal_count();
        let result = self.wait_until(window, |_| String::new(), |s| s.signal_count() > before);
        match result {
            // The condition "a new signal arrived" held: that is the failure.
            Ok(()) => {
                Err(format!(
                "expected no signals for {window:?}, but got {} more (now {} items, terminal: {})",
                self.signal_count() - before,
                self.received_count(),
                self.terminal().as_ref().map(terminal_name).unwrap_or_else(|| "none".into())
            ))
            }
            Err(_) => Ok(()),
        }
    }

    /// Watch for `window`: `Err` unless exactly `expected` signals of any kind
    /// (`on_subscribe`, items, terminal) have arrived when it ends. Unlike
    /// [`expect_no_signals`](Self::expect_no_signals) this also catches signals that
    /// arrived *before* the call, as a synchronous publisher delivers them inside
    /// `request`.
    pub fn expect_signal_count(&self, expected: usize, window: Duration) -> Result<(), String> {
        let _ = self.wait_until(window, |_| String::new(), |s| s.signal_count() > expected);
        let state = self.state();
        let actual = state.signal_count();
        if actual == expected {
            Ok(())
        } else {
            Err(format!(
                "expected {expected} signals in total, got {actual} ({} items, terminal: {})",
                state.received,
                state
                    .terminal
                    .as_ref()
                    .map(terminal_name)
                    .unwrap_or_else(|| "none".into())
            ))
        }
    }

    fn panic_on_violations(&self) {
        if let Err(violations) = self.check_violations() {
            panic!("protocol violations: {violations}");
        }
    }

    /// Panic unless no violation was seen.
    pub fn assert_no_violations(&self) {
        self.panic_on_violations();
    }

    /// Panic unless exactly `expected` arrived so far, in order.
    pub fn assert_items(&self, expected: &[T])
    where
        T: Clone + PartialEq + fmt::Debug,
    {
        self.panic_on_violations();
        let items = self.items();
        assert_eq!(
            items, expected,
            "received items differ from the expected ones"
        );
    }

    /// Panic unless the stream completed.
    pub fn assert_completed(&self) {
        self.panic_on_violations();
        match self.terminal() {
            Some(Terminal::Complete) => {}
            Some(Terminal::Error(e)) => panic!("expected on_complete, got on_error({e})"),
            None => panic!("expected on_complete, but the stream has not terminated"),
        }
    }

    /// Panic unless the stream failed with an error naming `rule` (for example `"3.9"`).
    pub fn assert_error_rule(&self, rule: &str) {
        self.panic_on_violations();
        match self.terminal() {
            Some(Terminal::Error(e)) => {
                assert_eq!(
                    e.rule(),
                    Some(rule),
                    "expected an error naming rule {rule}, got {e}"
                )
            }
            Some(Terminal::Complete) => {
                panic!("expected on_error naming rule {rule}, got on_complete")
            }
            None => {
                panic!("expected on_error naming rule {rule}, but the stream has not terminated")
            }
        }
    }

    /// Panic unless the stream failed; returns the error.
    pub fn assert_error(&self) -> Error {
        self.panic_on_violations();
        match self.terminal() {
            Some(Terminal::Error(e)) => e,
            Some(Terminal::Complete) => panic!("expected on_error, got on_complete"),
            None => panic!("expected on_error, but the stream has not terminated"),
        }
    }

    /// Panic if the stream terminated.
    pub fn assert_no_terminal(&self) {
        self.panic_on_violations();
        if let Some(terminal) = self.terminal() {
            panic!(
                "expected no terminal signal, got {}",
                terminal_name(&terminal)
            );
        }
    }
}
