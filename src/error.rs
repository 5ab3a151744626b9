//! The one error type of weir pipelines.
//!
//! An [`Error`] travels downstream through `on_error`. It is an `Arc` inside, so
//! cloning it for several subscribers is a reference-count increment, and two clones
//! of one failure compare equal with [`Error::ptr_eq`] (the TCK checks identity).

use std::any::Any;
use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

/// What went wrong, in a form a program can match on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A party broke a Reactive Streams rule; `rule` is its number, e.g. `"3.9"`.
    SpecViolation {
        /// The rule number from the Reactive Streams specification.
        rule: &'static str,
    },
    /// A bounded buffer was full and its policy says to fail.
    Overflow,
    /// A time limit passed.
    Timeout,
    /// User code (a closure given to an operator, source or sink) panicked.
    Panicked,
    /// The source of the data failed; [`std::error::Error::source`] has the cause.
    Upstream,
    /// The consumer cancelled before the stream terminated (reported by sink handles).
    Cancelled,
    /// A scheduler could no longer run one of the pipeline's tasks (a tokio runtime
    /// shut down, a [`ThreadPool`](crate::runtime::ThreadPool) shut down): the stage
    /// that owned the task ended its pipeline, cancelling upstream and dropping what
    /// it held.
    SchedulerShutdown,
    /// A subscriber of a [`Hub`](crate::hub::Hub) fell further behind than its
    /// policy allows ([`Policy::Disconnect`](crate::hub::Policy::Disconnect)) and was
    /// cut off, so that it holds nobody else back.
    Lagged,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::SpecViolation { rule } => write!(f, "reactive streams rule {rule} violated"),
            ErrorKind::Overflow => f.write_str("buffer overflow"),
            ErrorKind::Timeout => f.write_str("timed out"),
            ErrorKind::Panicked => f.write_str("user code panicked"),
            ErrorKind::Upstream => f.write_str("upstream error"),
            ErrorKind::Cancelled => f.write_str("cancelled"),
            ErrorKind::SchedulerShutdown => f.write_str("scheduler shut down"),
            ErrorKind::Lagged => f.write_str("subscriber lagged"),
        }
    }
}

/// A failure signalled through `on_error`: a kind, a message and an optional source.
///
/// Cheap to clone (one `Arc`).
#[derive(Clone)]
pub struct Error {
    inner: Arc<ErrorRepr>,
}

struct ErrorRepr {
    kind: ErrorKind,
    message: Cow<'static, str>,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    /// The stage whose user code panicked (kind `Panicked`), when known.
    stage: Option<&'static str>,
}

impl Error {
    fn build(
        kind: ErrorKind,
        message: impl Into<Cow<'static, str>>,
        source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        Error {
            inner: Arc::new(ErrorRepr {
                kind,
                message: message.into(),
                source,
                stage: None,
            }),
        }
    }

    /// A violation of Reactive Streams rule `rule` (for example `"3.9"`).
    pub fn spec_violation(rule: &'static str, message: impl Into<Cow<'static, str>>) -> Self {
        Self::build(ErrorKind::SpecViolation { rule }, message, None)
    }

    /// A bounded buffer overflowed.
    pub fn overflow(message: impl Into<Cow<'static, str>>) -> Self {
        Self::build(ErrorKind::Overflow, message, None)
    }

    /// A time limit passed.
    pub fn timeout(message: impl Into<Cow<'static, str>>) -> Self {
        Self::build(ErrorKind::Timeout, message, None)
    }

    /// User code panicked; `payload` is what `catch_unwind` returned. The message is
    /// the panic message when it is a string.
    pub fn panicked(payload: Box<dyn Any + Send>) -> Self {
        let message: Cow<'static, str> = if let Some(s) = payload.downcast_ref::<&'static str>() {
            Cow::Borrowed(*s)
        } else if let Some(s) = payload.downcast_ref::<String>() {
            Cow::Owned(s.clone())
        } else {
            Cow::Borrowed("panic with a non-string payload")
        };
        Self::build(ErrorKind::Panicked, message, None)
    }

    /// Name the stage whose user code panicked, on a [`Panicked`](ErrorKind::Panicked)
    /// error that names none yet (and was not cloned yet). Anything else is returned
    /// unchanged.
    pub(crate) fn in_stage(mut self, stage: &'static str) -> Self {
        if self.inner.kind == ErrorKind::Panicked && !stage.is_empty() {
            if let Some(repr) = Arc::get_mut(&mut self.inner) {
                repr.stage.get_or_insert(stage);
            }
        }
        self
    }

    /// The stage whose user code panicked, for an error of kind
    /// [`Panicked`](ErrorKind::Panicked): `"map"` when `map`'s closure panicked,
    /// `"create"` for `create`'s closure, and so on. `None` for other kinds, and for
    /// panics weir could not attribute to a stage.
    ///
    /// ```
    /// use weir::prelude::*;
    ///
    /// let error = weir::range(0u32..3)
    ///     .map(|x| if x == 1 { panic!("bad reading") } else { x })
    ///     .collect()
    ///     .wait()
    ///     .unwrap_err();
    /// assert_eq!(error.kind(), weir::ErrorKind::Panicked);
    /// assert_eq!(error.stage(), Some("map"));
    /// assert_eq!(error.to_string(), "user code panicked in map: bad reading");
    /// ```
    pub fn stage(&self) -> Option<&'static str> {
        self.inner.stage
    }

    /// The data source failed with `source`.
    pub fn upstream(source: impl std::error::Error + Send + Sync + 'static) -> Self {
        let message = source.to_string();
        Self::build(ErrorKind::Upstream, message, Some(Box::new(source)))
    }

    /// An upstream failure described only by a message.
    pub fn msg(message: impl Into<Cow<'static, str>>) -> Self {
        Self::build(ErrorKind::Upstream, message, None)
    }

    /// The consumer cancelled before the stream terminated.
    pub fn cancelled() -> Self {
        Self::build(
            ErrorKind::Cancelled,
            "cancelled before the stream terminated",
            None,
        )
    }

    /// Kind [`Cancelled`](ErrorKind::Cancelled) with a message of the stage's own.
    pub(crate) fn cancelled_with(message: impl Into<Cow<'static, str>>) -> Self {
        Self::build(ErrorKind::Cancelled, message, None)
    }

    /// A scheduler dropped one of the pipeline's tasks without running it (it was shut
    /// down); `stage` names the stage whose task it was.
    pub fn scheduler_shutdown(stage: &'static str) -> Self {
        Self::build(
            ErrorKind::SchedulerShutdown,
            format!("{stage}: its scheduler shut down and dropped a task it could not run"),
            None,
        )
    }

    /// A subscriber fell further behind than it may and was cut off (kind
    /// [`Lagged`](ErrorKind::Lagged)).
    pub fn lagged(message: impl Into<Cow<'static, str>>) -> Self {
        Self::build(ErrorKind::Lagged, message, None)
    }

    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        self.inner.kind
    }

    /// The rule number when this is a spec violation.
    pub fn rule(&self) -> Option<&'static str> {
        match self.inner.kind {
            ErrorKind::SpecViolation { rule } => Some(rule),
            _ => None,
        }
    }

    /// The human-readable message (without the kind prefix).
    pub fn message(&self) -> &str {
        &self.inner.message
    }

    /// True when both values are clones of one failure.
    pub fn ptr_eq(a: &Error, b: &Error) -> bool {
        Arc::ptr_eq(&a.inner, &b.inner)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.inner.kind)
            .field("message", &self.inner.message)
            .field("source", &self.inner.source)
            .field("stage", &self.inner.stage)
            .finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.inner.stage {
            Some(stage) => write!(f, "{} in {stage}: {}", self.inner.kind, self.inner.message),
            None => write!(f, "{}: {}", self.inner.kind, self.inner.message),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner
            .source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// What [`on_backpressure_buffer`](crate::PublisherExt::on_backpressure_buffer) does
/// when an item arrives and the buffer is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Overflow {
    /// Refuse the item (reported as `OverflowNewest`), cancel upstream, and fail with
    /// [`ErrorKind::Overflow`] once the buffered items were delivered.
    Error,
    /// Drop the oldest buffered item (reported as `OverflowOldest`) to make room.
    DropOldest,
    /// Drop the arriving item (reported as `OverflowNewest`).
    DropNewest,
}

/// Why a lossy stage dropped an item (principle 3 of `docs/design.md` §2). Reported to
/// the pipeline's [`DropHook`](crate::metrics::DropHook) and counted in its
/// [`Drops`](crate::metrics::Drops).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DropReason {
    /// A full buffer discarded its oldest item to make room (`DropOldest`).
    OverflowOldest,
    /// A full buffer discarded the arriving item (`DropNewest`, `on_backpressure_drop`).
    OverflowNewest,
    /// A newer item replaced this one while there was no demand (keep-latest).
    ReplacedByLatest,
    /// The item was merged into another by a `conflate` function.
    Merged,
    /// The item waited longer than its queue's maximum age.
    Expired,
    /// A push source rejected the item (`Reject` policy; the sender got it back), or
    /// an enforcing `throttle` found no token for it.
    Rejected,
    /// The item waited longer than its queue's CoDel limit allowed
    /// ([`TimeBounds::codel`](crate::queue::TimeBounds::codel)): longer than the
    /// target, in a queue that has stood non-empty for the interval.
    CoDel,
    /// The item's own deadline ([`Deadline`](crate::deadline::Deadline)) had passed
    /// when it reached the head of its queue: nobody waits for it any more.
    DeadlineExceeded,
}

impl DropReason {
    /// How many reasons there are.
    pub const COUNT: usize = 8;

    /// Every reason, in declaration order.
    pub const ALL: [DropReason; DropReason::COUNT] = [
        DropReason::OverflowOldest,
        DropReason::OverflowNewest,
        DropReason::ReplacedByLatest,
        DropReason::Merged,
        DropReason::Expired,
        DropReason::Rejected,
        DropReason::CoDel,
        DropReason::DeadlineExceeded,
    ];
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DropReason::OverflowOldest => "overflow (oldest dropped)",
            DropReason::OverflowNewest => "overflow (newest dropped)",
            DropReason::ReplacedByLatest => "replaced by a later item",
            DropReason::Merged => "merged into another item",
            DropReason::Expired => "expired in the queue",
            DropReason::Rejected => "rejected",
            DropReason::CoDel => "waited past its queue's CoDel limit",
            DropReason::DeadlineExceeded => "its deadline passed while it was queued",
        })
    }
}
