//! Job control (a stopped child, the terminal's foreground), and a nested rlock that must leave
//! the lock to its owner.

use super::*;

// ---------------------------------------------------------------------------------------------
// 15. Job control, and nested rlock that must leave the lock to its owner
// ---------------------------------------------------------------------------------------------

/// Field 3 (state) and field 5 (process group) of /proc/PID/stat.
fn proc_state(pid: i32) -> (char, i32) {
    let stat = read(format!("/proc/{pid}/stat"));
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    (f[0].chars().next().unwrap(), f[2].parse().unwrap())
}

#[test]
fn ctrl_z_at_a_terminal_stops_rlock_like_a_job_and_continuing_resumes_the_child() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    // rlock's pid is the leader's only child: the leader writes it down before waiting.
    // The child runs under bash, not dash: dash starts `sleep` with vfork(), and a Ctrl-Z that
    // stops the vfork child before its exec leaves dash itself unstoppable (blocked in vfork),
    // so no shell, rlock included, would ever see the job stop.
    let leader = r#""$RL" --url "$URL" exec -k k -- bash -c "$CHILD" &
echo $! > "$D/rlock.pid"
fg %1 2>/dev/null || wait $!
"#;
    let (mut session, mut master, screen) = pty_session(&server, d, leader, SIGNAL_LOGGER);
    let shown = || String::from_utf8_lossy(&screen.0.lock().unwrap()).into_owned();

    session.ready(d);
    let child = wait_for_pid(d.join("pid"));
    let rlock: i32 = read(d.join("rlock.pid")).trim().parse().unwrap();
    // Without job control in the leader, rlock may or may not have the foreground; give it
    // the terminal as a shell's `fg` would, then let rlock hand it to the child.
    let rlock_pgrp = proc_state(rlock).1;
    if nix::unistd::tcgetpgrp(master.as_fd()).unwrap() != Pid::from_raw(child) {
        panic!(
            "rlock (pgrp {rlock_pgrp}) did not hand the terminal to its child; terminal:\n{}",
            shown()
        );
    }

    master.write_all(b"\x1a").expect("type Ctrl-Z");
    session.wait_for("the child and rlock to stop", SOON, || {
        proc_state(child).0 == 'T' && proc_state(rlock).0 == 'T'
    });
    assert_eq!(
        nix::unistd::tcgetpgrp(master.as_fd()).unwrap(),
        Pid::from_raw(rlock_pgrp),
        "a stopped rlock must have taken the terminal back for its own group"
    );
    assert!(server.exists(LOCK), "a short stop must not lose the lock");

    // What `fg` does once the terminal is the job's again: continue the job's process group.
    signal::killpg(Pid::from_raw(rlock_pgrp), Signal::SIGCONT).unwrap();
    session.wait_for("the child to run again in the foreground", SOON, || {
        proc_state(child).0 != 'T'
            && nix::unistd::tcgetpgrp(master.as_fd()).ok() == Some(Pid::from_raw(child))
    });

    touch(d.join("stop"));
    let (out, _) = session.wait(FINISH);
    assert_eq!(
        out.code,
        7,
        "rlock exits with the child's status; terminal:\n{}",
        shown()
    );
    assert!(
        log_lines(d).is_empty(),
        "the child must get no signal (no TERM: the lock was not lost): {:?}",
        log_lines(d)
    );
    assert!(!server.exists(LOCK), "lock not released");
}

#[test]
fn ctrl_z_under_a_nested_rlock_exec_stops_the_whole_job() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    // rlock exec -k k -- rlock exec -k k2 -- bash -c CHILD: the inner rlock must stop the way
    // the terminal stops a job (SIGTSTP), or the outer one takes it for a SIGSTOP from someone
    // else, keeps running, and the shell never gets its terminal back.
    let leader = r#""$RL" --url "$URL" exec -k k -- "$RL" --url "$URL" exec -k k2 -- bash -c "$CHILD" &
echo $! > "$D/rlock.pid"
fg %1 2>/dev/null || wait $!
"#;
    let (mut session, mut master, screen) = pty_session(&server, d, leader, SIGNAL_LOGGER);
    let shown = || String::from_utf8_lossy(&screen.0.lock().unwrap()).into_owned();

    session.ready(d);
    let child = wait_for_pid(d.join("pid"));
    let outer: i32 = read(d.join("rlock.pid")).trim().parse().unwrap();
    // The inner rlock is the outer one's child (in a cgroup), or its guardian's (in the tree).
    let children = |pid: i32| -> Vec<i32> {
        read(format!("/proc/{pid}/task/{pid}/children"))
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    };
    let inner: i32 = children(outer)
        .into_iter()
        .flat_map(|c| std::iter::once(c).chain(children(c)))
        .find(|&p: &i32| read(format!("/proc/{p}/comm")).trim() == "rlock")
        .unwrap_or_else(|| panic!("no inner rlock under {outer}; terminal:\n{}", shown()));
    let outer_pgrp = proc_state(outer).1;
    // The terminal passes down the chain (outer rlock, inner rlock, command), each handing it
    // on after its child starts: the command can write its pid before the last handover.
    session.wait_for("the innermost command to have the terminal", SOON, || {
        nix::unistd::tcgetpgrp(master.as_fd()).ok() == Some(Pid::from_raw(child))
    });

    master.write_all(b"\x1a").expect("type Ctrl-Z");
    session.wait_for("the child and both rlocks to stop", SOON, || {
        [child, inner, outer]
            .iter()
            .all(|&p| proc_state(p).0 == 'T')
    });
    assert_eq!(
        nix::unistd::tcgetpgrp(master.as_fd()).unwrap(),
        Pid::from_raw(outer_pgrp),
        "the outer rlock must have taken the terminal back for its own group"
    );

    signal::killpg(Pid::from_raw(outer_pgrp), Signal::SIGCONT).unwrap();
    session.wait_for("the child to run again in the foreground", SOON, || {
        proc_state(child).0 != 'T'
            && nix::unistd::tcgetpgrp(master.as_fd()).ok() == Some(Pid::from_raw(child))
    });
    touch(d.join("stop"));
    let (out, _) = session.wait(FINISH);
    assert_eq!(out.code, 7, "terminal:\n{}", shown());
    assert!(log_lines(d).is_empty(), "signals: {:?}", log_lines(d));
    assert!(!server.exists(LOCK), "outer lock not released");
    assert!(!server.exists("rlock:k2"), "inner lock not released");
}

#[test]
fn release_inside_exec_of_the_inherited_token_leaves_the_lock_to_exec() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    // The usual acquire --export … release script, run under rlock exec on the same key.
    let script = r#"lock=$("$RL" --url "$URL" acquire --export -k k) || exit 9; eval "$lock"
"$RL" --url "$URL" release -k k; echo "release=$?" > "$D/release"
[ "$("$RL" --url "$URL" inspect -q -k k; echo $?)" = 0 ] || exit 8
exit 0"#;
    let out = run(&mut exec_sh(&server, d, &["--ttl", "10s"], script));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(read(d.join("release")).trim(), "release=0");
    assert!(
        out.stderr.contains("enclosing 'rlock exec'"),
        "the nested release says why it did nothing: {out}"
    );
    assert!(!server.exists(LOCK), "exec released it at the end");
}

#[test]
fn exec_inside_a_shell_holding_the_lock_renews_it_and_leaves_the_release_to_the_shell() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    // The shell takes a 2 s lock and runs a 4 s command under rlock exec on the same key.
    let script = r#"lock=$("$RL" --url "$URL" acquire --export -k k --ttl 2s) || exit 9
eval "$lock"
"$RL" --url "$URL" exec -k k -- sh -c 'sleep 4; [ "$("$RL" --url "$URL" inspect -q -k k; echo $?)" = 0 ]'
echo "exec=$?" > "$D/exec"
"$RL" --url "$URL" inspect -q -k k; echo "held_after=$?" >> "$D/exec"
"$RL" --url "$URL" release -k k"#;
    let out = run(&mut sh(&server, d, script));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        read(d.join("exec")).lines().collect::<Vec<_>>(),
        ["exec=0", "held_after=0"],
        "the nested exec kept the 2 s lock alive for 4 s and did not release it; {out}"
    );
    assert!(!server.exists(LOCK), "the shell's release released it");
}

/// Ctrl-Z stops the whole job, also what left the command's group: a loop in a session of its
/// own stops writing while rlock is stopped (and cannot renew), and writes again after `fg`.
#[test]
fn ctrl_z_stops_what_left_the_group_too() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let leader = r#""$RL" --url "$URL" exec -k k --contain tree -- bash -c "$CHILD" &
echo $! > "$D/rlock.pid"
fg %1 2>/dev/null || wait $!
"#;
    let child = r#"setsid sh -c 'echo $$ > "$D/esc.pid"; while :; do date +%s%N > "$D/hb.$$"; mv -f "$D/hb.$$" "$D/hb"; sleep 0.02; done' &
echo $$ > "$D/pid"; echo "$RLOCK_TOKEN" > "$D/token"; : > "$D/ready"
while [ ! -e "$D/stop" ]; do sleep 0.05; done
exit 7"#;
    let (mut session, mut master, screen) = pty_session(&server, d, leader, child);
    let shown = || String::from_utf8_lossy(&screen.0.lock().unwrap()).into_owned();
    session.ready(d);
    let hb = || read(d.join("hb")).trim().parse::<i64>().ok();
    session.wait_for("heartbeats", SOON, || hb().is_some());
    let esc: i32 = read(d.join("esc.pid")).trim().parse().unwrap();
    let rlock: i32 = read(d.join("rlock.pid")).trim().parse().unwrap();

    master.write_all(b"\x1a").expect("type Ctrl-Z");
    session.wait_for(
        "rlock and the loop in its own session to stop",
        SOON,
        || proc_state(rlock).0 == 'T' && proc_state(esc).0 == 'T',
    );
    let stopped_at = hb();
    let quiet_until = Instant::now() + Duration::from_millis(300);
    wait_until("a quiet period", SOON, || Instant::now() >= quiet_until);
    assert_eq!(
        hb(),
        stopped_at,
        "the loop wrote on while the job was stopped; terminal:\n{}",
        shown()
    );

    let rlock_pgrp = proc_state(rlock).1;
    signal::killpg(Pid::from_raw(rlock_pgrp), Signal::SIGCONT).unwrap();
    session.wait_for("the loop to run again", SOON, || hb() != stopped_at);
    touch(d.join("stop"));
    let (out, _) = session.wait(FINISH);
    assert_eq!(out.code, 7, "terminal:\n{}", shown());
    assert!(!crate::common::pid_alive(esc), "the loop outlived the run");
}

/// A waiter brought to the foreground (`fg`) while it waits gives its command the terminal: the
/// guardian it made in the background, with no terminal to hand on, does not start the command.
#[test]
fn a_waiter_brought_to_the_foreground_gives_its_command_the_terminal() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let holder = crate::common::basic::acquire(&server, "k", &["--ttl", "60s"]);
    // With job control on (-m) the waiter starts in the background, in a group of its own.
    let leader = r#"set -m
"$RL" --url "$URL" exec -w 30s -k k -- sh -c "$CHILD" &
echo $! > "$D/rlock.pid"
while [ ! -e "$D/go" ]; do sleep 0.02; done
fg %1
"#;
    // Fields 5 and 8 of /proc/$$/stat: the command's group, and the terminal's foreground group.
    let child = r#"set -- $(cat /proc/$$/stat)
if [ "$5" = "$8" ]; then echo foreground > "$D/where"; else echo background > "$D/where"; fi"#;
    let (mut session, _master, screen) = pty_session(&server, d, leader, child);
    let shown = || String::from_utf8_lossy(&screen.0.lock().unwrap()).into_owned();
    let queue = crate::common::basic::queue_key("k");
    session.wait_for("the waiter in line", SOON, || {
        crate::common::basic::q::<i64>(&server, &["ZCARD", &queue]) == 1
    });
    let rlock: i32 = read(d.join("rlock.pid")).trim().parse().unwrap();
    // Field 8 of rlock's stat: the terminal's foreground group.
    let foreground = || {
        let stat = read(format!("/proc/{rlock}/stat"));
        let rest = &stat[stat.rfind(')').expect("comm") + 2..];
        rest.split_whitespace()
            .nth(5)
            .and_then(|f| f.parse::<i32>().ok())
    };
    assert_ne!(
        foreground(),
        Some(proc_state(rlock).1),
        "rlock began in the foreground"
    );
    touch(d.join("go"));
    session.wait_for("fg to give rlock's group the terminal", SOON, || {
        foreground() == Some(proc_state(rlock).1)
    });
    crate::common::basic::release(&server, "k", &holder);
    let (out, _) = session.wait(FINISH);
    assert_eq!(out.code, 0, "terminal:\n{}", shown());
    assert_eq!(
        read(d.join("where")).trim(),
        "foreground",
        "the command ran without the terminal's foreground; terminal:\n{}",
        shown()
    );
}
