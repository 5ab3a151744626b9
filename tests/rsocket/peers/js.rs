//! The rsocket-js peer: `js/server.js` and `js/client.js`, run with Node.js against the
//! rsocket-js 0.0.x packages pinned in `js/package.json` (and `js/package-lock.json`),
//! which are installed with `npm ci` into `target/rsocket-peers/js/` on first use.
//!
//! rsocket-js 0.0.x never fragments what it sends (it only reassembles what it
//! receives), so its big requests and answers arrive as single frames larger than the
//! contract's fragment size of 65,536; see the comments at the top of the scripts for
//! this and the other departures from the contract of [`super`].
//!
//! After changing the pinned versions, delete `target/rsocket-peers/js/` so that the
//! next run installs them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::{install_dir, install_once, run_checked, scripts_dir, Running};

/// Starts the rsocket-js server of the interop service (installing rsocket-js first if
/// needed); callers wait for its port with [`Running::port`].
///
/// # Panics
///
/// When Node.js is missing, the installation fails or the server cannot be started.
pub fn server() -> Running {
    let modules = installed();
    Running::spawn(node(&modules).arg(scripts_dir("js").join("server.js")))
}

/// Runs one client scenario of [`super`] (`args`: the scenario and its arguments)
/// with rsocket-js against `127.0.0.1:port` (installing rsocket-js first if needed),
/// and returns the lines it printed (ending with `timeout` when it ran for over a
/// minute).
///
/// # Panics
///
/// When Node.js is missing, the installation fails or the client cannot be started.
pub fn client(port: u16, args: &[&str]) -> Vec<String> {
    let modules = installed();
    Running::spawn(
        node(&modules)
            .arg(scripts_dir("js").join("client.js"))
            .arg(port.to_string())
            .args(args),
    )
    .finish(Duration::from_secs(60))
}

/// Installs rsocket-js once, returning its `node_modules` folder.
fn installed() -> PathBuf {
    require("node");
    let dir = install_dir("js");
    install_once(&dir, install);
    dir.join("node_modules")
}

/// Copies the package files into `dir` and installs exactly the locked versions.
fn install(dir: &Path) -> Result<(), String> {
    require("npm");
    let scripts = scripts_dir("js");
    for file in ["package.json", "package-lock.json"] {
        std::fs::copy(scripts.join(file), dir.join(file))
            .map_err(|e| format!("cannot copy {file} into {}: {e}", dir.display()))?;
    }
    run_checked(
        Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--prefix"])
            .arg(dir),
    )
}

/// A `node` command resolving `require` from `modules`.
fn node(modules: &Path) -> Command {
    let mut command = Command::new("node");
    command.env("NODE_PATH", modules);
    command
}

/// Panics with what to install when `tool` (`node` or `npm`) cannot be run.
fn require(tool: &str) {
    let works = Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success());
    assert!(
        works,
        "the rsocket-js interop tests need Node.js (v18 or newer) with npm: `{tool} --version` \
         did not run; install Node.js and npm (e.g. `apt-get install nodejs npm`, or from \
         https://nodejs.org) so that `node` and `npm` are on PATH"
    );
}
