//! The newcomer's examples, run and checked: `examples/sensor_pipeline.rs` (map,
//! buffer, sample, conflate over push sources), `examples/tokio_bridge.rs` (a tokio
//! receiver in, a `Stream` out, sinks awaited) and `examples/fanout.rs` (one feed, a
//! hub, a policy per subscriber). `examples/custom_publisher.rs` has a
//! test file of its own (`tests/custom_publisher.rs`).

#[path = "../examples/fanout.rs"]
mod fanout;
#[path = "../examples/sensor_pipeline.rs"]
mod sensor_pipeline;
#[path = "../examples/tokio_bridge.rs"]
mod tokio_bridge;

#[test]
fn the_sensor_pipeline_accounts_for_every_reading_and_keeps_the_spike() {
    let report = sensor_pipeline::run();
    let (produced, delivered, dropped) = report.temperature;
    assert!(produced > 0);
    assert_eq!(delivered + dropped, produced, "{report:?}");
    // Every shown value is an average of raw readings 2,000..2,099 (20.00..20.99 °C).
    assert!(
        report.shown.iter().all(|t| (20.0..21.0).contains(t)),
        "{report:?}"
    );
    let (pressure, calls, merged) = report.pressure;
    assert!(calls >= 1 && calls <= pressure, "{report:?}");
    assert_eq!(
        report.peak_seen, report.peak_sent,
        "conflate(max) keeps the spike"
    );
    // Each merge folds one reading into another: a call sees at least one reading.
    assert!(merged + calls <= pressure, "{report:?}");
}

#[test]
fn the_sensor_pipeline_example_runs() {
    sensor_pipeline::main();
}

#[test]
fn the_tokio_bridge_delivers_every_item_through_each_bridge() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let report = runtime.block_on(tokio_bridge::run()).unwrap();
    assert_eq!(
        report.large_orders,
        (100..500u64).map(|a| a * 100).collect::<Vec<_>>()
    );
    let expected: Vec<Vec<u32>> = (0..5).map(|b| (b * 10..b * 10 + 10).collect()).collect();
    assert_eq!(report.stored_batches, expected);
    assert_eq!(report.total, 5_050);
}

#[test]
fn the_tokio_bridge_runs_on_a_current_thread_runtime_too() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let report = runtime.block_on(tokio_bridge::run()).unwrap();
    assert_eq!(report.total, 5_050);
}

#[test]
fn the_tokio_bridge_example_runs() {
    tokio_bridge::main().unwrap();
}

#[test]
fn the_fanout_keeps_the_audit_whole_and_cuts_off_only_the_stalled_client() {
    let report = fanout::run(fanout::Config {
        rate: 20_000,
        run_for: std::time::Duration::from_millis(1_500),
        lag_limit: std::time::Duration::from_millis(400),
        stall_after: std::time::Duration::from_millis(300),
        print: false,
    });
    assert!(report.sent > 0);
    assert!(
        report.audit.iter().copied().eq(0..report.sent),
        "the audit got every reading, in order"
    );
    assert_eq!(report.clients, [report.sent; 2], "the healthy clients too");
    let (received, error) = &report.stalled;
    let error = error.as_ref().expect("the stalled client was cut off");
    assert_eq!(error.kind(), weir::ErrorKind::Lagged);
    assert!(error.message().contains("ws-3"), "{error}");
    assert!(*received < report.sent);
    let (shown, skipped) = &report.dashboard;
    assert!(
        shown.windows(2).all(|w| w[0] < w[1]),
        "the dashboard's readings rise"
    );
    assert!(*skipped > 0, "and it skipped the ones it had no time for");
}

#[test]
fn the_fanout_example_runs() {
    fanout::main();
}
