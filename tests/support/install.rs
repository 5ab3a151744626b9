//! Installing a test's real peer once per machine, into a git-ignored folder under
//! the target directory, and running commands checked. Pulled in with `#[path]` by
//! the test crates that start real peers (`tests/rsocket`, `tests/nats`).

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// The target directory (`CARGO_TARGET_DIR`, or `target/` of the crate), absolute.
pub fn target_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"));
    if target.is_absolute() {
        target
    } else {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(target)
    }
}

/// Runs `install` once per machine for `dir`: it is skipped when `dir/.installed`
/// exists, and concurrent callers (threads of this process or other processes) wait
/// for the one that installs (a lock folder `dir.lock`, created atomically).
///
/// # Panics
///
/// When `install` fails (with its message), or another installer held the lock for
/// more than ten minutes.
pub fn install_once(
    dir: &std::path::Path,
    install: impl FnOnce(&std::path::Path) -> Result<(), String>,
) {
    let marker = dir.join(".installed");
    if marker.exists() {
        return;
    }
    let lock = dir.with_extension("lock");
    std::fs::create_dir_all(dir.parent().expect("install dir has a parent"))
        .expect("create the install dir's parent");
    let started = Instant::now();
    while std::fs::create_dir(&lock).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "another process holds {} for over ten minutes; remove it if it is stale",
            lock.display()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    struct Unlock(PathBuf);
    impl Drop for Unlock {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir(&self.0);
        }
    }
    let _unlock = Unlock(lock);
    if marker.exists() {
        return;
    }
    std::fs::create_dir_all(dir).expect("create the install dir");
    if let Err(message) = install(dir) {
        panic!(
            "installing the peer into {} failed: {message}",
            dir.display()
        );
    }
    std::fs::write(&marker, b"").expect("write the install marker");
}

/// Runs `command`, failing with its output when it does not succeed.
pub fn run_checked(command: &mut Command) -> Result<(), String> {
    let output = command
        .output()
        .map_err(|e| format!("cannot run {command:?}: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{command:?} failed ({}):\n{}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// `python3 -m pip install --target dir` of exactly `package` (a pinned
/// `name==version`; `--no-deps`, so nothing unpinned comes along).
pub fn pip_install(dir: &std::path::Path, package: &str) -> Result<(), String> {
    run_checked(
        Command::new("python3")
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "--target",
            ])
            .arg(dir)
            .arg(package),
    )
}
