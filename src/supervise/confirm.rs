//! rlock's own look before it believes the guardian's "nothing left": the guardian's word is a
//! message on a pipe, and the release that follows it must rest on what the kernel says. After
//! a run that ended by itself, the kernel is asked about the guardian, which is leaving: it has
//! no child (while it lives, whatever the command left comes to it, a subreaper), and in a
//! cgroup it is the cgroup's one process, with no cgroup below; the next holder then need not
//! wait for the guardian's exit. Otherwise (a stop, or a look that finds more) rlock waits for
//! the guardian's end (which nobody can forge) and then looks: no child of its own (what the
//! command started comes to rlock, a subreaper, once the guardian is gone) and, in a cgroup,
//! `cgroup.events` says "populated 0". The release so also waits for the guardian's kill to be
//! done. Anything else is stopped here, and what cannot be stopped keeps the lock held to its
//! TTL.

use std::path::Path;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};

use super::{AFTER_KILL, Guardian, Outcome, contain, stop_orphans};

/// How long the guardian may take to leave once it said that nothing runs: at once, unless
/// the host is very busy.
const LEAVES_WITHIN: Duration = Duration::from_secs(1);

/// Checks `outcome`'s "nothing left" against what rlock sees itself, stopping whatever it finds
/// (a lost lease or a time limit ends in `cgroup.kill` whatever the guardian did); what is
/// still there `AFTER_KILL` after that is leftovers (the lock is not released).
pub(super) fn nothing_left(guardian: &mut Guardian, outcome: &mut Outcome) {
    if outcome.leftovers {
        return;
    }
    let cgroup = guardian.cgroup().map(Path::to_path_buf);
    let stopped = outcome.lost.is_some() || outcome.timed_out;
    let alone = guardian.alone();
    if !stopped && alone && leaving_alone(guardian.pid(), cgroup.as_deref()) {
        return;
    }
    if guardian.wait_gone(Instant::now() + LEAVES_WITHIN)
        && looks_empty(alone, cgroup.as_deref(), stopped)
    {
        return;
    }
    // Not so: everything the command started goes, by the guardian, or with it (the command by
    // its parent-death signal, the rest by rlock, to whom it comes). No kill of the command's
    // group from here: its leader may be reaped already, and its pid another group's.
    guardian.signal_all(Signal::SIGKILL);
    if !guardian.wait_gone(Instant::now() + AFTER_KILL) {
        guardian.kill();
        guardian.wait_gone(Instant::now() + AFTER_KILL);
    }
    stop_orphans(cgroup.as_deref());
    outcome.leftovers = !looks_empty(alone, cgroup.as_deref(), true);
}

/// Whether the guardian `pid`, which said that nothing runs, is all that is left: it has no
/// child, and the cgroup (if any) holds nothing but it (or nothing, once it has exited), with no
/// cgroup below. False when anything cannot be read: then rlock waits for its exit.
fn leaving_alone(pid: nix::unistd::Pid, cgroup: Option<&Path>) -> bool {
    let read = |path: &Path| contain::read_proc(path).ok();
    let children = read(Path::new(&format!("/proc/{pid}/task/{pid}/children")));
    if !children.is_some_and(|c| c.trim().is_empty()) {
        return false;
    }
    let Some(dir) = cgroup else {
        return true;
    };
    let me = pid.to_string();
    let procs = read(&dir.join("cgroup.procs"));
    let stat = read(&dir.join("cgroup.stat"));
    procs.is_some_and(|p| p.split_whitespace().all(|p| p == me))
        && stat.is_some_and(|s| s.lines().any(|l| l == "nr_descendants 0"))
}

/// Whether nothing of the command runs, the guardian gone: rlock has no child left (when it had
/// none before the guardian: `alone`), and the cgroup (if any) is empty. With `kill`, the
/// cgroup is killed first (`cgroup.kill`) and given `AFTER_KILL` to empty.
fn looks_empty(alone: bool, cgroup: Option<&Path>, kill: bool) -> bool {
    let no_child = !alone
        || loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Err(Errno::ECHILD) => break true,
                Ok(WaitStatus::StillAlive) => break false,
                Ok(_) | Err(Errno::EINTR) => {}
                Err(_) => break false,
            }
        };
    let Some(dir) = cgroup else {
        return no_child;
    };
    if kill {
        let _ = std::fs::write(dir.join("cgroup.kill"), "1");
        let until = Instant::now() + AFTER_KILL;
        while contain::populated(dir) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    no_child && !contain::populated(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Child, Command};

    fn pid(child: &Child) -> nix::unistd::Pid {
        nix::unistd::Pid::from_raw(child.id() as i32)
    }

    fn until(what: &str, done: impl Fn() -> bool) {
        let by = Instant::now() + Duration::from_secs(5);
        while !done() {
            assert!(Instant::now() < by, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn end(mut child: Child) {
        let _ = child.kill();
        let _ = child.wait();
    }

    /// The kernel's word that a leaving guardian is all that is left: no child of its own (in
    /// the tree), and in a cgroup no other process and no cgroup below. Each part alone would
    /// let a release through with something of the command still running.
    #[test]
    fn a_guardian_is_alone_without_children_and_alone_in_its_cgroup() {
        assert!(
            nix::unistd::geteuid().is_root(),
            "the cgroup tests run as root (CI does): run cargo test as root"
        );
        let lone = Command::new("sleep").arg("30").spawn().expect("sleep");
        assert!(leaving_alone(pid(&lone), None), "a childless process");
        let parent = Command::new("sh")
            .args(["-c", "sleep 30 & wait"])
            .spawn()
            .expect("sh");
        let children = format!("/proc/{0}/task/{0}/children", parent.id());
        until("sh's child", || {
            contain::read_proc(&children).is_ok_and(|c| !c.trim().is_empty())
        });
        assert!(!leaving_alone(pid(&parent), None), "a process with a child");
        end(parent);

        let (cgroup, _) = contain::Cgroup::create().expect("a cgroup of this test's own");
        let dir = cgroup.dir().to_path_buf();
        let join = |child: &Child| {
            std::fs::write(dir.join("cgroup.procs"), child.id().to_string()).expect("move in")
        };
        join(&lone);
        assert!(leaving_alone(pid(&lone), Some(&dir)), "alone in its cgroup");
        let other = Command::new("sleep").arg("30").spawn().expect("sleep");
        join(&other);
        assert!(
            !leaving_alone(pid(&lone), Some(&dir)),
            "another process in the cgroup"
        );
        end(other);
        until("the other process to leave the cgroup", || {
            leaving_alone(pid(&lone), Some(&dir))
        });
        std::fs::create_dir(dir.join("below")).expect("a cgroup below");
        assert!(
            !leaving_alone(pid(&lone), Some(&dir)),
            "a cgroup below, which may hold processes"
        );
        let _ = std::fs::remove_dir(dir.join("below"));
        end(lone);
        cgroup.remove();
    }
}
