//! No polling, and the waiting behaviour around it: a parked waiter is woken by the release, finds
//! a dead holder's lock at its TTL, survives a lost notification, leaves nothing behind when
//! interrupted or timed out, and waiters are served in arrival order without overlap.
//!
//! Timing bounds are outcome bounds: each one separates "woken by the release / the TTL" from
//! "woke up on the next 2 s refresh" (or from "never"), with generous slack either side.

mod at_scale;
mod giving_up;
mod handoff;
mod idle_wakeups;
mod many_waiters;
mod newest;
mod no_polling;
mod speaking;
mod wakeups;

use crate::common::{Background as Bg, RedisServer, rlock_at, run, wait_until};
use nix::sys::signal::Signal;
use std::collections::HashMap;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The lock every test uses, and the Redis names rlock gives it (see `src/lock/mod.rs`).
const KEY: &str = "k";
const LOCK: &str = "rlock:k";
const STATE: &str = "{rlock:k}:state";
const QUEUE: &str = "{rlock:k}:q";

/// How long the first waiter in line has to claim a lock handed to it (`CLAIM_MS` in
/// `src/lock/common.lua`): what a waiter that died costs the line, once.
const CLAIM: Duration = Duration::from_secs(1);

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("rlock-waiting-")
        .tempdir()
        .expect("create temp dir")
}

/// `rlock acquire -k k --ttl TTL` in the foreground; returns the token.
fn hold(server: &RedisServer, ttl: &str) -> String {
    let out = run(rlock_at(server).args(["acquire", "-k", KEY, "--ttl", ttl]));
    assert_eq!(out.code, 0, "holder's acquire failed: {out}");
    let token = out.stdout.trim().to_string();
    assert!(!token.is_empty(), "acquire printed no token: {out}");
    assert_eq!(server.get(LOCK).as_deref(), Some(token.as_str()));
    token
}

fn release(server: &RedisServer, token: &str) {
    let out = run(rlock_at(server).args(["release", "-k", KEY, "--token", token]));
    assert_eq!(out.code, 0, "release failed: {out}");
}

/// The waiting tokens, oldest first.
fn queue(server: &RedisServer) -> Vec<String> {
    redis::cmd("ZRANGE")
        .arg(QUEUE)
        .arg(0)
        .arg(-1)
        .query(&mut server.conn())
        .expect("ZRANGE queue")
}

/// The waiter leases (`w:<token>` fields) in the state hash.
/// The waiter a free lock is reserved for, if any.
fn reserved(server: &RedisServer) -> Option<String> {
    server.hgetall(STATE).get("next").cloned()
}

fn state(server: &RedisServer) -> HashMap<String, String> {
    server.hgetall(STATE)
}

/// Waits until the queue holds `n` tokens and returns them, oldest first. Fails at once, with
/// its output, if one of `procs` exits meanwhile: it was never parked.
fn wait_queued(server: &RedisServer, n: usize, procs: &mut [Bg]) -> Vec<String> {
    let mut q = Vec::new();
    wait_until(
        &format!("{n} waiter(s) in the queue zset {QUEUE}"),
        Duration::from_secs(10),
        || {
            for p in procs.iter_mut() {
                if !p.running() {
                    panic!(
                        "a waiter exited before it was seen in the queue (queue: {:?})\n{}",
                        queue(server),
                        p.describe()
                    );
                }
            }
            q = queue(server);
            q.len() >= n
        },
    );
    assert_eq!(q.len(), n, "more waiters in the queue than started: {q:?}");
    q
}

/// Asserts that no waiter is left in Redis: no queue, no waiter lease.
fn assert_no_waiters_left(server: &RedisServer) {
    assert!(
        !server.exists(QUEUE),
        "the queue zset is left behind: {:?}",
        queue(server)
    );
    let state = server.hgetall(STATE);
    assert!(
        !state.keys().any(|f| f.starts_with("w:")),
        "waiter leases in {STATE}: {state:?}"
    );
}

// ---------------------------------------------------------------------------------------------

/// How many scripts (EVALSHA, EVAL) the server has run, from INFO commandstats.
fn scripts_run(conn: &mut redis::Connection) -> u64 {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(conn)
        .expect("INFO commandstats");
    stats
        .lines()
        .filter_map(|l| {
            let rest = l
                .strip_prefix("cmdstat_evalsha:")
                .or_else(|| l.strip_prefix("cmdstat_eval:"))?;
            rest.strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// `total_commands_processed` from INFO stats.
fn total_commands(conn: &mut redis::Connection) -> u64 {
    info(conn, "stats")
        .lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("total_commands_processed in INFO stats")
}

/// One section of INFO.
fn info(conn: &mut redis::Connection, section: &str) -> String {
    redis::cmd("INFO")
        .arg(section)
        .query(conn)
        .unwrap_or_else(|e| panic!("INFO {section}: {e}"))
}

/// How many scripts the server ran (EVALSHA and EVAL calls).
fn script_calls(conn: &mut redis::Connection) -> u64 {
    info(conn, "commandstats")
        .lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split_once("calls=")?
                .1
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}
