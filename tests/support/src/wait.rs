//! Waiting on deadlines instead of fixed sleeps, and whether a process lives.

use std::fs;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal;
use nix::unistd::Pid;

use crate::limits::POLL;
use crate::spawn::proc_state;

/// Polls `cond` about every 10 ms until it holds; panics naming `what` after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, cond: impl FnMut() -> bool) {
    wait_until_every(POLL, what, timeout, cond);
}

/// `wait_until` polling every `poll`: the benchmark polls much faster, since some of its figures
/// act the moment a condition holds (a waiter seen parked is handed the lock at once).
pub fn wait_until_every(
    poll: Duration,
    what: &str,
    timeout: Duration,
    mut cond: impl FnMut() -> bool,
) {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        thread::sleep(poll);
    }
}

/// Waits until `path` exists and is non-empty, and returns its contents. A writer that needs
/// the whole content seen should write elsewhere and rename, or the reader should wait for a
/// terminator with `wait_until`.
pub fn wait_for_file(path: impl AsRef<Path>, timeout: Duration) -> String {
    let path = path.as_ref();
    let mut contents = String::new();
    wait_until(
        &format!("file {} to be written", path.display()),
        timeout,
        || match fs::read_to_string(path) {
            Ok(s) if !s.is_empty() => {
                contents = s;
                true
            }
            _ => false,
        },
    );
    contents
}

/// Whether `pid` names a live process; a zombie (exited, not yet reaped) counts as dead.
pub fn pid_alive(pid: i32) -> bool {
    assert!(pid > 0, "pid_alive({pid}): not a single process id");
    match signal::kill(Pid::from_raw(pid), None) {
        Ok(()) | Err(Errno::EPERM) => !matches!(proc_state(pid), Some('Z' | 'X') | None),
        Err(_) => false,
    }
}
