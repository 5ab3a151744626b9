//! The registry's figures through the [`metrics`] facade (feature `metrics`).
//!
//! An [`Exporter`] reads a [`Registry`] snapshot and records it with whatever
//! recorder the application installed (`metrics-exporter-prometheus`, StatsD, …), the
//! stage's name as the `stage` label. It runs when asked ([`Exporter::export`]) or
//! on a timer ([`Exporter::every`]); nothing is recorded per item.
//!
//! # What is recorded
//!
//! | metric | kind | labels | value |
//! |---|---|---|---|
//! | `weir_stages` | gauge | `stage` | running stages with this name |
//! | `weir_in_flight_bound` | gauge | `stage` | their in-flight bounds, summed |
//! | `weir_queue_depth` | gauge | `stage` | items queued now |
//! | `weir_queue_capacity` | gauge | `stage` | the queues' capacity |
//! | `weir_queue_oldest_age_seconds` | gauge | `stage` | the oldest item's age (0 when empty) |
//! | `weir_queue_lag_seconds` | gauge | `stage` | depth ÷ drain rate (+Inf while nothing drains) |
//! | `weir_queue_blocked_seconds` | gauge | `stage` | time producers waited for room, in the running stages |
//! | `weir_queue_flow_rate_factor` | gauge | `stage` | a push source's advised send rate: 1 flowing, the rung's factor, 0 paused (the smallest; 1 without one) |
//! | `weir_queue_enqueued_total` | counter | `stage` | items accepted |
//! | `weir_queue_dequeued_total` | counter | `stage` | items taken out |
//! | `weir_queue_rejected_total` | counter | `stage` | items handed back to their producer |
//! | `weir_queue_pauses_total` | counter | `stage` | times the high water mark paused producers |
//! | `weir_dropped_total` | counter | `stage`, `reason` | items dropped, by reason |
//!
//! A named hub subscriber ([`Join::named`](crate::hub::Join::named)) reads as a
//! queue of the items it has not read: `weir_queue_depth` its lag in items,
//! `weir_queue_oldest_age_seconds` the age of its next item, `weir_queue_dequeued_total`
//! what it was handed, `weir_dropped_total` what its policy skipped.
//!
//! A named mux channel ([`ChannelSource::named`](crate::mux::ChannelSource::named))
//! reads as a queue of what waits for it, staged at its sender or sent and not yet
//! delivered (`weir_queue_depth`), with `weir_queue_enqueued_total` its items sent,
//! `weir_queue_dequeued_total` its items delivered and `weir_queue_blocked_seconds`
//! its sender's time without credit.
//!
//! Stages that share a name are summed (the ages and the lag: the largest). Counters
//! only grow: each export adds what every stage counted since the previous export,
//! so a stage that ends keeps what it had counted by then (what it counted after the
//! last export before it ended is not seen). A name with no running stage left
//! reads 0 in its gauges.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Registry, StageSnapshot};
use crate::runtime::{Scheduler, TimerSlot};
use crate::DropReason;

/// Records a [`Registry`]'s figures through the `metrics` facade; see the
/// [module docs](self).
///
/// ```
/// use weir::metrics::{export::Exporter, Registry};
/// use weir::prelude::*;
///
/// let registry = Registry::new();
/// let mut exporter = Exporter::new(&registry);
/// let items = weir::range(0u32..3).name("numbers").registry(&registry).blocking_iter(1);
/// exporter.export(); // into the installed recorder (none here: a no-op)
/// assert_eq!(items.count(), 3);
/// ```
pub struct Exporter {
    registry: Registry,
    /// Per registration: the counts seen at the previous export.
    seen: HashMap<u64, Counts>,
    /// Names that had running stages at the previous export.
    names: HashSet<String>,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exporter")
            .field("registry", &self.registry)
            .finish_non_exhaustive()
    }
}

/// The cumulative counts of one queue.
#[derive(Clone, Copy, Default)]
struct Counts {
    enqueued: u64,
    dequeued: u64,
    rejected: u64,
    pauses: u64,
    dropped: [u64; DropReason::COUNT],
}

impl Counts {
    fn of(stage: &StageSnapshot) -> Counts {
        if let Some(c) = &stage.channel {
            // A mux channel: sent in, delivered out.
            return Counts {
                enqueued: c.sent,
                dequeued: c.delivered,
                ..Counts::default()
            };
        }
        if let Some(s) = &stage.subscriber {
            // A hub subscriber: what it was handed, and what its policy skipped.
            let mut dropped = [0; DropReason::COUNT];
            let reason = crate::hub::ring::drop_reason(s.policy);
            if let Some(at) = DropReason::ALL.iter().position(|r| *r == reason) {
                dropped[at] = s.dropped;
            }
            return Counts {
                dequeued: s.delivered,
                dropped,
                ..Counts::default()
            };
        }
        stage
            .queue
            .as_ref()
            .map_or_else(Counts::default, |q| Counts {
                enqueued: q.enqueued,
                dequeued: q.dequeued,
                rejected: q.rejected,
                pauses: q.pauses,
                dropped: q.dropped_by_reason,
            })
    }

    /// What grew since `before` (a count never shrinks; saturating all the same).
    fn since(&self, before: &Counts) -> Counts {
        let mut dropped = [0; DropReason::COUNT];
        for (d, (now, then)) in dropped
            .iter_mut()
            .zip(self.dropped.iter().zip(&before.dropped))
        {
            *d = now.saturating_sub(*then);
        }
        Counts {
            enqueued: self.enqueued.saturating_sub(before.enqueued),
            dequeued: self.dequeued.saturating_sub(before.dequeued),
            rejected: self.rejected.saturating_sub(before.rejected),
            pauses: self.pauses.saturating_sub(before.pauses),
            dropped,
        }
    }

    fn add(&mut self, other: &Counts) {
        self.enqueued += other.enqueued;
        self.dequeued += other.dequeued;
        self.rejected += other.rejected;
        self.pauses += other.pauses;
        for (d, o) in self.dropped.iter_mut().zip(&other.dropped) {
            *d += o;
        }
    }
}

/// One name's gauges, summed over its running stages.
#[derive(Default)]
struct Gauges {
    stages: u64,
    bound: u64,
    depth: u64,
    capacity: u64,
    oldest: f64,
    lag: f64,
    blocked: f64,
    /// The smallest advised rate factor (1 when no queue has a flow state).
    flow: Option<f64>,
}

impl Exporter {
    /// An exporter of `registry` (describes the metrics to the installed recorder).
    pub fn new(registry: &Registry) -> Self {
        describe();
        Exporter {
            registry: registry.clone(),
            seen: HashMap::new(),
            names: HashSet::new(),
        }
    }

    /// Record the registry's figures now.
    pub fn export(&mut self) {
        let snapshot = self.registry.snapshot();
        let mut gauges: HashMap<&str, Gauges> = HashMap::new();
        let mut grown: HashMap<&str, Counts> = HashMap::new();
        let mut seen = HashMap::with_capacity(snapshot.stages.len());
        for stage in &snapshot.stages {
            let counts = Counts::of(stage);
            let before = self.seen.get(&stage.id).copied().unwrap_or_default();
            grown
                .entry(&stage.name)
                .or_default()
                .add(&counts.since(&before));
            seen.insert(stage.id, counts);
            let g = gauges.entry(&stage.name).or_default();
            g.stages += 1;
            g.bound = g.bound.saturating_add(stage.in_flight_bound);
            if let Some(c) = &stage.channel {
                g.depth += c.backlog + c.buffered;
                g.blocked += c.blocked.as_secs_f64();
            }
            if let Some(s) = &stage.subscriber {
                g.depth += s.lag;
                g.oldest = g.oldest.max(s.lag_seconds);
            }
            if let Some(q) = &stage.queue {
                g.depth += q.depth as u64;
                g.capacity = g.capacity.saturating_add(q.capacity as u64);
                g.oldest = g.oldest.max(q.oldest_age.map_or(0.0, |a| a.as_secs_f64()));
                g.lag = g
                    .lag
                    .max(q.lag().map_or(f64::INFINITY, |l| l.as_secs_f64()));
                g.blocked += q.blocked.as_secs_f64();
                if let Some(flow) = q.flow {
                    let factor = flow.rate_factor();
                    g.flow = Some(g.flow.map_or(factor, |f| f.min(factor)));
                }
            }
        }
        for (name, g) in &gauges {
            record_gauges(name, g);
        }
        for (name, c) in &grown {
            record_counts(name, c);
        }
        // Names whose stages have all ended read 0.
        for gone in self
            .names
            .iter()
            .filter(|n| !gauges.contains_key(n.as_str()))
        {
            record_gauges(gone, &Gauges::default());
        }
        self.names = gauges.keys().map(|n| n.to_string()).collect();
        self.seen = seen;
    }

    /// Export now and then every `period` on `scheduler`, until the returned handle
    /// is dropped (or the scheduler shuts down). A period that does not fit the
    /// scheduler's clock (`Duration::MAX`) exports once only.
    ///
    /// # Panics
    ///
    /// If `period` is zero: "Exporter::every: the period must be positive". A
    /// recorder that panics in an export loses that export only (logged): the next
    /// period exports again.
    pub fn every(self, period: Duration, scheduler: impl Scheduler) -> ExportHandle {
        assert!(
            !period.is_zero(),
            "Exporter::every: the period must be positive"
        );
        let handle = ExportHandle {
            next: Arc::default(),
        };
        let timer = Arc::new(Timer {
            exporter: Mutex::new(self),
            next: handle.next.clone(),
            period,
            scheduler: Arc::new(scheduler),
        });
        timer.tick();
        handle
    }
}

/// The periodic export's state, shared by its timer tasks.
struct Timer {
    exporter: Mutex<Exporter>,
    next: Arc<TimerSlot>,
    period: Duration,
    scheduler: Arc<dyn Scheduler>,
}

impl Timer {
    fn tick(self: Arc<Self>) {
        if self.next.is_stopped() {
            return;
        }
        // A recorder that panics loses this export only (the next tick exports again),
        // and the panic stays out of the scheduler's thread.
        let exported = crate::guard::catch(|| {
            self.exporter
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .export();
        });
        if exported.is_err() {
            tracing::error!("weir: the metrics recorder panicked in a periodic export");
        }
        if crate::runtime::deadline(self.scheduler.now(), self.period).is_some() {
            let (scheduler, period, next) =
                (self.scheduler.clone(), self.period, self.next.clone());
            let timer = scheduler.schedule_timer(period, Box::new(move || self.tick()));
            // One tick arms the next, so no two arms race and one ticket does; kept
            // after the handle was dropped, the timer is cancelled.
            next.keep(0, timer);
        }
    }
}

/// Stops an [`Exporter::every`] when dropped.
#[derive(Debug)]
#[must_use = "dropping the handle stops the periodic export"]
pub struct ExportHandle {
    next: Arc<TimerSlot>,
}

impl Drop for ExportHandle {
    /// Stops the export and removes its queued timer from the scheduler (the
    /// exporter is released now, not when the period would have run out).
    fn drop(&mut self) {
        // The scheduler drops the queued tick, and the exporter with it.
        self.next.stop();
    }
}

fn describe() {
    use metrics::{describe_counter, describe_gauge, Unit};
    describe_gauge!("weir_stages", "Running weir stages with this name");
    describe_gauge!(
        "weir_in_flight_bound",
        Unit::Count,
        "Most items the stage and its upstream can hold"
    );
    describe_gauge!("weir_queue_depth", Unit::Count, "Items queued now");
    describe_gauge!("weir_queue_capacity", Unit::Count, "Queue capacity");
    describe_gauge!(
        "weir_queue_oldest_age_seconds",
        Unit::Seconds,
        "Age of the oldest queued item"
    );
    describe_gauge!(
        "weir_queue_lag_seconds",
        Unit::Seconds,
        "How long an item arriving now would wait: depth / drain rate"
    );
    describe_gauge!(
        "weir_queue_blocked_seconds",
        Unit::Seconds,
        "Time producers of the running stages waited for room"
    );
    describe_gauge!(
        "weir_queue_flow_rate_factor",
        "A push source's advised send rate: 1 flowing, 0 paused"
    );
    describe_counter!("weir_queue_enqueued_total", Unit::Count, "Items accepted");
    describe_counter!("weir_queue_dequeued_total", Unit::Count, "Items taken out");
    describe_counter!(
        "weir_queue_rejected_total",
        Unit::Count,
        "Items handed back to their producer"
    );
    describe_counter!(
        "weir_queue_pauses_total",
        Unit::Count,
        "Times the high water mark paused producers"
    );
    describe_counter!(
        "weir_dropped_total",
        Unit::Count,
        "Items dropped, by reason"
    );
}

fn record_gauges(name: &str, g: &Gauges) {
    let stage = name.to_owned();
    metrics::gauge!("weir_stages", "stage" => stage.clone()).set(g.stages as f64);
    metrics::gauge!("weir_in_flight_bound", "stage" => stage.clone()).set(g.bound as f64);
    metrics::gauge!("weir_queue_depth", "stage" => stage.clone()).set(g.depth as f64);
    metrics::gauge!("weir_queue_capacity", "stage" => stage.clone()).set(g.capacity as f64);
    metrics::gauge!("weir_queue_oldest_age_seconds", "stage" => stage.clone()).set(g.oldest);
    metrics::gauge!("weir_queue_lag_seconds", "stage" => stage.clone()).set(g.lag);
    metrics::gauge!("weir_queue_blocked_seconds", "stage" => stage.clone()).set(g.blocked);
    metrics::gauge!("weir_queue_flow_rate_factor", "stage" => stage).set(g.flow.unwrap_or(1.0));
}

fn record_counts(name: &str, c: &Counts) {
    let stage = name.to_owned();
    metrics::counter!("weir_queue_enqueued_total", "stage" => stage.clone()).increment(c.enqueued);
    metrics::counter!("weir_queue_dequeued_total", "stage" => stage.clone()).increment(c.dequeued);
    metrics::counter!("weir_queue_rejected_total", "stage" => stage.clone()).increment(c.rejected);
    metrics::counter!("weir_queue_pauses_total", "stage" => stage.clone()).increment(c.pauses);
    for (reason, &n) in DropReason::ALL.iter().zip(&c.dropped) {
        metrics::counter!(
            "weir_dropped_total",
            "stage" => stage.clone(),
            "reason" => reason_label(*reason)
        )
        .increment(n);
    }
}

/// A reason as a label value.
pub(crate) fn reason_label(reason: DropReason) -> &'static str {
    match reason {
        DropReason::OverflowOldest => "overflow_oldest",
        DropReason::OverflowNewest => "overflow_newest",
        DropReason::ReplacedByLatest => "replaced_by_latest",
        DropReason::Merged => "merged",
        DropReason::Expired => "expired",
        DropReason::Rejected => "rejected",
        DropReason::CoDel => "codel",
        DropReason::DeadlineExceeded => "deadline_exceeded",
    }
}
