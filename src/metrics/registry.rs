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
//! # Cost
//!
//! Entering and leaving take the registry's lock once each, when the stage is
//! subscribed and when it ends; nothing is done per item (the stage's queue already
//! keeps its figures in its gauge, once per batch). A snapshot takes the lock long
//! enough to clone the entries, then reads each monitor without it.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use super::{QueueMonitor, QueueStats};

/// A set of named stages of running pipelines; see the [module docs](self).
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
    monitor: Option<QueueMonitor>,
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
                .map(|(id, entry)| StageSnapshot {
                    id,
                    name: entry.name.to_string(),
                    in_flight_bound: entry.in_flight_bound,
                    queue: entry.monitor.map(|m| m.snapshot()),
                })
                .collect(),
        }
    }

    /// Enter a stage; it stays until the returned guard is dropped.
    pub(crate) fn enter(
        &self,
        name: Arc<str>,
        in_flight_bound: u64,
        monitor: Option<QueueMonitor>,
    ) -> Registration {
        let mut entries = self.lock();
        let id = entries.next_id;
        entries.next_id += 1;
        entries.live.insert(
            id,
            Entry {
                name,
                in_flight_bound,
                monitor,
            },
        );
        Registration {
            registry: self.clone(),
            id,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        // No user code runs under this lock; a poisoned one is still consistent.
        self.inner
            .entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A stage's place in a [`Registry`]: it leaves when this is dropped.
pub(crate) struct Registration {
    registry: Registry,
    id: u64,
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
}

impl fmt::Display for RegistrySnapshot {
    /// An aligned table: one line per stage (name, depth/capacity, oldest age, lag,
    /// time to drain, drops, rejected, blocked time, pauses, in-flight bound); `-`
    /// where a stage holds no queue or a figure is not defined, `∞` for a lag or
    /// drain time that does not end at the current rates.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const HEADER: [&str; 10] = [
            "stage", "depth", "oldest", "lag", "drain in", "dropped", "rejected", "blocked",
            "pauses", "bound",
        ];
        let rows: Vec<[String; 10]> = self.stages.iter().map(row).collect();
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
        Ok(())
    }
}

/// One stage's cells, in the order of the table's header.
fn row(stage: &StageSnapshot) -> [String; 10] {
    let secs = |d: Option<std::time::Duration>| match d {
        Some(d) => format!("{:.3}s", d.as_secs_f64()),
        None => "∞".to_owned(),
    };
    let dash = || "-".to_owned();
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
        assert_eq!(lines[1].matches(" -").count(), 8, "{table}");
    }
}
