//! `acquire`: one token that Redis holds with the TTL and the holder, fences that rise, the
//! `--export` and `--json` outputs; and on a held lock: busy (75, or `-E`), a bounded wait that
//! gives up leaving nothing behind, and a wait that ends when the holder releases.

use crate::common::basic::*;
use crate::common::{RedisServer, rlock_at, run, wait_until};
use std::process::Command;
use std::time::Duration;

// ---------------------------------------------------------------------------------------------
// acquire
// ---------------------------------------------------------------------------------------------

#[test]
fn acquire_prints_one_token_that_redis_holds_with_the_ttl_and_the_holder() {
    let server = RedisServer::start();
    let before = redis_now_ms(&server);
    let token = acquire(&server, "jobs", &["--ttl", "10s"]);
    let after = redis_now_ms(&server);

    assert_eq!(
        server.get(&lock_key("jobs")).as_deref(),
        Some(token.as_str())
    );
    let pttl = server.pttl(&lock_key("jobs"));
    assert!(
        (9_000..=10_000).contains(&pttl),
        "PTTL should be about --ttl 10s, is {pttl}"
    );

    let state = server.hgetall(&state_key("jobs"));
    assert_eq!(
        state.get("fence").map(|f| is_clock_fence(&server, f)),
        Some(true),
        "{state:?}"
    );
    assert_eq!(state.get("token"), Some(&token), "{state:?}");
    assert_eq!(state.get("host"), Some(&hostname()), "{state:?}");
    // The holder of a plain acquire is the process that ran rlock: this test.
    assert_eq!(
        state.get("pid"),
        Some(&std::process::id().to_string()),
        "{state:?}"
    );
    let user = state.get("user").cloned().unwrap_or_default();
    match std::env::var("USER") {
        Ok(u) if !u.is_empty() => assert_eq!(user, u, "{state:?}"),
        _ => assert!(!user.is_empty(), "{state:?}"),
    }
    assert!(
        !state.get("cmd").cloned().unwrap_or_default().is_empty(),
        "{state:?}"
    );
    assert_eq!(
        state.get("ttl").map(String::as_str),
        Some("10000"),
        "{state:?}"
    );
    let since: i64 = state["since"].parse().expect("since is ms");
    assert!(
        (before..=after).contains(&since),
        "since {since} not in [{before}, {after}]"
    );
    assert!(!state.contains_key("released"), "{state:?}");
    assert!(!server.exists(&queue_key("jobs")), "nobody waits");
}

#[test]
fn the_holders_user_is_user_then_logname_then_the_user_database() {
    let server = RedisServer::start();
    let login = String::from_utf8(
        Command::new("id")
            .arg("-un")
            .output()
            .expect("run id -un")
            .stdout,
    )
    .unwrap();
    for (user, logname, want) in [
        (Some("from-user"), Some("from-logname"), "from-user"),
        (None, Some("from-logname"), "from-logname"),
        (Some(""), None, login.trim()),
        (None, None, login.trim()),
    ] {
        let mut cmd = rlock_at(&server);
        cmd.env_remove("USER").env_remove("LOGNAME");
        if let Some(u) = user {
            cmd.env("USER", u);
        }
        if let Some(l) = logname {
            cmd.env("LOGNAME", l);
        }
        let token = assert_ok(&run(cmd.args(["acquire", "-k", "who"])));
        let state = server.hgetall(&state_key("who"));
        assert_eq!(
            state.get("user").map(String::as_str),
            Some(want),
            "USER={user:?} LOGNAME={logname:?}: {state:?}"
        );
        release(&server, "who", token.trim());
    }
}

#[test]
fn fence_strictly_increases_across_grants() {
    let server = RedisServer::start();
    let mut last = 0;
    for round in 0..4 {
        let grant = acquire_json(&server, "jobs", &[]);
        let fence = grant["fence"].as_i64().expect("fence is an integer");
        assert!(fence > last, "round {round}: fence {fence} after {last}");
        let state = server.hgetall(&state_key("jobs"));
        assert_eq!(
            state["fence"],
            fence.to_string(),
            "the printed fence is Redis's"
        );
        let token = grant["token"].as_str().expect("token").to_string();
        if round % 2 == 0 {
            release(&server, "jobs", &token);
        } else {
            // Broken and expired locks count too: the fence never goes back.
            assert_ok(&run(
                rlock_at(&server).args(["release", "-k", "jobs", "--force"])
            ));
        }
        assert_eq!(
            server.hgetall(&state_key("jobs"))["fence"],
            fence.to_string(),
            "release keeps the fence counter"
        );
        last = fence;
    }
}

#[test]
fn export_output_evals_to_exported_variables_that_match_redis() {
    let server = RedisServer::start();
    // A key that needs quoting, and would run a command if it were not quoted.
    let name = "it's a $(touch pwned) job";
    let dir = tempfile::tempdir().expect("temp dir");
    let out = run(sh(r#"
        out=$("$RL" --url "$URL" acquire --export -k "$K") || exit 9
        eval "$out" || exit 8
        echo "shell:$RLOCK_KEY|$RLOCK_TOKEN|$RLOCK_FENCE"
        sh -c 'echo "child:$RLOCK_KEY|$RLOCK_TOKEN|$RLOCK_FENCE"'
        "#)
    .current_dir(dir.path())
    .env("URL", server.url())
    .env("K", name));
    let stdout = assert_ok(&out);
    assert!(
        !dir.path().join("pwned").exists(),
        "eval ran part of the key"
    );

    let token = server.get(&lock_key(name)).expect("the lock is held");
    let fence = &server.hgetall(&state_key(name))["fence"];
    let want = format!("{name}|{token}|{fence}");
    assert_eq!(
        stdout,
        format!("shell:{want}\nchild:{want}\n"),
        "RLOCK_KEY/TOKEN/FENCE must match Redis and be exported"
    );
}

#[test]
fn json_output_has_key_token_fence_and_ttl() {
    let server = RedisServer::start();
    let grant = acquire_json(&server, "jobs", &["--ttl", "15s"]);
    assert_eq!(grant["key"], "jobs", "{grant}");
    let token = grant["token"].as_str().expect("token is a string");
    assert_eq!(server.get(&lock_key("jobs")).as_deref(), Some(token));
    assert_eq!(
        grant["fence"].as_i64().map(|f| f.to_string()),
        Some(server.hgetall(&state_key("jobs"))["fence"].clone()),
        "{grant}"
    );
    assert_eq!(grant["ttl_ms"].as_u64(), Some(15_000), "{grant}");
}

#[test]
fn export_and_json_together_is_a_usage_error() {
    let server = RedisServer::start();
    let out = run(rlock_at(&server).args(["acquire", "--export", "--json", "-k", "jobs"]));
    assert_usage(&out, "--json");
    assert!(!server.exists(&lock_key("jobs")), "nothing may be taken");
}

// ---------------------------------------------------------------------------------------------
// busy
// ---------------------------------------------------------------------------------------------

#[test]
fn no_wait_on_a_held_lock_is_busy_names_the_holder_and_leaves_the_lock() {
    let server = RedisServer::start();
    let token = acquire(&server, "jobs", &["--ttl", "60s"]);
    let granted_fence = server.hgetall(&state_key("jobs"))["fence"].clone();
    let (out, took) = run_within(
        rlock_at(&server).args(["acquire", "-k", "jobs", "-n", "--ttl", "600s"]),
        Duration::from_secs(10),
    );
    assert_fails(
        &out,
        75,
        &[
            "'jobs'",
            &hostname(),
            &format!("pid {}", std::process::id()),
        ],
    );
    assert!(
        took < Duration::from_secs(2),
        "-n must not wait: took {took:?}"
    );

    assert_eq!(
        server.get(&lock_key("jobs")),
        Some(token.clone()),
        "lock untouched"
    );
    let pttl = server.pttl(&lock_key("jobs"));
    assert!(
        (1..=60_000).contains(&pttl),
        "PTTL must not be reset, is {pttl}"
    );
    let state = server.hgetall(&state_key("jobs"));
    assert_eq!(
        state["fence"], granted_fence,
        "no grant, no new fence: {state:?}"
    );
    assert_eq!(state["token"], token);
    assert!(
        !server.exists(&queue_key("jobs")),
        "-n never joins the queue"
    );
}

#[test]
fn conflict_exit_code_replaces_75() {
    let server = RedisServer::start();
    let token = acquire(&server, "jobs", &[]);
    let out = run(rlock_at(&server).args(["acquire", "-k", "jobs", "-n", "-E", "3"]));
    assert_fails(&out, 3, &["'jobs'"]);
    // exec takes -E too, and does not run its command.
    let out = run(rlock_at(&server).args([
        "exec", "-k", "jobs", "-n", "-E", "9", "--", "sh", "-c", "echo ran",
    ]));
    assert_fails(&out, 9, &["'jobs'"]);
    assert!(!out.stdout.contains("ran"), "{out}");
    assert_eq!(server.get(&lock_key("jobs")), Some(token));
}

#[test]
fn bounded_wait_gives_up_after_the_wait_and_leaves_nothing_behind() {
    let server = RedisServer::start();
    let token = acquire(&server, "jobs", &["--ttl", "60s"]);
    let (out, took) = run_within(
        rlock_at(&server).args(["acquire", "-k", "jobs", "-w", "300ms"]),
        Duration::from_secs(10),
    );
    assert_fails(&out, 75, &["'jobs'"]);
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(2),
        "-w 300ms should give up after 300ms, took {took:?}"
    );
    assert_eq!(server.get(&lock_key("jobs")), Some(token));
    assert!(server.pttl(&lock_key("jobs")) <= 60_000);
    assert!(
        !server.exists(&queue_key("jobs")),
        "the waiter left the queue"
    );
    let state = server.hgetall(&state_key("jobs"));
    assert!(
        !state.keys().any(|f| f.starts_with("w:")),
        "the waiter's lease is gone: {state:?}"
    );
}

#[test]
fn default_acquire_blocks_until_the_holder_releases() {
    let server = RedisServer::start();
    let first = acquire_json(&server, "jobs", &["--ttl", "60s"]);
    let first_token = first["token"].as_str().expect("token").to_string();
    let first_fence = first["fence"].as_i64().expect("fence");

    let mut waiter = Bg::spawn(rlock_at(&server).args(["acquire", "-k", "jobs"]));
    wait_until("the waiter to queue up", Duration::from_secs(10), || {
        server.exists(&queue_key("jobs"))
    });
    assert!(
        waiter.is_running(),
        "the waiter must block while the lock is held"
    );
    assert_eq!(server.get(&lock_key("jobs")), Some(first_token.clone()));

    release(&server, "jobs", &first_token);
    let (out, _) = waiter.finish(Duration::from_secs(10));
    let token = token_of(&out);
    assert_ne!(token, first_token);
    assert_eq!(server.get(&lock_key("jobs")), Some(token.clone()));
    let state = server.hgetall(&state_key("jobs"));
    assert_eq!(state["token"], token);
    let fence: i64 = state["fence"].parse().expect("fence");
    assert!(
        fence > first_fence,
        "the next grant's fence {fence} after {first_fence}: {state:?}"
    );
    assert!(
        !server.exists(&queue_key("jobs")),
        "the queue is empty again"
    );
}

#[test]
fn acquire_that_cannot_print_its_token_releases_the_lock() {
    let server = RedisServer::start();
    for format in ["", "--export", "--json"] {
        let out = run(sh(&format!(
            r#""$RL" --url "$URL" acquire -k jobs {format} > /dev/full"#
        ))
        .env("URL", server.url()));
        assert!(
            !server.exists(&lock_key("jobs")),
            "acquire {format}: a lock whose token nobody got is left held\n{out}"
        );
        assert_fails(&out, 70, &["'jobs'", "released"]);
    }
}

/// A user the user database does not know (a container's arbitrary uid, say), with neither
/// USER nor LOGNAME set, is recorded by number; rlock looks names up in /etc/passwd only
/// (`src/names.rs`), so this is the same on every host.
#[test]
fn a_user_without_a_name_is_recorded_by_uid() {
    let server = RedisServer::start();
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=54321", "--regid=54321", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_rlock"))
        .args(["--url", &server.url(), "acquire", "-k", "nameless"])
        .env_remove("USER")
        .env_remove("LOGNAME");
    for (name, _) in std::env::vars_os() {
        if name.as_encoded_bytes().starts_with(b"RLOCK_") {
            cmd.env_remove(name);
        }
    }
    let out = run(&mut cmd);
    assert_eq!(
        out.code, 0,
        "setpriv (util-linux) as root must run rlock as uid 54321: {out}"
    );
    let state = server.hgetall(&state_key("nameless"));
    assert_eq!(
        state.get("user").map(String::as_str),
        Some("54321"),
        "{state:?}"
    );
}
