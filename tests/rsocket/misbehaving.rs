//! Peers that break the protocol, played by raw sockets: the right ERROR or close, no
//! panic, and the other streams and connections unaffected.

use bytes::{BufMut, Bytes, BytesMut};
use futures::StreamExt as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::{FramedRead, LengthDelimitedCodec};
use weir::prelude::*;
use weir::rsocket::frame::{Body, ErrorCode, Frame, Payload, Setup};
use weir::rsocket::{connect, Config, Server};
use weir::tck::TestSubscriber;
use weir::ErrorKind;

use super::conn::{collect, first};
use super::service::{runtime, text, Service, PATIENCE};
use super::wire::codec;

fn encode(frame: &Frame) -> Bytes {
    let mut buf = BytesMut::new();
    buf.put_uint(frame.encoded_len() as u64, 3);
    frame.encode(&mut buf).unwrap();
    buf.freeze()
}

fn setup() -> Frame {
    Frame {
        stream: 0,
        body: Body::Setup(Box::new(Setup {
            major: 1,
            minor: 0,
            keepalive_ms: 10_000,
            max_lifetime_ms: 60_000,
            resume_token: None,
            lease: false,
            metadata_mime: "application/octet-stream".into(),
            data_mime: "application/octet-stream".into(),
            payload: Payload::default(),
        })),
    }
}

fn item(stream: u32, i: u32, complete: bool) -> Frame {
    Frame {
        stream,
        body: Body::Payload {
            follows: false,
            complete,
            next: true,
            payload: Payload::data(i.to_string()),
        },
    }
}

/// The frames a raw peer receives, decoded; `None` once the connection ends (or
/// breaks).
struct RawFrames(FramedRead<OwnedReadHalf, LengthDelimitedCodec>);

impl RawFrames {
    async fn next(&mut self) -> Option<Frame> {
        let bytes = self.0.next().await?.ok()?;
        Some(Frame::decode(bytes.freeze()).unwrap())
    }
}

/// A raw server on a free loopback port (returned): `serve` gets its first
/// connection's frames and its writing half, on a task of its own.
async fn raw_server<F, Fut>(serve: F) -> u16
where
    F: FnOnce(RawFrames, OwnedWriteHalf) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (socket, _) = listener.accept().await.unwrap();
        let (read, write) = socket.into_split();
        serve(RawFrames(FramedRead::new(read, codec())), write).await;
    });
    port
}

/// A server that answers a request-stream for `over` with `initial_n + 3` items (rule
/// 1.1 broken on the wire) and any other with one item and completion. Returns its
/// port and a log of the frames it received.
async fn over_sending_server() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<Frame>>>) {
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = log.clone();
    let port = raw_server(move |mut frames, mut write| async move {
        while let Some(frame) = frames.next().await {
            seen.lock().unwrap().push(frame.clone());
            if let Body::RequestStream {
                initial_n, payload, ..
            } = frame.body
            {
                let n = if payload.data.as_ref() == b"over" {
                    initial_n + 3
                } else {
                    1
                };
                for i in 0..n {
                    let last = payload.data.as_ref() != b"over" && i + 1 == n;
                    write
                        .write_all(&encode(&item(frame.stream, i, last)))
                        .await
                        .unwrap();
                }
            }
        }
    })
    .await;
    (port, log)
}

#[test]
fn a_peer_that_over_sends_fails_that_stream_only() {
    let rt = runtime();
    rt.block_on(async {
        let (port, log) = over_sending_server().await;
        let client = weir::rsocket::connect_with(("127.0.0.1", port), Config::default().window(4))
            .await
            .unwrap();
        // The consumer asks for the window and no more, so no grant follows the
        // first: the three extra items are over-sent however the reads split them.
        // (A consumer asking for more could grant again before they arrive.)
        let consumer = TestSubscriber::new().request_on_subscribe(4);
        let probe = consumer.probe();
        client
            .request_stream(Payload::data("over"))
            .subscribe(consumer);
        let error = tokio::task::spawn_blocking(move || probe.await_error(PATIENCE))
            .await
            .unwrap()
            .expect("the stream fails");
        assert_eq!(error.rule(), Some("1.1"), "{error:?}");
        super::conn::wait_until(|| {
            log.lock()
                .unwrap()
                .iter()
                .any(|f| f.stream == 1 && f.body == Body::Cancel)
        })
        .await;
        // The connection lives on: the next stream is served.
        let items = collect(client.request_stream(Payload::data("one")))
            .await
            .unwrap();
        assert_eq!(items.len(), 1);
        assert!(client.closed_with().is_none());
    });
}

/// A peer's CANCEL that crosses this side's ERROR does not swallow it: the client's
/// outgoing publisher fails while the writer waits on a full socket (32 MiB the peer
/// does not read), so the ERROR is queued (behind a second item) when the CANCEL
/// arrives. An ERROR ends the
/// stream both ways, and the peer, which may still be sending on the channel, hears it
/// once it reads again.
#[test]
fn a_cancel_that_crosses_an_error_leaves_the_error_to_go_out() {
    let rt = runtime();
    rt.block_on(async {
        let (failed_tx, failed_rx) = tokio::sync::oneshot::channel::<()>();
        let (heard_tx, heard_rx) = tokio::sync::oneshot::channel::<bool>();
        let port = raw_server(move |mut frames, mut write| async move {
            let _setup = frames.next().await;
            let request = frames.next().await.unwrap();
            assert!(
                matches!(request.body, Body::RequestChannel { .. }),
                "{request:?}"
            );
            let grant = Frame {
                stream: 1,
                body: Body::RequestN(10),
            };
            write.write_all(&encode(&grant)).await.unwrap();
            // Nothing read until the client's channel failed.
            failed_rx.await.unwrap();
            let cancel = Frame {
                stream: 1,
                body: Body::Cancel,
            };
            write.write_all(&encode(&cancel)).await.unwrap();
            // Time for the client's reader to take the CANCEL while its writer still
            // waits (the ERROR goes out with the fix however long this is).
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            let mut heard = false;
            while let Ok(Some(frame)) = tokio::time::timeout(PATIENCE, frames.next()).await {
                if frame.stream == 1 && matches!(frame.body, Body::Error { .. }) {
                    heard = true;
                    break;
                }
            }
            let _ = heard_tx.send(heard);
        })
        .await;
        let client = connect(("127.0.0.1", port)).await.unwrap();
        // The writer takes the first big item and waits on the socket; the second
        // (larger than what is left of the stream's quantum) and the ERROR stay queued.
        let big = Payload::data(vec![7u8; 32 << 20]);
        let second = Payload::data(vec![8u8; 1 << 20]);
        let outgoing = weir::from_iter([Payload::data("x0"), big, second])
            .concat(weir::error(weir::Error::msg("upload broke")));
        let error = collect(client.request_channel(outgoing)).await.unwrap_err();
        assert_eq!(error.message(), "upload broke");
        failed_tx.send(()).unwrap();
        assert!(heard_rx.await.unwrap(), "the ERROR never went out");
    });
}

/// A channel whose REQUEST_CHANNEL carries its only item and COMPLETE (sent by a raw
/// client, so the flag is certain) leaves nothing open at the server once answered:
/// with one stream allowed there, three in a row are served (the server kept the
/// finished stream, and refused the second with REJECTED).
#[test]
fn channels_opened_complete_free_their_stream_at_the_server() {
    let rt = runtime();
    rt.block_on(async {
        let config = Config::default().max_streams(1);
        let server = Server::bind_with("127.0.0.1:0", Service::default(), config)
            .await
            .unwrap();
        let socket = TcpStream::connect(server.local_addr()).await.unwrap();
        let (read, mut write) = socket.into_split();
        let mut frames = RawFrames(FramedRead::new(read, codec()));
        write.write_all(&encode(&setup())).await.unwrap();
        for stream in [1, 3, 5] {
            let request = Frame {
                stream,
                body: Body::RequestChannel {
                    follows: false,
                    complete: true,
                    initial_n: 8,
                    payload: Payload::data(format!("x{stream}")),
                },
            };
            write.write_all(&encode(&request)).await.unwrap();
            let mut answer = Vec::new();
            loop {
                let frame = tokio::time::timeout(PATIENCE, frames.next())
                    .await
                    .expect("the server answers")
                    .expect("the connection stays");
                assert_eq!(frame.stream, stream, "{frame:?}");
                match frame.body {
                    Body::Payload {
                        complete,
                        next,
                        payload,
                        ..
                    } => {
                        if next {
                            answer.push(text(&payload));
                        }
                        if complete {
                            break;
                        }
                    }
                    other => panic!("stream {stream}: {other:?}"),
                }
            }
            assert_eq!(answer, [format!("X{stream}")]);
        }
    });
}

/// Connects a raw client, sends SETUP and then `bytes`; returns what the server sent
/// back before closing (its frames), or panics when it does not close.
async fn raw_exchange(addr: std::net::SocketAddr, bytes: &[u8]) -> Vec<Frame> {
    let mut socket = TcpStream::connect(addr).await.unwrap();
    socket.write_all(&encode(&setup())).await.unwrap();
    socket.write_all(bytes).await.unwrap();
    let mut received = Vec::new();
    tokio::time::timeout(PATIENCE, socket.read_to_end(&mut received))
        .await
        .expect("the server closes the connection")
        .unwrap();
    let mut frames = FramedRead::new(&received[..], codec());
    let mut out = Vec::new();
    while let Some(Ok(bytes)) = frames.next().await {
        out.push(Frame::decode(bytes.freeze()).unwrap());
    }
    out
}

fn is_connection_error(frames: &[Frame]) -> bool {
    frames.iter().any(|f| {
        f.stream == 0
            && matches!(f.body, Body::Error { code, .. } if code == ErrorCode::CONNECTION_ERROR)
    })
}

#[test]
fn malformed_input_closes_that_connection_and_no_other() {
    let rt = runtime();
    rt.block_on(async {
        let config = Config::default().max_frame(1 << 20);
        let server = Server::bind_with("127.0.0.1:0", Service::default(), config)
            .await
            .unwrap();
        let addr = server.local_addr();
        let healthy = connect(addr).await.unwrap();

        // A length of 16 MiB - 1 over the server's 1 MiB limit: refused before reading.
        let frames = raw_exchange(addr, &[0xff, 0xff, 0xff, 0, 0]).await;
        assert!(is_connection_error(&frames), "{frames:?}");

        // An unknown frame type (0x30) without the ignore flag.
        let frames = raw_exchange(addr, &[0, 0, 6, 0, 0, 0, 1, 0x30 << 2, 0]).await;
        assert!(is_connection_error(&frames), "{frames:?}");

        // The same type with the ignore flag is dropped: the connection stays, and a
        // request after it is answered.
        let mut socket = TcpStream::connect(addr).await.unwrap();
        socket.write_all(&encode(&setup())).await.unwrap();
        socket.write_all(&[0, 0, 6, 0, 0, 0, 1, (0x30 << 2) | 0x02, 0]).await.unwrap();
        let request = Frame {
            stream: 1,
            body: Body::RequestResponse {
                follows: false,
                payload: Payload::data("echo:after"),
            },
        };
        socket.write_all(&encode(&request)).await.unwrap();
        let mut frames = FramedRead::new(socket, codec());
        let answer = tokio::time::timeout(PATIENCE, frames.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let answer = Frame::decode(answer.freeze()).unwrap();
        assert!(
            matches!(&answer.body, Body::Payload { payload, .. } if payload.data.as_ref() == b"after"),
            "{answer:?}"
        );

        // A truncated frame, then the peer goes away.
        let mut socket = TcpStream::connect(addr).await.unwrap();
        socket.write_all(&encode(&setup())).await.unwrap();
        socket.write_all(&[0, 0, 100, 0, 0, 0, 1]).await.unwrap();
        drop(socket);

        // The healthy connection never noticed.
        let answer = first(healthy.request_response(Payload::data("echo:fine")))
            .await
            .unwrap();
        assert_eq!(text(&answer), "fine");
        assert!(healthy.closed_with().is_none());
    });
}

#[test]
fn a_silent_peer_is_dropped_after_the_max_lifetime() {
    let rt = runtime();
    rt.block_on(async {
        // A server that accepts and then never says anything.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let hold = tokio::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            tokio::time::sleep(PATIENCE).await;
            drop(socket);
        });
        let config = Config::default()
            .keepalive(std::time::Duration::from_millis(50))
            .max_lifetime(std::time::Duration::from_millis(300));
        let client = weir::rsocket::connect_with(addr, config).await.unwrap();
        let error = collect(client.request_stream(Payload::data("10")))
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Timeout, "{error:?}");
        assert!(client.closed_with().is_some());
        hold.abort();
    });
}

/// Serves `"endless"` as an endless stream of 1 KiB items, counting what it
/// produced; any other request-stream `"<n>"` as n such items.
struct Counting {
    produced: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

const KIB: [u8; 1024] = [7; 1024];

impl weir::rsocket::Handler for Counting {
    fn request_stream(&self, request: Payload) -> weir::BoxPublisher<Payload> {
        use weir::prelude::*;
        let produced = self.produced.clone();
        let n = match request.data.as_ref() {
            b"endless" => u64::MAX,
            _ => text(&request).parse().expect("a count"),
        };
        weir::range(0..n)
            .map(move |_| {
                produced.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Payload::data(Bytes::from_static(&KIB))
            })
            .boxed()
    }
}

/// The most bytes the kernel may buffer on one loopback connection, both ends: the
/// largest TCP send and receive buffers (autotuning's maxima on Linux; 16 MiB
/// elsewhere).
fn kernel_buffers() -> u64 {
    let max_of = |path: &str| -> Option<u64> {
        let text = std::fs::read_to_string(path).ok()?;
        text.split_whitespace().last()?.parse().ok()
    };
    match (
        max_of("/proc/sys/net/ipv4/tcp_wmem"),
        max_of("/proc/sys/net/ipv4/tcp_rmem"),
    ) {
        (Some(w), Some(r)) => w + r,
        _ => 16 << 20,
    }
}

#[test]
fn a_peer_that_stops_reading_holds_bounded_memory_and_no_other_connection() {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    use std::sync::Arc;
    use std::time::Duration;

    let rt = runtime();
    rt.block_on(async {
        let produced = Arc::new(AtomicU64::new(0));
        let handler = Counting {
            produced: produced.clone(),
        };
        let server = Server::bind("127.0.0.1:0", handler).await.unwrap();
        let addr = server.local_addr();

        // A raw peer asks for everything (2^31 − 1, unbounded) and never reads.
        let mut socket = TcpStream::connect(addr).await.unwrap();
        socket.write_all(&encode(&setup())).await.unwrap();
        let request = Frame {
            stream: 1,
            body: Body::RequestStream {
                follows: false,
                initial_n: weir::rsocket::frame::MAX_U31,
                payload: Payload::data("endless"),
            },
        };
        socket.write_all(&encode(&request)).await.unwrap();

        // Production stops once the socket buffers are full: three samples 200 ms
        // apart agree, once it started. (A starved worker could look the same; the
        // checks below hold the bound at every point, not the plateau.)
        let mut samples = vec![u64::MAX];
        let start = std::time::Instant::now();
        while samples.len() < 3
            || samples[samples.len() - 1] == 0
            || samples[samples.len() - 3..]
                .iter()
                .any(|s| *s != samples[samples.len() - 1])
        {
            assert!(
                start.elapsed() < PATIENCE,
                "production never stopped: {samples:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
            samples.push(produced.load(Relaxed));
        }
        let held = produced.load(Relaxed);
        // What may be held: the kernel's buffers, the writer's batch (64 KiB) and
        // the stream's outbox (the default send window, 256), in 1 KiB items.
        let bound = kernel_buffers() / 1024 + 64 + 256;
        eprintln!("a peer that reads nothing: {held} items produced, then none (bound {bound})");
        assert!(
            held > 0 && held <= bound,
            "the server produced {held} items for a peer that reads nothing (bound {bound})"
        );

        // Another connection to the same server is served in full meanwhile.
        let healthy = connect(addr).await.unwrap();
        let items = super::conn::collect(healthy.request_stream(Payload::data("1000")))
            .await
            .unwrap();
        assert_eq!(items.len(), 1000);
        // And the stalled stream stayed within the bound.
        let stalled = produced.load(Relaxed) - 1000;
        assert!(
            stalled <= bound,
            "the stalled stream went on to {stalled} items (bound {bound})"
        );

        // The peer goes away: its connection is released.
        drop(socket);
        super::conn::wait_until(|| server.connections() == 1).await;
        assert!(healthy.closed_with().is_none());
    });
}

/// A raw server that answers a request-stream with one 1 MiB item and then `SMALL`
/// small ones and the completion, all in one write (many whole frames per read: the
/// reader takes them from the buffer in batches), and a request-response with two items
/// (NEXT, then NEXT with COMPLETE) in one write.
async fn bursting_server() -> u16 {
    raw_server(|mut frames, mut write| async move {
        while let Some(frame) = frames.next().await {
            let mut burst = BytesMut::new();
            match frame.body {
                Body::RequestStream { payload, .. } if &payload.data[..] == b"fragments" => {
                    // Items whole and items in two fragments, alternating, in one write:
                    // the final fragments (NEXT, no FOLLOWS) look like whole items and
                    // land among the frames the reader takes from its buffer.
                    let part = |data: &'static str, follows: bool, complete: bool| Frame {
                        stream: frame.stream,
                        body: Body::Payload {
                            follows,
                            complete,
                            next: true,
                            payload: Payload::data(data),
                        },
                    };
                    for i in 0..FRAGMENTED {
                        let last = i + 1 == FRAGMENTED;
                        burst.extend_from_slice(&encode(&item(frame.stream, i, false)));
                        burst.extend_from_slice(&encode(&part("ab", true, false)));
                        burst.extend_from_slice(&encode(&part("cd", false, last)));
                    }
                }
                Body::RequestStream { .. } => {
                    let big = Frame {
                        stream: frame.stream,
                        body: Body::Payload {
                            follows: false,
                            complete: false,
                            next: true,
                            payload: Payload::data(vec![b'0'; BIG]),
                        },
                    };
                    burst.extend_from_slice(&encode(&big));
                    for i in 1..=SMALL {
                        burst.extend_from_slice(&encode(&item(frame.stream, i, i == SMALL)));
                    }
                }
                Body::RequestResponse { .. } => {
                    burst.extend_from_slice(&encode(&item(frame.stream, 1, false)));
                    burst.extend_from_slice(&encode(&item(frame.stream, 2, true)));
                }
                _ => continue,
            }
            write.write_all(&burst).await.unwrap();
        }
    })
    .await
}

/// Every item of a request-stream for `data`, asked for with unbounded demand.
async fn all_at_once(client: &weir::rsocket::Client, data: &'static str) -> Vec<Payload> {
    let handle = client
        .request_stream(Payload::data(data))
        .collect_with(weir::demand::UNBOUNDED);
    tokio::task::spawn_blocking(move || {
        let mut handle = handle;
        handle.wait_timeout(PATIENCE).expect("the stream ends")
    })
    .await
    .unwrap()
    .expect("no error")
}

const SMALL: u32 = 20_000;
const FRAGMENTED: u32 = 2_000;
const BIG: usize = 1 << 20;

#[test]
fn frames_a_read_brings_in_bulk_are_each_handled_once_in_order() {
    let rt = runtime();
    rt.block_on(async {
        let port = bursting_server().await;
        let config = Config::default().window(32_768);
        let client = weir::rsocket::connect_with(("127.0.0.1", port), config)
            .await
            .unwrap();
        let items = all_at_once(&client, "burst").await;
        assert_eq!(items.len(), SMALL as usize + 1);
        assert_eq!(items[0].data.len(), BIG);
        let small: Vec<String> = items[1..].iter().map(text).collect();
        let expected: Vec<String> = (1..=SMALL).map(|i| i.to_string()).collect();
        assert!(
            small == expected,
            "the small items arrived out of order or not once"
        );

        // Fragments among whole items, in one write: each pair is put together,
        // whether its last part came from the codec or from the reader's chunk.
        let items = all_at_once(&client, "fragments").await;
        let texts: Vec<String> = items.iter().map(text).collect();
        let expected: Vec<String> = (0..FRAGMENTED)
            .flat_map(|i| [i.to_string(), "abcd".to_owned()])
            .collect();
        assert!(
            texts == expected,
            "fragments were not put together in order"
        );

        // A response whose peer sends two items in one write: the first answers it,
        // the second is dropped as late (as when they come in two reads).
        let answer = first(client.request_response(Payload::data("two")))
            .await
            .unwrap();
        assert_eq!(text(&answer), "1");
        assert!(client.closed_with().is_none());
    });
}

/// A connection still in its handshake when the server is dropped is closed when the
/// handshake completes (an ERROR CONNECTION_CLOSE, then the end), never served: the
/// server closed only the connections registered after their handshake.
#[test]
fn a_connection_whose_setup_arrives_after_the_server_dropped_is_not_served() {
    let rt = runtime();
    rt.block_on(async {
        let server = Server::bind("127.0.0.1:0", Service::default())
            .await
            .unwrap();
        let socket = TcpStream::connect(server.local_addr()).await.unwrap();
        // Give the server time to accept; its handshake then waits for the SETUP.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        drop(server);
        let (read, mut write) = socket.into_split();
        let mut frames = RawFrames(FramedRead::new(read, codec()));
        write.write_all(&encode(&setup())).await.unwrap();
        let request = Frame {
            stream: 1,
            body: Body::RequestResponse {
                follows: false,
                payload: Payload::data("echo:late"),
            },
        };
        // The socket may already be shut down: a failed write is an answer too.
        let _ = write.write_all(&encode(&request)).await;
        loop {
            let frame = tokio::time::timeout(PATIENCE, frames.next())
                .await
                .expect("the connection ends (it was served instead)");
            match frame {
                None => break,
                Some(Frame {
                    stream: 0,
                    body: Body::Error { code, .. },
                }) => assert_eq!(code, ErrorCode::CONNECTION_CLOSE),
                Some(other) => panic!("served after the server was dropped: {other:?}"),
            }
        }
    });
}
