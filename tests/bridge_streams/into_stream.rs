//! `into_stream(prefetch)`: the window bound, the 75% replenish, the consumer that is
//! busy elsewhere (futures-rs#2387), cancellation, errors and configuration.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use weir::prelude::*;
use weir::{Error, ErrorKind};

use crate::support::{eventually, tokio, Counted, Counts, DropFlag};

fn assert_send_unpin<T: Send + Unpin>(_: &T) {}

/// `into_stream(64)` over an upstream that runs on other threads (`from_stream` on
/// the pool): at every item the consumer takes, upstream has at most 64 items
/// requested and not yet consumed; the whole run takes at most ⌈N/48⌉ + 1 requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn into_stream_64_keeps_at_most_64_outstanding_and_requests_once_per_48_items() {
    const N: u64 = 10_000;
    let requests = Arc::new(AtomicU64::new(0));
    let requested = Arc::new(AtomicU64::new(0));
    let produced = Arc::new(AtomicU64::new(0));
    let (r, q, p) = (requests.clone(), requested.clone(), produced.clone());
    let mut stream = weir::from_stream(futures::stream::iter(0..N))
        .inspect(move |_| {
            p.fetch_add(1, Ordering::SeqCst);
        })
        .inspect_request(move |n| {
            r.fetch_add(1, Ordering::SeqCst);
            q.fetch_add(n, Ordering::SeqCst);
        })
        .into_stream(64);
    assert_send_unpin(&stream);
    let consumer = tokio::spawn(async move {
        let mut consumed = 0u64;
        let mut max_outstanding = 0u64;
        let mut max_ahead = 0u64;
        while let Some(item) = stream.next().await {
            assert_eq!(item.unwrap(), consumed, "in order");
            // The item in hand counts as consumed (the stream replenished for it).
            consumed += 1;
            let outstanding = requested.load(Ordering::SeqCst) - consumed;
            let ahead = produced.load(Ordering::SeqCst) - consumed;
            max_outstanding = max_outstanding.max(outstanding);
            max_ahead = max_ahead.max(ahead);
            if consumed % 7 == 0 {
                tokio::task::yield_now().await;
            }
        }
        (consumed, max_outstanding, max_ahead)
    });
    let (consumed, max_outstanding, max_ahead) = consumer.await.unwrap();
    assert_eq!(consumed, N);
    assert!(
        max_outstanding <= 64,
        "requested and unconsumed peaked at {max_outstanding}"
    );
    assert!(max_ahead <= 64, "produced ahead peaked at {max_ahead}");
    let requests = requests.load(Ordering::SeqCst);
    let bound = N.div_ceil(48) + 1;
    assert!(
        requests <= bound,
        "{requests} upstream requests for {N} items (bound ⌈N/48⌉+1 = {bound})"
    );
    // And not suspiciously few: the window really is replenished in 48s.
    assert!(requests >= N / 64, "{requests} requests");
}

/// The futures-rs#2387 trap, avoided: a consumer that takes one item and then awaits
/// something else (1 ms sleeps), without polling the stream, still has upstream
/// (polled on the pool's threads) fill the whole prefetch window meanwhile. Counts:
/// upstream produces exactly 64 items ahead of a consumer that holds 1, never more.
/// Then the consumer takes items at 1 ms each and upstream refills ≥ 16 ahead while
/// it is away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn into_stream_upstream_fills_the_prefetch_while_the_consumer_awaits() {
    let produced = Arc::new(AtomicU64::new(0));
    let p = produced.clone();
    let mut stream = weir::from_stream(futures::stream::iter(0..200u64))
        .inspect(move |_| {
            p.fetch_add(1, Ordering::SeqCst);
        })
        .into_stream(64);
    assert_eq!(stream.next().await.unwrap().unwrap(), 0);
    // Busy elsewhere: the stream is not polled while we wait.
    let filled = eventually(|| produced.load(Ordering::SeqCst) >= 64).await;
    assert!(
        filled,
        "upstream stalled at {} while the consumer was busy",
        produced.load(Ordering::SeqCst)
    );
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(
        produced.load(Ordering::SeqCst),
        64,
        "never more than the window ahead"
    );
    // A slow consumer: 1 ms per item. While it is away (not polling), upstream
    // refills the window: the part not yet replenished (64 - 48 = 16) at least is
    // always queued ahead of it.
    let mut consumed = 1u64;
    while let Some(item) = stream.next().await {
        assert_eq!(item.unwrap(), consumed);
        consumed += 1;
        tokio::time::sleep(Duration::from_millis(1)).await;
        if consumed <= 100 {
            let ahead = eventually(|| produced.load(Ordering::SeqCst) >= consumed + 16).await;
            assert!(
                ahead,
                "upstream stopped short of the window at item {consumed}"
            );
        }
        assert!(produced.load(Ordering::SeqCst) - consumed <= 64);
    }
    assert_eq!(consumed, 200);
}

/// Dropping the stream cancels upstream, and the `from_stream` upstream drops its
/// stream on the spot (no pass is running: the window is full), i.e. within one
/// scheduler turn. Also for a stream that is pending for ever.
/// A publisher that drops its subscriber without a terminal signal (its thread
/// panicked, say): the stream yields what it got, then `Cancelled`, then ends,
/// instead of staying pending for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publisher_that_abandons_its_subscriber_ends_the_stream_with_cancelled() {
    let stream = crate::failing::Abandons { items: 3 }.into_stream(8);
    let got: Vec<_> = tokio::time::timeout(Duration::from_secs(10), stream.collect::<Vec<_>>())
        .await
        .expect("the stream stayed pending for an abandoned publisher");
    assert_eq!(got.len(), 4, "{got:?}");
    for (item, expected) in got[..3].iter().zip(1..) {
        assert_eq!(*item.as_ref().unwrap(), expected);
    }
    assert_eq!(got[3].as_ref().unwrap_err().kind(), ErrorKind::Cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_into_stream_cancels_upstream_within_one_scheduler_turn() {
    let (source, dropped) = DropFlag::new(futures::stream::iter(0..u64::MAX));
    let counts = Counts::new();
    let cancels = Arc::new(AtomicU64::new(0));
    let c = cancels.clone();
    let k = counts.clone();
    let mut stream = weir::bridge::from_stream_on(Counted::new(source, counts.clone(), 0), tokio())
        .inspect_request(move |n| k.request(n))
        .inspect_cancel(move || {
            c.fetch_add(1, Ordering::SeqCst);
        })
        .into_stream(8);
    assert_eq!(stream.next().await.unwrap().unwrap(), 0);
    assert!(eventually(|| Counts::get(&counts.yielded) == 8).await);
    // The window is full: the poll task finishes its pass and goes idle (no demand,
    // so no poll). Give it a moment to return, so the drop below finds it idle.
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert!(!dropped.load(Ordering::SeqCst));
    drop(stream);
    assert_eq!(cancels.load(Ordering::SeqCst), 1);
    // By the cancel itself when the poll task is idle, else when its pass ends.
    assert!(
        eventually(|| dropped.load(Ordering::SeqCst)).await,
        "the upstream stream is dropped by the cancel"
    );
    assert_eq!(Counts::get(&counts.polls_without_demand), 0);

    // A stream that never yields (pending for ever, holding the flag).
    let (pending, dropped) = DropFlag::new(futures::stream::pending::<u64>());
    let mut stream = weir::bridge::from_stream_on(pending, tokio()).into_stream(4);
    let first = tokio::time::timeout(Duration::from_millis(20), stream.next()).await;
    assert!(first.is_err(), "nothing arrives");
    drop(stream);
    // One scheduler turn at most (usually none: the cancel dropped it).
    assert!(eventually(|| dropped.load(Ordering::SeqCst)).await);
}

/// A stream dropped before its first poll never subscribes.
#[test]
fn into_stream_is_lazy() {
    let subscribed = Arc::new(AtomicU64::new(0));
    let s = subscribed.clone();
    let stream = weir::defer(move || {
        s.fetch_add(1, Ordering::SeqCst);
        weir::range(0u32..3)
    })
    .into_stream(2);
    assert_eq!(subscribed.load(Ordering::SeqCst), 0);
    drop(stream);
    assert_eq!(subscribed.load(Ordering::SeqCst), 0);
}

/// Items, then the error once, then `None` for ever.
#[test]
fn into_stream_yields_items_then_the_error_then_ends() {
    let error = Error::msg("boom");
    let stream = weir::range(0u32..3)
        .concat(weir::error(error.clone()))
        .into_stream(2);
    let got: Vec<_> = futures::executor::block_on(stream.collect());
    assert_eq!(got.len(), 4);
    for (i, item) in got[..3].iter().enumerate() {
        assert_eq!(*item.as_ref().unwrap(), i as u32);
    }
    let e = got[3].as_ref().unwrap_err();
    assert!(Error::ptr_eq(e, &error), "the upstream error itself");
}

/// A publisher that ignores demand (rule 1.1) cannot grow the queue past its window:
/// upstream is cancelled and the stream ends with a rule 1.1 error.
#[test]
fn into_stream_reports_an_upstream_that_overflows_the_window() {
    struct Flood(Arc<AtomicU64>);
    impl Publisher for Flood {
        type Item = u64;
        fn subscribe<S: Subscriber<u64> + Send + 'static>(self, mut s: S) {
            let cancels = self.0;
            struct Count(Arc<AtomicU64>);
            impl weir::RawSubscription for Count {
                fn request(&self, _: u64) {}
                fn cancel(&self) {
                    self.0.fetch_add(1, Ordering::SeqCst);
                }
            }
            s.on_subscribe(weir::Subscription::new(Arc::new(Count(cancels))));
            let _ = s.on_next_batch(0..100u64);
        }
    }
    let cancels = Arc::new(AtomicU64::new(0));
    let stream = Flood(cancels.clone()).into_stream(8);
    let got: Vec<_> = futures::executor::block_on(stream.collect());
    assert_eq!(got.len(), 9, "the 8 requested items, then the error");
    let error = got[8].as_ref().unwrap_err();
    assert_eq!(error.rule(), Some("1.1"));
    assert_eq!(cancels.load(Ordering::SeqCst), 1);
}

/// The error kind passes through `into_stream` unchanged.
#[test]
fn into_stream_passes_error_kinds_through() {
    let stream = weir::error::<u8>(Error::timeout("slow")).into_stream(1);
    let got: Vec<_> = futures::executor::block_on(stream.collect());
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].as_ref().unwrap_err().kind(), ErrorKind::Timeout);
}

/// Configuration errors name the parameter and the range.
#[test]
#[should_panic(expected = "into_stream prefetch must be in 1..=2^30 (got 0)")]
fn into_stream_rejects_a_zero_prefetch() {
    let _ = weir::range(0u8..1).into_stream(0);
}

/// Configuration errors name the parameter and the range.
#[test]
#[should_panic(expected = "into_stream prefetch must be in 1..=2^30 (got 1073741825)")]
fn into_stream_rejects_a_huge_prefetch() {
    let _ = weir::range(0u8..1).into_stream((1 << 30) + 1);
}

/// A synchronous upstream requested in batches: requests are 64, then 48s.
#[test]
fn into_stream_requests_the_window_then_75_percent_batches() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    let stream = weir::range(0u32..190)
        .inspect_request(move |n| l.lock().unwrap().push(n))
        .into_stream(64);
    let got: Vec<_> = futures::executor::block_on(stream.map(Result::unwrap).collect());
    assert_eq!(got, (0..190).collect::<Vec<_>>());
    assert_eq!(*log.lock().unwrap(), vec![64, 48, 48, 48]);
}
