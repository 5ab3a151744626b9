//! Loom models of this stage's own races: `RUSTFLAGS="--cfg weir_loom" cargo test
//! --release --lib loom`.

use super::*;
use crate::metrics::Drops;
use std::sync::Mutex as StdMutex;

/// Records what downstream receives (requesting `initial` when subscribed); only the
/// loop's owner calls it.
struct EagerRecorder {
    items: Arc<StdMutex<Vec<u64>>>,
    subscription: Arc<StdMutex<Option<Subscription>>>,
    /// Demand to request in `on_subscribe` (0: none).
    initial: u64,
}

impl Subscriber<u64> for EagerRecorder {
    fn on_subscribe(&mut self, subscription: Subscription) {
        if self.initial > 0 {
            subscription.request(self.initial);
        }
        *self.subscription.lock().unwrap() = Some(subscription);
    }
    fn on_next(&mut self, item: u64) {
        self.items.lock().unwrap().push(item);
    }
    fn on_error(&mut self, _error: Error) {}
    fn on_complete(&mut self) {}
}

/// The stage's upstream-facing subscriber, with what downstream records, its
/// subscription and the drop counters.
struct Fixture<O: OnFull<u64>> {
    stage: HoldSubscriber<u64, EagerRecorder, O>,
    items: Arc<StdMutex<Vec<u64>>>,
    handle: Subscription,
    drops: Drops,
}

/// A stage with `policy` and `capacity` subscribed to a no-op upstream; downstream
/// requests `initial` in `on_subscribe`.
fn stage<O: OnFull<u64>>(policy: O, capacity: usize, initial: u64) -> Fixture<O> {
    let items = Arc::new(StdMutex::new(Vec::new()));
    let subscription = Arc::new(StdMutex::new(None));
    let drops = Drops::new();
    let hook = DropHook::new(drops.clone());
    let mut stage = HoldSubscriber {
        pending: Some(EagerRecorder {
            items: items.clone(),
            subscription: subscription.clone(),
            initial,
        }),
        core: None,
        hook: None,
        policy,
        drops: DropReporter::new("loom", None),
        stale: Vec::new(),
        stage: "loom",
        capacity,
        bounds: TimeBounds::none(),
        gauge: QueueGauge::new(capacity, Arc::new(Immediate)),
        deadline_of: None,
        errors_first: false,
        upstream: Upstream::Idle,
    };
    stage.on_subscribe(Subscription::noop());
    stage.drops = DropReporter::new("loom", Some(hook));
    let handle = subscription.lock().unwrap().clone().unwrap();
    Fixture {
        stage,
        items,
        handle,
        drops,
    }
}

/// The producer pushes an item while another thread requests one: whoever owns
/// the drain, the item is delivered by the time both calls returned (a lost
/// wake-up would leave it held); a second item then finds no demand and is held,
/// and goes out with the next request.
#[test]
fn loom_producer_races_request() {
    loom::model(|| {
        let Fixture {
            mut stage,
            items,
            handle,
            drops,
        } = stage(Overflow::DropNewest, 1, 0);
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

/// The hold path racing a request (the lossy stage in front of a consumer that tops
/// up its demand from its own thread): downstream asked for everything, another thread
/// owns the drain while the producer pushes into a one-slot `KeepLatest` stage. Every
/// item had demand, so none may be replaced: all arrive, once, in order, and nothing
/// is counted as dropped.
#[test]
fn loom_hold_path_racing_a_request_loses_nothing_with_demand() {
    loom::model(|| {
        let Fixture {
            mut stage,
            items,
            handle,
            drops,
        } = stage(crate::operators::KeepLatest, 1, crate::demand::UNBOUNDED);
        let requester = {
            let handle = handle.clone();
            loom::thread::spawn(move || handle.request(1))
        };
        stage.on_next(1);
        stage.on_next(2);
        stage.on_next(3);
        requester.join().unwrap();
        assert_eq!(
            *items.lock().unwrap(),
            vec![1, 2, 3],
            "every item, in order"
        );
        assert_eq!(
            drops.total(),
            0,
            "nothing replaced while demand was outstanding"
        );
    });
}
