//! weir's `tracing` events, captured: the channel's flow-state changes, the
//! rate-limited drop summary, the hub's cut-off subscribers, the mux's cancelled
//! channels and the stages' terminal errors and cancels.
//!
//! Each test installs a capturing subscriber for its own thread
//! (`tracing::subscriber::with_default`) and runs its pipeline on that thread (every
//! stage here is inline, the mux on `Immediate` schedulers), so tests running in
//! parallel see only their own events. Counts are asserted, never timings.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::Level;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

use weir::hub::{Hub, Policy};
use weir::metrics::{DropHook, Drops};
use weir::mux::Mux;
use weir::prelude::*;
use weir::runtime::Immediate;
use weir::source::channel::{ChannelBuilder, ChannelPolicy, FlowState, WaterMarks};
use weir::{DropReason, Error, ErrorKind, Subscription};

// ---- capturing events ------------------------------------------------------------

/// One event as the capture saw it: its level, target, message and fields (each
/// field as its `Debug` text; strings without quotes).
#[derive(Clone, Debug)]
struct Seen {
    level: Level,
    target: String,
    message: String,
    fields: BTreeMap<String, String>,
}

impl Seen {
    fn field(&self, name: &str) -> &str {
        self.fields
            .get(name)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("no field `{name}` in {self:?}"))
    }

    fn number(&self, name: &str) -> u64 {
        let text = self.field(name);
        text.parse()
            .unwrap_or_else(|_| panic!("field `{name}` is not a number: {text:?} in {self:?}"))
    }
}

/// Writes an event's fields into a [`Seen`].
struct Fields<'a>(&'a mut Seen);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.record(field, value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.record(field, format!("{value:?}"));
    }
}

impl Fields<'_> {
    fn record(&mut self, field: &Field, text: String) {
        if field.name() == "message" {
            self.0.message = text;
        } else {
            self.0.fields.insert(field.name().to_owned(), text);
        }
    }
}

/// A layer that keeps every event.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Seen>>>);

impl<S: tracing::Subscriber> Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let metadata = event.metadata();
        let mut seen = Seen {
            level: *metadata.level(),
            target: metadata.target().to_owned(),
            message: String::new(),
            fields: BTreeMap::new(),
        };
        event.record(&mut Fields(&mut seen));
        self.0.lock().unwrap().push(seen);
    }
}

/// Run `f` with a capturing subscriber on this thread; its result and the events.
fn capture<R>(f: impl FnOnce() -> R) -> (R, Vec<Seen>) {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let result = tracing::subscriber::with_default(subscriber, f);
    let events = std::mem::take(&mut *capture.0.lock().unwrap());
    (result, events)
}

/// The events of `target` at `level` exactly.
fn at<'a>(events: &'a [Seen], target: &str, level: Level) -> Vec<&'a Seen> {
    events
        .iter()
        .filter(|e| e.target == target && e.level == level)
        .collect()
}

/// The events at `info` or above (warn, error), any target.
fn loud(events: &[Seen]) -> Vec<&Seen> {
    events.iter().filter(|e| e.level <= Level::INFO).collect()
}

// ---- a subscriber driven by hand -------------------------------------------------

/// What a [`Probe`] saw.
#[derive(Default)]
struct Observed {
    subscription: Option<Subscription>,
    items: u64,
    error: Option<Error>,
    completed: bool,
}

/// A subscriber that asks for `initial` items when subscribed, then only for what
/// the test requests through it; clones share what it saw.
#[derive(Clone)]
struct Probe {
    initial: u64,
    seen: Arc<Mutex<Observed>>,
}

impl Probe {
    fn new(initial: u64) -> Self {
        Probe {
            initial,
            seen: Arc::default(),
        }
    }

    fn subscription(&self) -> Subscription {
        self.seen
            .lock()
            .unwrap()
            .subscription
            .clone()
            .expect("subscribed")
    }

    fn request(&self, n: u64) {
        self.subscription().request(n);
    }

    fn cancel(&self) {
        self.subscription().cancel();
    }

    fn items(&self) -> u64 {
        self.seen.lock().unwrap().items
    }

    fn error_kind(&self) -> Option<ErrorKind> {
        self.seen.lock().unwrap().error.as_ref().map(Error::kind)
    }

    fn completed(&self) -> bool {
        self.seen.lock().unwrap().completed
    }
}

impl<T> Subscriber<T> for Probe {
    fn on_subscribe(&mut self, subscription: Subscription) {
        self.seen.lock().unwrap().subscription = Some(subscription.clone());
        if self.initial > 0 {
            subscription.request(self.initial);
        }
    }

    fn on_next(&mut self, _: T) {
        self.seen.lock().unwrap().items += 1;
    }

    fn on_error(&mut self, error: Error) {
        self.seen.lock().unwrap().error = Some(error);
    }

    fn on_complete(&mut self) {
        self.seen.lock().unwrap().completed = true;
    }
}

// ---- the channel's flow state ----------------------------------------------------

#[test]
fn a_pause_and_its_resume_are_one_info_event_each() {
    let (probe, events) = capture(|| {
        let (tx, rx) = ChannelBuilder::new(100, ChannelPolicy::Backpressure)
            .water_marks(WaterMarks::new(80, 20))
            .build::<u32>();
        let probe = Probe::new(0);
        rx.subscribe(probe.clone());
        for i in 0..90 {
            tx.try_send(i).unwrap();
        }
        assert_eq!(tx.state(), FlowState::Paused);
        probe.request(50); // 40 left: above the low mark, still paused
        assert_eq!(tx.state(), FlowState::Paused);
        probe.request(30); // 10 left: at or below the low mark, flowing again
        assert_eq!(tx.state(), FlowState::Flowing);
        drop(tx);
        probe.request(100);
        probe
    });
    assert_eq!(probe.items(), 90);
    assert!(probe.completed());
    let flow = at(&events, "weir::channel", Level::INFO);
    assert_eq!(flow.len(), 2, "one pause, one resume: {flow:#?}");
    assert_eq!(
        (flow[0].field("from"), flow[0].field("to")),
        ("flowing", "paused")
    );
    assert_eq!(
        flow[0].number("depth"),
        80,
        "the offer that reached the high mark"
    );
    assert_eq!(flow[0].number("capacity"), 100);
    assert_eq!(
        (flow[1].field("from"), flow[1].field("to")),
        ("paused", "flowing")
    );
    assert!(flow[1].number("depth") <= 20, "{:?}", flow[1]);
    assert_eq!(loud(&events).len(), 2, "nothing else at info: {events:#?}");
}

#[test]
fn a_channel_in_steady_state_is_quiet_at_info() {
    let (probe, events) = capture(|| {
        let (tx, rx) = weir::channel::<u64>(1_024, ChannelPolicy::Backpressure);
        let probe = Probe::new(u64::MAX);
        rx.subscribe(probe.clone());
        for i in 0..100_000 {
            tx.try_send(i).unwrap();
        }
        drop(tx);
        probe
    });
    assert_eq!(probe.items(), 100_000);
    assert!(probe.completed());
    assert!(loud(&events).is_empty(), "{:#?}", loud(&events));
    assert!(
        at(&events, "weir::channel", Level::DEBUG).is_empty(),
        "no flow-state change below the marks: {events:#?}"
    );
}

#[test]
fn the_ladders_reduce_rung_is_debug_and_its_shed_rung_info() {
    use weir::source::channel::Admission;
    let (_, events) = capture(|| {
        let admission = Admission::new()
            .reduce_at(WaterMarks::new(40, 20), 0.5)
            .shed_below(WaterMarks::new(60, 30), 1u8, |_: &u32| 1);
        let (tx, rx) = ChannelBuilder::new(100, ChannelPolicy::Backpressure)
            .water_marks(WaterMarks::new(80, 10))
            .build_with(admission);
        let probe = Probe::new(0);
        rx.subscribe(probe.clone());
        for i in 0..50 {
            tx.try_send(i).unwrap(); // 40: reducing
        }
        for i in 0..20 {
            tx.try_send(i).unwrap(); // 60: shedding
        }
        probe.request(70); // 0: flowing
    });
    let info = at(&events, "weir::channel", Level::INFO);
    let debug = at(&events, "weir::channel", Level::DEBUG);
    assert_eq!(debug.len(), 1, "{debug:#?}");
    assert_eq!(
        (debug[0].field("from"), debug[0].field("to")),
        ("flowing", "reducing to 50%")
    );
    assert_eq!(info.len(), 2, "{info:#?}");
    assert_eq!(info[0].field("to"), "shedding (rate 50%)");
    assert_eq!(info[1].field("to"), "flowing");
}

// ---- drops -------------------------------------------------------------------------

/// The summary events of a lossy stage dropping 100,000 items (`hooked`: with a
/// drop hook downstream), and the hook's count.
fn drop_summary(hooked: bool) -> (Vec<Seen>, u64) {
    let drops = Drops::new();
    let (probe, events) = capture(|| {
        let probe = Probe::new(1);
        let lossy = weir::range(0u64..100_001).on_backpressure_drop();
        if hooked {
            lossy
                .on_dropped(DropHook::new(drops.clone()))
                .subscribe(probe.clone());
        } else {
            lossy.subscribe(probe.clone());
        }
        probe
    });
    assert_eq!(probe.items(), 1);
    assert!(probe.completed());
    let summaries: Vec<Seen> = events
        .into_iter()
        .filter(|e| e.target == "weir::drops")
        .collect();
    (summaries, drops.count(DropReason::OverflowNewest))
}

fn check_summary(summaries: &[Seen]) {
    // log2(100,000) < 17: at most one event per power of two (17), one at the end.
    assert!(
        (1..=18).contains(&summaries.len()),
        "{} events: {summaries:#?}",
        summaries.len()
    );
    let mut last = 0;
    for event in summaries {
        assert_eq!(event.level, Level::DEBUG);
        assert_eq!(event.field("stage"), "on_backpressure_drop");
        assert_eq!(event.field("reason"), "OverflowNewest");
        let total = event.number("total");
        assert!(total > last, "running totals grow: {summaries:#?}");
        last = total;
    }
    let end = summaries.last().unwrap();
    assert_eq!(end.number("total"), 100_000);
    assert_eq!(end.field("at_end"), "true");
}

#[test]
fn a_lossy_stage_summarises_its_drops_at_powers_of_two() {
    let (summaries, counted) = drop_summary(true);
    check_summary(&summaries);
    assert_eq!(counted, 100_000);
    assert_eq!(
        summaries.last().unwrap().number("total"),
        counted,
        "the last summary carries the hook's count"
    );
}

#[test]
fn a_lossy_stage_without_a_hook_summarises_its_drops_too() {
    let (summaries, _) = drop_summary(false);
    check_summary(&summaries);
    assert!(
        summaries[0].message.contains("without a drop hook"),
        "{:?}",
        summaries[0]
    );
}

#[test]
fn a_channels_drops_are_summarised_not_logged_per_item() {
    let (_, events) = capture(|| {
        let (tx, rx) = weir::channel::<u32>(4, ChannelPolicy::DropOldest);
        for i in 0..10_004 {
            tx.try_send(i).unwrap();
        }
        drop(tx);
        rx.subscribe(Probe::new(u64::MAX));
    });
    let summaries = at(&events, "weir::drops", Level::DEBUG);
    // 10,000 drops: 14 powers of two (1 .. 8,192), and the end's 10,000.
    assert_eq!(summaries.len(), 15, "{summaries:#?}");
    assert!(summaries
        .iter()
        .all(|e| e.field("stage") == "channel" && e.field("reason") == "OverflowOldest"));
    assert_eq!(summaries[13].number("total"), 8_192);
    assert_eq!(summaries[14].number("total"), 10_000);
    assert_eq!(summaries[14].field("at_end"), "true");
}

// ---- the hub -----------------------------------------------------------------------

#[test]
fn a_disconnect_subscriber_cut_off_is_one_info_event() {
    let ((slow, total), events) = capture(|| {
        let hub: Hub<u64> = Hub::builder(weir::range(0u64..10_000), 16)
            .connect_at(2)
            .build();
        let slow = Probe::new(1);
        hub.join(Policy::disconnect_after_items(8))
            .named("slow")
            .subscribe(slow.clone());
        let total = hub.clone().fold(0u64, |n, _| n + 1).wait().unwrap();
        (slow, total)
    });
    assert_eq!(total, 10_000, "the Backpressure subscriber lost nothing");
    assert_eq!(slow.error_kind(), Some(ErrorKind::Lagged));
    let info = at(&events, "weir::hub", Level::INFO);
    assert_eq!(info.len(), 1, "{info:#?}");
    assert_eq!(info[0].number("subscriber"), 0, "the first to join");
    assert_eq!(info[0].field("name"), "slow");
    assert!(info[0].number("lag") > 8, "{:?}", info[0]);
    assert!(info[0].field("error").contains("fell"), "{:?}", info[0]);
    assert_eq!(loud(&events).len(), 1, "nothing else at info: {events:#?}");
    let debug = at(&events, "weir::hub", Level::DEBUG);
    let joined = debug
        .iter()
        .filter(|e| e.message.contains("joined"))
        .count();
    let left = debug.iter().filter(|e| e.message.contains("left")).count();
    assert_eq!((joined, left), (2, 2), "{debug:#?}");
    assert!(
        debug
            .iter()
            .any(|e| e.message.contains("subscribing upstream")),
        "{debug:#?}"
    );
}

#[test]
fn a_hub_whose_last_subscriber_leaves_stops_upstream_at_debug() {
    let (_, events) = capture(|| {
        let (tx, rx) = weir::channel::<u32>(16, ChannelPolicy::Backpressure);
        let hub = rx.share(8);
        let probe = Probe::new(4);
        hub.subscribe(probe.clone());
        for i in 0..4 {
            tx.try_send(i).unwrap();
        }
        probe.cancel();
    });
    let stopped: Vec<_> = at(&events, "weir::hub", Level::DEBUG)
        .into_iter()
        .filter(|e| e.message.contains("upstream cancelled"))
        .collect();
    assert_eq!(stopped.len(), 1, "{events:#?}");
    assert!(loud(&events).is_empty(), "{events:#?}");
}

// ---- the mux -----------------------------------------------------------------------

#[test]
fn a_mux_channel_cancelled_by_its_receiver_returns_its_credit_at_debug() {
    let (probe, events) = capture(|| {
        let mux = Mux::<u64>::builder()
            .exclusive(8)
            .shared(16)
            .build_local(Immediate, Immediate)
            .unwrap();
        let (sink, source) = mux.channel(7).open().unwrap();
        let probe = Probe::new(5);
        source.subscribe(probe.clone());
        weir::range(0u64..1_000).subscribe(sink);
        probe.cancel();
        probe
    });
    assert_eq!(probe.items(), 5);
    let mux = at(&events, "weir::mux", Level::DEBUG);
    let cancelled: Vec<_> = mux
        .iter()
        .filter(|e| e.message.contains("cancelled"))
        .collect();
    assert_eq!(cancelled.len(), 1, "{mux:#?}");
    assert_eq!(cancelled[0].number("channel"), 7);
    let closed: Vec<_> = mux
        .iter()
        .filter(|e| e.message.contains("closed"))
        .collect();
    assert_eq!(closed.len(), 1, "{mux:#?}");
    assert_eq!(closed[0].number("delivered"), 5);
    assert!(loud(&events).is_empty(), "{events:#?}");
}

// ---- errors and cancels ----------------------------------------------------------

#[test]
fn a_stages_terminal_error_and_a_cancel_are_debug_events() {
    let (_, events) = capture(|| {
        let (tx, rx) = weir::channel::<u32>(4, ChannelPolicy::Backpressure);
        let failed = Probe::new(1);
        rx.subscribe(failed.clone());
        tx.fail(Error::msg("the socket broke"));
        assert_eq!(failed.error_kind(), Some(ErrorKind::Upstream));

        let (_tx, rx) = weir::channel::<u32>(4, ChannelPolicy::Backpressure);
        let cancelled = Probe::new(1);
        rx.subscribe(cancelled.clone());
        cancelled.cancel();
    });
    let stage = at(&events, "weir::stage", Level::DEBUG);
    let failed: Vec<_> = stage
        .iter()
        .filter(|e| e.message.contains("error"))
        .collect();
    assert_eq!(failed.len(), 1, "{stage:#?}");
    assert_eq!(failed[0].field("stage"), "channel");
    assert!(failed[0].field("error").contains("the socket broke"));
    let cancelled: Vec<_> = stage
        .iter()
        .filter(|e| e.message.contains("cancelled"))
        .collect();
    assert_eq!(cancelled.len(), 1, "{stage:#?}");
    assert_eq!(cancelled[0].field("stage"), "channel");
    assert!(loud(&events).is_empty(), "{events:#?}");
}
