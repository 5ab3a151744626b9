//! A Prometheus endpoint for a running pipeline: named stages, an exporter that
//! records the registry's figures every second through the `metrics` facade, and
//! `metrics-exporter-prometheus` serving them on loopback.
//!
//! A producer offers 20,000 readings a second to a channel of 5,000 that drops the
//! oldest when full ("ingest"); a boundary ("hop") hands them to a consumer that
//! takes 5,000 a second. Each second the example scrapes its own endpoint over HTTP
//! and prints the `weir_` lines: the queue full, its oldest item's age and lag near a
//! second, the drop counter growing by about 15,000 a second.
//!
//! ```text
//! cargo run --release --features metrics --example prometheus          # 10 s on 127.0.0.1:9464
//! cargo run --release --features metrics --example prometheus -- 60 9100
//! curl -s http://127.0.0.1:9464/metrics | grep weir_                    # meanwhile
//! ```

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir::metrics::export::Exporter;
use weir::metrics::Registry;
use weir::prelude::*;
use weir::runtime::ThreadPool;
use weir::source::channel::ChannelPolicy;

/// Run the pipeline for `seconds` with the recorder of `endpoint` installed; print
/// the endpoint's `weir_` lines each second and return the last scrape's.
fn run(endpoint: SocketAddr, seconds: u64) -> Vec<String> {
    let registry = Registry::new();
    let pool = ThreadPool::builder()
        .name("prometheus-demo")
        .threads(2)
        .build();
    let _export = Exporter::new(&registry).every(Duration::from_secs(1), pool.clone());

    let (tx, rx) = weir::channel::<u64>(5_000, ChannelPolicy::DropOldest);
    let consumed = rx
        .name("ingest")
        .registry(&registry)
        .publish_on(pool.clone(), 64)
        .name("hop")
        .registry(&registry)
        .fold(0u64, |n, _reading| {
            std::thread::sleep(Duration::from_micros(200)); // 5,000 a second
            n + 1
        });
    let stop = Arc::new(AtomicBool::new(false));
    let producer = std::thread::spawn({
        let stop = stop.clone();
        move || {
            let start = Instant::now();
            let mut sent = 0u64;
            // Relaxed: a stop flag; nothing is published through it.
            while !stop.load(Ordering::Relaxed) {
                // 20,000 a second, in steps of a millisecond.
                let due = start.elapsed().as_millis() as u64 * 20;
                while sent < due {
                    tx.try_send(sent).expect("drop-oldest takes every offer");
                    sent += 1;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            sent
        }
    });
    let mut last = Vec::new();
    for second in 1..=seconds {
        std::thread::sleep(Duration::from_secs(1));
        last = scrape(endpoint);
        println!("--- {second} s");
        for line in &last {
            println!("{line}");
        }
    }
    stop.store(true, Ordering::Relaxed);
    let sent = producer.join().expect("the producer does not panic");
    let taken = consumed.wait().expect("the pipeline completes");
    println!("sent {sent}, consumed {taken}, the rest dropped and counted");
    pool.shutdown();
    last
}

/// The `weir_` lines of `GET /metrics` (no comment lines), or none if the endpoint
/// does not answer.
fn scrape(endpoint: SocketAddr) -> Vec<String> {
    let response =
        TcpStream::connect_timeout(&endpoint, Duration::from_secs(2)).and_then(|mut s| {
            s.set_read_timeout(Some(Duration::from_secs(2)))?;
            s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
            let mut response = String::new();
            s.read_to_string(&mut response)?;
            Ok(response)
        });
    response
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("weir_"))
        .map(str::to_owned)
        .collect()
}

/// Install the Prometheus recorder on loopback and run (arguments: seconds, port).
fn main() {
    let mut args = std::env::args().skip(1);
    let seconds = args.next().map_or(10, |s| s.parse().expect("seconds"));
    let port: u16 = args.next().map_or(9464, |s| s.parse().expect("a port"));
    let endpoint = SocketAddr::from(([127, 0, 0, 1], port));
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(endpoint)
        .install()
        .expect("the Prometheus endpoint starts (is the port free?)");
    println!("serving http://{endpoint}/metrics for {seconds} s");
    run(endpoint, seconds);
}
