//! One row per lock, whatever the keys and the holder fields hold: keys of every length, holder
//! fields of every byte.

use crate::common::Rng;
use crate::common::{RedisServer, rlock_at, run};

// ---------------------------------------------------------------------------------------------
// inspect: one row per lock, whatever the keys and the holder fields hold
// ---------------------------------------------------------------------------------------------

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
    // Into a pipe every key is whole; on a terminal a row is bounded.
    let shown = super::on_terminal(rlock_at(server).arg("inspect"));
    assert_eq!(shown.lines().count(), locks + 1, "{shown}");
    assert!(
        shown.lines().all(|l| l.chars().count() < 2_000),
        "a row on a terminal is unbounded"
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
