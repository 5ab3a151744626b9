//! The schedulers (mirrors `src/runtime/`): what runs where and when, counted and
//! ordered, never timed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use weir::runtime::{Immediate, Scheduler, ThreadPool, Tokio, VirtualTime};

fn log() -> (
    Arc<Mutex<Vec<&'static str>>>,
    impl Fn(&'static str) -> weir::runtime::Task,
) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let writer = log.clone();
    let task = move |name: &'static str| -> weir::runtime::Task {
        let writer = writer.clone();
        Box::new(move || writer.lock().unwrap().push(name))
    };
    (log, task)
}

#[test]
fn immediate_runs_on_the_calling_thread_before_returning() {
    let here = std::thread::current().id();
    let (tx, rx) = mpsc::channel();
    Immediate.schedule(Box::new(move || {
        tx.send(std::thread::current().id()).unwrap()
    }));
    assert_eq!(rx.try_recv().unwrap(), here);
}

#[test]
fn virtual_time_runs_tasks_in_due_order_with_ties_in_scheduling_order() {
    let vt = VirtualTime::new();
    let (log, task) = log();
    vt.schedule_after(Duration::from_secs(3), task("c@3"));
    vt.schedule_after(Duration::from_secs(1), task("a@1"));
    vt.schedule_after(Duration::from_secs(1), task("b@1"));
    vt.schedule(task("now"));
    assert_eq!(vt.pending(), 4);
    assert!(
        log.lock().unwrap().is_empty(),
        "nothing runs until the clock is driven"
    );

    vt.run_ready();
    assert_eq!(*log.lock().unwrap(), ["now"]);
    vt.advance(Duration::from_millis(2_500));
    assert_eq!(*log.lock().unwrap(), ["now", "a@1", "b@1"]);
    assert_eq!(vt.elapsed(), Duration::from_millis(2_500));
    vt.advance_to(Duration::from_secs(3));
    assert_eq!(*log.lock().unwrap(), ["now", "a@1", "b@1", "c@3"]);
    assert_eq!(vt.pending(), 0);
}

#[test]
fn virtual_time_sets_the_clock_to_each_tasks_due_time_and_runs_what_tasks_schedule() {
    let vt = VirtualTime::new();
    let start = vt.now();
    let seen = Arc::new(Mutex::new(Vec::new()));
    // A task that re-arms itself every second, three times, recording the clock.
    fn tick(vt: VirtualTime, start: std::time::Instant, seen: Arc<Mutex<Vec<Duration>>>) {
        let clock = vt.clone();
        vt.schedule_after(
            Duration::from_secs(1),
            Box::new(move || {
                let mut s = seen.lock().unwrap();
                s.push(clock.now() - start);
                if s.len() < 3 {
                    drop(s);
                    tick(clock, start, seen);
                }
            }),
        );
    }
    tick(vt.clone(), start, seen.clone());
    vt.advance(Duration::from_secs(10));
    assert_eq!(
        *seen.lock().unwrap(),
        [1, 2, 3].map(Duration::from_secs),
        "each run saw its own due time"
    );
    assert_eq!(vt.now() - start, Duration::from_secs(10));
}

/// A task due past the clock's last instant stays queued but is never due: the
/// documented driver loop (advance to each `next_due`) ends instead of spinning on
/// a due time the clock cannot reach.
#[test]
fn virtual_time_never_reports_a_task_past_its_horizon_as_due() {
    let vt = VirtualTime::new();
    let ran = Arc::new(Mutex::new(Vec::new()));
    for (delay, name) in [(Duration::MAX, "never"), (Duration::from_secs(5), "soon")] {
        let ran = ran.clone();
        vt.schedule_after(delay, Box::new(move || ran.lock().unwrap().push(name)));
    }
    let mut steps = 0;
    while let Some(due) = vt.next_due() {
        vt.advance_to(due);
        steps += 1;
        assert!(steps <= 1, "the driver loop goes on after {steps} steps");
    }
    assert_eq!(*ran.lock().unwrap(), ["soon"]);
    assert_eq!(
        vt.pending(),
        1,
        "the task that never falls due stays queued"
    );
}

#[test]
fn a_panicking_task_does_not_stop_virtual_time_or_a_pool() {
    let vt = VirtualTime::new();
    let (log, task) = log();
    vt.schedule(Box::new(|| panic!("task panics")));
    vt.schedule(task("after"));
    vt.run_ready();
    assert_eq!(*log.lock().unwrap(), ["after"]);

    let pool = ThreadPool::new(1);
    let (tx, rx) = mpsc::channel();
    pool.schedule(Box::new(|| panic!("task panics")));
    pool.schedule(Box::new(move || tx.send(()).unwrap()));
    rx.recv_timeout(Duration::from_secs(10))
        .expect("the worker survived the panic");
}

#[test]
fn thread_pool_runs_every_task_on_its_named_workers() {
    let pool = ThreadPool::builder().name("rt-test").threads(2).build();
    let (tx, rx) = mpsc::channel();
    for i in 0..1_000 {
        let tx = tx.clone();
        pool.schedule(Box::new(move || {
            let name = std::thread::current().name().unwrap_or("").to_owned();
            tx.send((i, name)).unwrap();
        }));
    }
    drop(tx);
    let mut got: Vec<_> = rx.iter().collect();
    got.sort();
    assert_eq!(got.len(), 1_000);
    assert!(got.iter().enumerate().all(|(i, (j, _))| i == *j));
    assert!(got.iter().all(|(_, name)| name.starts_with("rt-test-")));
}

#[test]
fn thread_pool_timers_fire_in_deadline_order_and_not_early() {
    let pool = ThreadPool::new(1);
    let (tx, rx) = mpsc::channel();
    let start = pool.now();
    for (delay, name) in [(30, "c"), (10, "a"), (20, "b")] {
        let tx = tx.clone();
        let clock = pool.clone();
        pool.schedule_after(
            Duration::from_millis(delay),
            Box::new(move || tx.send((name, clock.now() - start)).unwrap()),
        );
    }
    drop(tx);
    let fired: Vec<_> = rx.iter().collect();
    assert_eq!(
        fired.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        ["a", "b", "c"]
    );
    for ((_, at), min) in fired.iter().zip([10, 20, 30]) {
        assert!(
            *at >= Duration::from_millis(min),
            "{at:?} fired before {min} ms"
        );
    }
}

#[test]
fn dropping_the_last_pool_handle_stops_its_workers() {
    let pool = ThreadPool::builder().name("rt-drop").threads(1).build();
    let ran = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = mpsc::channel();
    let counter = ran.clone();
    pool.schedule(Box::new(move || {
        counter.fetch_add(1, Ordering::SeqCst);
        tx.send(()).unwrap();
    }));
    rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let later = ran.clone();
    pool.schedule_after(
        Duration::from_secs(3_600),
        Box::new(move || {
            later.fetch_add(1, Ordering::SeqCst);
        }),
    );
    drop(pool);
    // The hour-long timer was dropped with the pool, releasing what it captured.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while Arc::strong_count(&ran) > 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "queued task never released"
        );
        std::thread::yield_now();
    }
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

#[test]
#[should_panic(expected = "ThreadPool threads must be at least 1 (got 0)")]
fn a_pool_without_threads_is_refused() {
    let _ = ThreadPool::new(0);
}

#[test]
fn tokio_runs_tasks_on_the_runtime_and_reads_its_paused_clock() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    let scheduler = Tokio::new(rt.handle().clone());
    let start = scheduler.now();
    let (tx, rx) = mpsc::channel();
    let clock = scheduler.clone();
    scheduler.schedule_after(
        Duration::from_secs(60),
        Box::new(move || tx.send(clock.now() - start).unwrap()),
    );
    // With time paused, the runtime jumps the clock straight to the timer.
    rt.block_on(async { tokio::time::sleep(Duration::from_secs(61)).await });
    assert_eq!(rx.try_recv().unwrap(), Duration::from_secs(60));
}

/// `current_thread_is_sole_worker`: true only on the worker of a pool of one thread
/// (asked about that pool, directly or through an `Arc<dyn Scheduler>`); false on any
/// other thread, on a worker of a larger pool, and on the schedulers that cannot tell.
#[test]
fn only_the_worker_of_a_one_thread_pool_is_its_sole_worker() {
    let ask = |on: &ThreadPool, about: ThreadPool| {
        let (tx, rx) = mpsc::channel();
        on.schedule(Box::new(move || {
            let shared: Arc<dyn Scheduler> = Arc::new(about.clone());
            let answers = (
                about.current_thread_is_sole_worker(),
                shared.current_thread_is_sole_worker(),
            );
            tx.send(answers).unwrap();
        }));
        rx.recv_timeout(Duration::from_secs(60)).unwrap()
    };
    let solo = ThreadPool::builder().name("solo").threads(1).build();
    let other = ThreadPool::builder().name("other").threads(1).build();
    let pair = ThreadPool::builder().name("pair").threads(2).build();
    assert_eq!(ask(&solo, solo.clone()), (true, true), "its own worker");
    assert_eq!(
        ask(&other, solo.clone()),
        (false, false),
        "another pool's worker"
    );
    assert_eq!(ask(&pair, pair.clone()), (false, false), "a pool of two");
    assert!(!solo.current_thread_is_sole_worker(), "not a worker at all");
    assert!(!Immediate.current_thread_is_sole_worker());
    assert!(!VirtualTime::new().current_thread_is_sole_worker());
}

/// `has_waiting_tasks`: a pool says so while a task waits for its one busy worker,
/// virtual time while a task is due now (not one due later), and the schedulers
/// that cannot tell say false.
#[test]
fn schedulers_say_when_tasks_wait_for_a_thread() {
    let pool = ThreadPool::builder().name("busy").threads(1).build();
    let (started_tx, started) = mpsc::channel();
    let (release, release_rx) = mpsc::channel::<()>();
    pool.schedule(Box::new(move || {
        started_tx.send(()).unwrap();
        release_rx.recv().unwrap();
    }));
    started.recv().unwrap();
    assert!(!pool.has_waiting_tasks(), "the only task is running");
    let (ran_tx, ran) = mpsc::channel();
    pool.schedule(Box::new(move || ran_tx.send(()).unwrap()));
    assert!(
        pool.has_waiting_tasks(),
        "the second task waits for the worker"
    );
    release.send(()).unwrap();
    ran.recv_timeout(Duration::from_secs(60)).unwrap();
    assert!(!pool.has_waiting_tasks(), "both tasks ran");

    let vt = VirtualTime::new();
    vt.schedule_after(Duration::from_secs(1), Box::new(|| {}));
    assert!(!vt.has_waiting_tasks(), "a task due later does not wait");
    vt.schedule(Box::new(|| {}));
    assert!(vt.has_waiting_tasks(), "a task due now waits");
    vt.advance(Duration::from_secs(1));
    assert!(!vt.has_waiting_tasks(), "everything due ran");

    assert!(!Immediate.has_waiting_tasks());
}

// ---- DefaultPool -------------------------------------------------------------------

mod default_pool {
    use super::*;
    use weir::prelude::*;
    use weir::runtime::DefaultPool;

    #[test]
    fn it_is_one_pool_for_the_process_with_named_workers() {
        let pool = DefaultPool::get();
        assert!(pool.threads() >= 2);
        let (tx, rx) = mpsc::channel();
        for _ in 0..4 {
            let tx = tx.clone();
            DefaultPool::get().schedule(Box::new(move || {
                let _ = tx.send(std::thread::current().name().map(str::to_owned));
            }));
        }
        for _ in 0..4 {
            let name = rx.recv_timeout(Duration::from_secs(10)).unwrap().unwrap();
            assert!(name.starts_with("weir-default-"), "{name}");
        }
    }

    #[test]
    fn timers_run_there_after_their_delay() {
        let (tx, rx) = mpsc::channel();
        let pool = DefaultPool::get();
        let armed = pool.now();
        pool.schedule_after(
            Duration::from_millis(5),
            Box::new(move || {
                let _ = tx.send(DefaultPool::get().now());
            }),
        );
        let fired = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(fired >= armed + Duration::from_millis(5));
    }

    /// The sharp edge: every time operator has a form that needs no
    /// scheduler (`sample(period)` compiled to E0061 before), and they compose.
    #[test]
    fn every_time_operator_runs_without_a_scheduler() {
        use weir::operators::{Rate, ThrottleMode};
        let ms = Duration::from_millis;
        let ticks = weir::interval(ms(1))
            .sample(ms(2))
            .timeout(Duration::from_secs(60))
            .throttle(Rate::per_second(10_000), 4, ThrottleMode::Shaping)
            .buffer_timeout(2, Duration::from_secs(60))
            .take(3)
            .collect()
            .wait()
            .unwrap();
        assert_eq!(ticks.len(), 3);
        assert!(ticks.iter().all(|batch| batch.len() == 2));
        let flat: Vec<u64> = ticks.into_iter().flatten().collect();
        assert!(flat.windows(2).all(|w| w[0] < w[1]), "{flat:?}");
        let settled = weir::timer(ms(1)).debounce(ms(5)).collect().wait().unwrap();
        assert_eq!(settled, [0]);
    }
}

/// What a test subscriber saw: items, the terminal, and its subscription.
#[derive(Default)]
struct Seen {
    items: Vec<u64>,
    end: Option<Result<(), weir::ErrorKind>>,
    subscription: Option<weir::Subscription>,
}

/// A subscriber that records into `Seen` and requests nothing by itself; `on_item`
/// runs for each item on the delivering thread.
struct Recorder<F> {
    seen: Arc<Mutex<Seen>>,
    on_item: F,
}

impl<F: FnMut(u64) + Send> weir::Subscriber<u64> for Recorder<F> {
    fn on_subscribe(&mut self, subscription: weir::Subscription) {
        self.seen.lock().unwrap().subscription = Some(subscription);
    }
    fn on_next(&mut self, item: u64) {
        self.seen.lock().unwrap().items.push(item);
        (self.on_item)(item);
    }
    fn on_error(&mut self, error: weir::Error) {
        self.seen.lock().unwrap().end = Some(Err(error.kind()));
    }
    fn on_complete(&mut self) {
        self.seen.lock().unwrap().end = Some(Ok(()));
    }
}

fn request(seen: &Mutex<Seen>, n: u64) {
    let subscription = seen
        .lock()
        .unwrap()
        .subscription
        .clone()
        .expect("subscribed");
    subscription.request(n);
}

/// A scheduled stage on `Tokio` runs on one long-lived tokio task per subscription
/// (its lane): at most one task of it is alive while it runs, and none once it ended,
/// whether it completed or was cancelled.
#[test]
fn a_stage_on_tokio_runs_on_one_task_that_ends_with_the_subscription() {
    use futures::StreamExt as _;
    use weir::prelude::*;

    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let alive = || {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    };
    let (sum, most_alive) = rt.block_on(async move {
        let mut stream =
            weir::bridge::from_stream_on(futures::stream::iter(0..10_000u64), Tokio::current())
                .into_stream(16);
        let (mut sum, mut most_alive) = (0u64, 0);
        while let Some(item) = stream.next().await {
            sum += item.unwrap();
            most_alive = most_alive.max(alive());
        }
        (sum, most_alive)
    });
    assert_eq!(sum, (0..10_000u64).sum::<u64>());
    assert_eq!(
        most_alive, 1,
        "one lane task per subscription while it runs"
    );
    // The lane's task ends with its subscription (it completed above).
    rt.block_on(async { tokio::task::yield_now().await });
    assert_eq!(rt.block_on(async move { alive() }), 0);

    // Cancelled half-way: the task ends too.
    rt.block_on(async move {
        let mut stream =
            weir::bridge::from_stream_on(futures::stream::iter(0..10_000u64), Tokio::current())
                .into_stream(16);
        for expected in 0..100 {
            assert_eq!(stream.next().await.unwrap().unwrap(), expected);
        }
        assert_eq!(alive(), 1);
        drop(stream);
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
        assert_eq!(alive(), 0, "the cancelled subscription's lane task ended");
    });
}

/// A stage that always has work gives its worker back between turns: on a
/// current-thread runtime, a task spawned while it delivers runs long before the
/// stream ends.
#[test]
fn a_busy_stage_on_a_tokio_lane_lets_the_runtimes_other_tasks_run() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let delivered_when_ticked = Arc::new(Mutex::new(None));
    let (delivered, ticked) = (Arc::new(AtomicUsize::new(0)), delivered_when_ticked.clone());
    let counter = delivered.clone();
    const N: u64 = 200_000;
    rt.block_on(async {
        let on_item = move |item: u64| {
            counter.fetch_add(1, Ordering::Relaxed);
            if item == 0 {
                let (delivered, ticked) = (counter.clone(), ticked.clone());
                // Queued behind the stage's current turn.
                tokio::spawn(async move {
                    *ticked.lock().unwrap() = Some(delivered.load(Ordering::Relaxed));
                });
            }
        };
        use weir::Publisher as _;
        weir::bridge::from_stream_on(futures::stream::iter(0..N), Tokio::current()).subscribe(
            Recorder {
                seen: seen.clone(),
                on_item,
            },
        );
        request(&seen, u64::MAX);
        while seen.lock().unwrap().end.is_none() {
            tokio::task::yield_now().await;
        }
    });
    let seen = seen.lock().unwrap();
    assert_eq!(seen.end, Some(Ok(())));
    assert_eq!(seen.items.len() as u64, N);
    let ticked = delivered_when_ticked
        .lock()
        .unwrap()
        .expect("the spawned task ran");
    assert!(
        (ticked as u64) < N,
        "the other task ran only after all {N} items ({ticked} delivered by then)"
    );
    assert_eq!(delivered.load(Ordering::Relaxed) as u64, N);
}

/// A runtime shut down while a stage's lane task waits: the next request finds the
/// lane gone, and the subscription ends with a `SchedulerShutdown` error on the
/// requesting thread, nothing hangs.
#[test]
fn a_request_after_the_runtime_shut_down_ends_the_stream_with_scheduler_shutdown() {
    use weir::Publisher as _;

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()
        .unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    weir::bridge::from_stream_on(
        futures::stream::iter(0..1_000u64),
        Tokio::new(rt.handle().clone()),
    )
    .subscribe(Recorder {
        seen: seen.clone(),
        on_item: |_| {},
    });
    request(&seen, 3);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while seen.lock().unwrap().items.len() < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "the first items arrive"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    rt.shutdown_timeout(Duration::from_secs(5));
    request(&seen, 3);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.items, vec![0, 1, 2], "nothing after the shutdown");
    assert_eq!(seen.end, Some(Err(weir::ErrorKind::SchedulerShutdown)));
}
