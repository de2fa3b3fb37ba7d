//! Global options: `RLOCK_URL`, options after the subcommand, `--prefix`; and usage errors that
//! exit 2 and change nothing.

use crate::common::basic::*;
use crate::common::{RedisServer, rlock, rlock_at, run};

// ---------------------------------------------------------------------------------------------
// Global options and usage errors
// ---------------------------------------------------------------------------------------------

#[test]
fn rlock_url_from_the_environment() {
    let server = RedisServer::start();
    // Short TTL and unique name: should the variable be ignored, this lands on the default
    // server, and must not linger there.
    let name = format!("env-url-{}", std::process::id());
    let out = run(rlock()
        .env("RLOCK_URL", server.url())
        .args(["acquire", "-k", &name, "--ttl", "5s"]));
    let token = token_of(&out);
    assert_eq!(server.get(&lock_key(&name)), Some(token.clone()));
    let out = run(rlock()
        .env("RLOCK_URL", server.url())
        .args(["release", "-k", &name, "--token", &token]));
    assert_ok(&out);
    assert!(!server.exists(&lock_key(&name)));
}

#[test]
fn global_options_after_the_subcommand() {
    let server = RedisServer::start();
    let url = server.url();
    let token = token_of(&run(rlock().args(["acquire", "-u", &url, "-k", "x"])));
    assert_eq!(server.get(&lock_key("x")), Some(token.clone()));
    let out = run(rlock().args(["inspect", "-k", "x", "--url", &url, "-q"]));
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.is_empty(), "{out}");
    let out = run(rlock().args(["release", "-k", "x", "--token", &token, "--url", &url]));
    assert_ok(&out);
    assert!(!server.exists(&lock_key("x")));
}

#[test]
fn prefix_option_and_environment_change_the_key() {
    let server = RedisServer::start();
    let token = acquire(&server, "jobs", &["--prefix", "app:"]);
    assert_eq!(server.get("app:jobs"), Some(token.clone()));
    assert_eq!(server.hgetall("{app:jobs}:state")["token"], token);
    assert!(!server.exists(&lock_key("jobs")));
    assert!(!server.exists(&state_key("jobs")));

    let token2 = token_of(&run(rlock_at(&server)
        .env("RLOCK_PREFIX", "env:")
        .args(["acquire", "-k", "jobs"])));
    assert_eq!(server.get("env:jobs"), Some(token2.clone()));
    assert!(!server.exists(&lock_key("jobs")));

    let out = run(rlock_at(&server)
        .env("RLOCK_PREFIX", "env:")
        .args(["inspect", "-q", "-k", "jobs"]));
    assert_eq!(out.code, 0, "{out}");
    let out = run(rlock_at(&server).args(["inspect", "-q", "-k", "jobs"]));
    assert_eq!(out.code, 1, "nothing under the default prefix:\n{out}");

    assert_ok(&run(rlock_at(&server).args([
        "--prefix", "app:", "release", "-k", "jobs", "--token", &token,
    ])));
    assert!(!server.exists("app:jobs"));
    assert_eq!(server.get("env:jobs"), Some(token2));
}

#[test]
fn bad_usage_exits_2_and_changes_nothing() {
    let server = RedisServer::start();
    let cases: &[(&[&str], &str)] = &[
        (&["acquire", "-k", "jobs", "--ttl", "30x"], "unit"),
        (&["acquire", "-k", "jobs", "-w", "1.2.3"], "1.2.3"),
        (&["--op-timeout", "2h", "acquire", "-k", "jobs"], "too long"),
        (&["acquire", "-k", "jobs", "--ttl", "0s"], "0s"),
        (&["acquire", "-k", "jobs", "--ttl", "0"], "too short"),
        (&["acquire", "-k", "jobs", "--ttl", "soon"], "soon"),
        (
            &["renew", "-k", "jobs", "--token", "t", "--ttl", "-30"],
            "negative",
        ),
        (&["acquire", "-k", ""], "empty"),
        (&["release", "-k", "", "--token", "t"], "empty"),
        (&["inspect", "-k", ""], "empty"),
        (&["acquire"], "--key"),
        (&["release", "--token", "t"], "--key"),
        (&["acquire", "-k", "jobs", "--bogus"], "--bogus"),
        (&["acquire", "-k", "jobs", "-n", "-w", "1s"], "--wait"),
        (&["frobnicate"], "frobnicate"),
    ];
    for (args, needle) in cases {
        let out = run(rlock_at(&server).args(*args));
        assert_usage(&out, needle);
        let dbsize: i64 = q(&server, &["DBSIZE"]);
        assert_eq!(dbsize, 0, "{args:?} wrote to Redis");
    }
}

/// A duration without a unit is seconds, as `flock -w 10` and `timeout 30` read it.
#[test]
fn a_plain_number_is_seconds() {
    let server = RedisServer::start();
    let token = acquire(&server, "jobs", &["--ttl", "30"]);
    let pttl: i64 = q(&server, &["PTTL", &lock_key("jobs")]);
    assert!(
        (29_000..=30_000).contains(&pttl),
        "--ttl 30 gave PTTL {pttl}"
    );

    // Four seconds rather than two: on a loaded machine a first reply can take two seconds,
    // and a wait that never heard Redis ends 69, not 75.
    let started = std::time::Instant::now();
    let out = run(rlock_at(&server).args(["acquire", "-k", "jobs", "-w", "4"]));
    let waited = started.elapsed();
    assert_eq!(out.code, 75, "{out}");
    assert!(
        waited >= std::time::Duration::from_secs(4) && waited < std::time::Duration::from_secs(15),
        "-w 4 gave up after {waited:?}"
    );

    let out =
        run(rlock_at(&server).args(["renew", "-k", "jobs", "--token", &token, "--ttl", "90.5"]));
    assert_ok(&out);
    let pttl: i64 = q(&server, &["PTTL", &lock_key("jobs")]);
    assert!(
        (89_500..=90_500).contains(&pttl),
        "--ttl 90.5 gave PTTL {pttl}"
    );
}
