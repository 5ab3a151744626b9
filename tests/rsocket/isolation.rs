//! Isolation on one connection: 8 request-streams, one consumer stalls for 3 s (the
//! scenario of `examples/rsocket_fanout.rs`, whose modules this file includes).
//!
//! The assertions are counts and bounds, never rates: the stalled stream's backlog
//! (produced at the server − pulled by its consumer) never exceeds the credit its
//! receiver grants, every item arrives exactly once and in order, the healthy
//! streams move many windows' worth of items while the stalled one holds, and the
//! stalled one resumes. Throughput during the stall against all-fast throughput is a
//! timing figure: the example prints it and `benches/rsocket.rs` measures it.

use std::sync::Arc;

#[path = "../../examples/rsocket_fanout/rust_side.rs"]
mod rust_side;
#[path = "../../examples/rsocket_fanout/scenario.rs"]
mod scenario;
#[path = "../../examples/rsocket_fanout/weir_side.rs"]
mod weir_side;

use scenario::{Meter, Outcome, Report, Scenario};

use crate::service::runtime;

/// Runs one side of the scenario on a fresh runtime; panics when it failed.
fn run<F>(scenario: Scenario, side: impl FnOnce(Scenario, Arc<Meter>) -> F) -> Report
where
    F: std::future::Future<Output = Outcome> + Send + 'static,
{
    let runtime = runtime();
    let (report, outcome) = runtime.block_on(scenario::measure(scenario, side, |_, _| {}));
    outcome.expect("the side runs");
    // rsocket_rust's own tasks may still be parked: do not wait for them.
    runtime.shutdown_background();
    report
}

fn run_weir(scenario: Scenario) -> Report {
    run(scenario, weir_side::run)
}

#[test]
fn a_stalled_consumer_holds_only_its_credit_and_its_siblings_run_on() {
    let scenario = Scenario::DEFAULT;
    let report = run_weir(scenario);
    let window = weir_side::PREFETCH;
    let stalled = scenario.stalled;
    // For the log only (a rate, not asserted).
    eprintln!(
        "healthy items per second during the stall / before it: {:.3} ({} / {} items in {:?} / {:?})",
        report.healthy_ratio(&scenario),
        report.during_stall.iter().sum::<u64>(),
        report.before_stall.iter().sum::<u64>(),
        report.stall_window,
        report.before_window,
    );

    assert_eq!(
        report.misordered,
        vec![0; scenario.streams],
        "every item exactly once and in order: {report:#?}"
    );
    // The bridge's window, plus the one item a consumer holds between taking it from
    // the bridge (which may then ask for more) and counting it.
    let bound = window + 1;
    for (stream, backlog) in report.max_backlog.iter().enumerate() {
        assert!(
            *backlog <= bound,
            "stream {stream} had {backlog} items between its publisher and its consumer, \
             more than the {window} its receiver grants (+1 in hand); the sample (sent, \
             received, when): {:?}; {report:#?}",
            report.worst[stream]
        );
    }
    for stream in (0..scenario.streams).filter(|s| *s != stalled) {
        assert!(
            report.during_stall[stream] >= 10 * window,
            "healthy stream {stream} moved only {} items during the stall: {report:#?}",
            report.during_stall[stream]
        );
    }
    assert!(
        report.after_stall[stalled] > window,
        "the stalled stream resumed beyond its backlog: {report:#?}"
    );
    for stream in 0..scenario.streams {
        assert!(
            report.sent[stream] - report.received[stream] <= bound,
            "stream {stream}: produced {} but received {}: {report:#?}",
            report.sent[stream],
            report.received[stream]
        );
    }
}

/// The same scenario through `rsocket_rust` 0.7.5, which ignores `REQUEST_N` and
/// hands every stream's frames to one dispatcher that waits on the slowest consumer
/// (see `rust_side.rs`): this documents what happens there. Every stream's backlog
/// grows far beyond any credit, because its servers produce whatever was consumed.
/// How much the healthy streams slow down during the stall is a rate: logged, not
/// asserted. The run happens on a thread of its own under a watchdog, since that
/// crate can deadlock its runtime (`rust_side.rs` explains how).
#[test]
fn rsocket_rust_buffers_without_bound() {
    let scenario = Scenario::DEFAULT;
    let (done, report) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(run(scenario, rust_side::run));
    });
    let report = report
        .recv_timeout(scenario.run_for + crate::service::PATIENCE)
        .expect("the rsocket_rust run ends (its runtime did not deadlock)");
    eprintln!(
        "rsocket_rust: healthy items per second during the stall / before it: {:.3}; \
         largest backlogs {:?}",
        report.healthy_ratio(&scenario),
        report.max_backlog
    );
    assert_eq!(report.misordered, vec![0; scenario.streams], "{report:#?}");
    // Structural, not timing: its producers never wait for demand.
    for (stream, backlog) in report.max_backlog.iter().enumerate() {
        assert!(
            *backlog > 100 * weir_side::PREFETCH,
            "stream {stream}: rsocket_rust held only {backlog} items: {report:#?}"
        );
    }
}
