//! The renewal thread and the lease deadline. No process code here: the watchdog only says
//! when the lease ends; `supervise` decides what that means for the child.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use crate::backend::{Fault, NodeError, Subscriber};
use crate::lock::{Grant, Holder, Lease, Locker, NotOwner, RenewError, Renewed, Timeline};

/// What the renewal thread tells the supervisor.
#[derive(Debug)]
pub enum Report {
    /// A renewal sent at some instant succeeded: the lease's moments are now these.
    Renewed { lease: Timeline },
    /// Redis says the lock is no longer this token's (`Loss::NotOwner` or `Loss::Replaced`).
    Lost(Loss),
    /// A renewal failed (timeout, connection): it will be retried.
    Failed(RenewError),
    /// Redlock: the lock is now on `held` of `of` masters (said when that changes).
    Spread { held: usize, of: usize },
    /// A renewal succeeded `late` after it was due (a slow or frozen server, failed tries, a
    /// stopped rlock), with `left` of the lease it extended still to run: said when `late` is
    /// more than a tenth of the renewal period (`is_late`).
    RenewedLate { late: Duration, left: Duration },
}

/// Whether a renewal `late` after it was due is worth a report: more than a tenth of the period.
fn is_late(late: Duration, lease: &Lease) -> bool {
    late > lease.renew_every / 10
}

/// Why the lock was given up for lost while the command ran. (Its words are exit/lines.rs's.)
#[derive(Debug)]
pub enum Loss {
    /// Redis says the token no longer owns the lock: it is gone, or another token's.
    NotOwner(NotOwner),
    /// The key was replaced by something that is not a lock (WRONGTYPE).
    Replaced(NodeError),
    /// No renewal succeeded in time: the lease would run out within `grace`. The last renewal's
    /// error, if one failed.
    RanOut {
        grace: Duration,
        last: Option<RenewError>,
    },
    /// Not lost: a newer run `by` asked this holder to stop (`--cancel-running`). The lock is
    /// still held, and given back once the command is stopped.
    Superseded(Box<Holder>),
    /// The guardian stopped the command at the lease's moment, on its own clock, while rlock
    /// had taken a renewal that moved it: the renewal came too late to reach the guardian.
    TooLate,
}

/// Renews `grant` every `lease.renew_every`, the first time `lease.renew_every` after the grant
/// was sent (at once if the thread starts later than that), until `stop` is dropped or the lock
/// is lost. In Redlock mode, while some master misses the lock (slow at the grant, restarted
/// empty), every `lease.push_every` instead: a renewal that a majority grants writes the lock
/// on the masters that miss it (`Locker::renew`), so that the lock rests on a bare majority for
/// as short a time as the masters allow.
pub fn renew_loop(
    locker: &Locker,
    grant: &Grant,
    lease: Lease,
    stop: Receiver<()>,
    report: impl Fn(Report),
) {
    // When the last renewal that succeeded was sent: the lease counts from there.
    let clock = locker.clock();
    let mut last_sent = grant.sent;
    let mut spread = locker.holding();
    let after = |sent: Instant| match locker.missing_some() {
        true => sent + lease.push_every(),
        false => sent + lease.renew_every,
    };
    let mut next = match locker.missing_some() {
        true => clock.now(),
        false => grant.sent + lease.renew_every,
    };
    // When the next renewal was due: a retry after a failure does not move it.
    let mut due = next;
    // The simulation's planted bug: a stop that never comes (a sender kept alive elsewhere).
    #[cfg(feature = "sim-seams")]
    let (_kept, deaf) = std::sync::mpsc::channel::<()>();
    #[cfg(feature = "sim-seams")]
    let stop = match crate::lock::seams::planted(crate::lock::seams::Bug::DeafRenewals) {
        true => deaf,
        false => stop,
    };
    loop {
        if clock.wait(&stop, next) {
            return;
        }
        let sent = clock.now();
        match locker.renew(
            &grant.key,
            &grant.token,
            Some(lease.ttl),
            lease.renew_timeout(last_sent, sent),
        ) {
            Ok(Renewed::Yes(_)) => {
                // The one place a renewal's moments are made: the supervisor and the guardian
                // both count down to them.
                report(Report::Renewed {
                    lease: lease.timeline(sent),
                });
                let now = clock.now();
                let late = now.saturating_duration_since(due);
                if is_late(late, &lease) {
                    let left = lease
                        .timeline(last_sent)
                        .ends
                        .saturating_duration_since(now);
                    report(Report::RenewedLate { late, left });
                }
                last_sent = sent;
                if locker.holding() != spread {
                    spread = locker.holding();
                    if let Some((held, of)) = spread {
                        report(Report::Spread { held, of });
                    }
                }
                // Counted from the send, as the lease is: a slow reply does not push every
                // later renewal back by a round trip.
                next = after(sent);
                due = next;
            }
            Ok(Renewed::Superseded { by, .. }) => {
                report(Report::Renewed {
                    lease: lease.timeline(sent),
                });
                report(Report::Lost(Loss::Superseded(by)));
                return;
            }
            Ok(Renewed::NotOwner(why)) => {
                report(Report::Lost(Loss::NotOwner(why)));
                return;
            }
            Err(error) if error.kind == Fault::WrongType => {
                report(Report::Lost(Loss::Replaced(error)));
                return;
            }
            Err(error) => {
                report(Report::Failed(RenewError::Node(error)));
                next = match locker.missing_some() {
                    true => clock.now() + lease.push_every().min(lease.retry_every()),
                    false => clock.now() + lease.retry_every(),
                };
            }
        }
    }
}

/// `--cancel-running`: hears on `subs` (the holder's own wake channel) that a newer run may have
/// asked this holder to stop, until `stop` is closed. The message only wakes: what decides is a
/// renewal (renew.lua), which reads from Redis what the newer run's script wrote there, so that
/// a message anyone could publish stops nothing. The first renewal comes at once: the word may
/// have come between the grant and the subscription. (The renewals of `renew_loop` read the
/// same, should a message be missed.)
pub fn hear_newer(
    locker: &Locker,
    grant: &Grant,
    lease: Lease,
    mut subs: Vec<Subscriber>,
    stop: OwnedFd,
    report: impl Fn(Report),
) {
    let mut ask = true;
    loop {
        if ask {
            let sent = Instant::now();
            let ttl = Some(lease.ttl);
            match locker.renew(&grant.key, &grant.token, ttl, lease.op_timeout) {
                Ok(Renewed::Superseded { by, .. }) => {
                    report(Report::Renewed {
                        lease: lease.timeline(sent),
                    });
                    report(Report::Lost(Loss::Superseded(by)));
                    return;
                }
                Ok(Renewed::Yes(_)) => report(Report::Renewed {
                    lease: lease.timeline(sent),
                }),
                // The renewal thread finds out and says what went wrong.
                _ => {}
            }
        }
        ask = false;
        let mut fds: Vec<PollFd<'_>> = subs
            .iter()
            .map(|s| PollFd::new(s.as_fd(), PollFlags::POLLIN))
            .collect();
        fds.push(PollFd::new(stop.as_fd(), PollFlags::POLLIN));
        match poll(&mut fds, PollTimeout::NONE) {
            // EINTR only means: look again.
            Err(nix::errno::Errno::EINTR) => continue,
            // Nothing to wait on: the renewals still read the word.
            Err(_) => return,
            Ok(_) => {}
        }
        if fds
            .last()
            .and_then(PollFd::revents)
            .is_some_and(|r| !r.is_empty())
        {
            return;
        }
        for sub in &mut subs {
            match sub.messages() {
                Ok(payloads) => ask |= payloads.iter().any(|p| p == b"x"),
                // A subscription gone: the renewals still read the word.
                Err(_) => return,
            }
        }
    }
}
