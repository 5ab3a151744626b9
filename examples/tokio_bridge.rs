//! weir inside a tokio program: a tokio channel bridged in, a `Stream` bridged out,
//! and a sink awaited, all on one runtime, with demand crossing every bridge.
//!
//! 1. **Receiver in, `Stream` out.** A producer task sends order amounts into a
//!    bounded `tokio::sync::mpsc` channel. `weir::from_receiver` turns the receiver
//!    into a publisher (it polls only while there is demand, so the channel's bound
//!    pushes back on the producer); weir filters and converts; `into_stream(32)` hands
//!    the result to async code as a `Stream` that asks for 32 and replenishes at 75%.
//! 2. **`Stream` in, sink awaited.** `weir::from_stream` wraps a `futures` stream;
//!    `buffer` makes batches; `for_each_async` stores each batch with an async call,
//!    one at a time; the handle is awaited. `fold(…).await` sums another pipeline.
//!
//! Run: `cargo run --release --features tokio --example tokio_bridge`

use std::sync::{Arc, Mutex};

use futures::TryStreamExt;
use weir::prelude::*;

/// What the example computed, for the test that runs it.
#[derive(Debug, PartialEq)]
pub struct Report {
    /// Large orders (≥ 100) in cents, as the `Stream` consumer saw them.
    pub large_orders: Vec<u64>,
    /// Batches the async store received.
    pub stored_batches: Vec<Vec<u32>>,
    /// The sum a `fold` sink computed, awaited.
    pub total: u64,
}

/// The three bridges, on the current tokio runtime.
pub async fn run() -> Result<Report, weir::Error> {
    // ---- 1. receiver in, Stream out ----
    let (tx, rx) = tokio::sync::mpsc::channel::<u64>(16);
    let producer = tokio::spawn(async move {
        for amount in 0..500u64 {
            // Waits while the channel is full: weir polls it only against demand.
            if tx.send(amount).await.is_err() {
                return;
            }
        }
    });
    let mut large = weir::from_receiver(rx)
        .filter(|amount| *amount >= 100)
        .map(|amount| amount * 100) // in cents
        .into_stream(32);
    let mut large_orders = Vec::new();
    // `Result` items: `?` ends the loop on the stream's error.
    while let Some(cents) = large.try_next().await? {
        large_orders.push(cents);
    }
    producer.await.expect("the producer task ran");

    // ---- 2. Stream in, async sink awaited ----
    let store = Arc::new(Mutex::new(Vec::new()));
    let db = store.clone();
    weir::from_stream(futures::stream::iter(0..50u32))
        .buffer(10)
        .for_each_async(move |batch| {
            let db = db.clone();
            async move {
                tokio::task::yield_now().await; // an insert into a database, say
                db.lock().unwrap().push(batch);
            }
        })
        .await?;
    let stored_batches = store.lock().unwrap().clone();

    // Any sink's handle can be awaited too.
    let total = weir::from_stream(futures::stream::iter(1..=100u64))
        .fold(0, |sum, x| sum + x)
        .await?;

    Ok(Report {
        large_orders,
        stored_batches,
        total,
    })
}

/// Runs the example on a multi-threaded runtime and prints what happened.
#[tokio::main]
pub async fn main() -> Result<(), weir::Error> {
    let report = run().await?;
    println!(
        "stream out: {} large orders, first {:?}, last {:?}",
        report.large_orders.len(),
        report.large_orders.first(),
        report.large_orders.last()
    );
    println!(
        "async sink: {} batches stored, sizes {:?}",
        report.stored_batches.len(),
        report
            .stored_batches
            .iter()
            .map(Vec::len)
            .collect::<Vec<_>>()
    );
    println!("fold awaited: {}", report.total);
    Ok(())
}
