//! Who is waiting: `inspect -k KEY` lists the waiters in line order (host, pid, label, since
//! when), in the table, in `--json` and in `--watch`; a waiter that leaves the line leaves the
//! list.

use super::*;
use crate::common::basic::{hostname, q, queue_key};

/// Three execs queue behind a holder, one after the other; each is shown with its label and
/// pid, first first, and the waiter that gives up leaves the list.
#[test]
fn inspect_lists_the_waiters_in_line_order() {
    let server = RedisServer::start();
    let dir = tempdir();
    let _holder = live_holder(&server, dir.path(), "holder", "q", &["--ttl", "60s"]);
    let mut waiters = Vec::new();
    for (i, label) in ["first job", "second job", "third job"]
        .into_iter()
        .enumerate()
    {
        let mut cmd = rlock_at(&server);
        cmd.args(["exec", "-k", "q", "--label", label, "--", "true"]);
        let mut w = Background::spawn(&format!("w{i}"), dir.path(), &mut cmd);
        w.wait_for("the waiter to queue", SOON, || {
            q::<i64>(&server, &["ZCARD", &queue_key("q")]) == i as i64 + 1
        });
        waiters.push(w);
    }

    let json = inspect_json(&server, "q");
    let line = json["waiting"]
        .as_array()
        .unwrap_or_else(|| panic!("{json}"));
    let labels: Vec<&str> = line
        .iter()
        .map(|w| w["command"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["first job", "second job", "third job"], "{json}");
    let pids: Vec<i64> = line.iter().map(|w| w["pid"].as_i64().unwrap()).collect();
    let spawned: Vec<i64> = waiters.iter().map(|w| w.pid() as i64).collect();
    assert_eq!(pids, spawned, "{json}");
    let since: Vec<i64> = line
        .iter()
        .map(|w| w["waiting_since_ms"].as_i64().unwrap())
        .collect();
    assert!(since.windows(2).all(|p| p[0] <= p[1]), "{json}");
    assert!(line.iter().all(|w| w["host"] == hostname()), "{json}");
    assert_eq!(json["waiters"], 3);

    let out = run(rlock_at(&server).args(["inspect", "-k", "q"]));
    assert_eq!(out.code, 0, "{out}");
    let rows: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(rows.len(), 5, "a header, the holder, three waiters: {out}");
    for (row, (place, label)) in
        rows[2..]
            .iter()
            .zip([(1, "first job"), (2, "second job"), (3, "third job")])
    {
        assert!(
            row.contains(&format!("waiting {place}")) && row.ends_with(label),
            "{out}"
        );
    }

    // A --watch shows them too, and a waiter that leaves is gone from the next line.
    let mut cmd = rlock_at(&server);
    cmd.args(["inspect", "-k", "q", "--watch", "100ms", "--json"]);
    let mut watch = Background::spawn("watch", dir.path(), &mut cmd);
    let printed = dir.path().join("watch.stdout");
    watch.wait_for("the first line", SOON, || lines_of(&printed).len() == 1);
    let shown: Value = serde_json::from_str(&lines_of(&printed)[0]).expect("JSON");
    assert_eq!(shown["waiting"][2]["command"], "third job", "{shown}");
    waiters[1].kill(Signal::SIGTERM);
    watch.wait_for("the waiter to leave", SOON, || {
        lines_of(&printed).len() == 2
    });
    let shown: Value = serde_json::from_str(&lines_of(&printed)[1]).expect("JSON");
    let labels: Vec<&str> = shown["waiting"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["command"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["first job", "third job"], "{shown}");
    watch.kill(Signal::SIGTERM);
    let _ = watch.finish(SOON);
    // What the line kept of the waiter that left is gone with it.
    let fields: Vec<String> = q(&server, &["HKEYS", "{rlock:q}:state"]);
    assert_eq!(
        fields.iter().filter(|f| f.starts_with("w:")).count(),
        2,
        "{fields:?}"
    );
}
