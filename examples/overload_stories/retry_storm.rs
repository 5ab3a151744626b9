//! The retry storm (a metastable failure): clients send 1,500 requests/s to a
//! service that handles 2,500/s. For two minutes (60 s to 180 s) the service slows
//! down: each request holds a worker 2.5 times longer, so it handles 1,000/s.
//! Clients give up on an attempt after 1 s and retry, up to 3 times.
//!
//! * **Unprotected**: an unbounded FIFO in front of the service (a channel of ten
//!   million items, no time bounds), every timeout retried. The queue grows, every
//!   attempt waits past its client's timeout, each request becomes four attempts:
//!   the offered load climbs to several times the base, the service spends all its
//!   capacity on requests nobody waits for, and goodput stays at zero long after the
//!   slowdown ends (the backlog of dead attempts outlives it).
//! * **With weir's tools**: a queue sized to 100 ms of drain (250 items, `Reject` when
//!   full), deadlines (an attempt carries its client's timeout; dead attempts are
//!   dropped at the head, never served), CoDel (target 20 ms, interval 100 ms), and a
//!   retry budget of 10 % of first attempts over a sliding 1 s window. Refusals and drops tell the
//!   client at once. The offered load stays within 1.1 times the base, the service
//!   serves live requests throughout, and goodput is back to the base rate as soon as
//!   the slowdown ends.
//!
//! Virtual time, ticks of 10 ms (CoDel's target is two ticks: within a tick, time
//! does not move), 300 s. Deterministic.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use weir::deadline::WithDeadline;
use weir::metrics::{DropHook, Drops};
use weir::queue::{Capacity, TimeBounds};
use weir::retry::RetryBudget;
use weir::runtime::{Scheduler, VirtualTime};
use weir::source::channel::{Admission, ChannelBuilder, ChannelPolicy};
use weir::Publisher;

use super::consumer::{share, Consumer};

/// One second of a run.
#[derive(Clone, Copy, Debug)]
pub struct Second {
    /// The second (1 = the first).
    pub t: u64,
    /// Attempts sent (first attempts and retries).
    pub offered: u64,
    /// Requests answered within their client's timeout.
    pub goodput: u64,
    /// Retries the budget refused.
    pub refused_retries: u64,
    /// Queue depth at the end of the second.
    pub depth: usize,
}

/// Requests per second the clients start.
pub const BASE: u64 = 1_500;
/// When the slowdown starts and ends, in seconds.
pub const SPIKE: (u64, u64) = (60, 180);
const NORMAL: u64 = 2_500;
const SLOW: u64 = 1_000;
const TIMEOUT: Duration = Duration::from_secs(1);
const ATTEMPTS: u8 = 4;
const TICK_MS: u64 = 10;
const SECONDS: u64 = 300;

/// One attempt of a request.
#[derive(Clone, Copy, Debug)]
struct Attempt {
    id: usize,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Pending,
    Answered,
    Failed,
}

/// What the clients know.
struct Clients {
    /// Per attempt: its request, its number (1..=4), its outcome.
    attempts: Vec<(u64, u8, Outcome)>,
    /// Per request: answered yet.
    answered: Vec<bool>,
    /// Attempts in the order their timeouts fire (sent in time order, same timeout).
    timeouts: VecDeque<(Duration, usize)>,
    /// Requests to retry at the next tick, with their next attempt number.
    retry_next: Vec<(u64, u8)>,
}

/// Run 300 s with (`protected`) or without weir's tools.
pub fn run(protected: bool) -> Vec<Second> {
    let clock = VirtualTime::new();
    let failed: Arc<Mutex<Vec<usize>>> = Arc::default();
    let report = failed.clone();
    let hook = DropHook::new(Drops::new()).inspect(move |dropped| {
        if let Some(job) = dropped.take::<WithDeadline<Attempt>>() {
            report.lock().unwrap().push(job.into_inner().id);
        }
    });
    let builder = if protected {
        ChannelBuilder::new(250, ChannelPolicy::Reject).time_bounds(
            TimeBounds::none().codel(Duration::from_millis(20), Duration::from_millis(100)),
        )
    } else {
        ChannelBuilder::new(Capacity::items(10_000_000), ChannelPolicy::Backpressure)
    };
    let admission = if protected {
        Admission::new().deadlines(Duration::from_millis(TICK_MS))
    } else {
        Admission::new()
    };
    let (tx, rx) = builder
        .clock(clock.clone())
        .drop_hook(hook)
        .build_with(admission);
    let monitor = rx.monitor();
    let (consumer, tap) = Consumer::new();
    rx.subscribe(consumer);
    // A window of 1 s: the budget bounds bursts too. Over a 10 s window, the retries
    // earned in calm times would all be spent in the first second of trouble
    // (offered load twice the base for that second).
    let budget = RetryBudget::new(0.1, Duration::from_secs(1), clock.clone());
    let mut clients = Clients {
        attempts: Vec::new(),
        answered: Vec::new(),
        timeouts: VecDeque::new(),
        retry_next: Vec::new(),
    };
    let mut seconds = Vec::new();
    let (mut offered, mut goodput, mut refused) = (0u64, 0u64, 0u64);
    let ticks_per_second = 1_000 / TICK_MS;
    // An attempt failed: retry it at the next tick if attempts are left and (with
    // weir's tools) the budget allows.
    let fail = |clients: &mut Clients, attempt: usize, refused: &mut u64| {
        let (request, number, outcome) = clients.attempts[attempt];
        if outcome != Outcome::Pending {
            return;
        }
        clients.attempts[attempt].2 = Outcome::Failed;
        if number < ATTEMPTS && !clients.answered[request as usize] {
            if !protected || budget.try_retry() {
                clients.retry_next.push((request, number + 1));
            } else {
                *refused += 1;
            }
        }
    };
    for k in 1..=SECONDS * ticks_per_second {
        clock.advance(Duration::from_millis(TICK_MS));
        let now = clock.elapsed();
        // Timeouts that fired.
        while let Some(&(at, attempt)) = clients.timeouts.front() {
            if at >= now {
                break;
            }
            clients.timeouts.pop_front();
            fail(&mut clients, attempt, &mut refused);
        }
        // New requests, then the retries due.
        let mut sends: Vec<(u64, u8)> = std::mem::take(&mut clients.retry_next);
        for _ in 0..share(BASE, k, TICK_MS) {
            let request = clients.answered.len() as u64;
            clients.answered.push(false);
            if protected {
                budget.first_attempt();
            }
            sends.push((request, 1));
        }
        for (request, number) in sends {
            let id = clients.attempts.len();
            clients.attempts.push((request, number, Outcome::Pending));
            clients.timeouts.push_back((now + TIMEOUT, id));
            offered += 1;
            let job = WithDeadline::within(Attempt { id }, TIMEOUT, &clock);
            if tx.try_send(job).is_err() {
                fail(&mut clients, id, &mut refused);
            }
        }
        // The service takes its share of the tick and answers.
        let second = k.div_ceil(ticks_per_second);
        let capacity = if (SPIKE.0 + 1..=SPIKE.1).contains(&second) {
            SLOW
        } else {
            NORMAL
        };
        tap.serve(share(capacity, k, TICK_MS));
        for job in tap.take() {
            let live = !job.is_expired_at(clock.now());
            let Attempt { id } = job.into_inner();
            let (request, _, outcome) = clients.attempts[id];
            if live && outcome == Outcome::Pending && !clients.answered[request as usize] {
                clients.attempts[id].2 = Outcome::Answered;
                clients.answered[request as usize] = true;
                goodput += 1;
            }
        }
        // Attempts the queue dropped (CoDel, deadline): the client hears at once.
        let dropped = std::mem::take(&mut *failed.lock().unwrap());
        for attempt in dropped {
            fail(&mut clients, attempt, &mut refused);
        }
        if k % ticks_per_second == 0 {
            seconds.push(Second {
                t: second,
                offered: std::mem::take(&mut offered),
                goodput: std::mem::take(&mut goodput),
                refused_retries: std::mem::take(&mut refused),
                depth: monitor.snapshot().depth,
            });
        }
    }
    seconds
}
