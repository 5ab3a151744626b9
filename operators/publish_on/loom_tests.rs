//! Loom models: `RUSTFLAGS="--cfg weir_loom" cargo test --release --lib loom`.

use std::sync::{Arc, Mutex};

use loom::thread;

use crate::loom::{AtomicU64, Ordering};
use crate::runtime::Immediate;
use crate::{Error, Publisher, PublisherExt, RawSubscription, Subscriber, Subscription};

/// Upstream's side of the model: what was requested, and whether it was cancelled.
#[derive(Default)]
struct Credit {
    requested: AtomicU64,
}

impl RawSubscription for Credit {
    fn request(&self, n: u64) {
        // Release: pairs with the producer's Acquire load.
        self.requested.fetch_add(n, Ordering::Release);
    }
    fn cancel(&self) {}
}

type Boxed = Box<dyn Subscriber<u32> + Send>;

/// A publisher that only subscribes; the model's producer thread then drives the
/// subscriber it stashed.
struct Stash(Arc<Mutex<Option<Boxed>>>, Arc<Credit>);

impl Publisher for Stash {
    type Item = u32;
    fn subscribe<S: Subscriber<u32> + Send + 'static>(self, subscriber: S) {
        let mut subscriber: Boxed = Box::new(subscriber);
        subscriber.on_subscribe(Subscription::new(self.1.clone()));
        *self.0.lock().unwrap() = Some(subscriber);
    }
}

/// Downstream: records items and the end; requests only when the model says.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<(Option<Subscription>, Vec<u32>, bool)>>);

impl Subscriber<u32> for Recorder {
    fn on_subscribe(&mut self, subscription: Subscription) {
        self.0.lock().unwrap().0 = Some(subscription);
    }
    fn on_next(&mut self, item: u32) {
        self.0.lock().unwrap().1.push(item);
    }
    fn on_error(&mut self, error: Error) {
        panic!("unexpected error {error}");
    }
    fn on_complete(&mut self) {
        self.0.lock().unwrap().2 = true;
    }
}

/// The boundary's drain/credit protocol: a producer thread pushes three items
/// (only against credit) and completes, while downstream requests from another
/// thread; the drain runs on whichever thread signals it (`Immediate`). Every
/// item arrives once, in order, followed by completion, without any signal after
/// the threads finished (no lost wake-up), and upstream credit is conserved: it is
/// never more than the prefetch of 2 ahead of the items produced, and the replenish
/// after two consumed items is exactly 2.
#[test]
fn loom_publish_on_drain_and_credit() {
    loom::model(|| {
        let credit = Arc::new(Credit::default());
        let stash = Arc::new(Mutex::new(None));
        let recorder = Recorder::default();
        Stash(stash.clone(), credit.clone())
            .publish_on(Immediate, 2)
            .subscribe(recorder.clone());
        let mut upstream = stash.lock().unwrap().take().expect("subscribed");
        let producer = {
            let credit = credit.clone();
            thread::spawn(move || {
                let mut sent = 0u32;
                while sent < 3 {
                    // Acquire: pairs with the Release in `Credit::request`.
                    let requested = credit.requested.load(Ordering::Acquire);
                    assert!(
                        requested - u64::from(sent) <= 2,
                        "more than prefetch outstanding"
                    );
                    if requested > u64::from(sent) {
                        upstream.on_next(sent);
                        sent += 1;
                    } else {
                        thread::yield_now();
                    }
                }
                upstream.on_complete();
            })
        };
        let subscription = recorder.0.lock().unwrap().0.clone().expect("subscribed");
        subscription.request(3);
        producer.join().unwrap();
        let state = recorder.0.lock().unwrap();
        assert_eq!(state.1, vec![0, 1, 2], "every item once, in order");
        assert!(state.2, "completion after the items");
        assert_eq!(
            credit.requested.load(Ordering::Acquire),
            4,
            "prefetch 2, then 2 replenished after 2 consumed"
        );
    });
}
