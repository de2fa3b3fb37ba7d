//! The child as a job: the supervisor that passes signals on to the command's process group,
//! stops the whole group before the lease can run out, stops what the command left running,
//! and reports how the run ended. Every `kill` rlock sends is in this module.

mod deadlines;
mod spawn;
mod terminal;

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags};
use nix::sys::signal::{Signal, killpg};
use nix::sys::time::TimeSpec;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

pub use spawn::{Guardian, runnable, spawn};
pub use terminal::Terminal;

use deadlines::Deadlines;

use crate::exit::Code;
use crate::observe::{Note, Observer};
use crate::signals::Signals;
use crate::watchdog::{Loss, RenewError, Report};

/// How often a group whose leader has ended is looked at, besides SIGCHLD: a member that is
/// not rlock's child (it left through a subreaper of its own) is reaped by someone else.
const GROUP_POLL: Duration = Duration::from_millis(20);

/// Makes rlock the reaper of the orphans its command leaves (`sh -c 'cmd &'`): they stay
/// rlock's children, so their end is a SIGCHLD here rather than news to init only.
pub fn adopt_orphans() {
    let _ = nix::sys::prctl::set_child_subreaper(true);
}

/// Reports from the renewal thread, which also wake the supervisor from its wait.
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

/// Everything the supervisor waits for: signals, changes of the child, and the renewals.
#[derive(Debug)]
enum Event {
    Signal(Signal),
    /// The child stopped, by this signal (SIGTSTP for Ctrl-Z, SIGSTOP, ...).
    Stopped(Signal),
    /// The child was continued.
    Continued,
    /// The child ended: its status as a shell reports it, and the signal that killed it.
    Exited(u8, Option<Signal>),
    Watchdog(Report),
}

/// Where the supervisor gets its events: the signalfd (signals, and SIGCHLD for the child's
/// changes, which `waitpid` then tells) and the renewal thread's reports.
struct Inbox<'a> {
    child: Pid,
    /// The child's end has been reaped: only orphans are left to reap.
    child_reaped: bool,
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
                if sig == Signal::SIGCHLD {
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
                PollFd::new(self.signals.as_fd(), PollFlags::POLLIN),
                PollFd::new(self.reports.wake.as_fd(), PollFlags::POLLIN),
            ];
            let watched = if renewing { 2 } else { 1 };
            let left = TimeSpec::from_duration(until - now);
            let _ = nix::poll::ppoll(&mut fds[..watched], Some(left), None);
            let mut drain = [0u8; 64];
            while matches!(nix::unistd::read(&self.reports.wake, &mut drain), Ok(n) if n > 0) {}
        }
    }

    /// Queues every change of the child that waitpid has to tell, up to its end, and reaps the
    /// orphans rlock adopted.
    fn reap(&mut self) {
        let flags = WaitPidFlag::WNOHANG | WaitPidFlag::WUNTRACED | WaitPidFlag::WCONTINUED;
        while !self.child_reaped {
            let event = match waitpid(self.child, Some(flags)) {
                Ok(WaitStatus::StillAlive) => break,
                Ok(WaitStatus::Stopped(_, sig)) => Event::Stopped(sig),
                Ok(WaitStatus::Continued(_)) => Event::Continued,
                Ok(status) => match ended(status) {
                    Some(event) => event,
                    None => continue,
                },
                Err(Errno::EINTR) => continue,
                Err(_) => Event::Exited(Code::Internal as u8, None),
            };
            self.child_reaped = matches!(event, Event::Exited(..));
            self.pending.push_back(event);
        }
        // Orphans of the command (rlock is their subreaper), whose status means nothing here;
        // the child itself, should it have ended since the loop above, is told as above.
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => break,
                Ok(status) if status.pid() == Some(self.child) => {
                    if let Some(event) = ended(status) {
                        self.child_reaped = true;
                        self.pending.push_back(event);
                    }
                }
                Ok(_) | Err(Errno::EINTR) => {}
                Err(_) => break,
            }
        }
    }
}

/// The child's end, as a shell reports it: its code, or 128+N for death by signal N.
fn ended(status: WaitStatus) -> Option<Event> {
    match status {
        WaitStatus::Exited(_, code) => Some(Event::Exited(code as u8, None)),
        WaitStatus::Signaled(_, sig, _) => {
            Some(Event::Exited(128u8.wrapping_add(sig as u8), Some(sig)))
        }
        _ => None,
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
    pub signal: Option<Signal>,
    /// Why the lock was lost, if it was.
    pub lost: Option<Loss>,
}

/// What the supervisor asks of the renewal thread.
pub enum Renewal {
    Start,
    Stop,
}

/// Runs the command's group to its end under the lease; see `Supervisor::run`.
pub struct Supervisor<'a, R> {
    pgid: Pid,
    inbox: Inbox<'a>,
    enforce: Enforce,
    terminal: Option<Terminal>,
    observer: &'a dyn Observer,
    renewal: R,
    renew_at: Option<Instant>,
    /// When the lost-signal and SIGKILL go.
    deadlines: Deadlines,
    /// Why the lock was lost, once it was.
    lost: Option<Loss>,
    stopped: bool,
    last_error: Option<RenewError>,
    /// Set when rlock was stopped with its job and has been continued: whether it is in the
    /// terminal's foreground again (`fg`) or not (`bg`). The child is continued only after the
    /// deadline has been checked, so it never runs a moment on a lease that ran out meanwhile.
    resumed: Option<bool>,
    /// The leader's status, once it ended; the group may still have members.
    ended: Option<(u8, Option<Signal>)>,
}

impl<'a, R: FnMut(Renewal) -> io::Result<()>> Supervisor<'a, R> {
    /// `renewal` is told to start renewing when the first renewal is due (if it cannot, the
    /// lease runs out as if every renewal failed), and to stop once the lock is given up for
    /// lost. `terminal` is the terminal the child was given, if any: a child stopped at it
    /// (Ctrl-Z) stops rlock too, as a shell's job.
    pub fn new(
        pgid: Pid,
        signals: &'a Signals,
        reports: &'a ReportReceiver,
        enforce: Enforce,
        terminal: Option<Terminal>,
        observer: &'a dyn Observer,
        renewal: R,
    ) -> Self {
        Supervisor {
            pgid,
            inbox: Inbox {
                child: pgid,
                child_reaped: false,
                signals,
                reports,
                pending: VecDeque::new(),
            },
            renew_at: enforce.renew_at,
            deadlines: Deadlines::new(enforce.deadline, enforce.grace),
            enforce,
            terminal,
            observer,
            renewal,
            lost: None,
            stopped: false,
            last_error: None,
            resumed: None,
            ended: None,
        }
    }

    /// Waits for the command's whole process group to end, passing signals on to it and
    /// stopping it before the lease can run out: `lost_signal` by deadline − grace, SIGKILL at
    /// the deadline (or `grace` after Redis said the lock is no longer ours). When the leader
    /// ends and members of its group run on, they are stopped the same way (`lost_signal`, then
    /// SIGKILL `grace` later) while the lock is still renewed: nothing of the command runs on
    /// unprotected. Returns once the group is empty, or right after its SIGKILL.
    pub fn run(mut self) -> Outcome {
        loop {
            let now = Instant::now();
            self.enforce_deadline(now);
            self.start_renewal_when_due(now);
            self.continue_when_resumed();
            if let Some(outcome) = self.finished() {
                return outcome;
            }
            let until = self.next_wake_up(now);
            if let Some(event) = self.inbox.next(until) {
                self.handle(event);
            }
        }
    }

    /// A stopped process acts on no signal but SIGKILL until it is continued.
    fn send(&self, sig: Signal) {
        let _ = killpg(self.pgid, sig);
        if self.stopped && sig != Signal::SIGKILL && sig != Signal::SIGCONT {
            let _ = killpg(self.pgid, Signal::SIGCONT);
        }
    }

    /// Sends the lost-signal once, and stops renewing when the lock is gone.
    fn term(&mut self, lock_gone: bool) {
        if lock_gone {
            self.renew_at = None;
            let _ = (self.renewal)(Renewal::Stop);
        }
        if self.deadlines.signal_once() {
            self.send(self.enforce.lost_signal);
        }
    }

    fn enforce_deadline(&mut self, now: Instant) {
        let due = self.deadlines.due(now);
        if due.runs_out {
            // The lease has not run out yet: the command is stopped --grace before it can.
            self.lost = Some(Loss::RanOut {
                grace: self.enforce.grace,
                last: self.last_error.take(),
            });
            self.term(true);
        }
        if due.kill {
            self.send(Signal::SIGKILL);
        }
    }

    /// After the deadline checks: a renewal due while rlock was stopped is not sent for a
    /// lease that ran out meanwhile.
    fn start_renewal_when_due(&mut self, now: Instant) {
        if let Some(at) = self.renew_at
            && now >= at
            && self.lost.is_none()
        {
            self.renew_at = None;
            if let Err(e) = (self.renewal)(Renewal::Start) {
                self.last_error = Some(RenewError::NoThread(e));
            }
        }
    }

    fn continue_when_resumed(&mut self) {
        if let Some(foreground) = self.resumed.take()
            && self.lost.is_none()
        {
            if let (Some(t), true) = (self.terminal, foreground) {
                t.hand_to(self.pgid);
            }
            let _ = killpg(self.pgid, Signal::SIGCONT);
        }
    }

    /// The outcome, once the leader has ended and its group is empty (or was just killed).
    fn finished(&mut self) -> Option<Outcome> {
        let (code, signal) = self.ended?;
        let group_alive = killpg(self.pgid, None) != Err(Errno::ESRCH);
        if group_alive && !self.deadlines.killed() {
            // The command ended and left part of its group running: stop it while the lock
            // is still held, as for a lost lock but `grace` from now.
            self.term(false);
            self.deadlines.group_outlives_leader(Instant::now());
            return None;
        }
        Some(Outcome {
            code,
            signal,
            lost: self.lost.take(),
        })
    }

    fn next_wake_up(&self, now: Instant) -> Instant {
        let group_check = self.ended.map(|_| now + GROUP_POLL);
        [self.deadlines.next(), self.renew_at, group_check]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(now + Duration::from_secs(3600))
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Exited(code, signal) => self.ended = Some((code, signal)),
            Event::Signal(sig) => {
                let _ = killpg(self.pgid, sig);
                if self.stopped && sig != Signal::SIGTSTP && sig != Signal::SIGKILL {
                    let _ = killpg(self.pgid, Signal::SIGCONT);
                }
            }
            Event::Stopped(sig) => {
                self.stopped = true;
                // Only a stop at the terminal (Ctrl-Z, or a background read or write) stops the
                // job; a SIGSTOP from someone else pauses the child while rlock keeps renewing.
                let job_control = [Signal::SIGTSTP, Signal::SIGTTIN, Signal::SIGTTOU]
                    .into_iter()
                    .find(|s| *s == sig);
                if let (Some(t), Some(sig)) = (self.terminal, job_control)
                    && self.lost.is_none()
                {
                    self.resumed = Some(t.stop_like_a_job(self.pgid, sig));
                }
            }
            Event::Continued => self.stopped = false,
            Event::Watchdog(Report::Renewed { deadline }) if self.lost.is_none() => {
                self.deadlines.renewed(deadline);
                self.last_error = None;
            }
            Event::Watchdog(Report::Failed(e)) => {
                self.observer.observe(Note::RenewalFailed { error: &e });
                self.last_error = Some(e);
            }
            Event::Watchdog(Report::Lost(why)) if self.lost.is_none() => {
                self.lost = Some(why);
                self.deadlines.lock_lost(Instant::now());
                self.term(true);
            }
            // Reports that come after the lock was given up for lost change nothing.
            Event::Watchdog(_) => {}
        }
    }
}
