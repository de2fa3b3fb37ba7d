//! The history is capped and expires (every key rlock writes expires), 0 keeps none, and a
//! history write the ACL refuses changes nothing else: not the exit code, not the output.

use super::*;
use crate::common::rlock;

const HISTORY: &str = "{rlock:k}:history";

#[test]
fn the_history_keeps_the_newest_runs_up_to_its_cap_and_expires_after_the_last() {
    let server = RedisServer::start();
    for code in 0..5 {
        let script = format!("exit {code}");
        let out = exec(
            &server,
            "k",
            &[
                "--history-limit",
                "3",
                "--history-ttl",
                "1500ms",
                "--",
                "sh",
                "-c",
                &script,
            ],
        );
        assert_eq!(out.code, code, "{out}");
    }
    assert_eq!(xlen(&server, HISTORY), 3, "the cap is exact");
    let runs = history_of(rlock_at(&server), "k", 10);
    let codes: Vec<i64> = runs.iter().map(|r| r["code"].as_i64().unwrap()).collect();
    assert_eq!(codes, [4, 3, 2], "the newest three, newest first");
    let pttl = server.pttl(HISTORY);
    assert!((1..=1500).contains(&pttl), "PTTL {pttl}");
    wait_until("the history to expire", SOON, || !server.exists(HISTORY));

    // The default: 100 runs, 30 days after the last.
    assert_eq!(exec(&server, "k", &["--", "true"]).code, 0);
    let pttl = server.pttl(HISTORY);
    let days30 = 30 * 86_400_000;
    assert!(pttl > days30 - 60_000 && pttl <= days30, "PTTL {pttl}");
    let script = "for i in $(seq 105); do \"$RL\" --url \"$URL\" exec -k k -- true || exit 9; done";
    let out = run(crate::common::basic::sh(script).env("URL", server.url()));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(xlen(&server, HISTORY), 100);
}

#[test]
fn the_environment_sets_the_cap_and_the_life_and_0_records_nothing() {
    let server = RedisServer::start();
    let out = run(rlock_at(&server)
        .env("RLOCK_HISTORY_LIMIT", "2")
        .env("RLOCK_HISTORY_TTL", "1h")
        .args(["exec", "-k", "k", "--", "true"]));
    assert_eq!(out.code, 0, "{out}");
    let pttl = server.pttl(HISTORY);
    assert!(pttl > 3_500_000 && pttl <= 3_600_000, "PTTL {pttl}");
    for _ in 0..3 {
        let out = run(rlock_at(&server)
            .env("RLOCK_HISTORY_LIMIT", "2")
            .args(["exec", "-k", "k", "--", "true"]));
        assert_eq!(out.code, 0, "{out}");
    }
    assert_eq!(xlen(&server, HISTORY), 2);

    let out = run(rlock_at(&server)
        .env("RLOCK_HISTORY_LIMIT", "0")
        .args(["exec", "-k", "zero", "--", "true"]));
    assert_eq!(out.code, 0, "{out}");
    let out = exec(
        &server,
        "zero2",
        &["--history-limit", "0", "-n", "--", "false"],
    );
    assert_eq!(out.code, 1, "{out}");
    assert!(!server.exists("{rlock:zero}:history") && !server.exists("{rlock:zero2}:history"));

    let out = exec(&server, "k", &["--history-limit", "-1", "--", "true"]);
    assert_eq!(out.code, 2, "{out}");
    let out = exec(&server, "k", &["--history-ttl", "0s", "--", "true"]);
    assert_eq!(out.code, 2, "{out}");
}

/// The rights of the documented ACL line (docs/connecting.md), without `drop`.
fn rights_without(drop: &str) -> Vec<String> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/connecting.md"))
            .expect("read docs/connecting.md");
    let line = readme
        .lines()
        .find(|l| l.starts_with("ACL SETUSER locker"))
        .expect("the documented ACL SETUSER line");
    let rights: Vec<String> = line
        .split_whitespace()
        .filter(|w| w.starts_with('+'))
        .map(String::from)
        .collect();
    assert!(
        rights.iter().any(|r| r == drop),
        "{drop} is not in the README's line"
    );
    rights.into_iter().filter(|r| r != drop).collect()
}

#[test]
fn a_history_write_the_acl_refuses_changes_nothing_else() {
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
    args.extend(["~rlock:*", "~{rlock:*", "&{rlock:*", "-@all"]);
    let rights = rights_without("+xadd");
    args.extend(rights.iter().map(String::as_str));
    server.cmd(&args);
    let url = format!("redis://locker:pw@127.0.0.1:{}", server.port());
    let as_locker = || {
        let mut cmd = rlock();
        cmd.args(["--url", &url]);
        cmd
    };
    // The same runs by the default user (who may write the history) and by the locker.
    for cmd in [rlock_at(&server), as_locker()] {
        let mut cmd = cmd;
        let out = run(cmd.args(["exec", "-k", "k", "--", "sh", "-c", "echo out; exit 7"]));
        assert_eq!(
            (out.code, out.stdout.as_str(), out.stderr.as_str()),
            (7, "out\n", "")
        );
    }
    let token = crate::common::basic::acquire(&server, "k", &[]);
    let out = run(as_locker().args(["exec", "-n", "-k", "k", "--", "true"]));
    assert_eq!(out.code, 75, "{out}");
    assert_eq!(out.stderr.lines().count(), 1, "{out}");
    crate::common::basic::release(&server, "k", &token);
    // Only the default user's runs are on record (its exec, its acquire's hold); -v says why the
    // locker's are not.
    assert_eq!(
        outcomes(&history_of(rlock_at(&server), "k", 10)),
        ["released", "failed"]
    );
    let out = run(as_locker().args(["-v", "exec", "-k", "k", "--", "true"]));
    assert_eq!(out.code, 0, "{out}");
    // Redis 7 names the command (the script asks first); Redis 6 says only that it was refused.
    let named = crate::common::redis_version().0 < 7 || out.stderr.contains("xadd");
    assert!(
        out.stderr
            .contains("not recorded in the history of lock 'k'")
            && named,
        "{out}"
    );
    // The locker still reads the history.
    assert_eq!(history_of(as_locker(), "k", 10).len(), 2);
    assert!(!out.stderr.contains(":pw@"), "no password shown: {out}");
    let pttl = server.pttl("{rlock:k}:state");
    assert!(pttl > 0, "the lock's own keys expire as ever: {pttl}");
}

/// A server without streams (Garnet; here XADD renamed away): the history is off. A run
/// locks, runs and releases as ever (exit code and output untouched, nothing of the history
/// left in Redis); under -v one line says the history is off there, and without -v nothing;
/// `inspect --history` says in one line that such a server has none.
#[test]
fn a_server_without_streams_runs_without_history_and_says_so_once_under_v() {
    let server = RedisServer::start_with(&[
        "--rename-command",
        "XADD",
        "",
        "--rename-command",
        "XREVRANGE",
        "",
    ]);
    let out =
        run(rlock_at(&server).args(["exec", "-k", "k", "--", "sh", "-c", "echo out; exit 3"]));
    assert_eq!(
        (out.code, out.stdout.as_str(), out.stderr.as_str()),
        (3, "out\n", ""),
        "silent without -v: {out}"
    );
    let out = run(rlock_at(&server).args(["-v", "exec", "-k", "k", "--", "true"]));
    assert_eq!(out.code, 0, "{out}");
    let said: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("history"))
        .collect();
    assert_eq!(said.len(), 1, "one line about the history: {out}");
    assert!(
        said[0].contains("history of lock 'k' is off")
            && said[0].contains("does not offer streams"),
        "{out}"
    );
    assert!(!server.exists(HISTORY), "no history written");
    assert!(!server.exists("rlock:k"), "released");
    // Asked for the history, one line says why there is none.
    let out = run(rlock_at(&server).args(["inspect", "-k", "k", "--history"]));
    assert_ne!(out.code, 0, "{out}");
    assert!(
        out.stderr
            .contains("a server without streams has no history")
            && out.stderr.lines().count() == 1,
        "{out}"
    );
}
