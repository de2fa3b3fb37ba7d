//! Taking a lock anew, as `acquire` and `exec` both do: who the holder is, a fresh token, the
//! request and the wait, in one place. (A lock this process tree already holds is
//! `nested::inherited`'s.)

use std::time::Duration;

use crate::cli::{ExecArgs, LabelArg, WaitArgs};
use crate::exit::Failure;
use crate::identity::Identity;
use crate::lock::{
    AtGrant, Grant, Hooks, Interrupt, LockKey, Locker, Newest, Observer, Request, Sharing,
    WaitPolicy,
};
use crate::redact::{cap_field, mask_line, redact_command};

/// What a command asks for when it takes a lock.
pub struct Ask<'a> {
    pub key: &'a LockKey,
    /// The lease asked for (--ttl).
    pub ttl: Duration,
    pub sharing: Sharing,
    /// How long to wait for it (-w, -n).
    pub wait: &'a WaitArgs,
    /// Who holds it (`holder`).
    pub who: Identity,
    /// How long after the grant it stays taken, whatever the holder does (--hold-at-least).
    pub hold: Option<Duration>,
    /// Newest wins (`exec --newest`, `--cancel-running`).
    pub newest: Newest,
    /// `exec`'s run, on record from its grant.
    pub record: Option<&'a AtGrant>,
}

/// Takes the lock `ask` names, for a fresh token, waiting as its options say: a signal that
/// `interrupt` takes ends the wait, and `observer` hears how the wait goes.
pub fn take(
    locker: &Locker,
    ask: Ask,
    interrupt: &dyn Interrupt,
    observer: &dyn Observer,
) -> Result<Grant, Failure> {
    // A fresh owner token.
    let token = uuid::Uuid::new_v4().to_string();
    let request = Request {
        key: ask.key,
        token: &token,
        ttl: ask.ttl,
        sharing: ask.sharing,
        who: &ask.who,
        hold: ask.hold,
        newest: ask.newest,
        record: ask.record,
    };
    let policy = WaitPolicy {
        wait: ask.wait.wait,
        no_wait: ask.wait.no_wait,
    };
    let hooks = Hooks {
        interrupt,
        observer,
    };
    Ok(locker.acquire(&request, policy, hooks)?)
}

/// The holder a lock names: process `pid`, described by --label, else by `command` (its
/// program's name, or with --record-args its command line); either with its secrets masked as
/// a command line's are (a label is text a user typed, like an argument), and capped.
pub fn holder(pid: u32, label: &LabelArg, command: impl FnOnce() -> String) -> Identity {
    let label = label.label.as_deref().map(|l| cap_field(mask_line(l)));
    Identity::current(pid, label.unwrap_or_else(command))
}

/// The holder of exec's lock: this process, described by --label, else by the command it runs
/// (its secrets masked). The history records the run by it too.
pub fn exec_holder(args: &ExecArgs) -> Identity {
    holder(std::process::id(), &args.label, || {
        let words: Vec<_> = args.command.iter().map(|a| a.to_string_lossy()).collect();
        redact_command(&words)
    })
}
