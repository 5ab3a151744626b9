//! A small multicast identity processor, so the conformance tests that need several
//! subscribers (rule 1.11, and the processor's own multi-subscriber tests) have
//! something to run against.
//!
//! * Every subscriber gets the items that arrive upstream *after* it joined, in order,
//!   each through its own queue of at most `capacity` items.
//! * Upstream demand follows the most demanding subscriber, limited by the room in
//!   the fullest queue: in total, `min(max(joined + requested), min(joined + delivered
//!   + capacity))` items are requested upstream.
//! * One `Wip` drain loop delivers to every subscriber, so each subscriber's signals
//!   are serial. Errors pass on at once (4.2); completion follows each queue's last
//!   item. When every subscriber has cancelled, upstream is cancelled.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use weir::demand::UNBOUNDED;
use weir::drain::Wip;
use weir::{Error, Processor, Publisher, RawSubscription, Subscriber, Subscription};

/// A cloneable handle: one clone subscribes upstream, the others are subscribed to.
pub struct Multicast<T> {
    shared: Arc<MulticastCore<T>>,
}

impl<T> Clone for Multicast<T> {
    fn clone(&self) -> Self {
        Multicast {
            shared: self.shared.clone(),
        }
    }
}

type Downstream<T> = Box<dyn Subscriber<T> + Send>;

/// The processor's state, shared by every handle.
struct MulticastCore<T> {
    capacity: u64,
    wip: Wip,
    state: Mutex<State<T>>,
    /// Indexed like `State::slots`; only the drain loop's owner locks it.
    downstream: Mutex<Vec<Option<Downstream<T>>>>,
}

struct State<T> {
    upstream: Option<Subscription>,
    requested_upstream: u64,
    received: u64,
    terminal: Option<Result<(), Error>>,
    slots: Vec<Slot<T>>,
}

struct Slot<T> {
    joined: u64,
    requested: u64,
    delivered: u64,
    demand: u64,
    queue: VecDeque<T>,
    bad_request: bool,
    /// Cancelled or terminated: takes no more part in demand.
    gone: bool,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl<T: Clone + Send + 'static> Multicast<T> {
    /// A processor whose queues hold at most `capacity` items each.
    pub fn new(capacity: usize) -> Self {
        Multicast {
            shared: Arc::new(MulticastCore {
                capacity: capacity.max(1) as u64,
                wip: Wip::new(),
                state: Mutex::new(State {
                    upstream: None,
                    requested_upstream: 0,
                    received: 0,
                    terminal: None,
                    slots: Vec::new(),
                }),
                downstream: Mutex::new(Vec::new()),
            }),
        }
    }
}

impl<T: Clone + Send + 'static> MulticastCore<T> {
    fn replenish(&self) {
        let mut state = lock(&self.state);
        let Some(upstream) = state.upstream.clone() else {
            return;
        };
        let active = state.slots.iter().filter(|s| !s.gone);
        let want = active
            .clone()
            .map(|s| s.joined.saturating_add(s.requested))
            .max();
        let room = active.map(|s| s.joined + s.delivered + self.capacity).min();
        let (Some(want), Some(room)) = (want, room) else {
            return;
        };
        let n = want.min(room).saturating_sub(state.requested_upstream);
        if n == 0 || state.terminal.is_some() {
            return;
        }
        state.requested_upstream += n;
        drop(state);
        upstream.request(n);
    }

    fn drain(&self) {
        self.wip.drain(|| self.pass());
    }

    fn pass(&self) {
        let mut downstream = lock(&self.downstream);
        let mut progressed = true;
        while progressed {
            progressed = false;
            for (i, entry) in downstream.iter_mut().enumerate() {
                let Some(subscriber) = entry.as_mut() else {
                    continue;
                };
                let mut state = lock(&self.state);
                let terminal = state.terminal.clone();
                let slot = &mut state.slots[i];
                if slot.gone && !slot.bad_request {
                    drop(state);
                    *entry = None;
                } else if slot.bad_request {
                    slot.gone = true;
                    drop(state);
                    subscriber.on_error(weir::demand::validate(0).unwrap_err());
                    *entry = None;
                } else if let Some(Err(error)) = terminal {
                    slot.gone = true;
                    slot.queue.clear();
                    drop(state);
                    subscriber.on_error(error);
                    *entry = None;
                } else if slot.demand > 0 && !slot.queue.is_empty() {
                    let item = slot.queue.pop_front().expect("checked non-empty");
                    if slot.demand != UNBOUNDED {
                        slot.demand -= 1;
                    }
                    slot.delivered += 1;
                    drop(state);
                    subscriber.on_next(item);
                    progressed = true;
                } else if slot.queue.is_empty() && terminal.is_some() {
                    slot.gone = true;
                    drop(state);
                    subscriber.on_complete();
                    *entry = None;
                }
            }
        }
        drop(downstream);
        self.replenish();
    }
}

impl<T: Clone + Send + 'static> Subscriber<T> for Multicast<T> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        let mut state = lock(&self.shared.state);
        if state.upstream.is_some() || state.terminal.is_some() {
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
        if state.terminal.is_some() {
            return;
        }
        state.received += 1;
        for slot in state.slots.iter_mut().filter(|s| !s.gone) {
            slot.queue.push_back(item.clone());
        }
        drop(state);
        self.shared.drain();
    }

    fn on_error(&mut self, error: Error) {
        self.terminate(Err(error));
    }

    fn on_complete(&mut self) {
        self.terminate(Ok(()));
    }
}

impl<T: Clone + Send + 'static> Multicast<T> {
    fn terminate(&self, end: Result<(), Error>) {
        let mut state = lock(&self.shared.state);
        if state.terminal.is_none() {
            state.terminal = Some(end);
            state.upstream = None;
        }
        drop(state);
        self.shared.drain();
    }
}

/// One downstream subscription.
struct Handle<T> {
    shared: Arc<MulticastCore<T>>,
    index: usize,
}

impl<T: Clone + Send + 'static> RawSubscription for Handle<T> {
    fn request(&self, n: u64) {
        let mut state = lock(&self.shared.state);
        let slot = &mut state.slots[self.index];
        if slot.gone {
            return;
        }
        if n == 0 {
            slot.bad_request = true;
        } else {
            slot.requested = slot.requested.saturating_add(n);
            slot.demand = slot.demand.saturating_add(n);
        }
        drop(state);
        self.shared.replenish();
        self.shared.drain();
    }

    fn cancel(&self) {
        let mut state = lock(&self.shared.state);
        state.slots[self.index].gone = true;
        state.slots[self.index].queue.clear();
        let upstream = if state.slots.iter().all(|s| s.gone) {
            state.upstream.take()
        } else {
            None
        };
        drop(state);
        if let Some(upstream) = upstream {
            upstream.cancel();
        }
        self.shared.drain();
    }
}

impl<T: Clone + Send + 'static> Publisher for Multicast<T> {
    type Item = T;

    fn subscribe<S: Subscriber<T> + Send + 'static>(self, mut subscriber: S) {
        let mut state = lock(&self.shared.state);
        let index = state.slots.len();
        let joined = state.received;
        state.slots.push(Slot {
            joined,
            requested: 0,
            delivered: 0,
            demand: 0,
            queue: VecDeque::new(),
            bad_request: false,
            gone: false,
        });
        drop(state);
        subscriber.on_subscribe(Subscription::new(Arc::new(Handle {
            shared: self.shared.clone(),
            index,
        })));
        let mut downstream = lock(&self.shared.downstream);
        if downstream.len() <= index {
            downstream.resize_with(index + 1, || None);
        }
        downstream[index] = Some(Box::new(subscriber));
        drop(downstream);
        self.shared.drain();
    }
}

impl<T: Clone + Send + 'static> Processor<T> for Multicast<T> {}
