//! Nothing left behind: every key rlock writes expires, so a lock with no holder and no waiter
//! leaves nothing after --ttl + 60 s; and the fence keeps rising when the state expired, after
//! FLUSHALL and after a restart without persistence, as long as the server's clock does not step
//! back.

use crate::common::{RedisServer, rlock_at, run, wait_until};
use std::time::Duration;

/// How long the helper keys outlive the last lease (the scripts' KEEP_MS).
const KEEP_MS: i64 = 60_000;
/// Slack for the helper keys a waiter keeps alive: the holder's lease it waits behind (at most
/// the 5 s the tests use) or a claim window (1 s).
const WAITER_LEASE_MS: i64 = 5_000;

/// Every key in the server with its PTTL.
fn keys_with_pttl(server: &RedisServer) -> Vec<(String, i64)> {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut server.conn())
        .expect("KEYS");
    keys.into_iter()
        .map(|k| (k.clone(), server.pttl(&k)))
        .collect()
}

/// How long the history of runs (`exec --history-ttl`, 30 days by default) outlives the last
/// run: the one key kept longer than the lock's, by design, and it expires too.
const HISTORY_MS: i64 = 30 * 86_400_000;

/// No key without an expiry, and none that lives longer than `max_ms` (the history of runs no
/// longer than its own life).
#[track_caller]
fn assert_all_expire(server: &RedisServer, max_ms: i64, after: &str) {
    for (key, pttl) in keys_with_pttl(server) {
        let max_ms = if key.ends_with("}:history") {
            HISTORY_MS
        } else {
            max_ms
        };
        assert!(
            (0..=max_ms).contains(&pttl),
            "after {after}: key {key:?} has PTTL {pttl} (must expire within {max_ms} ms)"
        );
    }
}

fn fence_of(stdout: &str) -> i64 {
    let json: serde_json::Value = serde_json::from_str(stdout).expect("acquire --json");
    json["fence"].as_i64().expect("an integer fence")
}

/// Takes `key` (waiting at most 5s) and returns the grant's token and fence.
fn grant(server: &RedisServer, key: &str, ttl: &str) -> (String, i64) {
    let out =
        run(rlock_at(server).args(["acquire", "--json", "-w", "5s", "-k", key, "--ttl", ttl]));
    assert_eq!(out.code, 0, "{out}");
    let json: serde_json::Value = serde_json::from_str(&out.stdout).expect("acquire --json");
    (
        json["token"].as_str().expect("token").to_string(),
        fence_of(&out.stdout),
    )
}

fn release(server: &RedisServer, key: &str, token: &str) {
    let out = run(rlock_at(server).args(["release", "-k", key, "--token", token]));
    assert_eq!(out.code, 0, "{out}");
}

/// The server's clock in microseconds.
fn server_time_us(server: &RedisServer) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(&mut server.conn()).expect("TIME");
    secs * 1_000_000 + micros
}

#[test]
fn every_key_rlock_writes_expires() {
    let server = RedisServer::start();
    // A lock, a waiter that gives up (it joined the queue), a release, an exec, a forced break.
    let (token, _) = grant(&server, "a", "2s");
    assert_all_expire(&server, 2_000 + KEEP_MS, "a grant");
    let out = run(rlock_at(&server).args(["acquire", "-w", "300ms", "-k", "a", "--ttl", "1s"]));
    assert_eq!(out.code, 75, "{out}");
    assert_all_expire(&server, WAITER_LEASE_MS + KEEP_MS, "a waiter gave up");
    let out = run(rlock_at(&server).args(["renew", "-k", "a", "--token", &token, "--ttl", "3s"]));
    assert_eq!(out.code, 0, "{out}");
    assert_all_expire(&server, WAITER_LEASE_MS + KEEP_MS, "a renewal");
    release(&server, "a", &token);
    assert_all_expire(&server, WAITER_LEASE_MS + KEEP_MS, "a release");
    let out = run(rlock_at(&server).args(["exec", "-k", "b", "--ttl", "1s", "--", "true"]));
    assert_eq!(out.code, 0, "{out}");
    grant(&server, "c", "1s");
    let out = run(rlock_at(&server).args(["release", "-k", "c", "--force"]));
    assert_eq!(out.code, 0, "{out}");
    assert_all_expire(
        &server,
        WAITER_LEASE_MS + KEEP_MS,
        "exec and a forced release",
    );
    // rlock wrote something for each of them, and all of it goes.
    let keys = keys_with_pttl(&server);
    assert!(
        keys.iter().any(|(k, _)| k == "{rlock:b}:state")
            && keys.iter().any(|(k, _)| k == "{rlock:b}:history"),
        "the test checked nothing: {keys:?}"
    );
}

#[test]
fn renewals_keep_the_state_alive_as_long_as_the_lease() {
    let server = RedisServer::start();
    let (token, _) = grant(&server, "r", "1s");
    let out = run(rlock_at(&server).args(["renew", "-k", "r", "--token", &token, "--ttl", "120s"]));
    assert_eq!(out.code, 0, "{out}");
    let state = server.pttl("{rlock:r}:state");
    assert!(
        state > 120_000 && state <= 120_000 + KEEP_MS,
        "the state must outlive the renewed lease of 120s, and not by more than 60s: {state}"
    );
}

#[test]
fn a_state_left_without_expiry_by_an_older_rlock_gets_one() {
    let server = RedisServer::start();
    server.cmd(&["HSET", "{rlock:old}:state", "fence", "41", "released", "1"]);
    assert_eq!(server.pttl("{rlock:old}:state"), -1);
    let (token, fence) = grant(&server, "old", "2s");
    assert!(fence > 41, "{fence}");
    release(&server, "old", &token);
    assert_all_expire(&server, 2_000 + KEEP_MS, "a grant on an old state");
}

#[test]
fn fences_keep_rising_after_the_state_expires_or_the_data_is_lost() {
    let mut server = RedisServer::start();
    let mut last = 0;
    let mut check = |fence: i64, what: &str, server: &RedisServer| {
        assert!(
            fence > last,
            "fence {fence} after {what} is not above {last}"
        );
        assert!(fence < 1 << 53, "fence {fence} does not fit in 53 bits");
        let now = server_time_us(server);
        assert!(
            fence <= now + 1_000,
            "fence {fence} is ahead of the server's clock {now} after {what}"
        );
        last = fence;
    };
    // Back-to-back grants within one microsecond still rise (last + 1).
    for round in 0..5 {
        let (token, fence) = grant(&server, "f", "30s");
        check(fence, &format!("grant {round}"), &server);
        release(&server, "f", &token);
    }
    // The state is gone (it expired, or another client deleted it).
    server.cmd(&["DEL", "{rlock:f}:state"]);
    let (token, fence) = grant(&server, "f", "30s");
    check(fence, "the state expired", &server);
    release(&server, "f", &token);
    server.cmd(&["FLUSHALL"]);
    let (_, fence) = grant(&server, "f", "30s");
    check(fence, "FLUSHALL", &server);
    // A restart without persistence forgets everything, the lock included.
    server.restart();
    assert!(!server.exists("rlock:f"), "the restart kept the data");
    let (_, fence) = grant(&server, "f", "30s");
    check(fence, "a restart without persistence", &server);
}

#[test]
fn a_lock_with_no_holder_and_no_waiter_leaves_nothing_after_its_ttl_and_a_minute() {
    // The bound, proved by PTTLs: every key's expiry is at most --ttl + 60s after the lock was
    // given up. (Redis itself removes expired keys; waiting a minute here would add nothing.)
    let server = RedisServer::start();
    for n in 0..50 {
        let key = format!("pr-{n}");
        let out = run(rlock_at(&server).args(["exec", "-k", &key, "--ttl", "1s", "--", "true"]));
        assert_eq!(out.code, 0, "{out}");
    }
    assert_all_expire(&server, 1_000 + KEEP_MS, "50 distinct locks");
    // And Redis does expire them: shorten one state's life and see it go.
    server.cmd(&["PEXPIRE", "{rlock:pr-0}:state", "50"]);
    wait_until("the state to expire", Duration::from_secs(5), || {
        !server.exists("{rlock:pr-0}:state")
    });
    // inspect without -k lists no long-gone lock.
    let out = run(rlock_at(&server).arg("inspect"));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(out.stdout, "", "inspect lists locks nobody holds:\n{out}");
}

/// What a grant with the default --ttl (30 s) leaves after its release: the helper keys for
/// KEEP_MS after the lease.
const DEFAULT_LEAVES_MS: i64 = 30_000 + KEEP_MS;

#[test]
fn after_a_release_nothing_outlives_what_a_default_grant_leaves_whatever_the_ttl() {
    let server = RedisServer::start();
    let ok = |args: &[&str]| {
        let out = run(rlock_at(&server).args(args));
        assert_eq!(out.code, 0, "{args:?}: {out}");
        out.stdout.trim().to_string()
    };
    // Renewed for a year, then released; granted for a year, then released; and broken.
    let (token, _) = grant(&server, "renewed", "30s");
    ok(&["renew", "-k", "renewed", "--token", &token, "--ttl", "365d"]);
    release(&server, "renewed", &token);
    assert_all_expire(
        &server,
        DEFAULT_LEAVES_MS,
        "a release after renew --ttl 365d",
    );
    let (token, _) = grant(&server, "long", "365d");
    release(&server, "long", &token);
    assert_all_expire(&server, DEFAULT_LEAVES_MS, "a release of a 365d grant");
    let (token, _) = grant(&server, "broken", "30s");
    ok(&["renew", "-k", "broken", "--token", &token, "--ttl", "365d"]);
    ok(&["release", "-k", "broken", "--force"]);
    assert_all_expire(
        &server,
        DEFAULT_LEAVES_MS,
        "release --force after renew 365d",
    );
    ok(&["exec", "-k", "ran", "--ttl", "365d", "--", "true"]);
    assert_all_expire(&server, DEFAULT_LEAVES_MS, "exec --ttl 365d");
    // A semaphore: its state lives on while a holder does, and no longer after the last.
    for sharing in [&["--limit", "2"][..], &["--shared"]] {
        let a = ok(&[&["acquire", "-k", "sem", "--ttl", "365d"], sharing].concat());
        let b = ok(&[&["acquire", "-k", "sem"], sharing].concat());
        ok(&["release", "-k", "sem", "--token", &a]);
        let state = "{rlock:sem}:state";
        assert!(
            server.pttl(state) > 25_000,
            "the holder left needs its record"
        );
        ok(&["release", "-k", "sem", "--token", &b]);
        assert_all_expire(&server, DEFAULT_LEAVES_MS, "the last holder's release");
    }
}
