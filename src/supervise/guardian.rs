//! The guardian: a small forked copy of rlock that is the command's parent and subreaper, in
//! its cgroup when there is one, and that stops everything the command started when the lease
//! runs out or rlock dies, whatever rlock is doing meanwhile.
//!
//! **Why the guardian is the command's parent.** The orphans of a subreaper that dies move on up
//! to the next subreaper or to init, where nothing can tell them from anyone else's. As the
//! command's parent and subreaper, the guardian keeps every process the command started below
//! itself, whatever they do to their group or session, for as long as it lives; and it outlives
//! rlock, by design: rlock's death is end of file on a pipe only rlock writes. Where a cgroup v2
//! could be made, the guardian is born in it (and so is the command): the cgroup also holds
//! what left the tree (`setsid` and a double fork), the tree what left the cgroup (a root
//! command that moved a child elsewhere), and stopping the command stops both.
//!
//! **It holds the deadline.** rlock tells it the lease's timeline (`Lease::timeline`: when the
//! lost-signal goes, when SIGKILL does) once at the grant and once after every successful
//! renewal; the guardian keeps its own timer, counting down to exactly those instants, whether
//! rlock is stopped, killed or stuck. The command's time limit (`--timeout`) likewise, told
//! once. rlock counts down to the same instants itself; whichever acts first wins. A watchdog
//! that depended on the process it watches would be none.
//!
//! **Its own name.** The guardian is called `rl-guardian` (`PR_SET_NAME`), so that `killall
//! rlock` and `pkill rlock`, which match the name, do not reach it: killing rlock by name leaves
//! the guardian to stop the command.
//!
//! rlock talks to the guardian over two pipes, in fixed 12-byte messages (well under PIPE_BUF,
//! so each is written and read whole): requests down (the lease's moments, signal the whole
//! tree, kill it), events up (the command started or could not, stopped, continued, ended; everything it
//! started is gone).
//!
//! Here is rlock's side (`launch`, `Guardian`); the guardian's own, its loop, is in `life.rs`.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use std::time::{Duration, Instant};

use super::LaunchError;
use super::contain::{self, Cgroup};
use super::spawn::cannot_run;
use super::terminal::Terminal;
use crate::lock::{Limit, Timeline};

/// The name `ps`, `killall` and `pkill` see: without "rlock" in it.
pub const NAME: &std::ffi::CStr = c"rl-guardian";

mod life;
mod protocol;
mod standby;

pub use protocol::Event;
use protocol::{DONE, KILL_AT, LIMIT_AT, LIMIT_KILL_AT, SIGNAL, SIGNAL_AT, encode};
pub use standby::{Standby, stand_by};

/// How often rlock looks whether a guardian that has not said the command started was
/// stopped (SIGCHLD is not read before the supervisor runs).
const LOOK_AGAIN: Duration = Duration::from_millis(20);

/// What the guardian's pipe holds now.
pub enum Next {
    Event(Event),
    /// Nothing yet.
    Nothing,
    /// The guardian is gone.
    Gone,
}

/// rlock's side of the guardian.
pub struct Guardian {
    pid: Pid,
    /// The command's pid, which leads its process group (once it started).
    pgid: Pid,
    /// Requests down; closed (rlock gone, or done) means: stop everything, then leave.
    requests: OwnedFd,
    /// Events up, non-blocking.
    events: OwnedFd,
    /// Bytes of a message read in part (never, in practice: messages are written whole).
    partial: Vec<u8>,
    /// How many signal requests were sent (the last one's number).
    asked: i32,
    cgroup: Option<std::path::PathBuf>,
    /// rlock had no child before the guardian: once the guardian is gone, any child of rlock's
    /// is something the command started (come to rlock, a subreaper).
    alone: bool,
}

/// How the command was started.
pub struct Launched {
    pub guardian: Guardian,
    /// The command's pid, which leads its process group.
    pub pgid: Pid,
    /// What contains it, said with `-v`.
    pub containment: String,
}

/// The requests that tell the guardian the lease's moments, in one write.
fn timeline(lease: Timeline) -> [u8; 24] {
    let mut both = [0u8; 24];
    both[..12].copy_from_slice(&protocol::moment(SIGNAL_AT, lease.signal_at));
    both[12..].copy_from_slice(&protocol::moment(KILL_AT, lease.kill_at));
    both
}

/// The guardian could not be started, for want of `what` (a pipe, a fork), and so neither was
/// the command (exit 70).
fn guardian_not_started(what: &str, e: Errno) -> LaunchError {
    LaunchError::Internal(format!(
        "cannot start the guardian ({what}: {e}); the command was not started"
    ))
}

/// Why the guardian's fork failed: the kernel would not start it in the `cgroup` that is
/// `required` (exit 78; not for a lack of memory or processes, which no cgroup cures), or as
/// `guardian_not_started`.
fn fork_failure(e: Errno, cgroup: Option<&Cgroup>, required: bool) -> LaunchError {
    match cgroup {
        Some(c) if required && !matches!(e, Errno::EAGAIN | Errno::ENOMEM) => {
            let dir = c.dir().display().to_string();
            LaunchError::Config(format!(
                "--contain cgroup: the kernel cannot start a process in the cgroup {dir} ({e}); the command was not started (--contain auto falls back to the process tree)"
            ))
        }
        _ => guardian_not_started("fork", e),
    }
}

/// The cgroup once the guardian is forked (`in_cgroup`: whether it was born in it), and why
/// the command runs in none, if it does not.
fn born_in(
    cgroup: Option<Cgroup>,
    in_cgroup: bool,
    why_no_cgroup: Option<String>,
) -> (Option<Cgroup>, Option<String>) {
    // A cgroup the guardian could not be born in contains nothing: the tree does.
    let cgroup = match cgroup {
        Some(c) if !in_cgroup => {
            c.remove();
            None
        }
        c => c,
    };
    let why_no_cgroup = match (&cgroup, in_cgroup) {
        (None, false) if why_no_cgroup.is_none() => {
            Some("the kernel could not start it in a cgroup".to_string())
        }
        _ => why_no_cgroup,
    };
    (cgroup, why_no_cgroup)
}

impl Guardian {
    /// rlock's side of the guardian `pid`, just forked: its ends of the two pipes (the event
    /// end made non-blocking) and the cgroup it was born in, if any.
    fn new(pid: Pid, requests: OwnedFd, events: OwnedFd, cgroup: Option<&Cgroup>) -> Guardian {
        let _ = nix::fcntl::fcntl(&events, nix::fcntl::FcntlArg::F_SETFL(OFlag::O_NONBLOCK));
        Guardian {
            pid,
            pgid: pid,
            requests,
            events,
            partial: Vec::new(),
            asked: 0,
            cgroup: cgroup.map(|c| c.dir().to_path_buf()),
            alone: false,
        }
    }

    /// Waits for the guardian's first word on the command: started (then `Launched`, with what
    /// contains it), not started (the terminal goes back to rlock's group: exit 126 or 127), or
    /// the guardian ended first.
    fn wait_for_start(
        mut self,
        why_no_cgroup: Option<String>,
        terminal: Option<Terminal>,
        rlock_pgrp: Pid,
        program: &OsString,
        answer_by: Instant,
    ) -> Result<Launched, LaunchError> {
        let first = self.first_event(answer_by);
        match first {
            Some(Event::Started { pid, .. }) => {
                self.pgid = pid;
                let containment = match &self.cgroup {
                    Some(dir) => format!("its own cgroup, {}", dir.display()),
                    None => format!(
                        "the process tree below the guardian ({})",
                        why_no_cgroup.as_deref().unwrap_or("no cgroup")
                    ),
                };
                Ok(Launched {
                    guardian: self,
                    pgid: pid,
                    containment,
                })
            }
            Some(Event::NotStarted(errno)) => {
                if let Some(t) = terminal {
                    t.hand_to(rlock_pgrp);
                }
                Err(cannot_run(program, &io::Error::from(errno)))
            }
            None if !self.gone() => {
                // Stuck: it goes, and whatever it started with it (its orphans come to rlock).
                self.kill();
                if let Some(t) = terminal {
                    t.hand_to(rlock_pgrp);
                }
                super::stop_orphans(self.cgroup.as_deref());
                Err(LaunchError::Internal(
                    "the guardian did not say in time that the command started; it was killed, and the command with it".into(),
                ))
            }
            _ => Err(LaunchError::Internal(
                "the guardian ended before the command started; the command was not started".into(),
            )),
        }
    }

    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// The command's pid, which leads its process group.
    pub fn pgid(&self) -> Pid {
        self.pgid
    }

    /// The first event, waited for until `until`: the command started, or could not be (None:
    /// the guardian is gone, or did not answer in time). A guardian stopped meanwhile (by the
    /// command, say) is continued: it is looked at every `LOOK_AGAIN` while it has not
    /// answered (at once, most often).
    fn first_event(&mut self, until: Instant) -> Option<Event> {
        loop {
            match self.next_event() {
                Next::Event(event) => return Some(event),
                Next::Gone => return None,
                Next::Nothing => {}
            }
            self.continue_if_stopped();
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            let wait = PollTimeout::try_from(left.min(LOOK_AGAIN)).unwrap_or(PollTimeout::MAX);
            let mut fds = [PollFd::new(self.events.as_fd(), PollFlags::POLLIN)];
            let _ = nix::poll::poll(&mut fds, wait);
        }
    }

    /// Continues the guardian if it was stopped (it is rlock's child: `waitpid` says so).
    /// Nobody may stop the watchdog: a command that stops its guardian finds it running again.
    pub fn continue_if_stopped(&self) {
        let flags = WaitPidFlag::WNOHANG | WaitPidFlag::WUNTRACED;
        if let Ok(WaitStatus::Stopped(..)) = waitpid(self.pid, Some(flags)) {
            let _ = nix::sys::signal::kill(self.pid, Signal::SIGCONT);
        }
    }

    /// Whether the guardian has ended (and was reaped, if it was not yet).
    fn gone(&self) -> bool {
        !matches!(
            waitpid(self.pid, Some(WaitPidFlag::WNOHANG)),
            Ok(WaitStatus::StillAlive)
        )
    }

    /// SIGKILLs the guardian, which did not answer: the command gets its parent-death SIGKILL,
    /// and what it started comes to rlock (a subreaper too), to be stopped by rlock itself.
    pub fn kill(&self) {
        let _ = nix::sys::signal::kill(self.pid, Signal::SIGKILL);
    }

    /// The lease's moments after a successful renewal: the guardian counts down to them from
    /// now on (the grant's were told at the launch).
    pub fn renewed(&mut self, lease: Timeline) {
        let _ = nix::unistd::write(&self.requests, &timeline(lease));
    }

    /// The command's time limit (`--timeout`), told once: the guardian sends the lost-signal at
    /// its moment and SIGKILL at its kill moment, should rlock be stopped then.
    pub fn time_limit(&mut self, limit: Limit) {
        let mut both = [0u8; 24];
        both[..12].copy_from_slice(&protocol::moment(LIMIT_AT, limit.signal_at));
        both[12..].copy_from_slice(&protocol::moment(LIMIT_KILL_AT, limit.kill_at));
        let _ = nix::unistd::write(&self.requests, &both);
    }

    /// The next event, if one came, or that the guardian is gone (end of file, or killed).
    pub fn next_event(&mut self) -> Next {
        let (events, partial) = (&self.events, &mut self.partial);
        loop {
            if partial.len() >= 12 {
                let msg: Vec<u8> = partial.drain(..12).collect();
                match Event::decode(&msg) {
                    Some(event) => return Next::Event(event),
                    None => continue,
                }
            }
            let mut buf = [0u8; 120];
            match nix::unistd::read(events, &mut buf) {
                Ok(0) => return Next::Gone,
                Ok(n) => partial.extend_from_slice(&buf[..n]),
                Err(Errno::EINTR) => {}
                Err(_) => return Next::Nothing,
            }
        }
    }

    /// What to poll for the next event besides rlock's signalfd: readable when an event came
    /// or the guardian is gone.
    pub fn poll_fd(&self) -> PollFd<'_> {
        PollFd::new(self.events.as_fd(), PollFlags::POLLIN)
    }

    /// `sig` to every process the command started, wherever it moved (frozen first, so that
    /// none forks away meanwhile), by the guardian. Some(N) when the guardian was asked, and
    /// says `Event::Signalled(N)` once it is done.
    pub fn signal_all(&mut self, sig: Signal) -> Option<i32> {
        self.asked += 1;
        let request = encode(SIGNAL, sig as i32, self.asked);
        nix::unistd::write(&self.requests, &request)
            .ok()
            .map(|_| self.asked)
    }

    /// Waits until the guardian has ended (and reaps it), `until` at most; true once it has.
    /// It leaves as soon as nothing of the command runs, right after saying so: its end, which
    /// only the kernel tells, is what rlock believes, not a message on a pipe. Woken by its
    /// pidfd the moment it ends (Linux 5.3; else its event pipe's end of file tells). A guardian
    /// that was stopped is continued.
    pub fn wait_gone(&mut self, until: Instant) -> bool {
        use rustix::process::{PidfdFlags, pidfd_open};
        let pidfd = rustix::process::Pid::from_raw(self.pid.as_raw())
            .and_then(|pid| pidfd_open(pid, PidfdFlags::empty()).ok());
        let mut hung_up = false;
        loop {
            if !matches!(
                waitpid(self.pid, Some(WaitPidFlag::WNOHANG)),
                Ok(WaitStatus::StillAlive | WaitStatus::Stopped(..) | WaitStatus::Continued(..))
            ) {
                return true;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            let wait = PollTimeout::try_from(left.min(LOOK_AGAIN)).unwrap_or(PollTimeout::MAX);
            if let Some(fd) = &pidfd {
                let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
                if matches!(nix::poll::poll(&mut fds, wait), Ok(0)) {
                    self.continue_if_stopped();
                }
                continue;
            }
            // Without pidfds: its end of the event pipe closes as it exits, and it is a zombie
            // a moment later.
            self.continue_if_stopped();
            if hung_up {
                std::thread::sleep(Duration::from_micros(50).min(left));
                continue;
            }
            let mut buf = [0u8; 120];
            match nix::unistd::read(&self.events, &mut buf) {
                Ok(0) => hung_up = true,
                Ok(_) | Err(Errno::EINTR) => {}
                Err(_) => {
                    let _ = nix::poll::poll(&mut [self.poll_fd()], wait);
                }
            }
        }
    }

    /// Reaps the guardian once it has left (right after saying that nothing of the command
    /// runs), waiting a little for it: a guardian left to init would be a zombie where init
    /// does not reap. Then removes the cgroup, which the guardian lived in. Saying farewell and
    /// closing the request pipe first tells a guardian that has not left yet to stop what is
    /// left and go, and that rlock, alive, removes the cgroup.
    pub fn reap(self) {
        let Guardian {
            pid,
            requests,
            events,
            cgroup,
            ..
        } = self;
        let _ = nix::unistd::write(&requests, &encode(DONE, 0, 0));
        drop(requests);
        let gone = || {
            matches!(
                waitpid(pid, Some(WaitPidFlag::WNOHANG)),
                Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) | Err(_)
            )
        };
        // The guardian lived in the cgroup (with the command): once it is gone, the cgroup is
        // empty and rlock removes it (if the guardian has not, having left it to stop things).
        let remove = || {
            if let Some(dir) = &cgroup {
                contain::remove_cgroup(dir);
            }
        };
        if gone() {
            remove();
            return;
        }
        // Its end of the event pipe closes when it exits.
        let mut fds = [PollFd::new(events.as_fd(), PollFlags::POLLIN)];
        let until = std::time::Instant::now() + std::time::Duration::from_millis(200);
        loop {
            let mut buf = [0u8; 120];
            match nix::unistd::read(&events, &mut buf) {
                Ok(0) => break,
                Ok(_) | Err(Errno::EINTR) => continue,
                Err(_) => {}
            }
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return;
            }
            let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
            let _ = nix::poll::poll(&mut fds, PollTimeout::from(ms));
        }
        // Its descriptors close before it can be waited for: an exiting process is a zombie a
        // moment after its pipes report end of file.
        while !gone() {
            if std::time::Instant::now() >= until {
                return;
            }
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
        remove();
    }

    /// Whether rlock had no child before the guardian.
    pub fn alone(&self) -> bool {
        self.alone
    }

    /// The cgroup the command was meant to run in, if one was made.
    pub fn cgroup(&self) -> Option<&std::path::Path> {
        self.cgroup.as_deref()
    }
}
