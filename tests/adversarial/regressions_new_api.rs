//! Regression tests (numbered and lettered as in `regressions.rs`) that needed new API: `ThreadPool::shutdown` (defect 5 for a
//! `ThreadPool`), `ThreadPool::pending_timers` (timers of cancelled stages), and
//! `ChannelBuilder::drop_hook` (drops made before a subscriber is attached). They did
//! not compile on the code before the fixes (commit 36c5bf5), where the defects
//! were shown through the other public API.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use weir::metrics::{DropHook, Drops};
use weir::prelude::*;
use weir::runtime::ThreadPool;
use weir::source::channel::{ChannelBuilder, ChannelPolicy};
use weir::DropReason;

use crate::regressions::shutdown_mid_stream;
use crate::support::assert_no_failures;

/// Defect 5 for a `ThreadPool`. Promise: "Every scheduler must report a task
/// it can no longer run: the pipeline ends with an error of its own kind (scheduler
/// shut down), upstream is cancelled, held items are dropped. Same for a `ThreadPool`
/// that is shut down or dropped while pipelines run." `publish_on(pool, 16)` into
/// `fold`, `pool.shutdown()` mid-stream: the sink must terminate with an error,
/// upstream must be cancelled, and no item may stay alive.
#[test]
fn regression_thread_pool_shutdown_mid_stream_hangs_and_leaks() {
    let pool = ThreadPool::new(2);
    let handle = pool.clone();
    let failures = shutdown_mid_stream(pool, move || handle.shutdown());
    assert_no_failures(
        "publish_on(ThreadPool) with the pool shut down mid-stream",
        &failures,
    );
}

/// Also fix (d). Promise: "Timers of cancelled stages stay in the
/// `ThreadPool` timer map until they fire: a million requests each with a one-hour
/// `timeout` must not hold a million timer entries after they are cancelled (remove
/// on cancel; test the map size)." 100,000 subscriptions, each with a one-hour
/// `timeout` on one pool, each cancelled: the pool must hold fewer than 1,000 timers.
#[test]
fn regression_cancelled_timeouts_stay_in_pool_timer_map() {
    const SUBSCRIPTIONS: usize = 100_000;
    let pool = ThreadPool::new(1);
    for _ in 0..SUBSCRIPTIONS {
        let handle = weir::never::<u64>()
            .timeout_on(Duration::from_secs(3_600), pool.clone())
            .collect();
        handle.cancel();
    }
    let pending = pool.pending_timers();
    assert!(
        pending < 1_000,
        "{pending} timers pending on the pool after {SUBSCRIPTIONS} one-hour timeouts were \
         cancelled"
    );
}

/// Also fix (f). Promise: "Drops made by `weir::channel` before a subscriber
/// is attached reach no drop hook; a hook set on the channel itself must see every
/// drop." A `DropOldest` channel of capacity 2 with a hook set on the channel: 5
/// sends before anyone subscribes drop items 0, 1 and 2, and the hook must see all
/// three (counted and handed over); the subscriber then gets 3 and 4.
#[test]
fn regression_channel_drops_before_subscribe_reach_no_hook() {
    let drops = Drops::new();
    let handed_over = Arc::new(Mutex::new(Vec::new()));
    let hook = {
        let handed_over = handed_over.clone();
        DropHook::new(drops.clone()).inspect(move |dropped| {
            if let Some(item) = dropped.take::<u64>() {
                handed_over.lock().unwrap().push(item);
            }
        })
    };
    let (tx, rx) = ChannelBuilder::new(2, ChannelPolicy::DropOldest)
        .drop_hook(hook)
        .build::<u64>();
    for i in 0..5 {
        tx.try_send(i).expect("DropOldest never refuses an item");
    }
    drop(tx);
    let mut failures = Vec::new();
    if drops.count(DropReason::OverflowOldest) != 3 || drops.total() != 3 {
        failures.push(format!(
            "the hook counted {drops:?}, expected OverflowOldest: 3"
        ));
    }
    let seen = handed_over.lock().unwrap().clone();
    if seen != [0, 1, 2] {
        failures.push(format!("the hook was handed {seen:?}, expected [0, 1, 2]"));
    }
    match rx.collect().wait() {
        Ok(items) if items == [3, 4] => {}
        other => failures.push(format!("the subscriber got {other:?}, expected Ok([3, 4])")),
    }
    assert_no_failures("channel drops before subscribe", &failures);
}
