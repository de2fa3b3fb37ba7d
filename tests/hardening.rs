mod common;

// Scripts fail before they write (contract, "Guarantee 9, sharpened"): a script that cannot
// complete changes nothing and says so truly; renewal works on a server out of memory; an ACL
// refusal exits 77 wherever it happens.

use std::collections::HashMap;
use std::time::Duration;

use common::{Output, RedisServer, rlock, rlock_at, run, wait_for_file};

const KEY: &str = "h";
const LOCK: &str = "rlock:h";
const STATE: &str = "{rlock:h}:state";
const QUEUE: &str = "{rlock:h}:q";

/// Everything in the server's database 0, as `TYPE key => DUMP`-free text, to compare before and
/// after a refused command: every key with its type and value.
fn snapshot(server: &RedisServer) -> HashMap<String, String> {
    let mut conn = server.conn();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).expect("KEYS");
    keys.into_iter()
        .map(|k| {
            let kind = server.key_type(&k);
            let value = match kind.as_str() {
                "string" => server.get(&k).unwrap_or_default(),
                "hash" => {
                    let mut fields: Vec<_> = server.hgetall(&k).into_iter().collect();
                    fields.sort();
                    format!("{fields:?}")
                }
                "list" => {
                    let items: Vec<String> = redis::cmd("LRANGE")
                        .arg(&k)
                        .arg(0)
                        .arg(-1)
                        .query(&mut conn)
                        .expect("LRANGE");
                    format!("{items:?}")
                }
                "zset" => {
                    let items: Vec<String> = redis::cmd("ZRANGE")
                        .arg(&k)
                        .arg(0)
                        .arg(-1)
                        .query(&mut conn)
                        .expect("ZRANGE");
                    format!("{items:?}")
                }
                other => other.to_string(),
            };
            (k, format!("{kind}: {value}"))
        })
        .collect()
}

/// rlock's own failure: `code`, one stderr line mentioning every needle.
#[track_caller]
fn assert_fails(out: &Output, code: i32, needles: &[&str]) {
    assert_eq!(out.code, code, "wrong exit code:\n{out}");
    assert_eq!(out.stderr.lines().count(), 1, "one line on stderr:\n{out}");
    for needle in needles {
        assert!(
            out.stderr.contains(needle),
            "stderr should mention {needle:?}:\n{out}"
        );
    }
}

fn acquire(server: &RedisServer, ttl: &str) -> String {
    let out = run(rlock_at(server).args(["acquire", "-n", "-k", KEY, "--ttl", ttl]));
    assert_eq!(out.code, 0, "{out}");
    out.stdout.trim().to_string()
}

#[test]
fn a_state_key_of_another_type_refuses_the_grant_and_grants_nothing() {
    let server = RedisServer::start();
    server.cmd(&["RPUSH", STATE, "x"]);
    let before = snapshot(&server);
    let out = run(rlock_at(&server).args(["acquire", "-n", "-k", KEY, "--ttl", "1h"]));
    assert_fails(&out, 65, &["'h'", STATE, "list", "nothing was changed"]);
    assert!(
        !server.exists(LOCK),
        "a grant nobody received was left behind"
    );
    assert_eq!(
        snapshot(&server),
        before,
        "the refused acquire changed Redis"
    );
}

#[test]
fn a_fence_that_cannot_be_raised_refuses_the_grant_and_grants_nothing() {
    for fence in [
        "abc",
        "9223372036854775807",
        "-5",
        "1.5",
        "9007199254740991",
    ] {
        let server = RedisServer::start();
        server.cmd(&["HSET", STATE, "fence", fence]);
        let before = snapshot(&server);
        for _ in 0..3 {
            let out = run(rlock_at(&server).args(["acquire", "-n", "-k", KEY, "--ttl", "1h"]));
            assert_fails(&out, 65, &["'h'", "fence", "nothing was changed"]);
        }
        assert!(
            !server.exists(LOCK),
            "fence {fence}: a grant nobody received was left"
        );
        assert_eq!(snapshot(&server), before, "fence {fence}: Redis changed");
    }
    // The largest fence that can still be raised is, once.
    let server = RedisServer::start();
    server.cmd(&["HSET", STATE, "fence", "9007199254740989"]);
    let out = run(rlock_at(&server).args(["acquire", "-n", "-k", KEY, "--json"]));
    assert_eq!(out.code, 0, "{out}");
    let json: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert_eq!(json["fence"], 9007199254740990i64);
}

#[test]
fn a_queue_key_of_another_type_keeps_the_lock_on_release() {
    let server = RedisServer::start();
    let token = acquire(&server, "1h");
    server.set(QUEUE, "clobbered");
    let before = snapshot(&server);
    let out = run(rlock_at(&server).args(["release", "-k", KEY, "--token", &token]));
    assert_fails(&out, 65, &["'h'", QUEUE, "nothing was changed"]);
    assert_eq!(
        server.get(LOCK).as_deref(),
        Some(token.as_str()),
        "the lock was deleted"
    );
    assert_eq!(
        snapshot(&server),
        before,
        "the refused release changed Redis"
    );
    // A forced release is refused the same way.
    let out = run(rlock_at(&server).args(["release", "-k", KEY, "--force"]));
    assert_fails(&out, 65, &["'h'", QUEUE]);
    assert_eq!(
        snapshot(&server),
        before,
        "the refused forced release changed Redis"
    );
}

#[test]
fn a_clobbered_state_does_not_stop_a_holder_that_still_owns_the_lock() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let started = dir.path().join("started");
    let done = dir.path().join("done");
    let mut cmd = rlock_at(&server);
    cmd.args(["exec", "-k", KEY, "--ttl", "600ms", "--", "sh", "-c"])
        .arg(r#"echo up > "$1"; sleep 1.5; touch "$2""#)
        .arg("sh")
        .arg(&started)
        .arg(&done);
    let waiter = std::thread::spawn(move || run(&mut cmd));
    wait_for_file(&started, Duration::from_secs(10));
    server.cmd(&["DEL", STATE]);
    server.cmd(&["RPUSH", STATE, "clobbered"]);
    let out = waiter.join().expect("exec thread");
    assert_eq!(out.code, 0, "the holder still owned the lock:\n{out}");
    assert!(
        done.exists(),
        "the command was stopped although the lock was owned"
    );
    // The release refuses to write beside another client's value (nothing changed, said on
    // stderr): the lock goes with its lease.
    assert!(
        out.stderr.contains(STATE),
        "the release's refusal is not told:\n{out}"
    );
    common::wait_until("the lock expires", Duration::from_secs(3), || {
        !server.exists(LOCK)
    });
    assert_eq!(
        server.key_type(STATE),
        "list",
        "the other client's value was touched"
    );
}

#[test]
fn renewal_works_on_a_server_out_of_memory() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let started = dir.path().join("started");
    let mut cmd = rlock_at(&server);
    // Renewed every 200ms for 1.5s; each renewal asks for the lease it already records, and
    // for a longer one at the end, which needs a write to the state.
    cmd.args(["exec", "-k", KEY, "--ttl", "600ms", "--", "sh", "-c"])
        .arg(r#"echo up > "$1"; sleep 1.5"#)
        .arg("sh")
        .arg(&started);
    let waiter = std::thread::spawn(move || run(&mut cmd));
    wait_for_file(&started, Duration::from_secs(10));
    server.cmd(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    server.cmd(&["CONFIG", "SET", "maxmemory", "1"]);
    // The server is full: a new key is refused.
    assert!(
        server.try_cmd(&["SET", "probe", "x"]).is_err(),
        "the server is not full"
    );
    let out = waiter.join().expect("exec thread");
    server.cmd(&["CONFIG", "SET", "maxmemory", "0"]);
    assert_eq!(out.code, 0, "renewals failed on a full server:\n{out}");
    assert!(!server.exists(LOCK), "the lock was not released");
}

/// `ACL SETUSER name on >pw ~* &* +@all -COMMAND`: everything but one command.
fn user_without(server: &RedisServer, command: &str) -> String {
    let name = format!("no-{}", command.replace('|', "-"));
    let minus = format!("-{command}");
    server.cmd(&[
        "ACL", "SETUSER", &name, "reset", "on", ">pw", "~*", "&*", "+@all", &minus,
    ]);
    format!("redis://{name}:pw@127.0.0.1:{}", server.port())
}

#[test]
fn release_without_publish_keeps_the_lock_and_exits_77() {
    let server = RedisServer::start();
    let token = acquire(&server, "1h");
    let before = snapshot(&server);
    let url = user_without(&server, "publish");
    let out = run(rlock().args(["-u", &url, "release", "-k", KEY, "--token", &token]));
    assert_fails(&out, 77, &["'h'", "publish", "ACL"]);
    assert_eq!(
        snapshot(&server),
        before,
        "the refused release changed Redis"
    );
}

#[test]
fn acquire_without_a_write_right_grants_nothing_and_exits_77() {
    for command in ["hincrby", "hset", "zadd", "publish", "set"] {
        let server = RedisServer::start();
        let url = user_without(&server, command);
        let out = run(rlock().args(["-u", &url, "acquire", "-n", "-k", KEY, "--ttl", "1h"]));
        assert_fails(&out, 77, &["'h'", command, "ACL"]);
        assert_eq!(
            snapshot(&server),
            HashMap::new(),
            "without {command}: Redis changed"
        );
    }
}
