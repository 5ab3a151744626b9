//! The error-ordering contract every holding time stage shares (`sample`, `debounce`,
//! `buffer_timeout`): by default an upstream error waits behind what the stage holds,
//! like completion; with `errors_first` it arrives at once, without demand, and the
//! held item is released.

use std::fmt::Debug;
use std::time::Duration;

use weir::prelude::*;
use weir::runtime::VirtualTime;
use weir::tck::TestSubscriber;
use weir::{BoxPublisher, Error};

/// Builds the stage under test over `source` on `clock`, with `errors_first` or not.
pub type Build<T> = fn(BoxPublisher<u32>, VirtualTime, bool) -> BoxPublisher<T>;

/// `just(7)` then an error, through the stage. Without `errors_first`, nothing arrives
/// before a request, then what was held (`held`) and the error; with it, the error
/// arrives after at most one request (`buffer_timeout` asks upstream only for
/// demand) and nothing else does, whatever the clock does next.
pub fn check<T: Clone + Debug + PartialEq + Send + 'static>(build: Build<T>, held: T) {
    for errors_first in [false, true] {
        let vt = VirtualTime::new();
        let failure = Error::msg("boom");
        let source = weir::just(7u32)
            .concat(weir::error(failure.clone()))
            .boxed();
        let subscriber = TestSubscriber::<T>::new();
        let probe = subscriber.probe();
        build(source, vt.clone(), errors_first).subscribe(subscriber);
        if errors_first {
            probe.request(1);
            let error = probe.error().expect("error delivered at once");
            assert!(Error::ptr_eq(&error, &failure));
            assert_eq!(probe.received_count(), 0, "the held item is released");
        } else {
            assert!(
                probe.error().is_none(),
                "the error waits behind what is held"
            );
            probe.request(1);
            probe.assert_items(std::slice::from_ref(&held));
            assert!(Error::ptr_eq(&probe.assert_error(), &failure));
        }
        vt.advance(Duration::from_secs(1));
        probe.assert_no_violations();
    }
}
