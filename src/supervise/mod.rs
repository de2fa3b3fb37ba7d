//! The child as a job: the supervisor that passes signals on to the command's process group,
//! stops everything the command started before the lease can run out, stops what the command
//! left running, and reports how the run ended. Every `kill` rlock sends is in this module.

mod contain;
mod deadlines;
mod guardian;
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

pub use contain::{Cgroup, Mode as Containment};
pub use guardian::{Guardian, Launched, launch};
pub use spawn::runnable;
pub use terminal::Terminal;

use deadlines::Deadlines;

use crate::observe::{Note, Observer};
use crate::signals::Signals;
use crate::watchdog::{Loss, RenewError, Report};

/// How long rlock waits, after the final SIGKILL, for what it killed to be gone: a process
/// that SIGKILL cannot end at once (stuck in the kernel) runs no code of its own meanwhile.
const AFTER_KILL: Duration = Duration::from_secs(2);

/// Makes rlock the reaper of the orphans of its guardian, should the guardian be killed: they
/// stay below rlock, which then stops them itself.
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
    /// Nothing the command started runs any more.
    Empty,
    Watchdog(Report),
}

/// Where the supervisor gets its events: the signalfd (signals, and SIGCHLD when the guardian
/// ends), the guardian's events (the command's changes), and the renewal thread's reports.
struct Inbox<'a> {
    guardian: &'a mut Guardian,
    /// The guardian ended or was killed: rlock contains what is left itself.
    guardian_gone: bool,
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
            // of file, as the guardian holds a copy of it), it is not waited for.
            let renewing = match self.reports.rx.try_recv() {
                Ok(report) => return Some(Event::Watchdog(report)),
                Err(TryRecvError::Empty) => true,
                Err(TryRecvError::Disconnected) => false,
            };
            while let Some(sig) = self.signals.try_next() {
                if sig == Signal::SIGCHLD {
                    reap_orphans();
                } else {
                    self.pending.push_back(Event::Signal(sig));
                }
            }
            self.read_guardian();
            if !self.pending.is_empty() {
                continue;
            }
            let now = Instant::now();
            if now >= until {
                return None;
            }
            let mut fds = vec![PollFd::new(self.signals.as_fd(), PollFlags::POLLIN)];
            if !self.guardian_gone {
                fds.push(PollFd::new(self.guardian.events_fd(), PollFlags::POLLIN));
            }
            if renewing {
                fds.push(PollFd::new(self.reports.wake.as_fd(), PollFlags::POLLIN));
            }
            let left = TimeSpec::from_duration(until - now);
            let _ = nix::poll::ppoll(&mut fds, Some(left), None);
            let mut drain = [0u8; 64];
            while matches!(nix::unistd::read(&self.reports.wake, &mut drain), Ok(n) if n > 0) {}
        }
    }

    /// Queues what the guardian told; once it is gone without having said that everything
    /// ended (someone killed it), stops what is left itself.
    fn read_guardian(&mut self) {
        while !self.guardian_gone {
            match self.guardian.next_event() {
                guardian::Next::Event(event) => self.pending.push_back(match event {
                    guardian::Event::Stopped(sig) => Event::Stopped(sig),
                    guardian::Event::Continued => Event::Continued,
                    guardian::Event::Exited(code, sig) => Event::Exited(code, sig),
                    guardian::Event::Empty => Event::Empty,
                    guardian::Event::Started { .. } | guardian::Event::NotStarted(_) => continue,
                }),
                guardian::Next::Nothing => return,
                guardian::Next::Gone => {
                    self.guardian_gone = true;
                    if !self.pending.iter().any(|e| matches!(e, Event::Empty)) {
                        self.contain_without_guardian();
                    }
                }
            }
        }
    }

    /// The guardian was killed: the command got its parent-death SIGKILL, and what it started
    /// came to rlock (a subreaper too). rlock kills that, and says the command ended by SIGKILL.
    fn contain_without_guardian(&mut self) {
        let me = nix::unistd::getpid().as_raw();
        if let Some(cgroup) = self.guardian.cgroup() {
            let _ = std::fs::write(cgroup.join("cgroup.kill"), "1");
        }
        let until = Instant::now() + AFTER_KILL;
        loop {
            contain::kill_tree(me);
            reap_orphans();
            if !contain::tree_alive(me) || Instant::now() >= until {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        if let Some(cgroup) = self.guardian.cgroup() {
            contain::remove_cgroup(cgroup);
        }
        self.pending.push_back(Event::Exited(
            128 + Signal::SIGKILL as u8,
            Some(Signal::SIGKILL),
        ));
        self.pending.push_back(Event::Empty);
    }
}

/// Reaps whatever of rlock's children ended: the guardian, or what it left should it be killed.
fn reap_orphans() {
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => break,
            Ok(_) | Err(Errno::EINTR) => {}
            Err(_) => break,
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
    /// The leader's status, once it ended; what it started may still run.
    ended: Option<(u8, Option<Signal>)>,
    /// Nothing the command started runs any more.
    empty: bool,
    /// When the final SIGKILL went, if it did.
    killed_at: Option<Instant>,
}

impl<'a, R: FnMut(Renewal) -> io::Result<()>> Supervisor<'a, R> {
    /// `renewal` is told to start renewing when the first renewal is due (if it cannot, the
    /// lease runs out as if every renewal failed), and to stop once the lock is given up for
    /// lost. `terminal` is the terminal the child was given, if any: a child stopped at it
    /// (Ctrl-Z) stops rlock too, as a shell's job.
    pub fn new(
        guardian: &'a mut Guardian,
        signals: &'a Signals,
        reports: &'a ReportReceiver,
        enforce: Enforce,
        terminal: Option<Terminal>,
        observer: &'a dyn Observer,
        renewal: R,
    ) -> Self {
        Supervisor {
            pgid: guardian.pgid(),
            inbox: Inbox {
                guardian,
                guardian_gone: false,
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
            empty: false,
            killed_at: None,
        }
    }

    /// Waits for everything the command started to end, passing signals on to its process
    /// group and stopping all of it (every group, wherever it moved) before the lease can run
    /// out: `lost_signal` by deadline − grace, SIGKILL at the deadline (or `grace` after Redis
    /// said the lock is no longer ours). When the leader ends and what it started runs on, that
    /// is stopped the same way (`lost_signal`, then SIGKILL `grace` later) while the lock is
    /// still renewed: nothing of the command runs on unprotected. Returns once nothing of it
    /// runs (or, for a process SIGKILL cannot end at once, `AFTER_KILL` after the SIGKILL).
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

    /// `sig` to everything the command started, wherever it moved (the guardian's tree, or
    /// its cgroup); SIGKILL also to its group at once, from here, not waiting for the guardian.
    /// A stopped process is continued, to act on it.
    fn send_all(&self, sig: Signal) {
        if sig == Signal::SIGKILL {
            let _ = killpg(self.pgid, sig);
        }
        if !self.inbox.guardian_gone {
            self.inbox.guardian.signal_all(sig);
        }
    }

    /// Sends the lost-signal once, and stops renewing when the lock is gone.
    fn term(&mut self, lock_gone: bool) {
        if lock_gone {
            self.renew_at = None;
            let _ = (self.renewal)(Renewal::Stop);
        }
        if self.deadlines.signal_once() {
            self.send_all(self.enforce.lost_signal);
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
            self.send_all(Signal::SIGKILL);
            self.killed_at = Some(now);
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

    /// The outcome, once the leader has ended and nothing it started runs (or it was killed).
    fn finished(&mut self) -> Option<Outcome> {
        let (code, signal) = self.ended?;
        // Events already told (the Empty that came with the leader's end) are read first.
        if !self.inbox.pending.is_empty() {
            return None;
        }
        if !self.empty {
            if !self.deadlines.killed() {
                // The command ended and left something running: stop it while the lock is
                // still held, as for a lost lock but `grace` from now.
                self.term(false);
                self.deadlines.group_outlives_leader(Instant::now());
            }
            if self.killed_at.is_none_or(|at| at.elapsed() < AFTER_KILL) {
                return None;
            }
        }
        Some(Outcome {
            code,
            signal,
            lost: self.lost.take(),
        })
    }

    fn next_wake_up(&self, now: Instant) -> Instant {
        let give_up = self.killed_at.map(|at| at + AFTER_KILL);
        [self.deadlines.next(), self.renew_at, give_up]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(now + Duration::from_secs(3600))
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Exited(code, signal) => self.ended = Some((code, signal)),
            Event::Empty => self.empty = true,
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
