//! User code that calls back into the stage it is being delivered to.
//!
//! A fused `map`, `filter`, `filter_map` or `inspect` hands its batch on as a lazy
//! iterator: the user's closure (and the `Drop` of an item a filter lets go) runs
//! when the next stage pulls items out of it. That code may call the subscription
//! the stage gave its own subscriber (`request`, `cancel`: allowed from any thread
//! and re-entrantly, rule 3.3), which can run the stage's pass on this thread, or
//! the stage's own handle (a hub's `stats`). A stage that pulled the items out
//! under its lock waited for itself for ever (merge, zip, flat_map, concat_map, the
//! time operators, the hub, the bridges). Here every stage that queues a delivery
//! is fed over a channel through a `map` whose closure, at the fifth item, calls the
//! final subscription (`request(1)`, or `cancel()`), and through a `filter` that
//! drops an item whose `Drop` cancels: the stream must end (complete or cancelled)
//! within the watchdog, with nothing left alive.
//!
//! Items a stage lets go under its lock run their `Drop` there: a time stage with
//! `errors_first` letting its held items go when an error overtakes them (their
//! `Drop` requests or cancels), and `create`'s hooks when a new one replaces them
//! (what the old one captured emits and completes). A limited `flat_map`'s closure
//! that completes an earlier inner frees a place on its own thread, where the next
//! waiting item would be mapped: it waits for the closure to return instead.
//!
//! The hub's own handle is called from a closure upstream of it, from an item's
//! `Drop` when the ring evicts it, and from an item's `Clone` (which runs under the
//! hub's lock: the call panics with a message, and that subscriber ends with
//! `Panicked`, instead of hanging).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::time::Duration;

use weir::hub::{Hub, Policy};
use weir::prelude::*;
use weir::source::channel::ChannelPolicy;
use weir::{BoxPublisher, ErrorKind, Subscriber, Subscription};

use crate::harness::watch::{assert_no_failures, PATIENCE};

/// How long a stream may take to end before the check calls it a hang.
const WATCHDOG: Duration = Duration::from_secs(20);

/// A stage under test: the channel's items (mapped) in, `u64`s out.
type Build = fn(BoxPublisher<Token>) -> BoxPublisher<u64>;

/// The stages that queue what they are handed (each gathers a delivery before its
/// lock since this check was written).
fn stages() -> Vec<(&'static str, Build)> {
    fn value(t: Token) -> u64 {
        t.value
    }
    vec![
        ("merge", |p| {
            p.map(value).merge(weir::range(100u64..101)).boxed()
        }),
        ("weir::merge", |p| {
            weir::merge(vec![p.map(value).boxed(), weir::range(100u64..101).boxed()]).boxed()
        }),
        ("zip", |p| {
            p.map(value)
                .zip(weir::range(0u64..100), |a, b| a + b)
                .boxed()
        }),
        ("flat_map (inner)", |p| {
            let once = std::sync::Mutex::new(Some(p));
            weir::just(0u64)
                .flat_map(
                    move |_| once.lock().unwrap().take().expect("one inner").map(value),
                    2,
                    4,
                )
                .boxed()
        }),
        ("concat_map (inner)", |p| {
            let once = std::sync::Mutex::new(Some(p));
            weir::just(0u64)
                .concat_map(
                    move |_| once.lock().unwrap().take().expect("one inner").map(value),
                    4,
                )
                .boxed()
        }),
        ("sample", |p| {
            p.map(value).sample(Duration::from_millis(1)).boxed()
        }),
        ("debounce", |p| {
            p.map(value).debounce(Duration::from_millis(1)).boxed()
        }),
        ("buffer_timeout", |p| {
            p.map(value)
                .buffer_timeout(4, Duration::from_millis(1))
                .map(|v| v.len() as u64)
                .boxed()
        }),
        ("timeout", |p| {
            p.map(value).timeout(Duration::from_secs(60)).boxed()
        }),
        ("share", |p| p.map(value).share(16).boxed()),
        ("on_backpressure_buffer", |p| {
            p.map(value)
                .on_backpressure_buffer(64, weir::Overflow::DropOldest)
                .boxed()
        }),
        ("conflate", |p| p.map(value).conflate(|a, b| a + b).boxed()),
        ("publish_on", |p| {
            p.map(value)
                .publish_on(weir::runtime::ThreadPool::builder().threads(1).build(), 4)
                .boxed()
        }),
    ]
}

/// An item that counts itself alive, and whose `Drop` may cancel a subscription.
struct Token {
    value: u64,
    alive: Arc<AtomicU64>,
    cancel_on_drop: Option<Arc<OnceLock<Subscription>>>,
}

impl Token {
    fn new(value: u64, alive: &Arc<AtomicU64>) -> Self {
        alive.fetch_add(1, Ordering::SeqCst);
        Token {
            value,
            alive: alive.clone(),
            cancel_on_drop: None,
        }
    }
}

impl Drop for Token {
    fn drop(&mut self) {
        if let Some(subscription) = self.cancel_on_drop.as_ref().and_then(|s| s.get()) {
            subscription.cancel();
        }
        self.alive.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Keeps the subscription where user code can reach it; requests everything.
struct Keeper(Arc<OnceLock<Subscription>>, mpsc::Sender<()>);

impl Subscriber<u64> for Keeper {
    fn on_subscribe(&mut self, subscription: Subscription) {
        let _ = self.0.set(subscription.clone());
        subscription.request(u64::MAX);
    }
    fn on_next(&mut self, _: u64) {}
    fn on_error(&mut self, _: weir::Error) {
        let _ = self.1.send(());
    }
    fn on_complete(&mut self) {
        let _ = self.1.send(());
    }
}

/// How the user code reaches back.
#[derive(Clone, Copy, Debug)]
enum Call {
    /// The `map` closure, at item 5, asks for one more.
    Request,
    /// The `map` closure, at item 5, cancels.
    Cancel,
    /// A `filter` drops item 5, whose `Drop` cancels.
    CancelFromDrop,
}

/// Run `build` over a channel of 16 items sent as one batch, the user code calling
/// back as `call` says; a failure if it does not end within the watchdog or leaves
/// items alive.
fn run(name: &str, build: Build, call: Call) -> Option<String> {
    let alive = Arc::new(AtomicU64::new(0));
    let (done_tx, done_rx) = mpsc::channel();
    let counter = alive.clone();
    std::thread::Builder::new()
        .name(format!("reentry-{name}"))
        .spawn(move || {
            let subscription: Arc<OnceLock<Subscription>> = Arc::new(OnceLock::new());
            let (tx, rx) = weir::channel::<Token>(64, ChannelPolicy::Backpressure);
            let reach = subscription.clone();
            let source = match call {
                Call::Request | Call::Cancel => rx
                    .map(move |token: Token| {
                        if token.value == 5 {
                            let s = reach.get().expect("subscribed before the send");
                            match call {
                                Call::Request => s.request(1),
                                _ => s.cancel(),
                            }
                        }
                        token
                    })
                    .boxed(),
                Call::CancelFromDrop => rx.filter(|token: &Token| token.value != 5).boxed(),
            };
            let (ended_tx, ended) = mpsc::channel();
            build(source).subscribe(Keeper(subscription.clone(), ended_tx));
            let batch = (0..16).map(|i| {
                let mut token = Token::new(i, &counter);
                if matches!(call, Call::CancelFromDrop) && i == 5 {
                    token.cancel_on_drop = Some(subscription.clone());
                }
                token
            });
            let _ = tx.try_send_all(batch);
            tx.close();
            // Completion, or a cancel (no terminal signal): either way it is over.
            let _ = ended.recv_timeout(Duration::from_secs(2));
            let _ = done_tx.send(());
        })
        .expect("spawn");
    if done_rx.recv_timeout(WATCHDOG).is_err() {
        return Some(format!(
            "{name} × {call:?}: still running after {WATCHDOG:?} (the delivering thread \
             waits for a lock it holds)"
        ));
    }
    let released =
        crate::harness::watch::wait_until(PATIENCE, || alive.load(Ordering::SeqCst) == 0);
    (!released).then(|| {
        format!(
            "{name} × {call:?}: {} items alive after the end",
            alive.load(Ordering::SeqCst)
        )
    })
}

#[test]
fn user_code_in_a_lazy_batch_may_call_the_stage_it_is_delivered_to() {
    let stages = stages();
    let mut failures = Vec::new();
    for (name, build) in &stages {
        for call in [Call::Request, Call::Cancel, Call::CancelFromDrop] {
            failures.extend(run(name, *build, call));
        }
    }
    assert_no_failures("re-entrant user code", stages.len() * 3, &failures);
}

/// Runs `f` on a thread of its own; a failure if it has not returned within the
/// watchdog.
fn within_watchdog(what: &str, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    assert!(
        rx.recv_timeout(WATCHDOG).is_ok(),
        "{what}: still running after {WATCHDOG:?}"
    );
}

#[test]
fn a_closure_upstream_of_a_hub_may_read_the_hubs_stats() {
    within_watchdog("share: stats from a map closure upstream", || {
        let cell: Arc<OnceLock<Hub<u64>>> = Arc::new(OnceLock::new());
        let reach = cell.clone();
        let hub = weir::range(0u64..100)
            .map(move |x| {
                if let Some(hub) = reach.get() {
                    assert!(hub.stats().capacity == 16);
                }
                x
            })
            .share(16);
        cell.set(hub.clone()).unwrap();
        assert_eq!(hub.collect().wait().unwrap(), (0..100).collect::<Vec<_>>());
    });
}

/// An item that calls its hub's `stats` from `Clone` and/or `Drop`.
#[derive(Debug)]
struct Calling {
    hub: Arc<OnceLock<Hub<Calling>>>,
    from_clone: bool,
    drops: Arc<AtomicU64>,
}

impl Clone for Calling {
    fn clone(&self) -> Self {
        if self.from_clone {
            if let Some(hub) = self.hub.get() {
                let _ = hub.stats();
            }
        }
        Calling {
            hub: self.hub.clone(),
            from_clone: self.from_clone,
            drops: self.drops.clone(),
        }
    }
}

impl Drop for Calling {
    fn drop(&mut self) {
        if let Some(hub) = self.hub.get() {
            let _ = hub.stats();
        }
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

/// A hub of `capacity` over `len` [`Calling`] items that reach it (from `Clone`
/// too, if `from_clone`), and the count of their drops.
fn calling_hub(len: u64, capacity: usize, from_clone: bool) -> (Hub<Calling>, Arc<AtomicU64>) {
    let cell: Arc<OnceLock<Hub<Calling>>> = Arc::new(OnceLock::new());
    let drops = Arc::new(AtomicU64::new(0));
    let (reach, counted) = (cell.clone(), drops.clone());
    let hub = weir::range(0..len)
        .map(move |_| Calling {
            hub: reach.clone(),
            from_clone,
            drops: counted.clone(),
        })
        .share(capacity);
    cell.set(hub.clone()).unwrap();
    (hub, drops)
}

#[test]
fn an_item_evicted_by_a_hub_may_read_the_hubs_stats_in_its_drop() {
    within_watchdog("share: stats from an evicted item's Drop", || {
        let (hub, drops) = calling_hub(100, 4, false);
        // A DropOldest member that reads nothing keeps a cursor (items are evicted
        // past it); a Latest one sets the pace.
        let idle = hub.join(Policy::DropOldest).blocking_iter(1);
        let got = hub.join(Policy::Latest).collect().wait().unwrap();
        assert!(!got.is_empty());
        drop(got);
        drop(idle);
        assert!(drops.load(Ordering::SeqCst) >= 100, "every item dropped");
    });
}

#[test]
fn an_items_clone_that_calls_its_hub_ends_that_subscriber_with_panicked() {
    within_watchdog("share: stats from an item's Clone", || {
        let (hub, _) = calling_hub(10, 16, true);
        let error = hub.collect().wait().expect_err("the Clone panicked");
        assert_eq!(error.kind(), ErrorKind::Panicked, "{error}");
        assert!(
            error
                .to_string()
                .contains("an item's Clone called its own hub"),
            "{error}"
        );
    });
}

/// An item whose `Drop` calls a subscription (`request(1)`, or `cancel()`) once one
/// is there.
struct CallsOnDrop {
    subscription: Arc<OnceLock<Subscription>>,
    cancel: bool,
    drops: Arc<AtomicU64>,
}

impl Drop for CallsOnDrop {
    fn drop(&mut self) {
        if let Some(s) = self.subscription.get() {
            if self.cancel {
                s.cancel();
            } else {
                s.request(1);
            }
        }
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

/// Keeps its subscription where an item can reach it; asks for one item; says when
/// the stream ended.
struct Holder<T>(
    Arc<OnceLock<Subscription>>,
    mpsc::Sender<()>,
    std::marker::PhantomData<T>,
);

impl<T> Subscriber<T> for Holder<T> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        let _ = self.0.set(subscription.clone());
        subscription.request(1);
    }
    fn on_next(&mut self, _: T) {}
    fn on_error(&mut self, _: weir::Error) {
        let _ = self.1.send(());
    }
    fn on_complete(&mut self) {
        let _ = self.1.send(());
    }
}

/// A time stage with `errors_first` lets its held items go when an error overtakes
/// them; an item's `Drop` that calls the stage's final subscription (a `request`
/// runs the stage's request path on this thread, a `cancel` its stop) must not wait
/// for the lock the stage let the item go under.
#[test]
fn an_item_a_time_stage_lets_go_at_an_error_may_call_its_subscription() {
    type Stage = fn(BoxPublisher<CallsOnDrop>, mpsc::Sender<()>, Arc<OnceLock<Subscription>>);
    let stages: [(&str, Stage); 3] = [
        ("sample", |p, ended, s| {
            p.sample(Duration::from_secs(3600))
                .errors_first()
                .subscribe(Holder(s, ended, Default::default()))
        }),
        ("debounce", |p, ended, s| {
            p.debounce(Duration::from_secs(3600))
                .errors_first()
                .subscribe(Holder(s, ended, Default::default()))
        }),
        ("buffer_timeout", |p, ended, s| {
            p.buffer_timeout(8, Duration::from_secs(3600))
                .errors_first()
                .subscribe(Holder(s, ended, Default::default()))
        }),
    ];
    let mut failures = Vec::new();
    for (name, stage) in stages {
        for cancel in [false, true] {
            let drops = Arc::new(AtomicU64::new(0));
            let counted = drops.clone();
            let (done_tx, done_rx) = mpsc::channel();
            std::thread::spawn(move || {
                let subscription = Arc::new(OnceLock::new());
                let (tx, rx) = weir::channel::<CallsOnDrop>(4, ChannelPolicy::Backpressure);
                let (ended_tx, ended) = mpsc::channel();
                stage(rx.boxed(), ended_tx, subscription.clone());
                // Held by the stage (its timer is an hour away), then overtaken.
                let item = CallsOnDrop {
                    subscription,
                    cancel,
                    drops: counted,
                };
                assert!(tx.try_send(item).is_ok(), "room");
                tx.fail(weir::Error::msg("upstream failed"));
                let _ = ended.recv_timeout(Duration::from_secs(2));
                let _ = done_tx.send(());
            });
            let what = format!(
                "{name} (errors_first) × an item's Drop that {}",
                if cancel { "cancels" } else { "requests" }
            );
            if done_rx.recv_timeout(WATCHDOG).is_err() {
                failures.push(format!("{what}: still running after {WATCHDOG:?}"));
            } else if !crate::harness::watch::wait_until(PATIENCE, || {
                drops.load(Ordering::SeqCst) == 1
            }) {
                failures.push(format!("{what}: the item was not dropped"));
            }
        }
    }
    assert_no_failures("an item let go at an error calling back", 6, &failures);
}

/// `create`'s `on_request` and `on_cancel` replace an earlier hook; what the earlier
/// hook captured is dropped then, and its `Drop` may use the emitter (here: emit and
/// complete, which run the stage's pass on this thread).
#[test]
fn a_create_hook_replaced_may_drop_what_uses_its_emitter() {
    struct Emits(Option<weir::source::Emitter<u64>>);
    impl Drop for Emits {
        fn drop(&mut self) {
            if let Some(emitter) = self.0.take() {
                let _ = emitter.emit(7);
                emitter.complete();
            }
        }
    }
    for replacing_cancel in [false, true] {
        within_watchdog(
            &format!(
                "create: replacing its {} hook",
                if replacing_cancel {
                    "on_cancel"
                } else {
                    "on_request"
                }
            ),
            move || {
                let source = weir::create(move |emitter: weir::source::Emitter<u64>| {
                    let held = Emits(Some(emitter.clone()));
                    if replacing_cancel {
                        emitter.on_cancel(move || drop(held));
                        emitter.on_cancel(|| {});
                    } else {
                        emitter.on_request(move |_| {
                            let _ = &held;
                        });
                        emitter.on_request(|_| {});
                    }
                });
                let got = source.collect().wait().expect("completes");
                assert_eq!(got, vec![7]);
            },
        );
    }
}

/// `flat_map` with a limiter maps items one at a time; a closure that completes an
/// earlier inner (dropping its channel's sender) frees a place on this thread while
/// an item waits for one (the limit went down, then up): that item waits for the
/// closure to return instead of for the closure's own lock.
#[test]
fn a_limited_flat_maps_closure_may_complete_an_earlier_inner() {
    #[derive(Clone)]
    struct Dial(Arc<AtomicU64>);
    impl weir::limit::Limiter for Dial {
        fn limit(&self) -> usize {
            self.0.load(Ordering::SeqCst) as usize
        }
        fn on_sample(&mut self, _: Duration, _: usize) {}
    }
    within_watchdog("flat_map.limit: f completes an earlier inner", || {
        let dial = Dial(Arc::new(AtomicU64::new(3)));
        let open: Arc<std::sync::Mutex<Vec<weir::source::Sender<u64>>>> = Arc::default();
        let (tx, rx) = weir::channel::<u64>(8, ChannelPolicy::Backpressure);
        let keep = open.clone();
        let handle = rx
            .flat_map(
                move |i| -> BoxPublisher<u64> {
                    if i == 0 {
                        let (tx, rx) = weir::channel::<u64>(4, ChannelPolicy::Backpressure);
                        keep.lock().unwrap().push(tx);
                        return rx.boxed();
                    }
                    if i == 1 {
                        // Inner 0 completes here, on this thread, inside `f`.
                        let senders = std::mem::take(&mut *keep.lock().unwrap());
                        drop(senders);
                    }
                    weir::just(i).boxed()
                },
                3,
                4,
            )
            .limit(dial.clone())
            .collect();
        tx.try_send(0).unwrap(); // starts inner 0 (asked for 3 under a limit of 3)
        dial.0.store(1, Ordering::SeqCst);
        tx.try_send(1).unwrap(); // waits: one place, held by inner 0
        dial.0.store(2, Ordering::SeqCst);
        // Arrives and waits behind item 1, which starts: its `f` completes inner 0,
        // whose place goes to item 2 on this thread, inside `f`.
        tx.try_send(2).unwrap();
        drop(tx);
        let mut got = handle.wait().expect("completes");
        got.sort_unstable();
        assert_eq!(got, vec![1, 2]);
        drop(open);
    });
}
