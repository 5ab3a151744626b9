//! `mux_acceptance`: the wall-clock figures of the mux's acceptance scenarios, which
//! the tests check only as counts and orders (a test never asserts a time). Run with
//! `cargo bench --bench mux_acceptance`; it prints one table.
//!
//! Every mux is E = 32, S = 128, C = 32 over two pools of one thread each (worker;
//! receivers), as in `benches/mux.rs`. Eight channels, each `range(0..N)` through
//! `via` into `fold`, N = 2^19.
//!
//! * A1, A2, A13, retention: the healthy channels' items/s with one consumer stalled
//!   (it asked for 10 items and never again), with ⌈S/C⌉ = 4 stalled, and with one
//!   consumer that panics at item 500, each ÷ the rate of the same healthy
//!   channels on a mux of their own (their capacity: the troubled ones absent), in
//!   the same round (11 rounds, alternating order; median and min–max). Targets on
//!   threads: ≥ 0.90 (A1, A2), ≥ 0.95 (A13). A stalled consumer here holds only the
//!   10 items it asked for: the mux takes credit only against demand, so stalled
//!   channels never drain the pool (A2's "pool exhausted" cannot arise), and A1/A2
//!   measure what idle channels beside the healthy ones cost them. A13's consumer
//!   fails at once rather than halfway (as the tests' does): until it fails it is a
//!   busy channel that rightly takes its eighth of the mux, so a failure halfway would
//!   cap the whole run's retention at 1 / (½ · 8/7 + ½) ≈ 0.93 for a perfect mux.
//! * A5: a channel whose consumer asked for E + C = 64 items is cancelled as soon as
//!   the mux has sent them (credit taken; some may be delivered already, and their
//!   shared units back); from the cancel to the pool whole and the channel closed,
//!   polled with a yield between polls; 200 samples, median and p99, and the shared
//!   units held at the cancel (mean). Target: ≤ 1 ms.
//! * A4, resume: eight channels of [`A4_N`] items each, every consumer checking that
//!   item `i` is the `i`-th it gets (exactly once, in order) and asking for 256 at a
//!   time. In the stalled run consumer 0 stops asking at a quarter of its items, and
//!   [`A4_STALL`] = 2 s later asks again; the time until every channel completed is
//!   compared with the same run without the stall (which takes about as long as the
//!   stall, so the healthy channels are still busy when it ends): target ≤ 1.5 × the
//!   no-stall time + 1 s (3 rounds, alternating order). The stats are checked after
//!   each run: pool whole, no channel left.
//! * A11: eight channels echo 1 MiB each over two muxes whose lanes hold one frame
//!   (E 64, quantum 16); 3 runs. Target: < 10 s.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use weir::mux::Mux;
use weir::prelude::*;
use weir::runtime::ThreadPool;

const N: u64 = 1 << 19;
const CHANNELS: u64 = 8;
const ROUNDS: usize = 11;
const HANG: Duration = Duration::from_secs(60);
/// Items per channel in A4 (eight channels take about 2 s on this host).
const A4_N: u64 = 1 << 23;
/// How long A4's stalled consumer stops asking.
const A4_STALL: Duration = Duration::from_secs(2);
/// What an A4 consumer asks for at a time.
const A4_BATCH: u64 = 256;

struct Pools {
    send: ThreadPool,
    receive: ThreadPool,
}

impl Pools {
    fn new() -> Self {
        Pools {
            send: ThreadPool::builder().name("acc-send").threads(1).build(),
            receive: ThreadPool::builder().name("acc-recv").threads(1).build(),
        }
    }

    fn mux<T: Send + 'static>(&self) -> Mux<T> {
        Mux::builder()
            .exclusive(32)
            .shared(128)
            .borrow_cap(32)
            .build_local(self.send.clone(), self.receive.clone())
            .unwrap()
    }
}

/// A consumer that asks for `request` items once and holds whatever it gets.
struct Holder {
    request: u64,
    subscription: Arc<Mutex<Option<Subscription>>>,
}

impl Subscriber<u64> for Holder {
    fn on_subscribe(&mut self, subscription: Subscription) {
        subscription.request(self.request);
        *self.subscription.lock().unwrap() = Some(subscription);
    }
    fn on_next(&mut self, _item: u64) {}
    fn on_error(&mut self, _error: weir::Error) {}
    fn on_complete(&mut self) {}
}

/// How the channels below `stalled` (from channel 0) misbehave.
#[derive(Clone, Copy)]
enum Trouble {
    None,
    /// They ask for 10 items and never again.
    Stall,
    /// They panic at item 500.
    Panic,
}

/// The items/s of channels `troubled..CHANNELS`, with channels `0..troubled` in
/// `trouble` beside them (`Trouble::None`: absent).
fn healthy_rate(pools: &Pools, troubled: u64, trouble: Trouble) -> f64 {
    let mux = pools.mux::<u64>();
    let mut held = Vec::new();
    let mut panicking = Vec::new();
    for id in 0..troubled {
        match trouble {
            Trouble::None => {}
            Trouble::Stall => {
                let subscription = Arc::new(Mutex::new(None));
                weir::range(0..u64::MAX)
                    .via(&mux, id)
                    .unwrap()
                    .subscribe(Holder {
                        request: 10,
                        subscription: subscription.clone(),
                    });
                held.push(subscription);
            }
            Trouble::Panic => panicking.push(
                weir::range(0..u64::MAX)
                    .via(&mux, id)
                    .unwrap()
                    .for_each(|x| assert!(x != 500, "consumer fails on purpose")),
            ),
        }
    }
    let healthy = troubled..CHANNELS;
    let count = healthy.end - healthy.start;
    let start = Instant::now();
    let sums: Vec<_> = healthy
        .map(|id| {
            weir::range(0..N)
                .via(&mux, id)
                .unwrap()
                .fold(0u64, |a, x| a.wrapping_add(x))
        })
        .collect();
    for mut sum in sums {
        let sum = sum.wait_timeout(HANG).expect("hang").unwrap();
        assert_eq!(sum, N * (N - 1) / 2);
    }
    let rate = (count * N) as f64 / start.elapsed().as_secs_f64();
    for subscription in held {
        if let Some(subscription) = subscription.lock().unwrap().take() {
            subscription.cancel();
        }
    }
    for mut sink in panicking {
        let _ = sink
            .wait_timeout(HANG)
            .expect("the panicking channel ended");
    }
    rate
}

/// An A4 consumer: checks that every item is the next of `0..A4_N`, asks for
/// [`A4_BATCH`] at a time, and stops asking once it has `stall_at` items until
/// `resumed` is set (then the resuming thread asks for it). Reports its count and
/// whether the order held when the channel ends.
struct InOrder {
    next: u64,
    stall_at: u64,
    parked: Arc<AtomicBool>,
    resumed: Arc<AtomicBool>,
    subscription: Arc<Mutex<Option<Subscription>>>,
    ordered: bool,
    done: mpsc::Sender<(u64, bool, Result<(), weir::Error>)>,
}

impl Subscriber<u64> for InOrder {
    fn on_subscribe(&mut self, subscription: Subscription) {
        subscription.request(A4_BATCH);
        *self.subscription.lock().unwrap() = Some(subscription);
    }
    fn on_next(&mut self, item: u64) {
        self.ordered &= item == self.next;
        self.next += 1;
        if self.next % A4_BATCH != 0 {
            return;
        }
        if self.next == self.stall_at && !self.resumed.load(Ordering::Acquire) {
            // Release: pairs with the resuming thread's Acquire; it asks from now on.
            self.parked.store(true, Ordering::Release);
            return;
        }
        if let Some(subscription) = &*self.subscription.lock().unwrap() {
            subscription.request(A4_BATCH);
        }
    }
    fn on_error(&mut self, error: weir::Error) {
        let _ = self.done.send((self.next, self.ordered, Err(error)));
    }
    fn on_complete(&mut self) {
        let _ = self.done.send((self.next, self.ordered, Ok(())));
    }
}

/// A4: the time until all eight channels delivered [`A4_N`] items each in order, with
/// consumer 0 stalled for [`A4_STALL`] at a quarter of its items, or without.
fn resume_time(pools: &Pools, stall: bool) -> Duration {
    let mux = pools.mux::<u64>();
    let (done, finished) = mpsc::channel();
    let parked = Arc::new(AtomicBool::new(false));
    let resumed = Arc::new(AtomicBool::new(false));
    let stalled = Arc::new(Mutex::new(None));
    let start = Instant::now();
    for id in 0..CHANNELS {
        let stall_at = if stall && id == 0 { A4_N / 4 } else { u64::MAX };
        let subscription = if id == 0 {
            stalled.clone()
        } else {
            Arc::new(Mutex::new(None))
        };
        weir::range(0..A4_N)
            .via(&mux, id)
            .unwrap()
            .subscribe(InOrder {
                next: 0,
                stall_at,
                parked: parked.clone(),
                resumed: resumed.clone(),
                subscription,
                ordered: true,
                done: done.clone(),
            });
    }
    drop(done);
    if stall {
        let deadline = Instant::now() + HANG;
        // Acquire: pairs with the consumer's Release when it parks.
        while !parked.load(Ordering::Acquire) {
            assert!(
                Instant::now() < deadline,
                "consumer 0 never reached its stall"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(A4_STALL);
        // Release: pairs with the consumer's Acquire (it asks for itself from now on).
        resumed.store(true, Ordering::Release);
        if let Some(subscription) = &*stalled.lock().unwrap() {
            subscription.request(A4_BATCH);
        }
    }
    for _ in 0..CHANNELS {
        let (count, ordered, end) = finished.recv_timeout(HANG).expect("a channel hung");
        assert!(end.is_ok(), "a channel failed: {end:?}");
        assert_eq!(count, A4_N, "every item exactly once");
        assert!(ordered, "per-channel order");
    }
    let elapsed = start.elapsed();
    // Every channel ended: its credit comes back as it closes.
    let deadline = Instant::now() + HANG;
    loop {
        let stats = mux.stats();
        if stats.pool_free == 128 && stats.channels.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "credit not conserved: {stats:?}");
        std::thread::yield_now();
    }
    elapsed
}

/// From a channel's cancel to the pool whole and the channel closed, and the shared
/// units it held at the cancel.
fn cancel_latency(pools: &Pools) -> (Duration, u64) {
    let mux = pools.mux::<u64>();
    let subscription = Arc::new(Mutex::new(None));
    weir::range(0..u64::MAX)
        .via(&mux, 0)
        .unwrap()
        .subscribe(Holder {
            request: 32 + 32,
            subscription: subscription.clone(),
        });
    // Let it take its credit: E + C items sent.
    let deadline = Instant::now() + HANG;
    let held = loop {
        let stats = mux.stats();
        let chan = stats.channel(0).expect("open");
        if chan.sent >= 64 {
            break chan.shared_held;
        }
        assert!(Instant::now() < deadline, "the channel never sent");
        std::thread::yield_now();
    };
    let subscription = subscription.lock().unwrap().take().unwrap();
    let start = Instant::now();
    subscription.cancel();
    loop {
        let stats = mux.stats();
        if stats.pool_free == 128 && stats.channels.is_empty() {
            return (start.elapsed(), held);
        }
        assert!(start.elapsed() < HANG, "credit never came back");
        std::thread::yield_now();
    }
}

/// Eight channels echo 1 MiB each over lanes of one frame.
fn echo(pools: &Pools) -> Duration {
    let one_frame = |from: &ThreadPool, to: &ThreadPool| {
        Mux::<u8>::builder()
            .exclusive(64)
            .shared(64)
            .quantum(16)
            .lane(1)
            .build_local(from.clone(), to.clone())
            .unwrap()
    };
    let there = one_frame(&pools.send, &pools.receive);
    let back = one_frame(&pools.receive, &pools.send);
    let mib = 1u64 << 20;
    let start = Instant::now();
    let echoes: Vec<_> = (0..8u64)
        .map(|id| {
            weir::range(0..mib)
                .map(|x| x as u8)
                .via(&there, id)
                .unwrap()
                .via(&back, id)
                .unwrap()
                .fold(0u64, |n, _| n + 1)
        })
        .collect();
    for mut echo in echoes {
        assert_eq!(echo.wait_timeout(HANG).expect("hang").unwrap(), mib);
    }
    start.elapsed()
}

fn median(mut xs: Vec<f64>) -> (f64, f64, f64) {
    xs.sort_by(f64::total_cmp);
    (xs[xs.len() / 2], xs[0], xs[xs.len() - 1])
}

fn main() {
    let pools = Pools::new();
    // Quiet the panicking consumers' messages, and only theirs.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let on_purpose = info
            .payload()
            .downcast_ref::<&str>()
            .is_some_and(|m| m.contains("on purpose"))
            || info
                .payload()
                .downcast_ref::<String>()
                .is_some_and(|m| m.contains("on purpose"));
        if !on_purpose {
            default_hook(info);
        }
    }));
    // Warm up.
    let _ = healthy_rate(&pools, 0, Trouble::None);
    let cases = [
        ("A1, one stalled", 1, Trouble::Stall, 0.90),
        ("A2, four stalled", 4, Trouble::Stall, 0.90),
        ("A13, one panicking", 1, Trouble::Panic, 0.95),
    ];
    println!("mux acceptance on threads (E 32, S 128, C 32; 8 channels of {N} items)");
    for (name, troubled, trouble, target) in cases {
        let mut ratios = Vec::new();
        let mut rates = Vec::new();
        for round in 0..ROUNDS {
            let (fast, troubled_rate) = if round % 2 == 0 {
                let fast = healthy_rate(&pools, troubled, Trouble::None);
                (fast, healthy_rate(&pools, troubled, trouble))
            } else {
                let t = healthy_rate(&pools, troubled, trouble);
                (healthy_rate(&pools, troubled, Trouble::None), t)
            };
            ratios.push(troubled_rate / fast);
            rates.push(troubled_rate / 1e6);
        }
        let (r, lo, hi) = median(ratios);
        let (m, _, _) = median(rates);
        println!(
            "  {name:<20} healthy {m:6.2} M items/s, retention {r:.2} ({lo:.2}-{hi:.2}); target >= {target:.2}"
        );
    }
    let samples: Vec<(Duration, u64)> = (0..200).map(|_| cancel_latency(&pools)).collect();
    let held = samples.iter().map(|(_, h)| *h as f64).sum::<f64>() / samples.len() as f64;
    let mut sorted: Vec<f64> = samples.iter().map(|(d, _)| d.as_secs_f64() * 1e6).collect();
    sorted.sort_by(f64::total_cmp);
    println!(
        "  A5, cancel to credit back: median {:.0} us, p99 {:.0} us, max {:.0} us (shared units held at the cancel: {held:.1} on average); target <= 1000 us",
        sorted[sorted.len() / 2],
        sorted[sorted.len() * 99 / 100],
        sorted[sorted.len() - 1]
    );
    let mut resumes = Vec::new();
    for round in 0..3 {
        let (plain, stalled) = if round % 2 == 0 {
            let plain = resume_time(&pools, false);
            (plain, resume_time(&pools, true))
        } else {
            let stalled = resume_time(&pools, true);
            (resume_time(&pools, false), stalled)
        };
        let limit = plain.mul_f64(1.5) + Duration::from_secs(1);
        resumes.push(format!(
            "{:.2} s (no stall {:.2} s, limit {:.2} s)",
            stalled.as_secs_f64(),
            plain.as_secs_f64(),
            limit.as_secs_f64()
        ));
    }
    println!(
        "  A4, all items in order after a 2 s stall of one of 8: {}; target <= 1.5 x no stall + 1 s",
        resumes.join(" / ")
    );
    let echoes: Vec<f64> = (0..3).map(|_| echo(&pools).as_secs_f64()).collect();
    println!(
        "  A11, 8 x 1 MiB echoed over one-frame lanes: {:.2} / {:.2} / {:.2} s; target < 10 s",
        echoes[0], echoes[1], echoes[2]
    );
}
