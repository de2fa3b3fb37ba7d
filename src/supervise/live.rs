//! The supervisor's real world: signals from the signalfd, the command's changes from the
//! guardian, the renewal thread's reports; signals go out to the command's group and, through
//! the guardian, to everything the command started.

use std::collections::VecDeque;
use std::os::fd::AsFd;
use std::sync::mpsc::TryRecvError;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags};
use nix::sys::signal::Signal;
use nix::sys::time::TimeSpec;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use super::group::Group;
use super::keeper::ReportReceiver;
use super::machine::{Event, World};
use super::terminal::Terminal;
use super::{AFTER_KILL, Guardian, contain, guardian};
use crate::signals::Signals;

/// Where the supervisor gets its events: the signalfd (signals, and SIGCHLD when a child of
/// rlock's ends), the command's changes (told by the guardian, or in the cgroup way seen by
/// rlock itself), and the renewal thread's reports.
pub(super) struct Inbox<'a> {
    pub guardian: &'a mut Guardian,
    /// The guardian ended or was killed: rlock contains what is left itself.
    pub guardian_gone: bool,
    /// The guardian told the leader's end.
    pub leader_ended: bool,
    pub signals: &'a Signals,
    pub reports: &'a ReportReceiver,
    pub pending: VecDeque<Event>,
    /// The number of the last signal request the guardian said it has done
    /// (`Guardian::signal_all`).
    pub signalled: i32,
    /// When the guardian must have said that nothing of the command runs, once asked to kill
    /// it all: a guardian that has not by then (stopped, stuck) is SIGKILLed, and rlock stops
    /// what is left itself.
    pub answer_by: Option<Instant>,
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
                    // rlock's own children: the guardian (continued, should someone have
                    // stopped it), and what it left should it be killed.
                    if !self.guardian_gone {
                        self.guardian.continue_if_stopped();
                    }
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
            if let Some(at) = self.answer_by.filter(|_| !self.guardian_gone)
                && now >= at
            {
                // It stays killed: read_guardian sees it gone, and stops what is left.
                self.answer_by = None;
                self.guardian.kill();
                continue;
            }
            if now >= until {
                return None;
            }
            let until = self.answer_by.map_or(until, |at| at.min(until));
            let mut fds = vec![PollFd::new(self.signals.as_fd(), PollFlags::POLLIN)];
            if !self.guardian_gone {
                fds.push(self.guardian.poll_fd());
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
                    guardian::Event::Exited(code, sig) => {
                        self.leader_ended = true;
                        Event::Exited(code, sig)
                    }
                    guardian::Event::Empty => Event::Empty,
                    guardian::Event::OwnClock { limit, .. } => Event::OwnClock { limit },
                    guardian::Event::Signalled(number) => {
                        self.signalled = number;
                        continue;
                    }
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

    /// `sig` to everything the command started, returning once every process got it: the
    /// guardian's walk of the tree takes a few rounds (a process caught in a fork is stopped in
    /// the next one), and a job stopped at the terminal must be all stopped before rlock stops
    /// and the shell says so. A guardian that does not answer within `SIGNAL_ALL_WAIT` is not
    /// waited for longer; one that is gone is not waited for.
    fn signal_all_and_wait(&mut self, sig: Signal) {
        if self.guardian_gone {
            return;
        }
        let Some(asked) = self.guardian.signal_all(sig) else {
            return;
        };
        let until = Instant::now() + SIGNAL_ALL_WAIT;
        loop {
            self.read_guardian();
            let now = Instant::now();
            if self.signalled >= asked || self.guardian_gone || now >= until {
                return;
            }
            let left = TimeSpec::from_duration(until - now);
            let _ = nix::poll::ppoll(&mut [self.guardian.poll_fd()], Some(left), None);
        }
    }

    /// The guardian was killed: the command got its parent-death SIGKILL, and what it started
    /// came to rlock (a subreaper too). rlock kills that, and says the command ended by SIGKILL.
    fn contain_without_guardian(&mut self) {
        stop_orphans(self.guardian.cgroup());
        // The command died with its guardian, unless it had ended before.
        if !self.leader_ended {
            self.pending.push_back(Event::Exited(
                128 + Signal::SIGKILL as u8,
                Some(Signal::SIGKILL),
            ));
        }
        self.pending.push_back(Event::Empty);
    }
}

/// Stops what a killed guardian left: everything in its `cgroup` (then removed), and what came
/// to rlock, a subreaper, as orphans.
pub(super) fn stop_orphans(cgroup: Option<&std::path::Path>) {
    let me = nix::unistd::getpid().as_raw();
    if let Some(cgroup) = cgroup {
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
    if let Some(cgroup) = cgroup {
        contain::remove_cgroup(cgroup);
    }
}

/// How long rlock waits for the guardian to say that everything the command started got a
/// signal: its tree walk waits up to 100 ms a round for what it stopped, a few rounds at most.
const SIGNAL_ALL_WAIT: Duration = Duration::from_secs(1);

/// How long rlock waits, after asking the guardian to kill everything, for its word that
/// nothing runs, before it kills the guardian and stops what is left itself.
const KILL_ANSWER: Duration = Duration::from_secs(1);

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

/// The real world of one run: the inbox, the command's group and its terminal.
pub(super) struct Live<'a> {
    pub inbox: Inbox<'a>,
    pub pgid: Pid,
    /// The group as signals reach it: never by a number another group may have taken since.
    pub group: Group,
    pub terminal: Option<Terminal>,
}

impl World for Live<'_> {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn next(&mut self, until: Instant) -> Option<Event> {
        self.inbox.next(until)
    }

    fn pending(&self) -> bool {
        !self.inbox.pending.is_empty()
    }

    fn signal_group(&mut self, sig: Signal) {
        self.group.signal(sig);
    }

    fn signal_all(&mut self, sig: Signal) {
        // From here at once, not waiting for the guardian to be scheduled.
        if sig == Signal::SIGKILL {
            self.group.signal(sig);
            let by = Instant::now() + KILL_ANSWER;
            self.inbox.answer_by.get_or_insert(by);
        }
        if !self.inbox.guardian_gone {
            self.inbox.guardian.signal_all(sig);
        }
    }

    fn lease_renewed(&mut self, lease: crate::lock::Timeline) {
        if !self.inbox.guardian_gone {
            self.inbox.guardian.renewed(lease);
        }
    }

    fn stop_like_a_job(&mut self, sig: Signal) -> Option<bool> {
        let terminal = self.terminal?;
        // The whole job stops, not only the command's group: what moved to other groups or
        // sessions must not run on while rlock, stopped, cannot renew.
        self.inbox.signal_all_and_wait(Signal::SIGSTOP);
        Some(terminal.stop_like_a_job(self.pgid, sig))
    }

    fn resume(&mut self, foreground: bool) {
        if let (Some(t), true) = (self.terminal, foreground) {
            t.hand_to(self.pgid);
        }
        self.group.signal(Signal::SIGCONT);
        if !self.inbox.guardian_gone {
            self.inbox.guardian.signal_all(Signal::SIGCONT);
        }
    }
}
