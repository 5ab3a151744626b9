//! The adaptive-limit story: a dependency of 10 workers whose service time rises from
//! 40 ms to 900 ms at 20 s and falls back at 50 s, called in a closed loop (always
//! more items upstream) through a `map_async` stage of 100 slots. With a fixed limit
//! of 100 its queue holds 90 calls: each waits about 8 service times. The gradient
//! limiter keeps about 20 calls in flight, shrinks within seconds when the latency
//! rises (nothing queues) and recovers when it falls. Virtual time: deterministic.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::channel::oneshot;
use weir::limit::{LimitMonitor, Limiter};
use weir::prelude::*;
use weir::runtime::{Scheduler, VirtualTime};

/// A subscriber that asks for everything and keeps nothing.
struct Drain(Arc<Mutex<Option<Subscription>>>);

impl Drain {
    fn new() -> (Self, Arc<Mutex<Option<Subscription>>>) {
        let slot = Arc::new(Mutex::new(None));
        (Drain(slot.clone()), slot)
    }
}

impl<T> Subscriber<T> for Drain {
    fn on_subscribe(&mut self, subscription: Subscription) {
        subscription.request(u64::MAX);
        *self.0.lock().unwrap() = Some(subscription);
    }
    fn on_next(&mut self, _item: T) {}
    fn on_error(&mut self, error: weir::Error) {
        panic!("the story's stage failed: {error}");
    }
    fn on_complete(&mut self) {}
}

/// A dependency with `WORKERS` workers and a FIFO queue in front of them, on
/// virtual time; its service time is set by the test.
struct Dependency {
    vt: VirtualTime,
    state: Mutex<DepState>,
}

struct DepState {
    service: Duration,
    busy: usize,
    queue: VecDeque<(oneshot::Sender<()>, Duration)>,
    /// Total time requests waited in the queue, and how many were served.
    waited: Duration,
    served: u64,
}

const WORKERS: usize = 10;

impl Dependency {
    fn new(vt: &VirtualTime) -> Arc<Self> {
        Arc::new(Dependency {
            vt: vt.clone(),
            state: Mutex::new(DepState {
                service: Duration::from_millis(40),
                busy: 0,
                queue: VecDeque::new(),
                waited: Duration::ZERO,
                served: 0,
            }),
        })
    }

    fn call(self: &Arc<Self>) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        let mut st = self.state.lock().unwrap();
        if st.busy < WORKERS {
            st.busy += 1;
            st.served += 1;
            let service = st.service;
            drop(st);
            self.finish_after(service, tx);
        } else {
            st.queue.push_back((tx, self.vt.elapsed()));
        }
        rx
    }

    fn finish_after(self: &Arc<Self>, service: Duration, tx: oneshot::Sender<()>) {
        let me = self.clone();
        self.vt.schedule_after(
            service,
            Box::new(move || {
                let _ = tx.send(());
                me.next();
            }),
        );
    }

    /// A worker is free: serve the next queued request.
    fn next(self: &Arc<Self>) {
        let mut st = self.state.lock().unwrap();
        match st.queue.pop_front() {
            Some((tx, since)) => {
                let waited = self.vt.elapsed() - since;
                st.waited += waited;
                st.served += 1;
                let service = st.service;
                drop(st);
                self.finish_after(service, tx);
            }
            None => st.busy -= 1,
        }
    }

    /// Mean queueing delay since the last reading, and calls served.
    fn take_figures(&self) -> (Duration, u64) {
        let mut st = self.state.lock().unwrap();
        let served = std::mem::take(&mut st.served);
        let waited = std::mem::take(&mut st.waited);
        (waited / u32::try_from(served.max(1)).unwrap(), served)
    }
}

/// One second of the story: the limit, the mean queueing delay at the
/// dependency, and the calls served.
#[derive(Clone, Copy, Debug)]
pub struct Second {
    /// The limit at the end of the second.
    pub limit: usize,
    /// Mean queueing delay at the dependency.
    pub delay: Duration,
    /// Calls served.
    pub served: u64,
}

/// A closed loop of calls (always more items upstream) through a stage of 100
/// slots with `limiter`, for 90 s: the dependency serves in 40 ms until 20 s,
/// in 900 ms until 50 s, then in 40 ms again.
pub fn story(limiter: impl Limiter + Clone + Sync) -> Vec<Second> {
    let vt = VirtualTime::new();
    let dependency = Dependency::new(&vt);
    let calls = dependency.clone();
    let stage = weir::range(0u64..u64::MAX)
        .map_async_on(vt.clone(), 100, false, move |x| {
            let answer = calls.call();
            async move {
                answer.await.expect("the dependency answers");
                x
            }
        })
        .limit(limiter);
    let monitor: LimitMonitor = stage.limit_monitor();
    let (subscriber, subscription) = Drain::new();
    stage.subscribe(subscriber);
    let mut seconds = Vec::new();
    for second in 1..=90u64 {
        if second == 21 {
            dependency.state.lock().unwrap().service = Duration::from_millis(900);
        }
        if second == 51 {
            dependency.state.lock().unwrap().service = Duration::from_millis(40);
        }
        for _ in 0..100 {
            vt.advance(Duration::from_millis(10));
        }
        let (delay, served) = dependency.take_figures();
        seconds.push(Second {
            limit: monitor.snapshot().limit,
            delay,
            served,
        });
    }
    if let Some(subscription) = subscription.lock().unwrap().take() {
        subscription.cancel();
    }
    vt.advance(Duration::from_secs(1));
    seconds
}
