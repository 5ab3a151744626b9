//! Three ways to write your own publisher, from the easiest to the most hands-on,
//! each passing the conformance kit (`tests/custom_publisher.rs` runs
//! `weir::publisher_tck!` on all three).
//!
//! 1. **Emitter** (`weir::create`): your code pushes items; the emitter knows the
//!    demand and refuses items beyond it. For callback APIs and producer threads.
//! 2. **Generator** (`weir::generate`, `weir::from_fn`, `weir::unfold`): weir calls
//!    your closure once per requested item. For anything that can produce on demand.
//! 3. **By hand** (`Publisher` + `RawSubscription`, with `Wip` and `AtomicDemand`):
//!    full control, and every rule is yours to keep.
//!
//! Run it with `cargo run --example custom_publisher`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use weir::demand::{self, AtomicDemand};
use weir::drain::Wip;
use weir::prelude::*;
use weir::source::{Emitter, Step};
use weir::RawSubscription;

// ---- 1. an emitter ------------------------------------------------------------------

/// A thermometer that calls back on a thread of its own, as device libraries do.
/// It can be told to wait, so `send_blocking` (wait for demand, then emit) fits.
pub fn readings(count: u64) -> impl Publisher<Item = u64> {
    weir::create(move |emitter: Emitter<u64>| {
        std::thread::spawn(move || {
            for reading in 0..count {
                // Blocks while downstream has no demand; Err once it cancelled.
                if emitter.send_blocking(reading).is_err() {
                    return;
                }
            }
            // Dropping the last emitter completes the stream.
        });
    })
}

// ---- 2. a generator -----------------------------------------------------------------

/// The same numbers from a generator: the closure runs once per requested item, on
/// the requesting thread, and `Step::Last` ends the stream with the last item.
pub fn counter(count: u64) -> impl Publisher<Item = u64> {
    weir::generate(0u64, move |next| {
        if count == 0 {
            return Step::Complete;
        }
        *next += 1;
        if *next == count {
            Step::Last(*next - 1)
        } else {
            Step::Next(*next - 1)
        }
    })
}

// ---- 3. by hand -----------------------------------------------------------------------

/// `0..count`, written against the traits directly.
///
/// The recipe (the same as weir's own sources):
/// * one [`Wip`] drain loop: whoever enters it first delivers; a `request` or `cancel`
///   from any thread, or from inside `on_next`, only records a reason to run again.
///   That serialises the signals (rule 1.3) and bounds recursion (rule 3.3).
/// * one [`AtomicDemand`]: `request` adds to it (after [`demand::validate`] turned
///   `request(0)` into the rule 3.9 error), the loop spends it: never more `on_next`
///   than requested (rule 1.1).
/// * the subscriber lives inside the loop's state, so only the loop's owner calls it;
///   it is dropped on cancel (rule 3.13) and after the terminal signal.
#[derive(Clone, Copy, Debug)]
pub struct Numbers {
    /// How many numbers to emit.
    pub count: u64,
}

/// Flag: downstream cancelled.
const CANCELLED: u8 = 1;
/// Flag: downstream called `request(0)`.
const BAD_REQUEST: u8 = 2;

/// What the subscriber's `Subscription` points to.
struct NumbersSubscription<S> {
    demand: AtomicDemand,
    wip: Wip,
    flags: AtomicU8,
    /// The subscriber and the next number; `None` once the subscription is over.
    state: Mutex<Option<(S, u64)>>,
    count: u64,
}

impl Publisher for Numbers {
    type Item = u64;

    fn subscribe<S>(self, subscriber: S)
    where
        S: Subscriber<u64> + Send + 'static,
    {
        let subscription = Arc::new(NumbersSubscription {
            demand: AtomicDemand::new(),
            wip: Wip::new(),
            flags: AtomicU8::new(0),
            state: Mutex::new(None),
            count: self.count,
        });
        // Own the loop *before* on_subscribe: requests made inside it only record a
        // reason to run, so no on_next happens before on_subscribe returned (1.3).
        let owner = subscription.wip.enter();
        assert!(owner, "nobody else knows this subscription yet");
        let mut subscriber = subscriber;
        // Rule 2.13: a subscriber that panics here is treated as cancelled.
        let handle = weir::Subscription::new(subscription.clone());
        if catch_unwind(AssertUnwindSafe(|| subscriber.on_subscribe(handle))).is_err() {
            return;
        }
        *subscription.state.lock().unwrap() = Some((subscriber, 0));
        // Deliver what on_subscribe requested (or complete an empty stream), then
        // whatever arrived meanwhile.
        subscription.wip.run(|| subscription.pass());
    }
}

impl<S: Subscriber<u64> + Send + 'static> NumbersSubscription<S> {
    /// One pass of the drain loop (owner only).
    fn pass(&self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let Some((subscriber, next)) = state.as_mut() else {
            return; // over
        };
        // Relaxed: written before the writer's `Wip::enter`, read after our own
        // enter/leave, which acquired it (the `Wip` is the happens-before edge).
        let flags = self.flags.load(Ordering::Relaxed);
        if flags & CANCELLED != 0 {
            *state = None; // rule 3.13: drop the subscriber
            return;
        }
        if flags & BAD_REQUEST != 0 {
            let (mut subscriber, _) = state.take().expect("checked above");
            let error = demand::validate(0).expect_err("0 is not a legal request");
            let _ = catch_unwind(AssertUnwindSafe(|| subscriber.on_error(error)));
            return;
        }
        let delivered = catch_unwind(AssertUnwindSafe(|| {
            let allowed = self.demand.get();
            let mut sent = 0;
            while sent < allowed && *next < self.count {
                subscriber.on_next(*next);
                *next += 1;
                sent += 1;
                // A cancel from inside on_next: stop at once (rule 3.6 after it).
                if self.flags.load(Ordering::Relaxed) & CANCELLED != 0 {
                    break;
                }
            }
            self.demand.produced(sent);
            if *next == self.count && self.flags.load(Ordering::Relaxed) == 0 {
                subscriber.on_complete(); // needs no demand (rule 1.2)
                return true;
            }
            false
        }));
        match delivered {
            Ok(false) => {}
            // Completed, or the subscriber panicked (rule 2.13: treat it as
            // cancelled): either way the subscription is over.
            Ok(true) | Err(_) => *state = None,
        }
    }
}

impl<S: Subscriber<u64> + Send + 'static> RawSubscription for NumbersSubscription<S> {
    fn request(&self, n: u64) {
        if n == 0 {
            self.flags.fetch_or(BAD_REQUEST, Ordering::Relaxed);
        } else {
            self.demand.add(n); // saturates at u64::MAX: unbounded (rule 3.17)
        }
        // From inside on_next this only records a reason to run (rule 3.3).
        self.wip.drain(|| self.pass());
    }

    fn cancel(&self) {
        self.flags.fetch_or(CANCELLED, Ordering::Relaxed);
        self.wip.drain(|| self.pass());
    }
}

/// Runs the three publishers and prints what they emitted.
pub fn main() {
    let expected: u64 = (0..1_000).sum();
    let by_emitter = readings(1_000).fold(0, |sum, x| sum + x).wait().unwrap();
    let by_generator = counter(1_000).fold(0, |sum, x| sum + x).wait().unwrap();
    let by_hand = Numbers { count: 1_000 }
        .fold(0, |sum, x| sum + x)
        .wait()
        .unwrap();
    assert_eq!(
        (by_emitter, by_generator, by_hand),
        (expected, expected, expected)
    );
    println!("emitter:   sum of 0..1000 = {by_emitter}");
    println!("generator: sum of 0..1000 = {by_generator}");
    println!("by hand:   sum of 0..1000 = {by_hand}");

    // Each one stops when downstream has had enough, and never runs ahead of demand.
    let first = Numbers { count: u64::MAX }
        .take(3)
        .collect()
        .wait()
        .unwrap();
    println!("by hand, take(3) of an endless stream: {first:?}");
}
