//! The registry's figures through the `metrics` facade, read back the way an
//! operator's Prometheus reads them: a real HTTP scrape of
//! `metrics-exporter-prometheus`'s endpoint on loopback, while the pipeline runs,
//! checked against the registry's own snapshot.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use weir::metrics::export::Exporter;
use weir::metrics::Registry;
use weir::prelude::*;
use weir::runtime::ThreadPool;
use weir::source::channel::ChannelPolicy;
use weir::tck::TestSubscriber;
use weir::DropReason;

const PATIENCE: Duration = Duration::from_secs(20);

/// The endpoint of the process-wide Prometheus recorder (installed once, on a free
/// loopback port). Each test calls it first: figures recorded before the recorder is
/// installed go nowhere.
fn endpoint() -> SocketAddr {
    static ADDR: OnceLock<SocketAddr> = OnceLock::new();
    *ADDR.get_or_init(|| {
        let addr = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port");
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .with_http_listener(addr)
            .install()
            .expect("the Prometheus recorder installs");
        addr
    })
}

/// `GET /metrics` over HTTP/1.0 (no chunked body); retried until the listener is up.
fn scrape() -> String {
    let addr = endpoint();
    let start = Instant::now();
    loop {
        let attempt =
            TcpStream::connect_timeout(&addr, Duration::from_secs(5)).and_then(|mut s| {
                s.set_read_timeout(Some(Duration::from_secs(5)))?;
                s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
                let mut response = String::new();
                s.read_to_string(&mut response)?;
                Ok(response)
            });
        match attempt {
            Ok(response)
                if response.starts_with("HTTP/1.0 200") || response.starts_with("HTTP/1.1 200") =>
            {
                let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b);
                return body.to_owned();
            }
            other => assert!(
                start.elapsed() < PATIENCE,
                "the endpoint never answered 200: {other:?}"
            ),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The value of `metric` with these labels in a scrape, if present.
fn value(body: &str, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(&format!("{metric}{{")))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .map(|l| {
            l.rsplit_once(' ')
                .and_then(|(_, v)| v.parse::<f64>().ok())
                .expect("a value")
        })
        .next()
}

fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < PATIENCE, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_scrape_shows_the_snapshots_figures_and_counters_only_grow() {
    endpoint(); // the recorder is installed before anything is exported
    let registry = Registry::new();
    let mut exporter = Exporter::new(&registry);
    let stage = "export-ingest";
    let (tx, rx) = weir::channel::<u32>(100, ChannelPolicy::DropOldest);
    let subscriber = TestSubscriber::<u32>::new(); // asks for nothing
    let probe = subscriber.probe();
    rx.name(stage).registry(&registry).subscribe(subscriber);
    for i in 0..150 {
        tx.try_send(i).expect("drop-oldest takes everything");
    }
    let snapshot = registry.snapshot();
    let listed = snapshot.stage(stage).unwrap().clone();
    let queue = listed.queue.clone().unwrap();
    assert_eq!(
        (queue.depth, queue.dropped(DropReason::OverflowOldest)),
        (100, 50)
    );
    exporter.export();
    let body = scrape();
    let of = |metric: &str| value(&body, metric, &[("stage", stage)]);
    assert_eq!(of("weir_stages"), Some(1.0), "{body}");
    assert_eq!(of("weir_queue_depth"), Some(queue.depth as f64), "{body}");
    assert_eq!(of("weir_queue_capacity"), Some(queue.capacity as f64));
    assert_eq!(
        of("weir_in_flight_bound"),
        Some(listed.in_flight_bound as f64)
    );
    assert_eq!(of("weir_queue_enqueued_total"), Some(queue.enqueued as f64));
    assert_eq!(of("weir_queue_dequeued_total"), Some(queue.dequeued as f64));
    let dropped = |body: &str, reason: &str| {
        value(
            body,
            "weir_dropped_total",
            &[("stage", stage), ("reason", reason)],
        )
    };
    assert_eq!(dropped(&body, "overflow_oldest"), Some(50.0), "{body}");
    assert_eq!(dropped(&body, "expired"), Some(0.0), "{body}");

    // Ten more, ten more drops: the counter adds only what grew.
    for i in 150..160 {
        tx.try_send(i).unwrap();
    }
    exporter.export();
    let body = scrape();
    assert_eq!(dropped(&body, "overflow_oldest"), Some(60.0), "{body}");

    // The stage ends: its gauges read 0, its counters keep what they counted.
    probe.cancel();
    eventually("the stage left", || registry.is_empty());
    exporter.export();
    let body = scrape();
    let of = |metric: &str| value(&body, metric, &[("stage", stage)]);
    assert_eq!(of("weir_stages"), Some(0.0), "{body}");
    assert_eq!(of("weir_queue_depth"), Some(0.0), "{body}");
    assert_eq!(dropped(&body, "overflow_oldest"), Some(60.0), "{body}");
    drop(tx);
}

#[test]
fn stages_with_one_name_are_summed() {
    endpoint(); // the recorder is installed before anything is exported
    let registry = Registry::new();
    let mut exporter = Exporter::new(&registry);
    let stage = "export-twins";
    let mut senders = Vec::new();
    let mut probes = Vec::new();
    for depth in [3, 4] {
        let (tx, rx) = weir::channel::<u32>(10, ChannelPolicy::Backpressure);
        let subscriber = TestSubscriber::<u32>::new();
        probes.push(subscriber.probe());
        rx.name(stage).registry(&registry).subscribe(subscriber);
        for i in 0..depth {
            tx.try_send(i).unwrap();
        }
        senders.push(tx);
    }
    exporter.export();
    let body = scrape();
    let of = |metric: &str| value(&body, metric, &[("stage", stage)]);
    assert_eq!(of("weir_stages"), Some(2.0), "{body}");
    assert_eq!(of("weir_queue_depth"), Some(7.0), "{body}");
    assert_eq!(of("weir_queue_capacity"), Some(20.0), "{body}");
    for probe in probes {
        probe.cancel();
    }
}

#[test]
fn a_periodic_export_keeps_the_endpoint_current() {
    endpoint(); // the recorder is installed before anything is exported
    let registry = Registry::new();
    let pool = ThreadPool::builder().threads(1).build();
    let stage = "export-periodic";
    let (tx, rx) = weir::channel::<u32>(1_000, ChannelPolicy::Backpressure);
    let subscriber = TestSubscriber::<u32>::new();
    let probe = subscriber.probe();
    rx.name(stage).registry(&registry).subscribe(subscriber);
    let handle = Exporter::new(&registry).every(Duration::from_millis(10), pool.clone());
    for i in 0..42 {
        tx.try_send(i).unwrap();
    }
    eventually("the timer exported a depth of 42", || {
        value(&scrape(), "weir_queue_depth", &[("stage", stage)]) == Some(42.0)
    });
    drop(handle);
    probe.cancel();
    pool.shutdown();
}

#[test]
fn a_period_that_does_not_fit_the_clock_exports_once() {
    endpoint(); // the recorder is installed before anything is exported
    let registry = Registry::new();
    let pool = ThreadPool::builder().threads(1).build();
    let stage = "export-once";
    let (tx, rx) = weir::channel::<u32>(10, ChannelPolicy::Backpressure);
    let subscriber = TestSubscriber::<u32>::new();
    let probe = subscriber.probe();
    rx.name(stage).registry(&registry).subscribe(subscriber);
    tx.try_send(7).unwrap();
    let handle = Exporter::new(&registry).every(Duration::MAX, pool.clone());
    // The first export runs inside `every`.
    assert_eq!(
        value(&scrape(), "weir_queue_depth", &[("stage", stage)]),
        Some(1.0)
    );
    drop(handle);
    probe.cancel();
    pool.shutdown();
}

#[test]
#[should_panic(expected = "Exporter::every: the period must be positive")]
fn a_zero_period_is_refused() {
    let pool = ThreadPool::builder().threads(1).build();
    let _handle = Exporter::new(&Registry::new()).every(Duration::ZERO, pool);
}

#[test]
fn a_paused_channel_advises_a_rate_of_zero() {
    endpoint(); // the recorder is installed before anything is exported
    let registry = Registry::new();
    let mut exporter = Exporter::new(&registry);
    let stage = "export-paused";
    let (tx, rx) = weir::source::channel::ChannelBuilder::new(10, ChannelPolicy::Backpressure)
        .water_marks(weir::source::channel::WaterMarks::new(4, 1))
        .build::<u32>();
    let subscriber = TestSubscriber::<u32>::new();
    let probe = subscriber.probe();
    rx.name(stage).registry(&registry).subscribe(subscriber);
    exporter.export();
    let flow = || {
        value(
            &scrape(),
            "weir_queue_flow_rate_factor",
            &[("stage", stage)],
        )
    };
    assert_eq!(flow(), Some(1.0));
    for i in 0..4 {
        tx.try_send(i).unwrap();
    }
    exporter.export();
    assert_eq!(flow(), Some(0.0));
    probe.cancel();
}

#[test]
fn a_named_hub_subscriber_exports_its_lag_and_skips() {
    endpoint(); // the recorder is installed before anything is exported
    let registry = Registry::new();
    let mut exporter = Exporter::new(&registry);
    let stage = "export-hub-member";
    let (tx, rx) = weir::channel::<u64>(1_024, ChannelPolicy::Backpressure);
    let hub = weir::hub::Hub::builder(rx, 16).build();
    let audit = hub.clone().fold(0u64, |n, _| n + 1);
    let subscriber = TestSubscriber::<u64>::new(); // asks for nothing
    let probe = subscriber.probe();
    hub.join(weir::hub::Policy::DropOldest)
        .named(stage)
        .registry(&registry)
        .subscribe(subscriber);
    for i in 0..100 {
        tx.try_send(i).unwrap();
    }
    exporter.export();
    let body = scrape();
    let of = |metric: &str, labels: &[(&str, &str)]| value(&body, metric, labels);
    assert_eq!(
        of("weir_queue_depth", &[("stage", stage)]),
        Some(16.0),
        "{body}"
    );
    assert_eq!(
        of(
            "weir_dropped_total",
            &[("stage", stage), ("reason", "overflow_oldest")]
        ),
        Some(84.0),
        "{body}"
    );
    probe.cancel();
    drop(tx);
    assert_eq!(audit.wait().unwrap(), 100);
}
