//! An asynchronous publisher: `0..len` emitted from a producer thread of its own, only
//! against outstanding demand, parking on a condition variable while there is none.
//! Optionally it pauses before a given item until the test opens a [`Gate`], which
//! lets a test hold a consumer blocked for as long as it likes.
//!
//! Also: how much CPU time a thread has used, read from `/proc` (Linux), to show
//! that a blocked consumer parks instead of spinning.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use weir::demand::UNBOUNDED;
use weir::{Publisher, RawSubscription, Subscriber, Subscription};

/// A latch the producer waits on; [`open`](Gate::open) releases it for good.
#[derive(Clone, Debug, Default)]
pub struct Gate {
    shared: Arc<(Mutex<bool>, Condvar)>,
}

impl Gate {
    /// A closed gate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Open the gate; every waiter, now and later, passes.
    pub fn open(&self) {
        *self.shared.0.lock().unwrap() = true;
        self.shared.1.notify_all();
    }

    /// Block until the gate is open.
    pub fn wait(&self) {
        let mut open = self.shared.0.lock().unwrap();
        while !*open {
            open = self.shared.1.wait(open).unwrap();
        }
    }

    /// Block until the gate is open or `timeout` passed; true if it is open.
    pub fn wait_timeout(&self, timeout: std::time::Duration) -> bool {
        let open = self.shared.0.lock().unwrap();
        let (open, _) = self
            .shared
            .1
            .wait_timeout_while(open, timeout, |open| !*open)
            .unwrap();
        *open
    }
}

/// The publisher: `0..len` from a producer thread.
#[derive(Clone, Debug)]
pub struct ThreadedRange {
    len: u64,
    pause: Option<(u64, Gate)>,
    subscribe_gate: Option<Gate>,
    exited: Gate,
}

impl ThreadedRange {
    /// Emit `0..len` from a new thread per subscriber.
    pub fn new(len: u64) -> Self {
        ThreadedRange {
            len,
            pause: None,
            subscribe_gate: None,
            exited: Gate::new(),
        }
    }

    /// Call `on_subscribe` (on the producer thread) only once `gate` is open.
    pub fn subscribed_after(mut self, gate: Gate) -> Self {
        self.subscribe_gate = Some(gate);
        self
    }

    /// Opened when a producer thread of this publisher (or of a clone) has finished:
    /// after its terminal signal, or after it saw a cancel.
    pub fn exited(&self) -> Gate {
        self.exited.clone()
    }

    /// Before emitting item `at`, wait until `gate` is open.
    pub fn paused_at(mut self, at: u64, gate: Gate) -> Self {
        self.pause = Some((at, gate));
        self
    }
}

#[derive(Default)]
struct Control {
    demand: u64,
    cancelled: bool,
    bad_request: bool,
}

/// Downstream's demand and cancel, and the condvar that wakes the producer thread when
/// they change; also downstream's subscription.
#[derive(Default)]
struct ProducerControl {
    control: Mutex<Control>,
    wake: Condvar,
}

impl ProducerControl {
    fn lock(&self) -> MutexGuard<'_, Control> {
        self.control.lock().unwrap()
    }
}

impl RawSubscription for ProducerControl {
    fn request(&self, n: u64) {
        let mut control = self.lock();
        if n == 0 {
            control.bad_request = true;
        } else {
            control.demand = control.demand.saturating_add(n);
        }
        drop(control);
        self.wake.notify_all();
    }

    fn cancel(&self) {
        self.lock().cancelled = true;
        self.wake.notify_all();
    }
}

/// The largest batch the producer hands over at once.
const BATCH: u64 = 64;

impl Publisher for ThreadedRange {
    type Item = u64;

    fn subscribe<S>(self, mut subscriber: S)
    where
        S: Subscriber<u64> + Send + 'static,
    {
        let shared = Arc::new(ProducerControl::default());
        let exited = self.exited.clone();
        std::thread::spawn(move || {
            self.produce(&mut subscriber, &shared);
            drop(subscriber);
            exited.open();
        });
    }
}

impl ThreadedRange {
    fn produce<S: Subscriber<u64>>(&self, subscriber: &mut S, shared: &Arc<ProducerControl>) {
        if let Some(gate) = &self.subscribe_gate {
            gate.wait();
        }
        subscriber.on_subscribe(Subscription::new(shared.clone()));
        let mut next = 0u64;
        loop {
            if next == self.len {
                subscriber.on_complete();
                return;
            }
            if let Some((at, gate)) = &self.pause {
                if next == *at {
                    gate.wait();
                }
            }
            let mut control = shared.lock();
            while control.demand == 0 && !control.cancelled && !control.bad_request {
                control = shared.wake.wait(control).unwrap();
            }
            if control.cancelled {
                return;
            }
            if control.bad_request {
                drop(control);
                subscriber.on_error(weir::demand::validate(0).unwrap_err());
                return;
            }
            let mut end = self.len;
            if let Some((at, _)) = &self.pause {
                if next < *at {
                    end = end.min(*at);
                }
            }
            let k = control.demand.min(end - next).min(BATCH);
            if control.demand != UNBOUNDED {
                control.demand -= k;
            }
            drop(control);
            let credit = subscriber.on_next_batch(next..next + k);
            next += k;
            if credit > 0 {
                // Batch credit is a request made at the end of the batch.
                let mut control = shared.lock();
                control.demand = control.demand.saturating_add(credit);
            }
        }
    }
}

/// The id of the calling thread, as `/proc/self/task/<id>` names it.
pub fn current_thread_id() -> String {
    let link = std::fs::read_link("/proc/thread-self").expect("Linux /proc/thread-self");
    link.file_name()
        .expect("/proc/thread-self is <pid>/task/<tid>")
        .to_string_lossy()
        .into_owned()
}

/// Nanoseconds of CPU the thread `id` (of this process) has run, from `schedstat`.
pub fn thread_cpu_nanos(id: &str) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{id}/schedstat"))
        .expect("Linux /proc/<pid>/task/<tid>/schedstat");
    stat.split_whitespace()
        .next()
        .and_then(|field| field.parse().ok())
        .expect("schedstat starts with the run time in nanoseconds")
}
