//! The Lua scripts survive `SCRIPT FLUSH` and a restart, a retried acquire is idempotent, and an
//! acquire whose reply never came is given back.

use crate::common::basic::*;
use crate::common::{RedisServer, rlock_at, run, wait_until};
use std::time::Duration;

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
            // The arguments by name, as rlock sends them.
            .arg(
                &[
                    "token", "tok-1", "ttl", "60000", "join", "0", "check", "5000",
                ][..],
            )
            .arg(&["channel", "{rlock:jobs}:wake"][..])
            .arg(
                &[
                    "host", "host-a", "pid", "4242", "user", "alice", "cmd", "cron",
                ][..],
            )
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

/// A retried acquire of a grant with --hold-at-least longer than its TTL leaves the hold: the
/// lease is made the TTL at least, never shorter (the simulation found a retry that cut it).
#[test]
fn a_retried_acquire_keeps_the_grant_s_hold() {
    let server = RedisServer::start();
    let eval = || -> Vec<redis::Value> {
        redis::cmd("EVAL")
            .arg(rlock::lock::ACQUIRE.source)
            .arg(3)
            .arg(&[lock_key("jobs"), state_key("jobs"), queue_key("jobs")][..])
            .arg(&["token", "tok-1", "ttl", "1000", "hold", "60000"][..])
            .arg(&["join", "0", "check", "5000", "channel", "{rlock:jobs}:wake"][..])
            .query(&mut server.conn())
            .expect("EVAL acquire.lua")
    };
    let first = eval();
    assert_eq!(first, eval(), "a retry answers like the first call");
    let pttl = server.pttl(&lock_key("jobs"));
    assert!(pttl > 50_000, "the retry cut the hold to {pttl} ms");
}

/// Mutual exclusion, and no grant left behind: an acquire whose reply never came is followed by an owner-checked release with
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
    let out = run(rlock_at(&server).args([
        "--op-timeout",
        "300ms",
        "--connect-timeout",
        "0",
        "acquire",
        "-k",
        "jobs",
        "-n",
    ]));
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
