//! Running processes for the figures, on top of the tests' harness. The harness's `run` and
//! `Background` are not used for what a figure times: `run` learns of an exit by polling every
//! 5 ms and `Background` every 2 ms, with output sent to files of its own, where a figure needs
//! the exit at once (`waitpid`, or a 0.2 ms poll) and its stamps written where it says.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use rlock_test_support::{RedisServer, wait_until_every};

pub const RLOCK: &str = env!("CARGO_BIN_EXE_rlock");

/// Generous limit for anything the benchmark waits for.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// How often the benchmark looks again at what it waits for: a figure that hands the lock over
/// the moment a waiter is seen parked must see it at once.
const POLL: Duration = Duration::from_micros(200);

/// Ends the benchmark by a panic, so the guards stop every process it started.
pub fn fail(msg: &str) -> ! {
    panic!("compare: {msg}");
}

/// Polls `cond` every 0.2 ms until it holds; panics naming `what` after `PATIENCE`.
pub fn wait_for(what: &str, cond: impl FnMut() -> bool) {
    wait_until_every(POLL, what, PATIENCE, cond);
}

/// A background process (in a process group of its own) that is killed, group and all, on drop.
pub struct Bg(pub Child);

impl Bg {
    pub fn spawn(cmd: &mut Command) -> Bg {
        Bg(cmd
            .stdin(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| fail(&format!("cannot spawn {:?}: {e}", cmd.get_program()))))
    }

    pub fn pid(&self) -> i32 {
        self.0.id() as i32
    }

    /// Waits for the exit, polling every 0.2 ms; fails after `PATIENCE`.
    pub fn wait(&mut self, what: &str) -> ExitStatus {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.0.try_wait().expect("try_wait") {
                return status;
            }
            if Instant::now() >= deadline {
                fail(&format!("{what} did not finish within {PATIENCE:?}"));
            }
            thread::sleep(POLL);
        }
    }
}

impl Drop for Bg {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = killpg(Pid::from_raw(self.pid()), Signal::SIGKILL);
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// `rlock --url URL ARGS…`, with the harness's clean environment (an inherited RLOCK_TOKEN
/// would make it reentrant).
pub fn rlock(redis: &RedisServer, args: &[&str]) -> Command {
    let mut cmd = rlock_test_support::rlock_at(redis);
    cmd.args(args);
    cmd
}

/// Runs to completion; returns stdout, or fails the benchmark with what went wrong.
pub fn output(cmd: &mut Command) -> String {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| fail(&format!("cannot run {:?}: {e}", cmd.get_program())));
    if !out.status.success() {
        fail(&format!(
            "{:?} {:?} failed ({}): {}",
            cmd.get_program(),
            cmd.get_args().collect::<Vec<_>>(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs to completion with output discarded; fails the benchmark if it fails.
pub fn quiet(cmd: &mut Command) {
    let status = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap_or_else(|e| fail(&format!("cannot run {:?}: {e}", cmd.get_program())));
    if !status.success() {
        fail(&format!(
            "{:?} {:?} failed: {status}",
            cmd.get_program(),
            cmd.get_args().collect::<Vec<_>>()
        ));
    }
}

/// Runs to completion with output discarded; fails the benchmark unless it exits with `code`.
pub fn exits_with(cmd: &mut Command, code: i32) {
    let status = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap_or_else(|e| fail(&format!("cannot run {:?}: {e}", cmd.get_program())));
    if status.code() != Some(code) {
        fail(&format!(
            "{:?} {:?}: {status}, not exit {code}",
            cmd.get_program(),
            cmd.get_args().collect::<Vec<_>>()
        ));
    }
}

pub fn wall(f: impl FnOnce()) -> Duration {
    let t = Instant::now();
    f();
    t.elapsed()
}

pub fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos() as i128
}

/// The flocks on `file` in /proc/locks, told by its inode (`MAJOR:MINOR:INODE`), as other
/// programs on the machine (cargo among them) take flocks of their own: its holder and waiters,
/// or only the waiters (`->`, blocked). The file is created when missing.
pub fn flocks_on(file: &std::path::Path, waiting_only: bool) -> usize {
    use std::os::unix::fs::MetadataExt;
    let Ok(inode) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .and_then(|f| f.metadata())
        .map(|m| m.ino().to_string())
    else {
        fail(&format!("cannot open {}", file.display()));
    };
    std::fs::read_to_string("/proc/locks")
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            l.contains("FLOCK")
                && (!waiting_only || l.contains("->"))
                && l.split_whitespace().any(|field| {
                    field.matches(':').count() == 2 && field.rsplit(':').next() == Some(&inode)
                })
        })
        .count()
}
