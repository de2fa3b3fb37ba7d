//! `rlock exec` against a real Redis: status passthrough, the child's environment and stdio,
//! renewal, stopping the child when the lock is lost (deleted, taken over, Redis frozen or
//! restarted), signal forwarding (also from a real terminal), parent death, reentrancy, mutual
//! exclusion with fencing, the checks on exec's own options, and the command's whole process group.
//!
//! Children are `sh -c` scripts that report what they saw in files under a temporary directory
//! (`$D`); the test polls for those files with deadlines instead of sleeping. Every process a
//! test leaves running while it acts leads a process group of its own, and that group (and the
//! group of rlock's child, whose pid the child writes to `$D/pid`) is killed on drop, so a
//! failing test leaks nothing.

mod containment;
mod dead_mans_switch;
mod guardian;
mod job_control;
mod lock_loss;
mod mutual_exclusion;
mod options;
mod orphans_and_interruptions;
mod process_group;
mod reentrancy;
mod signals;
mod status_and_stdio;
mod threat_model;
mod time_limit;

use crate::common::{
    Drain, Output, RedisServer, drain, pid_alive, rlock_at, run, wait_for_file, wait_until,
};
use nix::sys::signal::{self, SigHandler, Signal};
use nix::unistd::Pid;
use std::fs::{self, File};
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The binary under test, for scripts that run it nested inside `rlock exec`.
const RLOCK_BIN: &str = env!("CARGO_BIN_EXE_rlock");
/// The Redis key of lock `k` under the default prefix.
const LOCK: &str = "rlock:k";
/// Time for a file or a process to show up when nothing should hold it back.
const SOON: Duration = Duration::from_secs(10);
/// Time for a whole `rlock exec` run to finish once it has been told to.
const FINISH: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// `rlock --url … exec -k k OPTS -- sh -c SCRIPT`, with `$D` (the test's directory), `$RL` (the
/// rlock binary) and `$URL` (the server) in the environment for the script.
fn exec_sh(server: &RedisServer, dir: &Path, opts: &[&str], script: &str) -> Command {
    let mut cmd = rlock_at(server);
    cmd.args(["exec", "-k", "k"])
        .args(opts)
        .args(["--", "sh", "-c", script]);
    script_env(&mut cmd, server, dir);
    cmd
}

/// Starts `exec_sh(…)` in the background; on drop it is killed along with the process group of
/// its child, if the child wrote its pid to `$D/pid` (every looping child script does).
fn start_exec(server: &RedisServer, dir: &Path, opts: &[&str], script: &str) -> Running {
    Running::spawn(&mut exec_sh(server, dir, opts, script), Stdio::null())
        .kill_group_from(dir.join("pid"))
}

/// `sh -c SCRIPT` with the same clean environment as `rlock()` and `$D`, `$RL`, `$URL`.
fn sh(server: &RedisServer, dir: &Path, script: &str) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(script);
    for (name, _) in std::env::vars_os() {
        if name.as_encoded_bytes().starts_with(b"RLOCK_") {
            cmd.env_remove(&name);
        }
    }
    cmd.env_remove("REDIS_URL").env_remove("REDISCLI_AUTH");
    script_env(&mut cmd, server, dir);
    cmd
}

fn script_env(cmd: &mut Command, server: &RedisServer, dir: &Path) {
    cmd.env("D", dir)
        .env("RL", RLOCK_BIN)
        .env("URL", server.url());
}

fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("rlock-exec-test-")
        .tempdir()
        .expect("create temp dir")
}

/// Reads a file that a child wrote (empty string if it does not exist).
fn read(path: impl AsRef<Path>) -> String {
    fs::read_to_string(path).unwrap_or_default()
}

/// Creates a marker file a child script polls for.
fn touch(path: impl AsRef<Path>) {
    File::create(path).expect("create marker file");
}

/// Waits for a file holding a pid and returns the pid.
fn wait_for_pid(path: impl AsRef<Path>) -> i32 {
    let text = wait_for_file(path, SOON);
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("not a pid: {text:?} ({e})"))
}

/// Nanoseconds since the epoch on CLOCK_REALTIME, the clock `date +%s%N` reads in a child.
fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos() as i128
}

fn ms(ns: i128) -> i128 {
    ns / 1_000_000
}

/// The lock key's value and PTTL, read in one MULTI so both describe one moment.
fn lock_state(conn: &mut redis::Connection, key: &str) -> (Option<String>, i64) {
    redis::pipe()
        .atomic()
        .cmd("GET")
        .arg(key)
        .cmd("PTTL")
        .arg(key)
        .query(conn)
        .expect("GET + PTTL of the lock key")
}

/// Follows a lock key while its holder renews it: every sample must show `token` with a
/// positive PTTL of at most `ttl`; a PTTL that went up since the previous sample is a renewal.
struct LockWatch {
    conn: redis::Connection,
    key: String,
    token: String,
    ttl_ms: i64,
    last_pttl: Option<i64>,
    renewals: usize,
    samples: usize,
}

impl LockWatch {
    fn new(server: &RedisServer, key: &str, token: &str, ttl: Duration) -> Self {
        LockWatch {
            conn: server.conn(),
            key: key.into(),
            token: token.into(),
            ttl_ms: ttl.as_millis() as i64,
            last_pttl: None,
            renewals: 0,
            samples: 0,
        }
    }

    /// One sample, checked. `still_running` is asked *after* the sample: when it says the
    /// holder had already finished, the sample is discarded (the lock may have been released).
    fn sample(&mut self, still_running: impl FnOnce() -> bool) -> bool {
        let (value, pttl) = lock_state(&mut self.conn, &self.key);
        if !still_running() {
            return false;
        }
        assert_eq!(
            value.as_deref(),
            Some(self.token.as_str()),
            "lock {} lost its token (PTTL {pttl}) after {} samples and {} renewals",
            self.key,
            self.samples,
            self.renewals
        );
        assert!(
            pttl > 0 && pttl <= self.ttl_ms,
            "lock {} has PTTL {pttl}, expected 0 < PTTL <= {}",
            self.key,
            self.ttl_ms
        );
        if let Some(last) = self.last_pttl
            && pttl > last + 20
        {
            self.renewals += 1;
        }
        self.last_pttl = Some(pttl);
        self.samples += 1;
        true
    }

    /// Samples until `n` more renewals have been seen (each sample checked), within `timeout`.
    fn wait_renewals(&mut self, n: usize, timeout: Duration) {
        let target = self.renewals + n;
        wait_until(
            &format!("{n} renewals of {} by its holder", self.key),
            timeout,
            || {
                self.sample(|| true);
                self.renewals >= target
            },
        );
    }
}

fn drained(d: &Option<Drain>) -> String {
    d.as_ref()
        .map(|(buf, _)| String::from_utf8_lossy(&buf.lock().unwrap()).into_owned())
        .unwrap_or_default()
}

/// A process the test started that runs while the test acts on it. It leads a process group
/// of its own; on drop that group, and the groups whose leaders' pids were written to
/// `pidfiles` (rlock's child), are killed with SIGKILL.
struct Running {
    child: Child,
    what: String,
    pidfiles: Vec<PathBuf>,
    out: Option<Drain>,
    err: Option<Drain>,
    exited: bool,
}

impl Running {
    /// Spawns `cmd` as a process group leader, stdout and stderr captured.
    fn spawn(cmd: &mut Command, stdin: Stdio) -> Self {
        cmd.process_group(0)
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut r = Self::spawn_raw(cmd);
        r.out = r.child.stdout.take().map(drain);
        r.err = r.child.stderr.take().map(drain);
        r
    }

    /// Spawns `cmd` as it is configured; it must make itself a group leader (e.g. setsid).
    fn spawn_raw(cmd: &mut Command) -> Self {
        let what = format!(
            "{:?} {:?}",
            cmd.get_program(),
            cmd.get_args().collect::<Vec<_>>()
        );
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {what}: {e}"));
        Running {
            child,
            what,
            pidfiles: Vec::new(),
            out: None,
            err: None,
            exited: false,
        }
    }

    /// Also kill, on drop, the process group led by the pid written to `path`.
    fn kill_group_from(mut self, path: PathBuf) -> Self {
        self.pidfiles.push(path);
        self
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn exited(&mut self) -> bool {
        self.exited || self.child.try_wait().expect("try_wait").is_some()
    }

    /// Polls `cond` about every 10 ms until it holds; fails at once, with the process's output,
    /// if the process exits first, and after `timeout` otherwise.
    fn wait_for(&mut self, what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + timeout;
        loop {
            if cond() {
                return;
            }
            if self.exited() {
                // What the condition waits for may have come just before the exit.
                if cond() {
                    return;
                }
                let (out, _) = self.wait(SOON);
                panic!("{} exited before {what}:\n{out}", self.what);
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {timeout:?} waiting for {what}\n--- stdout ---\n{}\n--- stderr ---\n{}",
                drained(&self.out),
                drained(&self.err)
            );
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits until a child script has written `path` (write-then-rename) and returns it.
    fn file(&mut self, path: impl AsRef<Path>, timeout: Duration) -> String {
        let path = path.as_ref();
        let mut text = String::new();
        self.wait_for(
            &format!("{} to be written", path.display()),
            timeout,
            || {
                text = read(path);
                !text.is_empty()
            },
        );
        text
    }

    /// Waits for a child started with RUN_30S (or the like) to be ready; returns its token.
    fn ready(&mut self, dir: &Path) -> String {
        self.wait_for("the child to start", SOON, || dir.join("ready").exists());
        read(dir.join("token")).trim().to_string()
    }

    /// Waits for the process to exit; returns what it left behind and when it was seen gone.
    fn wait(&mut self, timeout: Duration) -> (Output, Instant) {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not exit within {timeout:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
                self.what,
                drained(&self.out),
                drained(&self.err)
            );
            thread::sleep(Duration::from_millis(5));
        };
        let at = Instant::now();
        self.exited = true;
        for d in [&self.out, &self.err].into_iter().flatten() {
            wait_until(
                &format!("the stdout/stderr of {} to close", self.what),
                SOON,
                || d.1.is_finished(),
            );
        }
        use std::os::unix::process::ExitStatusExt;
        let out = Output {
            code: status
                .code()
                .or(status.signal().map(|s| -s))
                .expect("exit code or signal"),
            stdout: drained(&self.out),
            stderr: drained(&self.err),
        };
        (out, at)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = signal::killpg(Pid::from_raw(self.pid()), Signal::SIGKILL);
        for path in &self.pidfiles {
            if let Ok(pid) = read(path).trim().parse::<i32>()
                && pid > 1
            {
                let _ = signal::killpg(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
        if !self.exited {
            let _ = self.child.wait();
        }
    }
}

/// Starts `sh -c LEADER` (see `sh`) as the leader of a session of its own whose controlling
/// terminal is a new pty, like a login shell, with `$CHILD` set to `child` and stdin, stdout and
/// stderr on the pty. Returns the session (which kills the group whose leader's pid was written
/// to `$D/pid` on drop), the pty's master, and what the terminal shows, for failure messages: it
/// ends with EIO once the session is gone.
fn pty_session(
    server: &RedisServer,
    dir: &Path,
    leader: &str,
    child: &str,
) -> (Running, File, Drain) {
    let pty = nix::pty::openpty(None, None).expect("openpty");
    let slave: OwnedFd = pty.slave;
    let master = File::from(pty.master);
    let mut cmd = sh(server, dir, leader);
    cmd.env("CHILD", child)
        .stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave.try_clone().unwrap()));
    // SAFETY: only async-signal-safe calls (setsid, ioctl) between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()?;
            if nix::libc::ioctl(0, nix::libc::TIOCSCTTY, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let session = Running::spawn_raw(&mut cmd).kill_group_from(dir.join("pid"));
    // Only the session may hold the slave open, so that the master reads EIO once it is gone.
    drop(cmd);
    drop(slave);
    let screen = drain(master.try_clone().unwrap());
    (session, master, screen)
}

/// A child script that writes its pid, its token, then a ready marker, and runs until killed
/// (at most 30 s).
const RUN_30S: &str =
    r#"echo $$ > "$D/pid"; echo "$RLOCK_TOKEN" > "$D/token"; : > "$D/ready"; sleep 30"#;

/// A child that logs each of the forwarded signals it gets and exits 7 once `$D/stop` exists.
const SIGNAL_LOGGER: &str = r#"for s in TERM INT HUP QUIT USR1 USR2; do trap "echo $s >> \"\$D/log\"" $s; done
echo $$ > "$D/pid"; echo "$RLOCK_TOKEN" > "$D/token"; : > "$D/ready"
while [ ! -e "$D/stop" ]; do sleep 0.05; done
sleep 0.2
exit 7"#;

fn log_lines(dir: &Path) -> Vec<String> {
    read(dir.join("log")).lines().map(String::from).collect()
}

/// A long lease renewed often: a loss Redis reports must be acted on at the next renewal, long
/// before the lease (9.9 s) minus the grace (2.5 s) would stop the child anyway.
const OFTEN: &[&str] = &["--ttl", "10s", "--renew-every", "500ms"];

/// From the loss to rlock's exit: one renewal interval and slack for a loaded machine (the
/// child dies of its first signal, so the grace does not come into it).
const LOSS_NOTICED: Duration = Duration::from_millis(500 + 1500);
