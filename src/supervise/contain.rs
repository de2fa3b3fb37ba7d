//! Everything the command started, found by the kernel's own bookkeeping, and stopped without
//! races: a cgroup v2 of its own where rlock may make one, else the process tree below the
//! guardian (a subreaper, so every orphan of the command is reparented to it whatever it does
//! to its process group or session).
//!
//! Nothing here decides *when* to stop the command (the supervisor and the guardian do); this
//! is only *how*.

use std::fs;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

mod tree;

use tree::{Identity, send};
pub use tree::{Seen, kill_seen, kill_tree, signal_tree, tree_alive};

/// `sig` to every process below `root` that left `cgroup` (the cgroup's own signal reached the
/// others).
pub fn signal_tree_outside(root: i32, cgroup: &Cgroup, sig: Signal) {
    tree::signal_outside(root, &cgroup.rel, sig);
}

/// How the command is contained, as `--contain` asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// A cgroup where rlock may make one, else the process tree.
    Auto,
    /// A cgroup, or the command does not start (exit 78).
    Cgroup,
    /// The process tree below the guardian, never a cgroup.
    Tree,
}

/// A cgroup v2 made for one command, removed once it is empty.
#[derive(Debug)]
pub struct Cgroup {
    dir: PathBuf,
    /// Its path as /proc/PID/cgroup names it (`/rlock-123` below rlock's own).
    rel: String,
    /// The directory itself, open: the guardian is cloned into it (`CLONE_INTO_CGROUP`), and
    /// the command, its child, is born there.
    dir_fd: OwnedFd,
}

impl Cgroup {
    /// Makes a cgroup for the command below the one rlock runs in, after stopping what rlocks
    /// no longer running left beside it (their directories are returned). Err says why not (no
    /// cgroup v2 mounted, a read-only or foreign hierarchy, no right to write it).
    pub fn create() -> Result<(Cgroup, Vec<PathBuf>), String> {
        let own = own_cgroup().ok_or("this process is in no cgroup v2")?;
        let parent = at_usual_mount(&own)
            .or_else(|| v2_mount().map(|mount| mount.join(own.trim_start_matches('/'))))
            .ok_or("no cgroup v2 hierarchy is mounted")?;
        let stopped = remove_abandoned(&parent);
        let pid = std::process::id();
        let mut last = None;
        for n in 0..8 {
            let dir = match n {
                0 => parent.join(format!("rlock-{pid}")),
                n => parent.join(format!("rlock-{pid}-{n}")),
            };
            match fs::create_dir(&dir) {
                Ok(()) => {
                    let dir_fd = fs::File::open(&dir).map_err(|e| {
                        let _ = fs::remove_dir(&dir);
                        format!("cannot open {}: {e}", dir.display())
                    })?;
                    let rel = format!(
                        "{}/{}",
                        own.trim_end_matches('/'),
                        dir.file_name()
                            .map(|n| n.to_string_lossy())
                            .unwrap_or_default()
                    );
                    let cgroup = Cgroup {
                        dir,
                        rel,
                        dir_fd: dir_fd.into(),
                    };
                    return Ok((cgroup, stopped));
                }
                // Left by an rlock of the same pid whose guardian was killed too: reuse the
                // name once it is empty.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    let _ = fs::remove_dir(&dir);
                    last = Some(e);
                }
                Err(e) => {
                    return Err(format!(
                        "cannot create a cgroup in {}: {e}",
                        parent.display()
                    ));
                }
            }
        }
        Err(format!(
            "cannot create a cgroup in {}: {}",
            parent.display(),
            last.map_or_else(String::new, |e| e.to_string())
        ))
    }

    /// The cgroup at `dir`, made by the rlock whose guardian this process is (in the same
    /// cgroup as that rlock, of which `dir` is a child).
    /// Err only when `dir` cannot be opened (it is gone: nothing is left in it).
    pub fn watched(dir: PathBuf) -> io::Result<Cgroup> {
        // Without its path as /proc names it, a process is signalled only through cgroup.kill
        // (each one's membership cannot be checked): still the rule, on Linux 5.14 and later.
        let own = own_cgroup().unwrap_or_default();
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let rel = format!("{}/{name}", own.trim_end_matches('/'));
        let dir_fd = fs::File::open(&dir)?.into();
        Ok(Cgroup { dir, rel, dir_fd })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The raw descriptor of the directory, to clone the guardian into it.
    pub fn dir_fd(&self) -> i32 {
        self.dir_fd.as_raw_fd()
    }

    /// Moves this process (the guardian) out of the cgroup, into the one above, so that it may
    /// freeze or kill the cgroup without freezing or killing itself. Costs an RCU grace period
    /// (milliseconds): done only on the way to stopping the command, never on a run that ends
    /// by itself.
    pub fn leave(&self) -> io::Result<()> {
        let parent = self.dir.parent().ok_or(io::ErrorKind::NotFound)?;
        write_file(&parent.join("cgroup.procs"), b"0")
    }

    /// Whether a process other than `me` is in the cgroup or below it.
    pub fn holds_other_than(&self, me: i32) -> bool {
        let mut dirs = vec![self.dir.clone()];
        while let Some(dir) = dirs.pop() {
            if let Ok(procs) = read_proc(dir.join("cgroup.procs"))
                && procs
                    .lines()
                    .any(|l| l.parse::<i32>().is_ok_and(|p| p != me))
            {
                return true;
            }
            dirs.extend(subdirs(&dir));
        }
        false
    }

    /// Whether any process is left in the cgroup or below it. A cgroup that is gone holds
    /// nothing (it could be removed only once empty); one whose `cgroup.events` cannot be read
    /// for another reason is taken to hold something.
    pub fn populated(&self) -> bool {
        populated(&self.dir)
    }

    /// `sig` to every process of the cgroup, none of which can fork away meanwhile: SIGKILL by
    /// `cgroup.kill` (Linux 5.14), which reaches what is forked while it runs; SIGSTOP (the job
    /// stopped at the terminal) by freezing the cgroup, and SIGCONT by thawing it (and
    /// continuing what a signal stopped); any other signal with the cgroup frozen (5.2),
    /// followed by SIGCONT so that a stopped process acts on it.
    pub fn signal(&self, sig: Signal) {
        match sig {
            Signal::SIGKILL if write_file(&self.dir.join("cgroup.kill"), b"1").is_ok() => {}
            Signal::SIGSTOP => {
                self.freeze(true);
            }
            Signal::SIGCONT => {
                self.freeze(false);
                self.each(Signal::SIGCONT);
            }
            sig => {
                let frozen = self.freeze(true);
                self.each(sig);
                if sig != Signal::SIGKILL {
                    self.each(Signal::SIGCONT);
                }
                if frozen {
                    self.freeze(false);
                }
            }
        }
    }

    /// `sig` to each process of the cgroup (and below), each checked to be in it still when
    /// signalled through its pidfd, so that a pid reused meanwhile is left alone.
    fn each(&self, sig: Signal) {
        let mut dirs = vec![self.dir.clone()];
        while let Some(dir) = dirs.pop() {
            if let Ok(procs) = read_proc(dir.join("cgroup.procs")) {
                for pid in procs.lines().filter_map(|l| l.parse::<i32>().ok()) {
                    send(pid, Identity::Cgroup(&self.rel), sig);
                }
            }
            dirs.extend(subdirs(&dir));
        }
    }

    /// Freezes (or thaws) the cgroup. True when the freeze was asked for (then it must be
    /// thawed, whether or not it took); waits, briefly, until it took (a frozen cgroup still
    /// takes signals, so a late freeze costs only the fork race it closes).
    fn freeze(&self, on: bool) -> bool {
        let flag: &[u8] = if on { b"1" } else { b"0" };
        if write_file(&self.dir.join("cgroup.freeze"), flag).is_err() {
            return false;
        }
        if on {
            let until = Instant::now() + Duration::from_millis(100);
            while Instant::now() < until {
                let events = read_proc(self.dir.join("cgroup.events")).unwrap_or_default();
                if events.lines().any(|l| l == "frozen 1") {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        true
    }

    /// Removes the cgroup (and any an rlock inside it left behind), once it is empty. An rmdir
    /// can fail for a moment after the last process ended (EBUSY): it is tried again, briefly.
    pub fn remove(&self) {
        remove_cgroup(&self.dir);
    }
}

/// Whether any process is left in the cgroup at `dir` or below it (`Cgroup::populated`).
pub fn populated(dir: &Path) -> bool {
    match read_proc(dir.join("cgroup.events")) {
        Ok(events) => events.lines().any(|l| l == "populated 1"),
        Err(e) => e.kind() != io::ErrorKind::NotFound,
    }
}

/// Removes the cgroup at `dir` and any below it, once they are empty, trying briefly again
/// while an rmdir fails (EBUSY for a moment after the last process ended).
pub fn remove_cgroup(dir: &Path) {
    // Most often it is empty and has no cgroup below it (an rlock inside made one only if it
    // was killed with its guardian): one rmdir.
    if fs::remove_dir(dir).is_ok() {
        return;
    }
    let until = Instant::now() + Duration::from_secs(1);
    loop {
        remove_tree(dir);
        if !dir.exists() || Instant::now() >= until {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Stops and removes the cgroups in `parent` that rlocks no longer alive left: every one is
/// `rlock-PID` or `rlock-PID-N`, and one whose PID runs no more has no owner. What still runs in
/// one (an rlock and its guardian were both killed, by the OOM killer or `kill -9`) is work
/// whose lock is gone or going: it is killed (`cgroup.kill`). Returns the directories that held
/// something.
fn remove_abandoned(parent: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(parent) else {
        return Vec::new();
    };
    let mut stopped = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("rlock-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let gone = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
            == Err(nix::errno::Errno::ESRCH);
        if !gone {
            continue;
        }
        let dir = entry.path();
        // An rmdir of a cgroup that still holds a process fails (EBUSY): nothing is lost.
        if fs::remove_dir(&dir).is_ok() {
            continue;
        }
        let events = dir.join("cgroup.events");
        let populated = || read_proc(&events).is_ok_and(|e| e.lines().any(|l| l == "populated 1"));
        if populated() && write_file(&dir.join("cgroup.kill"), b"1").is_ok() {
            stopped.push(dir.clone());
            let until = Instant::now() + Duration::from_secs(1);
            while populated() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        remove_tree(&dir);
    }
    stopped
}

fn remove_tree(dir: &Path) {
    for sub in subdirs(dir) {
        remove_tree(&sub);
    }
    let _ = fs::remove_dir(dir);
}

fn subdirs(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

fn write_file(path: &Path, data: &[u8]) -> io::Result<()> {
    fs::OpenOptions::new()
        .write(true)
        .open(path)?
        .write_all(data)
}

/// Where the cgroup v2 hierarchy is mounted, from /proc/self/mountinfo: `/sys/fs/cgroup` on
/// unified hosts, `/sys/fs/cgroup/unified` on hybrid ones.
fn v2_mount() -> Option<PathBuf> {
    let info = read_proc("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|line| {
        let (fields, after) = line.split_once(" - ")?;
        if after.split(' ').next()? != "cgroup2" {
            return None;
        }
        let mut fields = fields.split(' ');
        let root = fields.nth(3)?;
        let point = fields.next()?;
        // Only a mount of the hierarchy's root maps cgroup paths onto directories as they are.
        (root == "/").then(|| PathBuf::from(unescape_mount(point)))
    })
}

/// This process's cgroup `own`, found where cgroup v2 is usually mounted
/// (`/sys/fs/cgroup/unified` on hybrid hosts, `/sys/fs/cgroup` on others) without reading
/// mountinfo, which the kernel is slow to format (a measurable part of every run's start:
/// docs/benchmarks.md). A directory counts only if it is on a cgroup2 file system and, for
/// a cgroup below the root, lists this process in its `cgroup.procs`: the kernel's own word
/// that it is this process's cgroup (a mount of a part of the hierarchy, as in a container
/// without a cgroup namespace, fails that test, and mountinfo says where the hierarchy's root
/// is mounted). The root's list, every process of the host, is as slow to read as mountinfo:
/// a process in the root cgroup, or in its namespace's, takes the usual mount as it is.
fn at_usual_mount(own: &str) -> Option<PathBuf> {
    use nix::sys::statfs::{CGROUP2_SUPER_MAGIC, statfs};
    let me = std::process::id().to_string();
    let below = own.trim_start_matches('/');
    ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
        .into_iter()
        .filter(|mount| statfs(*mount).is_ok_and(|fs| fs.filesystem_type() == CGROUP2_SUPER_MAGIC))
        .map(|mount| Path::new(mount).join(below))
        .find(|dir| {
            below.is_empty()
                || read_proc(dir.join("cgroup.procs"))
                    .is_ok_and(|procs| procs.lines().any(|pid| pid == me))
        })
}

/// A file of /proc or of a cgroup, read in large pieces: it says it is empty, so
/// `read_to_string` would start with a small buffer, and each short read is a system call of
/// its own that makes the kernel format the lines again (mountinfo is slow to format).
pub(super) fn read_proc(path: impl AsRef<Path>) -> io::Result<String> {
    use std::io::Read;
    let mut text = String::with_capacity(8192);
    fs::File::open(path)?.read_to_string(&mut text)?;
    Ok(text)
}

/// mountinfo writes space, tab, newline and backslash as octal escapes (`\040`).
fn unescape_mount(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 4 <= bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let v = (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The cgroup v2 this process is in: the `0::PATH` line of /proc/self/cgroup.
fn own_cgroup() -> Option<String> {
    let cgroups = read_proc("/proc/self/cgroup").ok()?;
    cgroups
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shortcut past mountinfo names the directory mountinfo does, wherever it answers at
    /// all (on this kind of host, a hybrid one, `/sys/fs/cgroup/unified`).
    #[test]
    fn the_usual_mount_is_the_cgroup_mountinfo_names() {
        let Some(own) = own_cgroup() else { return };
        let by_mountinfo = v2_mount().map(|m| m.join(own.trim_start_matches('/')));
        if let Some(fast) = at_usual_mount(&own) {
            assert_eq!(Some(fast), by_mountinfo);
        }
    }

    #[test]
    fn mount_points_are_unescaped() {
        assert_eq!(unescape_mount(r"/sys/fs/cgroup"), "/sys/fs/cgroup");
        assert_eq!(unescape_mount(r"/mnt/a\040b"), "/mnt/a b");
        assert_eq!(unescape_mount(r"/x\\"), r"/x\\");
    }
}
