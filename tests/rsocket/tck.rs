//! The conformance kit on a `request_stream` publisher: `factory(n)` asks a weir
//! server on loopback for items `0..n` over one shared client connection, so every
//! rule is checked end to end (the subscriber's demand crossing the wire as
//! REQUEST_N, the server's publisher seeing only that demand, cancel as CANCEL).
//!
//! The failed publisher of rules 1.4 and 1.9 is a request on a closed connection.
//! Rule 1.11 (several subscribers to one publisher) does not apply: a
//! `PayloadStream` is one request, subscribed once; those tests skip.

use std::sync::OnceLock;
use std::time::Duration;

use weir::rsocket::{Client, Payload, PayloadStream, Server};
use weir::tck::{PublisherVerification, TestEnv};

use crate::service::{runtime, Service};

/// A server and a connection to it, shared by every test of this module, on a
/// runtime that lives as long as the test process.
struct Loopback {
    client: Client,
    /// A connection closed before the tests start: its streams fail at subscribe.
    closed: Client,
    _server: Server,
    _runtime: tokio::runtime::Runtime,
}

fn loopback() -> &'static Loopback {
    static PEER: OnceLock<Loopback> = OnceLock::new();
    PEER.get_or_init(|| {
        let runtime = runtime();
        let (server, client, closed) = runtime.block_on(async {
            let server = Server::bind("127.0.0.1:0", Service::default())
                .await
                .expect("bind a loopback server");
            let client = weir::rsocket::connect(server.local_addr())
                .await
                .expect("connect to it");
            let closed = weir::rsocket::connect(server.local_addr())
                .await
                .expect("connect to it");
            closed.close().await;
            (server, client, closed)
        });
        Loopback {
            client,
            closed,
            _server: server,
            _runtime: runtime,
        }
    })
}

fn verify() -> PublisherVerification<PayloadStream> {
    PublisherVerification::new(|n: u64| {
        loopback()
            .client
            .request_stream(Payload::data(n.to_string()))
    })
    // A stream that fails before any request: one on a closed connection. (A
    // stream the server fails, `fail-after:0`, fails only once requested: the
    // request frame is sent at the first `request`.)
    .with_failed_publisher(|| loopback().closed.request_stream(Payload::data("3")))
    .stochastic_iterations(20)
    .env(
        TestEnv::builder()
            .default_timeout(Duration::from_secs(5))
            .no_signals_timeout(Duration::from_millis(100))
            .build(),
    )
}

weir::publisher_tck!(request_stream, verify());
