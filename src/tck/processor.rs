//! [`ProcessorVerification`]: the 68 tests of the TCK's `IdentityProcessorVerification`.
//!
//! # Shape
//!
//! In weir `subscribe` consumes the publisher, so one processor value cannot be both
//! handed upstream as a subscriber and subscribed to downstream. The factory therefore
//! returns the two **halves** of a fresh identity processor for a buffer size:
//! `Fn(usize) -> (S, P)` with `S: Subscriber<T>` (what goes upstream) and
//! `P: Publisher<Item = T>` (what downstream subscribes to). A processor type that is a
//! cloneable handle can use [`from_processor`](ProcessorVerification::from_processor),
//! which splits it with `Clone`.
//!
//! The suite is three parts, as in Java:
//!
//! * the 38 [publisher tests](super::PublisherVerification), on publishers made of a
//!   helper source (`range(0..n)` mapped through your `element` function) feeding a
//!   fresh processor ([`as_publisher`](ProcessorVerification::as_publisher));
//! * the 27 [white-box tests](super::SubscriberWhiteboxVerification), where the
//!   processor's subscriber half is the subscriber under test and a probe subscribed
//!   to its publisher half reports what comes out; its puppet is the downstream
//!   subscription ([`as_subscriber`](ProcessorVerification::as_subscriber)). This
//!   requires that downstream requests reach upstream, that a downstream cancel
//!   cancels upstream, and that terminal signals are passed on;
//! * three tests of its own: errors reach every subscriber (1.4), errors pass on
//!   without demand (4.2), and elements requested long ago are still requested
//!   upstream (2.1).
//!
//! Two tests need two subscribers at once (subscribed to clones of the publisher
//! half); they skip unless [`with_multi_subscribe`](ProcessorVerification::with_multi_subscribe)
//! declares support for at least two. The default is one subscriber.

use std::sync::Arc;

use super::harness::{ensure, run_case, skip, Failure, Verification};
use super::publisher::{attach_clones, attach_probe, Cloner};
use super::upstream::{test_error, UnderTest};
use super::{
    Element, Outcome, ProbedSubscriber, PublisherVerification, Report,
    SubscriberWhiteboxVerification, Suite, TestEnv, TestProbe,
};
use crate::{Error, Processor, Publisher, PublisherExt, Subscriber, Subscription};

type ProcessorFactory<S, P> = Arc<dyn Fn(usize) -> (S, P) + Send + Sync>;

/// Configuration and entry point of the processor conformance tests.
pub struct ProcessorVerification<T, S, P: Publisher> {
    factory: ProcessorFactory<S, P>,
    element: Arc<dyn Fn(u64) -> T + Send + Sync>,
    buffer_size: usize,
    cloner: Option<Cloner<P>>,
    max_subscribers: u64,
    coordinated: bool,
    publisher: Configure<P>,
    env: TestEnv,
}

type Configure<P> = Arc<dyn Fn(PublisherVerification<P>) -> PublisherVerification<P> + Send + Sync>;

impl<T, S, P: Publisher> Clone for ProcessorVerification<T, S, P> {
    fn clone(&self) -> Self {
        ProcessorVerification {
            factory: self.factory.clone(),
            element: self.element.clone(),
            buffer_size: self.buffer_size,
            cloner: self.cloner.clone(),
            max_subscribers: self.max_subscribers,
            coordinated: self.coordinated,
            publisher: self.publisher.clone(),
            env: self.env.clone(),
        }
    }
}

impl<T, Pr> ProcessorVerification<T, Pr, Pr>
where
    T: Element,
    Pr: Processor<T> + Publisher<Item = T> + Clone + Send + 'static,
{
    /// Verify a processor type that is a cloneable handle: one clone is the subscriber
    /// half, the other the publisher half.
    pub fn from_processor<F, E>(factory: F, element: E) -> Self
    where
        F: Fn(usize) -> Pr + Send + Sync + 'static,
        E: Fn(u64) -> T + Send + Sync + 'static,
    {
        Self::new(
            move |size| {
                let processor = factory(size);
                (processor.clone(), processor)
            },
            element,
        )
    }
}

impl<T, S, P: Publisher> std::fmt::Debug for ProcessorVerification<T, S, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessorVerification")
            .field("buffer_size", &self.buffer_size)
            .field("max_subscribers", &self.max_subscribers)
            .field("coordinated", &self.coordinated)
            .field("env", &self.env)
            .finish_non_exhaustive()
    }
}

/// Ignores everything: the downstream of processors in the publisher tests' helpers.
struct Ignore;

impl<T> Subscriber<T> for Ignore {
    fn on_subscribe(&mut self, _subscription: Subscription) {}
    fn on_next(&mut self, _item: T) {}
    fn on_error(&mut self, _error: Error) {}
    fn on_complete(&mut self) {}
}

impl<T, S, P> ProcessorVerification<T, S, P>
where
    T: Element,
    S: Subscriber<T> + Send + 'static,
    P: Publisher<Item = T> + 'static,
{
    /// Verify the processors `factory(buffer_size)` builds, as `(subscriber half,
    /// publisher half)`; `element(i)` makes the i-th element (elements should be
    /// distinct).
    pub fn new<F, E>(factory: F, element: E) -> Self
    where
        F: Fn(usize) -> (S, P) + Send + Sync + 'static,
        E: Fn(u64) -> T + Send + Sync + 'static,
    {
        ProcessorVerification {
            factory: Arc::new(factory),
            element: Arc::new(element),
            buffer_size: 16,
            cloner: None,
            max_subscribers: 1,
            coordinated: false,
            publisher: Arc::new(|v| v),
            env: TestEnv::new(),
        }
    }

    /// The buffer size passed to the factory (default 16, as in Java).
    pub fn buffer_size(mut self, size: usize) -> Self {
        self.buffer_size = size;
        self
    }

    /// Declare support for `max` simultaneous subscribers (subscribed to clones of the
    /// publisher half). With `max >= 2` the two multi-subscriber tests run, and the
    /// rule 1.11 publisher tests subscribe clones.
    pub fn with_multi_subscribe(mut self, max: u64) -> Self
    where
        P: Clone,
    {
        self.cloner = Some(Arc::new(P::clone));
        self.max_subscribers = max;
        self
    }

    /// The processor only requests upstream, or emits, once *all* its subscribers have
    /// demand (Java's `doesCoordinatedEmission`).
    pub fn coordinated_emission(mut self, coordinated: bool) -> Self {
        self.coordinated = coordinated;
        self
    }

    /// Adjust the delegated publisher verification (its knobs: `max_elements`,
    /// `with_failed_publisher`, `stochastic_iterations`, …). Its factory and env are
    /// set by this verification.
    pub fn configure_publisher_tests(
        mut self,
        configure: impl Fn(PublisherVerification<P>) -> PublisherVerification<P> + Send + Sync + 'static,
    ) -> Self {
        self.publisher = Arc::new(configure);
        self
    }

    /// Timeouts; each test runs with a fresh copy.
    pub fn env(mut self, env: TestEnv) -> Self {
        self.env = env;
        self
    }

    /// Run every test, in the TCK's order.
    pub fn run_all(&self) -> Report {
        Suite::run_all(self)
    }

    /// The delegated publisher verification: `factory(n)` is a fresh processor fed by
    /// `range(0..n)` mapped through `element`.
    pub fn as_publisher(&self) -> PublisherVerification<P> {
        let (factory, element, size) =
            (self.factory.clone(), self.element.clone(), self.buffer_size);
        let mut verification = PublisherVerification::new(move |n| {
            let (subscriber, publisher) = factory(size);
            let element = element.clone();
            crate::range(0..n)
                .map(move |i| element(i))
                .subscribe(subscriber);
            publisher
        });
        if let Some(cloner) = &self.cloner {
            verification = verification.with_cloner(cloner.clone());
        }
        (self.publisher)(verification).env(self.env.clone())
    }

    /// The delegated white-box verification: the subscriber under test is the
    /// processor's subscriber half; a probe subscribed to its publisher half reports
    /// what comes out, and its puppet is the downstream subscription.
    pub fn as_subscriber(&self) -> SubscriberWhiteboxVerification<T, S> {
        let (factory, size) = (self.factory.clone(), self.buffer_size);
        let element = self.element.clone();
        SubscriberWhiteboxVerification::new(
            move |probe| {
                let (subscriber, publisher) = factory(size);
                publisher.subscribe(ProbedSubscriber::new(Ignore, probe));
                subscriber
            },
            move |i| element(i),
        )
        .env(self.env.clone())
    }

    /// A fresh processor with the stage upstream; returns the stage and the publisher half.
    fn setup(&self, env: &TestEnv) -> Result<(UnderTest<T, S>, P), String> {
        let (subscriber, publisher) = (self.factory)(self.buffer_size);
        Ok((
            UnderTest::new(env, subscriber, self.element.clone())?,
            publisher,
        ))
    }

    /// `count` probing subscribers on clones of `publisher`, or a skip.
    fn subscribers(
        &self,
        env: &TestEnv,
        publisher: P,
        count: usize,
    ) -> Result<Vec<TestProbe<T>>, Failure> {
        let cloner = match &self.cloner {
            Some(cloner) if self.max_subscribers >= count as u64 => cloner,
            _ => {
                return Err(Failure::Skip(format!(
                    "needs {count} subscribers; max_subscribers is {}",
                    self.max_subscribers
                )))
            }
        };
        Ok(attach_clones(env, publisher, cloner, count)?)
    }

    /// IP39, rule 1.4: an upstream error reaches every subscriber, whatever their demand.
    pub fn spec_1_4_must_call_on_error_on_all_subscribers(&self) -> Outcome {
        self.run(
            "spec_1_4_must_call_on_error_on_all_subscribers",
            "1.4",
            |v, env| {
                let t = env.default_timeout();
                let (mut stage, publisher) = v.setup(env)?;
                let s = v.subscribers(env, publisher, 2)?;
                let requesters = if v.coordinated { &s[..] } else { &s[..1] };
                requesters.iter().for_each(|p| p.request(1));
                stage
                    .subscription
                    .expect_request(t)
                    .map_err(|e| format!("rule 2.1 (upstream): {e}"))?;
                stage.send_next()?;
                for probe in requesters {
                    probe.await_items(1, t)?;
                    probe.request(1);
                }
                let error = test_error();
                stage.send_error(error.clone())?;
                for probe in &s {
                    let got = probe.await_error(t)?;
                    ensure(Error::ptr_eq(&got, &error), || {
                        format!("a subscriber got a different error: {got}")
                    })?;
                }
                Ok(())
            },
        )
    }

    /// IP67, rule 4.2: an upstream error reaches a subscriber that requested nothing.
    pub fn spec_4_2_must_immediately_pass_on_error_downstream(&self) -> Outcome {
        self.run(
            "spec_4_2_must_immediately_pass_on_error_downstream",
            "4.2",
            |v, env| {
                let (mut stage, publisher) = v.setup(env)?;
                let probe = attach_probe(env, publisher)?;
                let error = test_error();
                stage.send_error(error.clone())?;
                let got = probe.await_error(env.default_timeout())?;
                ensure(Error::ptr_eq(&got, &error), || {
                    format!("the subscriber got a different error: {got}")
                })
            },
        )
    }

    /// IP68, rule 2.1: elements requested by one subscriber long ago are requested
    /// upstream, and an element is held for a second subscriber until it requests.
    pub fn spec_2_1_must_request_from_upstream_for_elements_requested_long_ago(&self) -> Outcome {
        let name = "spec_2_1_must_request_from_upstream_for_elements_requested_long_ago";
        self.run(name, "2.1", |v, env| {
            let t = env.default_timeout();
            if v.max_subscribers < 2 || v.cloner.is_none() {
                return skip(format!(
                    "needs 2 subscribers; max_subscribers is {}",
                    v.max_subscribers
                ));
            }
            let (mut stage, publisher) = v.setup(env)?;
            let second_publisher = (v.cloner.as_ref().expect("checked above"))(&publisher);
            let s1 = attach_probe(env, publisher)?;
            s1.request(20);
            let upstream = |stage: &UnderTest<T, S>| {
                stage
                    .subscription
                    .expect_request(t)
                    .map_err(|e| format!("upstream: {e}"))
            };
            let mut requested = upstream(&stage)?;
            let x = stage.send_next()?;
            s1.await_items(1, t)?;
            if requested == 1 {
                requested += upstream(&stage)?;
            }
            let y = stage.send_next()?;
            s1.await_items(2, t)?;
            if requested == 2 {
                requested += upstream(&stage)?;
            }
            let s2 = attach_probe(env, second_publisher)?;
            let z = if v.coordinated {
                s2.expect_signal_count(1, env.no_signals_timeout())?;
                s2.request(1);
                stage.send_next()?
            } else {
                let z = stage.send_next()?;
                s1.await_items(3, t)?;
                s2.expect_signal_count(1, env.no_signals_timeout())?;
                s2.request(1);
                z
            };
            s1.await_items(3, t)?;
            s2.await_items(1, t)?;
            if requested == 3 {
                upstream(&stage)?;
            }
            stage.send_complete()?;
            s1.await_completion(t)?;
            s2.await_completion(t)?;
            ensure(s1.items() == [x, y, z.clone()] && s2.items() == [z], || {
                format!(
                    "wrong elements: first subscriber {:?}, second {:?}",
                    s1.items(),
                    s2.items()
                )
            })
        })
    }
}

impl<T, S, P> Verification for ProcessorVerification<T, S, P>
where
    T: Element,
    S: Subscriber<T> + Send + 'static,
    P: Publisher<Item = T> + 'static,
{
    fn base_env(&self) -> &TestEnv {
        &self.env
    }
}

impl<T, S, P> Suite for ProcessorVerification<T, S, P>
where
    T: Element,
    S: Subscriber<T> + Send + 'static,
    P: Publisher<Item = T> + 'static,
{
    fn tests(&self) -> Vec<(&'static str, &'static str)> {
        let mut tests: Vec<(&'static str, &'static str)> = crate::__tck_publisher_tests!(names);
        tests.extend::<Vec<_>>(crate::__tck_whitebox_tests!(names));
        tests.extend::<Vec<_>>(crate::__tck_processor_tests!(names));
        tests
    }

    fn run_one(&self, name: &str) -> Option<Outcome> {
        run_case(self, crate::__tck_processor_tests!(cases), name)
            .or_else(|| self.as_publisher().run_one(name))
            .or_else(|| self.as_subscriber().run_one(name))
    }
}

/// The processor's own tests (the delegated ones are the publisher and white-box lists).
#[doc(hidden)]
#[macro_export]
macro_rules! __tck_processor_tests {
    ($($mode:tt)*) => {
        $crate::__tck_expand! { ($($mode)*) [
            spec_1_4_must_call_on_error_on_all_subscribers => "1.4",
            spec_4_2_must_immediately_pass_on_error_downstream => "4.2",
            spec_2_1_must_request_from_upstream_for_elements_requested_long_ago => "2.1",
        ] }
    };
}
