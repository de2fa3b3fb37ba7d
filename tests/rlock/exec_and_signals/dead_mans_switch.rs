//! The guardian is a dead man's switch: nothing inside or outside the command switches
//! containment off. A command that stops its guardian, rlock stopped, rlock and its guardian
//! both killed, a root command that moves a child out of its cgroup: in each, no heartbeat of
//! the first command comes after the next holder's first one. Judged by the command's own
//! heartbeats (the escaped loop of `containment.rs`) against the second holder's.

use super::containment::{
    Escape, KEY, LOCK, Reaper, Way, as_user, assert_silent_after, cgroup_of, exec, guardian_of,
    loop_alive, open_dir, requires_root,
};
use super::process_group::heartbeat;
use crate::common::{Background as Bg, Output, RedisServer, rlock_at, run, wait_until};
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// A short lease, so that a test outlives it several times over.
const SHORT: &[&str] = &["--ttl", "2s", "--grace", "500ms"];

/// The second holder: `rlock exec -n` on `key`, whose command writes its start (ns) to
/// `$D/second`. Returns its output and that time.
fn second_holder(server: &RedisServer, d: &Path, key: &str, extra: &[&str]) -> (Output, i64) {
    let out = run(rlock_at(server)
        .args(extra)
        .args(["exec", "-n", "-k", key, "--", "sh", "-c"])
        .arg(r#"date +%s%N > "$D/second""#)
        .env("D", d));
    let at = fs::read_to_string(d.join("second"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("the second holder's command did not run: {out}"));
    (out, at)
}

/// Waits (up to `within`) until the lock key has expired, polling Redis.
fn wait_for_expiry(server: &RedisServer, within: Duration) {
    wait_until("the first lease to expire", within, || !server.exists(LOCK));
}

/// A command that stops its guardian (`kill -STOP $PPID`) and then Redis frozen past the TTL:
/// the guardian does not stay stopped (rlock, its parent, continues it), and it stops the
/// escaped loop by the deadline, before the next holder's first heartbeat.
fn stops_its_guardian_then_redis_freezes(mut rl: Bg, server: &RedisServer, d: &Path) {
    rl.wait_for("heartbeats", Duration::from_secs(10), || {
        heartbeat(d).is_some()
    });
    server.freeze();
    let frozen = Instant::now() + Duration::from_secs(3);
    wait_until(
        "the lease to pass, Redis frozen",
        Duration::from_secs(5),
        || Instant::now() >= frozen,
    );
    server.thaw();
    let (out, _) = rl.finish(Duration::from_secs(15));
    assert_eq!(out.code, 76, "{out}");
    let (second, at) = second_holder(server, d, KEY, &[]);
    assert_eq!(second.code, 0, "{second}");
    assert_silent_after(d, at, "the second holder's first heartbeat");
}

#[test]
fn a_command_that_stops_its_guardian_as_root_is_stopped_when_redis_freezes() {
    requires_root();
    let server = RedisServer::start();
    let dir = open_dir();
    let d = dir.path();
    let _reaper = Reaper(d);
    let then = "kill -STOP $PPID; sleep 600";
    let rl = exec(&server, d, Way::Tree, SHORT, Escape::Setsid, then);
    stops_its_guardian_then_redis_freezes(rl, &server, d);
}

#[test]
fn a_command_that_stops_its_guardian_as_a_user_is_stopped_when_redis_freezes() {
    requires_root();
    let server = RedisServer::start();
    let dir = open_dir();
    let d = dir.path();
    let _reaper = Reaper(d);
    let script = format!("{} kill -STOP $PPID; sleep 600", Escape::Setsid.start());
    let mut args = vec!["-v", "exec", "-k", KEY];
    args.extend_from_slice(SHORT);
    args.extend_from_slice(&["--", "bash", "-c", &script]);
    let mut cmd = as_user(&server, d, &args);
    cmd.process_group(0);
    let rl = Bg::spawn("rlock", d, &mut cmd);
    stops_its_guardian_then_redis_freezes(rl, &server, d);
}

/// A command whose very first step stops its guardian, Redis healthy: the lease is renewed all
/// along (a second `exec -n` finds the lock busy long after the TTL), and once the run ends
/// nothing of it runs on.
#[test]
fn a_command_whose_first_step_stops_its_guardian_is_renewed_and_stopped_at_its_end() {
    let server = RedisServer::start();
    let dir = open_dir();
    let d = dir.path();
    let _reaper = Reaper(d);
    let mut cmd = rlock_at(&server);
    cmd.args(["exec", "--contain", "tree", "-k", KEY])
        .args(SHORT)
        .args(["--", "bash", "-c"])
        .arg(format!(
            "kill -STOP $PPID; {} sleep 600",
            Escape::Setsid.start()
        ))
        .env("D", d);
    let mut rl = Bg::spawn_group("rlock", d, &mut cmd);
    rl.wait_for("heartbeats", Duration::from_secs(10), || {
        heartbeat(d).is_some()
    });
    let token = server.get(LOCK).expect("the lock");
    // Three TTLs: only renewals keep the key.
    let until = Instant::now() + Duration::from_secs(6);
    rl.wait_for("three TTLs", Duration::from_secs(8), || {
        Instant::now() >= until
    });
    assert_eq!(server.get(LOCK), Some(token), "the lease was not renewed");
    let busy = run(rlock_at(&server).args(["exec", "-n", "-k", KEY, "--", "true"]));
    assert_eq!(busy.code, 75, "the lock was not held: {busy}");
    rl.kill(Signal::SIGTERM);
    let (out, _) = rl.finish(Duration::from_secs(10));
    assert_eq!(out.code, 143, "{out}");
    let (second, at) = second_holder(&server, d, KEY, &[]);
    assert_eq!(second.code, 0, "{second}");
    assert_silent_after(d, at, "the second holder's first heartbeat");
}

/// rlock stopped (SIGSTOP: a debugger, a freezer): nothing renews, but the guardian holds the
/// deadline, and stops everything the command started, the escaped loop included, before the
/// lease can lapse. Continued, rlock says the lock was lost (76).
fn stopped_rlock(way: Way) {
    let server = RedisServer::start();
    let dir = open_dir();
    let d = dir.path();
    let _reaper = Reaper(d);
    let mut rl = exec(&server, d, way, SHORT, Escape::Setsid, "sleep 600");
    rl.wait_for("heartbeats", Duration::from_secs(10), || {
        heartbeat(d).is_some()
    });
    rl.kill(Signal::SIGSTOP);
    wait_for_expiry(&server, Duration::from_secs(10));
    let (second, at) = second_holder(&server, d, KEY, &[]);
    assert_eq!(second.code, 0, "{second}");
    assert_silent_after(d, at, "the second holder's first heartbeat");
    rl.kill(Signal::SIGCONT);
    let (out, _) = rl.finish(Duration::from_secs(10));
    assert_eq!(out.code, 76, "{out}");
}

#[test]
fn a_stopped_rlocks_guardian_stops_the_cgroup_by_the_deadline() {
    requires_root();
    stopped_rlock(Way::Cgroup);
}

#[test]
fn a_stopped_rlocks_guardian_stops_the_tree_by_the_deadline() {
    stopped_rlock(Way::Tree);
}

/// A cgroup of the test's own, below the test's: rlocks started in it make their cgroups
/// there, out of sight of the other tests' rlocks (which stop what dead rlocks left beside
/// theirs). Removed on drop.
struct TestCgroup(PathBuf);

impl TestCgroup {
    fn new(name: &str) -> TestCgroup {
        let own = cgroup_of(std::process::id() as i32);
        let dir = own
            .parent()
            .expect("the test's cgroup")
            .join(format!("test-{name}-{}", std::process::id()));
        fs::create_dir(&dir).expect("a cgroup for the test");
        TestCgroup(dir)
    }

    /// `rlock ARGS`, started in this cgroup.
    fn rlock(&self, server: &RedisServer, d: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!(
                r#"echo $$ > "{}/cgroup.procs" && exec "$RL" --url "$URL" "$@""#,
                self.0.display()
            ))
            .arg("sh")
            .args(args)
            .env("RL", env!("CARGO_BIN_EXE_rlock"))
            .env("URL", server.url())
            .env("D", d);
        for (name, _) in std::env::vars_os() {
            if name.as_encoded_bytes().starts_with(b"RLOCK_") {
                cmd.env_remove(&name);
            }
        }
        cmd
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let until = Instant::now() + Duration::from_secs(5);
        while fs::remove_dir(&self.0).is_err() && self.0.exists() && Instant::now() < until {
            let _ = fs::write(self.0.join("cgroup.kill"), "1");
            for sub in fs::read_dir(&self.0).into_iter().flatten().flatten() {
                if sub.path().is_dir() {
                    let _ = fs::write(sub.path().join("cgroup.kill"), "1");
                    let _ = fs::remove_dir(sub.path());
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// rlock and its guardian both SIGKILLed (an OOM killer, `kill -9` of both): nobody is left to
/// stop the escaped loop, whose `rlock-PID` cgroup stays populated; the next rlock on the host
/// (another key, another lock) stops it, removes the cgroup, and says so under `-v`, before its
/// own command starts.
#[test]
fn rlock_and_its_guardian_killed_the_next_rlock_stops_what_they_left() {
    requires_root();
    let server = RedisServer::start();
    let dir = open_dir();
    let d = dir.path();
    let _reaper = Reaper(d);
    let cgroup = TestCgroup::new("abandoned");
    let script = format!("{} sleep 600", Escape::Setsid.start());
    let args = [
        "exec",
        "--contain",
        "cgroup",
        "-k",
        KEY,
        "--ttl",
        "30s",
        "--",
        "bash",
        "-c",
        &script,
    ];
    let mut rl = Bg::spawn_group("rlock", d, &mut cgroup.rlock(&server, d, &args));
    rl.wait_for("heartbeats", Duration::from_secs(10), || {
        heartbeat(d).is_some()
    });
    let top = rl.pid();
    let guardian = guardian_of(top).expect("a guardian");
    // Both at once: stopped first, so that neither sees the other die and acts.
    for sig in [Signal::SIGSTOP, Signal::SIGKILL] {
        let _ = kill(Pid::from_raw(guardian), sig);
        let _ = kill(Pid::from_raw(top), sig);
    }
    let _ = rl.finish(Duration::from_secs(5));
    let left = cgroup.0.join(format!("rlock-{top}"));
    let before = heartbeat(d).expect("heartbeats");
    wait_until(
        "a heartbeat of the escaped loop after both were killed",
        Duration::from_secs(5),
        || heartbeat(d).is_some_and(|hb| hb > before),
    );
    assert!(left.exists(), "{} is gone", left.display());

    let out = run(&mut cgroup.rlock(
        &server,
        d,
        &[
            "-v",
            "exec",
            "-k",
            "other",
            "--",
            "sh",
            "-c",
            r#"date +%s%N > "$D/second""#,
        ],
    ));
    assert_eq!(out.code, 0, "{out}");
    let at: i64 = fs::read_to_string(d.join("second"))
        .expect("the second command ran")
        .trim()
        .parse()
        .expect("ns");
    assert!(
        out.stderr.contains(&format!(
            "stopped what an rlock no longer running left in {}",
            left.display()
        )),
        "{out}"
    );
    assert_silent_after(d, at, "the next rlock's command");
    assert!(!left.exists(), "{} was not removed", left.display());
}

/// The cgroup v2 hierarchy's root directory (where a root command can move a process out of
/// every rlock cgroup).
fn cgroup_root() -> PathBuf {
    let info = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    info.lines()
        .find_map(|l| {
            let (fields, after) = l.split_once(" - ")?;
            let mut fields = fields.split(' ');
            let root = fields.nth(3)?;
            let point = fields.next()?;
            (after.starts_with("cgroup2 ") && root == "/").then(|| PathBuf::from(point))
        })
        .expect("a cgroup v2 mount of the hierarchy's root")
}

/// A root command that moves its escaped loop out of its cgroup (into the hierarchy's root),
/// then a lost lock: the loop is still below the guardian, a subreaper, and stopped with the
/// rest before rlock exits 76.
#[test]
fn a_child_moved_out_of_the_cgroup_is_stopped_on_a_lost_lock() {
    requires_root();
    let server = RedisServer::start();
    let dir = open_dir();
    let d = dir.path();
    let _reaper = Reaper(d);
    let root = cgroup_root();
    let then = format!(
        r#"while [ ! -s "$D/esc.pid" ]; do sleep 0.01; done; cat "$D/esc.pid" > "{}/cgroup.procs" && : > "$D/moved"; sleep 600"#,
        root.display()
    );
    let mut rl = exec(&server, d, Way::Cgroup, SHORT, Escape::Setsid, &then);
    rl.wait_for("the loop moved", Duration::from_secs(10), || {
        d.join("moved").exists() && heartbeat(d).is_some()
    });
    let pid = loop_alive(d).expect("the loop");
    let cgroup = fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("its cgroup");
    assert!(cgroup.lines().any(|l| l == "0::/"), "not moved: {cgroup}");
    server.cmd(&["DEL", LOCK]);
    let (out, _) = rl.finish(Duration::from_secs(15));
    let exited = super::process_group::now_ns();
    assert_eq!(out.code, 76, "{out}");
    let (second, at) = second_holder(&server, d, KEY, &[]);
    assert_eq!(second.code, 0, "{second}");
    assert_silent_after(d, exited.min(at), "rlock's exit 76");
}

/// What docs/exec.md says still escapes: a process started through another service (here a
/// stand-in for `systemd-run`, `at` or `ssh localhost`: a process the test started, which starts
/// the loop when the command asks) is neither the command's descendant nor in its cgroup, and
/// runs on after a lost lock.
#[test]
fn a_process_started_through_another_service_escapes() {
    requires_root();
    let server = RedisServer::start();
    let dir = open_dir();
    let d = dir.path();
    let _reaper = Reaper(d);
    let service = format!(
        r#"while [ ! -e "$D/request" ]; do sleep 0.01; done; {} wait"#,
        Escape::Setsid.start()
    );
    let _service = Bg::spawn_group(
        "service",
        d,
        Command::new("sh").args(["-c", &service]).env("D", d),
    );
    let mut cmd = rlock_at(&server);
    cmd.args(["exec", "--contain", "cgroup", "-k", KEY])
        .args(SHORT)
        .args(["--", "sh", "-c", r#": > "$D/request"; sleep 600"#])
        .env("D", d);
    let mut rl = Bg::spawn_group("rlock", d, &mut cmd);
    rl.wait_for("heartbeats", Duration::from_secs(10), || {
        heartbeat(d).is_some()
    });
    server.cmd(&["DEL", LOCK]);
    let (out, _) = rl.finish(Duration::from_secs(15));
    assert_eq!(out.code, 76, "{out}");
    let exited = super::process_group::now_ns();
    wait_until(
        "a heartbeat of the service's loop after rlock's exit",
        Duration::from_secs(5),
        || heartbeat(d).is_some_and(|hb| hb > exited),
    );
    assert!(loop_alive(d).is_some(), "the service's loop was stopped");
}
