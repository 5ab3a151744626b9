//! `on_backpressure_buffer` (mirrors `operators/on_backpressure_buffer/`):
//! UnboundedIn. Holds up to `capacity` items downstream has not asked for; when full,
//! drops the oldest, drops the newest, or fails after delivering what it holds.

use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use weir::demand::UNBOUNDED;
use weir::metrics::{DropHook, Drops};
use weir::prelude::*;
use weir::tck::TestSubscriber;
use weir::{BoxPublisher, DropReason, Error, ErrorKind, Overflow};

use crate::baseline;
use crate::support::counting::counted;
use crate::support::lossy::{check_prediction, events, holding_model, run_lossy, ModelFull};
use crate::support::shape;
use crate::support::threaded::ThreadedRange;
use crate::support::unruly::Unruly;
use crate::support::valve::mirrored;

#[test]
fn smoke() {
    // Enough demand: nothing held.
    baseline::smoke(
        weir::range(0u64..100).on_backpressure_buffer(4, Overflow::Error),
        &(0..100).collect::<Vec<_>>(),
    );
}

#[test]
fn respects_demand_and_holds_oldest_first() {
    let (probe, handle, drops) = baseline::valve_probe(100, |source| {
        source.on_backpressure_buffer(3, Overflow::DropNewest)
    });

    handle.release(5);
    probe.assert_items(&[]);
    assert_eq!(
        drops.count(DropReason::OverflowNewest),
        2,
        "3 and 4 dropped"
    );

    probe.request(2);
    probe.assert_items(&[0, 1]);
    handle.release(1);
    probe.assert_items(&[0, 1]);
    probe.request(1);
    probe.assert_items(&[0, 1, 2]);
    probe.request(10);
    probe.assert_items(&[0, 1, 2, 5]);
    handle.release(2);
    probe.assert_items(&[0, 1, 2, 5, 6, 7]);
    probe.assert_no_violations();
}

#[test]
fn cancel_stops_upstream_and_releases_the_held_items() {
    let (source, stats) = counted(weir::never::<u64>());
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source
        .on_backpressure_buffer(2, Overflow::DropOldest)
        .subscribe(subscriber);
    assert_eq!(stats.request_log(), vec![UNBOUNDED]);
    probe.cancel();
    assert_eq!(stats.cancels(), 1);

    // Held items are dropped on cancel (the Arc count shows it) and never delivered.
    let item = Arc::new(());
    let witness = item.clone();
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::just(item)
        .on_backpressure_buffer(2, Overflow::DropOldest)
        .subscribe(subscriber);
    assert_eq!(Arc::strong_count(&witness), 2, "held");
    probe.cancel();
    assert_eq!(Arc::strong_count(&witness), 1, "released on cancel");
    probe.request(1);
    assert_eq!(probe.received_count(), 0);
    probe.assert_no_terminal();
}

#[test]
fn error_propagates_once_after_the_held_items() {
    let boom = Error::msg("source failed");
    let failure = boom.clone();
    let mut sent = 0u64;
    let source = weir::generate((), move |_| {
        sent += 1;
        if sent > 2 {
            weir::source::Step::Error(failure.clone())
        } else {
            weir::source::Step::Next(sent)
        }
    });
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source
        .on_backpressure_buffer(4, Overflow::Error)
        .subscribe(subscriber);
    assert_eq!(shape(&probe), "S", "the error waits behind the held items");
    probe.request(1);
    assert_eq!(shape(&probe), "SN");
    probe.request(1);
    assert_eq!(shape(&probe), "SNNE");
    assert!(Error::ptr_eq(&probe.assert_error(), &boom));
    probe.request(1);
    assert_eq!(shape(&probe), "SNNE", "once");

    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    Unruly::new(boom.clone())
        .on_backpressure_buffer(4, Overflow::Error)
        .subscribe(subscriber);
    assert_eq!(shape(&probe), "SE", "nothing held: the error goes at once");
    assert!(Error::ptr_eq(&probe.assert_error(), &boom));
    probe.assert_no_violations();
}

#[test]
fn completes_after_the_held_items() {
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::range(0u64..3)
        .on_backpressure_buffer(8, Overflow::Error)
        .subscribe(subscriber);
    assert_eq!(shape(&probe), "S", "completion waits for the held items");
    probe.request(2);
    assert_eq!(shape(&probe), "SNN");
    probe.request(1);
    assert_eq!(shape(&probe), "SNNNC");
}

#[test]
fn overflow_error_comes_after_the_held_items() {
    let drops = Drops::new();
    let (source, stats) = counted(weir::range(0u64..10));
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    source
        .on_backpressure_buffer(3, Overflow::Error)
        .on_dropped(DropHook::new(drops.clone()))
        .subscribe(subscriber);
    assert_eq!(stats.cancels(), 1, "upstream cancelled at the overflow");
    assert_eq!(
        drops.count(DropReason::OverflowNewest),
        1,
        "the refused item"
    );
    assert_eq!(shape(&probe), "S");
    probe.request(3);
    probe.assert_items(&[0, 1, 2]);
    assert_eq!(probe.assert_error().kind(), ErrorKind::Overflow);
}

/// One upstream batch of 10; downstream asks for one more inside each `on_next`:
/// everything passes straight through, nothing is held or dropped.
#[test]
fn demand_requested_inside_a_batch_lets_later_items_pass() {
    baseline::demand_inside_a_batch_loses_nothing(
        weir::range(0u64..10).on_backpressure_buffer(1, Overflow::DropNewest),
        10,
    );
}

#[test]
fn in_flight_bound_is_the_capacity() {
    let p = weir::range(0u64..3).on_backpressure_buffer(32, Overflow::DropOldest);
    assert_eq!(p.in_flight_bound(), 32);
    assert_eq!(p.buffer(4).in_flight_bound(), 36);
}

#[test]
#[should_panic(expected = "on_backpressure_buffer capacity must be in 1..=2^30 (got 0)")]
fn capacity_zero_is_rejected() {
    let _ = weir::range(0u64..3).on_backpressure_buffer(0, Overflow::DropOldest);
}

#[test]
fn a_source_that_follows_demand_loses_nothing() {
    let out = mirrored(50, |s| s.on_backpressure_buffer(2, Overflow::Error))
        .collect_with(7)
        .wait()
        .unwrap();
    assert_eq!(out, (0..50).collect::<Vec<_>>());
}

/// A producer thread pushes while the consumer (this thread) requests: every item is
/// delivered in order or dropped, never both, never more than the capacity held.
#[test]
fn a_producer_thread_and_a_consumer_thread() {
    for policy in [Overflow::DropOldest, Overflow::DropNewest] {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let hook = DropHook::new(Drops::new()).inspect(move |d| {
            log.lock().unwrap().extend(d.take::<u64>());
        });
        let mut delivered = Vec::new();
        for item in ThreadedRange::new(20_000)
            .on_backpressure_buffer(8, policy)
            .on_dropped(hook)
            .blocking_iter(4)
        {
            delivered.push(item.unwrap());
        }
        let mut dropped = seen.lock().unwrap().clone();
        assert!(
            delivered.windows(2).all(|w| w[0] < w[1]),
            "{policy:?}: in order"
        );
        let mut all = delivered.clone();
        all.append(&mut dropped);
        all.sort_unstable();
        assert_eq!(all, (0..20_000).collect::<Vec<_>>(), "{policy:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// delivered + dropped == produced; drops reach the hook with the policy's reason;
    /// the kept items are those the policy says (oldest dropped for `DropOldest`,
    /// newest for `DropNewest`; for `Error` the held items, then the error).
    #[test]
    fn keeps_what_the_policy_says(
        len in 0u64..40,
        capacity in 1usize..5,
        policy in prop_oneof![
            Just(Overflow::DropOldest),
            Just(Overflow::DropNewest),
            Just(Overflow::Error),
        ],
        events in events(),
    ) {
        let run = run_lossy(len, &events, |s| s.on_backpressure_buffer(capacity as u64, policy))?;
        let full = match policy {
            Overflow::DropOldest => ModelFull::DropOldest(DropReason::OverflowOldest),
            Overflow::DropNewest => ModelFull::DropNewest,
            _ => ModelFull::Fail,
        };
        check_prediction(&run, &holding_model(len, &events, capacity, full))?;
    }
}

mod time_bounds {
    //! The held items are a time-stamped queue: max age at dequeue, adaptive LIFO and
    //! queue statistics, under `VirtualTime`.

    use std::time::Duration;

    use weir::queue::TimeBounds;
    use weir::runtime::VirtualTime;
    use weir::{DropReason, Overflow, PublisherExt};

    use weir::operators::OnBackpressureBuffer;

    use crate::baseline;
    use crate::support::valve::ValveSource;

    /// [`timed`] over a valve of 100 under a probe, with the stage's monitor.
    fn monitored(
        vt: &VirtualTime,
        bounds: TimeBounds,
    ) -> (
        weir::tck::TestProbe<u64>,
        crate::support::valve::ValveHandle,
        weir::metrics::Drops,
        weir::metrics::QueueMonitor,
    ) {
        let mut monitor = None;
        let (probe, handle, drops) = baseline::valve_probe(100, |source| {
            let stage = timed(source, vt, bounds);
            monitor = Some(stage.monitor());
            stage
        });
        (probe, handle, drops, monitor.expect("built"))
    }

    /// `on_backpressure_buffer(10, DropOldest)` over `source`, with `bounds`, on
    /// `vt`'s clock.
    fn timed(
        source: ValveSource,
        vt: &VirtualTime,
        bounds: TimeBounds,
    ) -> OnBackpressureBuffer<ValveSource> {
        source
            .on_backpressure_buffer(10, Overflow::DropOldest)
            .time_bounds(bounds)
            .clock(vt.clone())
    }

    /// CoDel (10 ms, 100 ms) on the held items: a burst may wait up to the interval;
    /// once the buffer has stood non-empty for an interval, items past the target are
    /// dropped at dequeue as `CoDel` and reported, the fresh ones delivered.
    #[test]
    fn codel_drops_what_waited_past_the_target_in_a_standing_buffer() {
        let vt = VirtualTime::new();
        let (probe, handle, drops, monitor) = monitored(
            &vt,
            TimeBounds::none().codel(Duration::from_millis(10), Duration::from_millis(100)),
        );
        handle.release(3); // 0, 1, 2 held at t = 0
        vt.advance(Duration::from_millis(60));
        probe.request(1);
        probe.assert_items(&[0]); // waited 60 ms: within the interval
        vt.advance(Duration::from_millis(35));
        handle.release(2); // 3, 4 held at t = 95 ms
        vt.advance(Duration::from_millis(10)); // 105 ms: standing for the interval
        probe.request(1);
        // 1, 2 (105 ms) and 3, 4 (10 ms, not past the target) : 1 and 2 go.
        probe.assert_items(&[0, 3]);
        assert_eq!(drops.count(DropReason::CoDel), 2);
        let stats = monitor.snapshot();
        assert_eq!(stats.dropped(DropReason::CoDel), 2);
        assert_eq!((stats.depth, stats.dequeued), (1, 2));
        probe.assert_no_violations();
    }

    #[test]
    fn items_older_than_max_age_are_dropped_at_dequeue_and_reported() {
        let vt = VirtualTime::new();
        let (probe, handle, drops, monitor) =
            monitored(&vt, TimeBounds::none().max_age(Duration::from_secs(1)));

        handle.release(3); // 0, 1, 2 held at t = 0
        vt.advance(Duration::from_millis(800));
        handle.release(2); // 3, 4 held at t = 0.8 s
        let stats = monitor.snapshot();
        assert_eq!((stats.depth, stats.enqueued), (5, 5));
        assert_eq!(stats.oldest_age, Some(Duration::from_millis(800)));

        vt.advance(Duration::from_millis(400)); // t = 1.2 s: 0..3 are 1.2 s old
        probe.request(1);
        probe.assert_items(&[3]);
        assert_eq!(drops.count(DropReason::Expired), 3, "0, 1, 2 expired");
        let stats = monitor.snapshot();
        assert_eq!(stats.dropped(DropReason::Expired), 3);
        assert_eq!((stats.depth, stats.dequeued), (1, 1));
        assert_eq!(stats.oldest_age, Some(Duration::from_millis(400)));

        vt.advance(Duration::from_millis(500)); // 4 is 0.9 s old: still fresh
        probe.request(5);
        probe.assert_items(&[3, 4]);
        assert_eq!(drops.total(), 3);
        probe.assert_no_violations();
    }

    /// Items that expire in the same pass as a cancel are counted: the pass that
    /// drops 0, 1 and 2 delivers 3 to `take(1)`, which cancels; the drops reached the
    /// hook before, and the counts do too.
    #[test]
    fn expired_items_of_a_pass_that_ends_in_a_cancel_are_counted() {
        let vt = VirtualTime::new();
        let (probe, handle, drops) = baseline::valve_probe(100, |source| {
            timed(
                source,
                &vt,
                TimeBounds::none().max_age(Duration::from_secs(1)),
            )
            .take(1)
        });
        handle.release(3); // 0, 1, 2 held at t = 0
        vt.advance(Duration::from_millis(1_200));
        handle.release(2); // 3, 4 held at t = 1.2 s
        probe.request(5);
        probe.assert_items(&[3]);
        probe.assert_completed();
        assert_eq!(drops.count(DropReason::Expired), 3, "0, 1, 2 expired");
        probe.assert_no_violations();
    }

    /// Held items that die while downstream asks for nothing leave without a
    /// dequeue: when an item arrives and when the statistics are read, counted as
    /// `Expired` once, so depth and oldest age describe live work; the completion
    /// parked behind them goes out once they are gone.
    #[test]
    fn items_that_die_unread_leave_on_arrival_and_on_snapshot() {
        let vt = VirtualTime::new();
        let (valve_source, handle) = crate::support::valve::valve(8);
        let drops = weir::metrics::Drops::new();
        let stage = timed(
            valve_source,
            &vt,
            TimeBounds::none().max_age(Duration::from_secs(1)),
        );
        let monitor = stage.monitor();
        let probe =
            crate::support::probe_of(stage.on_dropped(weir::metrics::DropHook::new(drops.clone())));
        handle.release(3); // 0, 1, 2 held at t = 0
        vt.advance(Duration::from_millis(1_500));
        let stats = monitor.snapshot();
        assert_eq!((stats.depth, stats.oldest_age), (0, None));
        assert_eq!(stats.dropped(DropReason::Expired), 3);
        assert_eq!(drops.count(DropReason::Expired), 3);

        handle.release(2); // 3, 4 held at t = 1.5 s
        vt.advance(Duration::from_millis(1_200));
        handle.release(1); // 5 arrives at 2.7 s: 3 and 4 leave
        assert_eq!(drops.count(DropReason::Expired), 5);
        let stats = monitor.snapshot();
        assert_eq!((stats.depth, stats.oldest_age), (1, Some(Duration::ZERO)));

        handle.release(2); // 6, 7 and the completion held at 2.7 s
        vt.advance(Duration::from_secs(2));
        assert!(!probe.is_terminated());
        assert_eq!(monitor.snapshot().depth, 0);
        probe.assert_completed();
        assert_eq!(probe.received_count(), 0);
        assert_eq!(drops.count(DropReason::Expired), 8);
        probe.assert_no_violations();
    }

    /// A drop hook may read the stage's monitor: the overflow drops reach it while
    /// the producer holds the queue's lock, and the snapshot's sweep (max age set)
    /// then leaves the queue alone instead of waiting for that lock.
    #[test]
    fn a_drop_hook_may_read_the_monitor() {
        let vt = VirtualTime::new();
        let (valve_source, handle) = crate::support::valve::valve(100);
        let stage = timed(
            valve_source,
            &vt,
            TimeBounds::none().max_age(Duration::from_secs(1)),
        );
        let monitor = stage.monitor();
        let depths = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = depths.clone();
        let hook = weir::metrics::DropHook::new(weir::metrics::Drops::new())
            .inspect(move |_| seen.lock().unwrap().push(monitor.snapshot().depth));
        let _probe = crate::support::probe_of(stage.on_dropped(hook));
        handle.release(12); // 10 held, then 2 oldest dropped
        assert_eq!(*depths.lock().unwrap(), [10, 10]);
    }

    #[test]
    fn a_standing_queue_serves_newest_first_once_the_interval_has_passed() {
        let vt = VirtualTime::new();
        let (probe, handle, drops) = baseline::valve_probe(100, |source| {
            timed(
                source,
                &vt,
                TimeBounds::none().adaptive_lifo(Duration::from_secs(1)),
            )
        });
        handle.release(3);
        probe.request(1);
        probe.assert_items(&[0]);
        vt.advance(Duration::from_secs(1));
        handle.release(2); // held: 1, 2, 3, 4; non-empty for 1 s
        probe.request(2);
        probe.assert_items(&[0, 4, 3]);
        probe.request(2);
        probe.assert_items(&[0, 4, 3, 2, 1]);
        handle.release(2); // the queue emptied: FIFO again
        probe.request(10);
        probe.assert_items(&[0, 4, 3, 2, 1, 5, 6]);
        assert_eq!(drops.total(), 0);
        probe.assert_no_violations();
    }

    #[test]
    fn the_monitor_counts_overflow_drops_and_lag() {
        let vt = VirtualTime::new();
        let mut monitor = None;
        let (probe, handle, _drops) = baseline::valve_probe(1_000, |source| {
            let stage = source
                .on_backpressure_buffer(4, Overflow::DropNewest)
                .clock(vt.clone());
            monitor = Some(stage.monitor());
            stage
        });
        let monitor = monitor.unwrap();
        // 10 per 100 ms offered, 2 per 100 ms taken, for one second.
        for _ in 0..10 {
            vt.advance(Duration::from_millis(100));
            handle.release(10);
            probe.request(2);
        }
        let stats = monitor.snapshot();
        assert_eq!(stats.capacity, 4);
        assert_eq!(stats.dequeued, 20);
        assert_eq!(
            stats.dropped(DropReason::OverflowNewest) + stats.enqueued,
            100,
            "every offered item was queued or dropped: {stats:?}"
        );
        assert_eq!(stats.depth, 2, "4 held after each offer, 2 taken");
        assert!(stats.drain_rate > 0.0, "{stats:?}");
        let lag = stats.lag().expect("draining");
        assert!(lag > Duration::ZERO, "{stats:?}");
        probe.assert_no_violations();
    }

    /// With `deadlines()`, held items whose own deadline passed are dropped when
    /// taken out (`DeadlineExceeded`, to the hook); the others are served in order;
    /// the policy's evictions keep each item's deadline with it.
    #[test]
    fn held_items_past_their_deadline_are_dropped_at_dequeue() {
        use weir::deadline::WithDeadline;
        use weir::runtime::Scheduler;
        let vt = VirtualTime::new();
        let t0 = vt.now();
        let mut monitor = None;
        let (probe, handle, drops) = baseline::valve_probe(100, |source| {
            // Item v is worth serving until v × 10 ms.
            let stage = source
                .map(move |v| WithDeadline::new(v, t0 + Duration::from_millis(v * 10)))
                .on_backpressure_buffer(10, Overflow::DropOldest)
                .deadlines()
                .clock(vt.clone());
            monitor = Some(stage.monitor());
            stage
        });
        let monitor = monitor.unwrap();
        handle.release(12); // 0 and 1 evicted by the policy: 2..=11 held
        vt.advance(Duration::from_millis(45)); // 2, 3 and 4 are dead
        probe.request(20);
        let served: Vec<u64> = probe.items().into_iter().map(|j| j.into_inner()).collect();
        assert_eq!(served, (5..12).collect::<Vec<_>>());
        assert_eq!(drops.count(DropReason::OverflowOldest), 2);
        assert_eq!(drops.count(DropReason::DeadlineExceeded), 3);
        let stats = monitor.snapshot();
        assert_eq!(stats.dropped(DropReason::DeadlineExceeded), 3);
        assert_eq!(stats.dequeued, 7);
        probe.assert_no_violations();
    }

    /// A job whose deadline reader counts its calls and may panic.
    #[derive(Clone)]
    struct Job {
        value: u64,
        until: std::time::Instant,
        reads: std::sync::Arc<std::sync::atomic::AtomicUsize>,
        broken: bool,
    }

    impl weir::deadline::Deadline for Job {
        fn deadline(&self) -> Option<std::time::Instant> {
            self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            assert!(!self.broken, "deadline reader broke");
            Some(self.until)
        }
    }

    /// Jobs over a valve of 100 (job v lives until v × 10 ms; job `broken` panics in
    /// its reader) into `on_backpressure_buffer(capacity, DropOldest)`, or with
    /// `merge` into `conflate(keep the newest)`, with deadlines.
    fn jobs(
        vt: &VirtualTime,
        merge: bool,
        capacity: usize,
        broken: Option<u64>,
    ) -> (
        weir::tck::TestProbe<Job>,
        crate::support::valve::ValveHandle,
        std::sync::Arc<std::sync::atomic::AtomicUsize>,
        weir::metrics::QueueMonitor,
    ) {
        use weir::runtime::Scheduler;
        let t0 = vt.now();
        let reads = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = reads.clone();
        let mut monitor = None;
        let (probe, handle, _drops) = baseline::valve_probe(100, |source| {
            let jobs = source.map(move |value| Job {
                value,
                until: t0 + Duration::from_millis(value * 10),
                reads: counter.clone(),
                broken: Some(value) == broken,
            });
            if merge {
                let stage = jobs.conflate(|_old, new| new).deadlines().clock(vt.clone());
                monitor = Some(stage.monitor());
                stage.boxed()
            } else {
                let stage = jobs
                    .on_backpressure_buffer(capacity as u64, Overflow::DropOldest)
                    .deadlines()
                    .clock(vt.clone());
                monitor = Some(stage.monitor());
                stage.boxed()
            }
        });
        (probe, handle, reads, monitor.unwrap())
    }

    #[test]
    fn a_panicking_deadline_reader_fails_the_stage() {
        let vt = VirtualTime::new();
        let (probe, handle, _reads, _) = jobs(&vt, false, 8, Some(3));
        handle.release(5);
        probe.request(10);
        let error = probe.assert_error();
        assert_eq!(error.kind(), weir::ErrorKind::Panicked);
        assert!(error.message().contains("deadline reader broke"), "{error}");
        probe.assert_no_violations();
    }

    #[test]
    fn each_held_item_has_its_deadline_read_once() {
        let vt = VirtualTime::new();
        let (probe, handle, reads, monitor) = jobs(&vt, false, 2, None);
        handle.release(10); // 2 held, 8 pushed through a full queue
        assert_eq!(reads.load(std::sync::atomic::Ordering::SeqCst), 10);
        assert_eq!(monitor.snapshot().dropped(DropReason::OverflowOldest), 8);
        probe.cancel();
    }

    #[test]
    fn a_merged_value_is_worth_its_own_deadline() {
        let vt = VirtualTime::new();
        // Keep the newest: the merged value is the later job, alive until 90 ms.
        let (probe, handle, _reads, monitor) = jobs(&vt, true, 1, None);
        handle.release(10);
        vt.advance(Duration::from_millis(50)); // job 0's deadline has passed, 9's not
        probe.request(1);
        let served: Vec<u64> = probe.items().iter().map(|j| j.value).collect();
        assert_eq!(served, [9]);
        assert_eq!(monitor.snapshot().dropped(DropReason::DeadlineExceeded), 0);
        probe.cancel();
    }

    #[test]
    fn a_panicking_merge_leaves_the_queue_consistent_for_the_monitor() {
        let vt = VirtualTime::new();
        let mut monitor = None;
        let (probe, handle, _drops) = baseline::valve_probe(100, |source| {
            let stage = source
                .conflate(|_old, _new| -> u64 { panic!("merge broke") })
                .time_bounds(TimeBounds::none().max_age(Duration::from_millis(10)))
                .clock(vt.clone());
            monitor = Some(stage.monitor());
            stage
        });
        let monitor = monitor.unwrap();
        handle.release(2); // the second arrival's merge panics
        vt.advance(Duration::from_millis(20));
        let stats = monitor.snapshot(); // sweeps the dead items: no stamp without its item
        assert!(stats.depth <= 1, "{stats:?}");
        probe.request(1);
        assert_eq!(probe.assert_error().kind(), weir::ErrorKind::Panicked);
    }
}

/// Downstream cancels inside upstream's batch: the rest is released unread (see the
/// check).
#[test]
fn a_cancel_inside_a_batch_reads_and_reports_nothing_after_it() {
    crate::support::lossy::check_cancel_inside_a_batch(
        "on_backpressure_buffer(2, DropNewest)",
        |p| p.on_backpressure_buffer(2, Overflow::DropNewest),
    );
}

/// `range(0..100)` whose item 10 makes downstream ask for 50 from another thread
/// (the request returns before item 10 reaches the stage, inside upstream's batch),
/// through `stage`; returns the probe of what was delivered.
pub(crate) fn request_in_the_middle_of_a_batch(
    stage: impl FnOnce(BoxPublisher<u64>) -> BoxPublisher<u64>,
) -> weir::tck::TestProbe<u64> {
    let subscriber = TestSubscriber::<u64>::new();
    let probe = subscriber.probe();
    let requester = probe.clone();
    let source = weir::range(0u64..100)
        .map(move |x| {
            if x == 10 {
                let probe = requester.clone();
                std::thread::spawn(move || probe.request(50))
                    .join()
                    .unwrap();
            }
            x
        })
        .boxed();
    stage(source).subscribe(subscriber);
    probe
}

/// A holding stage over a boxed source.
type Holding = fn(BoxPublisher<u64>) -> BoxPublisher<u64>;

/// "Nothing is dropped, merged or refused while downstream has demand outstanding,
/// whichever thread requests": demand that arrives from another thread while this
/// stage holds an upstream batch (its thread owns the loop) is served before the
/// policy of a full queue applies. (The rest of the batch used to go through the
/// policy: one item delivered of the 50 asked for, 99 dropped or merged.)
#[test]
fn demand_that_arrives_inside_a_batch_is_served_before_the_policy_applies() {
    let cases: [(&str, Holding); 4] = [
        ("buffer(1, DropOldest)", |s| {
            s.on_backpressure_buffer(1, Overflow::DropOldest).boxed()
        }),
        ("buffer(1, DropNewest)", |s| {
            s.on_backpressure_buffer(1, Overflow::DropNewest).boxed()
        }),
        ("latest", |s| s.on_backpressure_latest().boxed()),
        ("conflate", |s| s.conflate(|a, b| a.max(b)).boxed()),
    ];
    for (name, stage) in cases {
        let delivered = request_in_the_middle_of_a_batch(stage).items().len();
        assert!(delivered >= 50, "{name}: {delivered} delivered of 50 asked");
    }
}

/// An item whose `Drop` panics on a stage's way out.
#[derive(Debug)]
struct Touchy {
    id: u64,
    /// Its `Drop` panics.
    armed: bool,
}

impl Drop for Touchy {
    fn drop(&mut self) {
        if self.armed {
            self.armed = false;
            panic!("deliberate: item {} panics in Drop", self.id);
        }
    }
}

/// Hands its items over in one `on_next_batch`, as a source does under unbounded
/// demand (and nothing more).
struct OneBatch(Vec<Touchy>);

impl weir::Publisher for OneBatch {
    type Item = Touchy;
    fn subscribe<S: weir::Subscriber<Touchy> + Send + 'static>(self, mut subscriber: S) {
        subscriber.on_subscribe(weir::Subscription::noop());
        let _credit = subscriber.on_next_batch(self.0.into_iter());
    }
}

/// `Overflow::Error`: "downstream receives `on_error` of kind `Overflow` after the
/// held items were delivered", also when an item of the batch's unread rest panics
/// as it is let go. (Its panic used to be taken for the subscriber's: no item, no
/// terminal signal.)
#[test]
fn overflow_error_reaches_downstream_when_an_unread_item_panics_in_drop() {
    let subscriber = TestSubscriber::<Touchy>::new();
    let probe = subscriber.probe();
    // Capacity 1: item 1 held, item 2 refused, items 3 and 4 the unread rest.
    let items: Vec<Touchy> = (1..=4).map(|id| Touchy { id, armed: id == 3 }).collect();
    OneBatch(items)
        .on_backpressure_buffer(1, Overflow::Error)
        .subscribe(subscriber);
    probe.request(10);
    probe
        .await_terminal(std::time::Duration::from_secs(20))
        .expect("a terminal signal");
    assert_eq!(probe.received_count(), 1, "the held item");
    assert_eq!(probe.assert_error().kind(), ErrorKind::Overflow);
}

/// Held items released at a cancel, two of which panic in `Drop`: contained (one
/// drop of the whole collection would panic twice, which aborts the process).
#[test]
fn held_items_that_panic_in_drop_at_a_cancel_are_each_contained() {
    let subscriber = TestSubscriber::<Touchy>::new();
    let probe = subscriber.probe();
    weir::from_iter((1..=3).map(|id| Touchy { id, armed: id != 2 }))
        .concat(weir::never())
        .on_backpressure_buffer(4, Overflow::DropOldest)
        .subscribe(subscriber);
    probe.cancel();
    assert_eq!(probe.received_count(), 0);
}

/// "A panic in the hook's `inspect` closure fails the lossy stage": also when
/// upstream's completion is parked behind the held items already. (The completion
/// used to win: the stream completed.)
#[test]
fn a_drop_hook_that_panics_after_upstreams_end_fails_the_stage() {
    let clock = weir::runtime::VirtualTime::new();
    let subscriber = TestSubscriber::<u64>::new();
    let probe = subscriber.probe();
    weir::from_iter(vec![1u64, 2, 3])
        .on_backpressure_buffer(8, Overflow::DropOldest)
        .time_bounds(weir::queue::TimeBounds::none().max_age(std::time::Duration::from_secs(1)))
        .clock(clock.clone())
        .on_dropped(DropHook::new(Drops::new()).inspect(|_| panic!("deliberate: the drop hook")))
        .subscribe(subscriber);
    clock.advance(std::time::Duration::from_secs(2));
    probe.request(10);
    probe
        .await_terminal(std::time::Duration::from_secs(20))
        .expect("a terminal signal");
    assert_eq!(probe.assert_error().kind(), ErrorKind::Panicked);
}

/// Items that expire on their way out are counted by the hook's counters, as the
/// stage's monitor counts them, also when the subscriber panics in the same pass.
#[test]
fn expired_items_are_counted_when_the_subscriber_panics_in_the_same_pass() {
    use std::time::Duration;
    use weir::deadline::WithDeadline;
    struct Panicky(Arc<Mutex<Option<weir::Subscription>>>);
    impl weir::Subscriber<WithDeadline<u64>> for Panicky {
        fn on_subscribe(&mut self, s: weir::Subscription) {
            *self.0.lock().unwrap() = Some(s);
        }
        fn on_next(&mut self, _: WithDeadline<u64>) {
            panic!("deliberate: the subscriber panics in on_next");
        }
        fn on_error(&mut self, _: Error) {}
        fn on_complete(&mut self) {}
    }
    let clock = weir::runtime::VirtualTime::new();
    let ms = Duration::from_millis;
    let drops = Drops::new();
    let jobs = vec![
        WithDeadline::within(1u64, ms(100), &clock),
        WithDeadline::within(2u64, ms(100), &clock),
        WithDeadline::within(3u64, ms(10_000), &clock),
    ];
    let buffered = weir::from_iter(jobs)
        .on_backpressure_buffer(8, Overflow::DropOldest)
        .deadlines()
        .clock(clock.clone());
    let monitor = buffered.monitor();
    let slot = Arc::new(Mutex::new(None));
    buffered
        .on_dropped(DropHook::new(drops.clone()))
        .subscribe(Panicky(slot.clone()));
    clock.advance(ms(500));
    let subscription = slot.lock().unwrap().clone().unwrap();
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| subscription.request(1)));
    assert_eq!(monitor.snapshot().dropped(DropReason::DeadlineExceeded), 2);
    assert_eq!(drops.count(DropReason::DeadlineExceeded), 2);
}
