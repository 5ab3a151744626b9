//! Conformance kit runs (work in progress).

use weir::tck::{PublisherVerification, TestEnv};

#[test]
fn smoke_range() {
    let report = PublisherVerification::new(|n| weir::range(0..n))
        .with_multi_subscribe()
        .env(
            TestEnv::builder()
                .no_signals_timeout(std::time::Duration::from_millis(50))
                .build(),
        )
        .stochastic_iterations(20)
        .run_all();
    println!("{report}");
    report.assert_all_passed();
}

weir::publisher_tck!(range_tck, |n| weir::range(0..n));
