//! The supervisor's state machine: what it does on each event and at each deadline, against
//! a `World` that gives it events and the time and carries out its signals. `live.rs` is the
//! real world (signalfd, the guardian, the renewal thread); the unit tests use a scripted one.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::deadlines::Deadlines;
use super::keeper::Keeper;
use super::{AFTER_KILL, Enforce, Outcome};
use crate::lock::{Note, Observer, RenewError, Timeline};
use crate::watchdog::{Loss, Report};

/// Everything the supervisor waits for: signals, changes of the child, and the renewals.
#[derive(Debug)]
pub(super) enum Event {
    Signal(Signal),
    /// The child stopped, by this signal (SIGTSTP for Ctrl-Z, SIGSTOP, ...).
    Stopped(Signal),
    /// The child was continued.
    Continued,
    /// The child ended: its status as a shell reports it, and the signal that killed it.
    Exited(u8, Option<Signal>),
    /// Nothing the command started runs any more.
    Empty,
    /// The guardian sent the lost-signal or SIGKILL on its own clock, at the lease's moment
    /// (`limit` false) or the time limit's.
    OwnClock {
        limit: bool,
    },
    Watchdog(Report),
}

/// What the supervisor acts on and through.
pub(super) trait World {
    /// The time now (monotonic).
    fn now(&self) -> Instant;
    /// The next event, or None once `until` has come without one.
    fn next(&mut self, until: Instant) -> Option<Event>;
    /// Events have come that were not handed out yet.
    fn pending(&self) -> bool;
    /// `sig` to the command's process group (signals passed on, SIGCONT).
    fn signal_group(&mut self, sig: Signal);
    /// `sig` to everything the command started, wherever it moved; for SIGKILL also to its
    /// group at once.
    fn signal_all(&mut self, sig: Signal);
    /// The command stopped at the terminal by `sig` (Ctrl-Z): rlock stops as its job does.
    /// Returns, once rlock is continued, whether it is in the foreground again; None when the
    /// command has no terminal (nothing is done then).
    fn stop_like_a_job(&mut self, sig: Signal) -> Option<bool>;
    /// The command's group gets the terminal back (when `foreground`) and SIGCONT.
    fn resume(&mut self, foreground: bool);
    /// The lease's moments are now `lease`'s: the guardian, which enforces them on its own
    /// clock whatever rlock does, is told.
    fn lease_renewed(&mut self, _lease: Timeline) {}
}

/// Runs the command to its end under the lease; see `Supervisor::run`.
pub(super) struct Supervisor<'a, K, W> {
    pub(super) world: W,
    enforce: Enforce,
    observer: &'a dyn Observer,
    keeper: K,
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

impl<'a, K: Keeper, W: World> Supervisor<'a, K, W> {
    /// `keeper` is told to start renewing when the first renewal is due (if it cannot, the
    /// lease runs out as if every renewal failed), and to stop once the lock is given up for
    /// lost.
    pub fn new(world: W, enforce: Enforce, observer: &'a dyn Observer, keeper: K) -> Self {
        Supervisor {
            world,
            renew_at: enforce.renew_at,
            deadlines: Deadlines::new(enforce.lease, enforce.grace)
                .with_time_limit(enforce.time_limit),
            enforce,
            observer,
            keeper,
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
    /// said the lock is no longer ours). At the command's time limit it is stopped the same way,
    /// `lost_signal` then SIGKILL `grace` later, the lock still renewed meanwhile. When the leader ends and what it started runs on, that
    /// is stopped the same way (`lost_signal`, then SIGKILL `grace` later) while the lock is
    /// still renewed: nothing of the command runs on unprotected. Returns once nothing of it
    /// runs (or, for a process SIGKILL cannot end at once, `AFTER_KILL` after the SIGKILL).
    pub fn run(mut self) -> Outcome {
        self.step_to_end()
    }

    /// `run`, keeping the supervisor (and its world) for a look afterwards.
    fn step_to_end(&mut self) -> Outcome {
        loop {
            let now = self.world.now();
            self.enforce_deadline(now);
            self.start_renewal_when_due(now);
            self.continue_when_resumed();
            if let Some(outcome) = self.finished() {
                return outcome;
            }
            let until = self.next_wake_up(now);
            if let Some(event) = self.world.next(until) {
                self.handle(event);
            }
        }
    }

    /// `sig` to everything the command started, wherever it moved (the guardian's tree, or
    /// its cgroup); SIGKILL also to its group at once, from here, not waiting for the guardian.
    /// A stopped process is continued, to act on it.
    fn send_all(&mut self, sig: Signal) {
        self.world.signal_all(sig);
    }

    /// Sends the lost-signal once, and stops renewing when the lock is gone.
    fn term(&mut self, lock_gone: bool) {
        if lock_gone {
            self.renew_at = None;
            self.keeper.stop();
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
        if due.times_out {
            self.term(false);
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
            if let Err(e) = self.keeper.start() {
                self.last_error = Some(RenewError::NoThread(e));
            }
        }
    }

    fn continue_when_resumed(&mut self) {
        if let Some(foreground) = self.resumed.take()
            && self.lost.is_none()
        {
            self.world.resume(foreground);
        }
    }

    /// The outcome, once the leader has ended and nothing it started runs (or it was killed).
    fn finished(&mut self) -> Option<Outcome> {
        let (code, signal) = self.ended?;
        // Events already told (the Empty that came with the leader's end) are read first.
        if self.world.pending() {
            return None;
        }
        if !self.empty {
            if !self.deadlines.killed() {
                // The command ended and left something running: stop it while the lock is
                // still held, as for a lost lock but `grace` from now.
                self.term(false);
                let now = self.world.now();
                self.deadlines.group_outlives_leader(now);
            }
            let now = self.world.now();
            if self.killed_at.is_none_or(|at| now < at + AFTER_KILL) {
                return None;
            }
        }
        Some(Outcome {
            code,
            signal,
            lost: self.lost.take(),
            leftovers: !self.empty,
            timed_out: self.deadlines.timed_out(),
        })
    }

    fn next_wake_up(&self, now: Instant) -> Instant {
        // Giving up on what SIGKILL did not end is for once the leader's end is known: until
        // then, the world's next event (the world gets it, or stops the command itself).
        let give_up = self
            .killed_at
            .map(|at| at + AFTER_KILL)
            .filter(|_| self.ended.is_some());
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
                self.world.signal_group(sig);
                if self.stopped && sig != Signal::SIGTSTP && sig != Signal::SIGKILL {
                    self.world.signal_group(Signal::SIGCONT);
                }
            }
            Event::Stopped(sig) => {
                self.stopped = true;
                // Only a stop at the terminal (Ctrl-Z, or a background read or write) stops the
                // job; a SIGSTOP from someone else pauses the child while rlock keeps renewing.
                let job_control = [Signal::SIGTSTP, Signal::SIGTTIN, Signal::SIGTTOU]
                    .into_iter()
                    .find(|s| *s == sig);
                if let Some(sig) = job_control
                    && self.lost.is_none()
                {
                    self.resumed = self.world.stop_like_a_job(sig);
                }
            }
            Event::Continued => self.stopped = false,
            // The guardian stopped the command at the lease's moment while rlock's moments,
            // moved by a renewal, say the lease runs on: the renewal came too late to reach the
            // guardian. The run is lost, said so, not a command that died of its own. (Once
            // rlock's own moment has come too, `enforce_deadline` says why; the time limit's
            // moments no renewal moves, so rlock's own say it; and once rlock sent the
            // lost-signal itself, to what outlived the leader, the guardian's SIGKILL keeps the
            // moment it had then: no renewal came too late.)
            Event::OwnClock { limit: false }
                if self.lost.is_none()
                    && !self.deadlines.signalled()
                    && self
                        .deadlines
                        .signal_at()
                        .is_some_and(|at| self.world.now() < at) =>
            {
                self.lost = Some(Loss::TooLate);
                let now = self.world.now();
                self.deadlines.lock_lost(now);
                self.term(true);
            }
            Event::OwnClock { .. } => {}
            Event::Watchdog(Report::Renewed { lease }) if self.lost.is_none() => {
                self.deadlines.renewed(lease);
                if let Some(lease) = self.deadlines.lease() {
                    self.world.lease_renewed(lease);
                }
                self.last_error = None;
            }
            Event::Watchdog(Report::RenewedLate { late, left }) => {
                self.observer.observe(Note::RenewedLate { late, left });
            }
            Event::Watchdog(Report::Spread { held, of }) => {
                self.observer.observe(Note::Spread { held, of });
            }
            Event::Watchdog(Report::Failed(e)) => {
                self.observer.observe(Note::RenewalFailed { error: &e });
                self.last_error = Some(e);
            }
            Event::Watchdog(Report::Lost(why)) if self.lost.is_none() => {
                self.lost = Some(why);
                let now = self.world.now();
                self.deadlines.lock_lost(now);
                self.term(true);
            }
            // Reports that come after the lock was given up for lost change nothing.
            Event::Watchdog(_) => {}
        }
    }
}

#[cfg(test)]
mod tests;
