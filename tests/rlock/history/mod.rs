//! Every run on record: `exec` appends each run to the lock's history in Redis (every way a run
//! ends, with its fields), and `release` the hold an `acquire` took, `inspect --history` reads it newest first (table and JSON, `-n`, the
//! last run of every lock), the history is capped and expires, a refused write changes nothing
//! else, it lives in the lock's slot on a Cluster and on every Redlock master; and
//! `--metrics-file` writes Prometheus text that a real parser reads, keeping the other keys'
//! lines, never seen half-written.

mod abandoned;
mod events;
mod holds;
mod metrics;
mod metrics_links;
mod once_per;
mod outcomes;
mod retention;
mod servers;

use crate::common::{Background, Output, RedisServer, rlock_at, run, wait_until};
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

const SOON: Duration = Duration::from_secs(10);

fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("rlock-history-test-")
        .tempdir()
        .expect("create temp dir")
}

/// The history of lock `name` in rlock's words: `inspect --history --json -k name -n count`.
#[track_caller]
fn history_of(mut cmd: Command, name: &str, count: usize) -> Vec<Value> {
    let out = run(cmd.args([
        "inspect",
        "--history",
        "--json",
        "-k",
        name,
        "-n",
        &count.to_string(),
    ]));
    assert_eq!(out.code, 0, "{out}");
    runs_of(&out)
}

/// The runs of an `inspect --history --json` output.
#[track_caller]
fn runs_of(out: &Output) -> Vec<Value> {
    let json: Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("inspect --history --json is not JSON ({e}): {out}"));
    json.as_array()
        .unwrap_or_else(|| panic!("not an array: {out}"))
        .clone()
}

/// `rlock exec -k KEY ARGS` on `server`, run to its end.
#[track_caller]
fn exec(server: &RedisServer, key: &str, args: &[&str]) -> Output {
    run(rlock_at(server).args(["exec", "-k", key]).args(args))
}

/// The outcomes of `runs`, in order.
fn outcomes(runs: &[Value]) -> Vec<&str> {
    runs.iter()
        .map(|r| r["outcome"].as_str().unwrap_or("?"))
        .collect()
}

/// The number of entries in a stream (0 when there is none).
fn xlen(server: &RedisServer, key: &str) -> i64 {
    redis::cmd("XLEN")
        .arg(key)
        .query(&mut server.conn())
        .expect("XLEN")
}

/// Waits until a background rlock exec holds `lock` on `server` (its command running).
fn wait_held(server: &RedisServer, lock: &str, bg: &mut Background) {
    bg.wait_for(&format!("{lock} to be held"), SOON, || server.exists(lock));
}

/// Waits until one waiter is in the line of `queue`.
fn wait_queued(server: &RedisServer, queue: &str, bg: &mut Background) {
    bg.wait_for("a waiter in line", SOON, || {
        matches!(server.try_cmd(&["ZCARD", queue]), Ok(redis::Value::Int(1)))
    });
}
