//! The process tree below the guardian, from /proc: every process's parent, walked, and
//! signalled without races (stopped round by round before a signal; pidfds checked against what
//! the walk saw). What contains the command where no cgroup can be made.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

/// One process as /proc tells it.
#[derive(Debug, Clone, Copy)]
struct Proc {
    pid: i32,
    ppid: i32,
    zombie: bool,
    /// Start time (clock ticks after boot): with the pid, names one process for ever.
    start: u64,
}

/// Every process's parent, from field 4 of each `/proc/PID/stat` (the children lists of
/// /proc/PID/task/*/children need CONFIG_PROC_CHILDREN, which not every kernel has).
fn scan() -> Vec<Proc> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(stat)
        .collect()
}

fn stat(pid: i32) -> Option<Proc> {
    // One read: the kernel makes the whole line at once (a few hundred bytes). Bytes, not text:
    // the name in parentheses is cut at 15 bytes, maybe inside a character.
    let mut buf = [0u8; 1024];
    let n = io::Read::read(
        &mut fs::File::open(format!("/proc/{pid}/stat")).ok()?,
        &mut buf,
    )
    .ok()?;
    let line = &buf[..n];
    // pid (comm) state ppid ...; comm may hold blanks and parentheses.
    let after = line.iter().rposition(|&b| b == b')')? + 2;
    let rest = std::str::from_utf8(line.get(after..)?).ok()?;
    let mut fields = rest.split(' ');
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    // Fields 5..21 come between the parent (4) and the start time (22).
    let start = fields.nth(17)?.parse().ok()?;
    // A process whose first thread ended while others run shows Z, and runs.
    let zombie = matches!(state, "Z" | "X") && threads(pid) <= 1;
    Some(Proc {
        pid,
        ppid,
        zombie,
        start,
    })
}

fn threads(pid: i32) -> usize {
    fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count())
}

/// Whether a process is stopped (by a signal or a tracer), or gone.
fn stopped_or_gone(pid: i32, start: u64) -> bool {
    let mut buf = [0u8; 1024];
    let Ok(mut file) = fs::File::open(format!("/proc/{pid}/stat")) else {
        return true;
    };
    let Ok(n) = io::Read::read(&mut file, &mut buf) else {
        return true;
    };
    let line = &buf[..n];
    let Some(close) = line.iter().rposition(|&b| b == b')') else {
        return true;
    };
    match stat(pid) {
        Some(p) if p.start == start => {
            matches!(line.get(close + 2), Some(b'T' | b't' | b'Z' | b'X'))
        }
        _ => true,
    }
}

/// The living (not zombie) descendants of `root`, parents before their children.
fn descendants(root: i32) -> Vec<Proc> {
    let procs = scan();
    let mut children: HashMap<i32, Vec<Proc>> = HashMap::new();
    for p in procs {
        children.entry(p.ppid).or_default().push(p);
    }
    let mut out = Vec::new();
    let mut next = vec![root];
    while let Some(parent) = next.pop() {
        for child in children.remove(&parent).unwrap_or_default() {
            next.push(child.pid);
            if !child.zombie {
                out.push(child);
            }
        }
    }
    out
}

/// How many rounds a tree walk may take. Each round finds what was forked since the last one;
/// a tree that still forks faster than it is walked after this many is not stopped by walking
/// (the final SIGKILL rounds bound it the same way).
const MAX_ROUNDS: usize = 1000;

/// Processes as a walk saw them: pid and start time, which together name one process for ever.
pub type Seen = Vec<(i32, u64)>;

/// `sig` to every process below `root`, none of which can fork away meanwhile; SIGSTOP stops
/// them (and leaves them stopped), SIGCONT continues them, SIGKILL is `kill_tree`. Returns what
/// it signalled (nothing for SIGKILL). The walks that stop them end by `until` (SIGKILL's
/// moment, which no walk for a gentler signal may hold up): what they stopped by then gets it.
pub fn signal_tree(root: i32, sig: Signal, until: Option<Instant>) -> Seen {
    match sig {
        Signal::SIGKILL => {
            kill_tree(root);
            Vec::new()
        }
        Signal::SIGCONT => {
            let below = descendants(root);
            for p in &below {
                send(p.pid, Identity::Start(p.start), Signal::SIGCONT);
            }
            below.iter().map(|p| (p.pid, p.start)).collect()
        }
        Signal::SIGSTOP => stop_tree(root, until).into_iter().collect(),
        sig => {
            let stopped = stop_tree(root, until);
            for &(pid, start) in &stopped {
                send(pid, Identity::Start(start), sig);
            }
            for &(pid, start) in &stopped {
                send(pid, Identity::Start(start), Signal::SIGCONT);
            }
            stopped.into_iter().collect()
        }
    }
}

/// SIGKILL to each process an earlier walk `seen`, that is still the one it saw: no walk of
/// /proc first, so that what was there at the lost-signal is killed at once.
pub fn kill_seen(seen: &[(i32, u64)]) {
    for &(pid, start) in seen {
        send(pid, Identity::Start(start), Signal::SIGKILL);
    }
}

/// `sig` to every process below `root` that is not in the cgroup `rel` (as /proc/PID/cgroup
/// names it) or below it: what left the cgroup, which the cgroup's own signal did not reach.
/// One walk: such a process is rare (a root command moved it), and SIGKILL is `kill_tree`'s.
pub fn signal_outside(root: i32, rel: &str, sig: Signal) {
    let inside = |pid: i32| {
        fs::read_to_string(format!("/proc/{pid}/cgroup")).is_ok_and(|c| {
            c.lines()
                .filter_map(|l| l.strip_prefix("0::"))
                .any(|path| path == rel || path.starts_with(&format!("{rel}/")))
        })
    };
    for p in descendants(root).into_iter().filter(|p| !inside(p.pid)) {
        send(p.pid, Identity::Start(p.start), sig);
        if !matches!(sig, Signal::SIGSTOP | Signal::SIGCONT) {
            send(p.pid, Identity::Start(p.start), Signal::SIGCONT);
        }
    }
}

/// Stops every process below `root` with SIGSTOP, walking again until a walk finds none not
/// yet stopped. Each round waits (briefly) until what it signalled has stopped: a stopped
/// process forks no more, but one caught inside a fork still completes it, so only a walk after
/// the stop sees everything. It ends after two walks in a row find nothing new (a child whose
/// parent had just been reaped turns up, reparented, in the second). Returns what it stopped.
fn stop_tree(root: i32, until: Option<Instant>) -> HashSet<(i32, u64)> {
    let mut stopped: HashSet<(i32, u64)> = HashSet::new();
    let mut quiet = 0;
    let late = |now: Instant| until.is_some_and(|at| now >= at);
    for _ in 0..MAX_ROUNDS {
        if late(Instant::now()) {
            break;
        }
        let fresh: Vec<Proc> = descendants(root)
            .into_iter()
            .filter(|p| !stopped.contains(&(p.pid, p.start)))
            .collect();
        if fresh.is_empty() {
            quiet += 1;
            if quiet == 2 {
                break;
            }
            continue;
        }
        quiet = 0;
        for p in &fresh {
            send(p.pid, Identity::Start(p.start), Signal::SIGSTOP);
            stopped.insert((p.pid, p.start));
        }
        let round = Instant::now() + Duration::from_millis(100);
        let round = until.map_or(round, |at| round.min(at));
        while !fresh.iter().all(|p| stopped_or_gone(p.pid, p.start)) && Instant::now() < round {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    stopped
}

/// SIGKILL to every process below `root`, walking again until two walks in a row find none
/// that was not killed already. A process with SIGKILL pending completes no fork, so only
/// children forked before their parent's kill can turn up, one generation a round.
pub fn kill_tree(root: i32) {
    let mut killed: HashSet<(i32, u64)> = HashSet::new();
    let mut quiet = 0;
    for _ in 0..MAX_ROUNDS {
        let fresh: Vec<Proc> = descendants(root)
            .into_iter()
            .filter(|p| !killed.contains(&(p.pid, p.start)))
            .collect();
        if fresh.is_empty() {
            quiet += 1;
            if quiet == 2 {
                return;
            }
            continue;
        }
        quiet = 0;
        for p in fresh {
            send(p.pid, Identity::Start(p.start), Signal::SIGKILL);
            killed.insert((p.pid, p.start));
        }
    }
}

/// Whether anything runs below `root` (zombies aside).
pub fn tree_alive(root: i32) -> bool {
    !descendants(root).is_empty()
}

/// How a process about to be signalled is known to be the one meant, not another that took
/// its pid since it was seen.
#[derive(Clone, Copy)]
pub(super) enum Identity<'a> {
    /// The start time the walk saw.
    Start(u64),
    /// The cgroup it was listed in (as /proc/PID/cgroup names it).
    Cgroup(&'a str),
}

/// `sig` to exactly the process meant, never to another that reused its pid: through a pidfd
/// (Linux 5.3), opened and then checked against `who`. A plain kill only where the kernel has
/// no pidfds.
pub(super) fn send(pid: i32, who: Identity, sig: Signal) {
    use rustix::process::{PidfdFlags, pidfd_open, pidfd_send_signal};
    let Some(target) = rustix::process::Pid::from_raw(pid) else {
        return;
    };
    let fd = match pidfd_open(target, PidfdFlags::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOSYS) => {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
            return;
        }
        Err(_) => return,
    };
    let same = match who {
        Identity::Start(start) => stat(pid).is_some_and(|p| p.start == start),
        Identity::Cgroup(rel) => fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .ok()
            .and_then(|c| {
                c.lines()
                    .find_map(|l| l.strip_prefix("0::"))
                    .map(str::to_string)
            })
            .is_some_and(|path| path == rel || path.starts_with(&format!("{rel}/"))),
    };
    if let (true, Some(sig)) = (same, rustix::process::Signal::from_named_raw(sig as i32)) {
        let _ = pidfd_send_signal(&fd, sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_found_with_its_parent_and_start_time() {
        let me = stat(std::process::id() as i32).expect("own stat");
        assert_eq!(me.ppid as u32, std::os::unix::process::parent_id());
        assert!(me.start > 0);
        assert!(!me.zombie);
    }

    #[test]
    fn a_tree_is_walked_and_killed_whatever_its_groups() {
        use std::os::unix::process::CommandExt;
        // A child in a process group of its own, with a child of its own.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & wait"])
            .process_group(0)
            .spawn()
            .expect("sh");
        let sh = child.id() as i32;
        let until = Instant::now() + Duration::from_secs(10);
        while descendants(sh).is_empty() {
            assert!(Instant::now() < until, "the sleep never showed");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(tree_alive(sh));
        let below = descendants(sh);
        kill_tree(sh);
        // sh's `wait` returns once the sleep is killed; sh itself was not below itself.
        child.wait().expect("wait");
        for p in below {
            assert!(
                stat(p.pid).is_none_or(|now| now.zombie || now.start != p.start),
                "{} runs on after kill_tree",
                p.pid
            );
        }
    }
}
