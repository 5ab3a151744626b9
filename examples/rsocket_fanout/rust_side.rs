//! The fan-out isolation scenario of [`super::scenario`], run with the third-party
//! crate `rsocket_rust` (0.7.5) and its TCP transport `rsocket_rust_transport_tcp`
//! (0.7.4) instead of weir.
//!
//! [`run`] binds a listener on `127.0.0.1:0`, serves exactly one connection on it with
//! an `rsocket_rust` responder whose request-stream `i` (the request's data is `i` in
//! decimal) is an endless stream of [`item`]s counted by [`Meter::sent`] as they are
//! produced, connects one `rsocket_rust` client to it, and opens `streams`
//! request-streams on that one connection. Each stream's consumer pulls as fast as it
//! can, counts into [`Meter::received`], stalls when [`Scenario::stall_left`] says so,
//! and drops its stream once `run_for` has passed.
//!
//! # What `rsocket_rust` does with demand and slow consumers
//!
//! Read from the crate's source (paths inside `rsocket_rust-0.7.5/`):
//!
//! - A client never asks for less than everything: `RequestStream::builder` starts
//!   every REQUEST_STREAM with `initial_request_n: REQUEST_MAX`
//!   (`src/frame/request_stream.rs:76`), which is `0x7FFF_FFFF`, 2^31 − 1
//!   (`src/frame/mod.rs:39`); the client's `request_stream` builds its frame with that
//!   builder and never sets another value (`src/transport/socket.rs:893`, and `:877`,
//!   `:879` when fragmenting), and the returned stream has no way to request more or
//!   less.
//! - Inbound REQUEST_N is ignored: the dispatcher's arm for it is empty but for
//!   `// TODO: support RequestN` (`src/transport/socket.rs:176-178`). The responder
//!   ignores the initial request-n as well: the frame is turned into a bare payload
//!   (`src/payload/normal.rs:149-154`) and `on_request_stream` spawns a task that
//!   pulls the responder's stream to its end and pushes every item into the
//!   connection's unbounded outbound queue (`src/transport/socket.rs:471-497`; the
//!   queue is `mpsc::unbounded_channel`, `src/core/server.rs:116`,
//!   `src/core/client.rs:131`). So the server produces as fast as its CPU allows,
//!   whatever the client consumes: the backlog `sent − received` is unbounded on every
//!   stream, stalled or not.
//! - Inbound frames go through one queue and one task per connection: a reader task
//!   moves every decoded frame into an unbounded channel (`src/core/client.rs:184-212`,
//!   `src/core/server.rs:129-149`), and a single dispatcher task takes them one at a
//!   time and `.await`s `DuplexSocket::dispatch` on each (`src/core/client.rs:215-221`,
//!   `src/core/server.rs:151-156`). For a PAYLOAD on a request-stream, dispatch does
//!   `sender.send(Ok(input)).await` (`src/transport/socket.rs:347`) into that stream's
//!   bounded channel of 32 (`src/transport/socket.rs:843`). Once one consumer stops
//!   pulling, its 32 slots fill, the dispatcher waits on the next frame for it, and no
//!   frame behind that one, for any stream on the connection, is delivered until the
//!   consumer pulls again (head-of-line blocking); meanwhile the reader keeps draining
//!   the socket into the unbounded channel, so memory grows instead of TCP pushing
//!   back.
//!
//! Three more things found there shape how [`run`] works:
//!
//! - The dispatcher holds a lock of the client's handler map across that `.await`: it
//!   takes `self.handlers.entry(sid)` (a `DashMap` entry, which holds the shard's
//!   write lock; `src/transport/socket.rs:327`) and awaits the send while the entry is
//!   alive (`:347`). `request_stream` registers each new stream by `handlers.insert`
//!   from a task it spawns (`:846-847`), a blocking lock. If that insert hits the shard
//!   the parked dispatcher holds, the worker thread blocks in the lock, and if the
//!   consumer the dispatcher waits for cannot run (both workers of a two-worker runtime
//!   blocked this way, or it sits in the blocked worker's queue) nothing ever
//!   unblocks. Seen in two runs out of about twenty on two workers while opening the
//!   eight streams: both workers parked in `dashmap::lock::RawRwLock::lock_exclusive_slow`
//!   under `request_stream`'s task, no timer firing again. A stream's registration
//!   happens before its REQUEST_STREAM is queued (`:847`, then `:893-896`), so the
//!   server here starts producing only once all `streams` requests have arrived: by
//!   then every handler is registered, and during the run nothing else on the client
//!   locks that map (no request-response, no errors or cancels from the server).
//! - A dropped client stream is not forgotten: its handler stays registered until the
//!   peer completes or errors it (`src/transport/socket.rs:355-357`), and every payload
//!   that still arrives for it makes the dispatcher send another CANCEL
//!   (`src/transport/socket.rs:345-346`).
//! - The responder's producer task `expect`s that its COMPLETE (or ERROR) frame can be
//!   queued (`src/transport/socket.rs:490`, `:495-497`), which panics once the
//!   connection's writer is gone. So the server streams here never complete: when the
//!   run is over they park forever instead (no CPU, no panic) and are dropped with the
//!   runtime or aborted by a CANCEL.
//!
//! # What a run looks like
//!
//! On a two-core machine with two tokio workers and [`Scenario::DEFAULT`]: the eight
//! producers, which only give the worker back every tokio budget (128 items), produce
//! about 1–2 million items per stream in the 7 s while the connection delivers some
//! 5–20 thousand per stream per second, so every stream's backlog, healthy or not,
//! reaches hundreds of thousands to millions of items and the process peaks at 1–4
//! GiB. From the stall's start until its end no stream gets more than the few hundred
//! items already past the dispatcher, and all resume together when it ends.
//!
//! `rsocket_rust` spawns its own tasks with `tokio::spawn` (`src/runtime/mod.rs`) and
//! returns no handles to them. [`run`] aborts every task it spawned itself and drops the
//! client, but some of the crate's internal tasks outlive it and keep running (or
//! waiting) until the runtime is dropped: the dispatcher draining what is left in its
//! unbounded queue, the connection's reader and writer tasks, the parked producers, and
//! each socket's `loop_canceller`, which holds a clone of the socket that owns the
//! sending half of the very channel it waits on, so it never ends
//! (`src/transport/socket.rs:67-71`, `:102-106`).

use std::error::Error;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use rsocket_rust::error::RSocketError;
use rsocket_rust::prelude::{
    Flux, Payload, RSocket, RSocketFactory, ServerTransport, SetupPayload, StreamExt,
};
use rsocket_rust::Client;
use rsocket_rust_transport_tcp::TcpClientTransport;
use tokio::net::TcpListener;
use tokio::sync::Barrier;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::scenario::{item, Meter, Outcome, Scenario};

/// What [`run`] and its tasks fail with.
type BoxError = Box<dyn Error + Send + Sync>;

/// How long past `run_for` [`run`] waits for its consumer tasks to finish by
/// themselves before it aborts them.
const GRACE: Duration = Duration::from_millis(500);

/// Runs `scenario` through rsocket_rust: a server on 127.0.0.1:0 (or a free port), one
/// client connection, `scenario.streams` request-streams; counts into `meter`; returns
/// once `scenario.run_for` has passed since `meter.start()` and everything it started is
/// stopped or detached.
///
/// Fails if the server cannot be bound or the client cannot connect, or with the first
/// error of a stream (an error item, or its end before `run_for`); even then it only
/// returns once every stream has finished or `run_for` has passed. Tasks that
/// `rsocket_rust` spawns internally may outlive the call (see the module docs); the
/// tasks `run` spawns itself are aborted before it returns. The bound on when it
/// returns rests on tokio's timers, so it holds as long as `rsocket_rust` does not
/// block all of the runtime's worker threads (the one way found to do that is avoided;
/// see the module docs).
pub async fn run(scenario: Scenario, meter: Arc<Meter>) -> Outcome {
    let deadline = Instant::from_std(meter.start() + scenario.run_for);
    let stop = Arc::new(AtomicBool::new(false));
    // Declared before `tasks` so it is dropped after them: on every way out of `run`
    // (an error, or `run` itself being dropped) the server's streams stop producing.
    let _stop = StopOnDrop(stop.clone());
    // Dropping a JoinSet aborts its tasks, so they cannot outlive `run` either.
    let mut tasks = JoinSet::<Result<(), BoxError>>::new();

    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    let publisher = Publisher {
        scenario,
        meter: meter.clone(),
        stop: stop.clone(),
        start: Arc::new(Barrier::new(scenario.streams)),
    };
    tasks.spawn(async move {
        RSocketFactory::receive()
            .transport(OneConnection(Some(listener)))
            .acceptor(Box::new(move |_setup: SetupPayload, _peer| {
                Ok(Box::new(publisher.clone()) as Box<dyn RSocket>)
            }))
            .serve()
            .await?;
        Ok(())
    });

    let connect = RSocketFactory::connect()
        .transport(TcpClientTransport::from(addr))
        .start();
    let client = tokio::time::timeout_at(deadline, connect)
        .await
        .map_err(|_| "rsocket_rust client did not connect before the run ended")??;

    for stream in 0..scenario.streams {
        let client = client.clone();
        tasks.spawn(consume(stream, client, scenario, meter.clone(), deadline));
    }

    // The consumers end themselves at the deadline; wait a little longer for them, in
    // case the runtime is busy, then abort whatever is left.
    let mut first_error = None;
    while let Ok(Some(joined)) = tokio::time::timeout_at(deadline + GRACE, tasks.join_next()).await
    {
        let error = match joined {
            Ok(Ok(())) => continue,
            Ok(Err(error)) => error,
            Err(join_error) if join_error.is_cancelled() => continue,
            Err(join_error) => join_error.into(),
        };
        first_error.get_or_insert(error);
    }
    stop.store(true, Relaxed);
    tasks.abort_all();
    // The consumers' clones of the client went with their tasks; dropping the last
    // one closes the client's read loop (`src/core/client.rs:207-209`). The rest of
    // its tasks are detached.
    drop(client);
    match first_error {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

/// The consumer of stream `stream`: opens it on `client`, pulls until `deadline`,
/// stalling as the scenario says, then drops it.
async fn consume(
    stream: usize,
    client: Client,
    scenario: Scenario,
    meter: Arc<Meter>,
    deadline: Instant,
) -> Result<(), BoxError> {
    let request = Payload::builder()
        .set_data_utf8(&stream.to_string())
        .build();
    let mut items = client.request_stream(request);
    let end = tokio::time::sleep_until(deadline);
    tokio::pin!(end);
    loop {
        let wait = scenario.stall_left(stream, meter.elapsed());
        if !wait.is_zero() {
            tokio::time::sleep_until((Instant::now() + wait).min(deadline)).await;
        }
        if meter.elapsed() >= scenario.run_for {
            return Ok(());
        }
        let next = tokio::select! {
            biased;
            next = items.next() => next,
            () = &mut end => return Ok(()),
        };
        match next {
            Some(Ok(payload)) => {
                meter.received(stream, payload.data().map_or(&[][..], |data| &data[..]));
            }
            Some(Err(error)) => return Err(format!("stream {stream}: {error}").into()),
            None if meter.elapsed() >= scenario.run_for => return Ok(()),
            None => {
                let received = meter.received_on(stream);
                return Err(format!("stream {stream} ended after {received} items").into());
            }
        }
    }
}

/// A server transport over a listener that is already bound (so [`run`] knows its port
/// before the server starts) and accepts exactly one connection.
///
/// `rsocket_rust_transport_tcp`'s own `TcpServerTransport` binds in `start` and does
/// not tell which port it got, so `127.0.0.1:0` would be useless with it; the accepted
/// connection is still handed to that crate (`TcpClientTransport::from(TcpStream)`),
/// framing included.
struct OneConnection(Option<TcpListener>);

#[rsocket_rust::async_trait]
impl ServerTransport for OneConnection {
    type Item = TcpClientTransport;

    async fn start(&mut self) -> rsocket_rust::Result<()> {
        Ok(())
    }

    async fn next(&mut self) -> Option<rsocket_rust::Result<TcpClientTransport>> {
        // After the first connection the listener is dropped and `serve` returns.
        let accepted = self.0.take()?.accept().await;
        Some(match accepted {
            Ok((socket, _)) => Ok(TcpClientTransport::from(socket)),
            Err(error) => Err(RSocketError::IO(error).into()),
        })
    }
}

/// Sets the flag that stops the server's streams when dropped.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Relaxed);
    }
}

/// The server's responder: request-stream `i` is the endless stream of items of stream
/// `i`.
#[derive(Clone)]
struct Publisher {
    scenario: Scenario,
    meter: Arc<Meter>,
    stop: Arc<AtomicBool>,
    /// Every stream waits here until all `streams` have been requested (see the
    /// module docs on the handler map's lock).
    start: Arc<Barrier>,
}

impl Publisher {
    /// The stream a request-stream whose data is `request` asks for.
    fn stream_of(&self, request: &Payload) -> Result<usize, String> {
        let text = request.data_utf8().unwrap_or_default();
        match text.parse::<usize>() {
            Ok(stream) if stream < self.scenario.streams => Ok(stream),
            _ => Err(format!("no stream {text:?}")),
        }
    }
}

/// The error the responder answers every interaction but request-stream with.
fn unsupported(what: &str) -> RSocketError {
    RSocketError::RequestRejected(format!("{what} is not part of the scenario"))
}

/// A stream of the one error `error`.
fn failed(error: RSocketError) -> Flux<rsocket_rust::Result<Payload>> {
    Box::pin(rsocket_rust::stream! {
        yield Err(error.into());
    })
}

#[rsocket_rust::async_trait]
impl RSocket for Publisher {
    async fn metadata_push(&self, _req: Payload) -> rsocket_rust::Result<()> {
        Err(unsupported("metadata push").into())
    }

    async fn fire_and_forget(&self, _req: Payload) -> rsocket_rust::Result<()> {
        Err(unsupported("fire and forget").into())
    }

    async fn request_response(&self, _req: Payload) -> rsocket_rust::Result<Option<Payload>> {
        Err(unsupported("request response").into())
    }

    fn request_stream(&self, req: Payload) -> Flux<rsocket_rust::Result<Payload>> {
        let stream = match self.stream_of(&req) {
            Ok(stream) => stream,
            Err(message) => return failed(RSocketError::RequestInvalid(message)),
        };
        let meter = self.meter.clone();
        let stop = self.stop.clone();
        let size = self.scenario.item_size;
        let start = self.start.clone();
        Box::pin(rsocket_rust::stream! {
            start.wait().await;
            loop {
                if stop.load(Relaxed) {
                    // Never complete: see the module docs (socket.rs:495-497).
                    std::future::pending::<()>().await;
                }
                // rsocket_rust's producer task polls this stream in a loop and awaits
                // nothing that could be pending (the outbound queue is unbounded), so
                // the stream itself has to give the worker thread back now and then,
                // or eight of them would occupy the runtime's workers for good.
                tokio::task::coop::consume_budget().await;
                let seq = meter.sent(stream);
                yield Ok(Payload::builder().set_data(item(seq, size)).build());
            }
        })
    }

    fn request_channel(
        &self,
        _reqs: Flux<rsocket_rust::Result<Payload>>,
    ) -> Flux<rsocket_rust::Result<Payload>> {
        failed(unsupported("request channel"))
    }
}
