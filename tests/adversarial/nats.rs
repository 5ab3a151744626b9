//! Rows for `weir::nats`: a stream that goes through a JetStream stream on a real
//! `nats-server` (loopback), the way a pipeline split across two processes would:
//! upstream → `nats::Sink` → stream → `nats::Source` (acks on delivery) → downstream.
//!
//! One server serves the whole binary: started on first use, it is killed and its
//! store removed when this process ends, however it ends (the guard of
//! `tests/support/nats_server.rs`). Each pipeline gets a stream of its own (memory
//! storage) and a durable pull consumer.
//!
//! A log has no end of stream, and nothing of the sink's outcome crosses it, so the
//! row carries both itself:
//!
//! * each item crosses as its value (8 bytes, big-endian): the sending side drops
//!   the counted item once it is encoded, the receiving side derives a new one from
//!   the value, as `map` does; after upstream's last item the sending side publishes
//!   an end marker (3 bytes), and the receiving side completes at it (`take_while`);
//! * the receiving side is merged with a *watch*, a `create` source that emits no
//!   item: when it is subscribed it subscribes the sending side to the sink (so
//!   nothing is published before the row is subscribed), then it completes when the
//!   sink has everything confirmed, fails when the sink fails (its error reaches
//!   downstream), and cancels the sink (and so upstream) when downstream cancels or
//!   the receiving side fails.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_nats::jetstream::{self, stream::StorageType};
use bytes::Bytes;
use weir::nats::{AckMode, Message, Outgoing, Sink, Source};
use weir::prelude::*;
use weir::BoxPublisher;

use crate::harness::item::Item;
use crate::stages::{identity, Env, Kind, Stage, EXACT};

#[path = "../support/nats_server.rs"]
mod nats_server;

#[path = "../support/jetstream.rs"]
mod jetstream_support;

/// The end of a row's stream (items are 8 bytes, so it cannot be one).
const END: &[u8] = b"end";

/// Publish acks in flight for the row's sink, and the source's window.
const WINDOW: u64 = 16;

/// The server every row of this binary uses (started on first use, stopped when the
/// process ends).
fn server_url() -> String {
    static SERVER: OnceLock<nats_server::Server> = OnceLock::new();
    SERVER.get_or_init(nats_server::Server::start).url()
}

/// A new stream with a durable consumer on the shared server, and a source over it
/// acking on delivery; made on the env's runtime from a thread of its own (`build`
/// may run on a runtime thread). The JetStream context and the stream's subject are
/// returned for the sink.
fn new_stream(env: &Env) -> (jetstream::Context, Source, String) {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = format!("ROW{}", NEXT.fetch_add(1, Ordering::Relaxed));
    let subject = format!("{name}.items");
    let (url, handle) = (server_url(), env.tokio.clone());
    std::thread::spawn(move || {
        handle.clone().block_on(async move {
            let js = weir::nats::connect(url, Duration::from_secs(10))
                .await
                .expect("connect to the adversarial suite's nats-server");
            jetstream_support::stream_and_consumer(&js, &name, StorageType::Memory, "row")
                .await
                .expect("create the row's stream and consumer");
            let source = Source::bind(&js, &name, "row")
                .await
                .expect("bind the row's consumer")
                .window(WINDOW)
                .ack(AckMode::OnDelivery)
                .runtime(handle)
                .build();
            (js, source, subject)
        })
    })
    .join()
    .expect("the thread making the row's stream")
}

fn encode(item: Item) -> Outgoing {
    Outgoing::new(Bytes::copy_from_slice(&item.value.to_be_bytes()))
}

fn decode(message: &Message) -> u64 {
    let bytes: [u8; 8] = message
        .payload()
        .as_ref()
        .try_into()
        .expect("8 bytes of value");
    u64::from_be_bytes(bytes)
}

/// `upstream` through a new JetStream stream: see the module docs.
pub fn through_jetstream(env: &Env, upstream: BoxPublisher<Item>) -> BoxPublisher<Item> {
    let (js, source, subject) = new_stream(env);
    let runtime = env.tokio.clone();
    let watch = weir::create(move |emitter: weir::source::Emitter<Item>| {
        let (sink, done) = Sink::builder(js, subject)
            .max_in_flight(WINDOW)
            .runtime(runtime.clone())
            .build();
        let done = Arc::new(done);
        emitter.on_cancel({
            let done = done.clone();
            move || done.cancel()
        });
        upstream
            .map(encode)
            .concat(weir::just(Outgoing::new(END)))
            .subscribe(sink);
        runtime.spawn(async move {
            match done.finished().await {
                Ok(_) => emitter.complete(),
                Err(e) => emitter.error(weir::Error::msg(format!("the row's nats sink: {e}"))),
            };
        });
    });
    let ledger = env.ledger.clone();
    source
        .take_while(|message| message.payload().as_ref() != END)
        .map(move |message| ledger.derived(decode(&message)))
        .merge(watch)
        .boxed()
}

/// The rows.
pub fn rows() -> Vec<Stage> {
    vec![Stage::new(
        "nats::Sink → JetStream stream → nats::Source (a loopback nats-server)",
        Kind::Bridge,
        EXACT,
        |env| through_jetstream(env, env.source()),
        identity,
    )
    .scheduled()]
}
