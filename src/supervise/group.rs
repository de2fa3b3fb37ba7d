//! The command's process group, as rlock signals it (forwarded signals, SIGKILL from here at
//! once, SIGCONT). rlock is not the command's parent, the guardian is: once the guardian has
//! reaped the group's leader and the group has no member left, the group's number is free, and
//! another process group (anyone's) may take it, which a `killpg` by number would reach.
//!
//! So rlock holds a pidfd of the leader, opened when the guardian says the command started and
//! checked to be the guardian's child (a number reused before rlock opened it would belong to
//! some other process, whose parent is not the guardian). On Linux 6.9 and later,
//! `pidfd_send_signal` with `PIDFD_SIGNAL_PROCESS_GROUP` signals the group of the leader's own
//! `struct pid`, which a reused number never is: one system call, as `killpg` was, so a
//! forwarded Ctrl-C is as quick as before. On older kernels the group is signalled by number
//! only while its leader lives (a live leader holds the number: the group is its own); once it
//! has ended, not at all from here: the supervisor stops what outlives the leader through the
//! guardian, which walks the tree by pid and start time. Without pidfds (before Linux 5.3)
//! there is no way to tell, and the number is used as before.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// `PIDFD_SIGNAL_PROCESS_GROUP` (linux/pidfd.h, Linux 6.9): the signal goes to the process
/// group the pidfd's process leads.
const PIDFD_SIGNAL_PROCESS_GROUP: nix::libc::c_uint = 1 << 2;

/// What rlock knows of the group's leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Leader {
    /// A pidfd of it is held; whether it still runs (not ended).
    Held { alive: bool },
    /// It had been reaped before rlock could open it (or what had its number is not the
    /// guardian's child): the number is no longer the group's for sure.
    Gone,
    /// No pidfd could be opened for want of kernel support: nothing tells.
    Unknown,
}

/// How a signal reaches the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Route {
    /// `pidfd_send_signal(PIDFD_SIGNAL_PROCESS_GROUP)` on the leader's pidfd.
    Pidfd,
    /// `killpg` by number.
    Number,
    /// Not from here: the number may be another group's.
    Not,
}

/// The decision, apart from the system calls: `by_pidfd` is whether the kernel takes
/// `PIDFD_SIGNAL_PROCESS_GROUP` (not known to fail yet).
pub(super) fn route(leader: Leader, by_pidfd: bool) -> Route {
    match leader {
        Leader::Held { .. } if by_pidfd => Route::Pidfd,
        Leader::Held { alive: true } => Route::Number,
        Leader::Held { alive: false } | Leader::Gone => Route::Not,
        Leader::Unknown => Route::Number,
    }
}

/// The command's process group.
pub(super) struct Group {
    pgid: Pid,
    /// The leader's pidfd, when it could be opened and checked.
    pidfd: Option<OwnedFd>,
    /// No pidfd: the leader was gone already (true), or the kernel has none (false).
    gone: bool,
    /// Whether the kernel takes `PIDFD_SIGNAL_PROCESS_GROUP`, until it refuses it once.
    by_pidfd: bool,
}

impl Group {
    /// The group led by `pgid`, the command, a child of `guardian`: its pidfd is opened now,
    /// right after the guardian said the command started.
    pub(super) fn open(pgid: Pid, guardian: Pid) -> Group {
        use rustix::process::{PidfdFlags, pidfd_open};
        let opened = rustix::process::Pid::from_raw(pgid.as_raw())
            .ok_or(rustix::io::Errno::SRCH)
            .and_then(|pid| pidfd_open(pid, PidfdFlags::empty()));
        let (pidfd, gone) = match opened {
            // Checked after the pidfd was taken: if what has the number now is the guardian's
            // child leading its own group, it is the command (or, should the command have
            // ended and been reaped meanwhile, something the command started), and the pidfd
            // is of the command or of one that ended: neither is anyone else's.
            Ok(fd) if guardians_child(pgid, guardian) => (Some(fd), false),
            Ok(_) => (None, true),
            Err(e) => (None, e == rustix::io::Errno::SRCH),
        };
        Group {
            pgid,
            pidfd,
            gone,
            by_pidfd: true,
        }
    }

    fn leader(&self) -> Leader {
        match &self.pidfd {
            Some(fd) => {
                let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
                let ended = matches!(nix::poll::poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0);
                Leader::Held { alive: !ended }
            }
            None if self.gone => Leader::Gone,
            None => Leader::Unknown,
        }
    }

    /// `sig` to the group, unless its number may be another group's now.
    pub(super) fn signal(&mut self, sig: Signal) {
        // The pidfd first, without asking whether the leader lives: one system call. ESRCH:
        // nobody is left in the group. A kernel without the flag says EINVAL (a filter that
        // forbids the call, ENOSYS or EPERM): the number then, as far as it is surely the group's.
        if let (true, Some(fd)) = (self.by_pidfd, &self.pidfd) {
            match send_to_group(fd, sig) {
                Ok(()) | Err(nix::errno::Errno::ESRCH) => return,
                Err(nix::errno::Errno::EINVAL | nix::errno::Errno::ENOSYS) => self.by_pidfd = false,
                Err(_) => {}
            }
        }
        if route(self.leader(), false) == Route::Number {
            let _ = killpg(self.pgid, sig);
        }
    }
}

/// `sig` to the process group `fd`'s process leads (Linux 6.9; EINVAL before).
fn send_to_group(fd: &OwnedFd, sig: Signal) -> nix::Result<()> {
    // SAFETY: pidfd_send_signal with a valid descriptor, a valid signal, no siginfo (NULL is
    // allowed: the kernel fills it as kill does) and a flag; it touches no memory of ours.
    let r = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            sig as nix::libc::c_int,
            std::ptr::null::<nix::libc::siginfo_t>(),
            PIDFD_SIGNAL_PROCESS_GROUP,
        )
    };
    nix::errno::Errno::result(r).map(drop)
}

/// Whether the process numbered `pid` is now a child of `guardian` that leads its own group
/// (/proc/PID/stat: the fields after the name are state, ppid, pgrp).
fn guardians_child(pid: Pid, guardian: Pid) -> bool {
    let Ok(stat) = super::contain::read_proc(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let Some((_, after)) = stat.rsplit_once(") ") else {
        return false;
    };
    let mut fields = after.split(' ').skip(1).map(|f| f.parse::<i32>().ok());
    let (Some(ppid), Some(pgrp)) = (fields.next().flatten(), fields.next().flatten()) else {
        return false;
    };
    ppid == guardian.as_raw() && pgrp == pid.as_raw()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The group's number is used only while it is surely the group's: its leader lives, or
    /// nothing can tell (no pidfds). A leader that ended, or was gone before rlock looked,
    /// leaves a number another group may have taken.
    #[test]
    fn a_group_is_signalled_by_number_only_while_its_leader_holds_it() {
        for by_pidfd in [true, false] {
            assert_eq!(route(Leader::Gone, by_pidfd), Route::Not);
            assert_eq!(route(Leader::Unknown, by_pidfd), Route::Number);
        }
        for alive in [true, false] {
            assert_eq!(route(Leader::Held { alive }, true), Route::Pidfd);
        }
        assert_eq!(route(Leader::Held { alive: true }, false), Route::Number);
        assert_eq!(route(Leader::Held { alive: false }, false), Route::Not);
    }

    /// A real group: its leader a child of this process. Signalled through the pidfd (or by
    /// number while it lives, on an older kernel); once it has been reaped, whatever holds the
    /// number now, it is never signalled by number.
    #[test]
    fn a_reaped_leaders_number_is_not_signalled() {
        use std::os::unix::process::CommandExt;
        use std::os::unix::process::ExitStatusExt;
        use std::process::Command;
        let me = nix::unistd::getpid();
        let mut child = Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .expect("sleep");
        let pid = Pid::from_raw(child.id() as i32);
        let mut group = Group::open(pid, me);
        assert!(
            group.pidfd.is_some(),
            "the leader, this process's child, is held"
        );
        assert_eq!(group.leader(), Leader::Held { alive: true });
        group.signal(Signal::SIGTERM);
        let status = child.wait().expect("wait");
        assert_eq!(status.signal(), Some(Signal::SIGTERM as i32));
        // Reaped: the number is free, and may be anyone's.
        assert_eq!(group.leader(), Leader::Held { alive: false });
        assert_ne!(route(group.leader(), false), Route::Number);
        // Opened once reaped, or for someone else's child: never held.
        let late = Group::open(pid, me);
        assert!(late.pidfd.is_none());
        assert_eq!(late.leader(), Leader::Gone);
        let init = Group::open(Pid::from_raw(1), me);
        assert_eq!(
            init.leader(),
            Leader::Gone,
            "init is not this process's child"
        );
    }
}
