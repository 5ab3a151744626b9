//! Unit-level tests of the tokio bridge's async subscriber (`subscribe_async`) and of
//! the readiness helpers for I/O producers (`Sender::resumed`, `send_or_pause`), on
//! multi-thread tokio runtimes. Requests and cancels are counted with
//! `inspect_request` / `inspect_cancel` on the publisher side.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures::task::noop_waker_ref;
use weir::bridge::{AfterSend, AsyncSubscriber, SenderReadiness, SubscribeAsync};
use weir::prelude::*;
use weir::source::channel::{ChannelBuilder, ChannelPolicy, FlowState, WaterMarks};
use weir::{Error, ErrorKind};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// The requests a publisher received, in order.
#[derive(Clone, Default)]
struct Requests(Arc<Mutex<Vec<u64>>>);

impl Requests {
    fn record(&self) -> impl Fn(u64) + Send + Sync + 'static {
        let log = self.0.clone();
        move |n| log.lock().unwrap().push(n)
    }
    fn total(&self) -> u64 {
        self.0.lock().unwrap().iter().sum()
    }
    fn list(&self) -> Vec<u64> {
        self.0.lock().unwrap().clone()
    }
}

/// Checks, at the start and at the end of each `on_next` (with awaits in between),
/// how much was requested in total: the next request must wait for the future.
struct Checker {
    requests: Requests,
    window: u64,
    seen: u64,
    /// (requested at entry, requested at exit) per item.
    log: Arc<Mutex<Vec<(u64, u64)>>>,
}

#[async_trait::async_trait]
impl AsyncSubscriber<u64> for Checker {
    async fn on_next(&mut self, item: u64) -> Result<(), Error> {
        assert_eq!(item, self.seen, "in order");
        let at_entry = self.requests.total();
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(std::time::Duration::from_micros(200)).await;
        let at_exit = self.requests.total();
        self.log.lock().unwrap().push((at_entry, at_exit));
        self.seen += 1;
        assert!(
            at_exit <= self.seen + self.window,
            "outstanding above the window"
        );
        Ok(())
    }
}

/// Run `range(0..items)` into a [`Checker`], through `subscribe_async` (`window: None`,
/// the default window of 1) or `subscribe_async_with` a window; returns the requests
/// upstream saw and the checker's (entry, exit) log.
fn run_checked(window: Option<u64>, items: u64) -> (Vec<u64>, Vec<(u64, u64)>) {
    let rt = runtime();
    let requests = Requests::default();
    let log = Arc::new(Mutex::new(Vec::new()));
    let checker = Checker {
        requests: requests.clone(),
        window: window.unwrap_or(1),
        seen: 0,
        log: log.clone(),
    };
    let source = weir::range(0u64..items).inspect_request(requests.record());
    let result = rt.block_on(async {
        match window {
            None => source.subscribe_async(checker).await,
            Some(w) => {
                source
                    .subscribe_async_with(SubscribeAsync::new().window(w), checker)
                    .await
            }
        }
    });
    assert!(result.is_ok(), "{result:?}");
    let log = log.lock().unwrap().clone();
    (requests.list(), log)
}

#[test]
fn window_1_requests_one_only_after_each_future_completed() {
    let (requests, log) = run_checked(None, 40);
    assert_eq!(log.len(), 40);
    for (k, &(entry, exit)) in log.iter().enumerate() {
        let k = k as u64;
        // Item k was delivered against the (k+1)-th request, and nothing more was
        // requested while its future ran.
        assert_eq!((entry, exit), (k + 1, k + 1), "item {k}");
    }
    assert!(requests.iter().all(|&n| n == 1), "request(1) each time");
    assert!(requests.len() >= 40);
}

#[test]
fn a_window_replenishes_through_the_75_percent_rule() {
    let (list, log) = run_checked(Some(8), 100);
    assert_eq!(list[0], 8, "the window up front");
    assert!(
        list[1..].iter().all(|&n| n == 6),
        "then 8 - 8/4 at a time: {list:?}"
    );
    for (k, &(entry, exit)) in log.iter().enumerate() {
        let k = k as u64;
        assert!(entry <= k + 8 && exit <= k + 8, "item {k}: at most 8 ahead");
    }
}

/// Panics (or fails) at item `fail_at`; counts items and notes being dropped.
struct Failing {
    fail_at: u64,
    panic: bool,
    error: Error,
    seen: Arc<AtomicU64>,
    dropped: Arc<AtomicBool>,
}

impl Drop for Failing {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

#[async_trait::async_trait]
impl AsyncSubscriber<u64> for Failing {
    async fn on_next(&mut self, item: u64) -> Result<(), Error> {
        tokio::task::yield_now().await;
        if item == self.fail_at {
            if self.panic {
                panic!("store failed at item {item}");
            }
            return Err(self.error.clone());
        }
        self.seen.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    async fn on_error(&mut self, _error: Error) {
        panic!("on_error must not run after on_next failed");
    }
}

fn failing(panic: bool) -> (Failing, Arc<AtomicU64>, Arc<AtomicBool>, Error) {
    let seen = Arc::new(AtomicU64::new(0));
    let dropped = Arc::new(AtomicBool::new(false));
    let error = Error::msg("disk full");
    let subscriber = Failing {
        fail_at: 3,
        panic,
        error: error.clone(),
        seen: seen.clone(),
        dropped: dropped.clone(),
    };
    (subscriber, seen, dropped, error)
}

#[test]
fn a_panic_in_on_next_cancels_upstream_and_becomes_the_result() {
    let rt = runtime();
    let (subscriber, seen, dropped, _) = failing(true);
    let cancels = Arc::new(AtomicU64::new(0));
    let counted = cancels.clone();
    let result = rt.block_on(async {
        weir::range(0u64..1_000)
            .inspect_cancel(move || {
                counted.fetch_add(1, Ordering::SeqCst);
            })
            .subscribe_async(subscriber)
            .await
    });
    let error = result.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Panicked);
    assert!(
        error.message().contains("store failed at item 3"),
        "{error}"
    );
    assert_eq!(seen.load(Ordering::SeqCst), 3, "items before the panic");
    assert_eq!(cancels.load(Ordering::SeqCst), 1, "upstream cancelled once");
    assert!(dropped.load(Ordering::SeqCst), "the subscriber was dropped");
}

#[test]
fn an_error_from_on_next_cancels_upstream_and_is_the_result() {
    let rt = runtime();
    let (subscriber, seen, _, error) = failing(false);
    let cancels = Arc::new(AtomicU64::new(0));
    let counted = cancels.clone();
    let result = rt.block_on(async {
        weir::range(0u64..1_000)
            .inspect_cancel(move || {
                counted.fetch_add(1, Ordering::SeqCst);
            })
            .subscribe_async(subscriber)
            .await
    });
    assert!(Error::ptr_eq(&result.unwrap_err(), &error));
    assert_eq!(seen.load(Ordering::SeqCst), 3);
    assert_eq!(cancels.load(Ordering::SeqCst), 1);
}

/// Records its hooks; `on_next` can be held on a gate.
#[derive(Clone, Default)]
struct Trace(Arc<Mutex<Vec<String>>>);

struct Tracing {
    trace: Trace,
    gate: Option<Arc<tokio::sync::Notify>>,
    started: Option<Arc<tokio::sync::Notify>>,
    dropped: Arc<AtomicBool>,
    fail_subscribe: bool,
}

impl Tracing {
    fn new(trace: &Trace) -> Self {
        Tracing {
            trace: trace.clone(),
            gate: None,
            started: None,
            dropped: Arc::new(AtomicBool::new(false)),
            fail_subscribe: false,
        }
    }
}

impl Drop for Tracing {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

#[async_trait::async_trait]
impl AsyncSubscriber<u32> for Tracing {
    async fn on_subscribe(&mut self) -> Result<(), Error> {
        self.trace.0.lock().unwrap().push("subscribe".into());
        if self.fail_subscribe {
            return Err(Error::msg("no database"));
        }
        Ok(())
    }
    async fn on_next(&mut self, item: u32) -> Result<(), Error> {
        if let Some(started) = &self.started {
            started.notify_one();
        }
        if let Some(gate) = &self.gate {
            gate.notified().await;
        }
        self.trace.0.lock().unwrap().push(format!("next {item}"));
        Ok(())
    }
    async fn on_error(&mut self, error: Error) {
        self.trace
            .0
            .lock()
            .unwrap()
            .push(format!("error {}", error.message()));
    }
    async fn on_complete(&mut self) -> Result<(), Error> {
        self.trace.0.lock().unwrap().push("complete".into());
        Ok(())
    }
}

#[test]
fn hooks_run_in_order_and_an_upstream_error_follows_the_items() {
    let rt = runtime();
    let trace = Trace::default();
    let (tx, rx) = weir::channel::<u32>(8, ChannelPolicy::Backpressure);
    tx.try_send(1).unwrap();
    tx.try_send(2).unwrap();
    let error = Error::msg("socket reset");
    tx.fail(error.clone());
    let result = rt.block_on(async { rx.subscribe_async(Tracing::new(&trace)).await });
    assert!(
        Error::ptr_eq(&result.unwrap_err(), &error),
        "the upstream error itself"
    );
    assert_eq!(
        *trace.0.lock().unwrap(),
        ["subscribe", "next 1", "next 2", "error socket reset"]
    );

    let trace = Trace::default();
    let result = rt.block_on(async {
        weir::empty::<u32>()
            .subscribe_async(Tracing::new(&trace))
            .await
    });
    assert!(result.is_ok());
    assert_eq!(*trace.0.lock().unwrap(), ["subscribe", "complete"]);
}

#[test]
fn an_error_from_on_subscribe_cancels_before_any_request() {
    let rt = runtime();
    let trace = Trace::default();
    let requests = Requests::default();
    let cancelled = Arc::new(AtomicBool::new(false));
    let flag = cancelled.clone();
    let mut subscriber = Tracing::new(&trace);
    subscriber.fail_subscribe = true;
    let result = rt.block_on(async {
        weir::range(0u32..10)
            .inspect_request(requests.record())
            .inspect_cancel(move || flag.store(true, Ordering::SeqCst))
            .subscribe_async(subscriber)
            .await
    });
    assert_eq!(result.unwrap_err().message(), "no database");
    assert_eq!(requests.total(), 0);
    assert!(cancelled.load(Ordering::SeqCst));
}

#[test]
fn abort_cancels_upstream_at_once_and_drops_the_subscriber() {
    let rt = runtime();
    let trace = Trace::default();
    let (tx, rx) = weir::channel::<u32>(8, ChannelPolicy::Backpressure);
    let started = Arc::new(tokio::sync::Notify::new());
    let mut subscriber = Tracing::new(&trace);
    subscriber.gate = Some(Arc::new(tokio::sync::Notify::new())); // never opened
    subscriber.started = Some(started.clone());
    let dropped = subscriber.dropped.clone();
    let handle = rx.subscribe_async_with(
        SubscribeAsync::new().runtime(rt.handle().clone()),
        subscriber,
    );
    tx.try_send(1).unwrap();
    rt.block_on(started.notified()); // on_next(1) is running, held on the gate
    assert!(!tx.is_closed());
    handle.abort();
    assert!(tx.is_closed(), "upstream cancelled on abort's thread");
    let result = rt.block_on(handle);
    assert_eq!(result.unwrap_err().kind(), ErrorKind::Cancelled);
    assert!(dropped.load(Ordering::SeqCst));
    assert_eq!(
        *trace.0.lock().unwrap(),
        ["subscribe"],
        "no hook after abort"
    );
}

#[test]
fn dropping_the_handle_detaches_the_task() {
    let rt = runtime();
    let trace = Trace::default();
    let subscriber = Tracing::new(&trace);
    let dropped = subscriber.dropped.clone();
    drop(weir::range(0u32..3).subscribe_async_with(
        SubscribeAsync::new().runtime(rt.handle().clone()),
        subscriber,
    ));
    // The task runs to the end without anyone holding the handle.
    rt.block_on(async {
        while !dropped.load(Ordering::SeqCst) {
            tokio::task::yield_now().await;
        }
    });
    assert_eq!(
        *trace.0.lock().unwrap(),
        ["subscribe", "next 0", "next 1", "next 2", "complete"]
    );
}

#[test]
fn shutting_the_runtime_down_cancels_upstream() {
    let rt = runtime();
    let trace = Trace::default();
    let (tx, rx) = weir::channel::<u32>(8, ChannelPolicy::Backpressure);
    let started = Arc::new(tokio::sync::Notify::new());
    let mut subscriber = Tracing::new(&trace);
    subscriber.gate = Some(Arc::new(tokio::sync::Notify::new()));
    subscriber.started = Some(started.clone());
    let handle = rx.subscribe_async_with(
        SubscribeAsync::new().runtime(rt.handle().clone()),
        subscriber,
    );
    tx.try_send(7).unwrap();
    rt.block_on(started.notified());
    drop(rt); // drops the task: its guard cancels the subscription
    assert!(tx.is_closed());
    assert!(handle.is_finished());
    let result = futures::executor::block_on(handle);
    assert_eq!(result.unwrap_err().kind(), ErrorKind::SchedulerShutdown);
}

#[test]
fn a_runtime_shut_down_before_the_task_ran_cancels_upstream_and_reports_the_shutdown() {
    let rt = runtime();
    let handle = rt.handle().clone();
    drop(rt);
    let trace = Trace::default();
    let subscriber = Tracing::new(&trace);
    let dropped = subscriber.dropped.clone();
    let (tx, rx) = weir::channel::<u32>(8, ChannelPolicy::Backpressure);
    let task = rx.subscribe_async_with(SubscribeAsync::new().runtime(handle), subscriber);
    // The task was dropped unpolled: the subscription was cancelled on arrival.
    assert!(tx.is_closed(), "upstream cancelled");
    assert_eq!(tx.try_send(1).unwrap_err().into_inner(), 1);
    assert!(dropped.load(Ordering::SeqCst), "the subscriber was dropped");
    let result = futures::executor::block_on(task);
    assert_eq!(result.unwrap_err().kind(), ErrorKind::SchedulerShutdown);
    assert!(trace.0.lock().unwrap().is_empty(), "no hook ran");
}

/// A publisher whose `subscribe` panics, after calling `on_subscribe` (with a
/// subscription that ignores every call) when `after_on_subscribe`.
struct PanicsInSubscribe {
    after_on_subscribe: bool,
}

impl weir::Publisher for PanicsInSubscribe {
    type Item = u32;

    fn subscribe<S: weir::Subscriber<u32> + Send + 'static>(self, mut subscriber: S) {
        if self.after_on_subscribe {
            subscriber.on_subscribe(weir::Subscription::noop());
        }
        panic!("boom in subscribe");
    }
}

#[test]
fn a_publisher_that_panics_in_subscribe_panics_in_the_caller_and_the_task_ends() {
    for after_on_subscribe in [false, true] {
        let rt = runtime();
        let trace = Trace::default();
        let subscriber = Tracing::new(&trace);
        let dropped = subscriber.dropped.clone();
        let options = SubscribeAsync::new().runtime(rt.handle().clone());
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            PanicsInSubscribe { after_on_subscribe }.subscribe_async_with(options, subscriber)
        }));
        let payload = caught.expect_err("the publisher's panic reaches the caller");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"boom in subscribe"));
        // Before the fix the task waited for a subscription for ever, holding the
        // subscriber.
        rt.block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(10), async {
                while !dropped.load(Ordering::SeqCst) {
                    tokio::task::yield_now().await;
                }
            })
            .await
            .expect("the task ended and dropped the subscriber")
        });
        let cancelled = Error::cancelled();
        assert_eq!(
            *trace.0.lock().unwrap(),
            [
                "subscribe".to_owned(),
                format!("error {}", cancelled.message())
            ],
            "after_on_subscribe = {after_on_subscribe}"
        );
    }
}

#[test]
#[should_panic(expected = "subscribe_async window must be in 1..=2^30 (got 0)")]
fn a_zero_window_is_refused() {
    let _ = SubscribeAsync::new().window(0);
}

#[test]
#[should_panic(expected = "subscribe_async window must be in 1..=2^30 (got 1073741825)")]
fn a_huge_window_is_refused() {
    let _ = SubscribeAsync::new().window((1 << 30) + 1);
}

#[test]
#[should_panic(expected = "subscribe_async must be called inside a tokio runtime")]
fn subscribing_outside_a_runtime_panics_with_a_clear_message() {
    drop(weir::range(0u32..1).subscribe_async(Tracing::new(&Trace::default())));
}

// ---- for_each_async ---------------------------------------------------------------------

/// `for_each_async(_with)` over `items` numbers: the requests the source saw, and for
/// each call, how many items had been requested when it started and when it ended.
fn for_each_checked(window: Option<u64>, items: u64) -> (Vec<u64>, Vec<(u64, u64)>) {
    let rt = runtime();
    let requests = Requests::default();
    let requested = Arc::new(AtomicU64::new(0));
    let log = Arc::new(Mutex::new(Vec::new()));
    let (counter, calls) = (requested.clone(), log.clone());
    let source = weir::range(0..items)
        .inspect_request(requests.record())
        .inspect_request(move |n| {
            counter.fetch_add(n, Ordering::SeqCst);
        });
    let step = move |_: u64| {
        let (requested, calls) = (requested.clone(), calls.clone());
        async move {
            let entry = requested.load(Ordering::SeqCst);
            tokio::task::yield_now().await;
            let exit = requested.load(Ordering::SeqCst);
            calls.lock().unwrap().push((entry, exit));
        }
    };
    rt.block_on(async move {
        match window {
            None => source.for_each_async(step).await,
            Some(w) => source.for_each_async_with(w, step).await,
        }
    })
    .expect("the stream completes");
    let log = log.lock().unwrap().clone();
    (requests.list(), log)
}

#[test]
fn for_each_async_runs_one_call_per_item_and_requests_after_each() {
    let (requests, log) = for_each_checked(None, 30);
    assert_eq!(log.len(), 30);
    for (k, &(entry, exit)) in log.iter().enumerate() {
        let k = k as u64;
        assert_eq!(
            (entry, exit),
            (k + 1, k + 1),
            "item {k}: nothing requested while it ran"
        );
    }
    assert!(
        requests.iter().all(|&n| n == 1),
        "request(1) each time: {requests:?}"
    );
}

#[test]
fn for_each_async_with_keeps_a_window_and_replenishes_by_the_75_percent_rule() {
    let (requests, log) = for_each_checked(Some(8), 100);
    assert_eq!(log.len(), 100);
    assert_eq!(requests[0], 8, "the window up front");
    assert!(
        requests[1..].iter().all(|&n| n == 6),
        "8 - 8/4 = 6 at a time: {requests:?}"
    );
    for (k, &(entry, _)) in log.iter().enumerate() {
        assert!(
            entry <= k as u64 + 8,
            "never more than the window ahead at item {k}"
        );
    }
}

#[test]
fn for_each_async_ends_with_the_upstream_error_after_the_items() {
    let rt = runtime();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let boom = Error::msg("upstream failed");
    let source = weir::range(0u32..3).concat(weir::error(boom.clone()));
    let result = rt.block_on(async move {
        source
            .for_each_async(move |x| {
                let record = record.clone();
                async move { record.lock().unwrap().push(x) }
            })
            .await
    });
    assert!(Error::ptr_eq(&result.unwrap_err(), &boom));
    assert_eq!(*seen.lock().unwrap(), [0, 1, 2]);
}

#[test]
fn a_panic_in_for_each_async_cancels_upstream_and_is_the_result() {
    let rt = runtime();
    let cancelled = Arc::new(AtomicBool::new(false));
    let flag = cancelled.clone();
    let source =
        weir::range(0u32..1_000).inspect_cancel(move || flag.store(true, Ordering::SeqCst));
    let result = rt.block_on(async move {
        source
            .for_each_async(|x| async move {
                assert!(x < 5, "deliberate panic at item {x}");
            })
            .await
    });
    let error = result.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Panicked);
    assert!(
        error.message().contains("deliberate panic at item 5"),
        "{error}"
    );
    assert!(cancelled.load(Ordering::SeqCst));
}

#[test]
fn aborting_for_each_async_cancels_upstream() {
    let rt = runtime();
    let cancelled = Arc::new(AtomicBool::new(false));
    let flag = cancelled.clone();
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let _entered = rt.enter();
    let handle = weir::range(0u32..10)
        .inspect_cancel(move || flag.store(true, Ordering::SeqCst))
        .for_each_async(move |_| {
            let _ = started_tx.send(());
            std::future::pending::<()>()
        });
    started_rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .unwrap();
    handle.abort();
    assert!(
        cancelled.load(Ordering::SeqCst),
        "cancelled at once, on this thread"
    );
    assert_eq!(
        rt.block_on(handle).unwrap_err().kind(),
        ErrorKind::Cancelled
    );
}

#[test]
#[should_panic(expected = "for_each_async must be called inside a tokio runtime")]
fn for_each_async_outside_a_runtime_names_itself() {
    drop(weir::range(0u32..1).for_each_async(|_| async {}));
}

#[test]
#[should_panic(expected = "for_each_async window must be in 1..=2^30 (got 0)")]
fn a_zero_for_each_async_window_is_refused() {
    let rt = runtime();
    let _entered = rt.enter();
    drop(weir::range(0u32..1).for_each_async_with(0, |_| async {}));
}

// ---- readiness for I/O producers ------------------------------------------------------

/// Poll `future` once with a no-op waker.
fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    std::pin::Pin::new(future).poll(&mut Context::from_waker(noop_waker_ref()))
}

/// Counts items; optionally slow.
struct Counter(Arc<AtomicU64>);

#[async_trait::async_trait]
impl AsyncSubscriber<u32> for Counter {
    async fn on_next(&mut self, _item: u32) -> Result<(), Error> {
        tokio::task::yield_now().await;
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[test]
fn resumed_completes_on_tokio_once_an_async_subscriber_drained_to_the_low_mark() {
    let rt = runtime();
    let (tx, rx) = ChannelBuilder::new(8, ChannelPolicy::Backpressure)
        .water_marks(WaterMarks::new(4, 1))
        .build::<u32>();
    for i in 0..4 {
        tx.try_send(i).unwrap();
    }
    assert_eq!(tx.state(), FlowState::Paused);
    let tx = Arc::new(tx);
    let waiter = {
        let tx = tx.clone();
        rt.spawn(async move { tx.resumed().await })
    };
    let count = Arc::new(AtomicU64::new(0));
    let handle = rx.subscribe_async_with(
        SubscribeAsync::new().runtime(rt.handle().clone()),
        Counter(count.clone()),
    );
    assert_eq!(rt.block_on(waiter).unwrap(), Ok(()));
    assert_eq!(tx.state(), FlowState::Flowing);
    drop(tx);
    assert!(rt.block_on(handle).is_ok());
    assert_eq!(count.load(Ordering::SeqCst), 4);

    // Closing wakes a waiter with `Err(ChannelClosed)`.
    let (tx, rx) = ChannelBuilder::new(2, ChannelPolicy::Backpressure)
        .water_marks(WaterMarks::new(1, 0))
        .build::<u32>();
    tx.try_send(0).unwrap();
    let tx = Arc::new(tx);
    let waiter = {
        let tx = tx.clone();
        rt.spawn(async move { tx.resumed().await })
    };
    drop(rx); // never subscribed: the channel closes
    assert!(rt.block_on(waiter).unwrap().is_err());
}

#[test]
fn send_or_pause_holds_the_producer_while_paused() {
    let (tx, rx) = ChannelBuilder::new(8, ChannelPolicy::Backpressure)
        .water_marks(WaterMarks::new(4, 1))
        .build::<u32>();
    for i in 0..3 {
        let mut send = pin!(tx.send_or_pause(i));
        assert_eq!(poll_once(&mut send), Poll::Ready(Ok(AfterSend::Flowing)));
    }
    // The 4th item reaches the high mark: it is in, and the producer now waits.
    let mut fourth = tx.send_or_pause(3);
    assert!(poll_once(&mut fourth).is_pending());
    assert_eq!(rx.monitor().snapshot().depth, 4, "the item went in");
    let rt = runtime();
    let count = Arc::new(AtomicU64::new(0));
    let handle = rx.subscribe_async_with(
        SubscribeAsync::new().runtime(rt.handle().clone()),
        Counter(count.clone()),
    );
    let after = rt.block_on(fourth).unwrap();
    assert!(matches!(after, AfterSend::Resumed { .. }), "{after:?}");
    drop(tx);
    assert!(rt.block_on(handle).is_ok());
    assert_eq!(count.load(Ordering::SeqCst), 4);

    // Closed while paused: the item went in, the producer is told to stop.
    let (tx, rx) = ChannelBuilder::new(2, ChannelPolicy::Backpressure)
        .water_marks(WaterMarks::new(1, 0))
        .build::<u32>();
    let mut paused = tx.send_or_pause(0);
    assert!(poll_once(&mut paused).is_pending());
    drop(rx);
    assert_eq!(poll_once(&mut paused), Poll::Ready(Ok(AfterSend::Closed)));
    // And a closed channel hands the item back.
    let mut refused = tx.send_or_pause(1);
    assert!(matches!(poll_once(&mut refused), Poll::Ready(Err(e)) if e.is_closed()));
}

/// Under an admission ladder, reducing and shedding are not a pause: the producer
/// reads on (pacing itself by the rate factor); only the pause rung holds it.
/// `paused_for` is read on the channel's clock (as the monitor's blocked time is):
/// with a `VirtualTime` clock it is exactly the virtual time that passed.
#[test]
fn send_or_pause_measures_the_pause_on_the_channels_clock() {
    let clock = weir::runtime::VirtualTime::new();
    let (tx, rx) = ChannelBuilder::new(4, ChannelPolicy::Backpressure)
        .water_marks(WaterMarks::new(2, 0))
        .clock(clock.clone())
        .build::<u32>();
    let mut first = pin!(tx.send_or_pause(0));
    assert_eq!(poll_once(&mut first), Poll::Ready(Ok(AfterSend::Flowing)));
    let mut second = pin!(tx.send_or_pause(1));
    assert!(
        poll_once(&mut second).is_pending(),
        "paused at the high mark"
    );
    clock.advance(std::time::Duration::from_secs(3));
    let handle = rx.collect(); // takes both items: the flow resumes at the low mark
    assert_eq!(
        poll_once(&mut second),
        Poll::Ready(Ok(AfterSend::Resumed {
            paused_for: std::time::Duration::from_secs(3)
        }))
    );
    tx.close();
    assert_eq!(handle.wait().unwrap(), [0, 1]);
}

#[test]
fn send_or_pause_reads_on_while_the_channel_only_reduces() {
    use weir::source::channel::Admission;
    let admission = Admission::new()
        .reduce_at(WaterMarks::new(2, 0), 0.25)
        .shed_below(WaterMarks::new(3, 0), 0u8, |_: &u32| 1u8);
    let (tx, rx) = ChannelBuilder::new(8, ChannelPolicy::Backpressure)
        .water_marks(WaterMarks::new(5, 1))
        .build_with(admission);
    for i in 0..4 {
        let mut send = pin!(tx.send_or_pause(i));
        assert_eq!(poll_once(&mut send), Poll::Ready(Ok(AfterSend::Flowing)));
    }
    assert_eq!(tx.state(), FlowState::Shedding { factor: 0.25 });
    let mut fifth = tx.send_or_pause(4);
    assert!(
        poll_once(&mut fifth).is_pending(),
        "the pause rung holds it"
    );
    drop(rx);
}

/// A publisher that ignores demand: three items right in `subscribe` (rule 1.1).
struct Rude(Arc<AtomicBool>);

struct Flag(Arc<AtomicBool>);

impl weir::RawSubscription for Flag {
    fn request(&self, _n: u64) {}
    fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl Publisher for Rude {
    type Item = u32;
    fn subscribe<S: Subscriber<u32> + Send + 'static>(self, mut subscriber: S) {
        subscriber.on_subscribe(weir::Subscription::new(Arc::new(Flag(self.0))));
        for i in 0..3 {
            subscriber.on_next(i);
        }
    }
}

#[test]
fn items_beyond_the_window_fail_the_stream_naming_rule_1_1() {
    let rt = runtime();
    let trace = Trace::default();
    let cancelled = Arc::new(AtomicBool::new(false));
    let result = rt.block_on(async {
        Rude(cancelled.clone())
            .subscribe_async(Tracing::new(&trace))
            .await
    });
    assert_eq!(result.unwrap_err().rule(), Some("1.1"));
    assert!(cancelled.load(Ordering::SeqCst), "upstream cancelled");
    let trace = trace.0.lock().unwrap();
    assert_eq!(
        trace[..2],
        ["subscribe", "next 0"],
        "the one item that fit the window"
    );
    assert!(
        trace[2].starts_with("error subscribe_async: upstream delivered more items"),
        "{}",
        trace[2]
    );
}
