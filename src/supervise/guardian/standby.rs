//! The guardian made before the grant: forked (into the command's cgroup) while Redis answers
//! the try for the lock, it settles and looks the command up, then waits for rlock's word. The
//! grant then costs the command's start alone: the lock's variables go down the request pipe
//! with the lease's moments, and the guardian starts the command. A waiter keeps it while it
//! waits, and dismisses it when the wait ends without a grant.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::time::Instant;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::{Pid, getpgrp};

use super::life::guard;
use super::protocol::{LOST_SIGNAL, START, encode};
use super::{Guardian, Launched, born_in, fork_failure, guardian_not_started, protocol, timeline};
use crate::lock::Timeline;
use crate::supervise::LaunchError;
use crate::supervise::contain::Cgroup;
use crate::supervise::spawn::fork_guardian;
use crate::supervise::terminal::Terminal;

/// rlock's side of a guardian that waits for the word to start the command.
pub struct Standby {
    pid: Pid,
    requests: OwnedFd,
    events: OwnedFd,
    cgroup: Option<Cgroup>,
    why_no_cgroup: Option<String>,
    terminal: Option<Terminal>,
    rlock_pgrp: Pid,
    alone: bool,
    program: OsString,
    /// When the guardian looked the command up on PATH (about): a grant asked for later came
    /// after a wait, and has it looked up again.
    made: Instant,
}

/// Forks the guardian for `argv`, in `cgroup` when there is one, to wait for `Standby::launch`.
/// If the guardian cannot be started, neither is the command (exit 70); nor when it cannot be
/// started in the cgroup and the cgroup is `required` (exit 78).
pub fn stand_by(
    argv: &[OsString],
    terminal: Option<Terminal>,
    cgroup: Option<Cgroup>,
    why_no_cgroup: Option<String>,
    required: bool,
) -> Result<Standby, LaunchError> {
    use std::os::unix::ffi::OsStrExt;
    let give_up = |failure: LaunchError| {
        if let Some(c) = &cgroup {
            c.remove();
        }
        failure
    };
    if argv.iter().any(|a| a.as_bytes().contains(&0)) {
        return Err(give_up(nul()));
    }
    let (req_read, req_write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)
        .map_err(|e| give_up(guardian_not_started("pipe", e)))?;
    let (ev_read, ev_write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)
        .map_err(|e| give_up(guardian_not_started("pipe", e)))?;
    let rlock_pgrp = getpgrp();
    // Whether this process had children before (a shell that exec'd rlock may leave some).
    let alone = matches!(
        waitpid(None, Some(WaitPidFlag::WNOHANG)),
        Err(Errno::ECHILD)
    );
    // Both sides count the lease's moments from this moment.
    protocol::base();
    let made = Instant::now();
    let (pid, in_cgroup, (requests, events)) = fork_guardian(
        cgroup.as_ref().map(Cgroup::dir_fd),
        required,
        (req_write, ev_read),
        |in_cgroup| {
            let cgroup = cgroup.as_ref().filter(|_| in_cgroup);
            guard(argv, terminal, rlock_pgrp, cgroup, req_read, ev_write)
        },
    )
    .map_err(|e| give_up(fork_failure(e, cgroup.as_ref(), required)))?;
    let (cgroup, why_no_cgroup) = born_in(cgroup, in_cgroup, why_no_cgroup);
    Ok(Standby {
        pid,
        requests,
        events,
        cgroup,
        why_no_cgroup,
        terminal,
        rlock_pgrp,
        alone,
        program: argv[0].clone(),
        made,
    })
}

fn nul() -> LaunchError {
    LaunchError::Usage("the command has a NUL byte in it".into())
}

impl Standby {
    /// The terminal whose foreground the command gets, if rlock had one.
    pub fn terminal(&self) -> Option<Terminal> {
        self.terminal
    }

    /// Tells the guardian to start the command with `env` added to rlock's environment, and
    /// waits for its word that it started until `answer_by` at most: a guardian that has not
    /// answered then is killed with what it started (exit 70), a stopped one is continued
    /// meanwhile. `lost_signal` and the lease's timeline are told before the start: a grant
    /// that came late leaves the lease short, and the guardian enforces it from the command's
    /// first instant, whatever rlock is doing. This is the one time the grant's timeline is
    /// told; renewals are told by `Guardian::renewed`. `asked`: when the granted try was sent;
    /// one sent after the guardian was made (a wait) has it look the command up again.
    pub fn launch(
        self,
        env: &[(&str, String)],
        lost_signal: Signal,
        lease: Option<Timeline>,
        answer_by: Instant,
        asked: Instant,
    ) -> Result<Launched, LaunchError> {
        let mut vars = Vec::new();
        for (name, value) in env {
            if name.contains(['\0', '=']) || value.contains('\0') {
                self.dismiss();
                return Err(nul());
            }
            vars.extend_from_slice(name.as_bytes());
            vars.push(b'=');
            vars.extend_from_slice(value.as_bytes());
            vars.push(0);
        }
        let look_again = i32::from(asked > self.made);
        let len = i32::try_from(vars.len()).unwrap_or(i32::MAX);
        let mut told = encode(START, len, look_again).to_vec();
        told.extend_from_slice(&vars);
        told.extend_from_slice(&encode(LOST_SIGNAL, lost_signal as i32, 0));
        if let Some(lease) = lease {
            told.extend_from_slice(&timeline(lease));
        }
        // A guardian that is gone takes none of it: its end is seen below.
        let _ = write_all(&self.requests, &told);
        let Standby {
            pid,
            requests,
            events,
            cgroup,
            why_no_cgroup,
            terminal,
            rlock_pgrp,
            alone,
            program,
            made: _,
        } = self;
        let mut guardian = Guardian::new(pid, requests, events, cgroup.as_ref());
        guardian.alone = alone;
        guardian.wait_for_start(why_no_cgroup, terminal, rlock_pgrp, &program, answer_by)
    }

    /// The guardian goes without starting anything, and the cgroup with it.
    pub fn dismiss(self) {
        Guardian::new(self.pid, self.requests, self.events, self.cgroup.as_ref()).reap();
    }
}

/// All of `data` to the blocking pipe `fd`.
fn write_all(fd: &OwnedFd, mut data: &[u8]) -> nix::Result<()> {
    while !data.is_empty() {
        match nix::unistd::write(fd, data) {
            Ok(n) => data = &data[n..],
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
