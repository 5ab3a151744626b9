//! Same-process comparison of this checkout's hub with an earlier revision's, built by
//! `PROBE=hub_probe tools/compare/run.sh REVISION` (which names the earlier crate
//! `weir_base`): the `hub` bench's cases, four `Backpressure` subscribers summing
//! `0..N`:
//!
//! 0. `range.subscribe_on(pool of 1)` → hub → four `publish_on(pool of 2, 256)`;
//! 1. a producer thread `send_blocking`s into `channel(1024)` → hub → four
//!    `publish_on(pool of 2, 256)`;
//! 2. the same channel → hub → four `fold`s on the producer's thread;
//! 3. the same channel → `publish_on(pool of 1, 256)` → hub → four `fold`s;
//! 4. the same channel → `publish_on(pool of 1, 256)` → hub → four
//!    `publish_on(pool of 2, 256)`;
//! 5. the same channel → hub → four threads iterating `blocking_iter(256)`.
//!
//! Each round runs every case once on each build, alternating which goes first; the
//! ratio (current ÷ base: above 1 is faster now) is taken inside the round.
//!
//! Environment: `ROUNDS` (default 10), `N` items (default 1,000,000), `ONLY` (the
//! cases to run, comma-separated indices; default all).

use std::time::Instant;

mod common;
use common::{env_or, only, Paired};

/// Subscribers per hub.
const SUBSCRIBERS: usize = 4;
/// The hub's ring and the channel's capacity.
const CAPACITY: usize = 1024;

/// The cases, written once for each build.
macro_rules! cases {
    ($module:ident, $krate:ident) => {
        mod $module {
            use std::time::Instant;
            use $krate::hub::Hub;
            use $krate::prelude::*;
            use $krate::runtime::ThreadPool;
            use $krate::source::channel::ChannelPolicy;

            use super::{CAPACITY, SUBSCRIBERS};

            pub struct Pools {
                producer: ThreadPool,
                consumers: ThreadPool,
            }

            impl Pools {
                pub fn new() -> Self {
                    Pools {
                        producer: ThreadPool::builder().name("hop").threads(1).build(),
                        consumers: ThreadPool::builder().name("subs").threads(2).build(),
                    }
                }
            }

            fn add(sum: u64, x: u64) -> u64 {
                sum.wrapping_add(x)
            }

            fn fold_all(hub: &Hub<u64>, consumers: Option<&ThreadPool>) -> u64 {
                let handles: Vec<_> = (0..SUBSCRIBERS)
                    .map(|_| match consumers {
                        Some(pool) => hub.clone().publish_on(pool.clone(), 256).fold(0u64, add),
                        None => hub.clone().fold(0u64, add),
                    })
                    .collect();
                let sums: Vec<u64> = handles.into_iter().map(|h| h.wait().unwrap()).collect();
                assert!(sums.windows(2).all(|w| w[0] == w[1]), "every subscriber saw the same");
                sums[0]
            }

            /// Million items per second through case `case`, and the first sum.
            pub fn run(case: usize, n: u64, pools: &Pools) -> (f64, u64) {
                let start = Instant::now();
                let sum = if case == 0 {
                    let source = $krate::range(0..n).subscribe_on(pools.producer.clone());
                    let hub = Hub::builder(source, CAPACITY).connect_at(SUBSCRIBERS).build();
                    fold_all(&hub, Some(&pools.consumers))
                } else {
                    let (tx, rx) = $krate::channel::<u64>(CAPACITY, ChannelPolicy::Backpressure);
                    let front = if case >= 3 {
                        rx.publish_on(pools.producer.clone(), 256).boxed()
                    } else {
                        rx.boxed()
                    };
                    let hub = Hub::builder(front, CAPACITY).connect_at(SUBSCRIBERS).build();
                    let producer = std::thread::spawn(move || {
                        for i in 0..n {
                            tx.send_blocking(i).expect("the hub reads");
                        }
                    });
                    let sum = if case == 5 {
                        let threads: Vec<_> = (0..SUBSCRIBERS)
                            .map(|_| {
                                let items = hub.clone().blocking_iter(256);
                                std::thread::spawn(move || {
                                    items.map(|x| x.unwrap()).fold(0u64, add)
                                })
                            })
                            .collect();
                        let sums: Vec<u64> =
                            threads.into_iter().map(|t| t.join().unwrap()).collect();
                        assert!(sums.windows(2).all(|w| w[0] == w[1]), "every thread saw the same");
                        sums[0]
                    } else {
                        let consumers = (case == 1 || case == 4).then_some(&pools.consumers);
                        fold_all(&hub, consumers)
                    };
                    producer.join().unwrap();
                    sum
                };
                (n as f64 / start.elapsed().as_secs_f64() / 1e6, sum)
            }
        }
    };
}

cases!(current, weir);
cases!(base, weir_base);

fn main() {
    let rounds: usize = env_or("ROUNDS", 10);
    let n: u64 = env_or("N", 1_000_000);
    let only = only();
    let (now, then) = (current::Pools::new(), base::Pools::new());
    let names = [
        "range.subscribe_on → hub → 4 × publish_on",
        "channel → hub → 4 × publish_on",
        "channel → hub → 4 × fold (producer's thread)",
        "channel → publish_on → hub → 4 × fold",
        "channel → publish_on → hub → 4 × publish_on",
        "channel → hub → 4 threads iterating",
    ];
    let expected = (0..n).fold(0u64, |sum, x| sum.wrapping_add(x));
    println!("{rounds} rounds of {n} items; ratio = current ÷ base (same round)");
    println!("| case | current M/s | base M/s | ratio median | ratio geomean |");
    println!("|---|---|---|---|---|");
    let started = Instant::now();
    for (case, name) in names.iter().enumerate() {
        if only.as_ref().is_some_and(|only| !only.contains(&case)) {
            continue;
        }
        let checked = |(rate, sum): (f64, u64)| {
            assert_eq!(sum, expected, "{name}: wrong sum");
            rate
        };
        let paired = Paired::run(
            rounds,
            || checked(current::run(case, n, &now)),
            || checked(base::run(case, n, &then)),
        );
        println!("| {name} | {} |", paired.columns(2));
    }
    eprintln!("took {:.0} s", started.elapsed().as_secs_f64());
}
