//! Scripts fail before they write: a script that cannot complete (a helper key of another type, a
//! fence that cannot rise, a missing ACL right) changes nothing and says so truly; renewal works
//! on a server out of memory; every ACL refusal exits 77 wherever it happens; and settings that
//! cannot work (the same master twice as a Redlock quorum, a brace in the prefix) are refused.

use crate::common::{Output, RedisServer, rlock, rlock_at, run, wait_for_file};
use std::collections::HashMap;
use std::time::Duration;

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
    crate::common::wait_until("the lock expires", Duration::from_secs(3), || {
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
    if !checks_rights_first() {
        // Before Redis 7 a script cannot ask the ACL before it writes: PUBLISH is refused
        // when it runs, after the lock was freed (docs/tests.md says so).
        assert!(!server.exists(LOCK), "the lock is still held");
        return;
    }
    assert_eq!(
        snapshot(&server),
        before,
        "the refused release changed Redis"
    );
}

/// Whether the server lets a script check the ACL before it writes (`redis.acl_check_cmd`,
/// Redis 7.0 and Valkey): only then is a refusal guaranteed to have written nothing.
fn checks_rights_first() -> bool {
    crate::common::redis_version().0 >= 7
}

#[test]
fn acquire_without_a_write_right_grants_nothing_and_exits_77() {
    for command in ["pexpire", "hset", "zadd", "publish", "set"] {
        let server = RedisServer::start();
        let url = user_without(&server, command);
        let out = run(rlock().args(["-u", &url, "acquire", "-n", "-k", KEY, "--ttl", "1h"]));
        if !checks_rights_first() && out.code == 0 {
            // Redis 6 refuses a command only when it runs, and a first grant needs no ZADD
            // or PUBLISH; Redis 7 refuses every right a grant may need, in advance.
            assert!(
                ["zadd", "publish"].contains(&command),
                "without {command}:\n{out}"
            );
            continue;
        }
        assert_fails(&out, 77, &["'h'", command, "ACL"]);
        assert!(
            !server.exists(LOCK),
            "without {command}: the lock was granted"
        );
        if checks_rights_first() {
            assert_eq!(
                snapshot(&server),
                HashMap::new(),
                "without {command}: Redis changed"
            );
        }
    }
}

// ACL: every refusal exits 77
// ---------------------------------------------------------------------------------------------

/// The commands of the documented ACL line (docs/connecting.md, "ACL: the rights a lock user
/// needs").
fn documented_rights() -> Vec<String> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/connecting.md"))
            .expect("read docs/connecting.md");
    let line = readme
        .lines()
        .find(|l| l.starts_with("ACL SETUSER locker"))
        .expect("the documented ACL SETUSER line");
    line.split_whitespace()
        .filter_map(|w| w.strip_prefix('+'))
        .map(String::from)
        .collect()
}

#[test]
fn every_acl_refusal_exits_77_and_points_at_the_rights() {
    let rights = documented_rights();
    assert!(rights.len() > 15, "too few rights parsed: {rights:?}");
    let server = RedisServer::start();
    let mut refused_without = Vec::new();
    for missing in &rights {
        server.cmd(&["FLUSHALL"]);
        server.cmd(&["SCRIPT", "FLUSH"]);
        let user = format!("without-{missing}");
        let mut args = vec!["ACL", "SETUSER", &user, "reset", "on", ">pw", "resetkeys"];
        args.extend([
            "resetchannels",
            "~rlock:*",
            "~{rlock:*",
            "&{rlock:*",
            "-@all",
        ]);
        let plus: Vec<String> = rights
            .iter()
            .filter(|r| *r != missing)
            .map(|r| format!("+{r}"))
            .collect();
        args.extend(plus.iter().map(String::as_str));
        server.cmd(&args);
        let url = format!("redis://{user}:pw@127.0.0.1:{}", server.port());
        // Another user holds a lock, so that waiting and busy paths run too.
        let held = acquire(&server, "1h");
        let _ = held;
        // The waits give up on the held lock. A wait bounds every request in it, the first
        // contact (connect, AUTH, the script loaded anew) included, which a loaded machine can
        // take more than 200 ms over: then the run ends 69, unavailable, before any refusal.
        const WAIT: &str = "1s";
        let steps: [&[&str]; 8] = [
            &["acquire", "-n", "-k", "mine", "--ttl", "1h"],
            &["acquire", "-w", WAIT, "-k", KEY],
            &["exec", "-n", "-k", "mine2", "--", "true"],
            &["exec", "-w", WAIT, "-k", KEY, "--", "true"],
            &["inspect", "-k", KEY],
            &["inspect"],
            &["renew", "-k", KEY, "--token", "not-mine"],
            &["release", "-k", KEY, "--force"],
        ];
        let mut refused = false;
        for step in steps {
            let out = run(rlock().args(["-u", &url]).args(step));
            assert!(
                ![65, 69, 70].contains(&out.code),
                "without +{missing}, {step:?} exited {} instead of 77:\n{out}",
                out.code
            );
            if out.code == 77 && !out.stderr.contains("not held by this token") {
                refused = true;
                assert!(
                    out.stderr.contains("ACL") && out.stderr.lines().count() == 1,
                    "without +{missing}, {step:?}: the message must name the ACL:\n{out}"
                );
            }
        }
        if refused {
            refused_without.push(missing.clone());
        }
    }
    // (That each right is needed at all is servers::acl::acl_every_documented_right_is_needed.)
    for right in [
        "evalsha", "time", "set", "del", "publish", "hset", "pexpire", "zadd", "scan",
    ] {
        assert!(
            refused_without.contains(&right.to_string()),
            "nothing was refused without +{right}: the test ran no step that needs it"
        );
    }
}

// ---------------------------------------------------------------------------------------------

#[test]
fn the_same_master_twice_is_not_a_redlock_quorum() {
    let server = RedisServer::start();
    let a = server.url();
    let b = format!("redis://127.0.0.1:{}/1", server.port());
    let out = run(rlock().args(["-u", &a, "-u", &a, "-u", &a, "acquire", "-n", "-k", "q"]));
    assert_fails(&out, 78, &["same Redis server", "independent"]);
    let out = run(rlock().args(["-u", &a, "-u", &b, "-u", &a, "acquire", "-n", "-k", "q"]));
    assert_fails(&out, 78, &["same Redis server"]);
    assert!(!server.exists("rlock:q"), "a lock was taken");
}

#[test]
fn a_brace_in_the_prefix_is_blamed_on_the_prefix() {
    let server = RedisServer::start();
    let out = run(rlock_at(&server).args(["--prefix", "x}", "acquire", "-n", "-k", "jobs"]));
    assert_fails(&out, 2, &["--prefix 'x}'"]);
    assert!(!out.stderr.contains("key 'jobs'"), "{out}");
}

#[test]
fn an_acl_refusal_of_execs_final_release_exits_77_and_says_the_lock_may_still_be_held() {
    let server = RedisServer::start();
    // The user may do everything until the command takes PUBLISH away, which the release
    // needs (it wakes the waiters).
    let url = user_without(&server, "flushall");
    let port = server.port().to_string();
    let out = run(rlock()
        .args(["-u", &url, "exec", "-k", KEY, "--ttl", "1h", "--"])
        .arg(crate::common::redis_cli_bin())
        .args(["-p", &port, "ACL", "SETUSER", "no-flushall", "-publish"]));
    if !checks_rights_first() {
        // Before Redis 7 a script cannot ask for PUBLISH in advance, and with nobody waiting
        // the release never publishes: it is not refused at all, and gives the lock back.
        assert_eq!(out.code, 0, "{out}");
        assert!(!server.exists(&format!("rlock:{KEY}")), "{out}");
        return;
    }
    assert_fails(
        &out,
        77,
        &[
            "'h'",
            "publish",
            "ACL",
            "may still be held",
            "at most 1h",
            "(by 20",
        ],
    );
    if checks_rights_first() {
        assert!(server.exists(LOCK), "the refused release freed the lock");
    }
}
