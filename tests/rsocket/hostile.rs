//! Local publishers that break the contract on the connection's own tasks: a
//! handler's answer (or a channel's outgoing items) whose subscription panics in
//! `request` (rule 3.16) or in `cancel` (rule 3.15). The stream fails (or ends as
//! asked), the connection serves on, and nothing waits for ever. (Each of these used
//! to unwind the connection's reader or writer task: the stream got no terminal
//! signal, the connection served nothing more and was never closed, and dropping the
//! server re-raised the panic.)

use std::time::Duration;

use weir::prelude::*;
use weir::rsocket::{connect, Config, Handler, Payload, PayloadStream, Server};
use weir::tck::TestProbe;
use weir::BoxPublisher;

use super::service::{runtime, subscribe_probe, text, PATIENCE};
use crate::unruly::Hostile;

/// The numbers `0..n` as payloads.
fn numbers(n: u64) -> BoxPublisher<Payload> {
    weir::range(0..n)
        .map(|i| Payload::data(i.to_string()))
        .boxed()
}

/// Answers "request-panics" with a publisher whose second `request` panics,
/// "cancel-panics" with one whose `cancel` panics, anything else with ten numbers;
/// echoes a channel.
struct Hostility;

impl Handler for Hostility {
    fn request_stream(&self, request: Payload) -> BoxPublisher<Payload> {
        match text(&request).as_str() {
            "request-panics" => Hostile {
                source: numbers(1_000),
                request_panics_at: 2,
                cancel_panics: false,
            }
            .boxed(),
            "cancel-panics" => Hostile {
                source: numbers(1_000_000),
                request_panics_at: 0,
                cancel_panics: true,
            }
            .boxed(),
            _ => numbers(10),
        }
    }

    fn request_channel(&self, _first: &Payload, incoming: PayloadStream) -> BoxPublisher<Payload> {
        incoming.boxed()
    }
}

/// A plain stream on `client` still delivers its ten items and completes.
fn serves(client: &weir::rsocket::Client) {
    let probe = subscribe_probe(client.request_stream(Payload::data("plain")));
    probe.request(100);
    probe
        .await_completion(PATIENCE)
        .expect("the connection serves on");
    assert_eq!(probe.items().len(), 10);
}

fn first_item(probe: &TestProbe<Payload>) {
    probe.request(1);
    probe.await_items(1, PATIENCE).expect("the first item");
}

/// The server's reader asks a handler's answer for more when REQUEST_N arrives; a
/// `request` that panics fails that stream (the client sees an error) and the
/// connection serves on.
#[test]
fn a_handlers_answer_whose_request_panics_fails_only_its_stream() {
    let rt = runtime();
    let _guard = rt.enter();
    let server = rt.block_on(Server::bind("127.0.0.1:0", Hostility)).unwrap();
    let client = rt.block_on(connect(server.local_addr())).unwrap();
    let probe = subscribe_probe(client.request_stream(Payload::data("request-panics")));
    first_item(&probe);
    probe.request(5);
    let error = probe.await_error(PATIENCE).expect("the stream fails");
    assert!(error.to_string().contains("panic"), "{error}");
    serves(&client);
    assert!(client.closed_with().is_none());
}

/// The server's reader cancels a handler's answer when CANCEL arrives, and dropping
/// the server cancels every open one; a `cancel` that panics stops neither.
#[test]
fn a_handlers_answer_whose_cancel_panics_is_contained() {
    let rt = runtime();
    let _guard = rt.enter();
    let server = rt.block_on(Server::bind("127.0.0.1:0", Hostility)).unwrap();
    let client = rt.block_on(connect(server.local_addr())).unwrap();
    let cancelled = subscribe_probe(client.request_stream(Payload::data("cancel-panics")));
    first_item(&cancelled);
    cancelled.cancel();
    serves(&client);
    // Dropped with such an answer open: no panic, and the client hears of it.
    let open = subscribe_probe(client.request_stream(Payload::data("cancel-panics")));
    first_item(&open);
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(server)));
    assert!(dropped.is_ok(), "dropping the server panicked");
    open.await_error(PATIENCE)
        .expect("the open stream fails with the connection");
}

/// The client's reader asks a channel's outgoing publisher for more when the
/// server's REQUEST_N arrives; a `request` that panics fails the channel (its
/// subscriber here gets an error) instead of killing the reader (which also sends
/// the keepalives: the server dropped the silent connection, the client never knew).
#[test]
fn a_channels_outgoing_publisher_whose_request_panics_fails_the_channel() {
    let rt = runtime();
    let _guard = rt.enter();
    let server = rt.block_on(Server::bind("127.0.0.1:0", Hostility)).unwrap();
    let config = Config::default().max_lifetime(Duration::from_secs(2));
    let client = rt
        .block_on(weir::rsocket::connect_with(server.local_addr(), config))
        .unwrap();
    let outgoing = Hostile {
        source: numbers(1_000),
        request_panics_at: 2,
        cancel_panics: false,
    };
    let probe = subscribe_probe(client.request_channel(outgoing));
    probe.request(100);
    probe
        .await_error(PATIENCE)
        .expect("the channel's subscriber hears of the failure");
    serves(&client);
}
