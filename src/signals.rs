//! The signals rlock acts on, read from a signalfd instead of caught by a handler.
//!
//! **No `ctrlc` crate**, by decision: rlock blocks eight signals (the six it forwards, SIGTSTP
//! and SIGCHLD) and reads them from a signalfd, with no helper thread. ctrlc installs an
//! SA_RESTART handler for INT/TERM/HUP only and starts a thread of its own.
//!
//! `acquire` and a waiting `exec` read them between Redis requests (a signal ends the wait);
//! `supervise` reads them while the command runs (they are passed on to it).

use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::unistd::{getpgrp, getpid, getppid};

/// Signals rlock passes on to the child (and that end a wait before there is a child).
pub const FORWARDED: [Signal; 6] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// The FORWARDED signals, and for `exec` also SIGTSTP (passed on to the child; rlock then
/// stops when the child does) and SIGCHLD (the child stopped, continued or ended).
///
/// A signal that was ignored when rlock started (under nohup, or in a background job of a
/// non-interactive shell) stays ignored, by rlock and by the command. The others are blocked
/// for the life of the process, in this thread and every thread started later (they inherit
/// the mask), so that no system call of rlock's is interrupted: a socket read with a timeout is
/// never restarted, and would fail with EINTR. The child unblocks them before it runs. No
/// thread waits for them: rlock reads them when it looks.
pub struct Signals {
    fd: SignalFd,
}

impl Signals {
    /// For a process that waits for a lock and runs nothing.
    pub fn for_wait() -> io::Result<Signals> {
        Signals::catch(&FORWARDED)
    }

    /// For `exec`, which runs the command as a job.
    ///
    /// SIGCHLD is put back to its default first: ignored (by a parent that ignores it, which
    /// rlock inherits), it would make the kernel reap the child unasked, and its exit status
    /// would be lost.
    pub fn for_exec() -> io::Result<Signals> {
        set_default(Signal::SIGCHLD)?;
        let mut wanted = FORWARDED.to_vec();
        wanted.extend([Signal::SIGTSTP, Signal::SIGCHLD]);
        Signals::catch(&wanted)
    }

    fn catch(wanted: &[Signal]) -> io::Result<Signals> {
        let mut set = SigSet::empty();
        for &sig in wanted {
            if !is_ignored(sig) {
                set.add(sig);
            }
        }
        pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&set), None)?;
        let fd = SignalFd::with_flags(&set, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;
        Ok(Signals { fd })
    }

    /// The next signal that came and has not been read yet, without waiting.
    pub fn try_next(&self) -> Option<Signal> {
        match self.fd.read_signal() {
            Ok(Some(info)) => Signal::try_from(info.ssi_signo as i32).ok(),
            _ => None,
        }
    }
}

/// The signals that end a wait for a lock (`acquire`): any of FORWARDED.
impl crate::lock::Interrupt for Signals {
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.as_fd())
    }

    fn take(&self) -> Option<Signal> {
        self.try_next()
    }
}

/// No signal watched: a wait that is not interrupted (`-n`).
impl crate::lock::Interrupt for Option<Signals> {
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.as_ref().map(AsFd::as_fd)
    }

    fn take(&self) -> Option<Signal> {
        self.as_ref().and_then(Signals::try_next)
    }
}

impl AsFd for Signals {
    /// Readable when a signal is pending (for poll).
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Puts `sig` back to its default action. rlock installs no handler of its own for any signal:
/// this only undoes an inherited SIG_IGN.
fn set_default(sig: Signal) -> nix::Result<()> {
    disposition(sig, true).map(drop)
}

/// True if `sig` is ignored (SIG_IGN) in this process.
pub fn is_ignored(sig: Signal) -> bool {
    disposition(sig, false).unwrap_or(false)
}

/// Whether `sig` was ignored (SIG_IGN), read by sigaction, which also puts it back to its
/// default action (SIG_DFL) when `to_default`.
fn disposition(sig: Signal, to_default: bool) -> nix::Result<bool> {
    // SAFETY: sigaction reads the disposition into `old`, a zeroed sigaction on this stack
    // frame, and sets `default` (SIG_DFL, no handler function, an empty mask) only when asked:
    // no handler of rlock's is replaced, so nothing that runs in signal context changes.
    unsafe {
        let mut default: nix::libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = nix::libc::SIG_DFL;
        let mut old: nix::libc::sigaction = std::mem::zeroed();
        let new = match to_default {
            true => &default as *const nix::libc::sigaction,
            false => std::ptr::null(),
        };
        nix::errno::Errno::result(nix::libc::sigaction(sig as i32, new, &mut old))?;
        Ok(old.sa_sigaction == nix::libc::SIG_IGN)
    }
}

/// Ends rlock by `sig` with its default action, after everything else is done: a command killed
/// by Ctrl-C (or a wait ended by it) makes rlock die of SIGINT too, so that the shell that ran
/// rlock stops its loop or script as it does when a command of its own is interrupted.
pub fn die_by(sig: Signal) {
    let _ = set_default(sig);
    let mut set = SigSet::empty();
    set.add(sig);
    let _ = pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&set), None);
    let _ = nix::sys::signal::raise(sig);
}

/// Stops rlock by `sig`, a stop signal from the terminal (SIGTSTP for Ctrl-Z), with its default
/// action, so that whoever waits for rlock (its shell, or an enclosing `rlock exec`) sees a job
/// stopped at the terminal, not a SIGSTOP from someone. rlock blocks SIGTSTP to read it from
/// its signalfd: it is let through for this once. Where `sig` would not stop rlock (ignored, or
/// discarded by the kernel in a group no shell controls), SIGSTOP does. Returns once rlock is
/// continued.
pub fn stop_self(sig: Signal) {
    if is_ignored(sig) || !in_a_controlled_job() {
        let _ = nix::sys::signal::kill(getpid(), Signal::SIGSTOP);
        return;
    }
    let mut set = SigSet::empty();
    set.add(sig);
    let mut old = SigSet::empty();
    let _ = pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&set), Some(&mut old));
    let _ = nix::sys::signal::raise(sig);
    let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
}

/// False when rlock's process group may be orphaned, where the kernel discards SIGTSTP, SIGTTIN
/// and SIGTTOU instead of stopping it. It is not when rlock's parent is in another group of the
/// same session: a shell that runs rlock as a job, or an enclosing `rlock exec`.
fn in_a_controlled_job() -> bool {
    let parent = Some(getppid());
    nix::unistd::getpgid(parent).ok() != Some(getpgrp())
        && nix::unistd::getsid(parent).ok() == nix::unistd::getsid(None).ok()
}
