//! Loom model of this stage's own race: `RUSTFLAGS="--cfg weir_loom" cargo test --release
//! --lib loom`.

use super::*;
use crate::metrics::Drops;
use std::sync::Mutex as StdMutex;

/// Records what downstream receives; only the `Wip` owner calls it.
struct Recorder {
    items: Arc<StdMutex<Vec<u64>>>,
    subscription: Arc<StdMutex<Option<Subscription>>>,
}

impl Subscriber<u64> for Recorder {
    fn on_subscribe(&mut self, subscription: Subscription) {
        *self.subscription.lock().unwrap() = Some(subscription);
    }
    fn on_next(&mut self, item: u64) {
        self.items.lock().unwrap().push(item);
    }
    fn on_error(&mut self, _error: Error) {}
    fn on_complete(&mut self) {}
}

/// The producer pushes an item while another thread requests one: whoever owns
/// the drain, the item is delivered by the time both calls returned (a lost
/// wake-up would leave it held); a second item then finds no demand and is held,
/// and goes out with the next request.
#[test]
fn loom_producer_races_request() {
    loom::model(|| {
        let items = Arc::new(StdMutex::new(Vec::new()));
        let subscription = Arc::new(StdMutex::new(None));
        let drops = Drops::new();
        let mut stage = HoldSubscriber {
            pending: Some(Recorder {
                items: items.clone(),
                subscription: subscription.clone(),
            }),
            shared: None,
            hook: None,
            policy: Overflow::DropNewest,
            drops: DropReporter::new("loom", None),
            stage: "loom",
            capacity: 1,
            bounds: TimeBounds::none(),
            gauge: QueueGauge::new(1, Arc::new(Immediate)),
            upstream: Upstream::Idle,
        };
        stage.on_subscribe(Subscription::noop());
        stage.drops = DropReporter::new("loom", Some(DropHook::new(drops.clone())));
        let handle = subscription.lock().unwrap().clone().unwrap();
        let consumer = {
            let handle = handle.clone();
            loom::thread::spawn(move || handle.request(1))
        };
        stage.on_next(1);
        consumer.join().unwrap();
        assert_eq!(*items.lock().unwrap(), vec![1], "no lost wake-up");
        stage.on_next(2);
        assert_eq!(*items.lock().unwrap(), vec![1], "never beyond demand");
        handle.request(5);
        assert_eq!(*items.lock().unwrap(), vec![1, 2]);
        assert_eq!(drops.total(), 0);
    });
}
