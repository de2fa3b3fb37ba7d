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
    for command in ["pexpire", "hset", "zadd", "publish", "set"] {
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

// ---------------------------------------------------------------------------------------------
// inspect: one row per lock, whatever the keys and the holder fields hold
// ---------------------------------------------------------------------------------------------

/// A small deterministic generator (xorshift), so that a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Text of `len` characters drawn from ASCII controls, printable ASCII, and a few wider
    /// characters (accents, CJK, emoji, line separators, bidi overrides).
    fn text(&mut self, len: usize) -> String {
        const WIDE: [char; 8] = [
            'é', '中', '🔒', '\u{2028}', '\u{202e}', '\u{85}', '\u{7f}', ' ',
        ];
        (0..len)
            .map(|_| match self.below(3) {
                0 => char::from(self.below(32) as u8),
                1 => char::from(32 + self.below(95) as u8),
                _ => WIDE[self.below(WIDE.len() as u64) as usize],
            })
            .collect()
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.below(256) as u8).collect()
    }
}

/// Writes a lock as rlock would (`SET` plus a state hash naming the holder), with `fields`
/// as the holder's host, pid, user, command and since.
fn plant(server: &RedisServer, name: &str, fields: [&[u8]; 5], with_state: bool) {
    let mut conn = server.conn();
    let lock = format!("rlock:{name}");
    let token = format!("t-{}", name.len());
    let _: () = redis::cmd("SET")
        .arg(&lock)
        .arg(&token)
        .arg("PX")
        .arg(600_000)
        .query(&mut conn)
        .expect("SET");
    // rlock's helper key: inside the key's own hash tag, or the whole key as the tag; a key
    // with a `}` outside a tag has none.
    let has_tag = lock
        .find('{')
        .and_then(|open| lock[open + 1..].find('}'))
        .is_some_and(|close| close > 0);
    let state = if has_tag {
        format!("{lock}:state")
    } else if lock.contains('}') {
        return;
    } else {
        format!("{{{lock}}}:state")
    };
    if !with_state {
        return;
    }
    let _: () = redis::cmd("HSET")
        .arg(&state)
        .arg("token")
        .arg(&token)
        .arg("fence")
        .arg(7)
        .arg("host")
        .arg(fields[0])
        .arg("pid")
        .arg(fields[1])
        .arg("user")
        .arg(fields[2])
        .arg("cmd")
        .arg(fields[3])
        .arg("since")
        .arg(fields[4])
        .query(&mut conn)
        .expect("HSET");
}

/// `inspect`'s table: exit 0, a header and one row per lock, no control character anywhere.
#[track_caller]
fn assert_table(server: &RedisServer, locks: usize) {
    let out = run(rlock_at(server).arg("inspect"));
    assert_eq!(out.code, 0, "inspect failed:\n{}", out.stderr);
    let rows = out.stdout.lines().count();
    assert_eq!(
        rows,
        locks + 1,
        "one header and {locks} rows expected, got {rows} lines:\n{}",
        out.stdout
    );
    assert!(
        !out.stdout.chars().any(|c| c.is_control() && c != '\n'),
        "a control character reached the terminal"
    );
    assert!(
        out.stdout.lines().all(|l| l.chars().count() < 2_000),
        "a row is unbounded"
    );
    let out = run(rlock_at(server).args(["inspect", "--json"]));
    assert_eq!(out.code, 0, "inspect --json failed:\n{}", out.stderr);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).expect("inspect --json");
    assert_eq!(json.as_array().map(Vec::len), Some(locks), "JSON items");
}

#[test]
fn inspect_survives_keys_of_every_length() {
    let server = RedisServer::start();
    let mut n = 0;
    for len in [1, 2, 100, 65_535, 65_536, 70_000, 300_000] {
        let name = "k".repeat(len);
        plant(&server, &name, [b"host", b"42", b"me", b"cmd", b"1"], true);
        n += 1;
        // Another client's lock of that length: no state.
        plant(&server, &format!("o{name}"), [b""; 5], false);
        n += 1;
        if len < 100_000 {
            // (The kernel takes no longer argument.)
            let out = run(rlock_at(&server).args(["inspect", "-k", &name]));
            assert_eq!(
                out.code, 0,
                "inspect -k of a {len}-character key:\n{}",
                out.stderr
            );
            assert_eq!(
                out.stdout.lines().count(),
                2,
                "one row for a {len}-character key"
            );
        }
    }
    assert_table(&server, n);
}

#[test]
fn inspect_survives_holder_fields_of_every_byte() {
    let server = RedisServer::start();
    let every_byte: Vec<u8> = (0..=255).collect();
    plant(
        &server,
        "all-bytes",
        [
            &every_byte,
            &every_byte,
            &every_byte,
            &every_byte,
            &every_byte,
        ],
        true,
    );
    plant(
        &server,
        "newlines",
        [
            b"ho\nst",
            b"4\n2",
            b"al\nice",
            b"echo a\nrm -rf /\r\n",
            b"\n",
        ],
        true,
    );
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut n = 2;
    for i in 0..60 {
        let len = 1 + rng.below(if i % 10 == 0 { 5_000 } else { 40 }) as usize;
        let name = rng.text(len);
        let fields: Vec<Vec<u8>> = (0..5)
            .map(|_| {
                let len = rng.below(200) as usize;
                rng.bytes(len)
            })
            .collect();
        let with_state = i % 7 != 0;
        plant(
            &server,
            &name,
            [&fields[0], &fields[1], &fields[2], &fields[3], &fields[4]],
            with_state,
        );
        n += 1;
    }
    // A key name that is not UTF-8 (no -k can name it) is left out, and breaks nothing.
    let _: () = redis::cmd("SET")
        .arg(b"rlock:\xff\xfe-not-utf8".as_slice())
        .arg("x")
        .query(&mut server.conn())
        .expect("SET");
    // Names may repeat by chance: count what is there.
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg("rlock:*")
        .query(&mut server.conn())
        .expect("KEYS");
    let locks = keys
        .iter()
        .filter(|k| !k.ends_with(b":state") && std::str::from_utf8(k).is_ok())
        .count();
    assert!(locks <= n);
    assert_table(&server, locks);
}
