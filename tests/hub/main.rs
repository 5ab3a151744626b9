//! `weir::hub` (`share`): the policies one by one, the connection policy, the
//! conformance kit on a subscriber of every policy, random schedules against a
//! model, and the hub under threads.

#[path = "../support/counting.rs"]
pub mod counting;
#[path = "../support/failing.rs"]
pub mod failing;
#[path = "../support/unruly.rs"]
pub mod unruly;

mod conformance;
mod connect;
mod hostile;
mod policies;
mod registry;
mod schedules;
mod threads;

use weir::hub::{Hub, SubscriberStats};
use weir::prelude::*;
use weir::tck::{TestProbe, TestSubscriber};

/// The stats of subscriber `id` of `hub` (it must still be there).
fn member(hub: &Hub<u64>, id: u64) -> SubscriberStats {
    hub.stats()
        .subscribers
        .into_iter()
        .find(|s| s.id == id)
        .expect("the subscriber is in the hub")
}

/// The end of `handle`'s stream, failing the test as hung (naming `what`) if it has
/// not come within a minute.
fn ended<T>(mut handle: weir::sink::SinkHandle<T>, what: &str) -> Result<T, weir::Error> {
    handle
        .wait_timeout(std::time::Duration::from_secs(60))
        .unwrap_or_else(|| panic!("{what} hung"))
}

/// Subscribe a probe that asks for nothing yet to `publisher`.
fn probe<P: Publisher>(publisher: P) -> TestProbe<P::Item>
where
    P::Item: Send + 'static,
{
    let subscriber = TestSubscriber::new();
    let probe = subscriber.probe();
    publisher.subscribe(subscriber);
    probe
}

/// One thread per entry of `prefetches`, each subscribing `blocking_iter(prefetch)`
/// to `hub` here (so the subscriptions count towards `connect_at` at once) and
/// returning what it iterated, or the stream's error.
fn iterate_on_threads(
    hub: &Hub<u64>,
    prefetches: &[u64],
) -> Vec<std::thread::JoinHandle<Result<Vec<u64>, weir::Error>>> {
    prefetches
        .iter()
        .map(|&prefetch| {
            let iter = hub.clone().blocking_iter(prefetch);
            std::thread::spawn(move || iter.collect())
        })
        .collect()
}
