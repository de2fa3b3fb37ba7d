mod common;

// What a newcomer trips over (issue 14): a blank key, a whole command line given as one word,
// -q meaning "only errors" for release --force too, -v saying why a run skipped with -E 0 did
// nothing, and a password not given or wrong.

use common::{Output, RedisServer, rlock, rlock_at, run};

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

/// One line on stderr, starting with "rlock: ", stdout empty, the given exit code.
fn assert_one_line(out: &Output, code: i32) {
    assert_eq!(out.code, code, "{out}");
    assert_eq!(out.stdout, "", "{out}");
    assert_eq!(out.stderr.lines().count(), 1, "{out}");
    assert!(out.stderr.starts_with("rlock: "), "{out}");
}

/// A server that needs a password, and none given: said in words, with where a password goes,
/// never Redis's "NOAUTH" or "unauthenticated multibulk length"; refused auth is 77.
#[test]
fn no_password_says_where_one_goes() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]);
    for args in [
        // EVALSHA with more than 10 arguments: "unauthenticated multibulk length".
        &["acquire", "-n", "-k", "x"][..],
        &["exec", "-n", "-k", "x", "--", "true"],
        // Fewer: "NOAUTH Authentication required".
        &["inspect", "-k", "x"],
        &["inspect"],
        &["release", "-k", "x", "--token", "t"],
        &["renew", "-k", "x", "--token", "t"],
    ] {
        let out = run(rlock_at(&server).args(args));
        assert_one_line(&out, 77);
        assert!(
            out.stderr.contains("the server needs a password")
                && out.stderr.contains("--password-file")
                && out.stderr.contains("$RLOCK_PASSWORD")
                && out.stderr.contains("redis://:PASS@host"),
            "{args:?}: {out}"
        );
        for raw in [
            "NOAUTH",
            "multibulk",
            "unauthenticated",
            "Authentication required",
        ] {
            assert!(!out.stderr.contains(raw), "{args:?}: raw {raw:?}: {out}");
        }
    }
}

/// A wrong password, from each place one can come from: refused in words, 77, not shown.
#[test]
fn a_wrong_password_is_said_to_be_refused() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]);
    let wrong_url = format!("redis://:wr0ng@127.0.0.1:{}", server.port());
    let mut in_url = rlock();
    in_url
        .args(["--url", &wrong_url])
        .args(["acquire", "-n", "-k", "x"]);
    let mut in_env = rlock_at(&server);
    in_env
        .env("RLOCK_PASSWORD", "wr0ng")
        .args(["inspect", "-k", "x"]);
    for mut cmd in [in_url, in_env] {
        let out = run(&mut cmd);
        assert_one_line(&out, 77);
        assert!(out.stderr.contains("refused the password"), "{out}");
        assert!(
            !out.stderr.contains("wr0ng") && !out.stderr.contains("AuthenticationFailed"),
            "{out}"
        );
    }
}
