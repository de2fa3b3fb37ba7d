//! The cgroup way of starting the command: rlock starts it itself, vfork-style, straight into its
//! cgroup, and the guardian only watches.
//!
//! **Why not the guardian as the command's parent here too.** With a cgroup, the cgroup holds
//! everything the command starts, wherever it moves: nobody has to be the command's parent or
//! subreaper to find it later. The guardian's one task is to stop the cgroup should rlock die,
//! and for that it need not stand between rlock and the command. Starting the command from rlock
//! (one vfork, no second process to set up and wake on the way), with a guardian started
//! without a fork (`watch.rs`), took about a third of a millisecond off every run
//! (docs/benchmarks.md).
//!
//! So rlock is the command's parent (and its subreaper, as before): it reaps the command and its
//! orphans, sees the command stop, continue and end, and takes "nothing of it runs" from the
//! cgroup's `populated`. The guardian, started first (the command does not start without it),
//! waits on the request pipe: rlock's farewell (`DONE`) sends it away; the pipe's end of file
//! without it is rlock's death, and the guardian kills the cgroup, again until it is empty, and
//! removes it (`watch.rs`).

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Pid, getpgrp, setpgid};

use super::protocol::{DONE, encode};
use super::{Event, Guardian, Launched, Up, guardian_not_started, watch};
use crate::supervise::LaunchError;
use crate::supervise::contain::Cgroup;
use crate::supervise::spawn::{Prepared, Spawned, cannot_run, start_in};
use crate::supervise::terminal::Terminal;

/// rlock's side when it is the command's parent.
pub(super) struct Own {
    leader: Pid,
    watcher: Pid,
    /// The guardian's pidfd, readable once it has ended (if clone3 gave one).
    watcher_fd: Option<OwnedFd>,
    cgroup: Cgroup,
    leader_done: bool,
    /// Empty has been told (and the guardian sent away).
    empty_told: bool,
    /// The guardian ended before the command's end was told: someone killed it.
    watcher_killed: bool,
    /// The guardian was reaped.
    watcher_reaped: bool,
    /// `cgroup.events`, once the leader ended with something left in the cgroup: polled for
    /// the change to `populated 0` (a process put there from outside is nobody's child here).
    events: Option<File>,
    pending: VecDeque<Event>,
}

/// What `launch` did with the cgroup it was given.
pub(super) enum Tried {
    /// The command started (or could not, or neither could the guardian): that answer.
    Done(Result<Launched, LaunchError>),
    /// This kernel (or build) cannot start a process in the cgroup this way: the guardian's way
    /// gets the cgroup.
    Not(Cgroup),
}

/// Whether this build can start the command straight into a cgroup (`spawn::start_in`).
pub(super) const CAN: bool = cfg!(target_arch = "x86_64");

/// The guardian of the cgroup way, started and watching a cgroup in which nothing runs yet.
pub struct Watcher {
    pid: Pid,
    pidfd: Option<OwnedFd>,
    requests: OwnedFd,
    /// How its exec went, until confirmed (`confirm`).
    status: Option<OwnedFd>,
}

impl Watcher {
    /// Starts the guardian watching `cgroup`. EAGAIN and ENOMEM: no process can be made now
    /// (exit 70); any other error: not this way (clone3 refused by the kernel or a seccomp
    /// filter, rlock's executable not to be run again), the guardian's way may.
    pub fn start(cgroup: &Cgroup) -> Result<Watcher, Errno> {
        if !watch::can_start() {
            return Err(Errno::ENOEXEC);
        }
        let started = watch::start(cgroup)?;
        Ok(Watcher {
            pid: started.pid,
            pidfd: started.pidfd,
            requests: started.requests,
            status: Some(started.status),
        })
    }

    /// Waits for the guardian's exec to have gone well (it has, most often, by the time the
    /// lock is granted): the command does not start under a guardian that never ran.
    fn confirm(&mut self) -> Result<(), Errno> {
        match self.status.take() {
            Some(status) => watch::exec_went(&status),
            None => Ok(()),
        }
    }

    /// Sends the guardian away (nothing was started in its cgroup), and reaps it once it has
    /// left, waiting a millisecond at most; if it has not (it may still be starting), the next
    /// reaping of rlock's children does.
    pub fn dismiss(self) {
        let _ = nix::unistd::write(&self.requests, &encode(DONE, 0, 0));
        drop(self.requests);
        reap_within(
            self.pid,
            self.pidfd.as_ref(),
            std::time::Duration::from_millis(1),
        );
    }
}

/// Waits (`within` at most) for the guardian `pid` to end, on its pidfd where there is one, and
/// reaps it: true once it is reaped (or gone).
fn reap_within(pid: Pid, pidfd: Option<&OwnedFd>, within: std::time::Duration) -> bool {
    let until = std::time::Instant::now() + within;
    loop {
        match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => {}
            Err(Errno::EINTR) => continue,
            _ => return true,
        }
        let left = until.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return false;
        }
        match pidfd {
            Some(fd) => {
                // Whole milliseconds, at least one (a shorter poll would spin).
                let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
                let _ = nix::poll::poll(
                    &mut [PollFd::new(fd.as_fd(), PollFlags::POLLIN)],
                    PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
                );
            }
            None => std::thread::sleep(std::time::Duration::from_micros(50)),
        }
    }
}

/// Starts the command in `cgroup`, with rlock as its parent, watched by `watcher` (started now
/// if none was: the command does not start without it, exit 70).
pub(super) fn launch(
    prepared: &Prepared,
    terminal: Option<Terminal>,
    cgroup: Cgroup,
    watcher: Option<Watcher>,
    program: &OsString,
) -> Tried {
    if !CAN {
        if let Some(w) = watcher {
            w.dismiss();
        }
        return Tried::Not(cgroup);
    }
    let fail = |cgroup: &Cgroup, failure: LaunchError| {
        cgroup.remove();
        Tried::Done(Err(failure))
    };
    let mut watcher = match watcher.map_or_else(|| Watcher::start(&cgroup), Ok) {
        Ok(w) => w,
        Err(e @ (Errno::EAGAIN | Errno::ENOMEM)) => {
            return fail(&cgroup, guardian_not_started("clone3", e));
        }
        Err(_) => return Tried::Not(cgroup),
    };
    if let Err(e) = watcher.confirm() {
        watcher.dismiss();
        return match e {
            Errno::EAGAIN | Errno::ENOMEM => fail(&cgroup, guardian_not_started("exec", e)),
            _ => Tried::Not(cgroup),
        };
    }
    match start_in(prepared, terminal, cgroup.dir_fd()) {
        Ok(pid) => {
            let _ = setpgid(pid, pid);
            if let Some(t) = terminal {
                t.hand_to(pid);
            }
            Tried::Done(Ok(launched(pid, watcher, cgroup)))
        }
        Err(Spawned::NotRun(e)) => {
            if let Some(t) = terminal {
                t.hand_to(getpgrp());
            }
            watcher.dismiss();
            fail(&cgroup, cannot_run(program, &e))
        }
        // As when the guardian's own start of the command fails so (exit 126).
        Err(Spawned::NoRoom(e)) => {
            watcher.dismiss();
            fail(&cgroup, cannot_run(program, &std::io::Error::from(e)))
        }
        Err(Spawned::NotThisWay) => {
            watcher.dismiss();
            Tried::Not(cgroup)
        }
    }
}

/// The command `pid` runs in `cgroup`, watched by the guardian `watcher`.
fn launched(pid: Pid, watcher: Watcher, cgroup: Cgroup) -> Launched {
    let Watcher {
        pid: watcher,
        pidfd: watcher_fd,
        requests,
        ..
    } = watcher;
    let containment = format!("its own cgroup, {}", cgroup.dir().display());
    let dir = cgroup.dir().to_path_buf();
    let own = Own {
        leader: pid,
        watcher,
        watcher_fd,
        cgroup,
        leader_done: false,
        empty_told: false,
        watcher_killed: false,
        watcher_reaped: false,
        events: None,
        pending: VecDeque::new(),
    };
    Launched {
        guardian: Guardian {
            pid: watcher,
            pgid: pid,
            requests,
            up: Up::Own(Box::new(own)),
            cgroup: Some(dir),
        },
        pgid: pid,
        containment,
    }
}

impl Own {
    /// The next change, after reaping what ended: the leader's stops, continuations and end;
    /// Empty once it has ended and the cgroup is empty; `None` for nothing new. `Err(())` once
    /// the guardian was killed (and everything told before it was read).
    pub(super) fn next(&mut self) -> Result<Option<Event>, ()> {
        self.reap();
        if self.leader_done && !self.empty_told && !self.populated() {
            self.empty_told = true;
            self.pending.push_back(Event::Empty);
        }
        match self.pending.pop_front() {
            Some(event) => Ok(Some(event)),
            None if self.watcher_killed => Err(()),
            None => Ok(None),
        }
    }

    /// Reaps every child that changed: the leader's changes become events; the guardian's end
    /// before the command's is its death; anything else (an orphan of the command) is reaped.
    fn reap(&mut self) {
        loop {
            let flags = WaitPidFlag::WNOHANG | WaitPidFlag::WUNTRACED | WaitPidFlag::WCONTINUED;
            let status = match waitpid(None, Some(flags)) {
                Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => return,
                Ok(status) => status,
                Err(Errno::EINTR) => continue,
                Err(_) => return,
            };
            let ended = matches!(status, WaitStatus::Exited(..) | WaitStatus::Signaled(..));
            if status.pid() == Some(self.watcher) && ended {
                self.watcher_reaped = true;
                self.watcher_killed = !self.empty_told;
            } else if status.pid() == Some(self.leader) && !self.leader_done {
                self.leader_changed(status);
            }
        }
    }

    fn leader_changed(&mut self, status: WaitStatus) {
        match status {
            WaitStatus::Exited(_, code) => {
                self.leader_done = true;
                self.pending.push_back(Event::Exited(code as u8, None));
            }
            WaitStatus::Signaled(_, sig, _) => {
                self.leader_done = true;
                self.pending
                    .push_back(Event::Exited(128u8.wrapping_add(sig as u8), Some(sig)));
            }
            WaitStatus::Stopped(_, sig) => self.pending.push_back(Event::Stopped(sig)),
            WaitStatus::Continued(_) => self.pending.push_back(Event::Continued),
            _ => {}
        }
    }

    /// Whether anything runs in the cgroup. Read through the descriptor that is polled, once
    /// there is one, so that reading it also takes its change as seen.
    fn populated(&mut self) -> bool {
        if self.events.is_none() {
            // Unreadable: as if something were left (looked at again on the next wake-up).
            if !self.cgroup.populated() {
                return false;
            }
            self.events = File::open(self.cgroup.dir().join("cgroup.events")).ok();
        }
        let Some(file) = &self.events else {
            // Not opened: read by name (gone is empty; unreadable, something left).
            return self.cgroup.populated();
        };
        let mut buf = [0u8; 256];
        match file.read_at(&mut buf, 0) {
            Ok(n) => !String::from_utf8_lossy(&buf[..n])
                .lines()
                .any(|l| l == "populated 0"),
            // (A cgroup removed meanwhile answers ENODEV here, and is gone by name.)
            Err(_) => self.cgroup.populated(),
        }
    }

    /// What to poll besides the signalfd (SIGCHLD): the cgroup's events once something was left
    /// in it; a change shows as POLLPRI.
    pub(super) fn poll_fd(&self) -> Option<PollFd<'_>> {
        self.events
            .as_ref()
            .map(|f| PollFd::new(f.as_fd(), PollFlags::POLLPRI))
    }

    /// Whether Empty was told: the guardian may go.
    pub(super) fn emptied(&self) -> bool {
        self.empty_told
    }

    pub(super) fn cgroup(&self) -> &Cgroup {
        &self.cgroup
    }

    /// Waits (200 ms at most) for the guardian, sent away or left to stop what is left, to end,
    /// and reaps it: a guardian left to init would be a zombie where init does not reap. Sent
    /// away, the stand-by (`watch.rs`) ends within microseconds of being woken, so rlock waits
    /// on its pidfd, giving it the processor at once, not in slices of a timer.
    pub(super) fn reap_watcher(&mut self) {
        if self.watcher_reaped {
            return;
        }
        reap_within(
            self.watcher,
            self.watcher_fd.as_ref(),
            std::time::Duration::from_millis(200),
        );
        self.watcher_reaped = true;
    }
}
