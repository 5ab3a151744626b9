//! The conformance kit on the NATS stages, against one real server shared by the
//! module (started on first use, stopped when the test process ends):
//!
//! * the source as a publisher: `factory(n)` makes a stream holding `0..n`, a
//!   durable consumer and a `nats::Source` over it (window 4, acks on delivery),
//!   mapped to the numbers and cut with `take(n)`, since a log has no end. So every
//!   rule is checked through the source's pulls: its demand, its cancel, its task.
//!   The failed publisher of rules 1.4 and 1.9 is a source whose consumer was
//!   deleted before it was subscribed.
//! * the sink as a black-box subscriber, publishing the kit's elements to a stream.
//!
//! Rule 1.11 (several subscribers to one publisher) does not apply: a source is
//! subscribed once; those tests skip.
//!
//! A binary of its own: the `nats` binary measures its heap in one test, which the
//! kit's tests, run beside it, would disturb.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream::StorageType};
use tokio::runtime::Runtime;
use weir::nats::{AckMode, Sink, Source};
use weir::prelude::*;
use weir::tck::{PublisherVerification, SubscriberBlackboxVerification, TestEnv};
use weir::BoxPublisher;

#[path = "support/nats_server.rs"]
mod nats_server;

#[path = "support/jetstream.rs"]
mod jetstream_support;
use nats_server::Server;

/// The decimal payload of a message.
fn number(message: &weir::nats::Message) -> u64 {
    std::str::from_utf8(message.payload())
        .expect("utf-8 payload")
        .parse()
        .expect("a decimal payload")
}

/// The module's server, runtime and JetStream context.
struct Shared {
    rt: Runtime,
    js: jetstream::Context,
    _server: Server,
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let server = Server::start();
        let js = rt
            .block_on(weir::nats::connect(server.url(), Duration::from_secs(10)))
            .expect("connect to the conformance server");
        Shared {
            rt,
            js,
            _server: server,
        }
    })
}

/// A new stream (memory storage) on `<name>.>` with a durable pull consumer `c`
/// (explicit acks); its name.
fn new_stream() -> (String, consumer::PullConsumer) {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = format!("TCK{}", NEXT.fetch_add(1, Ordering::Relaxed));
    let shared = shared();
    let consumer = shared
        .rt
        .block_on(jetstream_support::stream_and_consumer(
            &shared.js,
            &name,
            StorageType::Memory,
            "c",
        ))
        .expect("create the stream and the consumer");
    (name, consumer)
}

/// The largest stream a publisher of the kit holds (tests that need more skip).
const MAX_ELEMENTS: u64 = 1_000;

/// A source over a stream holding `0..n`, ended after `n` items.
fn source(n: u64) -> BoxPublisher<u64> {
    let (name, consumer) = new_stream();
    let shared = shared();
    shared.rt.block_on(async {
        let mut acks = Vec::new();
        for i in 0..n {
            let ack = shared
                .js
                .publish(format!("{name}.x"), i.to_string().into())
                .await
                .expect("publish");
            acks.push(ack);
        }
        for ack in acks {
            ack.await.expect("publish ack");
        }
    });
    Source::builder(consumer)
        .window(4)
        .ack(AckMode::OnDelivery)
        .runtime(shared.rt.handle().clone())
        .build()
        .map(|message| number(&message))
        .take(n)
        .boxed()
}

/// A source whose consumer is gone before anyone subscribes: it fails.
fn failed_source() -> BoxPublisher<u64> {
    let (name, consumer) = new_stream();
    let shared = shared();
    let source = Source::builder(consumer)
        .window(4)
        .give_up_after(Duration::from_millis(200))
        .runtime(shared.rt.handle().clone())
        .build();
    shared.rt.block_on(async {
        shared
            .js
            .get_stream(&name)
            .await
            .expect("the stream")
            .delete_consumer("c")
            .await
            .expect("delete the consumer");
    });
    source.map(|message| number(&message)).boxed()
}

fn env() -> TestEnv {
    TestEnv::builder()
        .default_timeout(Duration::from_secs(5))
        .no_signals_timeout(Duration::from_millis(100))
        .build()
}

weir::publisher_tck!(
    source_tck,
    PublisherVerification::new(source)
        .with_failed_publisher(failed_source)
        .max_elements(MAX_ELEMENTS)
        .stochastic_iterations(10)
        .env(env())
);

/// A sink publishing to a stream of its own; the kit's elements are strings.
fn sink() -> Sink<String> {
    let (name, _consumer) = new_stream();
    let shared = shared();
    let (sink, _done) = Sink::builder(shared.js.clone(), format!("{name}.x"))
        .max_in_flight(4)
        .runtime(shared.rt.handle().clone())
        .build();
    sink
}

weir::subscriber_blackbox_tck!(
    sink_tck,
    SubscriberBlackboxVerification::new(sink, |i| i.to_string()).env(env())
);
