//! The whole group, every time: the lost-lock signals reach every process of the command's group
//! whether or not the command itself has exited, rlock exits 76 only once the group is empty or
//! SIGKILLed, and what a command that ended normally left running in its group is stopped before
//! the lock is released. Judged by the group's own heartbeats, not by rlock's exit.

use crate::common::{Background as Bg, RedisServer, rlock_at, run, wait_until};
use std::fs;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const KEY: &str = "grp";
const LOCK: &str = "rlock:grp";

/// A member of the command's group that ignores SIGTERM and writes the wall clock (ns) to
/// `$D/hb` every 20 ms, started in the background by the command's shell.
const STUBBORN: &str = r#"(trap "" TERM; while :; do date +%s%N > "$D/hb.tmp"; mv "$D/hb.tmp" "$D/hb"; sleep 0.02; done) &"#;

pub(super) fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos() as i64
}

/// The last heartbeat's time (ns), once there is one.
pub(super) fn heartbeat(dir: &Path) -> Option<i64> {
    fs::read_to_string(dir.join("hb")).ok()?.trim().parse().ok()
}

/// The group wrote no heartbeat after `exited` (ns): nothing of it runs on. Waits a while for a
/// straggler to show itself.
#[track_caller]
fn assert_silent_after(dir: &Path, exited: i64) {
    let seen = heartbeat(dir).expect("the group wrote heartbeats");
    assert!(
        seen <= exited,
        "a heartbeat {} ms after rlock exited",
        (seen - exited) / 1_000_000
    );
    // Long enough for a dozen heartbeats of a member that still ran.
    let quiet_until = std::time::Instant::now() + Duration::from_millis(300);
    wait_until("the quiet period", Duration::from_secs(2), || {
        std::time::Instant::now() >= quiet_until
    });
    assert_eq!(
        heartbeat(dir),
        Some(seen),
        "the group ran on after rlock exited"
    );
}

/// `rlock exec` of `script` under `sh -c`; the command's process group id goes to `$D/pgid`.
fn exec_in(server: &RedisServer, dir: &Path, opts: &[&str], script: &str) -> Bg {
    let mut cmd = rlock_at(server);
    cmd.args(["exec", "-k", KEY]).args(opts).args([
        "--",
        "sh",
        "-c",
        &format!(r#"echo $$ > "$D/pgid"; {script}"#),
    ]);
    Bg::spawn_group("rlock", dir, &mut cmd)
}

/// Kills what is left of the command's group when a test ends, passed or failed: a build that
/// leaves the group running (the defect these tests catch) must not leave it running for ever.
struct Reaper<'a>(&'a Path);

impl Drop for Reaper<'_> {
    fn drop(&mut self) {
        if let Some(pgid) = fs::read_to_string(self.0.join("pgid"))
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok())
        {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pgid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

#[test]
fn a_broken_lock_stops_the_group_after_its_leader_died_of_term() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let _reaper = Reaper(d);
    // sh dies of SIGTERM at once; its background member ignores it.
    let script = format!("{STUBBORN} wait");
    // Renewed every second: the break is found within one.
    let mut rl = exec_in(&server, d, &["--ttl", "3s", "--grace", "500ms"], &script);
    rl.wait_for("heartbeats", Duration::from_secs(10), || {
        heartbeat(d).is_some()
    });
    let broken = now_ns();
    let out = run(rlock_at(&server).args(["release", "-k", KEY, "--force"]));
    assert_eq!(out.code, 0, "{out}");
    let (out, _) = rl.finish(Duration::from_secs(10));
    let exited = now_ns();
    assert_eq!(out.code, 76, "{out}");
    assert_silent_after(d, exited);
    let took = (exited - broken) / 1_000_000;
    assert!(
        (400..3_000).contains(&took),
        "rlock exited {took} ms after the break: it finds it within a renewal (1s), then waits --grace (500ms) for the SIGKILL"
    );
}

#[test]
fn a_lease_that_runs_out_stops_the_group_after_its_leader_died_of_term() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let _reaper = Reaper(d);
    let script = format!("{STUBBORN} wait");
    let mut rl = exec_in(&server, d, &["--ttl", "2s", "--grace", "500ms"], &script);
    rl.wait_for("heartbeats", Duration::from_secs(10), || {
        heartbeat(d).is_some()
    });
    server.freeze();
    let frozen = now_ns();
    let (out, _) = rl.finish(Duration::from_secs(10));
    let exited = now_ns();
    server.thaw();
    assert_eq!(out.code, 76, "{out}");
    assert_silent_after(d, exited);
    // The lease was renewed at most --ttl before the freeze: the group is gone by the deadline.
    let last = heartbeat(d).expect("heartbeats");
    assert!(
        last - frozen < 2_000_000_000,
        "a heartbeat {} ms after the freeze, past the lease",
        (last - frozen) / 1_000_000
    );
}

#[test]
fn what_a_command_leaves_running_is_stopped_before_the_release() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let _reaper = Reaper(d);
    // The command ends at once, with status 3; its member ignores TERM and runs on.
    let script = format!(r#"{STUBBORN} while [ ! -e "$D/hb" ]; do sleep 0.01; done; exit 3"#);
    let mut rl = exec_in(&server, d, &["--ttl", "10s", "--grace", "500ms"], &script);
    let (out, _) = rl.finish(Duration::from_secs(10));
    let exited = now_ns();
    assert_eq!(out.code, 3, "the command's own status: {out}");
    assert_silent_after(d, exited);
    assert!(!server.exists(LOCK), "the lock was not released");
}

#[test]
fn a_leftover_that_obeys_term_costs_no_grace() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let _reaper = Reaper(d);
    let started = std::time::Instant::now();
    let script = r#"sleep 30 & echo $! > "$D/pid"; exit 0"#;
    let mut rl = exec_in(&server, d, &["--ttl", "30s"], script);
    let (out, exited) = rl.finish(Duration::from_secs(20));
    assert_eq!(out.code, 0, "{out}");
    assert!(
        exited - started < Duration::from_secs(5),
        "rlock waited {:?}: the default grace is 7.5s, TERM alone should do",
        exited - started
    );
    let pid: i32 = fs::read_to_string(d.join("pid"))
        .expect("pid file")
        .trim()
        .parse()
        .expect("a pid");
    assert!(
        !crate::common::pid_alive(pid),
        "the leftover sleep {pid} still runs"
    );
    assert!(!server.exists(LOCK));
}
