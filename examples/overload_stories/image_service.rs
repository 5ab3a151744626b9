//! The image service: 600 jobs/s arrive (one in five critical), the service falls to
//! 350/s, the queue holds 10,000. The channel's admission ladder asks callers to
//! halve their rate at 70 % (until 20 %) and refuses non-critical jobs at 90 % (until
//! 85 %). Two runs under virtual time, ticks of 10 ms, 120 s:
//!
//! * callers that ignore the advice: the queue reaches 70 % at 28 s and 90 % at 36 s;
//!   from then on non-critical jobs are refused while the shed rung is on, critical
//!   ones never (critical jobs alone, 120/s, are far below the service rate);
//! * callers that ease to the advised rate (300/s): the queue peaks at the 70 % mark
//!   and drains at 50/s, back to about 2,400 by 120 s.

use std::time::Duration;

use weir::runtime::VirtualTime;
use weir::source::channel::{
    Admission, ChannelBuilder, ChannelPolicy, FlowState, TrySendError, WaterMarks,
};
use weir::Publisher;

use super::consumer::{share, Consumer};

/// A job's priority class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    /// May be refused when the service is overloaded.
    Standard,
    /// Never refused for its class.
    Critical,
}

/// One second of a run.
#[derive(Clone, Copy, Debug)]
pub struct Second {
    /// The second (1 = the first).
    pub t: u64,
    /// Depth at the end of the second.
    pub depth: usize,
    /// Flow state at the end of the second.
    pub state: FlowState,
    /// Jobs offered during the second.
    pub offered: u64,
    /// Standard jobs refused (shed) during the second.
    pub shed: u64,
    /// Critical jobs refused during the second, for any reason.
    pub critical_refused: u64,
}

/// A whole run.
#[derive(Debug)]
pub struct Run {
    /// Every second.
    pub seconds: Vec<Second>,
    /// The deepest the queue was at any tick.
    pub peak: usize,
    /// The first instant a job was shed, in seconds.
    pub first_shed_at: Option<f64>,
    /// The smallest depth at which a job was shed.
    pub min_depth_at_shed: Option<usize>,
    /// Jobs shed while the channel was not in the shed state (must be none).
    pub shed_outside_the_rung: u64,
}

const TICK_MS: u64 = 10;
const ARRIVALS: u64 = 600;
const SERVICE: u64 = 350;

/// Run 120 s; `cooperative` callers send at the advised rate factor.
pub fn run(cooperative: bool) -> Run {
    let clock = VirtualTime::new();
    let admission = Admission::new()
        .reduce_at(WaterMarks::new(7_000, 2_000), 0.5)
        .shed_below(
            WaterMarks::new(9_000, 8_500),
            Class::Critical,
            |job: &(Class, u64)| job.0,
        );
    let (tx, rx) = ChannelBuilder::new(10_000, ChannelPolicy::Backpressure)
        .clock(clock.clone())
        .build_with(admission);
    let monitor = rx.monitor();
    let (consumer, tap) = Consumer::new();
    rx.subscribe(consumer);
    let mut run = Run {
        seconds: Vec::new(),
        peak: 0,
        first_shed_at: None,
        min_depth_at_shed: None,
        shed_outside_the_rung: 0,
    };
    let (mut offered, mut shed, mut critical_refused) = (0, 0, 0);
    let mut budget = 0.0f64; // jobs the callers may send, fractional
    let mut next_id = 0u64;
    let ticks_per_second = 1_000 / TICK_MS;
    for k in 1..=120 * ticks_per_second {
        clock.advance(Duration::from_millis(TICK_MS));
        // Callers read the advice at the start of the tick.
        let factor = if cooperative {
            tx.state().rate_factor()
        } else {
            1.0
        };
        budget += ARRIVALS as f64 * factor * TICK_MS as f64 / 1_000.0;
        while budget >= 1.0 {
            budget -= 1.0;
            let class = if next_id % 5 == 0 {
                Class::Critical
            } else {
                Class::Standard
            };
            let shedding = matches!(tx.state(), FlowState::Shedding { .. });
            let depth = monitor.snapshot().depth;
            offered += 1;
            let answer = tx.try_send((class, next_id));
            if answer.is_err() && class == Class::Critical {
                critical_refused += 1;
            }
            if let Err(TrySendError::Shed(_)) = answer {
                shed += 1;
                let at = clock.elapsed().as_secs_f64();
                run.first_shed_at.get_or_insert(at);
                let min = run.min_depth_at_shed.get_or_insert(depth);
                *min = (*min).min(depth);
                if !shedding {
                    run.shed_outside_the_rung += 1;
                }
            }
            next_id += 1;
            run.peak = run.peak.max(monitor.snapshot().depth);
        }
        tap.request(share(SERVICE, k, TICK_MS));
        tap.take();
        if k % ticks_per_second == 0 {
            let stats = monitor.snapshot();
            run.seconds.push(Second {
                t: k / ticks_per_second,
                depth: stats.depth,
                state: tx.state(),
                offered: std::mem::take(&mut offered),
                shed: std::mem::take(&mut shed),
                critical_refused: std::mem::take(&mut critical_refused),
            });
        }
    }
    run
}
