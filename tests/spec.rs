//! Contract-level guarantees (`docs/design.md` §3) that need a hand-written subscriber:
//! rule 3.3 (bounded recursion under a million re-entrant requests), rule 3.9
//! (`request(0)`), rule 3.17 (saturation), rule 2.5 (second `on_subscribe`), and
//! principle 6 of `docs/design.md` §2 (panics in user closures become `on_error`), and
//! batches through a `BoxPublisher`.

use std::cell::Cell;
use std::sync::{Arc, Mutex};

use weir::demand::UNBOUNDED;
use weir::prelude::*;
use weir::source::Step;
use weir::{Error, ErrorKind};

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// What a [`Probe`] saw.
#[derive(Default)]
struct Seen {
    items: u64,
    max_depth: u32,
    errors: Vec<Error>,
    completed: u32,
    subscription: Option<Subscription>,
}

/// A subscriber that requests `initial` on subscribe and `per_item` inside every
/// `on_next`, and measures the nesting depth of `on_next`.
struct Probe {
    initial: u64,
    per_item: u64,
    seen: Arc<Mutex<Seen>>,
}

impl Probe {
    fn new(initial: u64, per_item: u64) -> (Self, Arc<Mutex<Seen>>) {
        let seen = Arc::new(Mutex::new(Seen::default()));
        (
            Probe {
                initial,
                per_item,
                seen: seen.clone(),
            },
            seen,
        )
    }
}

impl<T> Subscriber<T> for Probe {
    fn on_subscribe(&mut self, subscription: Subscription) {
        let mut seen = self.seen.lock().unwrap();
        if seen.subscription.is_some() {
            subscription.cancel();
            return;
        }
        seen.subscription = Some(subscription.clone());
        drop(seen);
        if self.initial > 0 {
            subscription.request(self.initial);
        }
    }

    fn on_next(&mut self, _item: T) {
        let depth = DEPTH.with(|d| {
            d.set(d.get() + 1);
            d.get()
        });
        let subscription = {
            let mut seen = self.seen.lock().unwrap();
            seen.items += 1;
            seen.max_depth = seen.max_depth.max(depth);
            seen.subscription.clone()
        };
        if self.per_item > 0 {
            subscription.expect("subscribed").request(self.per_item);
        }
        DEPTH.with(|d| d.set(d.get() - 1));
    }

    fn on_error(&mut self, error: Error) {
        self.seen.lock().unwrap().errors.push(error);
    }

    fn on_complete(&mut self) {
        self.seen.lock().unwrap().completed += 1;
    }
}

/// Subscribe a [`Probe`] that requests 1 up front and 1 inside every `on_next` to
/// `publisher`: all `items` must arrive with `on_next` never nested inside `on_next`,
/// then one completion and no error.
fn assert_reentrant_requests_stay_flat<P: Publisher>(publisher: P, items: u64) {
    let (probe, seen) = Probe::new(1, 1);
    publisher.subscribe(probe);
    let seen = seen.lock().unwrap();
    assert_eq!(
        (
            seen.items,
            seen.max_depth,
            seen.completed,
            seen.errors.len()
        ),
        (items, 1, 1, 0),
        "(items, on_next nesting depth, completions, errors)"
    );
}

#[test]
fn spec_3_3_a_million_reentrant_requests_do_not_grow_the_stack() {
    assert_reentrant_requests_stay_flat(weir::range(0u64..1_000_000), 1_000_000);
}

#[test]
fn spec_3_3_holds_through_operators_and_other_sources() {
    assert_reentrant_requests_stay_flat(
        weir::range(0u64..2_000_000)
            .map(|x| x + 1)
            .filter(|x| x % 2 == 0)
            .take(1_000_000),
        1_000_000,
    );
    assert_reentrant_requests_stay_flat(weir::from_iter(0..1_000_000), 1_000_000);
    let mut n = 0u32;
    let generator = weir::generate((), move |_| {
        n += 1;
        if n > 1_000_000 {
            Step::Complete
        } else {
            Step::Next(n)
        }
    });
    assert_reentrant_requests_stay_flat(generator, 1_000_000);
}

fn assert_request_zero_fails<P: Publisher>(publisher: P) {
    let (probe, seen) = Probe::new(0, 0);
    publisher.subscribe(probe);
    let subscription = seen
        .lock()
        .unwrap()
        .subscription
        .clone()
        .expect("on_subscribe first");
    subscription.request(0);
    subscription.request(5);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.errors.len(), 1, "exactly one on_error");
    assert_eq!(seen.errors[0].rule(), Some("3.9"));
    assert!(
        seen.errors[0].to_string().contains("3.9"),
        "{}",
        seen.errors[0]
    );
    assert_eq!(
        seen.items, 0,
        "nothing after the 3.9 error (the subscription is cancelled)"
    );
    assert_eq!(seen.completed, 0);
}

#[test]
fn spec_3_9_request_zero_signals_an_error_naming_the_rule() {
    assert_request_zero_fails(weir::range(0u32..10));
    assert_request_zero_fails(weir::from_iter(vec![1, 2, 3]));
    assert_request_zero_fails(weir::range(0u32..10).map(|x| x * 2));
    assert_request_zero_fails(weir::range(0u32..10).filter(|x| x % 2 == 0));
    assert_request_zero_fails(weir::range(0u32..10).take(5));
    assert_request_zero_fails(weir::never::<u8>());
}

#[test]
fn spec_3_17_demand_saturates_and_means_unbounded() {
    let (probe, seen) = Probe::new(UNBOUNDED - 1, 0);
    weir::range(0u64..100).subscribe(probe);
    let subscription = seen.lock().unwrap().subscription.clone().unwrap();
    subscription.request(UNBOUNDED - 1);
    subscription.request(UNBOUNDED);
    let seen = seen.lock().unwrap();
    assert_eq!((seen.items, seen.completed), (100, 1));
    assert!(
        seen.errors.is_empty(),
        "saturation is not an error: {:?}",
        seen.errors
    );

    // Cumulative requests past u64::MAX from inside on_next, on an endless source.
    let (probe, seen) = Probe::new(1, UNBOUNDED - 1);
    weir::range(0u64..u64::MAX).take(10_000).subscribe(probe);
    let seen = seen.lock().unwrap();
    assert_eq!(
        (seen.items, seen.completed, seen.errors.len()),
        (10_000, 1, 0)
    );
}

#[test]
fn spec_2_5_a_second_subscription_is_cancelled() {
    /// Hands its subscriber two subscriptions and checks that the second is cancelled.
    struct TwoSubscriptions;

    struct CountCancels(Arc<Mutex<u32>>);
    impl weir::RawSubscription for CountCancels {
        fn request(&self, _n: u64) {}
        fn cancel(&self) {
            *self.0.lock().unwrap() += 1;
        }
    }

    impl Publisher for TwoSubscriptions {
        type Item = u32;
        fn subscribe<S: Subscriber<u32> + Send + 'static>(self, mut subscriber: S) {
            let (first, second) = (Arc::new(Mutex::new(0)), Arc::new(Mutex::new(0)));
            subscriber.on_subscribe(Subscription::new(Arc::new(CountCancels(first.clone()))));
            subscriber.on_subscribe(Subscription::new(Arc::new(CountCancels(second.clone()))));
            assert_eq!(
                *second.lock().unwrap(),
                1,
                "the second subscription must be cancelled"
            );
            assert_eq!(*first.lock().unwrap(), 0, "the first subscription stays");
        }
    }

    TwoSubscriptions.map(|x| x).subscribe(Probe::new(0, 0).0);
    TwoSubscriptions
        .filter(|_| true)
        .subscribe(Probe::new(0, 0).0);
    TwoSubscriptions.take(3).subscribe(Probe::new(0, 0).0);
    let handle = TwoSubscriptions.fold(0, |a, _| a);
    // The publisher lets go of the sink without a terminal signal: the handle ends
    // (cancelled) instead of waiting for ever.
    assert_eq!(
        handle.wait().unwrap_err().kind(),
        weir::ErrorKind::Cancelled
    );
    let _iter = TwoSubscriptions.blocking_iter(4);
}

/// A source that counts how many items were pulled from it and whether it was cancelled.
fn counted(n: u32) -> (impl Publisher<Item = u32>, Arc<Mutex<u32>>) {
    let pulled = Arc::new(Mutex::new(0));
    let counter = pulled.clone();
    let mut i = 0;
    let publisher = weir::generate((), move |_| {
        if i == n {
            return Step::Complete;
        }
        i += 1;
        *counter.lock().unwrap() += 1;
        Step::Next(i)
    });
    (publisher, pulled)
}

#[test]
fn panics_in_user_closures_become_on_error_and_cancel_upstream() {
    let expect_panicked = |result: Result<Vec<u32>, Error>, message: &str| {
        let error = result.expect_err("the panic must surface as an error");
        assert_eq!(error.kind(), ErrorKind::Panicked);
        assert!(error.message().contains(message), "{error}");
    };

    // map, with item-by-item demand so we can see upstream stop.
    let (source, pulled) = counted(1_000);
    let result = source
        .map(|x| if x == 5 { panic!("map boom") } else { x })
        .collect_with(1)
        .wait();
    expect_panicked(result, "map boom");
    assert_eq!(
        *pulled.lock().unwrap(),
        5,
        "upstream is cancelled at the panic"
    );

    let (source, pulled) = counted(1_000);
    let result = source
        .filter(|x| if *x == 7 { panic!("filter boom") } else { true })
        .collect_with(2)
        .wait();
    expect_panicked(result, "filter boom");
    assert!(*pulled.lock().unwrap() <= 8);

    let result = weir::generate(0u32, |n| {
        *n += 1;
        if *n == 3 {
            panic!("generate boom");
        }
        Step::Next(*n)
    })
    .collect()
    .wait();
    expect_panicked(result, "generate boom");

    let result =
        weir::from_iter((0u32..10).map(|x| if x == 4 { panic!("iterator boom") } else { x }))
            .collect()
            .wait();
    expect_panicked(result, "iterator boom");

    let result = weir::defer(|| -> weir::source::Range<u32> { panic!("defer boom") })
        .collect()
        .wait();
    expect_panicked(result, "defer boom");

    let (source, pulled) = counted(1_000);
    let result = source
        .for_each_with(1, |x| {
            if x == 3 {
                panic!("for_each boom")
            }
        })
        .wait();
    let error = result.expect_err("for_each panic surfaces");
    assert_eq!(error.kind(), ErrorKind::Panicked);
    assert!(error.message().contains("for_each boom"));
    assert_eq!(*pulled.lock().unwrap(), 3);

    let result = weir::range(0u32..100)
        .fold(0u32, |acc, x| {
            if x == 50 {
                panic!("fold boom")
            } else {
                acc + x
            }
        })
        .wait();
    assert_eq!(result.unwrap_err().kind(), ErrorKind::Panicked);
}

#[test]
fn a_panicking_subscriber_is_treated_as_cancelled() {
    // Rule 2.13: the subscriber broke the contract; the source must not unwind into
    // the caller and must stop.
    struct Bad(Arc<Mutex<u32>>);
    impl Subscriber<u32> for Bad {
        fn on_subscribe(&mut self, s: Subscription) {
            s.request(10);
        }
        fn on_next(&mut self, _: u32) {
            *self.0.lock().unwrap() += 1;
            panic!("bad subscriber");
        }
        fn on_error(&mut self, _: Error) {}
        fn on_complete(&mut self) {}
    }
    let calls = Arc::new(Mutex::new(0));
    weir::from_iter(0u32..10).subscribe(Bad(calls.clone()));
    assert_eq!(*calls.lock().unwrap(), 1);
}

#[test]
fn sink_handles_cancel_and_report() {
    let mut handle = weir::never::<u32>().collect();
    assert!(!handle.is_terminated());
    assert!(handle
        .wait_timeout(std::time::Duration::from_millis(5))
        .is_none());
    handle.cancel();
    assert!(handle.is_terminated());
    assert_eq!(handle.wait().unwrap_err().kind(), ErrorKind::Cancelled);

    let error = weir::error::<u32>(Error::msg("upstream down"))
        .fold(0, |a, _| a)
        .wait()
        .unwrap_err();
    assert_eq!(
        (error.kind(), error.message()),
        (ErrorKind::Upstream, "upstream down")
    );
}

/// What a [`Batches`] subscriber saw.
#[derive(Default)]
struct BatchesSeen {
    batches: u32,
    single_items: u64,
    batch_items: u64,
    completed: bool,
}

/// Requests `request` at once; counts the items that arrive in batches and those
/// that arrive one `on_next` at a time; cancels inside a batch after `cancel_after`
/// items and keeps iterating (the batch must end by itself).
struct Batches {
    request: u64,
    cancel_after: Option<u64>,
    subscription: Option<Subscription>,
    seen: Arc<Mutex<BatchesSeen>>,
}

impl Subscriber<u64> for Batches {
    fn on_subscribe(&mut self, subscription: Subscription) {
        subscription.request(self.request);
        self.subscription = Some(subscription);
    }
    fn on_next(&mut self, _item: u64) {
        self.seen.lock().unwrap().single_items += 1;
    }
    fn on_next_batch<I: Iterator<Item = u64>>(&mut self, items: I) -> u64 {
        let mut seen = self.seen.lock().unwrap();
        seen.batches += 1;
        for _ in items {
            seen.batch_items += 1;
            if Some(seen.batch_items) == self.cancel_after {
                self.subscription.as_ref().unwrap().cancel();
            }
        }
        0
    }
    fn on_error(&mut self, error: Error) {
        panic!("unexpected error {error}");
    }
    fn on_complete(&mut self) {
        self.seen.lock().unwrap().completed = true;
    }
}

/// A `BoxPublisher` passes batches on whole to the subscriber's own `on_next_batch`
/// (not one virtual `on_next` per item), and a cancel inside such a batch still ends
/// it: the items after the cancel are not handed over.
#[test]
fn a_boxed_publisher_hands_batches_on_whole_and_stops_them_at_a_cancel() {
    for (publisher, request) in [
        (weir::range(0..1_000u64).boxed(), 1_000),
        (weir::range(0..1_000u64).map(|x| x * 2).boxed(), 1_000),
        (weir::range(0..1_000u64).boxed().boxed(), 1_000),
    ] {
        let seen = Arc::new(Mutex::new(BatchesSeen::default()));
        publisher.subscribe(Batches {
            request,
            cancel_after: None,
            subscription: None,
            seen: seen.clone(),
        });
        let seen = seen.lock().unwrap();
        assert_eq!(seen.single_items, 0, "no item one by one");
        assert_eq!(seen.batch_items, 1_000);
        assert_eq!(seen.batches, 1, "the whole demand as one batch");
        assert!(seen.completed);
    }
    let seen = Arc::new(Mutex::new(BatchesSeen::default()));
    weir::range(0..1_000u64).boxed().subscribe(Batches {
        request: 1_000,
        cancel_after: Some(10),
        subscription: None,
        seen: seen.clone(),
    });
    let seen = seen.lock().unwrap();
    assert_eq!(seen.batch_items, 10, "nothing after the cancel");
    assert!(!seen.completed, "no completion after a cancel");
}
