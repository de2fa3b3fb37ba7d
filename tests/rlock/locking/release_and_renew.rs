//! `release` and `renew`: only the token's owner may release or renew, an expired lock is not
//! brought back, a forced break says whose lock it broke, and a renewal never shortens a lease.

use crate::common::basic::*;
use crate::common::{RedisServer, rlock_at, run, wait_until};
use serde_json::Value;
use std::time::Duration;

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
