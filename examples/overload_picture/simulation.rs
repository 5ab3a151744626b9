//! The image service of `examples/overload_stories/image_service.rs` (600 jobs/s
//! arrive, one in five critical; the service has fallen to 350/s; 10,000 slots; marks
//! at 70 % and 90 %), run once per queue policy under `VirtualTime`: ticks of 10 ms,
//! 120 s, the same arrivals and the same service in every run. In each tick the
//! callers offer their 6 jobs first, then the service takes its share of 350/s (3 or
//! 4 jobs) through the stories' hand-driven [`Consumer`]. Every 100 ms the channel's
//! `monitor().snapshot()` gives the depth and the oldest job's age, in virtual time.
//!
//! The five queues are all weir channels:
//!
//! * **unbounded**: weir has no unbounded channel (capacities are at most 2^30), so
//!   this is a `Backpressure` channel of 2^20 = 1,048,576 slots, far more than the
//!   72,000 jobs that 120 s bring: it never fills and never refuses;
//! * **backpressure**: 10,000 slots, water marks pause at 90 % (9,000) and resume at
//!   70 % (7,000); the callers read `Sender::state` before each job and hold it back
//!   while `Paused` (the held jobs wait on the callers' side, outside this queue);
//! * **DropOldest**: 10,000 slots, `ChannelPolicy::DropOldest`;
//! * **max_age**: 10,000 slots, `TimeBounds::max_age(5 s)` (`Backpressure` when full,
//!   which it never is: 5 s of arrivals is 3,000 jobs);
//! * **admission ladder**: exactly the image service's channel (reduce to 0.5 at 70 %
//!   until 20 %, shed non-critical jobs at 90 % until 85 %), with callers that ignore
//!   the advice (they keep sending at 600/s).

use std::time::Duration;

use weir::queue::TimeBounds;
use weir::runtime::VirtualTime;
use weir::source::channel::{
    Admission, Channel, ChannelBuilder, ChannelPolicy, Sender, WaterMarks,
};
use weir::Publisher;

use super::consumer::{share, Consumer};

/// The simulation's tick.
pub const TICK_MS: u64 = 10;
/// How often the depth and the oldest age are sampled.
pub const SAMPLE_MS: u64 = 100;
/// The length of a run, in seconds.
pub const SECONDS: u64 = 120;
/// Jobs arriving per second.
pub const ARRIVALS: u64 = 600;
/// Jobs the service takes per second.
pub const SERVICE: u64 = 350;
/// The bounded queues' slots.
pub const CAPACITY: usize = 10_000;
/// The 70 % mark: the ladder's reduce rung, the backpressure channel's resume mark.
pub const MARK_70: usize = 7_000;
/// The 90 % mark: the ladder's shed rung, the backpressure channel's pause mark.
pub const MARK_90: usize = 9_000;
/// The slots of the "unbounded" channel: 2^20, more than 120 s of arrivals.
pub const UNBOUNDED: usize = 1 << 20;
/// The maximum age of the `max_age` channel.
pub const MAX_AGE: Duration = Duration::from_secs(5);

/// A job's priority class (the image service's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    /// Refused by the ladder's shed rung.
    Standard,
    /// Never refused for its class.
    Critical,
}

/// A job: its class and its number.
pub type Job = (Class, u64);

/// The queue policies compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// A channel far larger than 120 s of arrivals.
    Unbounded,
    /// 10,000 slots; callers pause at 9,000 and resume at 7,000.
    Backpressure,
    /// 10,000 slots; a full queue drops its oldest job.
    DropOldest,
    /// 10,000 slots; jobs older than [`MAX_AGE`] are dropped.
    MaxAge,
    /// The image service's admission ladder; callers ignore its advice.
    Ladder,
}

impl Policy {
    /// Every policy, in the order of the picture's legend.
    pub const ALL: [Policy; 5] = [
        Policy::Unbounded,
        Policy::Backpressure,
        Policy::DropOldest,
        Policy::MaxAge,
        Policy::Ladder,
    ];

    /// The label of the policy's line in the picture and the table.
    pub fn label(self) -> &'static str {
        match self {
            Policy::Unbounded => "unbounded",
            Policy::Backpressure => "backpressure, pause 9,000 / resume 7,000",
            Policy::DropOldest => "DropOldest",
            Policy::MaxAge => "max_age 5 s",
            Policy::Ladder => "admission ladder (callers ignore it)",
        }
    }

    fn channel(self, clock: &VirtualTime) -> (Sender<Job>, Channel<Job>) {
        let bounded = |policy| ChannelBuilder::new(CAPACITY, policy).clock(clock.clone());
        match self {
            Policy::Unbounded => ChannelBuilder::new(UNBOUNDED, ChannelPolicy::Backpressure)
                .clock(clock.clone())
                .build(),
            Policy::Backpressure => bounded(ChannelPolicy::Backpressure)
                .water_marks(WaterMarks::new(MARK_90, MARK_70))
                .build(),
            Policy::DropOldest => bounded(ChannelPolicy::DropOldest).build(),
            Policy::MaxAge => bounded(ChannelPolicy::Backpressure)
                .time_bounds(TimeBounds::none().max_age(MAX_AGE))
                .build(),
            Policy::Ladder => {
                // The image service's ladder (`overload_stories/image_service.rs`).
                let admission = Admission::new()
                    .reduce_at(WaterMarks::new(MARK_70, 2_000), 0.5)
                    .shed_below(
                        WaterMarks::new(MARK_90, 8_500),
                        Class::Critical,
                        |job: &Job| job.0,
                    );
                bounded(ChannelPolicy::Backpressure).build_with(admission)
            }
        }
    }
}

/// One sample of a run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    /// Virtual time of the sample, in seconds.
    pub t_secs: f64,
    /// Jobs in the queue.
    pub depth: usize,
    /// How long the oldest queued job has waited, in seconds (0 when empty).
    pub oldest_age_secs: f64,
}

/// A run of one policy.
#[derive(Clone, Debug)]
pub struct Series {
    /// The policy's label ([`Policy::label`]).
    pub policy: &'static str,
    /// A sample every [`SAMPLE_MS`], from 0 s to [`SECONDS`] inclusive.
    pub points: Vec<Point>,
    /// Jobs that arrived at the callers (600/s × 120 s).
    pub arrived: u64,
    /// Jobs the service took.
    pub served: u64,
    /// Jobs that arrived but neither were served nor are queued at the end: dropped
    /// or expired by the queue, refused by it, or held back by the callers.
    pub turned_away: u64,
}

impl Series {
    /// The sample at `t_secs`, which must be a multiple of [`SAMPLE_MS`].
    ///
    /// # Panics
    ///
    /// If there is no sample at `t_secs`.
    pub fn at(&self, t_secs: f64) -> Point {
        let index = (t_secs * 1_000.0 / SAMPLE_MS as f64).round() as usize;
        let point = self.points[index];
        assert!(
            (point.t_secs - t_secs).abs() < 1e-9,
            "no sample at {t_secs} s"
        );
        point
    }
}

/// Run the image service for [`SECONDS`] with `policy`'s queue.
pub fn run(policy: Policy) -> Series {
    let clock = VirtualTime::new();
    let (tx, rx) = policy.channel(&clock);
    let monitor = rx.monitor();
    let (consumer, tap) = Consumer::<Job>::new();
    rx.subscribe(consumer);
    let sample = || {
        let stats = monitor.snapshot();
        Point {
            t_secs: clock.elapsed().as_secs_f64(),
            depth: stats.depth,
            oldest_age_secs: stats.oldest_age.unwrap_or_default().as_secs_f64(),
        }
    };
    let mut points = vec![sample()];
    let (mut arrived, mut served, mut next_id) = (0u64, 0u64, 0u64);
    for k in 1..=SECONDS * 1_000 / TICK_MS {
        clock.advance(Duration::from_millis(TICK_MS));
        for _ in 0..share(ARRIVALS, k, TICK_MS) {
            let class = if next_id % 5 == 0 {
                Class::Critical
            } else {
                Class::Standard
            };
            next_id += 1;
            arrived += 1;
            if policy == Policy::Backpressure && tx.state().is_paused() {
                continue; // held back by the caller
            }
            // Refusals (the ladder's shed rung) are counted from the totals below.
            let _ = tx.try_send((class, next_id));
        }
        tap.serve(share(SERVICE, k, TICK_MS));
        served += tap.take().len() as u64;
        if k % (SAMPLE_MS / TICK_MS) == 0 {
            points.push(sample());
        }
    }
    let depth = points.last().map_or(0, |p| p.depth) as u64;
    Series {
        policy: policy.label(),
        points,
        arrived,
        served,
        turned_away: arrived - served - depth,
    }
}
