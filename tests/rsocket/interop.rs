//! Interop with real peers: rsocket-py and rsocket-js, in both directions (their
//! client → a weir server, a weir client → their server), every interaction of the
//! interop service (see `peers/mod.rs`). Every connection goes through the recording
//! proxy, so credit is checked on the wire: the side sending items never sends more
//! PAYLOAD frames than were granted.
//!
//! What a peer cannot do is said where its test would be: rsocket-js 0.0.27 sends no
//! fragments (it sends a 1 MiB payload as one frame; weir accepts frames up to
//! 2^24 − 1 bytes, so the exchange still works, unfragmented in that direction).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use weir::prelude::*;
use weir::rsocket::frame::Body;
use weir::rsocket::{connect_with, Config, Payload, Server};

use super::conn::{a_megabyte_each_way, collect, first};
use super::peers::{self, Running};
use super::service::{
    await_probe, request_in_batches, runtime, subscribe_probe, text, Service, PATIENCE,
};
use super::wire::{credit_check, proxy, Dir, Log};

/// A peer: how to start its server and run its client.
struct Peer {
    server: fn() -> Running,
    client: fn(u16, &[&str]) -> Vec<String>,
    /// It fragments what it sends.
    fragments: bool,
}

const PYTHON: Peer = Peer {
    server: peers::python::server,
    client: peers::python::client,
    fragments: true,
};

const JS: Peer = Peer {
    server: peers::js::server,
    client: peers::js::client,
    fragments: false,
};

fn lines(expected: &[&str]) -> Vec<String> {
    expected.iter().map(|s| s.to_string()).collect()
}

/// Streams of a connection, in the order the client opened them.
fn client_streams(log: &Log) -> Vec<u32> {
    let mut ids = Vec::new();
    for (dir, frame) in log.lock().unwrap().iter() {
        let request = matches!(
            frame.body,
            Body::RequestStream { .. } | Body::RequestChannel { .. } | Body::RequestResponse { .. }
        );
        if *dir == Dir::Up && request && !ids.contains(&frame.stream) {
            ids.push(frame.stream);
        }
    }
    ids
}

/// Their client against a weir server (fragment size 64 KiB), through the proxy.
fn their_client_weir_server(peer: Peer) {
    let rt = runtime();
    let service = Service::default();
    let config = Config::default().fragment_size(64 * 1024);
    let server = rt
        .block_on(Server::bind_with("127.0.0.1:0", service.clone(), config))
        .unwrap();
    let (addr, log) = rt.block_on(proxy(server.local_addr()));
    let port = addr.port();
    let run = |args: &[&str]| {
        log.lock().unwrap().clear();
        (peer.client)(port, args)
    };

    assert_eq!(run(&["response", "echo:hi"]), lines(&["response hi"]));
    assert_eq!(run(&["response", "fail:boom"]), lines(&["error boom"]));

    assert_eq!(run(&["fnf", "hello"]), lines(&["sent"]));
    let start = Instant::now();
    while service.fnf.load(Ordering::SeqCst) != 1 {
        assert!(
            start.elapsed() < PATIENCE,
            "the fire-and-forget never arrived"
        );
        std::thread::sleep(Duration::from_millis(5));
    }

    // Their subscriber requests 3 at a time: weir sends exactly that.
    let mut expected: Vec<String> = (0..10).map(|i| format!("item {i}")).collect();
    expected.push("complete".into());
    assert_eq!(run(&["stream", "10", "3"]), expected);
    let stream = client_streams(&log)[0];
    let (items, credit, _) = credit_check(&log.lock().unwrap(), stream, Dir::Down);
    assert_eq!(
        (items, credit),
        (10, 12),
        "10 items against 3 + 3 + 3 + 3 granted"
    );

    let mut expected: Vec<String> = (0..10).map(|i| format!("item {i}")).collect();
    expected.push("cancelled".into());
    assert_eq!(run(&["stream", "infinite", "4", "10"]), expected);
    let stream = client_streams(&log)[0];
    let (items, credit, _) = credit_check(&log.lock().unwrap(), stream, Dir::Down);
    assert!(
        items >= 10 && items <= credit && credit == 12,
        "{items} of {credit}"
    );
    // The client may exit before the proxy has logged its CANCEL: wait for it
    // (bounded), as for the fire-and-forget above.
    let start = Instant::now();
    while !log
        .lock()
        .unwrap()
        .iter()
        .any(|(d, f)| *d == Dir::Up && f.stream == stream && f.body == Body::Cancel)
    {
        assert!(
            start.elapsed() < PATIENCE,
            "the client's CANCEL never reached the server"
        );
        std::thread::sleep(Duration::from_millis(5));
    }

    assert_eq!(
        run(&["stream", "fail-after:2", "5"]),
        lines(&["item 0", "item 1", "error stream failed"])
    );

    // A 1 MiB request (fragmented by the peer when it can) and a 1 MiB answer
    // (fragmented by weir at 64 KiB).
    let sum: u64 =
        b"len:".iter().map(|&b| u64::from(b)).sum::<u64>() + u64::from(b'x') * ((1 << 20) - 4);
    assert_eq!(
        run(&["big", "1048576"]),
        lines(&[&format!("response 1048576:{sum}")])
    );
    if peer.fragments {
        let fragments = log
            .lock()
            .unwrap()
            .iter()
            .filter(|(d, f)| *d == Dir::Up && matches!(f.body, Body::Payload { follows: true, .. }))
            .count();
        assert!(fragments >= 10, "the peer sent {fragments} fragments");
    }
    assert_eq!(
        run(&["bigreply", "1048576"]),
        lines(&["len 1048576", "pattern ok"])
    );
    let fragments = log
        .lock()
        .unwrap()
        .iter()
        .filter(|(d, f)| *d == Dir::Down && matches!(f.body, Body::Payload { follows: true, .. }))
        .count();
    assert!(fragments >= 15, "weir sent {fragments} fragments");

    assert_eq!(
        run(&["channel", "a,b,c"]),
        lines(&["item A", "item B", "item C", "complete"])
    );
    let stream = client_streams(&log)[0];
    credit_check(&log.lock().unwrap(), stream, Dir::Down);
    drop(server);
}

/// A weir client (fragment size 64 KiB) against their server, through the proxy.
fn weir_client_their_server(peer: Peer) {
    let peer_server = (peer.server)();
    let port = peer_server.port();
    let rt = runtime();
    rt.block_on(async {
        let (addr, log) = proxy(([127, 0, 0, 1], port).into()).await;
        let config = Config::default().fragment_size(64 * 1024);
        let client = connect_with(addr, config).await.unwrap();

        let request = Payload {
            metadata: Some("meta".into()),
            data: "echo:hi".into(),
        };
        let answer = first(client.request_response(request)).await.unwrap();
        assert_eq!(text(&answer), "hi");
        assert_eq!(answer.metadata.as_deref(), Some(&b"meta"[..]));

        let error = first(client.request_response(Payload::data("fail:boom")))
            .await
            .unwrap_err();
        assert_eq!(error.message(), "boom");

        client.fire_and_forget(Payload::data("hello")).unwrap();
        let start = Instant::now();
        loop {
            let count = first(client.request_response(Payload::data("fnf-count")))
                .await
                .unwrap();
            if text(&count) == "1" {
                break;
            }
            assert!(
                start.elapsed() < PATIENCE,
                "the fire-and-forget never counted"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }

        // Our subscriber requests 3 at a time; their server sends within the credit.
        let probe = subscribe_probe(client.request_stream(Payload::data("10")));
        request_in_batches(&probe, 10, 3).await;
        let items: Vec<String> = probe.items().iter().map(text).collect();
        assert_eq!(items, (0..10).map(|i| i.to_string()).collect::<Vec<_>>());
        let stream = *client_streams(&log).last().unwrap();
        let (items, credit, grants) = credit_check(&log.lock().unwrap(), stream, Dir::Down);
        if (items, credit, grants) != (10, 12, 4) {
            for (d, f) in log
                .lock()
                .unwrap()
                .iter()
                .filter(|(_, f)| f.stream == stream)
            {
                eprintln!("{d:?} {:?}", f.body);
            }
        }
        assert_eq!((items, credit, grants), (10, 12, 4));

        // Cancel mid-stream.
        let probe = subscribe_probe(client.request_stream(Payload::data("infinite")));
        probe.request(10);
        await_probe(&probe, move |p| p.await_items(10, PATIENCE)).await;
        probe.cancel();
        let stream = *client_streams(&log).last().unwrap();
        super::conn::wait_until(|| {
            log.lock()
                .unwrap()
                .iter()
                .any(|(d, f)| *d == Dir::Up && f.stream == stream && f.body == Body::Cancel)
        })
        .await;
        assert_eq!(probe.received_count(), 10);

        let error = collect(client.request_stream(Payload::data("fail-after:2")))
            .await
            .unwrap_err();
        assert_eq!(error.message(), "stream failed");

        // 1 MiB each way (weir fragments at 64 KiB).
        a_megabyte_each_way(&client).await;

        let outgoing = weir::from_iter(["a", "b", "c"]).map(Payload::data);
        let items = collect(client.request_channel(outgoing)).await.unwrap();
        let items: Vec<String> = items.iter().map(text).collect();
        assert_eq!(items, ["A", "B", "C"]);
        assert!(
            client.closed_with().is_none(),
            "the connection served everything"
        );
    });
    drop(peer_server);
}

#[test]
fn python_client_against_weir_server() {
    their_client_weir_server(PYTHON);
}

#[test]
fn weir_client_against_python_server() {
    weir_client_their_server(PYTHON);
}

#[test]
fn js_client_against_weir_server() {
    their_client_weir_server(JS);
}

#[test]
fn weir_client_against_js_server() {
    weir_client_their_server(JS);
}
