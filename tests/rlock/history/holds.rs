//! `acquire` ... `release` pairs are on record too: the release appends the hold it ends, in the
//! same script, with what it can know (the holder record: when it was granted, host, user, pid,
//! label or command, fence) and not what it cannot (the wait, the script's exit status): released,
//! lost (the lease ran out first), broken (`--force`, and by whom). A release by a token that
//! never held the lock records nothing; `--history-limit 0` nothing; a failed write changes
//! nothing else; a release inside an `exec` that owns the lock leaves the record to the exec.

use super::*;
use crate::common::basic::{acquire, acquire_json, hostname, lock_key, release, sh};
use crate::common::rlock;
use std::time::Instant;

const HISTORY: &str = "{rlock:k}:history";

/// `rlock release -k KEY --token TOKEN EXTRA...`, run to its end.
#[track_caller]
fn release_with(server: &RedisServer, key: &str, token: &str, extra: &[&str]) -> Output {
    run(rlock_at(server)
        .args(["release", "-k", key, "--token", token])
        .args(extra))
}

#[test]
fn an_acquire_and_its_release_are_one_entry_released_with_the_holders_fields() {
    let server = RedisServer::start();
    let started = Instant::now();
    let grant = acquire_json(&server, "k", &["--label", "nightly backup"]);
    let token = grant["token"].as_str().unwrap();
    // The holder record the release will read, as inspect shows it.
    let out = run(rlock_at(&server).args(["inspect", "--json", "-k", "k"]));
    assert_eq!(out.code, 0, "{out}");
    let held: Value = serde_json::from_str(&out.stdout).unwrap();
    release(&server, "k", token);
    let bound = started.elapsed().as_millis() as i64;

    let runs = history_of(rlock_at(&server), "k", 10);
    assert_eq!(outcomes(&runs), ["released"], "{runs:#?}");
    let r = &runs[0];
    assert_eq!(r["key"], "k");
    assert_eq!(r["command"], "nightly backup", "the label: {r}");
    assert_eq!(r["host"], hostname().as_str(), "{r}");
    // `acquire` names its caller (here this test) as the holder.
    assert_eq!(r["pid"], i64::from(std::process::id()), "{r}");
    assert!(r["user"].as_str().is_some_and(|u| !u.is_empty()), "{r}");
    assert_eq!(r["fence"], grant["fence"], "{r}");
    assert!(r["run"].as_str().is_some_and(|u| u.len() == 36), "{r}");
    // Granted when the holder record says, held until the release, no longer than it all took.
    assert_eq!(r["granted_ms"], held["holder"]["since_ms"], "{r} / {held}");
    let (granted, ended, held_ms) = (
        r["granted_ms"].as_i64().unwrap(),
        r["ended_ms"].as_i64().unwrap(),
        r["held_ms"].as_i64().unwrap(),
    );
    assert_eq!(granted + held_ms, ended, "{r}");
    assert!(
        (0..=bound).contains(&held_ms),
        "held {held_ms} ms of {bound}: {r}"
    );
    // What a release cannot know: the wait, when the acquire asked, how the script ended.
    for field in ["asked_ms", "wait_ms", "code", "signal", "by"] {
        assert!(r[field].is_null(), "{field}: {r}");
    }

    // A retried release (exit 0) is the same release: nothing more on record.
    release(&server, "k", token);
    assert_eq!(xlen(&server, HISTORY), 1);
    // The table: no wait, the hold, the outcome, the label.
    let out = run(rlock_at(&server).args(["inspect", "--history", "-k", "k"]));
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    let cells: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(cells[3], "-", "no wait: {out}");
    assert!(
        lines[1].contains(" released ") && lines[1].ends_with("nightly backup"),
        "{out}"
    );
}

#[test]
fn a_wrong_token_records_nothing_and_a_lease_that_ran_out_records_lost_once() {
    let server = RedisServer::start();
    let token = acquire(&server, "k", &[]);
    let out = release_with(&server, "k", "not-the-token", &[]);
    assert_eq!(out.code, 77, "{out}");
    assert!(!server.exists(HISTORY), "a wrong token records nothing");
    release(&server, "k", &token);
    assert_eq!(
        outcomes(&history_of(rlock_at(&server), "k", 10)),
        ["released"]
    );

    // The lease runs out before the release: 77 as ever, and the hold is on record as lost,
    // ending when the lease did.
    let lost = acquire(&server, "k", &["--ttl", "150ms", "--label", "short"]);
    wait_until("the lease to run out", SOON, || {
        !server.exists(&lock_key("k"))
    });
    let out = release_with(&server, "k", &lost, &[]);
    assert_eq!(out.code, 77, "{out}");
    let runs = history_of(rlock_at(&server), "k", 10);
    assert_eq!(outcomes(&runs), ["lost", "released"], "{runs:#?}");
    let r = &runs[0];
    assert_eq!(r["command"], "short", "{r}");
    let held = r["held_ms"].as_i64().unwrap();
    assert!(
        (140..=150).contains(&held),
        "held until the lease ran out: {r}"
    );
    assert!(r["code"].is_null(), "{r}");
    // Once: a second release of the lost token says 77 again, and records nothing more.
    let out = release_with(&server, "k", &lost, &[]);
    assert_eq!(out.code, 77, "{out}");
    assert_eq!(xlen(&server, HISTORY), 2);

    // Taken by someone else since: the old token's release knows nothing of its hold.
    let gone = acquire(&server, "k", &["--ttl", "150ms"]);
    wait_until("the lease to run out", SOON, || {
        !server.exists(&lock_key("k"))
    });
    let other = acquire(&server, "k", &[]);
    let out = release_with(&server, "k", &gone, &[]);
    assert_eq!(out.code, 77, "{out}");
    assert_eq!(
        xlen(&server, HISTORY),
        2,
        "nothing for a hold rlock no longer knows"
    );
    release(&server, "k", &other);
    assert_eq!(xlen(&server, HISTORY), 3);
}

#[test]
fn a_forced_release_records_the_broken_hold_and_who_broke_it() {
    let server = RedisServer::start();
    let grant = acquire_json(&server, "k", &["--label", "stuck job"]);
    let out = run(rlock_at(&server).args(["release", "-k", "k", "--force"]));
    assert_eq!(out.code, 0, "{out}");
    // The owner's own release later: 77, and the hold is on record once, as broken.
    let out = release_with(&server, "k", grant["token"].as_str().unwrap(), &[]);
    assert_eq!(out.code, 77, "{out}");
    let runs = history_of(rlock_at(&server), "k", 10);
    assert_eq!(outcomes(&runs), ["broken"], "{runs:#?}");
    let r = &runs[0];
    assert_eq!(
        (&r["command"], &r["fence"]),
        (&"stuck job".into(), &grant["fence"])
    );
    let by = format!("@{} pid {}", hostname(), std::process::id());
    assert!(r["by"].as_str().is_some_and(|b| b.ends_with(&by)), "{r}");
    assert!(r["held_ms"].as_i64().is_some_and(|h| h >= 0), "{r}");
    // Breaking a free lock records nothing.
    let out = run(rlock_at(&server).args(["release", "-k", "k", "--force"]));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(xlen(&server, HISTORY), 1);

    // A semaphore: each holder's release is its own entry; a forced release, one per holder.
    let a = acquire(&server, "sem", &["--limit", "3", "--label", "a"]);
    acquire(&server, "sem", &["--limit", "3", "--label", "b"]);
    acquire(&server, "sem", &["--limit", "3", "--label", "c"]);
    release(&server, "sem", &a);
    let out = run(rlock_at(&server).args(["release", "-k", "sem", "--force"]));
    assert_eq!(out.code, 0, "{out}");
    let runs = history_of(rlock_at(&server), "sem", 10);
    let mut seen: Vec<(&str, &str)> = runs
        .iter()
        .map(|r| {
            (
                r["outcome"].as_str().unwrap(),
                r["command"].as_str().unwrap(),
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [("broken", "b"), ("broken", "c"), ("released", "a")],
        "{runs:#?}"
    );
    let ids: std::collections::HashSet<&str> =
        runs.iter().map(|r| r["run"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 3, "each hold is a run of its own: {runs:#?}");
}

#[test]
fn the_history_options_and_environment_hold_for_release_and_0_records_nothing() {
    let server = RedisServer::start();
    let token = acquire(&server, "k", &[]);
    let out = release_with(&server, "k", &token, &["--history-limit", "0"]);
    assert_eq!(out.code, 0, "{out}");
    let token = acquire(&server, "k", &[]);
    let out = run(rlock_at(&server)
        .env("RLOCK_HISTORY_LIMIT", "0")
        .args(["release", "-k", "k", "--token", &token]));
    assert_eq!(out.code, 0, "{out}");
    acquire(&server, "k", &[]);
    let out =
        run(rlock_at(&server).args(["release", "-k", "k", "--force", "--history-limit", "0"]));
    assert_eq!(out.code, 0, "{out}");
    assert!(!server.exists(HISTORY), "--history-limit 0 records nothing");

    for _ in 0..3 {
        let token = acquire(&server, "k", &[]);
        let out = release_with(
            &server,
            "k",
            &token,
            &["--history-limit", "2", "--history-ttl", "1h"],
        );
        assert_eq!(out.code, 0, "{out}");
    }
    assert_eq!(xlen(&server, HISTORY), 2, "the cap is exact");
    let pttl = server.pttl(HISTORY);
    assert!(pttl > 3_500_000 && pttl <= 3_600_000, "PTTL {pttl}");
    let token = acquire(&server, "k", &[]);
    let out = run(rlock_at(&server)
        .env("RLOCK_HISTORY_TTL", "1500ms")
        .args(["release", "-k", "k", "--token", &token]));
    assert_eq!(out.code, 0, "{out}");
    let pttl = server.pttl(HISTORY);
    assert!((1..=1500).contains(&pttl), "PTTL {pttl}");
    assert_eq!(xlen(&server, HISTORY), 3, "100 by default");
}

#[test]
fn a_release_whose_record_the_acl_refuses_changes_nothing_else() {
    let server = RedisServer::start();
    let mut args = vec![
        "ACL",
        "SETUSER",
        "locker",
        "on",
        ">pw",
        "resetkeys",
        "resetchannels",
    ];
    args.extend([
        "~rlock:*",
        "~{rlock:*",
        "&{rlock:*",
        "-@all",
        "+@all",
        "-xadd",
    ]);
    server.cmd(&args);
    let url = format!("redis://locker:pw@127.0.0.1:{}", server.port());
    let as_locker = || {
        let mut cmd = rlock();
        cmd.args(["--url", &url]);
        cmd
    };
    let token = crate::common::basic::token_of(&run(as_locker().args(["acquire", "-k", "k"])));
    let out = run(as_locker().args(["release", "-k", "k", "--token", &token]));
    assert_eq!(
        (out.code, out.stdout.as_str(), out.stderr.as_str()),
        (0, "", "")
    );
    assert!(!server.exists(&lock_key("k")), "released");
    // -v says why it is not on record; a forced release too; and a lost lease is 77 as ever.
    let token = crate::common::basic::token_of(&run(as_locker().args(["acquire", "-k", "k"])));
    let out = run(as_locker().args(["-v", "release", "-k", "k", "--token", &token]));
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stderr
            .contains("release was not recorded in the history of lock 'k'"),
        "{out}"
    );
    assert!(!out.stderr.contains(":pw@"), "no password shown: {out}");
    acquire(&server, "k", &[]);
    let out = run(as_locker().args(["release", "-k", "k", "--force"]));
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.starts_with("broke lock 'k' held by"), "{out}");
    let lost = crate::common::basic::token_of(&run(
        as_locker().args(["acquire", "-k", "k", "--ttl", "100ms"])
    ));
    wait_until("the lease to run out", SOON, || {
        !server.exists(&lock_key("k"))
    });
    let out = run(as_locker().args(["release", "-k", "k", "--token", &lost]));
    assert_eq!(out.code, 77, "{out}");
    assert!(!server.exists(HISTORY));
}

#[test]
fn a_release_inside_the_exec_that_owns_the_lock_leaves_the_record_to_the_exec() {
    let server = RedisServer::start();
    // The acquire inherits exec's lock, the release is a no-op: one run on record, exec's.
    let script = r#""$RL" --url "$URL" exec -k k -- sh -c '
eval "$("$RL" --url "$URL" acquire --export -k k)" || exit 9
"$RL" --url "$URL" release -k k || exit 8
exit 3'"#;
    let out = run(sh(script).env("URL", server.url()));
    assert_eq!(out.code, 3, "{out}");
    let runs = history_of(rlock_at(&server), "k", 10);
    assert_eq!(outcomes(&runs), ["failed"], "{runs:#?}");
    // A shell's own acquire ... release around an exec: two runs, the exec's and the shell's.
    let script = r#"eval "$("$RL" --url "$URL" acquire --export -k k --label shell)" || exit 9
"$RL" --url "$URL" exec -k k -- true || exit 8
"$RL" --url "$URL" release -k k"#;
    let out = run(sh(script).env("URL", server.url()));
    assert_eq!(out.code, 0, "{out}");
    let runs = history_of(rlock_at(&server), "k", 10);
    assert_eq!(outcomes(&runs), ["released", "ok", "failed"], "{runs:#?}");
    assert_eq!(runs[0]["command"], "shell");
    assert_eq!(
        runs[0]["fence"], runs[1]["fence"],
        "one grant, two runs on record"
    );
}

#[test]
fn a_history_key_of_another_type_or_an_odd_holder_record_changes_nothing_in_the_release() {
    let server = RedisServer::start();
    server.set(HISTORY, "not a stream");
    let token = acquire(&server, "k", &[]);
    let out = release_with(&server, "k", &token, &[]);
    assert_eq!((out.code, out.stderr.as_str()), (0, ""), "{out}");
    assert!(!server.exists(&lock_key("k")), "released");
    let token = acquire(&server, "k", &[]);
    let out = run(rlock_at(&server).args(["-v", "release", "-k", "k", "--token", &token]));
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stderr
            .contains("release was not recorded in the history of lock 'k'")
            && out.stderr.contains("holds a string, not a stream"),
        "{out}"
    );
    assert_eq!(server.get(HISTORY).as_deref(), Some("not a stream"));

    // A holder record rlock did not write as it does (a `since` that is no number): released as
    // ever, and nothing made up for the history.
    let token = acquire(&server, "odd", &[]);
    server.cmd(&["HSET", "{rlock:odd}:state", "since", "yesterday"]);
    let out = release_with(&server, "odd", &token, &[]);
    assert_eq!((out.code, out.stderr.as_str()), (0, ""), "{out}");
    assert!(!server.exists("{rlock:odd}:history"));
}

#[test]
fn an_exec_broken_by_release_force_is_one_entry() {
    let server = RedisServer::start();
    let dir = super::tempdir();
    // Renewals every 300 ms: the exec hears of the break while its command runs.
    let mut job = Background::spawn_group(
        "job",
        dir.path(),
        rlock_at(&server).args(["exec", "-k", "k", "--ttl", "900ms", "--", "sleep", "30"]),
    );
    wait_held(&server, &lock_key("k"), &mut job);
    let out = run(rlock_at(&server).args(["release", "-k", "k", "--force"]));
    assert_eq!(out.code, 0, "{out}");
    let (out, _) = job.finish(SOON);
    assert_eq!(out.code, 76, "{out}");
    let runs = history_of(rlock_at(&server), "k", 10);
    assert_eq!(outcomes(&runs), ["broken"], "one run, one entry: {runs:#?}");
    assert!(
        runs[0]["by"].as_str().is_some_and(|b| b.contains("pid")),
        "{runs:#?}"
    );
}
