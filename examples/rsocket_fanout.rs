//! Eight streams on one RSocket connection, one consumer stalls for 3 s: weir and
//! `rsocket_rust` side by side.
//!
//! ```text
//! cargo run --release --example rsocket_fanout --features rsocket
//! ```
//!
//! The scenario (`rsocket_fanout/scenario.rs`): a server on loopback streams
//! numbered items on 8 request-streams of one client connection; every consumer
//! pulls as fast as it can, except stream 0's, which stops pulling from 2 s to 5 s.
//! Each run lasts 7 s. While it runs, the items each stream received in each
//! second are printed; at the end, a summary compares the two implementations:
//!
//! * **healthy rate, stall ÷ before**: the 7 other streams' items per second during
//!   the stall over their items per second before it (when all 8 were fast);
//! * **stalled backlog, max**: the most items the stalled stream had between the
//!   server's publisher and its consumer (produced − pulled) at any sample;
//! * **produced / received**: items the server made and items the consumers got, in
//!   all (what is neither was buffered somewhere when the run ended);
//! * **misordered**: items that arrived out of order or twice.
//!
//! weir's side (`rsocket_fanout/weir_side.rs`) grants credit per stream, so the
//! stalled stream's backlog stays within one window and the other streams run on.
//! `rsocket_rust`'s side (`rsocket_fanout/rust_side.rs`) runs the same scenario with
//! that crate, which ignores `REQUEST_N`; its module docs say what happens there.
//! `tests/rsocket/isolation.rs` runs both sides and asserts what each one does.

use std::sync::Arc;
use std::time::Duration;

#[path = "rsocket_fanout/rust_side.rs"]
mod rust_side;
#[path = "rsocket_fanout/scenario.rs"]
mod scenario;
#[path = "rsocket_fanout/weir_side.rs"]
mod weir_side;

use scenario::{Meter, Outcome, Report, Scenario};

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let scenario = Scenario::DEFAULT;
    println!(
        "{} streams on one connection; stream {} stalls from {:?} to {:?}; items received per second:",
        scenario.streams,
        scenario.stalled,
        scenario.stall_at,
        scenario.stall_end()
    );
    let weir = runtime.block_on(measure("weir", scenario, weir_side::run));
    let rust = runtime.block_on(measure("rsocket_rust", scenario, rust_side::run));
    // rsocket_rust's internal tasks may still be blocked: do not wait for them.
    runtime.shutdown_timeout(Duration::from_secs(1));

    println!();
    println!("{:<44}{:>16}{:>16}", "", "weir", "rsocket_rust");
    let row = |name: &str, f: &dyn Fn(&Report) -> String| {
        println!("{name:<44}{:>16}{:>16}", f(&weir), f(&rust));
    };
    row("healthy rate, stall ÷ before", &|r| {
        format!("{:.3}", r.healthy_ratio(&scenario))
    });
    row("healthy items per second, before the stall", &|r| {
        per_second(r.healthy(&r.before_stall, &scenario), r.before_window)
    });
    row("healthy items per second, during the stall", &|r| {
        per_second(r.healthy(&r.during_stall, &scenario), r.stall_window)
    });
    row("stalled stream: items during the stall", &|r| {
        r.during_stall[scenario.stalled].to_string()
    });
    row("stalled stream: items after the stall", &|r| {
        r.after_stall[scenario.stalled].to_string()
    });
    row("stalled stream: backlog, max (items)", &|r| {
        r.max_backlog[scenario.stalled].to_string()
    });
    row("stalled stream: backlog max, seen at (s)", &|r| {
        format!("{:.3}", r.worst[scenario.stalled].2.as_secs_f64())
    });
    row("all streams: backlog, max (items)", &|r| {
        r.max_backlog.iter().max().copied().unwrap_or(0).to_string()
    });
    row("items produced by the server, all streams", &|r| {
        r.sent.iter().sum::<u64>().to_string()
    });
    row("items received by the consumers, all streams", &|r| {
        r.received.iter().sum::<u64>().to_string()
    });
    row("misordered items", &|r| {
        r.misordered.iter().sum::<u64>().to_string()
    });
}

/// Runs one side, printing each second's counts.
async fn measure<F>(
    name: &'static str,
    scenario: Scenario,
    side: impl FnOnce(Scenario, Arc<Meter>) -> F,
) -> Report
where
    F: std::future::Future<Output = Outcome> + Send + 'static,
{
    println!("\n{name}:");
    let header: Vec<String> = (0..scenario.streams).map(|s| format!("s{s}")).collect();
    println!("  second {}", columns(&header));
    let (report, outcome) = scenario::measure(scenario, side, |second, counts| {
        let cells: Vec<String> = counts.iter().map(|c| c.to_string()).collect();
        println!("  {second:>6} {}", columns(&cells));
    })
    .await;
    if let Err(error) = outcome {
        println!("  {name} failed: {error}");
    }
    report
}

fn columns(cells: &[String]) -> String {
    cells.iter().map(|c| format!("{c:>9}")).collect()
}

fn per_second(items: u64, window: Duration) -> String {
    format!("{:.0}", items as f64 / window.as_secs_f64())
}
