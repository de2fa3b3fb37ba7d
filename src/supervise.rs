//! The child as a job: spawning it in a process group of its own, handing it the terminal,
//! forwarding signals, stopping it when the lease runs out, and mapping its exit status.
//! Every `kill` rlock sends is in this file.

use std::collections::VecDeque;
use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags};
use nix::sched::CloneFlags;
use nix::sys::signal::{SigSet, SigmaskHow, Signal, killpg, pthread_sigmask, sigprocmask};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::time::TimeSpec;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Pid, getpgrp, getpid, getppid, setpgid, tcgetpgrp, tcsetpgrp};

use crate::exit::{Code, Failure};
use crate::watchdog::Report;

/// Signals rlock passes on to the child (and that end a wait before there is a child).
pub const FORWARDED: [Signal; 6] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// Everything the supervisor waits for: signals, changes of the child, and the renewals.
#[derive(Debug)]
pub enum Event {
    Signal(i32),
    /// The child stopped, by this signal (SIGTSTP for Ctrl-Z, SIGSTOP, ...).
    Stopped(i32),
    /// The child was continued.
    Continued,
    /// The child ended: its status as a shell reports it, and the signal that killed it.
    Exited(u8, Option<i32>),
    Watchdog(Report),
}

/// The signals rlock acts on, read from a signalfd instead of caught by a handler: the
/// FORWARDED ones, and for `exec` also SIGTSTP (passed on to the child; rlock then stops when
/// the child does) and SIGCHLD (the child stopped, continued or ended).
///
/// A signal that was ignored when rlock started (under nohup, or in a background job of a
/// non-interactive shell) stays ignored, by rlock and by the command. The others are blocked
/// for the life of the process, in this thread and every thread started later (they inherit
/// the mask), so that no system call of rlock's is interrupted: a socket read with a timeout is
/// never restarted, and would fail with EINTR. The child unblocks them before it runs. No
/// thread waits for them: rlock reads them when it looks, between Redis requests while it
/// waits for the lock and in `supervise` while the command runs.
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
        // SAFETY: setting the default disposition; rlock has no handler of its own for it.
        unsafe { nix::sys::signal::signal(Signal::SIGCHLD, nix::sys::signal::SigHandler::SigDfl) }?;
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
    pub fn try_next(&self) -> Option<i32> {
        match self.fd.read_signal() {
            Ok(Some(info)) => Some(info.ssi_signo as i32),
            _ => None,
        }
    }
}

/// Reports from the renewal thread, which also wake `supervise` from its wait.
pub struct ReportSender {
    tx: Sender<Report>,
    wake: OwnedFd,
}

impl ReportSender {
    pub fn send(&self, report: Report) {
        if self.tx.send(report).is_ok() {
            // A full pipe already holds a wake-up.
            let _ = nix::unistd::write(&self.wake, b"r");
        }
    }
}

/// The receiving end of `reports`.
pub struct ReportReceiver {
    rx: Receiver<Report>,
    wake: OwnedFd,
}

/// A channel for the renewal thread's reports.
pub fn reports() -> io::Result<(ReportSender, ReportReceiver)> {
    let (tx, rx) = std::sync::mpsc::channel();
    let (read_end, write_end) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
    Ok((
        ReportSender {
            tx,
            wake: write_end,
        },
        ReportReceiver { rx, wake: read_end },
    ))
}

/// True if `sig` is ignored (SIG_IGN) in this process.
fn is_ignored(sig: Signal) -> bool {
    // SAFETY: sigaction with a null new action only reads the current disposition.
    unsafe {
        let mut old: nix::libc::sigaction = std::mem::zeroed();
        nix::libc::sigaction(sig as i32, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction == nix::libc::SIG_IGN
    }
}

/// Ends rlock by `sig` with its default action, after everything else is done: a command killed
/// by Ctrl-C makes rlock die of SIGINT too, so that the shell that ran rlock stops its loop or
/// script as it does when a command of its own is interrupted.
pub fn die_by(sig: Signal) {
    // SAFETY: resetting a disposition to the default and raising the signal.
    unsafe {
        let _ = nix::sys::signal::signal(sig, nix::sys::signal::SigHandler::SigDfl);
    }
    let mut set = SigSet::empty();
    set.add(sig);
    let _ = pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&set), None);
    let _ = nix::sys::signal::raise(sig);
}

/// Kills the child's whole process group if rlock dies without saying goodbye (kill -9): the
/// parent-death signal reaches only the child itself, not what it started (`sh -c`'s
/// commands), which would otherwise run on with nobody renewing the lock.
pub struct Guardian {
    goodbye: std::os::fd::OwnedFd,
}

impl Guardian {
    /// Forks a small process that waits on a pipe: a byte means "done, stand down"; end of file
    /// (rlock died) means SIGKILL to the group `pgid`. It ignores job-control and terminal
    /// signals and lives in a process group of its own, so nothing meant for rlock stops it.
    pub fn arm(pgid: Pid) -> Option<Guardian> {
        let (read_end, write_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).ok()?;
        // SAFETY: the child of this fork (rlock has threads) only makes async-signal-safe
        // system calls (sigaction, setpgid, close, read, kill, _exit); it allocates nothing.
        match unsafe { nix::unistd::fork() }.ok()? {
            nix::unistd::ForkResult::Child => {
                use std::os::fd::AsRawFd;
                for sig in [
                    Signal::SIGINT,
                    Signal::SIGTERM,
                    Signal::SIGHUP,
                    Signal::SIGQUIT,
                    Signal::SIGUSR1,
                    Signal::SIGUSR2,
                    Signal::SIGTSTP,
                    Signal::SIGTTIN,
                    Signal::SIGTTOU,
                    Signal::SIGPIPE,
                ] {
                    // SAFETY: setting a disposition to SIG_IGN.
                    unsafe {
                        let _ = nix::sys::signal::signal(sig, nix::sys::signal::SigHandler::SigIgn);
                    }
                }
                let _ = setpgid(Pid::from_raw(0), Pid::from_raw(0));
                // SAFETY: closing our copy of the write end, so that rlock's death is EOF.
                unsafe { nix::libc::close(write_end.as_raw_fd()) };
                let mut byte = [0u8; 1];
                loop {
                    // SAFETY: reading one byte into a stack buffer.
                    let n = unsafe {
                        nix::libc::read(read_end.as_raw_fd(), byte.as_mut_ptr().cast(), 1)
                    };
                    if n == 0 {
                        let _ = killpg(pgid, Signal::SIGKILL);
                        break;
                    }
                    if n == 1 || nix::errno::Errno::last() != nix::errno::Errno::EINTR {
                        break;
                    }
                }
                // SAFETY: leaving without running anything of the parent's (no atexit, no
                // destructors).
                unsafe { nix::libc::_exit(0) }
            }
            nix::unistd::ForkResult::Parent { .. } => {
                drop(read_end);
                Some(Guardian { goodbye: write_end })
            }
        }
    }

    /// The child is gone and the lock dealt with: the guardian leaves the group alone.
    pub fn stand_down(self) {
        let _ = nix::unistd::write(&self.goodbye, b"x");
    }
}

/// The terminal whose foreground process group rlock is, if any (fd 0, 1 or 2).
pub fn foreground_terminal() -> Option<i32> {
    (0..3).find(|&fd| {
        // SAFETY: fds 0-2 stay open for the life of the process; we only query them.
        let bfd = unsafe { BorrowedFd::borrow_raw(fd) };
        nix::unistd::isatty(bfd).unwrap_or(false) && tcgetpgrp(bfd).ok() == Some(getpgrp())
    })
}

/// Makes `pgrp` the foreground process group of terminal `fd`, with SIGTTOU blocked (a
/// background group may not otherwise change it). Async-signal-safe: used in the child too.
fn hand_terminal(fd: i32, pgrp: Pid) {
    let mut ttou = SigSet::empty();
    ttou.add(Signal::SIGTTOU);
    let mut old = SigSet::empty();
    let _ = sigprocmask(SigmaskHow::SIG_BLOCK, Some(&ttou), Some(&mut old));
    // SAFETY: fd is 0, 1 or 2, open for the life of the process.
    let _ = tcsetpgrp(unsafe { BorrowedFd::borrow_raw(fd) }, pgrp);
    let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
}

/// Takes the terminal back for rlock's own process group, if the child's group `pgid` still
/// has it (after `bg` the shell has it, and must keep it).
pub fn restore_terminal(fd: Option<i32>, pgid: Pid) {
    if let Some(fd) = fd {
        // SAFETY: fds 0-2 stay open for the life of the process; we only query the terminal.
        if tcgetpgrp(unsafe { BorrowedFd::borrow_raw(fd) }).ok() != Some(pgid) {
            return;
        }
        let mut ttou = SigSet::empty();
        ttou.add(Signal::SIGTTOU);
        let mut old = SigSet::empty();
        let _ = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&ttou), Some(&mut old));
        // SAFETY: as in hand_terminal.
        let _ = tcsetpgrp(unsafe { BorrowedFd::borrow_raw(fd) }, getpgrp());
        let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    }
}

/// Spawns `argv` directly (no shell, searching PATH) as the leader of a new process group,
/// with the terminal's foreground when rlock had it, SIGKILL on rlock's death, no blocked
/// signals, and rlock's environment plus `env`. Returns the child's pid.
///
/// The child is started as `posix_spawn` does, sharing rlock's memory until it execs (vfork):
/// rlock's page tables are not copied, and none of its pages has to be copied on write
/// afterwards. So the child only makes async-signal-safe system calls on memory prepared
/// before, and reports a failed exec through `exec_errno`.
///
/// Must be called from the thread that lives as long as rlock: the parent-death signal fires
/// when the *thread* that forked the child exits.
pub fn spawn(
    argv: &[OsString],
    env: &[(&str, String)],
    terminal: Option<i32>,
) -> Result<Pid, Failure> {
    let c_string = |bytes: Vec<u8>| {
        CString::new(bytes).map_err(|_| Failure::Usage("the command has a NUL byte in it".into()))
    };
    let args = argv
        .iter()
        .map(|a| c_string(a.as_bytes().to_vec()))
        .collect::<Result<Vec<_>, _>>()?;
    let mut vars = Vec::new();
    for (name, value) in std::env::vars_os() {
        if !env.iter().any(|(ours, _)| name == *ours) {
            vars.push(c_string(
                [name.as_bytes(), b"=", value.as_bytes()].concat(),
            )?);
        }
    }
    for (name, value) in env {
        vars.push(c_string(format!("{name}={value}").into_bytes())?);
    }
    let pointers = |strings: &[CString]| {
        strings
            .iter()
            .map(|s| s.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect::<Vec<*const nix::libc::c_char>>()
    };
    let (argp, envp) = (pointers(&args), pointers(&vars));
    let parent = getpid();
    let exec_errno = AtomicI32::new(0);
    let child = Box::new(|| -> isize {
        let _ = setpgid(Pid::from_raw(0), Pid::from_raw(0));
        if let Some(fd) = terminal {
            hand_terminal(fd, getpid());
        }
        let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
        if getppid() != parent {
            // rlock died before the parent-death signal was armed.
            let _ = nix::sys::signal::raise(Signal::SIGKILL);
        }
        // SAFETY: restoring the default disposition of SIGPIPE (Rust's runtime ignores it in
        // rlock; the command must get it as usual). The child has its own signal table.
        unsafe {
            let _ = nix::sys::signal::signal(Signal::SIGPIPE, nix::sys::signal::SigHandler::SigDfl);
        }
        let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);
        // SAFETY: both arrays are null-terminated and point into strings that outlive the
        // child's use of them (rlock waits until the exec).
        unsafe { nix::libc::execvpe(argp[0], argp.as_ptr(), envp.as_ptr()) };
        exec_errno.store(nix::errno::Errno::last_raw(), Ordering::Relaxed);
        // SAFETY: leaving the child at once, running nothing of rlock's.
        unsafe { nix::libc::_exit(127) }
    });
    // The child's stack: its own frames, and glibc's execvpe builds a path (and for a script
    // with no #!, a new argument list) on it. Above malloc's mmap threshold (128 KiB), so that
    // it comes as fresh zero pages, of which the child touches a few, rather than as heap that
    // must be cleared.
    let mut stack = vec![0u8; 256 * 1024 + 8 * argp.len()];
    // SAFETY: CLONE_VM | CLONE_VFORK: the child runs on `stack` in rlock's memory while rlock
    // waits, and only until it execs or exits; see above for what it does there.
    let spawned = unsafe {
        nix::sched::clone(
            child,
            &mut stack,
            CloneFlags::CLONE_VM | CloneFlags::CLONE_VFORK,
            Some(Signal::SIGCHLD as i32),
        )
    };
    let failed = match spawned {
        Ok(pid) => match exec_errno.load(Ordering::Relaxed) {
            0 => None,
            errno => {
                let _ = waitpid(pid, None);
                Some(io::Error::from_raw_os_error(errno))
            }
        },
        Err(e) => Some(io::Error::from(e)),
    };
    if let Some(e) = failed {
        // The child may have taken the terminal before its exec failed: take it back.
        if let Some(fd) = terminal {
            hand_terminal(fd, getpgrp());
        }
        return Err(cannot_run(&argv[0], &e));
    }
    let pid = spawned.expect("checked above");
    // Also from the parent, as a shell does, so neither order of events leaves a gap.
    let _ = setpgid(pid, pid);
    if let Some(fd) = terminal {
        hand_terminal(fd, pid);
    }
    Ok(pid)
}

fn cannot_run(program: &OsString, e: &io::Error) -> Failure {
    let name = program.to_string_lossy();
    match e.kind() {
        io::ErrorKind::NotFound => Failure::CannotRun {
            message: format!("cannot run '{name}': command not found"),
            code: Code::NotFound,
        },
        _ => Failure::CannotRun {
            message: format!("cannot run '{name}': {e}"),
            code: Code::CannotRun,
        },
    }
}

/// Where `supervise` gets its events: the signalfd (signals, and SIGCHLD for the child's
/// changes, which `waitpid` then tells) and the renewal thread's reports.
struct Inbox<'a> {
    child: Pid,
    signals: &'a Signals,
    reports: &'a ReportReceiver,
    pending: VecDeque<Event>,
}

impl Inbox<'_> {
    /// The next event, or None once `until` has come without one.
    fn next(&mut self, until: Instant) -> Option<Event> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(event);
            }
            // Once the renewal thread is gone (the channel says so; its pipe may never reach end
            // of file, as the guardian holds a copy of it), only signals are left to wait for.
            let renewing = match self.reports.rx.try_recv() {
                Ok(report) => return Some(Event::Watchdog(report)),
                Err(TryRecvError::Empty) => true,
                Err(TryRecvError::Disconnected) => false,
            };
            while let Some(sig) = self.signals.try_next() {
                if sig == Signal::SIGCHLD as i32 {
                    self.reap();
                } else {
                    self.pending.push_back(Event::Signal(sig));
                }
            }
            if !self.pending.is_empty() {
                continue;
            }
            let now = Instant::now();
            if now >= until {
                return None;
            }
            let mut fds = [
                PollFd::new(self.signals.fd.as_fd(), PollFlags::POLLIN),
                PollFd::new(self.reports.wake.as_fd(), PollFlags::POLLIN),
            ];
            let watched = if renewing { 2 } else { 1 };
            let left = TimeSpec::from_duration(until - now);
            let _ = nix::poll::ppoll(&mut fds[..watched], Some(left), None);
            let mut drain = [0u8; 64];
            while matches!(nix::unistd::read(&self.reports.wake, &mut drain), Ok(n) if n > 0) {}
        }
    }

    /// Queues every change of the child that waitpid has to tell, up to its end.
    fn reap(&mut self) {
        let flags = WaitPidFlag::WNOHANG | WaitPidFlag::WUNTRACED | WaitPidFlag::WCONTINUED;
        loop {
            let event = match waitpid(self.child, Some(flags)) {
                Ok(WaitStatus::StillAlive) => return,
                Ok(WaitStatus::Exited(_, code)) => Event::Exited(code as u8, None),
                Ok(WaitStatus::Signaled(_, sig, _)) => {
                    Event::Exited(128u8.wrapping_add(sig as u8), Some(sig as i32))
                }
                Ok(WaitStatus::Stopped(_, sig)) => Event::Stopped(sig as i32),
                Ok(WaitStatus::Continued(_)) => Event::Continued,
                Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => Event::Exited(Code::Internal as u8, None),
            };
            let last = matches!(event, Event::Exited(..));
            self.pending.push_back(event);
            if last {
                return;
            }
        }
    }
}

/// What the supervisor needs to know to enforce the lease.
pub struct Enforce {
    /// When the lease must be assumed gone; None when another rlock enforces it (a nested
    /// exec inside `rlock exec`).
    pub deadline: Option<Instant>,
    /// When the first renewal is due: the renewal thread is started then, so that a short
    /// command runs with no thread at all. None when nothing is to be renewed.
    pub renew_at: Option<Instant>,
    pub grace: Duration,
    pub lost_signal: Signal,
}

/// How the child's run ended.
pub struct Outcome {
    /// The child's status as a shell reports it (code, or 128+N for signal N).
    pub code: u8,
    /// The signal that killed the child, if one did.
    pub signal: Option<i32>,
    /// Why the lock was lost, if it was.
    pub lost: Option<String>,
}

/// What `supervise` asks of the renewal thread.
pub enum Renewal {
    Start,
    Stop,
}

/// Waits for the child in group `pgid` to exit, passing signals on to its group and stopping it
/// before the lease can run out: `lost_signal` by deadline − grace, SIGKILL at the deadline.
/// `renewal` is told to start renewing when the first renewal is due (if it cannot, the lease
/// runs out as if every renewal failed), and to stop once the lock is given up for lost. `terminal` is the terminal the child was given, if any: a child
/// stopped at it (Ctrl-Z) stops rlock too, as a shell's job.
pub fn supervise(
    pgid: Pid,
    signals: &Signals,
    reports: &ReportReceiver,
    mut enforce: Enforce,
    terminal: Option<i32>,
    verbose: bool,
    mut renewal: impl FnMut(Renewal) -> io::Result<()>,
) -> Outcome {
    let mut inbox = Inbox {
        child: pgid,
        signals,
        reports,
        pending: VecDeque::new(),
    };
    let mut renew_at = enforce.renew_at;
    let mut lost: Option<String> = None;
    let mut termed = false;
    let mut killed = false;
    let mut stopped = false;
    let mut last_error: Option<String> = None;
    let mut kill_at = enforce.deadline;
    // Set when rlock was stopped with its job and has been continued: whether it is in the
    // terminal's foreground again (`fg`) or not (`bg`). The child is continued only after the
    // deadline has been checked, so it never runs a moment on a lease that ran out meanwhile.
    let mut resumed: Option<bool> = None;
    // A stopped process acts on no signal but SIGKILL until it is continued.
    let send = |sig: Signal, stopped: bool| {
        let _ = killpg(pgid, sig);
        if stopped && sig != Signal::SIGKILL && sig != Signal::SIGCONT {
            let _ = killpg(pgid, Signal::SIGCONT);
        }
    };
    loop {
        let now = Instant::now();
        if let Some(deadline) = enforce.deadline {
            let term_at = deadline.checked_sub(enforce.grace).unwrap_or(deadline);
            if !termed && now >= term_at {
                termed = true;
                renew_at = None;
                let _ = renewal(Renewal::Stop);
                let why = last_error
                    .take()
                    .unwrap_or_else(|| "no renewal succeeded".into());
                lost.get_or_insert(format!(
                    "could not renew it before the lease ran out ({why})"
                ));
                send(enforce.lost_signal, stopped);
            }
            if let Some(at) = kill_at
                && !killed
                && now >= at
            {
                killed = true;
                send(Signal::SIGKILL, stopped);
            }
        }
        // After the deadline checks: a renewal due while rlock was stopped is not sent for a
        // lease that ran out meanwhile.
        if let Some(at) = renew_at
            && now >= at
            && !termed
        {
            renew_at = None;
            if let Err(e) = renewal(Renewal::Start) {
                last_error = Some(format!("cannot start the renewal thread: {e}"));
            }
        }
        if let Some(foreground) = resumed.take()
            && !termed
        {
            if let (Some(fd), true) = (terminal, foreground) {
                hand_terminal(fd, pgid);
            }
            let _ = killpg(pgid, Signal::SIGCONT);
        }
        let next = [
            enforce
                .deadline
                .filter(|_| !termed)
                .map(|d| d.checked_sub(enforce.grace).unwrap_or(d)),
            kill_at.filter(|_| !killed),
            renew_at,
        ]
        .into_iter()
        .flatten()
        .min();
        let until = next.unwrap_or(now + Duration::from_secs(3600));
        match inbox.next(until) {
            Some(Event::Exited(code, signal)) => {
                return Outcome { code, signal, lost };
            }
            Some(Event::Signal(sig)) => {
                if let Ok(sig) = Signal::try_from(sig) {
                    send(sig, stopped && sig != Signal::SIGTSTP);
                }
            }
            Some(Event::Stopped(sig)) => {
                stopped = true;
                // Only a stop at the terminal (Ctrl-Z, or a background read or write) stops the
                // job; a SIGSTOP from someone else pauses the child while rlock keeps renewing.
                let job_control = [Signal::SIGTSTP, Signal::SIGTTIN, Signal::SIGTTOU]
                    .into_iter()
                    .find(|s| *s as i32 == sig);
                if let (Some(fd), Some(sig)) = (terminal, job_control)
                    && !termed
                {
                    resumed = Some(stop_like_a_job(pgid, fd, sig));
                }
            }
            Some(Event::Continued) => stopped = false,
            Some(Event::Watchdog(Report::Renewed { deadline })) if !termed => {
                enforce.deadline = Some(enforce.deadline.map_or(deadline, |d| d.max(deadline)));
                kill_at = enforce.deadline;
                last_error = None;
            }
            Some(Event::Watchdog(Report::Failed(e))) => {
                if verbose {
                    eprintln!("rlock: renewal failed, retrying: {e}");
                }
                last_error = Some(e);
            }
            Some(Event::Watchdog(Report::Lost(why))) if !termed => {
                termed = true;
                renew_at = None;
                let _ = renewal(Renewal::Stop);
                lost = Some(why);
                send(enforce.lost_signal, stopped);
                let soon = Instant::now() + enforce.grace;
                kill_at = Some(kill_at.map_or(soon, |k| k.min(soon)));
                // Enforce kill_at even for a lease whose deadline another rlock keeps.
                enforce.deadline.get_or_insert(soon);
            }
            // Reports that come after the lock was given up for lost change nothing.
            Some(Event::Watchdog(_)) | None => {}
        }
    }
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

/// The child stopped at the terminal (Ctrl-Z): give the terminal back to rlock's group and stop
/// rlock too, so that the shell sees its job stopped and shows its prompt. Returns, once the
/// shell continues the job, whether rlock is in the terminal's foreground again (`fg`).
///
/// While stopped, rlock cannot renew: a lease that ran out meanwhile is found lost on resume.
fn stop_like_a_job(pgid: Pid, terminal: i32, sig: Signal) -> bool {
    restore_terminal(Some(terminal), pgid);
    stop_self(sig);
    // Resumed (SIGCONT from the shell).
    // SAFETY: fds 0-2 stay open for the life of the process; we only query the terminal.
    tcgetpgrp(unsafe { BorrowedFd::borrow_raw(terminal) }).ok() == Some(getpgrp())
}
