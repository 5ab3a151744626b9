//! Acks sent for synchronous code: one task per source publishes them in runs.
//!
//! `Message::ack_detached` and `AckMode::OnDelivery` cannot await the client. A task
//! per ack would cost a spawn (an allocation and a wake-up) per message; instead the
//! reply subjects go into one queue under a short lock, and the queue's task, woken
//! only when the queue goes from empty to non-empty, takes the whole run and
//! publishes it. The queue holds at most the messages delivered and not yet acked,
//! which the consumer's `max_ack_pending` bounds on the server's side.

use std::sync::{Arc, Mutex};

use async_nats::{Client, Subject};
use bytes::Bytes;
use tokio::runtime::Handle;
use tokio::sync::Notify;

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
        let was_empty = {
            let mut queue = self.shared.lock();
            queue.replies.push(reply);
            queue.replies.len() == 1
        };
        if was_empty {
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
        let closed = {
            let mut queue = shared.lock();
            std::mem::swap(&mut queue.replies, &mut run);
            queue.closed
        };
        for reply in run.drain(..) {
            if let Err(error) = client.publish(reply, Bytes::new()).await {
                tracing::warn!(target: "weir::nats", %error, "a detached ack was not sent");
            }
        }
        if closed {
            return;
        }
        // A push after the swap above left a permit (`notify_one` stores one), so
        // this returns at once for it.
        shared.wake.notified().await;
    }
}
