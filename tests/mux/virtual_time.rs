//! The scenarios under `VirtualTime`: nothing runs until the test says so, so every
//! figure is exact. A "tick" is one millisecond of virtual time: consumers request
//! their rate, then every task due runs.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use weir::mux::{jain_index, ChannelFrame, ChannelId, Demux, Frames, Mux, MuxError, Transport};
use weir::prelude::*;
use weir::runtime::{Scheduler, VirtualTime};
use weir::tck::TestSubscriber;

const E: u64 = 32;
const S: u64 = 128;
const C: u64 = 32;

fn mux(vt: &VirtualTime) -> Mux<u64> {
    Mux::builder()
        .exclusive(E)
        .shared(S)
        .borrow_cap(C)
        .build_local(vt.clone(), vt.clone())
        .unwrap()
}

use super::{echoed, one_frame_mux, probed as channel};

fn tick(vt: &VirtualTime) {
    vt.advance(Duration::from_millis(1));
}

/// The naive baseline: one bounded FIFO of 64 `(channel, item)`, one dispatcher that
/// moves its head into per-channel queues of 32 and waits while the head's queue is
/// full; producers fill the FIFO round robin; each consumer takes `rate` per tick
/// unless stalled. Returns what each channel's consumer took after `stall_at`.
fn naive(channels: usize, rate: u64, stalled: &[usize], stall_at: u64, ticks: u64) -> Vec<u64> {
    use std::collections::VecDeque;
    let mut fifo: VecDeque<usize> = VecDeque::new();
    let mut queues = vec![0u64; channels];
    let mut after = vec![0u64; channels];
    let mut next = 0;
    for t in 0..ticks {
        for _ in 0..channels * rate as usize * 4 {
            if fifo.len() < 64 {
                fifo.push_back(next);
                next = (next + 1) % channels;
            }
            match fifo.front() {
                Some(&c) if queues[c] < 32 => {
                    fifo.pop_front();
                    queues[c] += 1;
                }
                _ => break,
            }
        }
        for c in 0..channels {
            if t >= stall_at && stalled.contains(&c) {
                continue;
            }
            let took = queues[c].min(rate);
            queues[c] -= took;
            if t >= stall_at {
                after[c] += took;
            }
        }
    }
    after
}

/// A1 and A4: eight channels, consumer 0 stops at tick 100 for 2,000 ticks (2 s), the
/// others take 10 items a tick. Healthy aggregate ≥ 95% of what they asked for, each
/// ≥ 90% of the healthy mean, the stalled channel holds ≤ E + C, no healthy sender
/// waits for credit during the stall; the naive FIFO collapses.
/// Then consumer 0 resumes: every item exactly once, in order, credit conserved.
#[test]
fn a1_a4_one_stalled_consumer_costs_the_others_nothing_and_resumes() {
    let vt = VirtualTime::new();
    let mux = mux(&vt);
    let len = 40_000;
    let probes: Vec<_> = (0..8).map(|id| channel(&mux, id, len)).collect();
    // The stall lasts 2 s of virtual time (a tick is 1 ms).
    let (stall_at, stall_for, rate) = (100, 2_000, 10);
    let mut at_stall = vec![0; 8];
    let mut blocked_at_stall = vec![0; 8];
    let mut max_stalled_buffered = 0;
    for t in 0..stall_at + stall_for {
        if t == stall_at {
            at_stall = probes.iter().map(|p| p.received_count()).collect();
            let stats = mux.stats();
            blocked_at_stall = (0..8)
                .map(|c| stats.channel(c).unwrap().blocked_events)
                .collect();
        }
        for (c, probe) in probes.iter().enumerate() {
            if c != 0 || t < stall_at {
                probe.request(rate);
            }
        }
        tick(&vt);
        let stats = mux.stats();
        max_stalled_buffered = max_stalled_buffered.max(stats.channel(0).unwrap().buffered);
        assert!(stats.buffered_total <= 8 * E + S);
    }
    let healthy: Vec<u64> = (1..8)
        .map(|c| probes[c].received_count() - at_stall[c])
        .collect();
    let asked = 7 * rate * stall_for;
    let total: u64 = healthy.iter().sum();
    assert!(
        total * 100 >= asked * 95,
        "healthy aggregate {total} of {asked}"
    );
    let mean = total as f64 / 7.0;
    for (c, &got) in healthy.iter().enumerate() {
        assert!(
            got as f64 >= 0.9 * mean,
            "channel {}: {got} vs mean {mean}",
            c + 1
        );
    }
    assert!(
        max_stalled_buffered <= E + C,
        "stalled channel buffered {max_stalled_buffered}"
    );
    // No healthy sender waited for credit during the stall. (At 10 items a tick a
    // healthy channel never runs out of its own exclusive credit, so this guards
    // against a change that makes them share or wait for credit, not a likely race.)
    let stats = mux.stats();
    for c in 1..8 {
        assert_eq!(
            stats.channel(c).unwrap().blocked_events,
            blocked_at_stall[c as usize],
            "healthy channel {c} blocked on credit during the stall"
        );
    }
    // The same script through one FIFO and one dispatcher: everyone stops with 0.
    let naive = naive(8, rate, &[0], stall_at, stall_at + stall_for);
    let naive_healthy: u64 = naive[1..].iter().sum();
    assert!(
        naive_healthy * 10 < asked,
        "the naive FIFO kept {naive_healthy} of {asked}: the baseline should collapse"
    );

    // A4: resume; everything arrives exactly once, in order, with a progress watchdog.
    let mut idle = 0;
    let mut last = 0;
    while probes.iter().any(|p| !p.is_terminated()) {
        for probe in &probes {
            probe.request(rate * 10);
        }
        tick(&vt);
        let seen: u64 = probes.iter().map(|p| p.received_count()).sum();
        idle = if seen == last { idle + 1 } else { 0 };
        last = seen;
        assert!(
            idle < 2_000,
            "no progress for 2,000 ticks: {:?}",
            mux.stats()
        );
    }
    for probe in &probes {
        probe.assert_completed();
        assert_eq!(probe.items(), (0..len).collect::<Vec<_>>());
        probe.assert_no_violations();
    }
    let stats = mux.stats();
    assert_eq!(stats.pool_free, S, "pool whole after close: {stats:?}");
    assert!(stats.channels.is_empty(), "every channel closed");
    assert!(stats.high_water <= 8 * E + S);
}

/// A2: ⌈S/C⌉ = 4 stalled consumers after each took a burst of credit: the healthy ones
/// keep their rate on exclusive credit.
#[test]
fn a2_the_pool_exhausted_by_stalled_channels_still_leaves_the_healthy_at_full_rate() {
    let vt = VirtualTime::new();
    let mux = mux(&vt);
    let probes: Vec<_> = (0..8).map(|id| channel(&mux, id, u64::MAX)).collect();
    let rate = 10;
    let mut before = vec![0; 8];
    for t in 0..1_100 {
        if t == 100 {
            before = probes.iter().map(|p| p.received_count()).collect();
        }
        for (c, probe) in probes.iter().enumerate() {
            if c >= 4 || t < 100 {
                probe.request(rate);
            }
        }
        tick(&vt);
    }
    let healthy: u64 = (4..8).map(|c| probes[c].received_count() - before[c]).sum();
    assert!(healthy * 100 >= 4 * rate * 1_000 * 95, "healthy {healthy}");
    let stats = mux.stats();
    for c in 0..4 {
        let chan = stats.channel(c).unwrap();
        assert!(
            chan.shared_held <= chan.buffered,
            "stalled {c} holds only what backs items"
        );
    }
    for probe in &probes {
        probe.cancel();
    }
    vt.run_ready();
    assert_eq!(mux.stats().pool_free, S);
}

/// A5: cancelling the stalled channel returns its credit within one run of the
/// scheduler, and cancels its sending upstream.
#[test]
fn a5_cancel_returns_credit_at_once() {
    let vt = VirtualTime::new();
    let mux = mux(&vt);
    let cancelled = Arc::new(Mutex::new(false));
    let flag = cancelled.clone();
    let subscriber = TestSubscriber::new();
    let stalled = subscriber.probe();
    weir::range(0..u64::MAX)
        .inspect_cancel(move || *flag.lock().unwrap() = true)
        .via(&mux, 0)
        .unwrap()
        .subscribe(subscriber);
    stalled.request(1_000);
    vt.run_ready();
    assert_eq!(stalled.received_count(), 1_000);
    let other = channel(&mux, 1, 100);
    other.request(100);
    stalled.cancel();
    vt.run_ready();
    assert!(*cancelled.lock().unwrap(), "upstream cancelled");
    assert!(
        mux.stats().channel(0).is_none(),
        "the cancelled channel closed"
    );
    assert!(other.is_completed());
    assert_eq!(mux.stats().pool_free, S);
}

/// Each frame's channel and size, in sending order.
type FrameLog = Arc<Mutex<Vec<(ChannelId, usize)>>>;

/// A transport that records every frame's channel and size, then carries it over an
/// async boundary of 4 frames, as the local transport does.
struct Recording {
    vt: VirtualTime,
    log: FrameLog,
}

impl Transport<u64> for Recording {
    fn receiver(&self) -> Arc<dyn Scheduler> {
        Arc::new(self.vt.clone())
    }

    fn connect(self, frames: Frames<u64>, demux: Demux<u64>) {
        let log = self.log;
        frames
            .inspect(move |frame: &ChannelFrame<u64>| {
                log.lock().unwrap().push((frame.channel, frame.items.len()))
            })
            .publish_on(self.vt, 4)
            .subscribe(demux);
    }
}

fn recorded_mux(vt: &VirtualTime, quantum: u64) -> (Mux<u64>, FrameLog) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let mux = Mux::builder()
        .exclusive(1 << 16)
        .shared(0)
        .quantum(quantum)
        .fairness_window(Duration::from_millis(10))
        .build(
            vt.clone(),
            Recording {
                vt: vt.clone(),
                log: log.clone(),
            },
        )
        .unwrap();
    (mux, log)
}

/// A6: three equal channels with three quanta each go a, b, c, a, b, c, a, b, c;
/// sixteen equal channels share the frames with Jain's index 1 (≥ 0.99, over the
/// whole run and over the mux's own last window); weights
/// 1:2:4 get items 1:2:4 (within 5%).
#[test]
fn a6_equal_channels_take_turns_and_weights_scale_their_share() {
    let vt = VirtualTime::new();
    let (mux, log) = recorded_mux(&vt, 4);
    let probes: Vec<_> = (0..3).map(|id| channel(&mux, id, 12)).collect();
    for probe in &probes {
        probe.request(u64::MAX);
    }
    vt.run_ready();
    let order: Vec<ChannelId> = log.lock().unwrap().iter().map(|(c, _)| *c).collect();
    assert_eq!(order, [0, 1, 2, 0, 1, 2, 0, 1, 2]);

    let vt = VirtualTime::new();
    let (mux, log) = recorded_mux(&vt, 4);
    let probes: Vec<_> = (0..16).map(|id| channel(&mux, id, u64::MAX)).collect();
    for _ in 0..50 {
        for probe in &probes {
            probe.request(100);
        }
        tick(&vt);
    }
    let mut shares = [0u64; 16];
    for &(c, n) in log.lock().unwrap().iter() {
        shares[c as usize] += n as u64;
    }
    assert!(jain_index(&shares) >= 0.99, "{shares:?}");
    // The mux's own index, over its last 10 ms window.
    let fairness = mux.stats().fairness.expect("windows completed");
    assert!(fairness >= 0.99, "windowed fairness {fairness}");
    for probe in &probes {
        probe.cancel();
    }

    let vt = VirtualTime::new();
    let (mux, log) = recorded_mux(&vt, 4);
    let mut probes = Vec::new();
    for (id, weight) in [(0u64, 1u64), (1, 2), (2, 4)] {
        let (sink, source) = mux.channel(id).weight(weight).open().unwrap();
        weir::range(0..u64::MAX).subscribe(sink);
        let subscriber = TestSubscriber::new();
        probes.push(subscriber.probe());
        source.subscribe(subscriber);
    }
    for probe in &probes {
        probe.request(100_000);
    }
    // Every channel has more backlog than it can send: count the first 300 frames.
    vt.run_ready();
    let mut items = [0u64; 3];
    for &(c, n) in log.lock().unwrap().iter().take(300) {
        items[c as usize] += n as u64;
    }
    for (c, want) in [(1usize, 2.0), (2, 4.0)] {
        let ratio = items[c] as f64 / items[0] as f64;
        assert!((ratio / want - 1.0).abs() <= 0.05, "{items:?}");
    }
    for probe in &probes {
        probe.cancel();
    }
}

/// A8 and A9: 999 idle channels (opened, never asked) and one hot one: the idle ones
/// never get pool credit, the hot one gets its E + C; an idle channel that wakes gets
/// its first item in the next round.
#[test]
fn a8_a9_idle_channels_get_no_pool_and_the_hot_one_uses_it() {
    let vt = VirtualTime::new();
    let mux = mux(&vt);
    let idle: Vec<_> = (1..1_000).map(|id| channel(&mux, id, 10)).collect();
    let hot = channel(&mux, 0, u64::MAX);
    hot.request(1_000_000);
    vt.run_ready();
    let stats = mux.stats();
    assert_eq!(hot.received_count(), 1_000_000);
    assert_eq!(
        stats.high_water,
        E + C,
        "the hot channel used its exclusive and its cap"
    );
    for id in 1..1_000 {
        assert_eq!(
            stats.channel(id).unwrap().shared_grants,
            0,
            "idle {id} got pool credit"
        );
    }
    idle[500].request(1);
    hot.request(1_000_000);
    vt.run_ready();
    assert_eq!(idle[500].items(), [0]);
    hot.cancel();
    for probe in &idle {
        probe.cancel();
    }
    vt.run_ready();
    assert_eq!(mux.stats().pool_free, S);
}

/// A10: announcements are coalesced at E/2; bad configurations are refused naming the
/// setting.
#[test]
fn a10_credit_is_announced_in_batches_and_stranding_configurations_are_refused() {
    let vt = VirtualTime::new();
    let mux = mux(&vt);
    let items = 100_000;
    let probes: Vec<_> = (0..8).map(|id| channel(&mux, id, items)).collect();
    while probes.iter().any(|p| !p.is_terminated()) {
        for probe in &probes {
            probe.request(7);
        }
        tick(&vt);
    }
    let closed_announcements: u64 = 8 * items / (E / 2);
    // The channels closed: count from their deliveries, announcements ≤ items/16 + N.
    assert!(
        mux.stats().announcements <= closed_announcements + 8,
        "{} announcements for {} items",
        mux.stats().announcements,
        8 * items
    );

    let refused = |builder: weir::mux::MuxBuilder<u64>, parameter: &str| match builder
        .build_local(vt.clone(), vt.clone())
    {
        Err(MuxError::Config {
            parameter: p,
            reason,
        }) => {
            assert_eq!(p, parameter, "{reason}");
            assert!(!reason.is_empty());
        }
        other => panic!("expected {parameter} refused, got {other:?}"),
    };
    refused(
        Mux::builder().shared(8).max_channels(8).shared_return(4),
        "shared_return",
    );
    refused(Mux::builder().shared(8).borrow_cap(9), "borrow_cap");
    refused(Mux::builder().quantum(0), "quantum");
    refused(Mux::builder().exclusive(0).shared(0), "exclusive");
    refused(Mux::builder().exclusive(8).announce_at(9), "announce_at");
    refused(Mux::builder().classes(0), "classes");
    refused(Mux::builder().lane(0), "lane");
    refused(
        Mux::builder().fairness_window(Duration::ZERO),
        "fairness_window",
    );
    // `Duration::MAX` is accepted and means the window never closes.
    let never = Mux::<u64>::builder()
        .fairness_window(Duration::MAX)
        .build_local(vt.clone(), vt.clone())
        .unwrap();
    let carried = channel(&never, 0, 100);
    carried.request(100);
    vt.advance(Duration::from_secs(3_600));
    assert!(carried.is_completed());
    assert_eq!(never.stats().fairness, None);
    let mux = self::mux(&vt);
    assert!(matches!(
        mux.channel(1).weight(0).open(),
        Err(MuxError::Config {
            parameter: "weight",
            ..
        })
    ));
    let _open = mux.channel(1).open().unwrap();
    assert_eq!(
        mux.channel(1).open().unwrap_err(),
        MuxError::ChannelInUse(1)
    );
}

/// How a channel ended, and how many items the busy channels had received by then.
type Ending = Arc<Mutex<Option<(Result<(), String>, u64)>>>;

/// A consumer that asks for `request` items and, when its channel ends, notes how
/// many items the `busy` channels' consumers had received by then.
struct Witness {
    request: u64,
    busy: Vec<weir::tck::TestProbe<u64>>,
    ending: Ending,
}

impl Witness {
    fn end(&self, how: Result<(), String>) {
        let seen = self.busy.iter().map(|p| p.received_count()).sum();
        *self.ending.lock().unwrap() = Some((how, seen));
    }
}

impl Subscriber<u64> for Witness {
    fn on_subscribe(&mut self, subscription: Subscription) {
        subscription.request(self.request);
    }
    fn on_next(&mut self, _item: u64) {}
    fn on_error(&mut self, error: weir::Error) {
        self.end(Err(error.message().to_owned()));
    }
    fn on_complete(&mut self) {
        self.end(Ok(()));
    }
}

/// Seven busy channels, 100,000 items asked for each, over a lane of one frame.
fn saturated(vt: &VirtualTime) -> (Mux<u64>, Vec<weir::tck::TestProbe<u64>>) {
    let mux = Mux::builder()
        .exclusive(E)
        .shared(S)
        .borrow_cap(C)
        .lane(1)
        .build_local(vt.clone(), vt.clone())
        .unwrap();
    let busy: Vec<_> = (1..8).map(|id| channel(&mux, id, u64::MAX)).collect();
    for probe in &busy {
        probe.request(100_000);
    }
    (mux, busy)
}

/// A12: control does not wait behind data. Over a lane of one frame kept full by
/// seven busy channels (700,000 items asked for), a sender's error reaches its
/// consumer after its 10 items while the busy channels have received a small part of
/// theirs, and a cancel closes its channel in one run of the scheduler.
#[test]
fn a12_cancel_and_errors_bypass_a_saturated_lane() {
    let vt = VirtualTime::new();
    let (mux, busy) = saturated(&vt);
    let ending: Ending = Arc::default();
    weir::range(1..11u64)
        .concat(weir::error(weir::Error::msg("sender failed")))
        .via(&mux, 0)
        .unwrap()
        .subscribe(Witness {
            request: 100,
            busy: busy.clone(),
            ending: ending.clone(),
        });
    vt.run_ready();
    let (how, seen) = ending.lock().unwrap().clone().expect("the channel ended");
    assert_eq!(how, Err("sender failed".to_owned()));
    assert!(
        seen < 7 * 100_000 / 10,
        "the error waited for {seen} busy items"
    );
    busy[0].cancel();
    vt.run_ready();
    assert!(
        mux.stats().channel(1).is_none(),
        "cancelled channel closed in one run"
    );
    for probe in &busy {
        probe.cancel();
    }
    vt.run_ready();
    assert_eq!(mux.stats().pool_free, S);
    assert!(mux.stats().channels.is_empty());
}

/// A14: zero exclusive credit, a pool of one, two channels, one stalled: the other
/// completes.
#[test]
fn a14_zero_exclusive_mode_survives_a_stalled_channel() {
    let vt = VirtualTime::new();
    let mux = Mux::<u64>::builder()
        .exclusive(0)
        .shared(1)
        .borrow_cap(1)
        .build_local(vt.clone(), vt.clone())
        .unwrap();
    let stalled = channel(&mux, 0, 1_000);
    let other = channel(&mux, 1, 1_000);
    stalled.request(3);
    other.request(u64::MAX);
    vt.run_ready();
    assert_eq!(stalled.received_count(), 3);
    assert!(other.is_completed());
    assert_eq!(other.items(), (0..1_000).collect::<Vec<_>>());
    stalled.cancel();
    vt.run_ready();
    assert_eq!(mux.stats().pool_free, 1);
}

/// A9: a hundred channels opened and never subscribed (their senders have items,
/// nobody asked for any) are never granted pool credit; the one active channel uses
/// its exclusive credit and its cap, no more.
#[test]
fn a9_channels_nobody_subscribed_get_no_pool_credit() {
    let vt = VirtualTime::new();
    let mux = mux(&vt);
    let mut unsubscribed = Vec::new();
    for id in 1..=100 {
        let (sink, source) = mux.channel(id).open().unwrap();
        weir::range(0..1_000u64).subscribe(sink);
        unsubscribed.push(source);
    }
    let active = channel(&mux, 0, u64::MAX);
    active.request(100_000);
    vt.run_ready();
    assert_eq!(active.received_count(), 100_000);
    let stats = mux.stats();
    assert_eq!(stats.high_water, E + C, "the active channel: E + C at most");
    for id in 1..=100 {
        let chan = stats.channel(id).unwrap();
        assert_eq!(
            (chan.shared_grants, chan.shared_held, chan.buffered),
            (0, 0, 0),
            "unsubscribed {id}"
        );
        assert!(chan.backlog > 0, "its sender staged items");
    }
    active.cancel();
    for source in unsubscribed {
        let late = TestSubscriber::new();
        let probe = late.probe();
        source.subscribe(late);
        probe.cancel();
    }
    vt.run_ready();
    assert_eq!(mux.stats().pool_free, S);
    assert!(mux.stats().channels.is_empty(), "every channel closed");
}

/// A11 under virtual time: eight channels echo 64 KiB each through two muxes whose
/// lanes hold one frame (16 items), a quarter of a channel's exclusive credit.
#[test]
fn a11_bidirectional_echo_over_a_one_frame_lane_completes() {
    let vt = VirtualTime::new();
    let there = one_frame_mux(vt.clone(), vt.clone());
    let back = one_frame_mux(vt.clone(), vt.clone());
    let len = 64 * 1024u64;
    let echoes: Vec<_> = (0..8u64)
        .map(|id| {
            let subscriber = TestSubscriber::new();
            let probe = subscriber.probe();
            echoed(&there, &back, id, len).subscribe(subscriber);
            probe.request(u64::MAX);
            probe
        })
        .collect();
    vt.run_ready();
    for echo in &echoes {
        assert!(echo.is_completed(), "echo finished");
        let items = echo.items();
        assert_eq!(items.len() as u64, len);
        assert!(
            items.iter().enumerate().all(|(i, b)| *b == i as u8),
            "in order"
        );
    }
}

/// A12, completion: over the same saturated lane, a channel whose consumer asked for
/// exactly what its sender had completes after its items while the busy channels
/// have received a small part of theirs.
#[test]
fn a12_completion_bypasses_a_saturated_lane() {
    let vt = VirtualTime::new();
    let (mux, busy) = saturated(&vt);
    let ending: Ending = Arc::default();
    weir::range(0..10u64)
        .via(&mux, 0)
        .unwrap()
        .subscribe(Witness {
            request: 10,
            busy: busy.clone(),
            ending: ending.clone(),
        });
    vt.run_ready();
    let (how, seen) = ending.lock().unwrap().clone().expect("the channel ended");
    assert_eq!(how, Ok(()));
    assert!(
        seen < 7 * 100_000 / 10,
        "completion waited for {seen} busy items"
    );
    assert!(mux.stats().channel(0).is_none(), "and closed");
    for probe in &busy {
        probe.cancel();
    }
    vt.run_ready();
    assert_eq!(mux.stats().pool_free, S);
}

/// A13 under virtual time: one of eight consumers panics at its 500th item; only its
/// channel ends (its upstream cancelled once, its credit back), the seven others,
/// taking 10 items a tick, get ≥ 95% of what they asked for meanwhile, and every
/// item in order.
#[test]
fn a13_a_panicking_consumer_ends_only_its_channel() {
    let vt = VirtualTime::new();
    let mux = mux(&vt);
    let cancels = Arc::new(Mutex::new(0u32));
    let counted = cancels.clone();
    let mut panicking = weir::range(0..u64::MAX)
        .inspect_cancel(move || *counted.lock().unwrap() += 1)
        .via(&mux, 0)
        .unwrap()
        .for_each(|x| {
            if x == 500 {
                panic!("consumer fails on purpose");
            }
        });
    let (n, rate, ticks) = (20_000, 10, 1_000);
    let others: Vec<_> = (1..8).map(|id| channel(&mux, id, n)).collect();
    for _ in 0..ticks {
        for probe in &others {
            probe.request(rate);
        }
        tick(&vt);
    }
    let ended = panicking
        .wait_timeout(Duration::ZERO)
        .expect("the panicking channel ended");
    assert!(ended.is_err(), "a panic is an error of the sink");
    assert_eq!(*cancels.lock().unwrap(), 1, "its upstream cancelled once");
    assert!(mux.stats().channel(0).is_none(), "its channel closed");
    let got: u64 = others.iter().map(|p| p.received_count()).sum();
    let asked = 7 * rate * ticks;
    assert!(got * 100 >= asked * 95, "the others got {got} of {asked}");
    for probe in &others {
        probe.request(u64::MAX);
    }
    vt.run_ready();
    for probe in &others {
        assert!(probe.is_completed());
        assert_eq!(probe.items(), (0..n).collect::<Vec<_>>());
    }
    assert_eq!(mux.stats().pool_free, S);
}
