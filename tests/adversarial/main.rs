//! The adversarial suite: every public stage, tried as a hostile user would.
//!
//! The table (`stages.rs`) has one row per public stage (sources, operators,
//! boundaries, bridges), each built around tapped sources of counted items
//! (`harness::item`: one more live item at creation, one less at `Drop`). Every check
//! iterates the table, or a matrix derived from it, and reports every failing row at
//! the end, not just the first:
//!
//! | module | check |
//! |---|---|
//! | `stages` | the table has a row for every `PublisherExt` method and every source and bridge the crate exports (read from `src/ext.rs` and `src/lib.rs`) |
//! | `forgetful` | a subscriber that cancels at the first or third item and leaks the rest of the batch's iterator with `mem::forget`: sources let go, the subscriber is dropped, no item is dropped twice |
//! | `abandoned` | every source drops its subscriber without a terminal signal (after one item, no cancel): the subscriber still gets a terminal signal, nothing stays alive |
//! | `late` | an item that a source delivers after the cancel reached it (it read its demand before), then the source lets go: nothing alive while the subscription is still held, the subscriber dropped |
//! | `panics` | a subscriber that panics in `on_next` (first or third item): upstream cancelled, every item and the subscriber dropped; the same for the user code of every sink; a fused fold (`from_iter` → `map` → `filter` → `filter_map` → `inspect` → `fold`) with a panic in each closure: the stage named, nothing pulled beyond it, every item dropped |
//! | `storms` | request storms from 4 threads, cancel storms, `request(u64::MAX)` twice, requests from inside `on_complete`/`on_error`: each item once and in order, nothing beyond demand, one terminal signal, nothing alive afterwards |
//! | `oversubscription` | 64 pipelines across small pools on two cores, random prefetch and consumer delays, under a hang watchdog |
//! | `channel_accounting` | `weir::channel` with 1–4 producers using every send method, racing `close`/`fail` and a cancelling consumer, slow (items queue) or eager (single sends race for the direct hand-off), under every policy: every item accounted for |
//! | `channel_hook` | drops made before a subscriber is attached reach the channel's own hook |
//! | `time` | every time operator and time source × every scheduler × 1 ns, zero and `Duration::MAX` |
//! | `durations` | every other public API that takes a Duration × zero, 1 ns and `Duration::MAX`: the documented panic at construction or the documented behaviour, never an overflow panic later or a hang |
//! | `sizes` | every public API that takes a size (capacity, prefetch, window, batch, count, concurrency, ring, replay, lag, rate, threads, limits, mux and RSocket settings) × 0, 1, half and all of its type's largest value and its largest accepted size: the documented panic (or `MuxError`) at construction, or the documented behaviour (every item once and in order, requests within the window), never an overflow or allocation failure later, a hang, or an item left alive |
//! | `shutdown`, `pool_shutdown` | a tokio runtime or a `ThreadPool` shut down under every boundary, bridge and time stage: the pipeline ends with `SchedulerShutdown`, nothing leaks, and cancelled stages leave no timer in the pool |
//! | `memory` | a subscriber that never requests, behind every stage, while the source keeps producing: live items stay within the stage's `in_flight_bound()` |
//! | `hooks` | every user hook of the public API made to panic (a subscriber outside `on_next`, sources' and channels' hooks, drop hooks, limiters, retry classifiers, async subscribers, exporters, publishers in `subscribe`, subscriptions in `request`/`cancel`, items in `Drop` and (in `share`) `Clone`, schedulers in `schedule`, mux transports in `build`): `Panicked` naming the stage where documented, upstream cancelled, every item dropped, nothing hung, pools still running |
//! | `reentry` | user code in a lazy batch (a fused `map`'s closure, the `Drop` of an item a `filter` lets go) calls back into the stage it is delivered to (`request`, `cancel` of the final subscription; a hub's `stats`, also from an evicted item's `Drop` and an item's `Clone`), for every stage that queues what it is handed; an item a time stage lets go at an error, and a `create` hook replaced, whose `Drop` calls back; a limited `flat_map`'s closure that completes an earlier inner: the stream ends, nothing waits for itself, nothing stays alive |
//! | `logging` | a `tracing` layer that calls back into the stage whose event it records (sends into the channel and reads its monitor on its flow changes, refusals and close; reads the circuit breaker on its transitions): every event is emitted outside weir's locks, nothing waits for itself |
//! | `released` | a stage that fails its stream itself (`merge`, `zip`, `flat_map`, `concat_map` holding queued items) has dropped them and cancelled upstream by the time `on_error` reaches its subscriber |
//! | `regressions` | one test per defect of the list in its header, found by using weir as a hostile user would (each failed before its fix) |
//! | `rsocket`, `nats` (with their features) | rows that cross a loopback TCP connection (RSocket) or a JetStream stream on a real `nats-server` the suite starts and stops itself (sink → stream → source), so that every check of the table runs through them; the faults only a server has (SIGKILL mid-run, lost and missing servers, window 1, one ack in flight) are in the `nats` binary |
//!
//! No check asserts on timing: waits are watchdogs (poll until the condition holds, fail
//! after a generous deadline), sleeps are consumer delays or polling intervals, and
//! risky pipelines run on threads of their own, so a hang fails the test instead of
//! hanging the suite. Run with `cargo test --all-features --test adversarial`.

mod harness;
mod stages;
mod support;

mod abandoned;
mod channel_accounting;
mod channel_hook;
mod durations;
mod forgetful;
mod hooks;
mod late;
mod logging;
mod memory;
#[cfg(feature = "nats")]
mod nats;
mod oversubscription;
mod panics;
mod pool_shutdown;
mod reentry;
mod regressions;
mod regressions_new_api;
mod released;
#[cfg(feature = "rsocket")]
mod rsocket;
mod shutdown;
mod sizes;
mod storms;
mod time;
