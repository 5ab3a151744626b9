//! The Reactive Streams contract: [`Publisher`], [`Subscriber`], [`Subscription`],
//! [`Processor`], and the boxed [`BoxPublisher`].
//!
//! # Rule index
//!
//! One line per rule of the Reactive Streams specification 1.0.4: where weir enforces
//! it, and which conformance test (`weir::tck`, feature `tck`) checks it.
//!
//! | rule | how weir holds it | checked by |
//! |---|---|---|
//! | 1.1 | sources emit at most `demand::AtomicDemand::get()` per pass and settle with `produced` | `spec_1_1_*`, the proptest schedules |
//! | 1.2 | sources complete or fail as soon as they know, whatever the demand | `spec_1_2_*` |
//! | 1.3 | `&mut self` signals; the `drain::Wip` loop has one owner at a time | `spec_1_3_*` (stochastic) |
//! | 1.4 | `error` source; failing user code becomes `on_error` | `spec_1_4_*` |
//! | 1.5 | finite sources call `on_complete` | `spec_1_5_*` |
//! | 1.6 | after a terminal signal the source drops the subscriber | `spec_1_6` (untested in the TCK) |
//! | 1.7 | the terminal signal takes the subscriber out of its slot | `spec_1_7_*` |
//! | 1.8 | cancel is seen at the next pass or chunk | `spec_1_8` (untested) |
//! | 1.9 | `on_subscribe` is called inside `subscribe`, before the first drain pass | `spec_1_9_*` |
//! | 1.10 | moot: `subscribe` takes the subscriber by value | documented skip |
//! | 1.11 | cold sources are `Clone` and subscribe independently | `spec_1_11_*` |
//! | 2.1 | sinks request in batches (`demand::Replenish`) | `spec_2_1_*` |
//! | 2.2 | advice only | documented skip |
//! | 2.3 | sinks never touch the subscription in terminal signals | `spec_2_3_*` |
//! | 2.4 | sinks drop their subscription on terminal signals | documented skip |
//! | 2.5 | `drain::SubscriptionSlot::set` refuses a second subscription, which is cancelled | `spec_2_5_*` |
//! | 2.6 | sink handles cancel explicitly | documented skip |
//! | 2.7 | moot for `&mut self` subscribers; `Subscription` is `Sync` | documented skip |
//! | 2.8 | sinks ignore items after cancel | `spec_2_8_*` |
//! | 2.9, 2.10 | sinks accept terminal signals without a request | `spec_2_9_*`, `spec_2_10_*` |
//! | 2.11 | moot in safe Rust | documented skip |
//! | 2.12 | moot: subscribers are moved | documented skip |
//! | 2.13 | panics in subscribers are caught by sources and treated as cancel | `spec_2_13` (null parts moot) |
//! | 3.1 | structural: only the subscriber holds its handle | documented skip |
//! | 3.2 | `request` is re-entrant: it only adds demand and enters the `Wip` loop; batching subscribers replenish with batch credit instead | `spec_3_2_*` |
//! | 3.3 | the `Wip` trampoline: a nested `request` returns at once | `spec_3_3_*`, `tests/spec.rs` (1,000,000 re-entrant requests) |
//! | 3.4, 3.5 | `request`/`cancel` do O(1) work besides the drain they may run | documented skip |
//! | 3.6, 3.7 | the cancelled flag makes later calls no-ops | `spec_3_6_*`, `spec_3_7_*` |
//! | 3.8 | `AtomicDemand::add`; batch credit returned by `Subscriber::on_next_batch` counts as a request made at the end of the batch | `spec_3_8_*`, `tests/tck_broken.rs` (a publisher that drops batch credit fails) |
//! | 3.9 | `demand::validate` turns `request(0)` into `on_error` naming rule 3.9 | `spec_3_9_*` |
//! | 3.10, 3.11 | sources may emit or terminate inside `request` | documented skip |
//! | 3.12 | cancel sets a flag read at every pass and chunk | `spec_3_12_*` |
//! | 3.13 | cancel drops the subscriber at the next pass | `spec_3_13_*` (deterministic drop check) |
//! | 3.14 | sources release their state on cancel | documented skip |
//! | 3.15, 3.16 | `request`/`cancel` do not panic | documented skip |
//! | 3.17 | saturating demand; `u64::MAX` means unbounded | `spec_3_17_*` |
//! | 4.1 | `Processor: Subscriber + Publisher` | processor verification |
//! | 4.2 | processors pass `on_error` on immediately | processor verification |

mod processor;
mod publisher;
mod subscriber;
mod subscription;

pub use processor::Processor;
pub use publisher::{BoxPublisher, Publisher};
pub(crate) use subscriber::sealed::Sealed;
pub use subscriber::Subscriber;
pub(crate) use subscription::{Pull, PullMark};
pub use subscription::{RawSubscription, Subscription};
