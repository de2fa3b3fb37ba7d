//! `rlock exec`'s wait for the lock: what it says while it waits, and the signals that end it.

use std::os::fd::{AsFd, BorrowedFd};

use nix::sys::signal::Signal;

use super::super::Context;
use super::super::take::{Ask, exec_holder, take};
use crate::cli::ExecArgs;
use crate::exit::Failure;
use crate::lock::{AtGrant, Grant, Interrupt, Locker, Newest, Note, Observer};
use crate::signals::{Signals, stop_self};
use crate::supervise::{self, Cgroup, Containment, LaunchError, Standby, Terminal};

/// The command's guardian (and its cgroup), made while Redis answers the first try for the lock
/// rather than between the grant and the command's start. A waiter keeps both while it waits, so
/// that a lock handed to it costs the command's start alone; dismissed when the wait ends without
/// a grant, and when dropped untaken.
pub(super) struct Early(std::cell::RefCell<Option<Ready>>);

/// A guardian waiting for the word to start the command (or why none could be made), and the
/// directories of rlocks no longer running whose leftovers were stopped on the way.
pub(super) struct Ready {
    pub(super) standby: Result<Standby, LaunchError>,
    pub(super) stopped: Vec<std::path::PathBuf>,
}

/// Makes the cgroup of `command` (as `contain` asks) and its guardian, there.
pub(super) fn ready(contain: Containment, command: &[std::ffi::OsString]) -> Ready {
    let required = contain == Containment::Cgroup;
    let mut stopped = Vec::new();
    let (cgroup, why_not) = match (contain != Containment::Tree).then(Cgroup::create) {
        None => (None, Some("--contain tree".to_string())),
        Some(Ok((cgroup, left))) => {
            stopped = left;
            (Some(cgroup), None)
        }
        Some(Err(why)) if required => {
            let standby = Err(LaunchError::Config(format!(
                "--contain cgroup: {why}; the command was not started (--contain auto falls back to the process tree)"
            )));
            return Ready { standby, stopped };
        }
        Some(Err(why)) => (None, Some(why)),
    };
    supervise::adopt_orphans();
    let terminal = Terminal::foreground();
    let standby = supervise::stand_by(command, terminal, cgroup, why_not, required);
    Ready { standby, stopped }
}

impl Ready {
    /// This guardian, or a new one when the terminal's foreground changed since it was made (a
    /// waiter moved to the foreground with `fg`, or to the background): the command gets the
    /// terminal as rlock has it at the grant.
    pub(super) fn current(self, contain: Containment, command: &[std::ffi::OsString]) -> Ready {
        match &self.standby {
            Ok(standby) if standby.terminal() != Terminal::foreground() => {
                if let Ok(standby) = self.standby {
                    standby.dismiss();
                }
                let again = ready(contain, command);
                Ready {
                    standby: again.standby,
                    stopped: [self.stopped, again.stopped].concat(),
                }
            }
            _ => self,
        }
    }
}

impl Early {
    pub(super) fn new() -> std::rc::Rc<Early> {
        std::rc::Rc::new(Early(std::cell::RefCell::new(None)))
    }

    /// The guardian made early, if one was (or why none could be).
    pub(super) fn take(&self) -> Option<Ready> {
        self.0.borrow_mut().take()
    }

    fn dismiss(&self) {
        if let Some(Ready {
            standby: Ok(standby),
            ..
        }) = self.take()
        {
            standby.dismiss();
        }
    }
}

impl Drop for Early {
    fn drop(&mut self) {
        self.dismiss();
    }
}

/// What goes with each try for the lock besides the request: the run's entry on record, which
/// the try that is granted writes (one Redis, Sentinel, Cluster), and the guardian made while
/// Redis answers.
pub(super) struct WithTries<'a> {
    pub(super) record: Option<&'a AtGrant>,
    pub(super) early: &'a std::rc::Rc<Early>,
}

/// Takes the lock, waiting as the options say; the holder is this process and its command (or
/// the --label). With `record`, the run is on record from its grant. The command's guardian and
/// cgroup are made into `early` while Redis answers the first try of a wait (not `-n`'s single
/// try), kept while it waits, and dismissed when the wait ends without a grant.
pub(super) fn acquire(
    ctx: &Context,
    locker: &Locker,
    key: &crate::lock::LockKey,
    args: &ExecArgs,
    signals: &Signals,
    with: &WithTries,
) -> Result<Grant, Failure> {
    let early = with.early;
    let ask = Ask {
        key,
        ttl: args.ttl,
        sharing: super::super::sharing(locker, &args.sharing)?,
        wait: &args.wait,
        who: exec_holder(args),
        hold: args.hold.hold_at_least,
        newest: newest(locker, args)?,
        record: with.record,
    };
    let observer = ExecWait {
        ctx,
        args,
        early,
        quorum: locker.is_quorum(),
    };
    let grant = take(locker, ask, &WaitSignals(signals), &observer);
    if grant.is_err() {
        early.dismiss();
    }
    grant
}

/// Who this run displaces (`--newest`, `--cancel-running`). Redlock has no one line of waiters
/// to displace from (each master keeps its own, and waiters race for votes): refused there.
pub(super) fn newest(locker: &Locker, args: &ExecArgs) -> Result<Newest, Failure> {
    let newest = match (args.newest, args.cancel_running) {
        (_, true) => Newest::Running,
        (true, false) => Newest::Waiters,
        (false, false) => return Ok(Newest::Off),
    };
    if locker.is_quorum() {
        let what = match newest {
            Newest::Running => "--cancel-running",
            _ => "--newest",
        };
        return Err(Failure::Usage(format!(
            "{what} is not available with several --url (Redlock): each master keeps its own line of waiters, so no run can displace another across them; use one Redis (or Sentinel, or Cluster)"
        )));
    }
    Ok(newest)
}

/// What exec says while it waits: what every wait says, and, when the lock is found busy, at
/// once if the command cannot run now. A typo must not cost the whole wait (the command may
/// still appear while rlock waits: built by the holder, say), and an uncontended exec does not
/// look the command up twice.
struct ExecWait<'a> {
    ctx: &'a Context,
    args: &'a ExecArgs,
    early: &'a std::rc::Rc<Early>,
    /// Redlock asks its masters from threads of their own, one of which may still wait for a
    /// master that does not answer: no guardian is forked while they live (the fork would copy
    /// memory with locks they hold), so it is made after the grant, as without a wait.
    quorum: bool,
}

impl Observer for ExecWait<'_> {
    fn observe(&self, note: Note<'_>) {
        if let Note::WaitBegins { key, .. } = note
            && let Err(why) = supervise::runnable(&self.args.command[0])
        {
            self.ctx.note(format_args!(
                "{why}; waiting for lock '{key}' anyway (it may appear meanwhile)"
            ));
        }
        self.ctx.observe(note);
    }

    fn hears_progress(&self) -> bool {
        self.ctx.hears_progress()
    }

    /// The guardian (and its cgroup) made while Redis answers, unless one is made already.
    fn while_trying(&self) -> Option<Box<dyn FnOnce()>> {
        if self.quorum || self.early.0.borrow().is_some() {
            return None;
        }
        let made = self.early.clone();
        let (contain, command) = (self.args.contain, self.args.command.clone());
        Some(Box::new(move || {
            *made.0.borrow_mut() = Some(ready(contain, &command));
        }))
    }
}

/// The signals that end exec's wait for the lock.
struct WaitSignals<'a>(&'a Signals);

impl Interrupt for WaitSignals<'_> {
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.0.as_fd())
    }

    fn take(&self) -> Option<Signal> {
        interrupt(self.0)
    }
}

/// A signal that should end the wait, if one came. Ctrl-Z stops rlock meanwhile, as usual.
pub(super) fn interrupt(signals: &Signals) -> Option<Signal> {
    loop {
        match signals.try_next()? {
            Signal::SIGTSTP => stop_self(Signal::SIGTSTP),
            Signal::SIGCHLD => {}
            s => return Some(s),
        }
    }
}
