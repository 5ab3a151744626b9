//! The rsocket-py peer: `python/server.py` and `python/client.py`, run with `python3`
//! against the rsocket-py release pinned in `RSOCKET_PY` (pure Python, with no required
//! dependencies), which is installed with `pip install --target` into
//! `target/rsocket-peers/python/` on first use and put on `PYTHONPATH`.
//!
//! rsocket-py 0.4.20 drops the NEXT flag of an empty PAYLOAD; both scripts patch that
//! at start-up. See the comments at the top of the scripts for this and the other
//! details of how they meet the contract of [`super`].
//!
//! After changing the pinned version, delete `target/rsocket-peers/python/` so that the
//! next run installs it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::{install, install_dir, install_once, scripts_dir, Running};

/// The pinned rsocket-py release (PyPI package `rsocket`); the scripts were written
/// and checked against it.
const RSOCKET_PY: &str = "rsocket==0.4.20";

/// Starts the rsocket-py server of the interop service (installing rsocket-py first if
/// needed); callers wait for its port with [`Running::port`].
///
/// # Panics
///
/// When `python3` (with pip) is missing, the installation fails or the server cannot
/// be started.
pub fn server() -> Running {
    let packages = installed();
    Running::spawn(python(&packages).arg(scripts_dir("python").join("server.py")))
}

/// Runs one client scenario of [`super`] (`args`: the scenario and its arguments)
/// with rsocket-py against `127.0.0.1:port` (installing rsocket-py first if needed),
/// and returns the lines it printed (ending with `timeout` when it ran for over a
/// minute; the script itself gives up after 30 seconds, printing `timeout`).
///
/// # Panics
///
/// When `python3` (with pip) is missing, the installation fails or the client cannot
/// be started.
pub fn client(port: u16, args: &[&str]) -> Vec<String> {
    let packages = installed();
    Running::spawn(
        python(&packages)
            .arg(scripts_dir("python").join("client.py"))
            .arg(port.to_string())
            .args(args),
    )
    .finish(Duration::from_secs(60))
}

/// Installs rsocket-py once, returning the folder to put on `PYTHONPATH`.
fn installed() -> PathBuf {
    require(&["--version"], "`python3 --version` did not run");
    let dir = install_dir("python");
    install_once(&dir, install);
    dir
}

/// Installs exactly the pinned rsocket-py into `dir` (`--no-deps`: it needs none, so
/// nothing unpinned comes along).
fn install(dir: &Path) -> Result<(), String> {
    require(
        &["-m", "pip", "--version"],
        "`python3 -m pip --version` did not run",
    );
    install::pip_install(dir, RSOCKET_PY)
}

/// A `python3` command importing from `packages`, with unbuffered output.
fn python(packages: &Path) -> Command {
    let mut command = Command::new("python3");
    command
        .env("PYTHONPATH", packages)
        .env("PYTHONUNBUFFERED", "1");
    command
}

/// Panics with what to install when `python3 <args>` cannot be run successfully.
fn require(args: &[&str], failed: &str) {
    let works = Command::new("python3")
        .args(args)
        .output()
        .is_ok_and(|output| output.status.success());
    assert!(
        works,
        "the rsocket-py interop tests need Python 3.8 or newer with pip: {failed}; install \
         them (e.g. `apt-get install python3 python3-pip`, or from https://www.python.org) \
         so that `python3` and `python3 -m pip` work"
    );
}
