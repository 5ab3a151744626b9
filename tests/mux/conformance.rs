//! The conformance kit on a channel's receiving publisher (items `0..n` through a
//! mux) and on its sending subscriber.

use std::sync::OnceLock;
use std::time::Duration;

use weir::mux::{ChannelSink, Mux};
use weir::prelude::*;
use weir::runtime::ThreadPool;
use weir::tck::{PublisherVerification, SubscriberBlackboxVerification, TestEnv};

fn pool() -> ThreadPool {
    static POOL: OnceLock<ThreadPool> = OnceLock::new();
    POOL.get_or_init(|| ThreadPool::builder().name("mux-tck").threads(2).build())
        .clone()
}

fn env() -> TestEnv {
    TestEnv::builder()
        .no_signals_timeout(Duration::from_millis(50))
        .build()
}

/// A fresh mux per publisher (ids are per mux), small credit so that the kit's
/// demand patterns cross announcements and the pool.
fn mux() -> Mux<u64> {
    Mux::builder()
        .exclusive(4)
        .shared(8)
        .borrow_cap(2)
        .quantum(2)
        .build_local(pool(), pool())
        .unwrap()
}

weir::publisher_tck!(
    channel_source,
    PublisherVerification::new(|n| weir::range(0..n).via(&mux(), 0).unwrap())
        .with_failed_publisher(|| weir::error::<u64>(weir::Error::msg("failed on purpose"))
            .via(&mux(), 0)
            .unwrap())
        .stochastic_iterations(10)
        .env(env())
);

/// A sink whose receiving end is consumed without bound.
fn sink() -> ChannelSink<u64> {
    let (sink, source) = mux().channel(0).open().unwrap();
    let _running = source.for_each(|_| {});
    sink
}

weir::subscriber_blackbox_tck!(
    channel_sink_blackbox,
    SubscriberBlackboxVerification::new(sink, |i| i).env(env())
);
