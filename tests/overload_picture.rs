//! The overload picture of `examples/overload_picture.rs`, asserted: the example's own
//! simulation and drawing code (included below) under `VirtualTime`, so the figures
//! are deterministic and the ones the example prints and draws.
//!
//! The arithmetic of the story: 6 jobs arrive in every 10 ms tick (600/s) and the
//! service takes its share of 350/s after them (3 in odd ticks, 4 in even ones), so at
//! every 100 ms sample exactly 35·k/10 jobs have been served after k ticks, and a queue
//! that keeps everything holds 250 × t jobs. Every removal is at the head, so the queue
//! always holds the most recent jobs that got in.

#[path = "../examples/overload_stories/consumer.rs"]
mod consumer;
#[path = "../examples/overload_picture/draw.rs"]
mod draw;
#[path = "../examples/overload_picture/simulation.rs"]
mod simulation;

use std::sync::OnceLock;

use simulation::{
    run, Point, Policy, Series, ARRIVALS, CAPACITY, MARK_70, MARK_90, MAX_AGE, SAMPLE_MS, SECONDS,
    SERVICE, TICK_MS, UNBOUNDED,
};

/// Every policy's run, computed once for all the tests.
fn runs() -> &'static [Series] {
    static RUNS: OnceLock<Vec<Series>> = OnceLock::new();
    RUNS.get_or_init(|| Policy::ALL.into_iter().map(run).collect())
}

fn series(policy: Policy) -> &'static Series {
    runs()
        .iter()
        .find(|s| s.policy == policy.label())
        .expect("every policy ran")
}

/// Jobs per tick and samples per second, from the constants.
const PER_TICK: u64 = ARRIVALS * TICK_MS / 1_000;
const SAMPLES: usize = (SECONDS * 1_000 / SAMPLE_MS) as usize + 1;

/// What a queue that keeps every job holds at a sample instant `t`: 250 × t jobs, and
/// at its head job number 350 × t (0-based; the service has taken the ones before),
/// which arrived in tick ⌊350t / 6⌋ + 1.
fn keep_everything(t: f64) -> (usize, f64) {
    let served = (SERVICE as f64 * t).round() as u64;
    let arrived = (ARRIVALS as f64 * t).round() as u64;
    let head_tick = served / PER_TICK + 1;
    let age = t - (head_tick * TICK_MS) as f64 / 1_000.0;
    (
        (arrived - served) as usize,
        if t == 0.0 { 0.0 } else { age },
    )
}

fn assert_keeps_everything(s: &Series, until: f64) {
    for p in s.points.iter().filter(|p| p.t_secs <= until + 1e-9) {
        let (depth, age) = keep_everything(p.t_secs);
        assert_eq!(p.depth, depth, "{} at {} s", s.policy, p.t_secs);
        assert!(
            (p.oldest_age_secs - age).abs() < 1e-9,
            "{} at {} s: oldest age {} s, expected {age} s",
            s.policy,
            p.t_secs,
            p.oldest_age_secs
        );
    }
}

fn after(s: &Series, from: f64) -> impl Iterator<Item = &Point> {
    s.points.iter().filter(move |p| p.t_secs >= from - 1e-9)
}

/// How many times the depth turns from rising to falling after `from` seconds.
fn peaks(s: &Series, from: f64) -> usize {
    let steps: Vec<i64> = after(s, from - SAMPLE_MS as f64 / 1_000.0)
        .collect::<Vec<_>>()
        .windows(2)
        .map(|w| w[1].depth as i64 - w[0].depth as i64)
        .filter(|d| *d != 0)
        .collect();
    steps.windows(2).filter(|w| w[0] > 0 && w[1] < 0).count()
}

#[test]
fn every_run_serves_at_the_service_rate_and_accounts_for_every_job() {
    for s in runs() {
        assert_eq!(s.points.len(), SAMPLES, "{}", s.policy);
        assert_eq!(s.arrived, ARRIVALS * SECONDS, "{}", s.policy);
        // The queue never runs dry: the service takes 350/s throughout.
        assert_eq!(s.served, SERVICE * SECONDS, "{}", s.policy);
        let end = s.at(SECONDS as f64);
        assert_eq!(
            s.arrived,
            s.served + end.depth as u64 + s.turned_away,
            "{}",
            s.policy
        );
    }
}

#[test]
fn unbounded_grows_250_a_second_and_its_head_waits_five_twelfths_of_the_elapsed_time() {
    let s = series(Policy::Unbounded);
    assert_keeps_everything(s, SECONDS as f64);
    assert_eq!(s.at(60.0).depth, 15_000);
    assert_eq!(s.at(120.0).depth, 30_000);
    assert!(s.at(120.0).depth < UNBOUNDED, "the channel never filled");
    // Head job 42,000 arrived in tick 7,001 (70.01 s): 49.99 s of waiting at 120 s,
    // ≈ 120 × (1 − 350/600).
    assert!((s.at(120.0).oldest_age_secs - 49.99).abs() < 1e-9);
    assert_eq!(s.turned_away, 0);
}

#[test]
fn drop_oldest_holds_the_newest_10000_jobs_whose_oldest_waited_capacity_over_arrivals() {
    let s = series(Policy::DropOldest);
    // The first drop is in tick 3,999 (6 × 3,999 − 13,993 = 10,001 after its arrivals).
    assert_keeps_everything(s, 39.9);
    // From 40 s on, a full queue after each tick's arrivals, less the tick's service
    // (4 jobs in the even tick that ends a sample): 9,996 jobs, those of the last
    // 1,666 ticks; the oldest arrived 1,665 ticks ago. The age is set by the arrival
    // rate (10,000 / 600 = 16.67 s), not the service rate: drops take the head.
    for p in after(s, 40.0) {
        assert_eq!(p.depth, CAPACITY - 4, "at {} s", p.t_secs);
        assert!(
            (p.oldest_age_secs - 16.65).abs() < 1e-9,
            "at {} s",
            p.t_secs
        );
    }
    // Dropped: everything not served and not queued.
    assert_eq!(s.turned_away, 72_000 - 42_000 - 9_996);
}

#[test]
fn max_age_holds_five_seconds_of_arrivals_and_no_job_older_than_five_seconds() {
    let s = series(Policy::MaxAge);
    let bound = MAX_AGE.as_secs_f64();
    // The head reaches 5 s at 12 s (job 4,200 arrived at 7.01 s: 4.99 s at 12.0 s).
    assert_keeps_everything(s, 12.0);
    assert!(s.points.iter().all(|p| p.oldest_age_secs <= bound + 1e-9));
    // Then the jobs of the last 500 ticks (3,000), plus the 2 of the 6 that arrived
    // exactly 5 s ago that the service (4) has not taken yet: an item expires only
    // once it has waited longer than the bound.
    for p in after(s, 12.1) {
        assert_eq!(p.depth, 3_002, "at {} s", p.t_secs);
        assert!(
            (p.oldest_age_secs - bound).abs() < 1e-9,
            "at {} s",
            p.t_secs
        );
    }
    assert_eq!(s.turned_away, 72_000 - 42_000 - 3_002, "expired");
}

#[test]
fn backpressure_callers_pause_at_the_high_mark_and_resume_at_the_low_mark() {
    let s = series(Policy::Backpressure);
    // Flowing until the depth reaches 9,000 during tick 3,599 (6 × 3,599 − 12,593).
    assert_keeps_everything(s, 35.9);
    assert!(
        s.points.iter().all(|p| p.depth <= MARK_90),
        "never above the mark"
    );
    // Resumed once a removal brings it to 7,000. Per 100 ms: +25 while flowing (60
    // in, 35 out), −35 while paused (nothing in); a sample that spans a turn lies
    // between. A cycle is 2,000 / 350 s paused and 2,000 / 250 s flowing (13.71 s):
    // pauses at 36 s, 49.7 s, ..., 118.3 s.
    assert_cycles_between_marks(s, MARK_70, -35..=25, 7);
    // Held back by the callers while paused: what arrived and was neither served
    // nor is queued.
    assert_eq!(s.turned_away, 72_000 - 42_000 - s.at(120.0).depth as u64);
}

#[test]
fn the_ladder_keeps_the_queue_between_the_shed_rungs_marks_when_callers_ignore_it() {
    let s = series(Policy::Ladder);
    // Callers ignore the reduce rung (28 s): nothing changes until the shed rung.
    assert_keeps_everything(s, 35.9);
    assert!(
        s.points.iter().all(|p| p.depth <= MARK_90),
        "never above 90 %"
    );
    // The shed rung turns off at 8,500 (a removal). Per 100 ms: +25 flowing, and 12
    // critical jobs in, 35 out (−23) while shedding. A cycle: 500 / 230 s shedding,
    // 500 / 250 s flowing (4.17 s): 21 from 36 s.
    assert_cycles_between_marks(s, 8_500, -23..=25, 21);
    // Standard jobs shed: at most the 480/s of standard jobs from 36 s on.
    assert!(s.turned_away > 0 && s.turned_away <= 480 * (SECONDS - 36));
}

/// From 36 s (the first time the depth reaches 90 %), a run that turns back at
/// `low` and up again at 90 %: never more than 3 below `low` after a tick; each
/// 100 ms step of the depth within `steps`; `cycles` peaks; and, since a job waits
/// behind at most 9,000 jobs served at 350/s and, once the first cycle turned, never
/// fewer than `low` − 3, its age within those bounds.
fn assert_cycles_between_marks(
    s: &Series,
    low: usize,
    steps: std::ops::RangeInclusive<i64>,
    cycles: usize,
) {
    for p in after(s, 36.0) {
        assert!(p.depth >= low - 3, "at {} s: {}", p.t_secs, p.depth);
    }
    let points: Vec<&Point> = after(s, 36.0).collect();
    for w in points.windows(2) {
        let step = w[1].depth as i64 - w[0].depth as i64;
        assert!(steps.contains(&step), "at {} s: {step}", w[1].t_secs);
    }
    assert_eq!(peaks(s, 36.0), cycles);
    let most = MARK_90 as f64 / SERVICE as f64 + 0.01;
    let least = (low - 3 - PER_TICK as usize) as f64 / SERVICE as f64 - 0.01;
    assert!(s.points.iter().all(|p| p.oldest_age_secs <= most));
    for p in after(s, 36.0 + most) {
        assert!(
            (least..=most).contains(&p.oldest_age_secs),
            "at {} s: {}",
            p.t_secs,
            p.oldest_age_secs
        );
    }
}

#[test]
fn the_instants_of_the_table() {
    let at = |policy, t| {
        let p: Point = series(policy).at(t);
        (p.depth, (p.oldest_age_secs * 100.0).round() / 100.0)
    };
    for policy in Policy::ALL {
        assert_eq!(at(policy, 10.0), (2_500, 4.16), "{}", policy.label());
    }
    assert_eq!(at(Policy::Unbounded, 60.0), (15_000, 24.99));
    assert_eq!(at(Policy::DropOldest, 30.0), (7_500, 12.49));
    assert_eq!(at(Policy::DropOldest, 120.0), (9_996, 16.65));
    assert_eq!(at(Policy::MaxAge, 30.0), (3_002, 5.0));
    assert_eq!(at(Policy::Ladder, 30.0), (7_500, 12.49));
}

/// The `<text>` contents and the `<polyline>`s (stroke, points) of an SVG document.
struct Svg {
    texts: Vec<String>,
    polylines: Vec<(String, Vec<(i64, i64)>)>,
}

fn attribute<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    let len = tag[start..].find('"')?;
    Some(&tag[start..start + len])
}

fn parse(svg: &str) -> Svg {
    let texts = svg
        .split("<text")
        .skip(1)
        .filter_map(|rest| {
            let body = &rest[rest.find('>')? + 1..];
            Some(body[..body.find("</text>")?].trim().to_owned())
        })
        .collect();
    let polylines = svg
        .split("<polyline")
        .skip(1)
        .map(|rest| {
            let tag = &rest[..rest.find("/>").expect("a closed polyline")];
            let stroke = attribute(tag, "stroke").expect("a stroke").to_owned();
            let points = attribute(tag, "points")
                .expect("points")
                .split_whitespace()
                .map(|xy| {
                    let (x, y) = xy.split_once(',').expect("x,y");
                    (x.parse().expect("x"), y.parse().expect("y"))
                })
                .collect();
            (stroke, points)
        })
        .collect();
    Svg { texts, polylines }
}

/// The series' two lines (depth panel, then age panel): its colour, one point per
/// sample.
fn lines_of(svg: &Svg, i: usize) -> Vec<&[(i64, i64)]> {
    let color = draw::COLORS[i % draw::COLORS.len()];
    let stroke = format!("#{:02X}{:02X}{:02X}", color.0, color.1, color.2);
    svg.polylines
        .iter()
        .filter(|(s, points)| *s == stroke && points.len() > 2)
        .map(|(_, points)| points.as_slice())
        .collect()
}

/// Check that the pixel ordinates of `values` are one affine map of the values
/// (within a pixel of rounding), rising values drawn higher.
fn assert_affine(pairs: &[(f64, i64)], what: &str) {
    let lo = pairs.iter().min_by(|a, b| a.0.total_cmp(&b.0)).unwrap();
    let hi = pairs.iter().max_by(|a, b| a.0.total_cmp(&b.0)).unwrap();
    assert!(hi.1 < lo.1, "{what}: higher values are drawn higher up");
    let scale = (hi.1 - lo.1) as f64 / (hi.0 - lo.0);
    for &(value, y) in pairs {
        let expected = lo.1 as f64 + (value - lo.0) * scale;
        assert!(
            (y as f64 - expected).abs() <= 1.5,
            "{what}: {value} drawn at y = {y}, expected {expected:.1} ({pairs:?})"
        );
    }
}

#[test]
fn the_picture_has_a_line_per_policy_and_panel_that_follows_the_figures() {
    let dir = std::env::temp_dir().join(format!(
        "weir-overload-picture-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("overload_picture.svg");
    let runs = runs();
    draw::draw(runs, &path).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        text.starts_with("<svg") || text.starts_with("<?xml"),
        "{}",
        &text[..80.min(text.len())]
    );
    let svg = parse(&text);
    for s in runs {
        assert!(
            svg.texts.iter().any(|t| t == s.policy),
            "the legend names {}",
            s.policy
        );
    }
    for mark in ["70 %", "90 %"] {
        assert!(svg.texts.iter().any(|t| t == mark), "the {mark} mark");
    }
    let mut lines = Vec::new();
    for (i, s) in runs.iter().enumerate() {
        let both = lines_of(&svg, i);
        assert_eq!(both.len(), 2, "{}: a line per panel", s.policy);
        for line in &both {
            assert_eq!(
                line.len(),
                s.points.len(),
                "{}: a point per sample",
                s.policy
            );
        }
        lines.push((s, [both[0], both[1]]));
    }
    // Within a panel every line starts at the same pixel (0 s, 0), and the samples'
    // abscissae are an affine map of the time, the same for every line.
    for panel in [0, 1] {
        let first = lines[0].1[panel];
        let (x0, x1) = (first[0].0, first[first.len() - 1].0);
        for l in &lines {
            assert_eq!(
                l.1[panel][0], first[0],
                "{} starts at the origin",
                l.0.policy
            );
            for (j, &(x, _)) in l.1[panel].iter().enumerate() {
                let expected = x0 as f64 + (x1 - x0) as f64 * j as f64 / (SAMPLES - 1) as f64;
                assert!((x as f64 - expected).abs() <= 1.0, "x of sample {j}: {x}");
            }
        }
    }
    // The ordinates: one affine map of the depths (top panel) and of the ages (bottom
    // panel), across every line and the table's instants.
    let mut depths = Vec::new();
    let mut ages = Vec::new();
    for (s, [depth_line, age_line]) in &lines {
        for t in [10.0, 30.0, 60.0, 90.0, 120.0] {
            let j = (t * 1_000.0 / SAMPLE_MS as f64) as usize;
            let p = s.at(t);
            depths.push((p.depth as f64, depth_line[j].1));
            ages.push((p.oldest_age_secs, age_line[j].1));
        }
    }
    assert_affine(&depths, "depth");
    assert_affine(&ages, "oldest age");
    // The lines end in the order of the final depths: unbounded (30,000) on top, then
    // DropOldest (9,996), the ladder, backpressure, max_age (3,002) lowest.
    let mut by_depth: Vec<_> = lines.iter().collect();
    by_depth.sort_by_key(|l| std::cmp::Reverse(l.0.at(120.0).depth));
    let finals: Vec<i64> = by_depth.iter().map(|l| l.1[0][SAMPLES - 1].1).collect();
    assert!(
        finals.windows(2).all(|w| w[0] < w[1]),
        "final ordinates {finals:?}"
    );
    let order: Vec<&str> = by_depth.iter().map(|l| l.0.policy).collect();
    assert_eq!(
        order,
        [
            Policy::Unbounded.label(),
            Policy::DropOldest.label(),
            Policy::Ladder.label(),
            Policy::Backpressure.label(),
            Policy::MaxAge.label()
        ]
    );
}
