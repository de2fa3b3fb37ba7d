//! `rlock exec`'s wait for the lock: what it says while it waits, and the signals that end it.

use std::os::fd::{AsFd, BorrowedFd};

use nix::sys::signal::Signal;

use super::super::Context;
use super::super::take::{Ask, exec_holder, take};
use crate::cli::ExecArgs;
use crate::exit::Failure;
use crate::lock::{AtGrant, Grant, Interrupt, Locker, Newest, Note, Observer};
use crate::signals::{Signals, stop_self};
use crate::supervise;

/// Takes the lock, waiting as the options say; the holder is this process and its command (or
/// the --label). With `record`, the run is on record from its grant.
pub(super) fn acquire(
    ctx: &Context,
    locker: &Locker,
    key: &crate::lock::LockKey,
    args: &ExecArgs,
    signals: &Signals,
    record: Option<&AtGrant>,
) -> Result<Grant, Failure> {
    let ask = Ask {
        key,
        ttl: args.ttl,
        sharing: super::super::sharing(locker, &args.sharing)?,
        wait: &args.wait,
        who: exec_holder(args),
        hold: args.hold.hold_at_least,
        newest: newest(locker, args)?,
        record,
    };
    let observer = ExecWait {
        ctx,
        program: &args.command[0],
    };
    take(locker, ask, &WaitSignals(signals), &observer)
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
    program: &'a std::ffi::OsString,
}

impl Observer for ExecWait<'_> {
    fn observe(&self, note: Note<'_>) {
        if let Note::WaitBegins { key, .. } = note
            && let Err(why) = supervise::runnable(self.program)
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
