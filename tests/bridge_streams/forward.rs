//! `forward(sink)`: the sink's readiness is the demand (one item per `poll_ready`),
//! flush when idle, close at completion, errors on either side.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures::{Sink, StreamExt as _};
use weir::prelude::*;
use weir::{Error, ErrorKind};

/// What a [`Recording`] sink saw.
#[derive(Debug, Default)]
struct Log {
    items: Vec<u64>,
    readies: u64,
    flushes: u64,
    closes: u64,
    /// Requests upstream had made at each `start_send` (via an `inspect_request` tap).
    requested_at_send: Vec<u64>,
}

/// A sink with room for `room` items between flushes, failing at item `fail_at`.
struct Recording {
    log: Arc<Mutex<Log>>,
    requested: Arc<AtomicU64>,
    buffered: u64,
    room: u64,
    fail_at: Option<u64>,
}

impl Sink<u64> for Recording {
    type Error = std::io::Error;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        let this = self.get_mut();
        this.log.lock().unwrap().readies += 1;
        if this.buffered < this.room {
            Poll::Ready(Ok(()))
        } else {
            // Full until flushed: ask to be polled again (forward flushes when the
            // sink is not ready).
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    fn start_send(self: Pin<&mut Self>, item: u64) -> Result<(), Self::Error> {
        let this = self.get_mut();
        assert!(this.buffered < this.room, "start_send without room");
        if this.fail_at == Some(item) {
            return Err(std::io::Error::other("sink refused"));
        }
        this.buffered += 1;
        let mut log = this.log.lock().unwrap();
        log.items.push(item);
        let requested = this.requested.load(Ordering::SeqCst);
        log.requested_at_send.push(requested);
        Ok(())
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        let this = self.get_mut();
        this.log.lock().unwrap().flushes += 1;
        this.buffered = 0;
        Poll::Ready(Ok(()))
    }

    fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        let this = self.get_mut();
        this.log.lock().unwrap().closes += 1;
        this.buffered = 0;
        Poll::Ready(Ok(()))
    }
}

fn recording(room: u64, fail_at: Option<u64>) -> (Recording, Arc<Mutex<Log>>, Arc<AtomicU64>) {
    let log = Arc::new(Mutex::new(Log::default()));
    let requested = Arc::new(AtomicU64::new(0));
    (
        Recording {
            log: log.clone(),
            requested: requested.clone(),
            buffered: 0,
            room,
            fail_at,
        },
        log,
        requested,
    )
}

/// Every request is `request(1)`, made after the sink said ready; each item sent was
/// requested (requests made ≤ items sent + 1 at every send); the sink is flushed
/// when full and closed once at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_requests_one_item_per_readiness_and_closes_at_the_end() {
    let (sink, log, requested) = recording(3, None);
    let sizes = Arc::new(Mutex::new(Vec::new()));
    let (q, s) = (requested.clone(), sizes.clone());
    weir::from_stream(futures::stream::iter(0..100u64))
        .inspect_request(move |n| {
            s.lock().unwrap().push(n);
            q.fetch_add(n, Ordering::SeqCst);
        })
        .forward(sink)
        .await
        .unwrap();
    let log = log.lock().unwrap();
    assert_eq!(log.items, (0..100).collect::<Vec<_>>());
    assert!(
        sizes.lock().unwrap().iter().all(|&n| n == 1),
        "always request(1)"
    );
    for (sent, requested) in log.requested_at_send.iter().enumerate() {
        assert_eq!(
            *requested,
            sent as u64 + 1,
            "exactly the items sent were requested"
        );
    }
    assert!(log.readies >= 100);
    assert!(log.flushes >= 100 / 3, "flushed when full: {}", log.flushes);
    assert_eq!(log.closes, 1);
}

/// A sink error cancels upstream and is the future's result (kind `Upstream`, the
/// sink's error as source).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_error_cancels_upstream_and_resolves_to_it() {
    let (sink, log, _) = recording(8, Some(5));
    let cancels = Arc::new(AtomicU64::new(0));
    let c = cancels.clone();
    let error = weir::range(0..u64::MAX)
        .inspect_cancel(move || {
            c.fetch_add(1, Ordering::SeqCst);
        })
        .forward(sink)
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Upstream);
    assert!(error.to_string().contains("sink refused"));
    assert_eq!(cancels.load(Ordering::SeqCst), 1);
    let log = log.lock().unwrap();
    assert_eq!(log.items, vec![0, 1, 2, 3, 4]);
    assert_eq!(log.closes, 0);
}

/// An upstream error resolves the future to that error; the sink is not closed.
#[test]
fn an_upstream_error_resolves_to_it() {
    let (sink, log, _) = recording(8, None);
    let original = Error::msg("upstream broke");
    let error = futures::executor::block_on(
        weir::range(0u64..3)
            .concat(weir::error(original.clone()))
            .forward(sink),
    )
    .unwrap_err();
    assert!(Error::ptr_eq(&error, &original));
    let log = log.lock().unwrap();
    assert_eq!(log.items, vec![0, 1, 2]);
    assert_eq!(log.closes, 0);
}

/// Dropping the future cancels upstream; a future never polled never subscribes.
#[test]
fn dropping_the_forward_future_cancels_upstream() {
    let (tx, mut rx) = futures::channel::mpsc::channel::<u64>(0);
    let cancels = Arc::new(AtomicU64::new(0));
    let c = cancels.clone();
    let mut forward = weir::range(0..u64::MAX)
        .inspect_cancel(move || {
            c.fetch_add(1, Ordering::SeqCst);
        })
        .forward(tx);
    // One poll: the channel takes what it has room for, then the sink is not ready.
    let waker = futures::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    assert!(std::future::Future::poll(Pin::new(&mut forward), &mut cx).is_pending());
    assert_eq!(rx.try_recv().unwrap(), 0);
    drop(forward);
    assert_eq!(cancels.load(Ordering::SeqCst), 1);

    let never = weir::range(0u64..3).forward(futures::sink::drain());
    drop(never);
}

/// Into a bounded futures channel: every item arrives, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_into_a_channel_delivers_everything_in_order() {
    let (tx, rx) = futures::channel::mpsc::channel::<u64>(4);
    let forward = tokio::spawn(weir::range(0u64..5_000).forward(tx));
    let got: Vec<u64> = rx.collect().await;
    forward.await.unwrap().unwrap();
    assert_eq!(got, (0..5_000).collect::<Vec<_>>());
}

/// A sink that is not ready gets nothing, and upstream is asked for nothing: with
/// no readiness there is no demand.
#[test]
fn a_sink_that_is_not_ready_means_no_demand() {
    let (sink, log, _) = recording(0, None);
    let requests = Arc::new(AtomicU64::new(0));
    let r = requests.clone();
    let mut forward = weir::range(0u64..10)
        .inspect_request(move |n| {
            r.fetch_add(n, Ordering::SeqCst);
        })
        .forward(sink);
    let waker = futures::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    for _ in 0..3 {
        assert!(std::future::Future::poll(Pin::new(&mut forward), &mut cx).is_pending());
    }
    assert_eq!(requests.load(Ordering::SeqCst), 0);
    let log = log.lock().unwrap();
    assert!(log.items.is_empty());
    assert_eq!(log.readies, 3);
}

/// A publisher that calls `on_subscribe` later, from a thread of its own (the spec
/// allows it; `subscribe_on` does it on its scheduler).
struct SubscribesLater;

impl Publisher for SubscribesLater {
    type Item = u64;
    fn subscribe<S: Subscriber<u64> + Send + 'static>(self, subscriber: S) {
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            weir::range(0u64..100).subscribe(subscriber);
        });
    }
}

/// The sink's first readiness comes before upstream's `on_subscribe`: the request it
/// makes waits for the subscription instead of being lost (the future used to wait
/// for ever: it had asked once and never asked again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_that_arrives_after_the_first_poll_gets_the_request() {
    let (tx, rx) = futures::channel::mpsc::channel::<u64>(4);
    let forward = tokio::spawn(SubscribesLater.forward(tx));
    let got: Vec<u64> = tokio::time::timeout(std::time::Duration::from_secs(30), rx.collect())
        .await
        .expect("every item arrives");
    forward.await.unwrap().unwrap();
    assert_eq!(got, (0..100).collect::<Vec<_>>());

    let pool = weir::runtime::ThreadPool::new(1);
    for round in 0..20 {
        let forward = weir::range(0u64..10)
            .subscribe_on(pool.clone())
            .forward(futures::sink::drain());
        tokio::time::timeout(std::time::Duration::from_secs(30), forward)
            .await
            .unwrap_or_else(|_| panic!("round {round}: subscribe_on then forward hung"))
            .unwrap();
    }
}

/// A sink that refuses every item.
struct Refuses;

impl futures::Sink<u32> for Refuses {
    type Error = std::io::Error;
    fn poll_ready(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }
    fn start_send(self: Pin<&mut Self>, _: u32) -> Result<(), Self::Error> {
        Err(std::io::Error::other("refused"))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }
    fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }
}

/// A finished `forward` polled again panics instead of answering `Ok(())` after it
/// answered an error (which hid the error from a caller polling twice).
#[test]
#[should_panic(expected = "forward: polled after it returned its result")]
fn forward_polled_after_its_result_panics() {
    let mut forward = weir::range(0u32..5).forward(Refuses);
    let first = futures::executor::block_on(&mut forward);
    assert!(first.is_err(), "the sink refused");
    let _ = futures::executor::block_on(&mut forward);
}

/// From a source that learns its end only when asked for an item (`from_stream`),
/// the end comes through demand: with the sink full after the last item, `forward`
/// waits for room, and resolves once the reader takes the item (as documented).
#[test]
fn the_end_of_a_lazy_source_comes_once_the_sink_has_room() {
    let (tx, mut rx) = futures::channel::mpsc::channel::<u32>(0);
    let source = weir::from_stream_on(futures::stream::iter([7u32]), weir::runtime::Immediate);
    let mut forward = source.forward(tx);
    let waker = futures::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    let mut polls = 0;
    // The item goes out; then the sink is full and the end is not asked for.
    loop {
        assert!(std::future::Future::poll(Pin::new(&mut forward), &mut cx).is_pending());
        if let Ok(item) = rx.try_recv() {
            assert_eq!(item, 7);
            break;
        }
        polls += 1;
        assert!(polls < 1_000, "the item never reached the sink");
    }
    // The reader took it: room for one more, so the end is asked for, and comes.
    let result = futures::executor::block_on(forward);
    assert!(result.is_ok(), "{result:?}");
}
