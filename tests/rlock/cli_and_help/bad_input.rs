//! Bad input: a blank key, a whole command line given as one word, durations out of range,
//! control characters, a key with a newline; `-q` meaning "only errors" for `release --force`
//! too; `-v` saying why a run skipped with `-E 0` did nothing; and usage errors that point at the
//! right help.

use crate::common::basic::*;
use crate::common::{RedisServer, rlock, rlock_at, run};

#[test]
fn a_key_of_blanks_is_a_usage_error() {
    let server = RedisServer::start();
    for key in [" ", "  ", "\u{a0}"] {
        let out = run(rlock_at(&server).args(["acquire", "-n", "-k", key]));
        assert_eq!(out.code, 2, "{key:?}: {out}");
        assert!(out.stderr.contains("blanks"), "{key:?}: {out}");
    }
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut server.conn())
        .expect("KEYS");
    assert!(keys.is_empty(), "a blank key reached Redis: {keys:?}");
}

#[test]
fn a_command_line_in_one_word_gets_the_shell_hint() {
    let server = RedisServer::start();
    let out = run(rlock_at(&server).args(["exec", "-k", "hint", "--", "echo hi"]));
    assert_eq!(out.code, 127, "{out}");
    assert!(
        out.stderr.contains("without a shell") && out.stderr.contains("sh -c 'echo hi'"),
        "{out}"
    );
    assert_eq!(out.stderr.lines().count(), 1, "{out}");
    // A plain missing command gets no such hint.
    let out = run(rlock_at(&server).args(["exec", "-k", "hint", "--", "no-such-command-x"]));
    assert_eq!(out.code, 127, "{out}");
    assert!(!out.stderr.contains("without a shell"), "{out}");
}

#[test]
fn quiet_force_release_says_nothing() {
    let server = RedisServer::start();
    let out = run(rlock_at(&server).args(["acquire", "-k", "q"]));
    assert_eq!(out.code, 0, "{out}");
    let out = run(rlock_at(&server).args(["-q", "release", "-k", "q", "--force"]));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        (out.stdout.as_str(), out.stderr.as_str()),
        ("", ""),
        "{out}"
    );
    assert!(!server.exists("rlock:q"), "the lock was not broken");
    // Without -q it says whom it broke.
    let out = run(rlock_at(&server).args(["acquire", "-k", "q"]));
    assert_eq!(out.code, 0, "{out}");
    let out = run(rlock_at(&server).args(["release", "-k", "q", "--force"]));
    assert!(out.stdout.contains("broke lock 'q' held by"), "{out}");
}

/// `exec -w 20m -- ./deplyo.sh` (a typo) must not wait 20 minutes to say so: the command is
/// looked up before the wait, a line says it cannot run now, and the wait goes on (the command
/// may appear meanwhile, built by the holder).
#[test]
fn a_command_that_cannot_run_is_told_before_the_wait() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let out = run(rlock_at(&server).args(["acquire", "-k", "typo", "--ttl", "60s"]));
    assert_eq!(out.code, 0, "{out}");
    let holder = out.stdout.trim().to_string();
    let script = dir.path().join("deploy.sh");
    let mut waiter = crate::common::Background::spawn(
        "waiter",
        dir.path(),
        rlock_at(&server)
            .args(["exec", "-w", "20s", "-k", "typo", "--"])
            .arg(&script),
    );
    let stderr = dir.path().join("waiter.stderr");
    waiter.wait_for(
        "the line about the command",
        std::time::Duration::from_secs(5),
        || std::fs::read_to_string(&stderr).is_ok_and(|e| e.contains("does not exist")),
    );
    assert!(
        waiter.running(),
        "the waiter stopped waiting: {}",
        waiter.describe()
    );
    // The holder builds the command meanwhile, then releases: the waiter runs it.
    std::fs::write(&script, "#!/bin/sh\necho built\n").expect("write script");
    let mut perms = std::fs::metadata(&script).expect("stat").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&script, perms).expect("chmod");
    let out = run(rlock_at(&server).args(["release", "-k", "typo", "--token", &holder]));
    assert_eq!(out.code, 0, "{out}");
    let (out, _) = waiter.finish(std::time::Duration::from_secs(10));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(out.stdout.trim(), "built");
    // -q: no line; -n: no wait, so no line either (the 127 after the grant says it).
    let out = run(rlock_at(&server).args(["-q", "exec", "-w", "1s", "-k", "t2", "--", "./nope"]));
    assert_eq!(out.code, 127, "{out}");
    assert_eq!(out.stderr.lines().count(), 1, "{out}");
}

/// The cron recipe: `-E 0` turns a skipped run into a success that says nothing, and `-v` still
/// says why it was skipped (on stderr, one line naming the lock and its holder).
#[test]
fn verbose_says_why_a_busy_lock_exited_0() {
    let server = RedisServer::start();
    let out = run(rlock_at(&server).args(["acquire", "-k", "cron", "--ttl", "60s"]));
    assert_eq!(out.code, 0, "{out}");
    for sub in [
        &["exec", "-n", "-E", "0", "-k", "cron", "--", "echo", "ran"][..],
        &["acquire", "-n", "-E", "0", "-k", "cron"],
    ] {
        let out = run(rlock_at(&server).arg("-v").args(sub));
        assert_eq!(out.code, 0, "{sub:?}: {out}");
        assert_eq!(out.stdout, "", "{sub:?}: nothing ran, no token: {out}");
        let why: Vec<&str> = out
            .stderr
            .lines()
            .filter(|l| l.starts_with("rlock: lock 'cron' is busy (held by "))
            .collect();
        assert_eq!(why.len(), 1, "{sub:?}: -v says why, once: {out}");
        // Without -v: silent, as the recipe promises.
        let out = run(rlock_at(&server).args(sub));
        assert_eq!(
            (out.code, out.stdout.as_str(), out.stderr.as_str()),
            (0, "", ""),
            "{sub:?}: {out}"
        );
    }
}

/// A typo gets clap's suggestion, and a usage error names the help page of its subcommand,
/// where the option it is about is described; all on one line, exit 2.
#[test]
fn usage_errors_suggest_and_point_at_the_right_help() {
    for (args, says) in [
        (
            &["aquire", "-k", "x"][..],
            &[
                "a similar subcommand exists: 'acquire'",
                "(see 'rlock --help')",
            ][..],
        ),
        (
            &["acquire", "--tll", "30s", "-k", "x"],
            &[
                "a similar argument exists: '--ttl'",
                "(see 'rlock acquire --help')",
            ],
        ),
        (
            &["acquire", "--ttl", "0", "-k", "x"],
            &["'0' is too short", "(see 'rlock acquire --help')"],
        ),
        (
            &["acquire", "--ttl", "30x", "-k", "x"],
            &["unknown unit 'x': use ms, s, m, h or d", "try e.g. 30s"],
        ),
        (
            &["acquire", "-E", "-1", "-k", "x"],
            &["-1 is not in 0..=255", "(see 'rlock acquire --help')"],
        ),
        (
            &["exec", "-k", "x", "--lost-signal", "FOO", "--", "true"],
            &["'FOO' is not a signal", "(see 'rlock exec --help')"],
        ),
        (
            &["inspect", "--bogus"],
            &[
                "unexpected argument '--bogus'",
                "(see 'rlock inspect --help')",
            ],
        ),
        (
            &[],
            &["a subcommand is needed: acquire, release, renew, inspect or exec"],
        ),
    ] {
        let out = run(rlock().args(args));
        assert_eq!(out.code, 2, "{args:?}: {out}");
        assert_eq!(out.stdout, "", "{args:?}: {out}");
        assert_eq!(out.stderr.lines().count(), 1, "{args:?}: {out}");
        for s in says {
            assert!(out.stderr.contains(s), "{args:?}: wants {s:?}: {out}");
        }
    }
}

/// A usage error about an argument that is not UTF-8 is still one line and exit 2 (not a
/// panic), and one about a stray URL does not show its password.
#[test]
fn usage_errors_survive_odd_arguments_and_hide_passwords() {
    use std::os::unix::ffi::OsStrExt;
    let odd = std::ffi::OsStr::from_bytes(b"caf\xe9");
    for args in [vec![odd], vec![std::ffi::OsStr::new("--bogus"), odd]] {
        let out = run(rlock().args(&args));
        assert_one_line(&out, 2);
    }
    let out = run(rlock().args(["acquire", "-k", "x", "redis://:hunter2@db"]));
    assert_one_line(&out, 2);
    assert!(!out.stderr.contains("hunter2"), "{out}");
}

#[test]
fn out_of_range_and_negative_durations_and_control_characters_are_usage_errors() {
    let server = RedisServer::start();
    let cases: &[(&[&str], &str)] = &[
        (&["acquire", "-k", "jobs", "--ttl", "300000000y"], "365d"),
        (
            &["renew", "-k", "jobs", "--token", "t", "--ttl", "300000000y"],
            "365d",
        ),
        (&["acquire", "-k", "jobs", "--ttl", "-5s"], "negative"),
        (&["acquire", "-k", "jobs", "-w", "-5s"], "negative"),
        (&["--op-timeout", "2h", "acquire", "-k", "jobs"], "1h"),
        (&["acquire", "-k", "a\tb"], "control characters"),
        // What is said about a newline: see a_key_with_a_newline_is_refused_with_a_message_…
        (&["acquire", "-k", "a\nb"], ""),
        (&["inspect", "-k", "a\nb"], ""),
    ];
    for (args, needle) in cases {
        let out = run(rlock_at(&server).args(*args));
        assert_usage(&out, needle);
        assert_eq!(q::<i64>(&server, &["DBSIZE"]), 0, "{args:?} wrote to Redis");
    }
    // A wait too long to add to the clock is a wait without end, not a crash.
    let token = acquire(&server, "jobs", &["-w", "18446744073709551615s"]);
    release(&server, "jobs", &token);
}

#[test]
fn a_key_with_a_newline_is_refused_with_a_message_that_says_why() {
    let server = RedisServer::start();
    let out = run(rlock_at(&server).args(["acquire", "-k", "a\nb"]));
    assert_fails(&out, 2, &["--key", "control characters", r"got 'a\nb'"]);
}

#[test]
fn flocks_c_and_s_point_to_sh_c_and_shared_in_one_line() {
    let server = RedisServer::start();
    for (args, want) in [
        (&["exec", "-k", "f", "-c", "make all"][..], "-- sh -c '…'"),
        (
            &["exec", "-k", "f", "--command", "make all"],
            "-- sh -c '…'",
        ),
        (&["exec", "-s", "-k", "f", "--", "true"], "use --shared"),
        (&["acquire", "-s", "-k", "f"], "use --shared"),
    ] {
        let out = run(rlock_at(&server).args(args));
        assert_eq!(out.code, 2, "{args:?}: {out}");
        assert_eq!(out.stderr.lines().count(), 1, "{args:?}: {out}");
        assert!(out.stderr.contains(want), "{args:?}: {out}");
        assert!(!out.stderr.contains("use '-- -"), "{args:?}: {out}");
    }
    assert!(!server.exists("rlock:f"));
}

#[test]
fn an_empty_environment_variable_means_not_set() {
    let server = RedisServer::start();
    let empty = [
        "RLOCK_CONNECT_TIMEOUT",
        "RLOCK_OP_TIMEOUT",
        "RLOCK_LABEL",
        "RLOCK_TIMEOUT",
        "RLOCK_HOLD_AT_LEAST",
        "RLOCK_HISTORY_LIMIT",
        "RLOCK_METRICS_FILE",
        "RLOCK_PREFIX",
        "RLOCK_CONTAIN",
    ];
    let mut exec = rlock_at(&server);
    for name in empty {
        exec.env(name, "");
    }
    // Beside an explicit option, and alone: the option, or the default.
    let out = run(exec.args(["--connect-timeout", "3s", "exec", "-k", "e", "--", "true"]));
    assert_eq!((out.code, out.stderr.as_str()), (0, ""), "{out}");
    let mut acquire = rlock_at(&server);
    for name in empty {
        acquire.env(name, "");
    }
    let out = run(acquire.args(["acquire", "-k", "e", "--ttl", "1h"]));
    assert_eq!(out.code, 0, "{out}");
    let state = server.hgetall("{rlock:e}:state");
    assert!(!state.get("cmd").is_some_and(String::is_empty), "{state:?}");
}
