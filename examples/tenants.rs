//! Tenants: a notification fan-out where eight tenants share one delivery transport,
//! and one tenant's provider slows down.
//!
//! Each tenant has a producer that makes notifications as fast as it is allowed to,
//! and a consumer that hands them to the tenant's provider (a push or e-mail service)
//! at 2,000 per second. At t = 2 s tenant A's provider throttles to 5% of that, 100
//! per second. The same eight tenants run twice, at the same time:
//!
//! * **weir mux**: each producer is a `weir::generate` source sent `via` one
//!   [`Mux`]; each consumer asks (`request(n)`) only for what its provider will accept
//!   in the next few milliseconds, so a channel's credit follows its provider's pace.
//! * **naive**: the producers take turns on one ingest thread, pushing `(tenant,
//!   notification)` into one bounded FIFO; one dispatcher thread moves each into its
//!   tenant's bounded queue and blocks while that queue is full; consumers take from
//!   their queue at their provider's pace. Taking turns keeps the FIFO evenly
//!   interleaved, the naive design's best case: with a thread per producer the
//!   interleaving is bursty, one tenant's run of items fills its queue, and the
//!   dispatcher stalls everyone even before any provider slows down.
//!
//! Both hold at most 384 notifications between producers and providers (mux: 32 of
//! exclusive credit per channel plus a shared pool of 128; naive: a FIFO of 128 plus
//! 32 per tenant queue), and both providers are the same token bucket.
//!
//! Every second the example prints, per tenant and scenario: notifications delivered
//! in that second; where the undelivered ones wait (mux: `buffered` on the transport
//! or in the receive window, `backlog` staged at the sender; naive: in the shared FIFO,
//! in the tenant's queue); time blocked on credit in that second and how often (mux:
//! the channel had backlog and demand but no credit; naive: the dispatcher waited for
//! this tenant's queue); and the p99 latency from production to delivery.
//!
//! What to look for: the naive dispatcher is always blocked on some queue (producers
//! outrun providers), and before the throttle that costs nothing; after it, it waits
//! for A's provider to take one notification, lets the seven that follow in the FIFO
//! through, and waits for A again, so every tenant drops to A's pace. On the mux A's
//! channel only gets the credit its provider asks for, no channel ever waits for
//! credit, and the other seven do not notice. (A's own latency is higher on the mux:
//! its sender stages `E + C` = 64 notifications ahead, the naive path holds 48.)
//!
//! Run: `cargo run --release --example tenants`

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Sender, TrySendError};
use weir::mux::{ChannelStats, Mux};
use weir::prelude::*;
use weir::runtime::ThreadPool;
use weir::source::Step;
use weir::Error;

/// Tenants, named A, B, ….
const TENANTS: usize = 8;
/// Notifications per second each provider accepts.
const RATE: f64 = 2_000.0;
/// Tenant A's provider's rate after the throttle, as a fraction of `RATE`.
const THROTTLED: f64 = 0.05;
/// When tenant A's provider throttles.
const THROTTLE_AT: Duration = Duration::from_secs(2);
/// Length of the run, in one-second reports.
const SECONDS: usize = 6;
/// The providers' clock: each refills its token bucket this often.
const TICK: Duration = Duration::from_millis(5);
/// A provider accepts at most this many ticks' worth of notifications at once.
const BURST_TICKS: f64 = 2.0;
/// Mux: exclusive credit per channel.
const EXCLUSIVE: u64 = 32;
/// Mux: the shared pool.
const SHARED: u64 = 128;
/// Mux: shared credit one channel may hold.
const BORROW_CAP: u64 = 32;
/// Naive: the shared FIFO's capacity.
const FIFO: usize = 128;
/// Naive: each tenant's queue's capacity.
const QUEUE: usize = 32;

/// One notification: its tenant's sequence number and when it was made.
#[derive(Debug)]
struct Note {
    seq: u64,
    made: Instant,
}

/// What tenant `tenant`'s provider accepts per second, `elapsed` into the run.
fn rate(tenant: usize, elapsed: Duration) -> f64 {
    if tenant == 0 && elapsed >= THROTTLE_AT {
        RATE * THROTTLED
    } else {
        RATE
    }
}

fn name(tenant: usize) -> char {
    char::from(b'A' + tenant as u8)
}

/// A provider's pace: a token bucket refilled at the provider's rate, holding at
/// most `BURST_TICKS` ticks' worth (and one notification more).
struct Pace {
    tokens: f64,
    last: Instant,
}

impl Pace {
    fn new(start: Instant) -> Self {
        Pace {
            tokens: 0.0,
            last: start,
        }
    }

    /// The bucket's size at `rate`: `BURST_TICKS` ticks' worth, plus one
    /// notification so that a slow provider (under one per tick) is not starved by a
    /// tick that comes a little early.
    fn size(rate: f64) -> f64 {
        rate * BURST_TICKS * TICK.as_secs_f64() + 1.0
    }

    /// The bucket's size in whole notifications: what a provider accepts at once.
    fn burst(rate: f64) -> u64 {
        Self::size(rate) as u64
    }

    /// Refill for the time since the last call; the whole tokens available.
    fn refill(&mut self, rate: f64, now: Instant) -> u64 {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + rate * dt).min(Self::size(rate));
        self.tokens as u64
    }

    fn spend(&mut self, n: u64) {
        self.tokens -= n as f64;
    }
}

/// One tenant's deliveries, as its provider saw them.
#[derive(Default)]
struct Tally {
    delivered: u64,
    next_seq: u64,
    /// Deliveries out of sequence (a notification lost or reordered).
    gaps: u64,
    /// Latencies (µs) of the deliveries since the last report.
    latencies: Vec<u32>,
}

/// Every tenant's deliveries in one scenario.
struct Board(Vec<Mutex<Tally>>);

impl Board {
    fn new() -> Arc<Self> {
        Arc::new(Board((0..TENANTS).map(|_| Mutex::default()).collect()))
    }

    fn tally(&self, tenant: usize) -> std::sync::MutexGuard<'_, Tally> {
        self.0[tenant].lock().unwrap()
    }

    /// The provider took `note`.
    fn deliver(&self, tenant: usize, note: &Note) {
        let latency = note.made.elapsed().as_micros().min(u32::MAX as u128) as u32;
        let mut tally = self.tally(tenant);
        tally.delivered += 1;
        if note.seq != tally.next_seq {
            tally.gaps += 1;
        }
        tally.next_seq = note.seq + 1;
        tally.latencies.push(latency);
    }

    fn delivered(&self, tenant: usize) -> u64 {
        self.tally(tenant).delivered
    }

    /// The latencies since the last call.
    fn take(&self, tenant: usize) -> Vec<u32> {
        std::mem::take(&mut self.tally(tenant).latencies)
    }

    fn gaps(&self) -> u64 {
        (0..TENANTS).map(|t| self.tally(t).gaps).sum()
    }
}

/// Sleep until `deadline`, or not at all when it passed.
fn sleep_until(deadline: Instant) {
    if let Some(wait) = deadline.checked_duration_since(Instant::now()) {
        thread::sleep(wait);
    }
}

// ---- weir mux ----------------------------------------------------------------------

/// A tenant's consumer on the mux: it hands each notification to the provider as it
/// arrives. It never asks for more than the provider accepts: its `request(n)` calls
/// come from the provider's clock ([`pace_mux`]), through `slot`.
struct Provider {
    tenant: usize,
    board: Arc<Board>,
    slot: Arc<Mutex<Option<Subscription>>>,
}

impl Subscriber<Note> for Provider {
    fn on_subscribe(&mut self, subscription: Subscription) {
        *self.slot.lock().unwrap() = Some(subscription);
    }

    fn on_next(&mut self, note: Note) {
        self.board.deliver(self.tenant, &note);
    }

    fn on_error(&mut self, error: Error) {
        eprintln!("tenant {}: channel failed: {error}", name(self.tenant));
    }

    fn on_complete(&mut self) {}
}

/// The mux side's providers: every tick, each tenant requests what its token bucket
/// allows, keeping at most one bucket's worth requested and not yet delivered.
fn pace_mux(
    start: Instant,
    slots: Vec<Arc<Mutex<Option<Subscription>>>>,
    board: Arc<Board>,
    stop: Arc<AtomicBool>,
) {
    let mut requested = [0u64; TENANTS];
    every_tick(start, &stop, |tenant, pace, rate, now| {
        let Some(subscription) = slots[tenant].lock().unwrap().clone() else {
            return;
        };
        let tokens = pace.refill(rate, now);
        let outstanding = requested[tenant] - board.delivered(tenant);
        let grant = tokens.min(Pace::burst(rate).saturating_sub(outstanding));
        if grant > 0 {
            subscription.request(grant);
            requested[tenant] += grant;
            pace.spend(grant);
        }
    });
}

/// Until `stop`: every tick, `each(tenant, its bucket, its rate now, now)` for every
/// tenant, in order.
fn every_tick(
    start: Instant,
    stop: &AtomicBool,
    mut each: impl FnMut(usize, &mut Pace, f64, Instant),
) {
    let mut paces: Vec<Pace> = (0..TENANTS).map(|_| Pace::new(start)).collect();
    let mut next = start;
    while !stop.load(Ordering::Relaxed) {
        next += TICK;
        sleep_until(next);
        let now = Instant::now();
        for (tenant, pace) in paces.iter_mut().enumerate() {
            each(tenant, pace, rate(tenant, now - start), now);
        }
    }
}

/// The mux scenario, running.
struct MuxRun {
    mux: Mux<Note>,
    pools: [ThreadPool; 2],
    slots: Vec<Arc<Mutex<Option<Subscription>>>>,
    pacer: JoinHandle<()>,
}

fn start_mux(start: Instant, board: &Arc<Board>, stop: &Arc<AtomicBool>) -> MuxRun {
    let sender = ThreadPool::builder().name("mux-send").threads(1).build();
    let receiver = ThreadPool::builder().name("mux-recv").threads(1).build();
    let mux = Mux::<Note>::builder()
        .exclusive(EXCLUSIVE)
        .shared(SHARED)
        .borrow_cap(BORROW_CAP)
        .quantum(16)
        .build_local(sender.clone(), receiver.clone())
        .expect("a valid mux configuration");
    let slots: Vec<_> = (0..TENANTS)
        .map(|tenant| {
            let slot = Arc::new(Mutex::new(None));
            // The producer makes a notification each time the mux asks for one.
            let producer = weir::generate(0u64, |seq: &mut u64| {
                let note = Note {
                    seq: *seq,
                    made: Instant::now(),
                };
                *seq += 1;
                Step::Next(note)
            });
            producer
                .via(&mux, tenant as u64)
                .expect("a fresh channel id")
                .subscribe(Provider {
                    tenant,
                    board: board.clone(),
                    slot: slot.clone(),
                });
            slot
        })
        .collect();
    let pacer = {
        let (slots, board, stop) = (slots.clone(), board.clone(), stop.clone());
        thread::Builder::new()
            .name("mux-providers".into())
            .spawn(move || pace_mux(start, slots, board, stop))
            .unwrap()
    };
    MuxRun {
        mux,
        pools: [sender, receiver],
        slots,
        pacer,
    }
}

impl MuxRun {
    /// Stop the providers, check the mux's counts against what they saw, cancel every
    /// channel and wait for the mux to close them; say whether all credit came back.
    fn finish(self, board: &Board) -> String {
        self.pacer.join().unwrap();
        // No more requests: what was sent is delivered within moments.
        let deadline = Instant::now() + Duration::from_secs(1);
        let mut stats = self.mux.stats();
        while stats.buffered_total > 0 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(1));
            stats = self.mux.stats();
        }
        let mut sent = 0;
        let mut disagree = Vec::new();
        for tenant in 0..TENANTS {
            let channel = stats.channel(tenant as u64).cloned().unwrap_or_default();
            sent += channel.sent;
            let seen = board.delivered(tenant);
            if channel.delivered != seen || channel.sent != seen {
                disagree.push(format!(
                    "{}: sent {} delivered {} provider saw {seen}",
                    name(tenant),
                    channel.sent,
                    channel.delivered
                ));
            }
        }
        let counts = if disagree.is_empty() {
            format!(
                "mux counts agree with the providers: {} sent, all delivered",
                thousands(sent)
            )
        } else {
            format!("COUNTS DISAGREE: {}", disagree.join("; "))
        };
        for slot in &self.slots {
            if let Some(subscription) = slot.lock().unwrap().take() {
                subscription.cancel();
            }
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut stats = self.mux.stats();
        while !stats.channels.is_empty() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(1));
            stats = self.mux.stats();
        }
        for pool in &self.pools {
            pool.shutdown();
        }
        format!(
            "{counts}\n  cancelled: {} channels still open, {} items buffered, shared pool {}/{} \
             free, high water {} (bound {})",
            stats.channels.len(),
            stats.buffered_total,
            stats.pool_free,
            stats.shared,
            stats.high_water,
            TENANTS as u64 * EXCLUSIVE + SHARED,
        )
    }
}

// ---- naive: one FIFO, one dispatcher -----------------------------------------------

/// The naive side's counters, per tenant.
struct Gauges {
    /// Notifications of this tenant in the shared FIFO (may read -1 for an instant).
    in_fifo: Vec<AtomicI64>,
    /// Time the dispatcher spent blocked on this tenant's full queue, in ns.
    blocked_ns: Vec<AtomicU64>,
    /// Times the dispatcher found this tenant's queue full.
    blocked_events: Vec<AtomicU64>,
}

/// The naive scenario, running.
struct NaiveRun {
    gauges: Arc<Gauges>,
    /// Handles on the tenant queues, for their lengths.
    queues: Vec<Sender<Note>>,
    threads: Vec<JoinHandle<()>>,
}

fn start_naive(start: Instant, board: &Arc<Board>, stop: &Arc<AtomicBool>) -> NaiveRun {
    let gauges = Arc::new(Gauges {
        in_fifo: (0..TENANTS).map(|_| AtomicI64::new(0)).collect(),
        blocked_ns: (0..TENANTS).map(|_| AtomicU64::new(0)).collect(),
        blocked_events: (0..TENANTS).map(|_| AtomicU64::new(0)).collect(),
    });
    let (fifo_in, fifo_out) = bounded::<(usize, Note)>(FIFO);
    let (queues, outlets): (Vec<_>, Vec<_>) = (0..TENANTS).map(|_| bounded(QUEUE)).unzip();
    let mut threads = Vec::new();
    // The producers: they take turns on one ingest thread, so the FIFO holds the
    // tenants' notifications evenly interleaved, and push as fast as it takes them.
    {
        let (gauges, stop) = (gauges.clone(), stop.clone());
        threads.push(thread::spawn(move || {
            let mut seqs = [0u64; TENANTS];
            while !stop.load(Ordering::Relaxed) {
                for (tenant, seq) in seqs.iter_mut().enumerate() {
                    let note = Note {
                        seq: *seq,
                        made: Instant::now(),
                    };
                    if fifo_in.send((tenant, note)).is_err() {
                        return;
                    }
                    gauges.in_fifo[tenant].fetch_add(1, Ordering::Relaxed);
                    *seq += 1;
                }
            }
        }));
    }
    // The dispatcher: FIFO order, blocking on a full tenant queue.
    {
        let (queues, gauges) = (queues.clone(), gauges.clone());
        threads.push(thread::spawn(move || {
            for (tenant, note) in fifo_out.iter() {
                gauges.in_fifo[tenant].fetch_sub(1, Ordering::Relaxed);
                match queues[tenant].try_send(note) {
                    Ok(()) => {}
                    Err(TrySendError::Full(note)) => {
                        let since = Instant::now();
                        let sent = queues[tenant].send(note);
                        gauges.blocked_ns[tenant]
                            .fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
                        gauges.blocked_events[tenant].fetch_add(1, Ordering::Relaxed);
                        if sent.is_err() {
                            return;
                        }
                    }
                    Err(TrySendError::Disconnected(_)) => return,
                }
            }
        }));
    }
    // The providers: every tick, each takes what its token bucket allows from its
    // queue. Dropping the queues at the end ends the dispatcher, then the producers.
    {
        let (board, stop) = (board.clone(), stop.clone());
        threads.push(thread::spawn(move || {
            every_tick(start, &stop, |tenant, pace, rate, now| {
                let tokens = pace.refill(rate, now);
                let mut taken = 0;
                while taken < tokens {
                    let Ok(note) = outlets[tenant].try_recv() else {
                        break;
                    };
                    board.deliver(tenant, &note);
                    taken += 1;
                }
                pace.spend(taken);
            });
        }));
    }
    NaiveRun {
        gauges,
        queues,
        threads,
    }
}

impl NaiveRun {
    fn finish(self) -> String {
        let n = self.threads.len();
        for thread in self.threads {
            thread.join().unwrap();
        }
        format!("stopped: {n} threads joined")
    }
}

// ---- the report --------------------------------------------------------------------

/// The 99th percentile of `latencies` (µs), formatted.
fn p99(latencies: &mut [u32]) -> String {
    if latencies.is_empty() {
        return "-".into();
    }
    latencies.sort_unstable();
    let at = (latencies.len() * 99).div_ceil(100) - 1;
    ms(latencies[at])
}

fn ms(micros: u32) -> String {
    let ms = f64::from(micros) / 1e3;
    if ms < 10.0 {
        format!("{ms:.1}ms")
    } else {
        format!("{ms:.0}ms")
    }
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// What one scenario delivered: per tenant, per second; and the healthy tenants'
/// latencies after the throttle.
struct History {
    per_second: Vec<[u64; TENANTS]>,
    healthy_after: Vec<u32>,
}

impl History {
    fn new() -> Self {
        History {
            per_second: Vec::new(),
            healthy_after: Vec::new(),
        }
    }

    /// Healthy tenants' (B..) aggregate rate and A's, over seconds `from..to`.
    fn rates(&self, from: usize, to: usize) -> (f64, f64) {
        let secs = (to - from) as f64;
        let window = &self.per_second[from..to];
        let healthy: u64 = window.iter().map(|s| s[1..].iter().sum::<u64>()).sum();
        let a: u64 = window.iter().map(|s| s[0]).sum();
        (healthy as f64 / secs, a as f64 / secs)
    }

    fn summary(&mut self, title: &str) -> String {
        let split = THROTTLE_AT.as_secs() as usize;
        let (before, a_before) = self.rates(0, split);
        let (after, a_after) = self.rates(split, SECONDS);
        format!(
            "{title}: healthy tenants B-H {}/s before the throttle, {}/s after ({:.0}%), \
             p99 after {}; A {}/s -> {}/s",
            thousands(before as u64),
            thousands(after as u64),
            100.0 * after / before,
            p99(&mut self.healthy_after),
            thousands(a_before as u64),
            thousands(a_after as u64),
        )
    }
}

fn main() {
    println!(
        "{TENANTS} tenants share one transport; each provider takes {} notifications/s; at t = {} s \
         A's provider drops to {:.0}%.",
        thousands(RATE as u64),
        THROTTLE_AT.as_secs(),
        THROTTLED * 100.0,
    );
    println!(
        "weir mux: E {EXCLUSIVE} per channel, shared pool {SHARED}, borrow cap {BORROW_CAP}. \
         naive: FIFO {FIFO}, tenant queues {QUEUE}, one dispatcher."
    );
    println!(
        "dlv/s: delivered in that second; p99: production-to-delivery latency of those.\n\
         blocked: time blocked on credit in that second / times. mux: the channel had backlog \
         and demand but no credit;\n  naive: the dispatcher waited for this tenant's full queue \
         (it always waits for someone: producers outrun providers).\n"
    );
    let stop = Arc::new(AtomicBool::new(false));
    let (mux_board, naive_board) = (Board::new(), Board::new());
    let start = Instant::now();
    let mux = start_mux(start, &mux_board, &stop);
    let naive = start_naive(start, &naive_board, &stop);

    let mut mux_history = History::new();
    let mut naive_history = History::new();
    let mut mux_before = vec![ChannelStats::default(); TENANTS];
    let mut naive_before = [(0u64, 0u64); TENANTS];
    for second in 1..=SECONDS {
        let now = Duration::from_secs(second as u64);
        sleep_until(start + now);
        let stats = mux.mux.stats();
        let throttled = now > THROTTLE_AT;
        if throttled {
            println!(
                "t = {second} s  (A's provider at {:.0}% since t = {} s)",
                THROTTLED * 100.0,
                THROTTLE_AT.as_secs()
            );
        } else {
            println!("t = {second} s");
        }
        println!(
            "  {:<7}| {:<43}| naive: one FIFO, one dispatcher",
            "tenant", "weir mux"
        );
        println!(
            "  {:<7}| {:>6} {:>8} {:>7} {:>10} {:>7} | {:>6} {:>8} {:>7} {:>10} {:>7}",
            "",
            "dlv/s",
            "buffered",
            "backlog",
            "blocked",
            "p99",
            "dlv/s",
            "in FIFO",
            "queued",
            "blocked",
            "p99"
        );
        let mut mux_counts = [0u64; TENANTS];
        let mut naive_counts = [0u64; TENANTS];
        for tenant in 0..TENANTS {
            // weir mux
            let mut latencies = mux_board.take(tenant);
            mux_counts[tenant] = latencies.len() as u64;
            let channel = stats.channel(tenant as u64).cloned().unwrap_or_default();
            let was = &mux_before[tenant];
            let blocked = format!(
                "{}ms/{}",
                channel.blocked.saturating_sub(was.blocked).as_millis(),
                channel.blocked_events - was.blocked_events
            );
            if throttled && tenant > 0 {
                mux_history.healthy_after.extend_from_slice(&latencies);
            }
            let mux_cells = format!(
                "{:>6} {:>8} {:>7} {:>10} {:>7}",
                latencies.len(),
                channel.buffered,
                channel.backlog,
                blocked,
                p99(&mut latencies)
            );
            mux_before[tenant] = channel;
            // naive
            let mut latencies = naive_board.take(tenant);
            naive_counts[tenant] = latencies.len() as u64;
            let gauges = &naive.gauges;
            let blocked_ns = gauges.blocked_ns[tenant].load(Ordering::Relaxed);
            let events = gauges.blocked_events[tenant].load(Ordering::Relaxed);
            let (was_ns, was_events) = naive_before[tenant];
            naive_before[tenant] = (blocked_ns, events);
            let blocked = format!(
                "{}ms/{}",
                (blocked_ns - was_ns) / 1_000_000,
                events - was_events
            );
            if throttled && tenant > 0 {
                naive_history.healthy_after.extend_from_slice(&latencies);
            }
            println!(
                "  {:<7}| {mux_cells} | {:>6} {:>8} {:>7} {:>10} {:>7}",
                name(tenant),
                latencies.len(),
                gauges.in_fifo[tenant].load(Ordering::Relaxed).max(0),
                naive.queues[tenant].len(),
                blocked,
                p99(&mut latencies)
            );
        }
        let healthy = |counts: &[u64; TENANTS]| thousands(counts[1..].iter().sum());
        println!(
            "  {:<7}| {:>6} {:<35} | {:>6}\n",
            "B-H",
            healthy(&mux_counts),
            "",
            healthy(&naive_counts)
        );
        mux_history.per_second.push(mux_counts);
        naive_history.per_second.push(naive_counts);
    }
    stop.store(true, Ordering::Relaxed);
    let mux_end = mux.finish(&mux_board);
    let naive_end = naive.finish();
    println!("{}", mux_history.summary("weir mux"));
    println!("  {mux_end}");
    println!("  deliveries out of sequence: {}", mux_board.gaps());
    println!("{}", naive_history.summary("naive   "));
    println!("  {naive_end}");
    println!("  deliveries out of sequence: {}", naive_board.gaps());
}
