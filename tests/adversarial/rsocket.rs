//! Rows for `weir::rsocket`: a stream that crosses a loopback TCP connection between
//! a weir server and a weir client, built on the row's tokio runtime.
//!
//! Items cross the wire as their values (8 bytes, big-endian): the server side drops
//! each counted item once it is encoded, the client side derives a new one from the
//! value, as `map` does. The server and the client live in the last stage's closure,
//! so they go when the pipeline does.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use weir::prelude::*;
use weir::rsocket::{Client, Handler, Payload, PayloadStream, Server};
use weir::BoxPublisher;

use crate::harness::item::{Item, Ledger};
use crate::stages::{identity, Env, Kind, Stage, EXACT};

/// Serves one request-stream with the publisher it holds, and echoes channels.
struct Serve {
    stream: Mutex<Option<BoxPublisher<Payload>>>,
}

impl Handler for Serve {
    fn request_stream(&self, _request: Payload) -> BoxPublisher<Payload> {
        match self.stream.lock().unwrap().take() {
            Some(stream) => stream,
            None => weir::error(weir::Error::msg("this row serves one stream")).boxed(),
        }
    }

    fn request_channel(&self, _first: &Payload, incoming: PayloadStream) -> BoxPublisher<Payload> {
        incoming.boxed()
    }
}

fn to_payload(item: Item) -> Payload {
    Payload::data(Bytes::copy_from_slice(&item.value.to_be_bytes()))
}

fn from_payload(ledger: &Arc<Ledger>, payload: &Payload) -> Item {
    let value = payload
        .data
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_be_bytes)
        .expect("8 bytes of value");
    ledger.derived(value)
}

/// A server serving `stream` and a client connected to it, on the env's runtime
/// (bound from a thread of its own: `build` may run on a runtime thread).
fn connect(env: &Env, stream: Option<BoxPublisher<Payload>>) -> (Server, Client) {
    let handle = env.tokio.clone();
    let handler = Serve {
        stream: Mutex::new(stream),
    };
    std::thread::spawn(move || {
        handle.block_on(async move {
            let server = Server::bind("127.0.0.1:0", handler)
                .await
                .expect("bind a loopback server");
            let client = weir::rsocket::connect(server.local_addr())
                .await
                .expect("connect to it");
            (server, client)
        })
    })
    .join()
    .expect("the connecting thread")
}

/// The client's stream mapped back to items, keeping the server and the client
/// alive as long as the pipeline.
fn received(
    env: &Env,
    keep: (Server, Client),
    open: impl FnOnce(&Client) -> PayloadStream,
) -> BoxPublisher<Item> {
    let stream = open(&keep.1);
    let ledger = env.ledger.clone();
    stream
        .map(move |payload| {
            let _alive = &keep;
            from_payload(&ledger, &payload)
        })
        .boxed()
}

/// The rows.
pub fn rows() -> Vec<Stage> {
    vec![
        Stage::new(
            "rsocket::Client::request_stream (a weir Server's publisher over loopback)",
            Kind::Bridge,
            EXACT,
            |env| {
                let source = env.source().map(to_payload).boxed();
                let keep = connect(env, Some(source));
                received(env, keep, |client| {
                    client.request_stream(Payload::data("row"))
                })
            },
            identity,
        )
        .scheduled(),
        Stage::new(
            "rsocket::Client::request_channel (echoed by a weir Server's handler)",
            Kind::Bridge,
            EXACT,
            |env| {
                let outgoing = env.source().map(to_payload);
                let keep = connect(env, None);
                received(env, keep, move |client| client.request_channel(outgoing))
            },
            identity,
        )
        .scheduled(),
    ]
}
