//! Signals: what rlock receives reaches the child's group once (also Ctrl-C at a real terminal),
//! rlock killed outright takes the child with it, and `--lost-signal` picks what a lost lock sends.

use super::*;

// ---------------------------------------------------------------------------------------------
// 8. Signals sent to rlock
// ---------------------------------------------------------------------------------------------

#[test]
fn signals_sent_to_rlock_reach_the_child_once_and_rlock_keeps_the_lock() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let mut rl = start_exec(&server, d, &["--ttl", "1s"], SIGNAL_LOGGER);
    let token = rl.ready(d);
    let child = wait_for_pid(d.join("pid"));
    let mut watch = LockWatch::new(&server, LOCK, &token, Duration::from_secs(1));

    let rlock_pid = Pid::from_raw(rl.pid());
    let mut sent = Vec::new();
    // Every signal rlock forwards (TERM, INT, HUP, QUIT, USR1, USR2), sent to rlock alone.
    for sig in [
        Signal::SIGTERM,
        Signal::SIGUSR1,
        Signal::SIGHUP,
        Signal::SIGUSR2,
        Signal::SIGINT,
        Signal::SIGQUIT,
    ] {
        signal::kill(rlock_pid, sig).expect("signal rlock");
        sent.push(sig.as_str().trim_start_matches("SIG").to_string());
        rl.wait_for(&format!("the child to log {sig}"), SOON, || {
            log_lines(d).len() >= sent.len()
        });
        assert!(pid_alive(child), "the child died of {sig}, which it traps");
        assert!(!rl.exited(), "rlock exited after {sig}");
        // rlock keeps renewing: the 1 s lock outlives more than a TTL's worth of renewals.
        watch.wait_renewals(4, Duration::from_secs(5));
    }
    touch(d.join("stop"));
    let (out, _) = rl.wait(FINISH);
    assert_eq!(
        out.code, 7,
        "rlock must exit with the child's status\n{out}"
    );
    assert_eq!(log_lines(d), sent, "each signal exactly once, in order");
    assert!(!server.exists(LOCK), "lock not released");
}

#[test]
fn sigint_to_rlocks_whole_process_group_reaches_the_child_once() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let mut rl = start_exec(&server, d, &[], SIGNAL_LOGGER);
    rl.ready(d);
    let child = wait_for_pid(d.join("pid"));
    assert_ne!(
        nix::unistd::getpgid(Some(Pid::from_raw(child))).unwrap(),
        Pid::from_raw(rl.pid()),
        "the child must not be in rlock's process group"
    );

    signal::killpg(Pid::from_raw(rl.pid()), Signal::SIGINT).expect("killpg rlock's group");
    rl.wait_for("the child to log INT", SOON, || !log_lines(d).is_empty());
    touch(d.join("stop"));
    let (out, _) = rl.wait(FINISH);
    assert_eq!(out.code, 7, "{out}");
    assert_eq!(log_lines(d), ["INT"], "SIGINT exactly once");
    assert!(!server.exists(LOCK), "lock not released");
}

// ---------------------------------------------------------------------------------------------
// 9. Ctrl-C at a real terminal
// ---------------------------------------------------------------------------------------------

#[test]
fn ctrl_c_at_a_terminal_reaches_the_child_once_and_the_terminal_is_handed_back() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();

    // A shell leads a session whose controlling terminal is the pty, like a login shell; it
    // runs rlock in the foreground and, once rlock is done, records which process group the
    // terminal's foreground is (field 8 of /proc/PID/stat) next to its own (field 5).
    let leader = r#""$RL" --url "$URL" exec -k k -- sh -c "$CHILD"
rc=$?
set -- $(cat /proc/$$/stat)
echo "$rc $5 $8" > "$D/after.tmp"; mv "$D/after.tmp" "$D/after"
exit $rc"#;
    let (mut session, mut master, screen) = pty_session(&server, d, leader, SIGNAL_LOGGER);

    session.ready(d);
    let child = wait_for_pid(d.join("pid"));
    assert_eq!(
        nix::unistd::tcgetpgrp(master.as_fd()).expect("tcgetpgrp on the master"),
        Pid::from_raw(child),
        "rlock did not give the terminal's foreground to the child's process group"
    );

    master.write_all(b"\x03").expect("type Ctrl-C");
    session.wait_for("the child to log INT", SOON, || !log_lines(d).is_empty());
    touch(d.join("stop"));
    let (out, _) = session.wait(FINISH);
    let shown = String::from_utf8_lossy(&screen.0.lock().unwrap()).into_owned();
    assert_eq!(
        out.code, 7,
        "rlock must exit with the child's status; terminal:\n{shown}"
    );
    assert_eq!(
        log_lines(d),
        ["INT"],
        "Ctrl-C exactly once; terminal:\n{shown}"
    );
    let after = read(d.join("after"));
    let f: Vec<&str> = after.split_whitespace().collect();
    assert_eq!(f.len(), 3, "after: {after:?}");
    assert_eq!(f[0], "7", "rlock's status as the shell saw it");
    assert_eq!(
        f[1], f[2],
        "the terminal's foreground (pgrp {}) was not handed back to the shell's group ({})",
        f[2], f[1]
    );
    assert!(!server.exists(LOCK), "lock not released");
}

// ---------------------------------------------------------------------------------------------
// 10. rlock killed outright
// ---------------------------------------------------------------------------------------------

#[test]
fn sigkill_of_rlock_stops_the_child_and_leaves_the_lock_to_expire() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let script = r#"echo $$ > "$D/pid"; echo "$RLOCK_TOKEN" > "$D/token"; : > "$D/ready"
while :; do sleep 0.05; done"#;
    let mut rl = start_exec(&server, d, &["--ttl", "2s"], script);
    let token = rl.ready(d);
    let child = wait_for_pid(d.join("pid"));

    signal::kill(Pid::from_raw(rl.pid()), Signal::SIGKILL).expect("kill -9 rlock");
    let killed = Instant::now();
    wait_until(
        "the child to die with rlock",
        Duration::from_secs(1),
        || !pid_alive(child),
    );
    let (out, _) = rl.wait(SOON);
    assert_eq!(out.code, -9, "{out}");
    assert_eq!(
        server.get(LOCK),
        Some(token),
        "the lock should be left to expire, not released or changed"
    );
    wait_until("the lock to expire", Duration::from_secs(4), || {
        !server.exists(LOCK)
    });
    let gone = killed.elapsed();
    // Renewed at most 667 ms before the kill, so it lives at least ~1.3 s after it.
    assert!(
        gone >= Duration::from_millis(1000),
        "the lock vanished {gone:?} after the kill: before its TTL"
    );
}

// ---------------------------------------------------------------------------------------------
// 14. --lost-signal
// ---------------------------------------------------------------------------------------------

#[test]
fn lost_signal_usr1_is_what_the_child_gets_on_loss() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let script = r#"trap 'echo USR1 >> "$D/log"; exit 0' USR1
trap 'echo TERM >> "$D/log"; exit 0' TERM
echo $$ > "$D/pid"; echo "$RLOCK_TOKEN" > "$D/token"; : > "$D/ready"
while :; do sleep 0.05; done"#;
    let mut rl = start_exec(
        &server,
        d,
        &[OFTEN, &["--lost-signal", "USR1"]].concat(),
        script,
    );
    rl.ready(d);
    let deleted = Instant::now();
    server.cmd(&["DEL", LOCK]);
    let (out, exited) = rl.wait(FINISH);
    assert_eq!(out.code, 76, "{out}");
    assert!(
        exited - deleted <= LOSS_NOTICED,
        "rlock took {:?} after the DEL to stop the child and exit",
        exited - deleted
    );
    assert!(
        out.stderr.contains("USR1"),
        "stderr should name the signal\n{out}"
    );
    assert_eq!(log_lines(d), ["USR1"], "the child should get USR1 only");
}

#[test]
fn lost_signal_kill_kills_the_child_on_loss() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let mut rl = start_exec(
        &server,
        d,
        &[OFTEN, &["--lost-signal", "9"]].concat(),
        RUN_30S,
    );
    rl.ready(d);
    let child = wait_for_pid(d.join("pid"));
    let deleted = Instant::now();
    server.cmd(&["DEL", LOCK]);
    let (out, exited) = rl.wait(FINISH);
    assert_eq!(out.code, 76, "{out}");
    assert!(
        exited - deleted <= LOSS_NOTICED,
        "rlock took {:?} after the DEL to stop the child and exit",
        exited - deleted
    );
    assert!(out.stderr.contains("KILL"), "{out}");
    assert!(!pid_alive(child), "the child still runs");
}
