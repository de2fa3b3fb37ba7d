//! docs/safety.md's threat model, line by line: a command of the same user cannot reach rlock
//! or its guardian (neither is dumpable); a root command that forges the guardian's "nothing
//! left" is not believed (rlock waits for the guardian's end and looks itself); rlock stopped on
//! a loaded host, its guardian's SIGKILL still lands before the key can expire. Judged by what
//! the command could open, and by the escaped loop's heartbeats against the next holder's start.

use super::containment::{
    Escape, KEY, LOCK, Reaper, Way, as_user, assert_silent_after, cgroup_of, exec, open_dir,
    requires_root,
};
use super::process_group::heartbeat;
use crate::common::{Background as Bg, Output, RedisServer, rlock_at};
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::Signal;

/// A short lease, so that a test outlives it.
const SHORT: &[&str] = &["--ttl", "2s", "--grace", "500ms"];

/// What a command of the same user tries on its guardian ($PPID) and on rlock (the guardian's
/// parent), each line "WHAT ok" or "WHAT refused": list and open their descriptors, read their
/// environment (a ptrace-mode check, as /proc/PID/mem is), and the same on itself.
const PROBE: &str = r#"
g=$PPID; r=$(cut -d' ' -f4 /proc/$g/stat)
try() { if eval "$2" >/dev/null 2>&1; then echo "$1 ok"; else echo "$1 refused"; fi; }
{
  try guardian-fd "ls /proc/$g/fd"
  try guardian-open "exec 9>/proc/$g/fd/4"
  try guardian-environ "cat /proc/$g/environ"
  try rlock-fd "ls /proc/$r/fd"
  try rlock-environ "cat /proc/$r/environ"
  try own-fd "ls /proc/$$/fd"
  try own-environ "cat /proc/$$/environ"
} > "$D/probe"
"#;

/// A command running as the same (non-root) user as rlock can neither list nor open the
/// descriptors of its guardian or of rlock, nor read their memory or environment: the pipes
/// between them are out of its reach, so it cannot speak in the guardian's name. The command
/// itself, a new program, is dumpable as usual.
#[test]
fn a_command_of_the_same_user_cannot_reach_rlock_or_its_guardian() {
    requires_root();
    let server = RedisServer::start();
    let dir = open_dir();
    let d = dir.path();
    let args = ["exec", "-k", KEY, "--", "bash", "-c", PROBE];
    let out = crate::common::run(&mut as_user(&server, d, &args));
    assert_eq!(out.code, 0, "{out}");
    let probe = fs::read_to_string(d.join("probe")).expect("the probe ran");
    let lines: Vec<&str> = probe.lines().collect();
    assert_eq!(
        lines,
        [
            "guardian-fd refused",
            "guardian-open refused",
            "guardian-environ refused",
            "rlock-fd refused",
            "rlock-environ refused",
            "own-fd ok",
            "own-environ ok",
        ],
        "{probe}"
    );
}

/// Notes in `$D/forged` that it forges, then writes the guardian's "the command exited 0" and
/// "nothing left" into every pipe the guardian ($1) holds, past its standard descriptors, and
/// keeps the guardian stopped (a process of its own stops it again every 0.1 ms for
/// a few seconds, whoever continues it), so that only rlock itself can stop the command in time.
const FORGE: &str = r#"
import os, signal, struct, sys, time
g = sys.argv[1]
open(os.environ["D"] + "/forged", "w").write("forging")
lie = struct.pack("=iii", 5, 0, 0) + struct.pack("=iii", 6, 0, 0)
for fd in os.listdir(f"/proc/{g}/fd"):
    path = f"/proc/{g}/fd/{fd}"
    try:
        if int(fd) > 2 and os.readlink(path).startswith("pipe:"):
            w = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            os.write(w, lie)
            os.close(w)
    except OSError:
        pass
if os.fork() == 0:
    os.setsid()
    for _ in range(50000):
        try:
            os.kill(int(g), signal.SIGSTOP)
        except OSError:
            break
        time.sleep(0.0001)
    os._exit(0)
"#;

/// A root command (which can open its guardian's descriptors: root is not held off by
/// non-dumpable) forges "exited 0, nothing left" and stops its guardian while an escaped loop
/// runs on: rlock does not release on the guardian's word alone. It waits for the guardian's
/// end, which does not come, stops everything itself, and only then gives the lock back: the
/// next holder, waiting from the forgery on, starts after the loop's last heartbeat.
fn a_forged_nothing_left_is_not_believed(way: Way) {
    requires_root();
    let server = RedisServer::start();
    let dir = open_dir();
    let d = dir.path();
    let _reaper = Reaper(d);
    fs::write(d.join("forge.py"), FORGE).expect("forge.py");
    let then =
        r#"until [ -e "$D/go" ]; do sleep 0.01; done; python3 "$D/forge.py" $PPID; sleep 600"#;
    let mut rl = exec(&server, d, way, &["--ttl", "30s"], Escape::Setsid, then);
    rl.wait_for("heartbeats", Duration::from_secs(10), || {
        heartbeat(d).is_some()
    });
    // The next holder waits in line before the forgery: it starts the moment the lock is free.
    let second = next_holder_in_line(&server, d);
    fs::write(d.join("go"), "").expect("go");
    let (second, at) = next_holder_ran(second, d, Duration::from_secs(40));
    assert_eq!(second.code, 0, "{second}");
    assert!(d.join("forged").exists(), "the forgery did not run");
    assert_silent_after(d, at, "the next holder's start");
    let (out, _) = rl.finish(Duration::from_secs(10));
    assert!(!server.exists(LOCK), "{out}");
}

/// Three rounds each: a rlock that believed the forgery lets the loop outlive the release in
/// about half the rounds (the guardian sometimes finishes its kill between two stops).
#[test]
fn a_forged_nothing_left_is_not_believed_in_the_tree() {
    for _ in 0..3 {
        a_forged_nothing_left_is_not_believed(Way::Tree);
    }
}

#[test]
fn a_forged_nothing_left_is_not_believed_in_a_cgroup() {
    for _ in 0..3 {
        a_forged_nothing_left_is_not_believed(Way::Cgroup);
    }
}

/// In a cgroup, a lost lease ends in `cgroup.kill`: a process put in the command's cgroup from
/// outside (by root), which is below neither the guardian nor rlock and ignores the lost-signal,
/// is reached by nothing else, and is SIGKILLed by the time rlock has exited 76. The command
/// itself ends at the lost-signal, so that the guardian never has to escalate on its own.
#[test]
fn a_lost_lease_in_a_cgroup_ends_in_cgroup_kill() {
    a_stop_in_a_cgroup_ends_in_cgroup_kill(&[], 76);
}

/// The command's time limit likewise (exit 124).
#[test]
fn a_time_limit_in_a_cgroup_ends_in_cgroup_kill() {
    a_stop_in_a_cgroup_ends_in_cgroup_kill(&["--timeout", "1s"], 124);
}

/// A process started by the test, in a group of its own, killed when dropped.
struct Stranger(Child);

impl Drop for Stranger {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn a_stop_in_a_cgroup_ends_in_cgroup_kill(opts: &[&str], code: i32) {
    use std::os::unix::process::ExitStatusExt;
    requires_root();
    let server = RedisServer::start();
    let dir = open_dir();
    let d = dir.path();
    let mut cmd = rlock_at(&server);
    cmd.args(["exec", "--contain", "cgroup", "-k", KEY])
        .args(SHORT)
        .args(opts)
        .args([
            "--",
            "sh",
            "-c",
            r#"echo $$ > "$D/cmd.pid"; exec sleep 600"#,
        ]);
    let mut rl = Bg::spawn_group("rlock", d, &mut cmd);
    rl.wait_for("the command", Duration::from_secs(10), || {
        d.join("cmd.pid").exists()
    });
    let mut stranger = Stranger(
        Command::new("sh")
            .args(["-c", r#"trap "" TERM; exec sleep 600"#])
            .process_group(0)
            .spawn()
            .expect("a stranger"),
    );
    let procs = cgroup_of(rl.pid()).join("cgroup.procs");
    fs::write(&procs, stranger.0.id().to_string()).expect("the stranger put in the cgroup");
    if code == 76 {
        server.cmd(&["DEL", LOCK]);
    }
    let (out, _) = rl.finish(Duration::from_secs(10));
    assert_eq!(out.code, code, "{out}");
    // SIGKILLed (by nobody but rlock and its guardian), and reaped by the test a moment later.
    let until = std::time::Instant::now() + Duration::from_secs(1);
    let status = loop {
        match stranger.0.try_wait().expect("try_wait") {
            Some(status) => break status,
            None if std::time::Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(5));
            }
            None => panic!("the stranger in the cgroup outlived rlock's exit: {out}"),
        }
    };
    assert_eq!(status.signal(), Some(Signal::SIGKILL as i32), "{status:?}");
}

/// Two busy loops per CPU, stopped when dropped.
struct Load(Vec<Child>);

impl Load {
    fn start() -> Load {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        let loops = (0..2 * cpus)
            .map(|_| {
                Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .stdout(Stdio::null())
                    .process_group(0)
                    .spawn()
                    .expect("a busy loop")
            })
            .collect();
        Load(loops)
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// rlock stopped (SIGSTOP), the command contained by the tree alone, the host loaded with two
/// busy loops per CPU, and the next holder waiting from the stop on (so that it starts the
/// moment the key expires): the guardian's SIGKILL, which must be scheduled among the loops and
/// walk /proc, still lands before the key can expire. No heartbeat of the escaped loop after
/// the next holder's start.
#[test]
fn a_stopped_rlocks_kill_lands_before_the_key_expires_on_a_loaded_host() {
    let server = RedisServer::start();
    let dir = open_dir();
    let d = dir.path();
    let _reaper = Reaper(d);
    let mut rl = exec(&server, d, Way::Tree, SHORT, Escape::Setsid, "sleep 600");
    rl.wait_for("heartbeats", Duration::from_secs(10), || {
        heartbeat(d).is_some()
    });
    let load = Load::start();
    rl.kill(Signal::SIGSTOP);
    let (second, at) = next_holder(&server, d);
    drop(load);
    assert_eq!(second.code, 0, "{second}");
    assert_silent_after(d, at, "the next holder's start");
    rl.kill(Signal::SIGCONT);
    let (out, _) = rl.finish(Duration::from_secs(10));
    assert_eq!(out.code, 76, "{out}");
}

/// `rlock exec -w WAIT` on the test's key, its command writing its start (ns) to `$D/second`.
fn next_holder_cmd(server: &RedisServer, d: &Path, wait: &str) -> Command {
    let mut cmd = rlock_at(server);
    cmd.args(["exec", "-w", wait, "-k", KEY, "--", "sh", "-c"])
        .arg(r#"date +%s%N > "$D/second""#)
        .env("D", d);
    cmd
}

/// The next holder, run to its end.
fn next_holder(server: &RedisServer, d: &Path) -> (Output, i64) {
    let cmd = &mut next_holder_cmd(server, d, "20s");
    next_holder_ran(Bg::spawn("next holder", d, cmd), d, Duration::from_secs(30))
}

/// The next holder (`-w 30s`), once it waits in line: it starts the moment the lock is free.
fn next_holder_in_line(server: &RedisServer, d: &Path) -> Bg {
    let mut second = Bg::spawn("next holder", d, &mut next_holder_cmd(server, d, "30s"));
    let queue = crate::common::basic::queue_key(KEY);
    second.wait_for("the next holder in line", Duration::from_secs(10), || {
        crate::common::basic::q::<i64>(server, &["ZCARD", &queue]) == 1
    });
    second
}

/// How the next holder ended (within `timeout`), and when its command started (ns).
fn next_holder_ran(mut second: Bg, d: &Path, timeout: Duration) -> (Output, i64) {
    let (out, _) = second.finish(timeout);
    let at = fs::read_to_string(d.join("second"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("the next holder's command did not run: {out}"));
    (out, at)
}

/// A command running as the same (non-root) user tries the forgery above: it cannot even list
/// its guardian's descriptors (`$D/forged` says "refused"), so rlock and the guardian go on as
/// if nothing happened: the lock stays held, then the time limit stops everything, the escaped
/// loop included, before the next holder (waiting in line from the forgery on) starts. In a
/// cgroup, the user's rlock runs in a cgroup delegated to the user, as systemd delegates one.
fn a_users_forgery_reaches_nothing(way: Way) {
    requires_root();
    let server = RedisServer::start();
    let dir = open_dir();
    let d = dir.path();
    let _reaper = Reaper(d);
    fs::write(d.join("forge.py"), FORGE.replace("for fd in", REFUSED)).expect("forge.py");
    let then =
        r#"until [ -e "$D/go" ]; do sleep 0.01; done; python3 "$D/forge.py" $PPID; sleep 600"#;
    let script = format!("{} {then}", Escape::Setsid.start());
    let args = [
        "-v",
        "exec",
        "--contain",
        way_flag(way),
        "-k",
        KEY,
        "--ttl",
        "30s",
        "--grace",
        "300ms",
        "--timeout",
        "3s",
        "--",
        "bash",
        "-c",
        &script,
    ];
    let delegated = (way == Way::Cgroup).then(Delegated::new);
    let mut cmd = as_user(&server, d, &args);
    if let Some(cgroup) = &delegated {
        cmd = cgroup.enter(cmd);
    }
    let mut rl = Bg::spawn_group("rlock", d, &mut cmd);
    rl.wait_for("heartbeats", Duration::from_secs(10), || {
        heartbeat(d).is_some()
    });
    let second = next_holder_in_line(&server, d);
    fs::write(d.join("go"), "").expect("go");
    rl.wait_for("the forgery's try", Duration::from_secs(10), || {
        fs::read_to_string(d.join("forged")).is_ok_and(|s| s == "refused")
    });
    assert!(
        server.exists(LOCK),
        "the lock is still held after the forgery"
    );
    let (second, at) = next_holder_ran(second, d, Duration::from_secs(40));
    assert_eq!(second.code, 0, "{second}");
    assert_silent_after(d, at, "the next holder's start");
    let (out, _) = rl.finish(Duration::from_secs(10));
    assert_eq!(
        out.code, 124,
        "the time limit, not the forgery, ended the run: {out}"
    );
    if way == Way::Cgroup {
        assert!(
            !out.stderr.contains("contained by the process tree"),
            "the user's rlock used its delegated cgroup: {out}"
        );
    }
}

/// The forgery's first step for a user: listing the guardian's descriptors is refused.
const REFUSED: &str = r#"try:
    os.listdir(f"/proc/{g}/fd")
except PermissionError:
    open(os.environ["D"] + "/forged", "w").write("refused")
    sys.exit(1)
for fd in"#;

fn way_flag(way: Way) -> &'static str {
    match way {
        Way::Cgroup => "cgroup",
        Way::Tree => "tree",
    }
}

/// A cgroup below the test's own, owned by the test user (its directory and the files a
/// delegation hands over), removed when dropped.
struct Delegated(std::path::PathBuf);

impl Delegated {
    fn new() -> Delegated {
        let own = fs::read_to_string("/proc/self/cgroup").expect("/proc/self/cgroup");
        let own = own
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .expect("a cgroup v2");
        let mounts = fs::read_to_string("/proc/self/mounts").expect("/proc/self/mounts");
        let mount = mounts
            .lines()
            .find_map(|l| {
                let mut fields = l.split(' ');
                let at = fields.nth(1)?;
                (fields.next() == Some("cgroup2")).then_some(at)
            })
            .expect("cgroup v2 mounted");
        let dir = Path::new(mount)
            .join(own.trim_start_matches('/'))
            .join(format!("delegated-{}", crate::common::free_port()));
        fs::create_dir(&dir).expect("a cgroup for the user");
        for path in [
            "",
            "cgroup.procs",
            "cgroup.threads",
            "cgroup.subtree_control",
        ] {
            let path = dir.join(path);
            std::os::unix::fs::chown(&path, Some(54321), Some(54321)).expect("chown");
        }
        Delegated(dir)
    }

    /// `cmd`, started from inside the cgroup (a shell moves itself there, then runs it).
    fn enter(&self, cmd: Command) -> Command {
        let mut sh = Command::new("sh");
        sh.args(["-c", r#"echo $$ > "$0/cgroup.procs" && exec "$@""#])
            .arg(&self.0)
            .arg(cmd.get_program())
            .args(cmd.get_args());
        for (name, value) in cmd.get_envs() {
            match value {
                Some(value) => sh.env(name, value),
                None => sh.env_remove(name),
            };
        }
        sh
    }
}

impl Drop for Delegated {
    fn drop(&mut self) {
        for sub in fs::read_dir(&self.0).into_iter().flatten().flatten() {
            if sub.path().is_dir() {
                let _ = fs::remove_dir(sub.path());
            }
        }
        let _ = fs::remove_dir(&self.0);
    }
}

/// `RLOCK_TEST_RUNS=20` for the long count.
#[test]
fn a_users_forgery_reaches_nothing_in_the_tree() {
    for _ in 0..crate::common::runs(1) {
        a_users_forgery_reaches_nothing(Way::Tree);
    }
}

#[test]
fn a_users_forgery_reaches_nothing_in_a_delegated_cgroup() {
    for _ in 0..crate::common::runs(1) {
        a_users_forgery_reaches_nothing(Way::Cgroup);
    }
}
