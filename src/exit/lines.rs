//! The one line each failure that ends a use of a lock makes (busy, lost, refused, given up
//! during an outage, interrupted), and how the lock's and the watchdog's types read in it. Every
//! word of those lines is here, built from the fields where the line is printed; the layers
//! below only say what happened (`lock::{About, Seen, Waited, Refused, Interruption}`,
//! `watchdog::Loss`).

use std::fmt;
use std::time::Duration;

use nix::sys::signal::Signal;

use super::Failure;
use crate::lock::{
    About, Crowd, Holder, Interruption, NotOwner, Refused, RenewError, Seen, Waited, human_ms,
};
use crate::watchdog::Loss;

/// How the lock the command runs under was lost.
#[derive(Debug)]
pub enum LostHow {
    /// While the command ran: why, and the signal the command's group was sent.
    Running { loss: Loss, signal: Signal },
    /// Found at the release, once the command had ended.
    AtRelease,
    /// Inherited from the shell, and no longer held when renewed before the command started.
    Inherited(NotOwner),
    /// Something the command started did not end within this long of its SIGKILL (stuck in
    /// the kernel): the lock was not released, so that it cannot be granted while that runs.
    Unstoppable(std::time::Duration),
}

/// `lock 'jobs' is busy (held by build-7 pid 4411 for 2m13s (deploy #42), expires in 28s); gave up
/// after 5s`
pub(super) fn busy(about: &About, seen: &Seen, waited: Waited) -> String {
    let what = match (seen, waited) {
        (
            Seen::Held {
                pttl,
                now_ms,
                holder,
                crowd,
            },
            _,
        ) => held(about, *pttl, *now_ms, holder, *crowd),
        (Seen::Handed, Waited::NotAtAll) => {
            format!("{about} is being handed to a process waiting for it")
        }
        (Seen::Handed, Waited::For(_)) => {
            format!("{about} is being handed to processes that waited longer")
        }
    };
    match waited {
        Waited::NotAtAll => format!("{what}; not waiting (-n)"),
        Waited::For(waited) => format!("{what}; gave up after {}", ms(waited)),
    }
}

/// Who holds a busy lock and when its lease ends.
fn held(about: &About, pttl: i64, now_ms: i64, holder: &Holder, crowd: Option<Crowd>) -> String {
    let expiry = match pttl {
        p if p >= 0 => format!("expires in {}", human_ms(p)),
        -1 => "never expires".into(),
        _ => "just released".into(),
    };
    // The holder's label or command, as the waiter's -v line gives it: whose job it is.
    let mut who = holder.describe(now_ms);
    if let Some(what) = holder.command.as_deref().filter(|c| !c.is_empty()) {
        who.push_str(&format!(" ({})", crate::output::escape_max(what, 80)));
    }
    let others = |n: i64| match n {
        ..=1 => String::new(),
        2 => " and 1 other".to_string(),
        n => format!(" and {} others", n - 1),
    };
    match crowd {
        Some(Crowd {
            holders,
            limit: 0,
            exclusive_ahead: true,
        }) => format!(
            "{about} is busy (shared by {who}{}, and an exclusive request waits first: shared requests queue behind it; the last lease {expiry})",
            others(holders)
        ),
        Some(Crowd {
            holders, limit: 0, ..
        }) => format!(
            "{about} is busy (shared by {who}{}; the last lease {expiry})",
            others(holders)
        ),
        Some(Crowd { holders, limit, .. }) => format!(
            "{about} is busy (held {holders}/{limit}, by {who}{}; the first lease {expiry})",
            others(holders)
        ),
        None => format!("{about} is busy (held by {who}, {expiry})"),
    }
}

pub(super) fn lost(about: &About, how: &LostHow) -> String {
    match how {
        LostHow::Running { loss, signal } => format!(
            "lost {about} while the command ran: {loss}; sent {} to everything the command started",
            signal.as_str()
        ),
        LostHow::AtRelease => format!(
            "lost {about} while the command ran: it was no longer held by this token when the command ended (broken or expired between two renewals)"
        ),
        LostHow::Inherited(why) => format!(
            "{about} inherited from the shell is no longer held ({why}); not running the command"
        ),
        LostHow::Unstoppable(after) => format!(
            "a process the command started was still there {} after its SIGKILL (stuck in the kernel?); not releasing {about}: it expires by itself when its lease ends",
            crate::lock::human_duration(*after)
        ),
    }
}

/// `the command under lock 'nightly' ran for its --timeout of 30m and was stopped (TERM, then
/// KILL after --grace)`
pub(super) fn timed_out(about: &About, limit: Duration, signal: Signal) -> String {
    format!(
        "the command under {about} ran for its --timeout of {} and was stopped ({}, then KILL after --grace)",
        crate::lock::human_duration(limit),
        signal.as_str().trim_start_matches("SIG")
    )
}

pub(super) fn refused(about: &About, refused: Refused) -> String {
    match refused {
        Refused::ReleaseHeldByOther => format!(
            "{about} is held by another owner, not by this token; nothing was changed (use --force to break it)"
        ),
        Refused::ReleaseNotHeld => format!(
            "{about} is not held by this token: it expired or was broken before the release; nothing was changed"
        ),
        Refused::Renew(why) => {
            format!("{about} is not held by this token ({why}); it was not extended")
        }
    }
}

/// The final release refused by the ACL: what Redis said, and until when the lock may stay.
pub(super) fn release_refused(error: &Failure, ttl: Duration) -> String {
    let until = std::time::SystemTime::now() + ttl;
    format!(
        "{error}; the command has ended, but the lock may still be held until its lease ends, at most {} after its last renewal (by {}); a user the ACL lets release it can free it sooner",
        crate::lock::human_duration(ttl),
        humantime::format_rfc3339_seconds(until)
    )
}

/// A wait that ended while Redis was out: the last try's failure, and for how long.
pub(super) fn outage(last: &Failure, waited: Duration, down_for: Duration) -> String {
    // The outage is counted from the start of the try that first failed: from the wait's
    // start when Redis never answered.
    if down_for >= waited {
        return format!(
            "{last}; gave up after {}, Redis unavailable throughout",
            ms(waited)
        );
    }
    format!(
        "{last}; gave up after {}, Redis unavailable for the last {}",
        ms(waited),
        ms(down_for)
    )
}

/// A run that never reached Redis and stopped trying to: the last try's failure, and for how long
/// it tried.
pub(super) fn never_reached(last: &Failure, tried_for: Duration) -> String {
    format!(
        "{last}; gave up after {} without reaching it once (--connect-timeout)",
        ms(tried_for)
    )
}

pub(super) fn interrupted(about: &About, signal: Signal, when: Interruption) -> String {
    let signal = signal.as_str();
    match when {
        Interruption::Waiting => format!("interrupted by {signal} while waiting for {about}"),
        Interruption::BeforeStart => {
            format!("interrupted by {signal} before the command started; {about} released")
        }
    }
}

/// `lock 'deploy' was superseded by a newer run, alice@ci-2 pid 4411 (deploy #43): this run
/// left the line`, or, for a run whose command was stopped, `…: its command was stopped (SIGTERM)
/// and the lock handed on`.
pub(super) fn superseded(about: &About, by: &Holder, running: Option<Signal>) -> String {
    let mut who = Holder {
        since_ms: None,
        ..by.clone()
    }
    .describe(0);
    if let Some(what) = &by.command {
        who.push_str(&format!(" ({what})"));
    }
    match running {
        None => format!("{about} was superseded by a newer run, {who}: this run left the line"),
        Some(signal) => format!(
            "{about} was superseded by a newer run, {who}: its command was stopped ({signal}) and the lock handed on"
        ),
    }
}

/// What a request was about, as the lines name it.
impl fmt::Display for About {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            About::Lock(name) => write!(f, "lock '{name}'"),
            About::Locks(prefix) => write!(f, "the locks under '{prefix}'"),
        }
    }
}

/// Why the watchdog gave the lock up, in the line of a lost lock.
impl fmt::Display for Loss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Loss::NotOwner(why) => write!(f, "Redis says the token no longer owns it ({why})"),
            Loss::Replaced(error) => write!(f, "the key was replaced: {}", error.detail),
            Loss::Superseded(by) => write!(f, "a newer run asked it, {}", by.describe(0)),
            Loss::TooLate => f.write_str(
                "the guardian stopped the command at the lease's moment, as the renewal came too late to reach it",
            ),
            Loss::RanOut { grace, last } => {
                let grace = crate::lock::human_duration(*grace);
                // Not "runs out within": when rlock was stopped or the machine slept, the lease
                // may have run out already; this is true either way.
                write!(
                    f,
                    "could not renew it before the last {grace} of its lease (--grace) ("
                )?;
                match last {
                    Some(error) => write!(f, "{error})"),
                    None => f.write_str("no renewal succeeded)"),
                }
            }
        }
    }
}

/// A renewal that failed: the node and what it said, not the whole line of a failure.
impl fmt::Display for RenewError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RenewError::Node(error) => write!(f, "{error}"),
            RenewError::NoThread(e) => write!(f, "cannot start the renewal thread: {e}"),
        }
    }
}

fn ms(d: Duration) -> String {
    human_ms(d.as_millis() as i64)
}

#[cfg(test)]
mod tests;
