//! Locks written by other clients (a plain string, a redis-py style prefix, a Redisson hash)
//! exclude rlock and show as held; a key that is not a lock stays unchanged.

use crate::common::basic::*;
use crate::common::{RedisServer, rlock_at, run};
use serde_json::Value;

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
