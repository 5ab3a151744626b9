//! `take` (mirrors `operators/take.rs`): Limiting. Upstream is asked for at most `n`
//! items in total, whatever downstream requests; after the `n`th item `take`
//! completes downstream and cancels upstream.

use std::sync::atomic::Ordering;

use proptest::prelude::*;
use weir::demand::UNBOUNDED;
use weir::prelude::*;
use weir::tck::proptest::{check_publisher, demand_schedule};
use weir::Error;

use crate::baseline::{self, request};
use crate::support::counting::{counted, counting_generator};
use crate::support::failing::fails_after;
use crate::support::model::{check_model, schedule, Completion};
use crate::support::{probe_of, shape};

#[test]
fn smoke() {
    baseline::smoke(weir::range(0u64..u64::MAX).take(4), &[0, 1, 2, 3]);

    // A shorter source simply completes.
    baseline::smoke(weir::range(0u8..3).take(10), &[0, 1, 2]);
}

#[test]
fn respects_demand() {
    baseline::respects_demand(
        weir::range(0u64..1_000),
        |source| source.take(5),
        &[
            request(1, &[0], (1, 1)).log(&[1]),
            request(2, &[0, 1, 2], (3, 3)).log(&[1, 2]),
            // Asking for more than is left is capped at what is left.
            request(10, &[0, 1, 2, 3, 4], (5, 5))
                .log(&[1, 2, 2])
                .completes(),
        ],
    );
}

#[test]
fn cancel_stops_upstream() {
    baseline::cancel_stops_upstream(|source| source.take(100), &[0, 1, 2], 3);
}

#[test]
fn error_propagates_once() {
    // An error before the nth item passes.
    baseline::error_propagates_once(|source, _| source.take(5), 2, &[1, 2], 0);

    // An error after the nth item cannot arrive: take completed and cancelled first.
    let probe = probe_of(fails_after(3, Error::msg("source failed")).take(3));
    probe.request(UNBOUNDED);
    assert_eq!(shape(&probe), "SNNNC");
}

#[test]
fn completes() {
    // A source shorter than n completes take with it.
    baseline::completes(
        weir::range(0u64..3),
        |source| source.take(10),
        3,
        &[0, 1, 2],
    );

    // An empty source completes with no demand at all.
    baseline::completes(weir::empty::<u64>(), |source| source.take(3), 0, &[]);
}

#[test]
fn completes_exactly_after_n_and_cancels_upstream() {
    let (generator, calls) = counting_generator(u64::MAX);
    let (source, stats) = counted(generator);
    let probe = probe_of(source.take(4));

    probe.request(3);
    assert_eq!(shape(&probe), "SNNN");
    assert_eq!(stats.cancels(), 0);

    // The 4th item completes the stream at once: no further request needed.
    probe.request(1);
    assert_eq!(shape(&probe), "SNNNNC");
    probe.assert_items(&[0, 1, 2, 3]);
    assert_eq!(stats.cancels(), 1, "upstream cancelled after the nth item");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        4,
        "upstream pulled exactly n times"
    );

    probe.request(100);
    assert_eq!(shape(&probe), "SNNNNC");
    assert_eq!(stats.requested(), 4, "nothing requested after the end");
    assert_eq!(calls.load(Ordering::SeqCst), 4);
}

#[test]
fn never_requests_more_than_n_upstream() {
    // Unbounded demand from a sink.
    let (source, stats) = counted(weir::range(0u64..1_000));
    let out = source.take(10).collect_with(UNBOUNDED).wait().unwrap();
    assert_eq!(out, (0..10).collect::<Vec<_>>());
    assert_eq!(stats.request_log(), vec![10]);
    assert_eq!(stats.delivered(), 10);

    // Unbounded demand in pieces, plus more after saturation.
    let (source, stats) = counted(weir::range(0u64..u64::MAX));
    let probe = probe_of(source.take(7));
    probe.request(UNBOUNDED - 1);
    probe.request(UNBOUNDED);
    probe.request(3);
    probe.assert_items(&[0, 1, 2, 3, 4, 5, 6]);
    probe.assert_completed();
    assert_eq!(stats.requested(), 7);

    // Many small requests that add up to more than n.
    let (source, stats) = counted(weir::range(0u64..u64::MAX));
    let probe = probe_of(source.take(10));
    for _ in 0..8 {
        probe.request(3);
    }
    assert_eq!(probe.received_count(), 10);
    assert_eq!(stats.request_log(), vec![3, 3, 3, 1]);

    // A batching sink whose window is larger than n.
    let (source, stats) = counted(weir::range(0u64..1_000));
    let out = source.take(100).collect_with(64).wait().unwrap();
    assert_eq!(out.len(), 100);
    assert_eq!(stats.requested(), 100);
    assert!(!stats.over_delivered());
}

#[test]
fn take_zero_completes_without_requesting_and_cancels_upstream() {
    let (source, stats) = counted(weir::range(0u64..10));
    let probe = probe_of(source.take(0));
    // Completed with zero demand.
    assert_eq!(shape(&probe), "SC");
    assert_eq!(stats.request_calls(), 0, "take(0) requests nothing");
    assert_eq!(stats.cancels(), 1, "take(0) cancels upstream");
    assert_eq!(stats.delivered(), 0);
    probe.request(5);
    assert_eq!(shape(&probe), "SC");
    assert_eq!(stats.request_calls(), 0);

    let (generator, calls) = counting_generator(u64::MAX);
    let out = generator.take(0).collect().wait().unwrap();
    assert!(out.is_empty());
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Output equals `input.iter().take(n)`, in order, within demand, under any
    /// schedule. Upstream is asked for exactly `min(n, downstream's demand)`, and is
    /// cancelled once the nth item passed.
    #[test]
    fn matches_the_iterator_model(
        input in prop::collection::vec(any::<u16>(), 0..48),
        n in prop_oneof![4 => 0u64..56, 1 => Just(u64::MAX)],
        schedule in schedule(),
    ) {
        let model = |input: &[u16]| input.iter().copied().take(n as usize).collect();
        let run = check_model(input, model, |s| s.take(n), &schedule, Completion::AtLength)?;
        let (stats, probe) = (&run.stats, &run.probe);
        prop_assert_eq!(stats.requested(), n.min(probe.requested()));
        if n == 0 {
            prop_assert_eq!((stats.request_calls(), stats.cancels()), (0, 1));
        } else {
            let reached = u64::from(probe.received_count() == n);
            prop_assert_eq!(stats.cancels(), schedule.cancels() + reached);
        }
    }

    /// The kit's random schedules (1-3 threads, huge requests, `request(0)`,
    /// cancels) through `take`, cutting an endless source or a shorter one.
    #[test]
    fn obeys_any_demand_schedule(n in 0u64..40, schedule in demand_schedule()) {
        check_publisher(|n| weir::range(0..u64::MAX).take(n), n, &schedule)?;
        check_publisher(|n| weir::range(0..n).take(n + 3), n, &schedule)?;
    }
}

/// A subscriber that requests `want` and cancels inside `on_next` of its `at`th item
/// (or inside `on_subscribe` when `at` is 0), recording what it is sent.
struct CancelsAt {
    want: u64,
    at: usize,
    subscription: Option<weir::Subscription>,
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Subscriber<u64> for CancelsAt {
    fn on_subscribe(&mut self, subscription: weir::Subscription) {
        if self.at == 0 {
            subscription.cancel();
        } else {
            subscription.request(self.want);
        }
        self.subscription = Some(subscription);
    }
    fn on_next(&mut self, item: u64) {
        let mut log = self.log.lock().unwrap();
        log.push(item.to_string());
        if log.len() == self.at {
            self.subscription.as_ref().unwrap().cancel();
        }
    }
    fn on_error(&mut self, error: Error) {
        self.log.lock().unwrap().push(format!("error {error}"));
    }
    fn on_complete(&mut self) {
        self.log.lock().unwrap().push("complete".into());
    }
}

/// What `take(n)` sends a subscriber that requests `want` and cancels at its `at`th
/// item.
fn sent_to_a_canceller(n: u64, want: u64, at: usize) -> Vec<String> {
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    weir::range(0u64..10).take(n).subscribe(CancelsAt {
        want,
        at,
        subscription: None,
        log: log.clone(),
    });
    let sent = log.lock().unwrap().clone();
    sent
}

#[test]
fn a_subscriber_that_cancels_at_the_nth_item_gets_no_completion() {
    // Rule 3.12: after its cancel the subscriber hears nothing more; `take` used to
    // complete it anyway once its nth item had passed.
    assert_eq!(sent_to_a_canceller(3, 3, 3), ["0", "1", "2"]);
    assert_eq!(sent_to_a_canceller(3, UNBOUNDED, 3), ["0", "1", "2"]);
    assert_eq!(sent_to_a_canceller(1, 1, 1), ["0"]);
    // Cancelling earlier stops the stream there, as before.
    assert_eq!(sent_to_a_canceller(5, 5, 2), ["0", "1"]);
    // The control: without a cancel the nth item completes the stream.
    assert_eq!(sent_to_a_canceller(3, 3, 4), ["0", "1", "2", "complete"]);
}

#[test]
fn take_zero_sends_no_completion_to_a_subscriber_that_cancelled_in_on_subscribe() {
    assert!(sent_to_a_canceller(0, 1, 0).is_empty());
    // The control: one that does not cancel is completed at once.
    assert_eq!(sent_to_a_canceller(0, 1, 7), ["complete"]);
}
