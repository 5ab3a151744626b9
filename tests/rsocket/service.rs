//! The interop service (see `peers/mod.rs`) as a weir [`Handler`], and helpers the
//! tests share.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use weir::prelude::*;
use weir::rsocket::{Handler, Payload, PayloadStream};
use weir::tck::{TestProbe, TestSubscriber};
use weir::{BoxPublisher, Error};

/// Fire-and-forget requests received, over every connection of one server.
#[derive(Clone, Default)]
pub struct Service {
    pub fnf: Arc<AtomicU64>,
}

pub fn text(payload: &Payload) -> String {
    String::from_utf8_lossy(&payload.data).into_owned()
}

pub fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

fn item(i: u64) -> Payload {
    Payload::data(i.to_string())
}

impl Handler for Service {
    fn request_response(&self, request: Payload) -> BoxPublisher<Payload> {
        let data = text(&request);
        if let Some(s) = data.strip_prefix("echo:") {
            let answer = Payload {
                metadata: request.metadata.clone(),
                data: s.to_owned().into(),
            };
            return weir::just(answer).boxed();
        }
        if let Some(message) = data.strip_prefix("fail:") {
            return weir::error(Error::msg(message.to_owned())).boxed();
        }
        if let Some(n) = data.strip_prefix("big:") {
            let n: usize = n.parse().expect("big:<n>");
            return weir::just(Payload::data(pattern(n))).boxed();
        }
        if data.starts_with("len:") {
            let sum = request
                .data
                .iter()
                .fold(0u32, |s, &b| s.wrapping_add(u32::from(b)));
            return weir::just(Payload::data(format!("{}:{sum}", request.data.len()))).boxed();
        }
        if data == "fnf-count" {
            let n = self.fnf.load(Ordering::SeqCst);
            return weir::just(Payload::data(n.to_string())).boxed();
        }
        weir::error(Error::msg(format!("unknown request {data:?}"))).boxed()
    }

    fn fire_and_forget(&self, _request: Payload) {
        self.fnf.fetch_add(1, Ordering::SeqCst);
    }

    fn request_stream(&self, request: Payload) -> BoxPublisher<Payload> {
        let data = text(&request);
        if let Some(k) = data.strip_prefix("fail-after:") {
            let k: u64 = k.parse().expect("fail-after:<k>");
            return weir::range(0..k)
                .map(item)
                .concat(weir::error(Error::msg("stream failed")))
                .boxed();
        }
        if data == "infinite" {
            return weir::range(0..u64::MAX).map(item).boxed();
        }
        let n: u64 = data.parse().expect("a count");
        weir::range(0..n).map(item).boxed()
    }

    fn request_channel(&self, _first: &Payload, incoming: PayloadStream) -> BoxPublisher<Payload> {
        incoming
            .map(|p| Payload::data(text(&p).to_uppercase()))
            .boxed()
    }
}

/// A multi-thread tokio runtime of two workers.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// The longest any test waits for an outcome (a bound against hangs, never a timing
/// assertion).
pub const PATIENCE: Duration = Duration::from_secs(30);

/// Subscribes a [`TestSubscriber`] to `publisher`; returns its probe.
pub fn subscribe_probe(
    publisher: impl Publisher<Item = Payload> + Send + 'static,
) -> TestProbe<Payload> {
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    publisher.subscribe(subscriber);
    probe
}

/// Runs one of the probe's blocking waits off the runtime's workers; panics with its
/// message when it fails.
pub async fn await_probe<R: Send + 'static>(
    probe: &TestProbe<Payload>,
    wait: impl FnOnce(&TestProbe<Payload>) -> Result<R, String> + Send + 'static,
) -> R {
    let probe = probe.clone();
    tokio::task::spawn_blocking(move || wait(&probe))
        .await
        .expect("the waiting task")
        .unwrap_or_else(|message| panic!("{message}"))
}

/// Requests `total` items `batch` at a time, each batch once the previous one
/// arrived, then waits for the completion.
pub async fn request_in_batches(probe: &TestProbe<Payload>, total: u64, batch: u64) {
    let mut got = 0;
    while got < total {
        probe.request(batch);
        got = (got + batch).min(total);
        await_probe(probe, move |p| p.await_items(got, PATIENCE)).await;
    }
    await_probe(probe, |p| p.await_completion(PATIENCE)).await;
}
