//! `weir::mux`: the acceptance scenarios of credit multiplexing (named after their
//! A-numbers), deterministic under `VirtualTime` and again on real threads, and the
//! conformance kit on a channel's two ends.

#[path = "../support/counting.rs"]
pub mod counting;
#[path = "../support/unruly.rs"]
pub mod unruly;

mod conformance;
mod hostile;
mod registry;
mod threads;
mod virtual_time;

use weir::mux::{ChannelId, Mux};
use weir::prelude::*;
use weir::runtime::Scheduler;
use weir::tck::{TestProbe, TestSubscriber};

/// Channel `id` of `mux` carrying `0..len`, consumed by a probe that asks for
/// nothing yet.
fn probed(mux: &Mux<u64>, id: ChannelId, len: u64) -> TestProbe<u64> {
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    weir::range(0..len)
        .via(mux, id)
        .unwrap()
        .subscribe(subscriber);
    probe
}

/// Channel `id` of `mux` whose sender sends 1 to 10 and then fails with "sender
/// failed"; its consumer asks for 100.
fn failing_sender(mux: &Mux<u64>, id: ChannelId) -> TestProbe<u64> {
    let failing = TestSubscriber::new();
    let failed = failing.probe();
    weir::range(1..11u64)
        .concat(weir::error(weir::Error::msg("sender failed")))
        .via(mux, id)
        .unwrap()
        .subscribe(failing);
    failed.request(100);
    failed
}

/// A mux of bytes whose lane holds one frame (16 items), a quarter of a channel's
/// exclusive credit (E 64): the small transport of A11.
fn one_frame_mux<A, B>(worker: A, receiver: B) -> Mux<u8>
where
    A: Scheduler + Clone,
    B: Scheduler + Clone,
{
    Mux::<u8>::builder()
        .exclusive(64)
        .shared(64)
        .quantum(16)
        .lane(1)
        .build_local(worker, receiver)
        .unwrap()
}

/// The bytes `0..len` (as `u8`) sent over channel `id` of `there` and back over
/// channel `id` of `back`.
fn echoed(there: &Mux<u8>, back: &Mux<u8>, id: ChannelId, len: u64) -> impl Publisher<Item = u8> {
    weir::range(0..len)
        .map(|x| x as u8)
        .via(there, id)
        .unwrap()
        .via(back, id)
        .unwrap()
}
