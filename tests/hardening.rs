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

// ---------------------------------------------------------------------------------------------
// ACL: every refusal exits 77
// ---------------------------------------------------------------------------------------------

/// The commands of the README's ACL line ("ACL: the rights a lock user needs").
fn documented_rights() -> Vec<String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("read README.md");
    let line = readme
        .lines()
        .find(|l| l.starts_with("ACL SETUSER locker"))
        .expect("the README's ACL SETUSER line");
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
        let steps: [&[&str]; 8] = [
            &["acquire", "-n", "-k", "mine", "--ttl", "1h"],
            &["acquire", "-w", "200ms", "-k", KEY],
            &["exec", "-n", "-k", "mine2", "--", "true"],
            &["exec", "-w", "200ms", "-k", KEY, "--", "true"],
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
    // (That each right is needed at all is scale.rs's acl_every_documented_right_is_needed.)
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
// Secrets
// ---------------------------------------------------------------------------------------------

const SECRETS: [&str; 4] = ["hunter2", "s3cr3t-tok", "k3y-value", "pw-in-url"];

#[track_caller]
fn assert_no_secret(server: &RedisServer, what: &str) {
    let mut conn = server.conn();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).expect("KEYS");
    for key in keys {
        let dump = match server.key_type(&key).as_str() {
            "hash" => format!("{:?}", server.hgetall(&key)),
            "string" => server.get(&key).unwrap_or_default(),
            other => other.to_string(),
        };
        for secret in SECRETS {
            assert!(
                !dump.contains(secret),
                "{what}: {secret} stored in {key}: {dump}"
            );
        }
    }
    for args in [
        &["inspect"][..],
        &["inspect", "--json"],
        &["-v", "inspect", "-k", "leak"],
    ] {
        let out = run(rlock_at(server).args(args));
        for secret in SECRETS {
            assert!(
                !out.stdout.contains(secret) && !out.stderr.contains(secret),
                "{what}: {args:?} shows {secret}:\n{out}"
            );
        }
    }
}

#[test]
fn secrets_on_the_holders_command_line_are_never_stored_or_shown() {
    let server = RedisServer::start();
    let rlock_bin = env!("CARGO_BIN_EXE_rlock");
    // acquire records its parent's command line: a shell that has the secrets on it.
    let line = format!(
        "DB_PASSWORD=hunter2 API_TOKEN=s3cr3t-tok {rlock_bin} -u {} acquire -k leak --ttl 1h \
         && : --password hunter2 --api-key k3y-value redis://u:pw-in-url@h",
        server.url()
    );
    let out = run(std::process::Command::new("sh").arg("-c").arg(&line));
    assert_eq!(out.code, 0, "{out}");
    let cmd = server.hgetall("{rlock:leak}:state")["cmd"].clone();
    assert!(
        cmd.contains("DB_PASSWORD=***") && cmd.contains("--password ***"),
        "{cmd}"
    );
    assert_no_secret(&server, "acquire");

    // exec records its command; the command itself still gets its arguments whole.
    let out = run(rlock_at(&server).args([
        "exec",
        "-k",
        "leak2",
        "--",
        "echo",
        "SECRET_KEY=k3y-value",
        "--token",
        "s3cr3t-tok",
        "-p",
        "hunter2",
    ]));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        out.stdout.trim(),
        "SECRET_KEY=k3y-value --token s3cr3t-tok -p hunter2"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let started = dir.path().join("started");
    let mut cmd = rlock_at(&server);
    cmd.args([
        "exec",
        "-k",
        "leak",
        "--",
        "sh",
        "-c",
        r#"echo up > "$1"; sleep 5"#,
        "sh",
    ])
    .arg(&started)
    .args(["--password=hunter2", "redis://:pw-in-url@x"]);
    let mut child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn exec");
    let out = run(rlock_at(&server).args(["release", "-k", "leak", "--force"]));
    assert_eq!(out.code, 0, "{out}");
    wait_for_file(&started, Duration::from_secs(10));
    assert_no_secret(&server, "exec");
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn a_label_replaces_the_command_in_inspect() {
    let server = RedisServer::start();
    let url = "https://ci.example/job/42";
    let out = run(rlock_at(&server).args(["acquire", "-k", "lab", "--label", url]));
    assert_eq!(out.code, 0, "{out}");
    let out = run(rlock_at(&server).args(["inspect", "--json", "-k", "lab"]));
    let json: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert_eq!(json["holder"]["command"], url, "{out}");
    let out = run(rlock_at(&server)
        .env("RLOCK_LABEL", "nightly backup")
        .args([
            "exec",
            "-k",
            "lab2",
            "--",
            "sh",
            "-c",
            "rlock inspect -k lab2 >/dev/null; true",
        ]));
    assert_eq!(out.code, 0, "{out}");
    let out =
        run(rlock_at(&server).args(["exec", "-k", "lab3", "--label", "nightly", "--", "true"]));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(server.hgetall("{rlock:lab3}:state")["cmd"], "nightly");
}

#[test]
fn a_password_with_commas_in_rlock_url_is_never_split_or_echoed() {
    let password = "pa,ss@x,redis";
    let server = RedisServer::start_with(&["--requirepass", password]);
    let url = format!("redis://:{password}@127.0.0.1:{}", server.port());
    let out = run(rlock()
        .env("RLOCK_URL", &url)
        .args(["acquire", "-n", "-k", "c"]));
    assert_eq!(out.code, 0, "the password was cut:\n{out}");
    let wrong = format!("redis://:wr,ong@pw,x@127.0.0.1:{}", server.port());
    let out = run(rlock()
        .env("RLOCK_URL", &wrong)
        .args(["acquire", "-n", "-k", "c"]));
    assert_eq!(out.code, 77, "{out}");
    for piece in ["wr", "ong", "pw,x", "ong@pw"] {
        assert!(
            !out.stderr.contains(&format!("'{piece}'"))
                && !out.stderr.contains(&format!(":{piece}")),
            "a piece of the password is echoed:\n{out}"
        );
    }
    assert!(out.stderr.contains("redis://:***@127.0.0.1"), "{out}");
}

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
