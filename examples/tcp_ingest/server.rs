//! The TCP ingest server, its clients and its slow sink: everything
//! `examples/tcp_ingest.rs` runs, in one module that `tests/tcp_ingest.rs` imports
//! too (`#[path]`), so the test covers exactly the code the example runs.
//!
//! ```text
//!  client 0 ──TCP──▶ reader 0 ─┐
//!  client 1 ──TCP──▶ reader 1 ─┼─ send_or_pause ─▶ weir::channel(Backpressure,   ─▶ subscribe_async ─▶ Store
//!  …                           │                    water marks high/low)           (window 1)        (batches,
//!  client N ──TCP──▶ reader N ─┘                                                                       slow flush)
//! ```
//!
//! * **Clients** (N tasks) connect to the server on 127.0.0.1 and write M lines
//!   `"<client> <seq> <send stamp µs> <padding>"` as fast as TCP lets them, in chunks;
//!   a line counts as *sent* once its chunk was written into the socket.
//! * **Readers** (one task per accepted connection) read a line at a time through a
//!   fixed-size `BufReader` (lines longer than `MAX_LINE` are refused, so the read
//!   buffers are bounded), parse it into a small `Line` and offer it with
//!   [`send_or_pause`](weir::bridge::SenderReadiness::send_or_pause): while the
//!   channel is `Paused` the reader does not read its socket, the kernel buffers fill,
//!   TCP's window closes and the client's writes wait.
//! * **The channel** is one `weir::channel(capacity, Backpressure)` with water marks
//!   `high`/`low`, shared by the readers. Its `QueueMonitor` gives depth, oldest age,
//!   lag in seconds and pause counts.
//! * **The store** is an [`AsyncSubscriber`]: it collects lines into batches and
//!   "stores" a batch with a `tokio::time::sleep` (a database write, say), so it is
//!   much slower than the clients. It asks for the next line only when the previous
//!   `on_next` finished. It keeps a ledger: how often each (client, seq) was stored,
//!   per-connection lag, end-to-end latency.

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpSocket, TcpStream};
use weir::bridge::{AfterSend, AsyncSubscriber, SenderReadiness};
use weir::metrics::{QueueMonitor, QueueStats};
use weir::prelude::*;
use weir::source::channel::{ChannelBuilder, ChannelPolicy, Sender, WaterMarks};
use weir::Error;

/// Capacity of each connection's `BufReader`.
pub const READ_BUFFER: usize = 8 * 1024;
/// The longest line a reader accepts (the line buffer never grows beyond it).
pub const MAX_LINE: usize = 256;

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    /// Number of clients (= connections).
    pub clients: u32,
    /// Lines each client sends.
    pub lines_per_client: u32,
    /// The channel's capacity, in lines.
    pub capacity: usize,
    /// Pause the readers at this depth…
    pub high: usize,
    /// …and let them read again at this depth.
    pub low: usize,
    /// Lines per store batch.
    pub batch: usize,
    /// What storing one batch costs.
    pub flush_cost: Duration,
    /// SO_SNDBUF / SO_RCVBUF of the sockets (small, so TCP pushes back early).
    pub socket_buffer: u32,
    /// Print a progress line this often (`None`: quiet).
    pub progress: Option<Duration>,
}

impl Config {
    /// `clients` × `lines_per_client` lines; a channel of 1,024 lines pausing at 768
    /// and resuming at 256; batches of 64 lines costing 1 ms each.
    pub fn new(clients: u32, lines_per_client: u32) -> Self {
        Config {
            clients,
            lines_per_client,
            capacity: 1_024,
            high: 768,
            low: 256,
            batch: 64,
            flush_cost: Duration::from_millis(1),
            socket_buffer: 16 * 1024,
            progress: None,
        }
    }
}

/// One parsed line: 16 bytes, no allocation.
#[derive(Clone, Copy, Debug)]
struct Line {
    client: u32,
    seq: u32,
    /// When the client wrote it, in µs since the run started.
    sent_us: u64,
}

/// Counters one connection shares between its client, its reader and the store.
#[derive(Default)]
struct Conn {
    /// Lines the client has written into its socket.
    sent: AtomicU64,
    /// Lines the store has stored.
    stored: AtomicU64,
    /// The largest `sent - stored` the store saw (lines in flight for this client).
    peak_lag: AtomicU64,
    /// Times the reader stopped reading because the channel was paused.
    pauses: AtomicU64,
    /// Time the reader spent paused, in µs.
    paused_us: AtomicU64,
    /// When the client finished writing, in µs since the start.
    client_done_us: AtomicU64,
}

/// The store's ledger: what was stored, how often, how late.
struct Ledger {
    /// `times[client][seq]`: how often that line was stored (must end as 1).
    times: Vec<Vec<u8>>,
    latency_sum_us: Vec<u64>,
    latency_max_us: Vec<u64>,
}

/// The slow sink.
struct Store {
    batch: Vec<Line>,
    batch_size: usize,
    flush_cost: Duration,
    start: Instant,
    conns: Arc<Vec<Conn>>,
    ledger: Arc<Mutex<Ledger>>,
}

impl Store {
    async fn flush(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        tokio::time::sleep(self.flush_cost).await; // the "database write"
        let now_us = micros(self.start.elapsed());
        let mut ledger = self.ledger.lock().unwrap();
        for line in self.batch.drain(..) {
            let (c, s) = (line.client as usize, line.seq as usize);
            ledger.times[c][s] = ledger.times[c][s].saturating_add(1);
            let latency = now_us.saturating_sub(line.sent_us);
            ledger.latency_sum_us[c] += latency;
            ledger.latency_max_us[c] = ledger.latency_max_us[c].max(latency);
            let conn = &self.conns[c];
            let stored = conn.stored.fetch_add(1, Ordering::Relaxed) + 1;
            let lag = conn.sent.load(Ordering::Relaxed).saturating_sub(stored);
            conn.peak_lag.fetch_max(lag, Ordering::Relaxed);
        }
    }
}

#[async_trait::async_trait]
impl AsyncSubscriber<Line> for Store {
    async fn on_next(&mut self, line: Line) -> Result<(), Error> {
        if line.client as usize >= self.conns.len() {
            return Err(Error::msg(format!("unknown client {}", line.client)));
        }
        self.batch.push(line);
        if self.batch.len() >= self.batch_size {
            self.flush().await;
        }
        Ok(())
    }

    async fn on_complete(&mut self) -> Result<(), Error> {
        self.flush().await;
        Ok(())
    }
}

/// Per-connection figures.
#[derive(Clone, Debug)]
pub struct ConnReport {
    /// The client's number.
    pub client: u32,
    /// Lines the client wrote.
    pub sent: u64,
    /// Lines stored.
    pub stored: u64,
    /// Largest number of this client's lines written but not yet stored.
    pub peak_lag_lines: u64,
    /// Mean time from the client's send stamp to the store.
    pub mean_latency: Duration,
    /// Longest time from the client's send stamp to the store.
    pub max_latency: Duration,
    /// Times the reader stopped reading (channel paused).
    pub pauses: u64,
    /// Total time the reader did not read.
    pub paused: Duration,
    /// When the client finished writing (since the start).
    pub client_done: Duration,
}

/// What a run measured.
#[derive(Clone, Debug)]
pub struct Report {
    /// The configuration that ran.
    pub config: Config,
    /// One entry per connection.
    pub conns: Vec<ConnReport>,
    /// Lines stored in total (counting duplicates).
    pub stored_total: u64,
    /// (client, seq) pairs stored more than once.
    pub duplicates: u64,
    /// (client, seq) pairs never stored.
    pub missing: u64,
    /// The deepest the channel was seen: sampled at every offer (the depth before
    /// it plus one, an upper estimate, and the depth after it).
    pub peak_depth: usize,
    /// The largest line buffer a reader needed, plus its `BufReader`.
    pub peak_read_buffer: usize,
    /// The channel's stats at the end.
    pub queue: QueueStats,
    /// The store's terminal result.
    pub result: Result<(), Error>,
    /// Wall time of the run.
    pub elapsed: Duration,
}

impl Report {
    /// Every line stored exactly once, and the bounds held.
    pub fn assert_lossless(&self) {
        let expected = u64::from(self.config.clients) * u64::from(self.config.lines_per_client);
        assert!(self.result.is_ok(), "the store failed: {:?}", self.result);
        assert_eq!(self.missing, 0, "lines never stored");
        assert_eq!(self.duplicates, 0, "lines stored twice");
        assert_eq!(self.stored_total, expected, "lines stored");
        for conn in &self.conns {
            assert_eq!(conn.sent, u64::from(self.config.lines_per_client));
            assert_eq!(conn.stored, conn.sent, "client {}", conn.client);
        }
        assert!(
            self.peak_depth <= self.config.capacity,
            "peak depth {} above capacity {}",
            self.peak_depth,
            self.config.capacity
        );
        assert!(
            self.peak_read_buffer <= READ_BUFFER + MAX_LINE,
            "read buffer {} above {}",
            self.peak_read_buffer,
            READ_BUFFER + MAX_LINE
        );
        assert_eq!(self.queue.dropped_total(), 0, "the channel dropped lines");
        assert_eq!(self.queue.depth, 0, "lines left in the channel");
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        writeln!(
            f,
            "{} clients × {} lines: stored {} (missing {}, duplicates {}) in {:.2}s; result {:?}",
            c.clients,
            c.lines_per_client,
            self.stored_total,
            self.missing,
            self.duplicates,
            self.elapsed.as_secs_f64(),
            self.result.as_ref().map_err(|e| e.to_string()),
        )?;
        writeln!(
            f,
            "channel: capacity {}, marks {}/{}; peak depth {}; pauses {}; peak read buffer {} B",
            c.capacity, c.high, c.low, self.peak_depth, self.queue.pauses, self.peak_read_buffer
        )?;
        writeln!(f, "channel at the end: {}", self.queue)?;
        writeln!(
            f,
            "per connection (lag = lines written by the client but not yet stored; \
             latency = client send stamp → stored):"
        )?;
        for r in &self.conns {
            writeln!(
                f,
                "  client {}: sent {} stored {} | peak lag {} lines | latency mean {:.1} ms max {:.1} ms | \
                 reader paused {}× for {:.0} ms | client done writing at {:.0} ms",
                r.client,
                r.sent,
                r.stored,
                r.peak_lag_lines,
                ms(r.mean_latency),
                ms(r.max_latency),
                r.pauses,
                ms(r.paused),
                ms(r.client_done),
            )?;
        }
        Ok(())
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Run the server, its clients and the store to the end; see the module docs.
pub async fn run(config: Config) -> Report {
    let start = Instant::now();
    let n = config.clients as usize;
    let conns: Arc<Vec<Conn>> = Arc::new((0..n).map(|_| Conn::default()).collect());
    let ledger = Arc::new(Mutex::new(Ledger {
        times: vec![vec![0u8; config.lines_per_client as usize]; n],
        latency_sum_us: vec![0; n],
        latency_max_us: vec![0; n],
    }));

    // The channel and the slow store behind it.
    let (tx, rx) = ChannelBuilder::new(config.capacity, ChannelPolicy::Backpressure)
        .water_marks(WaterMarks::new(config.high, config.low))
        .build::<Line>();
    let monitor = rx.monitor();
    let store = rx.subscribe_async(Store {
        batch: Vec::with_capacity(config.batch),
        batch_size: config.batch,
        flush_cost: config.flush_cost,
        start,
        conns: conns.clone(),
        ledger: ledger.clone(),
    });

    // The listening socket, with a small receive buffer (inherited by accepted sockets).
    let socket = TcpSocket::new_v4().expect("a socket");
    socket
        .set_recv_buffer_size(config.socket_buffer)
        .expect("SO_RCVBUF");
    socket
        .bind("127.0.0.1:0".parse().expect("an address"))
        .expect("bind 127.0.0.1:0");
    let listener = socket.listen(1_024).expect("listen");
    let addr = listener.local_addr().expect("the bound address");

    let clients: Vec<_> = (0..config.clients)
        .map(|id| tokio::spawn(client(addr, id, config.clone(), start, conns.clone())))
        .collect();

    let progress = config
        .progress
        .map(|every| tokio::spawn(print_progress(every, monitor.clone(), conns.clone())));

    // Accept every client; one reader task per connection.
    let peak_depth = Arc::new(AtomicUsize::new(0));
    let peak_read_buffer = Arc::new(AtomicUsize::new(0));
    let mut readers = Vec::with_capacity(n);
    for _ in 0..n {
        let (stream, _) = listener.accept().await.expect("accept");
        readers.push(tokio::spawn(reader(
            stream,
            tx.clone(),
            monitor.clone(),
            conns.clone(),
            peak_depth.clone(),
            peak_read_buffer.clone(),
        )));
    }
    drop(tx); // the readers hold the only senders now: the channel completes after them
    for client in clients {
        client.await.expect("client task");
    }
    for reader in readers {
        reader.await.expect("reader task");
    }
    let result = store.await;
    if let Some(progress) = progress {
        progress.abort();
    }

    let ledger = ledger.lock().unwrap();
    let (mut duplicates, mut missing, mut stored_total) = (0, 0, 0);
    for times in &ledger.times {
        for &t in times {
            stored_total += u64::from(t);
            duplicates += u64::from(t > 1);
            missing += u64::from(t == 0);
        }
    }
    let conns = conns
        .iter()
        .enumerate()
        .map(|(c, conn)| {
            let stored = conn.stored.load(Ordering::Relaxed);
            ConnReport {
                client: c as u32,
                sent: conn.sent.load(Ordering::Relaxed),
                stored,
                peak_lag_lines: conn.peak_lag.load(Ordering::Relaxed),
                mean_latency: Duration::from_micros(
                    ledger.latency_sum_us[c].checked_div(stored).unwrap_or(0),
                ),
                max_latency: Duration::from_micros(ledger.latency_max_us[c]),
                pauses: conn.pauses.load(Ordering::Relaxed),
                paused: Duration::from_micros(conn.paused_us.load(Ordering::Relaxed)),
                client_done: Duration::from_micros(conn.client_done_us.load(Ordering::Relaxed)),
            }
        })
        .collect();
    Report {
        config,
        conns,
        stored_total,
        duplicates,
        missing,
        peak_depth: peak_depth.load(Ordering::Relaxed),
        peak_read_buffer: peak_read_buffer.load(Ordering::Relaxed),
        queue: monitor.snapshot(),
        result,
        elapsed: start.elapsed(),
    }
}

/// One client: connect, write every line as fast as TCP allows, close.
async fn client(addr: SocketAddr, id: u32, config: Config, start: Instant, conns: Arc<Vec<Conn>>) {
    let socket = TcpSocket::new_v4().expect("a socket");
    socket
        .set_send_buffer_size(config.socket_buffer)
        .expect("SO_SNDBUF");
    let mut stream = socket.connect(addr).await.expect("connect");
    const CHUNK: u32 = 32;
    let mut chunk = Vec::with_capacity(CHUNK as usize * 64);
    let mut seq = 0;
    while seq < config.lines_per_client {
        chunk.clear();
        let end = (seq + CHUNK).min(config.lines_per_client);
        let stamp = micros(start.elapsed());
        for s in seq..end {
            // ~64 bytes a line: ids, the send stamp, padding.
            chunk.extend_from_slice(
                format!("{id} {s} {stamp} payload-payload-payload-payload-payload\n").as_bytes(),
            );
        }
        stream.write_all(&chunk).await.expect("write");
        conns[id as usize]
            .sent
            .fetch_add(u64::from(end - seq), Ordering::Relaxed);
        seq = end;
    }
    stream.shutdown().await.expect("shutdown");
    conns[id as usize]
        .client_done_us
        .store(micros(start.elapsed()), Ordering::Relaxed);
}

/// One connection's reader: read a line, offer it, and stop reading while paused.
async fn reader(
    stream: TcpStream,
    tx: Sender<Line>,
    monitor: QueueMonitor,
    conns: Arc<Vec<Conn>>,
    peak_depth: Arc<AtomicUsize>,
    peak_read_buffer: Arc<AtomicUsize>,
) {
    let mut reader = BufReader::with_capacity(READ_BUFFER, stream);
    let mut text = String::with_capacity(MAX_LINE);
    loop {
        text.clear();
        // At most MAX_LINE bytes per read: a longer line is refused, not buffered.
        let n = (&mut reader)
            .take(MAX_LINE as u64)
            .read_line(&mut text)
            .await
            .expect("read");
        if n == 0 {
            break; // the client closed
        }
        peak_read_buffer.fetch_max(READ_BUFFER + text.capacity(), Ordering::Relaxed);
        let line = parse(&text).unwrap_or_else(|| panic!("a malformed line: {text:?}"));
        let conn = &conns[line.client as usize];
        // The depth this offer can at most bring the channel to (a conservative
        // sample: the send below may pause, and the depth is sampled again after).
        peak_depth.fetch_max(monitor.snapshot().depth + 1, Ordering::Relaxed);
        match tx.send_or_pause(line).await {
            Ok(AfterSend::Flowing) => {}
            Ok(AfterSend::Resumed { paused_for }) => {
                conn.pauses.fetch_add(1, Ordering::Relaxed);
                conn.paused_us
                    .fetch_add(micros(paused_for), Ordering::Relaxed);
            }
            Ok(AfterSend::Closed) | Err(_) => break, // the store is gone
        }
        peak_depth.fetch_max(monitor.snapshot().depth, Ordering::Relaxed);
    }
}

/// `"<client> <seq> <stamp> <padding>\n"` → `Line`.
fn parse(text: &str) -> Option<Line> {
    if !text.ends_with('\n') {
        return None; // longer than MAX_LINE, or cut short
    }
    let mut fields = text.split_ascii_whitespace();
    Some(Line {
        client: fields.next()?.parse().ok()?,
        seq: fields.next()?.parse().ok()?,
        sent_us: fields.next()?.parse().ok()?,
    })
}

/// Print the channel's stats and each connection's lag every `every`.
async fn print_progress(every: Duration, monitor: QueueMonitor, conns: Arc<Vec<Conn>>) {
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    loop {
        tick.tick().await;
        let stats = monitor.snapshot();
        let lags: Vec<String> = conns
            .iter()
            .map(|c| {
                let sent = c.sent.load(Ordering::Relaxed);
                let stored = c.stored.load(Ordering::Relaxed);
                format!("{}", sent.saturating_sub(stored))
            })
            .collect();
        println!(
            "depth {:>4}/{} oldest {:>6.1} ms lag {:>6.1} ms pauses {:>3} | lag per connection (lines) [{}]",
            stats.depth,
            stats.capacity,
            stats.oldest_age.map_or(0.0, ms),
            stats.lag().map_or(f64::INFINITY, ms),
            stats.pauses,
            lags.join(", ")
        );
    }
}
