//! The scenario both implementations run, and what is measured while they run it.
//!
//! One server, one client, one TCP connection, `streams` request-streams on it. The
//! server's stream `i` emits items `0, 1, 2, …` (each `item_size` bytes, the sequence
//! number first) for as long as it is asked to. The client's consumer of each stream
//! pulls items as fast as it can, except the consumer of stream `stalled`, which stops
//! pulling from `stall_at` to `stall_at + stall_for`. After `run_for` every consumer
//! drops its stream.
//!
//! The [`Meter`] counts, per stream, the items the server produced (`sent`) and the
//! items the consumer pulled (`received`), and checks that the consumer saw the
//! sequence numbers in order, each once. [`watch`] samples it: the backlog (`sent −
//! received`: what is in flight or buffered between the server's publisher and the
//! consumer), its maximum, and the items each stream received in each second.

use std::future::Future;
use std::sync::atomic::{
    AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a side's `run` ends.
pub type Outcome = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// Runs one side (`side(scenario, meter)`, spawned on the current tokio runtime)
/// while [`watch`] samples its meter and calls `each_second`; returns what the
/// watch saw and how the side ended.
pub async fn measure<F>(
    scenario: Scenario,
    side: impl FnOnce(Scenario, Arc<Meter>) -> F,
    each_second: impl FnMut(usize, &[u64]) + Send + 'static,
) -> (Report, Outcome)
where
    F: Future<Output = Outcome> + Send + 'static,
{
    let meter = Arc::new(Meter::new(scenario.streams));
    let watcher = {
        let meter = meter.clone();
        tokio::spawn(async move { watch(&meter, scenario, each_second).await })
    };
    let outcome = match tokio::spawn(side(scenario, meter)).await {
        Ok(outcome) => outcome,
        Err(error) => Err(format!("the side's task: {error}").into()),
    };
    (watcher.await.expect("the watcher"), outcome)
}

/// What to run.
#[derive(Clone, Copy, Debug)]
pub struct Scenario {
    /// Streams on the one connection.
    pub streams: usize,
    /// The stream whose consumer stalls.
    pub stalled: usize,
    /// When the stall starts, from the start of the run.
    pub stall_at: Duration,
    /// How long it lasts.
    pub stall_for: Duration,
    /// How long the whole run lasts.
    pub run_for: Duration,
    /// Bytes of each item's data.
    pub item_size: usize,
}

impl Scenario {
    /// Eight streams, stream 0 stalls from 2 s to 5 s, the run lasts 7 s, items of 32
    /// bytes.
    pub const DEFAULT: Scenario = Scenario {
        streams: 8,
        stalled: 0,
        stall_at: Duration::from_secs(2),
        stall_for: Duration::from_secs(3),
        run_for: Duration::from_secs(7),
        item_size: 32,
    };

    /// When the stall ends, from the start of the run.
    pub fn stall_end(&self) -> Duration {
        self.stall_at + self.stall_for
    }

    /// How long the consumer of `stream` must wait before its next pull, `elapsed`
    /// into the run (zero when it may pull now).
    pub fn stall_left(&self, stream: usize, elapsed: Duration) -> Duration {
        if stream == self.stalled && elapsed >= self.stall_at && elapsed < self.stall_end() {
            self.stall_end() - elapsed
        } else {
            Duration::ZERO
        }
    }
}

/// Item `seq` of `size` bytes (at least 8): the sequence number, big-endian, then
/// zeros.
pub fn item(seq: u64, size: usize) -> Vec<u8> {
    let mut data = vec![0; size.max(8)];
    data[..8].copy_from_slice(&seq.to_be_bytes());
    data
}

/// The sequence number of an item made by [`item`].
pub fn seq_of(data: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(data.get(..8)?.try_into().ok()?))
}

/// Counters of one run, shared by the server's publishers, the consumers and
/// [`watch`].
pub struct Meter {
    start: Instant,
    sent: Vec<AtomicU64>,
    received: Vec<AtomicU64>,
    misordered: Vec<AtomicU64>,
}

impl Meter {
    /// Counters for `streams` streams; the run's clock starts now.
    pub fn new(streams: usize) -> Self {
        let counters = || (0..streams).map(|_| AtomicU64::new(0)).collect();
        Meter {
            start: Instant::now(),
            sent: counters(),
            received: counters(),
            misordered: counters(),
        }
    }

    /// Time since the run started.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// The instant the run started.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// The server produced its next item on `stream`; returns its sequence number.
    pub fn sent(&self, stream: usize) -> u64 {
        // Release: pairs with the Acquire in `backlog`: the pulls whose credit let
        // this item be produced happened before it, and a sample that sees the item
        // sees them too.
        self.sent[stream].fetch_add(1, Release)
    }

    /// The consumer of `stream` pulled `data`: counted, and checked against the
    /// sequence number expected next (the count so far).
    pub fn received(&self, stream: usize, data: &[u8]) {
        let expected = self.received[stream].fetch_add(1, Relaxed);
        if seq_of(data) != Some(expected) {
            self.misordered[stream].fetch_add(1, Relaxed);
        }
    }

    /// Items received on `stream` so far.
    pub fn received_on(&self, stream: usize) -> u64 {
        self.received[stream].load(Relaxed)
    }

    /// `(sent, received)` of `stream`, in that order: both only grow, so an item
    /// produced and pulled between the two reads is not counted as held (a sample
    /// never overstates the backlog, which a bound checked against it needs).
    fn counts(&self, stream: usize) -> (u64, u64) {
        let sent = self.sent[stream].load(Acquire);
        (sent, self.received[stream].load(Relaxed))
    }
}

/// What [`watch`] saw.
#[derive(Debug)]
pub struct Report {
    /// The largest backlog (`sent − received`) sampled, per stream.
    pub max_backlog: Vec<u64>,
    /// The sample that found it, per stream: `sent`, `received`, and when.
    pub worst: Vec<(u64, u64, Duration)>,
    /// Items received per stream before the stall (from 0.5 s on: the first half
    /// second is warm-up).
    pub before_stall: Vec<u64>,
    /// Items received per stream during the stall.
    pub during_stall: Vec<u64>,
    /// Items received per stream after the stall.
    pub after_stall: Vec<u64>,
    /// Items received per stream in all.
    pub received: Vec<u64>,
    /// Items produced per stream in all.
    pub sent: Vec<u64>,
    /// Items that arrived out of order (or twice), per stream.
    pub misordered: Vec<u64>,
    /// Length of the before-stall window.
    pub before_window: Duration,
    /// Length of the stall.
    pub stall_window: Duration,
}

/// How often [`watch`] samples the backlog.
const SAMPLE: Duration = Duration::from_millis(5);

/// Samples `meter` until `scenario.run_for` has passed since the meter's start,
/// calling `each_second(second, received)` at the end of each whole second with the
/// items each stream received in it.
pub async fn watch(
    meter: &Meter,
    scenario: Scenario,
    mut each_second: impl FnMut(usize, &[u64]),
) -> Report {
    let n = scenario.streams;
    let snapshot = |meter: &Meter| (0..n).map(|s| meter.received_on(s)).collect::<Vec<_>>();
    let warm = Duration::from_millis(500).min(scenario.stall_at);
    let mut max_backlog = vec![0; n];
    let mut worst = vec![(0, 0, Duration::ZERO); n];
    let mut at_warm = None;
    let mut at_stall = None;
    let mut at_end = None;
    let mut next_second = Duration::from_secs(1);
    let mut last_second = vec![0; n];
    let mut second = 0;
    let (sent, at_run_end) = loop {
        let elapsed = meter.elapsed();
        for (s, max) in max_backlog.iter_mut().enumerate() {
            let (sent, received) = meter.counts(s);
            let backlog = sent.saturating_sub(received);
            if backlog > *max {
                *max = backlog;
                worst[s] = (sent, received, elapsed);
            }
        }
        let now = snapshot(meter);
        if at_warm.is_none() && elapsed >= warm {
            at_warm = Some((elapsed, now.clone()));
        }
        if at_stall.is_none() && elapsed >= scenario.stall_at {
            at_stall = Some((elapsed, now.clone()));
        }
        if at_end.is_none() && elapsed >= scenario.stall_end() {
            at_end = Some((elapsed, now.clone()));
        }
        if elapsed >= next_second {
            let counts: Vec<u64> = now.iter().zip(&last_second).map(|(a, b)| a - b).collect();
            second += 1;
            each_second(second, &counts);
            last_second = now.clone();
            next_second += Duration::from_secs(1);
        }
        if elapsed >= scenario.run_for {
            // The totals: `sent` read before `received`, as in `backlog`.
            let sent: Vec<u64> = (0..n).map(|s| meter.sent[s].load(Relaxed)).collect();
            break (sent, snapshot(meter));
        }
        tokio::time::sleep(SAMPLE).await;
    };
    let (t_warm, at_warm) = at_warm.expect("sampled past the warm-up");
    let (t_stall, at_stall) = at_stall.expect("sampled past the stall's start");
    let (t_end, at_end) = at_end.expect("sampled past the stall's end");
    let minus = |a: &[u64], b: &[u64]| a.iter().zip(b).map(|(a, b)| a - b).collect::<Vec<_>>();
    Report {
        max_backlog,
        worst,
        before_stall: minus(&at_stall, &at_warm),
        during_stall: minus(&at_end, &at_stall),
        after_stall: minus(&at_run_end, &at_end),
        sent,
        received: at_run_end,
        misordered: (0..n).map(|s| meter.misordered[s].load(Relaxed)).collect(),
        before_window: t_stall - t_warm,
        stall_window: t_end - t_stall,
    }
}

impl Report {
    /// The sum of `counts` (one of the per-stream fields) over the healthy streams.
    pub fn healthy(&self, counts: &[u64], scenario: &Scenario) -> u64 {
        counts
            .iter()
            .enumerate()
            .filter(|(s, _)| *s != scenario.stalled)
            .map(|(_, c)| c)
            .sum()
    }

    /// The healthy streams' items per second during the stall over their items per
    /// second before it (all fast).
    pub fn healthy_ratio(&self, scenario: &Scenario) -> f64 {
        let healthy = |counts: &[u64]| self.healthy(counts, scenario) as f64;
        let before = healthy(&self.before_stall) / self.before_window.as_secs_f64();
        let during = healthy(&self.during_stall) / self.stall_window.as_secs_f64();
        if before == 0.0 {
            0.0
        } else {
            during / before
        }
    }
}
