//! `on_dropped`: a pass-through stage that answers the drop-hook question for the
//! lossy stages above it.

use weir::metrics::{DropHook, Drops};
use weir::prelude::*;
use weir::DropReason;

#[test]
fn passes_every_signal_through() {
    let drops = Drops::new();
    let items = weir::range(0u32..1000)
        .on_dropped(DropHook::new(drops.clone()))
        .filter(|x| x % 7 == 0)
        .collect_with(16)
        .wait()
        .unwrap();
    assert_eq!(
        items,
        (0u32..1000).filter(|x| x % 7 == 0).collect::<Vec<_>>()
    );
    assert_eq!(drops.total(), 0, "nothing upstream drops");
}

#[test]
fn the_nearest_hook_downstream_is_the_one_used() {
    let (near, far) = (Drops::new(), Drops::new());
    // Demand for 4: the range's one batch of 10 keeps 4 and drops 6, then completes.
    let subscriber = weir::tck::TestSubscriber::new().request_on_subscribe(4);
    let probe = subscriber.probe();
    weir::range(0u32..10)
        .on_backpressure_drop()
        .on_dropped(DropHook::new(near.clone()))
        .map(|x| x)
        .on_dropped(DropHook::new(far.clone()))
        .subscribe(subscriber);
    probe.assert_items(&[0, 1, 2, 3]);
    probe.assert_completed();
    assert_eq!(near.count(DropReason::OverflowNewest), 6);
    assert_eq!(far.total(), 0);
}
