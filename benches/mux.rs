//! `mux/*`: credit multiplexing ([`weir::mux`]) against its peers, side by side in one
//! run. Run with `cargo bench --bench mux`.
//!
//! Every mux is `E` = 32 exclusive units per channel, `S` = 128 shared, `C` = 32,
//! quantum 16, built fresh for each run over two pools of one thread each (the
//! worker on the sending pool; the lane's drain, the demultiplexer and every
//! channel's subscriber on the receiving pool). Channel `c` of `K` carries
//! `range(c·N/K .. (c+1)·N/K)`, `N` = 2^20 items in all. Every run checks its sums
//! (and counts), panics with the mux's stats if a result is 60 s late (a hang), and
//! afterwards, untimed, checks that every channel closed and all credit came back
//! (`high_water ≤ Σ E + S` too).
//!
//! The weir side is phrased two ways, to show the figures do not hang on one
//! phrasing:
//!
//! * `fold`: `range(..).via(&mux, c).fold(0, +)` per channel (the fold asks for 256
//!   at a time, 75% rule), waited on through its handle.
//! * `open`: `mux.channel(c).open()`, `range(..).subscribe(sink)` and
//!   `source.subscribe(Count)`, a hand-written subscriber that asks for unbounded
//!   demand once and counts and sums each batch, reporting on completion through a
//!   crossbeam channel.
//!
//! Cases:
//!
//! 1. `all_fast`, K ∈ {2, 16, 256}: aggregate items/s of the K channels, against
//!    `crossbeam_rr`: K independent `crossbeam_channel::bounded(E)` channels with the
//!    same two busy threads as the mux (not K producer threads, which on two vCPUs
//!    would measure the OS scheduler): one producer thread sweeps the channels,
//!    `try_send`ing up to a quantum (16) into each, and the bench thread sweeps them,
//!    `try_recv`ing each dry; a sweep that moves nothing yields.
//! 2. `stall`, K ∈ {8, 16}: channel 0's subscriber (`Holder`) asks for 10 items and
//!    never again (it is cancelled after the run); the K − 1 others run as in case 1.
//!    The rate is the healthy channels' items over the time until all of them
//!    completed, and the *retention* is that rate ÷ the all-fast rate for the same K
//!    and phrasing, from the same round. The peer is `naive`: a producer thread
//!    sweeping the channels into one `bounded(K·E + S)` FIFO of `(channel, item)`
//!    (the mux's whole credit), a dispatcher thread moving each item into its
//!    channel's `bounded(32)` queue with a blocking `send`, and the bench thread
//!    sweeping the queues (three busy threads, one more than the mux). With the
//!    stalled queue full the dispatcher blocks and every channel stops, so a run
//!    stops after [`NAIVE_LIMIT`] and reports the healthy items it moved by then
//!    (`naive_fast`, the same without the stall, gives its retention).
//! 3. Credit announcements per item (`mux.stats().announcements` ÷ items delivered)
//!    and items per frame, from every mux run of both phases; with `E` = 32 the
//!    low-water mark is 16, so at most one announcement per 16 items (0.0625) plus a
//!    little (fewer when deliveries come in batches that pass the mark by more).
//! 4. `skew`: one hot channel ([`HOT`] = 2^19 items) with 999 cold ones open beside
//!    it (even ids `never()`, odd ids one item then `never()`, each with a `Holder`
//!    asking for 16; the odd ones have delivered their item before the clock
//!    starts), against `single`, the hot channel on a mux of its own. Ratio skew ÷
//!    single. For scale, `publish_on_64` moves the same items over one plain async
//!    boundary with the window of one channel (`subscribe_on(send pool)
//!    .publish_on(receive pool, E + C)`, same pools): what the mux costs one channel.
//!
//! Criterion measures each case in turn (the stall's `naive` peers run only in the
//! paired phase: each naive stall run takes [`NAIVE_LIMIT`] by design). After its own
//! output a table prints each case's median items/s over criterion's iterations,
//! p10–p90, and ratios of those medians.
//!
//! The machine is shared and noisy (2 vCPUs; load drifts within a run), so a second,
//! *paired* phase follows: [`ROUNDS`] rounds (see below), each running every case of one
//! comparison back to back (in reverse order every other round); it prints the
//! median over rounds of each *same-round* ratio, with its min–max. Those are the
//! ratios to quote. Case 1 also gives them over the rounds where `crossbeam_rr` ran
//! at or above its median rate, and at or above its 90th percentile (the host's fast
//! moments, when the ceiling is highest).
//!
//! Environment: `WEIR_MUX_ROUNDS` sets the paired phase's rounds (default
//! [`ROUNDS`]); `WEIR_MUX_CASES` (comma-separated case numbers, e.g. `1,2`) runs only
//! those cases of the paired phase and skips the criterion phase (case 3 then counts
//! the paired phase's runs only). The host changes speed within minutes, so many
//! rounds of one case (`WEIR_MUX_ROUNDS=150 WEIR_MUX_CASES=1`, about a minute) say
//! more than one full run.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};
use crossbeam_channel::{bounded, Receiver, Sender, TryRecvError, TrySendError};
use weir::mux::{Mux, MuxStats};
use weir::prelude::*;
use weir::runtime::ThreadPool;
use weir::sink::SinkHandle;

/// Items per run, over all channels: divisible by every K below.
const N: u64 = 1 << 20;
/// Items of the hot channel in the skew case (one channel is the slowest case).
const HOT: u64 = 1 << 19;
/// Exclusive credit per channel.
const E: u64 = 32;
/// The shared pool.
const S: u64 = 128;
/// Shared credit one channel may hold.
const C: u64 = 32;
/// Items per turn.
const Q: u64 = 16;
const FAST_KS: [u64; 3] = [2, 16, 256];
const STALL_KS: [u64; 2] = [8, 16];
/// What the stalled subscriber asks for, once.
const STALL_REQUEST: u64 = 10;
/// Channels beside the hot one in the skew case.
const COLD: u64 = 999;
/// What each cold channel's subscriber asks for.
const COLD_REQUEST: u64 = 16;
/// A naive stall run stops after this long.
const NAIVE_LIMIT: Duration = Duration::from_secs(1);
/// The naive dispatcher's per-channel queues.
const NAIVE_QUEUE: usize = 32;
/// A weir run still going after this long is a hang: panic with the mux's stats.
const HANG: Duration = Duration::from_secs(60);
/// After a run, every channel must have closed and every unit of credit come back
/// within this long.
const SETTLE: Duration = Duration::from_secs(10);
/// Rounds of the paired phase, unless `WEIR_MUX_ROUNDS` says otherwise.
const ROUNDS: usize = 7;

/// Rounds of the paired phase: `WEIR_MUX_ROUNDS`, or [`ROUNDS`].
fn rounds() -> usize {
    std::env::var("WEIR_MUX_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(ROUNDS)
}

/// Whether the paired phase runs case `n`: `WEIR_MUX_CASES` (comma-separated case
/// numbers, e.g. `1`; set, it skips the criterion phase) or every case.
fn runs_case(n: u32) -> bool {
    std::env::var("WEIR_MUX_CASES").map_or(true, |cases| {
        cases.split(',').any(|c| c.trim().parse() == Ok(n))
    })
}

/// How the weir side consumes its channels.
#[derive(Clone, Copy, Debug)]
enum Form {
    /// `via` + `fold`.
    Fold,
    /// `channel(id).open()`, subscribed by hand, `Count` downstream.
    Open,
}

impl Form {
    fn name(self) -> &'static str {
        match self {
            Form::Fold => "fold",
            Form::Open => "open",
        }
    }
}

/// One run: the items that count for its rate, the time they took and, for a mux
/// run, its statistics.
struct Outcome {
    items: u64,
    elapsed: Duration,
    mux: Option<MuxFigures>,
}

impl Outcome {
    fn rate(&self) -> f64 {
        self.items as f64 / self.elapsed.as_secs_f64()
    }
}

/// A mux run's counters: all items it delivered, announcements, frames.
#[derive(Clone, Copy)]
struct MuxFigures {
    delivered: u64,
    announcements: u64,
    frames: u64,
}

/// Figures of every run, by (case, K).
type ByCase<V> = Mutex<BTreeMap<(String, u64), Vec<V>>>;

/// Items per second of every timed run, by (case, K).
static RATES: ByCase<f64> = Mutex::new(BTreeMap::new());
/// Announcements and frames per item of every mux run, by (case, K).
static CREDIT: ByCase<(f64, f64)> = Mutex::new(BTreeMap::new());

fn note(case: &str, k: u64, outcome: &Outcome) {
    RATES
        .lock()
        .unwrap()
        .entry((case.to_owned(), k))
        .or_default()
        .push(outcome.rate());
    if let Some(m) = outcome.mux {
        let per_item = |x: u64| x as f64 / m.delivered as f64;
        CREDIT
            .lock()
            .unwrap()
            .entry((case.to_owned(), k))
            .or_default()
            .push((
                per_item(m.announcements),
                m.delivered as f64 / m.frames as f64,
            ));
    }
}

/// Run `iters` times, recording each; criterion gets the summed measured times.
fn timed(case: &str, k: u64, iters: u64, mut run: impl FnMut() -> Outcome) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let outcome = run();
        note(case, k, &outcome);
        total += outcome.elapsed;
    }
    total
}

/// The sum of channel `c`'s items when each of `k` carries `N / k`.
fn channel_sum(c: u64, k: u64) -> u64 {
    let per = N / k;
    per * c * per + per * (per - 1) / 2
}

/// The two pools every mux runs on.
struct Pools {
    send: ThreadPool,
    receive: ThreadPool,
}

impl Pools {
    fn new(tag: &str) -> Self {
        Pools {
            send: ThreadPool::builder()
                .name(format!("{tag}-send"))
                .threads(1)
                .build(),
            receive: ThreadPool::builder()
                .name(format!("{tag}-recv"))
                .threads(1)
                .build(),
        }
    }

    fn mux(&self) -> Mux<u64> {
        Mux::builder()
            .exclusive(E)
            .shared(S)
            .borrow_cap(C)
            .quantum(Q)
            .build_local(self.send.clone(), self.receive.clone())
            .unwrap()
    }
}

/// Checks the mux's bound and takes its counters.
fn figures(stats: &MuxStats, channels: u64, delivered: u64) -> MuxFigures {
    assert!(
        stats.high_water <= channels * E + S,
        "high water {} above Σ E + S = {}",
        stats.high_water,
        channels * E + S
    );
    MuxFigures {
        delivered,
        announcements: stats.announcements,
        frames: stats.frames,
    }
}

/// Wait (untimed) until every channel closed, nothing is buffered and the pool is
/// whole: a run must leave no credit behind.
fn settle(mux: &Mux<u64>, what: &str) {
    let start = Instant::now();
    loop {
        let stats = mux.stats();
        if stats.channels.is_empty() && stats.buffered_total == 0 && stats.pool_free == S {
            return;
        }
        assert!(
            start.elapsed() < SETTLE,
            "{what}: channels still open or credit held {SETTLE:?} after the run: {stats:#?}"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Counts and sums a channel with unbounded demand; reports `(count, sum)` on
/// completion.
struct Count {
    count: u64,
    sum: u64,
    done: Sender<Result<(u64, u64), String>>,
    /// Held although never used again: a `ChannelSource` whose subscriber drops its
    /// subscription handle drops the subscriber after the first window, with no
    /// terminal signal and the channel's credit still held (found with this bench).
    _subscription: Option<Subscription>,
}

impl Subscriber<u64> for Count {
    fn on_subscribe(&mut self, subscription: Subscription) {
        subscription.request(weir::demand::UNBOUNDED);
        self._subscription = Some(subscription);
    }

    fn on_next(&mut self, item: u64) {
        self.count += 1;
        self.sum = self.sum.wrapping_add(item);
    }

    fn on_next_batch<I: Iterator<Item = u64>>(&mut self, items: I) -> u64 {
        for item in items {
            self.count += 1;
            self.sum = self.sum.wrapping_add(item);
        }
        0
    }

    fn on_error(&mut self, error: weir::Error) {
        let _ = self.done.send(Err(error.to_string()));
    }

    fn on_complete(&mut self) {
        let _ = self.done.send(Ok((self.count, self.sum)));
    }
}

/// Asks for `request` items once, then never again; holds its subscription so the
/// bench can cancel it.
struct Holder {
    request: u64,
    got: Arc<AtomicU64>,
    subscription: Arc<Mutex<Option<Subscription>>>,
    ended: Arc<Mutex<Option<String>>>,
}

/// The bench's side of a [`Holder`].
struct Held {
    got: Arc<AtomicU64>,
    subscription: Arc<Mutex<Option<Subscription>>>,
    ended: Arc<Mutex<Option<String>>>,
}

impl Holder {
    fn new(request: u64) -> (Holder, Held) {
        let got = Arc::new(AtomicU64::new(0));
        let subscription = Arc::new(Mutex::new(None));
        let ended = Arc::new(Mutex::new(None));
        let held = Held {
            got: got.clone(),
            subscription: subscription.clone(),
            ended: ended.clone(),
        };
        let holder = Holder {
            request,
            got,
            subscription,
            ended,
        };
        (holder, held)
    }
}

impl Subscriber<u64> for Holder {
    fn on_subscribe(&mut self, subscription: Subscription) {
        *self.subscription.lock().unwrap() = Some(subscription.clone());
        subscription.request(self.request);
    }

    fn on_next(&mut self, _item: u64) {
        self.got.fetch_add(1, Ordering::Relaxed);
    }

    fn on_error(&mut self, error: weir::Error) {
        *self.ended.lock().unwrap() = Some(format!("error: {error}"));
    }

    fn on_complete(&mut self) {
        *self.ended.lock().unwrap() = Some("complete".into());
    }
}

impl Held {
    fn got(&self) -> u64 {
        self.got.load(Ordering::Relaxed)
    }

    /// Cancel, after checking it neither ended nor got more than it asked for.
    fn cancel(self, request: u64, what: &str) {
        let got = self.got();
        assert!(
            got <= request,
            "{what}: got {got} items, asked for {request}"
        );
        if let Some(end) = self.ended.lock().unwrap().take() {
            panic!("{what}: ended early ({end})");
        }
        let subscription = self.subscription.lock().unwrap().take();
        subscription
            .unwrap_or_else(|| panic!("{what}: never subscribed"))
            .cancel();
    }
}

/// A hang: no result after [`HANG`].
fn hang(mux: &Mux<u64>, what: &str) -> ! {
    panic!(
        "{what}: no result after {HANG:?} (a hang); mux stats: {:#?}",
        mux.stats()
    )
}

/// A fold's result, or a panic naming `what`.
fn wait_fold(mut handle: SinkHandle<u64>, mux: &Mux<u64>, what: &str) -> u64 {
    match handle.wait_timeout(HANG) {
        Some(Ok(sum)) => sum,
        Some(Err(e)) => panic!("{what}: {e}"),
        None => hang(mux, what),
    }
}

/// The consumers of a set of channels, in one phrasing.
enum Consumers {
    Fold(Vec<(u64, SinkHandle<u64>)>),
    Open {
        done: Receiver<Result<(u64, u64), String>>,
        channels: u64,
    },
}

impl Consumers {
    /// Channel `c` of `k` for every `c` in `channels`, carrying its range.
    fn start(mux: &Mux<u64>, form: Form, k: u64, channels: std::ops::Range<u64>) -> Self {
        let per = N / k;
        match form {
            Form::Fold => Consumers::Fold(
                channels
                    .map(|c| {
                        let handle = weir::range(c * per..(c + 1) * per)
                            .via(mux, c)
                            .unwrap()
                            .fold(0u64, |sum, x| sum.wrapping_add(x));
                        (c, handle)
                    })
                    .collect(),
            ),
            Form::Open => {
                let (tx, done) = crossbeam_channel::unbounded();
                let count = channels.end - channels.start;
                for c in channels {
                    let (sink, source) = mux.channel(c).open().unwrap();
                    weir::range(c * per..(c + 1) * per).subscribe(sink);
                    source.subscribe(Count {
                        count: 0,
                        sum: 0,
                        done: tx.clone(),
                        _subscription: None,
                    });
                }
                Consumers::Open {
                    done,
                    channels: count,
                }
            }
        }
    }

    /// Wait for every channel; check each one's items; return the total sum.
    fn finish(self, mux: &Mux<u64>, k: u64) -> u64 {
        match self {
            Consumers::Fold(handles) => {
                let mut total = 0u64;
                for (c, handle) in handles {
                    let sum = wait_fold(handle, mux, &format!("channel {c} of {k}"));
                    assert_eq!(sum, channel_sum(c, k), "channel {c} of {k}: wrong sum");
                    total = total.wrapping_add(sum);
                }
                total
            }
            Consumers::Open { done, channels } => {
                let mut total = 0u64;
                for _ in 0..channels {
                    match done.recv_timeout(HANG) {
                        Ok(Ok((count, sum))) => {
                            assert_eq!(count, N / k, "a channel of {k}: wrong count");
                            total = total.wrapping_add(sum);
                        }
                        Ok(Err(e)) => panic!("a channel of {k}: {e}"),
                        Err(_) => hang(mux, &format!("open channels of {k}")),
                    }
                }
                total
            }
        }
    }
}

/// All K channels fast.
fn weir_fast(pools: &Pools, form: Form, k: u64) -> Outcome {
    let mux = pools.mux();
    let start = Instant::now();
    let consumers = Consumers::start(&mux, form, k, 0..k);
    let sum = consumers.finish(&mux, k);
    let elapsed = start.elapsed();
    let expected = (0..k).map(|c| channel_sum(c, k)).sum::<u64>();
    assert_eq!(sum, expected, "all_fast {k} {form:?}: wrong sum");
    let figures = figures(&mux.stats(), k, N);
    settle(&mux, &format!("all_fast {k} {form:?}"));
    Outcome {
        items: N,
        elapsed,
        mux: Some(figures),
    }
}

/// Channel 0 stalled after [`STALL_REQUEST`] items; the rate is the other channels'.
fn weir_stall(pools: &Pools, form: Form, k: u64) -> Outcome {
    let mux = pools.mux();
    let per = N / k;
    let start = Instant::now();
    let (holder, stalled) = Holder::new(STALL_REQUEST);
    weir::range(0..per).via(&mux, 0).unwrap().subscribe(holder);
    let consumers = Consumers::start(&mux, form, k, 1..k);
    let sum = consumers.finish(&mux, k);
    let elapsed = start.elapsed();
    let expected = (1..k).map(|c| channel_sum(c, k)).sum::<u64>();
    assert_eq!(sum, expected, "stall {k} {form:?}: wrong sum");
    // Untimed: the stalled channel gets what it asked for, and no more is sent.
    let check = Instant::now();
    while stalled.got() < STALL_REQUEST {
        assert!(
            check.elapsed() < SETTLE,
            "stalled channel: {} of its {STALL_REQUEST} items after {SETTLE:?}; {:#?}",
            stalled.got(),
            mux.stats()
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    let stats = mux.stats();
    let channel = stats.channel(0).expect("the stalled channel is open");
    assert!(
        channel.sent <= STALL_REQUEST,
        "stalled channel: {} sent, {STALL_REQUEST} requested",
        channel.sent
    );
    let delivered = (k - 1) * per + stalled.got();
    let figures = figures(&stats, k, delivered);
    stalled.cancel(STALL_REQUEST, "stalled channel");
    settle(&mux, &format!("stall {k} {form:?}"));
    Outcome {
        items: (k - 1) * per,
        elapsed,
        mux: Some(figures),
    }
}

/// The hot channel ([`HOT`] items) with `cold` idle channels open beside it.
fn weir_skew(pools: &Pools, cold: u64) -> Outcome {
    let mux = pools.mux();
    let held: Vec<Held> = (1..=cold)
        .map(|c| {
            let (holder, held) = Holder::new(COLD_REQUEST);
            let source = if c % 2 == 0 {
                weir::never::<u64>().boxed()
            } else {
                weir::just(c).concat(weir::never()).boxed()
            };
            source.via(&mux, c).unwrap().subscribe(holder);
            held
        })
        .collect();
    let expected_cold = cold.div_ceil(2);
    let cold_start = Instant::now();
    while held.iter().map(Held::got).sum::<u64>() < expected_cold {
        assert!(
            cold_start.elapsed() < HANG,
            "cold channels: items not delivered after {HANG:?}; mux stats: {:#?}",
            mux.stats()
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    let before = mux.stats();
    let start = Instant::now();
    let hot = weir::range(0..HOT)
        .via(&mux, 0)
        .unwrap()
        .fold(0u64, |sum, x| sum.wrapping_add(x));
    let sum = wait_fold(hot, &mux, "the hot channel");
    let elapsed = start.elapsed();
    assert_eq!(sum, HOT * (HOT - 1) / 2, "skew: wrong sum");
    let stats = mux.stats();
    assert!(
        stats.channels.len() as u64 >= cold,
        "cold channels closed: {} open",
        stats.channels.len()
    );
    let mut figures = figures(&stats, cold + 1, HOT);
    // Only the hot channel's run: the cold items were delivered before.
    figures.announcements -= before.announcements;
    figures.frames -= before.frames;
    for h in held {
        h.cancel(COLD_REQUEST, "cold channel");
    }
    settle(&mux, &format!("skew {cold}"));
    Outcome {
        items: HOT,
        elapsed,
        mux: Some(figures),
    }
}

/// The hot channel's items over one plain async boundary with the window of one
/// channel (`E + C`), on the same two pools: what the mux adds to one channel.
fn publish_on_window(pools: &Pools) -> Outcome {
    let start = Instant::now();
    let sum = weir::range(0..HOT)
        .subscribe_on(pools.send.clone())
        .publish_on(pools.receive.clone(), E + C)
        .fold(0u64, |sum, x| sum.wrapping_add(x))
        .wait()
        .unwrap();
    let elapsed = start.elapsed();
    assert_eq!(sum, HOT * (HOT - 1) / 2, "publish_on: wrong sum");
    Outcome {
        items: HOT,
        elapsed,
        mux: None,
    }
}

/// K independent bounded(E) channels, one producer thread and the bench thread
/// sweeping them.
fn crossbeam_rr(k: u64) -> Outcome {
    let per = N / k;
    let (txs, rxs): (Vec<Sender<u64>>, Vec<Receiver<u64>>) =
        (0..k).map(|_| bounded::<u64>(E as usize)).unzip();
    let start = Instant::now();
    let (count, sum) = std::thread::scope(|scope| {
        scope.spawn(move || {
            let mut live: Vec<(Sender<u64>, u64, u64)> = txs
                .into_iter()
                .zip(0..)
                .map(|(tx, c)| (tx, c * per, (c + 1) * per))
                .collect();
            while !live.is_empty() {
                let mut progress = false;
                live.retain_mut(|(tx, next, end)| {
                    let mut sent = 0;
                    while *next < *end && sent < Q {
                        match tx.try_send(*next) {
                            Ok(()) => {
                                *next += 1;
                                sent += 1;
                            }
                            Err(TrySendError::Full(_)) => break,
                            Err(TrySendError::Disconnected(_)) => panic!("consumer gone"),
                        }
                    }
                    progress |= sent > 0;
                    *next < *end
                });
                if !progress {
                    std::thread::yield_now();
                }
            }
        });
        let (mut count, mut sum) = (0u64, 0u64);
        let mut live = rxs;
        while !live.is_empty() {
            let (n, s) = sweep(&mut live);
            count += n;
            sum = sum.wrapping_add(s);
            if n == 0 {
                std::thread::yield_now();
            }
        }
        (count, sum)
    });
    let elapsed = start.elapsed();
    assert_eq!(count, N, "crossbeam_rr {k}: wrong count");
    assert_eq!(sum, N * (N - 1) / 2, "crossbeam_rr {k}: wrong sum");
    Outcome {
        items: N,
        elapsed,
        mux: None,
    }
}

/// One FIFO of (channel, item), a dispatcher into per-channel bounded(32) queues;
/// with `stall`, channel 0's consumer takes [`STALL_REQUEST`] items and no more.
/// Stops after [`NAIVE_LIMIT`]; the rate is the healthy channels' items moved by then.
fn naive(k: u64, stall: bool) -> Outcome {
    let per = N / k;
    let (fifo_tx, fifo_rx) = bounded::<(usize, u64)>((k * E + S) as usize);
    let (qtxs, qrxs): (Vec<Sender<u64>>, Vec<Receiver<u64>>) =
        (0..k).map(|_| bounded::<u64>(NAIVE_QUEUE)).unzip();
    let start = Instant::now();
    let (healthy, sum, finished, elapsed) = std::thread::scope(|scope| {
        scope.spawn(move || {
            let mut next: Vec<u64> = (0..k).map(|c| c * per).collect();
            let mut left = N;
            while left > 0 {
                for (c, next) in next.iter_mut().enumerate() {
                    let end = (c as u64 + 1) * per;
                    let stop = (*next + Q).min(end);
                    while *next < stop {
                        if fifo_tx.send((c, *next)).is_err() {
                            return;
                        }
                        *next += 1;
                        left -= 1;
                    }
                }
            }
        });
        scope.spawn(move || {
            for (c, x) in fifo_rx.iter() {
                if qtxs[c].send(x).is_err() {
                    return;
                }
            }
        });
        let deadline = start + NAIVE_LIMIT;
        let mut queues = qrxs.into_iter();
        let stalled = if stall { queues.next() } else { None };
        let mut stalled_got = 0u64;
        let mut live: Vec<Receiver<u64>> = queues.collect();
        let (mut healthy, mut sum) = (0u64, 0u64);
        while !live.is_empty() && Instant::now() < deadline {
            let mut progress = false;
            if let Some(rx) = &stalled {
                while stalled_got < STALL_REQUEST {
                    match rx.try_recv() {
                        Ok(_) => {
                            stalled_got += 1;
                            progress = true;
                        }
                        Err(_) => break,
                    }
                }
            }
            let (n, s) = sweep(&mut live);
            healthy += n;
            sum = sum.wrapping_add(s);
            progress |= n > 0;
            if !progress {
                std::thread::yield_now();
            }
        }
        let elapsed = start.elapsed();
        let finished = live.is_empty();
        // Unblock the dispatcher (and through it the producer).
        drop(live);
        drop(stalled);
        (healthy, sum, finished, elapsed)
    });
    let first = u64::from(stall);
    if finished {
        let expected = (first..k).map(|c| channel_sum(c, k)).sum::<u64>();
        assert_eq!(sum, expected, "naive {k} stall {stall}: wrong sum");
    }
    Outcome {
        items: healthy,
        elapsed,
        mux: None,
    }
}

fn case_name(prefix: &str, form: Form) -> String {
    format!("{prefix}_{}", form.name())
}

fn bench(c: &mut Criterion) {
    let pools = Pools::new("bench");
    let configure = |group: &mut criterion::BenchmarkGroup<'_, _>| {
        group
            .sample_size(10)
            .sampling_mode(SamplingMode::Flat)
            .warm_up_time(Duration::from_millis(200))
            .measurement_time(Duration::from_millis(800));
    };

    let mut group = c.benchmark_group("mux/all_fast");
    configure(&mut group);
    group.throughput(Throughput::Elements(N));
    for k in FAST_KS {
        for form in [Form::Fold, Form::Open] {
            let case = case_name("weir", form);
            group.bench_with_input(BenchmarkId::new(&case, k), &k, |b, &k| {
                b.iter_custom(|iters| timed(&case, k, iters, || weir_fast(&pools, form, k)))
            });
        }
        group.bench_with_input(BenchmarkId::new("crossbeam_rr", k), &k, |b, &k| {
            b.iter_custom(|iters| timed("crossbeam_rr", k, iters, || crossbeam_rr(k)))
        });
    }
    group.finish();

    let mut group = c.benchmark_group("mux/stall");
    configure(&mut group);
    for k in STALL_KS {
        for form in [Form::Fold, Form::Open] {
            let case = case_name("fast", form);
            group.throughput(Throughput::Elements(N));
            group.bench_with_input(BenchmarkId::new(&case, k), &k, |b, &k| {
                b.iter_custom(|iters| timed(&case, k, iters, || weir_fast(&pools, form, k)))
            });
            let case = case_name("stall", form);
            group.throughput(Throughput::Elements(N / k * (k - 1)));
            group.bench_with_input(BenchmarkId::new(&case, k), &k, |b, &k| {
                b.iter_custom(|iters| timed(&case, k, iters, || weir_stall(&pools, form, k)))
            });
        }
    }
    group.finish();

    let mut group = c.benchmark_group("mux/skew");
    configure(&mut group);
    group.throughput(Throughput::Elements(HOT));
    group.bench_function("single", |b| {
        b.iter_custom(|iters| timed("single", 1, iters, || weir_skew(&pools, 0)))
    });
    group.bench_function("skew_1000", |b| {
        b.iter_custom(|iters| timed("skew", COLD + 1, iters, || weir_skew(&pools, COLD)))
    });
    group.bench_function("publish_on_64", |b| {
        b.iter_custom(|iters| timed("publish_on_64", 1, iters, || publish_on_window(&pools)))
    });
    group.finish();
}

/// Take everything each receiver holds now, and drop the disconnected ones: how
/// many items were taken, and their wrapping sum.
fn sweep(live: &mut Vec<Receiver<u64>>) -> (u64, u64) {
    let (mut count, mut sum) = (0u64, 0u64);
    live.retain(|rx| loop {
        match rx.try_recv() {
            Ok(x) => {
                count += 1;
                sum = sum.wrapping_add(x);
            }
            Err(TryRecvError::Empty) => break true,
            Err(TryRecvError::Disconnected) => break false,
        }
    });
    (count, sum)
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    let index = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[index]
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

/// The median items/s of each case, its p10–p90 spread, and ratios of medians.
fn report() {
    let rates = RATES.lock().unwrap();
    let median = |case: &str, k: u64| -> f64 {
        rates
            .get(&(case.to_owned(), k))
            .map_or(f64::NAN, |v| percentile(&sorted(v.clone()), 0.5))
    };
    println!();
    println!(
        "mux, criterion phase: median M items/s (p10-p90); for stall, the healthy channels' items"
    );
    for ((case, k), v) in rates.iter() {
        let v = sorted(v.clone());
        println!(
            "  {case:12} K {k:4}: {:7.2} ({:.2}-{:.2}), {} runs",
            percentile(&v, 0.5) / 1e6,
            percentile(&v, 0.1) / 1e6,
            percentile(&v, 0.9) / 1e6,
            v.len()
        );
    }
    println!("ratios of medians (criterion phase; see the paired table for same-round ratios):");
    for k in FAST_KS {
        println!(
            "  all_fast K {k:3}: weir_fold x crossbeam_rr {:.2}  weir_open x crossbeam_rr {:.2}",
            median("weir_fold", k) / median("crossbeam_rr", k),
            median("weir_open", k) / median("crossbeam_rr", k),
        );
    }
    for k in STALL_KS {
        println!(
            "  stall K {k:3}: retention fold {:.2}  open {:.2}",
            median("stall_fold", k) / median("fast_fold", k),
            median("stall_open", k) / median("fast_open", k),
        );
    }
    println!(
        "  skew: skew_1000 x single {:.2}  single x publish_on_64 {:.2}",
        median("skew", COLD + 1) / median("single", 1),
        median("single", 1) / median("publish_on_64", 1)
    );
}

/// One case of a paired round: its name, its K, a run.
type Case<'a> = (&'static str, u64, &'a mut dyn FnMut() -> Outcome);

/// Run every case of one comparison once, back to back, reversed when `reverse`;
/// their rates by name.
fn round(cases: &mut [Case<'_>], reverse: bool) -> BTreeMap<&'static str, f64> {
    let mut rates = BTreeMap::new();
    let order: Vec<usize> = if reverse {
        (0..cases.len()).rev().collect()
    } else {
        (0..cases.len()).collect()
    };
    for i in order {
        let (name, k, run) = &mut cases[i];
        let outcome = run();
        note(name, *k, &outcome);
        rates.insert(*name, outcome.rate());
    }
    rates
}

/// The median and min–max of `v`, formatted.
fn spread(v: Vec<f64>) -> String {
    let v = sorted(v);
    format!(
        "{} ({}-{})",
        figure(percentile(&v, 0.5)),
        figure(v[0]),
        figure(v[v.len() - 1])
    )
}

/// A ratio with two decimals, or in scientific notation when far from 1.
fn figure(x: f64) -> String {
    if (0.01..1000.0).contains(&x) {
        format!("{x:.2}")
    } else {
        format!("{x:.1e}")
    }
}

/// Median rate of `case` over rounds, in M items/s.
fn median_rate(rounds: &[BTreeMap<&'static str, f64>], case: &str) -> f64 {
    percentile(&sorted(rounds.iter().map(|r| r[case]).collect()), 0.5) / 1e6
}

/// Same-round ratio `a / b` over rounds.
fn ratio(rounds: &[BTreeMap<&'static str, f64>], a: &str, b: &str) -> String {
    spread(rounds.iter().map(|r| r[a] / r[b]).collect())
}

/// The paired phase: see the module docs.
fn paired() {
    let pools = Pools::new("paired");
    let n_rounds = rounds();
    println!();
    println!(
        "paired rounds ({n_rounds} per row): median M items/s; median (min-max) of same-round ratios"
    );
    if runs_case(1) {
        fast_rounds(&pools, n_rounds);
    }
    if runs_case(2) {
        stall_rounds(&pools, n_rounds);
    }
    if runs_case(4) {
        skew_rounds(&pools, n_rounds);
    }
    credit();
}

/// Case 1 of the paired phase. Besides the ratios over all rounds, those of the
/// rounds where `crossbeam_rr` ran at or above its median rate and its 90th
/// percentile (the host's fast moments, when the ceiling is highest).
fn fast_rounds(pools: &Pools, n_rounds: usize) {
    println!("case 1, all fast (N = {N} items over K channels):");
    for k in FAST_KS {
        let rounds: Vec<_> = (0..n_rounds)
            .map(|r| {
                round(
                    &mut [
                        ("weir_fold", k, &mut || weir_fast(pools, Form::Fold, k)),
                        ("weir_open", k, &mut || weir_fast(pools, Form::Open, k)),
                        ("crossbeam_rr", k, &mut || crossbeam_rr(k)),
                    ],
                    r % 2 == 1,
                )
            })
            .collect();
        println!(
            "  K {k:3}: weir_fold {:6.2}  weir_open {:6.2}  crossbeam_rr {:6.2};  weir_fold/crossbeam_rr {}  weir_open/crossbeam_rr {}",
            median_rate(&rounds, "weir_fold"),
            median_rate(&rounds, "weir_open"),
            median_rate(&rounds, "crossbeam_rr"),
            ratio(&rounds, "weir_fold", "crossbeam_rr"),
            ratio(&rounds, "weir_open", "crossbeam_rr"),
        );
        let ceiling = sorted(rounds.iter().map(|r| r["crossbeam_rr"]).collect());
        for (name, q) in [("median", 0.5), ("90th percentile", 0.9)] {
            let floor = percentile(&ceiling, q);
            let fast: Vec<_> = rounds
                .iter()
                .filter(|r| r["crossbeam_rr"] >= floor)
                .cloned()
                .collect();
            println!(
                "         rounds with crossbeam_rr >= its {name} ({}, >= {:.2}, max {:.2}): weir_fold/crossbeam_rr {}  weir_open/crossbeam_rr {}",
                fast.len(),
                floor / 1e6,
                ceiling[ceiling.len() - 1] / 1e6,
                ratio(&fast, "weir_fold", "crossbeam_rr"),
                ratio(&fast, "weir_open", "crossbeam_rr"),
            );
        }
    }
}

/// Case 2 of the paired phase.
fn stall_rounds(pools: &Pools, n_rounds: usize) {
    println!(
        "case 2, channel 0 of K stalled after {STALL_REQUEST} items (healthy channels' items/s; naive stops after {NAIVE_LIMIT:?}):"
    );
    for k in STALL_KS {
        let rounds: Vec<_> = (0..n_rounds)
            .map(|r| {
                round(
                    &mut [
                        ("fast_fold", k, &mut || weir_fast(pools, Form::Fold, k)),
                        ("stall_fold", k, &mut || weir_stall(pools, Form::Fold, k)),
                        ("fast_open", k, &mut || weir_fast(pools, Form::Open, k)),
                        ("stall_open", k, &mut || weir_stall(pools, Form::Open, k)),
                        ("naive_fast", k, &mut || naive(k, false)),
                        ("naive_stall", k, &mut || naive(k, true)),
                    ],
                    r % 2 == 1,
                )
            })
            .collect();
        let naive_stall = sorted(rounds.iter().map(|r| r["naive_stall"]).collect());
        println!(
            "  K {k:3}: fast_fold {:6.2}  stall_fold {:6.2}  fast_open {:6.2}  stall_open {:6.2}  naive_fast {:6.2}  naive_stall {:.4} (k items/s {:.1})",
            median_rate(&rounds, "fast_fold"),
            median_rate(&rounds, "stall_fold"),
            median_rate(&rounds, "fast_open"),
            median_rate(&rounds, "stall_open"),
            median_rate(&rounds, "naive_fast"),
            median_rate(&rounds, "naive_stall"),
            percentile(&naive_stall, 0.5) / 1e3,
        );
        println!(
            "         retention fold {}  open {}  naive {};  stall_fold/naive_stall {}",
            ratio(&rounds, "stall_fold", "fast_fold"),
            ratio(&rounds, "stall_open", "fast_open"),
            spread(
                rounds
                    .iter()
                    .map(|r| r["naive_stall"] / r["naive_fast"])
                    .collect()
            ),
            spread(
                rounds
                    .iter()
                    .map(|r| r["stall_fold"] / r["naive_stall"])
                    .collect()
            ),
        );
    }
}

/// Case 4 of the paired phase.
fn skew_rounds(pools: &Pools, n_rounds: usize) {
    println!(
        "case 4, skew ({HOT} items): 1 hot channel of {} vs a mux of its own, and vs publish_on(E + C) without a mux:",
        COLD + 1
    );
    let rounds: Vec<_> = (0..n_rounds)
        .map(|r| {
            round(
                &mut [
                    ("single", 1, &mut || weir_skew(pools, 0)),
                    ("skew", COLD + 1, &mut || weir_skew(pools, COLD)),
                    ("publish_on_64", 1, &mut || publish_on_window(pools)),
                ],
                r % 2 == 1,
            )
        })
        .collect();
    println!(
        "  single {:6.2}  skew_1000 {:6.2}  publish_on_64 {:6.2};  skew/single {}  single/publish_on_64 {}",
        median_rate(&rounds, "single"),
        median_rate(&rounds, "skew"),
        median_rate(&rounds, "publish_on_64"),
        ratio(&rounds, "skew", "single"),
        ratio(&rounds, "single", "publish_on_64"),
    );
}

/// Case 3: announcements and frames per item, over every mux run of both phases.
fn credit() {
    let all = CREDIT.lock().unwrap();
    println!(
        "case 3, credit announcements per item (E = {E}: 1/{} = {:.4} expected) and items per frame, median (min-max) over runs:",
        (E / 2).max(1),
        1.0 / (E / 2).max(1) as f64
    );
    for ((case, k), v) in all.iter() {
        let announce = sorted(v.iter().map(|x| x.0).collect());
        let per_frame = sorted(v.iter().map(|x| x.1).collect());
        println!(
            "  {:18} announcements/item {:.4} ({:.4}-{:.4})  items/frame {:5.1} ({:.1}-{:.1})",
            format!("{case} K {k}"),
            percentile(&announce, 0.5),
            announce[0],
            announce[announce.len() - 1],
            percentile(&per_frame, 0.5),
            per_frame[0],
            per_frame[per_frame.len() - 1],
        );
    }
}

fn main() {
    if std::env::var_os("WEIR_MUX_CASES").is_some() {
        // Chosen cases of the paired phase only (see `runs_case`).
        assert!(
            [1, 2, 4].into_iter().any(runs_case),
            "WEIR_MUX_CASES names no paired case: give some of 1, 2, 4 (comma-separated)"
        );
        paired();
        return;
    }
    let mut criterion = Criterion::default().configure_from_args();
    bench(&mut criterion);
    criterion.final_summary();
    report();
    // `cargo bench --bench mux -- <filter>` runs the criterion cases only.
    if std::env::args().skip(1).all(|arg| arg.starts_with('-')) {
        paired();
    }
}
