//! Behaviour tests of `weir::create` (`src/source/create.rs`): the emitter refuses
//! items beyond demand and gives them back, tracks requests (and batch credit), waits
//! for demand (blocking and async), ends after the queued items (complete, error,
//! last emitter dropped, a panic in the closure or a hook), and closes on cancel,
//! `request(0)` and a panicking subscriber. Its conformance runs are in `tests/tck.rs`.

#[path = "support/mod.rs"]
pub mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;

use weir::prelude::*;
use weir::source::{EmitError, Emitter, EmitterClosed};
use weir::tck::{TestProbe, TestSubscriber};
use weir::ErrorKind;

use support::{shape, PATIENCE};

/// Subscribe a zero-demand test subscriber to a `create` whose closure hands its
/// emitter out; return the probe and the emitter.
fn emitter_and_probe<T: Send + 'static>() -> (TestProbe<T>, Emitter<T>) {
    emitter_with(TestSubscriber::new())
}

fn emitter_with<T: Send + 'static>(subscriber: TestSubscriber<T>) -> (TestProbe<T>, Emitter<T>) {
    let probe = subscriber.probe();
    let (tx, rx) = mpsc::channel();
    weir::create(move |emitter| tx.send(emitter).unwrap()).subscribe(subscriber);
    (probe, rx.recv().unwrap())
}

#[test]
fn emit_without_demand_is_refused_and_the_item_comes_back() {
    let (probe, emitter) = emitter_and_probe::<String>();
    assert_eq!(emitter.requested(), 0);
    let refused = emitter.emit("first".to_owned()).unwrap_err();
    assert!(refused.is_no_demand() && !refused.is_closed());
    assert!(refused.to_string().contains("rule 1.1"), "{refused}");
    assert_eq!(refused.into_inner(), "first");

    probe.request(2);
    assert_eq!(emitter.requested(), 2);
    emitter.emit("a".to_owned()).unwrap();
    emitter.emit("b".to_owned()).unwrap();
    assert_eq!(emitter.requested(), 0);
    assert!(matches!(emitter.emit("c".to_owned()), Err(EmitError::NoDemand(c)) if c == "c"));
    probe.assert_items(&["a".to_owned(), "b".to_owned()]);
    probe.assert_no_violations();
}

#[test]
fn requested_adds_requests_and_unbounded_stays_unbounded() {
    let (probe, emitter) = emitter_and_probe::<u32>();
    probe.request(3);
    probe.request(4);
    assert_eq!(emitter.requested(), 7);
    emitter.emit(1).unwrap();
    assert_eq!(emitter.requested(), 6);
    probe.request(u64::MAX);
    assert_eq!(emitter.requested(), u64::MAX);
    for i in 0..1_000 {
        emitter.emit(i).unwrap();
    }
    assert_eq!(emitter.requested(), u64::MAX);
    assert_eq!(probe.received_count(), 1_001);
}

#[test]
fn complete_ends_after_the_queued_items_and_refuses_later_emits() {
    let (probe, emitter) = emitter_and_probe::<u32>();
    probe.request(2);
    emitter.emit(1).unwrap();
    assert!(emitter.complete());
    assert!(!emitter.complete(), "only the first end counts");
    assert!(
        !emitter.error(weir::Error::msg("late")),
        "only the first end counts"
    );
    assert!(matches!(emitter.emit(2), Err(EmitError::Closed(2))));
    assert_eq!(shape(&probe), "SNC");
    assert_eq!(emitter.wait_ready(), Err(EmitterClosed));
}

#[test]
fn the_end_needs_no_demand() {
    let (probe, emitter) = emitter_and_probe::<u32>();
    emitter.complete();
    assert_eq!(shape(&probe), "SC");
}

#[test]
fn error_ends_with_that_error_after_the_items() {
    let (probe, emitter) = emitter_and_probe::<u32>();
    probe.request(1);
    emitter.emit(7).unwrap();
    let boom = weir::Error::msg("sensor unplugged");
    assert!(emitter.error(boom.clone()));
    assert_eq!(shape(&probe), "SNE");
    assert!(weir::Error::ptr_eq(&probe.assert_error(), &boom));
}

#[test]
fn dropping_the_last_emitter_completes_and_clones_keep_it_open() {
    let (probe, emitter) = emitter_and_probe::<u32>();
    let other = emitter.clone();
    drop(emitter);
    probe.assert_no_terminal();
    probe.request(1);
    other.emit(5).unwrap();
    drop(other);
    assert_eq!(shape(&probe), "SNC");
}

#[test]
fn cancel_closes_the_emitter_and_runs_the_cancel_hook_once() {
    let (probe, emitter) = emitter_and_probe::<u32>();
    let cancels = Arc::new(AtomicUsize::new(0));
    let counter = cancels.clone();
    emitter.on_cancel(move || {
        counter.fetch_add(1, Ordering::SeqCst);
    });
    probe.request(5);
    emitter.emit(1).unwrap();
    assert!(!emitter.is_cancelled());
    probe.cancel();
    assert!(emitter.is_cancelled());
    assert_eq!(cancels.load(Ordering::SeqCst), 1);
    assert!(matches!(emitter.emit(2), Err(EmitError::Closed(2))));
    assert!(emitter.send_blocking(3).unwrap_err().is_closed());
    assert_eq!(emitter.wait_ready(), Err(EmitterClosed));
    assert_eq!(
        futures::executor::block_on(emitter.ready()),
        Err(EmitterClosed)
    );
    assert!(
        !emitter.complete(),
        "a cancelled stream cannot be ended again"
    );
    // A cancel hook set after the cancel runs at once.
    let late = cancels.clone();
    emitter.on_cancel(move || {
        late.fetch_add(10, Ordering::SeqCst);
    });
    assert_eq!(cancels.load(Ordering::SeqCst), 11);
    drop(emitter);
    assert_eq!(shape(&probe), "SN", "nothing after a cancel");
}

#[test]
fn the_cancel_hook_is_not_called_when_the_emitter_ends_the_stream() {
    let (probe, emitter) = emitter_and_probe::<u32>();
    let cancelled = Arc::new(AtomicBool::new(false));
    let flag = cancelled.clone();
    emitter.on_cancel(move || flag.store(true, Ordering::SeqCst));
    emitter.complete();
    probe.cancel();
    drop(emitter);
    assert!(!cancelled.load(Ordering::SeqCst));
    assert_eq!(shape(&probe), "SC");
}

#[test]
fn queued_items_are_released_on_cancel() {
    // Items wait in the queue while another thread owns the drain loop: a subscriber
    // that blocks inside on_next holds the loop while the test emits two more
    // against the outstanding demand, then cancels.
    struct Tracked(Arc<AtomicU64>);
    impl Drop for Tracked {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    struct Blocking {
        subscription: Arc<std::sync::Mutex<Option<weir::Subscription>>>,
        entered: mpsc::Sender<()>,
        release: mpsc::Receiver<()>,
    }
    impl Subscriber<Tracked> for Blocking {
        fn on_subscribe(&mut self, subscription: weir::Subscription) {
            subscription.request(10);
            *self.subscription.lock().unwrap() = Some(subscription);
        }
        fn on_next(&mut self, _: Tracked) {
            self.entered.send(()).unwrap();
            self.release.recv().unwrap();
        }
        fn on_error(&mut self, _: weir::Error) {}
        fn on_complete(&mut self) {}
    }
    let dropped = Arc::new(AtomicU64::new(0));
    let subscription = Arc::new(std::sync::Mutex::new(None));
    let (entered_tx, entered_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel();
    let (tx, rx) = mpsc::channel();
    weir::create(move |emitter| tx.send(emitter).unwrap()).subscribe(Blocking {
        subscription: subscription.clone(),
        entered: entered_tx,
        release: release_rx,
    });
    let emitter: Emitter<Tracked> = rx.recv().unwrap();
    let delivering = {
        let emitter = emitter.clone();
        let dropped = dropped.clone();
        thread::spawn(move || emitter.emit(Tracked(dropped)).is_ok())
    };
    entered_rx.recv_timeout(PATIENCE).unwrap();
    // The loop is held by `delivering`: these two wait in the queue.
    emitter.emit(Tracked(dropped.clone())).unwrap();
    emitter.emit(Tracked(dropped.clone())).unwrap();
    assert_eq!(dropped.load(Ordering::SeqCst), 0);
    subscription.lock().unwrap().as_ref().unwrap().cancel();
    release_tx.send(()).unwrap();
    assert!(delivering.join().unwrap());
    // The delivered item (dropped by the subscriber) and the two queued ones
    // (released by the stop): none is kept and none is delivered after the cancel.
    assert_eq!(dropped.load(Ordering::SeqCst), 3);
    assert!(emitter
        .emit(Tracked(dropped.clone()))
        .unwrap_err()
        .is_closed());
    assert_eq!(dropped.load(Ordering::SeqCst), 4);
}

#[test]
fn send_blocking_waits_for_demand_and_never_runs_ahead() {
    let (probe, emitter) = emitter_and_probe::<u64>();
    let producer = thread::spawn(move || {
        for i in 0..1_000 {
            emitter.send_blocking(i).unwrap();
        }
    });
    let mut requested = 0;
    while requested < 1_000 {
        probe.request(7);
        requested += 7;
        let expected = requested.min(1_000);
        probe.await_items(expected, PATIENCE).unwrap();
        assert!(probe.received_count() <= requested, "rule 1.1");
    }
    producer.join().unwrap();
    probe.await_completion(PATIENCE).unwrap();
    assert_eq!(probe.items(), (0..1_000).collect::<Vec<_>>());
    probe.assert_no_violations();
}

#[test]
fn send_awaits_demand() {
    let (probe, emitter) = emitter_and_probe::<u64>();
    let producer = thread::spawn(move || {
        futures::executor::block_on(async {
            for i in 0..100 {
                emitter.send(i).await.unwrap();
            }
        })
    });
    for _ in 0..10 {
        probe.request(10);
    }
    producer.join().unwrap();
    probe.await_completion(PATIENCE).unwrap();
    assert_eq!(probe.items(), (0..100).collect::<Vec<_>>());
}

#[test]
fn many_producers_share_the_demand_without_exceeding_it() {
    const PER: u64 = 2_000;
    let (probe, emitter) = emitter_and_probe::<u64>();
    let producers: Vec<_> = (0..4)
        .map(|p| {
            let emitter = emitter.clone();
            thread::spawn(move || {
                for i in 0..PER {
                    emitter.send_blocking(p * PER + i).unwrap();
                }
            })
        })
        .collect();
    drop(emitter);
    let requesters: Vec<_> = (0..2)
        .map(|_| {
            let probe = probe.clone();
            thread::spawn(move || {
                for _ in 0..2 * PER {
                    probe.request(1);
                }
            })
        })
        .collect();
    for handle in producers.into_iter().chain(requesters) {
        handle.join().unwrap();
    }
    probe.await_completion(PATIENCE).unwrap();
    let mut items = probe.items();
    items.sort_unstable();
    assert_eq!(items, (0..4 * PER).collect::<Vec<_>>());
    probe.assert_no_violations();
}

#[test]
fn the_request_hook_is_serialised_and_sees_every_grant() {
    let (probe, emitter) = emitter_and_probe::<u64>();
    let inside = Arc::new(AtomicBool::new(false));
    let granted = Arc::new(AtomicU64::new(0));
    let (inside2, granted2) = (inside.clone(), granted.clone());
    emitter.on_request(move |n| {
        assert!(
            !inside2.swap(true, Ordering::SeqCst),
            "hook entered twice at once"
        );
        granted2.fetch_add(n, Ordering::SeqCst);
        thread::yield_now();
        inside2.store(false, Ordering::SeqCst);
    });
    let requesters: Vec<_> = (0..4)
        .map(|_| {
            let probe = probe.clone();
            thread::spawn(move || {
                for _ in 0..500 {
                    probe.request(2);
                }
            })
        })
        .collect();
    for handle in requesters {
        handle.join().unwrap();
    }
    assert_eq!(granted.load(Ordering::SeqCst), 4_000);
    assert_eq!(emitter.requested(), 4_000);
    assert!(
        probe.error().is_none(),
        "a panicking hook would have failed the stream"
    );
}

#[test]
fn the_request_hook_is_called_at_once_for_demand_already_there() {
    let (probe, emitter) = emitter_with(TestSubscriber::<u64>::new().request_on_subscribe(3));
    let calls = Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = calls.clone();
    emitter.on_request(move |n| record.lock().unwrap().push(n));
    probe.request(2);
    assert_eq!(*calls.lock().unwrap(), [3, 2]);
}

#[test]
fn batch_credit_of_a_synchronous_chain_counts_as_demand() {
    // `fold` hands credit back at the end of each batch instead of calling request:
    // an emitter that only looked at requests would stall after the first window.
    let sum = weir::create(|emitter| {
        thread::spawn(move || {
            for i in 0..100_000u64 {
                emitter.send_blocking(i).unwrap();
            }
        });
    })
    .map(|x| x * 2)
    .filter(|x| x % 3 != 0)
    .fold(0u64, |sum, x| sum + x)
    .wait()
    .unwrap();
    let expected: u64 = (0..100_000u64).map(|x| x * 2).filter(|x| x % 3 != 0).sum();
    assert_eq!(sum, expected);
}

#[test]
fn a_panic_in_the_closure_fails_the_stream_after_the_emitted_items() {
    let subscriber = TestSubscriber::<u32>::new().request_on_subscribe(5);
    let probe = subscriber.probe();
    weir::create(|emitter| {
        emitter.emit(1).unwrap();
        panic!("producer setup failed");
    })
    .subscribe(subscriber);
    // Not completed by the emitter dropped while unwinding: the panic is the end.
    assert_eq!(shape(&probe), "SNE");
    let error = probe.assert_error();
    assert_eq!(error.kind(), ErrorKind::Panicked);
    assert!(error.message().contains("producer setup failed"), "{error}");
}

#[test]
fn a_panic_in_the_request_hook_fails_the_stream() {
    let (probe, emitter) = emitter_and_probe::<u32>();
    emitter.on_request(|_| panic!("hook blew up"));
    probe.request(1);
    assert_eq!(shape(&probe), "SE");
    assert_eq!(probe.assert_error().kind(), ErrorKind::Panicked);
    assert!(emitter.emit(1).unwrap_err().is_closed());
}

#[test]
fn a_cancel_in_on_subscribe_skips_the_closure() {
    let called = Arc::new(AtomicBool::new(false));
    let flag = called.clone();
    struct CancelAtOnce;
    impl Subscriber<u32> for CancelAtOnce {
        fn on_subscribe(&mut self, subscription: weir::Subscription) {
            subscription.cancel();
        }
        fn on_next(&mut self, _: u32) {
            unreachable!("cancelled");
        }
        fn on_error(&mut self, _: weir::Error) {}
        fn on_complete(&mut self) {}
    }
    weir::create(move |_emitter: Emitter<u32>| flag.store(true, Ordering::SeqCst))
        .subscribe(CancelAtOnce);
    assert!(!called.load(Ordering::SeqCst));
}

#[test]
fn request_zero_fails_with_rule_3_9_and_closes_the_emitter() {
    let (probe, emitter) = emitter_and_probe::<u32>();
    probe.request(0);
    probe.assert_error_rule("3.9");
    assert!(emitter.emit(1).unwrap_err().is_closed());
    assert!(emitter.is_cancelled());
}

#[test]
fn a_panicking_subscriber_closes_the_emitter() {
    struct Explodes;
    impl Subscriber<u32> for Explodes {
        fn on_subscribe(&mut self, subscription: weir::Subscription) {
            subscription.request(10);
        }
        fn on_next(&mut self, _: u32) {
            panic!("subscriber bug");
        }
        fn on_error(&mut self, _: weir::Error) {}
        fn on_complete(&mut self) {}
    }
    let (tx, rx) = mpsc::channel();
    weir::create(move |emitter| tx.send(emitter).unwrap()).subscribe(Explodes);
    let emitter: Emitter<u32> = rx.recv().unwrap();
    let cancelled = Arc::new(AtomicBool::new(false));
    let flag = cancelled.clone();
    emitter.on_cancel(move || flag.store(true, Ordering::SeqCst));
    // The panic is caught at the stage (rule 2.13); the emit that delivered is done.
    assert!(emitter.emit(1).is_ok());
    assert!(emitter.emit(2).unwrap_err().is_closed());
    assert!(cancelled.load(Ordering::SeqCst));
}

#[test]
fn an_emitter_is_send_and_sync_and_its_errors_are_errors() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Emitter<String>>();
    fn assert_error<E: std::error::Error + Send + Sync + 'static>() {}
    assert_error::<EmitError<String>>();
    assert_error::<EmitterClosed>();
    // The async wait is Send, so it can run on tokio's multi-threaded runtime.
    fn assert_send<T: Send>(_: &T) {}
    let (_probe, emitter) = emitter_and_probe::<u32>();
    assert_send(&emitter.ready());
    assert_send(&emitter.send(1));
}

/// A request hook installed while requests arrive on another thread is handed the
/// credit outstanding when it was installed, then each later request: in all,
/// exactly what was requested (nothing was emitted), however the install and a
/// request interleave. Before the fix a request caught between adding its credit
/// and handing it to the hook was handed over twice (in the catch-up and again).
#[test]
fn a_request_hook_installed_during_requests_is_handed_each_request_once() {
    const ROUNDS: usize = 3_000;
    const REQUESTS: u64 = 50;
    let mut over = Vec::new();
    for round in 0..ROUNDS {
        let (probe, emitter) = emitter_and_probe::<u64>();
        let start = Arc::new(AtomicBool::new(false));
        let requester = {
            let start = start.clone();
            thread::spawn(move || {
                while !start.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                }
                for _ in 0..REQUESTS {
                    probe.request(1);
                }
                probe
            })
        };
        let handed = Arc::new(AtomicU64::new(0));
        let sum = handed.clone();
        start.store(true, Ordering::Release);
        // Land the install among the requests.
        for _ in 0..(round % 64) * 16 {
            std::hint::spin_loop();
        }
        emitter.on_request(move |granted| {
            sum.fetch_add(granted, Ordering::SeqCst);
        });
        let probe = requester.join().unwrap();
        let handed = handed.load(Ordering::SeqCst);
        if handed != REQUESTS {
            over.push((round, handed));
        }
        probe.cancel();
    }
    assert!(
        over.is_empty(),
        "rounds where the hook was handed other than {REQUESTS}: {over:?}"
    );
}

/// An item that panics in `Drop` when its value is 5.
struct Bomb(u64);

impl Drop for Bomb {
    fn drop(&mut self) {
        if self.0 == 5 && !thread::panicking() {
            panic!("deliberate panic in an item's Drop");
        }
    }
}

/// Asks for ten items; at the first it emits six more through `emitter` (queued:
/// its own pass is delivering) and cancels.
struct CancelsAtFirst {
    subscription: Option<weir::Subscription>,
    emitter: Arc<std::sync::Mutex<Option<Emitter<Bomb>>>>,
}

impl weir::Subscriber<Bomb> for CancelsAtFirst {
    fn on_subscribe(&mut self, subscription: weir::Subscription) {
        subscription.request(10);
        self.subscription = Some(subscription);
    }
    fn on_next(&mut self, _: Bomb) {
        if let Some(emitter) = self.emitter.lock().unwrap().take() {
            for i in 1..=6 {
                let _ = emitter.emit(Bomb(i));
            }
        }
        if let Some(subscription) = self.subscription.take() {
            subscription.cancel();
        }
    }
    fn on_error(&mut self, _: weir::Error) {}
    fn on_complete(&mut self) {}
}

/// A cancel that lets go of undelivered items, one of which panics in `Drop`: the
/// panic is contained and the cancel hook still runs (before the fix the panic left
/// the stop before its hooks: `on_cancel` never ran, and a hook holding an emitter
/// kept the stage alive).
#[test]
fn an_item_panicking_in_drop_at_the_cancel_does_not_skip_the_cancel_hook() {
    let hooked = Arc::new(AtomicBool::new(false));
    let flag = hooked.clone();
    let slot = Arc::new(std::sync::Mutex::new(None));
    let emitter_slot = slot.clone();
    weir::create(move |emitter: Emitter<Bomb>| {
        let flag = flag.clone();
        emitter.on_cancel(move || flag.store(true, Ordering::SeqCst));
        *emitter_slot.lock().unwrap() = Some(emitter.clone());
        let _ = emitter.emit(Bomb(0));
    })
    .subscribe(CancelsAtFirst {
        subscription: None,
        emitter: slot.clone(),
    });
    assert!(
        slot.lock().unwrap().is_none(),
        "the items were never emitted"
    );
    assert!(hooked.load(Ordering::SeqCst), "on_cancel never ran");
}

/// Two `send`s wait for demand, the first under a waker that panics: a request
/// still wakes the second, and a cancel still wakes it and runs the cancel hook.
/// (The first panic used to skip every waker after it: the request's panic reached
/// the caller of `request`, and the cancel never ran the hook.)
#[test]
fn a_waker_that_panics_keeps_neither_the_other_waiters_asleep_nor_the_cancel_hook() {
    use std::future::Future;
    use std::task::Context;
    for cancel in [false, true] {
        let (probe, emitter) = emitter_and_probe::<u32>();
        let hooked = Arc::new(AtomicBool::new(false));
        let hook = hooked.clone();
        emitter.on_cancel(move || hook.store(true, Ordering::SeqCst));
        let (first, mut second, flag, flagged) =
            support::wakers::two_waiters(emitter.send(1), emitter.send(2));
        if cancel {
            probe.cancel();
            assert!(hooked.load(Ordering::SeqCst), "the cancel hook ran");
        } else {
            probe.request(5);
        }
        assert!(flag.woken(), "cancel {cancel}: woken");
        let sent = second.as_mut().poll(&mut Context::from_waker(&flagged));
        match sent {
            std::task::Poll::Ready(Ok(())) => assert!(!cancel),
            std::task::Poll::Ready(Err(error)) => assert!(cancel && error.is_closed()),
            std::task::Poll::Pending => panic!("cancel {cancel}: still waiting"),
        }
        drop(first);
    }
}
