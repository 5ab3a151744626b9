//! Acks sent for synchronous code: one task per source publishes them in runs.
//!
//! `Message::ack_detached` and `AckMode::OnDelivery` cannot await the client. A task
//! per ack would cost a spawn (an allocation and a wake-up) per message; instead the
//! reply subjects go into one queue under a short lock, and the queue's task takes
//! whole runs and publishes them. The task is woken when the queue goes from empty to
//! non-empty, then lets a run gather for up to [`GATHER`] (woken early once [`RUN`]
//! acks wait): a consumer on another thread acking each message would otherwise
//! wake the task for nearly every ack. An ack thus leaves at most a millisecond after
//! it was asked for. The queue holds at most the messages delivered and not yet
//! acked, which the consumer's `max_ack_pending` bounds on the server's side.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::{Client, Subject};
use bytes::Bytes;
use tokio::runtime::Handle;
use tokio::sync::Notify;

/// How long a run may gather once the first ack of it is queued.
const GATHER: Duration = Duration::from_millis(1);

/// Acks that wake the task early.
const RUN: usize = 64;

struct Queue {
    replies: Vec<Subject>,
    closed: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Notify,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        // Only pushes and swaps run under the lock.
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The handle: pushes acks; dropping the last one lets the task finish the queue
/// and end.
pub(crate) struct Acker {
    shared: Arc<Shared>,
}

impl Acker {
    /// An acker publishing through `client`, its task on `runtime`.
    pub(crate) fn start(client: Client, runtime: &Handle) -> Acker {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                replies: Vec::new(),
                closed: false,
            }),
            wake: Notify::new(),
        });
        runtime.spawn(run(shared.clone(), client));
        Acker { shared }
    }

    /// Queue an ack to `reply`.
    pub(crate) fn ack(&self, reply: Subject) {
        let len = {
            let mut queue = self.shared.lock();
            queue.replies.push(reply);
            queue.replies.len()
        };
        if len == 1 || len == RUN {
            self.shared.wake.notify_one();
        }
    }
}

impl Drop for Acker {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_one();
    }
}

async fn run(shared: Arc<Shared>, client: Client) {
    let mut run = Vec::new();
    loop {
        // Wait for the first ack of a run (a push after this check leaves a permit:
        // `notify_one` stores one, so the wait below returns at once for it).
        loop {
            let idle = {
                let queue = shared.lock();
                queue.replies.is_empty() && !queue.closed
            };
            if !idle {
                break;
            }
            shared.wake.notified().await;
        }
        let gather = {
            let queue = shared.lock();
            queue.replies.len() < RUN && !queue.closed
        };
        if gather {
            tokio::select! {
                _ = tokio::time::sleep(GATHER) => {}
                _ = shared.wake.notified() => {}
            }
        }
        let closed = {
            let mut queue = shared.lock();
            std::mem::swap(&mut queue.replies, &mut run);
            queue.closed && queue.replies.is_empty()
        };
        for reply in run.drain(..) {
            if let Err(error) = client.publish(reply, Bytes::new()).await {
                tracing::warn!(target: "weir::nats", %error, "a detached ack was not sent");
            }
        }
        if closed {
            return;
        }
    }
}
