//! Same-process comparison of this checkout's mux with an earlier revision's, built by
//! `PROBE=mux_probe tools/compare/run.sh REVISION` (which names the earlier crate
//! `weir_base`): the `mux` bench's all-fast case, K channels of `range` through one
//! `Mux` (worker on a pool of one thread, receivers on another; E = 32, S = 128,
//! C = 32, quantum 16), in the bench's two formulations (`via` + `fold`, and
//! `channel(id).open()` with a counting subscriber).
//!
//! Each round runs every case once on each build, alternating which goes first; the
//! ratio (current ÷ base: above 1 is faster now) is taken inside the round, and the
//! table reports the median and the geometric mean of the rounds' ratios.
//!
//! Environment: `ROUNDS` (default 20), `N` items per run over all channels (default
//! 2^20), `KS` (comma-separated, default `2,16,256`), `ONLY` (forms to run: 0 `fold`,
//! 1 `open`; default both), `STATS` (set: print each run's frames and announcements
//! per item), `STALL` (set: channel 0 asks for 10 items and never more, and the
//! rates are the other channels': the bench's stalled case).

use std::time::Instant;

mod common;
use common::{env_list, env_or, only, Paired};

/// The cases, written once for each build.
macro_rules! cases {
    ($module:ident, $krate:ident) => {
        mod $module {
            use std::sync::mpsc::{channel, Sender};
            use std::time::Instant;
            use $krate::mux::Mux;
            use $krate::prelude::*;
            use $krate::runtime::ThreadPool;

            pub struct Pools {
                send: ThreadPool,
                receive: ThreadPool,
            }

            impl Pools {
                pub fn new() -> Self {
                    Pools {
                        send: ThreadPool::builder().name("send").threads(1).build(),
                        receive: ThreadPool::builder().name("recv").threads(1).build(),
                    }
                }

                fn mux(&self) -> Mux<u64> {
                    Mux::builder()
                        .exclusive(32)
                        .shared(128)
                        .borrow_cap(32)
                        .quantum(16)
                        .build_local(self.send.clone(), self.receive.clone())
                        .unwrap()
                }
            }

            struct Count {
                count: u64,
                sum: u64,
                done: Sender<(u64, u64)>,
                subscription: Option<Subscription>,
            }

            impl Subscriber<u64> for Count {
                fn on_subscribe(&mut self, subscription: Subscription) {
                    subscription.request($krate::demand::UNBOUNDED);
                    self.subscription = Some(subscription);
                }
                fn on_next(&mut self, item: u64) {
                    self.count += 1;
                    self.sum = self.sum.wrapping_add(item);
                }
                fn on_next_batch<I: Iterator<Item = u64>>(&mut self, items: I) -> u64 {
                    for item in items {
                        self.on_next(item);
                    }
                    0
                }
                fn on_error(&mut self, error: $krate::Error) {
                    panic!("a channel failed: {error}");
                }
                fn on_complete(&mut self) {
                    let _ = self.done.send((self.count, self.sum));
                }
            }

            /// Asks for 10 items once and holds its subscription.
            struct Holder {
                slot: std::sync::Arc<std::sync::Mutex<Option<Subscription>>>,
            }

            impl Subscriber<u64> for Holder {
                fn on_subscribe(&mut self, subscription: Subscription) {
                    subscription.request(10);
                    *self.slot.lock().unwrap() = Some(subscription);
                }
                fn on_next(&mut self, _item: u64) {}
                fn on_error(&mut self, error: $krate::Error) {
                    panic!("the stalled channel failed: {error}");
                }
                fn on_complete(&mut self) {}
            }

            /// Runs `k` channels over `n` items in form `open` (else `fold`);
            /// returns million items/s and the total sum. With `stall`, channel 0
            /// asks for 10 items and never more (cancelled after the run), and the
            /// rate and sum are the other channels'.
            pub fn run(open: bool, stall: bool, k: u64, n: u64, pools: &Pools) -> (f64, u64) {
                let mux = pools.mux();
                let per = n / k;
                let start = Instant::now();
                let mut total = 0u64;
                let slot = std::sync::Arc::new(std::sync::Mutex::new(None));
                let first = u64::from(stall);
                if stall {
                    $krate::range(0..per)
                        .via(&mux, 0)
                        .unwrap()
                        .subscribe(Holder { slot: slot.clone() });
                }
                if open {
                    let (tx, rx) = channel();
                    for c in first..k {
                        let (sink, source) = mux.channel(c).open().unwrap();
                        $krate::range(c * per..(c + 1) * per).subscribe(sink);
                        source.subscribe(Count {
                            count: 0,
                            sum: 0,
                            done: tx.clone(),
                            subscription: None,
                        });
                    }
                    for _ in first..k {
                        let (count, sum) = rx.recv().unwrap();
                        assert_eq!(count, per);
                        total = total.wrapping_add(sum);
                    }
                } else {
                    let handles: Vec<_> = (first..k)
                        .map(|c| {
                            $krate::range(c * per..(c + 1) * per)
                                .via(&mux, c)
                                .unwrap()
                                .fold(0u64, |sum, x| sum.wrapping_add(x))
                        })
                        .collect();
                    for handle in handles {
                        total = total.wrapping_add(handle.wait().unwrap());
                    }
                }
                let rate = (per * (k - first)) as f64 / start.elapsed().as_secs_f64() / 1e6;
                if let Some(subscription) = slot.lock().unwrap().take() {
                    subscription.cancel();
                }
                if std::env::var_os("STATS").is_some() {
                    let stats = mux.stats();
                    eprintln!(
                        "{} K {k}: {:.3} frames per item, {:.3} announcements per item, {} pool-blocked",
                        stringify!($module),
                        stats.frames as f64 / (per * k) as f64,
                        stats.announcements as f64 / (per * k) as f64,
                        stats.pool_blocked,
                    );
                }
                (rate, total)
            }
        }
    };
}

cases!(current, weir);
cases!(base, weir_base);

fn main() {
    let rounds: usize = env_or("ROUNDS", 20);
    let n: u64 = env_or("N", 1 << 20);
    let ks: Vec<u64> = env_list("KS", "2,16,256");
    let only = only();
    let stall = std::env::var_os("STALL").is_some();
    let (now, then) = (current::Pools::new(), base::Pools::new());
    println!("{rounds} rounds of {n} items; ratio = current ÷ base (same round)");
    println!("| form | K | current M/s | base M/s | ratio median | ratio geomean |");
    println!("|---|---|---|---|---|---|");
    let started = Instant::now();
    for (form, open) in [false, true].into_iter().enumerate() {
        if only.as_ref().is_some_and(|only| !only.contains(&form)) {
            continue;
        }
        for &k in &ks {
            // Channel c carries c·per .. (c + 1)·per: the sum of 0 .. per·k
            // (without channel 0's when it is stalled).
            let per = n / k;
            let first = if stall { per } else { 0 };
            let expected = (first..per * k).fold(0u64, |sum, x| sum.wrapping_add(x));
            let checked = |(rate, sum): (f64, u64)| {
                assert_eq!(sum, expected, "K {k}: wrong sum");
                rate
            };
            let paired = Paired::run(
                rounds,
                || checked(current::run(open, stall, k, n, &now)),
                || checked(base::run(open, stall, k, n, &then)),
            );
            let form = if open { "open" } else { "fold" };
            println!("| {form} | {k} | {} |", paired.columns(1));
        }
    }
    eprintln!("took {:.0} s", started.elapsed().as_secs_f64());
}
