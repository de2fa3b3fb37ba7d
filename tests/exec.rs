//! `rlock exec` against a real Redis: status passthrough, the child's environment and stdio,
//! renewal, stopping the child when the lock is lost (deleted, taken over, Redis frozen or
//! restarted), signal forwarding (also from a real terminal), parent death, reentrancy, mutual
//! exclusion with fencing, and the checks on exec's own options.
//!
//! Children are `sh -c` scripts that report what they saw in files under a temporary directory
//! (`$D`); the test polls for those files with deadlines instead of sleeping. Every process a
//! test leaves running while it acts leads a process group of its own, and that group (and the
//! group of rlock's child, whose pid the child writes to `$D/pid`) is killed on drop, so a
//! failing test leaks nothing.

mod common;

use std::fs::{self, File};
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{
    Drain, Output, RedisServer, drain, pid_alive, rlock_at, run, wait_for_file, wait_until,
};
use nix::sys::signal::{self, SigHandler, Signal};
use nix::unistd::Pid;

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

// ---------------------------------------------------------------------------------------------
// 1. Status passthrough
// ---------------------------------------------------------------------------------------------

#[test]
fn exit_status_of_the_child_is_passed_through_and_the_lock_released() {
    let server = RedisServer::start();
    let dir = tempdir();
    for (script, want) in [
        ("exit 0", 0),
        ("exit 3", 3),
        ("exit 42", 42),
        ("kill -KILL $$", 137),
        ("kill -TERM $$", 143),
    ] {
        let out = run(&mut exec_sh(&server, dir.path(), &[], script));
        assert_eq!(out.code, want, "sh -c '{script}'\n{out}");
        assert!(
            !server.exists(LOCK),
            "lock not released after sh -c '{script}'"
        );
    }

    // 126: a file that is there but not executable.
    let script = dir.path().join("not-executable.sh");
    fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o644)).unwrap();
    let out = run(rlock_at(&server)
        .args(["exec", "-k", "k", "--"])
        .arg(&script));
    assert_eq!(out.code, 126, "{out}");
    assert!(
        out.stderr.starts_with("rlock: ") && out.stderr.trim_end().lines().count() == 1,
        "want one rlock: line on stderr\n{out}"
    );
    assert!(!server.exists(LOCK), "lock not released after 126");

    // 127: no such command.
    let missing = "rlock-test-no-such-command";
    let out = run(rlock_at(&server).args(["exec", "-k", "k", "--", missing]));
    assert_eq!(out.code, 127, "{out}");
    assert!(
        out.stderr.starts_with("rlock: ") && out.stderr.contains(missing),
        "want one rlock: line naming the command\n{out}"
    );
    assert!(!server.exists(LOCK), "lock not released after 127");

    // 2: no command at all.
    for args in [&["exec", "-k", "k"][..], &["exec", "-k", "k", "--"]] {
        let out = run(rlock_at(&server).args(args));
        assert_eq!(out.code, 2, "{args:?}\n{out}");
        assert!(!server.exists(LOCK), "{args:?} left a lock");
    }
}

// ---------------------------------------------------------------------------------------------
// 2. The child's environment and stdio
// ---------------------------------------------------------------------------------------------

#[test]
fn child_gets_key_token_and_fence_and_the_token_is_the_one_in_redis() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let script = r#"echo $$ > "$D/pid"
printf '%s\n%s\n%s\n' "$RLOCK_KEY" "$RLOCK_TOKEN" "$RLOCK_FENCE" > "$D/env.tmp"
mv "$D/env.tmp" "$D/env"
while [ ! -e "$D/go" ]; do sleep 0.02; done"#;

    let mut fences = Vec::new();
    for round in 0..2 {
        let _ = fs::remove_file(d.join("env"));
        let _ = fs::remove_file(d.join("go"));
        let mut rl = start_exec(&server, d, &[], script);
        let env = rl.file(d.join("env"), SOON);
        let lines: Vec<&str> = env.lines().collect();
        assert_eq!(lines.len(), 3, "child env: {env:?}");
        assert_eq!(lines[0], "k", "RLOCK_KEY is the lock's name");
        assert!(!lines[1].is_empty(), "RLOCK_TOKEN is empty");
        assert_eq!(
            server.get(LOCK).as_deref(),
            Some(lines[1]),
            "round {round}: RLOCK_TOKEN is not the value of {LOCK} in Redis"
        );
        let fence: i64 = lines[2]
            .parse()
            .unwrap_or_else(|e| panic!("RLOCK_FENCE {:?} is not an integer: {e}", lines[2]));
        fences.push((fence, lines[1].to_string()));
        touch(d.join("go"));
        let (out, _) = rl.wait(FINISH);
        assert_eq!(out.code, 0, "{out}");
        assert!(!server.exists(LOCK), "lock not released");
    }
    assert!(
        fences[1].0 > fences[0].0,
        "fence did not increase: {fences:?}"
    );
    assert_ne!(fences[0].1, fences[1].1, "two grants, one token");
}

#[test]
fn stdin_stdout_and_stderr_are_the_childs() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    // The child's fds 0-2 are rlock's own (the same pipes, not relayed copies). They are read
    // from `cat`, which the child runs with its own fds while it waits for stdin.
    let script = r#"echo $$ > "$D/pid"; cat; echo child-stderr >&2"#;
    let mut rl = Running::spawn(&mut exec_sh(&server, d, &[], script), Stdio::piped())
        .kill_group_from(d.join("pid"));
    let child = wait_for_pid(d.join("pid"));
    let mut cat = 0;
    rl.wait_for("the child to run cat", SOON, || {
        let children = read(format!("/proc/{child}/task/{child}/children"));
        cat = children.trim().parse().unwrap_or(0);
        cat > 0 && read(format!("/proc/{cat}/comm")).trim() == "cat"
    });
    let fds = |pid: u32| -> Vec<String> {
        (0..3)
            .map(|n| match fs::read_link(format!("/proc/{pid}/fd/{n}")) {
                Ok(target) => target.display().to_string(),
                Err(e) => panic!("fd {n} of pid {pid}: {e}"),
            })
            .collect()
    };
    assert_eq!(
        fds(cat),
        fds(rl.child.id()),
        "the child's stdin, stdout, stderr are not rlock's"
    );

    // More than a pipe holds, so it must stream through while both run.
    let data: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
    let mut stdin = rl.child.stdin.take().expect("piped stdin");
    let input = data.clone();
    let writer = thread::spawn(move || {
        stdin.write_all(input.as_bytes()).expect("write to stdin");
        // Dropped here: EOF for cat.
    });
    let (out, _) = rl.wait(FINISH);
    writer.join().unwrap();
    assert_eq!(out.code, 0, "stderr: {}", out.stderr);
    assert!(
        out.stdout == data,
        "stdout is not what went into stdin ({} bytes in, {} out)",
        data.len(),
        out.stdout.len()
    );
    assert_eq!(out.stderr, "child-stderr\n");
    assert!(!server.exists(LOCK), "lock not released");
}

#[test]
fn the_child_starts_with_no_blocked_signals_sigpipe_at_default_and_rlocks_environment() {
    let server = RedisServer::start();
    // rlock blocks the signals it reads from its signalfd, and Rust ignores SIGPIPE: the
    // command must start with neither (a blocked SIGTERM would make it unkillable, an
    // ignored SIGPIPE would keep `yes | head` running).
    let out = run(rlock_at(&server)
        .env("RLOCK_TEST_PASSED_ON", "yes, with spaces")
        .args([
            "exec",
            "-k",
            "k",
            "--",
            "cat",
            "/proc/self/status",
            "/proc/self/environ",
        ]));
    assert_eq!(out.code, 0, "{out}");
    let field = |name: &str| -> u64 {
        let line = out
            .stdout
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in /proc/self/status\n{out}"));
        u64::from_str_radix(line[name.len()..].trim(), 16).unwrap()
    };
    assert_eq!(
        field("SigBlk:"),
        0,
        "the command starts with signals blocked"
    );
    let sigpipe = 1u64 << (nix::sys::signal::Signal::SIGPIPE as u32 - 1);
    assert_eq!(
        field("SigIgn:") & sigpipe,
        0,
        "the command starts with SIGPIPE ignored"
    );
    let environ: Vec<&str> = out.stdout.split('\0').collect();
    assert!(
        environ
            .iter()
            .any(|v| v.ends_with("RLOCK_TEST_PASSED_ON=yes, with spaces")),
        "rlock's environment is not passed on\n{out}"
    );
    assert!(environ.contains(&"RLOCK_KEY=k"), "{out}");
}

#[test]
fn a_parent_that_ignores_sigchld_does_not_lose_the_childs_status() {
    let server = RedisServer::start();
    // An ignored SIGCHLD is inherited through exec, and makes the kernel reap children
    // unasked: rlock must still see its child end, and with what status.
    let mut cmd = rlock_at(&server);
    cmd.args(["exec", "-k", "k", "--", "sh", "-c", "exit 3"]);
    // SAFETY: only sets a signal disposition between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            signal::signal(Signal::SIGCHLD, SigHandler::SigIgn)
                .map(drop)
                .map_err(std::io::Error::from)
        });
    }
    let out = run(&mut cmd);
    assert_eq!(out.code, 3, "{out}");
    assert!(!server.exists(LOCK), "lock not released");
}

// ---------------------------------------------------------------------------------------------
// 3. Renewal
// ---------------------------------------------------------------------------------------------

#[test]
fn watchdog_keeps_a_1s_lock_alive_across_a_3s_child() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let started = Instant::now();
    let script = r#"echo $$ > "$D/pid"; echo "$RLOCK_TOKEN" > "$D/token.tmp"; mv "$D/token.tmp" "$D/token"
sleep 3; : > "$D/ending""#;
    let mut rl = start_exec(&server, d, &["--ttl", "1s"], script);
    let token = rl.file(d.join("token"), SOON).trim().to_string();
    let mut watch = LockWatch::new(&server, LOCK, &token, Duration::from_secs(1));
    let ending = d.join("ending");
    while watch.sample(|| !ending.exists()) {
        assert!(started.elapsed() < FINISH, "the 3 s child never finished");
        thread::sleep(Duration::from_millis(20));
    }
    let (out, _) = rl.wait(FINISH);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "the child cannot have slept 3 s"
    );
    // Renewing every 333 ms for 3 s: about 9 renewals; a lock that was not renewed would
    // have failed a sample (gone or a different token) after 1 s.
    assert!(
        watch.renewals >= 4,
        "only {} renewals seen in {} samples",
        watch.renewals,
        watch.samples
    );
    assert!(!server.exists(LOCK), "lock not released");
}

// ---------------------------------------------------------------------------------------------
// 4. Lock deleted or taken over behind rlock's back
// ---------------------------------------------------------------------------------------------

/// A long lease renewed often: a loss Redis reports must be acted on at the next renewal, long
/// before the lease (9.9 s) minus the grace (2.5 s) would stop the child anyway.
const OFTEN: &[&str] = &["--ttl", "10s", "--renew-every", "500ms"];
/// From the loss to rlock's exit: one renewal interval and slack for a loaded machine (the
/// child dies of its first signal, so the grace does not come into it).
const LOSS_NOTICED: Duration = Duration::from_millis(500 + 1500);

#[test]
fn lock_deleted_behind_rlocks_back_stops_the_child_and_exits_76() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let mut rl = start_exec(&server, d, OFTEN, RUN_30S);
    let token = rl.ready(d);
    let child = wait_for_pid(d.join("pid"));
    assert_eq!(server.get(LOCK), Some(token));

    let deleted = Instant::now();
    server.cmd(&["DEL", LOCK]);
    let (out, exited) = rl.wait(FINISH);
    let took = exited - deleted;
    assert_eq!(out.code, 76, "{out}");
    assert!(
        out.stderr.contains("lost lock 'k'") && out.stderr.trim_end().lines().count() == 1,
        "want one line saying the lock was lost\n{out}"
    );
    assert!(
        took <= LOSS_NOTICED,
        "rlock took {took:?} after the DEL to stop the child and exit"
    );
    assert!(!pid_alive(child), "the child still runs");
    assert!(!server.exists(LOCK), "a lost lock was taken again");
}

#[test]
fn lock_taken_over_by_another_owner_stops_the_child_and_leaves_the_new_owner_alone() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let mut rl = start_exec(&server, d, OFTEN, RUN_30S);
    rl.ready(d);
    let child = wait_for_pid(d.join("pid"));

    let taken = Instant::now();
    server.cmd(&["SET", LOCK, "other", "PX", "60000"]);
    let (out, exited) = rl.wait(FINISH);
    let took = exited - taken;
    assert_eq!(out.code, 76, "{out}");
    assert!(out.stderr.contains("lost lock 'k'"), "{out}");
    assert!(
        took <= LOSS_NOTICED,
        "rlock took {took:?} after the takeover to stop the child and exit"
    );
    assert!(!pid_alive(child), "the child still runs");
    assert_eq!(
        server.get(LOCK).as_deref(),
        Some("other"),
        "the new owner's lock was changed"
    );
    let pttl = server.pttl(LOCK);
    assert!(
        pttl > 60_000 - FINISH.as_millis() as i64 && pttl <= 60_000,
        "the new owner's TTL was changed: PTTL {pttl}"
    );
}

// ---------------------------------------------------------------------------------------------
// 5. Redis frozen: the child is stopped before the lease can run out
// ---------------------------------------------------------------------------------------------

#[test]
fn frozen_redis_child_is_stopped_before_the_ttl_runs_out() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    // The child records when TERM reached it (CLOCK_REALTIME), then exits.
    let script = r#"trap 'date +%s%N > "$D/died.tmp"; mv "$D/died.tmp" "$D/died"; exit 0' TERM
echo $$ > "$D/pid"; echo "$RLOCK_TOKEN" > "$D/token"; : > "$D/ready"
while :; do sleep 0.05; done"#;
    let mut rl = start_exec(&server, d, &["--ttl", "2s"], script);
    let token = rl.ready(d);
    // Let a renewal or two happen first, so the lease runs on renewals, not on the grant.
    LockWatch::new(&server, LOCK, &token, Duration::from_secs(2))
        .wait_renewals(2, Duration::from_secs(5));

    let child = wait_for_pid(d.join("pid"));
    let frozen_at = now_ns();
    server.freeze();
    wait_until("the child to be stopped", SOON, || !pid_alive(child));
    let died = read(d.join("died"));
    assert!(
        !died.is_empty(),
        "the child died without getting TERM first (its trap never ran)"
    );
    let died_at: i128 = died.trim().parse().expect("a date +%s%N timestamp");
    server.thaw();
    let (out, _) = rl.wait(FINISH);

    let after = ms(died_at - frozen_at);
    // TTL 2 s, renew every 667 ms, grace 500 ms, drift 22 ms: the last successful renewal was
    // sent at most 667 ms (plus a round trip) before the freeze, and TERM is due 1478 ms after
    // it, so between about 810 and 1478 ms after the freeze (near the top here: the freeze
    // follows a renewal). It must come before the key can expire (2 s after the freeze at the
    // latest), by the deadline minus the grace (plus scheduling slack), and not absurdly early.
    assert!(
        after < 2000,
        "child stopped {after} ms after Redis froze: the 2 s lock could have expired"
    );
    assert!(
        after <= 2000 - 22 - 500 + 350,
        "child got TERM {after} ms after Redis froze: later than the deadline minus --grace"
    );
    assert!(
        after >= 2000 - 667 - 500 - 170,
        "child stopped only {after} ms after Redis froze: too early for a 2 s lease"
    );
    assert_eq!(out.code, 76, "{out}");
    assert!(out.stderr.contains("lost lock 'k'"), "{out}");
}

// ---------------------------------------------------------------------------------------------
// 6. Redis restarted empty
// ---------------------------------------------------------------------------------------------

#[test]
fn redis_restarted_empty_during_exec_exits_76() {
    let mut server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let mut rl = start_exec(&server, d, &["--ttl", "6s"], RUN_30S);
    rl.ready(d);
    let child = wait_for_pid(d.join("pid"));

    let killed = Instant::now();
    server.kill9();
    server.restart();
    let (out, exited) = rl.wait(FINISH);
    assert_eq!(out.code, 76, "{out}");
    assert!(out.stderr.contains("lost lock 'k'"), "{out}");
    assert!(!pid_alive(child), "the child still runs");
    // Whichever way the loss was seen (Redis says free, or no renewal before the deadline),
    // the child must be stopped before the 6 s lease could have run out.
    assert!(
        exited - killed < Duration::from_secs(6) + Duration::from_millis(1500),
        "rlock exited {:?} after Redis was killed",
        exited - killed
    );
    assert!(!server.exists(LOCK), "a lost lock was taken again");
}

// ---------------------------------------------------------------------------------------------
// 7. SCRIPT FLUSH
// ---------------------------------------------------------------------------------------------

#[test]
fn script_flush_mid_run_is_survived() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let script = r#"echo $$ > "$D/pid"; echo "$RLOCK_TOKEN" > "$D/token"; : > "$D/ready"
while [ ! -e "$D/stop" ]; do sleep 0.02; done"#;
    let mut rl = start_exec(&server, d, &["--ttl", "1s"], script);
    let token = rl.ready(d);
    let mut watch = LockWatch::new(&server, LOCK, &token, Duration::from_secs(1));
    for _ in 0..4 {
        server.cmd(&["SCRIPT", "FLUSH"]);
        // The next renewal must reload the script (EVALSHA → NOSCRIPT → EVAL).
        watch.wait_renewals(1, Duration::from_secs(3));
    }
    touch(d.join("stop"));
    let (out, _) = rl.wait(FINISH);
    assert_eq!(out.code, 0, "{out}");
    assert!(!server.exists(LOCK), "lock not released");
}

// ---------------------------------------------------------------------------------------------
// 8. Signals sent to rlock
// ---------------------------------------------------------------------------------------------

/// A child that logs each of the forwarded signals it gets and exits 7 once `$D/stop` exists.
const SIGNAL_LOGGER: &str = r#"for s in TERM INT HUP QUIT USR1 USR2; do trap "echo $s >> \"\$D/log\"" $s; done
echo $$ > "$D/pid"; echo "$RLOCK_TOKEN" > "$D/token"; : > "$D/ready"
while [ ! -e "$D/stop" ]; do sleep 0.05; done
sleep 0.2
exit 7"#;

fn log_lines(dir: &Path) -> Vec<String> {
    read(dir.join("log")).lines().map(String::from).collect()
}

#[test]
fn signals_sent_to_rlock_reach_the_child_once_and_rlock_keeps_the_lock() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let mut rl = start_exec(&server, d, &["--ttl", "1s"], SIGNAL_LOGGER);
    let token = rl.ready(d);
    let child = wait_for_pid(d.join("pid"));
    let mut watch = LockWatch::new(&server, LOCK, &token, Duration::from_secs(1));

    let rlock_pid = Pid::from_raw(rl.pid());
    let mut sent = Vec::new();
    // Every signal the contract names, sent to rlock alone.
    for sig in [
        Signal::SIGTERM,
        Signal::SIGUSR1,
        Signal::SIGHUP,
        Signal::SIGUSR2,
        Signal::SIGINT,
        Signal::SIGQUIT,
    ] {
        signal::kill(rlock_pid, sig).expect("signal rlock");
        sent.push(sig.as_str().trim_start_matches("SIG").to_string());
        rl.wait_for(&format!("the child to log {sig}"), SOON, || {
            log_lines(d).len() >= sent.len()
        });
        assert!(pid_alive(child), "the child died of {sig}, which it traps");
        assert!(!rl.exited(), "rlock exited after {sig}");
        // rlock keeps renewing: the 1 s lock outlives more than a TTL's worth of renewals.
        watch.wait_renewals(4, Duration::from_secs(5));
    }
    touch(d.join("stop"));
    let (out, _) = rl.wait(FINISH);
    assert_eq!(
        out.code, 7,
        "rlock must exit with the child's status\n{out}"
    );
    assert_eq!(log_lines(d), sent, "each signal exactly once, in order");
    assert!(!server.exists(LOCK), "lock not released");
}

#[test]
fn sigint_to_rlocks_whole_process_group_reaches_the_child_once() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let mut rl = start_exec(&server, d, &[], SIGNAL_LOGGER);
    rl.ready(d);
    let child = wait_for_pid(d.join("pid"));
    assert_ne!(
        nix::unistd::getpgid(Some(Pid::from_raw(child))).unwrap(),
        Pid::from_raw(rl.pid()),
        "the child must not be in rlock's process group"
    );

    signal::killpg(Pid::from_raw(rl.pid()), Signal::SIGINT).expect("killpg rlock's group");
    rl.wait_for("the child to log INT", SOON, || !log_lines(d).is_empty());
    touch(d.join("stop"));
    let (out, _) = rl.wait(FINISH);
    assert_eq!(out.code, 7, "{out}");
    assert_eq!(log_lines(d), ["INT"], "SIGINT exactly once");
    assert!(!server.exists(LOCK), "lock not released");
}

// ---------------------------------------------------------------------------------------------
// 9. Ctrl-C at a real terminal
// ---------------------------------------------------------------------------------------------

#[test]
fn ctrl_c_at_a_terminal_reaches_the_child_once_and_the_terminal_is_handed_back() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();

    // A shell leads a session whose controlling terminal is the pty, like a login shell; it
    // runs rlock in the foreground and, once rlock is done, records which process group the
    // terminal's foreground is (field 8 of /proc/PID/stat) next to its own (field 5).
    let leader = r#""$RL" --url "$URL" exec -k k -- sh -c "$CHILD"
rc=$?
set -- $(cat /proc/$$/stat)
echo "$rc $5 $8" > "$D/after.tmp"; mv "$D/after.tmp" "$D/after"
exit $rc"#;
    let (mut session, mut master, screen) = pty_session(&server, d, leader, SIGNAL_LOGGER);

    session.ready(d);
    let child = wait_for_pid(d.join("pid"));
    assert_eq!(
        nix::unistd::tcgetpgrp(master.as_fd()).expect("tcgetpgrp on the master"),
        Pid::from_raw(child),
        "rlock did not give the terminal's foreground to the child's process group"
    );

    master.write_all(b"\x03").expect("type Ctrl-C");
    session.wait_for("the child to log INT", SOON, || !log_lines(d).is_empty());
    touch(d.join("stop"));
    let (out, _) = session.wait(FINISH);
    let shown = String::from_utf8_lossy(&screen.0.lock().unwrap()).into_owned();
    assert_eq!(
        out.code, 7,
        "rlock must exit with the child's status; terminal:\n{shown}"
    );
    assert_eq!(
        log_lines(d),
        ["INT"],
        "Ctrl-C exactly once; terminal:\n{shown}"
    );
    let after = read(d.join("after"));
    let f: Vec<&str> = after.split_whitespace().collect();
    assert_eq!(f.len(), 3, "after: {after:?}");
    assert_eq!(f[0], "7", "rlock's status as the shell saw it");
    assert_eq!(
        f[1], f[2],
        "the terminal's foreground (pgrp {}) was not handed back to the shell's group ({})",
        f[2], f[1]
    );
    assert!(!server.exists(LOCK), "lock not released");
}

// ---------------------------------------------------------------------------------------------
// 10. rlock killed outright
// ---------------------------------------------------------------------------------------------

#[test]
fn sigkill_of_rlock_stops_the_child_and_leaves_the_lock_to_expire() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let script = r#"echo $$ > "$D/pid"; echo "$RLOCK_TOKEN" > "$D/token"; : > "$D/ready"
while :; do sleep 0.05; done"#;
    let mut rl = start_exec(&server, d, &["--ttl", "2s"], script);
    let token = rl.ready(d);
    let child = wait_for_pid(d.join("pid"));

    signal::kill(Pid::from_raw(rl.pid()), Signal::SIGKILL).expect("kill -9 rlock");
    let killed = Instant::now();
    wait_until(
        "the child to die with rlock",
        Duration::from_secs(1),
        || !pid_alive(child),
    );
    let (out, _) = rl.wait(SOON);
    assert_eq!(out.code, -9, "{out}");
    assert_eq!(
        server.get(LOCK),
        Some(token),
        "the lock should be left to expire, not released or changed"
    );
    wait_until("the lock to expire", Duration::from_secs(4), || {
        !server.exists(LOCK)
    });
    let gone = killed.elapsed();
    // Renewed at most 667 ms before the kill, so it lives at least ~1.3 s after it.
    assert!(
        gone >= Duration::from_millis(1000),
        "the lock vanished {gone:?} after the kill: before its TTL"
    );
}

// ---------------------------------------------------------------------------------------------
// 11. Reentrancy
// ---------------------------------------------------------------------------------------------

#[test]
fn nested_exec_and_acquire_reuse_the_inherited_lock() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let outer = r#"echo $$ > "$D/pid"; echo "$RLOCK_TOKEN $RLOCK_FENCE" > "$D/outer"
"$RL" --url "$URL" exec -k k -w 2s -- sh -c 'echo "$RLOCK_TOKEN $RLOCK_FENCE" > "$D/nested"'
echo $? > "$D/nested_rc"
"$RL" --url "$URL" acquire -k k -w 2s > "$D/acquired"
echo $? > "$D/acquire_rc"
"$RL" --url "$URL" exec -k other -w 2s -- sh -c 'echo "$RLOCK_KEY $RLOCK_TOKEN $RLOCK_FENCE" > "$D/other.tmp"; mv "$D/other.tmp" "$D/other"; while [ ! -e "$D/go2" ]; do sleep 0.02; done'
echo $? > "$D/other_rc"
: > "$D/after"
while [ ! -e "$D/go" ]; do sleep 0.02; done
exit 0"#;
    let mut rl = start_exec(&server, d, &["--ttl", "2s"], outer);

    // The nested exec of another key holds that key, and the outer lock is still held.
    let other = rl.file(d.join("other"), FINISH);
    let outer_line = read(d.join("outer"));
    let (outer_token, outer_fence) = outer_line
        .trim()
        .split_once(' ')
        .expect("outer: token fence");
    let o: Vec<&str> = other.split_whitespace().collect();
    assert_eq!(o.len(), 3, "other: {other:?}");
    assert_eq!(o[0], "other");
    assert_ne!(o[1], outer_token, "a different key got the outer token");
    assert_eq!(
        server.get("rlock:other").as_deref(),
        Some(o[1]),
        "the nested exec of another key does not hold that key"
    );
    assert_eq!(
        server.get(LOCK).as_deref(),
        Some(outer_token),
        "the outer lock is gone or changed after the nested exec and acquire of it ended\n{}",
        drained(&rl.err)
    );
    touch(d.join("go2"));

    rl.wait_for("the outer child to finish its nested runs", FINISH, || {
        d.join("after").exists()
    });
    let stderr = drained(&rl.err);
    assert_eq!(
        read(d.join("nested_rc")).trim(),
        "0",
        "nested exec failed:\n{stderr}"
    );
    assert_eq!(
        read(d.join("nested")).trim(),
        format!("{outer_token} {outer_fence}"),
        "the nested exec must see the outer token and fence"
    );
    assert_eq!(
        read(d.join("acquire_rc")).trim(),
        "0",
        "nested acquire failed:\n{stderr}"
    );
    assert_eq!(
        read(d.join("acquired")).trim(),
        outer_token,
        "nested acquire must print the inherited token"
    );
    assert_eq!(
        read(d.join("other_rc")).trim(),
        "0",
        "nested exec of another key failed:\n{stderr}"
    );
    assert!(
        !server.exists("rlock:other"),
        "the other key was not released"
    );
    // The nested runs released nothing, and the outer rlock still renews its lock.
    LockWatch::new(&server, LOCK, outer_token, Duration::from_secs(2))
        .wait_renewals(2, Duration::from_secs(5));
    touch(d.join("go"));
    let (out, _) = rl.wait(FINISH);
    assert_eq!(out.code, 0, "{out}");
    assert!(!server.exists(LOCK), "lock not released");
}

// ---------------------------------------------------------------------------------------------
// 12. Mutual exclusion and fencing
// ---------------------------------------------------------------------------------------------

#[test]
fn concurrent_execs_never_overlap_and_fences_increase() {
    const WORKERS: usize = 6;
    const ROUNDS: usize = 6;
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    // `mkdir` is atomic: a second section inside at the same time fails it.
    let section = r#"mkdir "$D/inside" 2>/dev/null || { echo "overlap at fence $RLOCK_FENCE" >> "$D/errors"; exit 99; }
echo "start $RLOCK_FENCE" >> "$D/log"
sleep 0.02
echo "end $RLOCK_FENCE" >> "$D/log"
rmdir "$D/inside""#;
    let worker = format!(
        r#"i=0
while [ $i -lt {ROUNDS} ]; do
  "$RL" --url "$URL" exec -k k -w 20s -- sh -c "$SECTION"
  rc=$?
  [ $rc -eq 0 ] || echo "worker $W round $i: exit $rc" >> "$D/errors"
  i=$((i+1))
done"#
    );
    let mut workers: Vec<Running> = (0..WORKERS)
        .map(|w| {
            let mut cmd = sh(&server, d, &worker);
            cmd.env("SECTION", section).env("W", w.to_string());
            Running::spawn(&mut cmd, Stdio::null())
        })
        .collect();
    for w in &mut workers {
        let (out, _) = w.wait(Duration::from_secs(90));
        assert_eq!(out.code, 0, "{out}");
    }
    let errors = read(d.join("errors"));
    assert!(errors.is_empty(), "errors:\n{errors}");

    let log = read(d.join("log"));
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 2 * WORKERS * ROUNDS, "log:\n{log}");
    let mut last: Option<i64> = None;
    for pair in lines.chunks(2) {
        let start = pair[0]
            .strip_prefix("start ")
            .unwrap_or_else(|| panic!("sections overlap at {pair:?}\n{log}"));
        let end = pair[1]
            .strip_prefix("end ")
            .unwrap_or_else(|| panic!("sections overlap at {pair:?}\n{log}"));
        assert_eq!(start, end, "sections overlap at {pair:?}\n{log}");
        let fence: i64 = start.parse().expect("integer fence");
        if let Some(prev) = last {
            assert!(
                fence > prev,
                "fence {fence} after {prev}: not strictly increasing\n{log}"
            );
        }
        last = Some(fence);
    }
    assert!(!server.exists(LOCK), "lock left behind");
}

// ---------------------------------------------------------------------------------------------
// 13. exec's own options
// ---------------------------------------------------------------------------------------------

#[test]
fn bad_exec_options_are_usage_errors() {
    let server = RedisServer::start();
    for (opts, mentions) in [
        // TTL 1 s: usable 988 ms, grace 250 ms, so renewals must come more often than 738 ms.
        (&["--ttl", "1s", "--renew-every", "1s"][..], "--renew-every"),
        (&["--ttl", "1s", "--renew-every", "750ms"], "--renew-every"),
        (
            &["--ttl", "10s", "--grace", "2s", "--renew-every", "8s"],
            "--renew-every",
        ),
        (&["--ttl", "1s", "--grace", "1s"], "--grace"),
        (&["--ttl", "1s", "--grace", "990ms"], "--grace"),
        (&["--ttl", "1s", "--grace", "5s"], "--grace"),
        (&["--lost-signal", "BOGUS"], "BOGUS"),
        (&["--lost-signal", "0"], "--lost-signal"),
    ] {
        let out = run(rlock_at(&server)
            .args(["exec", "-k", "k"])
            .args(opts)
            .args(["--", "true"]));
        assert_eq!(out.code, 2, "{opts:?}\n{out}");
        assert!(out.stderr.contains(mentions), "{opts:?}\n{out}");
        assert!(!server.exists(LOCK), "{opts:?} took the lock");
    }
    for opts in [
        &["--lost-signal", "KILL"][..],
        &["--lost-signal", "9"],
        &["--lost-signal", "SIGUSR2"],
        &["--ttl", "1s", "--renew-every", "700ms"],
        &["--ttl", "1s", "--grace", "500ms"],
    ] {
        let out = run(rlock_at(&server)
            .args(["exec", "-k", "k"])
            .args(opts)
            .args(["--", "true"]));
        assert_eq!(out.code, 0, "{opts:?} refused\n{out}");
        assert!(!server.exists(LOCK), "{opts:?}: lock not released");
    }
}

// ---------------------------------------------------------------------------------------------
// 14. --lost-signal
// ---------------------------------------------------------------------------------------------

#[test]
fn lost_signal_usr1_is_what_the_child_gets_on_loss() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let script = r#"trap 'echo USR1 >> "$D/log"; exit 0' USR1
trap 'echo TERM >> "$D/log"; exit 0' TERM
echo $$ > "$D/pid"; echo "$RLOCK_TOKEN" > "$D/token"; : > "$D/ready"
while :; do sleep 0.05; done"#;
    let mut rl = start_exec(
        &server,
        d,
        &[OFTEN, &["--lost-signal", "USR1"]].concat(),
        script,
    );
    rl.ready(d);
    let deleted = Instant::now();
    server.cmd(&["DEL", LOCK]);
    let (out, exited) = rl.wait(FINISH);
    assert_eq!(out.code, 76, "{out}");
    assert!(
        exited - deleted <= LOSS_NOTICED,
        "rlock took {:?} after the DEL to stop the child and exit",
        exited - deleted
    );
    assert!(
        out.stderr.contains("USR1"),
        "stderr should name the signal\n{out}"
    );
    assert_eq!(log_lines(d), ["USR1"], "the child should get USR1 only");
}

#[test]
fn lost_signal_kill_kills_the_child_on_loss() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let mut rl = start_exec(
        &server,
        d,
        &[OFTEN, &["--lost-signal", "9"]].concat(),
        RUN_30S,
    );
    rl.ready(d);
    let child = wait_for_pid(d.join("pid"));
    let deleted = Instant::now();
    server.cmd(&["DEL", LOCK]);
    let (out, exited) = rl.wait(FINISH);
    assert_eq!(out.code, 76, "{out}");
    assert!(
        exited - deleted <= LOSS_NOTICED,
        "rlock took {:?} after the DEL to stop the child and exit",
        exited - deleted
    );
    assert!(out.stderr.contains("KILL"), "{out}");
    assert!(!pid_alive(child), "the child still runs");
}

// ---------------------------------------------------------------------------------------------
// 15. Job control, and nested rlock that must leave the lock to its owner
// ---------------------------------------------------------------------------------------------

/// Field 3 (state) and field 5 (process group) of /proc/PID/stat.
fn proc_state(pid: i32) -> (char, i32) {
    let stat = read(format!("/proc/{pid}/stat"));
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    (f[0].chars().next().unwrap(), f[2].parse().unwrap())
}

#[test]
fn ctrl_z_at_a_terminal_stops_rlock_like_a_job_and_continuing_resumes_the_child() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    // rlock's pid is the leader's only child: the leader writes it down before waiting.
    // The child runs under bash, not dash: dash starts `sleep` with vfork(), and a Ctrl-Z that
    // stops the vfork child before its exec leaves dash itself unstoppable (blocked in vfork),
    // so no shell, rlock included, would ever see the job stop.
    let leader = r#""$RL" --url "$URL" exec -k k -- bash -c "$CHILD" &
echo $! > "$D/rlock.pid"
fg %1 2>/dev/null || wait $!
"#;
    let (mut session, mut master, screen) = pty_session(&server, d, leader, SIGNAL_LOGGER);
    let shown = || String::from_utf8_lossy(&screen.0.lock().unwrap()).into_owned();

    session.ready(d);
    let child = wait_for_pid(d.join("pid"));
    let rlock: i32 = read(d.join("rlock.pid")).trim().parse().unwrap();
    // Without job control in the leader, rlock may or may not have the foreground; give it
    // the terminal as a shell's `fg` would, then let rlock hand it to the child.
    let rlock_pgrp = proc_state(rlock).1;
    if nix::unistd::tcgetpgrp(master.as_fd()).unwrap() != Pid::from_raw(child) {
        panic!(
            "rlock (pgrp {rlock_pgrp}) did not hand the terminal to its child; terminal:\n{}",
            shown()
        );
    }

    master.write_all(b"\x1a").expect("type Ctrl-Z");
    session.wait_for("the child and rlock to stop", SOON, || {
        proc_state(child).0 == 'T' && proc_state(rlock).0 == 'T'
    });
    assert_eq!(
        nix::unistd::tcgetpgrp(master.as_fd()).unwrap(),
        Pid::from_raw(rlock_pgrp),
        "a stopped rlock must have taken the terminal back for its own group"
    );
    assert!(server.exists(LOCK), "a short stop must not lose the lock");

    // What `fg` does once the terminal is the job's again: continue the job's process group.
    signal::killpg(Pid::from_raw(rlock_pgrp), Signal::SIGCONT).unwrap();
    session.wait_for("the child to run again in the foreground", SOON, || {
        proc_state(child).0 != 'T'
            && nix::unistd::tcgetpgrp(master.as_fd()).ok() == Some(Pid::from_raw(child))
    });

    touch(d.join("stop"));
    let (out, _) = session.wait(FINISH);
    assert_eq!(
        out.code,
        7,
        "rlock exits with the child's status; terminal:\n{}",
        shown()
    );
    assert!(
        log_lines(d).is_empty(),
        "the child must get no signal (no TERM: the lock was not lost): {:?}",
        log_lines(d)
    );
    assert!(!server.exists(LOCK), "lock not released");
}

#[test]
fn ctrl_z_under_a_nested_rlock_exec_stops_the_whole_job() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    // rlock exec -k k -- rlock exec -k k2 -- bash -c CHILD: the inner rlock must stop the way
    // the terminal stops a job (SIGTSTP), or the outer one takes it for a SIGSTOP from someone
    // else, keeps running, and the shell never gets its terminal back.
    let leader = r#""$RL" --url "$URL" exec -k k -- "$RL" --url "$URL" exec -k k2 -- bash -c "$CHILD" &
echo $! > "$D/rlock.pid"
fg %1 2>/dev/null || wait $!
"#;
    let (mut session, mut master, screen) = pty_session(&server, d, leader, SIGNAL_LOGGER);
    let shown = || String::from_utf8_lossy(&screen.0.lock().unwrap()).into_owned();

    session.ready(d);
    let child = wait_for_pid(d.join("pid"));
    let outer: i32 = read(d.join("rlock.pid")).trim().parse().unwrap();
    let inner: i32 = read(format!("/proc/{outer}/task/{outer}/children"))
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .find(|&p: &i32| read(format!("/proc/{p}/comm")).trim() == "rlock")
        .unwrap_or_else(|| panic!("no inner rlock under {outer}; terminal:\n{}", shown()));
    let outer_pgrp = proc_state(outer).1;
    assert_eq!(
        nix::unistd::tcgetpgrp(master.as_fd()).unwrap(),
        Pid::from_raw(child),
        "the innermost command does not have the terminal; terminal:\n{}",
        shown()
    );

    master.write_all(b"\x1a").expect("type Ctrl-Z");
    session.wait_for("the child and both rlocks to stop", SOON, || {
        [child, inner, outer]
            .iter()
            .all(|&p| proc_state(p).0 == 'T')
    });
    assert_eq!(
        nix::unistd::tcgetpgrp(master.as_fd()).unwrap(),
        Pid::from_raw(outer_pgrp),
        "the outer rlock must have taken the terminal back for its own group"
    );

    signal::killpg(Pid::from_raw(outer_pgrp), Signal::SIGCONT).unwrap();
    session.wait_for("the child to run again in the foreground", SOON, || {
        proc_state(child).0 != 'T'
            && nix::unistd::tcgetpgrp(master.as_fd()).ok() == Some(Pid::from_raw(child))
    });
    touch(d.join("stop"));
    let (out, _) = session.wait(FINISH);
    assert_eq!(out.code, 7, "terminal:\n{}", shown());
    assert!(log_lines(d).is_empty(), "signals: {:?}", log_lines(d));
    assert!(!server.exists(LOCK), "outer lock not released");
    assert!(!server.exists("rlock:k2"), "inner lock not released");
}

#[test]
fn release_inside_exec_of_the_inherited_token_leaves_the_lock_to_exec() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    // The usual acquire --export … release script, run under rlock exec on the same key.
    let script = r#"lock=$("$RL" --url "$URL" acquire --export -k k) || exit 9; eval "$lock"
"$RL" --url "$URL" release -k k; echo "release=$?" > "$D/release"
[ "$("$RL" --url "$URL" inspect -q -k k; echo $?)" = 0 ] || exit 8
exit 0"#;
    let out = run(&mut exec_sh(&server, d, &["--ttl", "10s"], script));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(read(d.join("release")).trim(), "release=0");
    assert!(
        out.stderr.contains("enclosing 'rlock exec'"),
        "the nested release says why it did nothing: {out}"
    );
    assert!(!server.exists(LOCK), "exec released it at the end");
}

#[test]
fn exec_inside_a_shell_holding_the_lock_renews_it_and_leaves_the_release_to_the_shell() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    // The shell takes a 2 s lock and runs a 4 s command under rlock exec on the same key.
    let script = r#"lock=$("$RL" --url "$URL" acquire --export -k k --ttl 2s) || exit 9
eval "$lock"
"$RL" --url "$URL" exec -k k -- sh -c 'sleep 4; [ "$("$RL" --url "$URL" inspect -q -k k; echo $?)" = 0 ]'
echo "exec=$?" > "$D/exec"
"$RL" --url "$URL" inspect -q -k k; echo "held_after=$?" >> "$D/exec"
"$RL" --url "$URL" release -k k"#;
    let out = run(&mut sh(&server, d, script));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        read(d.join("exec")).lines().collect::<Vec<_>>(),
        ["exec=0", "held_after=0"],
        "the nested exec kept the 2 s lock alive for 4 s and did not release it; {out}"
    );
    assert!(!server.exists(LOCK), "the shell's release released it");
}

// ---------------------------------------------------------------------------------------------
// 16. Regressions: nested locks of other keys, orphans, interrupted round trips, lost locks
//     found at the end, SIGINT, nohup, short shell leases
// ---------------------------------------------------------------------------------------------

#[test]
fn a_shell_lock_of_another_key_inside_exec_is_renewed_and_released_by_its_holder() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    // Inside `rlock exec -k k`, the usual acquire --export … exec … release of another key `b`:
    // that lock is the script's own, not the enclosing exec's. The nested exec must renew it
    // (2 s lock, 3 s command), and the script's release must release it. The second acquire and
    // release check the release on its own, on a lock that cannot have expired.
    let script = r#"lock=$("$RL" --url "$URL" acquire --export -k b --ttl 2s) || exit 9; eval "$lock"
"$RL" --url "$URL" exec -k b -- sh -c 'sleep 3; "$RL" --url "$URL" inspect -q -k b'
echo "exec=$?" >> "$D/steps"
"$RL" --url "$URL" release -k b; echo "release=$?" >> "$D/steps"
"$RL" --url "$URL" inspect -q -k b; echo "held=$?" >> "$D/steps"
lock=$("$RL" --url "$URL" acquire --export -k b --ttl 60s) || exit 9; eval "$lock"
"$RL" --url "$URL" release -k b; echo "release=$?" >> "$D/steps"
"$RL" --url "$URL" inspect -q -k b; echo "held=$?" >> "$D/steps"
exit 0"#;
    let out = run(&mut exec_sh(&server, d, &["--ttl", "10s"], script));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        read(d.join("steps")).lines().collect::<Vec<_>>(),
        [
            "exec=0", // the nested exec kept b alive for 3 s
            "release=0",
            "held=1", // and the release gave it back
            "release=0",
            "held=1",
        ],
        "{out}"
    );
    assert!(
        !out.stderr.contains("enclosing"),
        "b is not the enclosing exec's lock\n{out}"
    );
    assert!(!server.exists("rlock:b"), "b left behind");
    assert!(!server.exists(LOCK), "the outer lock was not released");
}

/// The pids of the children of `pid`'s main thread.
fn children_of(pid: i32) -> Vec<i32> {
    read(format!("/proc/{pid}/task/{pid}/children"))
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

#[test]
fn sigkill_of_rlock_also_kills_what_its_child_started() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let script = r#"sleep 300 & echo $! > "$D/grandchild"
echo $$ > "$D/pid"; : > "$D/ready"; wait"#;
    let mut rl = start_exec(&server, d, &[], script);
    rl.wait_for("the child to start", SOON, || d.join("ready").exists());
    let grandchild = wait_for_pid(d.join("grandchild"));
    let child = wait_for_pid(d.join("pid"));
    assert!(pid_alive(grandchild), "the grandchild is not running");
    // rlock sets up its watch over the group right after the spawn, in a second child; give it
    // a moment to exist, but do not insist (another way to do it would be as good).
    let rlock = rl.pid();
    let armed = Instant::now() + Duration::from_secs(2);
    while children_of(rlock).len() < 2 && Instant::now() < armed {
        thread::sleep(Duration::from_millis(10));
    }

    signal::kill(Pid::from_raw(rlock), Signal::SIGKILL).expect("kill -9 rlock");
    wait_until(
        "the child's background sleep to die with rlock",
        Duration::from_secs(1),
        || !pid_alive(grandchild),
    );
    assert!(!pid_alive(child), "the child still runs");
    let (out, _) = rl.wait(SOON);
    assert_eq!(out.code, -9, "{out}");
}

/// True when a connection to 127.0.0.1:`port` holds bytes the server has not read (the
/// receive queue of the server's end, in /proc/net/tcp): a request sent to a frozen server.
fn request_waiting_at(port: u16) -> bool {
    let local = format!(":{port:04X}");
    read("/proc/net/tcp").lines().skip(1).any(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        f.len() > 4
            && f[1].ends_with(&local)
            && f[3] == "01" // ESTABLISHED
            && f[4]
                .split_once(':')
                .is_some_and(|(_, rx)| u64::from_str_radix(rx, 16).is_ok_and(|n| n > 0))
    })
}

/// `rlock exec -n` sends its acquire to a frozen server and gets SIGTERM while it waits for the
/// reply. The signal must not cut the request short (that failed it as 69, and left the grant
/// in Redis): rlock waits for the reply up to --op-timeout, gives the grant back (the request is
/// queued behind the acquire on the frozen server), and reports the signal. Once the server
/// thaws it runs both: the lock is granted (a fence above the first grant's) and given back.
fn sigterm_during_an_acquire_on_a_frozen_server(server: &RedisServer) {
    let fence = |server: &RedisServer| -> i64 {
        server
            .hgetall("{rlock:k}:state")
            .get("fence")
            .and_then(|f| f.parse().ok())
            .unwrap_or(0)
    };
    let first = fence(server);
    server.freeze();
    let mut rl = Running::spawn(
        rlock_at(server).args(["--op-timeout", "1s", "exec", "-k", "k", "-n", "--", "true"]),
        Stdio::null(),
    );
    rl.wait_for("rlock's acquire to reach the frozen server", SOON, || {
        request_waiting_at(server.port())
    });
    let signalled = Instant::now();
    signal::kill(Pid::from_raw(rl.pid()), Signal::SIGTERM).expect("kill -TERM rlock");
    let (out, exited) = rl.wait(FINISH);
    assert_eq!(out.code, 143, "{out}");
    // At most --op-timeout for the reply, and another for the give-back.
    assert!(
        exited - signalled < Duration::from_millis(3500),
        "rlock took {:?} after SIGTERM to exit",
        exited - signalled
    );
    server.thaw();
    wait_until(
        "the thawed server to run the acquire (a new fence)",
        SOON,
        || fence(server) > first,
    );
    wait_until("the raced grant to be given back", SOON, || {
        !server.exists(LOCK)
    });
}

#[test]
fn sigterm_during_a_redis_round_trip_exits_143_and_the_grant_is_given_back() {
    let server = RedisServer::start();
    // The first grant, and the scripts of the acquire and of the give-back in the
    // server's cache, so that both run as sent once it thaws (on a cold cache the acquire
    // would answer NOSCRIPT and grant nothing).
    let out = run(rlock_at(&server).args(["exec", "-k", "k", "--", "true"]));
    assert_eq!(out.code, 0, "{out}");
    for script in [&rlock::lock::ACQUIRE, &rlock::lock::LEAVE] {
        server.cmd(&["SCRIPT", "LOAD", script.source]);
    }
    sigterm_during_an_acquire_on_a_frozen_server(&server);
}

#[test]
fn sigterm_during_a_round_trip_gives_the_grant_back_on_a_server_that_never_ran_leave() {
    let server = RedisServer::start();
    // A server rlock has used in the ordinary way: one exec, which caches acquire, renew and
    // release, but not the give-back script.
    let out = run(rlock_at(&server).args(["exec", "-k", "k", "--", "true"]));
    assert_eq!(out.code, 0, "{out}");
    sigterm_during_an_acquire_on_a_frozen_server(&server);
}

#[test]
fn lock_broken_between_renewals_is_found_at_the_end_and_exits_76() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let script = r#"echo $$ > "$D/pid"; echo "$RLOCK_TOKEN" > "$D/token"; : > "$D/ready"
while [ ! -e "$D/go" ]; do sleep 0.02; done
exit 0"#;
    // Renewals every 20 s: the command ends long before rlock would renew.
    let mut rl = start_exec(&server, d, &["--ttl", "60s"], script);
    let token = rl.ready(d);
    assert_eq!(server.get(LOCK), Some(token));
    let out = run(rlock_at(&server).args(["release", "-k", "k", "--force"]));
    assert_eq!(out.code, 0, "{out}");
    assert!(!server.exists(LOCK), "--force did not break the lock");
    touch(d.join("go"));
    let (out, _) = rl.wait(FINISH);
    assert_eq!(
        out.code, 76,
        "the command ran unprotected: not a success\n{out}"
    );
    assert!(
        out.stderr.contains("lost lock 'k'") && out.stderr.trim_end().lines().count() == 1,
        "want one line saying the lock was lost\n{out}"
    );
    assert!(!server.exists(LOCK), "a lost lock was taken again");
}

#[test]
fn child_killed_by_sigint_makes_rlock_die_of_sigint() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let mut cmd = exec_sh(&server, d, &[], "kill -INT $$");
    // SIGINT must not be ignored (as in a background job of a non-interactive shell), or the
    // child could not die of it.
    // SAFETY: only async-signal-safe calls (sigaction) between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            signal::signal(Signal::SIGINT, SigHandler::SigDfl)?;
            Ok(())
        });
    }
    let out = run(&mut cmd);
    assert_eq!(
        out.code, -2,
        "rlock must die of SIGINT, as its child did\n{out}"
    );
    assert!(!server.exists(LOCK), "lock not released");

    let out = run(&mut exec_sh(&server, d, &[], "exit 130"));
    assert_eq!(out.code, 130, "a child's exit 130 is only a status\n{out}");
    assert!(!server.exists(LOCK), "lock not released");
}

#[test]
fn sighup_ignored_at_start_stays_ignored_by_rlock_and_its_command() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let script = r#"echo $$ > "$D/pid"; echo "$RLOCK_TOKEN" > "$D/token"; : > "$D/ready"
while [ ! -e "$D/stop" ]; do sleep 0.02; done"#;
    let mut cmd = exec_sh(&server, d, &[], script);
    // As `nohup rlock exec …` starts it.
    // SAFETY: only async-signal-safe calls (sigaction) between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            signal::signal(Signal::SIGHUP, SigHandler::SigIgn)?;
            Ok(())
        });
    }
    let mut rl = Running::spawn(&mut cmd, Stdio::null()).kill_group_from(d.join("pid"));
    rl.ready(d);
    let child = wait_for_pid(d.join("pid"));

    signal::kill(Pid::from_raw(rl.pid()), Signal::SIGHUP).expect("kill -HUP rlock");
    // Nothing is to happen: a forwarded SIGHUP would end the child within milliseconds.
    let watch_until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < watch_until {
        assert!(pid_alive(child), "the child died of the ignored SIGHUP");
        assert!(!rl.exited(), "rlock exited after the ignored SIGHUP");
        thread::sleep(Duration::from_millis(10));
    }
    touch(d.join("stop"));
    let (out, _) = rl.wait(FINISH);
    assert_eq!(out.code, 0, "{out}");
    assert!(!server.exists(LOCK), "lock not released");
}

#[test]
fn exec_renews_a_shell_lock_with_little_lease_left_before_starting_the_command() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let script = r#"lock=$("$RL" --url "$URL" acquire --export -k k --ttl 2s) || exit 9; eval "$lock"
echo $$ > "$D/pid"; : > "$D/ready"
while [ ! -e "$D/go" ]; do sleep 0.01; done
"$RL" --url "$URL" exec -k k -- sh -c 'sleep 1; "$RL" --url "$URL" inspect -q -k k'
echo "exec=$?" > "$D/exec"
"$RL" --url "$URL" release -k k"#;
    let mut shell = Running::spawn(&mut sh(&server, d, script), Stdio::null());
    shell.wait_for("the shell to take the lock", SOON, || {
        d.join("ready").exists()
    });
    shell.wait_for("the shell's lock to have under 400 ms left", SOON, || {
        let pttl = server.pttl(LOCK);
        pttl > 0 && pttl < 400
    });
    touch(d.join("go"));
    let (out, _) = shell.wait(FINISH);
    assert_eq!(
        read(d.join("exec")).trim(),
        "exec=0",
        "exec must renew the inherited lock before the command starts\n{out}"
    );
    assert_eq!(out.code, 0, "{out}");
    assert!(!server.exists(LOCK), "the shell's release released it");
}
