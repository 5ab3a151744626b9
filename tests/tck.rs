//! The conformance kit run on weir itself: every source and operator through the
//! publisher suite, the sinks through both subscriber suites, and a small identity
//! processor through the processor suite. One `#[test]` per conformance test (the
//! `*_tck!` macros), so suites on different publishers run in parallel.
//!
//! Timeouts: the default 200 ms for expected signals, but 50 ms quiet windows (every
//! publisher here is synchronous, so a violation shows up at once) and 20 stochastic
//! iterations, to keep the run short on two cores.

#[path = "support/identity_processor.rs"]
mod identity_processor;
#[path = "support/multicast_processor.rs"]
mod multicast_processor;
#[path = "support/valve.rs"]
#[allow(dead_code)] // the handle is for the lossy proptests
mod valve;
#[path = "support/virtual_clock.rs"]
mod virtual_clock;

use std::time::Duration;

use identity_processor::Identity;
use multicast_processor::Multicast;
use weir::prelude::*;
use weir::source::Step;
use weir::tck::{
    capture_subscriber, ProbedSubscriber, ProcessorVerification, PublisherVerification,
    SubscriberBlackboxVerification, SubscriberPuppet, SubscriberWhiteboxVerification, TestEnv,
    TestSubscriber,
};
use weir::Error;

fn env() -> TestEnv {
    TestEnv::builder()
        .no_signals_timeout(Duration::from_millis(50))
        .build()
}

/// The shared configuration: `weir::error` as the failed publisher, cloned
/// subscriptions for rule 1.11, short quiet windows.
fn verify<P, F>(factory: F) -> PublisherVerification<P>
where
    P: Publisher<Item = u64> + Clone + 'static,
    F: Fn(u64) -> P + Send + Sync + 'static,
{
    PublisherVerification::new(factory)
        .with_failed_publisher(|| weir::error::<u64>(Error::msg("failed on purpose")))
        .with_multi_subscribe()
        .stochastic_iterations(20)
        .env(env())
}

// ---- publishers -------------------------------------------------------------------

weir::publisher_tck!(range, verify(|n| weir::range(0..n)));
// The one-line form, with the default timeouts.
weir::publisher_tck!(range_defaults, |n| weir::range(0..n));
weir::publisher_tck!(map, verify(|n| weir::range(0..n).map(|x| x * 2)));
weir::publisher_tck!(
    filter,
    verify(|n| weir::range(0..n.saturating_mul(3)).filter(|x| x % 3 == 1))
);
weir::publisher_tck!(take, verify(|n| weir::range(0..u64::MAX).take(n)));
weir::publisher_tck!(
    filter_map,
    verify(|n| weir::range(0..n.saturating_mul(3)).filter_map(|x| (x % 3 == 1).then_some(x / 3)))
);
weir::publisher_tck!(
    skip,
    verify(|n| weir::range(0..n.saturating_add(5)).skip(5))
);
weir::publisher_tck!(
    take_while,
    verify(|n| weir::range(0..u64::MAX).take_while(move |x| *x < n))
);
weir::publisher_tck!(
    skip_while,
    verify(|n| weir::range(0..n.saturating_add(5)).skip_while(|x| *x < 5))
);
weir::publisher_tck!(scan, verify(|n| weir::range(0..n).scan(0, |a, x| a + x)));
// One result per stream: 0 elements from an empty source, 1 from a non-empty one.
weir::publisher_tck!(
    reduce,
    verify(|n| weir::range(0..5 * n.min(1)).reduce(|a, b| a + b)).max_elements(1)
);
weir::publisher_tck!(inspect, verify(|n| weir::range(0..n).inspect(|_| {})));
weir::publisher_tck!(
    inspect_request,
    verify(|n| weir::range(0..n).inspect_request(|_| {}))
);
weir::publisher_tck!(
    inspect_cancel,
    verify(|n| weir::range(0..n).inspect_cancel(|| {}))
);
weir::publisher_tck!(
    chain,
    verify(|n| {
        weir::range(0..u64::MAX)
            .map(|x| x + 1)
            .filter(|x| x % 2 == 0)
            .take(n)
            .map(|x| x / 2)
    })
);
weir::publisher_tck!(from_iter, verify(|n| weir::from_iter(0..n)));
// `just` makes one element; the TCK also asks for 0 elements, which is `empty` (the
// same type).
weir::publisher_tck!(
    just,
    verify(|n| if n == 0 {
        weir::empty()
    } else {
        weir::just(42)
    })
    .max_elements(1)
);
weir::publisher_tck!(empty, verify(|_| weir::empty()).max_elements(0));
weir::publisher_tck!(
    generate,
    verify(|n| {
        weir::generate(0u64, move |i| {
            if *i < n {
                *i += 1;
                Step::Next(*i - 1)
            } else {
                Step::Complete
            }
        })
    })
);
weir::publisher_tck!(
    generate_last,
    verify(|n| {
        // n items, the last one with `Step::Last`; an empty stream for 0.
        weir::generate(0u64, move |i| {
            *i += 1;
            match (*i).cmp(&n) {
                std::cmp::Ordering::Less => Step::Next(*i - 1),
                std::cmp::Ordering::Equal => Step::Last(*i - 1),
                std::cmp::Ordering::Greater => Step::Complete,
            }
        })
    })
);
weir::publisher_tck!(
    from_fn,
    verify(|n| {
        let mut next = 0u64;
        weir::from_fn(move || {
            (next < n).then(|| {
                next += 1;
                next - 1
            })
        })
    })
);
weir::publisher_tck!(
    unfold,
    verify(|n| weir::unfold(0u64, move |i| (i < n).then_some((i, i + 1))))
);
// Items emitted from the request hook, on the requesting thread: the emitter never
// accepts an item beyond demand.
weir::publisher_tck!(
    create_on_request,
    verify(|n| {
        weir::create(move |emitter| {
            let mut items = 0..n;
            let e = emitter.clone();
            emitter.on_request(move |_| {
                while e.requested() > 0 {
                    match items.next() {
                        Some(i) => {
                            if e.emit(i).is_err() {
                                return;
                            }
                        }
                        None => {
                            e.complete();
                            return;
                        }
                    }
                }
            });
            if n == 0 {
                emitter.complete();
            }
        })
    })
);
// A producer thread that waits for demand.
weir::publisher_tck!(
    create_thread,
    verify(|n| {
        weir::create(move |emitter| {
            std::thread::spawn(move || {
                for i in 0..n {
                    if emitter.send_blocking(i).is_err() {
                        return;
                    }
                }
            });
        })
    })
);
weir::publisher_tck!(defer, verify(|n| weir::defer(move || weir::range(0..n))));
weir::publisher_tck!(
    buffer,
    verify(|n| weir::range(0..n.saturating_mul(3)).buffer(3).map(|b| b[0]))
);
weir::publisher_tck!(limit_rate, verify(|n| weir::range(0..n).limit_rate(16, 12)));
// A lossy stage fed by an eager source drops what the kit has not requested yet, so
// the kit's exact counts cannot hold. `mirrored` feeds the stage from a source that
// releases one item per item the kit requests (after the request reached the stage):
// every item then arrives while downstream has demand, nothing is dropped, and the
// whole suite applies to the stage's demand, ordering and terminal behaviour.
weir::publisher_tck!(
    on_backpressure_drop,
    verify(|n| valve::mirrored(n, |s| s.on_backpressure_drop()))
);
weir::publisher_tck!(
    on_backpressure_buffer,
    verify(|n| valve::mirrored(n, |s| s.on_backpressure_buffer(2, weir::Overflow::Error)))
);
weir::publisher_tck!(
    on_backpressure_latest,
    verify(|n| valve::mirrored(n, |s| s.on_backpressure_latest()))
);
// Under the mirrored source nothing is ever held, so nothing is merged: a merge
// would panic and fail the suite.
weir::publisher_tck!(
    conflate,
    verify(|n| valve::mirrored(n, |s| s.conflate(|_, _| panic!("nothing to merge"))))
);
weir::publisher_tck!(
    conflate_latest,
    verify(|n| valve::mirrored(n, |s| s.conflate_latest()))
);
// Boxed publishers are not `Clone`: the rule 1.11 tests skip.
weir::publisher_tck!(
    boxed,
    PublisherVerification::new(|n| weir::range(0..n).map(|x| x + 1).boxed())
        .stochastic_iterations(20)
        .env(env())
);

// ---- multi-source operators ----------------------------------------------

weir::publisher_tck!(
    merge,
    verify(|n| weir::range(0..n / 2).merge(weir::range(n / 2..n)))
);
weir::publisher_tck!(
    merge_all,
    verify(|n| weir::merge(vec![weir::range(0..n / 3), weir::range(n / 3..n)]))
);
weir::publisher_tck!(
    concat,
    verify(|n| weir::range(0..n / 2).concat(weir::range(n / 2..n)))
);
weir::publisher_tck!(
    flat_map,
    verify(|n| weir::range(0..n).flat_map(weir::just, 4, 2))
);
weir::publisher_tck!(
    concat_map,
    verify(|n| weir::range(0..n).concat_map(weir::just, 2))
);
weir::publisher_tck!(
    zip,
    verify(|n| weir::range(0..n).zip(weir::range(0..u64::MAX), |a, b| a + b))
);

// ---- time operators and sources ---------------------------------
//
// Every time stage runs on `virtual_clock::driven_clock()`: a shared `VirtualTime`
// that a background driver runs at 20× real time (see tests/support/virtual_clock.rs
// for why that keeps the kit's real-time waits short and its checks deterministic).
// Timeouts and batch periods that must not fire are 10 s of virtual time (0.5 s real,
// far above any scheduling hiccup). Where a stage holds items for a while (`sample`,
// `debounce`, `buffer_timeout` by time), the kit's exact counts need each item to
// arrive on its own: `spaced` feeds the stage from a mirrored valve (one item per item
// the kit requests) whose items are each delayed by a 10 ms `timer`, one at a time, so
// the stage's 5–7 ms period or quiet time closes before the next item arrives and
// nothing is replaced.

mod time_tck {
    use super::virtual_clock::{driven_clock, ms};
    use super::*;
    use weir::operators::{Rate, ThrottleMode};

    /// `source`, each item delayed by 10 ms on the driven clock, one at a time.
    pub(super) fn spaced(source: valve::ValveSource) -> impl Publisher<Item = u64> {
        source.concat_map(
            |x| weir::timer_on(ms(10), driven_clock()).map(move |_| x),
            1,
        )
    }

    pub(super) fn interval(n: u64) -> impl Publisher<Item = u64> + Clone {
        weir::interval_on(ms(10), driven_clock()).take(n)
    }

    pub(super) fn timer(n: u64) -> impl Publisher<Item = u64> + Clone {
        weir::timer_on(ms(10), driven_clock()).take(n)
    }

    pub(super) fn sample(n: u64) -> impl Publisher<Item = u64> + Clone {
        valve::mirrored(n, |s| spaced(s).sample_on(ms(7), driven_clock()))
    }

    pub(super) fn debounce(n: u64) -> impl Publisher<Item = u64> + Clone {
        valve::mirrored(n, |s| spaced(s).debounce_on(ms(5), driven_clock()))
    }

    pub(super) fn timeout(n: u64) -> impl Publisher<Item = u64> + Clone {
        weir::range(0..n).timeout_on(ms(10_000), driven_clock())
    }

    pub(super) fn timeout_spaced(n: u64) -> impl Publisher<Item = u64> + Clone {
        valve::mirrored(n, |s| spaced(s).timeout_on(ms(10_000), driven_clock()))
    }

    pub(super) fn buffer_timeout(n: u64) -> impl Publisher<Item = u64> + Clone {
        weir::range(0..n.saturating_mul(3))
            .buffer_timeout_on(3, ms(10_000), driven_clock())
            .map(|b| b[0])
    }

    pub(super) fn buffer_timeout_by_time(n: u64) -> impl Publisher<Item = u64> + Clone {
        valve::mirrored(n, |s| {
            spaced(s)
                .buffer_timeout_on(100, ms(5), driven_clock())
                .map(|b| b[0])
        })
    }

    pub(super) fn throttle_shaping(n: u64) -> impl Publisher<Item = u64> + Clone {
        weir::range(0..n).throttle_on(
            Rate::new(1, ms(2)),
            2,
            ThrottleMode::Shaping,
            driven_clock(),
        )
    }

    pub(super) fn throttle_enforcing(n: u64) -> impl Publisher<Item = u64> + Clone {
        // A bucket larger than any stream the kit asks for: nothing is rejected.
        weir::range(0..n).throttle_on(
            Rate::new(1, ms(1)),
            1 << 30,
            ThrottleMode::Enforcing,
            driven_clock(),
        )
    }
}

weir::publisher_tck!(interval, verify(time_tck::interval));
weir::publisher_tck!(timer, verify(time_tck::timer).max_elements(1));
weir::publisher_tck!(sample, verify(time_tck::sample));
weir::publisher_tck!(debounce, verify(time_tck::debounce));
weir::publisher_tck!(timeout, verify(time_tck::timeout));
weir::publisher_tck!(timeout_spaced, verify(time_tck::timeout_spaced));
weir::publisher_tck!(buffer_timeout, verify(time_tck::buffer_timeout));
weir::publisher_tck!(
    buffer_timeout_by_time,
    verify(time_tck::buffer_timeout_by_time)
);
weir::publisher_tck!(throttle_shaping, verify(time_tck::throttle_shaping));
weir::publisher_tck!(throttle_enforcing, verify(time_tck::throttle_enforcing));

// ---- async boundaries ---------------------------------------------------

// Items cross threads: a pool of two workers, so subscribe_on's upstream and
// publish_on's drain run on different threads.
weir::publisher_tck!(
    publish_on,
    verify({
        let pool = weir::runtime::ThreadPool::new(2);
        move |n| weir::range(0..n).publish_on(pool.clone(), 16)
    })
);
weir::publisher_tck!(
    publish_on_prefetch_1,
    verify({
        let pool = weir::runtime::ThreadPool::new(2);
        move |n| weir::range(0..n).publish_on(pool.clone(), 1)
    })
);
weir::publisher_tck!(
    subscribe_on,
    verify({
        let pool = weir::runtime::ThreadPool::new(2);
        move |n| weir::range(0..n).subscribe_on(pool.clone())
    })
);
weir::publisher_tck!(
    subscribe_on_publish_on,
    verify({
        let pool = weir::runtime::ThreadPool::new(2);
        move |n| {
            weir::range(0..n)
                .subscribe_on(pool.clone())
                .publish_on(pool.clone(), 8)
        }
    })
);

// ---- sinks --------------------------------------------------------------------------

weir::subscriber_blackbox_tck!(
    fold_blackbox,
    SubscriberBlackboxVerification::new(
        || capture_subscriber::<u64, _>(|p| p.fold_with(4, 0, |a, x| a + x)).0,
        |i| i
    )
    .env(env())
);
weir::subscriber_blackbox_tck!(
    for_each_blackbox,
    SubscriberBlackboxVerification::new(
        || capture_subscriber::<u64, _>(|p| p.for_each_with(1, drop)).0,
        |i| i
    )
    .env(env())
);
weir::subscriber_blackbox_tck!(
    collect_blackbox,
    SubscriberBlackboxVerification::new(|| capture_subscriber::<u64, _>(|p| p.collect()).0, |i| i)
        .env(env())
);

weir::subscriber_whitebox_tck!(
    fold_whitebox,
    SubscriberWhiteboxVerification::new(
        |probe| {
            let (sink, handle) = capture_subscriber::<u64, _>(|p| p.fold_with(4, 0, |a, x| a + x));
            ProbedSubscriber::with_puppet(sink, probe, handle)
        },
        |i| i
    )
    .env(env())
);
weir::subscriber_whitebox_tck!(
    for_each_whitebox,
    SubscriberWhiteboxVerification::new(
        |probe| {
            let (sink, handle) = capture_subscriber::<u64, _>(|p| p.for_each_with(1, drop));
            ProbedSubscriber::with_puppet(sink, probe, handle)
        },
        |i| i
    )
    .env(env())
);
weir::subscriber_whitebox_tck!(
    collect_whitebox,
    SubscriberWhiteboxVerification::new(
        |probe| {
            let (sink, handle) = capture_subscriber::<u64, _>(|p| p.collect());
            ProbedSubscriber::with_puppet(sink, probe, handle)
        },
        |i| i
    )
    .env(env())
);

// `blocking_iter` cancels when its iterator is dropped, so the iterator must live: the
// black-box subscriber gets a consumer thread (which ends when the stage terminates
// the stream); the white-box puppet holds the iterator and drops it to cancel. With
// nobody consuming, demand is the prefetch window (4), which covers every request the
// white-box suite triggers.
weir::subscriber_blackbox_tck!(
    blocking_iter_blackbox,
    SubscriberBlackboxVerification::new(
        || {
            let (subscriber, iter) = capture_subscriber::<u64, _>(|p| p.blocking_iter(4));
            std::thread::spawn(move || iter.for_each(drop));
            subscriber
        },
        |i| i
    )
    .env(env())
);

struct IterPuppet(std::sync::Mutex<Option<weir::sink::BlockingIter<u64>>>);

impl SubscriberPuppet for IterPuppet {
    fn trigger_request(&self, _n: u64) {}
    fn signal_cancel(&self) {
        self.0.lock().unwrap().take();
    }
}

weir::subscriber_whitebox_tck!(
    blocking_iter_whitebox,
    SubscriberWhiteboxVerification::new(
        |probe| {
            let (subscriber, iter) = capture_subscriber::<u64, _>(|p| p.blocking_iter(4));
            ProbedSubscriber::with_puppet(subscriber, probe, IterPuppet(Some(iter).into()))
        },
        |i| i
    )
    .env(env())
);

// ---- async subscriber (feature `tokio`) ---------------------------------------------

// `subscribe_async`'s inlet is what the kit sees; the user's hooks run on a tokio task.
// Black-box: a no-op async subscriber (window 1 and window 4). White-box: an async
// subscriber that reports to the probe from its *async* hooks (so the reports prove
// the items crossed to the task), with the task's handle as puppet: it requests by
// itself (`trigger_request` does nothing), `signal_cancel` aborts it.
#[cfg(feature = "tokio")]
mod async_subscriber_tck {
    use std::sync::{Arc, Mutex, OnceLock};

    use weir::bridge::{AsyncHandle, AsyncSubscriber, SubscribeAsync};
    use weir::prelude::*;
    use weir::tck::{
        capture_subscriber, SubscriberBlackboxVerification, SubscriberPuppet,
        SubscriberWhiteboxVerification, WhiteboxProbe,
    };
    use weir::Error;

    /// The shared quiet windows, but 2 s for expected signals: the subscriber's
    /// requests and reports come from a task on another thread, which a loaded
    /// two-core machine may schedule late.
    fn env() -> weir::tck::TestEnv {
        weir::tck::TestEnv::builder()
            .default_timeout(std::time::Duration::from_secs(2))
            .no_signals_timeout(std::time::Duration::from_millis(50))
            .build()
    }

    /// One runtime for every test of these suites (two workers, like CI's cores).
    fn runtime() -> tokio::runtime::Handle {
        static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
        RT.get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a tokio runtime")
        })
        .handle()
        .clone()
    }

    fn options(window: u64) -> SubscribeAsync {
        SubscribeAsync::new().window(window).runtime(runtime())
    }

    struct Noop;

    #[async_trait::async_trait]
    impl AsyncSubscriber<u64> for Noop {
        async fn on_next(&mut self, _item: u64) -> Result<(), Error> {
            tokio::task::yield_now().await;
            Ok(())
        }
    }

    weir::subscriber_blackbox_tck!(
        async_blackbox,
        SubscriberBlackboxVerification::new(
            || capture_subscriber::<u64, _>(|p| p.subscribe_async_with(options(1), Noop)).0,
            |i| i
        )
        .env(env())
    );
    weir::subscriber_blackbox_tck!(
        async_window_blackbox,
        SubscriberBlackboxVerification::new(
            || capture_subscriber::<u64, _>(|p| p.subscribe_async_with(options(4), Noop)).0,
            |i| i
        )
        .env(env())
    );

    type HandleSlot = Arc<Mutex<Option<AsyncHandle>>>;

    /// The puppet: the task's handle (filled in right after subscribing).
    struct Puppet(HandleSlot);

    impl SubscriberPuppet for Puppet {
        fn trigger_request(&self, _n: u64) {}
        fn signal_cancel(&self) {
            if let Some(handle) = &*self.0.lock().unwrap() {
                handle.abort();
            }
        }
    }

    /// Reports every signal to the probe from its async hooks.
    struct Probing {
        probe: WhiteboxProbe<u64>,
        handle: HandleSlot,
    }

    #[async_trait::async_trait]
    impl AsyncSubscriber<u64> for Probing {
        async fn on_subscribe(&mut self) -> Result<(), Error> {
            self.probe
                .register_on_subscribe(Puppet(self.handle.clone()));
            Ok(())
        }
        async fn on_next(&mut self, item: u64) -> Result<(), Error> {
            tokio::task::yield_now().await;
            self.probe.register_on_next(item);
            Ok(())
        }
        async fn on_error(&mut self, error: Error) {
            self.probe.register_on_error(error);
        }
        async fn on_complete(&mut self) -> Result<(), Error> {
            self.probe.register_on_complete();
            Ok(())
        }
    }

    fn probed(probe: WhiteboxProbe<u64>) -> weir::tck::CapturedSubscriber<u64> {
        let slot = HandleSlot::default();
        let user = Probing {
            probe,
            handle: slot.clone(),
        };
        let (inlet, handle) =
            capture_subscriber::<u64, _>(|p| p.subscribe_async_with(options(1), user));
        *slot.lock().unwrap() = Some(handle);
        inlet
    }

    weir::subscriber_whitebox_tck!(
        async_whitebox,
        SubscriberWhiteboxVerification::new(probed, |i| i).env(env())
    );
}

// ---- processor ----------------------------------------------------------------------

weir::processor_tck!(
    identity,
    ProcessorVerification::from_processor(Identity::<u64>::new, |i| i)
        .configure_publisher_tests(|v| {
            v.with_failed_publisher(|| weir::error::<u64>(Error::msg("failed on purpose")))
                .stochastic_iterations(20)
        })
        .env(env())
);

// A multicast processor runs the multi-subscriber tests too (rule 1.11, and the
// processor's own 1.4 and 2.1 tests).
weir::processor_tck!(
    multicast,
    ProcessorVerification::from_processor(Multicast::<u64>::new, |i| i)
        .with_multi_subscribe(u64::MAX)
        .configure_publisher_tests(|v| {
            v.with_failed_publisher(|| weir::error::<u64>(Error::msg("failed on purpose")))
                .stochastic_iterations(20)
        })
        .env(env())
);

// ---- the suites' shape ----------------------------------------------------------------

#[test]
fn every_suite_lists_every_tck_test_once() {
    use weir::tck::Suite;
    let publisher = PublisherVerification::new(|n| weir::range(0..n)).tests();
    let blackbox = SubscriberBlackboxVerification::new(TestSubscriber::<u64>::new, |i| i).tests();
    let whitebox = SubscriberWhiteboxVerification::new(
        |probe| ProbedSubscriber::new(TestSubscriber::<u64>::new(), probe),
        |i| i,
    )
    .tests();
    let processor = ProcessorVerification::from_processor(Identity::<u64>::new, |i| i).tests();
    assert_eq!(
        (
            publisher.len(),
            blackbox.len(),
            whitebox.len(),
            processor.len()
        ),
        (38, 26, 27, 68)
    );
    let mut names: Vec<_> = processor.iter().map(|(name, _)| *name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), 68, "test names must be unique within a suite");
}

// ---- TestSubscriber -------------------------------------------------------------------

#[test]
fn test_subscriber_starts_with_zero_demand_and_records_in_order() {
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::range(0u32..5).subscribe(subscriber);
    probe.assert_items(&[]);
    probe.request(2);
    probe.assert_items(&[0, 1]);
    probe.assert_no_terminal();
    probe.request(10);
    probe.await_terminal(Duration::from_secs(1)).unwrap();
    probe.assert_items(&[0, 1, 2, 3, 4]);
    probe.assert_completed();
    assert_eq!(
        (
            probe.requested(),
            probe.received_count(),
            probe.signal_count()
        ),
        (12, 5, 7)
    );
}

#[test]
fn test_subscriber_scripted_requests() {
    let subscriber = TestSubscriber::new()
        .request_on_subscribe(1)
        .request_on_next(2);
    let probe = subscriber.probe();
    weir::range(0u32..4).subscribe(subscriber);
    probe.await_items(4, Duration::from_secs(1)).unwrap();
    probe.assert_completed();
    assert_eq!(probe.requested(), 1 + 4 * 2);
}

#[test]
fn test_subscriber_keeps_requests_made_before_on_subscribe() {
    let subscriber = TestSubscriber::new().request_on_subscribe(1);
    let probe = subscriber.probe();
    probe.request(2);
    weir::range(0u32..10).subscribe(subscriber);
    probe.assert_items(&[0, 1, 2]);
    assert_eq!(probe.requested(), 3);

    let subscriber = TestSubscriber::<u32>::new();
    let probe = subscriber.probe();
    probe.request(0);
    weir::range(0u32..10).subscribe(subscriber);
    probe.assert_error_rule("3.9");
}

#[test]
fn test_subscriber_request_zero_gets_the_rule_3_9_error() {
    let subscriber = TestSubscriber::<u32>::new();
    let probe = subscriber.probe();
    weir::range(0u32..4).subscribe(subscriber);
    probe.request(0);
    probe.await_terminal(Duration::from_secs(1)).unwrap();
    probe.assert_error_rule("3.9");
}

#[test]
fn test_subscriber_flags_protocol_violations_by_rule() {
    let mut subscriber = TestSubscriber::<u32>::new();
    let probe = subscriber.probe();
    subscriber.on_next(1); // before on_subscribe, and beyond demand
    subscriber.on_subscribe(Subscription::noop());
    subscriber.on_subscribe(Subscription::noop());
    subscriber.on_complete();
    subscriber.on_complete();
    let rules: Vec<&str> = probe.violations().iter().map(|v| v.rule).collect();
    assert_eq!(rules, ["1.9", "1.1", "2.5", "1.7"]);
    let panic = std::panic::catch_unwind(|| probe.assert_completed()).unwrap_err();
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(message.contains("rule 1.1"), "{message}");
}

#[test]
fn test_subscriber_waiters_time_out_and_fail_early() {
    let subscriber = TestSubscriber::<u32>::new();
    let probe = subscriber.probe();
    weir::never::<u32>().subscribe(subscriber);
    let error = probe.await_items(1, Duration::from_millis(20)).unwrap_err();
    assert!(error.contains("timed out"), "{error}");
    assert!(probe.await_terminal(Duration::from_millis(20)).is_err());

    let subscriber = TestSubscriber::<u32>::new();
    let probe = subscriber.probe();
    weir::empty::<u32>().subscribe(subscriber);
    let error = probe.await_items(3, Duration::from_secs(5)).unwrap_err();
    assert!(error.contains("ended with on_complete after 0"), "{error}");
}

// ---- random demand schedules --------------------------------------------------------

#[test]
fn demand_schedules_range() {
    weir::tck::proptest::run_publisher(|n| weir::range(0..n), 12, 64);
    weir::tck::proptest::run_publisher(|n| weir::range(0..n), 0, 16);
}

#[test]
fn demand_schedules_operator_chain() {
    weir::tck::proptest::run_publisher(
        |n| {
            weir::range(0..u64::MAX)
                .map(|x| x * 3)
                .filter(|x| x % 2 == 0)
                .take(n)
        },
        12,
        64,
    );
}

#[test]
fn demand_schedules_from_iter_and_generate() {
    weir::tck::proptest::run_publisher(|n| weir::from_iter(0..n), 9, 48);
    weir::tck::proptest::run_publisher(
        |n| {
            weir::generate(0u64, move |i| {
                *i += 1;
                if *i <= n {
                    Step::Next(*i)
                } else {
                    Step::Complete
                }
            })
        },
        9,
        48,
    );
}

#[test]
fn demand_schedules_identity_processor() {
    weir::tck::proptest::run_publisher(
        |n| {
            let processor = Identity::new(4);
            weir::range(0..n).subscribe(processor.clone());
            processor
        },
        10,
        48,
    );
}

// ---- push source -----------------------------------------------------------

/// `factory(n)` for `weir::channel`: `n` items queued up front, senders dropped (the
/// stream completes after them). One subscriber per channel, so no rule 1.11 clones.
fn prefilled_channel(n: u64) -> weir::source::Channel<u64> {
    let capacity = usize::try_from(n).expect("max_elements bounds n").max(1);
    let (tx, rx) = weir::channel(capacity, weir::source::ChannelPolicy::Backpressure);
    for i in 0..n {
        tx.try_send(i).expect("sized to hold every item");
    }
    rx
}

/// `factory(n)` for `weir::channel`: a producer thread pushing `n` items with
/// `send_blocking` through a channel of 4 (so delivery happens on both threads); it
/// stops when the subscriber cancels (its sends answer `Closed`).
fn threaded_channel(n: u64) -> weir::source::Channel<u64> {
    let (tx, rx) = weir::channel(4, weir::source::ChannelPolicy::Backpressure);
    std::thread::spawn(move || {
        for i in 0..n {
            if tx.send_blocking(i).is_err() {
                return;
            }
        }
    });
    rx
}

weir::publisher_tck!(
    channel_prefilled,
    PublisherVerification::new(prefilled_channel)
        .with_failed_publisher(|| weir::error::<u64>(Error::msg("failed on purpose")))
        // Queued up front, so not 2^31 items: rule 3.17's overflow test runs threaded.
        .max_elements(1 << 20)
        .stochastic_iterations(20)
        .env(env())
);
weir::publisher_tck!(
    channel_threaded,
    PublisherVerification::new(threaded_channel)
        .with_failed_publisher(|| weir::error::<u64>(Error::msg("failed on purpose")))
        .stochastic_iterations(20)
        .env(env())
);

/// `factory(n)` for a laddered `weir::channel` (reduce, shed and pause rungs, deadlines
/// kept): a producer thread pushing `n` items with `send_blocking` through a channel
/// of 8 whose rungs turn on and off as it fills and drains. No item is shed (every
/// class is admitted) nor late (none has a deadline), so the stream is lossless.
fn laddered_channel(n: u64) -> weir::source::Channel<u64> {
    use weir::source::channel::{Admission, ChannelBuilder, WaterMarks};
    let admission = Admission::new()
        .reduce_at(WaterMarks::new(3, 1), 0.5)
        .shed_below(WaterMarks::new(5, 2), 0u8, |_: &u64| 1u8)
        .deadlines_by(std::time::Duration::from_millis(1), |_: &u64| None);
    let (tx, rx) = ChannelBuilder::new(8, weir::source::ChannelPolicy::Backpressure)
        .water_marks(WaterMarks::new(7, 4))
        .build_with(admission);
    std::thread::spawn(move || {
        for i in 0..n {
            if tx.send_blocking(i).is_err() {
                return;
            }
        }
    });
    rx
}

weir::publisher_tck!(
    channel_laddered,
    PublisherVerification::new(laddered_channel)
        .with_failed_publisher(|| weir::error::<u64>(Error::msg("failed on purpose")))
        .stochastic_iterations(20)
        .env(env())
);

// ---- bridges: futures streams and tokio receivers (features futures, tokio) ----------
//
// Polled on a shared two-worker tokio runtime. `from_stream` over `stream::iter` is
// `Clone` (each clone polls its own copy), so rule 1.11 runs; a receiver is not. The
// receiver's producer is a tokio task sending into a channel of 16; it stops when the
// subscription is cancelled (the receiver is dropped, so `send` fails).
#[cfg(feature = "tokio")]
mod bridge_tck {
    use super::*;
    use std::sync::OnceLock;
    use weir::runtime::Tokio;

    fn rt() -> &'static tokio::runtime::Runtime {
        static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
        RT.get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a tokio runtime")
        })
    }

    fn scheduler() -> Tokio {
        Tokio::new(rt().handle().clone())
    }

    pub(super) fn from_stream(n: u64) -> impl Publisher<Item = u64> + Clone {
        weir::from_stream_on(futures::stream::iter(0..n), scheduler())
    }

    pub(super) fn try_from_stream(n: u64) -> impl Publisher<Item = u64> + Clone {
        let items = futures::stream::iter((0..n).map(Ok::<u64, std::io::Error>));
        weir::try_from_stream_on(items, scheduler())
    }

    pub(super) fn from_receiver(n: u64) -> weir::bridge::FromReceiver<u64> {
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        rt().spawn(async move {
            for i in 0..n {
                if tx.send(i).await.is_err() {
                    return;
                }
            }
        });
        weir::bridge::from_receiver_on(rx, scheduler())
    }
}

#[cfg(feature = "tokio")]
weir::publisher_tck!(from_stream, verify(bridge_tck::from_stream));
#[cfg(feature = "tokio")]
weir::publisher_tck!(try_from_stream, verify(bridge_tck::try_from_stream));
#[cfg(feature = "tokio")]
weir::publisher_tck!(
    from_receiver,
    PublisherVerification::new(bridge_tck::from_receiver)
        .with_failed_publisher(|| weir::error::<u64>(Error::msg("failed on purpose")))
        .stochastic_iterations(20)
        .env(env())
);
