//! A holder on this host whose process is gone is stale, and the hint says how to break it.

use super::*;

#[test]
fn a_holder_whose_process_is_gone_is_stale_and_a_live_one_is_not() {
    let server = RedisServer::start();
    let dir = tempdir();
    let gone = acquire_from_a_shell_that_exits(&server, "left", "--ttl 1h");
    let _live = live_holder(&server, dir.path(), "live", "alive", &["--ttl", "30s"]);

    let left = inspect_json(&server, "left");
    assert_eq!(left["holder"]["pid"], gone, "{left}");
    assert_eq!(left["stale"], true, "{left}");
    assert_eq!(left["holder"]["stale"], true, "{left}");
    assert_eq!(left["holders"][0]["stale"], true, "{left}");
    let alive = inspect_json(&server, "alive");
    assert_eq!(alive["stale"], false, "{alive}");
    assert_eq!(alive["holders"][0]["stale"], false, "{alive}");

    let out = run(rlock_at(&server).arg("inspect"));
    assert_eq!(out.code, 0, "{out}");
    // Stdout is the table alone: a header and a row per lock (`inspect | tail -n +2` counts
    // locks); the hint is on stderr.
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0].starts_with("KEY "), "{out}");
    assert!(!out.stdout.contains("stale:"), "{out}");
    let row = |key: &str| {
        out.stdout
            .lines()
            .find(|l| l.starts_with(&format!("{key} ")))
            .unwrap_or_else(|| panic!("no row for {key}: {out}"))
            .to_string()
    };
    assert!(
        row("left").contains(&format!("pid {gone} (stale)")),
        "{out}"
    );
    assert!(!row("alive").contains("stale"), "{out}");
    let token = left["token"].as_str().expect("token");
    let hint = format!(
        "rlock: stale: pid {gone} is gone on this host; break it with: rlock -u {} release -k left --force (or --token {token} instead of --force, to break only this holder's lease)",
        server.url()
    );
    assert_eq!(
        out.stderr.lines().collect::<Vec<_>>(),
        [hint.as_str()],
        "{out}"
    );

    // The same record on another host: nobody here can know, so it is never stale.
    let state = "{rlock:left}:state";
    server.cmd(&["HSET", state, "host", "some-other-host"]);
    let left = inspect_json(&server, "left");
    assert_eq!(left["stale"], false, "{left}");
    let out = run(rlock_at(&server).args(["inspect", "-k", "left"]));
    assert!(!out.stdout.contains("stale"), "{out}");
    assert_eq!(out.stderr, "", "{out}");

    // The hint's command, pasted into a shell, breaks the stale lock.
    let out = run(&mut paste(&server, &hint));
    assert_eq!(out.code, 0, "{out}");
    assert!(
        !server.exists("rlock:left"),
        "the stale lock is still there"
    );
}

/// Runs the command a hint of inspect's gives (what follows "with: " up to " (or"), as a user
/// pasting it into a shell would: `rlock` on PATH, no RLOCK_* setting, not even the server's
/// URL, so that the hint must name everything it needs.
fn paste(server: &RedisServer, hint: &str) -> Command {
    let line = hint.split("with: ").nth(1).expect("a command in the hint");
    let line = line.split(" (or").next().unwrap();
    let mut cmd = shell(server, line);
    let bin = Path::new(env!("CARGO_BIN_EXE_rlock")).parent().unwrap();
    let path = std::env::var("PATH").unwrap_or_default();
    cmd.env("PATH", format!("{}:{path}", bin.display()))
        .env_remove("URL");
    cmd
}

/// The line on inspect's stderr that says how to break a stale holder's lock.
fn stale_hint(out: &crate::common::Output) -> &str {
    out.stderr
        .lines()
        .find(|l| l.starts_with("rlock: stale:"))
        .unwrap_or_else(|| panic!("no hint: {out}"))
}

#[test]
fn the_stale_hint_names_the_server_and_prefix_it_was_read_from() {
    // A stale lock under another prefix, and a live lock of the same name under the default
    // prefix on the same server: the hint breaks the stale one only.
    let server = RedisServer::start();
    let dir = tempdir();
    let gone = acquire_from_a_shell_that_exits(&server, "jobs", "--ttl 1h --prefix 'team A:'");
    let live = live_holder(&server, dir.path(), "live", "jobs", &[]);
    let out = run(rlock_at(&server).args(["--prefix", "team A:", "inspect", "-k", "jobs"]));
    assert_eq!(out.code, 0, "{out}");
    let hint = stale_hint(&out);
    assert!(
        hint.contains(&format!("pid {gone} ")) && hint.contains("--prefix 'team A:'"),
        "{out}"
    );
    let out = run(&mut paste(&server, hint));
    assert_eq!(out.code, 0, "{out}");
    assert!(
        !server.exists("team A:jobs"),
        "the stale lock is still there"
    );
    let json = inspect_json(&server, "jobs");
    assert_eq!(
        json["holder"]["pid"],
        live.pid() as i64,
        "the live lock was broken: {json}"
    );

    // Options from the environment are left to the environment: a URL with a password in
    // RLOCK_URL is not printed as '***' for the paste to fail on.
    acquire_from_a_shell_that_exits(&server, "nightly", "--ttl 1h --prefix 'team A:'");
    let env = [
        ("RLOCK_URL", server.url()),
        ("RLOCK_PREFIX", "team A:".to_string()),
    ];
    let out = run(rlock().envs(env.clone()).args(["inspect", "-k", "nightly"]));
    let hint = stale_hint(&out);
    assert!(
        hint.contains("with: rlock release -k nightly --force"),
        "{out}"
    );
    let out = run(paste(&server, hint).envs(env));
    assert_eq!(out.code, 0, "{out}");
    assert!(
        !server.exists("team A:nightly"),
        "the stale lock is still there"
    );
}

/// A pid that no process has: a child's, once it was reaped.
fn a_dead_pid() -> String {
    let mut child = Command::new("true").spawn().expect("spawn true");
    let pid = child.id();
    child.wait().expect("wait for true");
    pid.to_string()
}

/// A holder in another pid namespace (a container sharing the host's name) records it, and
/// `inspect` outside that namespace does not judge its pid by the processes it can see.
#[test]
fn a_holder_in_another_pid_namespace_is_never_called_stale() {
    let server = RedisServer::start();
    // `unshare --pid --fork`, as a container's runtime would (root is needed, as in CI).
    let out = run(&mut shell(
        &server,
        r#"unshare --pid --fork sh -c 'eval "$("$RL" --url "$URL" acquire --export -k boxed --ttl 1h)"; true'"#,
    ));
    assert_eq!(
        out.code, 0,
        "unshare --pid failed: this test needs util-linux's unshare and root: {out}"
    );
    let state = "{rlock:boxed}:state";
    let theirs = server.hgetall(state).remove("pidns").unwrap_or_default();
    let ours = std::fs::read_link("/proc/self/ns/pid").expect("our pid namespace");
    let ours = ours.to_string_lossy();
    assert!(theirs.starts_with("pid:["), "recorded {theirs:?}");
    assert_ne!(theirs, ours, "the holder's namespace was not recorded");

    // Its pid (1 in its namespace) taken for one that no process has here: still not stale.
    server.cmd(&["HSET", state, "pid", &a_dead_pid()]);
    let json = inspect_json(&server, "boxed");
    assert_eq!(json["stale"], false, "{json}");
    let out = run(rlock_at(&server).args(["inspect", "-k", "boxed"]));
    assert!(!out.stdout.contains("stale"), "{out}");
    assert_eq!(out.stderr, "", "{out}");

    // The same record in this namespace: stale.
    server.cmd(&["HSET", state, "pidns", &ours]);
    let json = inspect_json(&server, "boxed");
    assert_eq!(json["stale"], true, "{json}");
}

#[test]
fn a_stale_holder_of_a_semaphore_is_told_to_give_back_its_own_place() {
    let server = RedisServer::start();
    let dir = tempdir();
    let gone = acquire_from_a_shell_that_exits(&server, "slots", "--limit 2 --ttl 1h");
    let live = live_holder(&server, dir.path(), "live", "slots", &["--limit", "2"]);

    let json = inspect_json(&server, "slots");
    let holders = json["holders"].as_array().expect("holders");
    assert_eq!(holders.len(), 2, "{json}");
    let stale: Vec<&Value> = holders.iter().filter(|h| h["stale"] == true).collect();
    assert_eq!(stale.len(), 1, "{json}");
    assert_eq!(stale[0]["pid"], gone, "{json}");
    assert_eq!(json["stale"], false, "a live holder is left: {json}");
    let token = stale[0]["token"].as_str().expect("token");

    let out = run(rlock_at(&server).args(["inspect", "-k", "slots"]));
    assert_eq!(out.code, 0, "{out}");
    let hint = format!(
        "rlock: stale: pid {gone} is gone on this host; free its place in 'slots' with: rlock -u {} release -k slots --token {token}",
        server.url()
    );
    assert_eq!(
        out.stderr.lines().collect::<Vec<_>>(),
        [hint.as_str()],
        "{out}"
    );
    // A header and a row per holder, nothing else.
    assert_eq!(out.stdout.lines().count(), 3, "{out}");
    assert!(!out.stdout.contains("stale:"), "{out}");

    // Following it frees that place alone.
    let out = run(&mut paste(&server, &hint));
    assert_eq!(out.code, 0, "{out}");
    let json = inspect_json(&server, "slots");
    assert_eq!(json["holders"].as_array().map(Vec::len), Some(1), "{json}");
    assert_eq!(json["holders"][0]["pid"], live.pid() as i64, "{json}");
}

#[test]
fn every_hint_runs_as_printed_whatever_the_key() {
    let server = RedisServer::start();
    for key in ["-x", "--force", "-k", "a b'c $(false)", &"long".repeat(400)] {
        // A lock left by a shell that exited, and a place in a semaphore left the same way.
        for (limit, hint_word) in [("", "break it with"), ("--limit 2", "free its place")] {
            let script = format!(
                r#"eval "$("$RL" --url "$URL" acquire --export --key="$K" {limit} --ttl 1h)"; true"#
            );
            let out = run(shell(&server, &script).env("K", key));
            assert_eq!(out.code, 0, "{key:?}: {out}");
            let out = run(rlock_at(&server).args(["inspect", &format!("--key={key}")]));
            assert_eq!(out.code, 0, "{out}");
            let hint = stale_hint(&out);
            assert!(hint.contains(hint_word), "{hint}");
            let out = run(&mut paste(&server, hint));
            assert_eq!(
                out.code, 0,
                "{key:?}: the hint does not run:\n{hint}\n{out}"
            );
            let out = run(rlock_at(&server).args(["inspect", "--json", &format!("--key={key}")]));
            assert_eq!(out.code, 1, "{hint}: the lock is still held\n{out}");
        }
    } // A prefix that begins with '-' is named in the hint so that it runs too.
    let script =
        r#"eval "$("$RL" --url "$URL" --prefix=-team: acquire --export -k j --ttl 1h)"; true"#;
    assert_eq!(run(&mut shell(&server, script)).code, 0);
    let out = run(rlock_at(&server).args(["--prefix=-team:", "inspect", "-k", "j"]));
    let hint = stale_hint(&out);
    assert!(hint.contains("--prefix=-team:"), "{hint}");
    let out = run(&mut paste(&server, hint));
    assert_eq!(out.code, 0, "the hint does not run:\n{hint}\n{out}");
}
