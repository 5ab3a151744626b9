//! The white-box instrumentation: [`WhiteboxProbe`], [`SubscriberPuppet`] and the
//! [`ProbedSubscriber`] wrapper.
//!
//! The white-box suite needs two things from the subscriber under test:
//!
//! 1. **Reports.** The subscriber calls the probe from its signal methods:
//!    [`register_on_subscribe(puppet)`](WhiteboxProbe::register_on_subscribe) once,
//!    then [`register_on_next`](WhiteboxProbe::register_on_next),
//!    [`register_on_error`](WhiteboxProbe::register_on_error) and
//!    [`register_on_complete`](WhiteboxProbe::register_on_complete).
//! 2. **A puppet.** The [`SubscriberPuppet`] it registers lets the kit make it request
//!    (`trigger_request(n)`: it must *eventually* request at least `n` more, possibly in
//!    pieces) and cancel (`signal_cancel`).
//!
//! A subscriber you cannot edit (a closed type, or weir's sinks) is instrumented from
//! outside with [`ProbedSubscriber`], which forwards every signal to the inner
//! subscriber and then reports it. Its puppet is either the [`Subscription`] itself
//! (`trigger_request` requests directly; right for a subscriber that only requests
//! when told) or one you pass, such as a [`SinkHandle`], whose `trigger_request` does
//! nothing (a sink requests by itself, from its prefetch window) and whose
//! `signal_cancel` cancels the sink.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use super::env::{lock, wait_for};
use super::TestEnv;
use crate::sink::SinkHandle;
use crate::{Error, Subscriber, Subscription};

/// How the kit drives a subscriber under white-box test.
pub trait SubscriberPuppet: Send + Sync {
    /// The subscriber must eventually request at least `n` more elements.
    fn trigger_request(&self, n: u64);
    /// The subscriber must cancel its subscription.
    fn signal_cancel(&self);
}

/// The plain puppet: request and cancel directly.
impl SubscriberPuppet for Subscription {
    fn trigger_request(&self, n: u64) {
        self.request(n);
    }
    fn signal_cancel(&self) {
        self.cancel();
    }
}

/// A sink's puppet: sinks request by themselves (their prefetch window), so
/// `trigger_request` does nothing; `signal_cancel` is [`SinkHandle::cancel`].
impl<R: Send> SubscriberPuppet for SinkHandle<R> {
    fn trigger_request(&self, _n: u64) {}
    fn signal_cancel(&self) {
        self.cancel();
    }
}

/// What the subscriber under test reports to. Cheap to clone.
pub struct WhiteboxProbe<T> {
    shared: Arc<ProbeShared<T>>,
}

impl<T> Clone for WhiteboxProbe<T> {
    fn clone(&self) -> Self {
        WhiteboxProbe {
            shared: self.shared.clone(),
        }
    }
}

impl<T> fmt::Debug for WhiteboxProbe<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = lock(&self.shared.state);
        f.debug_struct("WhiteboxProbe")
            .field("registered", &state.puppet.is_some())
            .field("pending", &state.events.len())
            .finish()
    }
}

struct ProbeShared<T> {
    env: TestEnv,
    state: Mutex<ProbeState<T>>,
    changed: Condvar,
}

struct ProbeState<T> {
    puppet: Option<Arc<dyn SubscriberPuppet>>,
    /// Reports not yet expected by the test, in order.
    events: VecDeque<Event<T>>,
    terminated: bool,
}

enum Event<T> {
    Next(T),
    Error(Error),
    Complete,
}

impl<T> WhiteboxProbe<T> {
    pub(crate) fn new(env: &TestEnv) -> Self {
        WhiteboxProbe {
            shared: Arc::new(ProbeShared {
                env: env.clone(),
                state: Mutex::new(ProbeState {
                    puppet: None,
                    events: VecDeque::new(),
                    terminated: false,
                }),
                changed: Condvar::new(),
            }),
        }
    }

    /// Report `on_subscribe` and hand over the puppet. Only the first call counts.
    pub fn register_on_subscribe(&self, puppet: impl SubscriberPuppet + 'static) {
        let mut state = lock(&self.shared.state);
        if state.puppet.is_none() {
            state.puppet = Some(Arc::new(puppet));
        }
        drop(state);
        self.shared.changed.notify_all();
    }

    /// Report an `on_next(item)`.
    pub fn register_on_next(&self, item: T) {
        self.push(Event::Next(item), "on_next");
    }

    /// Report an `on_error(error)`.
    pub fn register_on_error(&self, error: Error) {
        self.push(Event::Error(error), "on_error");
    }

    /// Report an `on_complete`.
    pub fn register_on_complete(&self) {
        self.push(Event::Complete, "on_complete");
    }

    fn push(&self, event: Event<T>, signal: &str) {
        let mut state = lock(&self.shared.state);
        if state.terminated {
            self.shared.env.flop(format!(
                "rule 1.7: the subscriber reported {signal} after a terminal signal"
            ));
        }
        state.terminated |= !matches!(event, Event::Next(_));
        state.events.push_back(event);
        drop(state);
        self.shared.changed.notify_all();
    }

    fn wait(
        &self,
        timeout: Duration,
        done: impl Fn(&ProbeState<T>) -> bool,
    ) -> MutexGuard<'_, ProbeState<T>> {
        wait_for(&self.shared.state, &self.shared.changed, timeout, done)
    }

    /// The registered puppet, within `timeout`.
    pub(crate) fn puppet(&self, timeout: Duration) -> Result<Arc<dyn SubscriberPuppet>, String> {
        self.wait(timeout, |s| s.puppet.is_some()).puppet.clone().ok_or_else(|| {
            format!("the subscriber did not call WhiteboxProbe::register_on_subscribe within {timeout:?}")
        })
    }

    fn next_event(&self, timeout: Duration, expected: &str) -> Result<Event<T>, String> {
        self.wait(timeout, |s| !s.events.is_empty())
            .events
            .pop_front()
            .ok_or_else(|| format!("the subscriber did not report {expected} within {timeout:?}"))
    }

    /// The next report must be `on_next(item)`.
    pub(crate) fn expect_next(&self, item: &T, timeout: Duration) -> Result<(), String>
    where
        T: PartialEq + fmt::Debug,
    {
        match self.next_event(timeout, &format!("on_next({item:?})"))? {
            Event::Next(got) if got == *item => Ok(()),
            Event::Next(got) => Err(format!(
                "expected on_next({item:?}), the subscriber reported on_next({got:?})"
            )),
            other => Err(format!(
                "expected on_next({item:?}), the subscriber reported {}",
                name(&other)
            )),
        }
    }

    /// The next report must be `on_error` with this very error (`Error::ptr_eq`).
    pub(crate) fn expect_error(&self, error: &Error, timeout: Duration) -> Result<(), String> {
        match self.next_event(timeout, "on_error")? {
            Event::Error(got) if Error::ptr_eq(&got, error) => Ok(()),
            Event::Error(got) => Err(format!(
                "expected on_error({error}), got a different error: {got}"
            )),
            other => Err(format!(
                "expected on_error, the subscriber reported {}",
                name(&other)
            )),
        }
    }

    /// The next report must be `on_complete`.
    pub(crate) fn expect_completion(&self, timeout: Duration) -> Result<(), String> {
        match self.next_event(timeout, "on_complete")? {
            Event::Complete => Ok(()),
            other => Err(format!(
                "expected on_complete, the subscriber reported {}",
                name(&other)
            )),
        }
    }

    /// Nothing may be reported (beyond what was expected) during `window`.
    pub(crate) fn expect_none(&self, window: Duration) -> Result<(), String> {
        let state = self.wait(window, |s| !s.events.is_empty());
        match state.events.front() {
            None => Ok(()),
            Some(event) => Err(format!(
                "expected no signal, the subscriber reported {}",
                name(event)
            )),
        }
    }
}

fn name<T>(event: &Event<T>) -> String {
    match event {
        Event::Next(_) => "on_next".into(),
        Event::Error(e) => format!("on_error({e})"),
        Event::Complete => "on_complete".into(),
    }
}

/// Instruments a subscriber from outside: forwards each signal to `inner`, then reports
/// it to the probe. See the module docs for the choice of puppet.
pub struct ProbedSubscriber<T, S> {
    inner: S,
    probe: WhiteboxProbe<T>,
    puppet: Option<Arc<dyn SubscriberPuppet>>,
}

impl<T, S> fmt::Debug for ProbedSubscriber<T, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProbedSubscriber")
            .field("probe", &self.probe)
            .finish_non_exhaustive()
    }
}

impl<T, S: Subscriber<T>> ProbedSubscriber<T, S> {
    /// Instrument `inner`; the puppet is the subscription it receives.
    pub fn new(inner: S, probe: WhiteboxProbe<T>) -> Self {
        ProbedSubscriber {
            inner,
            probe,
            puppet: None,
        }
    }

    /// Instrument `inner` with an explicit puppet (for example the [`SinkHandle`] of
    /// a sink).
    pub fn with_puppet(
        inner: S,
        probe: WhiteboxProbe<T>,
        puppet: impl SubscriberPuppet + 'static,
    ) -> Self {
        ProbedSubscriber {
            inner,
            probe,
            puppet: Some(Arc::new(puppet)),
        }
    }
}

/// Lets an `Arc<dyn SubscriberPuppet>` be registered.
struct SharedPuppet(Arc<dyn SubscriberPuppet>);

impl SubscriberPuppet for SharedPuppet {
    fn trigger_request(&self, n: u64) {
        self.0.trigger_request(n);
    }
    fn signal_cancel(&self) {
        self.0.signal_cancel();
    }
}

impl<T: Clone, S: Subscriber<T>> Subscriber<T> for ProbedSubscriber<T, S> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        self.inner.on_subscribe(subscription.clone());
        match &self.puppet {
            Some(puppet) => self
                .probe
                .register_on_subscribe(SharedPuppet(puppet.clone())),
            None => self.probe.register_on_subscribe(subscription),
        }
    }

    fn on_next(&mut self, item: T) {
        self.inner.on_next(item.clone());
        self.probe.register_on_next(item);
    }

    fn on_error(&mut self, error: Error) {
        self.inner.on_error(error.clone());
        self.probe.register_on_error(error);
    }

    fn on_complete(&mut self) {
        self.inner.on_complete();
        self.probe.register_on_complete();
    }
}
