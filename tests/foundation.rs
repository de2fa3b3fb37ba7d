mod common;

// The foundation of rlock on one Redis: acquire, release, renew and inspect, the global options,
// and every exit code of the contract's table that these subcommands can reach (0, 1, 2, 65, 69,
// 75 and its `-E` override, 77, 78). Each test asserts what is in Redis after the command, not
// only the exit code.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Output, RedisServer, rlock, rlock_at, run, wait_until};
use serde_json::Value;

// ---------------------------------------------------------------------------------------------
// Local helpers
// ---------------------------------------------------------------------------------------------

/// The password of the `--requirepass` servers below. No output may ever contain it.
const SECRET: &str = "s3cret";

fn lock_key(name: &str) -> String {
    format!("rlock:{name}")
}

fn state_key(name: &str) -> String {
    format!("{{rlock:{name}}}:state")
}

fn queue_key(name: &str) -> String {
    format!("{{rlock:{name}}}:q")
}

/// Runs one Redis command and converts its reply.
#[track_caller]
fn q<T: redis::FromRedisValue>(server: &RedisServer, args: &[&str]) -> T {
    let (name, rest) = args.split_first().expect("a command name");
    redis::cmd(name)
        .arg(rest)
        .query(&mut server.conn())
        .unwrap_or_else(|e| panic!("redis {args:?} failed: {e}"))
}

/// The server's clock in ms (what the scripts write as `since`).
fn redis_now_ms(server: &RedisServer) -> i64 {
    let (secs, micros): (i64, i64) = q(server, &["TIME"]);
    secs * 1000 + micros / 1000
}

/// A first grant's fence: the server's clock in microseconds when it was minted (within the
/// last minute), below 2^53.
fn is_clock_fence(server: &RedisServer, fence: &str) -> bool {
    let now_us = redis_now_ms(server) * 1000;
    fence
        .parse::<i64>()
        .is_ok_and(|f| f <= now_us + 1000 && f > now_us - 60_000_000 && f < 1 << 53)
}

/// The machine's host name, as rlock records it (uname nodename).
fn hostname() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("read /proc/sys/kernel/hostname")
        .trim()
        .to_string()
}

/// A port on 127.0.0.1 with nothing listening on it.
fn dead_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local_addr").port()
}

/// A file holding `text`, in a directory that lives as long as the returned guard.
fn file_with(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("file");
    fs::write(&path, text).expect("write temp file");
    (dir, path)
}

/// rlock's own failure: exit `code`, nothing on stdout, exactly one stderr line starting with
/// `rlock: ` that mentions every needle.
#[track_caller]
fn assert_fails(out: &Output, code: i32, needles: &[&str]) {
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
fn assert_usage(out: &Output, needle: &str) {
    assert_eq!(out.code, 2, "usage errors exit 2:\n{out}");
    assert!(out.stdout.is_empty(), "stdout must be empty:\n{out}");
    assert!(
        out.stderr.contains(needle),
        "stderr should mention {needle:?}:\n{out}"
    );
}

/// Exit 0 and nothing on stderr; returns stdout.
#[track_caller]
fn assert_ok(out: &Output) -> String {
    assert_eq!(out.code, 0, "expected success:\n{out}");
    assert!(out.stderr.is_empty(), "stderr must be empty:\n{out}");
    out.stdout.clone()
}

/// The single token line of a successful plain `acquire`.
#[track_caller]
fn token_of(out: &Output) -> String {
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
fn acquire(server: &RedisServer, name: &str, extra: &[&str]) -> String {
    token_of(&run(rlock_at(server)
        .args(["acquire", "-k", name])
        .args(extra)))
}

/// `rlock --url … acquire --json -k NAME EXTRA…`, which must succeed; returns the object.
#[track_caller]
fn acquire_json(server: &RedisServer, name: &str, extra: &[&str]) -> Value {
    let out = run(rlock_at(server)
        .args(["acquire", "--json", "-k", name])
        .args(extra));
    let stdout = assert_ok(&out);
    assert_eq!(stdout.lines().count(), 1, "one JSON line:\n{out}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{out}"))
}

#[track_caller]
fn release(server: &RedisServer, name: &str, token: &str) {
    assert_ok(&run(
        rlock_at(server).args(["release", "-k", name, "--token", token])
    ));
}

/// A process started in the background, its output going to files.
struct Bg {
    child: Option<Child>,
    dir: tempfile::TempDir,
    started: Instant,
    what: String,
}

impl Bg {
    fn spawn(cmd: &mut Command) -> Bg {
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

    fn is_running(&mut self) -> bool {
        let child = self.child.as_mut().expect("not finished yet");
        child.try_wait().expect("try_wait").is_none()
    }

    /// Waits for the process to exit (it is killed, and the test fails, after `limit` from its
    /// start); returns its output and how long it ran.
    fn finish(mut self, limit: Duration) -> (Output, Duration) {
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
fn run_within(cmd: &mut Command, limit: Duration) -> (Output, Duration) {
    Bg::spawn(cmd).finish(limit)
}

/// `sh -c SCRIPT` with no inherited `RLOCK_*`, and `$RL` naming the rlock binary.
fn sh(script: &str) -> Command {
    let mut cmd = Command::new("sh");
    for (name, _) in std::env::vars_os() {
        if name.as_encoded_bytes().starts_with(b"RLOCK_") {
            cmd.env_remove(&name);
        }
    }
    cmd.env_remove("REDISCLI_AUTH")
        .env("RL", env!("CARGO_BIN_EXE_rlock"))
        .arg("-c")
        .arg(script);
    cmd
}

/// The rows of `inspect`'s table, header left out, split on whitespace.
fn table_rows(stdout: &str) -> Vec<Vec<String>> {
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

// ---------------------------------------------------------------------------------------------
// acquire
// ---------------------------------------------------------------------------------------------

#[test]
fn acquire_prints_one_token_that_redis_holds_with_the_ttl_and_the_holder() {
    let server = RedisServer::start();
    let before = redis_now_ms(&server);
    let token = acquire(&server, "jobs", &["--ttl", "10s"]);
    let after = redis_now_ms(&server);

    assert_eq!(
        server.get(&lock_key("jobs")).as_deref(),
        Some(token.as_str())
    );
    let pttl = server.pttl(&lock_key("jobs"));
    assert!(
        (9_000..=10_000).contains(&pttl),
        "PTTL should be about --ttl 10s, is {pttl}"
    );

    let state = server.hgetall(&state_key("jobs"));
    assert_eq!(
        state.get("fence").map(|f| is_clock_fence(&server, f)),
        Some(true),
        "{state:?}"
    );
    assert_eq!(state.get("token"), Some(&token), "{state:?}");
    assert_eq!(state.get("host"), Some(&hostname()), "{state:?}");
    // The holder of a plain acquire is the process that ran rlock: this test.
    assert_eq!(
        state.get("pid"),
        Some(&std::process::id().to_string()),
        "{state:?}"
    );
    let user = state.get("user").cloned().unwrap_or_default();
    match std::env::var("USER") {
        Ok(u) if !u.is_empty() => assert_eq!(user, u, "{state:?}"),
        _ => assert!(!user.is_empty(), "{state:?}"),
    }
    assert!(
        !state.get("cmd").cloned().unwrap_or_default().is_empty(),
        "{state:?}"
    );
    assert_eq!(
        state.get("ttl").map(String::as_str),
        Some("10000"),
        "{state:?}"
    );
    let since: i64 = state["since"].parse().expect("since is ms");
    assert!(
        (before..=after).contains(&since),
        "since {since} not in [{before}, {after}]"
    );
    assert!(!state.contains_key("released"), "{state:?}");
    assert!(!server.exists(&queue_key("jobs")), "nobody waits");
}

#[test]
fn the_holders_user_is_user_then_logname_then_the_user_database() {
    let server = RedisServer::start();
    let login = String::from_utf8(
        Command::new("id")
            .arg("-un")
            .output()
            .expect("run id -un")
            .stdout,
    )
    .unwrap();
    for (user, logname, want) in [
        (Some("from-user"), Some("from-logname"), "from-user"),
        (None, Some("from-logname"), "from-logname"),
        (Some(""), None, login.trim()),
        (None, None, login.trim()),
    ] {
        let mut cmd = rlock_at(&server);
        cmd.env_remove("USER").env_remove("LOGNAME");
        if let Some(u) = user {
            cmd.env("USER", u);
        }
        if let Some(l) = logname {
            cmd.env("LOGNAME", l);
        }
        let token = assert_ok(&run(cmd.args(["acquire", "-k", "who"])));
        let state = server.hgetall(&state_key("who"));
        assert_eq!(
            state.get("user").map(String::as_str),
            Some(want),
            "USER={user:?} LOGNAME={logname:?}: {state:?}"
        );
        release(&server, "who", token.trim());
    }
}

#[test]
fn fence_strictly_increases_across_grants() {
    let server = RedisServer::start();
    let mut last = 0;
    for round in 0..4 {
        let grant = acquire_json(&server, "jobs", &[]);
        let fence = grant["fence"].as_i64().expect("fence is an integer");
        assert!(fence > last, "round {round}: fence {fence} after {last}");
        let state = server.hgetall(&state_key("jobs"));
        assert_eq!(
            state["fence"],
            fence.to_string(),
            "the printed fence is Redis's"
        );
        let token = grant["token"].as_str().expect("token").to_string();
        if round % 2 == 0 {
            release(&server, "jobs", &token);
        } else {
            // Broken and expired locks count too: the fence never goes back.
            assert_ok(&run(
                rlock_at(&server).args(["release", "-k", "jobs", "--force"])
            ));
        }
        assert_eq!(
            server.hgetall(&state_key("jobs"))["fence"],
            fence.to_string(),
            "release keeps the fence counter"
        );
        last = fence;
    }
}

#[test]
fn export_output_evals_to_exported_variables_that_match_redis() {
    let server = RedisServer::start();
    // A key that needs quoting, and would run a command if it were not quoted.
    let name = "it's a $(touch pwned) job";
    let dir = tempfile::tempdir().expect("temp dir");
    let out = run(sh(r#"
        out=$("$RL" --url "$URL" acquire --export -k "$K") || exit 9
        eval "$out" || exit 8
        echo "shell:$RLOCK_KEY|$RLOCK_TOKEN|$RLOCK_FENCE"
        sh -c 'echo "child:$RLOCK_KEY|$RLOCK_TOKEN|$RLOCK_FENCE"'
        "#)
    .current_dir(dir.path())
    .env("URL", server.url())
    .env("K", name));
    let stdout = assert_ok(&out);
    assert!(
        !dir.path().join("pwned").exists(),
        "eval ran part of the key"
    );

    let token = server.get(&lock_key(name)).expect("the lock is held");
    let fence = &server.hgetall(&state_key(name))["fence"];
    let want = format!("{name}|{token}|{fence}");
    assert_eq!(
        stdout,
        format!("shell:{want}\nchild:{want}\n"),
        "RLOCK_KEY/TOKEN/FENCE must match Redis and be exported"
    );
}

#[test]
fn json_output_has_key_token_fence_and_ttl() {
    let server = RedisServer::start();
    let grant = acquire_json(&server, "jobs", &["--ttl", "15s"]);
    assert_eq!(grant["key"], "jobs", "{grant}");
    let token = grant["token"].as_str().expect("token is a string");
    assert_eq!(server.get(&lock_key("jobs")).as_deref(), Some(token));
    assert_eq!(
        grant["fence"].as_i64().map(|f| f.to_string()),
        Some(server.hgetall(&state_key("jobs"))["fence"].clone()),
        "{grant}"
    );
    assert_eq!(grant["ttl_ms"].as_u64(), Some(15_000), "{grant}");
}

#[test]
fn export_and_json_together_is_a_usage_error() {
    let server = RedisServer::start();
    let out = run(rlock_at(&server).args(["acquire", "--export", "--json", "-k", "jobs"]));
    assert_usage(&out, "--json");
    assert!(!server.exists(&lock_key("jobs")), "nothing may be taken");
}

// ---------------------------------------------------------------------------------------------
// busy
// ---------------------------------------------------------------------------------------------

#[test]
fn no_wait_on_a_held_lock_is_busy_names_the_holder_and_leaves_the_lock() {
    let server = RedisServer::start();
    let token = acquire(&server, "jobs", &["--ttl", "60s"]);
    let granted_fence = server.hgetall(&state_key("jobs"))["fence"].clone();
    let (out, took) = run_within(
        rlock_at(&server).args(["acquire", "-k", "jobs", "-n", "--ttl", "600s"]),
        Duration::from_secs(10),
    );
    assert_fails(
        &out,
        75,
        &[
            "'jobs'",
            &hostname(),
            &format!("pid {}", std::process::id()),
        ],
    );
    assert!(
        took < Duration::from_secs(2),
        "-n must not wait: took {took:?}"
    );

    assert_eq!(
        server.get(&lock_key("jobs")),
        Some(token.clone()),
        "lock untouched"
    );
    let pttl = server.pttl(&lock_key("jobs"));
    assert!(
        (1..=60_000).contains(&pttl),
        "PTTL must not be reset, is {pttl}"
    );
    let state = server.hgetall(&state_key("jobs"));
    assert_eq!(
        state["fence"], granted_fence,
        "no grant, no new fence: {state:?}"
    );
    assert_eq!(state["token"], token);
    assert!(
        !server.exists(&queue_key("jobs")),
        "-n never joins the queue"
    );
}

#[test]
fn conflict_exit_code_replaces_75() {
    let server = RedisServer::start();
    let token = acquire(&server, "jobs", &[]);
    let out = run(rlock_at(&server).args(["acquire", "-k", "jobs", "-n", "-E", "3"]));
    assert_fails(&out, 3, &["'jobs'"]);
    // exec takes -E too, and does not run its command.
    let out = run(rlock_at(&server).args([
        "exec", "-k", "jobs", "-n", "-E", "9", "--", "sh", "-c", "echo ran",
    ]));
    assert_fails(&out, 9, &["'jobs'"]);
    assert!(!out.stdout.contains("ran"), "{out}");
    assert_eq!(server.get(&lock_key("jobs")), Some(token));
}

#[test]
fn bounded_wait_gives_up_after_the_wait_and_leaves_nothing_behind() {
    let server = RedisServer::start();
    let token = acquire(&server, "jobs", &["--ttl", "60s"]);
    let (out, took) = run_within(
        rlock_at(&server).args(["acquire", "-k", "jobs", "-w", "300ms"]),
        Duration::from_secs(10),
    );
    assert_fails(&out, 75, &["'jobs'"]);
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(2),
        "-w 300ms should give up after 300ms, took {took:?}"
    );
    assert_eq!(server.get(&lock_key("jobs")), Some(token));
    assert!(server.pttl(&lock_key("jobs")) <= 60_000);
    assert!(
        !server.exists(&queue_key("jobs")),
        "the waiter left the queue"
    );
    let state = server.hgetall(&state_key("jobs"));
    assert!(
        !state.keys().any(|f| f.starts_with("w:")),
        "the waiter's lease is gone: {state:?}"
    );
}

#[test]
fn default_acquire_blocks_until_the_holder_releases() {
    let server = RedisServer::start();
    let first = acquire_json(&server, "jobs", &["--ttl", "60s"]);
    let first_token = first["token"].as_str().expect("token").to_string();
    let first_fence = first["fence"].as_i64().expect("fence");

    let mut waiter = Bg::spawn(rlock_at(&server).args(["acquire", "-k", "jobs"]));
    wait_until("the waiter to queue up", Duration::from_secs(10), || {
        server.exists(&queue_key("jobs"))
    });
    assert!(
        waiter.is_running(),
        "the waiter must block while the lock is held"
    );
    assert_eq!(server.get(&lock_key("jobs")), Some(first_token.clone()));

    release(&server, "jobs", &first_token);
    let (out, _) = waiter.finish(Duration::from_secs(10));
    let token = token_of(&out);
    assert_ne!(token, first_token);
    assert_eq!(server.get(&lock_key("jobs")), Some(token.clone()));
    let state = server.hgetall(&state_key("jobs"));
    assert_eq!(state["token"], token);
    let fence: i64 = state["fence"].parse().expect("fence");
    assert!(
        fence > first_fence,
        "the next grant's fence {fence} after {first_fence}: {state:?}"
    );
    assert!(
        !server.exists(&queue_key("jobs")),
        "the queue is empty again"
    );
}

// ---------------------------------------------------------------------------------------------
// Locks written by other clients, and keys that are not locks
// ---------------------------------------------------------------------------------------------

#[test]
fn another_clients_string_lock_excludes_rlock_and_shows_as_held() {
    let server = RedisServer::start();
    server.cmd(&["SET", "rlock:jobs", "sometoken", "PX", "60000"]);

    let out = run(rlock_at(&server).args(["acquire", "-k", "jobs", "-n"]));
    assert_fails(&out, 75, &["'jobs'"]);

    let out = run(rlock_at(&server).args(["inspect", "-k", "jobs"]));
    let stdout = assert_ok(&out);
    let rows = table_rows(&stdout);
    assert_eq!(rows.len(), 1, "{out}");
    assert_eq!(&rows[0][..2], ["jobs", "held"], "{out}");

    let out = run(rlock_at(&server).args(["inspect", "-k", "jobs", "--json"]));
    let doc: Value = serde_json::from_str(&assert_ok(&out)).expect("JSON");
    assert_eq!(doc["held"], true, "{doc}");
    assert_eq!(doc["token"], "sometoken", "{doc}");

    let out = run(rlock_at(&server).args(["release", "-k", "jobs", "--token", "mine"]));
    assert_fails(&out, 77, &["'jobs'"]);
    let out =
        run(rlock_at(&server).args(["renew", "-k", "jobs", "--token", "mine", "--ttl", "600s"]));
    assert_fails(&out, 77, &["'jobs'"]);

    assert_eq!(server.get("rlock:jobs").as_deref(), Some("sometoken"));
    let pttl = server.pttl("rlock:jobs");
    assert!((1..=60_000).contains(&pttl), "PTTL untouched, is {pttl}");
    assert!(
        !server.exists(&state_key("jobs")),
        "rlock wrote nothing of its own"
    );
}

#[test]
fn plain_prefix_shares_a_lock_with_redis_py_style_clients() {
    let server = RedisServer::start();
    // What redis-py's Lock, redsync or node-redlock leave: a bare key with a token and a PX.
    server.cmd(&["SET", "jobs", "sometoken", "PX", "60000"]);
    let plain = |args: &[&str]| {
        let mut cmd = rlock_at(&server);
        cmd.args(["--prefix", ""]).args(args);
        run(&mut cmd)
    };

    assert_fails(&plain(&["acquire", "-k", "jobs", "-n"]), 75, &["'jobs'"]);
    let out = plain(&["inspect", "-k", "jobs"]);
    assert_eq!(
        &table_rows(&assert_ok(&out))[0][..2],
        ["jobs", "held"],
        "{out}"
    );
    assert_fails(
        &plain(&["release", "-k", "jobs", "--token", "mine"]),
        77,
        &["'jobs'"],
    );
    assert_eq!(server.get("jobs").as_deref(), Some("sometoken"));
    assert!((1..=60_000).contains(&server.pttl("jobs")));

    // Once the other client lets go, rlock takes the very same key.
    server.cmd(&["DEL", "jobs"]);
    let out = plain(&["acquire", "-k", "jobs", "-n"]);
    let token = token_of(&out);
    assert_eq!(server.get("jobs"), Some(token.clone()));
    assert!(!server.exists("rlock:jobs"));
    assert_eq!(server.hgetall("{jobs}:state")["token"], token);
}

#[test]
fn redisson_style_hash_shows_as_held_and_is_not_taken() {
    let server = RedisServer::start();
    server.cmd(&["HSET", "rlock:h", "someuuid:1", "1"]);
    server.cmd(&["PEXPIRE", "rlock:h", "60000"]);

    let out = run(rlock_at(&server).args(["inspect", "-k", "h"]));
    let stdout = assert_ok(&out);
    assert_eq!(&table_rows(&stdout)[0][..2], ["h", "held"], "{out}");
    let out = run(rlock_at(&server).args(["inspect", "-k", "h", "--json"]));
    let doc: Value = serde_json::from_str(&assert_ok(&out)).expect("JSON");
    assert_eq!(doc["held"], true, "{doc}");
    assert!(
        doc["ttl_ms"].as_i64().is_some_and(|t| t > 0 && t <= 60_000),
        "{doc}"
    );

    for args in [
        &["acquire", "-k", "h", "-n"][..],
        &["acquire", "-k", "h", "-w", "5s"],
        &["release", "-k", "h", "--token", "someuuid:1"],
        &["renew", "-k", "h", "--token", "someuuid:1", "--ttl", "600s"],
    ] {
        let out = run(rlock_at(&server).args(args));
        assert_fails(&out, 65, &["'h'"]);
        let hash = server.hgetall("rlock:h");
        assert_eq!(hash.len(), 1, "{args:?} changed the hash: {hash:?}");
        assert_eq!(hash.get("someuuid:1").map(String::as_str), Some("1"));
        let pttl = server.pttl("rlock:h");
        assert!((1..=60_000).contains(&pttl), "{args:?}: PTTL {pttl}");
        assert!(!server.exists(&state_key("h")), "{args:?} wrote state");
        assert!(!server.exists(&queue_key("h")), "{args:?} queued");
    }
}

#[test]
fn a_list_at_the_key_is_not_a_lock_and_stays_unchanged() {
    let server = RedisServer::start();
    server.cmd(&["RPUSH", "rlock:l", "a", "b"]);
    for args in [
        &["acquire", "-k", "l", "-n"][..],
        &["acquire", "-k", "l"],
        &["release", "-k", "l", "--token", "t"],
        &["release", "-k", "l", "--force"],
        &["renew", "-k", "l", "--token", "t"],
    ] {
        let out = run(rlock_at(&server).args(args));
        assert_fails(&out, 65, &["'l'"]);
        let list: Vec<String> = q(&server, &["LRANGE", "rlock:l", "0", "-1"]);
        assert_eq!(list, ["a", "b"], "{args:?} changed the list");
        assert_eq!(server.pttl("rlock:l"), -1, "{args:?} set an expiry");
        assert!(!server.exists(&state_key("l")), "{args:?} wrote state");
        assert!(!server.exists(&queue_key("l")), "{args:?} queued");
    }
}

// ---------------------------------------------------------------------------------------------
// release
// ---------------------------------------------------------------------------------------------

#[test]
fn release_with_the_token_deletes_the_lock_and_is_idempotent() {
    let server = RedisServer::start();
    let token = acquire(&server, "jobs", &[]);
    let granted_fence = server.hgetall(&state_key("jobs"))["fence"].clone();
    release(&server, "jobs", &token);
    assert!(!server.exists(&lock_key("jobs")));
    let state = server.hgetall(&state_key("jobs"));
    assert!(state.contains_key("released"), "{state:?}");
    // A retried release (its first reply lost) succeeds again and changes nothing.
    release(&server, "jobs", &token);
    assert!(!server.exists(&lock_key("jobs")));
    assert_eq!(server.hgetall(&state_key("jobs"))["fence"], granted_fence);
}

#[test]
fn release_with_a_wrong_token_is_refused_and_the_lock_unchanged() {
    let server = RedisServer::start();
    let token = acquire(&server, "jobs", &["--ttl", "60s"]);
    let out = run(rlock_at(&server).args(["release", "-k", "jobs", "--token", "not-the-owner"]));
    assert_fails(&out, 77, &["'jobs'"]);
    assert_eq!(server.get(&lock_key("jobs")), Some(token.clone()));
    assert!((1..=60_000).contains(&server.pttl(&lock_key("jobs"))));
    let state = server.hgetall(&state_key("jobs"));
    assert_eq!(state["token"], token);
    assert!(!state.contains_key("released"), "{state:?}");
}

#[test]
fn release_reads_the_token_from_the_environment() {
    let server = RedisServer::start();
    let token = acquire(&server, "jobs", &[]);
    let out = run(rlock_at(&server)
        .args(["release", "-k", "jobs"])
        .env("RLOCK_TOKEN", &token));
    assert_ok(&out);
    assert!(!server.exists(&lock_key("jobs")));
}

#[test]
fn release_without_a_token_is_a_usage_error() {
    let server = RedisServer::start();
    let token = acquire(&server, "jobs", &[]);
    let out = run(rlock_at(&server).args(["release", "-k", "jobs"]));
    assert_fails(&out, 2, &["token"]);
    let out = run(rlock_at(&server).args(["release", "-k", "jobs", "--token", ""]));
    assert_fails(&out, 2, &["token"]);
    let out = run(rlock_at(&server).args(["renew", "-k", "jobs"]));
    assert_fails(&out, 2, &["token"]);
    let out = run(rlock_at(&server).args(["renew", "-k", "jobs", "--token", ""]));
    assert_fails(&out, 2, &["token"]);
    assert_eq!(server.get(&lock_key("jobs")), Some(token));
}

#[test]
fn force_release_breaks_anyones_lock_and_says_whose() {
    let server = RedisServer::start();
    acquire(&server, "jobs", &[]);
    let out = run(rlock_at(&server).args(["release", "-k", "jobs", "--force"]));
    let stdout = assert_ok(&out);
    assert!(
        stdout.contains(&hostname()) && stdout.contains(&format!("pid {}", std::process::id())),
        "--force prints the holder:\n{out}"
    );
    assert!(!server.exists(&lock_key("jobs")));

    server.cmd(&["SET", "rlock:other", "theirtoken", "PX", "60000"]);
    let out = run(rlock_at(&server).args(["release", "-k", "other", "--force"]));
    let stdout = assert_ok(&out);
    assert!(stdout.contains("theirtoken"), "{out}");
    assert!(!server.exists("rlock:other"));

    // Nothing to break is not an error either.
    let out = run(rlock_at(&server).args(["release", "-k", "free", "--force"]));
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.is_empty(), "{out}");
}

#[test]
fn release_of_an_expired_lock_is_refused() {
    let server = RedisServer::start();
    let token = acquire(&server, "jobs", &["--ttl", "200ms"]);
    wait_until("the lock to expire", Duration::from_secs(10), || {
        !server.exists(&lock_key("jobs"))
    });
    let out = run(rlock_at(&server).args(["release", "-k", "jobs", "--token", &token]));
    assert_fails(&out, 77, &["'jobs'", "expired"]);
    assert!(!server.exists(&lock_key("jobs")));
    assert!(!server.hgetall(&state_key("jobs")).contains_key("released"));
}

// ---------------------------------------------------------------------------------------------
// renew
// ---------------------------------------------------------------------------------------------

#[test]
fn renew_extends_the_lease() {
    let server = RedisServer::start();
    let token = acquire(&server, "jobs", &["--ttl", "2s"]);
    let granted_fence = server.hgetall(&state_key("jobs"))["fence"].clone();
    let out =
        run(rlock_at(&server).args(["renew", "-k", "jobs", "--token", &token, "--ttl", "60s"]));
    assert_ok(&out);
    let pttl = server.pttl(&lock_key("jobs"));
    assert!(
        (50_001..=60_000).contains(&pttl),
        "PTTL after renew --ttl 60s: {pttl}"
    );
    assert_eq!(server.get(&lock_key("jobs")), Some(token.clone()));
    assert_eq!(server.hgetall(&state_key("jobs"))["ttl"], "60000");

    // A retried renew is fine.
    let out = run(rlock_at(&server)
        .args(["renew", "-k", "jobs", "--ttl", "60s"])
        .env("RLOCK_TOKEN", &token));
    assert_ok(&out);
    assert!(server.pttl(&lock_key("jobs")) > 50_000);
    assert_eq!(
        server.hgetall(&state_key("jobs"))["fence"],
        granted_fence,
        "renew is not a grant"
    );
}

#[test]
fn renew_without_ttl_keeps_the_ttl_the_lock_was_taken_with() {
    let server = RedisServer::start();
    let token = acquire(&server, "jobs", &["--ttl", "20s"]);
    // Stand in for time passing: the lease is nearly used up.
    server.cmd(&["PEXPIRE", &lock_key("jobs"), "3000"]);
    let out = run(rlock_at(&server).args(["renew", "-k", "jobs", "--token", &token]));
    assert_ok(&out);
    let pttl = server.pttl(&lock_key("jobs"));
    assert!(
        (15_000..=20_000).contains(&pttl),
        "renew should restore 20s, PTTL {pttl}"
    );

    // The TTL a renewal sets becomes the lock's TTL for the next renewal without --ttl.
    assert_ok(&run(
        rlock_at(&server).args(["renew", "-k", "jobs", "--token", &token, "--ttl", "90s"])
    ));
    server.cmd(&["PEXPIRE", &lock_key("jobs"), "3000"]);
    assert_ok(&run(
        rlock_at(&server).args(["renew", "-k", "jobs", "--token", &token])
    ));
    let pttl = server.pttl(&lock_key("jobs"));
    assert!(
        (80_000..=90_000).contains(&pttl),
        "renew should restore 90s, PTTL {pttl}"
    );
}

#[test]
fn renew_with_a_wrong_token_is_refused_and_the_lease_unchanged() {
    let server = RedisServer::start();
    let token = acquire(&server, "jobs", &["--ttl", "10s"]);
    let out = run(rlock_at(&server).args([
        "renew",
        "-k",
        "jobs",
        "--token",
        "not-the-owner",
        "--ttl",
        "600s",
    ]));
    assert_fails(&out, 77, &["'jobs'"]);
    let pttl = server.pttl(&lock_key("jobs"));
    assert!(
        (1..=10_000).contains(&pttl),
        "PTTL must not change, is {pttl}"
    );
    assert_eq!(server.get(&lock_key("jobs")), Some(token));
    assert_eq!(server.hgetall(&state_key("jobs"))["ttl"], "10000");
}

#[test]
fn renew_of_an_expired_lock_is_refused_and_does_not_bring_it_back() {
    let server = RedisServer::start();
    let token = acquire(&server, "jobs", &["--ttl", "200ms"]);
    wait_until("the lock to expire", Duration::from_secs(10), || {
        !server.exists(&lock_key("jobs"))
    });
    let out =
        run(rlock_at(&server).args(["renew", "-k", "jobs", "--token", &token, "--ttl", "60s"]));
    assert_fails(&out, 77, &["'jobs'"]);
    assert!(
        !server.exists(&lock_key("jobs")),
        "renew must not re-create the lock"
    );
}

// ---------------------------------------------------------------------------------------------
// inspect
// ---------------------------------------------------------------------------------------------

#[test]
fn inspect_named_keys_shows_the_holder_and_answers_with_the_exit_code() {
    let server = RedisServer::start();
    let grant = acquire_json(&server, "jobs", &["--ttl", "60s"]);
    let fence = grant["fence"].as_i64().expect("fence");
    acquire(&server, "other", &["--ttl", "60s"]);

    let out = run(rlock_at(&server).args(["inspect", "-k", "jobs"]));
    let stdout = assert_ok(&out);
    let rows = table_rows(&stdout);
    assert_eq!(rows.len(), 1, "{out}");
    assert_eq!(&rows[0][..2], ["jobs", "held"], "{out}");
    assert_eq!(rows[0][3], fence.to_string(), "the FENCE column:\n{out}");
    assert!(stdout.contains(&hostname()), "shows the host:\n{out}");
    assert!(
        stdout.contains(&format!("pid {}", std::process::id())),
        "shows the pid:\n{out}"
    );

    let out = run(rlock_at(&server).args(["inspect", "-k", "free"]));
    assert_eq!(out.code, 1, "a free key answers 1:\n{out}");
    assert_eq!(&table_rows(&out.stdout)[0][..2], ["free", "free"], "{out}");

    let out = run(rlock_at(&server).args(["inspect", "-k", "jobs", "-k", "free", "-k", "other"]));
    assert_eq!(
        out.code, 1,
        "one free key among held ones answers 1:\n{out}"
    );
    let states: Vec<(String, String)> = table_rows(&out.stdout)
        .into_iter()
        .map(|r| (r[0].clone(), r[1].clone()))
        .collect();
    assert_eq!(
        states,
        [("jobs", "held"), ("free", "free"), ("other", "held")].map(|(k, s)| (k.into(), s.into())),
        "{out}"
    );
    let out = run(rlock_at(&server).args(["inspect", "-k", "jobs", "-k", "other"]));
    assert_eq!(out.code, 0, "all held answers 0:\n{out}");

    for (keys, code) in [
        (&["-k", "jobs"][..], 0),
        (&["-k", "free"], 1),
        (&["-k", "jobs", "-k", "free"], 1),
    ] {
        let out = run(rlock_at(&server).args(["inspect", "-q"]).args(keys));
        assert_eq!(out.code, code, "-q {keys:?}:\n{out}");
        assert!(
            out.stdout.is_empty() && out.stderr.is_empty(),
            "-q prints nothing:\n{out}"
        );
    }

    // Looking changes nothing.
    assert_eq!(
        server.get(&lock_key("jobs")).as_deref(),
        grant["token"].as_str()
    );
    assert!(server.pttl(&lock_key("jobs")) <= 60_000);
    assert!(!server.exists(&lock_key("free")) && !server.exists(&state_key("free")));
}

#[test]
fn inspect_json_is_an_object_for_one_key_and_an_array_otherwise() {
    let server = RedisServer::start();
    let grant = acquire_json(&server, "jobs", &["--ttl", "60s"]);
    acquire(&server, "other", &[]);

    let out = run(rlock_at(&server).args(["inspect", "-k", "jobs", "--json"]));
    let doc: Value = serde_json::from_str(&assert_ok(&out)).expect("JSON");
    assert!(doc.is_object(), "{doc}");
    assert_eq!(doc["key"], "jobs", "{doc}");
    assert_eq!(doc["held"], true, "{doc}");
    let ttl = doc["ttl_ms"].as_i64().expect("ttl_ms");
    assert!((50_000..=60_000).contains(&ttl), "{doc}");
    assert_eq!(doc["fence"], grant["fence"], "{doc}");
    assert_eq!(doc["holder"]["host"], hostname().as_str(), "{doc}");
    assert_eq!(doc["holder"]["pid"], std::process::id(), "{doc}");

    let out = run(rlock_at(&server).args(["inspect", "-k", "free", "--json"]));
    assert_eq!(out.code, 1, "{out}");
    let doc: Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert_eq!(doc["held"], false, "{doc}");

    let out = run(rlock_at(&server).args(["inspect", "-k", "jobs", "-k", "free", "--json"]));
    assert_eq!(out.code, 1, "{out}");
    let doc: Value = serde_json::from_str(&out.stdout).expect("JSON");
    let held: Vec<&Value> = doc
        .as_array()
        .expect("an array")
        .iter()
        .map(|l| &l["held"])
        .collect();
    assert_eq!(held, [&Value::Bool(true), &Value::Bool(false)], "{doc}");

    let out = run(rlock_at(&server).args(["inspect", "--json"]));
    let doc: Value = serde_json::from_str(&assert_ok(&out)).expect("JSON");
    let keys: BTreeSet<&str> = doc
        .as_array()
        .expect("a listing is an array")
        .iter()
        .map(|l| l["key"].as_str().expect("key"))
        .collect();
    assert_eq!(keys, BTreeSet::from(["jobs", "other"]), "{doc}");
}

/// The KEY column of a listing.
fn listed(server: &RedisServer, extra: &[&str]) -> BTreeSet<String> {
    let out = run(rlock_at(server).args(extra).arg("inspect"));
    let stdout = assert_ok(&out);
    table_rows(&stdout)
        .into_iter()
        .map(|r| r[0].clone())
        .collect()
}

#[test]
fn listing_shows_every_lock_under_the_prefix_and_no_helper_keys_using_scan() {
    let server = RedisServer::start();
    acquire(&server, "a", &[]);
    acquire(&server, "b", &[]);
    let released = acquire(&server, "gone", &[]);
    release(&server, "gone", &released);
    server.cmd(&["SET", "rlock:c", "sometoken", "PX", "60000"]);
    server.cmd(&["HSET", "rlock:h", "someuuid:1", "1"]);
    server.cmd(&["SET", "unrelated", "x"]);
    // A waiter's place in line, as a waiting acquire leaves it.
    server.cmd(&["ZADD", &queue_key("a"), "1", "waiter"]);
    assert!(
        server.exists(&state_key("gone")),
        "a released lock keeps its state"
    );

    server.cmd(&["CONFIG", "RESETSTAT"]);
    let names = listed(&server, &[]);
    assert_eq!(
        names,
        BTreeSet::from(["a", "b", "c", "h"].map(String::from))
    );
    let stats: String = q(&server, &["INFO", "commandstats"]);
    assert!(
        stats.contains("cmdstat_scan:"),
        "listing uses SCAN:\n{stats}"
    );
    assert!(
        !stats.contains("cmdstat_keys:"),
        "listing must not use KEYS:\n{stats}"
    );

    // With an empty prefix every key is a candidate: the helpers stay out, and so does what
    // does not look like a lock (a key that never expires and that rlock did not write).
    let names = listed(&server, &["--prefix", ""]);
    assert_eq!(
        names,
        BTreeSet::from(["rlock:a", "rlock:b", "rlock:c"].map(String::from))
    );

    // Listing changed nothing.
    assert!(!server.exists(&lock_key("gone")));
    assert_eq!(server.get("rlock:c").as_deref(), Some("sometoken"));
}

#[test]
fn listing_hides_the_helper_keys_of_hash_tagged_keys() {
    let server = RedisServer::start();
    acquire(&server, "{grp}jobs", &[]);
    assert!(
        server.exists("rlock:{grp}jobs:state"),
        "the helper keys keep the tag"
    );
    assert_eq!(
        listed(&server, &[]),
        BTreeSet::from(["{grp}jobs".to_string()])
    );

    let plain = |args: &[&str]| {
        let mut cmd = rlock_at(&server);
        cmd.args(["--prefix", ""]).args(args);
        run(&mut cmd)
    };
    token_of(&plain(&["acquire", "-k", "{user1}.jobs"]));
    assert!(server.exists("{user1}.jobs:state"));
    let out = plain(&["inspect"]);
    let names: BTreeSet<String> = table_rows(&assert_ok(&out))
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
    assert!(names.contains("{user1}.jobs"), "{out}");
    assert!(
        !names.contains("{user1}.jobs:state"),
        "a helper key listed as a lock:\n{out}"
    );
}

#[test]
fn inspect_into_a_closed_pipe_is_not_an_error() {
    let server = RedisServer::start();
    let mut pipe = redis::pipe();
    for i in 0..3000 {
        pipe.cmd("SET")
            .arg(format!(
                "rlock:a-rather-long-lock-name-to-fill-the-pipe-{i:05}"
            ))
            .arg("sometoken")
            .arg("PX")
            .arg(600_000)
            .ignore();
    }
    pipe.query::<()>(&mut server.conn()).expect("fill Redis");

    let dir = tempfile::tempdir().expect("temp dir");
    let code_file = dir.path().join("code");
    let out = run(
        sh(r#"{ "$RL" --url "$URL" inspect; echo $? >"$CODE"; } | head -n 1"#)
            .env("URL", server.url())
            .env("CODE", &code_file),
    );
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stdout.starts_with("KEY") && out.stdout.lines().count() == 1,
        "{out}"
    );
    assert!(
        out.stderr.is_empty(),
        "no panic and no error on a closed pipe:\n{out}"
    );
    let code = fs::read_to_string(&code_file).expect("rlock's exit code");
    assert_eq!(code.trim(), "0", "rlock's exit code on a closed pipe");
}

// ---------------------------------------------------------------------------------------------
// Global options and usage errors
// ---------------------------------------------------------------------------------------------

#[test]
fn rlock_url_from_the_environment() {
    let server = RedisServer::start();
    // Short TTL and unique name: should the variable be ignored, this lands on the default
    // server, and must not linger there.
    let name = format!("env-url-{}", std::process::id());
    let out = run(rlock()
        .env("RLOCK_URL", server.url())
        .args(["acquire", "-k", &name, "--ttl", "5s"]));
    let token = token_of(&out);
    assert_eq!(server.get(&lock_key(&name)), Some(token.clone()));
    let out = run(rlock()
        .env("RLOCK_URL", server.url())
        .args(["release", "-k", &name, "--token", &token]));
    assert_ok(&out);
    assert!(!server.exists(&lock_key(&name)));
}

#[test]
fn global_options_after_the_subcommand() {
    let server = RedisServer::start();
    let url = server.url();
    let token = token_of(&run(rlock().args(["acquire", "-u", &url, "-k", "x"])));
    assert_eq!(server.get(&lock_key("x")), Some(token.clone()));
    let out = run(rlock().args(["inspect", "-k", "x", "--url", &url, "-q"]));
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.is_empty(), "{out}");
    let out = run(rlock().args(["release", "-k", "x", "--token", &token, "--url", &url]));
    assert_ok(&out);
    assert!(!server.exists(&lock_key("x")));
}

#[test]
fn prefix_option_and_environment_change_the_key() {
    let server = RedisServer::start();
    let token = acquire(&server, "jobs", &["--prefix", "app:"]);
    assert_eq!(server.get("app:jobs"), Some(token.clone()));
    assert_eq!(server.hgetall("{app:jobs}:state")["token"], token);
    assert!(!server.exists(&lock_key("jobs")));
    assert!(!server.exists(&state_key("jobs")));

    let token2 = token_of(&run(rlock_at(&server)
        .env("RLOCK_PREFIX", "env:")
        .args(["acquire", "-k", "jobs"])));
    assert_eq!(server.get("env:jobs"), Some(token2.clone()));
    assert!(!server.exists(&lock_key("jobs")));

    let out = run(rlock_at(&server)
        .env("RLOCK_PREFIX", "env:")
        .args(["inspect", "-q", "-k", "jobs"]));
    assert_eq!(out.code, 0, "{out}");
    let out = run(rlock_at(&server).args(["inspect", "-q", "-k", "jobs"]));
    assert_eq!(out.code, 1, "nothing under the default prefix:\n{out}");

    assert_ok(&run(rlock_at(&server).args([
        "--prefix", "app:", "release", "-k", "jobs", "--token", &token,
    ])));
    assert!(!server.exists("app:jobs"));
    assert_eq!(server.get("env:jobs"), Some(token2));
}

#[test]
fn bad_usage_exits_2_and_changes_nothing() {
    let server = RedisServer::start();
    let cases: &[(&[&str], &str)] = &[
        (&["acquire", "-k", "jobs", "--ttl", "30"], "unit"),
        (&["acquire", "-k", "jobs", "-w", "5"], "unit"),
        (&["--op-timeout", "2", "acquire", "-k", "jobs"], "unit"),
        (&["acquire", "-k", "jobs", "--ttl", "0s"], "0s"),
        (&["acquire", "-k", "jobs", "--ttl", "soon"], "soon"),
        (
            &["renew", "-k", "jobs", "--token", "t", "--ttl", "30"],
            "unit",
        ),
        (&["acquire", "-k", ""], "empty"),
        (&["release", "-k", "", "--token", "t"], "empty"),
        (&["inspect", "-k", ""], "empty"),
        (&["acquire"], "--key"),
        (&["release", "--token", "t"], "--key"),
        (&["acquire", "-k", "jobs", "--bogus"], "--bogus"),
        (&["acquire", "-k", "jobs", "-n", "-w", "1s"], "--wait"),
        (&["frobnicate"], "frobnicate"),
    ];
    for (args, needle) in cases {
        let out = run(rlock_at(&server).args(*args));
        assert_usage(&out, needle);
        let dbsize: i64 = q(&server, &["DBSIZE"]);
        assert_eq!(dbsize, 0, "{args:?} wrote to Redis");
    }
}

// ---------------------------------------------------------------------------------------------
// Redis unavailable, misconfigured or refusing
// ---------------------------------------------------------------------------------------------

/// The subcommands that talk to Redis, on lock `name`; `token` does not own it.
fn every_subcommand<'a>(name: &'a str, token: &'a str) -> Vec<Vec<&'a str>> {
    vec![
        vec!["acquire", "-k", name, "-n"],
        // A wait rides out an outage until it ends (-q: no lines about the outage itself).
        vec!["-q", "acquire", "-k", name, "-w", "1s"],
        vec!["release", "-k", name, "--token", token],
        vec!["renew", "-k", name, "--token", token],
        vec!["inspect", "-k", name],
        vec!["inspect"],
    ]
}

#[test]
fn nothing_listening_is_unavailable_promptly() {
    let port = dead_port();
    let url = format!("redis://127.0.0.1:{port}");
    let mut cases = every_subcommand("jobs", "t");
    cases.push(vec!["release", "-k", "jobs", "--force"]);
    for args in cases {
        let (out, took) = run_within(
            rlock()
                .args(["--url", &url, "--op-timeout", "500ms"])
                .args(&args),
            Duration::from_secs(10),
        );
        assert_fails(&out, 69, &[&format!("127.0.0.1:{port}")]);
        assert!(took < Duration::from_secs(3), "{args:?} took {took:?}");
    }
}

#[test]
fn frozen_server_is_unavailable_within_the_op_timeout() {
    let server = RedisServer::start();
    let token = acquire(&server, "jobs", &["--ttl", "60s"]);
    server.freeze();
    for args in [
        &["acquire", "-k", "jobs", "-n"][..],
        &["acquire", "-k", "other", "-n"],
        &["release", "-k", "jobs", "--token", "not-the-owner"],
        &["release", "-k", "other", "--force"],
        &["renew", "-k", "jobs", "--token", "not-the-owner"],
        &["inspect", "-k", "jobs"],
        &["inspect"],
    ] {
        let (out, took) = run_within(
            rlock_at(&server).args(["--op-timeout", "500ms"]).args(args),
            Duration::from_secs(10),
        );
        assert_fails(&out, 69, &[&server.url()]);
        assert!(took < Duration::from_secs(3), "{args:?} took {took:?}");
    }
    server.thaw();
    assert_eq!(server.get(&lock_key("jobs")), Some(token));
    assert!(server.pttl(&lock_key("jobs")) <= 60_000);
}

#[test]
fn frozen_server_is_unavailable_to_a_waiting_acquire_when_its_wait_ends() {
    // A wait rides out the outage (Guarantee 11) until the wait ends, then exits 69.
    let server = RedisServer::start();
    acquire(&server, "jobs", &["--ttl", "60s"]);
    server.freeze();
    for args in [
        &["-q", "acquire", "-k", "jobs", "-w", "1s"][..],
        &["-q", "acquire", "-k", "other", "-w", "1s"],
    ] {
        let (out, took) = run_within(
            rlock_at(&server).args(["--op-timeout", "500ms"]).args(args),
            Duration::from_secs(10),
        );
        assert_fails(&out, 69, &[&server.url()]);
        assert!(took < Duration::from_secs(3), "{args:?} took {took:?}");
    }
}

#[test]
fn malformed_urls_and_unreadable_password_files_are_configuration_errors() {
    let server = RedisServer::start();
    for url in [
        "foo://x".to_string(),
        "redis://host:notaport".to_string(),
        format!("redis://:{SECRET}@127.0.0.1:notaport"),
        // No scheme (port 1: should it be taken as an address, nothing is there).
        "127.0.0.1:1".to_string(),
    ] {
        for args in [&["acquire", "-k", "jobs", "-n"][..], &["inspect"]] {
            let out = run(rlock().args(["--url", &url]).args(args));
            assert_fails(&out, 78, &["URL"]);
            assert!(!out.stderr.contains(SECRET), "password shown:\n{out}");
        }
    }
    // What is wrong is said in words, not in the client library's ("InvalidClientConfig").
    for (url, why) in [
        ("redis://127.0.0.1:99999".to_string(), "invalid port number"),
        (
            format!("{}/abc", server.url()),
            "the database after the host must be a number",
        ),
        ("rediss://[::1".to_string(), "invalid IPv6 address"),
    ] {
        let out = run(rlock().args(["--url", &url, "inspect"]));
        assert_fails(&out, 78, &["malformed URL", why]);
        assert!(!out.stderr.contains("InvalidClientConfig"), "{out}");
    }
    let missing = "/nonexistent/rlock-password";
    let out = run(rlock_at(&server).args(["--password-file", missing, "acquire", "-k", "jobs"]));
    assert_fails(&out, 78, &[missing]);
    let dbsize: i64 = q(&server, &["DBSIZE"]);
    assert_eq!(dbsize, 0, "a configuration error must not reach Redis");
}

/// Global arguments, environment, and what they stand for.
type Source<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);

/// Asserts that the password appears nowhere in what rlock printed.
#[track_caller]
fn assert_no_secret(out: &Output, secret: &str) {
    assert!(
        !out.stdout.contains(secret) && !out.stderr.contains(secret),
        "the password leaked:\n{out}"
    );
}

#[test]
fn auth_refused_is_77_and_every_password_source_works() {
    let server = RedisServer::start_with(&["--requirepass", SECRET]);
    let port = server.port();
    let (_good_dir, good_file) = file_with(&format!("{SECRET}\n"));
    let (_bad_dir, bad_file) = file_with("wrongpw\n");
    let good_file = good_file.to_str().expect("utf-8 path");
    let bad_file = bad_file.to_str().expect("utf-8 path");
    let secret_url = format!("redis://:{SECRET}@127.0.0.1:{port}");
    let wrong_url = format!("redis://:wrongpw@127.0.0.1:{port}");

    let url = server.url();
    let plain_url = url.as_str();

    // Refused: no password, a wrong one from a file, from the environment, in the URL.
    let refused: [Source; 5] = [
        // (no password at all: see acquire_without_a_password_is_refused)
        (&["--url", plain_url], &[], "no password"),
        (
            &["--url", plain_url, "--password-file", bad_file],
            &[],
            "wrong password file",
        ),
        (
            &["--url", plain_url],
            &[("RLOCK_PASSWORD", "wrongpw")],
            "wrong $RLOCK_PASSWORD",
        ),
        (
            &["--url", plain_url],
            &[("REDISCLI_AUTH", "wrongpw")],
            "wrong $REDISCLI_AUTH",
        ),
        (&["--url", &wrong_url], &[], "wrong password in the URL"),
    ];
    for (global, env, what) in refused {
        for args in [
            &["acquire", "-k", "jobs", "-n"][..],
            &["acquire", "-k", "jobs"],
            &["release", "-k", "jobs", "--token", "t"],
            &["renew", "-k", "jobs", "--token", "t"],
            &["inspect", "-k", "jobs"],
        ] {
            if what == "no password" && args[0] == "acquire" {
                continue;
            }
            let out = run(rlock().args(global).envs(env.iter().copied()).args(args));
            assert_fails(&out, 77, &[]);
            assert!(
                !out.stderr.contains("wrongpw"),
                "{what}: password shown:\n{out}"
            );
            assert_no_secret(&out, SECRET);
        }
        assert_eq!(
            q::<i64>(&server, &["DBSIZE"]),
            0,
            "{what}: nothing may be written"
        );
    }

    // Accepted: the right password from each source, also with -v, which must not show it.
    let sources: [Source; 5] = [
        (
            &["--url", plain_url, "--password-file", good_file],
            &[],
            "password file",
        ),
        (
            &["--url", plain_url],
            &[("RLOCK_PASSWORD", SECRET)],
            "$RLOCK_PASSWORD",
        ),
        (
            &["--url", plain_url],
            &[("REDISCLI_AUTH", SECRET)],
            "$REDISCLI_AUTH",
        ),
        (&["--url", &secret_url], &[], "URL"),
        (&[], &[("RLOCK_URL", &secret_url)], "$RLOCK_URL"),
    ];
    for (global, env, what) in sources {
        for verbose in [false, true] {
            let with = |args: &[&str]| {
                let mut cmd = rlock();
                cmd.args(global).envs(env.iter().copied());
                if verbose {
                    cmd.arg("-v");
                }
                let out = run(cmd.args(args));
                assert_no_secret(&out, SECRET);
                assert_eq!(out.code, 0, "{what} (-v {verbose}) {args:?}:\n{out}");
                out
            };
            let out = with(&["acquire", "-k", "jobs", "-n"]);
            let token = out.stdout.trim().to_string();
            assert_eq!(server.get(&lock_key("jobs")), Some(token.clone()), "{what}");
            if verbose {
                assert!(!out.stderr.is_empty(), "-v says something:\n{out}");
            }
            if verbose && what.ends_with("URL") {
                assert!(
                    out.stderr
                        .contains(&format!("redis://:***@127.0.0.1:{port}")),
                    "-v shows the URL with the password as ***:\n{out}"
                );
            }
            with(&["inspect", "-k", "jobs"]);
            with(&["inspect"]);
            with(&["renew", "-k", "jobs", "--token", &token]);
            with(&["release", "-k", "jobs", "--token", &token]);
            assert!(!server.exists(&lock_key("jobs")), "{what}: released");
        }
    }

    // Errors that quote the URL still hide the password.
    for verbose in [&[][..], &["-v"]] {
        let out = run(rlock()
            .args([
                "--url",
                &format!("redis://:{SECRET}@127.0.0.1:{}", dead_port()),
            ])
            .args(verbose)
            .args(["acquire", "-k", "jobs", "-n"]));
        assert_eq!(out.code, 69, "{out}");
        assert_no_secret(&out, SECRET);
        let out = run(rlock().args(["--url", &secret_url]).args(verbose).args([
            "renew",
            "-k",
            "jobs",
            "--token",
            "not-the-owner",
        ]));
        assert_eq!(out.code, 77, "{out}");
        assert_no_secret(&out, SECRET);
        let out = run(rlock()
            .args(["--url", &secret_url])
            .args(verbose)
            .args(["acquire", "-k", "jobs", "-n", "--ttl", "30"]));
        assert_eq!(out.code, 2, "{out}");
        assert_no_secret(&out, SECRET);
    }
}

#[test]
fn acquire_without_a_password_is_refused() {
    let server = RedisServer::start_with(&["--requirepass", SECRET]);
    for args in [
        &["acquire", "-k", "jobs", "-n"][..],
        &["acquire", "-k", "jobs"],
    ] {
        let (out, took) = run_within(rlock_at(&server).args(args), Duration::from_secs(10));
        assert_fails(&out, 77, &["password"]);
        assert!(took < Duration::from_secs(3), "{args:?} took {took:?}");
        assert_eq!(q::<i64>(&server, &["DBSIZE"]), 0, "nothing may be written");
    }
}

// ---------------------------------------------------------------------------------------------
// Scripts: flushed, restarted, retried
// ---------------------------------------------------------------------------------------------

#[test]
fn scripts_survive_script_flush() {
    let server = RedisServer::start();
    let sha = rlock::lock::RELEASE.sha.to_string();
    let token = acquire(&server, "jobs", &[]);
    server.cmd(&["SCRIPT", "FLUSH"]);
    let cached: Vec<i64> = q(&server, &["SCRIPT", "EXISTS", &sha]);
    assert_eq!(cached, [0], "the release script is no longer cached");
    release(&server, "jobs", &token);
    assert!(
        !server.exists(&lock_key("jobs")),
        "release after SCRIPT FLUSH worked"
    );

    server.cmd(&["SCRIPT", "FLUSH"]);
    let token = acquire(&server, "jobs", &["-n"]);
    assert_eq!(server.get(&lock_key("jobs")), Some(token));
}

#[test]
fn scripts_survive_a_server_restart() {
    let mut server = RedisServer::start();
    acquire(&server, "jobs", &[]);
    server.restart();
    assert!(
        !server.exists(&lock_key("jobs")),
        "the restart lost the data"
    );
    let token = acquire(&server, "jobs", &["-n"]);
    assert_eq!(server.get(&lock_key("jobs")), Some(token.clone()));
    assert_eq!(server.hgetall(&state_key("jobs"))["token"], token);
    release(&server, "jobs", &token);
    assert!(!server.exists(&lock_key("jobs")));
}

#[test]
fn a_retried_acquire_script_is_idempotent() {
    let server = RedisServer::start();
    let script = rlock::lock::ACQUIRE.source;
    let eval = || -> Vec<redis::Value> {
        redis::cmd("EVAL")
            .arg(script)
            .arg(3)
            .arg(&[lock_key("jobs"), state_key("jobs"), queue_key("jobs")][..])
            .arg(&["tok-1", "60000", "0", "5000", "{rlock:jobs}:wake"][..])
            .arg(&["host-a", "4242", "alice", "cron"][..])
            .query(&mut server.conn())
            .expect("EVAL acquire.lua")
    };
    let first = eval();
    server.cmd(&["PEXPIRE", &lock_key("jobs"), "1000"]);
    let second = eval();
    assert_eq!(first, second, "a retry answers like the first call");
    // The reply: "ok", then its fields by name.
    let fence = match first.get(2) {
        Some(redis::Value::Int(f)) => f.to_string(),
        other => panic!("no fence in {first:?}: {other:?}"),
    };
    assert!(is_clock_fence(&server, &fence), "{first:?}");
    let bulk = |s: &str| redis::Value::BulkString(s.as_bytes().to_vec());
    assert_eq!(
        first,
        [
            bulk("ok"),
            bulk("fence"),
            first[2].clone(),
            bulk("ttl"),
            redis::Value::Int(60_000)
        ]
    );
    assert_eq!(server.get(&lock_key("jobs")).as_deref(), Some("tok-1"));
    assert!(
        server.pttl(&lock_key("jobs")) > 50_000,
        "the retry renewed the lease"
    );
    assert_eq!(
        server.hgetall(&state_key("jobs"))["fence"],
        fence,
        "no second grant"
    );

    // The grant is an ordinary rlock lock: busy for others, released by its token.
    let out = run(rlock_at(&server).args(["acquire", "-k", "jobs", "-n"]));
    assert_fails(&out, 75, &["host-a", "pid 4242"]);
    release(&server, "jobs", "tok-1");
    assert!(!server.exists(&lock_key("jobs")));
}

/// Guarantee 1: an acquire whose reply never came is followed by an owner-checked release with
/// the same token, so that a grant nobody saw does not sit out its TTL. The server is kept busy
/// (DEBUG SLEEP) while rlock's acquire is sent; rlock times out, gives the grant back, and when
/// the server catches up it runs both: the lock is granted and then released.
#[test]
fn an_acquire_whose_reply_never_came_is_given_back() {
    let server = RedisServer::start();
    // As on a server rlock has used before: the scripts are cached, so the acquire and the
    // give-back run as sent (on a cold cache both get NOSCRIPT, and nothing is granted).
    for script in [&rlock::lock::ACQUIRE, &rlock::lock::LEAVE] {
        server.cmd(&["SCRIPT", "LOAD", script.source]);
    }
    let url = server.url();
    let sleeper = std::thread::spawn(move || {
        let mut conn = redis::Client::open(url)
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(5))
            .unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg("1.5")
            .query::<()>(&mut conn)
            .unwrap();
    });
    // The server is asleep once a PING goes unanswered.
    wait_until("the server to sleep", Duration::from_secs(5), || {
        let mut conn = match redis::Client::open(server.url())
            .unwrap()
            .get_connection_with_timeout(Duration::from_millis(200))
        {
            Ok(c) => c,
            Err(_) => return true,
        };
        conn.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        redis::cmd("PING").query::<String>(&mut conn).is_err()
    });
    let out = run(rlock_at(&server).args(["--op-timeout", "300ms", "acquire", "-k", "jobs", "-n"]));
    assert_eq!(out.code, 69, "{out}");
    sleeper.join().unwrap();
    wait_until(
        "the server to run the acquire and the give-back",
        Duration::from_secs(5),
        || server.hgetall(&state_key("jobs")).contains_key("released"),
    );
    assert!(
        !server.exists("rlock:jobs"),
        "the unseen grant must have been released, not left for its TTL (PTTL {})",
        server.pttl("rlock:jobs")
    );
    let state = server.hgetall(&state_key("jobs"));
    assert_eq!(
        state.get("fence").map(|f| is_clock_fence(&server, f)),
        Some(true),
        "{state:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Regressions: forced breaks, renew, passwords, a token nobody got, bounds on input
// ---------------------------------------------------------------------------------------------

#[test]
fn release_by_the_owner_after_a_forced_break_is_refused() {
    let server = RedisServer::start();
    let token = acquire(&server, "jobs", &["--ttl", "60s"]);
    assert_ok(&run(
        rlock_at(&server).args(["release", "-k", "jobs", "--force"])
    ));
    assert!(!server.exists(&lock_key("jobs")), "--force broke nothing");
    // The owner did not release it: it must hear that it lost the lock, not "released".
    let out = run(rlock_at(&server).args(["release", "-k", "jobs", "--token", &token]));
    assert_fails(&out, 77, &["'jobs'"]);
    assert!(!server.exists(&lock_key("jobs")));
}

#[test]
fn renew_with_a_shorter_ttl_does_not_shorten_the_lease() {
    let server = RedisServer::start();
    let token = acquire(&server, "jobs", &["--ttl", "60s"]);
    let out =
        run(rlock_at(&server).args(["renew", "-k", "jobs", "--token", &token, "--ttl", "1s"]));
    assert_ok(&out);
    let pttl = server.pttl(&lock_key("jobs"));
    assert!(
        (50_001..=60_000).contains(&pttl),
        "renew --ttl 1s cut a 60 s lease short: PTTL {pttl}"
    );
    assert_eq!(server.get(&lock_key("jobs")), Some(token.clone()));

    // Nor the TTL the lock was last given: a renew without --ttl after it still renews for
    // 60 s, for a lock and for a semaphore's holder alike.
    let sem = acquire(&server, "slots", &["--ttl", "60s", "--limit", "2"]);
    for (key, token) in [("jobs", &token), ("slots", &sem)] {
        let out =
            run(rlock_at(&server).args(["renew", "-k", key, "--token", token, "--ttl", "1s"]));
        assert_ok(&out);
        let out = run(rlock_at(&server).args(["inspect", "--json", "-k", key]));
        let json: Value = serde_json::from_str(&out.stdout).expect("JSON");
        assert_eq!(json["holders"][0]["lease_ms"], 60_000, "{key}: {json}");
        // Let a few seconds of the lease go by the server's clock, then renew with no --ttl.
        let lock = lock_key(key);
        let ends_before = server.pttl(&lock);
        wait_until(
            "the lease to run down a little",
            Duration::from_secs(10),
            || server.pttl(&lock) < ends_before - 1500,
        );
        assert_ok(&run(
            rlock_at(&server).args(["renew", "-k", key, "--token", token])
        ));
        let pttl = server.pttl(&lock);
        assert!(
            pttl > 59_000,
            "{key}: a plain renew did not renew for 60 s: PTTL {pttl}"
        );
    }
}

#[test]
fn a_url_password_with_a_comma_or_a_slash_is_one_password_and_never_shown() {
    const PW: &str = "Zq,wq7secret";
    let server = RedisServer::start_with(&["--requirepass", PW]);
    let port = server.port();
    let good = format!("redis://:{PW}@127.0.0.1:{port}");
    let token = token_of(&run(
        rlock().args(["-u", &good, "acquire", "-k", "jobs", "-n"])
    ));
    assert_eq!(server.get(&lock_key("jobs")), Some(token.clone()));
    assert_ok(&run(
        rlock().args(["-u", &good, "release", "-k", "jobs", "--token", &token])
    ));
    assert!(!server.exists(&lock_key("jobs")));

    // A wrong password with a comma: refused, and no piece of either password is shown.
    let wrong = format!("redis://:Kx,vv3wrong@127.0.0.1:{port}");
    let state = server.hgetall(&state_key("jobs"));
    for verbose in [&[][..], &["-v"]] {
        let out = run(rlock()
            .args(["-u", &wrong])
            .args(verbose)
            .args(["acquire", "-k", "jobs", "-n"]));
        assert_eq!(out.code, 77, "{out}");
        for piece in ["Zq", "wq7secret", "Kx", "vv3wrong"] {
            assert_no_secret(&out, piece);
        }
    }
    assert!(
        !server.exists(&lock_key("jobs")),
        "a refused acquire took the lock"
    );
    assert_eq!(
        server.hgetall(&state_key("jobs")),
        state,
        "nothing may be written"
    );

    // A '/' in the password makes the URL malformed (RFC 3986: the authority ends at the first
    // '/'): a configuration error, still without the password.
    let slash = format!("redis://:Zq/wq7secret@127.0.0.1:{}", dead_port());
    for verbose in [&[][..], &["-v"]] {
        let out = run(rlock()
            .args(["-u", &slash])
            .args(verbose)
            .args(["acquire", "-k", "jobs", "-n"]));
        assert_fails(&out, 78, &["URL"]);
        for piece in ["Zq/", "wq7secret"] {
            assert_no_secret(&out, piece);
        }
    }
}

#[test]
fn help_does_not_show_the_password_in_rlock_url() {
    let url = format!("redis://:Zq7secret@127.0.0.1:{}", dead_port());
    for args in [
        &["exec", "--help"][..],
        &["exec", "-h"],
        &["acquire", "--help"],
        &["--help"],
    ] {
        let out = run(rlock().env("RLOCK_URL", &url).args(args));
        assert_eq!(out.code, 0, "{args:?}\n{out}");
        assert!(
            out.stdout.contains("RLOCK_URL"),
            "{args:?}: the help still names the variable\n{out}"
        );
        assert_no_secret(&out, "Zq7secret");
    }
}

#[test]
fn the_holder_command_stored_in_redis_hides_a_url_password() {
    const PW: &str = "Zq7secret";
    let server = RedisServer::start_with(&["--requirepass", PW]);
    // The shell that runs rlock (not exec'd into it: `; true`) is the holder whose command line
    // is recorded, password and all.
    let script = format!(
        r#""$RL" --url redis://:{PW}@127.0.0.1:{} acquire -k jobs; true"#,
        server.port()
    );
    let out = run(&mut sh(&script));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        server.get(&lock_key("jobs")).as_deref(),
        Some(out.stdout.trim())
    );
    let state = server.hgetall(&state_key("jobs"));
    assert!(
        state
            .get("cmd")
            .is_some_and(|c| c.contains("acquire -k jobs") && c.contains("redis://:***@")),
        "the holder's command is recorded, its password redacted: {state:?}"
    );
    for (field, value) in &state {
        assert!(!value.contains(PW), "{field} holds the password: {state:?}");
    }
    for extra in [&[][..], &["--json"]] {
        let out = run(rlock_at(&server)
            .env("RLOCK_PASSWORD", PW)
            .args(["inspect", "-k", "jobs"])
            .args(extra));
        assert_eq!(out.code, 0, "{out}");
        assert!(
            out.stdout.contains("acquire"),
            "the command is shown\n{out}"
        );
        assert_no_secret(&out, PW);
    }
}

#[test]
fn acquire_that_cannot_print_its_token_releases_the_lock() {
    let server = RedisServer::start();
    for format in ["", "--export", "--json"] {
        let out = run(sh(&format!(
            r#""$RL" --url "$URL" acquire -k jobs {format} > /dev/full"#
        ))
        .env("URL", server.url()));
        assert!(
            !server.exists(&lock_key("jobs")),
            "acquire {format}: a lock whose token nobody got is left held\n{out}"
        );
        assert_fails(&out, 70, &["'jobs'", "released"]);
    }
}

#[test]
fn out_of_range_and_negative_durations_and_control_characters_are_usage_errors() {
    let server = RedisServer::start();
    let cases: &[(&[&str], &str)] = &[
        (&["acquire", "-k", "jobs", "--ttl", "300000000y"], "365d"),
        (
            &["renew", "-k", "jobs", "--token", "t", "--ttl", "300000000y"],
            "365d",
        ),
        (&["acquire", "-k", "jobs", "--ttl", "-5s"], "negative"),
        (&["acquire", "-k", "jobs", "-w", "-5s"], "negative"),
        (&["--op-timeout", "2h", "acquire", "-k", "jobs"], "1h"),
        (&["acquire", "-k", "a\tb"], "control characters"),
        // What is said about a newline: see a_key_with_a_newline_is_refused_with_a_message_…
        (&["acquire", "-k", "a\nb"], ""),
        (&["inspect", "-k", "a\nb"], ""),
    ];
    for (args, needle) in cases {
        let out = run(rlock_at(&server).args(*args));
        assert_usage(&out, needle);
        assert_eq!(q::<i64>(&server, &["DBSIZE"]), 0, "{args:?} wrote to Redis");
    }
    // A wait too long to add to the clock is a wait without end, not a crash.
    let token = acquire(&server, "jobs", &["-w", "18446744073709551615s"]);
    release(&server, "jobs", &token);
}

#[test]
fn a_key_with_a_newline_is_refused_with_a_message_that_says_why() {
    let server = RedisServer::start();
    let out = run(rlock_at(&server).args(["acquire", "-k", "a\nb"]));
    assert_fails(&out, 2, &["--key", "control characters", r"got 'a\nb'"]);
}

#[test]
fn an_out_of_range_database_is_a_configuration_error() {
    let server = RedisServer::start();
    let url = format!("{}/999", server.url());
    for args in [
        &["acquire", "-k", "jobs", "-n"][..],
        &["acquire", "-k", "jobs"],
        &["release", "-k", "jobs", "--token", "t"],
        &["inspect", "-k", "jobs"],
    ] {
        let out = run(rlock().args(["-u", &url]).args(args));
        assert_fails(&out, 78, &["database"]);
    }
    assert_eq!(q::<i64>(&server, &["DBSIZE"]), 0, "nothing may be written");
}

/// `--op-timeout` is also read from $RLOCK_OP_TIMEOUT.
#[test]
fn op_timeout_comes_from_the_environment_too() {
    let server = RedisServer::start();
    acquire(&server, "jobs", &["--ttl", "60s"]);
    server.freeze();
    let (out, took) = run_within(
        rlock_at(&server)
            .env("RLOCK_OP_TIMEOUT", "300ms")
            .args(["acquire", "-k", "other", "-n"]),
        Duration::from_secs(10),
    );
    server.thaw();
    assert_fails(&out, 69, &[&server.url()]);
    // One timed-out attempt plus the give-back, each 300 ms: well under the 2 s default.
    assert!(took < Duration::from_millis(1500), "took {took:?}");
}

/// unix:// URLs reach a server over its socket, for every subcommand.
#[test]
fn a_unix_socket_url_works() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("redis.sock");
    let sock_arg = sock.to_str().unwrap().to_string();
    let server = RedisServer::start_with(&["--unixsocket", &sock_arg, "--unixsocketperm", "700"]);
    let url = format!("unix://{sock_arg}");
    let out = run(rlock().args(["--url", &url, "acquire", "-k", "jobs"]));
    assert_eq!(out.code, 0, "{out}");
    let token = out.stdout.trim().to_string();
    assert_eq!(server.get(&lock_key("jobs")), Some(token.clone()));
    let out = run(rlock().args(["--url", &url, "inspect", "-k", "jobs"]));
    assert_eq!(out.code, 0, "{out}");
    let out = run(rlock().args(["--url", &url, "release", "-k", "jobs", "--token", &token]));
    assert_eq!(out.code, 0, "{out}");
    assert!(!server.exists(&lock_key("jobs")));
    let out = run(rlock().args(["--url", &url, "exec", "-k", "jobs", "--", "true"]));
    assert_eq!(out.code, 0, "{out}");
    // A waiter subscribes over the socket too, and is woken by the release (not by the TTL).
    let out = run(rlock().args(["--url", &url, "acquire", "-k", "jobs", "--ttl", "60s"]));
    let token = out.stdout.trim().to_string();
    let mut waiter = common::Background::spawn(
        "waiter",
        dir.path(),
        rlock().args(["--url", &url, "exec", "-k", "jobs", "--", "true"]),
    );
    waiter.wait_for("the waiter to queue", Duration::from_secs(10), || {
        matches!(
            server.try_cmd(&["ZCARD", "{rlock:jobs}:q"]),
            Ok(redis::Value::Int(1))
        )
    });
    let out = run(rlock().args(["--url", &url, "release", "-k", "jobs", "--token", &token]));
    assert_eq!(out.code, 0, "{out}");
    let (out, _) = waiter.finish(Duration::from_secs(5));
    assert_eq!(out.code, 0, "the waiter over the socket: {out}");
}
