//! The overload stories of `examples/overload_stories.rs`, asserted: the example's
//! own simulation code (included below) under `VirtualTime`, so the figures are
//! deterministic and the ones the example prints.

#[path = "../examples/overload_stories/consumer.rs"]
mod consumer;
#[path = "../examples/overload_stories/image_service.rs"]
mod image_service;

mod image {
    use super::image_service::run;
    use weir::source::channel::FlowState;

    #[test]
    fn callers_that_ignore_the_advice_lose_standard_jobs_only_above_the_shed_mark() {
        let run = run(false);
        let report = format!("{run:#?}");
        let at = |t: u64| run.seconds[t as usize - 1];
        // 600/s in, 350/s out: 70 % (7,000) at 28 s, 90 % (9,000) at 36 s.
        assert_eq!(
            (at(27).t, at(27).state),
            (27, FlowState::Flowing),
            "{report}"
        );
        assert_eq!(
            at(28).state,
            FlowState::Reducing { factor: 0.5 },
            "{report}"
        );
        let first = run.first_shed_at.expect("the shed rung turned on");
        assert!((35.9..=36.1).contains(&first), "first shed at {first} s");
        // Shed only while the shed rung is on, never below its low mark (8,500).
        assert_eq!(run.shed_outside_the_rung, 0, "{report}");
        assert!(run.min_depth_at_shed.unwrap() > 8_500, "{report}");
        // Critical jobs are never refused; the queue never fills.
        assert_eq!(
            run.seconds.iter().map(|s| s.critical_refused).sum::<u64>(),
            0
        );
        assert!(run.peak <= 9_000, "peak {}", run.peak);
        let shed: u64 = run.seconds.iter().map(|s| s.shed).sum();
        assert!(shed > 10_000, "standard jobs were shed: {shed}");
    }

    #[test]
    fn callers_that_ease_keep_the_queue_under_the_reduce_mark_and_drain_it() {
        let run = run(true);
        let report = format!("{run:#?}");
        // The advice comes at 70 % (28 s); callers read it at their next tick.
        assert!(run.peak <= 7_006, "peak {}", run.peak);
        assert_eq!(run.first_shed_at, None, "{report}");
        let end = run.seconds.last().unwrap();
        assert!((2_350..=2_450).contains(&end.depth), "{report}");
        assert_eq!(end.state, FlowState::Reducing { factor: 0.5 });
        // 300/s offered while reducing.
        assert!(
            run.seconds[40..]
                .iter()
                .all(|s| (299..=301).contains(&s.offered)),
            "{report}"
        );
    }
}

#[path = "../examples/overload_stories/retry_storm.rs"]
mod retry_storm;

mod storm {
    use super::retry_storm::{run, Second, BASE, SPIKE};

    fn mean(seconds: &[Second], from: u64, to: u64, f: impl Fn(&Second) -> u64) -> f64 {
        let window = &seconds[from as usize - 1..to as usize];
        window.iter().map(f).sum::<u64>() as f64 / window.len() as f64
    }

    #[test]
    fn unprotected_the_retries_amplify_the_load_and_goodput_stays_collapsed() {
        let run = run(false);
        let report = format!("{run:?}");
        let peak = run.iter().map(|s| s.offered).max().unwrap();
        assert!(
            peak as f64 >= 2.5 * BASE as f64,
            "peak offered {peak}\n{report}"
        );
        // Two minutes after the slowdown ended, still nothing answered in time.
        let after = mean(&run, SPIKE.1 + 60, 300, |s| s.goodput);
        assert!(after < 0.1 * BASE as f64, "goodput {after}/s\n{report}");
        assert_eq!(
            mean(&run, 1, 50, |s| s.goodput),
            BASE as f64,
            "healthy at first"
        );
    }

    #[test]
    fn with_deadlines_codel_and_a_retry_budget_the_load_holds_and_goodput_returns() {
        let run = run(true);
        let report = format!("{run:?}");
        assert!(
            run.iter().all(|s| s.offered as f64 <= 1.1 * BASE as f64),
            "offered at most 1.1x the base\n{report}"
        );
        // Within 10 s of the end of the slowdown, 95 % of the base is answered in time
        // (every second from then on).
        assert!(
            run[(SPIKE.1 + 10) as usize..]
                .iter()
                .all(|s| s.goodput as f64 >= 0.95 * BASE as f64),
            "{report}"
        );
        // During the slowdown the service answers live requests at its capacity.
        let during = mean(&run, SPIKE.0 + 5, SPIKE.1, |s| s.goodput);
        assert!(
            during >= 950.0,
            "goodput during the slowdown {during}/s\n{report}"
        );
        assert!(
            run.iter().map(|s| s.refused_retries).sum::<u64>() > 0,
            "{report}"
        );
        assert!(run.iter().all(|s| s.depth <= 250));
        assert_eq!(run[SPIKE.1 as usize + 10].t, SPIKE.1 + 11);
    }
}
