//! weir client ↔ weir server on loopback: every interaction, credit on the wire
//! (through the recording proxy), cancel, errors, fragmentation, limits.

use std::sync::atomic::Ordering;
use std::time::Duration;

use weir::prelude::*;
use weir::rsocket::frame::Body;
use weir::rsocket::{
    connect, connect_with, Client, Config, ErrorCode, Payload, RemoteError, Server,
};

use super::service::{
    await_probe, pattern, request_in_batches, runtime, subscribe_probe, text, Service, PATIENCE,
};
use super::wire::{credit_check, proxy, Dir, Log};

/// The interop service on a free loopback port, and a client connected to it.
async fn served() -> (Server, Client) {
    let server = Server::bind("127.0.0.1:0", Service::default())
        .await
        .expect("bind a loopback server");
    let client = connect(server.local_addr()).await.expect("connect to it");
    (server, client)
}

/// The interop service, and a client with `config` connected to it through the
/// recording proxy, whose log comes too.
async fn served_through_proxy(config: Config) -> (Server, Client, Log) {
    let server = Server::bind("127.0.0.1:0", Service::default())
        .await
        .expect("bind a loopback server");
    let (addr, log) = proxy(server.local_addr()).await;
    let client = connect_with(addr, config).await.expect("connect to it");
    (server, client, log)
}

/// Waits until the proxy has logged this side's CANCEL of `stream`.
async fn cancel_logged(log: &Log, stream: u32) {
    wait_until(|| {
        log.lock()
            .unwrap()
            .iter()
            .any(|(d, f)| *d == Dir::Up && f.stream == stream && f.body == Body::Cancel)
    })
    .await;
}

fn texts(items: Vec<Payload>) -> Vec<String> {
    items.iter().map(text).collect()
}

#[test]
fn request_response_echoes_data_and_metadata_and_carries_errors() {
    let rt = runtime();
    rt.block_on(async {
        let (_server, client) = served().await;
        let request = Payload {
            metadata: Some("meta".into()),
            data: "echo:hello".into(),
        };
        let answer = first(client.request_response(request)).await.unwrap();
        assert_eq!(text(&answer), "hello");
        assert_eq!(answer.metadata.as_deref(), Some(&b"meta"[..]));

        let error = first(client.request_response(Payload::data("fail:boom")))
            .await
            .unwrap_err();
        assert_eq!(error.message(), "boom");
        let remote = std::error::Error::source(&error)
            .and_then(|s| s.downcast_ref::<RemoteError>())
            .expect("the peer's ERROR as the source");
        assert_eq!(remote.code, ErrorCode::APPLICATION_ERROR);
        assert_eq!(client.open_streams(), 0, "both streams are gone");
    });
}

#[test]
fn fire_and_forget_reaches_the_handler() {
    let rt = runtime();
    rt.block_on(async {
        let service = Service::default();
        let server = Server::bind("127.0.0.1:0", service.clone()).await.unwrap();
        let client = connect(server.local_addr()).await.unwrap();
        for _ in 0..3 {
            client.fire_and_forget(Payload::data("x")).unwrap();
        }
        // Frames of one connection arrive in order: the count is read after them.
        let count = first(client.request_response(Payload::data("fnf-count")))
            .await
            .unwrap();
        assert_eq!(text(&count), "3");
        assert_eq!(service.fnf.load(Ordering::SeqCst), 3);
    });
}

#[test]
fn a_stream_sends_exactly_what_its_subscriber_requested_in_batches() {
    let rt = runtime();
    rt.block_on(async {
        let (_server, client, log) = served_through_proxy(Config::default()).await;
        let probe = subscribe_probe(client.request_stream(Payload::data("10")));
        request_in_batches(&probe, 10, 3).await;
        let items: Vec<String> = texts(probe.items());
        assert_eq!(items, (0..10).map(|i| i.to_string()).collect::<Vec<_>>());
        probe.assert_no_violations();
        let log = log.lock().unwrap().clone();
        let (items, credit, grants) = credit_check(&log, 1, Dir::Down);
        assert_eq!(items, 10);
        // request(3) four times: 3 + 3 + 3 + 3 granted, one grant each.
        assert_eq!((credit, grants), (12, 4));
    });
}

#[test]
fn an_unbounded_subscriber_gets_the_stream_in_windows() {
    let rt = runtime();
    rt.block_on(async {
        let (_server, client, log) = served_through_proxy(Config::default().window(16)).await;
        let items = collect(client.request_stream(Payload::data("1000")))
            .await
            .unwrap();
        assert_eq!(items.len(), 1000);
        assert!(items
            .iter()
            .enumerate()
            .all(|(i, p)| text(p) == i.to_string()));
        let log = log.lock().unwrap().clone();
        let (items, credit, grants) = credit_check(&log, 1, Dir::Down);
        assert_eq!(items, 1000);
        assert!((1000..=1000 + 16).contains(&credit), "credit {credit}");
        // Windows of 16 replenished at the low-water mark: at least 12 at a time.
        assert!(grants <= 1000 / 12 + 2, "{grants} grants");
        for (_, frame) in log.iter().filter(|(d, f)| *d == Dir::Up && f.stream == 1) {
            if let Body::RequestN(n) | Body::RequestStream { initial_n: n, .. } = frame.body {
                assert!(n <= 16, "a grant of {n} over the window of 16");
            }
        }
    });
}

#[test]
fn cancel_mid_stream_sends_cancel_and_frees_both_ends() {
    let rt = runtime();
    rt.block_on(async {
        let (_server, client, log) = served_through_proxy(Config::default()).await;
        let probe = subscribe_probe(client.request_stream(Payload::data("infinite")));
        probe.request(10);
        await_probe(&probe, move |p| p.await_items(10, PATIENCE)).await;
        probe.cancel();
        wait_until(|| client.open_streams() == 0).await;
        cancel_logged(&log, 1).await;
        assert_eq!(probe.received_count(), 10);
        probe.assert_no_terminal();
        // The connection lives on.
        let answer = first(client.request_response(Payload::data("echo:still"))).await;
        assert_eq!(text(&answer.unwrap()), "still");
    });
}

#[test]
fn a_failing_stream_delivers_its_items_then_the_error() {
    let rt = runtime();
    rt.block_on(async {
        let (_server, client) = served().await;
        let probe = subscribe_probe(client.request_stream(Payload::data("fail-after:2")));
        probe.request(5);
        let error = await_probe(&probe, move |p| p.await_error(PATIENCE)).await;
        assert_eq!(error.message(), "stream failed");
        assert_eq!(texts(probe.items()), ["0", "1"]);
    });
}

/// A handler's publisher that drops its subscriber without a terminal signal (on a
/// thread of its own, after two items, as one whose thread panicked would): the
/// requester gets the items and then an APPLICATION_ERROR that says so, instead of
/// waiting for ever; the connection serves on.
#[test]
fn a_handler_publisher_that_abandons_its_subscriber_ends_the_stream_with_an_error() {
    struct Abandons;
    impl Publisher for Abandons {
        type Item = Payload;
        fn subscribe<S: weir::Subscriber<Payload> + Send + 'static>(self, mut subscriber: S) {
            std::thread::spawn(move || {
                subscriber.on_subscribe(weir::Subscription::noop());
                subscriber.on_next(Payload::data("0"));
                subscriber.on_next(Payload::data("1"));
                drop(subscriber);
            });
        }
    }
    struct Abandoning;
    impl weir::rsocket::Handler for Abandoning {
        fn request_stream(&self, _request: Payload) -> weir::BoxPublisher<Payload> {
            Abandons.boxed()
        }
    }
    let rt = runtime();
    rt.block_on(async {
        let server = Server::bind("127.0.0.1:0", Abandoning).await.unwrap();
        let client = connect(server.local_addr()).await.unwrap();
        for _ in 0..2 {
            let probe = subscribe_probe(client.request_stream(Payload::data("x")));
            probe.request(5);
            let error = await_probe(&probe, move |p| p.await_error(PATIENCE)).await;
            assert!(
                error
                    .message()
                    .contains("dropped its subscriber without a terminal signal"),
                "{error}"
            );
            let remote = std::error::Error::source(&error)
                .and_then(|s| s.downcast_ref::<RemoteError>())
                .expect("the peer's ERROR as the source");
            assert_eq!(remote.code, ErrorCode::APPLICATION_ERROR);
            assert_eq!(texts(probe.items()), ["0", "1"]);
        }
        assert!(client.closed_with().is_none());
    });
}

#[test]
fn a_megabyte_travels_fragmented_both_ways() {
    let rt = runtime();
    rt.block_on(async {
        let config = Config::default().fragment_size(64 * 1024);
        let server = Server::bind_with("127.0.0.1:0", Service::default(), config.clone())
            .await
            .unwrap();
        let (addr, log) = proxy(server.local_addr()).await;
        let client = connect_with(addr, config).await.unwrap();
        a_megabyte_each_way(&client).await;
        let log = log.lock().unwrap();
        let fragments = |dir: Dir| {
            log.iter()
                .filter(|(d, f)| *d == dir && f.encoded_len() <= 64 * 1024)
                .filter(|(_, f)| {
                    matches!(
                        f.body,
                        Body::Payload { follows: true, .. }
                            | Body::RequestResponse { follows: true, .. }
                    )
                })
                .count()
        };
        assert!(
            fragments(Dir::Up) >= 16,
            "the request went in 64 KiB fragments"
        );
        assert!(
            fragments(Dir::Down) >= 16,
            "the answer came in 64 KiB fragments"
        );
        assert!(log.iter().all(|(_, f)| f.encoded_len() <= 64 * 1024));
    });
}

#[test]
fn a_channel_answers_each_item() {
    let rt = runtime();
    rt.block_on(async {
        let (_server, client, log) = served_through_proxy(Config::default()).await;
        let outgoing = weir::from_iter(["a", "b", "c"]).map(Payload::data);
        let items = collect(client.request_channel(outgoing)).await.unwrap();
        assert_eq!(texts(items), ["A", "B", "C"]);
        let log = log.lock().unwrap().clone();
        // The server's items within the client's credit, and the client's items
        // (after the first, which the request carries) within the server's.
        let (down, _, _) = credit_check(&log, 1, Dir::Down);
        assert_eq!(down, 3);
        wait_until(|| client.open_streams() == 0).await;
    });
}

/// A channel's REQUEST_CHANNEL carries its outgoing publisher's first item. One whose
/// subscriber cancels before that item exists never reached the wire: it ends here,
/// its outgoing publisher is cancelled (the item offered later is refused), and the
/// peer hears nothing of it, neither a CANCEL for a stream it does not know nor,
/// later, a request it would serve for nobody. The next channel is stream 3: the log
/// up to its request holds nothing of stream 1.
#[test]
fn a_channel_cancelled_before_its_request_went_out_never_reaches_the_wire() {
    let rt = runtime();
    rt.block_on(async {
        let (_server, client, log) = served_through_proxy(Config::default()).await;
        let (first_item, item) = tokio::sync::oneshot::channel::<&'static str>();
        let outgoing = weir::from_stream(futures::stream::once(item))
            .map(|item| Payload::data(item.unwrap_or("gone")));
        let probe = subscribe_probe(client.request_channel(outgoing));
        probe.request(4);
        wait_until(|| client.open_streams() == 1).await;
        probe.cancel();
        wait_until(|| client.open_streams() == 0).await;
        // The outgoing publisher is cancelled: its item's sender sees the receiver go.
        wait_until(|| first_item.is_closed()).await;

        let items = collect(client.request_channel(weir::just(Payload::data("x")))).await;
        assert_eq!(texts(items.unwrap()), ["X"]);
        let log = log.lock().unwrap().clone();
        let up_to_second: Vec<_> = log
            .iter()
            .take_while(|(d, f)| !(*d == Dir::Up && f.stream == 3))
            .collect();
        assert!(
            up_to_second.iter().all(|(_, f)| f.stream != 1),
            "frames of the cancelled channel went out: {up_to_second:?}"
        );
        assert!(log.iter().any(|(d, f)| *d == Dir::Up && f.stream == 3));
        probe.assert_no_terminal();
    });
}

/// A channel whose outgoing publisher fails sends ERROR, which ends the stream both
/// ways: its subscriber here gets the same error at once (it waited for the
/// connection's end before), and the connection serves the next request.
#[test]
fn a_failing_outgoing_publisher_ends_its_channel_both_ways() {
    let outgoing = weir::from_iter(["a", "b"])
        .map(Payload::data)
        .concat(weir::error(weir::Error::msg("upload broke")));
    let error = failed_channel(outgoing, true);
    assert_eq!(error.message(), "upload broke");
}

/// A channel whose outgoing publisher fails before its first item (which the
/// REQUEST_CHANNEL frame would carry) never reached the wire: its subscriber gets the
/// error, and the peer hears nothing of the stream (no ERROR for a stream it does
/// not know). The next channel is stream 3, and the log holds nothing of stream 1.
#[test]
fn a_channel_whose_outgoing_publisher_fails_at_once_never_reaches_the_wire() {
    let outgoing = weir::error::<Payload>(weir::Error::msg("nothing to upload"));
    let error = failed_channel(outgoing, false);
    assert_eq!(error.message(), "nothing to upload");
}

/// Opens a channel with `outgoing`, which fails, through the recording proxy, and
/// returns its subscriber's error once the client forgot the stream and the
/// connection served the next request. `on_the_wire`: the failure came after the
/// REQUEST_CHANNEL went out, so the peer got an ERROR on stream 1; otherwise the log
/// holds nothing of stream 1.
fn failed_channel(
    outgoing: impl Publisher<Item = Payload> + Send + 'static,
    on_the_wire: bool,
) -> weir::Error {
    let rt = runtime();
    rt.block_on(async {
        let (_server, client, log) = served_through_proxy(Config::default()).await;
        let error = collect(client.request_channel(outgoing)).await.unwrap_err();
        wait_until(|| client.open_streams() == 0).await;
        let items = collect(client.request_channel(weir::just(Payload::data("x")))).await;
        assert_eq!(texts(items.unwrap()), ["X"]);
        if on_the_wire {
            wait_until(|| {
                log.lock().unwrap().iter().any(|(d, f)| {
                    *d == Dir::Up && f.stream == 1 && matches!(f.body, Body::Error { .. })
                })
            })
            .await;
        } else {
            let log = log.lock().unwrap();
            assert!(
                log.iter().all(|(_, f)| f.stream != 1),
                "frames of the failed channel went out: {log:?}"
            );
        }
        error
    })
}

/// An outgoing publisher that keeps rule 1.1 for its first `keeps` requests and
/// sends one item more than asked from then on (each answer one batch), from a
/// thread of its own.
struct OverSends {
    keeps: usize,
}

struct Requests(std::sync::mpsc::Sender<Option<u64>>);

impl weir::RawSubscription for Requests {
    fn request(&self, n: u64) {
        let _ = self.0.send(Some(n));
    }
    fn cancel(&self) {
        let _ = self.0.send(None);
    }
}

impl Publisher for OverSends {
    type Item = Payload;
    fn subscribe<S: Subscriber<Payload> + Send + 'static>(self, mut subscriber: S) {
        let (tx, rx) = std::sync::mpsc::channel();
        subscriber.on_subscribe(weir::Subscription::new(std::sync::Arc::new(Requests(tx))));
        std::thread::spawn(move || {
            let mut sent = 0u64;
            for (i, n) in rx.iter().map_while(|r| r).enumerate() {
                let mut n = if i < self.keeps { n } else { n + 1 };
                // In one batch: the connection sees the breach before the writer
                // takes the batch's first item. Batch credit is demand too.
                while n > 0 {
                    let items = (sent..sent + n).map(|i| Payload::data(format!("x{i}")));
                    sent += n;
                    n = subscriber.on_next_batch(items);
                }
            }
        });
    }
}

/// A channel whose outgoing publisher sends more than asked after the channel went
/// out: the peer gets an ERROR (rule 1.1), which ends the stream both ways, so its
/// subscriber here fails with the same error (it waited for the connection's end
/// before), and the connection serves the next request.
#[test]
fn an_outgoing_publisher_that_over_sends_ends_its_channel_both_ways() {
    let error = failed_channel(OverSends { keeps: 1 }, true);
    assert_eq!(error.rule(), Some("1.1"), "{error}");
}

/// One that over-sends at its first request, before its REQUEST_CHANNEL went out:
/// the channel ends here with the rule 1.1 error, and the peer hears nothing of it
/// (it got a REQUEST_CHANNEL and an ERROR before).
#[test]
fn an_outgoing_publisher_that_over_sends_at_once_never_reaches_the_wire() {
    let error = failed_channel(OverSends { keeps: 0 }, false);
    assert_eq!(error.rule(), Some("1.1"), "{error}");
}

/// The operators that produce a stream's outgoing items run with no lock of the
/// connection held: a closure that asks the client something (here its open
/// streams, which takes the connection's lock) does not deadlock, whether its items
/// reach the sending side one at a time or in batches.
#[test]
fn an_outgoing_closure_may_call_the_client() {
    let rt = runtime();
    rt.block_on(async {
        let (_server, client) = served().await;
        let inner = client.clone();
        let outgoing = weir::range(0..10u32)
            .map(move |i| {
                assert!(inner.open_streams() >= 1, "the channel is open");
                Payload::data(format!("x{i}"))
            })
            .boxed();
        let items = collect(client.request_channel(outgoing)).await.unwrap();
        assert_eq!(texts(items).len(), 10);
        wait_until(|| client.open_streams() == 0).await;
    });
}

#[test]
fn requests_beyond_max_streams_are_rejected() {
    let rt = runtime();
    rt.block_on(async {
        let config = Config::default().max_streams(2);
        let server = Server::bind_with("127.0.0.1:0", Service::default(), config)
            .await
            .unwrap();
        let client = connect(server.local_addr()).await.unwrap();
        let probes: Vec<_> = (0..3)
            .map(|_| {
                let probe = subscribe_probe(client.request_stream(Payload::data("infinite")));
                probe.request(1);
                probe
            })
            .collect();
        let error = await_probe(&probes[2], |p| p.await_error(PATIENCE)).await;
        let remote = std::error::Error::source(&error)
            .and_then(|s| s.downcast_ref::<RemoteError>())
            .expect("REJECTED from the server");
        assert_eq!(remote.code, ErrorCode::REJECTED);
        for probe in &probes[..2] {
            await_probe(probe, |p| p.await_items(1, PATIENCE)).await;
        }
    });
}

/// The first item of `publisher` (an error when it fails or completes empty).
pub async fn first(
    publisher: impl Publisher<Item = Payload> + Send + 'static,
) -> Result<Payload, weir::Error> {
    let mut items = collect(publisher).await?;
    if items.is_empty() {
        return Err(weir::Error::msg("completed without an item"));
    }
    Ok(items.remove(0))
}

/// 1 MiB each way through the interop service: a request-response whose request is
/// 1 MiB (answered with its length and byte sum), then one whose answer is 1 MiB of
/// the service's pattern; both checked.
pub async fn a_megabyte_each_way(client: &Client) {
    let mut request = b"len:".to_vec();
    request.resize(1 << 20, b'x');
    let sum = request
        .iter()
        .fold(0u32, |s, &b| s.wrapping_add(u32::from(b)));
    let answer = first(client.request_response(Payload::data(request)))
        .await
        .unwrap();
    assert_eq!(text(&answer), format!("{}:{sum}", 1 << 20));
    let answer = first(client.request_response(Payload::data("big:1048576")))
        .await
        .unwrap();
    assert_eq!(answer.data.as_ref(), pattern(1 << 20).as_slice());
}

/// Every item of `publisher`, collected off the runtime's workers.
pub async fn collect(
    publisher: impl Publisher<Item = Payload> + Send + 'static,
) -> Result<Vec<Payload>, weir::Error> {
    let handle = publisher.collect();
    tokio::task::spawn_blocking(move || {
        let mut handle = handle;
        handle
            .wait_timeout(PATIENCE)
            .unwrap_or_else(|| Err(weir::Error::timeout("the test's patience ran out")))
    })
    .await
    .unwrap()
}

/// Wait (polling, bounded by `PATIENCE`) until `done` holds; panics otherwise.
pub async fn wait_until(mut done: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(
            start.elapsed() < PATIENCE,
            "a condition did not hold within {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Requests 1 from `on_subscribe` and 1 from every `on_next` (re-entrant requests,
/// one unit at a time).
struct OneByOne {
    subscription: Option<weir::Subscription>,
    items: std::sync::mpsc::Sender<Payload>,
}

impl weir::Subscriber<Payload> for OneByOne {
    fn on_subscribe(&mut self, subscription: weir::Subscription) {
        subscription.request(1);
        self.subscription = Some(subscription);
    }
    fn on_next(&mut self, item: Payload) {
        let _ = self.items.send(item);
        if let Some(s) = &self.subscription {
            s.request(1);
        }
    }
    fn on_error(&mut self, _: weir::Error) {}
    fn on_complete(&mut self) {}
}

#[test]
fn requests_from_inside_on_next_are_granted_once() {
    let rt = runtime();
    rt.block_on(async {
        let (_server, client, log) = served_through_proxy(Config::default()).await;
        let (tx, rx) = std::sync::mpsc::channel();
        client
            .request_stream(Payload::data("200"))
            .subscribe(OneByOne {
                subscription: None,
                items: tx,
            });
        let items = tokio::task::spawn_blocking(move || {
            (0..200)
                .map(|_| rx.recv_timeout(PATIENCE).expect("an item"))
                .collect::<Vec<_>>()
        })
        .await
        .unwrap();
        assert!(items
            .iter()
            .enumerate()
            .all(|(i, p)| text(p) == i.to_string()));
        wait_until(|| client.open_streams() == 0).await;
        let log = log.lock().unwrap().clone();
        let (items, credit, _) = credit_check(&log, 1, Dir::Down);
        // One unit per request: 1 + one per item delivered, the last one unused.
        assert_eq!(items, 200);
        assert!(credit <= 201, "granted {credit} for 201 requests");
    });
}

/// Requests made on another thread while the stream's passes deliver batches (the
/// way `into_stream` and any consumer on its own task request): each is granted
/// once. The peer's credit therefore never runs ahead of what the subscriber asked
/// for; a grant that read the subscriber's demand before a batch was settled, and
/// counted the batch no longer in flight, once granted it twice (it left a
/// stalled-consumer stream with 384 items ahead of a window of 256).
#[test]
fn requests_from_another_thread_during_delivery_are_granted_once() {
    const TOTAL: u64 = 6_000;
    const AHEAD: u64 = 64;
    const STEP: u64 = 8;
    let rt = runtime();
    rt.block_on(async {
        let (_server, client, log) = served_through_proxy(Config::default().window(64)).await;
        let probe = subscribe_probe(client.request_stream(Payload::data("infinite")));
        let consumer = probe.clone();
        tokio::task::spawn_blocking(move || {
            consumer.request(AHEAD);
            let mut requested = AHEAD;
            while requested < TOTAL {
                // Ask again as soon as the window is part-used: these requests race
                // the passes that deliver what came before.
                consumer
                    .await_items(requested - AHEAD + STEP, PATIENCE)
                    .expect("the window's items");
                consumer.request(STEP);
                requested += STEP;
            }
            consumer
                .await_items(TOTAL, PATIENCE)
                .expect("every requested item");
        })
        .await
        .unwrap();
        probe.cancel();
        cancel_logged(&log, 1).await;
        probe.assert_no_violations();
        assert_eq!(probe.received_count(), TOTAL);
        let log = log.lock().unwrap().clone();
        let (items, credit, _) = credit_check(&log, 1, Dir::Down);
        assert!(items >= TOTAL, "{items} items on the wire");
        assert!(
            credit <= TOTAL,
            "granted {credit} to the peer for {TOTAL} requested"
        );
    });
}

/// Requests `ASKED` up front; at the first batch that holds more than one item it
/// takes one and cancels (as `take`, a dropped `into_stream` or a deadline would):
/// the rest of that batch is never delivered.
struct CancelInsideABatch {
    subscription: Option<weir::Subscription>,
    left_undelivered: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

const ASKED: u64 = 200;

impl weir::Subscriber<Payload> for CancelInsideABatch {
    fn on_subscribe(&mut self, subscription: weir::Subscription) {
        subscription.request(ASKED);
        self.subscription = Some(subscription);
    }
    fn on_next(&mut self, _item: Payload) {}
    fn on_next_batch<I: Iterator<Item = Payload>>(&mut self, mut items: I) -> u64 {
        match items.size_hint().1 {
            Some(n) if n >= 2 && self.left_undelivered.load(Ordering::SeqCst) == 0 => {
                let _first = items.next();
                self.left_undelivered.store(n as u64 - 1, Ordering::SeqCst);
                self.subscription.as_ref().unwrap().cancel();
                // The batch's rest is not taken: after the cancel it yields nothing.
                assert!(items.next().is_none());
            }
            _ => items.for_each(drop),
        }
        0
    }
    fn on_error(&mut self, _: weir::Error) {}
    fn on_complete(&mut self) {}
}

/// A subscriber that cancels inside a batch leaves the batch's rest undelivered;
/// the grant after the batch must not count that rest as still wanted (it did: the
/// peer got REQUEST_N for it, after the cancel, and produced that many more).
#[test]
fn a_cancel_inside_a_batch_grants_nothing_more() {
    let rt = runtime();
    rt.block_on(async {
        let (_server, client, log) = served_through_proxy(Config::default()).await;
        let left = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        client
            .request_stream(Payload::data("infinite"))
            .subscribe(CancelInsideABatch {
                subscription: None,
                left_undelivered: left.clone(),
            });
        cancel_logged(&log, 1).await;
        assert!(
            left.load(Ordering::SeqCst) > 0,
            "the cancel left items undelivered"
        );
        let log = log.lock().unwrap().clone();
        // Grants go out before the CANCEL that follows them: all are in the log.
        let (_, credit, _) = credit_check(&log, 1, Dir::Down);
        let up: Vec<_> = log
            .iter()
            .filter(|(d, f)| *d == Dir::Up && f.stream == 1)
            .map(|(_, f)| &f.body)
            .collect();
        assert!(
            credit <= ASKED,
            "granted {credit} to the peer for {ASKED} requested: {up:?}"
        );
    });
}

/// An outgoing publisher of nothing whose `Drop` asks the response stream of its
/// own channel for one more item (user code that calls back).
struct RequestsOnDrop(std::sync::Arc<std::sync::OnceLock<weir::Subscription>>);

impl Publisher for RequestsOnDrop {
    type Item = Payload;
    fn subscribe<S: weir::Subscriber<Payload> + Send + 'static>(self, subscriber: S) {
        weir::empty::<Payload>().subscribe(subscriber);
    }
}

impl Drop for RequestsOnDrop {
    fn drop(&mut self) {
        if let Some(subscription) = self.0.get() {
            subscription.request(1);
        }
    }
}

/// Keeps its subscription where the outgoing publisher can reach it, and says how
/// the stream ended.
struct Reachable(
    std::sync::Arc<std::sync::OnceLock<weir::Subscription>>,
    std::sync::mpsc::Sender<bool>,
);

impl weir::Subscriber<Payload> for Reachable {
    fn on_subscribe(&mut self, subscription: weir::Subscription) {
        let _ = self.0.set(subscription);
    }
    fn on_next(&mut self, _: Payload) {}
    fn on_error(&mut self, _: weir::Error) {
        let _ = self.1.send(false);
    }
    fn on_complete(&mut self) {
        let _ = self.1.send(true);
    }
}

#[test]
fn a_channel_refused_on_a_closed_connection_drops_its_outgoing_publisher_without_a_lock() {
    // The channel opens at the first request; on a closing connection that fails,
    // and the outgoing publisher, never subscribed, is dropped: its `Drop` may call
    // the response stream (here: request one more), which must not wait for the
    // lock the refusal took.
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = runtime();
        let ended = rt.block_on(async {
            let (_server, client) = served().await;
            let slot = std::sync::Arc::new(std::sync::OnceLock::new());
            let (end_tx, end_rx) = std::sync::mpsc::channel();
            client
                .request_channel(RequestsOnDrop(slot.clone()))
                .subscribe(Reachable(slot.clone(), end_tx));
            // Subscribed, not yet open (no request yet): the connection closes.
            client.close().await;
            slot.get().expect("subscribed").request(1);
            end_rx.recv_timeout(PATIENCE)
        });
        let _ = done_tx.send(ended);
    });
    let ended = done_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the refusal returned (no thread waits for a lock it holds)");
    assert_eq!(
        ended,
        Ok(false),
        "the channel fails: the connection is closed"
    );
}

/// The runtime running a connection shuts down with a stream open: the stream's
/// subscriber gets an error instead of waiting for frames for ever, and the
/// connection closes (its reader and writer tasks close it as tokio drops them).
#[test]
fn a_runtime_shut_down_under_an_open_stream_ends_it() {
    let rt = runtime();
    let (server, client, probe) = rt.block_on(async {
        let (server, client) = served().await;
        let probe = subscribe_probe(client.request_stream(Payload::data("infinite")));
        probe.request(10);
        await_probe(&probe, move |p| p.await_items(10, PATIENCE)).await;
        (server, client, probe)
    });
    rt.shutdown_timeout(Duration::from_secs(5));
    let error = probe
        .await_error(PATIENCE)
        .expect("the stream ended with an error");
    assert_eq!(error.kind(), weir::ErrorKind::SchedulerShutdown, "{error}");
    assert_eq!(probe.received_count(), 10);
    // The connection itself closed: its stream table is empty (the stream and its
    // receiving stage held each other before).
    let closed = (0..3_000).any(|_| {
        std::thread::sleep(Duration::from_millis(10));
        client.open_streams() == 0
    });
    assert!(closed, "{} streams still open", client.open_streams());
    // And the server's side of it, whose handler's publisher is cancelled.
    assert_eq!(
        server.connections(),
        0,
        "the server's connection is still open"
    );
    drop((server, client));
}

/// Rule 1.4: a stream subscribed but not yet requested (not yet on the wire) hears
/// the connection's end without any demand: when the peer goes away, and when the
/// client closes. A stream subscribed after that fails at once.
#[test]
fn a_stream_not_yet_requested_hears_the_connections_end() {
    let rt = runtime();
    rt.block_on(async {
        // The peer goes away (once it serves the connection: a round trip first).
        let (server, client) = served().await;
        let answer = first(client.request_response(Payload::data("echo:up"))).await;
        assert_eq!(text(&answer.unwrap()), "up");
        let waiting = subscribe_probe(client.request_stream(Payload::data("10")));
        let channel = subscribe_probe(client.request_channel(weir::just(Payload::data("x"))));
        drop(server);
        wait_until(|| client.closed_with().is_some()).await;
        for probe in [&waiting, &channel] {
            await_probe(probe, move |p| p.await_error(PATIENCE)).await;
            assert_eq!(probe.received_count(), 0);
        }

        // This side closes: nothing was open, so the connection ends at once, and
        // the unrequested stream with it.
        let (_server, client) = served().await;
        let waiting = subscribe_probe(client.request_stream(Payload::data("10")));
        client.close().await;
        let error = await_probe(&waiting, move |p| p.await_error(PATIENCE)).await;
        assert!(error.to_string().contains("clos"), "{error}");
        let late = subscribe_probe(client.request_stream(Payload::data("10")));
        await_probe(&late, move |p| p.await_error(PATIENCE)).await;
    });
}
