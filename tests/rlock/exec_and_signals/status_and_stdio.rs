//! The child's exit status passes through (126/127 for cannot-run/not-found, 128+N for a
//! signal), and the child gets its environment (`RLOCK_*`) and rlock's stdio.

use super::*;

// ---------------------------------------------------------------------------------------------
// 1. Status passthrough
// ---------------------------------------------------------------------------------------------

#[test]
fn exit_status_of_the_child_is_passed_through_and_the_lock_released() {
    let server = RedisServer::start();
    let dir = tempdir();
    for (script, want) in [
        ("exit 0", 0),
        ("exit 3", 3),
        ("exit 42", 42),
        ("kill -KILL $$", 137),
        ("kill -TERM $$", 143),
    ] {
        let out = run(&mut exec_sh(&server, dir.path(), &[], script));
        assert_eq!(out.code, want, "sh -c '{script}'\n{out}");
        assert!(
            !server.exists(LOCK),
            "lock not released after sh -c '{script}'"
        );
    }

    // 126: a file that is there but not executable.
    let script = dir.path().join("not-executable.sh");
    fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o644)).unwrap();
    let out = run(rlock_at(&server)
        .args(["exec", "-k", "k", "--"])
        .arg(&script));
    assert_eq!(out.code, 126, "{out}");
    assert!(
        out.stderr.starts_with("rlock: ") && out.stderr.trim_end().lines().count() == 1,
        "want one rlock: line on stderr\n{out}"
    );
    assert!(!server.exists(LOCK), "lock not released after 126");

    // 127: no such command.
    let missing = "rlock-test-no-such-command";
    let out = run(rlock_at(&server).args(["exec", "-k", "k", "--", missing]));
    assert_eq!(out.code, 127, "{out}");
    assert!(
        out.stderr.starts_with("rlock: ") && out.stderr.contains(missing),
        "want one rlock: line naming the command\n{out}"
    );
    assert!(!server.exists(LOCK), "lock not released after 127");

    // 2: no command at all.
    for args in [&["exec", "-k", "k"][..], &["exec", "-k", "k", "--"]] {
        let out = run(rlock_at(&server).args(args));
        assert_eq!(out.code, 2, "{args:?}\n{out}");
        assert!(!server.exists(LOCK), "{args:?} left a lock");
    }
}

// ---------------------------------------------------------------------------------------------
// 2. The child's environment and stdio
// ---------------------------------------------------------------------------------------------

#[test]
fn child_gets_key_token_and_fence_and_the_token_is_the_one_in_redis() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let script = r#"echo $$ > "$D/pid"
printf '%s\n%s\n%s\n' "$RLOCK_KEY" "$RLOCK_TOKEN" "$RLOCK_FENCE" > "$D/env.tmp"
mv "$D/env.tmp" "$D/env"
while [ ! -e "$D/go" ]; do sleep 0.02; done"#;

    let mut fences = Vec::new();
    for round in 0..2 {
        let _ = fs::remove_file(d.join("env"));
        let _ = fs::remove_file(d.join("go"));
        let mut rl = start_exec(&server, d, &[], script);
        let env = rl.file(d.join("env"), SOON);
        let lines: Vec<&str> = env.lines().collect();
        assert_eq!(lines.len(), 3, "child env: {env:?}");
        assert_eq!(lines[0], "k", "RLOCK_KEY is the lock's name");
        assert!(!lines[1].is_empty(), "RLOCK_TOKEN is empty");
        assert_eq!(
            server.get(LOCK).as_deref(),
            Some(lines[1]),
            "round {round}: RLOCK_TOKEN is not the value of {LOCK} in Redis"
        );
        let fence: i64 = lines[2]
            .parse()
            .unwrap_or_else(|e| panic!("RLOCK_FENCE {:?} is not an integer: {e}", lines[2]));
        fences.push((fence, lines[1].to_string()));
        touch(d.join("go"));
        let (out, _) = rl.wait(FINISH);
        assert_eq!(out.code, 0, "{out}");
        assert!(!server.exists(LOCK), "lock not released");
    }
    assert!(
        fences[1].0 > fences[0].0,
        "fence did not increase: {fences:?}"
    );
    assert_ne!(fences[0].1, fences[1].1, "two grants, one token");
}

#[test]
fn stdin_stdout_and_stderr_are_the_childs() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    // The child's fds 0-2 are rlock's own (the same pipes, not relayed copies). They are read
    // from `cat`, which the child runs with its own fds while it waits for stdin.
    let script = r#"echo $$ > "$D/pid"; cat; echo child-stderr >&2"#;
    let mut rl = Running::spawn(&mut exec_sh(&server, d, &[], script), Stdio::piped())
        .kill_group_from(d.join("pid"));
    let child = wait_for_pid(d.join("pid"));
    let mut cat = 0;
    rl.wait_for("the child to run cat", SOON, || {
        let children = read(format!("/proc/{child}/task/{child}/children"));
        cat = children.trim().parse().unwrap_or(0);
        cat > 0 && read(format!("/proc/{cat}/comm")).trim() == "cat"
    });
    let fds = |pid: u32| -> Vec<String> {
        (0..3)
            .map(|n| match fs::read_link(format!("/proc/{pid}/fd/{n}")) {
                Ok(target) => target.display().to_string(),
                Err(e) => panic!("fd {n} of pid {pid}: {e}"),
            })
            .collect()
    };
    assert_eq!(
        fds(cat),
        fds(rl.child.id()),
        "the child's stdin, stdout, stderr are not rlock's"
    );

    // More than a pipe holds, so it must stream through while both run.
    let data: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
    let mut stdin = rl.child.stdin.take().expect("piped stdin");
    let input = data.clone();
    let writer = thread::spawn(move || {
        stdin.write_all(input.as_bytes()).expect("write to stdin");
        // Dropped here: EOF for cat.
    });
    let (out, _) = rl.wait(FINISH);
    writer.join().unwrap();
    assert_eq!(out.code, 0, "stderr: {}", out.stderr);
    assert!(
        out.stdout == data,
        "stdout is not what went into stdin ({} bytes in, {} out)",
        data.len(),
        out.stdout.len()
    );
    assert_eq!(out.stderr, "child-stderr\n");
    assert!(!server.exists(LOCK), "lock not released");
}

#[test]
fn the_child_starts_with_no_blocked_signals_sigpipe_at_default_and_rlocks_environment() {
    let server = RedisServer::start();
    // rlock blocks the signals it reads from its signalfd, and Rust ignores SIGPIPE: the
    // command must start with neither (a blocked SIGTERM would make it unkillable, an
    // ignored SIGPIPE would keep `yes | head` running).
    let out = run(rlock_at(&server)
        .env("RLOCK_TEST_PASSED_ON", "yes, with spaces")
        .args([
            "exec",
            "-k",
            "k",
            "--",
            "cat",
            "/proc/self/status",
            "/proc/self/environ",
        ]));
    assert_eq!(out.code, 0, "{out}");
    let field = |name: &str| -> u64 {
        let line = out
            .stdout
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in /proc/self/status\n{out}"));
        u64::from_str_radix(line[name.len()..].trim(), 16).unwrap()
    };
    assert_eq!(
        field("SigBlk:"),
        0,
        "the command starts with signals blocked"
    );
    let sigpipe = 1u64 << (nix::sys::signal::Signal::SIGPIPE as u32 - 1);
    assert_eq!(
        field("SigIgn:") & sigpipe,
        0,
        "the command starts with SIGPIPE ignored"
    );
    let environ: Vec<&str> = out.stdout.split('\0').collect();
    assert!(
        environ
            .iter()
            .any(|v| v.ends_with("RLOCK_TEST_PASSED_ON=yes, with spaces")),
        "rlock's environment is not passed on\n{out}"
    );
    assert!(environ.contains(&"RLOCK_KEY=k"), "{out}");
}

#[test]
fn a_parent_that_ignores_sigchld_does_not_lose_the_childs_status() {
    let server = RedisServer::start();
    // An ignored SIGCHLD is inherited through exec, and makes the kernel reap children
    // unasked: rlock must still see its child end, and with what status.
    let mut cmd = rlock_at(&server);
    cmd.args(["exec", "-k", "k", "--", "sh", "-c", "exit 3"]);
    // SAFETY: only sets a signal disposition between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            signal::signal(Signal::SIGCHLD, SigHandler::SigIgn)
                .map(drop)
                .map_err(std::io::Error::from)
        });
    }
    let out = run(&mut cmd);
    assert_eq!(out.code, 3, "{out}");
    assert!(!server.exists(LOCK), "lock not released");
}

/// A standard descriptor closed when rlock starts is /dev/null for rlock and its command, as
/// for any Rust program: otherwise rlock's first socket would take its number, an `acquire`
/// would print its token into the Redis connection, and the command would start without it.
/// (An `acquire` whose stdout was closed has nowhere to print its token: it gives the lock back.)
#[test]
fn a_closed_standard_descriptor_is_dev_null_for_rlock_and_its_command() {
    let server = RedisServer::start();
    let out = run(crate::common::basic::sh(
        r#"exec "$RL" --url "$URL" exec -k closed -- sh -c 'echo "$(readlink /proc/$$/fd/1)" >&2' >&-"#,
    )
    .env("URL", server.url()));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        out.stderr.trim(),
        "/dev/null",
        "the command's stdout\n{out}"
    );

    let out = run(
        crate::common::basic::sh(r#"exec "$RL" --url "$URL" acquire -k closed <&- >&-"#)
            .env("URL", server.url()),
    );
    // The token went nowhere: the lock is given back, and rlock says so (70), as for a stdout
    // on a full disk.
    assert_eq!(out.code, 70, "{out}");
    assert!(out.stderr.contains("stdout is closed"), "{out}");
    assert!(
        server
            .get(&crate::common::basic::lock_key("closed"))
            .is_none(),
        "acquire gave the lock back"
    );
}
