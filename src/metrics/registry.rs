//! The registry: every named stage of every running pipeline, in one place.
//!
//! A stage named with [`PublisherExt::name`](crate::PublisherExt::name) enters a
//! [`Registry`] (the process-wide [`Registry::global`] unless told otherwise) when it
//! is subscribed, and leaves it when its subscription ends: completion, error,
//! cancel, or a panic that drops it. A stage that holds a queue (an async boundary,
//! a push source, `on_backpressure_buffer`) enters with its [`QueueMonitor`], so
//! [`Registry::snapshot`] reads its depth, capacity, oldest age, lag, time to drain,
//! drops by reason, blocked time and pauses; any other named stage enters with its
//! in-flight bound only.
//!
//! Pipelines and cost: see [`Registry`]. The links between named stages come from a
//! thread-local stack of the named stages subscribing on this thread
//! (`SUBSCRIBING`, pushed by [`Scope::run`]).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use super::{QueueMonitor, QueueStats};

/// A set of named stages of running pipelines.
///
/// A stage named with [`PublisherExt::name`](crate::PublisherExt::name) enters a
/// registry when it is subscribed and leaves it when its subscription ends
/// (completion, error, cancel, or a panic that drops it). A stage that holds a queue
/// enters with its [`QueueMonitor`], so [`snapshot`](Self::snapshot) reads its
/// queue's figures; any other named stage enters with its in-flight bound only.
///
/// # Pipelines
///
/// Subscribing runs from the last stage up to the source, on one thread for every
/// stage that subscribes its upstream at once (all but `subscribe_on` and a hub
/// waiting for its subscribers). While a named stage subscribes its upstream, it is
/// the *current* named stage of that thread (per registry); a named stage further up
/// enters with it as its downstream. [`RegistrySnapshot::pipelines`] follows these
/// links: one [`Pipeline`] per named stage that has no named downstream, its named
/// stages upstream of it in order, the backlog (the deepest queue) pointed out.
///
/// # Cost
///
/// Entering and leaving take the registry's lock once each, when the stage is
/// subscribed and when it ends; nothing is done per item (the stage's queue already
/// keeps its figures in its gauge, once per batch). A snapshot takes the lock long
/// enough to clone the entries, then reads each monitor without it.
///
/// Cloning gives another handle on the same registry. Tests use their own
/// ([`Registry::new`]); applications usually read [`Registry::global`], which every
/// named stage enters unless it was given another registry.
///
/// ```
/// use weir::metrics::Registry;
/// use weir::prelude::*;
/// use weir::source::channel::ChannelPolicy;
///
/// let registry = Registry::new();
/// let (tx, rx) = weir::channel::<u32>(100, ChannelPolicy::Backpressure);
/// let items = rx.name("ingest").registry(&registry).blocking_iter(8);
/// tx.try_send(1).unwrap();
/// tx.try_send(2).unwrap();
/// let snapshot = registry.snapshot();
/// let ingest = snapshot.stage("ingest").expect("registered while it runs");
/// assert_eq!(ingest.queue.as_ref().map(|q| q.capacity), Some(100));
/// drop(tx);
/// assert_eq!(items.map(Result::unwrap).collect::<Vec<_>>(), vec![1, 2]);
/// assert!(registry.is_empty(), "the stage left when its stream ended");
/// ```
#[derive(Clone, Default)]
pub struct Registry {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    entries: Mutex<Entries>,
}

#[derive(Default)]
struct Entries {
    next_id: u64,
    live: BTreeMap<u64, Entry>,
}

#[derive(Clone)]
struct Entry {
    name: Arc<str>,
    in_flight_bound: u64,
    probe: Probe,
    downstream: Option<u64>,
}

/// Reads a hub subscriber's figures (`None` once its hub is gone).
pub(crate) type ReadSubscriber = Arc<dyn Fn() -> Option<crate::hub::SubscriberStats> + Send + Sync>;

/// Reads a mux channel's figures (`None` once it closed).
pub(crate) type ReadChannel = Arc<dyn Fn() -> Option<crate::mux::ChannelStats> + Send + Sync>;

thread_local! {
    /// The named stages subscribing their upstream on this thread, innermost last:
    /// `(registry, registration)`.
    static SUBSCRIBING: RefCell<Vec<(usize, u64)>> = const { RefCell::new(Vec::new()) };
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("stages", &self.len())
            .finish()
    }
}

impl Registry {
    /// An empty registry of its own (for tests, or to keep one subsystem's stages
    /// apart).
    pub fn new() -> Self {
        Registry::default()
    }

    /// The process-wide registry: where named stages go unless given another one.
    pub fn global() -> &'static Registry {
        static GLOBAL: OnceLock<Registry> = OnceLock::new();
        GLOBAL.get_or_init(Registry::new)
    }

    /// How many stages are registered now.
    pub fn len(&self) -> usize {
        self.lock().live.len()
    }

    /// True when no stage is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every registered stage's figures now, in the order they entered (queue
    /// rates over [`RATE_WINDOW`](super::RATE_WINDOW)).
    pub fn snapshot(&self) -> RegistrySnapshot {
        // Clone the entries under the lock; read the monitors without it (a
        // snapshot may ask a queue to sweep its expired items).
        let entries: Vec<(u64, Entry)> = self
            .lock()
            .live
            .iter()
            .map(|(&id, entry)| (id, entry.clone()))
            .collect();
        RegistrySnapshot {
            stages: entries
                .into_iter()
                .map(|(id, entry)| {
                    let (mut queue, mut subscriber, mut channel) = (None, None, None);
                    match &entry.probe {
                        Probe::Queue(monitor) => queue = monitor.as_ref().map(|m| m.snapshot()),
                        Probe::Subscriber(read) => subscriber = read(),
                        Probe::Channel(read) => channel = read(),
                    }
                    StageSnapshot {
                        id,
                        name: entry.name.to_string(),
                        in_flight_bound: entry.in_flight_bound,
                        queue,
                        subscriber,
                        channel,
                        downstream: entry.downstream,
                    }
                })
                .collect(),
        }
    }

    /// Enter a stage; it stays until the returned guard is dropped. Its downstream
    /// is the named stage of this registry subscribing on this thread, if any.
    pub(crate) fn enter(
        &self,
        name: Arc<str>,
        in_flight_bound: u64,
        monitor: Option<QueueMonitor>,
    ) -> Registration {
        self.enter_with(name, in_flight_bound, Probe::Queue(monitor))
    }

    /// [`enter`](Self::enter) a hub subscriber, with the reader of its figures.
    pub(crate) fn enter_subscriber(
        &self,
        name: Arc<str>,
        in_flight_bound: u64,
        read: ReadSubscriber,
    ) -> Registration {
        self.enter_with(name, in_flight_bound, Probe::Subscriber(read))
    }

    /// [`enter`](Self::enter) a mux channel's receiving end, with the reader of its
    /// figures.
    pub(crate) fn enter_channel(
        &self,
        name: Arc<str>,
        in_flight_bound: u64,
        read: ReadChannel,
    ) -> Registration {
        self.enter_with(name, in_flight_bound, Probe::Channel(read))
    }

    fn enter_with(&self, name: Arc<str>, in_flight_bound: u64, probe: Probe) -> Registration {
        let key = self.key();
        let downstream = SUBSCRIBING.with(|stack| {
            stack
                .borrow()
                .iter()
                .rev()
                .find(|(registry, _)| *registry == key)
                .map(|&(_, id)| id)
        });
        let mut entries = self.lock();
        let id = entries.next_id;
        entries.next_id += 1;
        entries.live.insert(
            id,
            Entry {
                name,
                in_flight_bound,
                probe,
                downstream,
            },
        );
        Registration {
            registry: self.clone(),
            id,
        }
    }

    /// Identifies this registry (its shared part's address) in `SUBSCRIBING`.
    fn key(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        // No user code runs under this lock; a poisoned one is still consistent.
        self.inner
            .entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Where an entry's figures come from.
#[derive(Clone)]
enum Probe {
    /// A queue's monitor (`None`: a stage that holds no queue).
    Queue(Option<QueueMonitor>),
    /// A hub subscriber's figures, read from its hub.
    Subscriber(ReadSubscriber),
    /// A mux channel's figures, read from its mux.
    Channel(ReadChannel),
}

/// A stage's place in a [`Registry`]: it leaves when this is dropped.
pub(crate) struct Registration {
    registry: Registry,
    id: u64,
}

impl Registration {
    /// Its registration number.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Where named stages upstream link to this one while it subscribes them.
    pub(crate) fn scope(&self) -> Scope {
        Scope {
            registry: self.registry.key(),
            id: self.id,
        }
    }
}

/// A named stage subscribing its upstream: see [`Scope::run`].
#[derive(Clone, Copy)]
pub(crate) struct Scope {
    registry: usize,
    id: u64,
}

impl Scope {
    /// Run `subscribe` (the stage subscribing its upstream) with this stage as the
    /// thread's current named stage: named stages upstream that enter meanwhile
    /// link to it.
    pub(crate) fn run<R>(self, subscribe: impl FnOnce() -> R) -> R {
        /// Pops the entry even if `subscribe` unwinds.
        struct Pop;
        impl Drop for Pop {
            fn drop(&mut self) {
                SUBSCRIBING.with(|stack| stack.borrow_mut().pop());
            }
        }
        SUBSCRIBING.with(|stack| stack.borrow_mut().push((self.registry, self.id)));
        let _pop = Pop;
        subscribe()
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        // The entry (and its monitor) is dropped after the lock is let go.
        let entry = self.registry.lock().live.remove(&self.id);
        drop(entry);
    }
}

/// What [`Registry::snapshot`] saw: one row per registered stage.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct RegistrySnapshot {
    /// The stages, in the order they entered the registry.
    pub stages: Vec<StageSnapshot>,
}

impl RegistrySnapshot {
    /// The first stage registered under `name`, if any.
    pub fn stage(&self, name: &str) -> Option<&StageSnapshot> {
        self.stages.iter().find(|s| s.name == name)
    }

    /// The pipelines: one per named stage without a named downstream (its last
    /// named stage), with the named stages linked upstream of it; see [`Registry`'s
    /// docs](Registry#pipelines).
    pub fn pipelines(&self) -> Vec<Pipeline> {
        let by_id: BTreeMap<u64, &StageSnapshot> = self.stages.iter().map(|s| (s.id, s)).collect();
        let mut upstreams: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        for stage in &self.stages {
            // A downstream that already left ends the link: the stage is a last one.
            if let Some(down) = stage.downstream.filter(|d| by_id.contains_key(d)) {
                upstreams.entry(down).or_default().push(stage.id);
            }
        }
        let last = |s: &&StageSnapshot| !matches!(s.downstream, Some(d) if by_id.contains_key(&d));
        self.stages
            .iter()
            .filter(last)
            .map(|end| {
                // Upstream first: each stage after its upstreams, in the order
                // they entered.
                fn post_order(id: u64, ups: &BTreeMap<u64, Vec<u64>>, out: &mut Vec<u64>) {
                    for &up in ups.get(&id).into_iter().flatten() {
                        post_order(up, ups, out);
                    }
                    out.push(id);
                }
                let mut order = Vec::new();
                post_order(end.id, &upstreams, &mut order);
                let backlog = order
                    .iter()
                    .filter_map(|id| Some((*id, by_id[id].queue.as_ref()?.depth)))
                    .filter(|&(_, depth)| depth > 0)
                    .max_by_key(|&(id, depth)| (depth, std::cmp::Reverse(id)))
                    .map(|(id, _)| id);
                Pipeline {
                    stages: order,
                    in_flight_bound: end.in_flight_bound,
                    backlog,
                }
            })
            .collect()
    }
}

/// Named stages linked into one pipeline, from [`RegistrySnapshot::pipelines`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Pipeline {
    /// The stages' registration ids ([`StageSnapshot::id`]), upstream first, the
    /// pipeline's last named stage last.
    pub stages: Vec<u64>,
    /// The last named stage's in-flight bound: the most items the pipeline holds up
    /// to there.
    pub in_flight_bound: u64,
    /// The stage whose queue holds the most items now, if any holds one.
    pub backlog: Option<u64>,
}

/// One named stage in a [`RegistrySnapshot`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct StageSnapshot {
    /// Its registration number, unique within its registry (stages with the same
    /// name are told apart by it).
    pub id: u64,
    /// The name it was given.
    pub name: String,
    /// The most items it and everything upstream of it can hold
    /// ([`Publisher::in_flight_bound`](crate::Publisher::in_flight_bound)).
    pub in_flight_bound: u64,
    /// Its queue's figures, for a stage that holds a queue.
    pub queue: Option<QueueStats>,
    /// Its figures, for a named subscriber of a hub
    /// ([`Join::named`](crate::hub::Join::named)): its lag in items and seconds,
    /// what it was handed and what it skipped.
    pub subscriber: Option<crate::hub::SubscriberStats>,
    /// Its figures, for the receiving end of a named mux channel
    /// ([`ChannelSource::named`](crate::mux::ChannelSource::named)): items staged for
    /// it and in flight, sent, delivered, whether it is stalled.
    pub channel: Option<crate::mux::ChannelStats>,
    /// The named stage it delivers to (its registration id), when that one
    /// subscribed it on the same thread; see [`RegistrySnapshot::pipelines`].
    pub downstream: Option<u64>,
}

impl fmt::Display for RegistrySnapshot {
    /// An aligned table: one line per stage (name, depth/capacity, oldest age, lag,
    /// time to drain, drops, rejected, blocked time, pauses, flow state, in-flight
    /// bound); `-`
    /// where a stage holds no queue or a figure is not defined, `∞` for a lag or
    /// drain time that does not end at the current rates. A hub subscriber's line
    /// shows its lag (items, then the age of its next item), its skipped items and
    /// its state in the flow column; a mux channel's, the items waiting for it (staged
    /// at its sender or in flight), its
    /// sender's time without credit, and `stalled` or `open`. Then one line per pipeline
    /// of two named stages or more: the chain, its bound, where the backlog is.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const HEADER: [&str; 11] = [
            "stage", "depth", "oldest", "lag", "drain in", "dropped", "rejected", "blocked",
            "pauses", "flow", "bound",
        ];
        let rows: Vec<[String; 11]> = self.stages.iter().map(row).collect();
        let mut widths = HEADER.map(|h| h.chars().count());
        for row in &rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let line = |f: &mut fmt::Formatter<'_>, cells: &[&str]| -> fmt::Result {
            for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
                let pad = width - cell.chars().count();
                if i == 0 {
                    write!(f, "{cell}{:pad$}", "")?;
                } else {
                    write!(f, "  {:pad$}{cell}", "")?;
                }
            }
            writeln!(f)
        };
        line(f, &HEADER)?;
        for row in &rows {
            let cells: Vec<&str> = row.iter().map(String::as_str).collect();
            line(f, &cells)?;
        }
        let name = |id: &u64| {
            self.stages
                .iter()
                .find(|s| s.id == *id)
                .map_or("?", |s| s.name.as_str())
        };
        for pipeline in self.pipelines().iter().filter(|p| p.stages.len() > 1) {
            let chain: Vec<&str> = pipeline.stages.iter().map(name).collect();
            write!(
                f,
                "pipeline {} (bound {})",
                chain.join(" → "),
                pipeline.in_flight_bound
            )?;
            match &pipeline.backlog {
                Some(id) => writeln!(f, ": backlog at {}", name(id))?,
                None => writeln!(f)?,
            }
        }
        Ok(())
    }
}

/// One stage's cells, in the order of the table's header.
fn row(stage: &StageSnapshot) -> [String; 11] {
    let secs = |d: Option<std::time::Duration>| match d {
        Some(d) => format!("{:.3}s", d.as_secs_f64()),
        None => "∞".to_owned(),
    };
    let dash = || "-".to_owned();
    if let Some(s) = &stage.subscriber {
        // A hub subscriber: its lag is the ring's items it has not read, and the
        // age of the next one.
        return [
            stage.name.clone(),
            s.lag.to_string(),
            format!("{:.3}s", s.lag_seconds),
            dash(),
            dash(),
            s.dropped.to_string(),
            dash(),
            dash(),
            dash(),
            format!("{:?}", s.state).to_lowercase(),
            stage.in_flight_bound.to_string(),
        ];
    }
    if let Some(c) = &stage.channel {
        // A mux channel: what waits for it (staged at its sender, or sent and not
        // yet delivered), time its sender had nothing to send with, stalled or not.
        return [
            stage.name.clone(),
            (c.backlog + c.buffered).to_string(),
            dash(),
            dash(),
            dash(),
            c.dropped.to_string(),
            dash(),
            format!("{:.3}s", c.blocked.as_secs_f64()),
            dash(),
            if c.stalled { "stalled" } else { "open" }.to_owned(),
            stage.in_flight_bound.to_string(),
        ];
    }
    match &stage.queue {
        Some(q) => [
            stage.name.clone(),
            format!("{}/{}", q.depth, q.capacity),
            q.oldest_age
                .map_or_else(dash, |a| format!("{:.3}s", a.as_secs_f64())),
            secs(q.lag()),
            secs(q.time_to_drain()),
            q.dropped_total().to_string(),
            q.rejected.to_string(),
            format!("{:.3}s", q.blocked.as_secs_f64()),
            q.pauses.to_string(),
            q.flow.map_or_else(dash, |flow| flow.to_string()),
            stage.in_flight_bound.to_string(),
        ],
        None => [
            stage.name.clone(),
            dash(),
            dash(),
            dash(),
            dash(),
            dash(),
            dash(),
            dash(),
            dash(),
            dash(),
            stage.in_flight_bound.to_string(),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_leave_with_their_guard_and_ids_are_not_reused() {
        let registry = Registry::new();
        let a = registry.enter("a".into(), 0, None);
        let b = registry.enter("b".into(), 5, None);
        assert_eq!(registry.len(), 2);
        drop(a);
        let c = registry.enter("c".into(), 0, None);
        let ids: Vec<u64> = registry.snapshot().stages.iter().map(|s| s.id).collect();
        assert_eq!(ids, vec![1, 2], "b then c; a's id 0 is not reused");
        drop((b, c));
        assert!(registry.is_empty());
    }

    #[test]
    fn the_table_is_aligned_with_a_dash_for_a_stage_without_a_queue() {
        let registry = Registry::new();
        let _short = registry.enter("a".into(), 7, None);
        let _long = registry.enter("a-much-longer-name".into(), 1_000_000, None);
        let table = registry.snapshot().to_string();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3, "{table}");
        let widths: Vec<usize> = lines.iter().map(|l| l.chars().count()).collect();
        assert!(widths.iter().all(|&w| w == widths[0]), "{table}");
        assert!(lines[0].starts_with("stage"), "{table}");
        assert!(lines[1].starts_with("a "), "{table}");
        assert!(lines[1].ends_with(" 7"), "{table}");
        assert!(lines[2].ends_with("1000000"), "{table}");
        assert_eq!(lines[1].matches(" -").count(), 9, "{table}");
    }
}
