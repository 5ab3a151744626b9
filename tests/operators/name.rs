//! `name` and the registry: a named stage is listed while it runs, with the figures
//! of its own monitor, and leaves when its stream ends, however it ends.

use std::time::{Duration, Instant};

use weir::metrics::Registry;
use weir::prelude::*;
use weir::runtime::ThreadPool;
use weir::source::channel::{ChannelBuilder, ChannelPolicy, FlowState, WaterMarks};
use weir::tck::TestSubscriber;
use weir::Overflow;

const PATIENCE: Duration = Duration::from_secs(20);

/// Waits (up to `PATIENCE`) for `done`; panics with `what` if it never holds.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < PATIENCE, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_three_stage_pipeline_is_listed_with_the_figures_of_each_stages_monitor() {
    let registry = Registry::new();
    let pool = ThreadPool::builder().threads(1).build();
    let (tx, rx) = weir::channel::<u32>(100, ChannelPolicy::Backpressure);
    let ingest = rx.monitor();
    let hop = rx
        .name("ingest")
        .registry(&registry)
        .publish_on(pool.clone(), 16);
    let hop_monitor = hop.monitor();
    let buffer = hop
        .name("hop")
        .registry(&registry)
        .on_backpressure_buffer(20, Overflow::DropOldest);
    let buffer_monitor = buffer.monitor();
    // Asks for nothing: 50 items end in the buffer's 20 slots, 30 dropped.
    let subscriber = TestSubscriber::<u32>::new();
    let probe = subscriber.probe();
    let buffer = buffer.name("buffer").registry(&registry);
    let bound = buffer.in_flight_bound();
    buffer.subscribe(subscriber);
    for i in 0..50 {
        tx.try_send(i).expect("room in the channel");
    }
    eventually("the buffer held 20 and dropped 30", || {
        let stats = buffer_monitor.snapshot();
        stats.depth == 20 && stats.dropped_total() == 30
    });
    let snapshot = registry.snapshot();
    let names: Vec<&str> = snapshot.stages.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["buffer", "hop", "ingest"], "outermost enters first");
    for (name, monitor) in [
        ("ingest", &ingest),
        ("hop", &hop_monitor),
        ("buffer", &buffer_monitor),
    ] {
        let own = monitor.snapshot();
        let listed = snapshot.stage(name).unwrap().queue.clone().unwrap();
        assert_eq!(
            (
                listed.depth,
                listed.capacity,
                listed.enqueued,
                listed.dequeued,
                listed.dropped_total()
            ),
            (
                own.depth,
                own.capacity,
                own.enqueued,
                own.dequeued,
                own.dropped_total()
            ),
            "{name}"
        );
    }
    // Only the push source has a flow state.
    let flow = |name: &str| snapshot.stage(name).unwrap().queue.as_ref().unwrap().flow;
    assert_eq!(flow("ingest"), Some(FlowState::Flowing));
    assert_eq!((flow("hop"), flow("buffer")), (None, None));
    let buffer_row = snapshot.stage("buffer").unwrap();
    assert_eq!(buffer_row.queue.as_ref().unwrap().capacity, 20);
    assert_eq!(buffer_row.in_flight_bound, bound, "{snapshot}");
    assert!(bound >= 100 + 16 + 20, "channel, hop and buffer: {bound}");
    let table = snapshot.to_string();
    assert_eq!(table.lines().count(), 5, "{table}");
    assert!(table.contains("20/20"), "{table}");
    // One pipeline, upstream first; the backlog is in the buffer.
    let id = |name: &str| snapshot.stage(name).unwrap().id;
    let pipelines = snapshot.pipelines();
    assert_eq!(pipelines.len(), 1, "{table}");
    assert_eq!(
        pipelines[0].stages,
        vec![id("ingest"), id("hop"), id("buffer")]
    );
    assert_eq!(pipelines[0].in_flight_bound, bound);
    assert_eq!(pipelines[0].backlog, Some(id("buffer")));
    assert!(
        table.contains(&format!(
            "pipeline ingest → hop → buffer (bound {bound}): backlog at buffer"
        )),
        "{table}"
    );
    // The subscriber leaves: every stage lets go of its entry.
    probe.cancel();
    eventually("the cancelled stages left", || registry.is_empty());
    drop(tx);
    pool.shutdown();
}

#[test]
fn stages_leave_when_the_stream_completes() {
    let registry = Registry::new();
    let pool = ThreadPool::builder().threads(1).build();
    let sum = weir::range(0u64..10_000)
        .name("source")
        .registry(&registry)
        .publish_on(pool.clone(), 8)
        .name("hop")
        .registry(&registry)
        .map(|x| x * 2)
        .name("double")
        .registry(&registry)
        .fold(0u64, |a, x| a + x)
        .wait()
        .unwrap();
    assert_eq!(sum, 2 * (0..10_000u64).sum::<u64>());
    assert!(
        registry.is_empty(),
        "every entry ends before the end reaches the sink: {}",
        registry.snapshot()
    );
    pool.shutdown();
}

#[test]
fn a_stage_without_a_queue_is_listed_with_its_bound_only() {
    let registry = Registry::new();
    let subscriber = TestSubscriber::<u32>::new();
    let probe = subscriber.probe();
    weir::range(0u32..5)
        .on_backpressure_buffer(3, Overflow::DropNewest)
        .map(|x| x + 1)
        .name("plus one")
        .registry(&registry)
        .subscribe(subscriber);
    let snapshot = registry.snapshot();
    let row = snapshot.stage("plus one").expect("listed");
    assert_eq!((row.queue.clone(), row.in_flight_bound), (None, 3));
    probe.request(10);
    probe.assert_completed();
    assert!(registry.is_empty());
}

#[test]
fn errors_cancels_and_panics_end_the_entry_too() {
    let registry = Registry::new();
    // Error from upstream.
    let failed = weir::range(0u32..10)
        .map(|x| if x == 3 { panic!("boom at 3") } else { x })
        .name("failing")
        .registry(&registry)
        .collect()
        .wait();
    assert!(failed.is_err());
    assert!(registry.is_empty(), "{}", registry.snapshot());
    // A panic downstream of the named stage.
    let panicked = weir::range(0u32..10)
        .name("upstream of a panic")
        .registry(&registry)
        .map(|x| if x == 5 { panic!("boom at 5") } else { x })
        .collect()
        .wait();
    assert!(panicked.is_err());
    assert!(registry.is_empty(), "{}", registry.snapshot());
    // A cancel from `take`.
    let first = weir::range(0u32..u32::MAX)
        .name("endless")
        .registry(&registry)
        .take(3)
        .collect()
        .wait()
        .unwrap();
    assert_eq!(first, vec![0, 1, 2]);
    assert!(registry.is_empty(), "{}", registry.snapshot());
}

#[test]
fn ten_thousand_short_lived_pipelines_leave_the_registry_empty() {
    let registry = Registry::new();
    let pool = ThreadPool::builder().threads(2).build();
    let mut handles = Vec::new();
    for i in 0..10_000u32 {
        let source = weir::range(0u32..16).name("source").registry(&registry);
        let handle = match i % 4 {
            // Completes across a boundary.
            0 => source
                .publish_on(pool.clone(), 4)
                .name("hop")
                .registry(&registry)
                .collect(),
            // Cancelled by `take` after a boundary.
            1 => source
                .publish_on(pool.clone(), 1)
                .name("hop")
                .registry(&registry)
                .take(2)
                .collect(),
            // Fails with a panic below the named stage.
            2 => source
                .map(|x| if x == 7 { panic!("boom") } else { x })
                .name("failing")
                .registry(&registry)
                .collect(),
            // A fused synchronous chain.
            _ => source.map(|x| x + 1).collect(),
        };
        handles.push(handle);
        if handles.len() == 256 {
            for handle in handles.drain(..) {
                let _ = handle.wait();
            }
        }
    }
    for handle in handles {
        let _ = handle.wait();
    }
    // A cancelled boundary's task lets go of its stage on its own thread.
    eventually("every pipeline left", || registry.is_empty());
    pool.shutdown();
}

#[test]
fn the_global_registry_is_the_default() {
    let name = format!("global-{}", std::process::id());
    let subscriber = TestSubscriber::<u32>::new();
    let probe = subscriber.probe();
    weir::range(0u32..3)
        .name(name.clone())
        .subscribe(subscriber);
    let listed = Registry::global().snapshot();
    assert!(listed.stage(&name).is_some(), "{listed}");
    probe.cancel();
    assert!(Registry::global().snapshot().stage(&name).is_none());
}

#[test]
fn the_named_publisher_keeps_its_bound_and_monitor() {
    let (_tx, rx) = weir::channel::<u8>(10, ChannelPolicy::Reject);
    let bound = rx.in_flight_bound();
    let named = rx.name("ingest");
    assert_eq!(named.in_flight_bound(), bound);
    assert_eq!(named.queue_monitor().unwrap().snapshot().capacity, 10);
    assert!(weir::range(0u8..3).name("r").queue_monitor().is_none());
}

#[test]
fn pipelines_are_told_apart_and_merged_sources_join_their_downstream() {
    let registry = Registry::new();
    let named = |p: weir::BoxPublisher<u32>, name: &str| p.name(name).registry(&registry).boxed();
    // Two sources merged into one named stage, and a pipeline of its own beside
    // (sources longer than `merge`'s prefetch: they run until cancelled).
    let left = named(weir::range(0u32..100_000).boxed(), "left");
    let right = named(weir::range(0u32..100_000).boxed(), "right");
    let merged = TestSubscriber::<u32>::new();
    let merged_probe = merged.probe();
    named(left.merge(right).boxed(), "merged").subscribe(merged);
    let alone = TestSubscriber::<u32>::new();
    let alone_probe = alone.probe();
    named(named(weir::range(0u32..100_000).boxed(), "a").boxed(), "b").subscribe(alone);
    let snapshot = registry.snapshot();
    let id = |name: &str| snapshot.stage(name).unwrap().id;
    let mut chains: Vec<Vec<u64>> = snapshot.pipelines().into_iter().map(|p| p.stages).collect();
    chains.sort();
    let mut expected = vec![
        vec![id("left"), id("right"), id("merged")],
        vec![id("a"), id("b")],
    ];
    expected.sort();
    assert_eq!(chains, expected, "{snapshot}");
    assert_eq!(snapshot.stage("merged").unwrap().downstream, None);
    assert_eq!(
        snapshot.stage("left").unwrap().downstream,
        Some(id("merged"))
    );
    merged_probe.cancel();
    alone_probe.cancel();
    assert!(registry.is_empty(), "{}", registry.snapshot());
}

#[test]
fn a_fused_synchronous_chain_is_not_listed() {
    // The fold runs as one loop in the caller: no stage, no subscription. The
    // closure looks at the registry from inside the loop.
    let registry = Registry::new();
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(usize::MAX));
    let probe = (registry.clone(), seen.clone());
    let sum = weir::range(0u64..10)
        .map(move |x| {
            probe
                .1
                .store(probe.0.len(), std::sync::atomic::Ordering::Relaxed);
            x
        })
        .name("fused")
        .registry(&registry)
        .fold(0u64, |a, x| a + x)
        .wait()
        .unwrap();
    assert_eq!(sum, 45);
    assert_eq!(seen.load(std::sync::atomic::Ordering::Relaxed), 0);
}

#[test]
fn a_paused_channel_is_listed_as_paused() {
    let registry = Registry::new();
    let (tx, rx) = ChannelBuilder::new(10, ChannelPolicy::Backpressure)
        .water_marks(WaterMarks::new(8, 2))
        .build::<u32>();
    let subscriber = TestSubscriber::<u32>::new();
    let probe = subscriber.probe();
    rx.name("marked").registry(&registry).subscribe(subscriber);
    for i in 0..8 {
        tx.try_send(i).unwrap();
    }
    assert_eq!(tx.state(), FlowState::Paused);
    let snapshot = registry.snapshot();
    let queue = snapshot.stage("marked").unwrap().queue.clone().unwrap();
    assert_eq!((queue.depth, queue.flow), (8, Some(FlowState::Paused)));
    assert!(snapshot.to_string().contains(" paused "), "{snapshot}");
    // Drained to the low mark: flowing again.
    probe.request(6);
    assert_eq!(
        registry
            .snapshot()
            .stage("marked")
            .unwrap()
            .queue
            .as_ref()
            .unwrap()
            .flow,
        Some(FlowState::Flowing)
    );
    probe.cancel();
}

#[test]
fn storms_of_named_pipelines_from_many_threads_leave_the_registry_empty() {
    // Eight threads subscribe and cancel named pipelines across a shared pool at
    // once: every entry must go, whoever ends it.
    let registry = Registry::new();
    let pool = ThreadPool::builder().threads(2).build();
    let threads: Vec<_> = (0..8u32)
        .map(|t| {
            let (registry, pool) = (registry.clone(), pool.clone());
            std::thread::spawn(move || {
                for i in 0..250u32 {
                    let subscriber = TestSubscriber::<u32>::new();
                    let probe = subscriber.probe();
                    weir::range(0u32..1_000)
                        .name("source")
                        .registry(&registry)
                        .publish_on(pool.clone(), 1 + u64::from(i % 4))
                        .name("hop")
                        .registry(&registry)
                        .subscribe(subscriber);
                    match (t + i) % 3 {
                        0 => probe.cancel(),
                        1 => {
                            probe.request(3);
                            probe.cancel();
                        }
                        _ => probe.request(u64::MAX),
                    }
                }
            })
        })
        .collect();
    // Meanwhile, a reader takes snapshots of stages that come and go.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = std::thread::spawn({
        let (registry, stop) = (registry.clone(), stop.clone());
        move || {
            // At least one snapshot, even when the scheduler starts this thread only
            // after the storm (a busy machine): how many overlap it is up to the
            // scheduler, so no count is asserted.
            loop {
                let snapshot = registry.snapshot();
                let _ = (snapshot.to_string(), snapshot.pipelines());
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
            }
        }
    });
    for thread in threads {
        thread.join().expect("no storm thread panics");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    reader.join().expect("snapshots do not panic");
    eventually("every stormed pipeline left", || registry.is_empty());
    pool.shutdown();
}

#[test]
fn a_pool_shut_down_mid_stream_takes_its_named_stages_out() {
    let registry = Registry::new();
    let pool = ThreadPool::builder().threads(1).build();
    let subscriber = TestSubscriber::<u64>::new();
    let probe = subscriber.probe();
    weir::range(0u64..u64::MAX)
        .publish_on(pool.clone(), 16)
        .name("hop")
        .registry(&registry)
        .subscribe(subscriber);
    probe.request(100);
    eventually("the hop delivered", || probe.received_count() >= 100);
    assert_eq!(registry.len(), 1);
    pool.shutdown();
    // Idle, the stage is still there (its subscriber holds it). Asked for more, it
    // finds its scheduler gone: the stream ends with an error, and the entry goes.
    assert_eq!(registry.len(), 1);
    probe.request(100);
    eventually("the stage ended", || probe.is_terminated());
    assert!(
        probe.error().is_some(),
        "ended by the shutdown, with an error"
    );
    eventually("the ended stage left", || registry.is_empty());
}
