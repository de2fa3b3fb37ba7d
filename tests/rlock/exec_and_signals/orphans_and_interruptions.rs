//! Nested locks of other keys, orphans, interrupted round trips and lost locks: cases that once
//! went wrong.

use super::*;

// ---------------------------------------------------------------------------------------------
// 16. Regressions: nested locks of other keys, orphans, interrupted round trips, lost locks
//     found at the end, SIGINT, nohup, short shell leases
// ---------------------------------------------------------------------------------------------

#[test]
fn a_shell_lock_of_another_key_inside_exec_is_renewed_and_released_by_its_holder() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    // Inside `rlock exec -k k`, the usual acquire --export … exec … release of another key `b`:
    // that lock is the script's own, not the enclosing exec's. The nested exec must renew it
    // (2 s lock, 3 s command), and the script's release must release it. The second acquire and
    // release check the release on its own, on a lock that cannot have expired.
    let script = r#"lock=$("$RL" --url "$URL" acquire --export -k b --ttl 2s) || exit 9; eval "$lock"
"$RL" --url "$URL" exec -k b -- sh -c 'sleep 3; "$RL" --url "$URL" inspect -q -k b'
echo "exec=$?" >> "$D/steps"
"$RL" --url "$URL" release -k b; echo "release=$?" >> "$D/steps"
"$RL" --url "$URL" inspect -q -k b; echo "held=$?" >> "$D/steps"
lock=$("$RL" --url "$URL" acquire --export -k b --ttl 60s) || exit 9; eval "$lock"
"$RL" --url "$URL" release -k b; echo "release=$?" >> "$D/steps"
"$RL" --url "$URL" inspect -q -k b; echo "held=$?" >> "$D/steps"
exit 0"#;
    let out = run(&mut exec_sh(&server, d, &["--ttl", "10s"], script));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        read(d.join("steps")).lines().collect::<Vec<_>>(),
        [
            "exec=0", // the nested exec kept b alive for 3 s
            "release=0",
            "held=1", // and the release gave it back
            "release=0",
            "held=1",
        ],
        "{out}"
    );
    assert!(
        !out.stderr.contains("enclosing"),
        "b is not the enclosing exec's lock\n{out}"
    );
    assert!(!server.exists("rlock:b"), "b left behind");
    assert!(!server.exists(LOCK), "the outer lock was not released");
}

/// The pids of the children of `pid`'s main thread.
fn children_of(pid: i32) -> Vec<i32> {
    read(format!("/proc/{pid}/task/{pid}/children"))
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

#[test]
fn sigkill_of_rlock_also_kills_what_its_child_started() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let script = r#"sleep 300 & echo $! > "$D/grandchild"
echo $$ > "$D/pid"; : > "$D/ready"; wait"#;
    let mut rl = start_exec(&server, d, &[], script);
    rl.wait_for("the child to start", SOON, || d.join("ready").exists());
    let grandchild = wait_for_pid(d.join("grandchild"));
    let child = wait_for_pid(d.join("pid"));
    assert!(pid_alive(grandchild), "the grandchild is not running");
    // rlock sets up its watch over the group right after the spawn, in a second child; give it
    // a moment to exist, but do not insist (another way to do it would be as good).
    let rlock = rl.pid();
    let armed = Instant::now() + Duration::from_secs(2);
    while children_of(rlock).len() < 2 && Instant::now() < armed {
        thread::sleep(Duration::from_millis(10));
    }

    signal::kill(Pid::from_raw(rlock), Signal::SIGKILL).expect("kill -9 rlock");
    // Both get their SIGKILL at once (the guardian stops everything the command started); each
    // dies when the kernel next runs it, in no set order.
    wait_until(
        "the child and its background sleep to die with rlock",
        Duration::from_secs(1),
        || !pid_alive(grandchild) && !pid_alive(child),
    );
    let (out, _) = rl.wait(SOON);
    assert_eq!(out.code, -9, "{out}");
}

/// True when a connection to 127.0.0.1:`port` holds bytes the server has not read (the
/// receive queue of the server's end, in /proc/net/tcp): a request sent to a frozen server.
fn request_waiting_at(port: u16) -> bool {
    let local = format!(":{port:04X}");
    read("/proc/net/tcp").lines().skip(1).any(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        f.len() > 4
            && f[1].ends_with(&local)
            && f[3] == "01" // ESTABLISHED
            && f[4]
                .split_once(':')
                .is_some_and(|(_, rx)| u64::from_str_radix(rx, 16).is_ok_and(|n| n > 0))
    })
}

/// `rlock exec -n` sends its acquire to a frozen server and gets SIGTERM while it waits for the
/// reply. The signal must not cut the request short (that failed it as 69, and left the grant
/// in Redis): rlock waits for the reply up to --op-timeout, gives the grant back (the request is
/// queued behind the acquire on the frozen server), and reports the signal. Once the server
/// thaws it runs both: the lock is granted (a fence above the first grant's) and given back.
fn sigterm_during_an_acquire_on_a_frozen_server(server: &RedisServer) {
    let fence = |server: &RedisServer| -> i64 {
        server
            .hgetall("{rlock:k}:state")
            .get("fence")
            .and_then(|f| f.parse().ok())
            .unwrap_or(0)
    };
    let first = fence(server);
    server.freeze();
    let mut rl = Running::spawn(
        rlock_at(server).args(["--op-timeout", "1s", "exec", "-k", "k", "-n", "--", "true"]),
        Stdio::null(),
    );
    rl.wait_for("rlock's acquire to reach the frozen server", SOON, || {
        request_waiting_at(server.port())
    });
    let signalled = Instant::now();
    signal::kill(Pid::from_raw(rl.pid()), Signal::SIGTERM).expect("kill -TERM rlock");
    let (out, exited) = rl.wait(FINISH);
    assert_eq!(out.code, 143, "{out}");
    // At most --op-timeout for the reply, and another for the give-back.
    assert!(
        exited - signalled < Duration::from_millis(3500),
        "rlock took {:?} after SIGTERM to exit",
        exited - signalled
    );
    server.thaw();
    wait_until(
        "the thawed server to run the acquire (a new fence)",
        SOON,
        || fence(server) > first,
    );
    wait_until("the raced grant to be given back", SOON, || {
        !server.exists(LOCK)
    });
}

#[test]
fn sigterm_during_a_redis_round_trip_exits_143_and_the_grant_is_given_back() {
    let server = RedisServer::start();
    // The first grant, and the scripts of the acquire and of the give-back in the
    // server's cache, so that both run as sent once it thaws (on a cold cache the acquire
    // would answer NOSCRIPT and grant nothing).
    let out = run(rlock_at(&server).args(["exec", "-k", "k", "--", "true"]));
    assert_eq!(out.code, 0, "{out}");
    for script in [&rlock::lock::ACQUIRE, &rlock::lock::LEAVE] {
        server.cmd(&["SCRIPT", "LOAD", script.source]);
    }
    sigterm_during_an_acquire_on_a_frozen_server(&server);
}

#[test]
fn sigterm_during_a_round_trip_gives_the_grant_back_on_a_server_that_never_ran_leave() {
    let server = RedisServer::start();
    // A server rlock has used in the ordinary way: one exec, which caches acquire, renew and
    // release, but not the give-back script.
    let out = run(rlock_at(&server).args(["exec", "-k", "k", "--", "true"]));
    assert_eq!(out.code, 0, "{out}");
    sigterm_during_an_acquire_on_a_frozen_server(&server);
}

#[test]
fn lock_broken_between_renewals_is_found_at_the_end_and_exits_76() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let script = r#"echo $$ > "$D/pid"; echo "$RLOCK_TOKEN" > "$D/token"; : > "$D/ready"
while [ ! -e "$D/go" ]; do sleep 0.02; done
exit 0"#;
    // Renewals every 20 s: the command ends long before rlock would renew.
    let mut rl = start_exec(&server, d, &["--ttl", "60s"], script);
    let token = rl.ready(d);
    assert_eq!(server.get(LOCK), Some(token));
    let out = run(rlock_at(&server).args(["release", "-k", "k", "--force"]));
    assert_eq!(out.code, 0, "{out}");
    assert!(!server.exists(LOCK), "--force did not break the lock");
    touch(d.join("go"));
    let (out, _) = rl.wait(FINISH);
    assert_eq!(
        out.code, 76,
        "the command ran unprotected: not a success\n{out}"
    );
    assert!(
        out.stderr.contains("lost lock 'k'") && out.stderr.trim_end().lines().count() == 1,
        "want one line saying the lock was lost\n{out}"
    );
    assert!(!server.exists(LOCK), "a lost lock was taken again");
}

#[test]
fn child_killed_by_sigint_makes_rlock_die_of_sigint() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let mut cmd = exec_sh(&server, d, &[], "kill -INT $$");
    // SIGINT must not be ignored (as in a background job of a non-interactive shell), or the
    // child could not die of it.
    // SAFETY: only async-signal-safe calls (sigaction) between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            signal::signal(Signal::SIGINT, SigHandler::SigDfl)?;
            Ok(())
        });
    }
    let out = run(&mut cmd);
    assert_eq!(
        out.code, -2,
        "rlock must die of SIGINT, as its child did\n{out}"
    );
    assert!(!server.exists(LOCK), "lock not released");

    let out = run(&mut exec_sh(&server, d, &[], "exit 130"));
    assert_eq!(out.code, 130, "a child's exit 130 is only a status\n{out}");
    assert!(!server.exists(LOCK), "lock not released");
}

#[test]
fn sighup_ignored_at_start_stays_ignored_by_rlock_and_its_command() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let script = r#"echo $$ > "$D/pid"; echo "$RLOCK_TOKEN" > "$D/token"; : > "$D/ready"
while [ ! -e "$D/stop" ]; do sleep 0.02; done"#;
    let mut cmd = exec_sh(&server, d, &[], script);
    // As `nohup rlock exec …` starts it.
    // SAFETY: only async-signal-safe calls (sigaction) between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            signal::signal(Signal::SIGHUP, SigHandler::SigIgn)?;
            Ok(())
        });
    }
    let mut rl = Running::spawn(&mut cmd, Stdio::null()).kill_group_from(d.join("pid"));
    rl.ready(d);
    let child = wait_for_pid(d.join("pid"));

    signal::kill(Pid::from_raw(rl.pid()), Signal::SIGHUP).expect("kill -HUP rlock");
    // Nothing is to happen: a forwarded SIGHUP would end the child within milliseconds.
    let watch_until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < watch_until {
        assert!(pid_alive(child), "the child died of the ignored SIGHUP");
        assert!(!rl.exited(), "rlock exited after the ignored SIGHUP");
        thread::sleep(Duration::from_millis(10));
    }
    touch(d.join("stop"));
    let (out, _) = rl.wait(FINISH);
    assert_eq!(out.code, 0, "{out}");
    assert!(!server.exists(LOCK), "lock not released");
}

#[test]
fn exec_renews_a_shell_lock_with_little_lease_left_before_starting_the_command() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let script = r#"lock=$("$RL" --url "$URL" acquire --export -k k --ttl 2s) || exit 9; eval "$lock"
echo $$ > "$D/pid"; : > "$D/ready"
while [ ! -e "$D/go" ]; do sleep 0.01; done
"$RL" --url "$URL" exec -k k -- sh -c 'sleep 1; "$RL" --url "$URL" inspect -q -k k'
echo "exec=$?" > "$D/exec"
"$RL" --url "$URL" release -k k"#;
    let mut shell = Running::spawn(&mut sh(&server, d, script), Stdio::null());
    shell.wait_for("the shell to take the lock", SOON, || {
        d.join("ready").exists()
    });
    shell.wait_for("the shell's lock to have under 400 ms left", SOON, || {
        let pttl = server.pttl(LOCK);
        pttl > 0 && pttl < 400
    });
    touch(d.join("go"));
    let (out, _) = shell.wait(FINISH);
    assert_eq!(
        read(d.join("exec")).trim(),
        "exec=0",
        "exec must renew the inherited lock before the command starts\n{out}"
    );
    assert_eq!(out.code, 0, "{out}");
    assert!(!server.exists(LOCK), "the shell's release released it");
}
