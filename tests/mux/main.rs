//! `weir::mux`: the acceptance scenarios of credit multiplexing (named after their
//! A-numbers), deterministic under `VirtualTime` and again on real threads, and the
//! conformance kit on a channel's two ends.

mod conformance;
mod threads;
mod virtual_time;

use weir::mux::{ChannelId, Mux};
use weir::prelude::*;
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
