//! `stream → from_stream → operators → into_stream`, under random demand: every item
//! arrives exactly once, in order (proptest; small cases, the runtime is shared).

use std::time::Duration;

use futures::StreamExt as _;
use proptest::prelude::*;
use weir::prelude::*;

use crate::support::{runtime, tokio};

/// How the consumer takes items: in chunks of `chunk`, pausing between chunks.
#[derive(Clone, Debug)]
struct Consumer {
    chunks: Vec<usize>,
    pause_every: usize,
}

fn consumer() -> impl Strategy<Value = Consumer> {
    (prop::collection::vec(1usize..20, 1..8), 1usize..6).prop_map(|(chunks, pause_every)| {
        Consumer {
            chunks,
            pause_every,
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Random sizes, prefetch windows, `limit_rate` batches and consumer chunking;
    /// the source stream also goes `Pending` now and then (a timer every `gap`th
    /// item), so polls, wakes and requests interleave across the pool's threads.
    #[test]
    fn round_trip_preserves_every_item_in_order(
        n in 0u64..400,
        prefetch in 1u64..70,
        high in 1u64..40,
        low_pct in 0u64..=100,
        gap in 1u64..50,
        consumer in consumer(),
    ) {
        let low = high * low_pct / 100;
        let got = runtime().block_on(async move {
            let source = futures::stream::iter(0..n).then(move |x| async move {
                if x % gap == gap - 1 {
                    tokio::task::yield_now().await;
                }
                x
            });
            let mut stream = weir::bridge::from_stream_on(source, tokio())
                .map(|x| x * 3)
                .filter(|x| x % 2 == 0 || x % 5 != 0)
                .limit_rate(high, low)
                .into_stream(prefetch);
            let mut got = Vec::new();
            let mut round = 0usize;
            'outer: loop {
                for &chunk in &consumer.chunks {
                    for _ in 0..chunk {
                        match stream.next().await {
                            Some(item) => got.push(item.unwrap()),
                            None => break 'outer,
                        }
                    }
                    round += 1;
                    if round % consumer.pause_every == 0 {
                        tokio::time::sleep(Duration::from_micros(200)).await;
                    } else {
                        tokio::task::yield_now().await;
                    }
                }
            }
            got
        });
        let expected: Vec<u64> = (0..n)
            .map(|x| x * 3)
            .filter(|x| x % 2 == 0 || x % 5 != 0)
            .collect();
        prop_assert_eq!(got, expected);
    }
}
