//! Named keys and listings: the holder and the exit code, JSON objects and arrays, every lock under
//! the prefix (by SCAN) and no helper keys, and a closed pipe that is not an error.

use crate::common::basic::*;
use crate::common::{RedisServer, rlock_at, run};
use serde_json::Value;
use std::collections::BTreeSet;
use std::fs;

// ---------------------------------------------------------------------------------------------
// inspect
// ---------------------------------------------------------------------------------------------

#[test]
fn inspect_named_keys_shows_the_holder_and_answers_with_the_exit_code() {
    let server = RedisServer::start();
    let grant = acquire_json(&server, "jobs", &["--ttl", "60s"]);
    let fence = grant["fence"].as_i64().expect("fence");
    acquire(&server, "other", &["--ttl", "60s"]);

    let out = run(rlock_at(&server).args(["inspect", "-k", "jobs"]));
    let stdout = assert_ok(&out);
    let rows = table_rows(&stdout);
    assert_eq!(rows.len(), 1, "{out}");
    assert_eq!(&rows[0][..2], ["jobs", "held"], "{out}");
    let row = stdout.lines().nth(1).unwrap_or_default();
    let command = stdout.lines().next().unwrap_or_default().find("COMMAND");
    // (A host name longer than 10 characters widens the HOLDER column by the rest.)
    let room = 80 + hostname().len().saturating_sub(10);
    assert!(
        command.is_some_and(|at| at <= room && row.len() > at),
        "a row fits 80 columns before its command:\n{out}"
    );
    let json = run(rlock_at(&server).args(["inspect", "-k", "jobs", "--json"]));
    assert!(
        json.stdout.contains(&fence.to_string()),
        "the fence: {json}"
    );
    assert!(stdout.contains(&hostname()), "shows the host:\n{out}");
    assert!(
        stdout.contains(&format!("pid {}", std::process::id())),
        "shows the pid:\n{out}"
    );

    let out = run(rlock_at(&server).args(["inspect", "-k", "free"]));
    assert_eq!(out.code, 1, "a free key answers 1:\n{out}");
    assert_eq!(&table_rows(&out.stdout)[0][..2], ["free", "free"], "{out}");

    let out = run(rlock_at(&server).args(["inspect", "-k", "jobs", "-k", "free", "-k", "other"]));
    assert_eq!(
        out.code, 1,
        "one free key among held ones answers 1:\n{out}"
    );
    let states: Vec<(String, String)> = table_rows(&out.stdout)
        .into_iter()
        .map(|r| (r[0].clone(), r[1].clone()))
        .collect();
    assert_eq!(
        states,
        [("jobs", "held"), ("free", "free"), ("other", "held")].map(|(k, s)| (k.into(), s.into())),
        "{out}"
    );
    let out = run(rlock_at(&server).args(["inspect", "-k", "jobs", "-k", "other"]));
    assert_eq!(out.code, 0, "all held answers 0:\n{out}");

    for (keys, code) in [
        (&["-k", "jobs"][..], 0),
        (&["-k", "free"], 1),
        (&["-k", "jobs", "-k", "free"], 1),
    ] {
        let out = run(rlock_at(&server).args(["inspect", "-q"]).args(keys));
        assert_eq!(out.code, code, "-q {keys:?}:\n{out}");
        assert!(
            out.stdout.is_empty() && out.stderr.is_empty(),
            "-q prints nothing:\n{out}"
        );
    }

    // Looking changes nothing.
    assert_eq!(
        server.get(&lock_key("jobs")).as_deref(),
        grant["token"].as_str()
    );
    assert!(server.pttl(&lock_key("jobs")) <= 60_000);
    assert!(!server.exists(&lock_key("free")) && !server.exists(&state_key("free")));
}

#[test]
fn inspect_json_is_an_object_for_one_key_and_an_array_otherwise() {
    let server = RedisServer::start();
    let grant = acquire_json(&server, "jobs", &["--ttl", "60s"]);
    acquire(&server, "other", &[]);

    let out = run(rlock_at(&server).args(["inspect", "-k", "jobs", "--json"]));
    let doc: Value = serde_json::from_str(&assert_ok(&out)).expect("JSON");
    assert!(doc.is_object(), "{doc}");
    assert_eq!(doc["key"], "jobs", "{doc}");
    assert_eq!(doc["held"], true, "{doc}");
    let ttl = doc["ttl_ms"].as_i64().expect("ttl_ms");
    assert!((50_000..=60_000).contains(&ttl), "{doc}");
    assert_eq!(doc["fence"], grant["fence"], "{doc}");
    assert_eq!(doc["holder"]["host"], hostname().as_str(), "{doc}");
    assert_eq!(doc["holder"]["pid"], std::process::id(), "{doc}");

    let out = run(rlock_at(&server).args(["inspect", "-k", "free", "--json"]));
    assert_eq!(out.code, 1, "{out}");
    let doc: Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert_eq!(doc["held"], false, "{doc}");

    let out = run(rlock_at(&server).args(["inspect", "-k", "jobs", "-k", "free", "--json"]));
    assert_eq!(out.code, 1, "{out}");
    let doc: Value = serde_json::from_str(&out.stdout).expect("JSON");
    let held: Vec<&Value> = doc
        .as_array()
        .expect("an array")
        .iter()
        .map(|l| &l["held"])
        .collect();
    assert_eq!(held, [&Value::Bool(true), &Value::Bool(false)], "{doc}");

    let out = run(rlock_at(&server).args(["inspect", "--json"]));
    let doc: Value = serde_json::from_str(&assert_ok(&out)).expect("JSON");
    let keys: BTreeSet<&str> = doc
        .as_array()
        .expect("a listing is an array")
        .iter()
        .map(|l| l["key"].as_str().expect("key"))
        .collect();
    assert_eq!(keys, BTreeSet::from(["jobs", "other"]), "{doc}");
}

/// The KEY column of a listing.
fn listed(server: &RedisServer, extra: &[&str]) -> BTreeSet<String> {
    let out = run(rlock_at(server).args(extra).arg("inspect"));
    let stdout = assert_ok(&out);
    table_rows(&stdout)
        .into_iter()
        .map(|r| r[0].clone())
        .collect()
}

#[test]
fn listing_shows_every_lock_under_the_prefix_and_no_helper_keys_using_scan() {
    let server = RedisServer::start();
    acquire(&server, "a", &[]);
    acquire(&server, "b", &[]);
    let released = acquire(&server, "gone", &[]);
    release(&server, "gone", &released);
    server.cmd(&["SET", "rlock:c", "sometoken", "PX", "60000"]);
    server.cmd(&["HSET", "rlock:h", "someuuid:1", "1"]);
    server.cmd(&["SET", "unrelated", "x"]);
    // A waiter's place in line, as a waiting acquire leaves it.
    server.cmd(&["ZADD", &queue_key("a"), "1", "waiter"]);
    assert!(
        server.exists(&state_key("gone")),
        "a released lock keeps its state"
    );

    server.cmd(&["CONFIG", "RESETSTAT"]);
    let names = listed(&server, &[]);
    assert_eq!(
        names,
        BTreeSet::from(["a", "b", "c", "h"].map(String::from))
    );
    let stats: String = q(&server, &["INFO", "commandstats"]);
    assert!(
        stats.contains("cmdstat_scan:"),
        "listing uses SCAN:\n{stats}"
    );
    assert!(
        !stats.contains("cmdstat_keys:"),
        "listing must not use KEYS:\n{stats}"
    );

    // With an empty prefix every key is a candidate: the helpers stay out, and so does what
    // does not look like a lock (a key that never expires and that rlock did not write).
    let names = listed(&server, &["--prefix", ""]);
    assert_eq!(
        names,
        BTreeSet::from(["rlock:a", "rlock:b", "rlock:c"].map(String::from))
    );

    // Listing changed nothing.
    assert!(!server.exists(&lock_key("gone")));
    assert_eq!(server.get("rlock:c").as_deref(), Some("sometoken"));
}

#[test]
fn listing_hides_the_helper_keys_of_hash_tagged_keys() {
    let server = RedisServer::start();
    acquire(&server, "{grp}jobs", &[]);
    assert!(
        server.exists("rlock:{grp}jobs:state"),
        "the helper keys keep the tag"
    );
    assert_eq!(
        listed(&server, &[]),
        BTreeSet::from(["{grp}jobs".to_string()])
    );

    let plain = |args: &[&str]| {
        let mut cmd = rlock_at(&server);
        cmd.args(["--prefix", ""]).args(args);
        run(&mut cmd)
    };
    token_of(&plain(&["acquire", "-k", "{user1}.jobs"]));
    assert!(server.exists("{user1}.jobs:state"));
    let out = plain(&["inspect"]);
    let names: BTreeSet<String> = table_rows(&assert_ok(&out))
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
    assert!(names.contains("{user1}.jobs"), "{out}");
    assert!(
        !names.contains("{user1}.jobs:state"),
        "a helper key listed as a lock:\n{out}"
    );
}

#[test]
fn inspect_into_a_closed_pipe_is_not_an_error() {
    let server = RedisServer::start();
    let mut pipe = redis::pipe();
    for i in 0..3000 {
        pipe.cmd("SET")
            .arg(format!(
                "rlock:a-rather-long-lock-name-to-fill-the-pipe-{i:05}"
            ))
            .arg("sometoken")
            .arg("PX")
            .arg(600_000)
            .ignore();
    }
    pipe.query::<()>(&mut server.conn()).expect("fill Redis");

    let dir = tempfile::tempdir().expect("temp dir");
    let code_file = dir.path().join("code");
    let out = run(
        sh(r#"{ "$RL" --url "$URL" inspect; echo $? >"$CODE"; } | head -n 1"#)
            .env("URL", server.url())
            .env("CODE", &code_file),
    );
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stdout.starts_with("KEY") && out.stdout.lines().count() == 1,
        "{out}"
    );
    assert!(
        out.stderr.is_empty(),
        "no panic and no error on a closed pipe:\n{out}"
    );
    let code = fs::read_to_string(&code_file).expect("rlock's exit code");
    assert_eq!(code.trim(), "0", "rlock's exit code on a closed pipe");
}
