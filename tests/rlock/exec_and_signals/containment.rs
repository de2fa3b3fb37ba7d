//! Nothing the command started escapes the lock: processes that moved to a process group of
//! their own (`timeout`, `set -m` jobs, a `setpgid` of their own), started a session of their
//! own (`setsid`) or daemonized (a double fork) are stopped on a lost lock before rlock exits
//! 76, before the release when the command ends, and by the guardian when rlock is SIGKILLed,
//! also when everything named `rlock` is killed. Each both ways: in a cgroup of its own (as root
//! here) and in the process tree below the guardian (`--contain tree`, and as a user who may
//! not write the cgroup). Judged by the escaped processes' own heartbeats.

use super::process_group::{heartbeat, now_ns};
use crate::common::{Background as Bg, Output, RedisServer, rlock_at, run, wait_until};
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

pub(super) const KEY: &str = "esc";
pub(super) const LOCK: &str = "rlock:esc";

/// A heartbeat loop that ignores SIGTERM and writes its pid to `$D/esc.pid` and the wall clock
/// (ns) to `$D/hb` every 20 ms.
const LOOP: &str = r#"trap "" TERM; echo $$ > "$D/esc.pid"; while :; do date +%s%N > "$D/hb.$$"; mv -f "$D/hb.$$" "$D/hb"; sleep 0.02; done"#;

/// How a heartbeat loop gets away from the command's process group.
#[derive(Debug, Clone, Copy)]
pub(super) enum Escape {
    /// coreutils `timeout` (without --foreground) moves itself into a group of its own.
    Timeout,
    /// A `set -m` shell's background job leads a group of its own.
    SetM,
    /// A small program that calls setpgid(0, 0) and then execs the loop.
    Setpgid,
    /// `setsid`: a session (and group) of its own.
    Setsid,
    /// A daemon: forked twice, its parent gone, in a session of its own.
    Daemon,
}

impl Escape {
    /// A script that starts the loop this way, in the background, and goes on.
    pub(super) fn start(self) -> String {
        let quoted = format!("'{}'", LOOP.replace('\'', r"'\''"));
        match self {
            Escape::Timeout => format!("timeout 600 sh -c {quoted} &"),
            Escape::SetM => format!("set -m; sh -c {quoted} &"),
            Escape::Setpgid => format!(
                r#"python3 -c 'import os, sys; os.setpgid(0, 0); os.execvp("sh", ["sh", "-c", sys.argv[1]])' {quoted} &"#
            ),
            Escape::Setsid => format!("setsid sh -c {quoted} &"),
            Escape::Daemon => format!("(setsid sh -c {quoted} &) ; "),
        }
    }
}

/// No heartbeat after `at` (ns), and none for a quiet period after: nothing of the loop runs.
#[track_caller]
pub(super) fn assert_silent_after(dir: &Path, at: i64, what: &str) {
    let seen = heartbeat(dir).expect("the loop wrote heartbeats");
    assert!(
        seen <= at,
        "{what}: a heartbeat {} ms after it",
        (seen - at) / 1_000_000
    );
    let quiet_until = Instant::now() + Duration::from_millis(300);
    wait_until("the quiet period", Duration::from_secs(2), || {
        Instant::now() >= quiet_until
    });
    assert_eq!(
        heartbeat(dir),
        Some(seen),
        "{what}: the loop ran on after it"
    );
    assert!(
        dir.join("esc.pid").exists(),
        "{what}: the loop never wrote its pid"
    );
    assert_eq!(loop_alive(dir), None, "{what}: the escaped loop still runs");
}

/// The escaped loop of the test whose directory is `dir`, if it still runs: its pid, checked to
/// be that loop (its environment names `dir`), never another process that took the pid since.
pub(super) fn loop_alive(dir: &Path) -> Option<i32> {
    let pid: i32 = fs::read_to_string(dir.join("esc.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let environ = fs::read(format!("/proc/{pid}/environ")).ok()?;
    let ours = format!("D={}", dir.display());
    let is_ours = environ.split(|&b| b == 0).any(|var| var == ours.as_bytes());
    (is_ours && crate::common::pid_alive(pid)).then_some(pid)
}

/// Kills the escaped loop when a test ends, passed or failed: a build that lets it escape (the
/// defect these tests catch) must not leave it running for ever.
pub(super) struct Reaper<'a>(pub(super) &'a Path);

impl Drop for Reaper<'_> {
    fn drop(&mut self) {
        if let Some(pid) = loop_alive(self.0) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// Waits for the loop's first heartbeat, deletes the lock behind rlock's back, and waits for
/// rlock to end: what it printed, and when (ns) its end was seen.
pub(super) fn lose_the_lock(server: &RedisServer, rl: &mut Bg) -> (Output, i64) {
    let d = rl.dir().to_path_buf();
    rl.wait_for("heartbeats", Duration::from_secs(10), || {
        heartbeat(&d).is_some()
    });
    server.cmd(&["DEL", LOCK]);
    let (out, _) = rl.finish(Duration::from_secs(10));
    (out, now_ns())
}

/// The guardian below rlock `top`, found by its name.
pub(super) fn guardian_of(top: i32) -> Option<i32> {
    descendants(top)
        .into_iter()
        .find(|&pid| comm(pid).as_deref() == Some("rl-guardian"))
}

/// A temporary directory anyone may write (the loop may run as another user).
pub(super) fn open_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).expect("chmod");
    dir
}

/// How rlock contains the command in a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Way {
    /// As root: its own cgroup.
    Cgroup,
    /// `--contain tree`: the process tree below the guardian.
    Tree,
}

impl Way {
    fn flag(self) -> &'static str {
        match self {
            Way::Cgroup => "cgroup",
            Way::Tree => "tree",
        }
    }
}

/// `rlock -v exec --contain WAY -k esc OPTS -- bash -c 'ESCAPE; SCRIPT'`, leading a process
/// group of its own.
pub(super) fn exec(
    server: &RedisServer,
    dir: &Path,
    way: Way,
    opts: &[&str],
    escape: Escape,
    then: &str,
) -> Bg {
    let mut cmd = rlock_at(server);
    cmd.args(["-v", "exec", "--contain", way.flag(), "-k", KEY])
        .args(opts)
        .args(["--", "bash", "-c", &format!("{} {then}", escape.start())]);
    Bg::spawn_group("rlock", dir, &mut cmd)
}

pub(super) fn requires_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the cgroup tests run as root (CI does): run cargo test as root"
    );
}

/// The lock is lost (deleted behind rlock's back): everything the command started is stopped
/// before rlock exits 76, the loop that escaped included, although it ignores SIGTERM.
fn stopped_on_a_lost_lock(way: Way, escape: Escape) {
    let server = RedisServer::start();
    let dir = open_dir();
    let d = dir.path();
    let _reaper = Reaper(d);
    let mut rl = exec(
        &server,
        d,
        way,
        &["--ttl", "3s", "--grace", "300ms"],
        escape,
        "sleep 600",
    );
    let (out, exited) = lose_the_lock(&server, &mut rl);
    assert_eq!(out.code, 76, "{escape:?}: {out}");
    assert_silent_after(d, exited, &format!("{escape:?}, {way:?}: rlock's exit 76"));
}

/// The command ends, status 3, leaving the escaped loop running: it is stopped before the lock
/// is released, and the command's status is rlock's.
fn stopped_before_the_release(way: Way, escape: Escape) {
    let server = RedisServer::start();
    let dir = open_dir();
    let d = dir.path();
    let _reaper = Reaper(d);
    let then = r#"while [ ! -e "$D/hb" ]; do sleep 0.01; done; exit 3"#;
    let mut rl = exec(
        &server,
        d,
        way,
        &["--ttl", "10s", "--grace", "300ms"],
        escape,
        then,
    );
    let (out, _) = rl.finish(Duration::from_secs(10));
    let exited = now_ns();
    assert_eq!(out.code, 3, "{escape:?}: {out}");
    assert_silent_after(d, exited, &format!("{escape:?}, {way:?}: rlock's exit"));
    assert!(!server.exists(LOCK), "the lock was not released");
}

/// Every process named `rlock` in the test's tree is SIGKILLed (what `killall -9 rlock` does,
/// limited to this test): the guardian, under a name of its own, survives and stops everything
/// the command started at once, long before the lease (30 s) could let another holder in.
fn stopped_when_rlock_is_killed_by_name(way: Way, escape: Escape) {
    let server = RedisServer::start();
    let dir = open_dir();
    let d = dir.path();
    let _reaper = Reaper(d);
    let mut rl = exec(&server, d, way, &["--ttl", "30s"], escape, "sleep 600");
    rl.wait_for("heartbeats", Duration::from_secs(10), || {
        heartbeat(d).is_some()
    });
    let top = rl.pid();
    let named: Vec<i32> = std::iter::once(top)
        .chain(descendants(top))
        .filter(|&pid| comm(pid).as_deref() == Some("rlock"))
        .collect();
    assert_eq!(named, vec![top], "only rlock itself is named rlock");
    let guardian: Vec<i32> = descendants(top)
        .into_iter()
        .filter(|&pid| comm(pid).as_deref() == Some("rl-guardian"))
        .collect();
    assert_eq!(guardian.len(), 1, "one guardian, named rl-guardian");
    for pid in named {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
    let killed = now_ns();
    let _ = rl.finish(Duration::from_secs(5));
    wait_until(
        "the escaped loop to be stopped",
        Duration::from_secs(5),
        || loop_alive(d).is_none(),
    );
    let last = heartbeat(d).expect("heartbeats");
    assert!(
        last - killed < 1_000_000_000,
        "{escape:?}, {way:?}: a heartbeat {} ms after rlock was killed",
        (last - killed) / 1_000_000
    );
    assert_silent_after(d, killed + 1_000_000_000, "the guardian's stop");
    assert!(server.exists(LOCK), "the lock is left to expire");
    if way == Way::Cgroup {
        wait_until(
            "the guardian to remove its cgroup",
            Duration::from_secs(5),
            || !cgroup_of(top).exists(),
        );
    }
}

pub(super) fn comm(pid: i32) -> Option<String> {
    Some(
        fs::read_to_string(format!("/proc/{pid}/comm"))
            .ok()?
            .trim()
            .to_string(),
    )
}

/// Every process below `root`, from the parents in /proc/*/stat.
pub(super) fn descendants(root: i32) -> Vec<i32> {
    let parents: Vec<(i32, i32)> = fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let ppid = stat[stat.rfind(')')? + 2..]
                .split(' ')
                .nth(1)?
                .parse()
                .ok()?;
            Some((pid, ppid))
        })
        .collect();
    let mut out = Vec::new();
    let mut next = vec![root];
    while let Some(p) = next.pop() {
        for &(pid, _) in parents.iter().filter(|(_, ppid)| *ppid == p) {
            out.push(pid);
            next.push(pid);
        }
    }
    out
}

/// The cgroup rlock `pid` makes for its command (on this machine's hierarchy).
pub(super) fn cgroup_of(pid: i32) -> std::path::PathBuf {
    let info = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let mount = info
        .lines()
        .find_map(|l| {
            let (fields, after) = l.split_once(" - ")?;
            (after.starts_with("cgroup2 ")).then(|| fields.split(' ').nth(4).map(str::to_string))?
        })
        .expect("a cgroup v2 mount");
    let own = fs::read_to_string("/proc/self/cgroup").expect("cgroup");
    let own = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .expect("0:: line");
    Path::new(&mount)
        .join(own.trim_start_matches('/'))
        .join(format!("rlock-{pid}"))
}

macro_rules! each_escape {
    ($($name:ident: $way:expr, $escape:expr;)*) => {
        mod lost_lock {
            use super::*;
            $(#[test] fn $name() { if $way == Way::Cgroup { requires_root(); } stopped_on_a_lost_lock($way, $escape) })*
        }
        mod command_ended {
            use super::*;
            $(#[test] fn $name() { if $way == Way::Cgroup { requires_root(); } stopped_before_the_release($way, $escape) })*
        }
        mod rlock_killed_by_name {
            use super::*;
            $(#[test] fn $name() { if $way == Way::Cgroup { requires_root(); } stopped_when_rlock_is_killed_by_name($way, $escape) })*
        }
    };
}

each_escape! {
    timeout_in_a_cgroup: Way::Cgroup, Escape::Timeout;
    set_m_in_a_cgroup: Way::Cgroup, Escape::SetM;
    setpgid_in_a_cgroup: Way::Cgroup, Escape::Setpgid;
    setsid_in_a_cgroup: Way::Cgroup, Escape::Setsid;
    daemon_in_a_cgroup: Way::Cgroup, Escape::Daemon;
    timeout_in_the_tree: Way::Tree, Escape::Timeout;
    set_m_in_the_tree: Way::Tree, Escape::SetM;
    setpgid_in_the_tree: Way::Tree, Escape::Setpgid;
    setsid_in_the_tree: Way::Tree, Escape::Setsid;
    daemon_in_the_tree: Way::Tree, Escape::Daemon;
}

#[test]
fn verbose_says_which_containment_is_in_use_and_the_cgroup_is_removed() {
    requires_root();
    let server = RedisServer::start();
    let script = "tail -n 1 /proc/self/cgroup";
    let out = run(rlock_at(&server).args(["-v", "exec", "-k", KEY, "--", "sh", "-c", script]));
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stderr.contains("contained by its own cgroup"), "{out}");
    let cgroup = out
        .stdout
        .trim()
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_string();
    assert!(
        cgroup.starts_with("rlock-"),
        "the command ran in {:?}",
        out.stdout
    );
    let dir = cgroup_of(cgroup.trim_start_matches("rlock-").parse().expect("a pid"));
    assert!(!dir.exists(), "{} is left behind", dir.display());

    let out = run(rlock_at(&server).args([
        "-v",
        "exec",
        "--contain",
        "tree",
        "-k",
        KEY,
        "--",
        "sh",
        "-c",
        script,
    ]));
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stderr
            .contains("contained by the process tree below the guardian (--contain tree)"),
        "{out}"
    );
    assert!(
        !out.stdout.contains("rlock-"),
        "--contain tree made a cgroup: {}",
        out.stdout
    );
}

/// `setpriv` runs rlock as a user who may write no cgroup: the tree is the fallback, `-v` says
/// why, and a `timeout` inside is still stopped on a lost lock.
pub(super) fn as_user(server: &RedisServer, dir: &Path, args: &[&str]) -> Command {
    let rl = env!("CARGO_BIN_EXE_rlock");
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=54321", "--regid=54321", "--clear-groups", "--"])
        .arg(rl)
        .arg("--url")
        .arg(server.url())
        .args(args)
        .env("D", dir)
        .env("HOME", dir);
    for (name, _) in std::env::vars_os() {
        if name.as_encoded_bytes().starts_with(b"RLOCK_") {
            cmd.env_remove(&name);
        }
    }
    cmd
}

#[test]
fn a_user_who_may_not_write_the_cgroup_is_contained_by_the_tree() {
    requires_root();
    let server = RedisServer::start();
    let dir = open_dir();
    let d = dir.path();
    let _reaper = Reaper(d);
    let script = format!("{} sleep 600", Escape::Timeout.start());
    let mut cmd = as_user(
        &server,
        d,
        &[
            "-v", "exec", "-k", KEY, "--ttl", "3s", "--grace", "300ms", "--", "bash", "-c", &script,
        ],
    );
    cmd.process_group(0);
    let mut rl = Bg::spawn("rlock", d, &mut cmd);
    let (out, exited) = lose_the_lock(&server, &mut rl);
    assert_eq!(out.code, 76, "{out}");
    assert!(
        out.stderr
            .contains("contained by the process tree below the guardian (cannot create a cgroup"),
        "{out}"
    );
    assert_silent_after(d, exited, "a user's rlock's exit 76");

    let out = run(&mut as_user(
        &server,
        d,
        &["exec", "--contain", "cgroup", "-k", KEY, "--", "true"],
    ));
    assert_eq!(out.code, 78, "--contain cgroup without the right to: {out}");
    assert!(
        out.stderr
            .contains("--contain cgroup: cannot create a cgroup"),
        "{out}"
    );
    assert!(!server.exists(LOCK), "the lock was kept after a refusal");
}

/// A process whose name the kernel cut inside a character (15 bytes of `ÄÄÄÄÄÄÄÄ.sh`) is found
/// by the tree walk like any other, and so is everything below it.
#[test]
fn a_name_cut_inside_a_character_does_not_hide_a_process() {
    let server = RedisServer::start();
    let dir = open_dir();
    let d = dir.path();
    let _reaper = Reaper(d);
    let script = d.join("ÄÄÄÄÄÄÄÄ.sh");
    fs::write(&script, format!("#!/bin/sh\n{LOOP}\n")).expect("write the script");
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).expect("chmod");
    let mut cmd = rlock_at(&server);
    cmd.args([
        "exec",
        "--contain",
        "tree",
        "-k",
        KEY,
        "--ttl",
        "3s",
        "--grace",
        "300ms",
    ])
    .args(["--", "bash", "-c", r#"setsid "$D/ÄÄÄÄÄÄÄÄ.sh" & sleep 600"#]);
    let mut rl = Bg::spawn_group("rlock", d, &mut cmd);
    let (out, exited) = lose_the_lock(&server, &mut rl);
    assert_eq!(out.code, 76, "{out}");
    assert_silent_after(d, exited, "a process with a cut name");
}
