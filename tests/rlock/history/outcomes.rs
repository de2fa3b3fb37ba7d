//! Every way a run ends is on record, with the right fields, newest first; `-n`; the table.

use super::*;
use crate::common::basic::{acquire, hostname, lock_key, queue_key};
use nix::sys::signal::Signal;

/// Every field of a run's JSON object, the documented ones: no more, no fewer.
const FIELDS: [&str; 18] = [
    "key",
    "id",
    "run",
    "outcome",
    "code",
    "signal",
    "asked_ms",
    "granted_ms",
    "ended_ms",
    "wait_ms",
    "held_ms",
    "host",
    "user",
    "pid",
    "command",
    "fence",
    "by",
    "held_until_ms",
];

#[test]
fn every_way_a_run_ends_is_on_record_newest_first() {
    let server = RedisServer::start();
    let dir = tempdir();
    let (lock, queue) = (lock_key("k"), queue_key("k"));

    assert_eq!(exec(&server, "k", &["--", "true"]).code, 0);
    assert_eq!(exec(&server, "k", &["--", "sh", "-c", "exit 3"]).code, 3);
    let out = exec(
        &server,
        "k",
        &["--label", "nightly", "--", "sh", "-c", "kill -KILL $$"],
    );
    assert_eq!(out.code, 128 + 9, "{out}");

    // Lost: the lock deleted behind rlock's back while the command runs.
    let mut lost = Background::spawn_group(
        "lost",
        dir.path(),
        rlock_at(&server).args(["exec", "-k", "k", "--ttl", "1s", "--", "sleep", "30"]),
    );
    wait_held(&server, &lock, &mut lost);
    server.cmd(&["DEL", &lock]);
    let (out, _) = lost.finish(SOON);
    assert_eq!(out.code, 76, "{out}");

    // Busy (-n), gave up (-w), interrupted while waiting (SIGTERM), behind another holder.
    let token = acquire(&server, "k", &["--ttl", "60s"]);
    assert_eq!(exec(&server, "k", &["-n", "--", "true"]).code, 75);
    let out = exec(&server, "k", &["-w", "300ms", "--", "true"]);
    assert_eq!(out.code, 75, "{out}");
    let mut waiter = Background::spawn(
        "waiter",
        dir.path(),
        rlock_at(&server).args(["exec", "-k", "k", "--", "true"]),
    );
    wait_queued(&server, &queue, &mut waiter);
    waiter.kill(Signal::SIGTERM);
    let (out, _) = waiter.finish(SOON);
    assert_eq!(out.code, 128 + 15, "{out}");
    // The blocking holder's own hold is not one of exec's runs (holds.rs has those).
    let out = run(rlock_at(&server).args([
        "release",
        "-k",
        "k",
        "--token",
        &token,
        "--history-limit",
        "0",
    ]));
    assert_eq!(out.code, 0, "{out}");

    let runs = history_of(rlock_at(&server), "k", 100);
    assert_eq!(
        outcomes(&runs),
        [
            "interrupted",
            "gave-up",
            "busy",
            "lost",
            "signal",
            "failed",
            "ok"
        ],
        "{runs:#?}"
    );
    for r in &runs {
        let mut names: Vec<&str> = r.as_object().unwrap().keys().map(String::as_str).collect();
        names.sort();
        let mut want = FIELDS.to_vec();
        want.sort();
        assert_eq!(names, want, "the documented fields: {r}");
        assert_eq!(r["key"], "k");
        assert_eq!(r["host"], hostname().as_str(), "{r}");
        assert!(r["pid"].as_i64().unwrap() > 1, "{r}");
        assert!(r["user"].as_str().is_some_and(|u| !u.is_empty()), "{r}");
        assert!(r["run"].as_str().is_some_and(|u| u.len() == 36), "{r}");
        assert!(r["id"].as_str().is_some_and(|u| u.contains('-')), "{r}");
        let (asked, ended) = (
            r["asked_ms"].as_i64().unwrap(),
            r["ended_ms"].as_i64().unwrap(),
        );
        let wait = r["wait_ms"].as_i64().unwrap();
        assert!(asked + wait <= ended, "{r}");
        let ran = ["ok", "failed", "signal", "lost"].contains(&r["outcome"].as_str().unwrap());
        // A run that got the lock has its grant, hold and fence; one that did not has none.
        for field in ["granted_ms", "held_ms", "fence"] {
            assert_eq!(r[field].is_i64(), ran, "{field}: {r}");
        }
        if ran {
            assert_eq!(r["granted_ms"].as_i64().unwrap(), asked + wait, "{r}");
            assert!(r["fence"].as_i64().unwrap() > 0, "{r}");
        }
    }
    let by = |outcome: &str| runs.iter().find(|r| r["outcome"] == outcome).unwrap();
    assert_eq!(
        (by("ok")["code"].as_i64(), &by("ok")["signal"]),
        (Some(0), &Value::Null)
    );
    assert_eq!(by("ok")["command"], "true");
    assert_eq!(by("failed")["code"], 3);
    // The program's name, none of its arguments (--record-args would record them).
    assert_eq!(by("failed")["command"], "sh");
    assert_eq!(
        (&by("signal")["code"], &by("signal")["signal"]),
        (&137.into(), &"KILL".into())
    );
    assert_eq!(
        by("signal")["command"],
        "nightly",
        "the label stands for the command"
    );
    assert_eq!(by("lost")["code"], 76);
    assert!(by("lost")["held_ms"].as_i64().unwrap() < 30_000);
    assert_eq!(by("busy")["code"], 75);
    assert!(
        by("busy")["wait_ms"].as_i64().unwrap() < 300,
        "{}",
        by("busy")
    );
    assert_eq!(by("gave-up")["code"], 75);
    assert!(
        by("gave-up")["wait_ms"].as_i64().unwrap() >= 300,
        "{}",
        by("gave-up")
    );
    assert_eq!(by("interrupted")["code"], 143);
    assert_eq!(by("interrupted")["signal"], "TERM");
    // Fences rise with the grants, newest first.
    let fences: Vec<i64> = runs.iter().filter_map(|r| r["fence"].as_i64()).collect();
    assert!(fences.windows(2).all(|w| w[0] > w[1]), "{fences:?}");
    // The stream IDs are newest first too (XREVRANGE).
    let ends: Vec<i64> = runs
        .iter()
        .map(|r| r["ended_ms"].as_i64().unwrap())
        .collect();
    assert!(ends.windows(2).all(|w| w[0] >= w[1]), "{ends:?}");

    // -n: the newest runs only.
    let two = history_of(rlock_at(&server), "k", 2);
    assert_eq!(outcomes(&two), ["interrupted", "gave-up"]);

    // The table: a header and one row per run, in 80 columns, newest first.
    let out = run(rlock_at(&server).args(["inspect", "--history", "-k", "k", "-n", "20"]));
    assert_eq!(out.code, 0, "{out}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 8, "{out}");
    assert!(
        lines[0]
            .split_whitespace()
            .eq(["WHEN", "HOST", "WAIT", "HELD", "OUTCOME", "COMMAND"]),
        "{out}"
    );
    for (line, want) in lines[1..].iter().zip([
        "interrupted",
        "gave up",
        "busy",
        "lost",
        "signal KILL",
        "exit 3",
        "ok",
    ]) {
        assert!(
            line.contains(want) && line.contains(" ago "),
            "{want}: {out}"
        );
        assert!(line.chars().count() <= 80, "{line:?}");
    }
    assert!(out.stderr.is_empty(), "{out}");
}

#[test]
fn a_run_that_cannot_start_its_command_is_on_record_and_a_nested_run_is_not_but_one_under_a_shells_lock_is()
 {
    let server = RedisServer::start();
    let out = exec(&server, "k", &["--", "/nonexistent/cmd"]);
    assert_eq!(out.code, 127, "{out}");
    // The nested rlock runs under its enclosing exec's lock: that run is the one on record.
    let out = run(rlock_at(&server).args([
        "exec",
        "-k",
        "k",
        "--",
        env!("CARGO_BIN_EXE_rlock"),
        "--url",
        &server.url(),
        "exec",
        "-k",
        "k",
        "--",
        "true",
    ]));
    assert_eq!(out.code, 0, "{out}");
    // Under a lock a shell took (`acquire --export`), the exec's run is on record, and so is the
    // shell's hold, by its release.
    let script = r#"eval "$("$RL" --url "$URL" acquire --export -k k)" || exit 9
"$RL" --url "$URL" exec -k k -- sh -c 'exit 4'; code=$?
"$RL" --url "$URL" release -k k; exit $code"#;
    let out = run(crate::common::basic::sh(script).env("URL", server.url()));
    assert_eq!(out.code, 4, "{out}");
    let runs = history_of(rlock_at(&server), "k", 10);
    assert_eq!(
        outcomes(&runs),
        ["released", "failed", "ok", "not-run"],
        "{runs:#?}"
    );
    let waited = runs[1]["wait_ms"].as_i64().unwrap();
    assert!(
        waited < 1000,
        "the shell held the lock already: {}",
        runs[1]
    );
    assert_eq!(runs[3]["code"], 127);
    assert_eq!(runs[2]["command"], "rlock", "{}", runs[2]);
}

#[test]
fn without_k_the_last_run_of_every_lock_is_listed() {
    let server = RedisServer::start();
    assert_eq!(exec(&server, "a", &["--", "true"]).code, 0);
    assert_eq!(exec(&server, "a", &["--", "false"]).code, 1);
    assert_eq!(exec(&server, "b", &["--", "true"]).code, 0);
    // A key with a hash tag of its own, and another prefix, which is not listed.
    assert_eq!(exec(&server, "{g}c", &["--", "true"]).code, 0);
    // (As the default user: the documented ACL user has the default prefix only.)
    let out = run(crate::common::rlock_as_default(&server)
        .args(["--prefix", "other:", "exec", "-k", "d", "--", "true"]));
    assert_eq!(out.code, 0, "{out}");
    let out = run(rlock_at(&server).args(["inspect", "--history", "--json"]));
    assert_eq!(out.code, 0, "{out}");
    let runs = runs_of(&out);
    let mut last: Vec<(&str, &str)> = runs
        .iter()
        .map(|r| (r["key"].as_str().unwrap(), r["outcome"].as_str().unwrap()))
        .collect();
    last.sort();
    assert_eq!(
        last,
        [("a", "failed"), ("b", "ok"), ("{g}c", "ok")],
        "{out}"
    );
    // Newest first: the lock whose last run ended last.
    assert_eq!(runs[0]["key"], "{g}c", "{out}");
    let out = run(rlock_at(&server).args(["inspect", "--history"]));
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert!(
        lines[0].starts_with("KEY") && lines[1].starts_with("{g}c"),
        "{out}"
    );
    // The lock listing still shows no history key as a lock.
    let out = run(rlock_at(&server).args(["inspect", "--json"]));
    assert_eq!(out.stdout.trim(), "[]", "{out}");
    // A key without history: a note, exit 0, an empty JSON array.
    let out = run(rlock_at(&server).args(["inspect", "--history", "-k", "none"]));
    assert_eq!((out.code, out.stdout.as_str()), (0, ""), "{out}");
    assert!(
        out.stderr.contains("no runs on record for lock 'none'"),
        "{out}"
    );
    assert!(history_of(rlock_at(&server), "none", 5).is_empty());
}

/// A run whose release finds the lock gone (deleted) or someone else's (overwritten) exits 76
/// and is on record once, as lost: the release, which records a run it gives back, records
/// nothing of one it cannot, and exec records the loss itself.
#[test]
fn a_run_lost_at_its_release_is_on_record_once_as_lost() {
    let server = RedisServer::start();
    let port = server.port().to_string();
    for (key, how) in [
        ("gone", "DEL rlock:gone"),
        ("taken", "SET rlock:taken intruder"),
    ] {
        let script = format!("redis-cli -p {port} {how} > /dev/null");
        let out = exec(&server, key, &["--", "sh", "-c", &script]);
        assert_eq!(out.code, 76, "{how}: {out}");
        let runs = history_of(rlock_at(&server), key, 10);
        assert_eq!(outcomes(&runs), ["lost"], "{how}: {runs:#?}");
        assert_eq!(runs[0]["code"], 76, "{how}");
        assert_eq!(
            xlen(&server, &format!("{{rlock:{key}}}:history")),
            1,
            "{how}"
        );
    }
}
