//! `--events json`: each step of an `exec` as one JSON line with the documented fields, for every
//! way a run ends; no secret in them; to a file with `--events-to`; a sink that cannot be written
//! is said once and never changes the run.

use super::*;
use crate::common::basic::{acquire, lock_key};

/// Every event has these.
const COMMON: [&str; 5] = ["time", "event", "key", "host.name", "process.pid"];

/// The events in `text` (its JSON lines; the human lines, `rlock: …`, are left out).
#[track_caller]
fn events_in(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// The names of `events`, in order.
fn names(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e["event"].as_str().unwrap_or("?"))
        .collect()
}

#[track_caller]
fn check_common(events: &[Value], key: &str) {
    for e in events {
        for field in COMMON {
            assert!(!e[field].is_null(), "{field} in {e}");
        }
        assert_eq!(e["key"], key, "{e}");
        assert!(
            e["time"]
                .as_str()
                .is_some_and(|t| t.ends_with('Z') && t.len() == 24),
            "RFC 3339 UTC with ms: {e}"
        );
    }
}

#[test]
fn every_way_an_exec_ends_is_one_json_event() {
    let server = RedisServer::start();
    let dir = tempdir();
    let ev = |args: &[&str]| {
        let out = run(rlock_at(&server)
            .args(["--events", "json", "exec", "-k", "k"])
            .args(args));
        (out.code, events_in(&out.stderr), out)
    };

    let (code, events, out) = ev(&["--", "sh", "-c", "exit 3"]);
    assert_eq!(code, 3, "{out}");
    check_common(&events, "k");
    assert_eq!(names(&events), ["acquired", "released"], "{out}");
    assert!(events[0]["fence"].as_i64().is_some_and(|f| f > 0), "{out}");
    assert!(
        events[0]["waited_ms"].is_u64() && events[0]["ttl_ms"] == 30_000,
        "{out}"
    );
    assert_eq!(events[1]["process.exit.code"], 3, "{out}");
    assert_eq!(events[1]["outcome"], "failed", "{out}");
    assert_eq!(events[1]["run"], events[0]["run"], "one run: {out}");
    assert!(events[1]["held_ms"].is_i64(), "{out}");

    let token = acquire(&server, "k", &["--ttl", "60s"]);
    let (code, events, out) = ev(&["-n", "--", "true"]);
    assert_eq!((code, names(&events)), (75, vec!["busy"]), "{out}");
    let (code, events, out) = ev(&["-w", "1s", "--", "true"]);
    assert_eq!(code, 75, "{out}");
    assert_eq!(names(&events), ["waiting", "gave_up"], "{out}");
    assert_eq!(events[0]["place"], 1, "{out}");
    assert_eq!(
        events[0]["holder"]["host"],
        crate::common::basic::hostname(),
        "{out}"
    );
    crate::common::basic::release(&server, "k", &token);

    let (code, events, out) = ev(&["--timeout", "200ms", "--", "sleep", "30"]);
    assert_eq!(code, 124, "{out}");
    assert_eq!(names(&events), ["acquired", "timed_out"], "{out}");

    let mut lost = Background::spawn(
        "lost",
        dir.path(),
        rlock_at(&server).args([
            "--events", "json", "exec", "-k", "k", "--ttl", "1s", "--", "sleep", "30",
        ]),
    );
    wait_held(&server, &lock_key("k"), &mut lost);
    server.cmd(&["DEL", &lock_key("k")]);
    let (out, _) = lost.finish(SOON);
    assert_eq!(out.code, 76, "{out}");
    let events = events_in(&out.stderr);
    check_common(&events, "k");
    assert_eq!(names(&events).last(), Some(&"lost"), "{out}");

    assert_eq!(ev(&["--once-per", "1h", "--", "true"]).0, 0);
    let (code, events, out) = ev(&["--once-per", "1h", "--", "true"]);
    assert_eq!((code, names(&events)), (0, vec!["skipped"]), "{out}");
    assert!(
        events[0]["by"]
            .as_str()
            .is_some_and(|b| b.contains(" run ")),
        "{out}"
    );
    assert_eq!(
        out.stderr.lines().filter(|l| !l.starts_with('{')).count(),
        0,
        "{out}"
    );
}

#[test]
fn events_hold_no_secret_of_the_command_line() {
    let server = RedisServer::start();
    let secret = "hunter2-s3cret";
    for record_args in [false, true] {
        let mut cmd = rlock_at(&server);
        cmd.args(["--events", "json", "exec", "-k", "s"]);
        if record_args {
            cmd.arg("--record-args");
        }
        let url = format!("redis://admin:{secret}@db.example:6379");
        let pass = format!("PGPASSWORD={secret}");
        cmd.args([
            "--",
            "env",
            &pass,
            "sh",
            "-c",
            "true",
            "--password",
            secret,
            &url,
        ]);
        let out = run(&mut cmd);
        assert_eq!(out.code, 0, "{out}");
        assert_eq!(
            names(&events_in(&out.stderr)),
            ["acquired", "released"],
            "{out}"
        );
        assert!(
            !out.stderr.contains(secret),
            "--record-args {record_args}: {out}"
        );
    }
}

#[test]
fn events_go_to_a_file_and_a_sink_that_fails_never_changes_the_run() {
    let server = RedisServer::start();
    let dir = tempdir();
    let file = dir.path().join("events.jsonl");
    let f = file.to_str().unwrap();
    for _ in 0..2 {
        let out = run(rlock_at(&server).args([
            "--events",
            "json",
            "--events-to",
            f,
            "exec",
            "-k",
            "f",
            "--",
            "true",
        ]));
        assert_eq!((out.code, out.stderr.as_str()), (0, ""), "{out}");
    }
    let text = std::fs::read_to_string(&file).expect("the events file");
    let events = events_in(&text);
    check_common(&events, "f");
    assert_eq!(
        names(&events),
        ["acquired", "released", "acquired", "released"],
        "appended: {text}"
    );

    // A link is not followed; the run goes on, and says so once.
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    let out = run(rlock_at(&server).args([
        "--events",
        "json",
        "--events-to",
        link.to_str().unwrap(),
        "exec",
        "-k",
        "f",
        "--",
        "true",
    ]));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(out.stderr.lines().count(), 1, "said once: {out}");
    assert_eq!(events_in(&std::fs::read_to_string(&file).unwrap()).len(), 4);

    // A descriptor every write to fails (a full disk): said once, the run's code kept.
    let cmd = rlock_at(&server);
    let program = cmd.get_program().to_owned();
    let args: Vec<std::ffi::OsString> = cmd.get_args().map(|a| a.to_owned()).collect();
    let mut shell = std::process::Command::new("sh");
    shell
        .args(["-c", "exec \"$0\" \"$@\" 3>/dev/full"])
        .arg(program)
        .args(args)
        .args([
            "--events",
            "json",
            "--events-to",
            "/dev/fd/3",
            "exec",
            "-k",
            "f",
            "--",
            "sh",
            "-c",
            "exit 7",
        ]);
    for (name, value) in cmd.get_envs() {
        match value {
            Some(v) => shell.env(name, v),
            None => shell.env_remove(name),
        };
    }
    let out = run(&mut shell);
    assert_eq!(out.code, 7, "{out}");
    assert_eq!(
        out.stderr.matches("events could not be written").count(),
        1,
        "said once: {out}"
    );
}

/// A renewal that comes late (here: the server frozen past the renewal's due time, the lease
/// 3 s, renewed every 1 s) is an event `renewed_late` saying how late and how much of the lease
/// was left; the run goes on and ends well. An on-time renewal says nothing.
#[test]
fn a_late_renewal_is_an_event_saying_how_late() {
    let server = RedisServer::start();
    let dir = tempdir();
    let exec = |name: &str, secs: &str| {
        Background::spawn(
            name,
            dir.path(),
            rlock_at(&server).args([
                "--events", "json", "exec", "-k", "late", "--ttl", "3s", "--", "sleep", secs,
            ]),
        )
    };
    let mut on_time = exec("on-time", "1.5");
    let (out, _) = on_time.finish(SOON);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        names(&events_in(&out.stderr)),
        ["acquired", "released"],
        "{out}"
    );

    let mut late = exec("late", "2.5");
    wait_held(&server, &lock_key("late"), &mut late);
    let held = std::time::Instant::now();
    // Frozen from before the first renewal is due (1 s after the grant) until 0.6 s after:
    // the fault itself is a stretch of time.
    server.freeze();
    wait_until("the renewal to be due", Duration::from_secs(3), || {
        held.elapsed() >= Duration::from_millis(1_600)
    });
    server.thaw();
    let (out, _) = late.finish(SOON);
    assert_eq!(out.code, 0, "{out}");
    let events = events_in(&out.stderr);
    check_common(&events, "late");
    assert_eq!(
        names(&events),
        ["acquired", "renewed_late", "released"],
        "{out}"
    );
    let late_ms = events[1]["late_ms"].as_u64().expect("late_ms");
    let left_ms = events[1]["lease_left_ms"].as_u64().expect("lease_left_ms");
    assert!((300..2_000).contains(&late_ms), "{out}");
    assert!(left_ms < 3_000, "{out}");
}
