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

#[path = "../../examples/rsocket_fanout/scenario.rs"]
mod scenario;
#[path = "../../examples/rsocket_fanout/weir_side.rs"]
mod weir_side;

use scenario::{Meter, Report, Scenario};

use crate::service::runtime;

fn run_weir(scenario: Scenario) -> Report {
    let meter = Arc::new(Meter::new(scenario.streams));
    runtime().block_on(async {
        let watcher = {
            let meter = meter.clone();
            tokio::spawn(async move { scenario::watch(&meter, scenario).await })
        };
        weir_side::run(scenario, meter)
            .await
            .expect("the weir side runs");
        watcher.await.expect("the watcher")
    })
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
             more than the {window} its receiver grants (+1 in hand): {report:#?}"
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
