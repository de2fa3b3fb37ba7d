mod common;

// What a newcomer trips over (issue 14, first items): a blank key, a whole command line given as
// one word, and -q meaning "only errors" for release --force too.

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
