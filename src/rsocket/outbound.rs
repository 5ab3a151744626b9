//! The sending side of a stream: the subscriber a local publisher (a handler's
//! answer, a channel's outgoing items) is subscribed to.
//!
//! It asks its publisher only for what the peer granted, at most
//! [`Config::send_window`](super::Config::send_window) beyond what was written (the
//! connection's writer asks again when the outbox ran low), and puts each item in the
//! stream's outbox for the writer. A publisher that sends more than asked breaks
//! rule 1.1: it is cancelled and the peer gets an ERROR. A response takes one item,
//! then cancels its publisher and completes. A publisher that drops it without a
//! terminal signal ends the stream with an ERROR too, so the peer never waits for
//! ever.

use std::sync::Arc;

use super::conn::Conn;
use super::frame::Payload;
use crate::guard::cancel_contained;
use crate::{Error, Subscriber, Subscription};

/// Feeds stream `stream`'s outbox from a local publisher.
pub(crate) struct Outbound {
    conn: Arc<Conn>,
    stream: u32,
    /// A batch, collected before the connection's lock is taken: its items come from
    /// a lazy iterator that runs the publisher's operators (user code, which must
    /// not run under that lock). Kept for its allocation; at most what was
    /// requested, so within the send window.
    batch: Vec<Payload>,
}

impl Outbound {
    pub(crate) fn new(conn: Arc<Conn>, stream: u32) -> Self {
        Outbound {
            conn,
            stream,
            batch: Vec::new(),
        }
    }
}

impl Drop for Outbound {
    /// Released by its publisher without a terminal signal (one that ended without
    /// telling, or whose thread panicked holding it): the peer must not wait for
    /// ever, so the stream ends with an ERROR. A no-op once the sending side ended,
    /// the peer cancelled, or the connection closed; left to the caller inside
    /// [`subscribe_guarded`](crate::guard::subscribe_guarded) when a panic drops it.
    fn drop(&mut self) {
        if !crate::guard::dropped_unterminated() {
            return;
        }
        self.conn.end(
            self.stream,
            Err(Error::msg(
                "rsocket: the local publisher dropped its subscriber without a terminal signal",
            )),
        );
    }
}

impl Subscriber<Payload> for Outbound {
    fn on_subscribe(&mut self, subscription: Subscription) {
        match self.conn.subscribed(self.stream, &subscription) {
            // The stream ended before its publisher subscribed (cancelled, closed).
            None => cancel_contained("rsocket", &subscription),
            Some(0) => {}
            Some(n) => subscription.request(n),
        }
    }

    fn on_next(&mut self, item: Payload) {
        if let Some(subscription) = self.conn.items(self.stream, std::iter::once(item)) {
            cancel_contained("rsocket", &subscription);
        }
    }

    fn on_next_batch<I: Iterator<Item = Payload>>(&mut self, items: I) -> u64 {
        self.batch.extend(items);
        // Items a rule-1.1 breach or a response's end leaves in the batch are dropped
        // with the drain, after the lock is let go.
        let cancel = self.conn.items(self.stream, self.batch.drain(..));
        if let Some(subscription) = cancel {
            cancel_contained("rsocket", &subscription);
        }
        0
    }

    fn on_error(&mut self, error: Error) {
        self.conn.end(self.stream, Err(error));
    }

    fn on_complete(&mut self) {
        self.conn.end(self.stream, Ok(()));
    }
}
