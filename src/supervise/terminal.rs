//! Terminal and job control: the command gets the terminal's foreground as a shell's job does,
//! and rlock takes it back afterwards; a command stopped at the terminal (Ctrl-Z) stops rlock.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};
use nix::unistd::{Pid, getpgrp, isatty, tcgetpgrp, tcsetpgrp};

use crate::signals::stop_self;

/// The standard stream through which rlock reaches its controlling terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Terminal {
    Stdin,
    Stdout,
    Stderr,
}

impl Terminal {
    /// The terminal whose foreground process group rlock is, if any (stdin, stdout or stderr).
    pub fn foreground() -> Option<Terminal> {
        [Terminal::Stdin, Terminal::Stdout, Terminal::Stderr]
            .into_iter()
            .find(|t| {
                t.with_fd(|fd| isatty(fd).unwrap_or(false) && tcgetpgrp(fd).ok() == Some(getpgrp()))
            })
    }

    fn with_fd<R>(self, f: impl FnOnce(BorrowedFd<'_>) -> R) -> R {
        match self {
            Terminal::Stdin => f(std::io::stdin().as_fd()),
            Terminal::Stdout => f(std::io::stdout().as_fd()),
            Terminal::Stderr => f(std::io::stderr().as_fd()),
        }
    }

    /// The descriptor number, for the spawned child (which may not touch Rust's handles).
    pub fn raw_fd(self) -> RawFd {
        self.with_fd(|fd| fd.as_raw_fd())
    }

    /// The process group in the terminal's foreground.
    fn foreground_group(self) -> Option<Pid> {
        self.with_fd(|fd| tcgetpgrp(fd).ok())
    }

    /// Makes `pgrp` the terminal's foreground process group, with SIGTTOU blocked (a background
    /// group may not otherwise change it).
    pub fn hand_to(self, pgrp: Pid) {
        let mut ttou = SigSet::empty();
        ttou.add(Signal::SIGTTOU);
        let mut old = SigSet::empty();
        let _ = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&ttou), Some(&mut old));
        self.with_fd(|fd| {
            let _ = tcsetpgrp(fd, pgrp);
        });
        let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    }

    /// Takes the terminal back for rlock's own process group, if the child's group `pgid` still
    /// has it (after `bg` the shell has it, and must keep it).
    pub fn take_back_from(self, pgid: Pid) {
        if self.foreground_group() == Some(pgid) {
            self.hand_to(getpgrp());
        }
    }

    /// The child stopped at the terminal (Ctrl-Z): give the terminal back to rlock's group and
    /// stop rlock too, so that the shell sees its job stopped and shows its prompt. Returns,
    /// once the shell continues the job, whether rlock is in the terminal's foreground again
    /// (`fg`).
    ///
    /// While stopped, rlock cannot renew: a lease that ran out meanwhile is found lost on resume.
    pub fn stop_like_a_job(self, pgid: Pid, sig: Signal) -> bool {
        self.take_back_from(pgid);
        stop_self(sig);
        // Resumed (SIGCONT from the shell).
        self.foreground_group() == Some(getpgrp())
    }
}
