//! THE TABLE: one row per public stage. Every check of the suite iterates it, so a new
//! stage is covered everywhere by adding one row here.
//!
//! A row builds its stage around the sources an [`Env`] hands out (tapped, of counted
//! [`Item`]s), erases the type with `.boxed()`, and says what it promises:
//!
//! * [`Nature`]: lossless (the exact output, in order, per source, or as a multiset),
//!   lossy (an in-order subsequence of its input; every other item counted as dropped),
//!   or overflowing (`on_backpressure_buffer` with `Overflow::Error`: a prefix, then
//!   possibly an overflow error);
//! * flags: a source itself, time-based, delivers on a scheduler, changes the item
//!   type (mapped back: `buffer` gathers a batch into one item standing for all its
//!   values);
//! * `expect(len)`: the values a lossless row delivers when each source emits
//!   `0..len` (the second and third sources of `merge`, `concat` and `zip` emit
//!   `OFFSET + (0..len)` and `2 × OFFSET + (0..len)`); for a lossy row, its input;
//! * `extra_bound`: items the stage may hold that its `in_flight_bound()` cannot
//!   report (a bridge whose buffering half is not a publisher).

use std::sync::atomic::Ordering as AtomicOrdering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use weir::metrics::{DropHook, Drops};
use weir::operators::{Rate, ThrottleMode};
use weir::prelude::*;
use weir::queue::TimeBounds;
use weir::retry::{Backoff, RetryPolicy};
use weir::runtime::{ThreadPool, Tokio};
use weir::source::channel::{Admission, ChannelBuilder, ChannelPolicy, WaterMarks};
use weir::source::Step;
use weir::{BoxPublisher, Overflow};

use crate::harness::item::{Fate, Item, Ledger};
use crate::harness::late::{Late, LateSource};
use crate::harness::tap::{SourceProbe, Tap};

/// Where a row's second and third sources start.
pub const OFFSET: u64 = 1 << 32;

/// How the sources an [`Env`] hands out produce.
#[derive(Clone, Copy, Debug)]
pub enum Feed {
    /// A synchronous source that produces only against demand (`range` + `map`),
    /// on whichever thread requests.
    OnDemand,
    /// A producer thread offers the items one by one with `send_blocking` into a
    /// `weir::channel` of this capacity with `Backpressure`: lossless, and items
    /// arrive from another thread while downstream requests.
    Threaded(usize),
    /// A producer thread pushes all the items at once, whatever the demand, into a
    /// `weir::channel` of this capacity with `DropOldest`: a source that keeps
    /// producing.
    Pushy(usize),
    /// A source that delivers nothing by itself: the check holds its subscriber and
    /// delivers into it when it likes, also after a cancel (`harness::late`).
    Late,
}

/// What a row's sources are made of, and where its schedulers are.
pub struct Env {
    /// Counts every item of the run.
    pub ledger: Arc<Ledger>,
    /// Items per source.
    pub len: u64,
    /// How the tapped sources produce.
    pub feed: Feed,
    /// The thread pool for stages that need one.
    pub pool: ThreadPool,
    /// The tokio runtime for stages that need one.
    pub tokio: tokio::runtime::Handle,
    probes: Mutex<Vec<Arc<SourceProbe>>>,
    lates: Mutex<Vec<Arc<LateSource>>>,
    gate: Gate,
    pushing: Arc<std::sync::atomic::AtomicU64>,
}

impl Drop for Env {
    fn drop(&mut self) {
        // Never leave a producer thread waiting for good, nor a source running.
        self.gate.open();
        self.stop_sources();
    }
}

/// A latch the producer threads wait on before their first item, so that a check can
/// subscribe (and request) before anything is produced.
#[derive(Clone, Debug, Default)]
pub struct Gate(Arc<(Mutex<bool>, std::sync::Condvar)>);

impl Gate {
    /// Let every waiter through, now and later.
    pub fn open(&self) {
        *self.0 .0.lock().unwrap() = true;
        self.0 .1.notify_all();
    }

    fn wait(&self) {
        let mut open = self.0 .0.lock().unwrap();
        while !*open {
            open = self.0 .1.wait(open).unwrap();
        }
    }
}

impl Env {
    /// A fresh environment: a new ledger, no sources yet.
    pub fn new(len: u64, feed: Feed, pool: ThreadPool, tokio: tokio::runtime::Handle) -> Env {
        Env {
            ledger: Ledger::new(),
            len,
            feed,
            pool,
            tokio,
            probes: Mutex::new(Vec::new()),
            lates: Mutex::new(Vec::new()),
            gate: Gate::default(),
            pushing: Arc::default(),
        }
    }

    /// Cancel every source that still holds its subscriber (cleanup after the checks,
    /// so that a source a broken stage left running stops).
    pub fn stop_sources(&self) {
        for probe in self.probes() {
            probe.stop();
        }
    }

    /// Let the producer threads start.
    pub fn open(&self) {
        self.gate.open();
    }

    /// The probes of every source tapped so far.
    pub fn probes(&self) -> Vec<Arc<SourceProbe>> {
        self.probes.lock().unwrap().clone()
    }

    /// The sources made under [`Feed::Late`] so far.
    pub fn lates(&self) -> Vec<Arc<LateSource>> {
        self.lates.lock().unwrap().clone()
    }

    /// A closure making produced items on this env's ledger.
    pub fn produce(&self) -> impl FnMut(u64) -> Item + Send + 'static {
        let ledger = self.ledger.clone();
        move |value| ledger.produce(value)
    }

    /// The tokio runtime as a weir scheduler.
    pub fn tokio_scheduler(&self) -> Tokio {
        Tokio::new(self.tokio.clone())
    }

    /// Wrap `source` in a [`Tap`] whose probe the checks will see.
    pub fn tap<P: Publisher>(&self, name: &str, source: P) -> Tap<P> {
        let probe = SourceProbe::new(name);
        self.probes.lock().unwrap().push(probe.clone());
        Tap::new(source, probe)
    }

    /// Run `produce` on a thread of its own, once the env is [opened](Self::open).
    /// Under [`Feed::Pushy`] a producer must never wait (it offers with `try_send`),
    /// and [`pushed`](Self::pushed) tells when it is done.
    pub fn spawn_producer(&self, produce: impl FnOnce() + Send + 'static) {
        let gate = self.gate.clone();
        let pushing = self.pushing.clone();
        pushing.fetch_add(1, AtomicOrdering::SeqCst);
        std::thread::Builder::new()
            .name("adversarial-producer".into())
            .spawn(move || {
                gate.wait();
                produce();
                pushing.fetch_sub(1, AtomicOrdering::SeqCst);
            })
            .expect("spawn a producer thread");
    }

    /// True once every producer thread has finished (under [`Feed::Pushy`] none of them
    /// waits, so they all finish).
    pub fn pushed(&self) -> bool {
        self.pushing.load(AtomicOrdering::SeqCst) == 0
    }

    /// True under [`Feed::Pushy`]: producers offer without waiting.
    pub fn pushy(&self) -> bool {
        matches!(self.feed, Feed::Pushy(_))
    }

    /// The row's main source: `0..len`, tapped.
    pub fn source(&self) -> BoxPublisher<Item> {
        self.source_at(0)
    }

    /// A tapped source of `base..base + len`, produced as [`Feed`] says.
    pub fn source_at(&self, base: u64) -> BoxPublisher<Item> {
        let len = self.len;
        let mut produce = self.produce();
        let name = format!("source@{base}");
        match self.feed {
            Feed::OnDemand => self
                .tap(&name, weir::range(base..base + len).map(produce))
                .boxed(),
            Feed::Threaded(capacity) => {
                let (tx, rx) = weir::channel::<Item>(capacity, ChannelPolicy::Backpressure);
                self.spawn_producer(move || {
                    for value in base..base + len {
                        if let Err(refused) = tx.send_blocking(produce(value)) {
                            refused.into_inner().mark(Fate::HandedBack);
                            return;
                        }
                    }
                });
                self.tap(&name, rx).boxed()
            }
            Feed::Pushy(capacity) => {
                let (tx, rx) = weir::channel::<Item>(capacity, ChannelPolicy::DropOldest);
                self.spawn_producer(move || {
                    for value in base..base + len {
                        if let Err(refused) = tx.try_send(produce(value)) {
                            let closed = refused.is_closed();
                            refused.into_inner().mark(Fate::HandedBack);
                            if closed {
                                return;
                            }
                        }
                    }
                });
                self.tap(&name, rx).boxed()
            }
            Feed::Late => {
                let source = LateSource::new();
                self.lates.lock().unwrap().push(source.clone());
                self.tap(&name, Late(source)).boxed()
            }
        }
    }
}

/// The ordering a lossless row promises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Exactly `expect(len)`, in order.
    Exact,
    /// The same multiset, each source's values (`value / OFFSET`) in their order.
    PerSource,
    /// The same multiset, in any order.
    Multiset,
}

/// When a lossy row may drop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loss {
    /// Only items that arrive while downstream has no outstanding demand (the
    /// `on_backpressure_*` and `conflate*` family): with demand outstanding for every
    /// item it is lossless.
    WithoutDemand,
    /// Whatever the demand (`sample`, `debounce`, an enforcing `throttle`).
    ByDesign,
}

/// What a row promises about its output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nature {
    /// Every item, exactly once.
    Lossless(Order),
    /// An in-order subsequence of the input; every other item is a counted drop.
    Lossy(Loss),
    /// A prefix of the input, then completion or an `Overflow` error (only items that
    /// find no demand can overflow).
    Overflowing,
}

/// What kind of public stage a row is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A function that starts a pipeline.
    Source,
    /// A `PublisherExt` operator.
    Operator,
    /// An async boundary (`publish_on`, `subscribe_on`).
    Boundary,
    /// A bridge to or from `futures`/tokio.
    Bridge,
}

/// One row of the table.
#[derive(Clone, Copy)]
pub struct Stage {
    /// The stage, as a user would write it.
    pub name: &'static str,
    /// What kind of stage.
    pub kind: Kind,
    /// What it promises about its output.
    pub nature: Nature,
    /// Time-based (reads a scheduler's clock, arms timers).
    pub timed: bool,
    /// Delivers on a scheduler's threads (needs a scheduler).
    pub scheduled: bool,
    /// Changes the item type (the row maps it back to [`Item`]).
    pub changes_type: bool,
    /// Builds the stage around the env's sources.
    pub build: fn(&Env) -> BoxPublisher<Item>,
    /// The values a lossless row delivers (a lossy row: its input) when each source
    /// emits `len` items.
    pub expect: fn(u64) -> Vec<u64>,
    /// Items held beyond what `in_flight_bound()` reports.
    pub extra_bound: u64,
}

impl std::fmt::Debug for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl Stage {
    pub(crate) fn new(
        name: &'static str,
        kind: Kind,
        nature: Nature,
        build: fn(&Env) -> BoxPublisher<Item>,
        expect: fn(u64) -> Vec<u64>,
    ) -> Stage {
        Stage {
            name,
            kind,
            nature,
            timed: false,
            scheduled: false,
            changes_type: false,
            build,
            expect,
            extra_bound: 0,
        }
    }

    fn timed(mut self) -> Stage {
        self.timed = true;
        self.scheduled = true;
        self
    }

    pub(crate) fn scheduled(mut self) -> Stage {
        self.scheduled = true;
        self
    }

    fn changes_type(mut self) -> Stage {
        self.changes_type = true;
        self
    }

    fn extra_bound(mut self, items: u64) -> Stage {
        self.extra_bound = items;
        self
    }

    /// The row's name with its nature, for failure messages.
    pub fn label(&self) -> String {
        let mut flags = vec![format!("{:?}", self.kind).to_lowercase()];
        flags.push(
            match self.nature {
                Nature::Lossless(Order::Exact) => "lossless",
                Nature::Lossless(Order::PerSource) => "lossless, ordered per source",
                Nature::Lossless(Order::Multiset) => "lossless, unordered",
                Nature::Lossy(Loss::WithoutDemand) => "lossy without demand",
                Nature::Lossy(Loss::ByDesign) => "lossy",
                Nature::Overflowing => "may overflow",
            }
            .to_owned(),
        );
        for (set, flag) in [
            (self.timed, "timed"),
            (self.scheduled, "on a scheduler"),
            (self.changes_type, "type mapped back"),
        ] {
            if set {
                flags.push(flag.to_owned());
            }
        }
        format!("{} [{}]", self.name, flags.join(", "))
    }

    /// The function or method the row exercises: its name up to the first `(` or
    /// space, without a `weir::` prefix.
    pub fn function(&self) -> &str {
        let name = self.name.trim_start_matches("weir::");
        let end = name.find(['(', ' ']).unwrap_or(name.len());
        &name[..end]
    }

    /// What the row promises when every item finds outstanding demand: lossy rows
    /// that only drop without demand become lossless then.
    pub fn with_demand(&self) -> Nature {
        match self.nature {
            Nature::Lossy(Loss::WithoutDemand) | Nature::Overflowing => EXACT,
            other => other,
        }
    }
}

/// The most ticks the `interval` row takes (each costs a period of real time).
const TICKS: u64 = 2_000;

pub(crate) const EXACT: Nature = Nature::Lossless(Order::Exact);
const US: fn(u64) -> Duration = Duration::from_micros;
const MS: fn(u64) -> Duration = Duration::from_millis;

/// A producer thread offering the env's items through `offer(item, pushy)`, which
/// hands a refused item back with whether the source is closed: refused items are
/// marked handed back, and a closed source stops the producer.
fn produce_with<O>(env: &Env, mut offer: O)
where
    O: FnMut(Item, bool) -> Option<(Item, bool)> + Send + 'static,
{
    let (len, mut produce, pushy) = (env.len, env.produce(), env.pushy());
    env.spawn_producer(move || {
        for value in 0..len {
            if let Some((mut refused, closed)) = offer(produce(value), pushy) {
                refused.mark(Fate::HandedBack);
                if closed {
                    return;
                }
            }
        }
    });
}

/// A producer thread offering the env's items to a channel: `try_send` when the feed
/// is pushy, `send_blocking` otherwise.
fn feed(env: &Env, tx: weir::source::channel::Sender<Item>) {
    produce_with(env, move |item, pushy| {
        let sent = if pushy {
            tx.try_send(item)
        } else {
            tx.send_blocking(item)
        };
        sent.err().map(|refused| {
            let closed = refused.is_closed();
            (refused.into_inner(), closed)
        })
    });
}

pub(crate) fn identity(n: u64) -> Vec<u64> {
    (0..n).collect()
}

fn two_sources(n: u64) -> Vec<u64> {
    (0..n).chain(OFFSET..OFFSET + n).collect()
}

fn gather(env: &Env) -> impl FnMut(Vec<Item>) -> Item + Send + 'static {
    let ledger = env.ledger.clone();
    move |batch| Item::gather(batch, &ledger)
}

/// Every public stage.
pub fn table() -> Vec<Stage> {
    use Kind::{Boundary, Bridge, Operator, Source};
    let lossy = Nature::Lossy(Loss::WithoutDemand);
    let lossy_by_design = Nature::Lossy(Loss::ByDesign);
    let mut rows = vec![
        // ---- sources ----
        Stage::new(
            "range",
            Source,
            EXACT,
            |env| {
                let produce = env.produce();
                env.tap("range", weir::range(0..env.len).map(produce))
                    .boxed()
            },
            identity,
        ),
        Stage::new(
            "from_iter",
            Source,
            EXACT,
            |env| {
                let produce = env.produce();
                env.tap("from_iter", weir::from_iter((0..env.len).map(produce)))
                    .boxed()
            },
            identity,
        ),
        Stage::new(
            "just",
            Source,
            EXACT,
            |env| env.tap("just", weir::just(env.ledger.produce(0))).boxed(),
            |_| vec![0],
        ),
        Stage::new(
            "defer",
            Source,
            EXACT,
            |env| {
                let (len, produce) = (env.len, env.produce());
                env.tap(
                    "defer",
                    weir::defer(move || weir::range(0..len).map(produce)),
                )
                .boxed()
            },
            identity,
        ),
        Stage::new(
            "generate",
            Source,
            EXACT,
            |env| {
                let (len, mut produce) = (env.len, env.produce());
                let generated = weir::generate(0u64, move |next: &mut u64| {
                    if *next == len {
                        return Step::Complete;
                    }
                    *next += 1;
                    Step::Next(produce(*next - 1))
                });
                env.tap("generate", generated).boxed()
            },
            identity,
        ),
        Stage::new(
            "interval_on(50µs, pool).take(min(len, 2000))",
            Source,
            EXACT,
            |env| {
                let ticks = weir::interval_on(US(50), env.pool.clone());
                env.tap("interval", ticks)
                    .take(env.len.min(TICKS))
                    .map(env.produce())
                    .boxed()
            },
            |n| (0..n.min(TICKS)).collect(),
        )
        .timed(),
        Stage::new(
            "timer_on(1ms, pool)",
            Source,
            EXACT,
            |env| {
                env.tap("timer", weir::timer_on(MS(1), env.pool.clone()))
                    .map(env.produce())
                    .boxed()
            },
            |_| vec![0],
        )
        .timed(),
        Stage::new(
            "from_fn",
            Source,
            EXACT,
            |env| {
                let (len, mut produce) = (env.len, env.produce());
                let mut next = 0u64;
                let source = weir::from_fn(move || {
                    (next < len).then(|| {
                        next += 1;
                        produce(next - 1)
                    })
                });
                env.tap("from_fn", source).boxed()
            },
            identity,
        ),
        Stage::new(
            "unfold",
            Source,
            EXACT,
            |env| {
                let (len, mut produce) = (env.len, env.produce());
                let source = weir::unfold(0u64, move |next| {
                    (next < len).then(|| (produce(next), next + 1))
                });
                env.tap("unfold", source).boxed()
            },
            identity,
        ),
        Stage::new(
            "create (a producer thread: emit, or send_blocking)",
            Source,
            EXACT,
            |env| {
                // The producer gets the emitter when the pipeline subscribes: `emit`
                // when the feed is pushy, `send_blocking` otherwise.
                let (handoff, arrives) = std::sync::mpsc::channel::<weir::source::Emitter<Item>>();
                let mut emitter = None;
                produce_with(env, move |item, pushy| {
                    if emitter.is_none() {
                        match arrives.recv() {
                            Ok(arrived) => emitter = Some(arrived),
                            Err(_) => return Some((item, true)), // never subscribed
                        }
                    }
                    let emitter = emitter.as_ref().expect("arrived above");
                    let sent = if pushy {
                        emitter.emit(item)
                    } else {
                        emitter.send_blocking(item)
                    };
                    sent.err().map(|refused| {
                        let closed = refused.is_closed();
                        (refused.into_inner(), closed)
                    })
                });
                let source = weir::create(move |emitter| {
                    let _ = handoff.send(emitter);
                });
                env.tap("create", source).boxed()
            },
            identity,
        ),
        Stage::new(
            "channel(16, Backpressure)",
            Source,
            EXACT,
            |env| {
                let (tx, rx) = weir::channel::<Item>(16, ChannelPolicy::Backpressure);
                feed(env, tx);
                env.tap("channel", rx).boxed()
            },
            identity,
        ),
        Stage::new(
            "channel(16, Backpressure).build_with(reduce, shed, deadlines)",
            Source,
            EXACT,
            |env| {
                // Every rung turns on and off as the depth moves; the class is never
                // below the shed threshold and items carry no deadline: lossless.
                let admission = Admission::new()
                    .reduce_at(WaterMarks::new(6, 2), 0.5)
                    .shed_below(WaterMarks::new(10, 4), 0u8, |_: &Item| 1u8)
                    .deadlines_by(Duration::from_millis(1), |_: &Item| None);
                let (tx, rx) = ChannelBuilder::new(16, ChannelPolicy::Backpressure)
                    .water_marks(WaterMarks::new(14, 8))
                    .build_with(admission);
                feed(env, tx);
                env.tap("channel", rx).boxed()
            },
            identity,
        ),
        Stage::new(
            "from_stream_on(pool)",
            Bridge,
            EXACT,
            |env| {
                let stream = futures::stream::iter((0..env.len).map(env.produce()));
                env.tap(
                    "from_stream",
                    weir::from_stream_on(stream, env.pool.clone()),
                )
                .boxed()
            },
            identity,
        )
        .scheduled(),
        Stage::new(
            "from_stream_on(Tokio)",
            Bridge,
            EXACT,
            |env| {
                let stream = futures::stream::iter((0..env.len).map(env.produce()));
                env.tap(
                    "from_stream",
                    weir::from_stream_on(stream, env.tokio_scheduler()),
                )
                .boxed()
            },
            identity,
        )
        .scheduled(),
        Stage::new(
            "try_from_stream_on(pool)",
            Bridge,
            EXACT,
            |env| {
                let mut produce = env.produce();
                let stream = futures::stream::iter(
                    (0..env.len).map(move |v| Ok::<Item, std::io::Error>(produce(v))),
                );
                env.tap(
                    "try_from_stream",
                    weir::try_from_stream_on(stream, env.pool.clone()),
                )
                .boxed()
            },
            identity,
        )
        .scheduled(),
        Stage::new(
            "from_receiver_on(Tokio)",
            Bridge,
            EXACT,
            |env| {
                let (tx, rx) = tokio::sync::mpsc::channel::<Item>(16);
                let (len, mut produce, pushy) = (env.len, env.produce(), env.pushy());
                env.spawn_producer(move || {
                    use tokio::sync::mpsc::error::TrySendError;
                    for value in 0..len {
                        let item = produce(value);
                        let (closed, mut refused) = if pushy {
                            match tx.try_send(item) {
                                Ok(()) => continue,
                                Err(TrySendError::Full(item)) => (false, item),
                                Err(TrySendError::Closed(item)) => (true, item),
                            }
                        } else {
                            match tx.blocking_send(item) {
                                Ok(()) => continue,
                                Err(refused) => (true, refused.0),
                            }
                        };
                        refused.mark(Fate::HandedBack);
                        if closed {
                            return;
                        }
                    }
                });
                let receiver = weir::bridge::from_receiver_on(rx, env.tokio_scheduler());
                env.tap("from_receiver", receiver).boxed()
            },
            identity,
        )
        .scheduled()
        // The tokio channel's capacity: the bridge cannot report it.
        .extra_bound(16),
        Stage::new(
            "into_stream(16) (re-published by try_from_stream_on(pool))",
            Bridge,
            EXACT,
            |env| weir::try_from_stream_on(env.source().into_stream(16), env.pool.clone()).boxed(),
            identity,
        )
        .scheduled()
        .extra_bound(16),
        // ---- operators ----
        Stage::new(
            "map",
            Operator,
            EXACT,
            |env| env.source().map(|it: Item| it.derive(it.value * 2)).boxed(),
            |n| (0..n).map(|v| v * 2).collect(),
        ),
        Stage::new(
            "filter",
            Operator,
            EXACT,
            |env| env.source().filter(|it: &Item| it.value % 3 != 1).boxed(),
            |n| (0..n).filter(|v| v % 3 != 1).collect(),
        ),
        Stage::new(
            "filter_map",
            Operator,
            EXACT,
            |env| {
                env.source()
                    .filter_map(|it: Item| (it.value % 3 != 2).then(|| it.derive(it.value + 1)))
                    .boxed()
            },
            |n| (0..n).filter(|v| v % 3 != 2).map(|v| v + 1).collect(),
        )
        .changes_type(),
        Stage::new(
            "take(len / 2)",
            Operator,
            EXACT,
            |env| env.source().take(env.len / 2).boxed(),
            |n| (0..n / 2).collect(),
        ),
        Stage::new(
            "skip(len / 4)",
            Operator,
            EXACT,
            |env| env.source().skip(env.len / 4).boxed(),
            |n| (n / 4..n).collect(),
        ),
        Stage::new(
            "take_while(< len / 2)",
            Operator,
            EXACT,
            |env| {
                let half = env.len / 2;
                env.source()
                    .take_while(move |it: &Item| it.value < half)
                    .boxed()
            },
            |n| (0..n / 2).collect(),
        ),
        Stage::new(
            "skip_while(< len / 4)",
            Operator,
            EXACT,
            |env| {
                let quarter = env.len / 4;
                env.source()
                    .skip_while(move |it: &Item| it.value < quarter)
                    .boxed()
            },
            |n| (n / 4..n).collect(),
        ),
        Stage::new(
            "scan(0, +)",
            Operator,
            EXACT,
            |env| {
                let ledger = env.ledger.clone();
                env.source()
                    .scan(0u64, |sum, it: Item| sum + it.value)
                    .map(move |sum| ledger.derived(sum))
                    .boxed()
            },
            |n| {
                (0..n)
                    .scan(0, |sum, v| Some(*sum + v).inspect(|s| *sum = *s))
                    .collect()
            },
        )
        .changes_type(),
        Stage::new(
            "reduce(+)",
            Operator,
            EXACT,
            |env| {
                env.source()
                    .reduce(|a: Item, b: Item| a.derive(a.value + b.value))
                    .boxed()
            },
            |n| vec![(0..n).sum()],
        ),
        Stage::new(
            "inspect",
            Operator,
            EXACT,
            |env| env.source().inspect(|_: &Item| ()).boxed(),
            identity,
        ),
        Stage::new(
            "inspect_request",
            Operator,
            EXACT,
            |env| env.source().inspect_request(|_| ()).boxed(),
            identity,
        ),
        Stage::new(
            "inspect_cancel",
            Operator,
            EXACT,
            |env| env.source().inspect_cancel(|| ()).boxed(),
            identity,
        ),
        Stage::new(
            "merge",
            Operator,
            Nature::Lossless(Order::PerSource),
            |env| env.source().merge(env.source_at(OFFSET)).boxed(),
            two_sources,
        ),
        Stage::new(
            "weir::merge(3 sources)",
            Operator,
            Nature::Lossless(Order::PerSource),
            |env| {
                let sources = vec![
                    env.source(),
                    env.source_at(OFFSET),
                    env.source_at(2 * OFFSET),
                ];
                weir::merge(sources).boxed()
            },
            |n| {
                (0..n)
                    .chain(OFFSET..OFFSET + n)
                    .chain(2 * OFFSET..2 * OFFSET + n)
                    .collect()
            },
        ),
        Stage::new(
            "concat",
            Operator,
            EXACT,
            |env| env.source().concat(env.source_at(OFFSET)).boxed(),
            two_sources,
        ),
        Stage::new(
            "flat_map(just, 4, 8)",
            Operator,
            Nature::Lossless(Order::Multiset),
            |env| env.source().flat_map(weir::just, 4, 8).boxed(),
            identity,
        ),
        Stage::new(
            "flat_map(just, 4, 8).limit(Gradient)",
            Operator,
            Nature::Lossless(Order::Multiset),
            |env| {
                env.source()
                    .flat_map(weir::just, 4, 8)
                    .limit(weir::limit::Gradient::new(2, 1, 4))
                    .boxed()
            },
            identity,
        ),
        Stage::new(
            "map_async(4, yield then item)",
            Operator,
            EXACT,
            |env| {
                let _inside = env.tokio.enter();
                env.source()
                    .map_async(4, |x| async move {
                        tokio::task::yield_now().await;
                        x
                    })
                    .boxed()
            },
            identity,
        )
        .scheduled(),
        Stage::new(
            "map_async_unordered(3, yield then item)",
            Operator,
            Nature::Lossless(Order::Multiset),
            |env| {
                let _inside = env.tokio.enter();
                env.source()
                    .map_async_unordered(3, |x| async move {
                        tokio::task::yield_now().await;
                        x
                    })
                    .boxed()
            },
            identity,
        )
        .scheduled(),
        Stage::new(
            "map_async(8, yield then item).limit(Gradient)",
            Operator,
            EXACT,
            |env| {
                let _inside = env.tokio.enter();
                env.source()
                    .map_async(8, |x| async move {
                        tokio::task::yield_now().await;
                        x
                    })
                    .limit(weir::limit::Gradient::new(2, 1, 8))
                    .boxed()
            },
            identity,
        )
        .scheduled(),
        Stage::new(
            "map_async_on(pool, 1, ordered, ready)",
            Operator,
            EXACT,
            |env| {
                env.source()
                    .map_async_on(env.pool.clone(), 1, true, std::future::ready)
                    .boxed()
            },
            identity,
        )
        .scheduled(),
        Stage::new(
            "map_async(4, retry policy wrapping a ready call)",
            Operator,
            EXACT,
            |env| {
                let _inside = env.tokio.enter();
                // The item is not Clone (a retry calls again with a clone): it
                // travels in a shared cell the call takes it out of.
                let policy = RetryPolicy::<()>::new(
                    3,
                    Backoff::exponential(Duration::from_millis(1), Duration::from_millis(10)),
                );
                let call = policy.wrap(env.tokio_scheduler(), |cell: Arc<Mutex<Option<Item>>>| {
                    let item = cell.lock().unwrap().take();
                    std::future::ready(item.ok_or(()))
                });
                env.source()
                    .map(|item| Arc::new(Mutex::new(Some(item))))
                    .map_async(4, call)
                    .map(|answer| answer.expect("the call answers at once"))
                    .boxed()
            },
            identity,
        )
        .scheduled(),
        Stage::new(
            "concat_map(2 items, 4)",
            Operator,
            EXACT,
            |env| {
                env.source()
                    .concat_map(
                        |it: Item| {
                            let pair = vec![it.derive(2 * it.value), it.derive(2 * it.value + 1)];
                            weir::from_iter(pair)
                        },
                        4,
                    )
                    .boxed()
            },
            |n| (0..2 * n).collect(),
        ),
        Stage::new(
            "zip",
            Operator,
            EXACT,
            |env| {
                env.source()
                    .zip(env.source_at(OFFSET), |a: Item, b: Item| {
                        a.derive(a.value + b.value)
                    })
                    .boxed()
            },
            |n| (0..n).map(|v| OFFSET + 2 * v).collect(),
        ),
        Stage::new(
            "share(16)",
            Operator,
            EXACT,
            |env| {
                // The hub clones its items for each subscriber: items go in
                // shared (`Arc`) and come out as new items of the same values.
                env.source()
                    .map(Arc::new)
                    .share(16)
                    .map(|shared: Arc<Item>| shared.derive(shared.value))
                    .boxed()
            },
            identity,
        ),
        Stage::new(
            "name(..)",
            Operator,
            EXACT,
            |env| {
                env.source()
                    .name("adversarial")
                    .registry(&weir::metrics::Registry::new())
                    .boxed()
            },
            identity,
        ),
        Stage::new(
            "buffer(7)",
            Operator,
            EXACT,
            |env| env.source().buffer(7).map(gather(env)).boxed(),
            identity,
        )
        .changes_type(),
        Stage::new(
            "limit_rate(8, 6)",
            Operator,
            EXACT,
            |env| env.source().limit_rate(8, 6).boxed(),
            identity,
        ),
        Stage::new(
            "on_backpressure_buffer(16, Error)",
            Operator,
            Nature::Overflowing,
            |env| {
                env.source()
                    .on_backpressure_buffer(16, Overflow::Error)
                    .boxed()
            },
            identity,
        ),
        Stage::new(
            "on_backpressure_buffer(16, DropOldest)",
            Operator,
            lossy,
            |env| {
                env.source()
                    .on_backpressure_buffer(16, Overflow::DropOldest)
                    .boxed()
            },
            identity,
        ),
        Stage::new(
            "on_backpressure_buffer(16, DropOldest).deadlines()",
            Operator,
            lossy,
            |env| {
                // Items carry no deadline (the harness's `Deadline` says none): the
                // deadline bookkeeping runs beside every policy drop.
                env.source()
                    .on_backpressure_buffer(16, Overflow::DropOldest)
                    .deadlines()
                    .boxed()
            },
            identity,
        ),
        Stage::new(
            "on_backpressure_buffer(16, DropNewest)",
            Operator,
            lossy,
            |env| {
                env.source()
                    .on_backpressure_buffer(16, Overflow::DropNewest)
                    .boxed()
            },
            identity,
        ),
        Stage::new(
            "on_backpressure_latest",
            Operator,
            lossy,
            |env| env.source().on_backpressure_latest().boxed(),
            identity,
        ),
        Stage::new(
            "on_backpressure_drop",
            Operator,
            lossy,
            |env| env.source().on_backpressure_drop().boxed(),
            identity,
        ),
        Stage::new(
            "conflate(keep new)",
            Operator,
            lossy,
            |env| env.source().conflate(|_held: Item, new: Item| new).boxed(),
            identity,
        ),
        Stage::new(
            "conflate_latest",
            Operator,
            lossy,
            |env| env.source().conflate_latest().boxed(),
            identity,
        ),
        Stage::new(
            "on_drop",
            Operator,
            EXACT,
            |env| env.source().on_drop(drop).boxed(),
            identity,
        ),
        Stage::new(
            "on_backpressure_latest().on_drop(mark)",
            Operator,
            lossy,
            |env| {
                // The typed hook takes each dropped item (marked as hooked); the
                // recorder's hook below still sees every drop, and counts it.
                env.source()
                    .on_backpressure_latest()
                    .on_drop(|dropped| dropped.into_inner().mark(Fate::Hooked))
                    .boxed()
            },
            identity,
        ),
        Stage::new(
            "on_dropped",
            Operator,
            EXACT,
            |env| env.source().on_dropped(DropHook::new(Drops::new())).boxed(),
            identity,
        ),
        // ---- time operators ----
        Stage::new(
            "sample_on(1ms, pool)",
            Operator,
            lossy_by_design,
            |env| env.source().sample_on(MS(1), env.pool.clone()).boxed(),
            identity,
        )
        .timed(),
        Stage::new(
            "debounce_on(1ms, pool)",
            Operator,
            lossy_by_design,
            |env| env.source().debounce_on(MS(1), env.pool.clone()).boxed(),
            identity,
        )
        .timed(),
        Stage::new(
            "timeout_on(60s, pool)",
            Operator,
            EXACT,
            |env| {
                env.source()
                    .timeout_on(Duration::from_secs(60), env.pool.clone())
                    .boxed()
            },
            identity,
        )
        .timed(),
        Stage::new(
            "buffer_timeout_on(7, 1ms, pool)",
            Operator,
            EXACT,
            |env| {
                env.source()
                    .buffer_timeout_on(7, MS(1), env.pool.clone())
                    .map(gather(env))
                    .boxed()
            },
            identity,
        )
        .timed()
        .changes_type(),
        Stage::new(
            "throttle_on(1/µs, 16, Shaping, pool)",
            Operator,
            EXACT,
            |env| {
                env.source()
                    .throttle_on(
                        Rate::new(1, US(1)),
                        16,
                        ThrottleMode::Shaping,
                        env.pool.clone(),
                    )
                    .boxed()
            },
            identity,
        )
        .timed(),
        Stage::new(
            "throttle_on(1/µs, 16, Enforcing, pool)",
            Operator,
            lossy_by_design,
            |env| {
                env.source()
                    .throttle_on(
                        Rate::new(1, US(1)),
                        16,
                        ThrottleMode::Enforcing,
                        env.pool.clone(),
                    )
                    .boxed()
            },
            identity,
        )
        .timed(),
        // ---- async boundaries ----
        Stage::new(
            "via(mux over pool, channel 0)",
            Boundary,
            EXACT,
            |env| {
                let mux = weir::mux::Mux::builder()
                    .exclusive(4)
                    .shared(8)
                    .borrow_cap(2)
                    .build_local(env.pool.clone(), env.pool.clone())
                    .unwrap();
                env.source().via(&mux, 0).unwrap().boxed()
            },
            identity,
        )
        .scheduled(),
        Stage::new(
            // A pool of one thread: the demultiplexer runs the channel's passes in
            // place instead of in tasks of their own.
            "via(mux over a one-thread pool, channel 0)",
            Boundary,
            EXACT,
            |env| {
                let solo = ThreadPool::builder().name("mux-solo").threads(1).build();
                let mux = weir::mux::Mux::builder()
                    .exclusive(4)
                    .shared(8)
                    .borrow_cap(2)
                    .build_local(solo.clone(), solo)
                    .unwrap();
                env.source().via(&mux, 0).unwrap().boxed()
            },
            identity,
        )
        .scheduled(),
        Stage::new(
            "publish_on(pool, 16)",
            Boundary,
            EXACT,
            |env| env.source().publish_on(env.pool.clone(), 16).boxed(),
            identity,
        )
        .scheduled(),
        Stage::new(
            "share(16).publish_on(pool, 16)",
            Boundary,
            EXACT,
            |env| {
                // A hub subscriber behind its own boundary (the fan-out formulation of
                // the README): the subscriber's passes hand batches to the pool.
                env.source()
                    .map(Arc::new)
                    .share(16)
                    .publish_on(env.pool.clone(), 16)
                    .map(|shared: Arc<Item>| shared.derive(shared.value))
                    .boxed()
            },
            identity,
        )
        .scheduled(),
        Stage::new(
            "subscribe_on(pool).share(16).publish_on(pool, 16)",
            Boundary,
            EXACT,
            |env| {
                // A hub fed on a pool thread, its subscriber behind a boundary that
                // adopts it: arrivals wake the boundary's drain, which runs the
                // subscriber's pass on its own task.
                env.source()
                    .subscribe_on(env.pool.clone())
                    .map(Arc::new)
                    .share(16)
                    .publish_on(env.pool.clone(), 16)
                    .map(|shared: Arc<Item>| shared.derive(shared.value))
                    .boxed()
            },
            identity,
        )
        .scheduled(),
        Stage::new(
            "channel(16).share(16).publish_on(pool, 16)",
            Source,
            EXACT,
            |env| {
                // A hub over a channel, its subscriber behind a boundary: the
                // boundary's drain watches the channel's lane through the hub and
                // runs the channel's drain loop on the pool's thread. Tapped after
                // the boundary: a tap between them would hide the lane (it hands
                // on a subscription of its own).
                let (tx, rx) = weir::channel::<Item>(16, ChannelPolicy::Backpressure);
                feed(env, tx);
                let fanned = rx
                    .map(Arc::new)
                    .share(16)
                    .publish_on(env.pool.clone(), 16)
                    .map(|shared: Arc<Item>| shared.derive(shared.value));
                env.tap("channel", fanned).boxed()
            },
            identity,
        )
        .scheduled(),
        Stage::new(
            "publish_on(Tokio, 16)",
            Boundary,
            EXACT,
            |env| env.source().publish_on(env.tokio_scheduler(), 16).boxed(),
            identity,
        )
        .scheduled(),
        Stage::new(
            "publish_on(pool, 16).errors_first()",
            Boundary,
            EXACT,
            |env| {
                env.source()
                    .publish_on(env.pool.clone(), 16)
                    .errors_first()
                    .boxed()
            },
            identity,
        )
        .scheduled(),
        Stage::new(
            "publish_on_with(pool, 16, max_age 60s)",
            Boundary,
            EXACT,
            |env| {
                let bounds = TimeBounds::none().max_age(Duration::from_secs(60));
                env.source()
                    .publish_on_with(env.pool.clone(), 16, bounds)
                    .boxed()
            },
            identity,
        )
        .scheduled(),
        Stage::new(
            "subscribe_on(pool)",
            Boundary,
            EXACT,
            |env| env.source().subscribe_on(env.pool.clone()).boxed(),
            identity,
        )
        .scheduled(),
        Stage::new(
            "subscribe_on(Tokio)",
            Boundary,
            EXACT,
            |env| env.source().subscribe_on(env.tokio_scheduler()).boxed(),
            identity,
        )
        .scheduled(),
    ];
    #[cfg(feature = "rsocket")]
    rows.extend(crate::rsocket::rows());
    #[cfg(feature = "nats")]
    rows.extend(crate::nats::rows());
    rows
}

/// Check that `got` is what a lossless row with `order` promises: `expected`, exactly
/// once each. `None` if it is.
pub fn lossless_mismatch(order: Order, expected: &[u64], got: &[u64]) -> Option<String> {
    let ok = match order {
        Order::Exact => got == expected,
        Order::PerSource | Order::Multiset => {
            let (mut a, mut b) = (expected.to_vec(), got.to_vec());
            a.sort_unstable();
            b.sort_unstable();
            let same = a == b;
            let ordered = order == Order::Multiset || per_source_in_order(got);
            same && ordered
        }
    };
    (!ok).then(|| describe_mismatch(expected, got))
}

/// Each source's values (`value / OFFSET`) strictly increasing.
fn per_source_in_order(got: &[u64]) -> bool {
    let mut last: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
    got.iter().all(|&v| {
        let previous = last.insert(v / OFFSET, v);
        match previous {
            Some(p) => p < v,
            None => true,
        }
    })
}

/// Where two value sequences first differ, compactly.
pub fn describe_mismatch(expected: &[u64], got: &[u64]) -> String {
    let first = expected
        .iter()
        .zip(got)
        .position(|(e, g)| e != g)
        .unwrap_or(expected.len().min(got.len()));
    let show = |v: &[u64]| {
        let end = (first + 4).min(v.len());
        format!("{:?}", &v[first.min(end)..end])
    };
    let arrived: std::collections::HashSet<u64> = got.iter().copied().collect();
    let missing = expected.iter().filter(|v| !arrived.contains(v)).count();
    format!(
        "expected {} values, got {} (first difference at #{first}: expected {}…, got {}…; \
         {missing} expected values never arrived)",
        expected.len(),
        got.len(),
        show(expected),
        show(got)
    )
}

/// True if `got` is an in-order subsequence of `input`.
pub fn is_subsequence(input: &[u64], got: &[u64]) -> bool {
    let mut rest = input.iter();
    got.iter().all(|v| rest.any(|i| i == v))
}

/// Every value at most once.
pub fn distinct(got: &[u64]) -> bool {
    let mut seen = std::collections::HashSet::new();
    got.iter().all(|v| seen.insert(*v))
}

/// Public sources that emit no items, so there is nothing for the table to count.
const ITEMLESS_SOURCES: [&str; 3] = ["empty", "error", "never"];

/// The table must keep up with the crate: every `PublisherExt` method is a row (or a
/// sink of `panics::SINKS`, or runs no user code), every source and bridge function
/// re-exported at the crate root is a row (its `_on` form counts), and row names are
/// unique. Read from the sources, so a new operator without a row fails here.
#[test]
fn the_table_has_a_row_for_every_public_stage() {
    let root = env!("CARGO_MANIFEST_DIR");
    let ext = std::fs::read_to_string(format!("{root}/src/ext.rs")).expect("read src/ext.rs");
    let lib = std::fs::read_to_string(format!("{root}/src/lib.rs")).expect("read src/lib.rs");
    let rows = table();
    let functions: Vec<&str> = rows.iter().map(Stage::function).collect();
    let covered = |name: &str| {
        functions
            .iter()
            .any(|f| *f == name || *f == format!("{name}_on"))
    };
    let mut missing = Vec::new();
    // The trait's methods: `    fn name` at the trait's indentation.
    for line in ext.lines() {
        let Some(rest) = line.strip_prefix("    fn ") else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let sink = crate::panics::SINKS.iter().any(|(s, _)| *s == name)
            || crate::panics::NO_USER_CODE.contains(&name.as_str());
        if !covered(&name) && !sink {
            missing.push(format!("PublisherExt::{name}"));
        }
    }
    // Sources and bridges re-exported at the crate root; a `use` that rustfmt wrapped
    // over several lines is joined first.
    let mut statements = Vec::new();
    let mut open: Option<String> = None;
    for line in lib.lines() {
        let line = line.trim();
        match open.as_mut() {
            Some(statement) => statement.push_str(line),
            None if line.starts_with("pub use ") => open = Some(line.to_owned()),
            None => continue,
        }
        if line.ends_with(';') {
            statements.extend(open.take());
        }
    }
    for line in &statements {
        let Some(rest) = line
            .strip_prefix("pub use source::")
            .or_else(|| line.strip_prefix("pub use bridge::"))
            .or_else(|| line.strip_prefix("pub use operators::"))
        else {
            continue;
        };
        let names = rest.trim_end_matches(';').trim_matches(['{', '}']);
        for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if !covered(name) && !ITEMLESS_SOURCES.contains(&name) {
                missing.push(format!("weir::{name}"));
            }
        }
    }
    let mut names: Vec<&str> = rows.iter().map(|r| r.name).collect();
    names.sort_unstable();
    let duplicates: Vec<&str> = names
        .windows(2)
        .filter(|w| w[0] == w[1])
        .map(|w| w[0])
        .collect();
    assert!(
        missing.is_empty() && duplicates.is_empty(),
        "the table is missing rows for {missing:?}; duplicate rows: {duplicates:?}"
    );
}
