//! A channel's sending upstream that breaks the contract: its `request` panics (rule
//! 3.16) or its `cancel` does (rule 3.15). Failures stay in their channel: the
//! broken channel ends (with `Panicked`, or as its receiving side asked), its
//! siblings carry on, and the mux never waits for ever.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weir::mux::{ChannelFrame, Demux, Frames, Mux, Transport};
use weir::prelude::*;
use weir::runtime::{Scheduler, ThreadPool};
use weir::tck::TestSubscriber;
use weir::{ErrorKind, Subscription};

use crate::unruly::Hostile;

const WAIT: Duration = Duration::from_secs(20);

fn pool() -> ThreadPool {
    ThreadPool::builder().name("mux-hostile").threads(2).build()
}

/// Poll `done` until it holds, failing after `WAIT`.
fn eventually(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < WAIT, "{what}: never happened");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The sink asks its upstream once when it subscribes (call 1) and then as the
/// worker takes items (call 2 on): a panic at either ends that channel with
/// `Panicked` naming it, cancels its upstream, and leaves its sibling whole. (The
/// worker's panic used to end the worker, which broke the mux: every channel failed
/// with "the transport stopped carrying frames".)
#[test]
fn a_sending_upstream_whose_request_panics_ends_only_its_channel() {
    for panic_at in 1..=3 {
        let pool = pool();
        let mux = Mux::<u64>::builder()
            .exclusive(4)
            .shared(4)
            .borrow_cap(2)
            .quantum(2)
            .staging(4)
            .build_local(pool.clone(), pool.clone())
            .unwrap();
        let (sink, source) = mux.channel(1).open().unwrap();
        let (upstream, stats) = crate::counting::counted(weir::range(0u64..1_000));
        Hostile {
            source: upstream,
            request_panics_at: panic_at,
            cancel_panics: false,
        }
        .subscribe(sink);
        let broken = TestSubscriber::<u64>::new().request_on_subscribe(100);
        let probe = broken.probe();
        source.subscribe(broken);
        let sibling = weir::range(0u64..1_000)
            .via(&mux, 2)
            .unwrap()
            .fold(0u64, |a, x| a + x)
            .wait();
        assert_eq!(sibling.unwrap(), 499_500, "call {panic_at}: the sibling");
        let error = probe.await_error(WAIT).expect("the broken channel fails");
        assert_eq!(
            error.kind(),
            ErrorKind::Panicked,
            "call {panic_at}: {error}"
        );
        assert_eq!(error.stage(), Some("mux channel"), "call {panic_at}");
        // Items staged before the panic may come first, never more than asked.
        assert!(probe.items().len() < 1_000, "call {panic_at}");
        eventually("the broken channel's upstream cancelled", || {
            stats.cancels() == 1
        });
        eventually("every channel closed", || mux.stats().channels.is_empty());
    }
}

/// A receiving side that ends its channel (here with `request(0)`) cancels the
/// sending upstream; one whose `cancel` panics must not keep the channel open (its
/// id in use, its credit and staged items held: they were, for good).
#[test]
fn a_sending_upstream_whose_cancel_panics_still_lets_its_channel_close() {
    let pool = pool();
    let mux = Mux::<u64>::builder()
        .exclusive(2)
        .shared(4)
        .borrow_cap(2)
        .build_local(pool.clone(), pool.clone())
        .unwrap();
    let (sink, source) = mux.channel(1).open().unwrap();
    Hostile {
        source: weir::range(0u64..1_000_000),
        request_panics_at: 0,
        cancel_panics: true,
    }
    .subscribe(sink);
    let subscriber = TestSubscriber::<u64>::new().request_on_subscribe(3);
    let probe = subscriber.probe();
    source.subscribe(subscriber);
    probe.await_items(3, WAIT).unwrap();
    probe.request(0);
    probe.await_error(WAIT).unwrap();
    eventually("the channel closed", || mux.stats().channels.is_empty());
    assert!(mux.channel(1).open().is_ok(), "the id is free again");
    // The same when the receiving end is dropped unsubscribed.
    let (sink, source) = mux.channel(3).open().unwrap();
    Hostile {
        source: weir::never::<u64>(),
        request_panics_at: 0,
        cancel_panics: true,
    }
    .subscribe(sink);
    drop(source);
    eventually("channel 3 closed", || mux.channel(3).open().is_ok());
}

/// A transport whose frames' subscription the test can cancel (the transport stops).
struct Breakable {
    pool: ThreadPool,
    frames: Arc<Mutex<Option<Subscription>>>,
}

/// The mux's frames, their subscription kept for the test.
struct Tapped {
    frames: Frames<u64>,
    slot: Arc<Mutex<Option<Subscription>>>,
}

struct Tap<S> {
    downstream: S,
    slot: Arc<Mutex<Option<Subscription>>>,
}

impl Publisher for Tapped {
    type Item = ChannelFrame<u64>;
    fn subscribe<S: Subscriber<ChannelFrame<u64>> + Send + 'static>(self, downstream: S) {
        self.frames.subscribe(Tap {
            downstream,
            slot: self.slot,
        });
    }
}

impl<S: Subscriber<ChannelFrame<u64>>> Subscriber<ChannelFrame<u64>> for Tap<S> {
    fn on_subscribe(&mut self, subscription: Subscription) {
        *self.slot.lock().unwrap() = Some(subscription.clone());
        self.downstream.on_subscribe(subscription);
    }
    fn on_next(&mut self, frame: ChannelFrame<u64>) {
        self.downstream.on_next(frame);
    }
    fn on_error(&mut self, error: weir::Error) {
        self.downstream.on_error(error);
    }
    fn on_complete(&mut self) {
        self.downstream.on_complete();
    }
}

impl Transport<u64> for Breakable {
    fn receiver(&self) -> Arc<dyn Scheduler> {
        Arc::new(self.pool.clone())
    }
    fn connect(self, frames: Frames<u64>, demux: Demux<u64>) {
        Tapped {
            frames,
            slot: self.frames,
        }
        .publish_on(self.pool, 16)
        .subscribe(demux);
    }
}

/// When the transport stops, every channel ends with an error and its sending
/// upstream is cancelled; upstreams whose `cancel` panics must not stop the others
/// from ending (the first panic used to end the loop: the channels after it never
/// heard anything).
#[test]
fn a_broken_mux_ends_every_channel_even_when_upstream_cancels_panic() {
    for panicky in [false, true] {
        let pool = pool();
        let frames = Arc::new(Mutex::new(None));
        let mux = Mux::<u64>::builder()
            .build(
                pool.clone(),
                Breakable {
                    pool: pool.clone(),
                    frames: frames.clone(),
                },
            )
            .unwrap();
        let probes: Vec<_> = (0..4u64)
            .map(|id| {
                let (sink, source) = mux.channel(id).open().unwrap();
                Hostile {
                    source: weir::never::<u64>(),
                    request_panics_at: 0,
                    cancel_panics: panicky && id > 0,
                }
                .subscribe(sink);
                let subscriber = TestSubscriber::<u64>::new().request_on_subscribe(10);
                let probe = subscriber.probe();
                source.subscribe(subscriber);
                probe
            })
            .collect();
        eventually("the transport subscribed", || {
            frames.lock().unwrap().is_some()
        });
        // Every channel's upstream subscribed (its sink asked it for items).
        eventually("four channels open", || mux.stats().channels.len() == 4);
        let subscription = frames.lock().unwrap().clone().unwrap();
        subscription.cancel();
        for (id, probe) in probes.iter().enumerate() {
            let error = probe
                .await_error(WAIT)
                .unwrap_or_else(|e| panic!("channel {id} (panicky {panicky}): {e}"));
            assert!(error.kind() != ErrorKind::Panicked, "channel {id}: {error}");
        }
    }
}
