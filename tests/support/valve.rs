//! A source whose items arrive when the *test* says so, not when they are requested:
//! `0..n`, `k` more each time [`ValveHandle::release`] is called. Upstream demand is
//! still honoured (a release beyond it waits for the next request), but a lossy stage
//! requests `UNBOUNDED`, so for it arrival and downstream demand are two independent
//! schedules: exactly what a lossy proptest needs.
//!
//! [`mirrored`] closes the valve loop for the conformance kit: every request the kit
//! makes downstream of the stage releases the same number of items upstream of it, so
//! an item only ever arrives while downstream has demand for it, and a lossy stage
//! drops nothing. That is the setting in which the TCK's exact counts apply.
//!
//! Releases, requests and cancels may come from any thread and re-entrantly; emission
//! runs in one `drain::Wip` loop.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use weir::demand::{self, AtomicDemand};
use weir::drain::Wip;
use weir::{Error, Publisher, RawSubscription, Subscriber, Subscription};

const CANCELLED: u8 = 1;
const BAD_REQUEST: u8 = 2;

type Downstream = Box<dyn Subscriber<u64> + Send>;

struct Valve {
    /// Items the test let through, not yet emitted.
    released: AtomicDemand,
    /// What the subscriber requested, not yet used.
    requested: AtomicDemand,
    wip: Wip,
    flags: AtomicU8,
    /// (next item, subscriber); `None` after a terminal signal or cancel.
    state: Mutex<Option<(u64, Downstream)>>,
    len: u64,
}

impl Valve {
    fn pass(&self) {
        let mut state = self.state.lock().unwrap();
        let Some((next, subscriber)) = state.as_mut() else {
            return;
        };
        let flags = self.flags.load(Ordering::SeqCst);
        if flags & CANCELLED != 0 {
            *state = None;
            return;
        }
        if flags & BAD_REQUEST != 0 {
            subscriber.on_error(demand::validate(0).unwrap_err());
            *state = None;
            return;
        }
        while *next < self.len && self.released.get() > 0 && self.requested.get() > 0 {
            self.released.produced(1);
            self.requested.produced(1);
            *next += 1;
            subscriber.on_next(*next - 1);
            if self.flags.load(Ordering::SeqCst) != 0 {
                // Cancelled or a bad request inside on_next: the next pass handles it.
                return;
            }
        }
        if *next == self.len {
            subscriber.on_complete();
            *state = None;
        }
    }
}

impl RawSubscription for Valve {
    fn request(&self, n: u64) {
        match demand::validate(n) {
            Ok(n) => {
                self.requested.add(n);
            }
            Err(_) => {
                self.flags.fetch_or(BAD_REQUEST, Ordering::SeqCst);
            }
        }
        self.wip.drain(|| self.pass());
    }

    fn cancel(&self) {
        self.flags.fetch_or(CANCELLED, Ordering::SeqCst);
        self.wip.drain(|| self.pass());
    }
}

/// The test's side of a valve: let items through.
#[derive(Clone)]
pub struct ValveHandle {
    valve: Arc<Valve>,
}

impl ValveHandle {
    /// Let `k` more items arrive (as soon as upstream demand allows).
    pub fn release(&self, k: u64) {
        self.valve.released.add(k);
        self.valve.wip.drain(|| self.valve.pass());
    }
}

/// The valve as a publisher (subscribe it once).
pub struct ValveSource {
    valve: Arc<Valve>,
}

/// A valve over `0..len`: the publisher and the handle that releases its items.
pub fn valve(len: u64) -> (ValveSource, ValveHandle) {
    let valve = Arc::new(Valve {
        released: AtomicDemand::new(),
        requested: AtomicDemand::new(),
        wip: Wip::new(),
        flags: AtomicU8::new(0),
        state: Mutex::new(None),
        len,
    });
    (
        ValveSource {
            valve: valve.clone(),
        },
        ValveHandle { valve },
    )
}

impl Publisher for ValveSource {
    type Item = u64;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<u64> + Send + 'static,
    {
        let valve = self.valve;
        // Own the loop while on_subscribe runs, so nothing is emitted before it ends.
        assert!(valve.wip.enter());
        let mut subscriber: Downstream = Box::new(subscriber);
        subscriber.on_subscribe(Subscription::new(valve.clone()));
        *valve.state.lock().unwrap() = Some((0, subscriber));
        valve.wip.run(|| valve.pass());
    }
}

/// `build(valve over 0..len)`, where every request made on the outer subscription
/// also releases that many items into the valve (after passing the request on).
pub fn mirrored<F, P>(len: u64, build: F) -> Mirrored<F>
where
    F: FnOnce(ValveSource) -> P,
    P: Publisher<Item = u64>,
{
    Mirrored { len, build }
}

/// The publisher built by [`mirrored`]; `Clone` when the builder is.
#[derive(Clone)]
pub struct Mirrored<F> {
    len: u64,
    build: F,
}

impl<F, P> Publisher for Mirrored<F>
where
    F: FnOnce(ValveSource) -> P,
    P: Publisher<Item = u64>,
{
    type Item = u64;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<u64> + Send + 'static,
    {
        let (source, handle) = valve(self.len);
        (self.build)(source).subscribe(Outer {
            downstream: subscriber,
            handle,
        });
    }
}

struct Outer<S> {
    downstream: S,
    handle: ValveHandle,
}

struct Release {
    inner: Subscription,
    handle: ValveHandle,
}

impl RawSubscription for Release {
    fn request(&self, n: u64) {
        self.inner.request(n);
        if n > 0 {
            self.handle.release(n);
        }
    }

    fn cancel(&self) {
        self.inner.cancel();
    }
}

impl<S: Subscriber<u64>> Subscriber<u64> for Outer<S> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        self.downstream
            .on_subscribe(Subscription::new(Arc::new(Release {
                inner: subscription,
                handle: self.handle.clone(),
            })));
    }

    fn on_next(&mut self, item: u64) {
        self.downstream.on_next(item);
    }

    fn on_error(&mut self, error: Error) {
        self.downstream.on_error(error);
    }

    fn on_complete(&mut self) {
        self.downstream.on_complete();
    }

    fn drop_hook(&self) -> Option<weir::metrics::DropHook> {
        self.downstream.drop_hook()
    }
}
