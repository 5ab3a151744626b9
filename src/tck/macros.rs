//! The `*_tck!` macros: one `#[test]` per conformance test, so `cargo test` prints each
//! rule's test by name. Skips pass, and each writes `weir tck: SKIPPED {test}: {reason}`
//! to standard error past the harness's capture, so it shows in `cargo test`'s output.
//!
//! Each suite's test list exists once, in a hidden `__tck_*_tests!` macro next to the
//! suite (the two subscriber suites share one list, `__tck_subscriber_tests!`; the
//! white-box suite puts `happy_path` in front); [`__tck_expand!`](crate::__tck_expand)
//! turns it into the `(name, rule)` list, the dispatch table of
//! [`Suite::run_one`](super::Suite::run_one), or `#[test]`s. Every `*_tck!` macro is
//! [`__tck_module!`](crate::__tck_module) with its suite's lists.

/// Expands a test list (internal).
#[doc(hidden)]
#[macro_export]
macro_rules! __tck_expand {
    ((names) [$($name:ident => $rule:literal),* $(,)?]) => {
        vec![$((stringify!($name), $rule)),*]
    };
    ((cases) [$($name:ident => $rule:literal),* $(,)?]) => {
        vec![$((stringify!($name), $rule, Self::$name as fn(&Self) -> $crate::tck::Outcome)),*]
    };
    ((tests $suite:path) [$($name:ident => $rule:literal),* $(,)?]) => {
        $(
            #[test]
            fn $name() {
                $crate::tck::Suite::run_one(&$suite(), stringify!($name))
                    .expect("the test list and the suite agree")
                    .assert_not_failed();
            }
        )*
    };
}

/// The body of every `*_tck!` macro (internal): a function `$name` that makes the
/// suite, and a module `$name` with one `#[test]` per entry of the listed test lists.
#[doc(hidden)]
#[macro_export]
macro_rules! __tck_module {
    ($name:ident, $verification:expr, [$($list:ident),+]) => {
        #[cfg(test)]
        fn $name() -> impl $crate::tck::Suite {
            $verification
        }

        #[cfg(test)]
        mod $name {
            $($crate::$list!(tests super::$name);)+
        }
    };
}

/// Generate one `#[test]` per publisher conformance test (38), in a module `$name`.
///
/// Either give a factory closure, or a configured
/// [`PublisherVerification`](crate::tck::PublisherVerification) expression (evaluated
/// once per test). Names used in the expression resolve where the macro is invoked.
///
/// ```ignore
/// weir::publisher_tck!(range_tck, |n| weir::range(0..n));
/// weir::publisher_tck!(
///     range_full_tck,
///     weir::tck::PublisherVerification::new(|n| weir::range(0..n)).with_multi_subscribe()
/// );
/// ```
///
/// `cargo test range_tck::spec_3_9` then runs the rule 3.9 tests.
#[macro_export]
macro_rules! publisher_tck {
    ($name:ident, |$n:ident| $body:expr) => {
        $crate::publisher_tck!(
            $name,
            $crate::tck::PublisherVerification::new(|$n: u64| $body)
        );
    };
    ($name:ident, $verification:expr) => {
        $crate::__tck_module!($name, $verification, [__tck_publisher_tests]);
    };
}

/// Generate one `#[test]` per black-box subscriber conformance test (26), in a module
/// `$name`. The expression is a
/// [`SubscriberBlackboxVerification`](crate::tck::SubscriberBlackboxVerification),
/// evaluated once per test.
#[macro_export]
macro_rules! subscriber_blackbox_tck {
    ($name:ident, $verification:expr) => {
        $crate::__tck_module!($name, $verification, [__tck_blackbox_tests]);
    };
}

/// Generate one `#[test]` per white-box subscriber conformance test (27), in a module
/// `$name`. The expression is a
/// [`SubscriberWhiteboxVerification`](crate::tck::SubscriberWhiteboxVerification),
/// evaluated once per test.
#[macro_export]
macro_rules! subscriber_whitebox_tck {
    ($name:ident, $verification:expr) => {
        $crate::__tck_module!($name, $verification, [__tck_whitebox_tests]);
    };
}

/// Generate one `#[test]` per processor conformance test (68), in a module `$name`.
/// The expression is a [`ProcessorVerification`](crate::tck::ProcessorVerification),
/// evaluated once per test.
#[macro_export]
macro_rules! processor_tck {
    ($name:ident, $verification:expr) => {
        $crate::__tck_module!(
            $name,
            $verification,
            [
                __tck_publisher_tests,
                __tck_whitebox_tests,
                __tck_processor_tests
            ]
        );
    };
}
