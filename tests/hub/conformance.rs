//! The conformance kit on a subscriber of every policy (`share()` of items `0..n`,
//! nobody lagging), and the rule 1.11 multicast tests on three subscribers of one
//! hub that connects once all three are there.

use weir::hub::{Hub, Policy};
use weir::prelude::*;
use weir::tck::{Outcome, PublisherVerification};

/// A fresh hub over `0..n`, joined with `policy` (the kit's one subscriber connects it).
fn shared(policy: Policy) -> impl Fn(u64) -> weir::hub::Join<u64> + Send + Sync + 'static {
    move |n| weir::range(0..n).share(16).join(policy)
}

fn failed(policy: Policy) -> weir::hub::Join<u64> {
    weir::error::<u64>(weir::Error::msg("failed on purpose"))
        .share(16)
        .join(policy)
}

weir::publisher_tck!(
    backpressure,
    PublisherVerification::new(shared(Policy::Backpressure))
        .with_failed_publisher(|| failed(Policy::Backpressure))
        .stochastic_iterations(20)
);

weir::publisher_tck!(
    drop_oldest,
    PublisherVerification::new(shared(Policy::DropOldest))
        .with_failed_publisher(|| failed(Policy::DropOldest))
        .stochastic_iterations(20)
);

weir::publisher_tck!(
    latest,
    PublisherVerification::new(shared(Policy::Latest))
        .with_failed_publisher(|| failed(Policy::Latest))
        .stochastic_iterations(20)
);

weir::publisher_tck!(
    disconnect,
    PublisherVerification::new(shared(Policy::disconnect_after_items(1_000)))
        .with_failed_publisher(|| failed(Policy::disconnect_after_items(1_000)))
        .stochastic_iterations(20)
);

/// Three clones of one hub that connects at three subscribers.
fn multicast() -> PublisherVerification<Hub<u64>> {
    PublisherVerification::new(|n| Hub::builder(weir::range(0..n), 16).connect_at(3).build())
        .with_multi_subscribe()
}

#[test]
fn rule_1_11_same_sequence_when_requesting_one_by_one() {
    let outcome = multicast().spec_1_11_multicast_same_sequence_when_requesting_one_by_one();
    assert_eq!(outcome, Outcome::Pass);
}

#[test]
fn rule_1_11_same_sequence_when_requesting_many_upfront() {
    let outcome = multicast().spec_1_11_multicast_same_sequence_when_requesting_many_upfront();
    assert_eq!(outcome, Outcome::Pass);
}

#[test]
fn rule_1_11_same_sequence_and_completion_when_requesting_many_upfront() {
    let outcome =
        multicast().spec_1_11_multicast_same_sequence_and_completion_when_requesting_many_upfront();
    assert_eq!(outcome, Outcome::Pass);
}
