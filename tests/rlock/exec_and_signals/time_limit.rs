//! `--timeout`: at the limit everything the command started gets --lost-signal, SIGKILL --grace
//! later, the lock is given back and rlock exits 124, as timeout(1) does; the history says
//! "timed out". The guardian holds the limit too, so a stopped rlock does not stretch it.
//! Judged by the escaped processes' own heartbeats.

use super::containment::{Escape, KEY, LOCK, Reaper, assert_silent_after, loop_alive};
use super::process_group::{heartbeat, now_ns};
use super::tempdir;
use crate::common::{Background as Bg, RedisServer, rlock_at, run, wait_until};
use nix::sys::signal::Signal;
use std::time::{Duration, Instant};

/// `--timeout 1s` over a command whose leader sleeps and whose loop, in a session of its own,
/// ignores TERM: TERM at 1 s, SIGKILL at 1 s + grace (1 s for a 4 s lease); then 124, the lock
/// free, nothing left running, and the run on record as timed out.
#[test]
fn a_command_past_its_timeout_is_stopped_whole_and_rlock_exits_124() {
    let server = RedisServer::start();
    let dir = tempdir();
    let _reaper = Reaper(dir.path());
    let script = format!("{} sleep 60", Escape::Setsid.start());
    let mut cmd = rlock_at(&server);
    cmd.args(["exec", "-k", KEY, "--ttl", "4s", "--timeout", "1s", "--"])
        .args(["sh", "-c", &script]);
    let started = Instant::now();
    let mut rl = Bg::spawn_group("rlock", dir.path(), &mut cmd);
    let (out, ended) = rl.finish(Duration::from_secs(20));
    let exited = now_ns();
    let took = ended - started;
    assert_eq!(out.code, 124, "{out}");
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_millis(2500),
        "TERM at 1s, KILL a grace of 1s later; rlock ended after {took:?}: {out}"
    );
    assert!(
        out.stderr.contains("--timeout of 1s") && out.stderr.lines().count() == 1,
        "one line naming the limit: {out}"
    );
    assert_silent_after(dir.path(), exited, "--timeout");
    assert!(!server.exists(LOCK), "the lock was given back");

    let history = run(rlock_at(&server).args(["inspect", "-k", KEY, "--history", "--json"]));
    let runs: serde_json::Value = serde_json::from_str(&history.stdout).expect("JSON");
    assert_eq!(runs[0]["outcome"], "timed-out", "{history}");
    assert_eq!(runs[0]["code"], 124, "{history}");
    let table = run(rlock_at(&server).args(["inspect", "-k", KEY, "--history"]));
    assert!(table.stdout.contains("timed out"), "{table}");
}

/// The issue's own line: a command whose processes all end at TERM ends at the limit, and one
/// that ends before it keeps its own status.
#[test]
fn a_timeout_that_terms_everything_ends_at_the_limit_and_a_quick_command_is_unaffected() {
    let server = RedisServer::start();
    let started = Instant::now();
    let out = run(rlock_at(&server).args([
        "exec",
        "-k",
        KEY,
        "--timeout",
        "1s",
        "--",
        "sh",
        "-c",
        "setsid sleep 60 & sleep 60",
    ]));
    let took = started.elapsed();
    assert_eq!(out.code, 124, "{out}");
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_millis(1500),
        "ended after {took:?}: {out}"
    );
    assert!(!server.exists(LOCK));

    let out = run(rlock_at(&server).args([
        "exec",
        "-k",
        KEY,
        "--timeout",
        "30",
        "--",
        "sh",
        "-c",
        "exit 3",
    ]));
    assert_eq!(out.code, 3, "{out}");
    let out = run(rlock_at(&server)
        .env("RLOCK_TIMEOUT", "1ms")
        .args(["exec", "-k", KEY, "--", "sleep", "5"]));
    assert_eq!(out.code, 124, "RLOCK_TIMEOUT is read: {out}");
}

/// rlock stopped (SIGSTOP) once its command runs cannot act at the limit, and its lease of a
/// minute is far off; the guardian, told the limit, TERMs the command at 1 s and SIGKILLs what
/// ignores TERM a grace of 500 ms later, the lock still held. Continued, rlock exits 124.
#[test]
fn the_guardian_keeps_the_time_limit_while_rlock_is_stopped() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let _reaper = Reaper(d);
    let script = format!("{} sleep 60", Escape::Setsid.start());
    let mut cmd = rlock_at(&server);
    cmd.args(["exec", "-k", KEY, "--ttl", "60s", "--grace", "500ms"])
        .args(["--timeout", "1s", "--", "sh", "-c", &script]);
    let started = now_ns();
    let mut rl = Bg::spawn_group("rlock", d, &mut cmd);
    rl.wait_for("heartbeats", Duration::from_secs(10), || {
        heartbeat(d).is_some()
    });
    rl.kill(Signal::SIGSTOP);
    wait_until(
        "the guardian to stop the escaped loop, rlock stopped",
        Duration::from_secs(10),
        || d.join("esc.pid").exists() && loop_alive(d).is_none(),
    );
    let last = heartbeat(d).expect("heartbeats");
    let after = Duration::from_nanos((last - started) as u64);
    assert!(
        after < Duration::from_millis(3000),
        "SIGKILL is due 1.5 s after the start; the last heartbeat came {after:?} after it"
    );
    assert!(server.exists(LOCK), "the lock is still held, rlock stopped");
    rl.kill(Signal::SIGCONT);
    let (out, _) = rl.finish(Duration::from_secs(10));
    assert_eq!(out.code, 124, "{out}");
    assert!(!server.exists(LOCK), "the lock was given back");
}
