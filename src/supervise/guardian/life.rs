//! The guardian's own side, once forked: it makes itself the guardian, starts the command, and
//! then lives in one loop, each round reaping what changed below and passing the command's
//! changes up, waiting (for a child, a request, or the lease's next moment on its own timer),
//! and doing what rlock asks or the lease's moments say, until nothing below runs. Why the
//! guardian is the command's parent: guardian.rs.

use std::cell::{Cell, RefCell};
use std::os::fd::{AsFd, OwnedFd};
use std::time::Instant;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Pid, getpid, setpgid};

use super::NAME;
use super::protocol::{
    DONE, Event, KILL_AT, LIMIT_AT, LIMIT_KILL_AT, LOST_SIGNAL, SIGNAL, SIGNAL_AT, Word, decode,
    moment_of, tell, told_to_start,
};
use crate::supervise::contain::{self, Cgroup};
use crate::supervise::spawn::{Prepared, found_on_path, start};
use crate::supervise::terminal::Terminal;

/// The guardian's life: wait for rlock's word to start `argv` (with the lock's variables), start
/// it, then pass its changes up, reap what it leaves, signal everything below on request, and
/// once rlock is gone (end of file on `requests`) SIGKILL everything below and leave. rlock
/// dismissing it before the start (anything but `START` first), it leaves; rlock gone before
/// the start (killed while it waited for the lock), it removes the cgroup first. Never returns.
pub(super) fn guard(
    argv: &[std::ffi::OsString],
    terminal: Option<Terminal>,
    rlock_pgrp: Pid,
    cgroup: Option<&Cgroup>,
    requests: OwnedFd,
    events: OwnedFd,
) -> ! {
    let chld = settle();
    // Looked up and made ready while rlock waits for the grant; looked up again when the grant
    // came after a wait, as a shell would find the command then (one put meanwhile in an earlier
    // directory of PATH, say).
    let prepared = Prepared::new(argv, found_on_path(&argv[0]));
    let (env, prepared) = match told_to_start(&requests) {
        Word::Start { env, look_again } if look_again => {
            (env, prepared.map(|p| p.found_again(&argv[0])))
        }
        Word::Start { env, .. } => (env, prepared),
        // rlock, alive, removes the cgroup once this process has gone.
        Word::Dismissed => leave(),
        // A dead one cannot.
        Word::Gone => {
            if let Some(c) = cgroup
                && c.leave().is_ok()
            {
                c.remove();
            }
            leave()
        }
    };
    let _ = nix::fcntl::fcntl(&requests, nix::fcntl::FcntlArg::F_SETFL(OFlag::O_NONBLOCK));
    let env: Vec<(&str, String)> = env.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
    let Ok(prepared) = prepared.and_then(|p| p.with(&env)) else {
        tell(&events, &[Event::NotStarted(Errno::EINVAL)]);
        leave()
    };
    let leader = start_command(&prepared, terminal, rlock_pgrp, cgroup, &events);
    Life {
        me: getpid().as_raw(),
        cgroup,
        left: Cell::new(false),
        seen: RefCell::new(Vec::new()),
        requests,
        events,
        chld,
        leader,
        leader_done: false,
        killing: false,
        rlock_gone: false,
        said_done: false,
        lost_signal: None,
        lease: Moments::default(),
        limit: Moments::default(),
        lost_sent: false,
    }
    .run()
}

/// Makes this process the guardian: its own name, the subreaper of all the command starts, a
/// process group of its own, SIGCHLD and the terminal's stop signals blocked. Returns the
/// signalfd that SIGCHLD is read from, if one could be made.
fn settle() -> nix::Result<SignalFd> {
    let _ = nix::sys::prctl::set_name(NAME);
    // Inherited from rlock already; said again, so that the guardian never rests on it.
    crate::supervise::not_dumpable();
    forget_arguments();
    // Orphans of the command come here, whatever their group or session.
    let _ = nix::sys::prctl::set_child_subreaper(true);
    // A group of its own: nothing sent to rlock's job reaches it. Every signal rlock acts on
    // stays blocked here (the mask is inherited), so none can end it but SIGKILL; SIGCHLD (read
    // from a signalfd) and the terminal's stop signals are blocked here whatever rlock did. The
    // command starts with no signal blocked.
    let _ = setpgid(Pid::from_raw(0), Pid::from_raw(0));
    let mut blocked = SigSet::empty();
    for sig in [
        Signal::SIGCHLD,
        Signal::SIGTTIN,
        Signal::SIGTTOU,
        Signal::SIGTSTP,
    ] {
        blocked.add(sig);
    }
    let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&blocked), None);
    let mut sigchld = SigSet::empty();
    sigchld.add(Signal::SIGCHLD);
    SignalFd::with_flags(&sigchld, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
}

/// Overwrites this process's copy of rlock's command line (the memory `/proc/PID/cmdline`
/// reads) with the guardian's name: rlock's arguments may hold a URL with its password, and the
/// guardian may outlive rlock. Done as `setproctitle` does, on the fork's own copy: rlock's
/// stays as it was.
fn forget_arguments() {
    // /proc/self/stat's fields 48 and 49: where the arguments begin and end (Linux 3.5).
    let Ok(stat) = contain::read_proc("/proc/self/stat") else {
        return;
    };
    let Some((_, after)) = stat.rsplit_once(") ") else {
        return;
    };
    let mut fields = after.split(' ').skip(45).map(|f| f.parse::<usize>().ok());
    let (Some(Some(start)), Some(Some(end))) = (fields.next(), fields.next()) else {
        return;
    };
    let name = NAME.to_bytes();
    let Some(len) = end.checked_sub(start).filter(|&len| len > name.len()) else {
        return;
    };
    // SAFETY: [start, end) is the argument area the kernel laid out at rlock's exec, in this
    // process's own (copied) memory, writable, and read by no code of the guardian's: rlock
    // copied its arguments at its start.
    unsafe {
        std::ptr::write_bytes(start as *mut u8, 0, len);
        std::ptr::copy_nonoverlapping(name.as_ptr(), start as *mut u8, name.len());
    }
}

/// Starts the command as the leader of a process group of its own, hands it the terminal, and
/// tells rlock (`Started`); returns its pid. When it cannot be started: gives the terminal back
/// to rlock's group, tells rlock why (`NotStarted`), removes the cgroup if it may, and leaves.
fn start_command(
    prepared: &Prepared,
    terminal: Option<Terminal>,
    rlock_pgrp: Pid,
    cgroup: Option<&Cgroup>,
    events: &OwnedFd,
) -> Pid {
    let in_cgroup = cgroup.is_some();
    match start(prepared, terminal) {
        Ok(pid) => {
            let _ = setpgid(pid, pid);
            if let Some(t) = terminal {
                t.hand_to(pid);
            }
            tell(events, &[Event::Started { pid, in_cgroup }]);
            pid
        }
        Err(e) => {
            if let Some(t) = terminal {
                t.hand_to(rlock_pgrp);
            }
            let errno = Errno::from_raw(e.raw_os_error().unwrap_or(0));
            tell(events, &[Event::NotStarted(errno)]);
            if let Some(c) = cgroup
                && c.leave().is_ok()
            {
                c.remove();
            }
            leave()
        }
    }
}

/// The guardian once the command runs: what it watches, and what it has been told.
struct Life<'a> {
    /// The guardian's pid: the root of the tree below it, and not to be killed with it.
    me: i32,
    /// The cgroup the command runs in (when the guardian was born in it); else the tree.
    cgroup: Option<&'a Cgroup>,
    /// Whether the guardian has left the cgroup (to stop what is in it without stopping itself).
    left: Cell<bool>,
    /// In the tree: what the walks for earlier signals saw, SIGKILLed first when the time comes.
    seen: RefCell<contain::Seen>,
    /// Requests from rlock, non-blocking; end of file when rlock is gone (or done).
    requests: OwnedFd,
    /// Events up to rlock.
    events: OwnedFd,
    /// SIGCHLD, read from a signalfd, when one could be made.
    chld: nix::Result<SignalFd>,
    /// The command's first process, whose changes go up.
    leader: Pid,
    /// Whether the leader has ended (and was reaped).
    leader_done: bool,
    /// SIGKILL asked for (or rlock gone): kill rounds are repeated until nothing is left.
    killing: bool,
    /// End of file on `requests`: rlock is gone, or done.
    rlock_gone: bool,
    /// rlock said farewell: it is alive, and removes the cgroup once this process has gone.
    said_done: bool,
    /// The lost-signal, once rlock told it.
    lost_signal: Option<Signal>,
    /// The lease's moments, as rlock last told them.
    lease: Moments,
    /// The command's time limit's moments (`--timeout`), if rlock told them.
    limit: Moments,
    /// The lost-signal went to everything below (on the deadline's account or rlock's): once.
    lost_sent: bool,
}

/// When the lost-signal goes and when SIGKILL does, as rlock told them (`Lease::timeline`,
/// `Lease::limit`): the guardian only counts down to them.
#[derive(Default, Clone, Copy)]
struct Moments {
    signal_at: Option<Instant>,
    kill_at: Option<Instant>,
}

impl Life<'_> {
    /// Round after round until nothing below runs: reap and pass up what changed, wait for the
    /// next change or request, go on killing if asked to, and take rlock's request.
    fn run(mut self) -> ! {
        loop {
            // What changed below: the leader's changes go up; everything else is only reaped.
            // They go up in one write, with Empty when nothing is left: rlock never sees the
            // leader's end alone when nothing else runs, and so never takes it for leftovers to
            // stop.
            let (mut news, no_children) = self.reap();
            // Nothing below any more: every process the command started is a descendant of the
            // guardian (a subreaper) for as long as it lives.
            let done = no_children && self.leader_done;
            if done {
                news.push(Event::Empty);
            }
            tell(&self.events, &news);
            if done {
                self.finish()
            }
            self.wait();
            if !self.rlock_gone {
                self.take_requests();
            }
            self.enforce_deadline();
            if self.killing {
                self.stop_all(Signal::SIGKILL);
            }
        }
    }

    /// Reaps every child that changed: the leader's changes (stopped, continued, ended) as
    /// events to go up, anyone else's only reaped. Returns them, and whether no child is left.
    fn reap(&mut self) -> (Vec<Event>, bool) {
        let mut news: Vec<Event> = Vec::new();
        loop {
            let flags = WaitPidFlag::WNOHANG | WaitPidFlag::WUNTRACED | WaitPidFlag::WCONTINUED;
            match waitpid(None, Some(flags)) {
                Ok(WaitStatus::StillAlive) => return (news, false),
                Ok(status) if status.pid() == Some(self.leader) && !self.leader_done => {
                    match status {
                        WaitStatus::Exited(_, code) => {
                            self.leader_done = true;
                            news.push(Event::Exited(code as u8, None));
                        }
                        WaitStatus::Signaled(_, sig, _) => {
                            self.leader_done = true;
                            news.push(Event::Exited(128u8.wrapping_add(sig as u8), Some(sig)));
                        }
                        WaitStatus::Stopped(_, sig) => news.push(Event::Stopped(sig)),
                        WaitStatus::Continued(_) => news.push(Event::Continued),
                        _ => {}
                    }
                }
                Ok(_) | Err(Errno::EINTR) => {}
                Err(_) => return (news, true),
            }
        }
    }

    /// Nothing the command started runs any more, and rlock was told so: leaves at once, so
    /// that rlock, which waits for this process's end before it releases, waits for nothing
    /// else. What was put in the cgroup from outside (by a privileged hand) is rlock's to stop:
    /// it finds the cgroup populated once this process is gone, and kills it (`confirm.rs`).
    /// Only when rlock died (the request pipe closed without its farewell), or this process
    /// left the cgroup to stop the command, is the cgroup this process's: it stops what is left
    /// in it and removes it.
    fn finish(&self) -> ! {
        if let Some(c) = &self.cgroup {
            let rlock_died = if self.rlock_gone {
                !self.said_done
            } else {
                farewell(&self.requests) == Some(false)
            };
            // Having left to stop the command, it removes the cgroup: what is still in it goes
            // first (the rmdir would fail).
            if (rlock_died || self.left.get()) && c.holds_other_than(self.me) {
                self.stop_all(Signal::SIGKILL);
                let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
                while c.holds_other_than(self.me) && std::time::Instant::now() < until {
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
            }
            // Else rlock, alive, removes it once this process has gone (leaving would cost this
            // process milliseconds).
            if self.left.get() || (rlock_died && c.leave().is_ok()) {
                c.remove();
            }
        }
        leave()
    }

    /// Waits until a child changes (SIGCHLD), rlock asks something or goes, or the next round
    /// is due; then empties the signalfd.
    fn wait(&self) {
        // Without a signalfd for SIGCHLD, children are looked at every 20 ms; once killing,
        // every 100 ms too, with a new SIGKILL round for anything forked meanwhile. Else until
        // the lease's next moment, if one is set, rounded up (never a wake-up before it).
        let timeout = match (&self.chld, self.killing) {
            (_, true) => PollTimeout::from(100u8),
            (Ok(_), false) => PollTimeout::NONE,
            (Err(_), false) => PollTimeout::from(20u8),
        };
        let timeout = match self.next_due() {
            Some(at) => {
                let left = at.saturating_duration_since(Instant::now());
                let ms = left.as_nanos().div_ceil(1_000_000);
                let ms = PollTimeout::try_from(i32::try_from(ms).unwrap_or(i32::MAX))
                    .unwrap_or(PollTimeout::MAX);
                match timeout {
                    PollTimeout::NONE => ms,
                    t => t.min(ms),
                }
            }
            None => timeout,
        };
        let mut fds = Vec::with_capacity(2);
        if let Ok(fd) = &self.chld {
            fds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
        }
        if !self.rlock_gone {
            fds.push(PollFd::new(self.requests.as_fd(), PollFlags::POLLIN));
        }
        let _ = nix::poll::poll(&mut fds, timeout);
        if let Ok(fd) = &self.chld {
            while let Ok(Some(_)) = fd.read_signal() {}
        }
    }

    /// Reads rlock's requests, as many as came, and does them: a signal to everything below (a
    /// SIGKILL is repeated every round from then on), the lease's moments noted, its
    /// farewell noted; end of file, rlock gone.
    fn take_requests(&mut self) {
        let mut buf = [0u8; 12];
        loop {
            match nix::unistd::read(&self.requests, &mut buf) {
                Ok(12) => self.take(decode(&buf)),
                // rlock is gone (or done): nothing it started may run on unwatched.
                Ok(0) => {
                    self.rlock_gone = true;
                    self.killing = true;
                    self.stop_all(Signal::SIGKILL);
                    return;
                }
                Err(Errno::EINTR) => {}
                _ => return,
            }
        }
    }

    /// One request of rlock's.
    fn take(&mut self, (tag, a, b): (i32, i32, i32)) {
        match tag {
            DONE => self.said_done = true,
            LOST_SIGNAL => self.lost_signal = Signal::try_from(a).ok(),
            // Once the lost-signal went, the group is being stopped: a renewal no longer
            // moves its SIGKILL.
            SIGNAL_AT if !self.lost_sent => self.lease.signal_at = Some(moment_of(a, b)),
            KILL_AT if !self.lost_sent => self.lease.kill_at = Some(moment_of(a, b)),
            LIMIT_AT => self.limit.signal_at = Some(moment_of(a, b)),
            LIMIT_KILL_AT => self.limit.kill_at = Some(moment_of(a, b)),
            SIGNAL => {
                if let Ok(sig) = Signal::try_from(a)
                    && !self.killing
                {
                    // The lost-signal once, whether the deadline or rlock sent it first.
                    let lost = self.lost_signal == Some(sig);
                    let again = lost && self.lost_sent;
                    self.lost_sent |= lost;
                    self.killing = sig == Signal::SIGKILL;
                    if !again {
                        self.stop_all(sig);
                    }
                }
                // rlock may wait for this (a job stopped at the terminal is all stopped
                // before rlock stops itself and the shell says so).
                tell(&self.events, &[Event::Signalled(b)]);
            }
            _ => {}
        }
    }

    /// The next moment of the lease or the time limit, on this process's own clock: the
    /// earlier lost-signal until it went, then the earlier SIGKILL; None once killing, or with
    /// nothing told.
    fn next_due(&self) -> Option<Instant> {
        self.lost_signal.filter(|_| !self.killing)?;
        let signal = self.signal_due().filter(|_| !self.lost_sent);
        [signal, self.kill_due()].into_iter().flatten().min()
    }

    /// The earlier of the lease's and the time limit's SIGKILL moments.
    fn kill_due(&self) -> Option<Instant> {
        [self.lease.kill_at, self.limit.kill_at]
            .into_iter()
            .flatten()
            .min()
    }

    /// The earlier of the lease's and the time limit's lost-signal moments.
    fn signal_due(&self) -> Option<Instant> {
        [self.lease.signal_at, self.limit.signal_at]
            .into_iter()
            .flatten()
            .min()
    }

    /// What the lease's moments (and the time limit's) say now, whatever rlock is doing
    /// (stopped, killed, stuck): the lost-signal to everything below at its moment, SIGKILL at
    /// its own. rlock hears each (`OwnClock`): a renewal it took may not have reached this
    /// process in time, and the command's death must not then pass for its own.
    fn enforce_deadline(&mut self) {
        while let Some(at) = self.next_due() {
            let now = Instant::now();
            if now < at {
                return;
            }
            // A renewal rlock wrote since this round's read moves the moment: read it first.
            // That narrows the race with a renewal that comes at the last moment; it cannot
            // close it (rlock may be about to write), hence `OwnClock`.
            if !self.rlock_gone {
                self.take_requests();
                if self.next_due().is_none_or(|at| now < at) {
                    continue;
                }
            }
            let Some(lost) = self.lost_signal else { return };
            // The lease's moment when it has come, else the time limit's.
            let (signal, lease_due) =
                match !self.lost_sent && self.signal_due().is_some_and(|s| now >= s) {
                    true => {
                        self.lost_sent = true;
                        self.stop_all(lost);
                        (lost, self.lease.signal_at)
                    }
                    false => {
                        self.killing = true;
                        (Signal::SIGKILL, self.lease.kill_at)
                    }
                };
            let limit = lease_due.is_none_or(|at| now < at);
            tell(&self.events, &[Event::OwnClock { signal, limit }]);
        }
    }

    /// `sig` to everything the command started: the cgroup when the command is in it (it
    /// holds what left the tree: `setsid` and a double fork), and the tree below this process
    /// (it holds what left the cgroup: a root command may move a child elsewhere). A guardian
    /// that cannot leave the cgroup stops the tree alone.
    fn stop_all(&self, sig: Signal) {
        match self.cgroup.as_ref() {
            Some(c) if self.left.get() || c.leave().is_ok() => {
                self.left.set(true);
                c.signal(sig);
                // Only what the cgroup did not reach: a process gets the lost-signal once.
                match sig {
                    Signal::SIGKILL => contain::kill_tree(self.me),
                    sig => contain::signal_tree_outside(self.me, c, sig),
                }
            }
            _ if sig == Signal::SIGKILL => {
                // Before the walk of /proc (which on a busy host takes long enough to matter):
                // the command's own group in one call (its pid is not reused while it is
                // unreaped, so the group is its own), and what the lost-signal's walk saw.
                if !self.leader_done {
                    let _ = nix::sys::signal::killpg(self.leader, sig);
                }
                contain::kill_seen(&self.seen.borrow());
                contain::kill_tree(self.me);
            }
            _ => {
                let seen = contain::signal_tree(self.me, sig, self.kill_due());
                self.seen.borrow_mut().extend(seen);
            }
        }
    }
}

/// Ends the guardian, a fork of rlock, without running anything of rlock's: no atexit handler,
/// no destructor, no flushing of buffers that rlock's copy will flush too.
fn leave() -> ! {
    // SAFETY: `_exit` ends the process at once; nothing of this process runs after it.
    unsafe { nix::libc::_exit(0) }
}

/// What rlock said last on `requests`, once the command has ended: Some(true) when it said
/// farewell (it is alive and done), Some(false) when the pipe closed without it (rlock died),
/// None when nothing came yet (rlock is still at work).
fn farewell(requests: &OwnedFd) -> Option<bool> {
    let mut buf = [0u8; 12];
    loop {
        match nix::unistd::read(requests, &mut buf) {
            Ok(12) if decode(&buf).0 == DONE => return Some(true),
            Ok(0) => return Some(false),
            Ok(_) | Err(Errno::EINTR) => {}
            Err(_) => return None,
        }
    }
}
