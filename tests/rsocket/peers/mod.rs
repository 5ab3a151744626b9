//! Real RSocket peers for the interop tests: rsocket-py and rsocket-js, installed on
//! first use into `target/rsocket-peers/` (git-ignored, reused afterwards) and run as
//! child processes on loopback.
//!
//! # The interop service
//!
//! Every server in these tests (weir's, rsocket-py's, rsocket-js's) answers the same
//! requests, so each interaction can be run in both directions with the same
//! expectations. Data is UTF-8 text unless said otherwise.
//!
//! * request-response
//!   * `echo:<s>`: answers `<s>`, with the request's metadata echoed;
//!   * `fail:<msg>`: fails with an application error whose message is `<msg>`;
//!   * `big:<n>`: answers `n` bytes, byte `i` being `i % 251`;
//!   * `len:<anything>`: answers `<length>:<sum>`, the request data's length in bytes
//!     and the sum of its bytes modulo 2^32 (both decimal);
//!   * `fnf-count`: answers the decimal number of fire-and-forget requests received
//!     so far on any connection.
//! * fire-and-forget: any data; counted.
//! * request-stream
//!   * `<n>` (decimal): items `0`, `1`, …, `n-1`, then complete;
//!   * `fail-after:<k>`: items `0` … `k-1`, then an application error `stream failed`;
//!   * `infinite`: items `0`, `1`, … for as long as they are requested.
//!
//!   Every server emits only what was requested (REQUEST_N).
//! * request-channel: answers each incoming item with its data in upper case, and
//!   completes when the incoming stream completes.
//!
//! # Client scenarios (a peer's client against a server of these tests)
//!
//! A client is run as `client <port> <scenario> [args…]` and prints one line per
//! event, then exits 0 (exit status non-zero only when the client itself broke):
//!
//! * `response <data>`: request-response; prints `response <data>` (and
//!   `metadata <m>` before it when the answer has metadata) or `error <message>`.
//! * `fnf <data>`: fire-and-forget; prints `sent`.
//! * `stream <data> <batch> [<cancel-after>]`: request-stream whose subscriber requests
//!   `<batch>` items at first and `<batch>` more each time it received `<batch>`;
//!   prints `item <data>` per item, then `complete` or `error <message>`; with
//!   `<cancel-after>`, cancels after that many items and prints `cancelled`.
//! * `big <n>`: request-response `len:` followed by `n - 4` bytes of `x` (so the
//!   request is `n` bytes), client fragment size 65,536; prints `response <data>`.
//! * `bigreply <n>`: request-response `big:<n>`; prints `len <bytes>` and `pattern ok`
//!   or `pattern bad`.
//! * `channel <a,b,c>`: request-channel sending the comma-separated items then
//!   completing; prints `item <data>` per answer, then `complete` or `error <message>`.
//!
//! A server is started as `server` with fragment size 65,536, binds 127.0.0.1 on a free
//! port, prints `port <n>` once it listens, and runs until killed.

pub mod js;
pub mod python;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[path = "../../support/install.rs"]
pub mod install;
pub use install::{install_once, run_checked};

/// Where the peers are installed: `<target dir>/rsocket-peers/<name>`.
pub fn install_dir(name: &str) -> PathBuf {
    install::target_dir().join("rsocket-peers").join(name)
}

/// The folder of this module's scripts (`python/`, `js/`).
pub fn scripts_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/rsocket/peers")
        .join(name)
}

/// A peer process, killed when dropped.
pub struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Running {
    /// Starts `command` with piped stdout (stderr inherited, so a failing peer is
    /// visible in the test's output).
    pub fn spawn(command: &mut Command) -> Running {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {command:?}: {e}"));
        let stdout: ChildStdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Running { child, lines }
    }

    /// The next line of output, or `None` once the process closed its output or
    /// `timeout` passed.
    pub fn line(&self, timeout: Duration) -> Option<String> {
        self.lines.recv_timeout(timeout).ok()
    }

    /// Every remaining line, until the process exits (killed after `timeout`).
    pub fn finish(mut self, timeout: Duration) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        let mut lines = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => lines.push(line),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    lines.push("timeout".to_owned());
                    break;
                }
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        lines
    }

    /// Waits for the server's `port <n>` line.
    ///
    /// # Panics
    ///
    /// When the server does not print it within a minute.
    pub fn port(&self) -> u16 {
        let line = self
            .line(Duration::from_secs(60))
            .expect("the peer server printed `port <n>` within a minute");
        line.strip_prefix("port ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("expected `port <n>`, got {line:?}"))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
