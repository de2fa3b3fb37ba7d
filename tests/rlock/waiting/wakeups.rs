//! Wake-up on release, on expiry, after a lost notification.

use super::*;
use crate::common::basic::{is_clock_fence, redis_now_ms};

// Wake-up on release, on expiry, after a lost notification
// ---------------------------------------------------------------------------------------------

#[test]
fn a_parked_waiter_acquires_promptly_after_release() {
    let server = RedisServer::start();
    let dir = tempdir();
    let holder = hold(&server, "60s");

    let mut waiter = [Bg::spawn(
        "waiter",
        dir.path(),
        rlock_at(&server).args(["acquire", "-k", KEY, "--ttl", "5s"]),
    )];
    let waiting = wait_queued(&server, 1, &mut waiter);
    // Its first attempt was at or before this moment; its first refresh comes REFRESH later.
    let queued_at = Instant::now();
    assert_eq!(server.get(LOCK).as_deref(), Some(holder.as_str()));

    release(&server, &holder);
    let released_at = Instant::now();
    let (out, acquired_at) = waiter[0].finish(Duration::from_secs(10));
    assert_eq!(out.code, 0, "the waiter failed: {out}");
    let token = out.stdout.trim();
    assert_eq!(
        token, waiting[0],
        "the waiter printed another token than it queued with"
    );
    assert_eq!(server.get(LOCK).as_deref(), Some(token));

    let after_release = acquired_at - released_at;
    assert!(
        after_release < Duration::from_secs(1),
        "the waiter took {after_release:?} after the release to acquire: a release must wake the \
         first waiter at once (not at the holder's 60 s TTL)"
    );
    let after_queued = acquired_at - queued_at;
    assert!(
        after_queued < Duration::from_millis(1500),
        "the waiter acquired {after_queued:?} after it was queued: the release did not wake it"
    );
    let pttl = server.pttl(LOCK);
    assert!(
        (1..=5000).contains(&pttl),
        "the new lock has PTTL {pttl}, not the waiter's 5 s"
    );
    assert_no_waiters_left(&server);
}

#[test]
fn a_waiter_takes_a_dead_holders_lock_at_its_ttl() {
    let server = RedisServer::start();
    let dir = tempdir();
    let spawned_at = Instant::now();
    // The holder never releases: `acquire` exits at once, as a holder that died would.
    let holder = hold(&server, "1500ms");
    let holder_returned = Instant::now();
    let held = state(&server);
    assert_eq!(held.get("token"), Some(&holder));
    let holder_since: i64 = held["since"].parse().expect("since is ms");

    let mut waiter = [Bg::spawn(
        "waiter",
        dir.path(),
        rlock_at(&server).args(["acquire", "-k", KEY, "--ttl", "5s"]),
    )];
    wait_queued(&server, 1, &mut waiter);
    let (out, acquired_at) = waiter[0].finish(Duration::from_secs(10));
    assert_eq!(out.code, 0, "the waiter failed: {out}");
    let token = out.stdout.trim();
    assert_eq!(server.get(LOCK).as_deref(), Some(token));

    // Redis's own clock (TIME in the acquire script) stamps both grants.
    let granted = state(&server);
    assert_eq!(granted.get("token").map(String::as_str), Some(token));
    let gap = granted["since"].parse::<i64>().expect("since is ms") - holder_since;
    assert!(
        gap >= 1500,
        "the waiter was granted the lock {gap} ms after the holder, before its 1500 ms TTL ran out"
    );
    assert!(
        gap < 1900,
        "the waiter was granted the lock {gap} ms after the holder: it should wake when the \
         holder's 1500 ms TTL runs out"
    );
    // The same on the test's clock, which includes process start and exit.
    assert!(acquired_at - spawned_at >= Duration::from_millis(1500));
    assert!(
        acquired_at - holder_returned < Duration::from_millis(3000),
        "the waiter exited {:?} after the holder took a 1500 ms lock",
        acquired_at - holder_returned
    );
    assert_no_waiters_left(&server);
}

#[test]
fn a_lost_notification_costs_only_latency() {
    let server = RedisServer::start();
    let dir = tempdir();
    // Another client's lock: a plain SET NX PX, released by DEL, which publishes nothing. A
    // waiter cannot hear it go, only find it gone when its lease would have ended. Timed by the
    // server's clock (the SET, and the grant's fence, minted from the server's microseconds),
    // so that the waiter's own start on a loaded machine is not counted.
    const LEASE_MS: i64 = 3000;
    server.cmd(&["SET", LOCK, "x", "NX", "PX", "3000"]);
    let set_ms = redis_now_ms(&server);

    let mut waiter = [Bg::spawn(
        "waiter",
        dir.path(),
        rlock_at(&server).args(["acquire", "-k", KEY, "--ttl", "5s", "--json"]),
    )];
    wait_queued(&server, 1, &mut waiter);
    assert!(waiter[0].running());
    server.cmd(&["DEL", LOCK]);

    let (out, _) = waiter[0].finish(Duration::from_secs(30));
    assert_eq!(out.code, 0, "the waiter failed: {out}");
    let grant: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert_eq!(server.get(LOCK).as_deref(), grant["token"].as_str());
    let fence = grant["fence"].as_i64().expect("a fence");
    assert!(is_clock_fence(&server, &fence.to_string()), "{out}");
    let latency = fence / 1000 - set_ms;
    assert!(
        latency < LEASE_MS + 1000,
        "the waiter took {latency} ms to notice a lock deleted without a notification: it should \
         find out when the lease it saw would have ended ({LEASE_MS} ms)"
    );
    assert_no_waiters_left(&server);
}

#[test]
fn a_foreign_lock_that_expires_is_taken_at_its_ttl() {
    let server = RedisServer::start();
    let dir = tempdir();
    let set_at = Instant::now();
    server.cmd(&["SET", LOCK, "x", "NX", "PX", "1500"]);

    let mut waiter = [Bg::spawn(
        "waiter",
        dir.path(),
        rlock_at(&server).args(["acquire", "-k", KEY, "--ttl", "5s"]),
    )];
    wait_queued(&server, 1, &mut waiter);
    let (out, acquired_at) = waiter[0].finish(Duration::from_secs(30));
    assert_eq!(out.code, 0, "the waiter failed: {out}");
    assert_eq!(server.get(LOCK).as_deref(), Some(out.stdout.trim()));
    let after = acquired_at - set_at;
    assert!(
        after >= Duration::from_millis(1500),
        "acquired {after:?} after another client's 1500 ms lock was set"
    );
    assert!(
        after < Duration::from_millis(3000),
        "acquired only {after:?} after another client's 1500 ms lock was set"
    );
    assert_no_waiters_left(&server);
}

// ---------------------------------------------------------------------------------------------
