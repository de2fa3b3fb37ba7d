mod common;

// What operators asked for (issue 14, "Operators"): `inspect` shows when each lease was last
// renewed, marks a holder on this host whose process is gone as stale, redraws with --watch,
// and will not pass off one node of a Redis Cluster as the whole cluster.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Background, RedisCluster, RedisServer, rlock, rlock_at, run, wait_until};
use nix::sys::signal::Signal;
use serde_json::Value;

const SOON: Duration = Duration::from_secs(10);

fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("rlock-operators-test-")
        .tempdir()
        .expect("create temp dir")
}

/// `sh -c SCRIPT` with `$RL` the rlock binary and `$URL` the server, and no RLOCK_* setting
/// of the developer's.
fn shell(server: &RedisServer, script: &str) -> Command {
    let mut cmd = Command::new("sh");
    for (name, _) in std::env::vars_os() {
        if name.as_encoded_bytes().starts_with(b"RLOCK_") {
            cmd.env_remove(&name);
        }
    }
    cmd.arg("-c")
        .arg(script)
        .env("RL", env!("CARGO_BIN_EXE_rlock"))
        .env("URL", server.url());
    cmd
}

/// Takes `key` from a short-lived shell, as `eval "$(rlock acquire --export …)"` in a script
/// that then ends: returns the shell's pid, which is gone once this returns.
fn acquire_from_a_shell_that_exits(server: &RedisServer, key: &str, opts: &str) -> i64 {
    // `; true` keeps sh from replacing itself with rlock: the holder must be the shell.
    let out = run(&mut shell(
        server,
        &format!(r#"echo $$; eval "$("$RL" --url "$URL" acquire --export -k {key} {opts})"; true"#),
    ));
    assert_eq!(out.code, 0, "{out}");
    out.stdout.trim().parse().expect("the shell's pid")
}

fn inspect_json(server: &RedisServer, key: &str) -> Value {
    let out = run(rlock_at(server).args(["inspect", "--json", "-k", key]));
    assert!(out.code == 0 || out.code == 1, "{out}");
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// `rlock exec -k KEY OPTS -- sleep 60` in the background, once inspect sees it hold the key.
fn live_holder(
    server: &RedisServer,
    dir: &Path,
    name: &str,
    key: &str,
    opts: &[&str],
) -> Background {
    let mut cmd = rlock_at(server);
    cmd.args(["exec", "-k", key])
        .args(opts)
        .args(["--", "sleep", "60"]);
    let mut holder = Background::spawn(name, dir, &mut cmd);
    let pid = holder.pid() as i64;
    holder.wait_for("the exec to hold the lock", SOON, || {
        inspect_json(server, key)["holders"]
            .as_array()
            .is_some_and(|hs| hs.iter().any(|h| h["pid"] == pid))
    });
    holder
}

#[test]
fn a_holder_whose_process_is_gone_is_stale_and_a_live_one_is_not() {
    let server = RedisServer::start();
    let dir = tempdir();
    let gone = acquire_from_a_shell_that_exits(&server, "left", "--ttl 1h");
    let _live = live_holder(&server, dir.path(), "live", "alive", &["--ttl", "30s"]);

    let left = inspect_json(&server, "left");
    assert_eq!(left["holder"]["pid"], gone, "{left}");
    assert_eq!(left["stale"], true, "{left}");
    assert_eq!(left["holder"]["stale"], true, "{left}");
    assert_eq!(left["holders"][0]["stale"], true, "{left}");
    let alive = inspect_json(&server, "alive");
    assert_eq!(alive["stale"], false, "{alive}");
    assert_eq!(alive["holders"][0]["stale"], false, "{alive}");

    let out = run(rlock_at(&server).arg("inspect"));
    assert_eq!(out.code, 0, "{out}");
    // Stdout is the table alone: a header and a row per lock (`inspect | tail -n +2` counts
    // locks); the hint is on stderr.
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0].starts_with("KEY "), "{out}");
    assert!(!out.stdout.contains("stale:"), "{out}");
    let row = |key: &str| {
        out.stdout
            .lines()
            .find(|l| l.starts_with(&format!("{key} ")))
            .unwrap_or_else(|| panic!("no row for {key}: {out}"))
            .to_string()
    };
    assert!(
        row("left").contains(&format!("pid {gone} (stale)")),
        "{out}"
    );
    assert!(!row("alive").contains("stale"), "{out}");
    let token = left["token"].as_str().expect("token");
    let hint = format!(
        "rlock: stale: pid {gone} is gone on this host; break it with: rlock -u {} release -k left --force (or --token {token} instead of --force, to break only this holder's lease)",
        server.url()
    );
    assert_eq!(
        out.stderr.lines().collect::<Vec<_>>(),
        [hint.as_str()],
        "{out}"
    );

    // The same record on another host: nobody here can know, so it is never stale.
    let state = "{rlock:left}:state";
    server.cmd(&["HSET", state, "host", "some-other-host"]);
    let left = inspect_json(&server, "left");
    assert_eq!(left["stale"], false, "{left}");
    let out = run(rlock_at(&server).args(["inspect", "-k", "left"]));
    assert!(!out.stdout.contains("stale"), "{out}");
    assert_eq!(out.stderr, "", "{out}");

    // The hint's command, pasted into a shell, breaks the stale lock.
    let out = run(&mut paste(&server, &hint));
    assert_eq!(out.code, 0, "{out}");
    assert!(
        !server.exists("rlock:left"),
        "the stale lock is still there"
    );
}

/// Runs the command a hint of inspect's gives (what follows "with: " up to " (or"), as a user
/// pasting it into a shell would: `rlock` on PATH, no RLOCK_* setting, not even the server's
/// URL, so that the hint must name everything it needs.
fn paste(server: &RedisServer, hint: &str) -> Command {
    let line = hint.split("with: ").nth(1).expect("a command in the hint");
    let line = line.split(" (or").next().unwrap();
    let mut cmd = shell(server, line);
    let bin = Path::new(env!("CARGO_BIN_EXE_rlock")).parent().unwrap();
    let path = std::env::var("PATH").unwrap_or_default();
    cmd.env("PATH", format!("{}:{path}", bin.display()))
        .env_remove("URL");
    cmd
}

/// The line on inspect's stderr that says how to break a stale holder's lock.
fn stale_hint(out: &common::Output) -> &str {
    out.stderr
        .lines()
        .find(|l| l.starts_with("rlock: stale:"))
        .unwrap_or_else(|| panic!("no hint: {out}"))
}

#[test]
fn the_stale_hint_names_the_server_and_prefix_it_was_read_from() {
    // A stale lock under another prefix, and a live lock of the same name under the default
    // prefix on the same server: the hint breaks the stale one only.
    let server = RedisServer::start();
    let dir = tempdir();
    let gone = acquire_from_a_shell_that_exits(&server, "jobs", "--ttl 1h --prefix 'team A:'");
    let live = live_holder(&server, dir.path(), "live", "jobs", &[]);
    let out = run(rlock_at(&server).args(["--prefix", "team A:", "inspect", "-k", "jobs"]));
    assert_eq!(out.code, 0, "{out}");
    let hint = stale_hint(&out);
    assert!(
        hint.contains(&format!("pid {gone} ")) && hint.contains("--prefix 'team A:'"),
        "{out}"
    );
    let out = run(&mut paste(&server, hint));
    assert_eq!(out.code, 0, "{out}");
    assert!(
        !server.exists("team A:jobs"),
        "the stale lock is still there"
    );
    let json = inspect_json(&server, "jobs");
    assert_eq!(
        json["holder"]["pid"],
        live.pid() as i64,
        "the live lock was broken: {json}"
    );

    // Options from the environment are left to the environment: a URL with a password in
    // RLOCK_URL is not printed as '***' for the paste to fail on.
    acquire_from_a_shell_that_exits(&server, "nightly", "--ttl 1h --prefix 'team A:'");
    let env = [
        ("RLOCK_URL", server.url()),
        ("RLOCK_PREFIX", "team A:".to_string()),
    ];
    let out = run(rlock().envs(env.clone()).args(["inspect", "-k", "nightly"]));
    let hint = stale_hint(&out);
    assert!(
        hint.contains("with: rlock release -k nightly --force"),
        "{out}"
    );
    let out = run(paste(&server, hint).envs(env));
    assert_eq!(out.code, 0, "{out}");
    assert!(
        !server.exists("team A:nightly"),
        "the stale lock is still there"
    );
}

/// A pid that no process has: a child's, once it was reaped.
fn a_dead_pid() -> String {
    let mut child = Command::new("true").spawn().expect("spawn true");
    let pid = child.id();
    child.wait().expect("wait for true");
    pid.to_string()
}

/// A holder in another pid namespace (a container sharing the host's name) records it, and
/// `inspect` outside that namespace does not judge its pid by the processes it can see.
#[test]
fn a_holder_in_another_pid_namespace_is_never_called_stale() {
    let server = RedisServer::start();
    // `unshare --pid --fork`, as a container's runtime would (root is needed, as in CI).
    let out = run(&mut shell(
        &server,
        r#"unshare --pid --fork sh -c 'eval "$("$RL" --url "$URL" acquire --export -k boxed --ttl 1h)"; true'"#,
    ));
    assert_eq!(
        out.code, 0,
        "unshare --pid failed: this test needs util-linux's unshare and root: {out}"
    );
    let state = "{rlock:boxed}:state";
    let theirs = server.hgetall(state).remove("pidns").unwrap_or_default();
    let ours = std::fs::read_link("/proc/self/ns/pid").expect("our pid namespace");
    let ours = ours.to_string_lossy();
    assert!(theirs.starts_with("pid:["), "recorded {theirs:?}");
    assert_ne!(theirs, ours, "the holder's namespace was not recorded");

    // Its pid (1 in its namespace) taken for one that no process has here: still not stale.
    server.cmd(&["HSET", state, "pid", &a_dead_pid()]);
    let json = inspect_json(&server, "boxed");
    assert_eq!(json["stale"], false, "{json}");
    let out = run(rlock_at(&server).args(["inspect", "-k", "boxed"]));
    assert!(!out.stdout.contains("stale"), "{out}");
    assert_eq!(out.stderr, "", "{out}");

    // The same record in this namespace: stale.
    server.cmd(&["HSET", state, "pidns", &ours]);
    let json = inspect_json(&server, "boxed");
    assert_eq!(json["stale"], true, "{json}");
}

#[test]
fn a_stale_holder_of_a_semaphore_is_told_to_give_back_its_own_place() {
    let server = RedisServer::start();
    let dir = tempdir();
    let gone = acquire_from_a_shell_that_exits(&server, "slots", "--limit 2 --ttl 1h");
    let live = live_holder(&server, dir.path(), "live", "slots", &["--limit", "2"]);

    let json = inspect_json(&server, "slots");
    let holders = json["holders"].as_array().expect("holders");
    assert_eq!(holders.len(), 2, "{json}");
    let stale: Vec<&Value> = holders.iter().filter(|h| h["stale"] == true).collect();
    assert_eq!(stale.len(), 1, "{json}");
    assert_eq!(stale[0]["pid"], gone, "{json}");
    assert_eq!(json["stale"], false, "a live holder is left: {json}");
    let token = stale[0]["token"].as_str().expect("token");

    let out = run(rlock_at(&server).args(["inspect", "-k", "slots"]));
    assert_eq!(out.code, 0, "{out}");
    let hint = format!(
        "rlock: stale: pid {gone} is gone on this host; free its place in 'slots' with: rlock -u {} release -k slots --token {token}",
        server.url()
    );
    assert_eq!(
        out.stderr.lines().collect::<Vec<_>>(),
        [hint.as_str()],
        "{out}"
    );
    // A header and a row per holder, nothing else.
    assert_eq!(out.stdout.lines().count(), 3, "{out}");
    assert!(!out.stdout.contains("stale:"), "{out}");

    // Following it frees that place alone.
    let out = run(&mut paste(&server, &hint));
    assert_eq!(out.code, 0, "{out}");
    let json = inspect_json(&server, "slots");
    assert_eq!(json["holders"].as_array().map(Vec::len), Some(1), "{json}");
    assert_eq!(json["holders"][0]["pid"], live.pid() as i64, "{json}");
}

/// Contract, "Output": inspect's stdout carries only the table (or the JSON); the stale
/// holder's "break it with" line goes to stderr, so `rlock inspect | tail -n +2` counts locks.
#[test]
fn inspect_stdout_carries_only_the_table_and_hints_go_to_stderr() {
    let server = RedisServer::start();
    let dir = tempdir();
    let gone = acquire_from_a_shell_that_exits(&server, "left", "--ttl 1h");
    let hint_start = format!("rlock: stale: pid {gone} is gone on this host; break it with: ");

    for args in [&["inspect"][..], &["inspect", "-k", "left"]] {
        let out = run(rlock_at(&server).args(args));
        assert_eq!(out.code, 0, "{out}");
        let lines: Vec<&str> = out.stdout.lines().collect();
        assert_eq!(lines.len(), 2, "a header and one row: {out}");
        assert!(lines[0].starts_with("KEY "), "{out}");
        assert!(lines[1].starts_with("left "), "{out}");
        assert!(lines[1].contains(&format!("pid {gone} (stale)")), "{out}");
        assert!(!lines.iter().any(|l| l.starts_with("stale")), "{out}");
        let err: Vec<&str> = out.stderr.lines().collect();
        assert_eq!(err.len(), 1, "{out}");
        assert!(err[0].starts_with(&hint_start), "{out}");
    }

    // --json: the document, nothing else, on stdout; the JSON says stale itself.
    for args in [
        &["inspect", "--json"][..],
        &["inspect", "--json", "-k", "left"],
    ] {
        let out = run(rlock_at(&server).args(args));
        assert_eq!(out.code, 0, "{out}");
        let json: Value =
            serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out}"));
        let one = if json.is_array() { &json[0] } else { &json };
        assert_eq!(one["stale"], true, "{out}");
        assert_eq!(out.stdout.lines().count(), 1, "{out}");
    }

    // -q: nothing on either (as before: -q only answers with the exit code).
    let out = run(rlock_at(&server).args(["-q", "inspect", "-k", "left"]));
    assert_eq!((out.code, &*out.stdout, &*out.stderr), (0, "", ""), "{out}");

    // --watch into a file: the table alone on stdout, the hint on stderr.
    let mut cmd = rlock_at(&server);
    cmd.args(["inspect", "--watch", "1m"]);
    let mut watch = Background::spawn("watch", dir.path(), &mut cmd);
    let errors = dir.path().join("watch.stderr");
    watch.wait_for("the hint", SOON, || {
        lines_of(&errors).iter().any(|l| l.starts_with(&hint_start))
    });
    // Stdout was flushed before the hint was written.
    let lines = lines_of(&dir.path().join("watch.stdout"));
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert!(
        lines[0].starts_with("KEY ") && lines[1].starts_with("left "),
        "{lines:#?}"
    );
    assert_eq!(lines_of(&errors).len(), 1, "{:#?}", lines_of(&errors));
    watch.kill(Signal::SIGTERM);
    watch.finish(SOON);

    // Nothing held, watched into a file: a table of no rows (its header) on stdout, and what
    // that means on stderr.
    let mut cmd = rlock_at(&server);
    cmd.args(["--prefix", "empty:", "inspect", "--watch", "1m"]);
    let mut watch = Background::spawn("empty", dir.path(), &mut cmd);
    let errors = dir.path().join("empty.stderr");
    watch.wait_for("the note", SOON, || !lines_of(&errors).is_empty());
    assert_eq!(
        lines_of(&errors),
        ["rlock: no locks held under prefix 'empty:'"]
    );
    let lines = lines_of(&dir.path().join("empty.stdout"));
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(lines[0].starts_with("KEY "), "{lines:#?}");
    watch.kill(Signal::SIGTERM);
    watch.finish(SOON);
}

/// The `renewed_ms` of the one holder of `key`, by inspect.
fn renewed_ms(server: &RedisServer, key: &str) -> i64 {
    let json = inspect_json(server, key);
    json["holders"][0]["renewed_ms"]
        .as_i64()
        .unwrap_or_else(|| panic!("no renewed_ms: {json}"))
}

#[test]
fn inspect_shows_when_each_lease_was_last_renewed() {
    let server = RedisServer::start();
    let dir = tempdir();

    // Taken and never renewed: renewed when it was taken.
    let out = run(rlock_at(&server).args(["acquire", "-k", "manual", "--ttl", "1m"]));
    assert_eq!(out.code, 0, "{out}");
    let token = out.stdout.trim().to_string();
    let json = inspect_json(&server, "manual");
    assert_eq!(json["renewed_ms"], json["holder"]["since_ms"], "{json}");
    assert_eq!(
        json["holders"][0]["renewed_ms"], json["renewed_ms"],
        "{json}"
    );
    let taken = renewed_ms(&server, "manual");
    // `rlock renew` moves it on (the server's clock, in ms: poll until it has ticked).
    wait_until("a renewal to be recorded", SOON, || {
        let out = run(rlock_at(&server).args(["renew", "-k", "manual", "--token", &token]));
        assert_eq!(out.code, 0, "{out}");
        renewed_ms(&server, "manual") > taken
    });

    // Held by exec with a 1s lease (renewed every 333ms): the time keeps moving.
    let mut holders = Vec::new();
    for (key, opts) in [("lock", &[][..]), ("sem", &["--limit", "2"][..])] {
        let mut args = vec!["--ttl", "1s"];
        args.extend_from_slice(opts);
        holders.push(live_holder(&server, dir.path(), key, key, &args));
        let first = renewed_ms(&server, key);
        let mut seen = vec![first];
        wait_until(&format!("{key}: three renewals"), SOON, || {
            let now = renewed_ms(&server, key);
            if now != *seen.last().unwrap() {
                seen.push(now);
            }
            seen.len() >= 4
        });
        assert!(seen.windows(2).all(|w| w[0] < w[1]), "{key}: {seen:?}");
        let since = inspect_json(&server, key)["holders"][0]["since_ms"]
            .as_i64()
            .expect("since_ms");
        assert!(seen[3] > since, "{key}: renewed {seen:?}, taken {since}");
        // Well within the lease of 1s, however loaded the machine.
        assert!(seen[3] - seen[1] < 3_000, "{key}: {seen:?}");
    }

    let out = run(rlock_at(&server).arg("inspect"));
    let header = out.stdout.lines().next().unwrap_or_default().to_string();
    assert!(header.contains("RENEWED"), "{out}");
    let row = out
        .stdout
        .lines()
        .find(|l| l.starts_with("lock "))
        .unwrap_or_else(|| panic!("{out}"));
    let at = header.find("RENEWED").unwrap();
    assert!(
        row[at..].contains("ms ago") || row[at..].contains("s ago"),
        "{out}"
    );
}

/// The lines of a file written so far (a background process's stdout).
fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

/// Waits until `holder`'s lease was renewed `n` times more (so that a watch looking every 100ms
/// has looked several times meanwhile).
fn renewals(server: &RedisServer, key: &str, n: usize) {
    let mut last = renewed_ms(server, key);
    let mut count = 0;
    wait_until(&format!("{n} renewals of {key}"), SOON, || {
        let now = renewed_ms(server, key);
        if now != last {
            last = now;
            count += 1;
        }
        count >= n
    });
}

#[test]
fn watch_json_prints_a_line_per_change_and_ends_on_a_signal() {
    let server = RedisServer::start();
    let dir = tempdir();
    let mut cmd = rlock_at(&server);
    cmd.args(["inspect", "--watch", "100ms", "--json"]);
    let mut watch = Background::spawn("watch", dir.path(), &mut cmd);
    let printed = dir.path().join("watch.stdout");
    watch.wait_for("the first line", SOON, || lines_of(&printed).len() == 1);
    assert_eq!(lines_of(&printed), ["[]"]);

    // A lock taken, renewed every 100ms (its times change at every look): one line.
    let holder = live_holder(&server, dir.path(), "holder", "w", &["--ttl", "300ms"]);
    watch.wait_for("the lock to be shown", SOON, || {
        lines_of(&printed).len() == 2
    });
    renewals(&server, "w", 5);
    let lines = lines_of(&printed);
    assert_eq!(lines.len(), 2, "a line without a change: {lines:#?}");
    let shown: Value = serde_json::from_str(&lines[1]).expect("JSON line");
    assert_eq!(shown[0]["key"], "w", "{shown}");
    assert_eq!(shown[0]["holder"]["pid"], holder.pid() as i64, "{shown}");

    // Released: one more line, with nothing held.
    holder.kill(Signal::SIGTERM);
    watch.wait_for("the release to be shown", SOON, || {
        lines_of(&printed).len() == 3
    });
    assert_eq!(lines_of(&printed)[2], "[]");

    let sent = Instant::now();
    watch.kill(Signal::SIGTERM);
    let (out, at) = watch.finish(SOON);
    assert_eq!(out.code, -(Signal::SIGTERM as i32), "{out}");
    assert!(at - sent < Duration::from_secs(1), "took {:?}", at - sent);
    assert_eq!(out.stderr, "", "{out}");
}

#[test]
fn watch_prints_the_table_again_only_when_it_changed() {
    let server = RedisServer::start();
    let dir = tempdir();
    let _holder = live_holder(&server, dir.path(), "holder", "t1", &["--ttl", "300ms"]);
    let mut cmd = rlock_at(&server);
    cmd.args(["inspect", "--watch", "100ms"]);
    let mut watch = Background::spawn("watch", dir.path(), &mut cmd);
    let printed = dir.path().join("watch.stdout");
    let tables = |printed: &Path| {
        lines_of(printed)
            .iter()
            .filter(|l| l.starts_with("KEY "))
            .count()
    };
    watch.wait_for("the first table", SOON, || tables(&printed) == 1);
    renewals(&server, "t1", 5);
    assert_eq!(tables(&printed), 1, "{:#?}", lines_of(&printed));

    let out = run(rlock_at(&server).args(["acquire", "-k", "t2", "--ttl", "1m"]));
    assert_eq!(out.code, 0, "{out}");
    watch.wait_for("the second table", SOON, || tables(&printed) == 2);
    renewals(&server, "t1", 3);
    let lines = lines_of(&printed);
    assert_eq!(tables(&printed), 2, "{lines:#?}");
    // The second table, after a blank line, has both locks; no terminal codes in a file.
    let second = lines.iter().rposition(|l| l.starts_with("KEY ")).unwrap();
    assert_eq!(lines[second - 1], "", "{lines:#?}");
    assert!(lines[second + 1].starts_with("t1 "), "{lines:#?}");
    assert!(lines[second + 2].starts_with("t2 "), "{lines:#?}");
    assert!(!lines.concat().contains('\x1b'), "{lines:#?}");

    // Ctrl-C: rlock dies of SIGINT, at once.
    let sent = Instant::now();
    watch.kill(Signal::SIGINT);
    let (out, at) = watch.finish(SOON);
    assert_eq!(out.code, -(Signal::SIGINT as i32), "{out}");
    assert!(at - sent < Duration::from_secs(1), "took {:?}", at - sent);
}

#[test]
fn a_signal_ends_a_slow_watch_at_once_and_quiet_watch_is_refused() {
    let server = RedisServer::start();
    let dir = tempdir();
    let mut cmd = rlock_at(&server);
    cmd.args(["inspect", "--watch", "1m", "--json"]);
    let mut watch = Background::spawn("watch", dir.path(), &mut cmd);
    let printed = dir.path().join("watch.stdout");
    watch.wait_for("the first line", SOON, || lines_of(&printed).len() == 1);
    let sent = Instant::now();
    watch.kill(Signal::SIGINT);
    let (out, at) = watch.finish(SOON);
    assert_eq!(out.code, -(Signal::SIGINT as i32), "{out}");
    assert!(at - sent < Duration::from_secs(1), "took {:?}", at - sent);

    let out = run(rlock_at(&server).args(["-q", "inspect", "--watch"]));
    assert_eq!(out.code, 2, "{out}");
    assert!(
        out.stderr.contains("--watch") && out.stderr.contains("-q"),
        "{out}"
    );
    assert_eq!(out.stdout, "", "{out}");
    let out = run(rlock_at(&server).args(["inspect", "--watch", "10ms"]));
    assert_eq!(out.code, 2, "{out}");
    assert!(out.stderr.contains("at least 100ms"), "{out}");
}

#[test]
fn a_watch_into_a_pipe_ends_when_the_reader_goes() {
    // `rlock inspect --watch 1m | head -1`: head reads the first table and exits; nothing
    // changes after that, so there is no next write to fail. The watch must end anyway, and not
    // hang on until the next change; it exits 0, as when a write finds the pipe closed.
    let server = RedisServer::start();
    let out = run(rlock_at(&server).args(["acquire", "-k", "p", "--ttl", "1m"]));
    assert_eq!(out.code, 0, "{out}");
    let mut watch = rlock_at(&server)
        .args(["inspect", "--watch", "1m"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn rlock");
    let mut first = String::new();
    let mut reader = std::io::BufReader::new(watch.stdout.take().unwrap());
    std::io::BufRead::read_line(&mut reader, &mut first).expect("read the first line");
    assert!(first.starts_with("KEY "), "{first:?}");
    let closed = Instant::now();
    drop(reader);
    let mut status = None;
    wait_until("the watch to end after its reader went", SOON, || {
        status = watch.try_wait().expect("try_wait");
        status.is_some()
    });
    let took = closed.elapsed();
    let status = status.unwrap();
    assert!(took < Duration::from_secs(2), "took {took:?}");
    assert_eq!(status.code(), Some(0), "{status:?}");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut watch.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(stderr, "", "a closed pipe is no error to report");
}

#[test]
fn a_watch_on_a_terminal_redraws_in_place_within_its_size() {
    // A terminal of 8 rows and 40 columns: every frame starts at home, overwrites its lines and
    // clears what is left, and is cut to the terminal (no wrap, no scroll). The screen is never
    // cleared as a whole (what makes `watch` flicker).
    let server = RedisServer::start();
    let size = nix::pty::Winsize {
        ws_row: 8,
        ws_col: 40,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pty = nix::pty::openpty(Some(&size), None).expect("openpty");
    let mut cmd = rlock_at(&server);
    cmd.args(["inspect", "--watch", "100ms"])
        .stdout(std::process::Stdio::from(pty.slave))
        .stderr(std::process::Stdio::piped());
    let mut watch = cmd.spawn().expect("spawn rlock");
    drop(cmd);
    let (screen, _reader) = common::drain(std::fs::File::from(pty.master));
    let shown = || String::from_utf8_lossy(&screen.lock().unwrap()).into_owned();
    wait_until("a frame saying nothing is held", SOON, || {
        shown().contains("no locks")
    });
    for key in ["first-of-many-locks", "second-of-many-locks"] {
        let out = run(rlock_at(&server).args(["acquire", "-k", key, "--ttl", "1m"]));
        assert_eq!(out.code, 0, "{out}");
    }
    wait_until("a frame with both locks", SOON, || {
        let text = shown();
        let last = text.rsplit("\x1b[H").next().unwrap_or_default();
        last.contains("first-of-many") && last.contains("second-of-many")
    });
    let _ = watch.kill();
    let _ = watch.wait();

    let text = shown();
    assert!(
        !text.contains("\x1b[2J"),
        "the screen was cleared: {text:?}"
    );
    let frames: Vec<&str> = text.split("\x1b[H").skip(1).collect();
    assert!(frames.len() >= 2, "{text:?}");
    for frame in &frames[..frames.len() - 1] {
        assert!(
            frame.ends_with("\x1b[J"),
            "a frame that does not clear below: {frame:?}"
        );
        let lines: Vec<&str> = frame
            .trim_end_matches("\x1b[J")
            .split_terminator("\r\n")
            .collect();
        assert!(
            lines.len() <= 7,
            "more lines than the terminal has rows: {lines:#?}"
        );
        for line in &lines {
            let line = line
                .strip_suffix("\x1b[K")
                .unwrap_or_else(|| panic!("{line:?}"));
            assert!(
                line.chars().count() < 40,
                "a line wider than the terminal: {line:?}"
            );
        }
    }
    assert!(
        frames[0].starts_with("rlock inspect, every 100ms: "),
        "{:?}",
        frames[0]
    );
}

/// How many INFO commands the server has run (INFO commandstats; the asking INFO is counted by
/// the next one).
fn info_calls(server: &RedisServer) -> u64 {
    let text: String =
        redis::from_redis_value(server.cmd(&["INFO", "commandstats"])).expect("INFO commandstats");
    text.lines()
        .find_map(|l| l.strip_prefix("cmdstat_info:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[test]
fn listing_one_node_of_a_cluster_is_refused_with_a_hint() {
    let cluster = RedisCluster::start();
    let urls = cluster.urls();
    let with_cluster = || {
        let mut cmd = rlock();
        cmd.arg("--cluster");
        for url in &urls {
            cmd.args(["--url", url]);
        }
        cmd
    };
    // Locks on every master.
    let mut names = Vec::new();
    let mut owners = std::collections::BTreeSet::new();
    for i in 0..1000 {
        let name = format!("job{i}");
        if owners.insert(cluster.owner(&format!("rlock:{name}"))) {
            let out = run(with_cluster().args(["acquire", "-k", &name, "--ttl", "1m"]));
            assert_eq!(out.code, 0, "{out}");
            names.push(name);
        }
        if owners.len() == 3 {
            break;
        }
    }
    assert_eq!(names.len(), 3, "no key found for every master");

    let out = run(rlock_at(cluster.node(0)).arg("inspect"));
    assert_eq!(out.code, 78, "{out}");
    assert!(out.stderr.contains("add --cluster"), "{out}");
    assert!(out.stderr.contains("Redis Cluster"), "{out}");
    assert_eq!(out.stdout, "", "{out}");
    assert_eq!(out.stderr.lines().count(), 1, "{out}");

    let out = run(with_cluster().args(["inspect", "--json"]));
    assert_eq!(out.code, 0, "{out}");
    let json: Value = serde_json::from_str(&out.stdout).expect("JSON");
    let mut listed: Vec<&str> = json
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|l| l["key"].as_str())
        .collect();
    listed.sort();
    let mut want: Vec<&str> = names.iter().map(String::as_str).collect();
    want.sort();
    assert_eq!(listed, want, "{out}");
}

#[test]
fn the_cluster_check_costs_nothing_without_a_listing_and_needs_no_info_right() {
    let server = RedisServer::start();
    let out = run(rlock_at(&server).args(["acquire", "-k", "mine", "--ttl", "1m"]));
    assert_eq!(out.code, 0, "{out}");

    // inspect -k sends no INFO; a listing sends one.
    let before = info_calls(&server);
    let out = run(rlock_at(&server).args(["inspect", "-k", "mine"]));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(info_calls(&server), before + 1, "inspect -k asked INFO");
    let before = info_calls(&server);
    let out = run(rlock_at(&server).arg("inspect"));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        info_calls(&server),
        before + 2,
        "the listing did not ask INFO once"
    );

    // A user who may not run INFO still gets the listing.
    server.cmd(&[
        "ACL", "SETUSER", "noinfo", "on", ">pw", "~*", "&*", "+@all", "-info",
    ]);
    let url = format!("redis://noinfo:pw@127.0.0.1:{}", server.port());
    let out = run(rlock().args(["--url", &url, "inspect"]));
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.lines().any(|l| l.starts_with("mine ")), "{out}");
    // Without even a refusal in the ACL LOG: the right is checked before INFO is asked.
    let log: Vec<redis::Value> = redis::cmd("ACL")
        .arg("LOG")
        .query(&mut server.conn())
        .expect("ACL LOG");
    assert!(log.is_empty(), "refused: {log:?}");
}
