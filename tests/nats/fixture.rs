//! A server, a tokio runtime and a JetStream context for one test, with helpers to
//! make streams and consumers and to publish.

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use async_nats::jetstream::{self, consumer, consumer::PullConsumer, stream};
use bytes::Bytes;
use tokio::runtime::Runtime;

use crate::server::Server;

/// Generous bound for waits on things that must happen.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// Tests share the process; the one that measures the process's heap excludes
/// the others while it runs.
static PROCESS: RwLock<()> = RwLock::new(());

/// Taken by every test that may run beside others.
pub fn shared() -> RwLockReadGuard<'static, ()> {
    PROCESS.read().unwrap_or_else(|p| p.into_inner())
}

/// Taken by a test that must run alone (it measures the whole process).
pub fn exclusive() -> RwLockWriteGuard<'static, ()> {
    PROCESS.write().unwrap_or_else(|p| p.into_inner())
}

/// One test's server, runtime and JetStream context.
pub struct Env {
    pub rt: Runtime,
    pub server: Server,
    pub js: jetstream::Context,
    _turn: Option<RwLockReadGuard<'static, ()>>,
}

impl Env {
    /// A fresh server with JetStream and a client connected to it, for a test
    /// that may run beside others.
    pub fn new() -> Env {
        let turn = shared();
        let mut env = Env::alone();
        env._turn = Some(turn);
        env
    }

    /// The same, for a test that holds [`exclusive`] itself.
    pub fn alone() -> Env {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let server = Server::start();
        let js = rt.block_on(async {
            let client = async_nats::connect(server.url())
                .await
                .expect("connect to the test server");
            jetstream::new(client)
        });
        Env {
            rt,
            server,
            js,
            _turn: None,
        }
    }

    /// A stream `name` on subject `<name>.>`, file storage.
    pub fn stream(&self, name: &str) {
        self.rt.block_on(async {
            self.js
                .create_stream(stream::Config {
                    name: name.to_owned(),
                    subjects: vec![format!("{name}.>")],
                    ..Default::default()
                })
                .await
                .expect("create the stream");
        });
    }

    /// A durable pull consumer `name` of `stream` with explicit acks.
    pub fn consumer(
        &self,
        stream: &str,
        name: &str,
        max_ack_pending: i64,
        ack_wait: Duration,
    ) -> PullConsumer {
        self.rt.block_on(async {
            let stream = self.js.get_stream(stream).await.expect("the stream");
            stream
                .create_consumer(consumer::pull::Config {
                    durable_name: Some(name.to_owned()),
                    ack_policy: consumer::AckPolicy::Explicit,
                    max_ack_pending,
                    ack_wait,
                    ..Default::default()
                })
                .await
                .expect("create the consumer")
        })
    }

    /// Publishes `count` messages `0..count` (decimal payloads) on `subject`,
    /// waiting for every publish ack (up to 1,024 in flight).
    pub fn publish(&self, subject: &str, range: std::ops::Range<u64>) {
        self.rt.block_on(async {
            let mut acks = std::collections::VecDeque::new();
            for i in range {
                let ack = self
                    .js
                    .publish(subject.to_owned(), Bytes::from(i.to_string()))
                    .await
                    .expect("publish");
                acks.push_back(ack);
                if acks.len() >= 1_024 {
                    acks.pop_front().unwrap().await.expect("publish ack");
                }
            }
            for ack in acks {
                ack.await.expect("publish ack");
            }
        });
    }

    /// The consumer's info now.
    pub fn info(&self, consumer: &PullConsumer) -> consumer::Info {
        self.rt
            .block_on(consumer.get_info())
            .expect("the consumer's info")
    }
}

/// The decimal payload of a test message.
pub fn number(message: &weir::nats::Message) -> u64 {
    std::str::from_utf8(message.payload())
        .expect("utf-8 payload")
        .parse()
        .expect("a decimal payload")
}
