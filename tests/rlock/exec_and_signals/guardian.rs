//! The guardian: without it the command does not start; killed, it takes the command with it
//! and rlock stops the rest; killed with rlock, what escapes is what docs/exec.md says; it
//! shares no memory with rlock, and outlives rlock's core dump; it runs rlock's own executable
//! (a real file, never a memory file); and a waiter holds no cgroup.

use super::containment::{
    Escape, KEY, LOCK, Reaper, Way, assert_silent_after, cgroup_of, comm, exec, guardian_of,
    loop_alive, open_dir, requires_root,
};
use super::process_group::{heartbeat, now_ns};
use crate::common::{Background as Bg, RedisServer, rlock_at, run, wait_until};
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// With no process left to fork (`ulimit -u`), the guardian cannot be started: the command does
/// not start either, rlock says so and exits 70, and the lock is given back.
#[test]
fn without_a_guardian_the_command_does_not_start() {
    requires_root();
    let server = RedisServer::start();
    let dir = open_dir();
    let d = dir.path();
    let rl = env!("CARGO_BIN_EXE_rlock");
    let script = format!(
        r#"ulimit -u 1; exec "{rl}" --url "{}" exec -k {KEY} -- sh -c ': > "$D/ran"'"#,
        server.url()
    );
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--reuid=54322",
        "--regid=54322",
        "--clear-groups",
        "--",
        "bash",
        "-c",
        &script,
    ])
    .env("D", d);
    let out = run(&mut cmd);
    assert_eq!(out.code, 70, "{out}");
    assert!(
        out.stderr.contains("cannot start the guardian")
            && out.stderr.contains("the command was not started"),
        "{out}"
    );
    assert!(
        !d.join("ran").exists(),
        "the command ran without a guardian"
    );
    assert!(!server.exists(LOCK), "the lock was kept");
}

/// What docs/exec.md says still escapes in the tree: when rlock *and* its guardian are both
/// SIGKILLed, nobody is left to stop what the command started. The command itself dies with its
/// parent, the guardian (parent-death signal); a loop in a session of its own runs on. (In a
/// cgroup, the next rlock on the host stops it: `dead_mans_switch.rs`.)
#[test]
fn what_escapes_when_rlock_and_its_guardian_are_both_killed() {
    let way = Way::Tree;
    {
        let server = RedisServer::start();
        let dir = open_dir();
        let d = dir.path();
        let _reaper = Reaper(d);
        let then = r#"echo $$ > "$D/leader"; sleep 600"#;
        let mut rl = exec(&server, d, way, &["--ttl", "30s"], Escape::Setsid, then);
        rl.wait_for("heartbeats", Duration::from_secs(10), || {
            heartbeat(d).is_some()
        });
        let top = rl.pid();
        let guardian = guardian_of(top).expect("a guardian");
        let leader: i32 = fs::read_to_string(d.join("leader"))
            .expect("leader pid")
            .trim()
            .parse()
            .expect("a pid");
        // Both at once: stopped first, so that neither sees the other die and acts.
        for sig in [Signal::SIGSTOP, Signal::SIGKILL] {
            let _ = kill(Pid::from_raw(guardian), sig);
            let _ = kill(Pid::from_raw(top), sig);
        }
        let _ = rl.finish(Duration::from_secs(5));
        wait_until(
            "the command to die with its guardian",
            Duration::from_secs(5),
            || !crate::common::pid_alive(leader),
        );
        let before = heartbeat(d).expect("heartbeats");
        wait_until(
            "a heartbeat of the escaped loop",
            Duration::from_secs(5),
            || heartbeat(d).is_some_and(|hb| hb > before),
        );
        let survivor = loop_alive(d);
        assert!(
            survivor.is_some(),
            "{way:?}: the loop in a session of its own was stopped after all; docs/exec.md says it escapes"
        );
        if let Some(pid) = survivor {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// docs/exec.md's way to stop a job at once: kill its guardian. The command dies with it (parent-
/// death signal), rlock stops what the command started itself (it is a subreaper too, and
/// has the cgroup), removes the cgroup, releases the lock and exits 137.
#[test]
fn killing_the_guardian_stops_everything_and_rlock_releases() {
    requires_root();
    let server = RedisServer::start();
    let dir = open_dir();
    let d = dir.path();
    let _reaper = Reaper(d);
    let (mut rl, top, guardian) = guarded_run(&server, d);
    let _ = kill(Pid::from_raw(guardian), Signal::SIGKILL);
    let (out, _) = rl.finish(Duration::from_secs(10));
    let exited = now_ns();
    assert_eq!(out.code, 137, "{out}");
    assert_silent_after(d, exited, "rlock's exit after its guardian was killed");
    assert!(!server.exists(LOCK), "the lock was not released");
    assert!(!cgroup_of(top).exists(), "the cgroup was left behind");
}

/// A waiter's cgroup stands while it waits, holding its guardian alone (the command starts once
/// granted), so that a lock handed over costs the command's start alone; a waiter SIGKILLed
/// while waiting leaves none (its guardian removes it); the command, once granted, runs in a
/// cgroup of its own, removed at the end.
#[test]
fn a_waiters_cgroup_holds_its_guardian_alone_and_one_killed_while_waiting_leaves_none() {
    requires_root();
    let server = RedisServer::start();
    let dir = open_dir();
    let holder = crate::common::basic::acquire(&server, KEY, &["--ttl", "60s"]);
    // How many are in line. A waiter killed there keeps its place until the lock is free.
    let in_line = |n: i64| {
        crate::common::basic::q::<i64>(&server, &["ZCARD", &crate::common::basic::queue_key(KEY)])
            == n
    };
    let mut waiter = Bg::spawn(
        "waiter",
        dir.path(),
        rlock_at(&server).args(["exec", "-w", "30s", "-k", KEY, "--", "true"]),
    );
    waiter.wait_for("the waiter in line", Duration::from_secs(10), || in_line(1));
    let cgroup = cgroup_of(waiter.pid());
    let procs = fs::read_to_string(cgroup.join("cgroup.procs")).unwrap_or_default();
    let procs: Vec<&str> = procs.split_whitespace().collect();
    let [guardian] = procs[..] else {
        panic!("{} holds {procs:?} while rlock waits", cgroup.display());
    };
    let stat = fs::read_to_string(format!("/proc/{guardian}/stat")).unwrap_or_default();
    let ppid = stat
        .rsplit_once(") ")
        .and_then(|(_, rest)| rest.split(' ').nth(1));
    assert!(
        stat.contains("(rl-guardian)") && ppid == Some(&waiter.pid().to_string()),
        "what waits in {} is no guardian of the waiter's: {stat}",
        cgroup.display()
    );
    assert!(waiter.running(), "the waiter stopped waiting");
    waiter.kill(Signal::SIGKILL);
    waiter.finish(Duration::from_secs(5));
    wait_until(
        "the killed waiter's guardian to remove its cgroup",
        Duration::from_secs(5),
        || !cgroup.exists(),
    );

    let mut second = Bg::spawn(
        "second",
        dir.path(),
        rlock_at(&server).args([
            "exec",
            "-w",
            "30s",
            "-k",
            KEY,
            "--",
            "sh",
            "-c",
            "tail -n 1 /proc/self/cgroup",
        ]),
    );
    let pid = second.pid();
    second.wait_for(
        "the second waiter in line, behind the killed one",
        Duration::from_secs(10),
        || in_line(2),
    );
    crate::common::basic::release(&server, KEY, &holder);
    let (out, _) = second.finish(Duration::from_secs(10));
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stdout.trim().ends_with(&format!("/rlock-{pid}")),
        "the command ran in {:?}",
        out.stdout
    );
    assert!(
        !cgroup_of(pid).exists(),
        "the cgroup of the granted run is left behind"
    );
}

/// The cgroup's guardian is a process of its own, sharing no memory with rlock (`kcmp`): the
/// OOM killer and a core dump end every process that shares a dying process's memory, and the
/// guardian must outlive whatever ends rlock. rlock dying of SIGABRT (a core-dumping signal)
/// leaves it to stop everything the command started, and to remove the cgroup.
#[test]
fn the_cgroups_guardian_shares_no_memory_with_rlock_and_outlives_its_core_dump() {
    requires_root();
    let server = RedisServer::start();
    let dir = open_dir();
    let d = dir.path();
    let _reaper = Reaper(d);
    let (mut rl, top, guardian) = guarded_run(&server, d);
    const KCMP_VM: i64 = 1;
    // SAFETY: kcmp compares two processes' kernel objects; it reads nothing of this process.
    let same = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_kcmp,
            top as i64,
            guardian as i64,
            KCMP_VM,
            0i64,
            0i64,
        )
    };
    assert!(
        same > 0,
        "kcmp(rlock {top}, guardian {guardian}, KCMP_VM) = {same} ({}): 0 is memory shared",
        nix::errno::Errno::last()
    );
    let _ = kill(Pid::from_raw(top), Signal::SIGABRT);
    let killed = now_ns();
    let (out, _) = rl.finish(Duration::from_secs(5));
    assert_eq!(
        out.code,
        -(Signal::SIGABRT as i32),
        "rlock dies of SIGABRT: {out}"
    );
    wait_until(
        "the escaped loop to be stopped",
        Duration::from_secs(5),
        || loop_alive(d).is_none(),
    );
    assert_silent_after(d, killed + 1_000_000_000, "the guardian's stop");
    wait_until(
        "the guardian to remove its cgroup",
        Duration::from_secs(5),
        || !cgroup_of(top).exists(),
    );
}

/// The guardian runs rlock's own executable, a real file (never a memory file, which
/// endpoint-security tools flag as fileless execution), under the name `rl-guardian`, and its
/// command line is that name alone: rlock's arguments (a URL with a password) are not in it.
#[test]
fn the_guardian_runs_from_rlocks_own_file() {
    requires_root();
    let server = RedisServer::start();
    let dir = open_dir();
    let d = dir.path();
    let _reaper = Reaper(d);
    let (mut rl, _, guardian) = guarded_run(&server, d);
    let exe = fs::read_link(format!("/proc/{guardian}/exe")).expect("the guardian's exe");
    let name = comm(guardian);
    let cmdline = fs::read(format!("/proc/{guardian}/cmdline")).expect("its cmdline");
    rl.kill(Signal::SIGTERM);
    let _ = rl.finish(Duration::from_secs(10));
    assert_eq!(
        exe,
        fs::canonicalize(env!("CARGO_BIN_EXE_rlock")).expect("rlock's path"),
    );
    assert_eq!(name.as_deref(), Some("rl-guardian"));
    let shown: Vec<&[u8]> = cmdline
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .collect();
    assert_eq!(
        shown,
        [b"rl-guardian".as_slice()],
        "{}",
        String::from_utf8_lossy(&cmdline)
    );
}

/// An empty cgroup that an rlock no longer alive left behind (killed with its guardian) is
/// removed by the next rlock that makes one beside it.
#[test]
fn the_next_rlock_removes_the_empty_cgroup_of_one_no_longer_alive() {
    requires_root();
    let server = RedisServer::start();
    let mut child = Command::new("true").spawn().expect("run true");
    let dead = child.id() as i32;
    child.wait().expect("reap true");
    let left = cgroup_of(dead);
    fs::create_dir(&left).expect("make a cgroup as a killed rlock would have left it");
    let out = run(rlock_at(&server).args(["exec", "--contain", "cgroup", "-k", KEY, "--", "true"]));
    assert_eq!(out.code, 0, "{out}");
    let gone = !left.exists();
    let _ = fs::remove_dir(&left);
    assert!(gone, "{} was left", left.display());
}

/// A waiter's guardian looks its command up on PATH at the first try; handed the lock after the
/// wait, it looks again, so that the command is the one a shell would run then: here a copy put
/// meanwhile in an earlier directory of PATH.
#[test]
fn a_command_handed_the_lock_after_a_wait_is_looked_up_on_path_again() {
    use std::os::unix::fs::PermissionsExt;
    let server = RedisServer::start();
    let dir = open_dir();
    let (early, late) = (dir.path().join("early"), dir.path().join("late"));
    let put = |d: &Path, says: &str| {
        fs::create_dir_all(d).expect("mkdir");
        let file = d.join("rl-which");
        fs::write(&file, format!("#!/bin/sh\necho {says}\n")).expect("write the command");
        fs::set_permissions(&file, fs::Permissions::from_mode(0o755)).expect("chmod");
    };
    put(&late, "late");
    fs::create_dir_all(&early).expect("mkdir");
    let held = run(rlock_at(&server).args(["acquire", "-k", KEY, "--ttl", "60s"]));
    assert_eq!(held.code, 0, "{held}");
    let path = format!("{}:{}:/usr/bin:/bin", early.display(), late.display());
    let mut waiter = Bg::spawn(
        "waiter",
        dir.path(),
        rlock_at(&server)
            .env("PATH", &path)
            .args(["exec", "-k", KEY, "--", "rl-which"]),
    );
    // Its guardian asleep on rlock's word: the first lookup is made (it found late/).
    let top = waiter.pid();
    let asleep = |pid: i32| {
        fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('S')))
            .unwrap_or(false)
    };
    waiter.wait_for(
        "the waiter's guardian to stand by",
        Duration::from_secs(10),
        || guardian_of(top).is_some_and(asleep),
    );
    put(&early, "early");
    let token = held.stdout.trim();
    let released = run(rlock_at(&server).args(["release", "-k", KEY, "--token", token]));
    assert_eq!(released.code, 0, "{released}");
    let (out, _) = waiter.finish(Duration::from_secs(10));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        out.stdout.trim(),
        "early",
        "the waiter ran the command its first try found, not the one PATH finds at the handoff"
    );
}

/// A run in a cgroup of its own (30 s lease) whose command left a loop in a session of its own,
/// once the loop beats: rlock, its pid and its guardian's.
fn guarded_run(server: &RedisServer, d: &Path) -> (Bg, i32, i32) {
    let mut rl = exec(
        server,
        d,
        Way::Cgroup,
        &["--ttl", "30s"],
        Escape::Setsid,
        "sleep 600",
    );
    rl.wait_for("heartbeats", Duration::from_secs(10), || {
        heartbeat(d).is_some()
    });
    let top = rl.pid();
    let guardian = guardian_of(top).expect("a guardian");
    (rl, top, guardian)
}
