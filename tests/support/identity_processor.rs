//! A small bounded-buffer identity processor for the processor conformance tests.
//!
//! One subscriber only (a second is rejected with `on_error`), no multicast.
//!
//! * Demand: downstream requests are recorded as `wanted` and forwarded upstream only
//!   while the buffer has room: `buffered + outstanding upstream <= capacity`. So the
//!   buffer can never hold more than `capacity` items.
//! * Delivery: every downstream signal is sent by the owner of a `Wip` drain loop, so
//!   signals are serial (1.3) and a `request` from inside `on_next` only re-enters the
//!   loop's counter (3.3). The downstream subscriber sits in its own mutex that only
//!   the loop owner locks.
//! * Errors pass on at once, dropping buffered items (4.2); completion waits for the
//!   buffer to drain. `request(0)` fails downstream with the rule 3.9 error and cancels
//!   upstream. A downstream cancel cancels upstream and drops the subscriber (3.13).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use weir::demand::UNBOUNDED;
use weir::drain::Wip;
use weir::{Error, Processor, Publisher, RawSubscription, Subscriber, Subscription};

/// A cloneable handle: one clone subscribes upstream, another is subscribed to.
pub struct Identity<T> {
    shared: Arc<IdentityCore<T>>,
}

impl<T> Clone for Identity<T> {
    fn clone(&self) -> Self {
        Identity {
            shared: self.shared.clone(),
        }
    }
}

type Downstream<T> = Box<dyn Subscriber<T> + Send>;

/// The processor's state, shared by both handles.
struct IdentityCore<T> {
    capacity: u64,
    wip: Wip,
    state: Mutex<State<T>>,
    downstream: Mutex<Option<Downstream<T>>>,
}

struct State<T> {
    upstream: Option<Subscription>,
    /// Requested downstream, not yet forwarded upstream.
    wanted: u64,
    /// Requested upstream, not yet received.
    outstanding: u64,
    /// Requested downstream, not yet delivered.
    demand: u64,
    buffer: VecDeque<T>,
    terminal: Option<Result<(), Error>>,
    bad_request: bool,
    cancelled: bool,
    subscribed: bool,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl<T: Send + 'static> Identity<T> {
    /// A processor buffering at most `capacity` items.
    pub fn new(capacity: usize) -> Self {
        Identity {
            shared: Arc::new(IdentityCore {
                capacity: capacity.max(1) as u64,
                wip: Wip::new(),
                state: Mutex::new(State {
                    upstream: None,
                    wanted: 0,
                    outstanding: 0,
                    demand: 0,
                    buffer: VecDeque::new(),
                    terminal: None,
                    bad_request: false,
                    cancelled: false,
                    subscribed: false,
                }),
                downstream: Mutex::new(None),
            }),
        }
    }
}

impl<T: Send + 'static> IdentityCore<T> {
    /// Forward as much wanted demand upstream as the buffer has room for.
    fn replenish(&self) {
        let mut state = lock(&self.state);
        let Some(upstream) = state.upstream.clone() else {
            return;
        };
        if state.cancelled || state.terminal.is_some() {
            return;
        }
        let room = self
            .capacity
            .saturating_sub(state.buffer.len() as u64 + state.outstanding);
        let n = room.min(state.wanted);
        if n == 0 {
            return;
        }
        if state.wanted != UNBOUNDED {
            state.wanted -= n;
        }
        state.outstanding += n;
        drop(state);
        upstream.request(n);
    }

    fn drain(&self) {
        self.wip.drain(|| self.pass());
    }

    /// One pass of the drain loop: deliver what demand allows, then any terminal signal.
    fn pass(&self) {
        let mut slot = lock(&self.downstream);
        let Some(downstream) = slot.as_mut() else {
            return;
        };
        loop {
            let mut state = lock(&self.state);
            if state.cancelled {
                state.buffer.clear();
                drop(state);
                *slot = None;
                return;
            }
            if state.bad_request {
                let upstream = state.upstream.take();
                state.buffer.clear();
                state.cancelled = true;
                drop(state);
                if let Some(upstream) = upstream {
                    upstream.cancel();
                }
                downstream.on_error(weir::demand::validate(0).unwrap_err());
                *slot = None;
                return;
            }
            if let Some(Err(error)) = &state.terminal {
                let error = error.clone();
                state.buffer.clear();
                drop(state);
                downstream.on_error(error);
                *slot = None;
                return;
            }
            if state.demand > 0 {
                if let Some(item) = state.buffer.pop_front() {
                    if state.demand != UNBOUNDED {
                        state.demand -= 1;
                    }
                    drop(state);
                    downstream.on_next(item);
                    self.replenish();
                    continue;
                }
            }
            if state.buffer.is_empty() && matches!(state.terminal, Some(Ok(()))) {
                drop(state);
                downstream.on_complete();
                *slot = None;
            }
            return;
        }
    }
}

impl<T: Send + 'static> Subscriber<T> for Identity<T> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        let mut state = lock(&self.shared.state);
        if state.upstream.is_some() || state.cancelled || state.terminal.is_some() {
            drop(state);
            subscription.cancel();
            return;
        }
        state.upstream = Some(subscription);
        drop(state);
        self.shared.replenish();
    }

    fn on_next(&mut self, item: T) {
        let mut state = lock(&self.shared.state);
        if state.cancelled || state.terminal.is_some() {
            return;
        }
        state.outstanding = state.outstanding.saturating_sub(1);
        if state.buffer.len() as u64 >= self.shared.capacity {
            // Upstream sent more than was requested: rule 1.1 broken upstream.
            let upstream = state.upstream.take();
            state.terminal = Some(Err(Error::spec_violation(
                "1.1",
                "upstream overflowed the buffer",
            )));
            drop(state);
            if let Some(upstream) = upstream {
                upstream.cancel();
            }
        } else {
            state.buffer.push_back(item);
            drop(state);
        }
        self.shared.drain();
    }

    fn on_error(&mut self, error: Error) {
        let mut state = lock(&self.shared.state);
        if state.terminal.is_none() {
            state.terminal = Some(Err(error));
            state.upstream = None;
        }
        drop(state);
        self.shared.drain();
    }

    fn on_complete(&mut self) {
        let mut state = lock(&self.shared.state);
        if state.terminal.is_none() {
            state.terminal = Some(Ok(()));
            state.upstream = None;
        }
        drop(state);
        self.shared.drain();
    }
}

/// The downstream subscription.
struct Handle<T> {
    shared: Arc<IdentityCore<T>>,
}

impl<T: Send + 'static> RawSubscription for Handle<T> {
    fn request(&self, n: u64) {
        let mut state = lock(&self.shared.state);
        if state.cancelled {
            return;
        }
        if n == 0 {
            state.bad_request = true;
        } else {
            state.demand = state.demand.saturating_add(n);
            state.wanted = state.wanted.saturating_add(n);
        }
        drop(state);
        self.shared.replenish();
        self.shared.drain();
    }

    fn cancel(&self) {
        let mut state = lock(&self.shared.state);
        state.cancelled = true;
        let upstream = state.upstream.take();
        drop(state);
        if let Some(upstream) = upstream {
            upstream.cancel();
        }
        self.shared.drain();
    }
}

impl<T: Send + 'static> Publisher for Identity<T> {
    type Item = T;

    fn subscribe<S: Subscriber<T> + Send + 'static>(self, mut subscriber: S) {
        if std::mem::replace(&mut lock(&self.shared.state).subscribed, true) {
            subscriber.on_subscribe(Subscription::noop());
            subscriber.on_error(Error::msg(
                "this identity processor supports one subscriber",
            ));
            return;
        }
        subscriber.on_subscribe(Subscription::new(Arc::new(Handle {
            shared: self.shared.clone(),
        })));
        *lock(&self.shared.downstream) = Some(Box::new(subscriber));
        self.shared.drain();
    }
}

impl<T: Send + 'static> Processor<T> for Identity<T> {}
