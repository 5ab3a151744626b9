//! `from_stream` / `try_from_stream` / `from_receiver`: polls only with demand, one
//! poll task, cancel drops the stream at once, errors and panics become `on_error`.

use std::sync::atomic::Ordering;
use std::time::Duration;

use weir::bridge::from_stream_on;
use weir::prelude::*;
use weir::tck::TestSubscriber;
use weir::{Error, ErrorKind};

use crate::support::{eventually_blocking, runtime, tokio, Counted, Counts, DropFlag, PATIENCE};

/// A subscriber requesting in uneven steps on a multi-thread runtime: every poll of
/// the stream happens with outstanding demand (checked inside the stream at each
/// poll), and there are no more polls than items + `Pending`s + the final `None`.
/// The stream also answers `Pending` (and wakes itself) every third poll, so the
/// waker path runs too.
#[test]
fn from_stream_never_polls_without_demand() {
    let counts = Counts::new();
    let k = counts.clone();
    let source = from_stream_on(
        Counted::new(futures::stream::iter(0..500u64), counts.clone(), 3),
        tokio(),
    )
    .inspect_request(move |n| k.request(n));
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source.subscribe(subscriber);
    // Subscribed, no demand: not a single poll.
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(Counts::get(&counts.polls), 0);
    let mut total = 0;
    for step in [1u64, 2, 5, 17, 64, 3, 100, 8] {
        probe.request(step);
        total += step;
        probe.await_items(total, PATIENCE).unwrap();
        // The demand is used up: the poll task stops polling.
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(Counts::get(&counts.yielded), total);
    }
    probe.request(1_000);
    probe.await_completion(PATIENCE).unwrap();
    probe.assert_items(&(0..500).collect::<Vec<_>>());
    probe.assert_no_violations();
    assert_eq!(Counts::get(&counts.polls_without_demand), 0);
    let polls = Counts::get(&counts.polls);
    let bound = 500 + Counts::get(&counts.pendings) + 1;
    assert!(polls <= bound, "{polls} polls, bound {bound}");
}

/// The same through a batching sink (`fold` replenishes with batch credit) and a
/// stream pending every other poll, on the multi-thread runtime.
#[test]
fn from_stream_never_polls_without_demand_under_batch_credit() {
    let counts = Counts::new();
    let k = counts.clone();
    let sum = from_stream_on(
        Counted::new(futures::stream::iter(0..20_000u64), counts.clone(), 2),
        tokio(),
    )
    .inspect_request(move |n| k.request(n))
    .fold_with(16, 0u64, |a, x| a + x)
    .wait()
    .unwrap();
    assert_eq!(sum, (0..20_000u64).sum::<u64>());
    assert_eq!(Counts::get(&counts.polls_without_demand), 0);
    assert_eq!(Counts::get(&counts.yielded), 20_000);
    assert!(Counts::get(&counts.polls) <= 20_000 + Counts::get(&counts.pendings) + 1);
}

/// Cancel drops the stream (and what it holds) within one scheduler turn: at once
/// when the poll task is idle (`cancel` itself drops it), else when the pass it is in
/// ends. Which of the two a test sees depends on how fast the runtime's worker gets
/// back from its last pass, so the drop is awaited (boundedly), not read at once.
#[test]
fn cancel_drops_the_stream_at_once() {
    let (stream, dropped) = DropFlag::new(futures::stream::iter(0..u64::MAX));
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    from_stream_on(stream, tokio()).subscribe(subscriber);
    probe.request(3);
    probe.await_items(3, PATIENCE).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    assert!(!dropped.load(Ordering::SeqCst));
    probe.cancel();
    assert!(
        eventually_blocking(|| dropped.load(Ordering::SeqCst)),
        "dropped by the cancel"
    );
    assert_eq!(probe.received_count(), 3, "nothing after the demand");

    // While the stream is pending (its waker registered), too.
    let (stream, dropped) = DropFlag::new(futures::stream::pending::<u64>());
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    from_stream_on(stream, tokio()).subscribe(subscriber);
    probe.request(1);
    std::thread::sleep(Duration::from_millis(5));
    probe.cancel();
    assert!(eventually_blocking(|| dropped.load(Ordering::SeqCst)));
}

/// A cancel from inside `on_next` (while the poll task owns the loop) drops the
/// stream when that pass ends: before the next poll, so the stream sees no poll
/// after the cancel.
#[test]
fn cancel_inside_on_next_drops_the_stream_before_the_next_poll() {
    struct CancelAt(u64, Option<weir::Subscription>, u64);
    impl Subscriber<u64> for CancelAt {
        fn on_subscribe(&mut self, s: weir::Subscription) {
            s.request(weir::demand::UNBOUNDED);
            self.1 = Some(s);
        }
        fn on_next(&mut self, _: u64) {
            self.2 += 1;
            if self.2 == self.0 {
                self.1.as_ref().unwrap().cancel();
            }
        }
        fn on_error(&mut self, _: Error) {}
        fn on_complete(&mut self) {}
    }
    let counts = Counts::new();
    counts.request(u64::MAX);
    let (stream, dropped) = DropFlag::new(Counted::new(
        futures::stream::iter(0..u64::MAX),
        counts.clone(),
        0,
    ));
    from_stream_on(stream, tokio()).subscribe(CancelAt(10, None, 0));
    assert!(eventually_blocking(|| dropped.load(Ordering::SeqCst)));
    assert_eq!(Counts::get(&counts.polls), 10, "no poll after the cancel");
}

/// `try_from_stream`: the first `Err` becomes `on_error` (a weir error unchanged,
/// others as `Upstream` with the source kept) and the stream is dropped.
#[test]
fn try_from_stream_turns_the_first_err_into_on_error() {
    let (stream, dropped) = DropFlag::new(futures::stream::iter(vec![
        Ok(1u64),
        Ok(2),
        Err(std::io::Error::other("disk on fire")),
        Ok(4),
    ]));
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::try_from_stream_on(stream, tokio()).subscribe(subscriber);
    probe.request(10);
    let error = probe.await_error(PATIENCE).unwrap();
    probe.assert_items(&[1, 2]);
    assert_eq!(error.kind(), ErrorKind::Upstream);
    assert!(error.to_string().contains("disk on fire"));
    assert!(std::error::Error::source(&error).is_some());
    // Dropped by the pass that signalled the error, right after `on_error` returned.
    assert!(eventually_blocking(|| dropped.load(Ordering::SeqCst)));

    let original = Error::timeout("upstream too slow");
    let stream = futures::stream::iter(vec![Ok(1u64), Err(original.clone())]);
    let error = weir::try_from_stream_on(stream, tokio())
        .collect()
        .wait()
        .unwrap_err();
    assert!(
        Error::ptr_eq(&error, &original),
        "a weir::Error passes through"
    );
}

/// A panic in the stream's `poll_next` becomes `on_error` of kind `Panicked`.
#[test]
fn a_panicking_stream_fails_the_subscriber() {
    let mut n = 0u64;
    let stream = futures::stream::poll_fn(move |_| {
        n += 1;
        if n == 3 {
            panic!("poll exploded");
        }
        std::task::Poll::Ready(Some(n))
    });
    let error = from_stream_on(stream, tokio())
        .collect()
        .wait()
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Panicked);
    assert!(error.message().contains("poll exploded"));
}

/// `request(0)` is answered with the rule 3.9 error, and the stream is dropped.
#[test]
fn from_stream_answers_request_zero_with_rule_3_9() {
    let (stream, dropped) = DropFlag::new(futures::stream::iter(0..10u64));
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    from_stream_on(stream, tokio()).subscribe(subscriber);
    probe.request(0);
    probe.await_error(PATIENCE).unwrap();
    probe.assert_error_rule("3.9");
    assert!(eventually_blocking(|| dropped.load(Ordering::SeqCst)));
}

/// `from_receiver`: what the senders send, then completion when they are all
/// dropped; `poll_recv` only with demand (the channel's capacity is the buffer).
#[test]
fn from_receiver_delivers_in_order_and_completes() {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    runtime().spawn(async move {
        for i in 0..1_000u64 {
            tx.send(i).await.unwrap();
        }
    });
    let publisher = runtime().block_on(async move { weir::from_receiver(rx) });
    let items = publisher.collect_with(16).wait().unwrap();
    assert_eq!(items, (0..1_000).collect::<Vec<_>>());
}

/// Without demand the receiver is not read: senders fill the channel's capacity and
/// then wait. Cancel drops the receiver at once, so senders see the channel closed.
#[test]
fn from_receiver_backpressures_senders_and_cancel_closes_the_channel() {
    let (tx, rx) = tokio::sync::mpsc::channel::<u64>(4);
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::bridge::from_receiver_on(rx, tokio()).subscribe(subscriber);
    for i in 0..4 {
        tx.try_send(i).unwrap();
    }
    assert!(
        tx.try_send(4).is_err(),
        "full: nothing was read without demand"
    );
    probe.request(2);
    probe.await_items(2, PATIENCE).unwrap();
    assert!(eventually_blocking(|| tx.capacity() == 2));
    tx.try_send(4).unwrap();
    tx.try_send(5).unwrap();
    assert!(
        tx.try_send(6).is_err(),
        "the channel's capacity is the only buffer"
    );
    assert!(!tx.is_closed());
    probe.cancel();
    assert!(
        eventually_blocking(|| tx.is_closed()),
        "the receiver was dropped by the cancel (at once, or when the poll task's pass ends)"
    );
}

/// `weir::from_stream` needs a runtime to default to.
#[test]
#[should_panic(expected = "weir::from_stream must be called inside a tokio runtime")]
fn from_stream_outside_a_runtime_panics_with_a_clear_message() {
    let _ = weir::from_stream(futures::stream::iter(0..1u8));
}

/// No demand, no polls, no tasks: a subscription that never requests leaves the
/// stream untouched, and cancelling it drops the stream.
#[test]
fn an_idle_subscription_never_polls() {
    let counts = Counts::new();
    let (stream, dropped) = DropFlag::new(Counted::new(
        futures::stream::iter(0..10u64),
        counts.clone(),
        0,
    ));
    let subscriber = TestSubscriber::<u64>::new();
    let probe = subscriber.probe();
    from_stream_on(stream, tokio()).subscribe(subscriber);
    std::thread::sleep(Duration::from_millis(10));
    assert_eq!(Counts::get(&counts.polls), 0);
    probe.cancel();
    assert!(dropped.load(Ordering::SeqCst));
}

/// A consumer that cancels while a pass polls a batch for it (a sink's handle, a
/// dropped iterator or stream: subscribers that stop batches themselves) makes the
/// pass stop before its next poll, as the module docs promise: at most the poll in
/// flight follows the cancel, never the rest of the batch (it used to poll up to the
/// whole demand, taking and dropping items nobody would see).
#[test]
fn a_cancel_while_a_pass_polls_stops_it_before_the_next_poll() {
    let pool = weir::runtime::ThreadPool::new(1);
    for consumer in ["sink", "iterator", "stream"] {
        let polls = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let p = polls.clone();
        // Always ready, slow: a batch of 256 takes a quarter of a second.
        let slow = futures::stream::poll_fn(move |_| {
            p.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(1));
            std::task::Poll::Ready(Some(0u64))
        });
        let (slow, dropped) = DropFlag::new(slow);
        let source = from_stream_on(slow, pool.clone());
        // Wait for a few polls, then cancel.
        let some_polled = || eventually_blocking(|| polls.load(Ordering::SeqCst) >= 5);
        let at_cancel = match consumer {
            "sink" => {
                let handle = source.collect();
                assert!(some_polled(), "{consumer}: the stream is polled");
                let at = polls.load(Ordering::SeqCst);
                handle.cancel();
                at
            }
            "iterator" => {
                let mut items = source.blocking_iter(256);
                assert_eq!(items.next().map(Result::unwrap), Some(0));
                assert!(some_polled(), "{consumer}: the stream is polled");
                let at = polls.load(Ordering::SeqCst);
                drop(items);
                at
            }
            _ => {
                let stream = source.into_stream(256);
                let rt = runtime();
                let mut stream = Box::pin(stream);
                let first = rt.block_on(futures::StreamExt::next(&mut stream));
                assert_eq!(first.map(Result::unwrap), Some(0));
                assert!(some_polled(), "{consumer}: the stream is polled");
                let at = polls.load(Ordering::SeqCst);
                drop(stream);
                at
            }
        };
        assert!(
            eventually_blocking(|| dropped.load(Ordering::SeqCst)),
            "{consumer}: the stream is dropped after the cancel"
        );
        let after = polls.load(Ordering::SeqCst) - at_cancel;
        assert!(
            after <= 1,
            "{consumer}: {after} polls after the cancel (at most the one in flight)"
        );
    }
}
