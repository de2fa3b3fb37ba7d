//! The guardian: without it the command does not start; killed, it takes the command with it
//! and rlock stops the rest; killed with rlock, what escapes is what docs/exec.md says; it
//! shares no memory with rlock, and outlives rlock's core dump; it stands by as a small program
//! of its own, or as rlock's executable where memory files may not run; and the cgroup it
//! watches is made as the lock is asked for, and given back at once by a waiter.

use super::containment::{
    Escape, KEY, LOCK, Reaper, Way, assert_silent_after, cgroup_of, comm, descendants, exec,
    guardian_of, loop_alive, open_dir, requires_root,
};
use super::process_group::{heartbeat, now_ns};
use crate::common::{Background as Bg, RedisServer, rlock_at, run, wait_until};
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

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

/// What docs/exec.md says still escapes, both ways: when rlock *and* its guardian are both
/// SIGKILLed, nobody is left to stop what the command started. The command itself dies with its
/// parent, the guardian (parent-death signal); a loop in a session of its own runs on.
#[test]
fn what_escapes_when_rlock_and_its_guardian_are_both_killed() {
    for way in [Way::Cgroup, Way::Tree] {
        if way == Way::Cgroup {
            requires_root();
        }
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
        if way == Way::Cgroup {
            // Nobody was left to remove it either.
            let cgroup = cgroup_of(top);
            wait_until("the cgroup to empty", Duration::from_secs(5), || {
                fs::remove_dir(&cgroup).is_ok() || !cgroup.exists()
            });
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

/// A cgroup is made as the lock is asked for, and goes as soon as the lock is found busy: a
/// waiter holds none (however long it waits), and one SIGKILLed while waiting leaves none; the
/// command, once granted, still runs in a cgroup of its own, removed at the end.
#[test]
fn a_waiter_holds_no_cgroup_and_one_killed_while_waiting_leaves_none() {
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
    // (It may stand for the moment between the busy answer and rlock's reading of it.)
    waiter.wait_for(
        "the cgroup made while the lock was asked for to go",
        Duration::from_secs(5),
        || !cgroup.exists(),
    );
    let gone = Instant::now() + Duration::from_millis(300);
    wait_until("a moment of waiting", Duration::from_secs(2), || {
        Instant::now() >= gone
    });
    assert!(
        !cgroup.exists(),
        "{} stands again while rlock waits",
        cgroup.display()
    );
    assert!(waiter.running(), "the waiter stopped waiting");
    waiter.kill(Signal::SIGKILL);
    waiter.finish(Duration::from_secs(5));
    assert!(
        !cgroup.exists(),
        "{} was left by a killed waiter",
        cgroup.display()
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

/// The cgroup's guardian stands by as the small program rlock carries (`standby/standby.rs`),
/// run from a memory file under the name `rl-guardian`: a few pages, not a second rlock. (That
/// it takes over when rlock dies is the test above.)
#[test]
fn the_cgroups_guardian_stands_by_as_a_small_program_of_its_own() {
    requires_root();
    let server = RedisServer::start();
    let dir = open_dir();
    let d = dir.path();
    let _reaper = Reaper(d);
    let (mut rl, _, guardian) = guarded_run(&server, d);
    let exe = fs::read_link(format!("/proc/{guardian}/exe")).expect("the guardian's exe");
    let rss_kb = fs::read_to_string(format!("/proc/{guardian}/status"))
        .expect("the guardian's status")
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmRSS");
    rl.kill(Signal::SIGTERM);
    let _ = rl.finish(Duration::from_secs(10));
    assert_eq!(
        exe,
        Path::new("/memfd:rl-guardian (deleted)"),
        "the guardian runs {} (was the stand-by built? build.rs warns when it is not)",
        exe.display()
    );
    assert!(rss_kb <= 256, "the stand-by uses {rss_kb} kB");
}

/// Should rlock's executable not start once rlock has died (here it may not be run, as a lack
/// of memory in the dying rlock's cgroup could refuse it), the stand-by has already killed
/// everything in the cgroup itself (`cgroup.kill`, Linux 5.14): the escaped loop stops all the
/// same. (It then goes on trying to run rlock's executable, to remove the cgroup: killed here.)
#[test]
fn the_stand_by_kills_the_cgroup_itself_when_rlock_cannot_take_over() {
    requires_root();
    let server = RedisServer::start();
    let dir = open_dir();
    let d = dir.path();
    let _reaper = Reaper(d);
    // A copy, which the test may make unrunnable without touching the other tests' rlock.
    let copy = d.join("rlock-copy");
    fs::copy(env!("CARGO_BIN_EXE_rlock"), &copy).expect("copy rlock");
    let mut cmd = Command::new(&copy);
    for (name, _) in std::env::vars_os() {
        if name.as_encoded_bytes().starts_with(b"RLOCK_") {
            cmd.env_remove(&name);
        }
    }
    cmd.args([
        "--url",
        &server.url(),
        "exec",
        "--contain",
        "cgroup",
        "-k",
        KEY,
    ])
    .args(["--ttl", "30s", "--", "bash", "-c"])
    .arg(format!("{} sleep 600", Escape::Setsid.start()));
    let mut rl = Bg::spawn_group("rlock", d, &mut cmd);
    rl.wait_for("heartbeats", Duration::from_secs(10), || {
        super::process_group::heartbeat(d).is_some()
    });
    let top = rl.pid();
    let guardian = guardian_of(top).expect("a guardian");
    let cgroup = cgroup_of(top);
    assert!(
        cgroup.join("cgroup.kill").exists(),
        "this kernel has no cgroup.kill (Linux 5.14): the stand-by cannot kill by itself"
    );
    // Nobody may run it now, root included.
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&copy, fs::Permissions::from_mode(0o000)).expect("chmod 000");
    let _ = kill(Pid::from_raw(top), Signal::SIGKILL);
    let killed = now_ns();
    let _ = rl.finish(Duration::from_secs(5));
    let stopped = Instant::now() + Duration::from_secs(5);
    while loop_alive(d).is_some() && Instant::now() < stopped {
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = kill(Pid::from_raw(guardian), Signal::SIGKILL);
    wait_until("the cgroup to empty", Duration::from_secs(5), || {
        fs::remove_dir(&cgroup).is_ok() || !cgroup.exists()
    });
    assert_eq!(
        loop_alive(d),
        None,
        "the escaped loop ran on: the stand-by did not kill the cgroup"
    );
    assert_silent_after(d, killed + 1_000_000_000, "the stand-by's cgroup.kill");
}

/// Where memory files may not be run (`vm.memfd_noexec = 2`, a setting of the pid namespace,
/// so set in one of the test's own), the guardian is rlock's own executable, named
/// `rl-guardian`, and still stops everything the command started when rlock is SIGKILLed. The
/// run is in a cgroup of the test's own: rlock in a pid namespace names its cgroup by a pid that
/// other tests' rlocks may have too.
#[test]
fn where_memory_files_may_not_run_the_guardian_is_rlock_itself() {
    requires_root();
    let server = RedisServer::start();
    let dir = open_dir();
    let d = dir.path();
    let _reaper = Reaper(d);
    let own = cgroup_of(std::process::id() as i32);
    let test_cgroup = own
        .parent()
        .expect("the test's cgroup")
        .join(format!("test-memfd-noexec-{}", std::process::id()));
    fs::create_dir(&test_cgroup).expect("a cgroup for the test");
    let rl = env!("CARGO_BIN_EXE_rlock");
    fs::write(
        d.join("command.sh"),
        format!("{} sleep 600", Escape::Setsid.start()),
    )
    .expect("the command");
    // The namespace's first process keeps it (and so what runs in it) until the test is done.
    fs::write(
        d.join("namespace.sh"),
        format!(
            r#"echo 2 > /proc/sys/vm/memfd_noexec || exit 9
"{rl}" --url "{}" exec --contain cgroup -k {KEY} --ttl 30s -- bash "$D/command.sh"
while [ ! -e "$D/end" ]; do sleep 0.05; done
"#,
            server.url()
        ),
    )
    .expect("the namespace's script");
    let outer = format!(
        r#"echo $$ > "{}/cgroup.procs" && exec unshare --pid --fork --mount-proc sh "$D/namespace.sh""#,
        test_cgroup.display()
    );
    let mut sh = Bg::spawn_group("namespace", d, Command::new("sh").args(["-c", &outer]));
    sh.wait_for(
        "heartbeats (unshare is util-linux's)",
        Duration::from_secs(10),
        || super::process_group::heartbeat(d).is_some(),
    );
    let top = descendants(sh.pid())
        .into_iter()
        .find(|&pid| comm(pid).as_deref() == Some("rlock"))
        .expect("rlock");
    let guardian = guardian_of(top).expect("a guardian");
    let exe = fs::read_link(format!("/proc/{guardian}/exe")).expect("the guardian's exe");
    let _ = kill(Pid::from_raw(top), Signal::SIGKILL);
    let killed = now_ns();
    let runs = || {
        fs::read_dir(&test_cgroup).map_or(0, |entries| {
            entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("rlock-"))
                .count()
        })
    };
    wait_until(
        "the guardian to stop the escaped loop and remove its cgroup",
        Duration::from_secs(5),
        || loop_alive(d).is_none() && runs() == 0,
    );
    fs::write(d.join("end"), "").expect("the end");
    let (out, _) = sh.finish(Duration::from_secs(10));
    let _ = fs::remove_dir(&test_cgroup);
    assert_eq!(
        exe,
        fs::canonicalize(rl).expect("rlock's path"),
        "the guardian where memory files may not run: {out}"
    );
    assert_silent_after(d, killed + 1_000_000_000, "the guardian's stop");
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
