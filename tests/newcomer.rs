mod common;

// What a newcomer trips over (issue 14): a blank key, a whole command line given as one word,
// -q meaning "only errors" for release --force too, and -v saying why a run skipped with -E 0
// did nothing.

use common::{RedisServer, rlock_at, run};

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
    let mut waiter = common::Background::spawn(
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
