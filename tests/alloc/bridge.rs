//! The stream bridges on a tokio runtime: a stage driven by tasks of the `Tokio`
//! scheduler reuses one long-lived task per subscription, so scheduling a pass
//! allocates nothing (no boxed task, no spawned tokio task per pass).

use futures::StreamExt as _;
use weir::prelude::*;
use weir::runtime::Tokio;

use crate::assert_flat;

/// A current-thread runtime: every task runs on the measuring thread, so the counting
/// allocator (per thread) sees what the tasks allocate too.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime")
}

#[test]
fn from_stream_into_stream_allocates_per_subscription_not_per_pass() {
    let rt = runtime();
    for prefetch in [1u64, 16, 256] {
        assert_flat(
            &format!("from_stream_on(Tokio).into_stream({prefetch})"),
            40,
            |n| {
                rt.block_on(async move {
                    weir::bridge::from_stream_on(futures::stream::iter(0..n), Tokio::current())
                        .into_stream(prefetch)
                        .fold(0u64, |sum, item| async move {
                            sum.wrapping_add(item.expect("no errors"))
                        })
                        .await
                })
            },
            |n| (0..n).fold(0u64, u64::wrapping_add),
        );
    }
}
