//! Shortcuts for the tests of one key on one server: key names, `acquire`/`release` that must
//! succeed, the shapes of rlock's failures (`assert_fails`, `assert_usage`), and a background
//! rlock whose output goes to files (`Bg`).

use crate::{Output, RedisServer, rlock_at, rlock_bin, run};
use serde_json::Value;
use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The password of the `--requirepass` servers below. No output may ever contain it.
pub const SECRET: &str = "s3cret";

pub fn lock_key(name: &str) -> String {
    format!("rlock:{name}")
}

pub fn state_key(name: &str) -> String {
    format!("{{rlock:{name}}}:state")
}

pub fn queue_key(name: &str) -> String {
    format!("{{rlock:{name}}}:q")
}

/// Runs one Redis command and converts its reply.
#[track_caller]
pub fn q<T: redis::FromRedisValue>(server: &RedisServer, args: &[&str]) -> T {
    let (name, rest) = args.split_first().expect("a command name");
    redis::cmd(name)
        .arg(rest)
        .query(&mut server.conn())
        .unwrap_or_else(|e| panic!("redis {args:?} failed: {e}"))
}

/// The server's clock in ms (what the scripts write as `since`).
pub fn redis_now_ms(server: &RedisServer) -> i64 {
    let (secs, micros): (i64, i64) = q(server, &["TIME"]);
    secs * 1000 + micros / 1000
}

/// A first grant's fence: the server's clock in microseconds when it was minted (within the
/// last minute), below 2^53.
pub fn is_clock_fence(server: &RedisServer, fence: &str) -> bool {
    let now_us = redis_now_ms(server) * 1000;
    fence
        .parse::<i64>()
        .is_ok_and(|f| f <= now_us + 1000 && f > now_us - 60_000_000 && f < 1 << 53)
}

/// The machine's host name, as rlock records it (uname nodename).
pub fn hostname() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("read /proc/sys/kernel/hostname")
        .trim()
        .to_string()
}

/// A port on 127.0.0.1 with nothing listening on it.
pub fn dead_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local_addr").port()
}

/// A file holding `text`, in a directory that lives as long as the returned guard.
pub fn file_with(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("file");
    fs::write(&path, text).expect("write temp file");
    (dir, path)
}

/// rlock's own failure: exit `code`, nothing on stdout, exactly one stderr line starting with
/// `rlock: ` that mentions every needle.
#[track_caller]
pub fn assert_fails(out: &Output, code: i32, needles: &[&str]) {
    assert_eq!(out.code, code, "wrong exit code:\n{out}");
    assert!(
        out.stdout.is_empty(),
        "stdout must be empty on failure:\n{out}"
    );
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "stderr must be exactly one line:\n{out}");
    assert!(
        lines[0].starts_with("rlock: ") && out.stderr.ends_with('\n'),
        "stderr must be one line starting with 'rlock: ':\n{out}"
    );
    for needle in needles {
        assert!(
            out.stderr.contains(needle),
            "stderr should mention {needle:?}:\n{out}"
        );
    }
}

/// A usage error: exit 2, stdout empty, and stderr mentions `needle` (clap's usage errors span
/// several lines, so only the mention is checked).
#[track_caller]
pub fn assert_usage(out: &Output, needle: &str) {
    assert_eq!(out.code, 2, "usage errors exit 2:\n{out}");
    assert!(out.stdout.is_empty(), "stdout must be empty:\n{out}");
    assert!(
        out.stderr.contains(needle),
        "stderr should mention {needle:?}:\n{out}"
    );
}

/// Exit 0 and nothing on stderr; returns stdout.
#[track_caller]
pub fn assert_ok(out: &Output) -> String {
    assert_eq!(out.code, 0, "expected success:\n{out}");
    assert!(out.stderr.is_empty(), "stderr must be empty:\n{out}");
    out.stdout.clone()
}

/// The single token line of a successful plain `acquire`.
#[track_caller]
pub fn token_of(out: &Output) -> String {
    let stdout = assert_ok(out);
    assert!(
        stdout.ends_with('\n') && stdout.lines().count() == 1,
        "acquire prints exactly one line:\n{out}"
    );
    let token = stdout.trim_end().to_string();
    assert!(
        token.len() == 36 && token.chars().all(|c| c.is_ascii_hexdigit() || c == '-'),
        "the token should be a UUID: {token:?}"
    );
    token
}

/// `rlock --url … acquire -k NAME EXTRA…`, which must succeed; returns the token.
#[track_caller]
pub fn acquire(server: &RedisServer, name: &str, extra: &[&str]) -> String {
    token_of(&run(rlock_at(server)
        .args(["acquire", "-k", name])
        .args(extra)))
}

/// `rlock --url … acquire --json -k NAME EXTRA…`, which must succeed; returns the object.
#[track_caller]
pub fn acquire_json(server: &RedisServer, name: &str, extra: &[&str]) -> Value {
    let out = run(rlock_at(server)
        .args(["acquire", "--json", "-k", name])
        .args(extra));
    let stdout = assert_ok(&out);
    assert_eq!(stdout.lines().count(), 1, "one JSON line:\n{out}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{out}"))
}

#[track_caller]
pub fn release(server: &RedisServer, name: &str, token: &str) {
    assert_ok(&run(
        rlock_at(server).args(["release", "-k", name, "--token", token])
    ));
}

/// A process started in the background, its output going to files.
pub struct Bg {
    child: Option<Child>,
    dir: tempfile::TempDir,
    started: Instant,
    what: String,
}

impl Bg {
    pub fn spawn(cmd: &mut Command) -> Bg {
        let dir = tempfile::tempdir().expect("temp dir");
        let out = fs::File::create(dir.path().join("stdout")).expect("stdout file");
        let err = fs::File::create(dir.path().join("stderr")).expect("stderr file");
        let what = format!(
            "{:?} {:?}",
            cmd.get_program(),
            cmd.get_args().collect::<Vec<_>>()
        );
        let started = Instant::now();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {what}: {e}"));
        Bg {
            child: Some(child),
            dir,
            started,
            what,
        }
    }

    pub fn is_running(&mut self) -> bool {
        let child = self.child.as_mut().expect("not finished yet");
        child.try_wait().expect("try_wait").is_none()
    }

    /// Waits for the process to exit (it is killed, and the test fails, after `limit` from its
    /// start); returns its output and how long it ran.
    pub fn finish(mut self, limit: Duration) -> (Output, Duration) {
        let mut child = self.child.take().expect("finish once");
        let read = |name: &str| fs::read_to_string(self.dir.path().join(name)).unwrap_or_default();
        let status = loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                break status;
            }
            if self.started.elapsed() >= limit {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "{} did not finish within {limit:?} and was killed\n--- stdout ---\n{}\n--- stderr ---\n{}",
                    self.what,
                    read("stdout"),
                    read("stderr")
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let elapsed = self.started.elapsed();
        let out = Output {
            code: status
                .code()
                .or(status.signal().map(|s| -s))
                .expect("exit code or signal"),
            stdout: read("stdout"),
            stderr: read("stderr"),
        };
        (out, elapsed)
    }
}

impl Drop for Bg {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs `cmd` to completion, failing the test (after killing it) if it takes longer than
/// `limit`; returns the output and the time it took.
pub fn run_within(cmd: &mut Command, limit: Duration) -> (Output, Duration) {
    Bg::spawn(cmd).finish(limit)
}

/// `sh -c SCRIPT` with no inherited `RLOCK_*`, and `$RL` naming the rlock binary.
pub fn sh(script: &str) -> Command {
    let mut cmd = Command::new("sh");
    for (name, _) in std::env::vars_os() {
        if name.as_encoded_bytes().starts_with(b"RLOCK_") {
            cmd.env_remove(&name);
        }
    }
    if let Some(ca) = crate::managed::ca_file() {
        cmd.env("SSL_CERT_FILE", ca);
    }
    cmd.env_remove("REDISCLI_AUTH")
        .env("RL", rlock_bin())
        .arg("-c")
        .arg(script);
    cmd
}

/// The rows of `inspect`'s table, header left out, split on whitespace.
pub fn table_rows(stdout: &str) -> Vec<Vec<String>> {
    let mut lines = stdout.lines();
    let header = lines.next().unwrap_or_default();
    assert!(
        header.starts_with("KEY"),
        "a table starts with its header:\n{stdout}"
    );
    lines
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect()
}

/// One line on stderr, starting with "rlock: ", stdout empty, the given exit code.
pub fn assert_one_line(out: &Output, code: i32) {
    assert_eq!(out.code, code, "{out}");
    assert_eq!(out.stdout, "", "{out}");
    assert_eq!(out.stderr.lines().count(), 1, "{out}");
    assert!(out.stderr.starts_with("rlock: "), "{out}");
}

/// Global arguments, environment, and what they stand for.
pub type Source<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);

/// Asserts that the password appears nowhere in what rlock printed.
#[track_caller]
pub fn assert_no_secret(out: &Output, secret: &str) {
    assert!(
        !out.stdout.contains(secret) && !out.stderr.contains(secret),
        "the password leaked:\n{out}"
    );
}
